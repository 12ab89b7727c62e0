//! What the inbound program prints: its report before the host's answer
//! (listings, then caps) and its status lines after.

use sandbox_sync_core::script::{
    self, Caps, Decoder, Encoding, InboundSink, Listing, ListingParser, Status,
};

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
    /// A gzipped listing being read (`<TAG> zlist <k> <bytes>`, or
    /// `blist`): its mapping, the bytes still to come, and its decoder.
    blob: Option<(usize, usize, Decoder<InboundSink>)>,
}

impl Report {
    /// Takes the next bytes; the report once its caps line came.
    fn feed(&mut self, chunk: &[u8], early: &mut Vec<u8>) -> Option<(Caps, Listing)> {
        self.pending.extend_from_slice(chunk);
        let mut start = 0;
        loop {
            if let Some((k, left, decoder)) = &mut self.blob {
                let take = (*left).min(self.pending.len() - start);
                decoder.push(&self.pending[start..start + take]);
                start += take;
                *left -= take;
                if *left > 0 {
                    break;
                }
                let k = *k;
                if let Some((_, _, decoder)) = self.blob.take() {
                    self.inflated(k, decoder);
                }
                continue;
            }
            let Some(n) = self.pending[start..].iter().position(|&b| b == b'\n') else {
                break;
            };
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
            if let Some((k, len, encoding)) = zlist(text) {
                self.listed += len;
                self.dropped |= self.listed > MAX_LISTING_BYTES;
                // What is left of the bound, inflated.
                let room = MAX_LISTING_BYTES.saturating_sub(self.listed) as u64;
                let decoder = Decoder::new(encoding, room, self.parser.sink());
                self.blob = Some((k, len, decoder));
                continue;
            }
            self.dropped |= self.listed > MAX_LISTING_BYTES;
            if self.dropped {
                self.parser = ListingParser::default();
            } else if !self.parser.line(&line[..n]) && script::parse_status(text).is_some() {
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

    /// Takes mapping `k`'s gzipped listing, read; one that did not
    /// inflate within what is left of the bound drops every listing.
    fn inflated(&mut self, k: usize, decoder: Decoder<InboundSink>) {
        // The bound holds the listings together, inflated.
        let produced = usize::try_from(decoder.produced()).unwrap_or(usize::MAX);
        self.listed = self.listed.saturating_add(produced);
        self.dropped |= self.listed > MAX_LISTING_BYTES;
        if self.dropped {
            return;
        }
        match decoder.finish() {
            Some(files) => self.parser.listed(k, files),
            None => {
                self.dropped = true;
                self.parser = ListingParser::default();
            }
        }
    }
}

/// `<TAG> zlist <k> <bytes>`, or `blist` (base64 of gzip).
fn zlist(line: &str) -> Option<(usize, usize, Encoding)> {
    let mut w = line.split(' ');
    if w.next()? != script::TAG {
        return None;
    }
    let encoding = match w.next()? {
        "zlist" => Encoding::Gzip,
        "blist" => Encoding::Base64Gzip,
        _ => return None,
    };
    let (k, len) = (w.next()?.parse().ok()?, w.next()?.parse().ok()?);
    w.next().is_none().then_some((k, len, encoding))
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
