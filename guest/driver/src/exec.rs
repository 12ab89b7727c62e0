//! Starting a sandbox program: the constant bootstrap argv, then the
//! program itself as the first bytes of stdin.

use sandbox_sync_core::script;

use crate::bindings::sandbox_sync::provider::sandbox_exec::{self, ExecOptions, Execution};
use crate::bindings::sandbox_sync::provider::types::SyncError;
use crate::bindings::wasi::io::streams::{InputStream, OutputStream};

/// A started program with its streams taken.
///
/// Fields drop in order: the streams are children of the execution
/// resource, which the host refuses to drop while they live, so `exec`
/// comes last.
pub struct Started {
    /// Its stdin (the program text has not been written yet).
    pub stdin: OutputStream,
    /// Its stdout.
    pub stdout: InputStream,
    /// The running exec.
    pub exec: Execution,
}

/// Starts the bootstrap for a program of `program_len` bytes.
///
/// # Errors
/// `transport` when the exec cannot start or its streams are missing.
pub fn start(
    program_len: usize,
    timeout_ms: u64,
    max_stderr_bytes: u64,
) -> Result<Started, SyncError> {
    let exec = sandbox_exec::start(
        &script::argv(program_len),
        ExecOptions {
            timeout_ms,
            max_stderr_bytes,
        },
    )
    .map_err(|e| SyncError::Transport(format!("failed to start the sandbox exec: {e}")))?;
    let stdin = exec.stdin().map_err(SyncError::Transport)?;
    let stdout = exec.stdout().map_err(SyncError::Transport)?;
    Ok(Started {
        stdin,
        stdout,
        exec,
    })
}
