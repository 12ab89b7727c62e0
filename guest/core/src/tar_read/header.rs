//! One 512-byte member header, read through `tar`'s field views.
//!
//! Only the field names come from tar-rs. Its getters (`size()`, `mode()`,
//! `cksum()`, `path()`) take numbers and names this parser refuses, so the
//! fields are decoded here, under the stricter rules below.

use tar::{EntryType, Header, UstarHeader};

use crate::Error;

/// Largest member size accepted (2^60 bytes).
const MAX_SIZE: u64 = 1 << 60;

/// The fields of one header that the policy needs.
pub(super) struct MemberHeader {
    /// `name`, joined to the ustar `prefix` when there is one.
    pub(super) name: Vec<u8>,
    pub(super) linkname: Vec<u8>,
    pub(super) entry_type: EntryType,
    pub(super) size: u64,
    pub(super) mode: u32,
    pub(super) mtime: i64,
}

impl MemberHeader {
    /// Parses one header block: checks the checksum and the magic, then
    /// decodes the fields.
    ///
    /// # Errors
    /// [`crate::ErrorKind::UnsafeArchive`] for a bad checksum, a header
    /// that is neither ustar nor GNU, or a malformed size or mode.
    pub(super) fn parse(block: &[u8; 512]) -> Result<MemberHeader, Error> {
        // Cannot panic: the block is exactly one byte-aligned header.
        let h = Header::from_byte_slice(block);
        verify_checksum(h)?;
        let ustar = ustar_view(h)?;
        let old = h.as_old();
        let size = parse_number(&old.size)
            .ok_or_else(|| Error::unsafe_archive("header size is malformed or negative"))?;
        // Padding a size this close to u64::MAX to whole blocks would wrap
        // (to a member with no data, so its content would be read as the
        // next headers); no real file is an exabyte.
        if size > MAX_SIZE {
            return Err(Error::unsafe_archive(format!(
                "header size {size} is absurd"
            )));
        }
        let mode = parse_octal(&old.mode)
            .and_then(|m| u32::try_from(m).ok())
            .ok_or_else(|| Error::unsafe_archive("header mode is malformed"))?;
        // The time is cosmetic: an unreadable one becomes the epoch, not a refusal.
        let mtime = parse_number(&old.mtime)
            .and_then(|t| i64::try_from(t).ok())
            .unwrap_or(0);
        Ok(MemberHeader {
            name: full_name(&old.name, ustar),
            linkname: cstr(&old.linkname).to_vec(),
            entry_type: h.entry_type(),
            size,
            mode,
            mtime,
        })
    }

    /// GNU `L`/`K` or PAX `x`: a record describing the member that follows.
    pub(super) fn is_extension(&self) -> bool {
        let t = self.entry_type;
        t.is_gnu_longname() || t.is_gnu_longlink() || t.is_pax_local_extensions()
    }
}

/// The checksum sums the header with its own field read as spaces. Historic
/// writers summed signed bytes, so either sum is accepted (as GNU tar does).
fn verify_checksum(h: &Header) -> Result<(), Error> {
    let field = &h.as_old().cksum;
    let stored = parse_octal(field)
        .ok_or_else(|| Error::unsafe_archive("header checksum field is malformed"))?;
    let blank = field.map(|_| b' ');
    let unsigned = |s: &[u8]| s.iter().map(|&b| u64::from(b)).sum::<u64>();
    let signed = |s: &[u8]| s.iter().map(|&b| i64::from(b as i8)).sum::<i64>();
    let bytes = h.as_bytes();
    let sum_unsigned = unsigned(bytes) - unsigned(field) + unsigned(&blank);
    let sum_signed = signed(bytes) - signed(field) + signed(&blank);
    if stored != sum_unsigned && i64::try_from(stored).ok() != Some(sum_signed) {
        return Err(Error::unsafe_archive(
            "header checksum mismatch (corrupt or not a tar stream)",
        ));
    }
    Ok(())
}

/// The ustar view of a POSIX header, `None` for a GNU one; v7 headers and
/// anything else are refused.
fn ustar_view(h: &Header) -> Result<Option<&UstarHeader>, Error> {
    match (h.as_ustar(), h.as_gnu()) {
        (Some(ustar), _) => Ok(Some(ustar)),
        (None, Some(_)) => Ok(None),
        (None, None) => Err(Error::unsafe_archive(
            "header lacks the ustar/GNU magic (not a tar stream)",
        )),
    }
}

/// `prefix/name` for ustar. GNU headers keep other fields where ustar has
/// `prefix`, so their name is `name` alone.
fn full_name(name: &[u8], ustar: Option<&UstarHeader>) -> Vec<u8> {
    let name = cstr(name);
    match ustar.map(|u| cstr(&u.prefix)) {
        Some(prefix) if !prefix.is_empty() => [prefix, b"/", name].concat(),
        _ => name.to_vec(),
    }
}

/// How a refused typeflag is shown in an error: the byte and its meaning.
pub(super) fn type_name(t: EntryType) -> String {
    let what = match t {
        EntryType::Char => "character device",
        EntryType::Block => "block device",
        EntryType::Fifo => "FIFO",
        EntryType::Continuous => "contiguous file",
        EntryType::XGlobalHeader => "PAX global header",
        EntryType::GNUSparse => "GNU sparse file",
        // GNU-only types that tar-rs has no name for.
        _ => match t.as_byte() {
            b'V' => "volume label",
            b'M' => "multi-volume continuation",
            b'N' => "GNU old long name",
            b'D' => "GNU dump directory",
            _ => "unknown",
        },
    };
    let b = t.as_byte();
    if b.is_ascii_graphic() {
        format!("'{}' ({what})", b as char)
    } else {
        format!("{b:#04x} ({what})")
    }
}

/// The bytes before the first NUL (all of them if there is none).
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

    fn gnu(name: &[u8]) -> Header {
        let mut h = Header::new_gnu();
        h.as_old_mut().name[..name.len()].copy_from_slice(name);
        h.set_size(0);
        h.set_mode(0o644);
        h.set_cksum();
        h
    }

    fn parse(h: &Header) -> Result<MemberHeader, Error> {
        MemberHeader::parse(h.as_bytes())
    }

    #[test]
    fn octal_fields_are_strict() {
        assert_eq!(parse_octal(b"0000644\0"), Some(0o644));
        assert_eq!(parse_octal(b"   644 \0"), Some(0o644));
        assert_eq!(parse_octal(b"\0\0\0\0\0\0\0\0"), Some(0));
        assert_eq!(parse_octal(b"        "), Some(0));
        assert_eq!(parse_octal(b"0000648\0"), None);
        assert_eq!(parse_octal(b"644\x00644"), None);
        assert_eq!(parse_octal(b"+644\0\0\0\0"), None);
        assert_eq!(parse_octal(b"77777777777777777777777"), None);
    }

    #[test]
    fn base256_is_positive_only_and_bounded() {
        let mut field = [0u8; 12];
        field[0] = 0x80;
        field[11] = 7;
        assert_eq!(parse_number(&field), Some(7));
        field[0] = 0x81;
        assert_eq!(parse_number(&field), None);
        field[0] = 0xff;
        assert_eq!(parse_number(&field), None);
        let mut wide = [0xffu8; 12];
        wide[0] = 0x80;
        wide[1..4].fill(0);
        assert_eq!(parse_number(&wide), Some(u64::MAX));
        wide[3] = 1;
        assert_eq!(parse_number(&wide), None);
    }

    #[test]
    fn accepts_signed_checksums() {
        let mut h = gnu(b"\xe9t\xe9");
        let signed: i64 = h
            .as_bytes()
            .iter()
            .enumerate()
            .map(|(i, &b)| {
                if (148..156).contains(&i) {
                    32
                } else {
                    i64::from(b as i8)
                }
            })
            .sum();
        let cksum = format!("{signed:06o}\0 ");
        h.as_old_mut().cksum.copy_from_slice(cksum.as_bytes());
        assert!(parse(&h).is_ok());
        h.as_old_mut().cksum[5] ^= 1;
        assert!(parse(&h).is_err());
    }

    #[test]
    fn joins_the_ustar_prefix_only() {
        let mut h = Header::new_ustar();
        h.as_old_mut().name[..1].copy_from_slice(b"f");
        h.as_ustar_mut().expect("ustar").prefix[..3].copy_from_slice(b"a/b");
        h.set_size(0);
        h.set_mode(0o644);
        h.set_cksum();
        assert_eq!(parse(&h).map(|m| m.name).ok(), Some(b"a/b/f".to_vec()));
        // The same bytes in a GNU header are atime/ctime, not a prefix.
        let mut g = gnu(b"f");
        g.as_gnu_mut().expect("gnu").atime[..3].copy_from_slice(b"a/b");
        g.set_cksum();
        assert_eq!(parse(&g).map(|m| m.name).ok(), Some(b"f".to_vec()));
    }

    #[test]
    fn refuses_v7_headers() {
        let mut h = Header::new_old();
        h.as_old_mut().name[..1].copy_from_slice(b"f");
        h.set_size(0);
        h.set_mode(0o644);
        h.set_cksum();
        let err = parse(&h).err().map(|e| e.message);
        assert!(err.is_some_and(|m| m.contains("magic")));
    }

    /// A base-256 size just below u64::MAX once wrapped when padded.
    #[test]
    fn absurd_sizes_are_refused() {
        let mut h = tar::Header::new_gnu();
        h.set_size(0);
        h.as_old_mut().size = [
            0x80, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe,
        ];
        h.set_cksum();
        let block: [u8; 512] = h.as_bytes()[..].try_into().unwrap();
        let err = MemberHeader::parse(&block).err().unwrap();
        assert!(err.message.contains("absurd"), "{err}");
    }
}
