//! `wasi:io` streams over regular host files.
//!
//! Regular files never block for long, so these read and write synchronously
//! in the non-blocking calls and are always ready: no task per file, no
//! channel hop, one copy per chunk.

use std::io::{Read, Write};

use bytes::Bytes;
use wasmtime_wasi::p2::{InputStream, OutputStream, Pollable, StreamError, StreamResult};

/// Largest chunk handed over per call.
const CHUNK: usize = 1 << 20;

/// Reads a host file.
pub struct FileInputStream {
    file: std::fs::File,
    eof: bool,
}

impl FileInputStream {
    pub fn new(file: std::fs::File) -> Self {
        FileInputStream { file, eof: false }
    }
}

#[async_trait::async_trait]
impl Pollable for FileInputStream {
    async fn ready(&mut self) {}
}

impl InputStream for FileInputStream {
    fn read(&mut self, size: usize) -> StreamResult<Bytes> {
        if self.eof {
            return Err(StreamError::Closed);
        }
        let mut buf = vec![0u8; size.min(CHUNK)];
        match self.file.read(&mut buf) {
            Ok(0) if !buf.is_empty() => {
                self.eof = true;
                Err(StreamError::Closed)
            }
            Ok(n) => {
                buf.truncate(n);
                Ok(Bytes::from(buf))
            }
            Err(e) => Err(StreamError::LastOperationFailed(
                wasmtime::Error::from(e).context("read"),
            )),
        }
    }
}

/// Writes a host file created by `host-fs.create-exclusive`.
pub struct FileOutputStream {
    file: std::fs::File,
}

impl FileOutputStream {
    pub fn new(file: std::fs::File) -> Self {
        FileOutputStream { file }
    }
}

#[async_trait::async_trait]
impl Pollable for FileOutputStream {
    async fn ready(&mut self) {}
}

impl OutputStream for FileOutputStream {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.file.write_all(&bytes).map_err(|e| {
            StreamError::LastOperationFailed(wasmtime::Error::from(e).context("write"))
        })
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(CHUNK)
    }
}

/// Bytes the component may queue on a sandbox's stdin before it must wait.
const STDIN_QUEUE: usize = 1 << 20;
/// Queued bytes at which a write drains to the pipe without waiting for a
/// flush: big enough that many small tar members share one `writev`.
const STDIN_DRAIN_AT: usize = 256 << 10;
/// Most buffers handed to one `writev`.
const MAX_IOVECS: usize = 64;
/// Largest read from a sandbox's stdout.
const STDOUT_CHUNK: usize = 1 << 20;

/// A sandbox's stdin as a `wasi:io` output stream, written in place.
///
/// The default adapter (`AsyncWriteStream`) hands every write to a worker
/// task and writes it alone, so a tar member of 4 KiB costs a task hop, a
/// futex wake and a pipe write that wakes the sandbox's reader. This one
/// queues writes (without copying them) and writes the queue with
/// `writev` from the calling task: when 256 KiB are queued, when the guest
/// flushes, or when it waits for room. Bytes queued below that mark leave
/// only on `flush`, which `wasi:io` requires before a caller relies on them
/// having been written.
pub struct ExecStdin {
    inner: Box<dyn tokio::io::AsyncWrite + Send + Unpin>,
    queue: std::collections::VecDeque<Bytes>,
    queued: usize,
    flush_pending: bool,
    state: PipeState,
}

/// Whether a pipe still works.
enum PipeState {
    Open,
    /// Failed; the error is reported once, then the stream is closed.
    Failed(Option<std::io::Error>),
}

impl PipeState {
    fn check(&mut self) -> StreamResult<()> {
        match self {
            PipeState::Open => Ok(()),
            PipeState::Failed(e) => match e.take() {
                Some(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(
                    StreamError::LastOperationFailed(wasmtime::Error::from(e).context("pipe")),
                ),
                _ => Err(StreamError::Closed),
            },
        }
    }
}

impl ExecStdin {
    pub fn new(inner: Box<dyn tokio::io::AsyncWrite + Send + Unpin>) -> Self {
        ExecStdin {
            inner,
            queue: std::collections::VecDeque::new(),
            queued: 0,
            flush_pending: false,
            state: PipeState::Open,
        }
    }

    fn fail(&mut self, e: std::io::Error) {
        self.queue.clear();
        self.queued = 0;
        self.flush_pending = false;
        self.state = PipeState::Failed(Some(e));
    }

    /// Writes the queue (and flushes when asked) until it is empty or the
    /// pipe is full. Ready means nothing is left to do or the pipe failed.
    fn poll_drain(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        use std::pin::Pin;
        use std::task::Poll;
        if !matches!(self.state, PipeState::Open) {
            return Poll::Ready(());
        }
        while !self.queue.is_empty() {
            let slices: Vec<std::io::IoSlice<'_>> = self
                .queue
                .iter()
                .take(MAX_IOVECS)
                .map(|b| std::io::IoSlice::new(b))
                .collect();
            match Pin::new(&mut *self.inner).poll_write_vectored(cx, &slices) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(0)) => {
                    self.fail(std::io::ErrorKind::WriteZero.into());
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
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let _ = self.poll_drain(&mut cx);
    }
}

#[async_trait::async_trait]
impl Pollable for ExecStdin {
    async fn ready(&mut self) {
        std::future::poll_fn(|cx| {
            let drained = self.poll_drain(cx).is_ready();
            if drained || (!self.flush_pending && self.queued < STDIN_QUEUE) {
                std::task::Poll::Ready(())
            } else {
                std::task::Poll::Pending
            }
        })
        .await
    }
}

impl OutputStream for ExecStdin {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.state.check()?;
        if bytes.len() > STDIN_QUEUE - self.queued {
            return Err(StreamError::trap("write exceeded the check-write permit"));
        }
        if bytes.is_empty() {
            return Ok(());
        }
        self.queued += bytes.len();
        self.queue.push_back(bytes);
        if self.queued >= STDIN_DRAIN_AT {
            self.drain_now();
        }
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        self.state.check()?;
        self.flush_pending = true;
        self.drain_now();
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        if self.flush_pending || self.queued >= STDIN_QUEUE {
            self.drain_now();
        }
        self.state.check()?;
        if self.flush_pending {
            return Ok(0);
        }
        Ok(STDIN_QUEUE - self.queued)
    }
}

/// A sandbox's stdout as a `wasi:io` input stream, read in place.
///
/// Reads go straight to the pipe from the calling task in chunks of up to
/// 1 MiB and are handed out in whatever sizes the guest asks for (512-byte
/// tar headers come out of one read), instead of through a reader task
/// and a channel of 64 KiB buffers.
pub struct ExecStdout {
    inner: Box<dyn tokio::io::AsyncRead + Send + Unpin>,
    buf: bytes::BytesMut,
    eof: bool,
    state: PipeState,
}

impl ExecStdout {
    pub fn new(inner: Box<dyn tokio::io::AsyncRead + Send + Unpin>) -> Self {
        ExecStdout {
            inner,
            buf: bytes::BytesMut::new(),
            eof: false,
            state: PipeState::Open,
        }
    }

    /// Reads once into the buffer. Ready means data, EOF or an error.
    fn poll_fill(&mut self, cx: &mut std::task::Context<'_>, want: usize) -> std::task::Poll<()> {
        use std::task::Poll;
        if !self.buf.is_empty() || self.eof || !matches!(self.state, PipeState::Open) {
            return Poll::Ready(());
        }
        self.buf.reserve(want.clamp(1, STDOUT_CHUNK));
        match tokio_util::io::poll_read_buf(std::pin::Pin::new(&mut *self.inner), cx, &mut self.buf)
        {
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
        std::future::poll_fn(|cx| self.poll_fill(cx, STDOUT_CHUNK)).await
    }
}

impl InputStream for ExecStdout {
    fn read(&mut self, size: usize) -> StreamResult<Bytes> {
        if self.buf.is_empty() && !self.eof {
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            let _ = self.poll_fill(&mut cx, size.max(64 << 10));
        }
        if !self.buf.is_empty() {
            let n = size.min(self.buf.len());
            return Ok(self.buf.split_to(n).freeze());
        }
        self.state.check()?;
        if self.eof {
            return Err(StreamError::Closed);
        }
        Ok(Bytes::new())
    }
}
