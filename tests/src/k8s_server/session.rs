//! One exec over an upgraded socket: start the process, wire its pipes to
//! the pumps, wait for it and its output, then end the session the way a
//! kubelet does (one status frame, then a close) or the way a fault asks.
//!
//! Where it matters for hangs and orphans this behaves as a kubelet does,
//! not as a test would like: the status waits until every holder of the
//! process's stdout and stderr has let go (a background child that keeps
//! them open keeps the exec open), and a client that goes away closes the
//! process's stdin but leaves it running (nothing kills a pod's process
//! when its exec stream ends). [`K8sExecServer::live_processes`] counts
//! the processes still running, so tests can tell.
//!
//! [`K8sExecServer::live_processes`]: super::K8sExecServer::live_processes

use std::io;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout};
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinHandle};
use tokio_tungstenite::tungstenite::{Bytes, Message};

use super::faults::Faults;
use super::protocol::{Protocol, STDERR_CHANNEL, STDOUT_CHANNEL};
use super::pumps::{
    feed_stdin, forward_output, read_frames, write_frames, OutputFaults, PumpEnd, ReaderEnd,
};
use super::status::{exit_code, status_frame, Outcome};
use super::upgrade::{Ws, WsSink};
use super::Shared;

/// Stdin frames queued between the socket and the child: the whole of our
/// stdin buffering, so a slow child pushes back on the client over TCP.
const STDIN_QUEUE: usize = 4;
/// Frames queued for the socket.
const OUT_QUEUE: usize = 16;
/// How long to flush queued frames before cutting a connection.
const FLUSH_GRACE: Duration = Duration::from_secs(2);
/// After our close frame, how long the client gets to close its side.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// Aborts its tasks when dropped, however the session ends.
#[derive(Default)]
struct AbortOnDrop(Vec<AbortHandle>);

impl AbortOnDrop {
    fn add<T>(&mut self, task: &JoinHandle<T>) {
        self.0.push(task.abort_handle());
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// Counts a started process, and holds its process group for the
/// server's drop, until it is reaped (however its session ends).
struct Live {
    count: Arc<AtomicU64>,
    groups: Arc<std::sync::Mutex<std::collections::BTreeSet<i32>>>,
    pid: Option<i32>,
}

impl Live {
    fn new(shared: &Shared, pid: Option<u32>) -> Self {
        shared.live.fetch_add(1, Ordering::SeqCst);
        let pid = pid.and_then(|p| i32::try_from(p).ok());
        if let Some(pid) = pid {
            super::lock(&shared.groups).insert(pid);
        }
        Live {
            count: Arc::clone(&shared.live),
            groups: Arc::clone(&shared.groups),
            pid,
        }
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        if let Some(pid) = self.pid {
            super::lock(&self.groups).remove(&pid);
        }
        self.count.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Why the session's wait loop stopped.
enum Next {
    /// The process exited and its output reached EOF.
    Finished(io::Result<ExitStatus>),
    /// The stdout budget fault fired.
    DropConnection,
    /// The client went away.
    ClientGone(ReaderEnd),
}

/// Starts the exec's process with its three pipes; the error is the
/// detail of the `InternalError` status that ends the exec instead.
fn spawn(
    shared: &Shared,
    argv: &[String],
) -> Result<(Child, ChildStdin, ChildStdout, ChildStderr), String> {
    let spawned = shared.config.commands.command(argv).and_then(|mut cmd| {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // A pod's process outlives its exec stream.
            .kill_on_drop(false);
        cmd.spawn()
    });
    let mut child = spawned.map_err(|e| {
        tracing::debug!(error = %e, argv = ?argv, "failed to start the exec's process");
        format!("failed to start {}: {e}", argv.join(" "))
    })?;
    match (child.stdin.take(), child.stdout.take(), child.stderr.take()) {
        (Some(stdin), Some(stdout), Some(stderr)) => Ok((child, stdin, stdout, stderr)),
        _ => Err("process pipes missing".into()),
    }
}

/// Runs one exec over an upgraded socket, with the faults read when the
/// exec started.
pub(super) async fn serve_exec(
    ws: Ws,
    protocol: Protocol,
    argv: Vec<String>,
    shared: Arc<Shared>,
    faults: Faults,
) {
    let mut tasks = AbortOnDrop::default();
    let (sink, source) = ws.split();
    let (out_tx, out_rx) = mpsc::channel::<Message>(OUT_QUEUE);
    let writer = tokio::spawn(write_frames(sink, out_rx));
    tasks.add(&writer);
    let (stdin_tx, stdin_rx) = mpsc::channel::<Bytes>(STDIN_QUEUE);
    let received = Arc::clone(&shared.stdin_wire);
    let mut reader = tokio::spawn(read_frames(source, protocol, stdin_tx, received));
    tasks.add(&reader);

    // The kubelet's "connection established": one empty frame on the
    // lowest channel it writes (stdout: kube-rs always asks for it).
    if shared.config.channel_preamble
        && out_tx
            .send(Message::binary(vec![STDOUT_CHANNEL]))
            .await
            .is_err()
    {
        return;
    }

    let (mut child, stdin, stdout, stderr) = match spawn(&shared, &argv) {
        Ok((child, stdin, stdout, stderr)) => (
            Reaped {
                _live: Live::new(&shared, child.id()),
                child,
            },
            stdin,
            stdout,
            stderr,
        ),
        Err(detail) => {
            drop(stdin_rx);
            let outcome = Outcome::Internal(detail);
            finish(outcome, &argv, &faults, out_tx, writer, &mut reader).await;
            return;
        }
    };
    let feeder = tokio::spawn(feed_stdin(stdin, stdin_rx, faults.clone()));
    tasks.add(&feeder);
    let stdout_faults = OutputFaults {
        budget: faults.drop_after_stdout_bytes,
        bytes_per_sec: faults.stdout_bytes_per_sec,
        sent: Some(Arc::clone(&shared.stdout_wire)),
    };
    let mut stdout_task = tokio::spawn(forward_output(
        stdout,
        STDOUT_CHANNEL,
        out_tx.clone(),
        stdout_faults,
    ));
    let mut pumps = AbortOnDrop::default();
    pumps.add(&stdout_task);
    let mut stderr_task = tokio::spawn(forward_output(
        stderr,
        STDERR_CHANNEL,
        out_tx.clone(),
        OutputFaults::default(),
    ));
    pumps.add(&stderr_task);

    let mut exit = None;
    let mut stdout_done = false;
    let mut stderr_done = false;
    let next = loop {
        if stdout_done && stderr_done {
            if let Some(status) = exit.take() {
                break Next::Finished(status);
            }
        }
        tokio::select! {
            end = &mut stdout_task, if !stdout_done => {
                stdout_done = true;
                if matches!(end, Ok(PumpEnd::DropConnection)) {
                    break Next::DropConnection;
                }
            }
            _ = &mut stderr_task, if !stderr_done => stderr_done = true,
            status = child.child.wait(), if exit.is_none() => exit = Some(status),
            end = &mut reader => break Next::ClientGone(end.unwrap_or(ReaderEnd::Disconnected)),
        }
    };

    match next {
        Next::Finished(status) => {
            let outcome = match status {
                Ok(status) => Outcome::Exited(exit_code(status)),
                Err(e) => Outcome::Internal(format!("failed to wait for the process: {e}")),
            };
            finish(outcome, &argv, &faults, out_tx, writer, &mut reader).await;
        }
        Next::DropConnection => {
            tracing::debug!("fault: cutting the connection after the stdout budget");
            // The stream is gone: its output pipes close (the stdout pump
            // ended at the budget), its stdin closes when the feeder is
            // dropped, and the process is left to finish on its own.
            if !stderr_done {
                stderr_task.abort();
                let _ = stderr_task.await;
            }
            drop(out_tx);
            // Deliver exactly the budget, then close the TCP connection
            // without a close frame or a status.
            let sink = tokio::time::timeout(FLUSH_GRACE, writer)
                .await
                .ok()
                .and_then(Result::ok)
                .flatten();
            reader.abort();
            let _ = reader.await;
            drop(sink);
            tokio::spawn(child.reap());
        }
        Next::ClientGone(end) => {
            // As a kubelet: stdin closes (the feeder is dropped below), the
            // output is read and dropped, the process runs on.
            tracing::debug!(?end, "client went away; leaving the process running");
            pumps.0.clear();
            tokio::spawn(async move {
                if !stdout_done {
                    let _ = stdout_task.await;
                }
                if !stderr_done {
                    let _ = stderr_task.await;
                }
                child.reap().await;
            });
        }
    }
}

/// A started process, counted as live until it is reaped.
struct Reaped {
    _live: Live,
    child: Child,
}

impl Reaped {
    /// Waits for a process nobody waits on any more.
    async fn reap(mut self) {
        if let Err(e) = self.child.wait().await {
            tracing::debug!(error = %e, "failed to reap a process");
        }
    }
}

/// Sends the status frame (unless withheld), closes the socket and lets
/// the client finish.
async fn finish(
    outcome: Outcome,
    argv: &[String],
    faults: &Faults,
    out_tx: mpsc::Sender<Message>,
    writer: JoinHandle<Option<WsSink>>,
    reader: &mut JoinHandle<ReaderEnd>,
) {
    if faults.withhold_status {
        tracing::debug!("fault: withholding the status frame");
        drop(out_tx);
        // Keep the socket open until the client gives up.
        let sink = writer.await.ok().flatten();
        let end = reader.await;
        tracing::debug!(?end, "client gave up waiting for a status");
        drop(sink);
        return;
    }
    if out_tx
        .send(Message::binary(status_frame(&outcome, argv)))
        .await
        .is_err()
    {
        tracing::debug!("socket gone before the status frame");
    }
    drop(out_tx);
    // Every pump has finished, so the writer ends once the queue is sent.
    if let Ok(Some(mut sink)) = writer.await {
        if let Err(e) = sink.close().await {
            tracing::debug!(error = %e, "failed to close the websocket");
        }
        let _ = tokio::time::timeout(CLOSE_GRACE, reader).await;
        drop(sink);
    }
}
