//! Blocking helpers over `wasi:io/streams`.

use sandbox_sync_core::tar_read::Source;
use sandbox_sync_core::Error as CoreError;

use crate::bindings::sandbox_sync::provider::host_fs::GrantedDir;

use crate::bindings::wasi::io::streams::{
    InputStream, OutputStream, StreamError as WasiStreamError,
};

/// A host stream error as one line: its debug text is an error chain over
/// several lines (`pipe`, `Caused by:`, numbered causes), and an error
/// message is read on one.
pub fn one_line(e: &crate::bindings::wasi::io::error::Error) -> String {
    sandbox_sync_core::error::one_line(&e.to_debug_string())
}

/// Why a stream operation stopped.
#[derive(Debug)]
pub enum StreamError {
    /// The other end is gone.
    Closed,
    /// The host reported an error.
    Failed(String),
    /// [`splice`]'s source reported an error (its destination still works):
    /// the sandbox's stream, not a host file, failed.
    Source(String),
}

impl From<WasiStreamError> for StreamError {
    fn from(e: WasiStreamError) -> Self {
        match e {
            WasiStreamError::Closed => StreamError::Closed,
            WasiStreamError::LastOperationFailed(err) => StreamError::Failed(one_line(&err)),
        }
    }
}

impl std::fmt::Display for StreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StreamError::Closed => f.write_str("stream closed"),
            StreamError::Failed(m) | StreamError::Source(m) => f.write_str(m),
        }
    }
}

/// Writes all of `bytes`, waiting for the stream's budget as needed.
pub fn write_all(out: &OutputStream, mut bytes: &[u8]) -> Result<(), StreamError> {
    while !bytes.is_empty() {
        let permit = out.check_write()?;
        if permit == 0 {
            out.subscribe().block();
            continue;
        }
        let n = usize::try_from(permit)
            .unwrap_or(usize::MAX)
            .min(bytes.len());
        out.write(&bytes[..n])?;
        bytes = &bytes[n..];
    }
    Ok(())
}

/// Flushes `out` and waits until the host has written everything.
pub fn flush(out: &OutputStream) -> Result<(), StreamError> {
    out.blocking_flush()?;
    Ok(())
}

/// Moves up to `len` bytes from `src` to `out` host-side. Returns how many
/// moved; fewer than `len` means `src` ended early.
///
/// Uses the non-blocking `splice`: `blocking-splice` flushes after every
/// chunk, which would turn each small file into its own pipe write.
pub fn splice(out: &OutputStream, src: &InputStream, len: u64) -> Result<u64, StreamError> {
    let mut moved = 0;
    while moved < len {
        match out.splice(src, len - moved) {
            Ok(0) => {
                // Either side may be the one that is not ready.
                if out.check_write()? == 0 {
                    out.subscribe().block();
                } else {
                    src.subscribe().block();
                }
            }
            Ok(n) => moved += n,
            // `closed` names no side: a closed `out` is the caller's
            // failure, a closed `src` is a short source.
            Err(WasiStreamError::Closed) => {
                out.check_write()?;
                break;
            }
            // Either side, too. A stream reports its error once and then
            // reads as closed: the source failed if it no longer reads.
            Err(WasiStreamError::LastOperationFailed(e)) => {
                let m = one_line(&e);
                return Err(match src.read(0) {
                    Err(_) => StreamError::Source(m),
                    Ok(_) => StreamError::Failed(m),
                });
            }
        }
    }
    Ok(moved)
}

/// A failed read of an archive stream: a close mid-archive is truncation,
/// anything else is the transport's fault.
fn archive_err(e: WasiStreamError) -> CoreError {
    match e {
        WasiStreamError::Closed => CoreError::unsafe_archive("archive is truncated"),
        WasiStreamError::LastOperationFailed(e) => {
            sandbox_sync_core::error::stream_failure(&e.to_debug_string())
        }
    }
}

/// A file to create from the next bytes of an archive.
pub struct NewFile<'a> {
    /// Where, beneath the grant.
    pub path: &'a str,
    /// How errors name it (its target path).
    pub shown: &'a str,
    /// Its permission bits.
    pub mode: u32,
    /// Its modification time, seconds.
    pub mtime: i64,
    /// Its size: the bytes it takes from the archive.
    pub len: u64,
}

/// The highest link rate [`GuardedInput::skip_timed`] reports (1 TB/s):
/// the sandbox compares it in shell arithmetic, which must not overflow.
pub const MAX_RATE: u64 = 1_000_000_000_000;

/// The sandbox's stdout, read with a byte guard.
///
/// Headers are read 512 bytes at a time and contents are spliced, so no
/// read-ahead ever pulls file contents into guest memory.
pub struct GuardedInput {
    stream: InputStream,
    total: u64,
    guard: u64,
    /// The stream ended in the middle of the archive.
    cut: bool,
}

impl GuardedInput {
    /// Reads `stream`, failing once more than `guard` bytes arrived.
    pub fn new(stream: InputStream, guard: u64) -> Self {
        GuardedInput {
            stream,
            total: 0,
            guard,
            cut: false,
        }
    }

    /// Bytes read or spliced so far.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The stream, to drop it (the sandbox's writer then fails).
    pub fn into_inner(self) -> InputStream {
        self.stream
    }

    /// True once the stream ended in the middle of the archive: a failure
    /// then is better explained by why it was cut (the program's exit, a
    /// broken exec channel) than by the truncation itself.
    pub fn was_cut(&self) -> bool {
        self.cut
    }

    /// A failed read: a close mid-archive is truncation, anything else is
    /// the transport's fault.
    fn fail(&mut self, e: WasiStreamError) -> CoreError {
        self.cut |= matches!(e, WasiStreamError::Closed);
        archive_err(e)
    }

    fn count(&mut self, n: u64) -> Result<(), CoreError> {
        self.total += n;
        if self.total > self.guard {
            return Err(CoreError::limit(format!(
                "the sandbox emitted more than the {}-byte output guard allows",
                self.guard
            )));
        }
        Ok(())
    }

    /// Moves exactly `len` bytes into `out`.
    pub fn splice_to(
        &mut self,
        out: &OutputStream,
        len: u64,
    ) -> Result<(), crate::bindings::sandbox_sync::provider::types::SyncError> {
        use crate::bindings::sandbox_sync::provider::types::SyncError;
        self.check_guard(len)?;
        let moved = splice(out, &self.stream, len).map_err(|e| match e {
            StreamError::Source(m) => sandbox_sync_core::error::stream_failure(&m).into(),
            StreamError::Failed(m) => SyncError::Io(format!("failed to write a host file: {m}")),
            StreamError::Closed => SyncError::Io("a host file stream closed".into()),
        })?;
        self.count(moved)?;
        if moved < len {
            self.cut = true;
            return Err(SyncError::UnsafeArchive("archive is truncated".into()));
        }
        Ok(())
    }

    /// Creates `f` in `grant` from the next `f.len` bytes, in one host call
    /// (`write-file`).
    pub fn write_file(
        &mut self,
        grant: &GrantedDir,
        f: &NewFile<'_>,
    ) -> Result<(), crate::bindings::sandbox_sync::provider::types::SyncError> {
        use crate::bindings::sandbox_sync::provider::types::SyncError;
        self.check_guard(f.len)?;
        let moved = grant
            .write_file(f.path, f.mode, f.mtime, &self.stream, f.len)
            .map_err(|e| crate::errors::fs("write", f.shown, e))?;
        self.count(moved)?;
        if moved < f.len {
            self.cut = true;
            return Err(SyncError::UnsafeArchive("archive is truncated".into()));
        }
        Ok(())
    }

    /// Fails when `len` more bytes would pass the output guard.
    fn check_guard(&self, len: u64) -> Result<(), CoreError> {
        if self.total.saturating_add(len) > self.guard {
            return Err(CoreError::limit(format!(
                "the sandbox emitted more than the {}-byte output guard allows",
                self.guard
            )));
        }
        Ok(())
    }

    /// Discards exactly `len` bytes.
    pub fn skip(&mut self, mut len: u64) -> Result<(), CoreError> {
        while len > 0 {
            len -= self.skip_some(len)?;
        }
        Ok(())
    }

    /// Discards what arrives next, at most `len` bytes (waits for some).
    fn skip_some(&mut self, len: u64) -> Result<u64, CoreError> {
        let n = match self.stream.blocking_skip(len) {
            Ok(n) => n,
            Err(e) => return Err(self.fail(e)),
        };
        self.count(n)?;
        Ok(n)
    }

    /// Discards exactly `len` bytes, timing their arrival: bytes a second
    /// from the first read to the last, not counting the first read's
    /// (they may have waited in a buffer); at most [`MAX_RATE`], which is
    /// also the rate of bytes that came in one read.
    pub fn skip_timed(&mut self, mut len: u64) -> Result<u64, CoreError> {
        let (mut first, mut last, mut timed) = (None, None, 0u64);
        while len > 0 {
            let n = self.skip_some(len)?;
            len -= n;
            let now = std::time::Instant::now();
            if first.is_none() {
                first = Some(now);
            } else {
                timed += n;
                last = Some(now);
            }
        }
        Ok(match (first, last) {
            // `as` saturates: a rate past u64 is past MAX_RATE too.
            (Some(f), Some(l)) if l > f && timed > 0 => {
                ((timed as f64 / (l - f).as_secs_f64()) as u64).min(MAX_RATE)
            }
            _ => MAX_RATE,
        })
    }

    /// Discards what already arrived, up to `max` bytes, to explain a
    /// failed exchange: fails only when that trips the output guard.
    /// Never waits (the sandbox may be gone, or silent but still there).
    pub fn drain_arrived(&mut self, mut max: u64) -> Result<(), CoreError> {
        while max > 0 {
            match self.stream.skip(max) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    self.count(n)?;
                    max = max.saturating_sub(n);
                }
            }
        }
        Ok(())
    }

    /// True when the stream ends here; false when more bytes follow.
    pub fn at_end(&mut self) -> Result<bool, CoreError> {
        match self.stream.blocking_read(1) {
            Ok(b) => {
                self.count(b.len() as u64)?;
                Ok(b.is_empty())
            }
            Err(WasiStreamError::Closed) => Ok(true),
            Err(WasiStreamError::LastOperationFailed(e)) => Err(
                sandbox_sync_core::error::stream_failure(&e.to_debug_string()),
            ),
        }
    }
}

impl Source for GuardedInput {
    fn read_exact(&mut self, mut buf: &mut [u8]) -> Result<(), CoreError> {
        while !buf.is_empty() {
            let chunk = match self.stream.blocking_read(buf.len() as u64) {
                Ok(c) => c,
                Err(e) => return Err(self.fail(e)),
            };
            self.count(chunk.len() as u64)?;
            let n = chunk.len().min(buf.len());
            buf[..n].copy_from_slice(&chunk[..n]);
            buf = &mut buf[n..];
        }
        Ok(())
    }
}

/// The digest of the file at `path` in `grant`, read whole by the host
/// (`granted-dir.digest`: MD5, as [`sandbox_sync_core::incremental`]
/// compares racy files by); none if it cannot be read, which only makes a
/// racy file go unrecorded (or be sent).
pub fn digest(grant: &GrantedDir, path: &str) -> Option<[u8; 16]> {
    grant.digest(path).ok()?.try_into().ok()
}

/// The host's clock: seconds and nanoseconds since the epoch ((0, 0) if it
/// is set before 1970).
pub fn now() -> (i64, u32) {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or((0, 0), |d| {
            (
                i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
                d.subsec_nanos(),
            )
        })
}

/// The host's wall clock, in whole seconds since the epoch (0 if it is set
/// before 1970).
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Random lowercase hex, for scratch names and commit tokens.
///
/// # Panics
/// Without a working random source: the component traps (fails closed)
/// rather than use a predictable scratch name or commit token.
pub fn random_hex(bytes: usize) -> String {
    match sandbox_sync_core::token::random_hex(bytes, getrandom::fill) {
        Ok(hex) => hex,
        Err(e) => panic!("no random source for scratch names and commit tokens: {e}"),
    }
}
