//! What a [`GrantedDir`](super::GrantedDir) answers, in its own terms: the
//! same shapes as the WIT `host-fs` records, which `host/fs.rs` converts
//! them into, so this module knows nothing of the component's bindings.

/// Why a grant refused or failed an operation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Nothing at the path.
    #[error("not found: {0}")]
    NotFound(String),
    /// Something already at the path.
    #[error("already exists: {0}")]
    AlreadyExists(String),
    /// Outside the grant, a write to a read-only grant, or refused by the OS.
    #[error("not permitted: {0}")]
    NotPermitted(String),
    /// Not a clean relative path, or a name that is not UTF-8.
    #[error("invalid name: {0}")]
    InvalidName(String),
    /// The filesystem is full.
    #[error("no space: {0}")]
    NoSpace(String),
    /// Any other I/O failure.
    #[error("{0}")]
    Io(String),
}

/// What an entry is (symlinks are never followed unless asked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Directory,
    /// A symbolic link.
    Symlink,
    /// A FIFO, socket or device.
    Other,
}

/// An entry's metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metadata {
    /// What the entry is.
    pub kind: EntryKind,
    /// Size in bytes.
    pub size: u64,
    /// Permission bits.
    pub mode: u32,
    /// Modification time, seconds.
    pub mtime_sec: i64,
    /// Modification time, nanoseconds within the second.
    pub mtime_nsec: u32,
    /// Device number.
    pub device: u64,
    /// Inode number.
    pub inode: u64,
    /// A symlink's target.
    pub link_target: Option<String>,
}

/// A directory entry's name and kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// The entry's name in its directory.
    pub name: String,
    /// What it is.
    pub kind: EntryKind,
}

/// A directory entry with its metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntryStat {
    /// The entry's name in its directory.
    pub name: String,
    /// Its metadata.
    pub metadata: Metadata,
}

/// A directory entry with its metadata and ctime (seconds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntryTimes {
    /// The entry's name in its directory.
    pub name: String,
    /// Its metadata.
    pub metadata: Metadata,
    /// Status-change time, seconds.
    pub ctime_sec: i64,
}

/// A directory entry with its metadata and ctime to the nanosecond.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntryChange {
    /// The entry's name in its directory.
    pub name: String,
    /// Its metadata.
    pub metadata: Metadata,
    /// Status-change time, seconds.
    pub ctime_sec: i64,
    /// Status-change time, nanoseconds within the second.
    pub ctime_nsec: u32,
}
