//! The real component through the real shim: fuzzer bytes become the
//! sandbox's stdout for a sync-out of one directory mapping into a
//! throw-away target. Oracle: a typed result (never a trap), nothing
//! outside the target, no special file or set-id bit, every symlink
//! resolving inside the target, bounded time.
//!
//! Input: a flag byte, then the stream. With the flag's low bit set the
//! target already holds files (`a`, `d/b`, `host-only`) and the sync is
//! incremental: the next two bytes (big-endian) are the length of the
//! listing the sandbox frames first, so the fuzzer also drives the keep
//! decisions and the kept files' linking into a hostile archive.
#![no_main]

#[path = "common.rs"]
mod common;

use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use sandbox_sync_host::exec::scripted::ScriptedBackend;
use sandbox_sync_host::{ErrorKind, SyncOptions};

fn check_tree(root: &Path, dir: &Path) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let p = entry.path();
        let meta = std::fs::symlink_metadata(&p).unwrap();
        assert_eq!(
            meta.mode() & 0o7000,
            0,
            "special mode bits on {}",
            p.display()
        );
        let ft = meta.file_type();
        if ft.is_symlink() {
            let target = std::fs::read_link(&p).unwrap();
            assert!(target.is_relative(), "absolute symlink {}", p.display());
            let mut depth: isize = p
                .parent()
                .unwrap()
                .strip_prefix(root)
                .unwrap()
                .components()
                .count() as isize;
            for c in target.components() {
                match c {
                    Component::ParentDir => depth -= 1,
                    Component::Normal(_) => depth += 1,
                    _ => {}
                }
                assert!(depth >= 0, "symlink {} escapes the target", p.display());
            }
            // Followed, it stays inside too (a `..` after a name lands
            // only out of directories).
            if let (Ok(to), Ok(top)) = (std::fs::canonicalize(&p), std::fs::canonicalize(root)) {
                assert!(
                    to.starts_with(&top),
                    "symlink {} leads to {}",
                    p.display(),
                    to.display()
                );
            }
        } else if ft.is_dir() {
            check_tree(root, &p);
        } else {
            assert!(ft.is_file(), "special file {}", p.display());
        }
    }
}

/// A target an earlier sync-out filled (mtime 1600000000, as the seeds
/// list them).
fn fill(target: &Path) {
    let when = std::time::UNIX_EPOCH + Duration::from_secs(1_600_000_000);
    std::fs::create_dir_all(target.join("d")).unwrap();
    for (rel, body) in [
        ("a", "old a\n"),
        ("d/b", "old b\n"),
        ("host-only", "host\n"),
    ] {
        let p = target.join(rel);
        std::fs::write(&p, body).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(when)
            .unwrap();
    }
}

fuzz_target!(|data: &[u8]| {
    let (tokio, runtime) = common::rt();
    let tmp = tempfile::tempdir().unwrap();
    let target: PathBuf = tmp.path().join("target");
    let (flag, mut data) = data.split_first().map_or((0, data), |(f, d)| (*f, d));
    let incremental = flag & 1 == 1;
    let mut stdout = Vec::new();
    if incremental {
        fill(&target);
        let len = data
            .get(..2)
            .map_or(0, |b| usize::from(u16::from_be_bytes([b[0], b[1]])));
        let rest = data.get(2..).unwrap_or_default();
        let (listing, rest) = rest.split_at(len.min(rest.len()));
        stdout.extend(common::listing_frame(listing));
        data = rest;
    }
    stdout.extend(common::first_marker());
    stdout.extend_from_slice(data);
    let ops = common::dir_out(&target);
    let mut opts = SyncOptions::new("/ws");
    opts.incremental = incremental;
    opts.timeout = Duration::from_secs(5);
    opts.max_output_bytes = 64 << 20;
    opts.max_entries = 10_000;
    opts.max_metadata_bytes = 4 << 20;
    let started = Instant::now();
    let result =
        tokio.block_on(runtime.sync_out(&ops, &opts, Arc::new(ScriptedBackend::new(stdout, 0))));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    if let Err(f) = &result {
        assert!(
            !f.error.message.contains("trapped"),
            "the component trapped: {}",
            f.error
        );
        assert!(
            matches!(
                f.error.kind,
                ErrorKind::UnsafeArchive
                    | ErrorKind::LimitExceeded
                    | ErrorKind::Transport
                    | ErrorKind::Io
            ),
            "unexpected error kind: {}",
            f.error
        );
    }
    // Nothing but the target in the throw-away dir, and a clean tree in it.
    // A failed sync-out removes a target directory it made (a target an
    // earlier sync filled stays).
    let names: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    let expected: Vec<std::ffi::OsString> = if result.is_ok() || incremental {
        vec!["target".into()]
    } else {
        Vec::new()
    };
    assert_eq!(names, expected, "wrote outside the target");
    if names.is_empty() {
        return;
    }
    check_tree(&target, &target);
});
