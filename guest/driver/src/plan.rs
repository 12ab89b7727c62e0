//! The component's grants as the core planner's [`HostDir`], and the checks
//! every provider runs on a request before anything moves.

use sandbox_sync_core::plan::{Entry, FsError as CoreFsError, FsFailure, HostDir, Kind, Meta};

use crate::bindings::sandbox_sync::provider::host_fs::{EntryKind, FsError, GrantedDir, Metadata};
use crate::bindings::sandbox_sync::provider::types::{SyncError, SyncRequest};

impl From<FsError> for CoreFsError {
    fn from(e: FsError) -> Self {
        let (failure, message) = match e {
            FsError::NotFound(m) => (FsFailure::NotFound, m),
            FsError::AlreadyExists(m) => (FsFailure::AlreadyExists, m),
            FsError::NotPermitted(m) => (FsFailure::NotPermitted, m),
            FsError::InvalidName(m) => (FsFailure::InvalidName, m),
            FsError::NoSpace(m) => (FsFailure::NoSpace, m),
            FsError::Io(m) => (FsFailure::Io, m),
        };
        CoreFsError { failure, message }
    }
}

/// Metadata with the ctime host-fs gives alongside it.
fn meta(m: Metadata, ctime_sec: i64, ctime_nsec: u32) -> Meta {
    Meta {
        ctime_sec,
        ctime_nsec,
        ..m.into()
    }
}

impl From<Metadata> for Meta {
    fn from(m: Metadata) -> Self {
        Meta {
            kind: match m.kind {
                EntryKind::File => Kind::File,
                EntryKind::Directory => Kind::Directory,
                EntryKind::Symlink => Kind::Symlink,
                EntryKind::Other => Kind::Other,
            },
            size: m.size,
            mode: m.mode,
            mtime_sec: m.mtime_sec,
            mtime_nsec: m.mtime_nsec,
            device: m.device,
            inode: m.inode,
            ctime_sec: 0,
            ctime_nsec: 0,
            link_target: m.link_target,
        }
    }
}

/// The planner reads ctimes too: with the device and inode they name what
/// a sync-in sends (see `sandbox_sync_core::incremental`).
impl HostDir for GrantedDir {
    fn stat_follow(&self, path: &str) -> Result<Meta, CoreFsError> {
        let e = GrantedDir::stat_change(self, path, true)?;
        Ok(meta(e.metadata, e.ctime_sec, e.ctime_nsec))
    }

    fn read_dir_stat(&self, path: &str) -> Result<Vec<Entry>, CoreFsError> {
        Ok(GrantedDir::read_dir_change(self, path)?
            .into_iter()
            .map(|e| Entry {
                name: e.name,
                meta: meta(e.metadata, e.ctime_sec, e.ctime_nsec),
            })
            .collect())
    }
}

/// Checks every mapping's requested mode before anything moves (both
/// directions, every provider): permission bits only.
///
/// # Errors
/// `invalid-request` naming the first mapping with other bits.
pub fn check_modes(req: &SyncRequest) -> Result<(), SyncError> {
    for m in req.operations.iter().flat_map(|o| o.files.iter()) {
        sandbox_sync_core::mode::check(m.mode, &m.target_path)?;
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
    )?;
    if command.contains('\0') {
        return Err(SyncError::InvalidRequest(
            "post-upload command contains a NUL byte".into(),
        ));
    }
    Ok(cwd)
}

/// Checks a sync-out's host targets before anything moves: none may be,
/// or lie inside, another mapping's directory target. A directory target
/// lands wholesale (its grant is swapped for the staged tree), so a target
/// inside it would be written through a directory that is gone by then,
/// and the call would fail after the directory landed: half done.
///
/// # Errors
/// `invalid-request` naming the two targets.
pub fn check_out_targets(req: &SyncRequest) -> Result<(), SyncError> {
    use crate::bindings::sandbox_sync::provider::types::MappingKind;
    let all: Vec<_> = req.operations.iter().flat_map(|o| o.files.iter()).collect();
    for (i, m) in all.iter().enumerate() {
        let inside = all.iter().enumerate().find(|&(j, d)| {
            j != i
                && d.kind == MappingKind::Directory
                && lexical(&m.target_path).starts_with(lexical(&d.target_path))
        });
        if let Some((_, d)) = inside {
            return Err(SyncError::InvalidRequest(format!(
                "sync-out target {} is or lies inside the directory target {}, which lands \
                 wholesale: sync the directory alone, or pick targets apart",
                m.target_path, d.target_path
            )));
        }
    }
    Ok(())
}

/// `path` with `.` and `..` resolved lexically (host targets are the
/// orchestrator's absolute paths; symlinks are not followed here).
fn lexical(path: &str) -> std::path::PathBuf {
    let mut out = std::path::PathBuf::new();
    for c in std::path::Path::new(path).components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Whether mapping `k`'s target is, or lies inside, another mapping's
/// (`targets`, one per mapping). A directory mapping replaces what is
/// inside it wholesale when it lands, and two mappings to one path land in
/// order, so an incremental sync must not leave such a file "as it is".
/// Paths with `..` count as inside (they are not resolved here).
pub fn written_by_another<T: AsRef<str>>(targets: &[T], k: usize) -> bool {
    let Some(target) = targets.get(k).map(AsRef::as_ref) else {
        return false;
    };
    let t = std::path::Path::new(target);
    targets
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != k)
        .map(|(_, d)| d.as_ref())
        .any(|d| {
            target.contains("..") || d.contains("..") || t.starts_with(std::path::Path::new(d))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wit_metadata_and_errors_convert_field_for_field() {
        let m: Meta = Metadata {
            kind: EntryKind::Symlink,
            size: 3,
            mode: 0o4755,
            mtime_sec: -1,
            mtime_nsec: 9,
            device: 7,
            inode: 8,
            link_target: Some("t".into()),
        }
        .into();
        assert_eq!(
            (
                m.kind,
                m.size,
                m.mode,
                m.mtime_sec,
                m.mtime_nsec,
                m.device,
                m.inode
            ),
            (Kind::Symlink, 3, 0o4755, -1, 9, 7, 8)
        );
        assert_eq!(m.link_target.as_deref(), Some("t"));
        let e: CoreFsError = FsError::NotFound("x".into()).into();
        assert_eq!((e.failure, e.message.as_str()), (FsFailure::NotFound, "x"));
    }

    #[test]
    fn command_cwds_are_confined_and_commands_nul_free() {
        assert_eq!(command_cwd("/w", None, "true").unwrap(), "/w");
        assert_eq!(command_cwd("/w", Some("/w/a/"), "true").unwrap(), "/w/a");
        assert!(matches!(
            command_cwd("/w", Some("/etc"), "true"),
            Err(SyncError::Confinement(_))
        ));
        assert!(matches!(
            command_cwd("/w", None, "a\0b"),
            Err(SyncError::InvalidRequest(_))
        ));
    }

    #[test]
    fn lexical_paths_resolve_dots() {
        assert_eq!(
            lexical("/a/./b/../c//d"),
            std::path::PathBuf::from("/a/c/d")
        );
        assert!(lexical("/back/../back/x").starts_with(lexical("/back")));
        assert!(!lexical("/backup/x").starts_with(lexical("/back")));
    }

    #[test]
    fn a_file_inside_another_target_is_written_by_another() {
        assert!(written_by_another(&["/ws/a", "/ws/a/x"], 1));
        assert!(written_by_another(&["/ws/a", "/ws/a"], 0));
        assert!(written_by_another(&["/ws//a/./x", "/ws/a/"], 0));
        assert!(!written_by_another(&["/ws/ab", "/ws/a"], 0));
        assert!(!written_by_another(&["/ws/x"], 0));
        assert!(written_by_another(&["/ws/a/../x", "/other"], 0));
        // Its own target does not count, nor does a mapping inside it.
        assert!(!written_by_another(&["/ws/a/x", "/ws/a/x/y"], 0));
    }
}
