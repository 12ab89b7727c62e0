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
//! for the files it lists.
//!
//! **Racy files.** A writer through a shared mapping (numpy.memmap, LMDB,
//! a database) moves the ctime only when it first writes a clean page:
//! Linux stamps the file at that fault, and later writes to the page go
//! through unnoticed until writeback cleans it, `dirty_expire` plus
//! `dirty_writeback` later (35 s by default). So an identity proves a file
//! unchanged only once its ctime lies [`RACY_NS`] behind the clock it was
//! read by. A sender's file changed more recently than that is *racy*
//! (as git calls such index entries): it is named by its content instead.
//! The receiver digests what it landed of it (MD5, what `md5sum` prints),
//! and a re-sync keeps it only where the sender's file now digests the
//! same: on sync-in the host reads its source again ([`inbound_racy`],
//! [`inbound_fact`]), on sync-out the sandbox digests the files whose
//! ctimes lie in the last sync's racy window ([`racy_window`],
//! [`outbound_content`]). Once settled, a kept racy file is named by its
//! identity again. A writer that keeps a mapping of a file where nothing
//! writes pages back (tmpfs, or `dirty_writeback_centisecs` 0) can write
//! unseen for as long as it holds it: `--checksum` names every file by its
//! content.
//!
//! Who is trusted: on sync-in the receiver is the sandbox, and its facts
//! (`.paperclip-upload-state`) are the sandbox's to forge; a forged fact
//! only makes the host skip a file whose bytes the sandbox controls
//! anyway. On sync-out the receiver is the host, which keeps its facts in
//! its own record store; a sandbox that lies about its identities can only
//! make the host keep a file a sync of that sandbox landed before.

use std::hash::Hasher as _;

use siphasher::sip::SipHasher13;

/// How far a sender's ctime must lie behind the clock before its identity
/// counts: Linux writes a dirty page back `dirty_expire_centisecs` (30 s)
/// after it was dirtied, at the flusher's next wake-up
/// (`dirty_writeback_centisecs`, 5 s), and only then makes a shared
/// mapping's next write to it stamp the file again; 25 s more for a
/// flusher behind a busy disk. This also covers the clock tick (a change
/// within the tick the identity was read in keeps the ctime) and a
/// network filesystem whose server's clock is behind ours by less than
/// it. A file changed more recently is named by its content.
pub const RACY_NS: i128 = 60_000_000_000;

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
    /// than [`RACY_NS`] past the identity's ctime, and [`COARSE_NS`]
    /// more where the ctime is a whole second: a change after it would
    /// have moved it. Otherwise the file is racy.
    pub fn settled(&self, now: (i64, u32)) -> bool {
        let at = |s: i64, n: u32| i128::from(s) * 1_000_000_000 + i128::from(n);
        let grain = if self.ctime_nsec == 0 { COARSE_NS } else { 0 };
        at(self.ctime_sec, self.ctime_nsec) + grain + RACY_NS < at(now.0, now.1)
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

/// Characters of a racy token on the wire: `r` and 15 hex digits.
pub const RACY_HEX: usize = 16;

/// What a racy host file is sent under: `r` and 60 bits of a hash of its
/// size, and the mode and mtime it lands with. The sandbox digests the
/// file it landed and records `<this>-<md5>` ([`fact_token`]); a re-sync
/// keeps the file where the host's file now has the same size, mode and
/// mtime and digests the same ([`inbound_fact`]). The host's identity is
/// left out: the bytes are compared, so a copy of them lands nothing new.
pub fn inbound_racy(size: u64, mode: u32, mtime: u64) -> String {
    let t = Token::of(
        "sandbox-sync in racy 1",
        &[
            &size.to_le_bytes(),
            &mode.to_le_bytes(),
            &mtime.to_le_bytes(),
        ],
    );
    let mut s = String::with_capacity(RACY_HEX);
    s.push('r');
    s.push_str(&t.hex()[1..]);
    s
}

/// What a sandbox records for a racy file it landed, folded to a token:
/// the racy token it was sent under and the digest of what landed.
pub fn inbound_fact(racy: &str, md5: &[u8; 16]) -> Token {
    Token::of("sandbox-sync in racy fact 1", &[racy.as_bytes(), md5])
}

/// A token as an inbound listing names it: a [`Token`] (`false`), or a
/// racy file's `r<15 hex>-<32 hex md5>`, folded by [`inbound_fact`]
/// (`true`: the host must digest its file to compare).
pub fn fact_token(s: &str) -> Option<(Token, bool)> {
    if let Some(t) = Token::parse(s) {
        return Some((t, false));
    }
    let (racy, md5) = s.split_once('-')?;
    let hex_digits = |s: &str| s.bytes().all(|b| nibble(b).is_some());
    if racy.len() != RACY_HEX || !racy.starts_with('r') || !hex_digits(&racy[1..]) {
        return None;
    }
    Some((inbound_fact(racy, &parse_md5(md5)?), true))
}

/// 32 lowercase hex digits, as `md5sum` prints a digest.
pub fn parse_md5(s: &str) -> Option<[u8; 16]> {
    let b = s.as_bytes();
    if b.len() != 32 {
        return None;
    }
    let mut d = [0u8; 16];
    for (i, pair) in b.chunks(2).enumerate() {
        d[i] = (nibble(pair[0])? << 4) | nibble(pair[1])?;
    }
    Some(d)
}

/// The token of a sandbox file as the outbound program listed it: its
/// device, inode and ctime, as `stat` printed them.
pub fn outbound(device: &str, inode: &str, ctime: &str) -> Token {
    Token::of(
        "sandbox-sync out 2",
        &[device.as_bytes(), inode.as_bytes(), ctime.as_bytes()],
    )
}

/// The token of a racy sandbox file by its content: its identity's
/// token (see [`outbound`]) and the digest of its bytes.
pub fn outbound_content(identity: Token, md5: &[u8; 16]) -> Token {
    Token::of("sandbox-sync out content 1", &[&identity.0, md5])
}

/// Whether a sandbox file with `ctime` was racy when the clock read
/// `probe` (both as the sandbox prints them, see [`ctime_before`]): its
/// ctime lies less than [`RACY_NS`] before it. Anything unreadable is
/// racy.
pub fn racy_at(ctime: &str, probe: &str) -> bool {
    match (ctime_ns(ctime), ctime_ns(probe)) {
        (Some(c), Some(p)) => c + RACY_NS >= p,
        _ => true,
    }
}

/// The racy window of a sync whose sandbox clock read `probe`: the
/// ctimes from the first (a whole second, at or before `probe` less
/// [`RACY_NS`]) to just before `probe`, as strings the sandbox compares
/// its `stat` output with. A file whose ctime lies in it was racy then and
/// is still as it was; its content decides whether it still is.
pub fn racy_window(probe: &str) -> Option<(String, String)> {
    let p = ctime_ns(probe)?;
    let lo = (p - RACY_NS).div_euclid(1_000_000_000);
    Some((format_ctime(i64::try_from(lo).ok()?)?, probe.to_owned()))
}

/// `%z` as nanoseconds since the epoch.
fn ctime_ns(s: &str) -> Option<i128> {
    let (whole, ns) = ctime_key(s)?;
    let num = |r: std::ops::Range<usize>| whole.get(r)?.parse::<i64>().ok();
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, se) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3_600 + mi * 60 + se;
    Some(i128::from(secs) * 1_000_000_000 + i128::from(ns))
}

/// Seconds since the epoch as `TZ=UTC0 stat -c %z` prints a whole second.
fn format_ctime(secs: i64) -> Option<String> {
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    if !(0..=9999).contains(&y) {
        return None;
    }
    Some(format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} +0000",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60
    ))
}

// Days from and to a proleptic Gregorian date (Howard Hinnant's
// algorithms): two small conversions are not worth a date crate in the
// guest.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
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
    /// The sandbox's clock when it listed what they were landed from (as
    /// it printed it): the racy window the next sync's sandbox digests.
    pub probe: Option<String>,
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

/// A record's first bytes: the format, so an old record is simply none
/// (the first format had no probe: its facts still count).
const FACTS_MAGIC: &[u8; 8] = b"ssfacts2";
const FACTS_MAGIC_1: &[u8; 8] = b"ssfacts1";
/// The longest probe a record keeps.
const PROBE_MAX: usize = 64;
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
        let probe = self.probe.as_deref().filter(|p| p.len() <= PROBE_MAX);
        let probe = probe.unwrap_or("").as_bytes();
        let mut out =
            Vec::with_capacity(FACTS_MAGIC.len() + 1 + probe.len() + self.map.len() * FACT_BYTES);
        out.extend_from_slice(FACTS_MAGIC);
        // At most PROBE_MAX: the cast is lossless.
        out.push(probe.len() as u8);
        out.extend_from_slice(probe);
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
        let (body, probe) = if let Some(rest) = bytes.strip_prefix(FACTS_MAGIC.as_slice()) {
            let Some((&n, rest)) = rest.split_first() else {
                return Facts::new();
            };
            let n = usize::from(n);
            let Some(probe) = rest.get(..n).and_then(|p| std::str::from_utf8(p).ok()) else {
                return Facts::new();
            };
            (&rest[n..], (n > 0).then(|| probe.to_owned()))
        } else if let Some(body) = bytes.strip_prefix(FACTS_MAGIC_1.as_slice()) {
            (body, None)
        } else {
            return Facts::new();
        };
        if body.len() % FACT_BYTES != 0 {
            return Facts::new();
        }
        let mut facts = Facts {
            probe,
            ..Facts::new()
        };
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
        assert!(!id(100, 1).settled((160, 0)));
        assert!(!id(100, 1).settled((160, 1)));
        assert!(id(100, 1).settled((160, 2)));
        assert!(!id(100, 500).settled((99, 0)), "a clock behind the file");
        // A whole-second ctime may stamp any change of the next two
        // seconds (a coarse filesystem): it waits them out.
        assert!(!id(100, 0).settled((161, 500_000_000)));
        assert!(!id(101, 0).settled((163, 0)));
        assert!(id(101, 0).settled((163, 1)));
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
    fn racy_tokens_carry_the_landed_digest() {
        let r = inbound_racy(12, 0o644, 7);
        assert_eq!(r.len(), RACY_HEX);
        assert!(r.starts_with('r') && r[1..].bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(r, inbound_racy(13, 0o644, 7));
        assert_ne!(r, inbound_racy(12, 0o600, 7));
        assert_ne!(r, inbound_racy(12, 0o644, 8));
        let md5 = "0cc175b9c0f1b6a831c399e269772661"; // md5sum of "a"
        let (t, racy) = fact_token(&format!("{r}-{md5}")).unwrap();
        assert!(racy);
        assert_eq!(t, inbound_fact(&r, &parse_md5(md5).unwrap()));
        let b = parse_md5("92eb5ffee6ae2fec3ad71c777531578f").unwrap(); // "b"
        assert_ne!(t, inbound_fact(&r, &b));
        let plain = inbound(&id(100, 5), 0o644, 7);
        assert_eq!(fact_token(&plain.hex()), Some((plain, false)));
        for bad in [
            format!("{r}-{}", &md5[1..]),
            format!("{r}{md5}"),
            format!("x{}-{md5}", &r[1..]),
            format!("{}-{md5}", &r[..15]),
            format!("{r}-{}", md5.to_uppercase()),
        ] {
            assert_eq!(fact_token(&bad), None, "{bad}");
        }
        let a = outbound("1", "2", "t");
        let digest = parse_md5(md5).unwrap();
        assert_ne!(outbound_content(a, &digest), a);
        assert_ne!(
            outbound_content(a, &digest),
            outbound_content(outbound("1", "2", "u"), &digest)
        );
    }

    #[test]
    fn the_racy_window_is_the_minute_before_a_probe() {
        assert_eq!(format_ctime(0).unwrap(), "1970-01-01 00:00:00 +0000");
        // `date -u -d @1796601822`: Mon Dec 7 00:03:42 UTC 2026.
        assert_eq!(
            ctime_ns("2026-12-07 00:03:42.5 +0000"),
            Some(1_796_601_822_500_000_000)
        );
        assert_eq!(
            format_ctime(1_796_601_822).unwrap(),
            "2026-12-07 00:03:42 +0000"
        );
        assert_eq!(
            format_ctime(951_782_400).unwrap(),
            "2000-02-29 00:00:00 +0000"
        );
        for d in [-800_000, -1, 0, 59, 60, 365, 11_016, 20_000, 2_932_896] {
            let (y, m, dd) = civil_from_days(d);
            assert_eq!(days_from_civil(y, m, dd), d);
        }
        let probe = "2026-12-07 00:01:00.25 +0000";
        let (lo, hi) = racy_window(probe).unwrap();
        assert_eq!(lo, "2026-12-07 00:00:00 +0000");
        assert_eq!(hi, probe);
        // The sandbox compares as strings: the window's ends order as
        // the times do.
        let inside = "2026-12-07 00:00:00.300000000 +0000";
        assert!(lo.as_str() <= inside && inside < hi.as_str());
        assert!("2026-12-06 23:59:59.999999999 +0000" < lo.as_str());
        assert!(racy_at(inside, probe));
        assert!(racy_at("2026-12-07 00:00:00.25 +0000", probe));
        // The window starts a whole second early: more digested, none missed.
        assert!(!racy_at("2026-12-07 00:00:00.1 +0000", probe));
        assert!(!racy_at("2026-12-07 00:00:00.249999999 +0000", probe));
        assert!(racy_at("not a time", probe));
        // Across a year's end.
        let (lo, _) = racy_window("2027-01-01 00:00:30 +0000").unwrap();
        assert_eq!(lo, "2026-12-31 23:59:30 +0000");
        assert_eq!(racy_window("yesterday"), None);
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
        f.probe = Some("2026-12-01 23:43:04.220807597 +0000".into());
        let back = Facts::decode(&f.encode());
        assert_eq!(back, f);
        // A record of the first format still counts, without a probe.
        let mut old = b"ssfacts1".to_vec();
        old.extend_from_slice(&f.encode()[9 + 35..]);
        let old = Facts::decode(&old);
        assert_eq!(old.current(9, 10, 3, (-4, 5)), Some(token));
        assert_eq!(old.probe, None);
        assert_eq!(back.current(9, 10, 3, (-4, 5)), Some(token));
        assert_eq!(back.current(9, 10, 3, (-4, 6)), None);
        assert_eq!(back.current(9, 10, 4, (-4, 5)), None);
        assert_eq!(back.current(9, 11, 3, (-4, 5)), None);
        assert!(Facts::decode(b"ssfacts0").is_empty());
        assert!(Facts::decode(b"ssfacts2\x09short").is_empty());
        assert!(Facts::decode(&f.encode()[..20]).is_empty());
    }
}
