//! Tar headers for the inbound archive.
//!
//! The component writes only headers (and a few tiny in-memory members); the
//! bytes of host files are spliced host-side after their header. Layout is
//! deterministic, so an archive's exact length is known before its first
//! byte: the host announces it where the sandbox's tar cannot stop at the
//! end marker by itself (other tars read it through `head -c N`); GNU tar
//! stops there, so the host may stream a tree while it still walks it.
//!
//! Format: GNU tar headers with `L`/`K` records for names or link targets
//! longer than 100 bytes (read by GNU tar and BusyBox alike).

use tar::{EntryType, Header};

use std::borrow::Cow;

use crate::Error;

/// Size of a tar block.
pub const BLOCK: u64 = 512;
/// The end-of-archive marker: two zero blocks.
pub const END_OF_ARCHIVE: [u8; 1024] = [0; 1024];

/// GNU tar's record: it reads archives in whole records of this size.
pub const RECORD: u64 = 10240;

/// Length of an archive whose members take `members` bytes: the members,
/// the end marker, and zeros up to a whole record.
pub fn archive_len(members: u64) -> u64 {
    (members + END_OF_ARCHIVE.len() as u64).div_ceil(RECORD) * RECORD
}

/// Appends the end marker and the zeros that complete the last record.
pub fn write_end(out: &mut Vec<u8>, members: u64) {
    let pad = archive_len(members) - members;
    out.resize(out.len() + usize::try_from(pad).unwrap_or(0), 0);
}
const NAME_FIELD: usize = 100;
/// Longest name or link target the writer will emit: what the reader accepts.
pub use crate::tar_read::MAX_NAME;

/// What one archive member is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberKind<'a> {
    /// A regular file of `size` bytes; its contents follow the header.
    File {
        /// Content length.
        size: u64,
    },
    /// A directory.
    Dir,
    /// A symlink to `target`.
    Symlink {
        /// The link target, stored verbatim.
        target: &'a str,
    },
}

/// One archive member's header.
#[derive(Debug, Clone, Copy)]
pub struct Member<'a> {
    /// Relative name inside the archive (no trailing slash).
    pub name: &'a str,
    /// File, directory or symlink.
    pub kind: MemberKind<'a>,
    /// Permission bits.
    pub mode: u32,
    /// Modification time, seconds since the epoch.
    pub mtime: u64,
}

/// Bytes of zero padding after `size` bytes of content.
pub fn padding(size: u64) -> u64 {
    (BLOCK - size % BLOCK) % BLOCK
}

/// Content length rounded up to whole blocks.
pub fn padded(size: u64) -> u64 {
    size.saturating_add(padding(size))
}

fn long_record_len(len: usize) -> u64 {
    if len > NAME_FIELD {
        BLOCK + padded(len as u64 + 1)
    } else {
        0
    }
}

/// A name or link target's bytes: components [`crate::byte_name`] spells
/// out are turned back into theirs (a malformed spelling stays as it is,
/// NUL and all, for [`check_field`] to refuse).
fn raw(s: &str) -> Cow<'_, [u8]> {
    crate::byte_name::decode_path(s).unwrap_or(Cow::Borrowed(s.as_bytes()))
}

impl Member<'_> {
    fn stored_name_len(&self) -> usize {
        raw(self.name).len() + usize::from(matches!(self.kind, MemberKind::Dir))
    }

    /// Length of the header blocks (including long-name records), without contents.
    pub fn header_len(&self) -> u64 {
        let link = match self.kind {
            MemberKind::Symlink { target } => raw(target).len(),
            _ => 0,
        };
        BLOCK + long_record_len(self.stored_name_len()) + long_record_len(link)
    }

    /// Total bytes this member occupies: headers plus padded contents.
    pub fn archive_len(&self) -> u64 {
        let size = match self.kind {
            MemberKind::File { size } => size,
            _ => 0,
        };
        self.header_len() + padded(size)
    }

    /// Appends the header blocks to `out`.
    ///
    /// # Errors
    /// [`crate::ErrorKind::InvalidRequest`] for names or targets that are empty,
    /// too long, or contain NUL.
    pub fn write_header(&self, out: &mut Vec<u8>) -> Result<(), Error> {
        let name = raw(self.name);
        check_field("name", &name)?;
        let mut name = name.into_owned();
        if matches!(self.kind, MemberKind::Dir) {
            name.push(b'/');
        }
        let (ty, size, link) = match self.kind {
            MemberKind::File { size } => (EntryType::Regular, size, None),
            MemberKind::Dir => (EntryType::Directory, 0, None),
            MemberKind::Symlink { target } => {
                let target = raw(target);
                check_field("symlink target", &target)?;
                (EntryType::Symlink, 0, Some(target))
            }
        };
        if name.len() > NAME_FIELD {
            long_record(out, EntryType::GNULongName, &name);
        }
        if let Some(target) = link.as_deref().filter(|t| t.len() > NAME_FIELD) {
            long_record(out, EntryType::GNULongLink, target);
        }
        let mut h = Header::new_gnu();
        h.set_entry_type(ty);
        h.set_size(size);
        h.set_mode(self.mode & 0o7777);
        h.set_mtime(self.mtime);
        h.set_uid(0);
        h.set_gid(0);
        fill(&mut h.as_old_mut().name, &name);
        if let Some(target) = &link {
            fill(&mut h.as_old_mut().linkname, target);
        }
        h.set_cksum();
        out.extend_from_slice(h.as_bytes());
        Ok(())
    }
}

fn check_field(what: &str, s: &[u8]) -> Result<(), Error> {
    if s.is_empty() || s.len() > MAX_NAME || s.contains(&0) {
        return Err(Error::invalid(format!(
            "{what} {:?} is empty, longer than {MAX_NAME} bytes or contains NUL",
            s.escape_ascii().to_string()
        )));
    }
    Ok(())
}

fn fill(field: &mut [u8], bytes: &[u8]) {
    let n = field.len().min(bytes.len());
    field[..n].copy_from_slice(&bytes[..n]);
}

fn long_record(out: &mut Vec<u8>, ty: EntryType, value: &[u8]) {
    let mut h = Header::new_gnu();
    h.set_entry_type(ty);
    h.set_size(value.len() as u64 + 1);
    h.set_mode(0o644);
    fill(&mut h.as_old_mut().name, b"././@LongLink");
    h.set_cksum();
    out.extend_from_slice(h.as_bytes());
    out.extend_from_slice(value);
    let used = value.len() as u64 + 1;
    out.resize(out.len() + 1 + padding(used) as usize, 0);
}

/// Appends `size`-dependent zero padding to `out`.
pub fn write_padding(out: &mut Vec<u8>, size: u64) {
    out.resize(out.len() + padding(size) as usize, 0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn build(members: &[(Member<'_>, &[u8])]) -> Vec<u8> {
        let mut out = Vec::new();
        for (m, data) in members {
            let before = out.len();
            m.write_header(&mut out).unwrap();
            assert_eq!((out.len() - before) as u64, m.header_len());
            out.extend_from_slice(data);
            write_padding(&mut out, data.len() as u64);
            assert_eq!((out.len() - before) as u64, m.archive_len());
        }
        out.extend_from_slice(&END_OF_ARCHIVE);
        out
    }

    #[test]
    fn round_trips_through_tar_rs_with_long_names() {
        let long = "d/".to_string() + &"x".repeat(150);
        let target = "../".repeat(40) + "t";
        let members = [
            (
                Member {
                    name: "d",
                    kind: MemberKind::Dir,
                    mode: 0o750,
                    mtime: 7,
                },
                &b""[..],
            ),
            (
                Member {
                    name: &long,
                    kind: MemberKind::File { size: 5 },
                    mode: 0o600,
                    mtime: 9,
                },
                &b"hello"[..],
            ),
            (
                Member {
                    name: "d/l",
                    kind: MemberKind::Symlink { target: &target },
                    mode: 0o777,
                    mtime: 1,
                },
                &b""[..],
            ),
        ];
        let bytes = build(&members);
        let mut ar = tar::Archive::new(&bytes[..]);
        let mut seen = Vec::new();
        for e in ar.entries().unwrap() {
            let mut e = e.unwrap();
            let path = e.path().unwrap().to_string_lossy().into_owned();
            let link = e
                .link_name()
                .unwrap()
                .map(|l| l.to_string_lossy().into_owned());
            let mode = e.header().mode().unwrap();
            let mut data = Vec::new();
            e.read_to_end(&mut data).unwrap();
            seen.push((path, link, mode, data));
        }
        assert_eq!(seen.len(), 3);
        assert_eq!(seen[0].0.trim_end_matches('/'), "d");
        assert_eq!(seen[0].2, 0o750);
        assert_eq!(seen[1].0, long);
        assert_eq!(seen[1].3, b"hello");
        assert_eq!(seen[2].1.as_deref(), Some(target.as_str()));
    }

    #[test]
    fn spelled_out_names_are_written_as_their_bytes() {
        // 60 bytes that are not UTF-8: 121 characters spelled out, yet
        // short enough for the header's own field.
        let comp = crate::byte_name::encode_component(&[0xe9; 60]).into_owned();
        let name = format!("d/{comp}");
        let target = format!("../\0ff/{comp}");
        let members = [
            (
                Member {
                    name: &name,
                    kind: MemberKind::File { size: 1 },
                    mode: 0o644,
                    mtime: 0,
                },
                &b"x"[..],
            ),
            (
                Member {
                    name: "l",
                    kind: MemberKind::Symlink { target: &target },
                    mode: 0o777,
                    mtime: 0,
                },
                &b""[..],
            ),
        ];
        assert_eq!(members[0].0.header_len(), BLOCK);
        let bytes = build(&members);
        assert_eq!(
            bytes.len() as u64,
            members.iter().map(|(m, _)| m.archive_len()).sum::<u64>() + 2 * BLOCK
        );
        let mut ar = tar::Archive::new(&bytes[..]);
        let mut seen = Vec::new();
        for e in ar.entries().unwrap() {
            let e = e.unwrap();
            let link = e.link_name_bytes().map(|l| l.into_owned());
            seen.push((e.path_bytes().into_owned(), link));
        }
        assert_eq!(seen[0].0, [&b"d/"[..], &[0xe9; 60]].concat());
        assert_eq!(
            seen[1].1.as_deref(),
            Some([&b"../\xff/"[..], &[0xe9; 60]].concat().as_slice())
        );
        // A malformed spelling is refused, not written.
        let m = Member {
            name: "a/\0zz",
            kind: MemberKind::Dir,
            mode: 0o755,
            mtime: 0,
        };
        assert!(m.write_header(&mut Vec::new()).is_err());
    }

    #[test]
    fn refuses_bad_names() {
        let mut out = Vec::new();
        let m = Member {
            name: "a\0b",
            kind: MemberKind::Dir,
            mode: 0o755,
            mtime: 0,
        };
        assert!(m.write_header(&mut out).is_err());
        let long = "y".repeat(MAX_NAME + 1);
        let m = Member {
            name: &long,
            kind: MemberKind::Dir,
            mode: 0o755,
            mtime: 0,
        };
        assert!(m.write_header(&mut out).is_err());
    }
}
