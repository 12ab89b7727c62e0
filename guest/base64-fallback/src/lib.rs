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

/// Decoded bytes per exec, as the orchestrator's fallback uses.
pub const CHUNK: usize = 3 * 1024 * 1024;

sandbox_sync_driver::provider!(
    "sandbox-sync-base64-fallback",
    capabilities: ["base64-chunks"],
    sync_in: sync_in::run,
    sync_out: sync_out::run,
);
