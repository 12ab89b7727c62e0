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
    let mut parser = ListingParser::default();
    let mut pending: Vec<u8> = Vec::new();
    let mut listed = 0usize;
    let mut dropped = false;
    loop {
        let Ok(chunk) = stdout.blocking_read(64 << 10) else {
            return (Caps::default(), Listing::default());
        };
        pending.extend_from_slice(&chunk);
        let mut start = 0;
        while let Some(n) = pending[start..].iter().position(|&b| b == b'\n') {
            let line = &pending[start..start + n + 1];
            start += n + 1;
            let text = std::str::from_utf8(&line[..n]).unwrap_or("");
            if let Some(caps) = script::parse_caps(text) {
                let listing = if dropped {
                    Listing::default()
                } else {
                    parser.finish()
                };
                return (caps, listing);
            }
            listed += line.len();
            dropped |= listed > MAX_LISTING_BYTES;
            if dropped {
                parser = ListingParser::default();
            } else if !parser.line(text) && script::parse_status(text).is_some() {
                early.extend_from_slice(line);
            }
        }
        pending.drain(..start);
        if pending.len() > MAX_LISTING_BYTES {
            // One endless line: not a listing.
            pending.clear();
            dropped = true;
        }
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
