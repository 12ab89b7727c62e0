//! The wire protocol between the sandbox programs and the component:
//! status lines (sync-in) and 512-byte frame markers (sync-out), each
//! starting with [`TAG`]. Formatting and parsing live together here.

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
}

/// Parses the inbound program's caps line (`<TAG> caps[ <word>]...`,
/// without the newline): codec names, and `stream` (see
/// [`Caps::streams`]). Words it does not know are skipped.
pub fn parse_caps(line: &str) -> Option<Caps> {
    let mut w = line.split(' ');
    if w.next()? != TAG || w.next()? != "caps" {
        return None;
    }
    let mut caps = Caps::default();
    for word in w {
        match Codec::parse(word) {
            Some(c) => caps.codecs.push(c),
            None => caps.streams |= word == "stream",
        }
    }
    Some(caps)
}

/// A regular file a sync-in target already holds, as the inbound program
/// listed it (`stat -c '%s %Y %Z %a %n'`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listed {
    /// Size in bytes.
    pub size: u64,
    /// Modification time, seconds (the host's clock: tar landed it).
    pub mtime: i64,
    /// Status change time, seconds (the sandbox's clock): no earlier than
    /// when the file landed.
    pub ctime: i64,
    /// Permission bits.
    pub mode: u32,
}

/// What the inbound program reported of its targets: per directory
/// mapping index, the files each holds by path relative to the target,
/// and the sandbox's clock when it finished listing.
#[derive(Debug, Default)]
pub struct Listing {
    /// Files per directory mapping.
    pub dirs: std::collections::BTreeMap<usize, std::collections::HashMap<String, Listed>>,
    /// The target of each file mapping that holds a regular file.
    pub files: std::collections::BTreeMap<usize, Listed>,
    /// `date +%s` in the sandbox after the listings.
    pub now: Option<i64>,
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
    open: Option<(usize, std::collections::HashMap<String, Listed>)>,
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
                if let Some((k, entry)) = rest
                    .split_once(' ')
                    .and_then(|(k, stat)| Some((k.parse().ok()?, listed_stat(stat)?)))
                {
                    self.done.files.insert(k, entry);
                }
                true
            }
            (Some(TAG), Some("now"), Some(t)) if self.open.is_none() => {
                self.done.now = t.parse().ok();
                true
            }
            _ => match (self.open.as_mut(), listed(line)) {
                (Some((_, files)), Some((path, entry))) => {
                    files.insert(path.to_owned(), entry);
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

/// Parses a listing the outbound program framed in one piece (see
/// [`Marker::Listing`]): the lines of [`ListingParser`] between its tagged
/// lines. Lines that do not parse are skipped.
pub fn parse_listing(bytes: &[u8]) -> std::collections::HashMap<String, Listed> {
    bytes
        .split(|&b| b == b'\n')
        .filter_map(|line| listed(std::str::from_utf8(line).ok()?))
        .map(|(path, entry)| (path.to_owned(), entry))
        .collect()
}

/// One `<size> <mtime> <ctime> <mode> ./<path>` line.
fn listed(line: &str) -> Option<(&str, Listed)> {
    // The path is everything after the fourth space.
    let mut at = 0;
    for _ in 0..4 {
        at += line[at..].find(' ')? + 1;
    }
    let entry = listed_stat(&line[..at - 1])?;
    let path = line[at..].strip_prefix("./")?;
    (!path.is_empty()).then_some((path, entry))
}

/// `<size> <mtime> <ctime> <mode>` (octal mode).
fn listed_stat(stat: &str) -> Option<Listed> {
    let mut w = stat.split(' ');
    let entry = Listed {
        size: w.next()?.parse().ok()?,
        mtime: w.next()?.parse().ok()?,
        ctime: w.next()?.parse().ok()?,
        mode: u32::from_str_radix(w.next()?, 8).ok()?,
    };
    w.next().is_none().then_some(entry)
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
    /// block) list the regular files of directory mapping `mapping` (the
    /// index among all mappings), as [`parse_listing`] reads them; `now` is
    /// the sandbox's clock when it listed them.
    Listing {
        /// Mapping index among all the request's mappings.
        mapping: usize,
        /// Bytes of listing that follow.
        len: u64,
        /// `date +%s` in the sandbox.
        now: i64,
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
            Marker::Listing { mapping, len, now } => format!("list {mapping} {len} {now}"),
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
        ("list", Some(mapping), Some(len)) => Marker::Listing {
            mapping: mapping.parse().ok()?,
            len: len.parse().ok()?,
            now: words.next()?.parse().ok()?,
        },
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
        for m in [
            Marker::Mapping { op: 3, map: 17 },
            Marker::OpDone(2),
            Marker::End,
            Marker::Codec(None),
            Marker::Codec(Some(Codec::Zstd)),
            Marker::Listing {
                mapping: 4,
                len: 1234,
                now: 1_700_000_000,
            },
        ] {
            let text = match &m {
                Marker::Listing { mapping, len, now } => {
                    format!("{TAG} list {mapping} {len} {now}")
                }
                Marker::Mapping { op, map } => format!("{TAG} map {op} {map}"),
                Marker::OpDone(op) => format!("{TAG} op {op}"),
                Marker::End => format!("{TAG} end"),
                Marker::Codec(c) => format!("{TAG} codec {}", choice_name(*c)),
            };
            let block = format!("{text:<511}\n");
            assert_eq!(parse_marker(block.as_bytes()), Some(m));
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
        let text = "SANDBOX-SYNC list 2\n\
12 1700000000 1700000100 644 ./a b/c.txt\n\
junk line\n\
5 1700000000 644 ./no-ctime\n\
7 1700000001 1700000001 4755 ./x\n\
SANDBOX-SYNC listed 2\n\
SANDBOX-SYNC now 1700000200\n\
SANDBOX-SYNC list 3\n\
1 1 1 644 ./cut-off\n";
        let mut p = ListingParser::default();
        for line in text.split('\n') {
            p.line(line);
        }
        let l = p.finish();
        assert_eq!(l.now, Some(1_700_000_200));
        assert_eq!(l.dirs.len(), 1, "mapping 3 never closed");
        let files = &l.dirs[&2];
        assert_eq!(
            files["a b/c.txt"],
            Listed {
                size: 12,
                mtime: 1_700_000_000,
                ctime: 1_700_000_100,
                mode: 0o644
            }
        );
        assert_eq!(files["x"].mode, 0o4755);
        assert_eq!(files.len(), 2);
        let mut p = ListingParser::default();
        for line in [
            "SANDBOX-SYNC file 4 12 1700000000 1700000100 600",
            "SANDBOX-SYNC file 5 12 1700000000 1700000100",
            "SANDBOX-SYNC file x 1 1 1 644",
        ] {
            assert!(p.line(line));
        }
        let l = p.finish();
        assert_eq!(l.files.len(), 1);
        assert_eq!(l.files[&4].mode, 0o600);
        let framed = parse_listing(
            b"12 1700000000 1700000100 644 ./a b/c.txt\njunk\n\xff\xfe 1 1 644 ./x\n3 1 1 600 ./d/e",
        );
        assert_eq!(framed.len(), 2);
        assert_eq!(framed["a b/c.txt"], files["a b/c.txt"]);
        assert_eq!(framed["d/e"].mode, 0o600);
    }

    #[test]
    fn caps_lines_list_known_codecs() {
        assert_eq!(
            parse_caps("SANDBOX-SYNC caps zstd lz4 gzip").map(|c| c.codecs),
            Some(vec![Codec::Zstd, Codec::Gzip])
        );
        assert_eq!(parse_caps("SANDBOX-SYNC caps"), Some(Caps::default()));
        assert_eq!(
            parse_caps("SANDBOX-SYNC caps gzip stream"),
            Some(Caps {
                codecs: vec![Codec::Gzip],
                streams: true
            })
        );
        assert_eq!(parse_caps("SANDBOX-SYNC op 1"), None);
        let bad = format!("{:<511}\n", "SANDBOX-SYNC codec lz4");
        assert_eq!(parse_marker(bad.as_bytes()), None);
    }
}
