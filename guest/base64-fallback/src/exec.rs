//! One exec: the library plus a body on stdin, an optional payload after it.

use sandbox_sync_core::script::{self, FallbackStep};
use sandbox_sync_driver::bindings::sandbox_sync::provider::sandbox_exec::ExecStatus;
use sandbox_sync_driver::bindings::sandbox_sync::provider::types::{SyncError, SyncRequest};
use sandbox_sync_driver::io;

/// Most stdout bytes one exec may return (a base64 chunk plus slack).
const MAX_STDOUT: usize = 8 * 1024 * 1024;

/// A finished exec.
pub struct Ran {
    pub status: ExecStatus,
    pub stdout: Vec<u8>,
}

impl Ran {
    pub fn ok(&self) -> bool {
        sandbox_sync_driver::errors::exit(&self.status).succeeded()
    }
}

/// Runs `steps` after the function library for `root`, feeding `payload`
/// after the program on stdin.
pub fn run(
    req: &SyncRequest,
    root: &str,
    steps: &[FallbackStep<'_>],
    payload: &[u8],
    timeout_ms: u64,
) -> Result<Ran, SyncError> {
    let scratch = sandbox_sync_driver::scratch::fresh();
    let program = script::fallback(root, timeout_ms, &scratch, steps)?;
    let started =
        sandbox_sync_driver::exec::start(program.len(), timeout_ms, req.limits.max_stderr_bytes)?;
    let (exec, stdin, stdout) = (started.exec, started.stdin, started.stdout);
    // A failed write means the program stopped early; its status says why.
    let _ = io::write_all(&stdin, program.as_bytes())
        .and_then(|()| io::write_all(&stdin, payload))
        .and_then(|()| io::flush(&stdin));
    let mut out = Vec::new();
    let mut over = false;
    while let Ok(chunk) = stdout.blocking_read(256 * 1024) {
        if out.len() + chunk.len() > MAX_STDOUT {
            over = true;
            break;
        }
        out.extend_from_slice(&chunk);
    }
    drop(stdout);
    let status = sandbox_sync_driver::report::noted(exec.finish()).map_err(SyncError::Transport)?;
    drop(stdin);
    sandbox_sync_driver::scratch::cleanup_if_killed(
        &status,
        root,
        &scratch,
        req.limits.max_stderr_bytes,
    );
    if over {
        return Err(SyncError::LimitExceeded(
            "a fallback exec printed more than 8 MiB".into(),
        ));
    }
    Ok(Ran {
        status,
        stdout: out,
    })
}
