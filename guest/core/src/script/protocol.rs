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

/// Parses the inbound program's codec line (`<TAG> caps[ <codec>]...`,
/// without the newline): the codecs the sandbox can decompress. Names it
/// does not know are skipped.
pub fn parse_caps(line: &str) -> Option<Vec<Codec>> {
    let mut w = line.split(' ');
    if w.next()? != TAG || w.next()? != "caps" {
        return None;
    }
    Some(w.filter_map(Codec::parse).collect())
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
}

impl Marker {
    /// The marker's words after [`TAG`] (the program pads the line to a block).
    pub fn words(&self) -> String {
        match self {
            Marker::Mapping { op, map } => format!("map {op} {map}"),
            Marker::OpDone(op) => format!("op {op}"),
            Marker::End => "end".to_owned(),
            Marker::Codec(c) => format!("codec {}", choice_name(*c)),
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
        ] {
            let text = match &m {
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
    fn caps_lines_list_known_codecs() {
        assert_eq!(
            parse_caps("SANDBOX-SYNC caps zstd lz4 gzip"),
            Some(vec![Codec::Zstd, Codec::Gzip])
        );
        assert_eq!(parse_caps("SANDBOX-SYNC caps"), Some(vec![]));
        assert_eq!(parse_caps("SANDBOX-SYNC op 1"), None);
        let bad = format!("{:<511}\n", "SANDBOX-SYNC codec lz4");
        assert_eq!(parse_marker(bad.as_bytes()), None);
    }
}
