//! Scratch names, and cleaning up after a sandbox program that was killed.

use sandbox_sync_core::{script, SCRATCH_PREFIX};

use crate::bindings::sandbox_sync::provider::sandbox_exec::ExecStatus;
use crate::io;

/// A fresh `.paperclip-upload-<random>` name.
pub fn fresh() -> String {
    format!("{SCRATCH_PREFIX}-{}", io::random_hex(8))
}

/// A SIGKILLed sandbox shell cannot run its cleanup trap: when `status`
/// says the program died by a signal, remove its scratch dir with one more
/// exec (best effort; the sync has failed either way).
pub fn cleanup_if_killed(status: &ExecStatus, root: &str, stale: &str, max_stderr_bytes: u64) {
    if !crate::errors::exit(status).was_killed() {
        return;
    }
    let Ok(program) = script::cleanup(root, stale, &fresh()) else {
        return;
    };
    // The host clamps this exec to what is left of the call's deadline.
    let Ok(started) = crate::exec::start(program.len(), 10_000, max_stderr_bytes) else {
        return;
    };
    let _ =
        io::write_all(&started.stdin, program.as_bytes()).and_then(|()| io::flush(&started.stdin));
    let _ = started.exec.finish();
}
