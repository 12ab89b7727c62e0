//! The four tasks that move bytes during an exec: one writes queued frames
//! to the socket, one reads client frames into the process's stdin queue,
//! one feeds that queue into the process, and one per output pipe turns
//! the process's stdout/stderr into frames. They are joined by bounded
//! queues, so a slow side pushes back instead of buffering.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::ChildStdin;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::{Bytes, Message};

use super::faults::{Faults, Pacer};
use super::protocol::{frame, Protocol, CLOSE_CHANNEL, RESIZE_CHANNEL, STDIN_CHANNEL};
use super::upgrade::{WsSink, WsSource};

/// Bytes read from the child's stdout/stderr per frame.
const OUTPUT_CHUNK: usize = 32 * 1024;

/// Sends queued frames in order; returns the sink once every sender is
/// gone (`None` if the socket failed).
pub(super) async fn write_frames(
    mut sink: WsSink,
    mut frames: mpsc::Receiver<Message>,
) -> Option<WsSink> {
    while let Some(message) = frames.recv().await {
        if let Err(e) = sink.send(message).await {
            tracing::debug!(error = %e, "websocket write failed");
            return None;
        }
    }
    Some(sink)
}

/// How the client side of the socket ended.
#[derive(Debug)]
pub(super) enum ReaderEnd {
    /// The client sent a close frame (on v4 also its way to say stdin EOF;
    /// nothing can be sent back after it).
    Closed,
    /// The connection failed or ended without a close frame.
    Disconnected,
}

/// Reads client frames: stdin goes to `stdin` (awaiting room, which is the
/// backpressure), a v5 CLOSE of channel 0 ends stdin. Stdin payload bytes
/// are added to `received`.
pub(super) async fn read_frames(
    mut source: WsSource,
    protocol: Protocol,
    stdin: mpsc::Sender<Bytes>,
    received: Arc<AtomicU64>,
) -> ReaderEnd {
    let mut stdin = Some(stdin);
    while let Some(message) = source.next().await {
        let data = match message {
            Ok(Message::Binary(data)) => data,
            Ok(Message::Close(frame)) => {
                tracing::debug!(?frame, "client closed the websocket");
                return ReaderEnd::Closed;
            }
            // Pings are answered by tungstenite; nothing else is expected.
            Ok(_) => continue,
            Err(e) => {
                tracing::debug!(error = %e, "websocket read failed");
                return ReaderEnd::Disconnected;
            }
        };
        match data.first().copied() {
            Some(STDIN_CHANNEL) if data.len() > 1 => {
                received.fetch_add(data.len() as u64 - 1, Ordering::Relaxed);
                if let Some(tx) = &stdin {
                    if tx.send(data.slice(1..)).await.is_err() {
                        tracing::debug!("process stdin is closed; discarding stdin");
                        stdin = None;
                    }
                }
            }
            Some(CLOSE_CHANNEL) if protocol == Protocol::V5 => {
                if data.get(1) == Some(&STDIN_CHANNEL) {
                    tracing::debug!("client closed stdin");
                    stdin = None;
                }
            }
            Some(STDIN_CHANNEL | RESIZE_CHANNEL) | None => {}
            Some(other) => tracing::debug!(channel = other, "ignoring a frame"),
        }
    }
    ReaderEnd::Disconnected
}

/// Writes stdin frames into the process, honouring the stall and throttle
/// faults; closing (dropping) the process's stdin when the channel ends.
pub(super) async fn feed_stdin(
    mut stdin: ChildStdin,
    mut frames: mpsc::Receiver<Bytes>,
    faults: Faults,
) {
    let mut pacer = match faults.stdin_bytes_per_sec {
        Some(0) => {
            tracing::debug!("fault: stdin rate 0; stalling stdin");
            std::future::pending::<()>().await;
            return;
        }
        Some(rate) => Some(Pacer::new(rate)),
        None => None,
    };
    let mut fed: u64 = 0;
    while let Some(data) = frames.recv().await {
        let mut rest: &[u8] = &data;
        while !rest.is_empty() {
            let mut n = rest.len();
            if let Some(limit) = faults.stall_stdin_after {
                if fed >= limit {
                    tracing::debug!(fed, "fault: stalling stdin");
                    // Holding `frames` keeps the queue full: the reader
                    // stops reading and TCP pushes back on the client.
                    std::future::pending::<()>().await;
                }
                n = n.min(usize::try_from(limit - fed).unwrap_or(usize::MAX));
            }
            if let Some(pacer) = &pacer {
                n = n.min(pacer.piece());
            }
            if let Err(e) = stdin.write_all(&rest[..n]).await {
                tracing::debug!(error = %e, "process stdin closed");
                return;
            }
            fed += n as u64;
            rest = &rest[n..];
            if let Some(pacer) = &mut pacer {
                pacer.sent(n).await;
            }
        }
    }
    tracing::trace!(fed, "stdin at EOF");
    // Dropping `stdin` closes the pipe: the process sees EOF.
}

/// How an output pump ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PumpEnd {
    Eof,
    /// The stdout budget of [`Faults::drop_after_stdout_bytes`] is spent.
    DropConnection,
}

/// How an output pump forwards: the faults that apply to its pipe, and
/// where it counts the bytes it sent.
#[derive(Default)]
pub(super) struct OutputFaults {
    /// [`Faults::drop_after_stdout_bytes`].
    pub(super) budget: Option<u64>,
    /// [`Faults::stdout_bytes_per_sec`].
    pub(super) bytes_per_sec: Option<u64>,
    /// Payload bytes forwarded, if counted.
    pub(super) sent: Option<Arc<AtomicU64>>,
}

/// Forwards a process pipe as frames on `channel`. When the socket is gone
/// it keeps reading (and discarding) so the process never blocks on it.
pub(super) async fn forward_output(
    mut pipe: impl AsyncRead + Unpin,
    channel: u8,
    frames: mpsc::Sender<Message>,
    faults: OutputFaults,
) -> PumpEnd {
    let OutputFaults {
        mut budget,
        bytes_per_sec,
        sent,
    } = faults;
    let mut pacer = match bytes_per_sec {
        Some(0) => {
            tracing::debug!(channel, "fault: output rate 0; stalling the pipe");
            std::future::pending::<()>().await;
            return PumpEnd::Eof;
        }
        Some(rate) => Some(Pacer::new(rate)),
        None => None,
    };
    // Paced reads stay within one piece, so a frame never bursts.
    let chunk = pacer
        .as_ref()
        .map_or(OUTPUT_CHUNK, |p| p.piece().min(OUTPUT_CHUNK));
    let mut buf = vec![0u8; chunk];
    let mut open = true;
    loop {
        let n = match pipe.read(&mut buf).await {
            Ok(0) => return PumpEnd::Eof,
            Ok(n) => n,
            Err(e) => {
                tracing::debug!(channel, error = %e, "process output failed");
                return PumpEnd::Eof;
            }
        };
        if !open {
            continue;
        }
        let mut send = n;
        let mut spent = false;
        if let Some(left) = budget.as_mut() {
            let allowed = usize::try_from(*left).unwrap_or(usize::MAX);
            if n >= allowed {
                send = allowed;
                spent = true;
            }
            *left -= send as u64;
        }
        let delivered = send > 0
            && frames
                .send(Message::binary(frame(channel, &buf[..send])))
                .await
                .is_ok();
        open = delivered || send == 0;
        if let (true, Some(sent)) = (delivered, &sent) {
            sent.fetch_add(send as u64, Ordering::Relaxed);
        }
        if spent {
            return PumpEnd::DropConnection;
        }
        if let (true, Some(pacer)) = (delivered, &mut pacer) {
            pacer.sent(send).await;
        }
    }
}
