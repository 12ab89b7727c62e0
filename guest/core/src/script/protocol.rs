//! The wire protocol between the sandbox programs and the component:
//! status lines (sync-in) and 512-byte frame markers (sync-out), each
//! starting with [`TAG`]. Formatting and parsing live together here.

use super::listing::Probe;

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

/// A frame marker the outbound program prints between tar streams.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Marker {
    /// Everything after this marker is compressed with the codec (none:
    /// plain), as one stream.
    Codec(Option<Codec>),
    /// The next `len` bytes are a probe of the link, which the host times
    /// and drops, then answers on stdin with the rate (bytes a second); a
    /// [`Marker::Codec`] follows (see `offer_compression`).
    Probe(u64),
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
            Marker::Probe(len) => format!("probe {len}"),
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
        ("probe", Some(len), None) => Marker::Probe(len.parse().ok()?),
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

/// The features a program may turn off for want of a tool (README, "What
/// the sandbox needs"); no other name is reported.
pub const FEATURES: &[&str] = &[
    "command-sessions",
    "sandbox-deadline",
    "incremental-in-record",
    "incremental-in-keep",
    "incremental-out",
    "compressed-sync-in",
    "compressed-sync-out",
    "measured-compression",
    "compressed-listings",
];

/// A feature a program turned off: its stderr line
/// `<TAG> off <feature> <missing...>` (`_ss_off`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Off {
    /// One of [`FEATURES`].
    pub feature: String,
    /// What the sandbox lacks (`a|b`: neither), at most 8 names of at most
    /// 64 bytes each.
    pub missing: Vec<String>,
}

/// Splits a program's stderr into the features it turned off (each once,
/// known names only: the sandbox writes this, so it is bounded) and the
/// rest, which errors quote.
pub fn split_off(stderr: &[u8]) -> (Vec<Off>, Vec<u8>) {
    let prefix = format!("{TAG} off ");
    let mut offs: Vec<Off> = Vec::new();
    let mut rest = Vec::with_capacity(stderr.len());
    for line in stderr.split_inclusive(|b| *b == b'\n') {
        let Some(words) = line
            .strip_prefix(prefix.as_bytes())
            .and_then(|w| std::str::from_utf8(w).ok())
        else {
            rest.extend_from_slice(line);
            continue;
        };
        let mut words = words.split_whitespace();
        let Some(feature) = words.next().filter(|f| FEATURES.contains(f)) else {
            rest.extend_from_slice(line);
            continue;
        };
        if offs.iter().any(|o| o.feature == feature) {
            continue;
        }
        offs.push(Off {
            feature: feature.to_owned(),
            missing: words
                .filter(|w| w.len() <= 64)
                .take(8)
                .map(str::to_owned)
                .collect(),
        });
    }
    (offs, rest)
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
            Marker::Probe(524_288),
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

    #[test]
    fn features_turned_off_are_split_from_stderr() {
        let stderr = b"SANDBOX-SYNC off incremental-out awk GNU-head|dd-iflag=fullblock\n\
sandbox-sync: something failed\n\
SANDBOX-SYNC off incremental-out awk\n\
SANDBOX-SYNC off made-up-feature x\n\
SANDBOX-SYNC off sandbox-deadline sleep";
        let (offs, rest) = split_off(stderr);
        assert_eq!(
            offs,
            [
                Off {
                    feature: "incremental-out".into(),
                    missing: vec!["awk".into(), "GNU-head|dd-iflag=fullblock".into()],
                },
                Off {
                    feature: "sandbox-deadline".into(),
                    missing: vec!["sleep".into()],
                },
            ]
        );
        assert_eq!(
            rest,
            b"sandbox-sync: something failed\nSANDBOX-SYNC off made-up-feature x\n"
        );
    }
}
