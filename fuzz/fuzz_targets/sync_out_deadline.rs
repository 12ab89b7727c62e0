//! Sync-out against a sandbox that may stall or hang anywhere in its
//! stream, through the real component and shim. Oracle: the call returns
//! within its timeout plus the host's grace, whatever the sandbox does; a
//! failure leaves the old target exactly as it was (nothing half-written);
//! a success leaves a clean tree; nothing is ever written beside the target
//! and no scratch is left behind.
//!
//! Input: byte 0 picks the stall (none, a pause, a hang), bytes 1-2 where
//! in the stream it happens; the rest is the stream after the first marker.
#![no_main]

#[path = "common.rs"]
mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use sandbox_sync_host::exec::scripted::{ScriptedBackend, Step};
use sandbox_sync_host::provider::HOST_GRACE;
use sandbox_sync_host::SyncOptions;

const TIMEOUT: Duration = Duration::from_millis(150);

/// Every path under `dir` with its contents (files) or link target.
fn snapshot(dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        let ft = e.file_type().unwrap();
        let value = if ft.is_symlink() {
            std::fs::read_link(&p)
                .unwrap()
                .into_os_string()
                .into_encoded_bytes()
        } else if ft.is_dir() {
            snapshot(&p, out);
            b"<dir>".to_vec()
        } else {
            std::fs::read(&p).unwrap()
        };
        out.insert(p.display().to_string(), value);
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let (tokio, runtime) = common::rt();
    let tmp = tempfile::tempdir().unwrap();
    let target = tmp.path().join("target");
    std::fs::create_dir_all(target.join("old/dir")).unwrap();
    std::fs::write(target.join("old/dir/f"), b"previous").unwrap();
    std::fs::write(target.join("keep"), b"previous").unwrap();
    let mut before = BTreeMap::new();
    snapshot(tmp.path(), &mut before);

    let mut stream = common::first_marker();
    stream.extend_from_slice(&data[3..]);
    let at = (usize::from(data[1]) << 8 | usize::from(data[2])).min(stream.len());
    let stall = match data[0] % 3 {
        0 => None,
        1 => Some(Step::Pause(TIMEOUT * 2)),
        _ => Some(Step::Hang),
    };
    let mut steps = vec![Step::Write(stream[..at].to_vec())];
    steps.extend(stall);
    steps.push(Step::Write(stream[at..].to_vec()));

    let ops = common::dir_out(&target);
    let mut opts = SyncOptions::new("/ws");
    opts.timeout = TIMEOUT;
    opts.max_output_bytes = 16 << 20;
    opts.max_entries = 5_000;
    opts.max_metadata_bytes = 1 << 20;
    let started = Instant::now();
    let backend = Arc::new(ScriptedBackend::scripted(steps, 0));
    let result = tokio.block_on(runtime.sync_out(&ops, &opts, backend));
    let took = started.elapsed();
    assert!(
        took <= TIMEOUT + HOST_GRACE + Duration::from_millis(300),
        "took {took:?} for a {TIMEOUT:?} timeout"
    );
    let mut after = BTreeMap::new();
    snapshot(tmp.path(), &mut after);
    assert!(
        after.keys().all(|k| !k.contains(".paperclip-upload")),
        "scratch left behind: {after:?}"
    );
    assert!(
        after.keys().all(|k| Path::new(k).starts_with(&target)),
        "wrote beside the target: {after:?}"
    );
    match result {
        Err(f) => {
            assert!(!f.error.message.contains("trapped"), "{}", f.error);
            assert_eq!(
                after, before,
                "a failed sync changed the target: {}",
                f.error
            );
        }
        Ok(_) => assert!(
            !after.contains_key(&target.join("keep").display().to_string()),
            "old contents survived a replacement"
        ),
    }
});
