//! A backend wrapper that counts bytes on the wire (stdin written, stdout
//! read) and execs started: for progress bars and telemetry.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::{BoxFuture, ExecBackend, ExecError, ExecRequest, Process, Toolbox};

/// Live counters of a [`Counting`] backend.
#[derive(Debug, Default)]
pub struct Counters {
    /// Bytes written to the sandbox's stdin.
    pub sent: AtomicU64,
    /// Bytes read from the sandbox's stdout.
    pub received: AtomicU64,
    /// Execs started.
    pub execs: AtomicU64,
}

/// Wraps a backend and counts what crosses it.
pub struct Counting {
    inner: Arc<dyn ExecBackend>,
    counters: Arc<Counters>,
}

impl Counting {
    /// Counts through `inner`; read the numbers from [`Counting::counters`].
    pub fn new(inner: Arc<dyn ExecBackend>) -> Self {
        Counting {
            inner,
            counters: Arc::default(),
        }
    }

    /// The shared counters.
    pub fn counters(&self) -> Arc<Counters> {
        Arc::clone(&self.counters)
    }
}

struct CountWrite<W> {
    inner: W,
    n: Arc<Counters>,
}

impl<W: AsyncWrite + Unpin> AsyncWrite for CountWrite<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = r {
            self.n.sent.fetch_add(n as u64, Ordering::Relaxed);
        }
        r
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = r {
            self.n.sent.fetch_add(n as u64, Ordering::Relaxed);
        }
        r
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl<W: super::SandboxStdin> super::SandboxStdin for CountWrite<W> {
    fn poll_splice_from(
        &mut self,
        cx: &mut Context<'_>,
        file: &std::fs::File,
        len: usize,
    ) -> Poll<std::io::Result<Option<usize>>> {
        let r = self.inner.poll_splice_from(cx, file, len);
        if let Poll::Ready(Ok(Some(n))) = r {
            self.n.sent.fetch_add(n as u64, Ordering::Relaxed);
        }
        r
    }
}

struct CountRead<R> {
    inner: R,
    n: Arc<Counters>,
}

impl<R: AsyncRead + Unpin> AsyncRead for CountRead<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = r {
            self.n
                .received
                .fetch_add((buf.filled().len() - before) as u64, Ordering::Relaxed);
        }
        r
    }
}

impl Counting {
    /// `p` with its streams counted.
    fn count(&self, p: Process) -> Process {
        Process {
            stdin: Box::new(CountWrite {
                inner: p.stdin,
                n: Arc::clone(&self.counters),
            }),
            stdout: Box::new(CountRead {
                inner: p.stdout,
                n: Arc::clone(&self.counters),
            }),
            control: p.control,
            stdin_ends: p.stdin_ends,
        }
    }

    /// The inner toolbox (present whenever this one is handed out).
    fn inner_toolbox(&self) -> Result<&dyn Toolbox, ExecError> {
        self.inner
            .toolbox()
            .ok_or_else(|| ExecError::Unsupported("no toolbox".into()))
    }
}

impl ExecBackend for Counting {
    fn start(&self, req: ExecRequest) -> BoxFuture<'_, Result<Process, ExecError>> {
        Box::pin(async move {
            let p = self.inner.start(req).await?;
            self.counters.execs.fetch_add(1, Ordering::Relaxed);
            Ok(self.count(p))
        })
    }

    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn is_local(&self) -> bool {
        self.inner.is_local()
    }

    fn toolbox(&self) -> Option<&dyn Toolbox> {
        self.inner.toolbox().map(|_| self as &dyn Toolbox)
    }
}

/// A toolbox's uploads and downloads are its bulk bytes: counted the same.
impl Toolbox for Counting {
    fn upload(&self, path: String, timeout: Duration) -> Result<Process, ExecError> {
        Ok(self.count(self.inner_toolbox()?.upload(path, timeout)?))
    }

    fn run(&self, command: String, timeout: Duration) -> Result<Process, ExecError> {
        self.counters.execs.fetch_add(1, Ordering::Relaxed);
        Ok(self.count(self.inner_toolbox()?.run(command, timeout)?))
    }

    fn download(
        &self,
        path: String,
        then_remove: bool,
        timeout: Duration,
    ) -> Result<Process, ExecError> {
        Ok(self.count(self.inner_toolbox()?.download(path, then_remove, timeout)?))
    }

    fn remove(&self, path: String, timeout: Duration) -> Result<Process, ExecError> {
        self.inner_toolbox()?.remove(path, timeout)
    }
}
