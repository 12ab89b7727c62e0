//! The wire protocol between the sandbox programs and the component:
//! status lines (sync-in) and 512-byte frame markers (sync-out), each
//! starting with [`TAG`]. Formatting and parsing live together here.

use crate::incremental::Token;

/// Prefix of every status line and frame marker the scripts print.
pub const TAG: &str = "SANDBOX-SYNC";

/// A transport codec the sandbox runs as a command (`gzip`, `zstd`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    /// gzip (BusyBox has it).
    Gzip,
    /// Zstandard.
    Zstd,
}

impl Codec {
    /// The command's name, and the codec's name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            Codec::Gzip => "gzip",
            Codec::Zstd => "zstd",
        }
    }

    /// The codec named `name`.
    pub fn parse(name: &str) -> Option<Codec> {
        match name {
            "gzip" => Some(Codec::Gzip),
            "zstd" => Some(Codec::Zstd),
            _ => None,
        }
    }

    /// `Some(codec)` for a codec's name, `None` for `none`.
    fn parse_choice(name: &str) -> Option<Option<Codec>> {
        match name {
            "none" => Some(None),
            other => Codec::parse(other).map(Some),
        }
    }
}

/// The name of a codec choice: the codec's, or `none`.
pub fn choice_name(codec: Option<Codec>) -> &'static str {
    codec.map_or("none", Codec::name)
}

/// What the inbound program can take, from its `caps` line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caps {
    /// Codecs it can decompress.
    pub codecs: Vec<Codec>,
    /// Its tar stops at the archive's end marker by itself (GNU tar), so a
    /// plain archive needs no length up front and the host may send while
    /// it still walks.
    pub streams: bool,
    /// It records what lands for the next sync to keep (see
    /// [`crate::incremental`]): the host sends its tokens.
    pub records: bool,
}

/// Parses the inbound program's caps line (`<TAG> caps[ <word>]...`,
/// without the newline): codec names, `stream` (see [`Caps::streams`])
/// and `record` (see [`Caps::records`]). Words it does not know are
/// skipped.
pub fn parse_caps(line: &str) -> Option<Caps> {
    let mut w = line.split(' ');
    if w.next()? != TAG || w.next()? != "caps" {
        return None;
    }
    let mut caps = Caps::default();
    for word in w {
        match Codec::parse(word) {
            Some(c) => caps.codecs.push(c),
            None => {
                caps.streams |= word == "stream";
                caps.records |= word == "record";
            }
        }
    }
    Some(caps)
}

/// What the inbound program reported of its targets: the files still
/// exactly as a sync-in landed them, each with the host's token for what
/// it sent (see [`crate::incremental`]).
#[derive(Debug, Default)]
pub struct Listing {
    /// Per directory mapping index, its files by path relative to the
    /// target.
    pub dirs: std::collections::BTreeMap<usize, std::collections::HashMap<String, Token>>,
    /// The target of each file mapping that holds such a file.
    pub files: std::collections::BTreeMap<usize, Token>,
}

/// Parses the listings the inbound program prints before its codec line,
/// a line at a time as the lines arrive. A mapping's listing counts only
/// once its closing line arrived; lines that do not parse are skipped
/// (their files are simply sent). What the sandbox claims here can only
/// make the host skip sending a file whose bytes the sandbox already
/// controls.
#[derive(Debug, Default)]
pub struct ListingParser {
    done: Listing,
    open: Option<(usize, std::collections::HashMap<String, Token>)>,
}

impl ListingParser {
    /// Takes one line (without its newline); true if it belonged to a listing.
    pub fn line(&mut self, line: &str) -> bool {
        let mut w = line.splitn(3, ' ');
        match (w.next(), w.next(), w.next()) {
            (Some(TAG), Some("list"), Some(k)) => {
                self.open = k.parse().ok().map(|k| (k, Default::default()));
                true
            }
            (Some(TAG), Some("listed"), Some(k)) => {
                if let Some((open_k, files)) = self.open.take() {
                    if k.parse() == Ok(open_k) {
                        self.done.dirs.insert(open_k, files);
                    }
                }
                true
            }
            (Some(TAG), Some("file"), Some(rest)) if self.open.is_none() => {
                if let Some((k, token)) = rest
                    .split_once(' ')
                    .and_then(|(k, t)| Some((k.parse().ok()?, Token::parse(t)?)))
                {
                    self.done.files.insert(k, token);
                }
                true
            }
            _ => match (self.open.as_mut(), tokened(line)) {
                (Some((_, files)), Some((path, token))) => {
                    files.insert(path.to_owned(), token);
                    true
                }
                (Some(_), None) => true,
                (None, _) => false,
            },
        }
    }

    /// The listings that were closed.
    pub fn finish(self) -> Listing {
        self.done
    }
}

/// One `<token> ./<path>` line.
fn tokened(line: &str) -> Option<(&str, Token)> {
    let (token, path) = line.split_once(' ')?;
    let path = path.strip_prefix("./")?;
    (!path.is_empty()).then_some((path, Token::parse(token)?))
}

/// A listing a toolbox command printed as base64 of gzip (`blist`, lines of
/// base64), inflated as [`gunzip`] does; none when it is not that.
pub fn unbase64_gunzip(text: &[u8], max: usize) -> Option<Vec<u8>> {
    use base64::Engine as _;
    let plain: Vec<u8> = text
        .iter()
        .copied()
        .filter(|b| !b.is_ascii_whitespace())
        .collect();
    let zipped = base64::engine::general_purpose::STANDARD
        .decode(plain)
        .ok()?;
    gunzip(&zipped, max)
}

/// A listing the sandbox gzipped (`zlist`), inflated; none when it is not
/// gzip or inflates to more than `max` bytes (a bomb): its files are then
/// simply sent.
pub fn gunzip(data: &[u8], max: usize) -> Option<Vec<u8>> {
    use std::io::Read as _;
    let mut out = Vec::new();
    let mut z = flate2::read::MultiGzDecoder::new(data);
    let mut chunk = [0u8; 64 << 10];
    loop {
        let n = z.read(&mut chunk).ok()?;
        if n == 0 {
            return Some(out);
        }
        if out.len() + n > max {
            return None;
        }
        out.extend_from_slice(&chunk[..n]);
    }
}

/// The filesystem's clock as the outbound program read it before listing
/// (see [`Marker::Listing`]): a new file's device and ctime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// Its device, as `stat -c %d` printed it.
    pub device: String,
    /// Its ctime, as `TZ=UTC0 stat -c %z` printed it.
    pub ctime: String,
}

/// A file an outbound listing named: the token of its identity, and the
/// listing's line (counting from 1) that named it, by which the host's
/// answer names it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listed {
    /// See [`crate::incremental::outbound`].
    pub token: Token,
    /// The line, from 1.
    pub line: u32,
}

/// Parses a listing the outbound program framed in one piece (see
/// [`Marker::Listing`]): `<device> <inode> <size> <ctime> ./<path>` lines,
/// the ctime three words. Returns each file whose identity lies before
/// `probe` on the probe's filesystem (the others, and lines that do not
/// parse, are simply sent and never recorded). Paths longer than
/// `PATH_MAX` are sent too.
///
/// # Errors
/// More than `max_files` files (the request's `max-entries`, which the
/// archive could not pass either): the count it stopped at.
pub fn parse_listing(
    bytes: &[u8],
    probe: Option<&Probe>,
    max_files: usize,
) -> Result<std::collections::HashMap<String, Listed>, TooManyListed> {
    let mut out = std::collections::HashMap::new();
    let Some(probe) = probe else {
        return Ok(out);
    };
    for (at, line) in (1..=u32::MAX).zip(bytes.split(|&b| b == b'\n')) {
        let Some((path, token)) = std::str::from_utf8(line)
            .ok()
            .and_then(|l| identified(l, probe))
            .filter(|(p, _)| p.len() <= PATH_MAX)
        else {
            continue;
        };
        if out.len() >= max_files {
            return Err(TooManyListed(max_files));
        }
        out.insert(path.to_owned(), Listed { token, line: at });
    }
    Ok(out)
}

/// Linux's `PATH_MAX`: no longer path is ever kept.
const PATH_MAX: usize = 4096;

/// A listing of more files than a request may move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the sandbox listed more than {0} files (max-entries)")]
pub struct TooManyListed(pub usize);

/// The listings an outbound report program printed as text (a toolbox
/// sandbox's; see `OutboundScript::report_program`): per mapping, in
/// order, its probe and its listing's bytes (as [`parse_listing`] reads
/// them; one printed as base64 of gzip, `blist`, inflated to at most
/// `max` bytes, else empty). A listing counts only once its closing line
/// came.
pub fn parse_outbound_report(output: &[u8], max: usize) -> Vec<(usize, Option<Probe>, Vec<u8>)> {
    let mut done = Vec::new();
    let mut open: Option<(usize, Option<Probe>, Vec<u8>)> = None;
    let mut encoded = false;
    for line in output.split_inclusive(|&b| b == b'\n') {
        let text = std::str::from_utf8(line).unwrap_or("");
        let mut w = text.trim_end_matches('\n').split(' ');
        match (w.next(), w.next(), w.next()) {
            (Some(TAG), Some(how @ ("list" | "blist")), Some(k)) => {
                encoded = how == "blist";
                let probe = match (w.next(), w.next(), w.next(), w.next(), w.next()) {
                    (Some(device), Some(date), Some(time), Some(zone), None) if device != "-" => {
                        Some(Probe {
                            device: device.to_owned(),
                            ctime: format!("{date} {time} {zone}"),
                        })
                    }
                    _ => None,
                };
                open = k.parse().ok().map(|k| (k, probe, Vec::new()));
            }
            (Some(TAG), Some("listed"), Some(k)) => {
                if let Some(mut o) = open.take().filter(|o| k.parse() == Ok(o.0)) {
                    if encoded {
                        o.2 = unbase64_gunzip(&o.2, max).unwrap_or_default();
                    }
                    done.push(o);
                }
            }
            _ => {
                if let Some((_, _, bytes)) = open.as_mut() {
                    bytes.extend_from_slice(line);
                }
            }
        }
    }
    done
}

/// One listed line's path and token, if its identity counts.
fn identified<'l>(line: &'l str, probe: &Probe) -> Option<(&'l str, Token)> {
    let mut w = line.splitn(7, ' ');
    let (dev, ino, size) = (w.next()?, w.next()?, w.next()?);
    let (date, time, zone) = (w.next()?, w.next()?, w.next()?);
    let path = w.next()?.strip_prefix("./")?;
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if path.is_empty() || !numeric(dev) || !numeric(ino) || !numeric(size) {
        return None;
    }
    let ctime = format!("{date} {time} {zone}");
    (dev == probe.device && crate::incremental::ctime_before(&ctime, &probe.ctime))
        .then(|| (path, crate::incremental::outbound(dev, ino, &ctime)))
}

/// A frame marker the outbound program prints between tar streams.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Marker {
    /// Everything after this marker is compressed with the codec (none:
    /// plain), as one stream.
    Codec(Option<Codec>),
    /// The next tar stream is mapping `map` of operation `op`.
    Mapping {
        /// Operation index.
        op: usize,
        /// Mapping index within the operation.
        map: usize,
    },
    /// Operation `op` is complete.
    OpDone(usize),
    /// The program finished.
    End,
    /// Incremental sync-out: the next `len` bytes (then zeros to a whole
    /// block) list the regular files of mapping `mapping` (the index among
    /// all mappings), as [`parse_listing`] reads them; `probe` is the
    /// filesystem's clock before they were listed (none: the program could
    /// not read it, and nothing listed counts).
    Listing {
        /// Mapping index among all the request's mappings.
        mapping: usize,
        /// Bytes of listing that follow.
        len: u64,
        /// The probe.
        probe: Option<Probe>,
        /// The bytes are the listing gzipped (`zlist`; see [`gunzip`]).
        zipped: bool,
    },
}

impl Marker {
    /// The marker's words after [`TAG`] (the program pads the line to a block).
    pub fn words(&self) -> String {
        match self {
            Marker::Mapping { op, map } => format!("map {op} {map}"),
            Marker::OpDone(op) => format!("op {op}"),
            Marker::End => "end".to_owned(),
            Marker::Codec(c) => format!("codec {}", choice_name(*c)),
            Marker::Listing {
                mapping,
                len,
                probe,
                zipped,
            } => {
                let how = if *zipped { "zlist" } else { "list" };
                match probe {
                    Some(p) => format!("{how} {mapping} {len} {} {}", p.device, p.ctime),
                    None => format!("{how} {mapping} {len} -"),
                }
            }
        }
    }
}

/// Parses a 512-byte block as a frame marker.
pub fn parse_marker(block: &[u8]) -> Option<Marker> {
    if block.len() != 512 || block[511] != b'\n' {
        return None;
    }
    let text = std::str::from_utf8(&block[..511])
        .ok()?
        .trim_end_matches(' ');
    let mut words = text.split(' ');
    if words.next()? != TAG {
        return None;
    }
    let m = match (words.next()?, words.next(), words.next()) {
        (how @ ("list" | "zlist"), Some(mapping), Some(len)) => {
            let (mapping, len) = (mapping.parse().ok()?, len.parse().ok()?);
            let probe = match words.next()? {
                "-" => None,
                device => {
                    let ctime = [words.next()?, words.next()?, words.next()?].join(" ");
                    Some(Probe {
                        device: device.to_owned(),
                        ctime,
                    })
                }
            };
            Marker::Listing {
                mapping,
                len,
                probe,
                zipped: how == "zlist",
            }
        }
        ("map", Some(op), Some(map)) => Marker::Mapping {
            op: op.parse().ok()?,
            map: map.parse().ok()?,
        },
        ("op", Some(op), None) => Marker::OpDone(op.parse().ok()?),
        ("end", None, None) => Marker::End,
        ("codec", Some(c), None) => Marker::Codec(Codec::parse_choice(c)?),
        _ => return None,
    };
    words.next().is_none().then_some(m)
}

/// A status line of the inbound program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// Operation complete.
    OpDone(usize),
    /// A post-upload command failed.
    CommandFailed {
        /// Operation index.
        op: usize,
        /// Command index.
        cmd: usize,
        /// Its exit status as the shell saw it.
        code: i32,
        /// It was killed by its timeout.
        timed_out: bool,
    },
}

/// Parses one status line (without the newline).
pub fn parse_status(line: &str) -> Option<Status> {
    let mut w = line.split(' ');
    if w.next()? != TAG {
        return None;
    }
    let s = match w.next()? {
        "op" => Status::OpDone(w.next()?.parse().ok()?),
        "cmd" => Status::CommandFailed {
            op: w.next()?.parse().ok()?,
            cmd: w.next()?.parse().ok()?,
            code: w.next()?.parse().ok()?,
            timed_out: w.next()? == "1",
        },
        _ => return None,
    };
    w.next().is_none().then_some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_round_trip() {
        let probe = Probe {
            device: "2049".into(),
            ctime: "2026-12-01 23:43:04.220807597 +0000".into(),
        };
        for m in [
            Marker::Mapping { op: 3, map: 17 },
            Marker::OpDone(2),
            Marker::End,
            Marker::Codec(None),
            Marker::Codec(Some(Codec::Zstd)),
            Marker::Listing {
                mapping: 4,
                len: 1234,
                probe: Some(probe.clone()),
                zipped: false,
            },
            Marker::Listing {
                mapping: 4,
                len: 0,
                probe: None,
                zipped: true,
            },
        ] {
            let block = format!("{:<511}\n", format!("{TAG} {}", m.words()));
            assert_eq!(parse_marker(block.as_bytes()), Some(m));
        }
        let listing = format!(
            "{:<511}\n",
            "SANDBOX-SYNC list 4 12 2049 2026-12-01 23:43:04.2 +0000"
        );
        assert!(
            matches!(parse_marker(listing.as_bytes()), Some(Marker::Listing { probe: Some(p), .. }) if p.ctime == "2026-12-01 23:43:04.2 +0000")
        );
        for bad in [
            "SANDBOX-SYNC list 4 12",
            "SANDBOX-SYNC list 4 12 2049 2026-12-01",
            "SANDBOX-SYNC list 4 12 2049 2026-12-01 23:43:04.2 +0000 more",
            "SANDBOX-SYNC list 4 12 - more",
        ] {
            let block = format!("{bad:<511}\n");
            assert_eq!(parse_marker(block.as_bytes()), None, "{bad}");
        }
        assert_eq!(parse_marker(&[0u8; 512]), None);
        let bad = format!("{:<511}\n", "SANDBOX-SYNC map 1");
        assert_eq!(parse_marker(bad.as_bytes()), None);
    }

    #[test]
    fn status_lines_parse_strictly() {
        assert_eq!(parse_status("SANDBOX-SYNC op 4"), Some(Status::OpDone(4)));
        assert_eq!(
            parse_status("SANDBOX-SYNC cmd 1 2 3 0"),
            Some(Status::CommandFailed {
                op: 1,
                cmd: 2,
                code: 3,
                timed_out: false
            })
        );
        assert_eq!(parse_status("SANDBOX-SYNC op 4 extra"), None);
        assert_eq!(parse_status("op 4"), None);
    }

    #[test]
    fn listings_count_once_closed() {
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
            p.line(line);
        }
        let l = p.finish();
        assert_eq!(l.dirs.len(), 1, "mapping 3 never closed");
        let files = &l.dirs[&2];
        assert_eq!(files["a b/c.txt"], t(1));
        assert_eq!(files["x"], t(2));
        assert_eq!(files.len(), 2);
        let mut p = ListingParser::default();
        for line in [
            format!("SANDBOX-SYNC file 4 {}", t(5).hex()),
            "SANDBOX-SYNC file 5 12".to_owned(),
            format!("SANDBOX-SYNC file x {}", t(6).hex()),
        ] {
            assert!(p.line(&line));
        }
        let l = p.finish();
        assert_eq!(l.files.len(), 1);
        assert_eq!(l.files[&4], t(5));
    }

    #[test]
    fn gzipped_listings_inflate_within_their_bound() {
        use std::io::Write as _;
        let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        z.write_all(&vec![b'a'; 100_000]).unwrap();
        let zipped = z.finish().unwrap();
        assert_eq!(gunzip(&zipped, 100_000).map(|v| v.len()), Some(100_000));
        assert_eq!(gunzip(&zipped, 99_999), None, "a bomb stops at its bound");
        assert_eq!(gunzip(b"not gzip", 1000), None);
    }

    /// A toolbox report's listing, as `gzip | base64` printed it (lines of
    /// 76), between its tagged lines; a bomb or junk inside is no listing.
    #[test]
    fn a_base64_listing_in_a_report_is_inflated() {
        use base64::Engine as _;
        use std::io::Write as _;
        let listing = b"2049 11 12 2026-12-01 23:43:04.400000000 +0000 ./a\n".repeat(2000);
        let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        z.write_all(&listing).unwrap();
        let encoded = base64::engine::general_purpose::STANDARD.encode(z.finish().unwrap());
        let mut text =
            String::from("SANDBOX-SYNC blist 3 2049 2026-12-01 23:43:05.000000000 +0000\n");
        for chunk in encoded.as_bytes().chunks(76) {
            text.push_str(std::str::from_utf8(chunk).unwrap());
            text.push('\n');
        }
        text.push_str(
            "SANDBOX-SYNC listed 3\nSANDBOX-SYNC blist 4 -\nnot base64!\nSANDBOX-SYNC listed 4\n",
        );
        let got = parse_outbound_report(text.as_bytes(), 1 << 20);
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].0, &got[0].2), (3, &listing));
        assert!(got[0].1.is_some());
        assert!(got[1].2.is_empty(), "junk is no listing");
        let small = parse_outbound_report(text.as_bytes(), 1000);
        assert!(small[0].2.is_empty(), "past its bound it is dropped");
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
            parse_listing(listing, Some(&probe), 1),
            Err(TooManyListed(1))
        );
        assert_eq!(
            got["a b/c.txt"].token,
            crate::incremental::outbound("2049", "11", "2026-12-01 23:43:04.400000000 +0000")
        );
        assert_eq!(got["a b/c.txt"].line, 1);
        assert_eq!(got["d/e"].line, 7, "lines that do not parse count too");
        assert!(parse_listing(listing, None, 0).unwrap().is_empty());
    }

    #[test]
    fn caps_lines_list_known_codecs() {
        assert_eq!(
            parse_caps("SANDBOX-SYNC caps zstd lz4 gzip").map(|c| c.codecs),
            Some(vec![Codec::Zstd, Codec::Gzip])
        );
        assert_eq!(parse_caps("SANDBOX-SYNC caps"), Some(Caps::default()));
        assert_eq!(
            parse_caps("SANDBOX-SYNC caps gzip stream record"),
            Some(Caps {
                codecs: vec![Codec::Gzip],
                streams: true,
                records: true,
            })
        );
        assert_eq!(parse_caps("SANDBOX-SYNC op 1"), None);
        let bad = format!("{:<511}\n", "SANDBOX-SYNC codec lz4");
        assert_eq!(parse_marker(bad.as_bytes()), None);
    }
}
