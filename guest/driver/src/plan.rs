//! Planning what to send from granted host directories.

use sandbox_sync_core::exclude::Excluder;
use sandbox_sync_core::tar_write::{Member, MemberKind};
use sandbox_sync_core::SCRATCH_PREFIX;

use crate::bindings::sandbox_sync::provider::host_fs::{EntryKind, FsError, GrantedDir, Metadata};
use crate::bindings::sandbox_sync::provider::types::SyncError;
use crate::errors::{from_core, fs};

/// Deepest directory nesting followed on the host.
const MAX_DEPTH: usize = 512;

/// One archive member and where its bytes come from.
pub struct Planned {
    pub name: String,
    pub kind: PlannedKind,
    pub mode: u32,
    pub mtime: u64,
}

pub enum PlannedKind {
    /// Contents spliced from `path` in grant `grant`; `meta` is what was planned.
    HostFile {
        grant: usize,
        path: String,
        meta: Metadata,
    },
    /// Contents from guest memory (commands, the commit token).
    Inline(Vec<u8>),
    Dir,
    Symlink(String),
}

impl Planned {
    pub fn member(&self) -> Member<'_> {
        let kind = match &self.kind {
            PlannedKind::HostFile { meta, .. } => MemberKind::File { size: meta.size },
            PlannedKind::Inline(b) => MemberKind::File {
                size: b.len() as u64,
            },
            PlannedKind::Dir => MemberKind::Dir,
            PlannedKind::Symlink(t) => MemberKind::Symlink { target: t },
        };
        Member {
            name: &self.name,
            kind,
            mode: self.mode,
            mtime: self.mtime,
        }
    }
}

pub fn missing_or(e: SyncError) -> SyncError {
    match e {
        SyncError::Io(m) if m.contains("not found") => {
            SyncError::InvalidRequest(m.replace("failed to read source", "source"))
        }
        other => other,
    }
}

pub fn mtime(meta: &Metadata) -> u64 {
    u64::try_from(meta.mtime_sec).unwrap_or(0)
}

/// Walks a granted source directory; every directory's member precedes its children.
pub fn plan_dir(
    grant: &GrantedDir,
    k: usize,
    name: &str,
    source: &str,
    exclude: &[String],
    follow: bool,
    out: &mut Vec<Planned>,
) -> Result<(), SyncError> {
    let excluder = Excluder::new(exclude).map_err(from_core)?;
    let top = grant
        .stat_follow("")
        .map_err(|e| missing_or(fs("read source", source, e)))?;
    if top.kind != EntryKind::Directory {
        return Err(SyncError::InvalidRequest(format!(
            "directory mapping source {source} is not a directory"
        )));
    }
    out.push(Planned {
        name: name.to_owned(),
        kind: PlannedKind::Dir,
        mode: top.mode & 0o777,
        mtime: mtime(&top),
    });
    // (relative dir, its ancestors' (device, inode), to refuse cycles when following links)
    let mut stack: Vec<(String, Vec<(u64, u64)>)> =
        vec![(String::new(), vec![(top.device, top.inode)])];
    while let Some((dir, seen)) = stack.pop() {
        let entries = grant
            .read_dir_stat(&dir)
            .map_err(|e| fs("list", &join(source, &dir), e))?;
        let mut subdirs = Vec::new();
        for entry in entries {
            if entry.name.starts_with(SCRATCH_PREFIX) {
                continue;
            }
            let rel = if dir.is_empty() {
                entry.name.clone()
            } else {
                format!("{dir}/{}", entry.name)
            };
            if excluder.matches(&rel) {
                continue;
            }
            let mut meta = entry.metadata;
            if meta.kind == EntryKind::Symlink && follow {
                meta = grant.stat_follow(&rel).map_err(|e| match e {
                    FsError::NotPermitted(m) => SyncError::Confinement(format!(
                        "symlink {} leads outside the source directory and followSymlinks is set: {m}",
                        join(source, &rel)
                    )),
                    other => fs("follow", &join(source, &rel), other),
                })?;
            }
            let kind = match meta.kind {
                EntryKind::File => PlannedKind::HostFile {
                    grant: k,
                    path: rel.clone(),
                    meta: meta.clone(),
                },
                EntryKind::Directory => {
                    if seen.len() >= MAX_DEPTH || seen.contains(&(meta.device, meta.inode)) {
                        return Err(SyncError::InvalidRequest(format!(
                            "directory cycle or nesting deeper than {MAX_DEPTH} at {}",
                            join(source, &rel)
                        )));
                    }
                    let mut s = seen.clone();
                    s.push((meta.device, meta.inode));
                    subdirs.push((rel.clone(), s));
                    PlannedKind::Dir
                }
                EntryKind::Symlink => match meta.link_target.clone() {
                    Some(t) => PlannedKind::Symlink(t),
                    None => {
                        return Err(SyncError::Io(format!(
                            "symlink {} has no target",
                            join(source, &rel)
                        )))
                    }
                },
                // Sockets, FIFOs and devices are not transferred (tar skips sockets too).
                EntryKind::Other => continue,
            };
            let mode = if matches!(kind, PlannedKind::Symlink(_)) {
                0o777
            } else {
                meta.mode & 0o777
            };
            out.push(Planned {
                name: format!("{name}/{rel}"),
                kind,
                mode,
                mtime: mtime(&meta),
            });
        }
        // Reverse so the stack pops subdirectories in name order.
        stack.extend(subdirs.into_iter().rev());
    }
    Ok(())
}

pub fn join(base: &str, rel: &str) -> String {
    if rel.is_empty() {
        base.to_owned()
    } else {
        format!("{}/{rel}", base.trim_end_matches('/'))
    }
}

/// Checks a file mapping before anything moves: the target is not the
/// remote dir itself and the source (the grant's `basename(source)`) is a
/// regular file. Returns the source's grant-relative name and metadata.
///
/// # Errors
/// `invalid-request` for a missing or non-regular source or a root target.
pub fn file_source<'a>(
    grant: &GrantedDir,
    source: &'a str,
    target: &str,
    root: &str,
) -> Result<(&'a str, Metadata), SyncError> {
    if target == root {
        return Err(SyncError::InvalidRequest(format!(
            "file mapping target {target} is the remote dir itself"
        )));
    }
    let (_, base) = sandbox_sync_core::sandbox_path::split_parent(source);
    let meta = grant
        .stat_follow(base)
        .map_err(|e| missing_or(fs("read source", source, e)))?;
    if meta.kind != EntryKind::File {
        return Err(SyncError::InvalidRequest(format!(
            "file mapping source {source} is not a regular file"
        )));
    }
    Ok((base, meta))
}

/// Checks every mapping's requested mode before anything moves (both
/// directions, every provider): permission bits only.
///
/// # Errors
/// `invalid-request` naming the first mapping with other bits.
pub fn check_modes(
    req: &crate::bindings::sandbox_sync::provider::types::SyncRequest,
) -> Result<(), SyncError> {
    for m in req.operations.iter().flat_map(|o| o.files.iter()) {
        sandbox_sync_core::mode::check(m.mode, &m.target_path).map_err(from_core)?;
    }
    Ok(())
}

/// Checks a post-upload command before anything moves: its cwd (default: the
/// remote dir) is confined lexically, and the command has no NUL byte.
/// Returns the normalized cwd.
///
/// # Errors
/// `confinement` for an escaping cwd, `invalid-request` for a NUL.
pub fn command_cwd(root: &str, cwd: Option<&str>, command: &str) -> Result<String, SyncError> {
    let cwd = sandbox_sync_core::sandbox_path::confine(
        root,
        cwd.unwrap_or(root),
        "post-upload command cwd",
    )
    .map_err(from_core)?;
    if command.contains('\0') {
        return Err(SyncError::InvalidRequest(
            "post-upload command contains a NUL byte".into(),
        ));
    }
    Ok(cwd)
}
