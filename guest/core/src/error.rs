//! The typed error every layer reports; mirrors the WIT `sync-error` variant.

use std::fmt;

/// Which class of failure a [`Error`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request itself is malformed.
    InvalidRequest,
    /// A path would leave the directory it must stay under.
    Confinement,
    /// The sandbox wrote an archive that breaks policy.
    UnsafeArchive,
    /// A post-upload command or in-sandbox step exited non-zero.
    CommandFailed,
    /// A configured bound was exceeded.
    LimitExceeded,
    /// A host source changed while it was being sent.
    SourceChanged,
    /// The exec channel failed.
    Transport,
    /// A host filesystem operation failed.
    Io,
}

impl ErrorKind {
    /// The stable kebab-case name used on the CLI and in JSON-RPC `error.data`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidRequest => "invalid-request",
            ErrorKind::Confinement => "confinement",
            ErrorKind::UnsafeArchive => "unsafe-archive",
            ErrorKind::CommandFailed => "command-failed",
            ErrorKind::LimitExceeded => "limit-exceeded",
            ErrorKind::SourceChanged => "source-changed",
            ErrorKind::Transport => "transport",
            ErrorKind::Io => "io",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A typed failure with a human-readable message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct Error {
    /// The failure class.
    pub kind: ErrorKind,
    /// What happened, naming the path or operation involved.
    pub message: String,
    /// For [`ErrorKind::CommandFailed`]: what the command reported.
    pub command: Option<Box<CommandFailure>>,
}

/// What a failed post-upload command (or in-sandbox step) reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandFailure {
    /// The operation it belongs to.
    pub operation_id: String,
    /// Its exit status, if it exited.
    pub exit_code: Option<i32>,
    /// It was stopped by its timeout.
    pub timed_out: bool,
    /// The tail of the sandbox's stderr.
    pub stderr: String,
}

impl Error {
    /// Builds an error of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
            command: None,
        }
    }
    /// An [`ErrorKind::CommandFailed`] with what the command reported.
    pub fn command(message: impl Into<String>, failure: CommandFailure) -> Self {
        Error {
            kind: ErrorKind::CommandFailed,
            message: message.into(),
            command: Some(Box::new(failure)),
        }
    }
    /// An [`ErrorKind::InvalidRequest`].
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidRequest, message)
    }
    /// An [`ErrorKind::Confinement`].
    pub fn confinement(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Confinement, message)
    }
    /// An [`ErrorKind::UnsafeArchive`].
    pub fn unsafe_archive(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::UnsafeArchive, message)
    }
    /// An [`ErrorKind::LimitExceeded`].
    pub fn limit(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::LimitExceeded, message)
    }
}

/// What a host writes into a failed stream's error text when a limit of
/// its own (a codec's window, the compressed output guard) ended the
/// stream, so the component reports `limit-exceeded` and not `transport`.
/// A host without it only makes the kind less precise.
pub const LIMIT_MARK: &str = "[limit-exceeded] ";

/// A stream read or write that failed with `text` (the host's error, its
/// chain on one line): [`ErrorKind::LimitExceeded`] where the host marked
/// one of its limits, else [`ErrorKind::Transport`].
pub fn stream_failure(text: &str) -> Error {
    let line = one_line(text);
    match line.find(LIMIT_MARK) {
        Some(at) => Error::limit(line[at + LIMIT_MARK.len()..].to_owned()),
        None => Error::new(ErrorKind::Transport, line),
    }
}

/// An error chain's multi-line text (`pipe`, `Caused by:`, numbered
/// causes, as a host's `Debug` of it prints) as one line: an error message
/// is read on one.
pub fn one_line(text: &str) -> String {
    let parts: Vec<&str> = text
        .lines()
        .map(|l| {
            let l = l.trim();
            // "0: cause", as anyhow numbers a chain of several.
            match l.split_once(": ") {
                Some((n, rest)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => rest,
                _ => l,
            }
        })
        .filter(|l| !l.is_empty() && *l != "Caused by:")
        .collect();
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::one_line;

    #[test]
    fn error_chains_read_on_one_line() {
        assert_eq!(
            one_line("pipe\n\nCaused by:\n    corrupt zstd stream from the sandbox: bad magic\n"),
            "pipe: corrupt zstd stream from the sandbox: bad magic"
        );
        assert_eq!(
            one_line("pipe\n\nCaused by:\n    0: the codec failed\n    1: 2: odd but kept\n"),
            "pipe: the codec failed: 2: odd but kept"
        );
        assert_eq!(one_line("plain"), "plain");
    }
}

#[cfg(test)]
mod stream_failure_tests {
    use super::*;

    #[test]
    fn a_marked_limit_is_limit_exceeded_and_the_rest_transport() {
        let e = stream_failure(&format!(
            "pipe\n\nCaused by:\n    decompressing stdout: {LIMIT_MARK}a zstd window over 8 MiB"
        ));
        assert_eq!(e.kind, ErrorKind::LimitExceeded);
        assert_eq!(e.message, "a zstd window over 8 MiB");
        let e = stream_failure("pipe\n\nCaused by:\n    connection reset");
        assert_eq!(e.kind, ErrorKind::Transport);
        assert_eq!(e.message, "pipe: connection reset");
    }
}
