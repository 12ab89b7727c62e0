//! What the component fuzz targets share: one runtime with the embedded
//! component, and a sync-out of one directory mapping.

use std::path::Path;
use std::sync::OnceLock;

use sandbox_sync_host::{FileMapping, MappingKind, Runtime, SyncOperation};

/// A tokio runtime and the embedded component, loaded once per process.
pub fn rt() -> &'static (tokio::runtime::Runtime, Runtime) {
    static RT: OnceLock<(tokio::runtime::Runtime, Runtime)> = OnceLock::new();
    RT.get_or_init(|| {
        let tokio = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let runtime = tokio.block_on(Runtime::embedded()).unwrap();
        (tokio, runtime)
    })
}

/// One operation: the sandbox's `/ws/src` out to `target`.
pub fn dir_out(target: &Path) -> [SyncOperation; 1] {
    [SyncOperation {
        operation_id: "fuzz".into(),
        files: vec![FileMapping {
            source_path: "/ws/src".into(),
            target_path: target.display().to_string(),
            kind: MappingKind::Directory,
            mode: None,
            exclude: None,
            follow_symlinks: None,
        }],
        post_upload_commands: None,
    }]
}

/// The marker that opens mapping 0 of operation 0.
pub fn first_marker() -> Vec<u8> {
    format!("{:<511}\n", "SANDBOX-SYNC map 0 0").into_bytes()
}

#[allow(dead_code)] // the component target's, not the deadline target's
/// An incremental sync-out's listing of mapping 0, framed as the program
/// frames it (the sandbox's clock: now).
pub fn listing_frame(listing: &[u8]) -> Vec<u8> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut out = format!(
        "{:<511}\n",
        format!("SANDBOX-SYNC list 0 {} {now}", listing.len())
    )
    .into_bytes();
    out.extend_from_slice(listing);
    out.resize(out.len() + (512 - listing.len() % 512) % 512, 0);
    out
}
