//! What a finished sandbox program means: its exit status and status lines
//! turned into a result, decided here (natively testable) rather than in
//! the wasm-only crates.

use crate::script::{exit, Status};
use crate::{CommandFailure, Error, ErrorKind};

/// Keeps only the tail of the sandbox's stderr in messages.
const STDERR_TAIL: usize = 2048;

/// How a sandbox process ended, as the host reported it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Exit<'a> {
    /// Exit code; `None` when killed by a signal or timed out.
    pub exit_code: Option<i32>,
    /// The host stopped it at its deadline.
    pub timed_out: bool,
    /// Its stderr went past the cap (it was failed closed).
    pub stderr_truncated: bool,
    /// Its captured stderr.
    pub stderr: &'a [u8],
}

impl Exit<'_> {
    /// Exited 0, on time, within the stderr cap.
    pub fn succeeded(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out && !self.stderr_truncated
    }

    /// Died by a signal, directly or as a wrapper reports it
    /// ([`exit::KILLED`]): its cleanup trap never ran. The programs' own
    /// traps exit 129, 130, 141, 143 or 54, after cleaning up.
    pub fn was_killed(&self) -> bool {
        matches!(self.exit_code, None | Some(exit::KILLED))
    }

    /// Why a call that reported no error of its own did not succeed, in
    /// a few words (for a toolbox call, whose exit is not a program's).
    pub fn describe(&self, timeout_ms: u64) -> String {
        let said = String::from_utf8_lossy(self.stderr);
        let said = said.trim();
        match self.exit_code {
            _ if self.timed_out => format!("it did not finish within {timeout_ms} ms"),
            _ if !said.is_empty() => said.to_owned(),
            Some(c) => format!("the toolbox reported status {c}"),
            None => "the toolbox reported no status".to_owned(),
        }
    }
}

/// What wrote a sync-out's framed stream, as [`conclude_outbound`] words
/// its failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Producer {
    /// The program itself, over a streaming exec: its exit is the
    /// program's.
    Program,
    /// A toolbox download of the file the program wrote (the program's
    /// own exit was judged before): its exit is the download's.
    Download,
}

/// The operations a failed sync-out can be blamed on.
#[derive(Debug, Clone, Copy)]
pub struct Blame<'a> {
    /// The operation whose part of the stream was being read.
    pub current: &'a str,
    /// The last operation (a failure after the whole stream was read).
    pub last: &'a str,
}

/// One operation of a sync-in, as [`conclude_inbound`] needs it.
#[derive(Debug, Clone)]
pub struct Operation<'a> {
    /// Its id.
    pub id: &'a str,
    /// Each post-upload command's `timeoutMs`, in order.
    pub command_timeouts: Vec<Option<u64>>,
}

/// The last [`STDERR_TAIL`] bytes of stderr, as text.
pub fn stderr_tail(stderr: &[u8]) -> String {
    let s = String::from_utf8_lossy(stderr);
    let s = s.trim();
    if s.len() <= STDERR_TAIL {
        return s.to_owned();
    }
    let mut start = s.len() - STDERR_TAIL;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &s[start..])
}

/// The typed error a failed program stands for; `op` names the operation
/// that was in progress.
pub fn from_status(status: &Exit<'_>, op: &str, timeout_ms: u64) -> Error {
    let stderr = stderr_tail(status.stderr);
    let suffix = if stderr.is_empty() {
        String::new()
    } else {
        format!(": {stderr}")
    };
    if status.timed_out || status.exit_code == Some(exit::DEADLINE) {
        return Error::limit(format!(
            "operation {op}: the sandbox exec ran past its {timeout_ms} ms timeout{suffix}"
        ));
    }
    if status.stderr_truncated {
        return Error::limit(format!(
            "operation {op}: the sandbox wrote more stderr than the cap allows"
        ));
    }
    let Some(code) = status.exit_code else {
        return Error::new(
            ErrorKind::Transport,
            format!("operation {op}: the sandbox process was killed{suffix}"),
        );
    };
    let (kind, what) =
        exit::classify(code).unwrap_or((ErrorKind::CommandFailed, "the sync script failed"));
    match kind {
        ErrorKind::Confinement => Error::new(
            kind,
            format!("operation {op}: {what} (exit {code}){suffix}"),
        ),
        ErrorKind::InvalidRequest => {
            let detail = if stderr.is_empty() {
                what.to_owned()
            } else {
                stderr
            };
            Error::new(kind, format!("operation {op}: {detail}"))
        }
        ErrorKind::SourceChanged => Error::new(kind, format!("operation {op}: {what}{suffix}")),
        // The program's own stderr names what the sandbox lacks.
        ErrorKind::Transport => Error::new(
            kind,
            format!("operation {op}: {what} (exit {code}){suffix}"),
        ),
        _ => Error::command(
            format!("operation {op}: {what} (exit {code})"),
            CommandFailure {
                operation_id: op.to_owned(),
                exit_code: Some(code),
                timed_out: false,
                stderr,
            },
        ),
    }
}

/// Decides a sync-in from what its program reported: the status lines it
/// printed (operations complete strictly in order, so their count names the
/// failing one), its exit, and whether feeding its stdin failed (`stdin`).
///
/// # Errors
/// The typed failure: a failed post-upload command with its operation,
/// command and exit code; otherwise what the exit stands for.
pub fn conclude_inbound(
    ops: &[Operation<'_>],
    statuses: &[Status],
    status: &Exit<'_>,
    stdin: Option<&str>,
    timeout_ms: u64,
) -> Result<(), Error> {
    let done = statuses
        .iter()
        .filter(|s| matches!(s, Status::OpDone(_)))
        .count();
    if status.succeeded() {
        if done != ops.len() {
            return Err(Error::new(
                ErrorKind::Transport,
                format!(
                    "the sandbox exited 0 but reported {done} of {} operations complete",
                    ops.len()
                ),
            ));
        }
        if let Some(e) = stdin {
            return Err(Error::new(
                ErrorKind::Transport,
                format!("the sandbox stopped reading its input: {e}"),
            ));
        }
        return Ok(());
    }
    let code = status.exit_code;
    if code == Some(exit::COMMAND) || code == Some(exit::COMMAND_TIMEOUT) {
        let failed = statuses.iter().find_map(|s| match s {
            Status::CommandFailed {
                op,
                cmd,
                code,
                timed_out,
            } => Some((*op, *cmd, *code, *timed_out)),
            Status::OpDone(_) => None,
        });
        if let Some((op, cmd, code, timed_out)) = failed {
            let op_id = ops.get(op).map(|o| o.id).unwrap_or_default();
            let what = if timed_out {
                let ms = ops
                    .get(op)
                    .and_then(|o| o.command_timeouts.get(cmd).copied().flatten());
                format!("post-upload command timed out after {} ms", ms.unwrap_or(0))
            } else {
                format!("post-upload command failed (exit {code})")
            };
            return Err(Error::command(
                format!("operation {op_id}: {what} (command {cmd})"),
                CommandFailure {
                    operation_id: op_id.to_owned(),
                    exit_code: if timed_out { None } else { Some(code) },
                    timed_out,
                    stderr: stderr_tail(status.stderr),
                },
            ));
        }
    }
    let failing = ops.get(done).map(|o| o.id).unwrap_or("(none)");
    Err(from_status(status, failing, timeout_ms))
}

/// How the reader of a sync-out's stream stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    /// It read the whole stream, or refused what the stream carried (an
    /// unsafe archive, a limit): its verdict stands.
    Judged,
    /// The stream failed under it (a read or a splice that broke, not a
    /// verdict on the bytes).
    Failed,
    /// The stream ended in the middle of the archive.
    Cut,
}

/// Decides a sync-out once its stream was read (`received`: what the
/// reader made of it, `read`: how it stopped) and its producer ended
/// (`ended`: its exit, or why the transport could not say). A stream cut
/// short is explained by why it was cut, when the producer says: a program
/// that failed first, or a channel that broke; a stream that failed under
/// the reader is explained by a channel that broke. The reader's verdict
/// on what it read (an unsafe archive, a limit) stands whatever the end.
///
/// # Errors
/// The reader's error, or what the producer's end stands for.
pub fn conclude_outbound<T, E: From<Error>>(
    received: Result<T, E>,
    read: Read,
    ended: Result<Exit<'_>, &str>,
    producer: Producer,
    blame: Blame<'_>,
    timeout_ms: u64,
) -> Result<T, E> {
    let broke = |op: &str, why: &str| {
        let text = match producer {
            Producer::Program => {
                format!("operation {op}: the exec channel broke mid-stream: {why}")
            }
            Producer::Download => format!("the download of the sync's output broke: {why}"),
        };
        Error::new(ErrorKind::Transport, text)
    };
    let failed = |op: &str, exit: &Exit<'_>| match producer {
        Producer::Program => from_status(exit, op, timeout_ms),
        Producer::Download => Error::new(
            ErrorKind::Transport,
            format!(
                "the download of the sync's output failed: {}",
                exit.describe(timeout_ms)
            ),
        ),
    };
    match (received, ended) {
        (Ok(done), Ok(exit)) if exit.succeeded() => Ok(done),
        (Ok(_), Ok(exit)) => Err(failed(blame.last, &exit).into()),
        (Ok(_), Err(why)) => Err(broke(blame.last, why).into()),
        (Err(_), Err(why)) if read != Read::Judged => Err(broke(blame.current, why).into()),
        (Err(_), Ok(exit))
            if read == Read::Cut && (exit.exit_code != Some(0) || exit.timed_out) =>
        {
            Err(failed(blame.current, &exit).into())
        }
        (Err(e), _) => Err(e),
    }
}

/// Decides one post-upload command run on its own (the base64 fallback runs
/// each in its own exec). `own_timeout` is the command's `timeoutMs`, when
/// it has one; `timeout_ms` what the exec actually had.
///
/// # Errors
/// A command failure naming `op`, or what the exit stands for.
pub fn conclude_command(
    status: &Exit<'_>,
    op: &str,
    own_timeout: Option<u64>,
    timeout_ms: u64,
) -> Result<(), Error> {
    if status.succeeded() {
        return Ok(());
    }
    let code = status.exit_code;
    // The program's own deadline (exit 54) is a timeout too.
    let timed_out = status.timed_out || code == Some(exit::DEADLINE);
    if timed_out && own_timeout.is_none() || code == Some(exit::ESCAPE) || status.stderr_truncated {
        return Err(from_status(status, op, timeout_ms));
    }
    let what = if timed_out {
        format!("post-upload command timed out after {timeout_ms} ms")
    } else {
        format!("post-upload command failed (exit {})", code.unwrap_or(-1))
    };
    Err(Error::command(
        format!("operation {op}: {what}"),
        CommandFailure {
            operation_id: op.to_owned(),
            exit_code: if timed_out { None } else { code },
            timed_out,
            stderr: stderr_tail(status.stderr),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exited(code: i32) -> Exit<'static> {
        Exit {
            exit_code: Some(code),
            ..Exit::default()
        }
    }

    fn ops() -> Vec<Operation<'static>> {
        vec![
            Operation {
                id: "a",
                command_timeouts: vec![],
            },
            Operation {
                id: "b",
                command_timeouts: vec![None, Some(1500)],
            },
        ]
    }

    #[test]
    fn success_needs_every_operation_reported() {
        let all = [Status::OpDone(0), Status::OpDone(1)];
        assert_eq!(conclude_inbound(&ops(), &all, &exited(0), None, 1), Ok(()));
        let err = conclude_inbound(&ops(), &all[..1], &exited(0), None, 1).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Transport);
        let err = conclude_inbound(&ops(), &all, &exited(0), Some("closed"), 1).unwrap_err();
        assert!(err.message.contains("stopped reading"), "{err}");
    }

    #[test]
    fn a_command_failure_names_its_operation_and_command() {
        let statuses = [
            Status::OpDone(0),
            Status::CommandFailed {
                op: 1,
                cmd: 1,
                code: 143,
                timed_out: true,
            },
        ];
        let err = conclude_inbound(&ops(), &statuses, &exited(exit::COMMAND_TIMEOUT), None, 1)
            .unwrap_err();
        assert_eq!(err.kind, ErrorKind::CommandFailed);
        assert_eq!(
            err.message,
            "operation b: post-upload command timed out after 1500 ms (command 1)"
        );
        let c = err.command.unwrap();
        assert_eq!(
            (c.operation_id.as_str(), c.exit_code, c.timed_out),
            ("b", None, true)
        );
    }

    #[test]
    fn other_failures_name_the_first_unfinished_operation() {
        let err = conclude_inbound(&ops(), &[Status::OpDone(0)], &exited(exit::ESCAPE), None, 1)
            .unwrap_err();
        assert_eq!(err.kind, ErrorKind::Confinement);
        assert!(err.message.starts_with("operation b: ESCAPE"), "{err}");
        let killed = Exit {
            exit_code: None,
            ..Exit::default()
        };
        let err = conclude_inbound(&ops(), &[], &killed, None, 1).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Transport);
        let late = Exit {
            timed_out: true,
            ..Exit::default()
        };
        let err = conclude_inbound(&ops(), &[], &late, None, 900).unwrap_err();
        assert_eq!(err.kind, ErrorKind::LimitExceeded);
        assert!(err.message.contains("900 ms"), "{err}");
    }

    #[test]
    fn exit_codes_map_to_kinds() {
        for (code, kind) in [
            (exit::ESCAPE, ErrorKind::Confinement),
            (exit::NOTREG, ErrorKind::InvalidRequest),
            (exit::MISSING, ErrorKind::InvalidRequest),
            (exit::INCOMPLETE, ErrorKind::SourceChanged),
            (exit::BOOTSTRAP, ErrorKind::Transport),
            (exit::DEADLINE, ErrorKind::LimitExceeded),
            (exit::EXTRACT, ErrorKind::CommandFailed),
            (exit::NOT_FOUND, ErrorKind::CommandFailed),
        ] {
            assert_eq!(from_status(&exited(code), "o", 1).kind, kind, "{code}");
        }
        let over = Exit {
            exit_code: Some(0),
            stderr_truncated: true,
            ..Exit::default()
        };
        assert_eq!(from_status(&over, "o", 1).kind, ErrorKind::LimitExceeded);
    }

    #[test]
    fn one_command_on_its_own() {
        assert_eq!(conclude_command(&exited(0), "o", None, 5), Ok(()));
        let err = conclude_command(&exited(3), "o", None, 5).unwrap_err();
        assert_eq!(err.command.unwrap().exit_code, Some(3));
        let late = Exit {
            timed_out: true,
            ..Exit::default()
        };
        let err = conclude_command(&late, "o", Some(5), 5).unwrap_err();
        assert!(err.command.unwrap().timed_out);
        assert_eq!(
            conclude_command(&late, "o", None, 5).unwrap_err().kind,
            ErrorKind::LimitExceeded
        );
    }

    const BLAME: Blame<'static> = Blame {
        current: "a",
        last: "b",
    };

    fn truncated() -> Error {
        Error::new(ErrorKind::UnsafeArchive, "archive is truncated")
    }

    #[test]
    fn a_clean_end_keeps_what_was_received() {
        for producer in [Producer::Program, Producer::Download] {
            let done = conclude_outbound::<_, Error>(
                Ok(7),
                Read::Judged,
                Ok(exited(0)),
                producer,
                BLAME,
                1,
            );
            assert_eq!(done, Ok(7));
        }
        // Received whole, but the program failed after: the last operation.
        let err = conclude_outbound::<_, Error>(
            Ok(()),
            Read::Judged,
            Ok(exited(exit::ESCAPE)),
            Producer::Program,
            BLAME,
            1,
        )
        .unwrap_err();
        assert_eq!(err.kind, ErrorKind::Confinement);
        assert!(err.message.starts_with("operation b:"), "{err}");
        let err = conclude_outbound::<_, Error>(
            Ok(()),
            Read::Judged,
            Ok(exited(3)),
            Producer::Download,
            BLAME,
            1,
        )
        .unwrap_err();
        assert_eq!(err.kind, ErrorKind::Transport);
        assert!(err.message.contains("status 3"), "{err}");
    }

    #[test]
    fn a_cut_stream_is_explained_by_the_failed_exit() {
        let err = conclude_outbound::<(), Error>(
            Err(truncated()),
            Read::Cut,
            Ok(exited(exit::MISSING)),
            Producer::Program,
            BLAME,
            1,
        )
        .unwrap_err();
        assert_eq!(err.kind, ErrorKind::InvalidRequest);
        assert!(err.message.starts_with("operation a:"), "{err}");
        let late = Exit {
            timed_out: true,
            ..Exit::default()
        };
        let err = conclude_outbound::<(), Error>(
            Err(truncated()),
            Read::Cut,
            Ok(late),
            Producer::Program,
            BLAME,
            900,
        )
        .unwrap_err();
        assert_eq!(err.kind, ErrorKind::LimitExceeded);
        // A cut stream from a producer that exited 0 is the truncation.
        let err = conclude_outbound::<(), Error>(
            Err(truncated()),
            Read::Cut,
            Ok(exited(0)),
            Producer::Download,
            BLAME,
            1,
        )
        .unwrap_err();
        assert_eq!(err, truncated());
    }

    #[test]
    fn a_cut_stream_is_explained_by_a_broken_transport() {
        for (producer, says) in [
            (
                Producer::Program,
                "operation a: the exec channel broke mid-stream: reset",
            ),
            (
                Producer::Download,
                "the download of the sync's output broke: reset",
            ),
        ] {
            let err = conclude_outbound::<(), Error>(
                Err(truncated()),
                Read::Cut,
                Err("reset"),
                producer,
                BLAME,
                1,
            )
            .unwrap_err();
            assert_eq!(
                (err.kind, err.message.as_str()),
                (ErrorKind::Transport, says)
            );
        }
        // Received whole, but the end was never reported.
        let err = conclude_outbound::<_, Error>(
            Ok(()),
            Read::Judged,
            Err("reset"),
            Producer::Program,
            BLAME,
            1,
        )
        .unwrap_err();
        assert!(err.message.starts_with("operation b:"), "{err}");
    }

    #[test]
    fn what_the_reader_refused_stands_whatever_the_end() {
        let refused = Error::new(ErrorKind::UnsafeArchive, "a link escapes");
        for ended in [Ok(exited(0)), Ok(exited(1)), Err("reset")] {
            for producer in [Producer::Program, Producer::Download] {
                let err = conclude_outbound::<(), Error>(
                    Err(refused.clone()),
                    Read::Judged,
                    ended,
                    producer,
                    BLAME,
                    1,
                )
                .unwrap_err();
                assert_eq!(err, refused);
            }
        }
    }

    #[test]
    fn a_stream_that_failed_under_the_reader_is_explained_by_a_broken_transport() {
        let failed = Error::new(
            ErrorKind::Io,
            "failed to write big: reading the stream: reset",
        );
        let err = conclude_outbound::<(), Error>(
            Err(failed.clone()),
            Read::Failed,
            Err("reset"),
            Producer::Download,
            BLAME,
            1,
        )
        .unwrap_err();
        assert_eq!(err.kind, ErrorKind::Transport);
        assert!(err.message.contains("broke: reset"), "{err}");
        // With the channel whole, a failed write (a full disk) stands,
        // whatever the program's exit after the host stopped reading.
        for exit in [exited(0), exited(141)] {
            let err = conclude_outbound::<(), Error>(
                Err(failed.clone()),
                Read::Failed,
                Ok(exit),
                Producer::Program,
                BLAME,
                1,
            )
            .unwrap_err();
            assert_eq!(err, failed);
        }
    }

    #[test]
    fn killed_is_a_signal_or_137() {
        assert!(Exit::default().was_killed());
        assert!(exited(exit::KILLED).was_killed());
        assert!(!exited(143).was_killed() && !exited(0).was_killed());
    }

    #[test]
    fn stderr_tail_keeps_the_end_on_a_char_boundary() {
        let long = format!("{}é{}", "x".repeat(3000), "y".repeat(2047));
        let t = stderr_tail(long.as_bytes());
        assert!(t.starts_with('…') && t.ends_with('y'));
        assert!(t.len() <= STDERR_TAIL + 4);
    }
}
