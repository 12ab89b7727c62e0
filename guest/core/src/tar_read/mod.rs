//! A strict, bounded parser for tar streams written by an untrusted sandbox.
//!
//! Why not `tar::Archive`: it reads GNU `L`/`K` and PAX records whole with no
//! cap, honours some fields other parsers ignore, and turns unknown types
//! into regular files. Here every ambiguity is refused instead of resolved:
//! a PAX `size` that disagrees with the header, a GNU long name beside a PAX
//! `path`, two records of one kind for one member, special files, set-id
//! bits, bad checksums, NUL or non-UTF-8 in names. Content
//! bytes are not read here: the caller moves them (host-side) after each
//! [`Entry`] and so the parser never holds more than one metadata record.
//!
//! The byte layout lives in `header` (one 512-byte header) and `pax` (PAX
//! records); this module holds the policy.

mod header;
mod pax;

use header::{type_name, MemberHeader};
use pax::Pax;
use tar::EntryType;

use crate::byte_name::{self, is_clean_relative};
use crate::tar_write::{padded, BLOCK};
use crate::Error;

/// Bounds applied while parsing.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Most real entries (files, directories, links).
    pub max_entries: u64,
    /// Most bytes of names, link targets and extension records in total.
    pub max_metadata_bytes: u64,
    /// Most content bytes (padded) in total.
    pub max_payload_bytes: u64,
}

/// Longest name or link target accepted here and written by
/// [`crate::tar_write`] (PATH_MAX).
pub const MAX_NAME: usize = 4096;
/// Longest single path component accepted (NAME_MAX).
pub const MAX_COMPONENT: usize = 255;
/// Largest single GNU long-name or PAX record accepted.
pub const MAX_RECORD: u64 = 1 << 20;

/// What a member is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryKind {
    /// Regular file; `size` content bytes follow the header.
    File,
    /// Directory.
    Dir,
    /// Symbolic link with this target (relative to the link's directory).
    Symlink(String),
    /// Hard link to this earlier member (relative to the archive root).
    HardLink(String),
}

/// One validated member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Clean relative path (no trailing slash).
    pub path: String,
    /// Member kind.
    pub kind: EntryKind,
    /// Content bytes following the header (zero except for files).
    pub size: u64,
    /// Permission bits (`0o777` at most; set-id and sticky bits are refused).
    pub mode: u32,
    /// Modification time in seconds since the epoch.
    pub mtime: i64,
}

impl Entry {
    /// Bytes after the header: contents plus padding.
    pub fn data_len(&self) -> u64 {
        padded(self.size)
    }
}

/// Where the parser gets blocks from.
pub trait Source {
    /// Fills `buf` completely.
    ///
    /// # Errors
    /// Any error, typically [`crate::ErrorKind::UnsafeArchive`] ("truncated").
    fn read_exact(&mut self, buf: &mut [u8]) -> Result<(), Error>;
}

impl Source for &[u8] {
    fn read_exact(&mut self, buf: &mut [u8]) -> Result<(), Error> {
        if self.len() < buf.len() {
            return Err(Error::unsafe_archive("archive is truncated"));
        }
        let (head, tail) = self.split_at(buf.len());
        buf.copy_from_slice(head);
        *self = tail;
        Ok(())
    }
}

/// Extension records read so far for the member that follows them.
#[derive(Default)]
struct Pending {
    long_name: Option<Vec<u8>>,
    long_link: Option<Vec<u8>>,
    pax: Option<Pax>,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.long_name.is_none() && self.long_link.is_none() && self.pax.is_none()
    }

    /// Keeps the record of extension header `h`; a second of one kind is refused.
    fn keep(&mut self, h: &MemberHeader, record: Vec<u8>) -> Result<(), Error> {
        let t = h.entry_type;
        let (dup, what) = if t.is_gnu_longname() {
            let name = strip_nul(record)?;
            (self.long_name.replace(name).is_some(), "GNU long name")
        } else if t.is_gnu_longlink() {
            let link = strip_nul(record)?;
            (self.long_link.replace(link).is_some(), "GNU long link")
        } else {
            let pax = Pax::parse(&record)?;
            (self.pax.replace(pax).is_some(), "PAX header")
        };
        if dup {
            return Err(Error::unsafe_archive(format!(
                "two {what} records for one member"
            )));
        }
        Ok(())
    }

    /// Puts the long name and link into `h`, refusing records that
    /// contradict each other or the header.
    fn apply_to(self, h: &mut MemberHeader) -> Result<(), Error> {
        let pax = self.pax.unwrap_or_default();
        if self.long_name.is_some() && pax.path.is_some() {
            return Err(Error::unsafe_archive(
                "member has both a GNU long name and a PAX path",
            ));
        }
        if self.long_link.is_some() && pax.linkpath.is_some() {
            return Err(Error::unsafe_archive(
                "member has both a GNU long link and a PAX linkpath",
            ));
        }
        if let Some(size) = pax.size {
            if size != h.size {
                return Err(Error::unsafe_archive(format!(
                    "PAX size {size} disagrees with header size {}",
                    h.size
                )));
            }
        }
        if let Some(name) = self.long_name.or(pax.path) {
            h.name = name;
        }
        if let Some(link) = self.long_link.or(pax.linkpath) {
            h.linkname = link;
        }
        Ok(())
    }
}

/// Streaming parser state for one archive.
pub struct Parser {
    limits: Limits,
    byte_names: bool,
    entries: u64,
    metadata: u64,
    payload: u64,
    done: bool,
}

impl Parser {
    /// A parser enforcing `limits`.
    pub fn new(limits: Limits) -> Self {
        Parser {
            limits,
            byte_names: false,
            entries: 0,
            metadata: 0,
            payload: 0,
            done: false,
        }
    }

    /// Accepts names and link targets that are not UTF-8, handing them on
    /// as [`byte_name`] spells them (for a host that takes such names back);
    /// without it they are refused.
    pub fn with_byte_names(mut self, on: bool) -> Self {
        self.byte_names = on;
        self
    }

    /// Entries accepted so far.
    pub fn entries(&self) -> u64 {
        self.entries
    }

    /// Reads the next member's headers. Returns `None` at the end-of-archive
    /// marker (two zero blocks). After a file entry the caller must consume
    /// exactly [`Entry::data_len`] bytes before calling again.
    ///
    /// # Errors
    /// [`crate::ErrorKind::UnsafeArchive`] for anything outside policy,
    /// [`crate::ErrorKind::LimitExceeded`] when a bound is crossed.
    pub fn next_entry(&mut self, src: &mut dyn Source) -> Result<Option<Entry>, Error> {
        if self.done {
            return Ok(None);
        }
        let mut pending = Pending::default();
        loop {
            let mut block = [0u8; BLOCK as usize];
            src.read_exact(&mut block)?;
            if is_zero(&block) {
                self.end_of_archive(src, &pending)?;
                return Ok(None);
            }
            let header = MemberHeader::parse(&block)?;
            if !header.is_extension() {
                return self.finish_entry(header, pending).map(Some);
            }
            let record = self.read_record(src, &header)?;
            pending.keep(&header, record)?;
        }
    }

    /// After a first zero block: nothing may be pending and a second zero
    /// block must follow (GNU tar would only warn about a lone one).
    fn end_of_archive(&mut self, src: &mut dyn Source, pending: &Pending) -> Result<(), Error> {
        if !pending.is_empty() {
            return Err(Error::unsafe_archive(
                "extension record not followed by a member",
            ));
        }
        let mut block = [0u8; BLOCK as usize];
        src.read_exact(&mut block)?;
        if !is_zero(&block) {
            return Err(Error::unsafe_archive("data after a lone zero block"));
        }
        self.done = true;
        Ok(())
    }

    /// Reads an extension record's body, bounded before it is allocated.
    fn read_record(&mut self, src: &mut dyn Source, h: &MemberHeader) -> Result<Vec<u8>, Error> {
        if h.size > MAX_RECORD {
            return Err(Error::unsafe_archive(format!(
                "extension record of {} bytes exceeds {MAX_RECORD}",
                h.size
            )));
        }
        self.add_metadata(h.size)?;
        let mut buf = vec![0u8; padded(h.size) as usize];
        src.read_exact(&mut buf)?;
        buf.truncate(h.size as usize);
        Ok(buf)
    }

    fn add_metadata(&mut self, n: u64) -> Result<(), Error> {
        self.metadata = self.metadata.saturating_add(n);
        if self.metadata > self.limits.max_metadata_bytes {
            return Err(Error::limit(format!(
                "archive metadata exceeds {} bytes",
                self.limits.max_metadata_bytes
            )));
        }
        Ok(())
    }

    fn add_entry(&mut self) -> Result<(), Error> {
        self.entries += 1;
        if self.entries > self.limits.max_entries {
            return Err(Error::limit(format!(
                "archive has more than {} entries",
                self.limits.max_entries
            )));
        }
        Ok(())
    }

    fn add_payload(&mut self, size: u64) -> Result<(), Error> {
        self.payload = self.payload.saturating_add(padded(size));
        if self.payload > self.limits.max_payload_bytes {
            return Err(Error::limit(format!(
                "archive content exceeds the {}-byte output guard",
                self.limits.max_payload_bytes
            )));
        }
        Ok(())
    }

    /// Turns a member header and its extension records into an [`Entry`].
    /// The order of checks decides which error a bad member reports.
    fn finish_entry(&mut self, mut h: MemberHeader, pending: Pending) -> Result<Entry, Error> {
        self.add_entry()?;
        pending.apply_to(&mut h)?;
        let MemberHeader {
            name,
            linkname,
            entry_type,
            size,
            mode,
            mtime,
        } = h;
        let name = self.member_name(name, entry_type.is_dir())?;
        if mode & 0o7000 != 0 {
            return Err(Error::unsafe_archive(format!(
                "member {name:?} has setuid, setgid or sticky bits ({mode:o})"
            )));
        }
        let kind = self.member_kind(entry_type, linkname, &name)?;
        if kind != EntryKind::File && size != 0 {
            return Err(Error::unsafe_archive(format!(
                "non-file member {name:?} claims {size} content bytes"
            )));
        }
        self.add_payload(size)?;
        Ok(Entry {
            path: name,
            kind,
            size,
            mode: mode & 0o777,
            mtime,
        })
    }

    /// A clean relative name; directories may end in `/`, which is dropped.
    fn member_name(&mut self, raw: Vec<u8>, is_dir: bool) -> Result<String, Error> {
        let mut name = text("member name", raw, self.byte_names)?;
        if name.ends_with('/') {
            if !is_dir {
                return Err(Error::unsafe_archive(format!(
                    "non-directory member {name:?} ends with /"
                )));
            }
            while name.ends_with('/') {
                name.pop();
            }
        }
        if !is_clean_relative(&name) {
            return Err(Error::unsafe_archive(format!(
                "member name {name:?} is absolute, empty or contains . or .. components"
            )));
        }
        if name
            .split('/')
            .any(|c| byte_name::component_len(c) > MAX_COMPONENT)
        {
            return Err(Error::unsafe_archive(format!(
                "member name {:?}… has a component longer than {MAX_COMPONENT} bytes",
                name.chars().take(64).collect::<String>()
            )));
        }
        self.add_metadata(name.len() as u64)?;
        Ok(name)
    }

    /// Files, directories and links only; every other type is refused.
    fn member_kind(
        &mut self,
        t: EntryType,
        raw_link: Vec<u8>,
        name: &str,
    ) -> Result<EntryKind, Error> {
        if t.is_file() {
            return Ok(EntryKind::File);
        }
        if t.is_dir() {
            return Ok(EntryKind::Dir);
        }
        if !t.is_symlink() && !t.is_hard_link() {
            return Err(Error::unsafe_archive(format!(
                "member {name:?} has refused type {}",
                type_name(t)
            )));
        }
        let link = text("link target", raw_link, self.byte_names)?;
        if link.is_empty() {
            return Err(Error::unsafe_archive(format!(
                "link {name:?} has an empty target"
            )));
        }
        self.add_metadata(link.len() as u64)?;
        if t.is_symlink() {
            // A symlink target is data here: the tree policy decides where
            // it leads, and whether one that leaves (absolute, say) is
            // refused or left out.
            Ok(EntryKind::Symlink(link))
        } else {
            hard_link_target(name, link)
        }
    }
}

/// Hard link targets name an earlier member, so they must be clean names.
fn hard_link_target(name: &str, link: String) -> Result<EntryKind, Error> {
    if !is_clean_relative(&link) {
        return Err(Error::unsafe_archive(format!(
            "hard link {name:?} has an unsafe target {link:?}"
        )));
    }
    Ok(EntryKind::HardLink(link))
}

fn is_zero(block: &[u8]) -> bool {
    block.iter().all(|&b| b == 0)
}

/// A GNU long name or link without its NUL terminator(s), bounded.
fn strip_nul(mut v: Vec<u8>) -> Result<Vec<u8>, Error> {
    while v.last() == Some(&0) {
        v.pop();
    }
    if v.len() > MAX_NAME {
        return Err(Error::unsafe_archive(format!(
            "long name of {} bytes exceeds {MAX_NAME}",
            v.len()
        )));
    }
    Ok(v)
}

/// Validates a name or link target: bounded, no NUL, and UTF-8 (paths
/// cross the WIT boundary as strings) unless `byte_names`, where each
/// component that is not UTF-8 is spelled as [`byte_name`] says. Other
/// control characters are data: a file system allows them (macOS writes
/// `Icon\r`), they travel the other way too, and every message shows a
/// name escaped.
fn text(what: &str, raw: Vec<u8>, byte_names: bool) -> Result<String, Error> {
    if raw.len() > MAX_NAME {
        return Err(Error::unsafe_archive(format!(
            "{what} of {} bytes exceeds {MAX_NAME}",
            raw.len()
        )));
    }
    if raw.contains(&0) {
        return Err(Error::unsafe_archive(format!(
            "{what} {:?} contains NUL",
            raw.escape_ascii().to_string()
        )));
    }
    match String::from_utf8(raw) {
        Ok(s) => Ok(s),
        Err(e) if byte_names => Ok(byte_name::encode_path(e.as_bytes()).into_owned()),
        Err(e) => Err(Error::unsafe_archive(format!(
            "{what} is not UTF-8: {:?}",
            String::from_utf8_lossy(e.as_bytes())
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{self, Read};

    const LIMITS: Limits = Limits {
        max_entries: 1000,
        max_metadata_bytes: 1 << 22,
        max_payload_bytes: 1 << 30,
    };

    fn header(name: &[u8], ty: u8, size: u64, mode: u32, link: &[u8]) -> [u8; 512] {
        let mut h = tar::Header::new_gnu();
        h.set_size(size);
        h.set_mode(mode);
        h.as_old_mut().linkflag[0] = ty;
        let n = &mut h.as_old_mut().name;
        n[..name.len()].copy_from_slice(name);
        let l = &mut h.as_old_mut().linkname;
        l[..link.len()].copy_from_slice(link);
        h.set_cksum();
        *h.as_bytes()
    }

    fn record(ty: u8, data: &[u8]) -> Vec<u8> {
        let mut v = header(b"././@LongLink", ty, data.len() as u64, 0o644, b"").to_vec();
        v.extend_from_slice(data);
        v.resize(
            v.len() + crate::tar_write::padding(data.len() as u64) as usize,
            0,
        );
        v
    }

    fn pax(kvs: &[(&str, &str)]) -> Vec<u8> {
        let mut body = String::new();
        for (k, v) in kvs {
            let core = format!(" {k}={v}\n");
            let mut len = core.len() + 1;
            while format!("{len}{core}").len() != len {
                len += 1;
            }
            body.push_str(&format!("{len}{core}"));
        }
        record(b'x', body.as_bytes())
    }

    /// Reads every entry, skipping contents through the same source.
    fn parse_from(src: &mut dyn Source) -> Result<Vec<Entry>, Error> {
        parse_with(src, false)
    }

    fn parse_with(src: &mut dyn Source, byte_names: bool) -> Result<Vec<Entry>, Error> {
        let mut p = Parser::new(LIMITS).with_byte_names(byte_names);
        let mut out = Vec::new();
        let mut block = [0u8; BLOCK as usize];
        while let Some(e) = p.next_entry(src)? {
            for _ in 0..e.data_len() / BLOCK {
                src.read_exact(&mut block)?;
            }
            out.push(e);
        }
        Ok(out)
    }

    /// Parses `bytes` whole and through short reads; all must agree.
    fn parse_all(bytes: &[u8]) -> Result<Vec<Entry>, Error> {
        let whole = parse_from(&mut &bytes[..]);
        for seed in 1..=SEEDS {
            let short = parse_from(&mut ShortReads::new(bytes, seed));
            assert_eq!(
                short, whole,
                "short reads (seed {seed}) changed the outcome"
            );
        }
        whole
    }

    /// Seeds for [`ShortReads`]: each splits the stream differently.
    const SEEDS: u32 = 8;

    /// A reader that returns short, uneven reads, as a pipe may (after
    /// tar-rs's `RandomReader`).
    struct RandomReader<R> {
        inner: R,
        state: u32,
    }

    impl<R: Read> Read for RandomReader<R> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            // xorshift32: deterministic, so a failure names its seed.
            self.state ^= self.state << 13;
            self.state ^= self.state >> 17;
            self.state ^= self.state << 5;
            let n = (self.state % 97) as usize + 1;
            let n = n.min(buf.len());
            self.inner.read(&mut buf[..n])
        }
    }

    /// A [`Source`] that fills each buffer from a [`RandomReader`] by
    /// looping, as the driver's `GuardedInput` does over a stream.
    struct ShortReads<'a>(RandomReader<&'a [u8]>);

    impl<'a> ShortReads<'a> {
        fn new(data: &'a [u8], seed: u32) -> Self {
            ShortReads(RandomReader {
                inner: data,
                state: seed.wrapping_mul(0x9e37_79b9) | 1,
            })
        }
    }

    impl Source for ShortReads<'_> {
        fn read_exact(&mut self, mut buf: &mut [u8]) -> Result<(), Error> {
            while !buf.is_empty() {
                match self.0.read(buf) {
                    Ok(0) | Err(_) => return Err(Error::unsafe_archive("archive is truncated")),
                    Ok(n) => buf = &mut buf[n..],
                }
            }
            Ok(())
        }
    }

    fn with_end(mut v: Vec<u8>) -> Vec<u8> {
        v.extend_from_slice(&[0; 1024]);
        v
    }

    fn file(name: &[u8], data: &[u8]) -> Vec<u8> {
        let mut v = header(name, b'0', data.len() as u64, 0o644, b"").to_vec();
        v.extend_from_slice(data);
        v.resize(
            v.len() + crate::tar_write::padding(data.len() as u64) as usize,
            0,
        );
        v
    }

    fn refuses(bytes: Vec<u8>, needle: &str) {
        let err = parse_all(&bytes).unwrap_err();
        assert!(err.message.contains(needle), "expected {needle:?} in {err}");
    }

    #[test]
    fn accepts_plain_members() {
        let mut v = header(b"d/", b'5', 0, 0o755, b"").to_vec();
        v.extend(file(b"d/f", b"abc"));
        v.extend_from_slice(&header(b"d/l", b'2', 0, 0o777, b"f"));
        v.extend_from_slice(&header(b"d/h", b'1', 0, 0o644, b"d/f"));
        let es = parse_all(&with_end(v)).unwrap();
        assert_eq!(es.len(), 4);
        assert_eq!(es[0].kind, EntryKind::Dir);
        assert_eq!(es[0].path, "d");
        assert_eq!(es[1].size, 3);
        assert_eq!(es[2].kind, EntryKind::Symlink("f".into()));
        assert_eq!(es[3].kind, EntryKind::HardLink("d/f".into()));
    }

    #[test]
    fn refuses_traversal_and_absolute() {
        refuses(with_end(file(b"/etc/passwd", b"x")), "absolute");
        refuses(with_end(file(b"../x", b"x")), "..");
        refuses(with_end(file(b"a/../../x", b"x")), "..");
        refuses(with_end(file(b"./a", b"x")), "components");
        // An absolute link target is the tree policy's to judge.
        let es = parse_all(&with_end(header(b"l", b'2', 0, 0o777, b"/etc").to_vec())).unwrap();
        assert_eq!(es[0].kind, EntryKind::Symlink("/etc".into()));
        refuses(
            with_end(header(b"h", b'1', 0, 0o644, b"../x").to_vec()),
            "unsafe target",
        );
    }

    #[test]
    fn refuses_special_files_and_mode_bits() {
        for (ty, what) in [
            (b'3', "character"),
            (b'4', "block"),
            (b'6', "FIFO"),
            (b'S', "sparse"),
            (b'g', "global"),
            (b'Z', "unknown"),
        ] {
            refuses(with_end(header(b"s", ty, 0, 0o644, b"").to_vec()), what);
        }
        refuses(
            with_end(header(b"f", b'0', 0, 0o4755, b"").to_vec()),
            "setuid",
        );
        refuses(
            with_end(header(b"d/", b'5', 0, 0o1777, b"").to_vec()),
            "sticky",
        );
    }

    #[test]
    fn refuses_pax_differentials() {
        let mut v = pax(&[("size", "2048")]);
        v.extend(file(b"a", b"12345678"));
        refuses(with_end(v), "disagrees");
        let mut v = record(b'L', b"a\0");
        v.extend(pax(&[("path", "b")]));
        v.extend(file(b"c", b""));
        refuses(with_end(v), "both a GNU long name and a PAX path");
        let mut v = pax(&[("path", "../evil")]);
        v.extend(file(b"benign", b""));
        refuses(with_end(v), "..");
        // A PAX linkpath wins over the header's, as tar reads it: the tree
        // policy then sees where the link really leads.
        let mut v = pax(&[("linkpath", "/etc/shadow")]);
        v.extend_from_slice(&header(b"l", b'2', 0, 0o777, b"ok"));
        let es = parse_all(&with_end(v)).unwrap();
        assert_eq!(es[0].kind, EntryKind::Symlink("/etc/shadow".into()));
        let mut v = record(b'L', b"a\0");
        v.extend(record(b'L', b"b\0"));
        v.extend(file(b"c", b""));
        refuses(with_end(v), "two GNU long name");
        refuses(with_end(pax(&[("GNU.sparse.size", "1")])), "sparse");
    }

    #[test]
    fn applies_long_names_and_pax_paths() {
        let long = "x/".repeat(100) + "f";
        let mut v = record(b'L', format!("{long}\0").as_bytes());
        v.extend(file(b"short", b"z"));
        let mut w = pax(&[
            ("path", "p/q"),
            ("size", "1"),
            ("SCHILY.xattr.security.capability", "x"),
        ]);
        w.extend(file(b"ignored", b"z"));
        v.extend(w);
        let es = parse_all(&with_end(v)).unwrap();
        assert_eq!(es[0].path, long);
        assert_eq!(es[1].path, "p/q");
    }

    #[test]
    fn refuses_oversized_records_and_names() {
        let mut h = header(b"././@LongLink", b'L', MAX_RECORD + 1, 0o644, b"");
        h[148..156].copy_from_slice(b"        ");
        let mut t = tar::Header::from_byte_slice(&h).clone();
        t.set_cksum();
        refuses(with_end(t.as_bytes().to_vec()), "exceeds");
        refuses(
            with_end(record(b'L', &vec![b'a'; MAX_NAME + 10])),
            "exceeds",
        );
    }

    #[test]
    fn refuses_names_with_nul_or_bad_utf8() {
        refuses(with_end(file(b"\xff\xfe", b"")), "UTF-8");
        let mut v = record(b'L', b"a\0b\0");
        v.extend(file(b"c", b""));
        refuses(with_end(v), "NUL");
        let mut v = record(b'K', b"t\0x");
        v.extend_from_slice(&header(b"l", b'2', 0, 0o777, b""));
        refuses(with_end(v), "NUL");
    }

    #[test]
    fn names_that_are_not_utf8_are_spelled_out_where_the_host_takes_them() {
        let long = [b'\xe9'; MAX_COMPONENT];
        let mut v = file(b"d/caf\xe9", b"");
        v.extend(record(b'L', &[&b"x/"[..], &long[..], b"\0"].concat()));
        v.extend(file(b"c", b""));
        v.extend_from_slice(&header(b"l", b'2', 0, 0o777, b"../\xff"));
        v.extend_from_slice(&header(b"h", b'1', 0, 0o644, b"d/caf\xe9"));
        let got = parse_with(&mut &with_end(v.clone())[..], true).unwrap();
        let long_name = format!("x/\0{}", "e9".repeat(MAX_COMPONENT));
        assert_eq!(got[0].path, "d/\x00636166e9");
        assert_eq!(got[1].path, long_name);
        assert_eq!(got[2].kind, EntryKind::Symlink("../\0ff".into()));
        assert_eq!(got[3].kind, EntryKind::HardLink("d/\x00636166e9".into()));
        refuses(with_end(v), "UTF-8");
        // Still one component at most NAME_MAX bytes long, however spelled.
        let mut v = record(b'L', &[&long[..], b"\xe9\0"].concat());
        v.extend(file(b"c", b""));
        let e = parse_with(&mut &with_end(v)[..], true).unwrap_err();
        assert!(e.to_string().contains("longer than"), "{e}");
    }

    #[test]
    fn control_characters_in_names_and_targets_are_data() {
        let names: [&[u8]; 5] = [
            b"a\nb",
            b"a\tb",
            b"Icon\r",
            b"e\x1b[2Jx",
            "n\u{85}l".as_bytes(),
        ];
        let mut v = Vec::new();
        for n in names {
            v.extend(file(n, b"x"));
        }
        v.extend_from_slice(&header(b"l", b'2', 0, 0o777, b"a\nb"));
        let es = parse_all(&with_end(v)).unwrap();
        let got: Vec<&[u8]> = es.iter().map(|e| e.path.as_bytes()).collect();
        assert_eq!(got[..5], names);
        assert_eq!(es[5].kind, EntryKind::Symlink("a\nb".into()));
    }

    #[test]
    fn refuses_corruption_truncation_and_garbage() {
        let mut v = file(b"a", b"abc");
        v[0] ^= 1;
        refuses(with_end(v), "checksum");
        refuses(b"this is not a tar stream at all".repeat(40), "checksum");
        let v = file(b"a", &[7; 2000]);
        refuses(v[..1000].to_vec(), "truncated");
        refuses(header(b"a", b'0', 0, 0o644, b"").to_vec(), "truncated");
        let mut v = vec![0; 512];
        v.extend(file(b"a", b""));
        refuses(v, "lone zero block");
    }

    #[test]
    fn refuses_payload_on_links_and_absurd_sizes() {
        refuses(
            with_end(header(b"h", b'1', 8, 0o644, b"f").to_vec()),
            "claims",
        );
        let mut h = header(b"big", b'0', 0, 0o644, b"");
        h[124] = 0x80;
        h[125..136].copy_from_slice(&[0, 0, 0, 0, 0, 0, 0x40, 0, 0, 0, 0]);
        let mut t = tar::Header::from_byte_slice(&h).clone();
        t.set_cksum();
        let err = parse_all(&with_end(t.as_bytes().to_vec())).unwrap_err();
        assert_eq!(err.kind, crate::ErrorKind::LimitExceeded, "{err}");
        let mut h = header(b"neg", b'0', 0, 0o644, b"");
        h[124] = 0xff;
        let mut t = tar::Header::from_byte_slice(&h).clone();
        t.set_cksum();
        refuses(with_end(t.as_bytes().to_vec()), "negative");
    }

    #[test]
    fn enforces_entry_and_metadata_limits() {
        let mut v = Vec::new();
        for i in 0..5 {
            v.extend(file(format!("f{i}").as_bytes(), b""));
        }
        let bytes = with_end(v);
        let mut p = Parser::new(Limits {
            max_entries: 3,
            ..LIMITS
        });
        let mut src = &bytes[..];
        let err = loop {
            match p.next_entry(&mut src) {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("limit not enforced"),
                Err(e) => break e,
            }
        };
        assert_eq!(err.kind, crate::ErrorKind::LimitExceeded);
        let mut p = Parser::new(Limits {
            max_metadata_bytes: 4,
            ..LIMITS
        });
        let mut src = &bytes[..];
        assert!(p.next_entry(&mut src).is_ok());
        assert!(p.next_entry(&mut src).is_ok());
        assert_eq!(
            p.next_entry(&mut src).unwrap_err().kind,
            crate::ErrorKind::LimitExceeded
        );
    }

    #[test]
    fn short_reads_really_are_short() {
        let data: Vec<u8> = (0..=255).cycle().take(3000).collect();
        let mut r = ShortReads::new(&data, 1).0;
        let mut buf = [0u8; 512];
        let sizes: Vec<usize> = (0..20).map(|_| r.read(&mut buf).unwrap()).collect();
        assert!(sizes.iter().all(|&n| (1..=97).contains(&n)), "{sizes:?}");
        assert!(sizes.windows(2).any(|w| w[0] != w[1]), "{sizes:?}");
        let mut src = ShortReads::new(&data, 3);
        let mut whole = vec![0u8; 3000];
        src.read_exact(&mut whole).unwrap();
        assert_eq!(whole, data);
        assert!(src.read_exact(&mut buf[..1]).is_err());
    }

    #[test]
    fn limits_hold_across_short_reads() {
        let mut v = Vec::new();
        for i in 0..5 {
            v.extend(file(format!("f{i}").as_bytes(), b"data"));
        }
        let bytes = with_end(v);
        for seed in 1..=SEEDS {
            let mut p = Parser::new(Limits {
                max_entries: 3,
                ..LIMITS
            });
            let mut src = ShortReads::new(&bytes, seed);
            let mut block = [0u8; 512];
            let err = loop {
                match p.next_entry(&mut src) {
                    Ok(Some(e)) => {
                        assert_eq!(e.data_len(), 512);
                        src.read_exact(&mut block).unwrap();
                    }
                    Ok(None) => panic!("limit not enforced (seed {seed})"),
                    Err(e) => break e,
                }
            };
            assert_eq!(err.kind, crate::ErrorKind::LimitExceeded);
        }
    }

    #[test]
    fn names_refused_types() {
        refuses(
            with_end(header(b"c", b'3', 0, 0o644, b"").to_vec()),
            "refused type '3' (character device)",
        );
        refuses(
            with_end(header(b"v", b'V', 0, 0o644, b"").to_vec()),
            "'V' (volume label)",
        );
        refuses(
            with_end(header(b"u", 0x01, 0, 0o644, b"").to_vec()),
            "0x01 (unknown)",
        );
        refuses(
            with_end(header(b"c", b'7', 0, 0o644, b"").to_vec()),
            "contiguous",
        );
    }

    #[test]
    fn refuses_dangling_extension_records() {
        refuses(with_end(record(b'L', b"a\0")), "not followed by a member");
        refuses(with_end(pax(&[("path", "a")])), "not followed by a member");
        let mut v = record(b'K', b"t\0");
        v.extend(record(b'K', b"u\0"));
        v.extend_from_slice(&header(b"l", b'2', 0, 0o777, b"x"));
        refuses(with_end(v), "two GNU long link");
        let mut v = pax(&[("size", "0")]);
        v.extend(pax(&[("size", "0")]));
        v.extend(file(b"a", b""));
        refuses(with_end(v), "two PAX header");
    }

    #[test]
    fn applies_long_links_and_ustar_prefixes() {
        let target = "t/".repeat(80) + "f";
        let mut v = record(b'K', format!("{target}\0").as_bytes());
        v.extend_from_slice(&header(b"l", b'2', 0, 0o777, b"ignored"));
        let mut h = tar::Header::new_ustar();
        h.set_path("pre/fix/name").unwrap();
        h.as_ustar_mut().unwrap().prefix[..3].copy_from_slice(b"p/q");
        h.set_size(0);
        h.set_mode(0o644);
        h.set_cksum();
        v.extend_from_slice(h.as_bytes());
        let es = parse_all(&with_end(v)).unwrap();
        assert_eq!(es[0].kind, EntryKind::Symlink(target));
        assert_eq!(es[1].path, "p/q/pre/fix/name");
    }
}
