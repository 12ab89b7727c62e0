//! Transport compression, the host's half: natively compiled codecs (the
//! `zstd` and `flate2` crates to compress, `async-compression` to
//! decompress), never in guest memory. The sandbox runs the matching
//! command-line tool (`zstd`, `gzip`) in its pipe.

use std::io::{self, Write as _};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use async_compression::tokio::bufread::{GzipDecoder, ZstdDecoder};
use bytes::Bytes;
use sandbox_sync_core::error::LIMIT_MARK;
use tokio::io::{AsyncRead, BufReader, ReadBuf};

pub use sandbox_sync_core::script::Codec;

/// zstd's level 3 (its default) compresses text ~4x at several hundred
/// MB/s; gzip's level 1 is its only level fast enough not to be the
/// bottleneck of a link in the tens of MB/s.
const ZSTD_LEVEL: i32 = 3;
const GZIP_LEVEL: u32 = 1;

/// Largest zstd window accepted from a sandbox (8 MiB, as 2^23): the
/// sandbox compresses at levels whose window is at most 2 MiB, and a
/// hostile frame asking for zstd's 128 MiB default cannot make the host
/// hold that much.
const ZSTD_WINDOW_LOG_MAX: u32 = 23;

/// Compressed bytes read from the transport at a time.
const WIRE_BUF: usize = 256 << 10;

/// What one codec layer moved, updated as it works.
#[derive(Debug, Default)]
pub struct CodecMeter {
    plain: AtomicU64,
    wire: AtomicU64,
    busy_ns: AtomicU64,
}

impl CodecMeter {
    fn add(&self, plain: usize, wire: usize, since: Instant) {
        self.plain.fetch_add(plain as u64, Ordering::Relaxed);
        self.wire.fetch_add(wire as u64, Ordering::Relaxed);
        let ns = u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.busy_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// The totals so far.
    pub fn stats(&self) -> CodecStats {
        CodecStats {
            plain_bytes: self.plain.load(Ordering::Relaxed),
            wire_bytes: self.wire.load(Ordering::Relaxed),
            busy_us: self.busy_ns.load(Ordering::Relaxed) / 1000,
        }
    }
}

/// What a codec did on one stream: bytes in and out, and time spent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CodecStats {
    /// Uncompressed bytes.
    pub plain_bytes: u64,
    /// Compressed bytes on the wire.
    pub wire_bytes: u64,
    /// Microseconds spent coding.
    pub busy_us: u64,
}

/// The codec's name in logs and telemetry.
pub fn name(codec: Codec) -> &'static str {
    codec.name()
}

enum Encoder {
    Zstd(zstd::stream::write::Encoder<'static, Vec<u8>>),
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
}

/// Compresses what is written to a sandbox's stdin into one stream.
pub struct StdinEncoder {
    encoder: Encoder,
    meter: Arc<CodecMeter>,
}

impl StdinEncoder {
    /// # Errors
    /// When the codec cannot be set up (zstd's context allocation).
    pub fn new(codec: Codec, meter: Arc<CodecMeter>) -> io::Result<Self> {
        let encoder = match codec {
            Codec::Zstd => {
                let mut e = zstd::stream::write::Encoder::new(Vec::new(), ZSTD_LEVEL)?;
                e.include_checksum(true)?;
                Encoder::Zstd(e)
            }
            Codec::Gzip => Encoder::Gzip(flate2::write::GzEncoder::new(
                Vec::new(),
                flate2::Compression::new(GZIP_LEVEL),
            )),
        };
        Ok(StdinEncoder { encoder, meter })
    }

    /// Compresses `plain`; returns the compressed bytes ready so far (often
    /// none: the codec holds data back until it has a block).
    ///
    /// # Errors
    /// Only on a codec failure; the output is memory.
    pub fn compress(&mut self, plain: &[u8]) -> io::Result<Bytes> {
        let since = Instant::now();
        let out = match &mut self.encoder {
            Encoder::Zstd(e) => {
                e.write_all(plain)?;
                std::mem::take(e.get_mut())
            }
            Encoder::Gzip(e) => {
                e.write_all(plain)?;
                std::mem::take(e.get_mut())
            }
        };
        self.meter.add(plain.len(), out.len(), since);
        Ok(Bytes::from(out))
    }

    /// Ends the stream: the last block and the trailer (checksum, length).
    ///
    /// # Errors
    /// Only on a codec failure.
    pub fn finish(self) -> io::Result<Bytes> {
        let since = Instant::now();
        let out = match self.encoder {
            Encoder::Zstd(e) => e.finish()?,
            Encoder::Gzip(e) => e.finish()?,
        };
        self.meter.add(0, out.len(), since);
        Ok(Bytes::from(out))
    }

    /// What this encoder has moved.
    pub fn meter(&self) -> &Arc<CodecMeter> {
        &self.meter
    }
}

/// A boxed byte source.
pub type Reader = Box<dyn AsyncRead + Send + Unpin>;

/// Decodes a sandbox's compressed stdout: `prefix` (bytes already read
/// off the transport) and then `raw`. Concatenated gzip members or zstd
/// frames decode as one stream; anything else after them, a corrupt
/// stream, or more than `max_wire` compressed bytes fails the read.
pub fn decoder(
    codec: Codec,
    prefix: Bytes,
    raw: Reader,
    max_wire: u64,
    meter: Arc<CodecMeter>,
) -> Reader {
    let wire = BufReader::with_capacity(
        WIRE_BUF,
        Wire {
            prefix,
            raw,
            left: max_wire,
            meter: Arc::clone(&meter),
        },
    );
    let inner: Reader = match codec {
        Codec::Gzip => {
            let mut d = GzipDecoder::new(wire);
            d.multiple_members(true);
            Box::new(d)
        }
        Codec::Zstd => {
            let params = [async_compression::zstd::DParameter::window_log_max(
                ZSTD_WINDOW_LOG_MAX,
            )];
            let mut d = ZstdDecoder::with_params(wire, &params);
            d.multiple_members(true);
            Box::new(d)
        }
    };
    Box::new(Decoded { inner, meter })
}

/// Compressed bytes off the transport, counted and capped.
struct Wire {
    prefix: Bytes,
    raw: Reader,
    left: u64,
    meter: Arc<CodecMeter>,
}

impl AsyncRead for Wire {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        if this.prefix.is_empty() {
            std::task::ready!(Pin::new(&mut this.raw).poll_read(cx, buf))?;
        } else {
            let n = this.prefix.len().min(buf.remaining());
            buf.put_slice(&this.prefix.split_to(n));
        }
        let n = (buf.filled().len() - before) as u64;
        if n > this.left {
            return Poll::Ready(Err(io::Error::other(format!(
                "{LIMIT_MARK}the sandbox's compressed output passed the output guard"
            ))));
        }
        this.left -= n;
        this.meter.wire.fetch_add(n, Ordering::Relaxed);
        Poll::Ready(Ok(()))
    }
}

/// Decoded bytes, counted, with the time spent decoding.
struct Decoded {
    inner: Reader,
    meter: Arc<CodecMeter>,
}

impl AsyncRead for Decoded {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let since = Instant::now();
        let before = buf.filled().len();
        let polled = match Pin::new(&mut self.inner).poll_read(cx, buf) {
            // A stream cut mid-frame is a cut stream, as a plain one would
            // be: it ends, and the reader's framing finds it incomplete.
            Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => {
                tracing::debug!(error = %e, "compressed stdout cut mid-stream");
                Poll::Ready(Ok(()))
            }
            other => other,
        };
        // Wire bytes are counted as they are read (including any the
        // decoder still buffers).
        self.meter.add(buf.filled().len() - before, 0, since);
        polled.map_err(|e| {
            // zstd's refusal of a window past ZSTD_WINDOW_LOG_MAX is our
            // limit, not a broken transport.
            let text = e.to_string();
            let text = if text.contains("too much memory") {
                format!(
                    "{LIMIT_MARK}the sandbox's zstd frame asks for a window over {} MiB",
                    1u32 << (ZSTD_WINDOW_LOG_MAX - 20)
                )
            } else {
                text
            };
            io::Error::new(e.kind(), format!("decompressing stdout: {text}"))
        })
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;

    fn text(len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| b"the quick brown fox jumps over the lazy dog\n"[i % 44])
            .collect()
    }

    async fn round_trip(codec: Codec, data: &[u8], split: usize) -> Vec<u8> {
        let meter = Arc::new(CodecMeter::default());
        let mut enc = StdinEncoder::new(codec, Arc::clone(&meter)).unwrap();
        let mut wire = Vec::new();
        for chunk in data.chunks(split.max(1)) {
            wire.extend_from_slice(&enc.compress(chunk).unwrap());
        }
        wire.extend_from_slice(&enc.finish().unwrap());
        let stats = meter.stats();
        assert_eq!(stats.plain_bytes, data.len() as u64);
        assert_eq!(stats.wire_bytes, wire.len() as u64);
        // The first bytes arrive as a prefix, the rest from the transport.
        let cut = wire.len().min(100);
        let prefix = Bytes::copy_from_slice(&wire[..cut]);
        let rest: Reader = Box::new(std::io::Cursor::new(wire[cut..].to_vec()));
        let read_meter = Arc::new(CodecMeter::default());
        let mut d = decoder(codec, prefix, rest, u64::MAX, Arc::clone(&read_meter));
        let mut out = Vec::new();
        d.read_to_end(&mut out).await.unwrap();
        assert_eq!(read_meter.stats().wire_bytes, wire.len() as u64);
        assert_eq!(read_meter.stats().plain_bytes, out.len() as u64);
        out
    }

    #[tokio::test]
    async fn both_codecs_round_trip_and_count() {
        for codec in [Codec::Gzip, Codec::Zstd] {
            let data = text(3 << 20);
            assert!(round_trip(codec, &data, 100_000).await == data);
            assert!(round_trip(codec, b"", 1).await.is_empty());
        }
    }

    fn compressed(codec: Codec, data: &[u8]) -> Vec<u8> {
        let mut enc = StdinEncoder::new(codec, Arc::default()).unwrap();
        let mut wire = enc.compress(data).unwrap().to_vec();
        wire.extend_from_slice(&enc.finish().unwrap());
        wire
    }

    async fn decode(codec: Codec, wire: Vec<u8>, max_wire: u64) -> io::Result<Vec<u8>> {
        let raw: Reader = Box::new(std::io::Cursor::new(wire));
        let mut d = decoder(codec, Bytes::new(), raw, max_wire, Arc::default());
        let mut out = Vec::new();
        d.read_to_end(&mut out).await.map(|_| out)
    }

    #[tokio::test]
    async fn concatenated_members_are_one_stream() {
        for codec in [Codec::Gzip, Codec::Zstd] {
            let mut wire = compressed(codec, b"first ");
            wire.extend(compressed(codec, b"second"));
            assert_eq!(
                decode(codec, wire, u64::MAX).await.unwrap(),
                b"first second"
            );
        }
    }

    #[tokio::test]
    async fn trailing_garbage_corruption_and_the_wire_cap_fail_the_read() {
        for codec in [Codec::Gzip, Codec::Zstd] {
            let good = compressed(codec, &text(100_000));
            let mut trailing = good.clone();
            trailing.extend_from_slice(b"tar header smuggled after the stream");
            assert!(
                decode(codec, trailing, u64::MAX).await.is_err(),
                "{codec:?} trailing"
            );
            let mut corrupt = good.clone();
            let mid = corrupt.len() / 2;
            corrupt[mid] ^= 0x55;
            assert!(
                decode(codec, corrupt, u64::MAX).await.is_err(),
                "{codec:?} corrupt"
            );
            // A stream cut mid-data ends early (the reader's framing
            // notices); one cut in the trailer still held every byte.
            let cut = good[..good.len() / 2].to_vec();
            let short = decode(codec, cut, u64::MAX).await.unwrap_or_default();
            assert!(short.len() < 100_000, "{codec:?} cut");
            let len = good.len() as u64;
            assert!(
                decode(codec, good.clone(), len - 1).await.is_err(),
                "{codec:?} cap"
            );
            assert!(
                decode(codec, good, len).await.is_ok(),
                "{codec:?} at the cap"
            );
        }
    }

    #[tokio::test]
    async fn a_zstd_frame_asking_for_a_huge_window_is_refused() {
        let data = text(1 << 20);
        let mut e = zstd::stream::write::Encoder::new(Vec::new(), 1).unwrap();
        e.long_distance_matching(true).unwrap();
        e.window_log(27).unwrap();
        e.write_all(&data).unwrap();
        let wire = e.finish().unwrap();
        let err = decode(Codec::Zstd, wire, u64::MAX).await.unwrap_err();
        let text = err.to_string();
        assert!(text.contains(LIMIT_MARK), "{text}");
        assert!(text.contains("window over 8 MiB"), "{text}");
    }
}
