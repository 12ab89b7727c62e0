//! A second sandbox-sync provider: the orchestrator's base64-over-exec
//! fallback behind the same WIT world.
//!
//! This is how the orchestrator moves files when a provider has no native
//! hooks: files as base64 chunks (3 MiB decoded) appended by one exec each,
//! staged beside the target then `mv -f`; directories as a tar staged in the
//! sandbox then extracted; each post-upload command its own exec; sync-out
//! as a remote tar read back in `dd | base64` chunks. It shares the pure core
//! (confinement, quoting, the sandbox function library, tar writing and
//! validation) and the driver's extraction with the tar-stream component,
//! so the two must be observationally identical — and the conformance and
//! differential tests check that they are.

mod exec;
mod sync_in;
mod sync_out;

use sandbox_sync_driver::bindings::exports::sandbox_sync::provider::sync::Guest;
use sandbox_sync_driver::bindings::sandbox_sync::provider::host_fs::GrantedDir;
use sandbox_sync_driver::bindings::sandbox_sync::provider::types::{
    OperationResult, ProviderInfo, SyncError, SyncRequest,
};
use sandbox_sync_driver::WIT_VERSION;

/// Decoded bytes per exec, as the orchestrator's fallback uses.
pub const CHUNK: usize = 3 * 1024 * 1024;

struct Fallback;

impl Guest for Fallback {
    fn describe() -> ProviderInfo {
        ProviderInfo {
            name: "sandbox-sync-base64-fallback".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            wit_version: WIT_VERSION.into(),
            capabilities: vec![
                "sync-in".into(),
                "sync-out".into(),
                "post-upload-commands".into(),
                "base64-chunks".into(),
            ],
        }
    }

    fn sync_in(
        req: SyncRequest,
        sources: Vec<GrantedDir>,
    ) -> Result<Vec<OperationResult>, SyncError> {
        let sources: Vec<&GrantedDir> = sources.iter().collect();
        sync_in::run(&req, &sources)
    }

    fn sync_out(
        req: SyncRequest,
        targets: Vec<GrantedDir>,
    ) -> Result<Vec<OperationResult>, SyncError> {
        let targets: Vec<&GrantedDir> = targets.iter().collect();
        sync_out::run(&req, &targets)
    }
}

sandbox_sync_driver::bindings::export_provider!(Fallback with_types_in sandbox_sync_driver::bindings);
