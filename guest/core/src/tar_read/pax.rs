//! PAX extended headers (`x` members): `"<len> <key>=<value>\n"` records.
//!
//! Only the keys below change what a member is; the rest (times, ownership,
//! xattrs, comments) are never applied, so they are skipped.

use crate::Error;

/// Replaces the header's name.
pub(super) const PAX_PATH: &[u8] = b"path";
/// Replaces the header's link target.
pub(super) const PAX_LINKPATH: &[u8] = b"linkpath";
/// Must agree with the header's size.
pub(super) const PAX_SIZE: &[u8] = b"size";
/// Prefix of GNU's sparse-file keys (`GNU.sparse.size`, `.map`, …): refused.
pub(super) const PAX_GNU_SPARSE: &[u8] = b"GNU.sparse";

/// The keys of one `x` record that matter here.
#[derive(Default)]
pub(super) struct Pax {
    pub(super) path: Option<Vec<u8>>,
    pub(super) linkpath: Option<Vec<u8>>,
    pub(super) size: Option<u64>,
}

impl Pax {
    /// Parses the body of one `x` member.
    ///
    /// # Errors
    /// [`crate::ErrorKind::UnsafeArchive`] for a malformed record, a
    /// repeated key, a non-decimal size or any sparse-file key.
    pub(super) fn parse(body: &[u8]) -> Result<Pax, Error> {
        let mut pax = Pax::default();
        let mut rest = body;
        while !rest.is_empty() {
            let record = split_record(rest)?;
            pax.apply(record.key, record.value)?;
            rest = record.rest;
        }
        Ok(pax)
    }

    fn apply(&mut self, key: &[u8], value: &[u8]) -> Result<(), Error> {
        let dup = match key {
            PAX_PATH => self.path.replace(value.to_vec()).is_some(),
            PAX_LINKPATH => self.linkpath.replace(value.to_vec()).is_some(),
            PAX_SIZE => {
                let size = decimal(value)
                    .ok_or_else(|| Error::unsafe_archive("PAX size is not a decimal number"))?;
                self.size.replace(size).is_some()
            }
            k if k.starts_with(PAX_GNU_SPARSE) => {
                return Err(Error::unsafe_archive("PAX sparse-file records are refused"))
            }
            _ => false,
        };
        if dup {
            return Err(Error::unsafe_archive(format!(
                "PAX key {:?} repeated",
                String::from_utf8_lossy(key)
            )));
        }
        Ok(())
    }
}

/// One `key=value` record and the records after it.
struct Record<'a> {
    key: &'a [u8],
    value: &'a [u8],
    rest: &'a [u8],
}

/// Splits the first record off `rest`.
fn split_record(rest: &[u8]) -> Result<Record<'_>, Error> {
    let sp = rest
        .iter()
        .position(|&b| b == b' ')
        .ok_or_else(|| Error::unsafe_archive("PAX record without a length"))?;
    let len = decimal(&rest[..sp])
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| Error::unsafe_archive("PAX record has a malformed length"))?;
    // The length counts itself, the space, the key=value and the newline.
    if len <= sp + 1 || len > rest.len() || rest[len - 1] != b'\n' {
        return Err(Error::unsafe_archive(
            "PAX record length does not match its contents",
        ));
    }
    let kv = &rest[sp + 1..len - 1];
    let eq = kv
        .iter()
        .position(|&b| b == b'=')
        .ok_or_else(|| Error::unsafe_archive("PAX record without '='"))?;
    Ok(Record {
        key: &kv[..eq],
        value: &kv[eq + 1..],
        rest: &rest[len..],
    })
}

/// ASCII digits only: no sign, no spaces, not empty.
fn decimal(bytes: &[u8]) -> Option<u64> {
    if bytes.is_empty() || !bytes.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refuses(body: &[u8], needle: &str) {
        match Pax::parse(body) {
            Ok(_) => panic!("accepted {:?}", String::from_utf8_lossy(body)),
            Err(e) => assert!(e.message.contains(needle), "expected {needle:?} in {e}"),
        }
    }

    #[test]
    fn reads_the_keys_that_matter_and_skips_the_rest() {
        let pax = Pax::parse(b"12 path=a/b\n17 linkpath=../c\n9 size=7\n12 uid=1000\n").unwrap();
        assert_eq!(pax.path.as_deref(), Some(&b"a/b"[..]));
        assert_eq!(pax.linkpath.as_deref(), Some(&b"../c"[..]));
        assert_eq!(pax.size, Some(7));
        assert!(Pax::parse(b"").unwrap().path.is_none());
    }

    #[test]
    fn refuses_malformed_records() {
        refuses(b"path=a\n", "without a length");
        refuses(b"+9 path=a\n", "malformed length");
        refuses(b"99999999999999999999999 path=a\n", "malformed length");
        refuses(b"2 \n", "does not match");
        refuses(b"40 path=a\n", "does not match");
        refuses(b"9 path=a ", "does not match");
        refuses(b"7 path\n", "without '='");
        refuses(b"11 size=-1\n", "decimal");
        refuses(b"8 size=\n", "decimal");
        refuses(b"9 path=a\n9 path=b\n", "repeated");
        refuses(b"22 GNU.sparse.major=1\n", "sparse");
    }
}
