//! Sandbox -> host: one exec streams framed tar; the guest validates every
//! header and splices contents into host files beneath the granted targets.

use std::collections::HashSet;

use sandbox_sync_core::exclude::Excluder;
use sandbox_sync_core::sandbox_path::{confine, normalize_remote_dir, split_parent};
use sandbox_sync_core::script::{self, Marker, OutboundScript};
use sandbox_sync_core::tar_read::{Entry, EntryKind as TarKind, Limits, Parser, Source};
use sandbox_sync_core::tar_write::{padding, BLOCK};
use sandbox_sync_core::tree::TreePolicy;
use sandbox_sync_core::SCRATCH_PREFIX;

use crate::bindings::sandbox_sync::provider::host_fs::GrantedDir;
use crate::bindings::sandbox_sync::provider::sandbox_exec::{self, ExecOptions};
use crate::bindings::sandbox_sync::provider::types::{
    FileMapping, MappingKind, OperationResult, SyncError, SyncRequest,
};
use crate::errors::{from_core, from_status, fs};
use crate::io::{self, GuardedInput};

/// Directory mode while a tree is being filled (final modes come last).
const BUILD_DIR_MODE: u32 = 0o700;
/// Bits never granted to sandbox-authored files on the host (group/other write).
const HOST_MASK: u32 = 0o755;

pub fn run(req: &SyncRequest, targets: &[&GrantedDir]) -> Result<Vec<OperationResult>, SyncError> {
    let root = normalize_remote_dir(&req.remote_dir).map_err(from_core)?;
    let mappings: Vec<(usize, usize, &FileMapping)> = req
        .operations
        .iter()
        .enumerate()
        .flat_map(|(i, op)| op.files.iter().enumerate().map(move |(j, m)| (i, j, m)))
        .collect();
    if mappings.len() != targets.len() {
        return Err(SyncError::InvalidRequest(format!(
            "host granted {} target directories for {} mappings",
            targets.len(),
            mappings.len()
        )));
    }
    let mut script = OutboundScript::new(&root);
    for (i, op) in req.operations.iter().enumerate() {
        if !op.post_upload_commands.is_empty() {
            return Err(SyncError::InvalidRequest(format!(
                "operation {}: post-upload commands apply to sync-in only",
                op.operation_id
            )));
        }
        for (j, m) in op.files.iter().enumerate() {
            let source = confine(&root, &m.source_path, "source").map_err(from_core)?;
            match m.kind {
                MappingKind::File => script.file(i, j, &source),
                MappingKind::Directory => script.dir(i, j, &source, m.follow_symlinks, &m.exclude),
            }
            .map_err(from_core)?;
            if m.kind == MappingKind::Directory {
                Excluder::new(&m.exclude).map_err(from_core)?;
            }
        }
        script.op_done(i);
    }
    let text = script.finish().map_err(from_core)?;

    let exec = sandbox_exec::start(
        &script::argv(text.len()),
        ExecOptions {
            timeout_ms: req.limits.timeout_ms,
            max_stderr_bytes: req.limits.max_stderr_bytes,
        },
    )
    .map_err(|e| SyncError::Transport(format!("failed to start the sandbox exec: {e}")))?;
    let stdin = exec.stdin().map_err(SyncError::Transport)?;
    let stdout = exec.stdout().map_err(SyncError::Transport)?;
    let fed = io::write_all(&stdin, text.as_bytes()).and_then(|()| io::flush(&stdin));

    let mut input = GuardedInput::new(stdout, req.limits.max_output_bytes);
    let mut current = 0usize;
    let outcome = match fed {
        Ok(()) => receive(req, targets, &mappings, &mut input, &mut current),
        Err(e) => Err(SyncError::Transport(format!(
            "failed to send the sync script: {e}"
        ))),
    };
    match outcome {
        Ok(results) => {
            let status = exec.finish().map_err(SyncError::Transport)?;
            drop(stdin);
            let op = req
                .operations
                .last()
                .map(|o| o.operation_id.as_str())
                .unwrap_or("(none)");
            if status.exit_code != Some(0) || status.timed_out || status.stderr_truncated {
                return Err(from_status(&status, op, req.limits.timeout_ms));
            }
            Ok(results)
        }
        Err(err) => {
            // Closing our end of stdout makes the sandbox's writer fail, so its
            // script exits through its cleanup trap instead of being killed.
            drop(input.into_inner());
            let status = exec.finish();
            drop(stdin);
            let op = req
                .operations
                .get(current)
                .map(|o| o.operation_id.as_str())
                .unwrap_or("(none)");
            // A script that failed first explains a cut stream better than the cut does.
            if let (SyncError::UnsafeArchive(m), Ok(status)) = (&err, &status) {
                if m.contains("truncated") && status.exit_code != Some(0) {
                    return Err(from_status(status, op, req.limits.timeout_ms));
                }
            }
            Err(err)
        }
    }
}

fn receive(
    req: &SyncRequest,
    targets: &[&GrantedDir],
    mappings: &[(usize, usize, &FileMapping)],
    input: &mut GuardedInput,
    current: &mut usize,
) -> Result<Vec<OperationResult>, SyncError> {
    let limits = Limits {
        max_entries: req.limits.max_entries,
        max_metadata_bytes: req.limits.max_metadata_bytes,
        max_payload_bytes: req.limits.max_output_bytes,
    };
    let mut results: Vec<OperationResult> = req
        .operations
        .iter()
        .map(|o| OperationResult {
            operation_id: o.operation_id.clone(),
            files_transferred: 0,
            bytes_transferred: 0,
        })
        .collect();
    let mut k = 0;
    for (i, op) in req.operations.iter().enumerate() {
        *current = i;
        for j in 0..op.files.len() {
            expect_marker(input, &Marker::Mapping { op: i, map: j })?;
            let (_, _, m) = mappings[k];
            let before = input.total();
            let files = match m.kind {
                MappingKind::File => receive_file(input, targets[k], m, limits)?,
                MappingKind::Directory => receive_dir(input, targets[k], m, limits)?,
            };
            results[i].files_transferred += files.0;
            results[i].bytes_transferred += files.1.unwrap_or(input.total() - before);
            k += 1;
        }
        expect_marker(input, &Marker::OpDone(i))?;
    }
    expect_marker(input, &Marker::End)?;
    if !input.at_end().map_err(from_core)? {
        return Err(SyncError::UnsafeArchive(
            "the sandbox wrote data after the end marker".into(),
        ));
    }
    Ok(results)
}

/// Skips zero padding between frames and checks the next marker.
fn expect_marker(input: &mut GuardedInput, want: &Marker) -> Result<(), SyncError> {
    let mut block = [0u8; BLOCK as usize];
    loop {
        input.read_exact(&mut block).map_err(from_core)?;
        if block.iter().any(|&b| b != 0) {
            break;
        }
    }
    match script::parse_marker(&block) {
        Some(m) if &m == want => Ok(()),
        Some(m) => Err(SyncError::UnsafeArchive(format!(
            "expected frame {want:?}, the sandbox sent {m:?}"
        ))),
        None => Err(SyncError::UnsafeArchive(
            "the sandbox's output is not a framed tar stream".into(),
        )),
    }
}

fn consume_data(input: &mut GuardedInput, e: &Entry) -> Result<(), SyncError> {
    input.skip(e.data_len()).map_err(from_core)
}

/// A file mapping: exactly one regular member, staged beside the target.
/// Returns (files, bytes).
fn receive_file(
    input: &mut GuardedInput,
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
        input.splice_to(&out, entry.size)?;
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
fn receive_dir(
    input: &mut GuardedInput,
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

fn extract(
    input: &mut GuardedInput,
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
                input.splice_to(&out, e.size)?;
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
