//! Whether data is worth compressing, judged from a sample.

/// Order-0 entropy of `bytes` as a fraction of 8 bits per byte: about what
/// a byte-oriented compressor can reach at best without context (text
/// lands near 0.6, already-compressed or random data at 1.0). Real
/// codecs also exploit repetition, so this errs towards "incompressible".
pub fn entropy_ratio(bytes: &[u8]) -> f64 {
    if bytes.is_empty() {
        return 1.0;
    }
    let mut counts = [0u64; 256];
    for &b in bytes {
        counts[usize::from(b)] += 1;
    }
    let n = bytes.len() as f64;
    let bits: f64 = counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / n;
            -p * p.log2()
        })
        .sum();
    bits / 8.0
}

/// Samples at or above this ratio are sent plain.
pub const COMPRESSIBLE_BELOW: f64 = 0.9;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_compressible_and_random_is_not() {
        let text = b"2026-11-29T09:00:00Z INFO worker-3 processed request id=42\n".repeat(500);
        assert!(entropy_ratio(&text) < 0.6);
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let random: Vec<u8> = (0..65536)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 32) as u8
            })
            .collect();
        assert!(entropy_ratio(&random) > 0.99);
        assert!(entropy_ratio(&[]) >= COMPRESSIBLE_BELOW);
        assert_eq!(entropy_ratio(&[7; 1000]), 0.0);
    }
}
