//! Planning what a sync-in sends from host directories: which members, in
//! which order, with which modes, and what the host must re-check before it
//! sends a file's bytes.
//!
//! The host is reached through [`HostDir`] (the component implements it over
//! its granted directories), so planning runs natively in tests.

use crate::exclude::Excluder;
use crate::plan_log::PlanSink;
use crate::tar_write::{Member, MemberKind};
use crate::{Error, ErrorKind, SCRATCH_PREFIX};

/// Deepest directory nesting followed on the host.
const MAX_DEPTH: usize = 512;

/// What a host path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Directory,
    /// A symbolic link.
    Symlink,
    /// A socket, FIFO or device.
    Other,
}

/// Metadata of a host path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    /// What it is.
    pub kind: Kind,
    /// Size in bytes.
    pub size: u64,
    /// Permission bits (set-id and sticky included).
    pub mode: u32,
    /// Modification time, seconds.
    pub mtime_sec: i64,
    /// Modification time, nanoseconds.
    pub mtime_nsec: u32,
    /// Device, with `inode` the file's identity.
    pub device: u64,
    /// Inode.
    pub inode: u64,
    /// Status change time, seconds.
    pub ctime_sec: i64,
    /// Status change time, nanoseconds.
    pub ctime_nsec: u32,
    /// A symlink's target.
    pub link_target: Option<String>,
}

/// A directory entry with its metadata (not following a final symlink).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The entry's name.
    pub name: String,
    /// Its metadata.
    pub meta: Meta,
}

/// Why a host filesystem call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsFailure {
    /// The path does not exist.
    NotFound,
    /// Something is already there.
    AlreadyExists,
    /// The path would leave the grant, or the grant forbids the operation.
    NotPermitted,
    /// The name is not valid UTF-8 or not representable.
    InvalidName,
    /// No space left on the host device.
    NoSpace,
    /// Anything else.
    Io,
}

/// A failed host filesystem call: its class and the host's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsError {
    /// The class.
    pub failure: FsFailure,
    /// The host's message.
    pub message: String,
}

impl FsError {
    /// Describes the failure to `what` (a verb) `path` as a typed error.
    pub fn describe(self, what: &str, path: &str) -> Error {
        let m = self.message;
        let (kind, detail) = match self.failure {
            FsFailure::NotFound => (ErrorKind::Io, format!("not found: {m}")),
            FsFailure::AlreadyExists => (ErrorKind::Io, format!("already exists: {m}")),
            FsFailure::NotPermitted => (ErrorKind::Confinement, format!("not permitted: {m}")),
            FsFailure::InvalidName => (ErrorKind::InvalidRequest, format!("invalid name: {m}")),
            FsFailure::NoSpace => (ErrorKind::Io, format!("no space left on device: {m}")),
            FsFailure::Io => (ErrorKind::Io, m),
        };
        Error::new(kind, format!("failed to {what} {path}: {detail}"))
    }

    /// A missing source is the request's fault; anything else is described.
    pub fn source(self, source: &str) -> Error {
        match self.failure {
            FsFailure::NotFound => {
                Error::invalid(format!("source {source} does not exist: {}", self.message))
            }
            _ => self.describe("read source", source),
        }
    }
}

/// A host directory the planner may read (the component's grant).
pub trait HostDir {
    /// Metadata of `path` (relative, `""` for the directory itself),
    /// following symlinks.
    ///
    /// # Errors
    /// The host's failure.
    fn stat_follow(&self, path: &str) -> Result<Meta, FsError>;
    /// The entries of directory `path` with their metadata, sorted by name.
    ///
    /// # Errors
    /// The host's failure.
    fn read_dir_stat(&self, path: &str) -> Result<Vec<Entry>, FsError>;
}

/// What the host re-checks about a file after sending its bytes: the
/// planned identity, size and mtime (a change means the source changed);
/// and its ctime, which with the device and inode names what was sent
/// (see [`crate::incremental`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    /// Size in bytes.
    pub size: u64,
    /// Modification time, seconds.
    pub mtime_sec: i64,
    /// Modification time, nanoseconds.
    pub mtime_nsec: u32,
    /// Device, with `inode` the file's identity.
    pub device: u64,
    /// Inode.
    pub inode: u64,
    /// Status change time, seconds.
    pub ctime_sec: i64,
    /// Status change time, nanoseconds.
    pub ctime_nsec: u32,
}

impl From<&Meta> for Stamp {
    fn from(m: &Meta) -> Self {
        Stamp {
            size: m.size,
            mtime_sec: m.mtime_sec,
            mtime_nsec: m.mtime_nsec,
            device: m.device,
            inode: m.inode,
            ctime_sec: m.ctime_sec,
            ctime_nsec: m.ctime_nsec,
        }
    }
}

impl Stamp {
    /// The identity the file's bytes are read under.
    pub fn host_id(&self) -> crate::incremental::HostId {
        crate::incremental::HostId {
            device: self.device,
            inode: self.inode,
            size: self.size,
            ctime_sec: self.ctime_sec,
            ctime_nsec: self.ctime_nsec,
        }
    }
}

/// One archive member and where its bytes come from.
///
/// A plan holds one of these per host entry, so it is kept small (boxed
/// strings, a [`Stamp`] rather than the whole [`Meta`]): 100k files must
/// plan in a few MiB.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    /// The member's name in the archive.
    pub name: Box<str>,
    /// What it is and where its bytes come from.
    pub kind: PlannedKind,
    /// Permission bits.
    pub mode: u32,
    /// Modification time, seconds.
    pub mtime: u64,
}

/// What a [`Planned`] member is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlannedKind {
    /// Contents read host-side from `path` in grant `grant`; `stamp` is
    /// what was planned, re-checked when it is sent.
    HostFile {
        /// Index of the grant.
        grant: usize,
        /// Path beneath the grant.
        path: Box<str>,
        /// The file as planned.
        stamp: Stamp,
    },
    /// Contents from memory (commands, the commit token).
    Inline(Vec<u8>),
    /// A directory.
    Dir,
    /// A symlink with this target.
    Symlink(Box<str>),
}

impl Planned {
    /// The member's tar header fields.
    pub fn member(&self) -> Member<'_> {
        let kind = match &self.kind {
            PlannedKind::HostFile { stamp, .. } => MemberKind::File { size: stamp.size },
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

/// Files and archive bytes of a directory mapping's members, as the seed
/// reports them (files and symlinks count as files).
pub fn tally(members: &[Planned]) -> (u64, u64) {
    members.iter().fold((0, 0), |(files, bytes), p| {
        let file = u64::from(!matches!(p.kind, PlannedKind::Dir));
        (files + file, bytes + p.member().archive_len())
    })
}

/// A modification time as tar stores it (negative times become 0).
pub fn mtime(meta: &Meta) -> u64 {
    u64::try_from(meta.mtime_sec).unwrap_or(0)
}

/// Walks the source directory of mapping `k` (member names under `name`)
/// into `out`; see [`DirWalk`].
///
/// # Errors
/// As [`DirWalk::new`] and [`DirWalk`]'s items.
pub fn plan_dir(
    dir: &impl HostDir,
    k: usize,
    name: &str,
    source: &str,
    exclude: &[String],
    follow: bool,
    out: &mut impl PlanSink,
) -> Result<(), Error> {
    for p in DirWalk::new(dir, k, name, source, exclude, follow)? {
        out.push(p?);
    }
    Ok(())
}

/// A directory still to list: its path relative to the source, and its
/// ancestors' (device, inode), to refuse cycles when following links.
type Pending = (String, Vec<(u64, u64)>);

/// The members of a directory mapping's source, one at a time: the
/// directory itself first, then depth first with every directory's member
/// before its children and siblings in name order, skipping `exclude`d
/// entries, reserved scratch names, sockets, FIFOs and devices.
///
/// It lists one directory at a time, so a sender can walk and send at
/// once: memory grows with the widest directory and the depth, not the
/// tree. After an error it yields nothing more.
pub struct DirWalk<'a, D: HostDir> {
    dir: &'a D,
    k: usize,
    name: String,
    source: String,
    excluder: Excluder,
    follow: bool,
    top: Option<Planned>,
    stack: Vec<Pending>,
    /// The directory being listed: its path, ancestors, the entries not
    /// yet yielded, and the subdirectories found so far.
    listing: Option<(Pending, std::vec::IntoIter<Entry>, Vec<Pending>)>,
    failed: bool,
}

impl<'a, D: HostDir> DirWalk<'a, D> {
    /// Starts a walk of `dir`, the source of mapping `k` (`source` names it
    /// in messages).
    ///
    /// # Errors
    /// `invalid-request` for a missing or non-directory source or a bad
    /// exclude pattern; `io` for other host failures.
    pub fn new(
        dir: &'a D,
        k: usize,
        name: &str,
        source: &str,
        exclude: &[String],
        follow: bool,
    ) -> Result<Self, Error> {
        let excluder = Excluder::new(exclude)?;
        let top = dir.stat_follow("").map_err(|e| e.source(source))?;
        if top.kind != Kind::Directory {
            return Err(Error::invalid(format!(
                "directory mapping source {source} is not a directory"
            )));
        }
        Ok(DirWalk {
            dir,
            k,
            name: name.to_owned(),
            source: source.to_owned(),
            excluder,
            follow,
            top: Some(Planned {
                name: name.into(),
                kind: PlannedKind::Dir,
                mode: top.mode & 0o777,
                mtime: mtime(&top),
            }),
            stack: vec![(String::new(), vec![(top.device, top.inode)])],
            listing: None,
            failed: false,
        })
    }

    /// The next member, or `None` once the directory is done with.
    fn step(&mut self) -> Result<Option<Planned>, Error> {
        if let Some(top) = self.top.take() {
            return Ok(Some(top));
        }
        loop {
            let Some(((rel_dir, seen), entries, subdirs)) = &mut self.listing else {
                let Some((rel_dir, seen)) = self.stack.pop() else {
                    return Ok(None);
                };
                let entries = self
                    .dir
                    .read_dir_stat(&rel_dir)
                    .map_err(|e| e.describe("list", &join(&self.source, &rel_dir)))?;
                self.listing = Some(((rel_dir, seen), entries.into_iter(), Vec::new()));
                continue;
            };
            let Some(entry) = entries.next() else {
                // Reverse so the stack pops subdirectories in name order.
                self.stack.extend(std::mem::take(subdirs).into_iter().rev());
                self.listing = None;
                continue;
            };
            if entry.name.starts_with(SCRATCH_PREFIX) {
                continue;
            }
            let rel = if rel_dir.is_empty() {
                entry.name
            } else {
                format!("{rel_dir}/{}", entry.name)
            };
            if self.excluder.matches(&rel) {
                continue;
            }
            let source = &self.source;
            let mut meta = entry.meta;
            if meta.kind == Kind::Symlink && self.follow {
                meta = self.dir.stat_follow(&rel).map_err(|e| match e.failure {
                    FsFailure::NotPermitted => Error::confinement(format!(
                        "symlink {} leads outside the source directory and followSymlinks is set: {}",
                        join(source, &rel),
                        e.message
                    )),
                    _ => e.describe("follow", &join(source, &rel)),
                })?;
            }
            let kind = match meta.kind {
                Kind::File => PlannedKind::HostFile {
                    grant: self.k,
                    path: rel.as_str().into(),
                    stamp: Stamp::from(&meta),
                },
                Kind::Directory => {
                    if seen.len() >= MAX_DEPTH || seen.contains(&(meta.device, meta.inode)) {
                        return Err(Error::invalid(format!(
                            "directory cycle or nesting deeper than {MAX_DEPTH} at {}",
                            join(source, &rel)
                        )));
                    }
                    let mut s = seen.clone();
                    s.push((meta.device, meta.inode));
                    subdirs.push((rel.clone(), s));
                    PlannedKind::Dir
                }
                Kind::Symlink => match meta.link_target.take() {
                    Some(t) => PlannedKind::Symlink(t.into()),
                    None => {
                        return Err(Error::new(
                            ErrorKind::Io,
                            format!("symlink {} has no target", join(source, &rel)),
                        ))
                    }
                },
                // Sockets, FIFOs and devices are not transferred (tar skips sockets too).
                Kind::Other => continue,
            };
            let mode = if matches!(kind, PlannedKind::Symlink(_)) {
                0o777
            } else {
                meta.mode & 0o777
            };
            return Ok(Some(Planned {
                name: format!("{}/{rel}", self.name).into(),
                kind,
                mode,
                mtime: mtime(&meta),
            }));
        }
    }
}

impl<D: HostDir> Iterator for DirWalk<'_, D> {
    type Item = Result<Planned, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let step = self.step();
        self.failed = step.is_err();
        step.transpose()
    }
}

/// `base/rel` for messages (`base` alone when `rel` is empty).
pub fn join(base: &str, rel: &str) -> String {
    if rel.is_empty() {
        base.to_owned()
    } else {
        format!("{}/{rel}", base.trim_end_matches('/'))
    }
}

/// Checks a file mapping before anything moves: the target is not the
/// remote dir itself and the source (`basename(source)` in `dir`, its
/// parent) is a regular file. Returns the source's name in `dir` and its
/// metadata.
///
/// # Errors
/// `invalid-request` for a missing or non-regular source or a root target.
pub fn file_source<'a>(
    dir: &impl HostDir,
    source: &'a str,
    target: &str,
    root: &str,
) -> Result<(&'a str, Meta), Error> {
    if target == root {
        return Err(Error::invalid(format!(
            "file mapping target {target} is the remote dir itself"
        )));
    }
    let (_, base) = crate::sandbox_path::split_parent(source);
    let meta = dir.stat_follow(base).map_err(|e| e.source(source))?;
    if meta.kind != Kind::File {
        return Err(Error::invalid(format!(
            "file mapping source {source} is not a regular file"
        )));
    }
    Ok((base, meta))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// An in-memory host tree: path -> metadata (links resolved by hand).
    struct Tree(BTreeMap<String, Meta>);

    fn meta(kind: Kind, size: u64, ino: u64) -> Meta {
        Meta {
            kind,
            size,
            mode: 0o644,
            mtime_sec: 7,
            mtime_nsec: 0,
            device: 1,
            inode: ino,
            ctime_sec: 8,
            ctime_nsec: 9,
            link_target: None,
        }
    }

    impl HostDir for Tree {
        fn stat_follow(&self, path: &str) -> Result<Meta, FsError> {
            let m = self.0.get(path).cloned().ok_or(FsError {
                failure: FsFailure::NotFound,
                message: path.into(),
            })?;
            match &m.link_target {
                Some(t) if t.starts_with('/') => Err(FsError {
                    failure: FsFailure::NotPermitted,
                    message: t.clone(),
                }),
                Some(t) => self.stat_follow(t),
                None => Ok(m),
            }
        }
        fn read_dir_stat(&self, path: &str) -> Result<Vec<Entry>, FsError> {
            let prefix = if path.is_empty() {
                String::new()
            } else {
                format!("{path}/")
            };
            Ok(self
                .0
                .iter()
                .filter(|(p, _)| !p.is_empty())
                .filter_map(|(p, m)| {
                    let rest = p.strip_prefix(&prefix)?;
                    (!rest.contains('/')).then(|| Entry {
                        name: rest.to_owned(),
                        meta: m.clone(),
                    })
                })
                .collect())
        }
    }

    fn tree() -> Tree {
        let mut t = BTreeMap::new();
        t.insert(String::new(), meta(Kind::Directory, 0, 1));
        t.insert("b".into(), meta(Kind::Directory, 0, 2));
        t.insert("b/f".into(), meta(Kind::File, 10, 3));
        t.insert("a.log".into(), meta(Kind::File, 5, 4));
        t.insert("z".into(), meta(Kind::File, 600, 5));
        t.insert(".paperclip-upload-x".into(), meta(Kind::File, 1, 6));
        let mut link = meta(Kind::Symlink, 0, 7);
        link.link_target = Some("z".into());
        t.insert("l".into(), link);
        let mut out = meta(Kind::Symlink, 0, 8);
        out.link_target = Some("/etc/passwd".into());
        t.insert("out".into(), out);
        Tree(t)
    }

    #[test]
    fn plans_in_order_with_excludes_and_links() {
        let mut out: Vec<Planned> = Vec::new();
        plan_dir(
            &tree(),
            3,
            "d3",
            "/src",
            &["*.log".into(), "out".into()],
            false,
            &mut out,
        )
        .unwrap();
        let names: Vec<&str> = out.iter().map(|p| &*p.name).collect();
        assert_eq!(names, ["d3", "d3/b", "d3/l", "d3/z", "d3/b/f"]);
        assert_eq!(out[2].kind, PlannedKind::Symlink("z".into()));
        assert!(
            matches!(&out[3].kind, PlannedKind::HostFile { grant: 3, path, .. } if &**path == "z")
        );
        let (files, bytes) = tally(&out);
        assert_eq!(files, 3);
        assert_eq!(
            bytes,
            out.iter().map(|p| p.member().archive_len()).sum::<u64>()
        );
    }

    #[test]
    fn following_dereferences_and_reports_links_it_may_not_follow() {
        let mut out: Vec<Planned> = Vec::new();
        plan_dir(
            &tree(),
            0,
            "d",
            "/src",
            &["*.log".into(), "out".into()],
            true,
            &mut out,
        )
        .unwrap();
        assert!(matches!(&out[2].kind, PlannedKind::HostFile { path, .. } if &**path == "l"));
        let err = plan_dir(
            &tree(),
            0,
            "d",
            "/src",
            &[],
            true,
            &mut Vec::<Planned>::new(),
        )
        .unwrap_err();
        assert_eq!(err.kind, ErrorKind::Confinement, "{err}");
    }

    #[test]
    fn a_missing_source_is_the_requests_fault() {
        let empty = Tree(BTreeMap::new());
        let err = plan_dir(
            &empty,
            0,
            "d",
            "/nope",
            &[],
            false,
            &mut Vec::<Planned>::new(),
        )
        .unwrap_err();
        assert_eq!(err.kind, ErrorKind::InvalidRequest);
        assert!(err.message.contains("does not exist"), "{err}");
        let err = file_source(&empty, "/nope/f", "/w/f", "/w").unwrap_err();
        assert_eq!(err.kind, ErrorKind::InvalidRequest);
        let err = file_source(&tree(), "/src/b", "/w/f", "/w").unwrap_err();
        assert!(err.message.contains("not a regular file"), "{err}");
        assert!(file_source(&tree(), "/src/z", "/w", "/w").is_err());
        assert_eq!(file_source(&tree(), "/src/z", "/w/f", "/w").unwrap().0, "z");
    }
}
