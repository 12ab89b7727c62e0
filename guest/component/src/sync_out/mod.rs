//! Sandbox -> host: one exec streams framed tar; the guest validates every
//! header and splices contents into host files beneath the granted targets.
//! Incremental, the program first lists the sources whose targets hold
//! files and leaves out what the host answers it already holds (see
//! [`keep`]). Offered a codec, the program names the one it uses in a
//! plain marker and compresses everything after it; the host decompresses
//! beneath the stream the guest reads.

mod exec;
mod keep;
mod plan;
mod receive;
mod toolbox;

use sandbox_sync_driver::bindings::sandbox_sync::provider::host_fs::GrantedDir;
use sandbox_sync_driver::bindings::sandbox_sync::provider::types::{
    OperationResult, SyncError, SyncRequest,
};

/// Runs a sync-out over the transport the host offers.
pub fn run(req: &SyncRequest, targets: &[&GrantedDir]) -> Result<Vec<OperationResult>, SyncError> {
    if crate::toolbox::available() {
        toolbox::run(req, targets)
    } else {
        exec::run(req, targets)
    }
}
