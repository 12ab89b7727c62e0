//! The commands that run the programs on a toolbox sandbox (Daytona): no
//! process there takes stdin while it runs, and a command's stdout and
//! stderr come back combined, once it has ended.
//!
//! So each program runs inside a wrapper that keeps its stderr apart and
//! prints its tail after a separator the host chose at random, once the
//! program has ended ([`split_output`] takes the two apart). A sync-in's program, answer and
//! archive arrive as one uploaded file that the wrapper opens as the
//! bootstrap's stdin and unlinks before anything runs; a sync-out's
//! program writes its framed stream into a scratch file for the host to
//! download. Every command is `sh -c '<wrapper>'`: older daemons split
//! the command text themselves instead of handing it to a shell.

use std::fmt::Write as _;

use super::{Codec, ARGV0, BOOTSTRAP};
use crate::quote::sh_quote;
use crate::Error;

/// Longest program passed inline, as one argument (Linux refuses a single
/// argument of 128 KiB or more); a longer one is uploaded first.
pub const INLINE_MAX: usize = 96 << 10;

/// Where a program's text comes from.
#[derive(Debug, Clone, Copy)]
pub enum Program<'a> {
    /// Passed as the argument of `sh -c`.
    Inline(&'a str),
    /// The first `len` bytes of the uploaded file `path`, read by the
    /// bootstrap; the rest of the file is the program's stdin.
    Uploaded {
        /// The uploaded file (unlinked once opened).
        path: &'a str,
        /// The program's length.
        len: usize,
    },
}

/// The wrapper every command runs in (see `wrapper.sh`): Rust only
/// passes it quoted arguments.
const WRAPPER: &str = include_str!("wrapper.sh");

/// The sync-in command: checks for `codec`'s decompressor (without it the
/// wrapper exits [`NO_CODEC`](super::exit::NO_CODEC), removing the upload), then runs the
/// uploaded program with the rest of the file as its stdin.
///
/// # Errors
/// When a path cannot be quoted (NUL).
pub fn inbound(
    upload: &str,
    script_len: usize,
    codec: Option<Codec>,
    sep: &str,
    max_stderr: u64,
) -> Result<String, Error> {
    let args = [
        upload.to_owned(),
        script_len.to_string(),
        codec.map_or("", Codec::name).to_owned(),
    ];
    wrap("in", Some(parent(upload)), sep, max_stderr, &args)
}

/// The sync-out command: runs `program` with its stdout in the new file
/// `out` (0600, refused if the name exists); on failure `out` is removed.
///
/// # Errors
/// When a path cannot be quoted (NUL).
pub fn outbound(
    program: Program<'_>,
    out: &str,
    sep: &str,
    max_stderr: u64,
) -> Result<String, Error> {
    let mut args = vec![out.to_owned()];
    args.extend(program_args(program));
    wrap("out", Some(parent(out)), sep, max_stderr, &args)
}

/// A command that runs `program` (a cleanup, say) as it is.
///
/// # Errors
/// When the program cannot be quoted (NUL).
pub fn plain(program: Program<'_>, sep: &str, max_stderr: u64) -> Result<String, Error> {
    wrap("plain", None, sep, max_stderr, &program_args(program))
}

/// How `wrapper.sh` takes a program: `inline TEXT` or `uploaded PATH LEN`.
fn program_args(program: Program<'_>) -> Vec<String> {
    match program {
        Program::Inline(text) => vec!["inline".to_owned(), text.to_owned()],
        Program::Uploaded { path, len } => {
            vec!["uploaded".to_owned(), path.to_owned(), len.to_string()]
        }
    }
}

/// `sh -c '<wrapper>' <argv0>`: the shared values and the bootstrap as
/// assignments, then `wrapper.sh`.
pub(super) fn wrapper_prefix() -> Result<String, Error> {
    let mut script = super::constants();
    let _ = writeln!(script, "_ss_argv0={ARGV0}");
    let _ = writeln!(script, "_ss_boot={}", sh_quote(BOOTSTRAP)?);
    script.push_str(WRAPPER);
    Ok(format!("sh -c {} {ARGV0}", sh_quote(&script)?))
}

/// `sh -c '<wrapper>'` with the body `mode` and its `args`, every value
/// quoted: the shared values and the bootstrap as assignments, the rest as
/// positional arguments. `spare` is where the stderr file may go when no
/// temp dir can take it.
fn wrap(
    mode: &str,
    spare: Option<&str>,
    sep: &str,
    max_stderr: u64,
    args: &[String],
) -> Result<String, Error> {
    let mut cmd = wrapper_prefix()?;
    let keep = max_stderr.saturating_add(1).to_string();
    let spare = spare.map(|d| d.trim_end_matches('/')).unwrap_or_default();
    for a in [mode, sep, &keep, spare]
        .into_iter()
        .chain(args.iter().map(String::as_str))
    {
        let _ = write!(cmd, " {}", sh_quote(a)?);
    }
    Ok(cmd)
}

/// The directory a sandbox path is in.
fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

/// What a wrapped command printed, taken apart.
#[derive(Debug, PartialEq, Eq)]
pub struct Output<'a> {
    /// The program's stdout.
    pub stdout: &'a [u8],
    /// The tail of its stderr: one byte more than the cap when it went
    /// past it.
    pub stderr: &'a [u8],
}

/// Splits what a wrapped command printed at the last `sep` line: all of
/// it is stdout when there is none, as the wrapper never got that far.
pub fn split_output<'a>(output: &'a [u8], sep: &str) -> Output<'a> {
    let mark = format!("\n{sep}\n");
    let found = output
        .windows(mark.len())
        .rposition(|w| w == mark.as_bytes());
    match found {
        Some(at) => Output {
            stdout: &output[..at],
            stderr: &output[at + mark.len()..],
        },
        None => Output {
            stdout: output,
            stderr: &[],
        },
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::super::exit;
    use super::*;

    /// Runs `command` with the host's `sh`, as the toolbox would.
    fn sh(command: &str) -> (Option<i32>, Vec<u8>) {
        sh_with(&["/bin/sh"], command)
    }

    /// The shells at hand: the host's, and BusyBox's where it is installed.
    fn shells() -> Vec<&'static [&'static str]> {
        let mut all: Vec<&'static [&'static str]> = vec![&["/bin/sh"]];
        if std::path::Path::new("/bin/busybox").exists() {
            all.push(&["/bin/busybox", "sh"]);
        }
        all
    }

    fn sh_with(shell: &[&str], command: &str) -> (Option<i32>, Vec<u8>) {
        sh_env(shell, command, None)
    }

    fn sh_env(shell: &[&str], command: &str, tmpdir: Option<&str>) -> (Option<i32>, Vec<u8>) {
        let mut c = std::process::Command::new(shell[0]);
        if let Some(t) = tmpdir {
            c.env("TMPDIR", t);
        }
        let out = c
            .args(&shell[1..])
            .arg("-c")
            .arg(command)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let mut all = out.stdout;
        all.extend_from_slice(&out.stderr);
        (out.status.code(), all)
    }

    #[test]
    fn stderr_comes_back_apart_from_stdout() {
        let cmd = plain(
            Program::Inline("echo out; echo err >&2; echo more; exit 3"),
            "SEP-1",
            1024,
        )
        .unwrap();
        for shell in shells() {
            let (code, all) = sh_with(shell, &cmd);
            assert_eq!(code, Some(3), "{shell:?}");
            let out = split_output(&all, "SEP-1");
            assert_eq!(out.stdout, b"out\nmore\n", "{shell:?}");
            assert_eq!(out.stderr, b"err\n", "{shell:?}");
        }
    }

    /// Where no temp file can be made, stderr is piped: the same output.
    #[test]
    fn without_a_temp_file_stderr_is_piped() {
        let cmd = plain(
            Program::Inline("echo out; printf 'err\\nmore' >&2; exit 4"),
            "S",
            100,
        )
        .unwrap();
        for shell in shells() {
            let (code, all) = sh_env(shell, &cmd, Some("/nonexistent/tmp"));
            assert_eq!(code, Some(4), "{shell:?}");
            let out = split_output(&all, "S");
            assert_eq!(out.stdout, b"out\n", "{shell:?}");
            assert_eq!(out.stderr, b"err\nmore", "{shell:?}");
        }
    }

    /// A child the program leaves behind holding stderr does not hold the
    /// command open (where a temp file can be made).
    #[test]
    fn a_leftover_child_does_not_hold_the_command() {
        let cmd = plain(Program::Inline("sleep 5 >&2 & echo done"), "S", 100).unwrap();
        let t = std::time::Instant::now();
        let (code, all) = sh(&cmd);
        assert_eq!(code, Some(0));
        assert_eq!(split_output(&all, "S").stdout, b"done\n");
        assert!(
            t.elapsed() < std::time::Duration::from_secs(4),
            "{:?}",
            t.elapsed()
        );
    }

    #[test]
    fn stderr_keeps_its_tail() {
        let cmd = plain(Program::Inline("printf 0123456789 >&2"), "S", 4).unwrap();
        for shell in shells() {
            let (_, all) = sh_with(shell, &cmd);
            let out = split_output(&all, "S");
            assert_eq!(out.stderr, b"56789", "{shell:?}: one byte past the cap");
        }
    }

    #[test]
    fn an_uploaded_program_reads_the_rest_of_its_file_and_the_file_goes() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("up");
        let program = "read -r x; echo \"got $x\"";
        std::fs::write(&f, format!("{program}hello\n")).unwrap();
        let cmd = inbound(f.to_str().unwrap(), program.len(), None, "S", 100).unwrap();
        let (code, all) = sh(&cmd);
        assert_eq!(code, Some(0), "{}", String::from_utf8_lossy(&all));
        assert_eq!(split_output(&all, "S").stdout, b"got hello\n");
        assert!(!f.exists());
    }

    #[test]
    fn a_missing_decompressor_is_its_own_exit_and_removes_the_upload() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("up");
        std::fs::write(&f, "x").unwrap();
        let body = inbound(f.to_str().unwrap(), 1, None, "S", 100).unwrap();
        // A codec no sandbox has, by swapping the name in.
        let cmd = inbound(f.to_str().unwrap(), 1, Some(Codec::Zstd), "S", 100).unwrap();
        let cmd = format!(
            "{} 'no-such-codec-here'",
            cmd.strip_suffix(" 'zstd'").unwrap()
        );
        assert_ne!(cmd, body);
        assert_eq!(sh(&cmd).0, Some(exit::NO_CODEC));
        assert!(!f.exists());
    }

    #[test]
    fn outbound_output_lands_in_a_new_private_file_and_goes_on_failure() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let cmd = outbound(
            Program::Inline("echo framed"),
            out.to_str().unwrap(),
            "S",
            100,
        )
        .unwrap();
        assert_eq!(sh(&cmd).0, Some(0));
        assert_eq!(std::fs::read(&out).unwrap(), b"framed\n");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&out).unwrap().permissions().mode() & 0o777,
            0o600
        );
        // The name exists now: refused, and the file left alone.
        let (code, _) = sh(&cmd);
        assert_eq!(code, Some(exit::EXTRACT));
        let gone = dir.path().join("gone");
        let cmd = outbound(
            Program::Inline("echo partial; exit 45"),
            gone.to_str().unwrap(),
            "S",
            100,
        )
        .unwrap();
        assert_eq!(sh(&cmd).0, Some(45));
        assert!(!gone.exists());
    }

    #[test]
    fn a_forged_separator_in_stdout_is_not_the_last() {
        let cmd = plain(Program::Inline("echo; echo SEP; echo status"), "SEP", 100).unwrap();
        let (_, all) = sh(&cmd);
        let out = split_output(&all, "SEP");
        assert!(
            out.stdout.ends_with(b"status\n"),
            "{}",
            String::from_utf8_lossy(out.stdout)
        );
        assert!(out.stderr.is_empty());
    }
}
