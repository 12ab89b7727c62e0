//! What the inbound program prints: its report before the host's answer
//! (listings, then caps) and its status lines after.

use sandbox_sync_core::script::{self, Caps, Listing, ListingParser, Status};

use sandbox_sync_driver::bindings::wasi::io::streams::InputStream;

/// Most bytes of status lines accepted from the inbound program.
const MAX_STATUS_BYTES: u64 = 1 << 20;

/// Most bytes of listings kept (about 100 bytes a file); past it the
/// listing is dropped and every file is sent.
const MAX_LISTING_BYTES: usize = 64 << 20;

/// Reads what the program reports before it waits for the answer: its
/// listings, then its caps line. It prints nothing else meanwhile (status
/// lines, should any come, go to `early`). A program that ended first (a
/// failed preflight) reports no caps and no listings.
pub fn read_report(stdout: &InputStream, early: &mut Vec<u8>) -> (Caps, Listing) {
    let mut report = Report::default();
    loop {
        let Ok(chunk) = stdout.blocking_read(64 << 10) else {
            return (Caps::default(), Listing::default());
        };
        if let Some(done) = report.feed(&chunk, early) {
            return done;
        }
    }
}

/// The report a report program printed ([`InboundScript::report_program`]
/// on a toolbox sandbox), or none without its caps line.
///
/// [`InboundScript::report_program`]: sandbox_sync_core::script::InboundScript::report_program
pub fn parse_report(output: &[u8]) -> Option<(Caps, Listing)> {
    let mut early = Vec::new();
    Report::default().feed(output, &mut early)
}

/// A report, parsed as it arrives.
#[derive(Default)]
struct Report {
    parser: ListingParser,
    pending: Vec<u8>,
    listed: usize,
    dropped: bool,
}

impl Report {
    /// Takes the next bytes; the report once its caps line came.
    fn feed(&mut self, chunk: &[u8], early: &mut Vec<u8>) -> Option<(Caps, Listing)> {
        self.pending.extend_from_slice(chunk);
        let mut start = 0;
        while let Some(n) = self.pending[start..].iter().position(|&b| b == b'\n') {
            let line = &self.pending[start..start + n + 1];
            start += n + 1;
            let text = std::str::from_utf8(&line[..n]).unwrap_or("");
            if let Some(caps) = script::parse_caps(text) {
                let listing = if self.dropped {
                    Listing::default()
                } else {
                    std::mem::take(&mut self.parser).finish()
                };
                return Some((caps, listing));
            }
            self.listed += line.len();
            self.dropped |= self.listed > MAX_LISTING_BYTES;
            if self.dropped {
                self.parser = ListingParser::default();
            } else if !self.parser.line(text) && script::parse_status(text).is_some() {
                early.extend_from_slice(line);
            }
        }
        self.pending.drain(..start);
        if self.pending.len() > MAX_LISTING_BYTES {
            // One endless line: not a listing.
            self.pending.clear();
            self.dropped = true;
        }
        None
    }
}

/// Reads the inbound program's status lines until stdout ends (after
/// `early`, what was read before).
pub fn read_status(stdout: &InputStream, early: Vec<u8>) -> Vec<Status> {
    let mut bytes = early;
    while let Ok(chunk) = stdout.blocking_read(64 * 1024) {
        if bytes.len() as u64 + chunk.len() as u64 > MAX_STATUS_BYTES {
            break;
        }
        bytes.extend_from_slice(&chunk);
    }
    parse_statuses(&bytes)
}

/// The status lines among what the inbound program printed.
pub fn parse_statuses(bytes: &[u8]) -> Vec<Status> {
    String::from_utf8_lossy(bytes)
        .lines()
        .filter_map(script::parse_status)
        .collect()
}
