//! A sandbox's stdin and stdout as `wasi:io` streams, driven in place.
//!
//! The default adapters (`AsyncWriteStream`, `AsyncReadStream`) move every
//! chunk through a worker task and a channel, and write each chunk alone:
//! a 4 KiB tar member cost a task hop, a futex wake and a pipe write that
//! woke the sandbox's reader. These streams do their I/O from the calling
//! task: writes are queued without copying and leave in one `writev`,
//! reads take up to 1 MiB per syscall and serve 512-byte headers from it,
//! and [`ExecStdin::send_file`] splices large host files straight into a
//! local pipe. Either stream can carry a compressed transport
//! ([`super::codec`]) from any point on.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::io::{self, IoSlice, Read};
use std::os::unix::fs::MetadataExt;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll, Waker};

use bytes::{Bytes, BytesMut};
use wasmtime_wasi::p2::{InputStream, OutputStream, Pollable, StreamError, StreamResult};

use super::codec::{self, CodecMeter, Reader, StdinEncoder};
use super::codec::{Codec, CodecStats};
use super::{PlannedFile, SendError};
use crate::exec::SandboxStdin;
use crate::fs::GrantedDir;

/// Bytes that may wait in the stdin queue before writers must wait.
const STDIN_QUEUE: usize = 1 << 20;
/// Queued bytes at which a write drains to the pipe without waiting for a
/// flush: big enough that many small tar members share one `writev`.
const STDIN_DRAIN_AT: usize = 256 << 10;
/// Most buffers handed to one `writev`.
const MAX_IOVECS: usize = 64;
/// Files at least this large are spliced; smaller ones are read into the
/// queue so that many of them share a pipe write.
const SPLICE_MIN: u64 = 128 << 10;
/// Largest read from a host file or from the sandbox's stdout.
const CHUNK: usize = 1 << 20;

/// Whether a pipe still works.
enum PipeState {
    Open,
    /// Failed; the error is reported once, then the stream is closed.
    Failed(Option<io::Error>),
}

impl PipeState {
    fn check(&mut self) -> StreamResult<()> {
        match self {
            PipeState::Open => Ok(()),
            PipeState::Failed(e) => match e.take() {
                Some(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(
                    StreamError::LastOperationFailed(wasmtime::Error::from(e).context("pipe")),
                ),
                _ => Err(StreamError::Closed),
            },
        }
    }
}

/// Why [`ExecStdin::send_file`] stopped.
#[derive(Debug, thiserror::Error)]
pub enum PipeError {
    /// Reading the host file failed.
    #[error("{0}")]
    Read(io::Error),
    /// The sandbox's stdin failed or closed.
    #[error("{0}")]
    Stdin(String),
}

/// The queue and the pipe behind an [`ExecStdin`].
struct StdinPipe {
    inner: Box<dyn SandboxStdin>,
    queue: VecDeque<Bytes>,
    queued: usize,
    flush_pending: bool,
    state: PipeState,
    /// Compresses what is pushed, when the transport is compressed.
    encoder: Option<StdinEncoder>,
}

impl StdinPipe {
    fn fail(&mut self, e: io::Error) {
        self.queue.clear();
        self.queued = 0;
        self.flush_pending = false;
        self.state = PipeState::Failed(Some(e));
    }

    /// Writes the queue (and flushes when asked) until it is empty or the
    /// pipe is full. Ready means nothing is left to do or the pipe failed.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if !matches!(self.state, PipeState::Open) {
            return Poll::Ready(());
        }
        while !self.queue.is_empty() {
            let slices: Vec<IoSlice<'_>> = self
                .queue
                .iter()
                .take(MAX_IOVECS)
                .map(|b| IoSlice::new(b))
                .collect();
            match Pin::new(&mut *self.inner).poll_write_vectored(cx, &slices) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(0)) => {
                    self.fail(io::ErrorKind::WriteZero.into());
                    return Poll::Ready(());
                }
                Poll::Ready(Ok(n)) => self.consume(n),
                Poll::Ready(Err(e)) => {
                    self.fail(e);
                    return Poll::Ready(());
                }
            }
        }
        if self.flush_pending {
            match Pin::new(&mut *self.inner).poll_flush(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(())) => self.flush_pending = false,
                Poll::Ready(Err(e)) => self.fail(e),
            }
        }
        Poll::Ready(())
    }

    fn consume(&mut self, mut n: usize) {
        self.queued -= n;
        while n > 0 {
            let Some(front) = self.queue.front_mut() else {
                return;
            };
            if n >= front.len() {
                n -= front.len();
                self.queue.pop_front();
            } else {
                let _ = front.split_to(n);
                n = 0;
            }
        }
    }

    /// Drains what the pipe takes right now, without waiting.
    fn drain_now(&mut self) {
        let _ = self.poll_drain(&mut Context::from_waker(Waker::noop()));
    }

    /// Ready with the free queue space once there is some (or the pipe failed).
    fn poll_room(&mut self, cx: &mut Context<'_>) -> Poll<usize> {
        let drained = self.poll_drain(cx).is_ready();
        if drained || (!self.flush_pending && self.queued < STDIN_QUEUE) {
            Poll::Ready(STDIN_QUEUE.saturating_sub(self.queued))
        } else {
            Poll::Pending
        }
    }

    fn push(&mut self, bytes: Bytes) {
        let bytes = match &mut self.encoder {
            Some(e) => match e.compress(&bytes) {
                Ok(wire) => wire,
                Err(e) => return self.fail(e),
            },
            None => bytes,
        };
        self.enqueue(bytes);
    }

    /// Queues bytes as they go on the wire.
    fn enqueue(&mut self, bytes: Bytes) {
        if bytes.is_empty() {
            return;
        }
        self.queued += bytes.len();
        self.queue.push_back(bytes);
        if self.queued >= STDIN_DRAIN_AT {
            self.drain_now();
        }
    }

    /// Fails with the pipe's error once it no longer works.
    fn ensure_open(&mut self) -> Result<(), PipeError> {
        match self.state {
            PipeState::Open => Ok(()),
            PipeState::Failed(_) => Err(self.stdin_error()),
        }
    }

    fn stdin_error(&mut self) -> PipeError {
        PipeError::Stdin(match self.state.check() {
            Err(StreamError::LastOperationFailed(e)) => format!("{e:#}"),
            _ => "stdin closed".into(),
        })
    }
}

/// A sandbox's stdin. The component writes it as an `output-stream`;
/// `execution.send-files` appends host files to the same queue.
#[derive(Clone)]
pub struct ExecStdin(Arc<Mutex<StdinPipe>>);

/// A handle that does not keep the pipe open once the component dropped
/// its `output-stream`.
pub struct WeakStdin(Weak<Mutex<StdinPipe>>);

impl WeakStdin {
    pub fn upgrade(&self) -> Option<ExecStdin> {
        self.0.upgrade().map(ExecStdin)
    }
}

impl ExecStdin {
    pub fn new(inner: Box<dyn SandboxStdin>) -> Self {
        ExecStdin(Arc::new(Mutex::new(StdinPipe {
            inner,
            queue: VecDeque::new(),
            queued: 0,
            flush_pending: false,
            state: PipeState::Open,
            encoder: None,
        })))
    }

    /// Compresses everything written from now on with `codec`.
    pub fn compress(&self, codec: Codec, meter: Arc<CodecMeter>) -> Result<(), String> {
        let mut pipe = self.pipe();
        if pipe.encoder.is_some() {
            return Err("stdin is already compressed".into());
        }
        pipe.encoder = Some(StdinEncoder::new(codec, meter).map_err(|e| e.to_string())?);
        Ok(())
    }

    /// Ends the compressed stream (its trailer is queued); later writes
    /// are plain.
    pub fn finish_compressed(&self) -> Result<CodecStats, String> {
        let mut pipe = self.pipe();
        let Some(encoder) = pipe.encoder.take() else {
            return Err("stdin is not compressed".into());
        };
        let meter = Arc::clone(encoder.meter());
        match encoder.finish() {
            Ok(trailer) => pipe.enqueue(trailer),
            Err(e) => return Err(e.to_string()),
        }
        Ok(meter.stats())
    }

    /// The pipe state is never left half-updated, so a poisoned lock is
    /// still consistent.
    fn pipe(&self) -> MutexGuard<'_, StdinPipe> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn downgrade(&self) -> WeakStdin {
        WeakStdin(Arc::downgrade(&self.0))
    }

    /// Queues `bytes`, waiting for room as needed.
    pub async fn write_all(&self, mut bytes: Bytes) -> Result<(), PipeError> {
        while !bytes.is_empty() {
            let room = self.room().await;
            self.queue(bytes.split_to(room.min(bytes.len())))?;
        }
        Ok(())
    }

    /// Waits until the queue has room (or the pipe failed) and says how much.
    async fn room(&self) -> usize {
        poll_fn(|cx| self.pipe().poll_room(cx)).await
    }

    /// Queues `bytes`, which must fit the room [`ExecStdin::room`] reported.
    fn queue(&self, bytes: Bytes) -> Result<(), PipeError> {
        let mut pipe = self.pipe();
        pipe.ensure_open()?;
        pipe.push(bytes);
        Ok(())
    }

    /// Appends exactly `len` bytes of `file` (from its current offset).
    /// Returns how many it found; fewer means the file ended early.
    pub async fn send_file(&self, file: &std::fs::File, len: u64) -> Result<u64, PipeError> {
        let mut left = len;
        // Compressed bytes pass through the encoder, never a splice.
        if len >= SPLICE_MIN && self.pipe().encoder.is_none() {
            // Bytes already queued go first.
            poll_fn(|cx| self.pipe().poll_drain(cx)).await;
            while left > 0 {
                let want = usize::try_from(left).unwrap_or(usize::MAX).min(CHUNK);
                let spliced = poll_fn(|cx| {
                    let mut pipe = self.pipe();
                    if let Err(e) = pipe.ensure_open() {
                        return Poll::Ready(Err(e));
                    }
                    match pipe.inner.poll_splice_from(cx, file, want) {
                        Poll::Pending => Poll::Pending,
                        Poll::Ready(Ok(n)) => Poll::Ready(Ok(n)),
                        Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::BrokenPipe => {
                            pipe.fail(e);
                            Poll::Ready(Err(pipe.stdin_error()))
                        }
                        // The file side refused (a filesystem without
                        // splice support, a read error): copy instead,
                        // which reports read errors as such.
                        Poll::Ready(Err(e)) => {
                            tracing::debug!(error = %e, "splice refused; copying");
                            Poll::Ready(Ok(None))
                        }
                    }
                })
                .await?;
                match spliced {
                    Some(0) => return Ok(len - left),
                    Some(n) => left -= n as u64,
                    None => break,
                }
            }
        }
        while left > 0 {
            let room = self.room().await;
            let want = usize::try_from(left)
                .unwrap_or(usize::MAX)
                .min(room)
                .min(CHUNK);
            let mut buf = vec![0u8; want];
            let n = loop {
                match (&*file).read(&mut buf) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    other => break other.map_err(PipeError::Read)?,
                }
            };
            if n == 0 {
                break;
            }
            buf.truncate(n);
            self.queue(Bytes::from(buf))?;
            left -= n as u64;
        }
        Ok(len - left)
    }

    /// Appends each file's prefix and then exactly its planned bytes (the
    /// WIT `send-files`). Each file is opened from `source` and checked on
    /// the handle that was read: the bytes sent are that file's, and it
    /// still is the planned device and inode with the planned size and
    /// mtime, or the send stops with `source-changed`.
    pub async fn send_files(
        &self,
        source: &GrantedDir,
        files: Vec<PlannedFile>,
    ) -> Result<(), SendError> {
        for f in files {
            self.write_all(f.prefix.into())
                .await
                .map_err(|e| e.for_file(&f.path))?;
            let changed = |why: &str| {
                SendError::SourceChanged(format!(
                    "source file {} {why} while it was being sent",
                    f.path
                ))
            };
            let file = source.open_file(&f.path).map_err(|e| match e {
                crate::fs::Error::NotFound(_) => changed("disappeared"),
                _ => changed("was replaced"),
            })?;
            let sent = self
                .send_file(&file, f.size)
                .await
                .map_err(|e| e.for_file(&f.path))?;
            if sent < f.size {
                return Err(changed("shrank"));
            }
            let now = file
                .metadata()
                .map_err(|e| PipeError::Read(e).for_file(&f.path))?;
            if (now.dev(), now.ino()) != (f.device, f.inode) {
                return Err(changed("was replaced"));
            }
            if now.len() != f.size
                || now.mtime() != f.mtime_sec
                || u32::try_from(now.mtime_nsec()).ok() != Some(f.mtime_nsec)
            {
                return Err(changed("changed"));
            }
        }
        Ok(())
    }
}

impl PipeError {
    /// The send error for a failure while sending the file at `path`.
    fn for_file(self, path: &str) -> SendError {
        match self {
            PipeError::Read(e) => SendError::ReadFailed(format!("failed to read {path}: {e}")),
            PipeError::Stdin(m) => SendError::StdinFailed(m),
        }
    }
}

#[async_trait::async_trait]
impl Pollable for ExecStdin {
    async fn ready(&mut self) {
        poll_fn(|cx| self.pipe().poll_room(cx).map(|_| ())).await
    }
}

impl OutputStream for ExecStdin {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        let mut pipe = self.pipe();
        pipe.state.check()?;
        if bytes.len() > STDIN_QUEUE.saturating_sub(pipe.queued) {
            return Err(StreamError::trap("write exceeded the check-write permit"));
        }
        pipe.push(bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        let mut pipe = self.pipe();
        pipe.state.check()?;
        pipe.flush_pending = true;
        pipe.drain_now();
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        let mut pipe = self.pipe();
        if pipe.flush_pending || pipe.queued >= STDIN_QUEUE {
            pipe.drain_now();
        }
        pipe.state.check()?;
        if pipe.flush_pending {
            return Ok(0);
        }
        // A compressor's burst (a frame it flushes) may queue past the
        // permit it was given: then there is no room until it drains.
        Ok(STDIN_QUEUE.saturating_sub(pipe.queued))
    }
}

/// A sandbox's stdout, read from the calling task in chunks of up to
/// 1 MiB and handed out in whatever sizes the guest asks for. The
/// component's `input-stream` owns it; its execution keeps a
/// [`WeakStdout`] to switch it to decompressing.
pub struct ExecStdout(Arc<Mutex<StdoutPipe>>);

/// A handle that does not keep stdout open once the component dropped its
/// `input-stream`: dropping it must close the pipe, so that the sandbox's
/// writer fails instead of blocking.
pub struct WeakStdout(Weak<Mutex<StdoutPipe>>);

impl WeakStdout {
    pub fn upgrade(&self) -> Option<ExecStdout> {
        self.0.upgrade().map(ExecStdout)
    }
}

struct StdoutPipe {
    inner: Reader,
    buf: BytesMut,
    eof: bool,
    state: PipeState,
}

impl ExecStdout {
    pub fn new(inner: Reader) -> Self {
        ExecStdout(Arc::new(Mutex::new(StdoutPipe {
            inner,
            buf: BytesMut::new(),
            eof: false,
            state: PipeState::Open,
        })))
    }

    /// As [`ExecStdin::pipe`]: never left half-updated.
    fn pipe(&self) -> MutexGuard<'_, StdoutPipe> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn downgrade(&self) -> WeakStdout {
        WeakStdout(Arc::downgrade(&self.0))
    }

    /// Decodes everything not yet handed to the reader (what is buffered
    /// first) with `codec`; see [`codec::decoder`].
    pub fn decompress(&self, codec: Codec, max_wire: u64, meter: Arc<CodecMeter>) {
        let mut pipe = self.pipe();
        let raw = std::mem::replace(&mut pipe.inner, Box::new(tokio::io::empty()));
        let prefix = pipe.buf.split().freeze();
        pipe.inner = codec::decoder(codec, prefix, raw, max_wire, meter);
    }
}

impl StdoutPipe {
    /// Reads once into the buffer. Ready means data, EOF or an error.
    fn poll_fill(&mut self, cx: &mut Context<'_>, want: usize) -> Poll<()> {
        if !self.buf.is_empty() || self.eof || !matches!(self.state, PipeState::Open) {
            return Poll::Ready(());
        }
        self.buf.reserve(want.clamp(1, CHUNK));
        match tokio_util::io::poll_read_buf(Pin::new(&mut *self.inner), cx, &mut self.buf) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(0)) => {
                self.eof = true;
                Poll::Ready(())
            }
            Poll::Ready(Ok(_)) => Poll::Ready(()),
            Poll::Ready(Err(e)) => {
                self.state = PipeState::Failed(Some(e));
                Poll::Ready(())
            }
        }
    }
}

#[async_trait::async_trait]
impl Pollable for ExecStdout {
    async fn ready(&mut self) {
        poll_fn(|cx| self.pipe().poll_fill(cx, CHUNK)).await
    }
}

impl InputStream for ExecStdout {
    fn read(&mut self, size: usize) -> StreamResult<Bytes> {
        let mut pipe = self.pipe();
        if pipe.buf.is_empty() && !pipe.eof {
            let _ = pipe.poll_fill(&mut Context::from_waker(Waker::noop()), size.max(64 << 10));
        }
        if !pipe.buf.is_empty() {
            let n = size.min(pipe.buf.len());
            return Ok(pipe.buf.split_to(n).freeze());
        }
        pipe.state.check()?;
        if pipe.eof {
            return Err(StreamError::Closed);
        }
        Ok(Bytes::new())
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use tokio::io::AsyncReadExt;
    use tokio::net::unix::pipe;

    use super::*;
    use crate::exec::local::PipeStdin;

    fn pipe_stdin() -> (ExecStdin, pipe::Receiver) {
        let (tx, rx) = pipe::pipe().unwrap();
        (ExecStdin::new(Box::new(PipeStdin::from_sender(tx))), rx)
    }

    fn random_file(len: usize) -> (tempfile::NamedTempFile, Vec<u8>) {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let data: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&data).unwrap();
        // `send_file` reads from the file's offset, as from a fresh open.
        std::io::Seek::rewind(&mut f).unwrap();
        (f, data)
    }

    async fn read_all(mut rx: impl tokio::io::AsyncRead + Unpin) -> Vec<u8> {
        let mut out = Vec::new();
        rx.read_to_end(&mut out).await.unwrap();
        out
    }

    /// Flushes everything queued so far and closes the pipe.
    async fn finish(stdin: ExecStdin) {
        let mut out = stdin;
        out.flush().unwrap();
        out.ready().await;
    }

    #[tokio::test]
    async fn small_writes_wait_for_flush_and_leave_in_order() {
        let (mut stdin, rx) = pipe_stdin();
        for chunk in [&b"header"[..], b"", b"-body-", b"padding"] {
            assert!(stdin.check_write().unwrap() >= chunk.len());
            stdin.write(Bytes::copy_from_slice(chunk)).unwrap();
        }
        let mut probe = [0u8; 64];
        assert_eq!(
            rx.try_read(&mut probe).unwrap_err().kind(),
            io::ErrorKind::WouldBlock,
            "small writes must be queued until a flush"
        );
        stdin.flush().unwrap();
        stdin.ready().await;
        assert_eq!(stdin.check_write().unwrap(), STDIN_QUEUE);
        drop(stdin);
        assert_eq!(read_all(rx).await, b"header-body-padding");
    }

    #[tokio::test]
    async fn a_full_queue_asks_the_writer_to_wait() {
        let (mut stdin, rx) = pipe_stdin();
        let reader = tokio::spawn(read_all(rx));
        let mut sent = 0usize;
        let mut expected = Vec::new();
        while sent < 8 * STDIN_QUEUE {
            let permit = stdin.check_write().unwrap();
            if permit == 0 {
                stdin.ready().await;
                continue;
            }
            let n = permit.min(100_000);
            let chunk = vec![(sent % 251) as u8; n];
            expected.extend_from_slice(&chunk);
            stdin.write(Bytes::from(chunk)).unwrap();
            sent += n;
        }
        let permit = stdin.check_write().unwrap();
        assert!(
            stdin.write(Bytes::from(vec![0; permit + 1])).is_err(),
            "writing past the permit is refused"
        );
        finish(stdin).await;
        assert!(reader.await.unwrap() == expected);
    }

    #[tokio::test]
    async fn large_files_arrive_exactly_after_queued_bytes() {
        let (stdin, rx) = pipe_stdin();
        let reader = tokio::spawn(read_all(rx));
        let (file, data) = random_file(3 * CHUNK + 12_345);
        stdin
            .write_all(Bytes::from_static(b"prefix"))
            .await
            .unwrap();
        let moved = stdin
            .send_file(file.as_file(), data.len() as u64)
            .await
            .unwrap();
        assert_eq!(moved, data.len() as u64);
        stdin
            .write_all(Bytes::from_static(b"suffix"))
            .await
            .unwrap();
        finish(stdin).await;
        let got = reader.await.unwrap();
        assert_eq!(&got[..6], b"prefix");
        assert!(got[6..6 + data.len()] == data[..], "file bytes differ");
        assert_eq!(&got[6 + data.len()..], b"suffix");
    }

    #[tokio::test]
    async fn a_short_file_reports_how_much_it_had() {
        // Below and above the splice threshold.
        for len in [1000, 200 << 10] {
            let (stdin, rx) = pipe_stdin();
            let reader = tokio::spawn(read_all(rx));
            let (file, data) = random_file(len);
            let moved = stdin
                .send_file(file.as_file(), len as u64 + 4096)
                .await
                .unwrap();
            assert_eq!(moved, len as u64);
            finish(stdin).await;
            assert!(reader.await.unwrap() == data);
        }
    }

    #[tokio::test]
    async fn a_stdin_that_cannot_splice_gets_copies() {
        let (tx, rx) = tokio::io::duplex(64 << 10);
        let stdin = ExecStdin::new(Box::new(tx));
        let reader = tokio::spawn(read_all(rx));
        let (file, data) = random_file(2 * CHUNK + 7);
        let moved = stdin
            .send_file(file.as_file(), data.len() as u64)
            .await
            .unwrap();
        assert_eq!(moved, data.len() as u64);
        finish(stdin).await;
        assert!(reader.await.unwrap() == data);
    }

    #[tokio::test]
    async fn a_closed_pipe_fails_loud() {
        // Spliced: the send itself fails.
        let (stdin, rx) = pipe_stdin();
        drop(rx);
        let (file, _) = random_file(1 << 20);
        assert!(matches!(
            stdin.send_file(file.as_file(), 1 << 20).await,
            Err(PipeError::Stdin(_))
        ));
        // Queued: the flush finds the pipe closed.
        let (stdin, rx) = pipe_stdin();
        drop(rx);
        let (file, _) = random_file(4096);
        assert_eq!(stdin.send_file(file.as_file(), 4096).await.unwrap(), 4096);
        let mut out = stdin;
        let _ = out.flush();
        out.ready().await;
        assert!(matches!(out.check_write(), Err(StreamError::Closed)));
    }

    #[tokio::test]
    async fn stdout_serves_small_reads_from_one_read_then_closes() {
        let (mut tx, rx) = tokio::io::duplex(1 << 20);
        let payload: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
        tokio::io::AsyncWriteExt::write_all(&mut tx, &payload)
            .await
            .unwrap();
        drop(tx);
        let mut stdout = ExecStdout::new(Box::new(rx));
        let mut got = Vec::new();
        loop {
            stdout.ready().await;
            match stdout.read(512) {
                Ok(b) => {
                    assert!(b.len() <= 512);
                    got.extend_from_slice(&b);
                }
                Err(StreamError::Closed) => break,
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(got, payload);
    }
}
