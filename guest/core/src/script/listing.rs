//! The listings the programs print of the sandbox's files for incremental
//! sync, read as they arrive (plain lines, gzip: `zlist`, or base64 of
//! gzip: `blist`, a toolbox command's text) into a compact table.
//!
//! The sandbox decides how much it lists, so nothing it names is kept as a
//! name: per listed file the table holds a keyed 64-bit hash of its path,
//! its token and the listing's line that named it (24 bytes whatever the
//! path's length: a million files take 24 MB), and the host answers by
//! line (a racy file a sync-out listing digests adds a content token).
//! Inflating is bounded as it goes, so a bomb stops at its bound
//! without ever being held. What the sandbox claims here can only make the
//! host skip sending a file whose bytes the sandbox already controls
//! (sync-in), or keep a file a sync of it landed before (sync-out).

use std::collections::BTreeMap;
use std::hash::{BuildHasher, RandomState};
use std::io::Write;

use super::TAG;
use crate::incremental::Token;

/// What a listing said of one file: the token of its identity, and the
/// listing's line (counting from 1) that named it, by which the host's
/// answer names it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listed {
    /// See [`crate::incremental`].
    pub token: Token,
    /// The line, from 1.
    pub line: u32,
    /// Sync-in: the token names a racy file by its content (the host
    /// digests its file to compare). Sync-out: the file's identity lies
    /// within the racy window of the listing's probe.
    pub racy: bool,
    /// Sync-out: the token of the file's content, where the sandbox
    /// digested it ([`crate::incremental::outbound_content`]).
    pub content: Option<Token>,
}

/// The files a listing named, by path (see the module docs). Two paths
/// whose hashes collide (about n²/2⁶⁵ for n paths) are both left out: only
/// ever sent, never kept.
#[derive(Debug, Clone, Default)]
pub struct Named {
    hasher: RandomState,
    /// (hash, token, line, racy), sorted by hash once sealed.
    entries: Vec<(u64, Token, u32, bool)>,
    /// Content tokens by line (sync-out's digested racy files).
    content: BTreeMap<u32, Token>,
    /// Sync-out: the sandbox's clock when it listed (as it printed it).
    pub probe: Option<String>,
}

impl Named {
    /// Adds `path`, listed with `token` on `line` (`racy`: see [`Listed`]).
    pub fn insert(&mut self, path: &str, token: Token, line: u32, racy: bool) {
        let hash = self.hasher.hash_one(path);
        self.entries.push((hash, token, line, racy));
    }

    /// Notes the content token of the file on `line` (before sealing;
    /// lines were inserted in ascending order), from its identity's.
    fn digested(&mut self, line: u32, md5: &[u8; 16]) {
        if let Ok(at) = self.entries.binary_search_by_key(&line, |e| e.2) {
            let identity = self.entries[at].1;
            let token = crate::incremental::outbound_content(identity, md5);
            self.content.insert(line, token);
        }
    }

    /// Sorts the table for [`Named::get`], leaving out colliding paths.
    #[must_use]
    pub fn seal(mut self) -> Self {
        self.entries.sort_unstable_by_key(|e| e.0);
        let hashes: Vec<u64> = self.entries.iter().map(|e| e.0).collect();
        let mut at = 0;
        self.entries.retain(|e| {
            let twice = (at > 0 && hashes[at - 1] == e.0) || hashes.get(at + 1) == Some(&e.0);
            at += 1;
            !twice
        });
        self.entries.shrink_to_fit();
        self
    }

    /// What the listing said of `path` (on a sealed table).
    pub fn get(&self, path: &str) -> Option<Listed> {
        let hash = self.hasher.hash_one(path);
        let at = self.entries.binary_search_by_key(&hash, |e| e.0).ok()?;
        let (_, token, line, racy) = self.entries[at];
        let content = self.content.get(&line).copied();
        Some(Listed {
            token,
            line,
            racy,
            content,
        })
    }

    /// Files listed.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when it lists nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The lines of the files it lists, in no order.
    pub fn lines(&self) -> impl Iterator<Item = u32> + '_ {
        self.entries.iter().map(|e| e.2)
    }
}

/// `lines` (any order) as ascending `<first> <last>` lines of runs: how
/// the host names listed files back to the program.
pub fn ranges(mut lines: Vec<u32>) -> Vec<u8> {
    lines.sort_unstable();
    lines.dedup();
    let mut out = Vec::new();
    let mut run: Option<(u32, u32)> = None;
    for l in lines {
        run = match run {
            Some((a, b)) if l == b + 1 => Some((a, l)),
            Some((a, b)) => {
                out.extend_from_slice(format!("{a} {b}\n").as_bytes());
                Some((l, l))
            }
            None => Some((l, l)),
        };
    }
    if let Some((a, b)) = run {
        out.extend_from_slice(format!("{a} {b}\n").as_bytes());
    }
    out
}

/// What takes a listing's lines, numbered from 1, without their newline.
pub trait Sink {
    /// Takes line `n`.
    fn line(&mut self, n: u32, bytes: &[u8]);
}

/// The longest listed line read; a longer one is skipped whole (no path
/// past `PATH_MAX` is kept anyway).
const MAX_LINE: usize = 8 << 10;

/// Linux's `PATH_MAX`: no longer path is ever kept.
const PATH_MAX: usize = 4096;

/// How a listing's bytes come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// Lines.
    Plain,
    /// gzip of the lines (`zlist`).
    Gzip,
    /// Lines of base64 of gzip of the lines (`blist`).
    Base64Gzip,
}

/// Reads one listing as its bytes arrive into a [`Sink`], at most `max`
/// bytes of lines in all. Anything that is not the encoding said, or that
/// passes `max`, makes the whole listing void: its files are then simply
/// sent.
pub struct Decoder<S: Sink> {
    inner: Inner<S>,
    base64: bool,
    /// Base64 characters carried to the next push (less than a group).
    carry: Vec<u8>,
    /// Bytes of lines produced so far (past the bound included).
    produced: u64,
}

enum Inner<S: Sink> {
    Plain(Lines<S>),
    Gzip(Box<flate2::write::MultiGzDecoder<Lines<S>>>),
    /// The listing is void.
    Void,
}

impl<S: Sink> Decoder<S> {
    /// A decoder of `encoding` into `sink`, at most `max` bytes of lines.
    pub fn new(encoding: Encoding, max: u64, sink: S) -> Self {
        let lines = Lines {
            sink,
            partial: Vec::new(),
            line: 0,
            bytes: 0,
            max,
            overlong: false,
        };
        let inner = match encoding {
            Encoding::Plain => Inner::Plain(lines),
            Encoding::Gzip | Encoding::Base64Gzip => {
                Inner::Gzip(Box::new(flate2::write::MultiGzDecoder::new(lines)))
            }
        };
        Decoder {
            inner,
            base64: encoding == Encoding::Base64Gzip,
            carry: Vec::new(),
            produced: 0,
        }
    }

    /// Takes the next bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        if !self.base64 {
            self.write(bytes);
            return;
        }
        use base64::Engine as _;
        self.carry
            .extend(bytes.iter().copied().filter(|b| !b.is_ascii_whitespace()));
        let whole = self.carry.len() / 4 * 4;
        let decoded = base64::engine::general_purpose::STANDARD.decode(&self.carry[..whole]);
        self.carry.drain(..whole);
        match decoded {
            Ok(zipped) => self.write(&zipped),
            Err(_) => self.inner = Inner::Void,
        }
    }

    fn write(&mut self, bytes: &[u8]) {
        let written = match &mut self.inner {
            Inner::Plain(lines) => {
                let w = lines.write_all(bytes);
                self.produced = lines.bytes;
                w
            }
            Inner::Gzip(z) => {
                let w = z.write_all(bytes);
                self.produced = z.get_ref().bytes;
                w
            }
            Inner::Void => return,
        };
        if written.is_err() {
            self.inner = Inner::Void;
        }
    }

    /// Bytes of lines this listing produced so far (inflated, where it
    /// was compressed), for a bound shared by several listings.
    pub fn produced(&self) -> u64 {
        self.produced
    }

    /// Ends the listing: the sink, or none where the listing is void.
    pub fn finish(mut self) -> Option<S> {
        if !self.carry.is_empty() {
            return None;
        }
        let lines = match std::mem::replace(&mut self.inner, Inner::Void) {
            Inner::Plain(lines) => lines,
            Inner::Gzip(z) => z.finish().ok()?,
            Inner::Void => return None,
        };
        Some(lines.end())
    }
}

/// Splits what is written into numbered lines for a [`Sink`].
struct Lines<S: Sink> {
    sink: S,
    /// The line so far, up to [`MAX_LINE`].
    partial: Vec<u8>,
    /// Lines handed on (or skipped) so far.
    line: u32,
    /// Bytes written so far, and at most.
    bytes: u64,
    max: u64,
    /// The line so far is past [`MAX_LINE`]: skipped.
    overlong: bool,
}

impl<S: Sink> Lines<S> {
    fn take(&mut self, part: &[u8]) {
        if self.overlong || self.partial.len() + part.len() > MAX_LINE {
            self.overlong = true;
            self.partial.clear();
        } else {
            self.partial.extend_from_slice(part);
        }
    }

    fn line_done(&mut self) {
        self.line = self.line.saturating_add(1);
        if !self.overlong {
            self.sink.line(self.line, &self.partial);
        }
        self.partial.clear();
        self.overlong = false;
    }

    /// The sink, once the last line (without a newline) is handed on.
    fn end(mut self) -> S {
        if !self.partial.is_empty() || self.overlong {
            self.line_done();
        }
        self.sink
    }
}

impl<S: Sink> Write for Lines<S> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.bytes += buf.len() as u64;
        if self.bytes > self.max {
            return Err(std::io::Error::other("the listing passed its bound"));
        }
        let mut rest = buf;
        while let Some(n) = rest.iter().position(|&b| b == b'\n') {
            self.take(&rest[..n]);
            self.line_done();
            rest = &rest[n + 1..];
        }
        self.take(rest);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

// ---- Sync-in: the targets' files still exactly as a sync-in landed them.

/// What the inbound program reported of its targets: the files still
/// exactly as a sync-in landed them, each with the host's token for what
/// it sent (see [`crate::incremental`]).
#[derive(Debug, Default)]
pub struct Listing {
    /// Per directory mapping index, its files by path relative to the
    /// target (`<token> ./<path>` lines).
    pub dirs: BTreeMap<usize, Named>,
    /// The target of each file mapping that holds such a file.
    pub files: BTreeMap<usize, Listed>,
}

/// The most files all of a sync-in's listings may name together (24 MB
/// of table); past it a listing is dropped and its files are sent.
pub const MAX_LISTED: usize = 1 << 20;

/// The files of one inbound listing: `<token> ./<path>` lines, at most
/// `room` of them.
#[derive(Debug)]
pub struct InboundSink {
    named: Named,
    room: usize,
    over: bool,
}

impl InboundSink {
    /// A listing of at most `room` files.
    pub fn new(room: usize) -> Self {
        InboundSink {
            named: Named::default(),
            room,
            over: false,
        }
    }
}

impl Sink for InboundSink {
    fn line(&mut self, n: u32, bytes: &[u8]) {
        // A name that is not UTF-8 as the hosts spell it (`byte_name`).
        let line = crate::byte_name::encode_path(bytes);
        let tokened = line.split_once(' ').and_then(|(token, path)| {
            let path = path.strip_prefix("./")?;
            let token = crate::incremental::fact_token(token)?;
            (!path.is_empty() && path.len() <= PATH_MAX).then_some((path, token))
        });
        if let Some((path, (token, racy))) = tokened {
            if self.named.len() < self.room {
                self.named.insert(path, token, n, racy);
            } else {
                self.over = true;
            }
        }
    }
}

/// Parses the listings the inbound program prints before its codec line,
/// a line at a time as the lines arrive. A mapping's listing counts only
/// once its closing line arrived; lines that do not parse are skipped
/// (their files are simply sent), but counted. All listings together name
/// at most [`MAX_LISTED`] files.
#[derive(Debug)]
pub struct ListingParser {
    done: Listing,
    /// The listing open: its mapping, lines so far, and files.
    open: Option<(usize, u32, InboundSink)>,
    /// Files the listings may still name.
    room: usize,
}

impl Default for ListingParser {
    fn default() -> Self {
        ListingParser::with_room(MAX_LISTED)
    }
}

impl ListingParser {
    /// A parser of listings naming at most `room` files together.
    fn with_room(room: usize) -> Self {
        ListingParser {
            done: Listing::default(),
            open: None,
            room,
        }
    }

    /// Takes one line (without its newline); true if it belonged to a
    /// listing. Only a listed file's line may be other than UTF-8: its
    /// name's own bytes, spelled as the hosts spell them by the sink.
    pub fn line(&mut self, line: &[u8]) -> bool {
        let text = std::str::from_utf8(line).unwrap_or("");
        let mut w = text.splitn(3, ' ');
        match (w.next(), w.next(), w.next()) {
            (Some(TAG), Some("list"), Some(k)) => {
                self.open = k.parse().ok().map(|k| (k, 0, self.sink()));
                true
            }
            (Some(TAG), Some("listed"), Some(k)) => {
                if let Some((open_k, _, files)) = self.open.take() {
                    if k.parse() == Ok(open_k) {
                        self.listed(open_k, files);
                    }
                }
                true
            }
            (Some(TAG), Some("file"), Some(rest)) if self.open.is_none() => {
                let fact = |(k, t): (&str, &str)| {
                    Some((k.parse().ok()?, crate::incremental::fact_token(t)?))
                };
                if let Some((k, (token, racy))) = rest.split_once(' ').and_then(fact) {
                    let listed = Listed {
                        token,
                        line: 1,
                        racy,
                        content: None,
                    };
                    self.done.files.insert(k, listed);
                }
                true
            }
            _ => match self.open.as_mut() {
                Some((_, n, files)) => {
                    *n = n.saturating_add(1);
                    files.line(*n, line);
                    true
                }
                None => false,
            },
        }
    }

    /// A sink for the next listing, with the room left.
    pub fn sink(&self) -> InboundSink {
        InboundSink::new(self.room)
    }

    /// Takes the whole listing of mapping `k` (one read apart too: a
    /// `zlist`); one past the room is dropped.
    pub fn listed(&mut self, k: usize, files: InboundSink) {
        if !files.over {
            self.room -= files.named.len();
            self.done.dirs.insert(k, files.named.seal());
        }
    }

    /// The listings that were closed.
    pub fn finish(self) -> Listing {
        self.done
    }
}

// ---- Sync-out: the sources' files, with their identities.

/// The filesystem's clock as the outbound program read it before listing
/// (see [`super::Marker::Listing`]): a new file's device and ctime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// Its device, as `stat -c %d` printed it.
    pub device: String,
    /// Its ctime, as `TZ=UTC0 stat -c %z` printed it.
    pub ctime: String,
}

/// A listing of more files than a request may move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the sandbox listed more than {0} files (max-entries)")]
pub struct TooManyListed(pub usize);

/// The files of one outbound listing: `<device> <inode> <size> <ctime>
/// ./<path>` lines, the ctime three words. A file counts when its identity
/// lies before the probe on the probe's filesystem (the others, and lines
/// that do not parse, are simply sent and never recorded); paths longer
/// than `PATH_MAX` are sent too. Past `max_files` it stops: too many.
/// After the files, `=<md5> <line>` lines give the digest of the files
/// the program found in the last sync's racy window
/// ([`crate::incremental::racy_window`]).
#[derive(Debug)]
pub struct OutboundSink {
    probe: Option<Probe>,
    max_files: usize,
    named: Named,
    too_many: bool,
}

impl OutboundSink {
    /// A listing made before `probe` (none: nothing counts), of at most
    /// `max_files` files.
    pub fn new(probe: Option<Probe>, max_files: usize) -> Self {
        OutboundSink {
            probe,
            max_files,
            named: Named::default(),
            too_many: false,
        }
    }

    /// The files that count.
    ///
    /// # Errors
    /// More than `max_files` (the request's `max-entries`, which the
    /// archive could not pass either).
    pub fn files(self) -> Result<Named, TooManyListed> {
        match self.too_many {
            true => Err(TooManyListed(self.max_files)),
            false => {
                let mut named = self.named.seal();
                named.probe = self.probe.map(|p| p.ctime);
                Ok(named)
            }
        }
    }
}

impl Sink for OutboundSink {
    fn line(&mut self, n: u32, bytes: &[u8]) {
        let Some(probe) = &self.probe else {
            return;
        };
        if let Some(digest) = bytes.strip_prefix(b"=") {
            let parsed = std::str::from_utf8(digest).ok().and_then(|d| {
                let (md5, line) = d.split_once(' ')?;
                Some((
                    crate::incremental::parse_md5(md5)?,
                    line.parse::<u32>().ok()?,
                ))
            });
            if let Some((md5, line)) = parsed.filter(|&(_, line)| line < n) {
                self.named.digested(line, &md5);
            }
            return;
        }
        let line = crate::byte_name::encode_path(bytes);
        let Some((path, token, ctime)) =
            identified(&line, probe).filter(|(p, _, _)| p.len() <= PATH_MAX)
        else {
            return;
        };
        if self.named.len() >= self.max_files {
            self.too_many = true;
        } else {
            let racy = crate::incremental::racy_at(&ctime, &probe.ctime);
            self.named.insert(path, token, n, racy);
        }
    }
}

/// One listed line's path, token and ctime, if its identity counts.
fn identified<'l>(line: &'l str, probe: &Probe) -> Option<(&'l str, Token, String)> {
    let mut w = line.splitn(7, ' ');
    let (dev, ino, size) = (w.next()?, w.next()?, w.next()?);
    let (date, time, zone) = (w.next()?, w.next()?, w.next()?);
    let path = w.next()?.strip_prefix("./")?;
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if path.is_empty() || !numeric(dev) || !numeric(ino) || !numeric(size) {
        return None;
    }
    let ctime = format!("{date} {time} {zone}");
    (dev == probe.device && crate::incremental::ctime_before(&ctime, &probe.ctime)).then(|| {
        let token = crate::incremental::outbound(dev, ino, &ctime);
        (path, token, ctime)
    })
}

/// Parses an outbound listing held whole (plain lines; see
/// [`OutboundSink`]).
///
/// # Errors
/// More than `max_files` files.
pub fn parse_listing(
    bytes: &[u8],
    probe: Option<&Probe>,
    max_files: usize,
) -> Result<Named, TooManyListed> {
    let mut d = Decoder::new(
        Encoding::Plain,
        u64::MAX,
        OutboundSink::new(probe.cloned(), max_files),
    );
    d.push(bytes);
    d.finish()
        .map_or_else(|| Ok(Named::default()), OutboundSink::files)
}

/// The listings an outbound report program printed as text (a toolbox
/// sandbox's; see `OutboundScript::report_program`): per mapping, in
/// order, what its listing names (see [`OutboundSink`]; one printed as
/// base64 of gzip, `blist`, inflated to at most `max_bytes`, else none).
/// A listing counts only once its closing line came.
pub fn parse_outbound_report(
    output: &[u8],
    max_bytes: u64,
    max_files: usize,
) -> Vec<(usize, Result<Named, TooManyListed>)> {
    let mut done = Vec::new();
    let mut open: Option<(usize, Decoder<OutboundSink>)> = None;
    for line in output.split_inclusive(|&b| b == b'\n') {
        let text = std::str::from_utf8(line).unwrap_or("");
        let mut w = text.trim_end_matches('\n').split(' ');
        match (w.next(), w.next(), w.next()) {
            (Some(TAG), Some(how @ ("list" | "blist")), Some(k)) => {
                let probe = match (w.next(), w.next(), w.next(), w.next(), w.next()) {
                    (Some(device), Some(date), Some(time), Some(zone), None) if device != "-" => {
                        Some(Probe {
                            device: device.to_owned(),
                            ctime: format!("{date} {time} {zone}"),
                        })
                    }
                    _ => None,
                };
                let encoding = match how {
                    "blist" => Encoding::Base64Gzip,
                    _ => Encoding::Plain,
                };
                let sink = OutboundSink::new(probe, max_files);
                open = k
                    .parse()
                    .ok()
                    .map(|k| (k, Decoder::new(encoding, max_bytes, sink)));
            }
            (Some(TAG), Some("listed"), Some(k)) => {
                if let Some((k, d)) = open.take().filter(|o| k.parse() == Ok(o.0)) {
                    let files = d
                        .finish()
                        .map_or_else(|| Ok(Named::default()), OutboundSink::files);
                    done.push((k, files));
                }
            }
            _ => {
                if let Some((_, d)) = open.as_mut() {
                    d.push(line);
                }
            }
        }
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(token: Token, line: u32) -> Listed {
        Listed {
            token,
            line,
            racy: false,
            content: None,
        }
    }

    #[test]
    fn an_inbound_listing_names_racy_files_by_their_landed_digest() {
        let racy = crate::incremental::inbound_racy(3, 0o644, 9);
        let md5 = "0cc175b9c0f1b6a831c399e269772661";
        let mut p = ListingParser::default();
        for line in [
            "SANDBOX-SYNC list 0".to_owned(),
            format!("{racy}-{md5} ./a"),
            format!("{racy}-{} ./bad", &md5[2..]),
            "SANDBOX-SYNC listed 0".to_owned(),
            format!("SANDBOX-SYNC file 1 {racy}-{md5}"),
        ] {
            assert!(p.line(line.as_bytes()));
        }
        let l = p.finish();
        let token =
            crate::incremental::inbound_fact(&racy, &crate::incremental::parse_md5(md5).unwrap());
        let want = Listed {
            racy: true,
            ..plain(token, 1)
        };
        assert_eq!(l.dirs[&0].get("a"), Some(want));
        assert_eq!(l.dirs[&0].get("bad"), None);
        assert_eq!(l.files[&1], want);
    }

    #[test]
    fn an_outbound_listing_marks_racy_files_and_takes_their_digests() {
        let probe = Probe {
            device: "7".into(),
            ctime: "2026-12-01 23:43:04.500000000 +0000".into(),
        };
        let md5 = "0cc175b9c0f1b6a831c399e269772661";
        let listing = format!(
            "7 1 1 2026-12-01 23:42:04.400000000 +0000 ./old\n\
7 2 1 2026-12-01 23:42:04.600000000 +0000 ./new\n\
7 3 1 2026-12-01 23:42:04.600000000 +0000 ./digested\n\
={md5} 3\n\
={md5} 9\n\
={} 1\n\
7 4 1 2026-12-01 23:42:04.600000000 +0000 ./late\n\
={md5} 4\n",
            &md5[1..]
        );
        let got = parse_listing(listing.as_bytes(), Some(&probe), 10).unwrap();
        assert_eq!(got.probe.as_deref(), Some(probe.ctime.as_str()));
        let old = got.get("old").unwrap();
        assert!(!old.racy && old.content.is_none(), "{old:?}");
        let new = got.get("new").unwrap();
        assert!(new.racy && new.content.is_none(), "{new:?}");
        let digested = got.get("digested").unwrap();
        assert!(digested.racy);
        assert_eq!(
            digested.content,
            Some(crate::incremental::outbound_content(
                digested.token,
                &crate::incremental::parse_md5(md5).unwrap()
            ))
        );
        // A digest line names an earlier line: one of a later line, of a
        // line that is no file, or malformed, is nothing.
        assert_eq!(got.get("late").unwrap().content, None);
    }

    #[test]
    fn inbound_listings_count_once_closed() {
        let t = |n: u8| Token([n; 8]);
        let text = format!(
            "SANDBOX-SYNC list 2\n\
{} ./a b/c.txt\n\
junk line\n\
0123 ./short-token\n\
{} ./x\n\
{} no-dot-slash\n\
SANDBOX-SYNC listed 2\n\
SANDBOX-SYNC list 3\n\
{} ./cut-off\n",
            t(1).hex(),
            t(2).hex(),
            t(3).hex(),
            t(4).hex()
        );
        let mut p = ListingParser::default();
        for line in text.split('\n') {
            p.line(line.as_bytes());
        }
        let l = p.finish();
        assert_eq!(l.dirs.len(), 1, "mapping 3 never closed");
        let files = &l.dirs[&2];
        assert_eq!(files.get("a b/c.txt"), Some(plain(t(1), 1)));
        assert_eq!(
            files.get("x"),
            Some(plain(t(2), 4)),
            "lines that do not parse count too"
        );
        assert_eq!(files.len(), 2);
        assert_eq!(files.get("cut-off"), None);
        let mut p = ListingParser::default();
        for line in [
            format!("SANDBOX-SYNC file 4 {}", t(5).hex()),
            "SANDBOX-SYNC file 5 12".to_owned(),
            format!("SANDBOX-SYNC file x {}", t(6).hex()),
        ] {
            assert!(p.line(line.as_bytes()));
        }
        let l = p.finish();
        assert_eq!(l.files.len(), 1);
        assert_eq!(l.files[&4], plain(t(5), 1));
    }

    #[test]
    fn an_inbound_listing_names_a_file_that_is_not_utf8_by_its_spelling() {
        let t = Token([9; 8]);
        let mut p = ListingParser::default();
        assert!(p.line(b"SANDBOX-SYNC list 0"));
        let mut line = format!("{} ./d/caf", t.hex()).into_bytes();
        line.extend_from_slice(b"\xe9.txt");
        assert!(p.line(&line));
        assert!(p.line(b"SANDBOX-SYNC listed 0"));
        let l = p.finish();
        assert_eq!(l.dirs[&0].get("d/\x00636166e92e747874"), Some(plain(t, 1)));
    }

    #[test]
    fn inbound_listings_past_the_room_are_dropped() {
        let mut p = ListingParser::with_room(3);
        let t = Token([7; 8]).hex();
        for k in 0..3 {
            p.line(format!("SANDBOX-SYNC list {k}").as_bytes());
            for i in 0..2 {
                p.line(format!("{t} ./f{i}").as_bytes());
            }
            p.line(format!("SANDBOX-SYNC listed {k}").as_bytes());
        }
        let l = p.finish();
        assert_eq!(l.dirs.keys().copied().collect::<Vec<_>>(), [0], "{l:?}");
        assert_eq!(l.dirs[&0].len(), 2);
    }

    fn gz(bytes: &[u8]) -> Vec<u8> {
        let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        z.write_all(bytes).unwrap();
        z.finish().unwrap()
    }

    /// Counts the lines it is handed, and keeps the last.
    #[derive(Default)]
    struct Count(u32, Vec<u8>);
    impl Sink for Count {
        fn line(&mut self, n: u32, bytes: &[u8]) {
            self.0 = n;
            self.1 = bytes.to_vec();
        }
    }

    #[test]
    fn gzipped_listings_inflate_within_their_bound_in_any_pieces() {
        let lines = b"line\n".repeat(20_000);
        let zipped = gz(&lines);
        for piece in [1, 7, 4096, zipped.len()] {
            let mut d = Decoder::new(Encoding::Gzip, 100_000, Count::default());
            zipped.chunks(piece).for_each(|c| d.push(c));
            assert_eq!(d.finish().map(|c| c.0), Some(20_000), "pieces of {piece}");
        }
        let mut d = Decoder::new(Encoding::Gzip, 99_999, Count::default());
        d.push(&zipped);
        assert!(d.finish().is_none(), "a bomb stops at its bound");
        let mut d = Decoder::new(Encoding::Gzip, 1000, Count::default());
        d.push(b"not gzip");
        assert!(d.finish().is_none());
    }

    #[test]
    fn an_overlong_line_is_skipped_but_counted() {
        let mut text = vec![b'x'; MAX_LINE + 1];
        text.extend_from_slice(b"\nlast");
        let mut d = Decoder::new(Encoding::Plain, u64::MAX, Count::default());
        text.chunks(1000).for_each(|c| d.push(c));
        let c = d.finish().unwrap();
        assert_eq!((c.0, c.1.as_slice()), (2, &b"last"[..]));
    }

    /// A toolbox report's listing, as `gzip | base64` printed it (lines of
    /// 76), between its tagged lines; a bomb or junk inside is no listing.
    #[test]
    fn a_base64_listing_in_a_report_is_inflated() {
        use base64::Engine as _;
        let mut listing = Vec::new();
        for i in 0..2000 {
            listing.extend_from_slice(
                format!("2049 {i} 12 2026-12-01 23:43:04.400000000 +0000 ./f{i}\n").as_bytes(),
            );
        }
        let encoded = base64::engine::general_purpose::STANDARD.encode(gz(&listing));
        let mut text =
            String::from("SANDBOX-SYNC blist 3 2049 2026-12-01 23:43:05.000000000 +0000\n");
        for chunk in encoded.as_bytes().chunks(76) {
            text.push_str(std::str::from_utf8(chunk).unwrap());
            text.push('\n');
        }
        text.push_str(
            "SANDBOX-SYNC listed 3\nSANDBOX-SYNC blist 4 -\nnot base64!\nSANDBOX-SYNC listed 4\n",
        );
        let got = parse_outbound_report(text.as_bytes(), 1 << 20, 10_000);
        assert_eq!(got.len(), 2);
        let files = got[0].1.as_ref().unwrap();
        assert_eq!(got[0].0, 3);
        assert_eq!(files.len(), 2000);
        assert_eq!(files.get("f1999").map(|l| l.line), Some(2000));
        assert!(got[1].1.as_ref().unwrap().is_empty(), "junk is no listing");
        let small = parse_outbound_report(text.as_bytes(), 1000, 10_000);
        assert!(
            small[0].1.as_ref().unwrap().is_empty(),
            "past its bound it is dropped"
        );
        let few = parse_outbound_report(text.as_bytes(), 1 << 20, 10);
        assert_eq!(few[0].1.as_ref().unwrap_err(), &TooManyListed(10));
    }

    #[test]
    fn outbound_listings_count_only_identities_before_the_probe() {
        let probe = Probe {
            device: "2049".into(),
            ctime: "2026-12-01 23:43:04.500000000 +0000".into(),
        };
        let listing = b"2049 11 12 2026-12-01 23:43:04.400000000 +0000 ./a b/c.txt\n\
2049 12 12 2026-12-01 23:43:04.500000000 +0000 ./racy\n\
2050 13 12 2026-12-01 23:43:04.000000000 +0000 ./other-fs\n\
2049 14 x 2026-12-01 23:43:04.000000000 +0000 ./bad-size\n\
junk\n\
\xff\xfe 1 1 2026-12-01 23:43:04.000000000 +0000 ./x\n\
2049 15 0 2026-12-01 23:43:03.999999999 +0000 ./d/e";
        let got = parse_listing(listing, Some(&probe), 2).unwrap();
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(
            parse_listing(listing, Some(&probe), 1).unwrap_err(),
            TooManyListed(1)
        );
        assert_eq!(
            got.get("a b/c.txt").map(|l| l.token),
            Some(crate::incremental::outbound(
                "2049",
                "11",
                "2026-12-01 23:43:04.400000000 +0000"
            ))
        );
        assert_eq!(got.get("a b/c.txt").map(|l| l.line), Some(1));
        assert_eq!(
            got.get("d/e").map(|l| l.line),
            Some(7),
            "lines that do not parse count too"
        );
        assert_eq!(got.get("racy"), None);
        assert!(parse_listing(listing, None, 0).unwrap().is_empty());
    }

    #[test]
    fn colliding_paths_are_never_kept_and_ranges_run() {
        let mut n = Named::default();
        n.insert("a", Token([1; 8]), 1, false);
        n.insert("a", Token([2; 8]), 2, false);
        n.insert("b", Token([3; 8]), 3, false);
        let n = n.seal();
        assert_eq!(n.get("a"), None, "a path listed twice is no listing of it");
        assert_eq!(n.get("b").map(|l| l.line), Some(3));
        assert_eq!(ranges(vec![5, 1, 2, 3, 9, 10, 3]), b"1 3\n5 5\n9 10\n");
        assert!(ranges(Vec::new()).is_empty());
    }
}
