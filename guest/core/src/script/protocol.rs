//! The wire protocol between the sandbox programs and the component:
//! status lines (sync-in) and 512-byte frame markers (sync-out), each
//! starting with [`TAG`]. Formatting and parsing live together here.

/// Prefix of every status line and frame marker the scripts print.
pub const TAG: &str = "SANDBOX-SYNC";

/// A frame marker the outbound program prints between tar streams.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Marker {
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
        ] {
            let text = match &m {
                Marker::Mapping { op, map } => format!("{TAG} map {op} {map}"),
                Marker::OpDone(op) => format!("{TAG} op {op}"),
                Marker::End => format!("{TAG} end"),
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
}
