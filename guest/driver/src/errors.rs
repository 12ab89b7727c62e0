//! Conversions into the WIT error type and the meaning of script exit codes.

use sandbox_sync_core::script::exit;
use sandbox_sync_core::{ErrorKind, SyncError as CoreError};

use crate::bindings::sandbox_sync::provider::host_fs::FsError;
use crate::bindings::sandbox_sync::provider::sandbox_exec::ExecStatus;
use crate::bindings::sandbox_sync::provider::types::{CommandFailure, SyncError};

/// Keeps only the tail of the sandbox's stderr in messages.
const STDERR_TAIL: usize = 2048;

pub fn from_core(e: CoreError) -> SyncError {
    let m = e.message;
    match e.kind {
        ErrorKind::InvalidRequest => SyncError::InvalidRequest(m),
        ErrorKind::Confinement => SyncError::Confinement(m),
        ErrorKind::UnsafeArchive => SyncError::UnsafeArchive(m),
        ErrorKind::CommandFailed => SyncError::CommandFailed(CommandFailure {
            operation_id: String::new(),
            exit_code: None,
            timed_out: false,
            message: m,
            stderr: String::new(),
        }),
        ErrorKind::LimitExceeded => SyncError::LimitExceeded(m),
        ErrorKind::SourceChanged => SyncError::SourceChanged(m),
        ErrorKind::Transport => SyncError::Transport(m),
        ErrorKind::Io => SyncError::Io(m),
    }
}

/// Describes a host filesystem failure on `path`.
pub fn fs(what: &str, path: &str, e: FsError) -> SyncError {
    let detail = match e {
        FsError::NotFound(m) => format!("not found: {m}"),
        FsError::AlreadyExists(m) => format!("already exists: {m}"),
        FsError::NotPermitted(m) => {
            return SyncError::Confinement(format!("failed to {what} {path}: not permitted: {m}"))
        }
        FsError::InvalidName(m) => {
            return SyncError::InvalidRequest(format!("failed to {what} {path}: invalid name: {m}"))
        }
        FsError::NoSpace(m) => format!("no space left on device: {m}"),
        FsError::Io(m) => m,
    };
    SyncError::Io(format!("failed to {what} {path}: {detail}"))
}

pub fn stderr_tail(status: &ExecStatus) -> String {
    let s = String::from_utf8_lossy(&status.stderr);
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

/// Turns a failed exec into the typed error its exit code stands for.
///
/// `op` names the operation that was in progress.
pub fn from_status(status: &ExecStatus, op: &str, timeout_ms: u64) -> SyncError {
    let stderr = stderr_tail(status);
    if status.timed_out || status.exit_code == Some(exit::DEADLINE) {
        return SyncError::LimitExceeded(format!(
            "operation {op}: the sandbox exec ran past its {timeout_ms} ms timeout{}",
            suffix(&stderr)
        ));
    }
    if status.stderr_truncated {
        return SyncError::LimitExceeded(format!(
            "operation {op}: the sandbox wrote more stderr than the cap allows"
        ));
    }
    let Some(code) = status.exit_code else {
        return SyncError::Transport(format!(
            "operation {op}: the sandbox process was killed{}",
            suffix(&stderr)
        ));
    };
    let what = match code {
        exit::ESCAPE => {
            return SyncError::Confinement(format!(
                "operation {op}: ESCAPE (exit 42){}",
                suffix(&stderr)
            ))
        }
        exit::NOTREG | exit::MISSING => {
            return SyncError::InvalidRequest(format!(
                "operation {op}: {}",
                fallback(&stderr, "source is not a regular file")
            ))
        }
        exit::INCOMPLETE => {
            return SyncError::SourceChanged(format!(
                "operation {op}: the archive did not arrive whole{}",
                suffix(&stderr)
            ))
        }
        exit::BOOTSTRAP => {
            return SyncError::Transport(format!(
                "operation {op}: the sandbox could not read the sync script (exit 70)"
            ))
        }
        exit::NO_CANONICALIZER => "the sandbox has neither realpath nor readlink -f",
        exit::ROOT => "the remote dir does not exist in the sandbox",
        exit::EXTRACT => "extracting or archiving failed",
        exit::RENAME => "a rename onto a target failed",
        exit::MKDIR => "creating or opening a directory failed",
        exit::OPEN => "opening a directory failed",
        exit::CHMOD => "chmod failed",
        127 => "a required command is missing in the sandbox",
        _ => "the sync script failed",
    };
    SyncError::CommandFailed(CommandFailure {
        operation_id: op.to_owned(),
        exit_code: Some(code),
        timed_out: false,
        message: format!("operation {op}: {what} (exit {code})"),
        stderr,
    })
}

fn suffix(stderr: &str) -> String {
    if stderr.is_empty() {
        String::new()
    } else {
        format!(": {stderr}")
    }
}

fn fallback(stderr: &str, default: &str) -> String {
    if stderr.is_empty() {
        default.to_owned()
    } else {
        stderr.to_owned()
    }
}
