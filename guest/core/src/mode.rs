//! The `mode` a file mapping requests.
//!
//! Only permission bits may be requested. A set-id or sticky bit would be
//! applied by `chmod` in the sandbox (a set-uid binary for whoever runs
//! there next) or on the host, so such a mode is refused before anything
//! moves, in both directions and by every provider, rather than stripped
//! (which would be a silent partial success).

use crate::Error;

/// The bits a mapping's `mode` may carry.
pub const PERMISSION_BITS: u32 = 0o777;

/// Checks a requested mode.
///
/// # Errors
/// [`crate::ErrorKind::InvalidRequest`] for any bit outside
/// [`PERMISSION_BITS`], naming `target`.
pub fn check(mode: Option<u32>, target: &str) -> Result<(), Error> {
    match mode {
        Some(m) if m & !PERMISSION_BITS != 0 => Err(Error::invalid(format!(
            "mode {m:#o} for {target} has set-id, sticky or unknown bits; \
             only permission bits ({PERMISSION_BITS:#o}) may be requested"
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_permission_bits() {
        assert!(check(None, "t").is_ok());
        assert!(check(Some(0o600), "t").is_ok());
        assert!(check(Some(0o777), "t").is_ok());
        for bad in [0o4755, 0o2755, 0o1777, 0o10644, u32::MAX] {
            let e = check(Some(bad), "t").unwrap_err();
            assert_eq!(e.kind, crate::ErrorKind::InvalidRequest, "{bad:o}");
        }
    }
}
