//! Host directories granted to the component for one call.
//!
//! A [`GrantedDir`] is a `cap-std` directory capability: every path is
//! resolved beneath it by the kernel (`openat2(RESOLVE_BENEATH)`, or cap-std's
//! component-wise fallback), so neither `..` nor a symlink can lead outside.
//! On top of that, paths must be clean relative paths, and mutations need a
//! writable grant. Inbound sources are granted read-only, outbound targets
//! read-write; `/` is never granted.

use std::io;
use std::path::{Path, PathBuf};

use cap_fs_ext::{DirExt, SystemTimeSpec};
use cap_std::ambient_authority;
use cap_std::fs::{
    Dir, DirBuilder, DirBuilderExt, MetadataExt, OpenOptions, OpenOptionsExt, Permissions,
    PermissionsExt,
};
use sandbox_sync_core::sandbox_path::is_clean_relative;

use crate::bindings::host_fs::{DirEntry, DirEntryStat, EntryKind, FsError, Metadata};
use crate::streams::{FileInputStream, FileOutputStream};

/// A directory capability handed to the component.
pub struct GrantedDir {
    dir: Dir,
    path: PathBuf,
    writable: bool,
}

impl std::fmt::Debug for GrantedDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrantedDir")
            .field("path", &self.path)
            .field("writable", &self.writable)
            .finish()
    }
}

impl GrantedDir {
    /// Opens `path` as a grant.
    ///
    /// # Ambient Authority
    /// This is the one place the shim uses ambient authority: it opens the
    /// directory a request names. Everything after goes through the handle.
    ///
    /// # Errors
    /// When `path` is `/`, not absolute, or cannot be opened as a directory.
    pub fn open(path: &Path, writable: bool) -> io::Result<Self> {
        if !path.is_absolute() || path.parent().is_none() {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("refusing to grant {}", path.display()),
            ));
        }
        let dir = Dir::open_ambient_dir(path, ambient_authority())?;
        Ok(GrantedDir {
            dir,
            path: path.to_path_buf(),
            writable,
        })
    }

    /// The host path this grant was opened from (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// True when the grant allows writes.
    pub fn writable(&self) -> bool {
        self.writable
    }

    fn rel<'a>(&self, path: &'a str) -> Result<&'a Path, FsError> {
        if path.is_empty() || path == "." {
            return Ok(Path::new("."));
        }
        if !is_clean_relative(path) {
            return Err(FsError::NotPermitted(format!(
                "{path:?} is not a clean relative path"
            )));
        }
        Ok(Path::new(path))
    }

    fn write_rel<'a>(&self, path: &'a str) -> Result<&'a Path, FsError> {
        if !self.writable {
            return Err(FsError::NotPermitted(format!(
                "{} is granted read-only",
                self.path.display()
            )));
        }
        self.rel(path)
    }

    /// `lstat` beneath the grant.
    pub fn stat(&self, path: &str) -> Result<Metadata, FsError> {
        let p = self.rel(path)?;
        let meta = if p == Path::new(".") {
            self.dir.dir_metadata()
        } else {
            self.dir.symlink_metadata(p)
        };
        let meta = meta.map_err(|e| fs_error(path, &e))?;
        let link_target = link_target(&self.dir, p, &meta, path)?;
        Ok(to_metadata(&meta, link_target))
    }

    /// `stat` beneath the grant, following symlinks only while they stay inside.
    pub fn stat_follow(&self, path: &str) -> Result<Metadata, FsError> {
        let p = self.rel(path)?;
        let meta = if p == Path::new(".") {
            self.dir.dir_metadata()
        } else {
            self.dir.metadata(p)
        };
        meta.map(|m| to_metadata(&m, None))
            .map_err(|e| fs_error(path, &e))
    }

    /// An entry name of directory `dir` as a string (WIT names are UTF-8).
    fn entry_name(&self, dir: &Path, name: std::ffi::OsString) -> Result<String, FsError> {
        name.into_string().map_err(|n| {
            FsError::InvalidName(format!(
                "{n:?} in {} is not UTF-8",
                self.path.join(dir).display()
            ))
        })
    }

    /// Directory entries sorted by name.
    pub fn read_dir(&self, path: &str) -> Result<Vec<DirEntry>, FsError> {
        let p = self.rel(path)?;
        let mut out = Vec::new();
        for entry in self.dir.read_dir(p).map_err(|e| fs_error(path, &e))? {
            let entry = entry.map_err(|e| fs_error(path, &e))?;
            let name = self.entry_name(p, entry.file_name())?;
            let ft = entry.file_type().map_err(|e| fs_error(&name, &e))?;
            out.push(DirEntry {
                name,
                kind: kind_of(ft),
            });
        }
        out.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
        Ok(out)
    }

    /// Directory entries with their `lstat` metadata, sorted by name. The
    /// directory is opened once and each entry is stat'ed relative to it.
    pub fn read_dir_stat(&self, path: &str) -> Result<Vec<DirEntryStat>, FsError> {
        let p = self.rel(path)?;
        let dir = if p == Path::new(".") {
            self.dir.try_clone()
        } else {
            self.dir.open_dir(p)
        }
        .map_err(|e| fs_error(path, &e))?;
        let mut out = Vec::new();
        for entry in dir.entries().map_err(|e| fs_error(path, &e))? {
            let entry = entry.map_err(|e| fs_error(path, &e))?;
            let name = self.entry_name(p, entry.file_name())?;
            let meta = entry.metadata().map_err(|e| fs_error(&name, &e))?;
            let link_target = link_target(&dir, Path::new(&name), &meta, &name)?;
            out.push(DirEntryStat {
                metadata: to_metadata(&meta, link_target),
                name,
            });
        }
        out.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
        Ok(out)
    }

    /// Opens a regular file for reading.
    pub fn open_file(&self, path: &str) -> Result<std::fs::File, FsError> {
        let p = self.rel(path)?;
        let mut opts = OpenOptions::new();
        // A FIFO swapped in after planning must not block the open (it is
        // refused below); regular files ignore O_NONBLOCK.
        opts.read(true)
            .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32);
        let file = self
            .dir
            .open_with(p, &opts)
            .map_err(|e| fs_error(path, &e))?;
        let meta = file.metadata().map_err(|e| fs_error(path, &e))?;
        if !meta.is_file() {
            return Err(FsError::Io(format!("{path} is not a regular file")));
        }
        Ok(file.into_std())
    }

    /// Opens a regular file for reading as a stream.
    pub fn open_read(&self, path: &str) -> Result<FileInputStream, FsError> {
        self.open_file(path).map(FileInputStream::new)
    }

    /// Creates a new file born with exactly `mode` (umask does not apply).
    pub fn create_exclusive(&self, path: &str, mode: u32) -> Result<FileOutputStream, FsError> {
        let p = self.write_rel(path)?;
        let mut opts = OpenOptions::new();
        opts.write(true).create_new(true).mode(mode & 0o600);
        let file = self
            .dir
            .open_with(p, &opts)
            .map_err(|e| fs_error(path, &e))?;
        // Born at most 0600, widened before any byte is written: never a wider window.
        file.set_permissions(Permissions::from_mode(mode & 0o777))
            .map_err(|e| fs_error(path, &e))?;
        Ok(FileOutputStream::new(file.into_std()))
    }

    /// Creates a directory with exactly `mode`.
    pub fn mkdir(&self, path: &str, mode: u32) -> Result<(), FsError> {
        let p = self.write_rel(path)?;
        let mut b = DirBuilder::new();
        b.mode(mode & 0o700);
        self.dir
            .create_dir_with(p, &b)
            .map_err(|e| fs_error(path, &e))?;
        self.dir
            .set_permissions(p, Permissions::from_mode(mode & 0o777))
            .map_err(|e| fs_error(path, &e))
    }

    /// Creates a symlink at `path` pointing at `target`.
    pub fn symlink(&self, target: &str, path: &str) -> Result<(), FsError> {
        let p = self.write_rel(path)?;
        self.dir.symlink(target, p).map_err(|e| fs_error(path, &e))
    }

    /// Creates a hard link at `path` to `existing`.
    pub fn hard_link(&self, existing: &str, path: &str) -> Result<(), FsError> {
        let src = self.write_rel(existing)?;
        let p = self.write_rel(path)?;
        self.dir
            .hard_link(src, &self.dir, p)
            .map_err(|e| fs_error(path, &e))
    }

    /// Renames `src` onto `dst`.
    pub fn rename(&self, src: &str, dst: &str) -> Result<(), FsError> {
        let s = self.write_rel(src)?;
        let d = self.write_rel(dst)?;
        self.dir
            .rename(s, &self.dir, d)
            .map_err(|e| fs_error(dst, &e))
    }

    /// Sets permission bits; refuses symlinks.
    pub fn set_mode(&self, path: &str, mode: u32) -> Result<(), FsError> {
        let p = self.write_rel(path)?;
        if p != Path::new(".") {
            let meta = self
                .dir
                .symlink_metadata(p)
                .map_err(|e| fs_error(path, &e))?;
            if meta.file_type().is_symlink() {
                return Err(FsError::NotPermitted(format!("{path} is a symlink")));
            }
        }
        self.dir
            .set_permissions(p, Permissions::from_mode(mode & 0o7777))
            .map_err(|e| fs_error(path, &e))
    }

    /// Sets the modification time without following a final symlink.
    pub fn set_mtime(&self, path: &str, sec: i64, nsec: u32) -> Result<(), FsError> {
        let p = self.write_rel(path)?;
        let when = std::time::UNIX_EPOCH
            + std::time::Duration::new(u64::try_from(sec).unwrap_or(0), nsec.min(999_999_999));
        let when = SystemTimeSpec::Absolute(cap_std::time::SystemTime::from_std(when));
        self.dir
            .set_symlink_times(p, None, Some(when))
            .map_err(|e| fs_error(path, &e))
    }

    /// Removes a file, symlink or whole directory tree, never following links.
    pub fn remove(&self, path: &str) -> Result<(), FsError> {
        let p = self.write_rel(path)?;
        if p == Path::new(".") {
            return Err(FsError::NotPermitted(
                "refusing to remove the granted directory itself".into(),
            ));
        }
        let meta = self
            .dir
            .symlink_metadata(p)
            .map_err(|e| fs_error(path, &e))?;
        if meta.is_dir() {
            self.dir.remove_dir_all(p)
        } else {
            self.dir.remove_file(p)
        }
        .map_err(|e| fs_error(path, &e))
    }

    /// Flushes a file or directory to stable storage.
    pub fn sync(&self, path: &str) -> Result<(), FsError> {
        let p = self.rel(path)?;
        let f = if p == Path::new(".") {
            self.dir.try_clone().map(|d| d.into_std_file())
        } else {
            self.dir.open(p).map(|f| f.into_std())
        };
        f.and_then(|f| f.sync_all()).map_err(|e| fs_error(path, &e))
    }
}

fn kind_of(ft: cap_std::fs::FileType) -> EntryKind {
    if ft.is_symlink() {
        EntryKind::Symlink
    } else if ft.is_dir() {
        EntryKind::Directory
    } else if ft.is_file() {
        EntryKind::File
    } else {
        EntryKind::Other
    }
}

fn to_metadata(m: &cap_std::fs::Metadata, link_target: Option<String>) -> Metadata {
    Metadata {
        kind: kind_of(m.file_type()),
        size: m.len(),
        mode: m.mode() & 0o7777,
        mtime_sec: m.mtime(),
        mtime_nsec: u32::try_from(m.mtime_nsec()).unwrap_or(0),
        device: m.dev(),
        inode: m.ino(),
        link_target,
    }
}

/// The target of `path` in `dir` when `meta` says it is a symlink.
fn link_target(
    dir: &Dir,
    path: &Path,
    meta: &cap_std::fs::Metadata,
    shown: &str,
) -> Result<Option<String>, FsError> {
    if !meta.file_type().is_symlink() {
        return Ok(None);
    }
    let t = dir
        .read_link_contents(path)
        .map_err(|e| fs_error(shown, &e))?;
    t.into_os_string()
        .into_string()
        .map(Some)
        .map_err(|t| FsError::InvalidName(format!("link target {t:?} is not UTF-8")))
}

fn fs_error(path: &str, e: &io::Error) -> FsError {
    let m = format!("{path}: {e}");
    match e.kind() {
        io::ErrorKind::NotFound => FsError::NotFound(m),
        io::ErrorKind::AlreadyExists => FsError::AlreadyExists(m),
        io::ErrorKind::PermissionDenied => FsError::NotPermitted(m),
        io::ErrorKind::StorageFull => FsError::NoSpace(m),
        _ if e.raw_os_error() == Some(rustix::io::Errno::XDEV.raw_os_error())
            || e.to_string().contains("outside of the filesystem") =>
        {
            FsError::NotPermitted(m)
        }
        _ => FsError::Io(m),
    }
}
