//! Host directories granted to the component for one call.
//!
//! A [`GrantedDir`] is a `cap-std` directory capability: every path is
//! resolved beneath it by the kernel (`openat2(RESOLVE_BENEATH)`, or cap-std's
//! component-wise fallback), so neither `..` nor a symlink can lead outside.
//! On top of that, paths must be clean relative paths, and mutations need a
//! writable grant. Inbound sources are granted read-only, outbound targets
//! read-write; `/` is never granted.
//!
//! Two deliberate exceptions, both chosen by the host, never the component:
//! - a read-only grant made for `tar -h` ([`GrantedDir::read_only`] with
//!   `follow_links`) dereferences symlinks wherever they lead, as the
//!   orchestrator's own `tar -h` would (its host paths are its own);
//! - a writable grant also holds its parent directory, so that
//!   [`GrantedDir::replace_with`] can swap a fully built tree in for the
//!   grant with one `renameat2(RENAME_EXCHANGE)`.
//!
//! Scratch entries the component creates at the grant's top level (the
//! reserved `.paperclip-upload` prefix) are recorded and removed when the
//! grant is dropped, so a trap or a deadline never leaves a staging tree.

use std::borrow::Cow;
use std::ffi::OsString;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use cap_fs_ext::{DirExt, SystemTimeSpec};
use cap_std::ambient_authority;
use cap_std::fs::{
    Dir, DirBuilder, DirBuilderExt, MetadataExt, OpenOptions, OpenOptionsExt, Permissions,
    PermissionsExt,
};
use rustix::fs::{AtFlags, Mode, OFlags};
use sandbox_sync_core::byte_name;
use sandbox_sync_core::sandbox_path::is_clean_relative;
use sandbox_sync_core::SCRATCH_PREFIX;

mod replace;
pub(crate) mod streams;
mod types;
mod write;

pub use types::{
    DirEntry, DirEntryChange, DirEntryStat, DirEntryTimes, EntryKind, Error, Metadata,
};

pub use write::{Chunks, FillError, NewFile};

use streams::{FileInputStream, FileOutputStream};

/// A directory capability handed to the component.
pub struct GrantedDir {
    dir: Dir,
    path: PathBuf,
    access: Access,
    /// Scratch entries created at the top level: (name, device, inode).
    scratch: Mutex<Vec<(String, u64, u64)>>,
    /// Names that are not UTF-8 travel encoded (the component asked).
    byte_names: AtomicBool,
}

enum Access {
    ReadOnly {
        /// Dereference symlinks wherever they lead (`tar -h`).
        follow_links: bool,
    },
    ReadWrite {
        /// The directory holding the grant, and the grant's name in it;
        /// `None` when it cannot be opened (then no replace).
        parent: Option<(Dir, OsString)>,
    },
}

/// Makes host-side scratch names unique within this process.
static NEXT_SCRATCH: AtomicU64 = AtomicU64::new(0);

fn host_scratch_name(what: &str) -> String {
    format!(
        "{SCRATCH_PREFIX}-{what}-{}-{}",
        std::process::id(),
        NEXT_SCRATCH.fetch_add(1, Ordering::Relaxed)
    )
}

impl std::fmt::Debug for GrantedDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrantedDir")
            .field("path", &self.path)
            .field("writable", &self.writable())
            .finish()
    }
}

impl GrantedDir {
    /// Opens `path` as a read-only grant. With `follow_links`, symlinks
    /// beneath it are dereferenced wherever they lead (`tar -h`).
    ///
    /// # Ambient Authority
    /// This and [`GrantedDir::read_write`] are the only places the shim uses
    /// ambient authority: they open the directory a request names.
    ///
    /// # Errors
    /// When `path` is `/`, not absolute, or cannot be opened as a directory.
    pub fn read_only(path: &Path, follow_links: bool) -> io::Result<Self> {
        Self::open(path, Access::ReadOnly { follow_links })
    }

    /// Opens `path` as a writable grant, with its parent directory for
    /// [`GrantedDir::replace_with`].
    ///
    /// # Errors
    /// As [`GrantedDir::read_only`].
    pub fn read_write(path: &Path) -> io::Result<Self> {
        let parent = match (path.parent(), path.file_name()) {
            (Some(p), Some(name)) => Dir::open_ambient_dir(p, ambient_authority())
                .ok()
                .map(|d| (d, name.to_owned())),
            _ => None,
        };
        Self::open(path, Access::ReadWrite { parent })
    }

    fn open(path: &Path, access: Access) -> io::Result<Self> {
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
            access,
            scratch: Mutex::new(Vec::new()),
            byte_names: AtomicBool::new(false),
        })
    }

    /// The host path this grant was opened from (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The granted directory's (device, inode).
    ///
    /// # Errors
    /// Its `fstat` failed.
    pub fn identity(&self) -> io::Result<(u64, u64)> {
        let m = self.dir.dir_metadata()?;
        Ok((m.dev(), m.ino()))
    }

    /// True when the grant allows writes.
    pub fn writable(&self) -> bool {
        matches!(self.access, Access::ReadWrite { .. })
    }

    /// True when symlinks are dereferenced wherever they lead.
    fn follows_links(&self) -> bool {
        matches!(self.access, Access::ReadOnly { follow_links: true })
    }

    /// Records `path` for removal on drop when it is a scratch name at the
    /// top level of the grant.
    fn note_scratch(&self, path: &str) {
        if path.contains('/') || !path.starts_with(SCRATCH_PREFIX) {
            return;
        }
        if let Ok(m) = self.dir.symlink_metadata(path) {
            if let Ok(mut list) = self.scratch.lock() {
                list.push((path.to_owned(), m.dev(), m.ino()));
            }
        }
    }

    fn rel<'a>(&self, path: &'a str) -> Result<Cow<'a, Path>, Error> {
        if path.is_empty() || path == "." {
            return Ok(Cow::Borrowed(Path::new(".")));
        }
        if self.byte_names() && byte_name::has_encoded(path) {
            // Each component clean, encoded ones well formed (so none
            // decodes to `.`, `..`, `/`, NUL or nothing).
            return byte_name::is_clean_relative(path)
                .then(|| os_path(path))
                .flatten()
                .ok_or_else(|| {
                    Error::InvalidName(format!("{path:?} is not a clean relative path"))
                });
        }
        if !is_clean_relative(path) {
            return Err(Error::NotPermitted(format!(
                "{path:?} is not a clean relative path"
            )));
        }
        Ok(Cow::Borrowed(Path::new(path)))
    }

    fn write_rel<'a>(&self, path: &'a str) -> Result<Cow<'a, Path>, Error> {
        if !self.writable() {
            return Err(Error::NotPermitted(format!(
                "{} is granted read-only",
                self.path.display()
            )));
        }
        self.rel(path)
    }

    /// Whether names that are not UTF-8 are handed over encoded (see
    /// [`GrantedDir::allow_byte_names`]).
    fn byte_names(&self) -> bool {
        self.byte_names.load(Ordering::Relaxed)
    }

    /// From now on, hands over each name component that is not UTF-8 as
    /// [`byte_name::encode_component`] spells it, and takes such paths
    /// back (`granted-dir.byte-names`, WIT 0.2.9).
    pub fn allow_byte_names(&self) {
        self.byte_names.store(true, Ordering::Relaxed);
    }

    /// `lstat` beneath the grant.
    pub fn stat(&self, path: &str) -> Result<Metadata, Error> {
        Ok(self.stat_times(path)?.metadata)
    }

    /// [`Self::stat`] with the ctime, named for the path's last component.
    pub fn stat_times(&self, path: &str) -> Result<DirEntryTimes, Error> {
        let p = self.rel(path)?;
        let p: &Path = &p;
        let meta = if p == Path::new(".") {
            self.dir.dir_metadata()
        } else {
            self.dir.symlink_metadata(p)
        };
        let meta = meta.map_err(|e| fs_error(path, &e))?;
        let link_target = link_target(&self.dir, p, &meta, path, self.byte_names())?;
        Ok(DirEntryTimes {
            name: path.rsplit('/').next().unwrap_or(path).to_owned(),
            ctime_sec: meta.ctime(),
            metadata: to_metadata(&meta, link_target),
        })
    }

    /// [`Self::stat`], or [`Self::stat_follow`] with `follow`, with the
    /// ctime to the nanosecond, named for the path's last component.
    pub fn stat_change(&self, path: &str, follow: bool) -> Result<DirEntryChange, Error> {
        let name = path.rsplit('/').next().unwrap_or(path).to_owned();
        let p = self.rel(path)?;
        let p: &Path = &p;
        if follow && self.follows_links() {
            let st = rustix::fs::statat(&self.dir, p, AtFlags::empty())
                .map_err(|e| fs_error(path, &e.into()))?;
            return Ok(DirEntryChange {
                name,
                metadata: stat_metadata(&st),
                ctime_sec: st.st_ctime,
                ctime_nsec: u32::try_from(st.st_ctime_nsec).unwrap_or(0),
            });
        }
        let meta = if p == Path::new(".") {
            self.dir.dir_metadata()
        } else if follow {
            self.dir.metadata(p)
        } else {
            self.dir.symlink_metadata(p)
        }
        .map_err(|e| fs_error(path, &e))?;
        let link_target = link_target(&self.dir, p, &meta, path, self.byte_names())?;
        Ok(DirEntryChange {
            name,
            ctime_sec: meta.ctime(),
            ctime_nsec: u32::try_from(meta.ctime_nsec()).unwrap_or(0),
            metadata: to_metadata(&meta, link_target),
        })
    }

    /// `stat` beneath the grant, following symlinks only while they stay
    /// inside (or wherever they lead, for a `tar -h` grant).
    pub fn stat_follow(&self, path: &str) -> Result<Metadata, Error> {
        let p = self.rel(path)?;
        let p: &Path = &p;
        if self.follows_links() {
            let st = rustix::fs::statat(&self.dir, p, AtFlags::empty())
                .map_err(|e| fs_error(path, &e.into()))?;
            return Ok(stat_metadata(&st));
        }
        let meta = if p == Path::new(".") {
            self.dir.dir_metadata()
        } else {
            self.dir.metadata(p)
        };
        meta.map(|m| to_metadata(&m, None))
            .map_err(|e| fs_error(path, &e))
    }

    /// An entry name of directory `dir` as a string (WIT names are UTF-8;
    /// others encoded where the component asked, else refused).
    fn entry_name(&self, dir: &Path, name: OsString) -> Result<String, Error> {
        name.into_string().or_else(|n| {
            if self.byte_names() {
                return Ok(byte_name::encode_component(n.as_bytes()).into_owned());
            }
            Err(Error::InvalidName(format!(
                "{n:?} in {} is not UTF-8",
                self.path.join(dir).display()
            )))
        })
    }

    /// Directory entries sorted by name.
    pub fn read_dir(&self, path: &str) -> Result<Vec<DirEntry>, Error> {
        let p = self.rel(path)?;
        let p: &Path = &p;
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
    pub fn read_dir_stat(&self, path: &str) -> Result<Vec<DirEntryStat>, Error> {
        Ok(self
            .read_dir_times(path)?
            .into_iter()
            .map(|e| DirEntryStat {
                name: e.name,
                metadata: e.metadata,
            })
            .collect())
    }

    /// [`Self::read_dir_stat`] with each entry's ctime in seconds.
    pub fn read_dir_times(&self, path: &str) -> Result<Vec<DirEntryTimes>, Error> {
        Ok(self
            .read_dir_change(path)?
            .into_iter()
            .map(|e| DirEntryTimes {
                name: e.name,
                metadata: e.metadata,
                ctime_sec: e.ctime_sec,
            })
            .collect())
    }

    /// [`Self::read_dir_stat`] with each entry's ctime to the nanosecond.
    pub fn read_dir_change(&self, path: &str) -> Result<Vec<DirEntryChange>, Error> {
        let p = self.rel(path)?;
        let p: &Path = &p;
        let dir = if p == Path::new(".") {
            self.dir.try_clone()
        } else if self.follows_links() {
            self.open_followed(p, OFlags::DIRECTORY)
                .map(|fd| Dir::from_std_file(std::fs::File::from(fd)))
        } else {
            self.dir.open_dir(p)
        }
        .map_err(|e| fs_error(path, &e))?;
        let mut out = Vec::new();
        for entry in dir.entries().map_err(|e| fs_error(path, &e))? {
            let entry = entry.map_err(|e| fs_error(path, &e))?;
            let raw = entry.file_name();
            let name = self.entry_name(p, raw.clone())?;
            let meta = entry.metadata().map_err(|e| fs_error(&name, &e))?;
            let link_target = link_target(&dir, Path::new(&raw), &meta, &name, self.byte_names())?;
            out.push(DirEntryChange {
                ctime_sec: meta.ctime(),
                ctime_nsec: u32::try_from(meta.ctime_nsec()).unwrap_or(0),
                metadata: to_metadata(&meta, link_target),
                name,
            });
        }
        out.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
        Ok(out)
    }

    /// Opens a regular file for reading.
    pub fn open_file(&self, path: &str) -> Result<std::fs::File, Error> {
        let p = self.rel(path)?;
        let p: &Path = &p;
        let mut opts = OpenOptions::new();
        // A FIFO swapped in after planning must not block the open (it is
        // refused below); regular files ignore O_NONBLOCK.
        opts.read(true)
            .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32);
        let file = if self.follows_links() {
            self.open_followed(p, OFlags::NONBLOCK)
                .map(std::fs::File::from)
        } else {
            self.dir
                .open_with(p, &opts)
                .map(cap_std::fs::File::into_std)
        }
        .map_err(|e| fs_error(path, &e))?;
        let meta = file.metadata().map_err(|e| fs_error(path, &e))?;
        if !meta.is_file() {
            return Err(Error::Io(format!("{path} is not a regular file")));
        }
        Ok(file)
    }

    /// `openat` relative to the grant with symlinks followed wherever they
    /// lead: for `tar -h` grants only (read-only; `..` was refused by `rel`).
    fn open_followed(&self, p: &Path, flags: OFlags) -> io::Result<std::os::fd::OwnedFd> {
        Ok(rustix::fs::openat(
            &self.dir,
            p,
            flags | OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )?)
    }

    /// Opens a regular file for reading as a stream.
    pub fn open_read(&self, path: &str) -> Result<FileInputStream, Error> {
        self.open_file(path).map(FileInputStream::new)
    }

    /// The MD5 digest of the file [`GrantedDir::open_read`] opens at
    /// `path`, read whole (`granted-dir.digest`).
    pub fn digest(&self, path: &str) -> Result<[u8; 16], Error> {
        use md5::Digest as _;
        use std::io::Read as _;
        let mut file = self.open_file(path)?;
        let mut hasher = md5::Md5::new();
        let mut buf = vec![0u8; 1 << 20];
        loop {
            match file.read(&mut buf) {
                Ok(0) => return Ok(hasher.finalize().into()),
                Ok(n) => hasher.update(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(fs_error(path, &e)),
            }
        }
    }

    /// Creates a new file born with exactly `mode` (umask does not apply).
    pub fn create_exclusive(&self, path: &str, mode: u32) -> Result<FileOutputStream, Error> {
        self.create_file(path, mode).map(FileOutputStream::new)
    }

    /// Creates a new file with exactly `mode`, to be filled by
    /// [`NewFile::fill`] (`write-file`).
    pub fn new_file(&self, path: &str, mode: u32) -> Result<NewFile, Error> {
        self.create_file(path, mode).map(|f| NewFile::new(f, path))
    }

    /// Creates a new file with exactly `mode` (see [`GrantedDir::create_exclusive`]).
    fn create_file(&self, path: &str, mode: u32) -> Result<std::fs::File, Error> {
        let p = self.write_rel(path)?;
        let p: &Path = &p;
        let mut opts = OpenOptions::new();
        opts.write(true).create_new(true).mode(mode & 0o600);
        let file = self
            .dir
            .open_with(p, &opts)
            .map_err(|e| fs_error(path, &e))?;
        self.note_scratch(path);
        // Born at most 0600, widened before any byte is written: never a wider window.
        file.set_permissions(Permissions::from_mode(mode & 0o777))
            .map_err(|e| fs_error(path, &e))?;
        Ok(file.into_std())
    }

    /// Creates a directory with exactly `mode`.
    pub fn mkdir(&self, path: &str, mode: u32) -> Result<(), Error> {
        let p = self.write_rel(path)?;
        let p: &Path = &p;
        let mut b = DirBuilder::new();
        b.mode(mode & 0o700);
        self.dir
            .create_dir_with(p, &b)
            .map_err(|e| fs_error(path, &e))?;
        self.note_scratch(path);
        self.dir
            .set_permissions(p, Permissions::from_mode(mode & 0o777))
            .map_err(|e| fs_error(path, &e))
    }

    /// Creates a symlink at `path` pointing at `target`.
    pub fn symlink(&self, target: &str, path: &str) -> Result<(), Error> {
        let p = self.write_rel(path)?;
        let p: &Path = &p;
        let target = if self.byte_names() {
            os_path(target).ok_or_else(|| {
                Error::InvalidName(format!("link target {target:?} is not well formed"))
            })?
        } else {
            Cow::Borrowed(Path::new(target))
        };
        self.dir
            .symlink(&*target, p)
            .map_err(|e| fs_error(path, &e))
    }

    /// Creates a hard link at `path` to `existing`.
    pub fn hard_link(&self, existing: &str, path: &str) -> Result<(), Error> {
        let src = self.write_rel(existing)?;
        let src: &Path = &src;
        let p = self.write_rel(path)?;
        let p: &Path = &p;
        self.dir
            .hard_link(src, &self.dir, p)
            .map_err(|e| fs_error(path, &e))
    }

    /// Hard-links `src/<name>` to `dst/<name>` for each of `names` (single
    /// components): both directories are opened once (never through a
    /// final symlink) and each link is one `linkat`, which links a final
    /// symlink itself. Stops at the first failure; returns the count made.
    pub fn link_files(&self, src: &str, dst: &str, names: &[String]) -> Result<u32, Error> {
        let open = |path: &str| {
            let p = self.write_rel(path)?;
            let p: &Path = &p;
            if p == Path::new(".") {
                self.dir.try_clone()
            } else {
                self.dir.open_dir_nofollow(p)
            }
            .map_err(|e| fs_error(path, &e))
        };
        let (from, to) = (open(src)?, open(dst)?);
        let mut made = 0u32;
        for name in names {
            let shown = || format!("{dst}/{name}");
            // One clean component: no `/`, not `.`, `..` or empty, no NUL
            // (an encoded one well formed).
            let raw = if name.contains('/') {
                None
            } else if self.byte_names() && byte_name::has_encoded(name) {
                byte_name::decode_component(name)
            } else {
                is_clean_relative(name).then_some(Cow::Borrowed(name.as_bytes()))
            };
            let Some(raw) = raw else {
                return Err(Error::InvalidName(format!(
                    "{name:?} is not one path component"
                )));
            };
            let raw = std::ffi::OsStr::from_bytes(&raw);
            rustix::fs::linkat(&from, raw, &to, raw, AtFlags::empty())
                .map_err(|e| fs_error(&shown(), &std::io::Error::from(e)))?;
            made = made.saturating_add(1);
        }
        Ok(made)
    }

    /// Renames `src` onto `dst`.
    pub fn rename(&self, src: &str, dst: &str) -> Result<(), Error> {
        let s = self.write_rel(src)?;
        let s: &Path = &s;
        let d = self.write_rel(dst)?;
        let d: &Path = &d;
        self.dir
            .rename(s, &self.dir, d)
            .map_err(|e| fs_error(dst, &e))
    }

    /// Sets permission bits; refuses symlinks.
    pub fn set_mode(&self, path: &str, mode: u32) -> Result<(), Error> {
        let p = self.write_rel(path)?;
        let p: &Path = &p;
        if p != Path::new(".") {
            let meta = self
                .dir
                .symlink_metadata(p)
                .map_err(|e| fs_error(path, &e))?;
            if meta.file_type().is_symlink() {
                return Err(Error::NotPermitted(format!("{path} is a symlink")));
            }
        }
        self.dir
            .set_permissions(p, Permissions::from_mode(mode & 0o7777))
            .map_err(|e| fs_error(path, &e))
    }

    /// Sets the modification time without following a final symlink.
    pub fn set_mtime(&self, path: &str, sec: i64, nsec: u32) -> Result<(), Error> {
        let p = self.write_rel(path)?;
        let p: &Path = &p;
        let when = std::time::UNIX_EPOCH
            + std::time::Duration::new(u64::try_from(sec).unwrap_or(0), nsec.min(999_999_999));
        let when = SystemTimeSpec::Absolute(cap_std::time::SystemTime::from_std(when));
        self.dir
            .set_symlink_times(p, None, Some(when))
            .map_err(|e| fs_error(path, &e))
    }

    /// Removes a file, symlink or whole directory tree, never following links.
    pub fn remove(&self, path: &str) -> Result<(), Error> {
        let p = self.write_rel(path)?;
        let p: &Path = &p;
        if p == Path::new(".") {
            return Err(Error::NotPermitted(
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
    pub fn sync(&self, path: &str) -> Result<(), Error> {
        let p = self.rel(path)?;
        let p: &Path = &p;
        let f = if p == Path::new(".") {
            self.dir.try_clone().map(|d| d.into_std_file())
        } else {
            self.dir.open(p).map(|f| f.into_std())
        };
        f.and_then(|f| f.sync_all()).map_err(|e| fs_error(path, &e))
    }

    /// Replaces the grant, all at once, with `staged`, a directory the
    /// component built at its top level: see [`replace`].
    pub fn replace_with(&mut self, staged: &str) -> Result<(), Error> {
        let p = self.write_rel(staged)?;
        let p: &Path = &p;
        if staged.contains('/') || !staged.starts_with(SCRATCH_PREFIX) {
            return Err(Error::NotPermitted(format!(
                "{staged:?} is not a scratch directory at the top of the grant"
            )));
        }
        let Access::ReadWrite { parent } = &self.access else {
            return Err(Error::NotPermitted("the grant is read-only".into()));
        };
        let parent = parent.as_ref().ok_or_else(|| {
            Error::NotPermitted(format!(
                "the directory holding {} cannot be opened",
                self.path.display()
            ))
        })?;
        let new = replace::replace(&self.dir, p, parent, &self.path)?;
        self.dir = new;
        Ok(())
    }
}

impl Drop for GrantedDir {
    /// Removes the scratch entries the component created and left behind
    /// (a trap, a deadline or a failure ended the call first); only the
    /// very entries it created, checked by device and inode.
    fn drop(&mut self) {
        let created = match self.scratch.get_mut() {
            Ok(list) => std::mem::take(list),
            Err(poisoned) => std::mem::take(poisoned.into_inner()),
        };
        for (name, dev, ino) in created {
            if let Ok(m) = self.dir.symlink_metadata(&name) {
                if (m.dev(), m.ino()) == (dev, ino) {
                    let gone = if m.is_dir() {
                        self.dir.remove_dir_all(&name)
                    } else {
                        self.dir.remove_file(&name)
                    };
                    if let Err(e) = gone {
                        tracing::warn!(
                            "could not remove scratch {}: {e}",
                            self.path.join(&name).display()
                        );
                    }
                }
            }
        }
    }
}

/// Metadata from a raw `stat` (the `tar -h` paths use rustix directly).
fn stat_metadata(st: &rustix::fs::Stat) -> Metadata {
    let ft = rustix::fs::FileType::from_raw_mode(st.st_mode);
    Metadata {
        kind: match ft {
            rustix::fs::FileType::Symlink => EntryKind::Symlink,
            rustix::fs::FileType::Directory => EntryKind::Directory,
            rustix::fs::FileType::RegularFile => EntryKind::File,
            _ => EntryKind::Other,
        },
        size: u64::try_from(st.st_size).unwrap_or(0),
        mode: st.st_mode & 0o7777,
        mtime_sec: st.st_mtime,
        mtime_nsec: u32::try_from(st.st_mtime_nsec).unwrap_or(0),
        device: st.st_dev,
        inode: st.st_ino,
        link_target: None,
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

/// The host path a component's `path` names, its spelled-out components
/// (see [`byte_name`]) as their bytes; `None` if one is malformed.
fn os_path(path: &str) -> Option<Cow<'_, Path>> {
    Some(match byte_name::decode_path(path)? {
        Cow::Borrowed(b) => Cow::Borrowed(Path::new(std::ffi::OsStr::from_bytes(b))),
        Cow::Owned(b) => Cow::Owned(PathBuf::from(OsString::from_vec(b))),
    })
}

/// The target of `path` in `dir` when `meta` says it is a symlink.
fn link_target(
    dir: &Dir,
    path: &Path,
    meta: &cap_std::fs::Metadata,
    shown: &str,
    byte_names: bool,
) -> Result<Option<String>, Error> {
    if !meta.file_type().is_symlink() {
        return Ok(None);
    }
    let t = dir
        .read_link_contents(path)
        .map_err(|e| fs_error(shown, &e))?;
    t.into_os_string().into_string().map(Some).or_else(|t| {
        if byte_names {
            return Ok(Some(byte_name::encode_path(t.as_bytes()).into_owned()));
        }
        Err(Error::InvalidName(format!(
            "link target {t:?} is not UTF-8"
        )))
    })
}

fn fs_error(path: &str, e: &io::Error) -> Error {
    let m = format!("{path}: {e}");
    match e.kind() {
        io::ErrorKind::NotFound => Error::NotFound(m),
        io::ErrorKind::AlreadyExists => Error::AlreadyExists(m),
        io::ErrorKind::PermissionDenied => Error::NotPermitted(m),
        io::ErrorKind::StorageFull => Error::NoSpace(m),
        // cap-std reports an escape as PermissionDenied (above); openat2's
        // RESOLVE_BENEATH reports one as EXDEV.
        _ if e.raw_os_error() == Some(rustix::io::Errno::XDEV.raw_os_error()) => {
            Error::NotPermitted(m)
        }
        _ => Error::Io(m),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt as _;

    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn digest_reads_what_open_read_opens() -> Result<(), Box<dyn std::error::Error>> {
        let t = tempfile::tempdir()?;
        let root = t.path().join("grant");
        std::fs::create_dir_all(root.join("d"))?;
        std::fs::write(root.join("d/a"), vec![b'a'; 3 << 20])?;
        std::fs::write(t.path().join("outside"), b"secret")?;
        std::os::unix::fs::symlink("../../outside", root.join("d/out"))?;
        rustix::fs::mkfifoat(rustix::fs::CWD, root.join("fifo"), rustix::fs::Mode::RUSR)?;
        let g = GrantedDir::read_only(&root, false)?;
        // `head -c 3145728 /dev/zero | tr '\0' a | md5sum`.
        let hex: String = g
            .digest("d/a")?
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(hex, "6a11a8872b36343799a15617bea78cef");
        assert!(g.digest("d/out").is_err(), "a symlink out of the grant");
        assert!(g.digest("fifo").is_err(), "a FIFO, without blocking");
        assert!(g.digest("d").is_err(), "a directory");
        assert!(matches!(g.digest("gone"), Err(Error::NotFound(_))));
        Ok(())
    }

    #[test]
    fn link_files_links_each_name_and_a_final_symlink_as_itself(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let t = tempfile::tempdir()?;
        let root = t.path().join("grant");
        std::fs::create_dir_all(root.join("d"))?;
        std::fs::create_dir(root.join("to"))?;
        std::fs::write(root.join("d/a"), b"a")?;
        std::os::unix::fs::symlink("/etc/passwd", root.join("d/l"))?;
        std::os::unix::fs::symlink("d", root.join("dlink"))?;
        let g = GrantedDir::read_write(&root)?;
        assert_eq!(g.link_files("d", "to", &names(&["a", "l"]))?, 2);
        let ino = |p: &str| std::fs::symlink_metadata(root.join(p)).map(|m| m.ino());
        assert_eq!(ino("to/a")?, ino("d/a")?);
        assert_eq!(
            std::fs::read_link(root.join("to/l"))?,
            Path::new("/etc/passwd")
        );
        assert_eq!(g.link_files("", "to", &[])?, 0);
        assert!(matches!(
            g.link_files("d", "to", &names(&["a"])),
            Err(Error::AlreadyExists(_))
        ));
        assert!(matches!(
            g.link_files("d", "to", &names(&["gone"])),
            Err(Error::NotFound(_))
        ));
        for bad in ["", ".", "..", "a/b", "a\0"] {
            assert!(
                matches!(
                    g.link_files("d", "to", &names(&[bad])),
                    Err(Error::InvalidName(_))
                ),
                "{bad:?}"
            );
        }
        // Neither directory is reached through a symlink, nor out of the grant.
        assert!(g.link_files("dlink", "to", &names(&["x"])).is_err());
        assert!(g.link_files("d", "dlink", &names(&["a"])).is_err());
        assert!(g.link_files("../grant/d", "to", &names(&["a"])).is_err());
        let ro = GrantedDir::read_only(&root, false)?;
        assert!(matches!(
            ro.link_files("d", "to", &names(&["a"])),
            Err(Error::NotPermitted(_))
        ));
        Ok(())
    }
}
