//! Incremental sync-out: which files the host targets already hold.
//! (A file mapping lists its source as `f`, and its target is one `stat`.)
//!
//! Before its archives the program frames each listed source's regular
//! files (size, mtime, mode); the component walks the host target and
//! answers with the names the target already holds, which the sandbox's
//! tar leaves out and the component links from the old target into the
//! staged tree (see [`extract`](sandbox_sync_driver::extract::extract)).
//!
//! A target file is the sandbox's when size, mode (as it landed, `& 0o755`)
//! and mtime (seconds) match and it is not "racy": its bytes were read at
//! least a whole second after its mtime, so a later write in the sandbox,
//! however soon, changed the mtime. When they were read is bounded by when
//! the file landed (its ctime, in our clock, moved to the sandbox's: that
//! is at least its listing's `now` less our clock when the listing arrived,
//! less a second for each clock's rounding) less the time bytes may be in
//! flight ([`IN_FLIGHT_SECS`]).
//!
//! The host never sends what it holds: the sandbox learns, for the names it
//! lists, which the target holds with exactly that size, mtime and mode.
//! A sandbox that lies can only make the host keep a file the target
//! already held, at a path the archive still has to bring the directory of.
//! Names with a newline or backslash are always sent (the keep list is one
//! name a line).

use std::collections::{HashMap, HashSet};

use sandbox_sync_core::exclude::Excluder;
use sandbox_sync_core::sandbox_path::split_parent;
use sandbox_sync_core::script::{parse_listing, Listed, Marker};
use sandbox_sync_core::tar_read::Source;
use sandbox_sync_core::tar_write::padding;
use sandbox_sync_core::{IN_FLIGHT_SECS, SCRATCH_PREFIX};

use sandbox_sync_driver::bindings::sandbox_sync::provider::host_fs::{
    EntryKind, FsError, GrantedDir,
};
use sandbox_sync_driver::bindings::sandbox_sync::provider::types::{
    FileMapping, MappingKind, SyncError,
};
use sandbox_sync_driver::bindings::wasi::io::streams::OutputStream;
use sandbox_sync_driver::errors::fs;
use sandbox_sync_driver::extract::{Kept, HOST_MASK};
use sandbox_sync_driver::io::{self, GuardedInput};

/// The most listing bytes read per mapping (about a million files); a
/// larger listing is skipped and its files are all sent.
const MAX_LISTING: u64 = 64 << 20;

/// Reads the listing of each of `listed` (indices into `targets` and
/// `mappings`, each an operation index, a mapping index and the mapping),
/// in order, answers the program on `stdin` with the names each target
/// already holds, and returns those files per mapping.
///
/// # Errors
/// A stream that is not the listings the program was asked for, a host
/// walk failure, or a broken stdin.
pub fn exchange(
    input: &mut GuardedInput,
    stdin: &OutputStream,
    listed: &[usize],
    targets: &[&GrantedDir],
    mappings: &[(usize, usize, &FileMapping)],
) -> Result<HashMap<usize, Vec<Kept>>, SyncError> {
    let mut kept = HashMap::new();
    let mut answer = Vec::new();
    for &k in listed {
        let (len, now) = match super::read_marker(input)? {
            Marker::Listing { mapping, len, now } if mapping == k => (len, now),
            m => {
                return Err(SyncError::UnsafeArchive(format!(
                    "expected the listing of mapping {k}, the sandbox sent {m:?}"
                )))
            }
        };
        let arrived = io::unix_now();
        let files = if len <= MAX_LISTING {
            // At most MAX_LISTING: the cast is lossless.
            let mut buf = vec![0; len as usize];
            input.read_exact(&mut buf)?;
            parse_listing(&buf)
        } else {
            input.skip(len)?;
            HashMap::new()
        };
        input.skip(padding(len))?;
        let (_, _, m) = mappings[k];
        let excluder = Excluder::new(&m.exclude)?;
        let skew = now.saturating_sub(arrived);
        let held = match m.kind {
            MappingKind::Directory => held(targets[k], &files, &m.target_path)?,
            MappingKind::File => held_file(targets[k], &files, &m.target_path)?,
        };
        let mut names = Vec::new();
        let mut keep = Vec::new();
        for (path, l, h) in held {
            let settled = h.ctime.saturating_add(skew) > l.mtime.saturating_add(2 + IN_FLIGHT_SECS);
            // The mode the target got when it landed.
            let mode = match m.kind {
                MappingKind::File => m.mode.unwrap_or(l.mode & HOST_MASK),
                MappingKind::Directory => l.mode & HOST_MASK,
            };
            let same = l.size == h.size
                && mode == h.mode
                && l.mtime == h.mtime
                && settled
                && !path.contains(['\n', '\\'])
                && !excluder.excludes(&path);
            if same {
                names.extend_from_slice(path.as_bytes());
                names.push(b'\n');
                keep.push(Kept {
                    path,
                    size: h.size,
                    mode: h.mode,
                    mtime: h.mtime,
                });
            }
        }
        answer.extend_from_slice(format!("{}\n", names.len()).as_bytes());
        answer.extend_from_slice(&names);
        kept.insert(k, keep);
    }
    io::write_all(stdin, &answer)
        .and_then(|()| io::flush(stdin))
        .map_err(|e| SyncError::Transport(format!("failed to send the keep lists: {e}")))?;
    Ok(kept)
}

/// A file mapping's target, when the sandbox listed its source (as `f`)
/// and the target is a regular file.
fn held_file<'l>(
    parent: &GrantedDir,
    files: &'l HashMap<String, Listed>,
    target: &str,
) -> Result<Vec<(String, &'l Listed, Held)>, SyncError> {
    let Some(l) = files.get("f") else {
        return Ok(Vec::new());
    };
    let (_, base) = split_parent(target);
    let e = match parent.stat_times(base) {
        Ok(e) => e,
        Err(FsError::NotFound(_)) => return Ok(Vec::new()),
        Err(e) => return Err(fs("stat", target, e)),
    };
    if e.metadata.kind != EntryKind::File {
        return Ok(Vec::new());
    }
    let h = Held {
        size: e.metadata.size,
        mode: e.metadata.mode,
        mtime: e.metadata.mtime_sec,
        ctime: e.ctime_sec,
    };
    Ok(vec![("f".to_owned(), l, h)])
}

/// A regular file of the host target, as `read-dir-times` gave it.
struct Held {
    size: u64,
    mode: u32,
    mtime: i64,
    ctime: i64,
}

/// The regular files of `grant` (the target) at paths `files` lists, with
/// the listing's entry: a walk that never follows a symlink and enters
/// only directories a listed path lies under.
fn held<'l>(
    grant: &GrantedDir,
    files: &'l HashMap<String, Listed>,
    target: &str,
) -> Result<Vec<(String, &'l Listed, Held)>, SyncError> {
    let mut dirs: HashSet<&str> = HashSet::new();
    for path in files.keys() {
        let mut at = path.as_str();
        while let Some((parent, _)) = at.rsplit_once('/') {
            if !dirs.insert(parent) {
                break;
            }
            at = parent;
        }
    }
    let mut out = Vec::new();
    let mut stack = vec![String::new()];
    while let Some(dir) = stack.pop() {
        let entries = grant
            .read_dir_times(&dir)
            .map_err(|e| fs("list", &format!("{target}/{dir}"), e))?;
        for e in entries {
            if dir.is_empty() && e.name.starts_with(SCRATCH_PREFIX) {
                continue;
            }
            let path = if dir.is_empty() {
                e.name
            } else {
                format!("{dir}/{}", e.name)
            };
            match e.metadata.kind {
                EntryKind::Directory if dirs.contains(path.as_str()) => stack.push(path),
                EntryKind::File => {
                    if let Some(l) = files.get(&path) {
                        let h = Held {
                            size: e.metadata.size,
                            mode: e.metadata.mode,
                            mtime: e.metadata.mtime_sec,
                            ctime: e.ctime_sec,
                        };
                        out.push((path, l, h));
                    }
                }
                _ => {}
            }
        }
    }
    Ok(out)
}
