//! Unpredictable names: scratch directories and commit tokens.

/// `bytes` random bytes from `fill`, as lowercase hex.
///
/// # Errors
/// Whatever `fill` reports: there is no fallback to predictable bytes, so
/// a component without a random source fails closed.
pub fn random_hex<E>(
    bytes: usize,
    fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
) -> Result<String, E> {
    let mut buf = vec![0u8; bytes];
    fill(&mut buf)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_source_fails_closed() {
        let r = random_hex(8, |_| Err("no entropy"));
        assert_eq!(r, Err("no entropy"));
    }

    #[test]
    fn hex_of_what_the_source_gave() {
        let r: Result<String, ()> = random_hex(3, |b| {
            b.copy_from_slice(&[0x00, 0xab, 0xff]);
            Ok(())
        });
        assert_eq!(r.as_deref(), Ok("00abff"));
    }
}
