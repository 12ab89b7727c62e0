//! The typed error a sync call ends with, on the host side.

use std::fmt;
use std::sync::Arc;

use sandbox_sync_core::ErrorKind;

use crate::bindings::types as wit;
use crate::exec::ExecError;

/// Details of a failed post-upload command or in-sandbox step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandDetails {
    /// The operation that was running.
    pub operation_id: String,
    /// The exit code, when the process exited.
    pub exit_code: Option<i32>,
    /// The command was stopped by its timeout.
    pub timed_out: bool,
    /// The tail of the sandbox's stderr.
    pub stderr: String,
}

/// A failed sync call: a kind, a message naming what failed, and command
/// details where a sandbox command failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct SyncError {
    /// The failure class (stable, machine-readable).
    pub kind: ErrorKind,
    /// What happened.
    pub message: String,
    /// Present for `command-failed`.
    pub command: Option<CommandDetails>,
    /// For `transport`: the backend's own typed error behind it, where the
    /// host saw one (the component only ever sees its text).
    pub cause: Option<BackendFailure>,
}

impl SyncError {
    /// An error of `kind` with `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        SyncError {
            kind,
            message: message.into(),
            command: None,
            cause: None,
        }
    }
}

/// The first error a backend gave the host during a call, typed (a kube
/// `KubeError` or a Daytona `ToolboxError` inside an [`ExecError`]), kept
/// so a front end can say what to check instead of only quoting text.
#[derive(Debug, Clone)]
pub struct BackendFailure(Arc<ExecError>);

impl BackendFailure {
    /// Keeps `e`.
    pub fn new(e: ExecError) -> Self {
        BackendFailure(Arc::new(e))
    }

    /// A stable name for what the backend said (`unauthorized`,
    /// `pod-not-found`, ...: `ToolboxError::code`, `KubeError::code`), where
    /// it is one of the typed ones.
    pub fn code(&self) -> Option<&'static str> {
        #[cfg(feature = "daytona")]
        if let Some(t) = self.toolbox() {
            return Some(t.code());
        }
        #[cfg(feature = "kube")]
        if let Some(k) = self.kube() {
            return Some(k.code());
        }
        None
    }

    /// What to check, where the backend's typed error says
    /// (`ToolboxError::hint`, `KubeError::hint`).
    pub fn hint(&self) -> Option<&'static str> {
        #[cfg(feature = "daytona")]
        if let Some(t) = self.toolbox() {
            return t.hint();
        }
        #[cfg(feature = "kube")]
        if let Some(k) = self.kube() {
            return k.hint();
        }
        None
    }

    /// The Daytona toolbox's error, when that is what failed.
    #[cfg(feature = "daytona")]
    pub fn toolbox(&self) -> Option<&crate::exec::daytona::ToolboxError> {
        crate::exec::daytona::ToolboxError::find(&self.0)
    }

    /// The kube backend's error, when that is what failed.
    #[cfg(feature = "kube")]
    pub fn kube(&self) -> Option<&crate::exec::kube::KubeError> {
        crate::exec::kube::KubeError::find(&self.0)
    }
}

/// Two failures are equal when they are the same one.
impl PartialEq for BackendFailure {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for BackendFailure {}

impl fmt::Display for SyncError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "error[{}]: {}", self.kind, Printable(&self.message))?;
        if let Some(c) = &self.command {
            if !c.stderr.is_empty() {
                write!(f, ": {}", Printable(&c.stderr.replace('\n', " | ")))?;
            }
        }
        Ok(())
    }
}

/// Text with its control characters escaped (`\r`, `\u{1b}`): messages
/// carry file names and the sandbox's stderr, and neither may drive the
/// terminal they are printed on.
struct Printable<'a>(&'a str);

impl fmt::Display for Printable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in self.0.chars() {
            if c.is_control() {
                write!(f, "{}", c.escape_default())?;
            } else {
                write!(f, "{c}")?;
            }
        }
        Ok(())
    }
}

impl From<wit::SyncError> for SyncError {
    fn from(e: wit::SyncError) -> Self {
        use wit::SyncError as W;
        match e {
            W::InvalidRequest(m) => SyncError::new(ErrorKind::InvalidRequest, m),
            W::Confinement(m) => SyncError::new(ErrorKind::Confinement, m),
            W::UnsafeArchive(m) => SyncError::new(ErrorKind::UnsafeArchive, m),
            W::CommandFailed(c) => SyncError {
                kind: ErrorKind::CommandFailed,
                message: c.message,
                command: Some(CommandDetails {
                    operation_id: c.operation_id,
                    exit_code: c.exit_code,
                    timed_out: c.timed_out,
                    stderr: c.stderr,
                }),
                cause: None,
            },
            W::LimitExceeded(m) => SyncError::new(ErrorKind::LimitExceeded, m),
            W::SourceChanged(m) => SyncError::new(ErrorKind::SourceChanged, m),
            W::Transport(m) => SyncError::new(ErrorKind::Transport, m),
            W::Io(m) => SyncError::new(ErrorKind::Io, m),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_never_reach_the_terminal_raw() {
        let mut e = SyncError::new(ErrorKind::Io, "failed to write back/Icon\r: \u{1b}[2J");
        e.command = Some(CommandDetails {
            operation_id: "op".into(),
            exit_code: Some(1),
            timed_out: false,
            stderr: "one\ntwo\u{7}\n".into(),
        });
        assert_eq!(
            e.to_string(),
            "error[io]: failed to write back/Icon\\r: \\u{1b}[2J: one | two\\u{7} | "
        );
    }
}
