//! The sandbox-sync provider component.
//!
//! A thin layer over [`sandbox_sync_core`]: it converts WIT types, drives the
//! host's `sandbox-exec` and `host-fs` imports, and splices file contents
//! host-side so bulk bytes never enter guest memory.

mod sync_in;
mod sync_out;

use sandbox_sync_driver::bindings::exports::sandbox_sync::provider::sync::Guest;
use sandbox_sync_driver::bindings::sandbox_sync::provider::host_fs::GrantedDir;
use sandbox_sync_driver::bindings::sandbox_sync::provider::types::{
    OperationResult, ProviderInfo, SyncError, SyncRequest,
};

use sandbox_sync_driver::WIT_VERSION;

struct Provider;

impl Guest for Provider {
    fn describe() -> ProviderInfo {
        ProviderInfo {
            name: "sandbox-sync-tar-stream".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            wit_version: WIT_VERSION.into(),
            capabilities: vec![
                "sync-in".into(),
                "sync-out".into(),
                "post-upload-commands".into(),
                "single-exec".into(),
                "tar-stream".into(),
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

sandbox_sync_driver::bindings::export_provider!(Provider with_types_in sandbox_sync_driver::bindings);
