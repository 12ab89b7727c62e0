//! A sync-in plan held compactly: every [`Planned`] member encoded in a
//! few dozen bytes, in order, and decoded one at a time when it is sent.
//!
//! A plan of 100k files and 100k directories held as a `Vec<Planned>`
//! needs about 40 MiB of guest memory (each member's struct, two boxed
//! strings, and the vector's doubling); encoded here it needs about 5 MiB.
//! Names are front-coded against the member before them (a walk emits
//! siblings and children together, so most of a name repeats), numbers are
//! LEB128 varints, and the log grows in chunks, so it is never copied to
//! grow. Members are only ever read back in order.

use crate::plan::{Planned, PlannedKind, Stamp};

/// Bytes of one chunk of the log (a bigger record gets a chunk of its own).
const CHUNK: usize = 256 << 10;

const DIR: u8 = 0;
const FILE_IN_NAME: u8 = 1;
const FILE: u8 = 2;
const SYMLINK: u8 = 3;
const INLINE: u8 = 4;

/// Where [`crate::plan::plan_dir`] puts the members it plans.
pub trait PlanSink {
    /// Appends `p`.
    fn push(&mut self, p: Planned);
}

impl PlanSink for Vec<Planned> {
    fn push(&mut self, p: Planned) {
        Vec::push(self, p);
    }
}

/// An append-only, compactly encoded list of planned members.
#[derive(Debug, Default)]
pub struct PlanLog {
    chunks: Vec<Vec<u8>>,
    len: usize,
    last_name: String,
    record: Vec<u8>,
    files: u64,
    archive_bytes: u64,
}

/// Counters of a [`PlanLog`]: members, files as the seed counts them (files
/// and symlinks), and their bytes in the archive.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Members.
    pub members: usize,
    /// Files and symlinks.
    pub files: u64,
    /// Archive bytes (headers, contents, padding), without the end marker.
    pub archive_bytes: u64,
}

impl Tally {
    /// What was added between `self` (earlier) and `later`.
    pub fn since(self, later: Tally) -> Tally {
        Tally {
            members: later.members - self.members,
            files: later.files - self.files,
            archive_bytes: later.archive_bytes - self.archive_bytes,
        }
    }
}

impl PlanSink for PlanLog {
    fn push(&mut self, p: Planned) {
        PlanLog::push(self, &p);
    }
}

impl PlanLog {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// Members in the log.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the log holds no member.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The log's counters so far.
    pub fn tally(&self) -> Tally {
        Tally {
            members: self.len,
            files: self.files,
            archive_bytes: self.archive_bytes,
        }
    }

    /// Bytes the log holds (for tests and telemetry).
    pub fn encoded_bytes(&self) -> usize {
        self.chunks.iter().map(Vec::len).sum()
    }

    /// Appends `p`.
    pub fn push(&mut self, p: &Planned) {
        self.files += u64::from(!matches!(p.kind, PlannedKind::Dir));
        self.archive_bytes += p.member().archive_len();
        self.len += 1;
        let r = &mut self.record;
        r.clear();
        let name: &str = &p.name;
        let shared = common_prefix(&self.last_name, name);
        let tag = match &p.kind {
            PlannedKind::Dir => DIR,
            PlannedKind::HostFile { path, .. } if name.ends_with(&**path) => FILE_IN_NAME,
            PlannedKind::HostFile { .. } => FILE,
            PlannedKind::Symlink(_) => SYMLINK,
            PlannedKind::Inline(_) => INLINE,
        };
        r.push(tag);
        put(r, u64::from(p.mode));
        put(r, p.mtime);
        put(r, shared as u64);
        put_bytes(r, &name.as_bytes()[shared..]);
        match &p.kind {
            PlannedKind::Dir => {}
            PlannedKind::HostFile { grant, path, stamp } => {
                put(r, *grant as u64);
                if tag == FILE_IN_NAME {
                    put(r, (name.len() - path.len()) as u64);
                } else {
                    put_bytes(r, path.as_bytes());
                }
                put(r, stamp.size);
                put(r, zigzag(stamp.mtime_sec));
                put(r, u64::from(stamp.mtime_nsec));
                put(r, stamp.device);
                put(r, stamp.inode);
                // Often the same second as the mtime, or close to it.
                put(r, zigzag(stamp.ctime_sec.wrapping_sub(stamp.mtime_sec)));
                put(r, u64::from(stamp.ctime_nsec));
            }
            PlannedKind::Symlink(t) => put_bytes(r, t.as_bytes()),
            PlannedKind::Inline(b) => put_bytes(r, b),
        }
        self.last_name.truncate(shared);
        self.last_name.push_str(&name[shared..]);
        match self.chunks.last_mut() {
            Some(c) if c.len() + r.len() <= CHUNK => c.extend_from_slice(r),
            _ => {
                let mut c = Vec::with_capacity(CHUNK.max(r.len()));
                c.extend_from_slice(r);
                self.chunks.push(c);
            }
        }
    }

    /// The members in order.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            chunks: &self.chunks,
            chunk: 0,
            at: 0,
            name: String::new(),
        }
    }
}

/// Decodes a [`PlanLog`]'s members in order.
#[derive(Debug, Clone)]
pub struct Iter<'a> {
    chunks: &'a [Vec<u8>],
    chunk: usize,
    at: usize,
    name: String,
}

impl Iterator for Iter<'_> {
    type Item = Planned;

    fn next(&mut self) -> Option<Planned> {
        let mut chunk = self.chunks.get(self.chunk)?;
        if self.at >= chunk.len() {
            self.chunk += 1;
            self.at = 0;
            chunk = self.chunks.get(self.chunk)?;
        }
        let mut r = Reader {
            buf: chunk,
            at: self.at,
        };
        let tag = r.byte();
        let mode = r.num() as u32;
        let mtime = r.num();
        let shared = r.num() as usize;
        self.name.truncate(shared);
        self.name.push_str(r.str());
        let kind = match tag {
            DIR => PlannedKind::Dir,
            FILE_IN_NAME | FILE => {
                let grant = r.num() as usize;
                let path: Box<str> = if tag == FILE_IN_NAME {
                    self.name.get(r.num() as usize..).unwrap_or_default().into()
                } else {
                    r.str().into()
                };
                PlannedKind::HostFile {
                    grant,
                    path,
                    stamp: {
                        let (size, mtime_sec) = (r.num(), unzigzag(r.num()));
                        Stamp {
                            size,
                            mtime_sec,
                            mtime_nsec: r.num() as u32,
                            device: r.num(),
                            inode: r.num(),
                            ctime_sec: unzigzag(r.num()).wrapping_add(mtime_sec),
                            ctime_nsec: r.num() as u32,
                        }
                    },
                }
            }
            SYMLINK => PlannedKind::Symlink(r.str().into()),
            _ => PlannedKind::Inline(r.bytes().to_vec()),
        };
        self.at = r.at;
        Some(Planned {
            name: self.name.as_str().into(),
            kind,
            mode,
            mtime,
        })
    }
}

/// Reads what [`PlanLog::push`] wrote (its own bytes, so never malformed).
struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn byte(&mut self) -> u8 {
        let b = self.buf.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }

    fn num(&mut self) -> u64 {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte();
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                break;
            }
        }
        v
    }

    fn bytes(&mut self) -> &'a [u8] {
        let n = self.num() as usize;
        let end = (self.at + n).min(self.buf.len());
        let b = &self.buf[self.at.min(end)..end];
        self.at = end;
        b
    }

    fn str(&mut self) -> &'a str {
        // Only ever `&str` bytes were written here.
        std::str::from_utf8(self.bytes()).unwrap_or_default()
    }
}

fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Bytes `a` and `b` share at their start, at a character boundary.
fn common_prefix(a: &str, b: &str) -> usize {
    let n = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    (0..=n).rev().find(|&i| b.is_char_boundary(i)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, path: &str, size: u64, mtime_sec: i64) -> Planned {
        stamped(name, path, size, mtime_sec, u64::MAX)
    }

    fn stamped(name: &str, path: &str, size: u64, mtime_sec: i64, device: u64) -> Planned {
        Planned {
            name: name.into(),
            kind: PlannedKind::HostFile {
                grant: 3,
                path: path.into(),
                stamp: Stamp {
                    size,
                    mtime_sec,
                    mtime_nsec: 999_999_999,
                    device,
                    inode: 1 << 40,
                    ctime_sec: mtime_sec.wrapping_add(3),
                    ctime_nsec: 123_456_789,
                },
            },
            mode: 0o644,
            mtime: u64::try_from(mtime_sec).unwrap_or(0),
        }
    }

    #[test]
    fn round_trips_every_kind_in_order() {
        let members = vec![
            Planned {
                name: "d3".into(),
                kind: PlannedKind::Dir,
                mode: 0o755,
                mtime: 7,
            },
            file("d3/a/b/ü.txt", "a/b/ü.txt", 12, 1_700_000_000),
            file("d3/a/b/üx", "a/b/üx", 0, -5),
            file("f4", "source.bin", 1 << 40, i64::MIN),
            Planned {
                name: "d3/a/l".into(),
                kind: PlannedKind::Symlink("../b/ü".into()),
                mode: 0o777,
                mtime: u64::MAX,
            },
            Planned {
                name: "c0.0".into(),
                kind: PlannedKind::Inline(b"echo hi\n".to_vec()),
                mode: 0o600,
                mtime: 0,
            },
            Planned {
                name: "big".into(),
                kind: PlannedKind::Inline(vec![7; CHUNK + 10]),
                mode: 0o600,
                mtime: 0,
            },
            file("d3/after-the-big-one", "after-the-big-one", 1, 1),
        ];
        let mut log = PlanLog::new();
        for m in &members {
            log.push(m);
        }
        let back: Vec<Planned> = log.iter().collect();
        assert_eq!(back, members);
        assert_eq!(log.len(), members.len());
        let t = log.tally();
        assert_eq!(t.files, 7);
        assert_eq!(
            t.archive_bytes,
            members
                .iter()
                .map(|p| p.member().archive_len())
                .sum::<u64>()
        );
    }

    #[test]
    fn a_walk_of_many_files_stays_small() {
        let mut log = PlanLog::new();
        // The worst case for front coding: every name differs early.
        for i in 0..10_000 {
            let rel = format!("a{:02}/b{:02}/f{i:06}.dat", i % 16, (i / 16) % 25);
            let p = stamped(&format!("d0/{rel}"), &rel, 4096, 1_700_000_000 + i, 2049);
            log.push(&p);
        }
        // Against about 250 bytes a file as a `Vec<Planned>`.
        assert!(log.encoded_bytes() < 62 * 10_000, "{}", log.encoded_bytes());
        let last = log.iter().last().unwrap();
        assert_eq!(&*last.name, "d0/a15/b24/f009999.dat");
        assert!(
            matches!(&last.kind, PlannedKind::HostFile { path, .. } if &**path == "a15/b24/f009999.dat")
        );
    }
}
