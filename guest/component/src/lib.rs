//! The sandbox-sync provider component.
//!
//! A thin layer over [`sandbox_sync_core`]: it converts WIT types, drives the
//! host's `sandbox-exec` and `host-fs` imports, and splices file contents
//! host-side so bulk bytes never enter guest memory.

mod sync_in;
mod sync_out;
mod toolbox;

sandbox_sync_driver::provider!(
    "sandbox-sync-tar-stream",
    capabilities: [
        "single-exec",
        "tar-stream",
        "transport-compression",
        "incremental",
        "toolbox",
    ],
    sync_in: sync_in::run,
    sync_out: sync_out::run,
);
