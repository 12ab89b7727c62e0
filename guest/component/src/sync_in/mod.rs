//! Host -> sandbox: one exec. The program starts first; the host walks its
//! sources while the program starts and reports (what its targets hold,
//! which codecs it has, whether its tar can take an archive of unknown
//! length), then answers with the codec and, where needed, the archive's
//! length, and sends the archive: headers from the guest, contents spliced
//! host-side. When the sandbox's tar stops at the end marker by itself, the
//! rest of a big tree is walked while it is sent.

mod archive;
mod exec;
mod keep;
mod plan;
mod report;
mod toolbox;

use sandbox_sync_core::outcome::{self, Operation};

use sandbox_sync_driver::bindings::sandbox_sync::provider::host_fs::GrantedDir;
use sandbox_sync_driver::bindings::sandbox_sync::provider::sandbox_exec::ExecStatus;
use sandbox_sync_driver::bindings::sandbox_sync::provider::types::{
    OperationResult, SyncError, SyncRequest,
};
use sandbox_sync_driver::errors::exit;
use sandbox_sync_driver::io::StreamError;

/// Runs a sync-in over the transport the host offers.
pub fn run(req: &SyncRequest, sources: &[&GrantedDir]) -> Result<Vec<OperationResult>, SyncError> {
    if crate::toolbox::available() {
        toolbox::run(req, sources)
    } else {
        exec::run(req, sources)
    }
}

/// Judges the call by how the program ended and the status lines it
/// printed.
fn conclude(
    req: &SyncRequest,
    statuses: &[sandbox_sync_core::script::Status],
    status: &ExecStatus,
    stdin_failed: Option<&str>,
) -> Result<(), SyncError> {
    let ops: Vec<Operation<'_>> = req
        .operations
        .iter()
        .map(|o| Operation {
            id: &o.operation_id,
            command_timeouts: o
                .post_upload_commands
                .iter()
                .map(|c| c.timeout_ms)
                .collect(),
        })
        .collect();
    outcome::conclude_inbound(
        &ops,
        statuses,
        &exit(status),
        stdin_failed,
        req.limits.timeout_ms,
    )?;
    Ok(())
}

/// Why sending stopped.
enum SendStopped {
    /// Stdin failed; the exec status will say why.
    Stream(StreamError),
    /// The walk refused the request before any archive byte was sent.
    Refused(SyncError),
    /// A host source changed while it was being sent.
    SourceChanged(SyncError),
    /// A host-side failure unrelated to the sandbox.
    Fatal(SyncError),
}
