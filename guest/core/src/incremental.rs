//! Incremental sync: when a re-sync may leave a target file as it is.
//!
//! Size, mode and mtime are not enough: npm stamps every file 1985, builds
//! pin `SOURCE_DATE_EPOCH`, and a same-size rewrite within the second keeps
//! both. So nothing here compares metadata across machines. Each side only
//! asks its own filesystem whether a file is still the one a sync moved:
//!
//! - a file's **identity** is its device, inode and status-change time
//!   (ctime) to the nanosecond. Every change to a file's contents, size,
//!   mode, times or links moves its ctime, and no call sets a ctime: it is
//!   the filesystem's clock at the change;
//! - the **sender** names what it sent by the identity its bytes were read
//!   under (a [`Token`]): the identity is taken before the bytes are read,
//!   so a later change moves it and the token stops matching;
//! - the **receiver** records, for each file it landed, its own identity
//!   of the landed file and the sender's token (a *fact*);
//! - a re-sync keeps a file only where the receiver's file still has the
//!   recorded identity **and** the sender's file still has the recorded
//!   token. Anything else (a chmod, a link, a touch, a rename, any tool
//!   that rewrites and restores an mtime) moves an identity, and the file
//!   is sent.
//!
//! One race remains: a change in the same clock tick as the identity was
//! read leaves the ctime as it was. So an identity counts only once the
//! filesystem's clock has passed it: the receiver checks its files'
//! ctimes against a probe file it creates after landing them (the same
//! filesystem's clock; see [`ctime_before`]), the sandbox does the same
//! for the files it lists, and the host checks its sources against its
//! own clock with [`SETTLE_NS`] of margin (it may not write a probe into a
//! source).
//!
//! Who is trusted: on sync-in the receiver is the sandbox, and its facts
//! (`.paperclip-upload-state`) are the sandbox's to forge; a forged fact
//! only makes the host skip a file whose bytes the sandbox controls
//! anyway. On sync-out the receiver is the host, which keeps its facts in
//! its own record store; a sandbox that lies about its identities can only
//! make the host keep a file a sync of that sandbox landed before.

use std::hash::Hasher as _;

use siphasher::sip::SipHasher13;

/// How far a host source's ctime must lie behind the host's clock before
/// its identity counts. A local filesystem stamps changes with the
/// kernel's coarse clock, which lags the system clock by at most a tick
/// (10 ms at `HZ=100`, the coarsest): a ctime older than that is one no
/// later change can repeat. A network filesystem stamps with its server's
/// clock; one more than this behind ours is the residual risk
/// (THREAT_MODEL.md).
pub const SETTLE_NS: i128 = 100_000_000;

/// How much later than a whole-second ctime the change it stamps may
/// have been: a filesystem that keeps whole seconds (ext4 with 128-byte
/// inodes, ext3, sshfs, many NFS setups) or two (FAT) stamps every change
/// of that span the same, so a second rewrite within it moves no
/// identity. A ctime on a whole second counts only once the clock is past
/// the span too (on a fine-grained filesystem one in a billion ctimes
/// falls there, and waits that much longer for nothing).
pub const COARSE_NS: i128 = 2_000_000_000;

/// Hex digits of a token on the wire.
pub const TOKEN_HEX: usize = 16;

/// What one side moved a file under: a 64-bit SipHash-1-3 of its
/// identity, under fixed keys. Only ever compared for equality, with the
/// same path's token: what it must resist is an accidental match (64 bits,
/// as the truncated SHA-256 it replaced gave, for much less work on every
/// listed or walked file). It needs no secret: a sandbox that forges
/// identities or tokens already chooses what it sends, and can only make
/// the host send more, or keep bytes a sync of it landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Token(pub [u8; 8]);

/// The tokens' SipHash keys: fixed, since tokens are kept between calls,
/// on both sides.
const TOKEN_KEYS: (u64, u64) = (
    u64::from_le_bytes(*b"sandbox-"),
    u64::from_le_bytes(*b"sync tok"),
);

impl Token {
    fn of(domain: &str, fields: &[&[u8]]) -> Token {
        let mut h = SipHasher13::new_with_keys(TOKEN_KEYS.0, TOKEN_KEYS.1);
        h.write(&(domain.len() as u64).to_le_bytes());
        h.write(domain.as_bytes());
        for f in fields {
            h.write(&(f.len() as u64).to_le_bytes());
            h.write(f);
        }
        Token(h.finish().to_le_bytes())
    }

    /// Its wire form: [`TOKEN_HEX`] lowercase hex digits.
    pub fn hex(&self) -> String {
        let mut s = String::with_capacity(TOKEN_HEX);
        for b in self.0 {
            s.push(char::from(HEX[usize::from(b >> 4)]));
            s.push(char::from(HEX[usize::from(b & 15)]));
        }
        s
    }

    /// Parses [`Token::hex`] output; anything else is none.
    pub fn parse(s: &str) -> Option<Token> {
        let b = s.as_bytes();
        if b.len() != TOKEN_HEX {
            return None;
        }
        let mut t = [0u8; 8];
        for (i, pair) in b.chunks(2).enumerate() {
            t[i] = (nibble(pair[0])? << 4) | nibble(pair[1])?;
        }
        Some(Token(t))
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn nibble(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

/// A host file's identity, as its walk read it before its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostId {
    /// Device.
    pub device: u64,
    /// Inode.
    pub inode: u64,
    /// Size in bytes.
    pub size: u64,
    /// Status change time, seconds.
    pub ctime_sec: i64,
    /// Status change time, nanoseconds.
    pub ctime_nsec: u32,
}

impl HostId {
    /// True when the host's clock `now` (seconds, nanoseconds) is more
    /// than [`SETTLE_NS`] past the identity's ctime, and [`COARSE_NS`]
    /// more where the ctime is a whole second: a change after it would
    /// have moved it.
    pub fn settled(&self, now: (i64, u32)) -> bool {
        let at = |s: i64, n: u32| i128::from(s) * 1_000_000_000 + i128::from(n);
        let grain = if self.ctime_nsec == 0 { COARSE_NS } else { 0 };
        at(self.ctime_sec, self.ctime_nsec) + grain + SETTLE_NS < at(now.0, now.1)
    }
}

/// The token of a host file sent into the sandbox as a member with `mode`
/// and header mtime `mtime`, read under identity `id`.
pub fn inbound(id: &HostId, mode: u32, mtime: u64) -> Token {
    Token::of(
        "sandbox-sync in 2",
        &[
            &id.device.to_le_bytes(),
            &id.inode.to_le_bytes(),
            &id.size.to_le_bytes(),
            &id.ctime_sec.to_le_bytes(),
            &id.ctime_nsec.to_le_bytes(),
            &mode.to_le_bytes(),
            &mtime.to_le_bytes(),
        ],
    )
}

/// The token of a sandbox file as the outbound program listed it: its
/// device, inode and ctime, as `stat` printed them.
pub fn outbound(device: &str, inode: &str, ctime: &str) -> Token {
    Token::of(
        "sandbox-sync out 2",
        &[device.as_bytes(), inode.as_bytes(), ctime.as_bytes()],
    )
}

/// Whether `ctime` lies strictly before `probe`, both as the sandbox
/// programs print them (`TZ=UTC0 stat -c %z`: `YYYY-MM-DD HH:MM:SS[.N] +0000`,
/// fixed width up to the fraction, which GNU and BusyBox print with nine
/// digits). Anything that is not that shape is not before: its file is
/// simply sent.
pub fn ctime_before(ctime: &str, probe: &str) -> bool {
    match (ctime_key(ctime), ctime_key(probe)) {
        (Some(c), Some(p)) => c < p,
        _ => false,
    }
}

/// `%z` as (seconds part, nanoseconds), comparable.
fn ctime_key(s: &str) -> Option<(&str, u32)> {
    let s = s.strip_suffix(" +0000")?;
    let (whole, frac) = match s.split_once('.') {
        Some((w, f)) => (w, f),
        None => (s, ""),
    };
    let shape = whole.len() == 19
        && whole.bytes().enumerate().all(|(i, b)| match i {
            4 | 7 => b == b'-',
            10 => b == b' ',
            13 | 16 => b == b':',
            _ => b.is_ascii_digit(),
        });
    if !shape || frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut ns = 0u32;
    for i in 0..9 {
        ns = ns * 10 + frac.as_bytes().get(i).map_or(0, |d| u32::from(d - b'0'));
    }
    Some((whole, ns))
}

/// What the host landed in one sync-out target: per host file (device,
/// inode), the size and ctime it had once landed and the sandbox's token
/// it was landed from.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Facts {
    map: std::collections::HashMap<(u64, u64), Fact>,
}

/// One landed host file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fact {
    /// Size in bytes.
    pub size: u64,
    /// Status change time, seconds.
    pub ctime_sec: i64,
    /// Status change time, nanoseconds.
    pub ctime_nsec: u32,
    /// The sandbox's token for what it sent.
    pub token: Token,
}

/// A record's first bytes: the format, so an old record is simply none.
const FACTS_MAGIC: &[u8; 8] = b"ssfacts1";
/// Bytes per fact in a record.
const FACT_BYTES: usize = 8 + 8 + 8 + 8 + 4 + 8;

impl Facts {
    /// No facts.
    pub fn new() -> Self {
        Facts::default()
    }

    /// Records that host file (`device`, `inode`) is `fact`.
    pub fn insert(&mut self, device: u64, inode: u64, fact: Fact) {
        self.map.insert((device, inode), fact);
    }

    /// The fact for host file (`device`, `inode`), if its size and ctime
    /// are still as recorded.
    pub fn current(&self, device: u64, inode: u64, size: u64, ctime: (i64, u32)) -> Option<Token> {
        self.map
            .get(&(device, inode))
            .filter(|f| f.size == size && (f.ctime_sec, f.ctime_nsec) == ctime)
            .map(|f| f.token)
    }

    /// How many files.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The record's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(FACTS_MAGIC.len() + self.map.len() * FACT_BYTES);
        out.extend_from_slice(FACTS_MAGIC);
        for (&(dev, ino), f) in &self.map {
            out.extend_from_slice(&dev.to_le_bytes());
            out.extend_from_slice(&ino.to_le_bytes());
            out.extend_from_slice(&f.size.to_le_bytes());
            out.extend_from_slice(&f.ctime_sec.to_le_bytes());
            out.extend_from_slice(&f.ctime_nsec.to_le_bytes());
            out.extend_from_slice(&f.token.0);
        }
        out
    }

    /// Reads [`Facts::encode`] output; anything else is no facts.
    pub fn decode(bytes: &[u8]) -> Facts {
        let Some(body) = bytes.strip_prefix(FACTS_MAGIC.as_slice()) else {
            return Facts::new();
        };
        if body.len() % FACT_BYTES != 0 {
            return Facts::new();
        }
        let mut facts = Facts::new();
        for rec in body.chunks_exact(FACT_BYTES) {
            let u64_at = |i: usize| {
                let mut b = [0u8; 8];
                b.copy_from_slice(&rec[i..i + 8]);
                u64::from_le_bytes(b)
            };
            let mut nsec = [0u8; 4];
            nsec.copy_from_slice(&rec[32..36]);
            let mut token = [0u8; 8];
            token.copy_from_slice(&rec[36..44]);
            facts.insert(
                u64_at(0),
                u64_at(8),
                Fact {
                    size: u64_at(16),
                    ctime_sec: u64_at(24) as i64,
                    ctime_nsec: u32::from_le_bytes(nsec),
                    token: Token(token),
                },
            );
        }
        facts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(ctime_sec: i64, ctime_nsec: u32) -> HostId {
        HostId {
            device: 2049,
            inode: 77,
            size: 12,
            ctime_sec,
            ctime_nsec,
        }
    }

    #[test]
    fn tokens_round_trip_and_differ_on_every_field() {
        let base = inbound(&id(100, 5), 0o644, 7);
        assert_eq!(Token::parse(&base.hex()), Some(base));
        assert_eq!(base.hex().len(), TOKEN_HEX);
        let variants = [
            inbound(
                &HostId {
                    device: 1,
                    ..id(100, 5)
                },
                0o644,
                7,
            ),
            inbound(
                &HostId {
                    inode: 78,
                    ..id(100, 5)
                },
                0o644,
                7,
            ),
            inbound(
                &HostId {
                    size: 13,
                    ..id(100, 5)
                },
                0o644,
                7,
            ),
            inbound(&id(101, 5), 0o644, 7),
            inbound(&id(100, 6), 0o644, 7),
            inbound(&id(100, 5), 0o600, 7),
            inbound(&id(100, 5), 0o644, 8),
        ];
        for v in variants {
            assert_ne!(v, base);
        }
        assert_ne!(outbound("1", "2", "x"), outbound("1", "2", "y"));
        assert_ne!(outbound("1", "23", ""), outbound("12", "3", ""));
        for bad in [
            "",
            "0123456789abcdeF",
            "0123456789abcde",
            "0123456789abcdefa",
            "0123456789abcdeg",
        ] {
            assert_eq!(Token::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_host_identity_settles_a_margin_after_its_ctime() {
        assert!(!id(100, 1).settled((100, 100_000_000)));
        assert!(!id(100, 1).settled((100, 100_000_001)));
        assert!(id(100, 1).settled((100, 100_000_002)));
        assert!(!id(100, 500).settled((99, 0)), "a clock behind the file");
        // A whole-second ctime may stamp any change of the next two
        // seconds (a coarse filesystem): it waits them out.
        assert!(!id(100, 0).settled((100, 500_000_000)));
        assert!(!id(101, 0).settled((103, 100_000_000)));
        assert!(id(101, 0).settled((103, 100_000_001)));
    }

    #[test]
    fn ctimes_compare_as_the_sandbox_prints_them() {
        let a = "2026-12-01 23:43:04.220807597 +0000";
        let b = "2026-12-01 23:43:04.220807598 +0000";
        assert!(ctime_before(a, b));
        assert!(!ctime_before(b, a));
        assert!(!ctime_before(a, a), "the probe's own tick is not before it");
        assert!(ctime_before("2026-12-01 23:43:03 +0000", a), "no fraction");
        assert!(!ctime_before(
            "2026-12-01 23:43:04 +0000",
            "2026-12-01 23:43:04 +0000"
        ));
        assert!(ctime_before(
            "2026-12-01 23:43:04.22 +0000",
            "2026-12-01 23:43:04.3 +0000"
        ));
        for bad in [
            "2026-12-01 23:43:04.2 +0100",
            "2026-12-01T23:43:04.2 +0000",
            "1796168584",
            "2026-12-01 23:43:04.2208075970 +0000",
            "2026-12-01 23:43:0x.2 +0000",
        ] {
            assert!(!ctime_before(bad, b), "{bad}");
            assert!(!ctime_before(a, bad), "{bad}");
        }
    }

    #[test]
    fn facts_round_trip_and_match_only_an_unchanged_file() {
        let mut f = Facts::new();
        let token = outbound("1", "2", "t");
        f.insert(
            9,
            10,
            Fact {
                size: 3,
                ctime_sec: -4,
                ctime_nsec: 5,
                token,
            },
        );
        let back = Facts::decode(&f.encode());
        assert_eq!(back, f);
        assert_eq!(back.current(9, 10, 3, (-4, 5)), Some(token));
        assert_eq!(back.current(9, 10, 3, (-4, 6)), None);
        assert_eq!(back.current(9, 10, 4, (-4, 5)), None);
        assert_eq!(back.current(9, 11, 3, (-4, 5)), None);
        assert!(Facts::decode(b"ssfacts0").is_empty());
        assert!(Facts::decode(&f.encode()[..20]).is_empty());
    }
}
