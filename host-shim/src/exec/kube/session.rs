//! One exec session: our own loop over the WebSocket that kube opens.
//!
//! kube-rs's `AttachedProcess` reads stdin in 4 KiB pieces and sends each
//! as a frame, flushed on its own, and stops reading the socket while it
//! sends; a bulk transfer through it ran at 3.5x the time of a local pipe.
//! The loop here takes stdin frames as the caller cut them
//! ([`MAX_STDIN_FRAME`](super::streams::MAX_STDIN_FRAME)), sends whatever
//! is queued before flushing once, and reads the socket while it writes.
//!
//! It also owns the exec's contract: the deadline holds whatever the
//! sandbox or the API server do, stderr is kept under a cap (past it the
//! exec is aborted and marked truncated), and the exit code comes from the
//! status frame on channel 3. When it ends, for any reason, the socket is
//! dropped (the TCP connection closes), the caller's stdout reaches EOF
//! after what was already received, and its stdin writes fail.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Sink, SinkExt, Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{self as ws, Message};
use tokio_tungstenite::WebSocketStream;

use super::error::wait_error;
use super::protocol::{
    CLOSE_CHANNEL, STATUS_CHANNEL, STDERR_CHANNEL, STDIN_CHANNEL, STDOUT_CHANNEL,
};
use super::status::exit_code_of;
use super::streams::{KubeStdin, KubeStdout};
use super::KubeError;
use crate::exec::{BoxFuture, Control, ExecError, ExitInfo};

/// Frames queued each way between the caller and the socket. With stdin
/// frames of 256 KiB this keeps about 1 MiB in flight, enough to cover a
/// socket write while the caller prepares the next batch.
const QUEUE: usize = 4;

/// Largest frame accepted from the server. API servers forward the
/// container's output in reads of 32 KiB; the cap bounds what a broken or
/// hostile server can make us hold (`QUEUE` frames of stdout).
const MAX_INBOUND_FRAME: usize = 4 << 20;

/// Idle connections are pinged, as kubectl and kube-rs do, so proxies and
/// load balancers in between do not cut a long quiet exec.
const PING_EVERY: Duration = Duration::from_secs(60);

/// The caller's ends of a started session.
pub(super) struct Started {
    pub(super) stdin: KubeStdin,
    pub(super) stdout: KubeStdout,
    pub(super) control: KubeControl,
}

/// Starts the session on an upgraded exec connection (`v5` when the server
/// chose `v5.channel.k8s.io`).
pub(super) fn start<S>(io: S, v5: bool, max_stderr: u64, deadline: Instant) -> Started
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (stdin_tx, stdin_rx) = mpsc::channel(QUEUE);
    let (stdout_tx, stdout_rx) = mpsc::channel(QUEUE);
    let abort = Arc::new(Notify::new());
    let config = WebSocketConfig::default()
        .max_frame_size(Some(MAX_INBOUND_FRAME))
        .max_message_size(Some(MAX_INBOUND_FRAME));
    let task = tokio::spawn({
        let abort = Arc::clone(&abort);
        async move {
            let ws = WebSocketStream::from_raw_socket(io, Role::Client, Some(config)).await;
            run(ws, v5, stdin_rx, stdout_tx, max_stderr, deadline, &abort).await
        }
    });
    Started {
        stdin: KubeStdin::new(stdin_tx),
        stdout: KubeStdout::new(stdout_rx),
        control: KubeControl {
            abort,
            task: Some(task),
            outcome: None,
        },
    }
}

/// Why the session stopped.
enum Ending {
    Read(ReadEnd),
    Aborted,
    TimedOut,
}

/// Why reading the socket stopped.
enum ReadEnd {
    Status(Box<Status>),
    StderrOverflow,
    /// A close frame or the end of the stream, before any status frame.
    Closed,
    Failed(ws::Error),
    BadStatus(serde_json::Error),
}

async fn run<S>(
    ws: WebSocketStream<S>,
    v5: bool,
    stdin: mpsc::Receiver<Bytes>,
    stdout: mpsc::Sender<Bytes>,
    max_stderr: u64,
    deadline: Instant,
    abort: &Notify,
) -> Result<ExitInfo, KubeError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (sink, source) = ws.split();
    let mut stderr = Captured::new(max_stderr);
    let ending = {
        let reader = read_output(source, stdout, &mut stderr);
        let writer = write_stdin(sink, stdin, v5);
        tokio::pin!(reader, writer);
        let mut writing = true;
        loop {
            tokio::select! {
                biased;
                () = abort.notified() => break Ending::Aborted,
                () = tokio::time::sleep_until(deadline) => break Ending::TimedOut,
                end = &mut reader => break Ending::Read(end),
                Err(e) = &mut writer, if writing => {
                    // Its stdin queue is gone, so the caller's writes fail
                    // now; the status frame may still be on its way.
                    tracing::debug!(error = %e, "kube exec stdin failed");
                    writing = false;
                }
            }
        }
        // Leaving this block drops both halves: the connection closes.
    };
    let (exit_code, timed_out) = match ending {
        Ending::Read(ReadEnd::Status(status)) => (Some(exit_code_of(&status)?), false),
        Ending::Read(ReadEnd::StderrOverflow) => {
            tracing::debug!("kube exec stderr past the cap; aborting");
            (None, false)
        }
        Ending::Read(ReadEnd::Closed) => return Err(KubeError::NoStatus),
        Ending::Read(ReadEnd::Failed(e)) => return Err(KubeError::ConnectionLost(Box::new(e))),
        Ending::Read(ReadEnd::BadStatus(e)) => return Err(KubeError::BadStatus(e)),
        Ending::Aborted => (None, false),
        Ending::TimedOut => {
            tracing::debug!("kube exec past its deadline; aborting");
            (None, true)
        }
    };
    Ok(ExitInfo {
        exit_code,
        timed_out,
        stderr_truncated: stderr.overflowed,
        stderr: stderr.kept,
    })
}

/// Stderr kept under a cap.
struct Captured {
    kept: Vec<u8>,
    cap: usize,
    overflowed: bool,
}

impl Captured {
    fn new(cap: u64) -> Self {
        Captured {
            kept: Vec::new(),
            cap: usize::try_from(cap).unwrap_or(usize::MAX),
            overflowed: false,
        }
    }

    /// Keeps what fits; false once the cap is passed.
    fn push(&mut self, bytes: &[u8]) -> bool {
        let room = self.cap.saturating_sub(self.kept.len());
        self.kept.extend_from_slice(&bytes[..bytes.len().min(room)]);
        self.overflowed = bytes.len() > room;
        !self.overflowed
    }
}

/// Reads frames until the status frame (or a failure): stdout goes to the
/// caller's queue (waiting for room, which pushes back on the server over
/// TCP; discarded once the caller dropped its reader), stderr is kept.
async fn read_output(
    mut source: impl Stream<Item = Result<Message, ws::Error>> + Unpin,
    stdout: mpsc::Sender<Bytes>,
    stderr: &mut Captured,
) -> ReadEnd {
    let mut stdout = Some(stdout);
    while let Some(message) = source.next().await {
        let data = match message {
            Ok(Message::Binary(data)) => data,
            Ok(Message::Close(frame)) => {
                tracing::debug!(?frame, "API server closed the exec stream");
                return ReadEnd::Closed;
            }
            // tungstenite answers pings; text frames belong to the base64
            // subprotocols, which we never offer.
            Ok(_) => continue,
            Err(e) => return ReadEnd::Failed(e),
        };
        let Some(&channel) = data.first() else {
            continue;
        };
        let payload = data.slice(1..);
        match channel {
            // Servers open each channel with an empty frame.
            _ if payload.is_empty() => {}
            STDOUT_CHANNEL => {
                if let Some(tx) = &stdout {
                    if tx.send(payload).await.is_err() {
                        tracing::trace!("stdout reader gone; discarding stdout");
                        stdout = None;
                    }
                }
            }
            STDERR_CHANNEL => {
                if !stderr.push(&payload) {
                    return ReadEnd::StderrOverflow;
                }
            }
            STATUS_CHANNEL => {
                return match serde_json::from_slice::<Status>(&payload) {
                    Ok(status) => ReadEnd::Status(Box::new(status)),
                    Err(e) => ReadEnd::BadStatus(e),
                }
            }
            CLOSE_CHANNEL if payload.first() == Some(&STDOUT_CHANNEL) => {
                // EOF for the caller once it has read what came before.
                stdout = None;
            }
            other => tracing::trace!(channel = other, "ignoring a frame"),
        }
    }
    ReadEnd::Closed
}

/// Sends the caller's stdin frames, everything queued before one flush;
/// when the caller ends stdin, a v5 CLOSE of channel 0. Pings an idle
/// connection. Only returns when the socket fails.
async fn write_stdin(
    mut sink: impl Sink<Message, Error = ws::Error> + Unpin,
    mut stdin: mpsc::Receiver<Bytes>,
    v5: bool,
) -> Result<Infallible, ws::Error> {
    let mut open = true;
    let mut ping = tokio::time::interval_at(Instant::now() + PING_EVERY, PING_EVERY);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            frame = stdin.recv(), if open => match frame {
                Some(frame) => {
                    sink.feed(Message::Binary(frame)).await?;
                    while let Ok(frame) = stdin.try_recv() {
                        sink.feed(Message::Binary(frame)).await?;
                    }
                    sink.flush().await?;
                    ping.reset();
                }
                None => {
                    open = false;
                    if v5 {
                        let close = Bytes::from_static(&[CLOSE_CHANNEL, STDIN_CHANNEL]);
                        sink.send(Message::Binary(close)).await?;
                    }
                }
            },
            _ = ping.tick() => sink.send(Message::Ping(Bytes::new())).await?,
        }
    }
}

/// The shim's handle on the session: waits for it, or aborts it.
pub(super) struct KubeControl {
    abort: Arc<Notify>,
    task: Option<JoinHandle<Result<ExitInfo, KubeError>>>,
    /// What the session returned, for repeated `wait`s.
    outcome: Option<Result<ExitInfo, String>>,
}

impl Control for KubeControl {
    fn wait(&mut self) -> BoxFuture<'_, Result<ExitInfo, ExecError>> {
        Box::pin(async move {
            if let Some(task) = self.task.as_mut() {
                // Awaiting `&mut` keeps this cancel-safe.
                let result = match task.await {
                    Ok(result) => result,
                    Err(e) => Err(KubeError::Supervisor(e.to_string())),
                };
                self.task = None;
                self.outcome = Some(match &result {
                    Ok(info) => Ok(info.clone()),
                    Err(e) => Err(e.to_string()),
                });
                return result.map_err(wait_error);
            }
            match &self.outcome {
                Some(Ok(info)) => Ok(info.clone()),
                Some(Err(message)) => Err(wait_error(KubeError::Earlier(message.clone()))),
                None => Err(wait_error(KubeError::Supervisor("no session".into()))),
            }
        })
    }

    fn abort(&mut self) {
        self.abort.notify_one();
    }
}

impl Drop for KubeControl {
    fn drop(&mut self) {
        // Nobody will wait: end the session (and close the connection) now.
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
