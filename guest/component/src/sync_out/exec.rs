//! Sandbox -> host over a streaming exec: the program goes in on stdin,
//! and the framed stream comes back on stdout in the same exec (with the
//! keep exchange inside it, when incremental).

use sandbox_sync_core::outcome::{conclude_outbound, Producer};

use sandbox_sync_driver::bindings::sandbox_sync::provider::host_fs::GrantedDir;
use sandbox_sync_driver::bindings::sandbox_sync::provider::types::{
    OperationResult, SyncError, SyncRequest,
};
use sandbox_sync_driver::codec;
use sandbox_sync_driver::errors::ended;
use sandbox_sync_driver::io;
use sandbox_sync_driver::report::noted;
use sandbox_sync_driver::scratch::cleanup_if_killed;

use super::plan::{prepare, Prepared};
use super::receive::{how_read, land, Channel, Receiver};

/// Most bytes read after the script could not be sent, to tell an output
/// flood (past a small guard) from a sandbox that just went away.
const SEND_FAILURE_DRAIN: u64 = 1 << 20;

pub fn run(req: &SyncRequest, targets: &[&GrantedDir]) -> Result<Vec<OperationResult>, SyncError> {
    let Prepared {
        root,
        scratch,
        mappings,
        text,
        offered,
        probes,
        listed,
        facts,
        ..
    } = prepare(req, targets, codec::incremental(), true)?;
    let limits = &req.limits;
    let started =
        sandbox_sync_driver::exec::start(text.len(), limits.timeout_ms, limits.max_stderr_bytes)?;
    let (exec, stdin) = (started.exec, started.stdin);
    let fed = io::write_all(&stdin, text.as_bytes()).and_then(|()| io::flush(&stdin));
    // Every mapping is staged first and lands only once the whole stream
    // and the program's exit status are good: a stream that breaks later
    // must not leave earlier mappings replaced.
    let mut receiver = Receiver::new(req, targets, &mappings, started.stdout);
    let received = match fed {
        Ok(()) => receiver.receive(Channel {
            exec: &exec,
            stdin: &stdin,
            offered,
            probes,
            listed: &listed,
            facts: &facts,
            decided: None,
        }),
        // The sandbox stopped taking the script: what it wrote before it
        // went may say why (an output flood is the guard's to report).
        Err(e) => match receiver.input().drain_arrived(SEND_FAILURE_DRAIN) {
            Err(limit) => Err(limit.into()),
            Ok(()) => Err(SyncError::Transport(format!(
                "failed to send the sync script: {e}"
            ))),
        },
    };
    // Closing our end of stdout makes the sandbox's writer fail, and
    // closing stdin ends a wait for an answer that will never come (the
    // keep lists), so a program that failed exits through its cleanup trap
    // instead of being killed at the deadline.
    let (cut, blame, staged) = receiver.end();
    drop(stdin);
    let status = noted(exec.finish());
    if let Ok(status) = &status {
        cleanup_if_killed(status, &root, &scratch, limits.max_stderr_bytes);
    }
    let read = how_read(&received, cut);
    let results = conclude_outbound(
        received,
        read,
        ended(&status),
        Producer::Program,
        blame,
        limits.timeout_ms,
    );
    land(results, staged)
}
