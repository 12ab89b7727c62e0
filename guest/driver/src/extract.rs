//! Validated extraction of sandbox-written tar into granted host directories.

use std::collections::HashSet;

use sandbox_sync_core::exclude::Excluder;
use sandbox_sync_core::sandbox_path::split_parent;
use sandbox_sync_core::tar_read::{Entry, EntryKind as TarKind, Limits, Parser, Source};
use sandbox_sync_core::tar_write::padding;
use sandbox_sync_core::tree::TreePolicy;
use sandbox_sync_core::SyncError as CoreError;
use sandbox_sync_core::SCRATCH_PREFIX;

use crate::bindings::sandbox_sync::provider::host_fs::GrantedDir;
use crate::bindings::sandbox_sync::provider::types::{FileMapping, SyncError};
use crate::bindings::wasi::io::streams::OutputStream;
use crate::errors::{from_core, fs};
use crate::io::{self, GuardedInput};

/// Directory mode while a tree is being filled (final modes come last).
const BUILD_DIR_MODE: u32 = 0o700;
/// Bits never granted to sandbox-authored files on the host (group/other write).
const HOST_MASK: u32 = 0o755;

/// Where archive bytes come from: a byte source that can also move content
/// straight into a host file.
pub trait ArchiveInput: Source {
    /// Moves exactly `len` bytes into `out`.
    ///
    /// # Errors
    /// Truncation, the output guard, or a host write failure.
    fn copy_to(&mut self, out: &OutputStream, len: u64) -> Result<(), SyncError>;
    /// Discards exactly `len` bytes.
    ///
    /// # Errors
    /// Truncation or the output guard.
    fn skip(&mut self, len: u64) -> Result<(), CoreError>;
}

impl ArchiveInput for GuardedInput {
    fn copy_to(&mut self, out: &OutputStream, len: u64) -> Result<(), SyncError> {
        self.splice_to(out, len)
    }
    fn skip(&mut self, len: u64) -> Result<(), CoreError> {
        GuardedInput::skip(self, len)
    }
}

pub fn consume_data<I: ArchiveInput>(input: &mut I, e: &Entry) -> Result<(), SyncError> {
    input.skip(e.data_len()).map_err(from_core)
}

/// A file mapping: exactly one regular member, staged beside the target.
/// Returns (files, bytes).
pub fn receive_file<I: ArchiveInput>(
    input: &mut I,
    grant: &GrantedDir,
    m: &FileMapping,
    limits: Limits,
) -> Result<(u64, Option<u64>), SyncError> {
    let mut parser = Parser::new(limits);
    let entry = parser
        .next_entry(input)
        .map_err(from_core)?
        .ok_or_else(|| {
            SyncError::UnsafeArchive(format!("no file arrived for {}", m.source_path))
        })?;
    if entry.kind != TarKind::File || entry.path != "f" {
        return Err(SyncError::UnsafeArchive(format!(
            "expected the snapshot of {} as member \"f\", got {:?}",
            m.source_path, entry.path
        )));
    }
    let (_, base) = split_parent(&m.target_path);
    let mode = m.mode.unwrap_or(entry.mode & HOST_MASK);
    let tmp = format!("{SCRATCH_PREFIX}-{}", io::random_hex(8));
    let written = (|| {
        let out = grant
            .create_exclusive(&tmp, mode)
            .map_err(|e| fs("create", &tmp, e))?;
        input.copy_to(&out, entry.size)?;
        io::flush(&out)
            .map_err(|e| SyncError::Io(format!("failed to write {}: {e}", m.target_path)))?;
        drop(out);
        input.skip(padding(entry.size)).map_err(from_core)?;
        if parser.next_entry(input).map_err(from_core)?.is_some() {
            return Err(SyncError::UnsafeArchive(format!(
                "more than one member arrived for {}",
                m.source_path
            )));
        }
        grant
            .set_mtime(&tmp, entry.mtime, 0)
            .map_err(|e| fs("set the time of", &m.target_path, e))?;
        grant
            .sync(&tmp)
            .map_err(|e| fs("sync", &m.target_path, e))?;
        grant
            .rename(&tmp, base)
            .map_err(|e| fs("rename onto", &m.target_path, e))
    })();
    if let Err(e) = written {
        let _ = grant.remove(&tmp);
        return Err(e);
    }
    Ok((1, Some(entry.size)))
}

/// A directory mapping: extract into a fresh staging dir inside the target,
/// then replace the target's contents with it (destroy-then-replace).
pub fn receive_dir<I: ArchiveInput>(
    input: &mut I,
    grant: &GrantedDir,
    m: &FileMapping,
    limits: Limits,
) -> Result<(u64, Option<u64>), SyncError> {
    let excluder = Excluder::new(&m.exclude).map_err(from_core)?;
    let staging = format!("{SCRATCH_PREFIX}-{}", io::random_hex(8));
    grant
        .mkdir(&staging, BUILD_DIR_MODE)
        .map_err(|e| fs("create staging in", &m.target_path, e))?;
    let result =
        extract(input, grant, &staging, &excluder, limits, &m.target_path).and_then(|files| {
            promote(grant, &staging, &m.target_path)?;
            if let Some(mode) = m.mode {
                grant
                    .set_mode("", mode)
                    .map_err(|e| fs("chmod", &m.target_path, e))?;
            }
            Ok(files)
        });
    let _ = grant.remove(&staging);
    result.map(|files| (files, None))
}

pub fn extract<I: ArchiveInput>(
    input: &mut I,
    grant: &GrantedDir,
    staging: &str,
    excluder: &Excluder,
    limits: Limits,
    target: &str,
) -> Result<u64, SyncError> {
    let mut parser = Parser::new(limits);
    let mut tree = TreePolicy::new();
    let mut made: HashSet<String> = HashSet::new();
    let mut dirs: Vec<(String, u32)> = Vec::new();
    let mut links: Vec<(String, String)> = Vec::new();
    let at = |p: &str| format!("{staging}/{p}");
    while let Some(e) = parser.next_entry(input).map_err(from_core)? {
        if excluder.excludes(&e.path) {
            consume_data(input, &e)?;
            continue;
        }
        tree.admit(&e).map_err(from_core)?;
        ensure_parents(grant, staging, &e.path, &mut made, target)?;
        match &e.kind {
            TarKind::File => {
                let out = grant
                    .create_exclusive(&at(&e.path), e.mode & HOST_MASK)
                    .map_err(|err| fs("create", &join(target, &e.path), err))?;
                input.copy_to(&out, e.size)?;
                io::flush(&out).map_err(|err| {
                    SyncError::Io(format!("failed to write {}: {err}", join(target, &e.path)))
                })?;
                drop(out);
                input.skip(padding(e.size)).map_err(from_core)?;
                grant
                    .set_mtime(&at(&e.path), e.mtime, 0)
                    .map_err(|err| fs("set the time of", &join(target, &e.path), err))?;
            }
            TarKind::Dir => {
                if made.insert(e.path.clone()) {
                    grant
                        .mkdir(&at(&e.path), BUILD_DIR_MODE)
                        .map_err(|err| fs("create", &join(target, &e.path), err))?;
                }
                dirs.push((e.path.clone(), e.mode));
            }
            TarKind::Symlink(t) => links.push((e.path.clone(), t.clone())),
            TarKind::HardLink(t) => {
                grant
                    .hard_link(&at(t), &at(&e.path))
                    .map_err(|err| fs("link", &join(target, &e.path), err))?;
            }
        }
    }
    // Symlinks are created only once the whole tree is known to keep them inside.
    tree.finish().map_err(from_core)?;
    for (path, t) in &links {
        grant
            .symlink(t, &at(path))
            .map_err(|err| fs("create symlink", &join(target, path), err))?;
    }
    // Deepest first, so a read-only directory never blocks its children.
    dirs.sort_by_key(|d| std::cmp::Reverse(d.0.len()));
    for (path, mode) in dirs {
        grant
            .set_mode(&at(&path), (mode & HOST_MASK) | BUILD_DIR_MODE)
            .map_err(|err| fs("chmod", &join(target, &path), err))?;
    }
    Ok(tree.non_directories() as u64)
}

fn ensure_parents(
    grant: &GrantedDir,
    staging: &str,
    path: &str,
    made: &mut HashSet<String>,
    target: &str,
) -> Result<(), SyncError> {
    let mut end = 0;
    while let Some(i) = path[end..].find('/') {
        let dir = &path[..end + i];
        if !made.contains(dir) {
            grant
                .mkdir(&format!("{staging}/{dir}"), BUILD_DIR_MODE)
                .map_err(|err| fs("create", &join(target, dir), err))?;
            made.insert(dir.to_owned());
        }
        end += i + 1;
    }
    Ok(())
}

/// Replaces the target's contents with the staged tree. Scratch names stay.
fn promote(grant: &GrantedDir, staging: &str, target: &str) -> Result<(), SyncError> {
    for old in grant.read_dir("").map_err(|e| fs("list", target, e))? {
        if !old.name.starts_with(SCRATCH_PREFIX) {
            grant
                .remove(&old.name)
                .map_err(|e| fs("remove", &join(target, &old.name), e))?;
        }
    }
    for new in grant
        .read_dir(staging)
        .map_err(|e| fs("list staging in", target, e))?
    {
        grant
            .rename(&format!("{staging}/{}", new.name), &new.name)
            .map_err(|e| fs("move into", &join(target, &new.name), e))?;
    }
    Ok(())
}

fn join(base: &str, rel: &str) -> String {
    format!("{}/{rel}", base.trim_end_matches('/'))
}
