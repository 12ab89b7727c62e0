//! Conversions between the core's errors and the WIT types.

use sandbox_sync_core::outcome::Exit;
use sandbox_sync_core::{Error as CoreError, ErrorKind};

use crate::bindings::sandbox_sync::provider::host_fs::FsError;
use crate::bindings::sandbox_sync::provider::sandbox_exec::ExecStatus;
use crate::bindings::sandbox_sync::provider::types::{CommandFailure, SyncError};

impl From<CoreError> for SyncError {
    fn from(e: CoreError) -> Self {
        let m = e.message;
        match e.kind {
            ErrorKind::InvalidRequest => SyncError::InvalidRequest(m),
            ErrorKind::Confinement => SyncError::Confinement(m),
            ErrorKind::UnsafeArchive => SyncError::UnsafeArchive(m),
            ErrorKind::CommandFailed => {
                let c = e.command.map(|c| *c);
                SyncError::CommandFailed(CommandFailure {
                    operation_id: c
                        .as_ref()
                        .map(|c| c.operation_id.clone())
                        .unwrap_or_default(),
                    exit_code: c.as_ref().and_then(|c| c.exit_code),
                    timed_out: c.as_ref().is_some_and(|c| c.timed_out),
                    message: m,
                    stderr: c.map(|c| c.stderr).unwrap_or_default(),
                })
            }
            ErrorKind::LimitExceeded => SyncError::LimitExceeded(m),
            ErrorKind::SourceChanged => SyncError::SourceChanged(m),
            ErrorKind::Transport => SyncError::Transport(m),
            ErrorKind::Io => SyncError::Io(m),
        }
    }
}

/// The core's view of how an exec ended.
pub fn exit(status: &ExecStatus) -> Exit<'_> {
    Exit {
        exit_code: status.exit_code,
        timed_out: status.timed_out,
        stderr_truncated: status.stderr_truncated,
        stderr: &status.stderr,
    }
}

/// How an exec ended, or why its host could not say, as
/// [`sandbox_sync_core::outcome::conclude_outbound`] takes it.
pub fn ended(status: &Result<ExecStatus, String>) -> Result<Exit<'_>, &str> {
    status.as_ref().map(exit).map_err(String::as_str)
}

/// The typed error a failed exec stands for (see
/// [`sandbox_sync_core::outcome::from_status`]).
pub fn from_status(status: &ExecStatus, op: &str, timeout_ms: u64) -> SyncError {
    sandbox_sync_core::outcome::from_status(&exit(status), op, timeout_ms).into()
}

/// Describes a host filesystem failure to `what` (a verb) `path`.
pub fn fs(what: &str, path: &str, e: FsError) -> SyncError {
    sandbox_sync_core::plan::FsError::from(e)
        .describe(what, path)
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_sync_core::CommandFailure as CoreCommand;

    #[test]
    fn core_errors_become_their_wit_variants() {
        let e: SyncError = CoreError::confinement("out").into();
        assert!(matches!(e, SyncError::Confinement(m) if m == "out"));
        let e: SyncError = CoreError::command(
            "operation o: failed",
            CoreCommand {
                operation_id: "o".into(),
                exit_code: Some(3),
                timed_out: false,
                stderr: "boom".into(),
            },
        )
        .into();
        let SyncError::CommandFailed(c) = e else {
            panic!("not a command failure")
        };
        assert_eq!(
            (
                c.operation_id.as_str(),
                c.exit_code,
                c.message.as_str(),
                c.stderr.as_str()
            ),
            ("o", Some(3), "operation o: failed", "boom")
        );
    }

    #[test]
    fn host_failures_are_described_by_kind() {
        let e = fs("create", "/t/x", FsError::NotPermitted("beneath".into()));
        assert!(
            matches!(e, SyncError::Confinement(m) if m == "failed to create /t/x: not permitted: beneath")
        );
        let e = fs("write", "/t/x", FsError::NoSpace("full".into()));
        assert!(matches!(e, SyncError::Io(m) if m.contains("no space left")));
        let e = fs("read", "/t/x", FsError::InvalidName("bytes".into()));
        assert!(matches!(e, SyncError::InvalidRequest(_)));
    }

    #[test]
    fn exit_views_the_status() {
        let status = ExecStatus {
            exit_code: Some(0),
            timed_out: false,
            stderr: b"x".to_vec(),
            stderr_truncated: false,
        };
        assert!(exit(&status).succeeded());
        let late = ExecStatus {
            timed_out: true,
            ..status
        };
        assert!(!exit(&late).succeeded());
    }
}
