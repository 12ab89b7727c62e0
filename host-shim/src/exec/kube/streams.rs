//! The caller's stdin and stdout over kube-rs's pipes.
//!
//! kube-rs (5.0) forwards stdout and stderr into its pipes with
//! `write_all`, so a pipe nobody drains stalls its whole message loop
//! (pings, stdin, the status frame); on an error the loop returns without
//! shutting the pipes down; and dropping a pipe half signals nothing (only
//! `shutdown()` sends CLOSE on v5 or closes the socket on v4). The types
//! here work around all three.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use futures_util::task::AtomicWaker;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf, ReadHalf, SimplexStream, WriteHalf};
use tokio::sync::Notify;

/// Which caller-facing stream a waker belongs to.
#[derive(Debug, Clone, Copy)]
pub(super) enum Slot {
    Stdout,
    Stderr,
}

/// State shared by the streams, the supervisor and the control.
#[derive(Default)]
pub(super) struct Shared {
    /// The exec is over: stdin writes fail, reads end once the pipe is empty.
    pub(super) closed: AtomicBool,
    pub(super) stdin_waker: AtomicWaker,
    pub(super) stdout_waker: AtomicWaker,
    pub(super) stderr_waker: AtomicWaker,
    /// The caller's stdin pipe after the caller dropped its writer; kept
    /// until the status frame so the drop never reaches the pod.
    pub(super) parked_stdin: Mutex<Option<WriteHalf<SimplexStream>>>,
    /// `Control::abort` (or the control was dropped).
    pub(super) abort: Notify,
    /// Stderr went past the cap.
    pub(super) stderr_overflow: Notify,
}

impl Shared {
    pub(super) fn waker(&self, slot: Slot) -> &AtomicWaker {
        match slot {
            Slot::Stdout => &self.stdout_waker,
            Slot::Stderr => &self.stderr_waker,
        }
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Ends the caller-facing streams. kube-rs does not shut its pipes down
    /// when its loop fails or is aborted, and split simplex halves do not
    /// signal on drop, so without this a reader or a full-pipe writer would
    /// wait forever.
    pub(super) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.stdin_waker.wake();
        self.stdout_waker.wake();
        self.stderr_waker.wake();
        let parked = self
            .parked_stdin
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        drop(parked);
    }
}

/// A kube-rs output pipe that ends (EOF) once the exec is over and the
/// bytes already in the pipe have been read.
pub(super) struct GatedRead {
    pub(super) pipe: ReadHalf<SimplexStream>,
    pub(super) shared: Arc<Shared>,
    pub(super) slot: Slot,
}

impl GatedRead {
    pub(super) fn new(pipe: ReadHalf<SimplexStream>, shared: Arc<Shared>, slot: Slot) -> Self {
        GatedRead { pipe, shared, slot }
    }
}

impl AsyncRead for GatedRead {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // Register before polling so a `close` in between still wakes us.
        this.shared.waker(this.slot).register(cx.waker());
        match Pin::new(&mut this.pipe).poll_read(cx, buf) {
            Poll::Pending if this.shared.is_closed() => Poll::Ready(Ok(())),
            other => other,
        }
    }
}

/// The caller's stdout.
///
/// kube-rs's message loop blocks on a full stdout pipe, and then neither
/// forwards stdin nor reads the status frame. Our caller always drains
/// stdout (the shim reads ahead through `AsyncReadStream`); should it drop
/// the reader early, the rest is drained in the background until the exec
/// ends, so the loop never stalls.
pub(super) struct KubeStdout {
    pub(super) pipe: Option<GatedRead>,
}

impl AsyncRead for KubeStdout {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut().pipe.as_mut() {
            Some(pipe) => Pin::new(pipe).poll_read(cx, buf),
            None => Poll::Ready(Ok(())),
        }
    }
}

impl Drop for KubeStdout {
    fn drop(&mut self) {
        let Some(mut pipe) = self.pipe.take() else {
            return;
        };
        if pipe.shared.is_closed() {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            // Ends at EOF, i.e. at the latest when the exec is closed.
            Ok(rt) => {
                rt.spawn(async move {
                    let _ = tokio::io::copy(&mut pipe, &mut tokio::io::sink()).await;
                });
            }
            Err(_) => tracing::debug!("kube stdout dropped outside a runtime; not draining"),
        }
    }
}

/// The caller's stdin. Writes go to kube-rs's stdin pipe; `shutdown` only
/// flushes and drop parks the pipe, so stdin EOF never reaches the pod
/// before the status frame. Once the exec is over writes fail with
/// `BrokenPipe` (a blocked write is woken).
pub(super) struct KubeStdin {
    pub(super) pipe: Option<WriteHalf<SimplexStream>>,
    pub(super) shared: Arc<Shared>,
}

pub(super) fn broken_pipe() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "the sandbox process has ended")
}

impl AsyncWrite for KubeStdin {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.shared.is_closed() {
            return Poll::Ready(Err(broken_pipe()));
        }
        let Some(pipe) = this.pipe.as_mut() else {
            return Poll::Ready(Err(broken_pipe()));
        };
        this.shared.stdin_waker.register(cx.waker());
        match Pin::new(pipe).poll_write(cx, buf) {
            Poll::Pending if this.shared.is_closed() => Poll::Ready(Err(broken_pipe())),
            other => other,
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut().pipe.as_mut() {
            Some(pipe) => Pin::new(pipe).poll_flush(cx),
            None => Poll::Ready(Ok(())),
        }
    }

    /// Flushes only: see the type's docs.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        tracing::trace!("kube stdin shutdown deferred until the status frame");
        self.poll_flush(cx)
    }
}

impl crate::exec::SandboxStdin for KubeStdin {}

impl Drop for KubeStdin {
    fn drop(&mut self) {
        if let Some(pipe) = self.pipe.take() {
            if !self.shared.is_closed() {
                *self
                    .shared
                    .parked_stdin
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = Some(pipe);
            }
        }
    }
}
