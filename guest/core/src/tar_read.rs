//! A strict, bounded parser for tar streams written by an untrusted sandbox.
//!
//! Why not `tar::Archive`: it reads GNU `L`/`K` and PAX records whole with no
//! cap, honours some fields other parsers ignore, and turns unknown types
//! into regular files. Here every ambiguity is refused instead of resolved:
//! a PAX `size` that disagrees with the header, a GNU long name beside a PAX
//! `path`, two records of one kind for one member, special files, set-id
//! bits, bad checksums, non-UTF-8 or control characters in names. Content
//! bytes are not read here: the caller moves them (host-side) after each
//! [`Entry`] and so the parser never holds more than one metadata record.

use crate::sandbox_path::is_clean_relative;
use crate::tar_write::{padded, BLOCK};
use crate::SyncError;

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

/// Longest name or link target accepted (PATH_MAX).
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
    fn read_exact(&mut self, buf: &mut [u8]) -> Result<(), SyncError>;
}

impl Source for &[u8] {
    fn read_exact(&mut self, buf: &mut [u8]) -> Result<(), SyncError> {
        if self.len() < buf.len() {
            return Err(SyncError::unsafe_archive("archive is truncated"));
        }
        let (head, tail) = self.split_at(buf.len());
        buf.copy_from_slice(head);
        *self = tail;
        Ok(())
    }
}

#[derive(Default)]
struct Pending {
    long_name: Option<Vec<u8>>,
    long_link: Option<Vec<u8>>,
    pax: Option<Pax>,
}

#[derive(Default)]
struct Pax {
    path: Option<Vec<u8>>,
    linkpath: Option<Vec<u8>>,
    size: Option<u64>,
}

/// Streaming parser state for one archive.
pub struct Parser {
    limits: Limits,
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
            entries: 0,
            metadata: 0,
            payload: 0,
            done: false,
        }
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
    pub fn next_entry(&mut self, src: &mut dyn Source) -> Result<Option<Entry>, SyncError> {
        if self.done {
            return Ok(None);
        }
        let mut pending = Pending::default();
        loop {
            let mut block = [0u8; BLOCK as usize];
            src.read_exact(&mut block)?;
            if block.iter().all(|&b| b == 0) {
                if pending.long_name.is_some()
                    || pending.long_link.is_some()
                    || pending.pax.is_some()
                {
                    return Err(SyncError::unsafe_archive(
                        "extension record not followed by a member",
                    ));
                }
                src.read_exact(&mut block)?;
                if block.iter().any(|&b| b != 0) {
                    return Err(SyncError::unsafe_archive("data after a lone zero block"));
                }
                self.done = true;
                return Ok(None);
            }
            let header = RawHeader::parse(&block)?;
            match header.typeflag {
                b'L' | b'K' | b'x' => {
                    let record = self.read_record(src, &header)?;
                    let slot_name = match header.typeflag {
                        b'L' => "GNU long name",
                        b'K' => "GNU long link",
                        _ => "PAX header",
                    };
                    let dup = match header.typeflag {
                        b'L' => pending.long_name.replace(strip_nul(record)?).is_some(),
                        b'K' => pending.long_link.replace(strip_nul(record)?).is_some(),
                        _ => pending.pax.replace(parse_pax(&record)?).is_some(),
                    };
                    if dup {
                        return Err(SyncError::unsafe_archive(format!(
                            "two {slot_name} records for one member"
                        )));
                    }
                }
                _ => return self.finish_entry(header, pending).map(Some),
            }
        }
    }

    fn read_record(&mut self, src: &mut dyn Source, h: &RawHeader) -> Result<Vec<u8>, SyncError> {
        if h.size > MAX_RECORD {
            return Err(SyncError::unsafe_archive(format!(
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

    fn add_metadata(&mut self, n: u64) -> Result<(), SyncError> {
        self.metadata = self.metadata.saturating_add(n);
        if self.metadata > self.limits.max_metadata_bytes {
            return Err(SyncError::limit(format!(
                "archive metadata exceeds {} bytes",
                self.limits.max_metadata_bytes
            )));
        }
        Ok(())
    }

    fn finish_entry(&mut self, h: RawHeader, pending: Pending) -> Result<Entry, SyncError> {
        self.entries += 1;
        if self.entries > self.limits.max_entries {
            return Err(SyncError::limit(format!(
                "archive has more than {} entries",
                self.limits.max_entries
            )));
        }
        let pax = pending.pax.unwrap_or_default();
        if pending.long_name.is_some() && pax.path.is_some() {
            return Err(SyncError::unsafe_archive(
                "member has both a GNU long name and a PAX path",
            ));
        }
        if pending.long_link.is_some() && pax.linkpath.is_some() {
            return Err(SyncError::unsafe_archive(
                "member has both a GNU long link and a PAX linkpath",
            ));
        }
        if let Some(size) = pax.size {
            if size != h.size {
                return Err(SyncError::unsafe_archive(format!(
                    "PAX size {size} disagrees with header size {}",
                    h.size
                )));
            }
        }
        let raw_name = pending.long_name.or(pax.path).unwrap_or(h.name);
        let raw_link = pending.long_link.or(pax.linkpath).unwrap_or(h.linkname);

        let kind_is_dir = h.typeflag == b'5';
        let mut name = text("member name", raw_name)?;
        if name.ends_with('/') {
            if !kind_is_dir {
                return Err(SyncError::unsafe_archive(format!(
                    "non-directory member {name:?} ends with /"
                )));
            }
            while name.ends_with('/') {
                name.pop();
            }
        }
        if !is_clean_relative(&name) {
            return Err(SyncError::unsafe_archive(format!(
                "member name {name:?} is absolute, empty or contains . or .. components"
            )));
        }
        if name.split('/').any(|c| c.len() > MAX_COMPONENT) {
            return Err(SyncError::unsafe_archive(format!(
                "member name {:?}… has a component longer than {MAX_COMPONENT} bytes",
                name.chars().take(64).collect::<String>()
            )));
        }
        self.add_metadata(name.len() as u64)?;

        if h.mode & 0o7000 != 0 {
            return Err(SyncError::unsafe_archive(format!(
                "member {name:?} has setuid, setgid or sticky bits ({:o})",
                h.mode
            )));
        }
        let kind = match h.typeflag {
            b'0' | 0 => EntryKind::File,
            b'5' => EntryKind::Dir,
            b'2' | b'1' => {
                let link = text("link target", raw_link)?;
                if link.is_empty() {
                    return Err(SyncError::unsafe_archive(format!(
                        "link {name:?} has an empty target"
                    )));
                }
                self.add_metadata(link.len() as u64)?;
                if h.typeflag == b'2' {
                    if link.starts_with('/') {
                        return Err(SyncError::unsafe_archive(format!(
                            "symlink {name:?} has an absolute target {link:?}"
                        )));
                    }
                    EntryKind::Symlink(link)
                } else {
                    if !is_clean_relative(&link) {
                        return Err(SyncError::unsafe_archive(format!(
                            "hard link {name:?} has an unsafe target {link:?}"
                        )));
                    }
                    EntryKind::HardLink(link)
                }
            }
            other => {
                return Err(SyncError::unsafe_archive(format!(
                    "member {name:?} has refused type {}",
                    type_name(other)
                )))
            }
        };
        if !matches!(kind, EntryKind::File) && h.size != 0 {
            return Err(SyncError::unsafe_archive(format!(
                "non-file member {name:?} claims {} content bytes",
                h.size
            )));
        }
        self.payload = self.payload.saturating_add(padded(h.size));
        if self.payload > self.limits.max_payload_bytes {
            return Err(SyncError::limit(format!(
                "archive content exceeds the {}-byte output guard",
                self.limits.max_payload_bytes
            )));
        }
        Ok(Entry {
            path: name,
            kind,
            size: h.size,
            mode: h.mode & 0o777,
            mtime: h.mtime,
        })
    }
}

fn type_name(t: u8) -> String {
    let what = match t {
        b'3' => "character device",
        b'4' => "block device",
        b'6' => "FIFO",
        b'7' => "contiguous file",
        b'g' => "PAX global header",
        b'S' => "GNU sparse file",
        b'V' => "volume label",
        b'M' => "multi-volume continuation",
        b'N' => "GNU old long name",
        b'D' => "GNU dump directory",
        _ => "unknown",
    };
    if t.is_ascii_graphic() {
        format!("'{}' ({what})", t as char)
    } else {
        format!("{t:#04x} ({what})")
    }
}

fn strip_nul(mut v: Vec<u8>) -> Result<Vec<u8>, SyncError> {
    while v.last() == Some(&0) {
        v.pop();
    }
    if v.len() > MAX_NAME {
        return Err(SyncError::unsafe_archive(format!(
            "long name of {} bytes exceeds {MAX_NAME}",
            v.len()
        )));
    }
    Ok(v)
}

/// Validates a name or link target: UTF-8, bounded, no NUL or control characters.
fn text(what: &str, raw: Vec<u8>) -> Result<String, SyncError> {
    if raw.len() > MAX_NAME {
        return Err(SyncError::unsafe_archive(format!(
            "{what} of {} bytes exceeds {MAX_NAME}",
            raw.len()
        )));
    }
    let s = String::from_utf8(raw).map_err(|e| {
        SyncError::unsafe_archive(format!(
            "{what} is not UTF-8: {:?}",
            String::from_utf8_lossy(e.as_bytes())
        ))
    })?;
    if s.chars().any(|c| c.is_control()) {
        return Err(SyncError::unsafe_archive(format!(
            "{what} {s:?} contains NUL or control characters"
        )));
    }
    Ok(s)
}

fn parse_pax(record: &[u8]) -> Result<Pax, SyncError> {
    let mut pax = Pax::default();
    let mut rest = record;
    while !rest.is_empty() {
        let sp = rest
            .iter()
            .position(|&b| b == b' ')
            .ok_or_else(|| SyncError::unsafe_archive("PAX record without a length"))?;
        let len: usize = std::str::from_utf8(&rest[..sp])
            .ok()
            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| SyncError::unsafe_archive("PAX record has a malformed length"))?;
        if len <= sp + 1 || len > rest.len() || rest[len - 1] != b'\n' {
            return Err(SyncError::unsafe_archive(
                "PAX record length does not match its contents",
            ));
        }
        let kv = &rest[sp + 1..len - 1];
        let eq = kv
            .iter()
            .position(|&b| b == b'=')
            .ok_or_else(|| SyncError::unsafe_archive("PAX record without '='"))?;
        let (key, value) = (&kv[..eq], &kv[eq + 1..]);
        let dup = match key {
            b"path" => pax.path.replace(value.to_vec()).is_some(),
            b"linkpath" => pax.linkpath.replace(value.to_vec()).is_some(),
            b"size" => {
                let size = std::str::from_utf8(value)
                    .ok()
                    .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|s| s.parse::<u64>().ok())
                    .ok_or_else(|| SyncError::unsafe_archive("PAX size is not a decimal number"))?;
                pax.size.replace(size).is_some()
            }
            k if k.starts_with(b"GNU.sparse") => {
                return Err(SyncError::unsafe_archive(
                    "PAX sparse-file records are refused",
                ))
            }
            // Times, ownership, xattrs and comments are never applied.
            _ => false,
        };
        if dup {
            return Err(SyncError::unsafe_archive(format!(
                "PAX key {:?} repeated",
                String::from_utf8_lossy(key)
            )));
        }
        rest = &rest[len..];
    }
    Ok(pax)
}

/// The fields of one 512-byte header the policy needs.
struct RawHeader {
    name: Vec<u8>,
    linkname: Vec<u8>,
    typeflag: u8,
    size: u64,
    mode: u32,
    mtime: i64,
}

impl RawHeader {
    fn parse(b: &[u8; 512]) -> Result<RawHeader, SyncError> {
        let stored = parse_octal(&b[148..156])
            .ok_or_else(|| SyncError::unsafe_archive("header checksum field is malformed"))?;
        let (mut unsigned, mut signed) = (0u64, 0i64);
        for (i, &byte) in b.iter().enumerate() {
            let v = if (148..156).contains(&i) { b' ' } else { byte };
            unsigned += u64::from(v);
            signed += i64::from(v as i8);
        }
        if stored != unsigned && i64::try_from(stored).ok() != Some(signed) {
            return Err(SyncError::unsafe_archive(
                "header checksum mismatch (corrupt or not a tar stream)",
            ));
        }
        let magic = &b[257..265];
        let posix = match magic {
            b"ustar\x0000" => true,
            b"ustar  \x00" => false,
            _ => {
                return Err(SyncError::unsafe_archive(
                    "header lacks the ustar/GNU magic (not a tar stream)",
                ))
            }
        };
        let mut name = cstr(&b[0..100]).to_vec();
        if posix {
            let prefix = cstr(&b[345..500]);
            if !prefix.is_empty() {
                let mut full = prefix.to_vec();
                full.push(b'/');
                full.extend_from_slice(&name);
                name = full;
            }
        }
        let size = parse_number(&b[124..136])
            .ok_or_else(|| SyncError::unsafe_archive("header size is malformed or negative"))?;
        let mode = parse_octal(&b[100..108])
            .and_then(|m| u32::try_from(m).ok())
            .ok_or_else(|| SyncError::unsafe_archive("header mode is malformed"))?;
        let mtime = parse_number(&b[136..148])
            .and_then(|t| i64::try_from(t).ok())
            .unwrap_or(0);
        Ok(RawHeader {
            name,
            linkname: cstr(&b[157..257]).to_vec(),
            typeflag: b[156],
            size,
            mode,
            mtime,
        })
    }
}

fn cstr(field: &[u8]) -> &[u8] {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    &field[..end]
}

/// Octal with optional leading spaces, terminated by NUL or space.
fn parse_octal(field: &[u8]) -> Option<u64> {
    let s = field.iter().skip_while(|&&b| b == b' ');
    let mut value: u64 = 0;
    let mut digits = 0;
    let mut ended = false;
    for &b in s {
        match b {
            b'0'..=b'7' if !ended => {
                value = value.checked_mul(8)?.checked_add(u64::from(b - b'0'))?;
                digits += 1;
            }
            0 | b' ' => ended = true,
            _ => return None,
        }
    }
    if digits == 0 {
        return if field.iter().all(|&b| b == 0 || b == b' ') {
            Some(0)
        } else {
            None
        };
    }
    Some(value)
}

/// Octal, or GNU base-256 (high bit set); negative base-256 is refused.
fn parse_number(field: &[u8]) -> Option<u64> {
    match field.first() {
        Some(&0x80) => {
            let mut value: u64 = 0;
            for &b in &field[1..] {
                value = value.checked_mul(256)?.checked_add(u64::from(b))?;
            }
            Some(value)
        }
        Some(&b) if b & 0x80 != 0 => None,
        _ => parse_octal(field),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    fn parse_all(mut bytes: &[u8]) -> Result<Vec<Entry>, SyncError> {
        let mut p = Parser::new(LIMITS);
        let mut out = Vec::new();
        while let Some(e) = p.next_entry(&mut bytes)? {
            let skip = e.data_len() as usize;
            if bytes.len() < skip {
                return Err(SyncError::unsafe_archive("archive is truncated"));
            }
            bytes = &bytes[skip..];
            out.push(e);
        }
        Ok(out)
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
        refuses(
            with_end(header(b"l", b'2', 0, 0o777, b"/etc").to_vec()),
            "absolute target",
        );
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
        let mut v = pax(&[("linkpath", "/etc/shadow")]);
        v.extend_from_slice(&header(b"l", b'2', 0, 0o777, b"ok"));
        refuses(with_end(v), "absolute target");
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
    fn refuses_names_with_control_characters_or_bad_utf8() {
        refuses(with_end(file(b"a\nb", b"")), "control");
        refuses(with_end(file(b"a\tb", b"")), "control");
        refuses(with_end(file(b"\xff\xfe", b"")), "UTF-8");
        let mut v = record(b'L', b"a\0b\0");
        v.extend(file(b"c", b""));
        refuses(with_end(v), "control");
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
}
