//! The caller's stdin and stdout: bounded queues of frames between the
//! caller and the exec session (`session.rs`), which owns the WebSocket.
//!
//! Stdin is cut into frames here, as the caller writes, so that a frame
//! is one copy of the caller's buffers with the channel byte in front and
//! the session hands it to the socket as it is. Stdout frames arrive as
//! the socket delivered them and are read out without another queue.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{BufMut, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;
use tokio_util::sync::PollSender;

use super::protocol::STDIN_CHANNEL;

/// Largest stdin frame: the shim's write batch, so one batch is one
/// frame. kube-rs sends 4 KiB frames and kubectl 32 KiB; each frame costs
/// a header, a mask key and a wake-up on both ends, which at 4 KiB made
/// a bulk transfer 3.5x slower than a local pipe. API servers accept
/// frames of 32 MiB (golang.org/x/net/websocket's default).
pub(super) const MAX_STDIN_FRAME: usize = 256 * 1024;

fn broken_pipe() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "the sandbox process has ended")
}

/// The caller's stdin. Each write becomes one frame (at most
/// [`MAX_STDIN_FRAME`] of payload) on the session's queue; when the queue
/// is full, the write waits. Once the exec is over, writes fail with
/// `BrokenPipe`. `shutdown` or drop ends stdin, which the session passes
/// on as a v5 CLOSE of channel 0 (v4 has no way to say it).
pub(super) struct KubeStdin {
    frames: PollSender<Bytes>,
}

impl KubeStdin {
    pub(super) fn new(frames: mpsc::Sender<Bytes>) -> Self {
        KubeStdin {
            frames: PollSender::new(frames),
        }
    }
}

impl AsyncWrite for KubeStdin {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if total == 0 {
            return Poll::Ready(Ok(0));
        }
        let this = self.get_mut();
        ready!(this.frames.poll_reserve(cx)).map_err(|_| broken_pipe())?;
        let take = total.min(MAX_STDIN_FRAME);
        let mut frame = BytesMut::with_capacity(take + 1);
        frame.put_u8(STDIN_CHANNEL);
        for buf in bufs {
            let room = take + 1 - frame.len();
            if room == 0 {
                break;
            }
            frame.put_slice(&buf[..buf.len().min(room)]);
        }
        this.frames
            .send_item(frame.freeze())
            .map_err(|_| broken_pipe())?;
        Poll::Ready(Ok(take))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    /// A frame on the queue is the session's to send; nothing is held here.
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().frames.close();
        Poll::Ready(Ok(()))
    }
}

impl crate::exec::SandboxStdin for KubeStdin {}

/// The caller's stdout: the payloads of channel-1 frames, in order; EOF
/// once the session has ended and every frame was read. Dropping it makes
/// the session discard further stdout rather than stall on it.
pub(super) struct KubeStdout {
    frames: mpsc::Receiver<Bytes>,
    current: Bytes,
}

impl KubeStdout {
    pub(super) fn new(frames: mpsc::Receiver<Bytes>) -> Self {
        KubeStdout {
            frames,
            current: Bytes::new(),
        }
    }
}

impl AsyncRead for KubeStdout {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        while this.current.is_empty() {
            match ready!(this.frames.poll_recv(cx)) {
                Some(frame) => this.current = frame,
                None => return Poll::Ready(Ok(())),
            }
        }
        let n = this.current.len().min(buf.remaining());
        buf.put_slice(&this.current.split_to(n));
        Poll::Ready(Ok(()))
    }
}
