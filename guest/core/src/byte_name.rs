//! Names that are not UTF-8, carried in the WIT's strings.
//!
//! A Linux name is any bytes but NUL and `/`; a WIT string is UTF-8. So a
//! path component that is not UTF-8 travels as a NUL followed by the
//! lowercase hex of its bytes ([`encode_component`]). No real name holds a
//! NUL, so the form cannot collide with one, and only a component that is
//! not UTF-8 may take it: every name has exactly one spelling, and no
//! spelling decodes to `.`, `..`, an empty name, a `/` or a NUL.
//!
//! The hosts hand such names over, and take them back in paths, only on a
//! grant the component asked (`granted-dir.byte-names`, WIT 0.2.9); the
//! component turns them back into bytes only where bytes leave it: tar
//! headers for the sandbox, and exclude matching (as tar matches bytes).

use std::borrow::Cow;

/// What starts an encoded component.
pub const MARK: char = '\0';

/// `bytes` (one path component) as a string: itself when UTF-8, else
/// [`MARK`] and its hex.
pub fn encode_component(bytes: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(s) => Cow::Borrowed(s),
        Err(_) => {
            let mut s = String::with_capacity(1 + 2 * bytes.len());
            s.push(MARK);
            for b in bytes {
                s.push(hex_digit(b >> 4));
                s.push(hex_digit(b & 0xf));
            }
            Cow::Owned(s)
        }
    }
}

/// A path's bytes as a string, component by component (`/` kept as is).
pub fn encode_path(bytes: &[u8]) -> Cow<'_, str> {
    if let Ok(s) = std::str::from_utf8(bytes) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(2 * bytes.len());
    for (i, c) in bytes.split(|&b| b == b'/').enumerate() {
        if i > 0 {
            out.push('/');
        }
        out.push_str(&encode_component(c));
    }
    Cow::Owned(out)
}

/// The bytes a component names; `None` for a malformed encoding (odd or
/// non-hex digits, or bytes that are UTF-8 and so have their own spelling).
pub fn decode_component(s: &str) -> Option<Cow<'_, [u8]>> {
    let Some(hex) = s.strip_prefix(MARK) else {
        return (!s.contains(MARK)).then_some(Cow::Borrowed(s.as_bytes()));
    };
    if hex.is_empty() || hex.len() % 2 != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(hex.len() / 2);
    for pair in hex.as_bytes().chunks_exact(2) {
        out.push(hex_value(pair[0])? << 4 | hex_value(pair[1])?);
    }
    // UTF-8 (so `.`, `..`, `/`, NUL too) has its own spelling.
    if std::str::from_utf8(&out).is_ok() {
        return None;
    }
    Some(Cow::Owned(out))
}

/// A path's bytes, component by component; `None` if any is malformed.
pub fn decode_path(s: &str) -> Option<Cow<'_, [u8]>> {
    if !s.contains(MARK) {
        return Some(Cow::Borrowed(s.as_bytes()));
    }
    let mut out = Vec::with_capacity(s.len() / 2);
    for (i, c) in s.split('/').enumerate() {
        if i > 0 {
            out.push(b'/');
        }
        out.extend_from_slice(&decode_component(c)?);
    }
    Some(Cow::Owned(out))
}

/// A clean relative path whose components may be encoded: none empty,
/// `.` or `..`, every encoded one well formed, no other NUL.
pub fn is_clean_relative(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with('/')
        && s.split('/')
            .all(|c| !c.is_empty() && c != "." && c != ".." && decode_component(c).is_some())
}

/// The length in bytes of the name component `c` spells.
pub fn component_len(c: &str) -> usize {
    match c.strip_prefix(MARK) {
        Some(hex) => hex.len() / 2,
        None => c.len(),
    }
}

/// Whether `s` holds an encoded component.
pub fn has_encoded(s: &str) -> bool {
    s.contains(MARK)
}

fn hex_digit(n: u8) -> char {
    char::from(b"0123456789abcdef"[usize::from(n & 0xf)])
}

fn hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_names_are_themselves() {
        for s in ["", "a", "caf\u{e9}", "a b\nc", "\\x"] {
            assert_eq!(encode_component(s.as_bytes()), s);
            assert_eq!(decode_component(s).unwrap(), s.as_bytes());
        }
        assert_eq!(encode_path(b"a/b/c"), "a/b/c");
    }

    #[test]
    fn other_names_round_trip_with_one_spelling() {
        for bytes in [
            &b"\xff"[..],
            b"caf\xe9",
            b"\xc3",
            b"a\x80b",
            b"\xfe\xff.txt",
        ] {
            let s = encode_component(bytes);
            assert!(s.starts_with(MARK), "{s:?}");
            assert!(!s.contains('/'));
            assert_eq!(decode_component(&s).unwrap(), bytes);
        }
        assert_eq!(encode_component(b"\xff\x01"), "\0ff01");
        let path = b"ok/caf\xe9/x\xff/\xe9\xe9.txt";
        let s = encode_path(path);
        assert_eq!(s, "ok/\x00636166e9/\x0078ff/\0e9e92e747874");
        assert_eq!(decode_path(&s).unwrap(), &path[..]);
    }

    #[test]
    fn malformed_or_non_canonical_spellings_are_refused() {
        for bad in [
            "\0", "\0f", "\0zz", "\0FF", "\x002e2e", "\x002e", "\x002f", "\x0000", "\x0061",
            "a\0ff", "\0ff\0",
        ] {
            assert!(decode_component(bad).is_none(), "{bad:?}");
        }
        assert!(decode_path("a/\x002e2e/b").is_none());
        assert!(decode_path("a/b\0").is_none());
    }

    #[test]
    fn clean_paths_may_hold_encoded_components() {
        assert!(is_clean_relative("a/\0ff/b"));
        assert!(is_clean_relative("a/b"));
        for bad in [
            "",
            "/a",
            "a//b",
            "a/./b",
            "a/..",
            "a/\x002e2e",
            "a\0ff",
            "a/\0",
        ] {
            assert!(!is_clean_relative(bad), "{bad:?}");
        }
        assert_eq!(component_len("\0ffee"), 2);
        assert_eq!(component_len("abc"), 3);
    }
}
