//! POSIX shell single-quoting.
//!
//! Every string the component interpolates into script text goes through
//! [`sh_quote`]: wrap in `'…'` and spell each `'` as `'\''` (the kubectl 2026
//! fix). NUL cannot be represented in a shell word, so it is refused.

use crate::Error;

/// Quotes `s` as one literal POSIX `sh` word.
///
/// # Errors
/// [`crate::ErrorKind::InvalidRequest`] when `s` contains a NUL byte.
pub fn sh_quote(s: &str) -> Result<String, Error> {
    if s.contains('\0') {
        return Err(Error::invalid(format!("string contains a NUL byte: {s:?}")));
    }
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        if c == '\'' {
            out.push_str("'\\''");
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_metacharacters_literally() {
        assert_eq!(sh_quote("a b").unwrap(), "'a b'");
        assert_eq!(sh_quote("a'b").unwrap(), "'a'\\''b'");
        assert_eq!(sh_quote("$(id)`id`").unwrap(), "'$(id)`id`'");
        assert_eq!(sh_quote("").unwrap(), "''");
    }

    #[test]
    fn refuses_nul() {
        assert!(sh_quote("a\0b").is_err());
    }
}
