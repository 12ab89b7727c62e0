//! A Daytona sandbox as an exec backend: every toolbox call is a
//! [`Process`] whose streams are the call's HTTP bodies, run by a task and
//! bounded by the call's deadline whatever the toolbox does.

use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::io::{ReaderStream, StreamReader};

use super::{Toolbox as Client, ToolboxError};
use crate::exec::{
    BoxFuture, Control, ExecBackend, ExecError, ExecRequest, ExitInfo, Process, SandboxStdin,
    Toolbox,
};

/// Bytes buffered between the component and an upload's body.
const UPLOAD_BUFFER: usize = 256 << 10;
/// Chunks buffered between a download's body and the component.
const DOWNLOAD_CHUNKS: usize = 16;

/// A Daytona sandbox, reached through its toolbox.
#[derive(Debug, Clone)]
pub struct DaytonaBackend {
    client: Client,
}

impl DaytonaBackend {
    /// The sandbox behind `client`.
    pub fn new(client: Client) -> Self {
        DaytonaBackend { client }
    }

    /// The toolbox client.
    pub fn client(&self) -> &Client {
        &self.client
    }
}

impl ExecBackend for DaytonaBackend {
    /// Runs `argv` without stdin (a probe, as `doctor` and `cp` run): the
    /// toolbox has no streaming exec, so a write to stdin fails.
    fn start(&self, req: ExecRequest) -> BoxFuture<'_, Result<Process, ExecError>> {
        let command = argv_to_sh(&req.argv);
        Box::pin(async move {
            let command = command?;
            let mut p = self.run(command, req.timeout)?;
            p.stdin = Box::new(NoStdin);
            Ok(p)
        })
    }

    fn name(&self) -> &'static str {
        "daytona"
    }

    fn toolbox(&self) -> Option<&dyn Toolbox> {
        Some(self)
    }
}

impl Toolbox for DaytonaBackend {
    fn upload(&self, path: String, timeout: Duration) -> Result<Process, ExecError> {
        let (stdin, body) = tokio::io::duplex(UPLOAD_BUFFER);
        let client = self.client.clone();
        let task = tokio::spawn(async move {
            client.upload(&path, ReaderStream::new(body)).await?;
            Ok(0)
        });
        Ok(process(
            "bulk-upload",
            Box::new(stdin),
            Box::new(tokio::io::empty()),
            task,
            timeout,
        ))
    }

    fn run(&self, command: String, timeout: Duration) -> Result<Process, ExecError> {
        let (tx, rx) = mpsc::channel(1);
        let client = self.client.clone();
        let task = tokio::spawn(async move {
            let done = client.execute(&command, None, Some(timeout)).await?;
            // The component may have stopped reading; the status stands.
            let _ = tx.send(Ok(Bytes::from(done.output))).await;
            Ok(done.exit_code)
        });
        Ok(process(
            "execute",
            Box::new(tokio::io::sink()),
            Box::new(StreamReader::new(tokio_stream_from(rx))),
            task,
            timeout,
        ))
    }

    fn download(
        &self,
        path: String,
        then_remove: bool,
        timeout: Duration,
    ) -> Result<Process, ExecError> {
        let (tx, rx) = mpsc::channel(DOWNLOAD_CHUNKS);
        let client = self.client.clone();
        let task = tokio::spawn(async move {
            let mut body = match client.download(&path).await {
                Ok(body) => body,
                Err(e) => {
                    if then_remove {
                        // The failure stands; the delete is best effort.
                        let _ = client.remove(&path).await;
                    }
                    return Err(e);
                }
            };
            let mut removing: Option<JoinHandle<Result<(), ToolboxError>>> = None;
            let mut failed = None;
            while let Some(chunk) = body.next().await {
                match chunk {
                    Ok(bytes) => {
                        // The sandbox opened the file before its first byte
                        // came: deleting it now loses nothing and saves a
                        // round trip after the transfer.
                        if then_remove && removing.is_none() {
                            removing = Some(spawn_remove(&client, &path));
                        }
                        if tx.send(Ok(bytes)).await.is_err() {
                            break;
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(Err(std::io::Error::other(e.to_string()))).await;
                        failed = Some(e);
                        break;
                    }
                }
            }
            drop(tx);
            if then_remove && removing.is_none() {
                // An empty file, or a transfer that failed first.
                removing = Some(spawn_remove(&client, &path));
            }
            if let Some(r) = removing {
                r.await
                    .map_err(|e| ToolboxError::Transport(e.to_string()))??;
            }
            match failed {
                Some(e) => Err(e),
                None => Ok(0),
            }
        });
        Ok(process(
            "bulk-download",
            Box::new(tokio::io::sink()),
            Box::new(StreamReader::new(tokio_stream_from(rx))),
            task,
            timeout,
        ))
    }

    fn remove(&self, path: String, timeout: Duration) -> Result<Process, ExecError> {
        let client = self.client.clone();
        let task = tokio::spawn(async move {
            client.remove(&path).await?;
            Ok(0)
        });
        Ok(process(
            "delete",
            Box::new(tokio::io::sink()),
            Box::new(tokio::io::empty()),
            task,
            timeout,
        ))
    }
}

/// Deletes `path` in the background.
fn spawn_remove(client: &Client, path: &str) -> JoinHandle<Result<(), ToolboxError>> {
    let (client, path) = (client.clone(), path.to_owned());
    tokio::spawn(async move { client.remove(&path).await })
}

/// A toolbox call run by `task`, with the given streams.
fn process(
    call: &'static str,
    stdin: Box<dyn SandboxStdin>,
    stdout: Box<dyn tokio::io::AsyncRead + Send + Unpin>,
    task: JoinHandle<Result<i64, ToolboxError>>,
    timeout: Duration,
) -> Process {
    Process {
        stdin,
        stdout,
        control: Box::new(TaskControl::new(call, task, timeout)),
        stdin_ends: true,
    }
}

/// A receiver as a stream.
fn tokio_stream_from(
    mut rx: mpsc::Receiver<std::io::Result<Bytes>>,
) -> impl futures_util::Stream<Item = std::io::Result<Bytes>> + Send + Unpin {
    Box::pin(futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)))
}

/// `argv` as one `sh` command line, every word single-quoted.
fn argv_to_sh(argv: &[String]) -> Result<String, ExecError> {
    let words = argv
        .iter()
        .map(|w| sandbox_sync_core::quote::sh_quote(w))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ExecError::Unsupported(e.to_string()))?;
    Ok(words.join(" "))
}

/// A toolbox call's task: its exit code, or why it failed, within its
/// deadline.
struct TaskControl {
    call: &'static str,
    task: JoinHandle<Result<i64, ToolboxError>>,
    deadline: tokio::time::Instant,
    timeout: Duration,
    ended: Option<Result<ExitInfo, ToolboxError>>,
}

impl TaskControl {
    fn new(
        call: &'static str,
        task: JoinHandle<Result<i64, ToolboxError>>,
        timeout: Duration,
    ) -> Self {
        TaskControl {
            call,
            task,
            deadline: crate::exec::deadline_after(timeout),
            timeout,
            ended: None,
        }
    }
}

impl Control for TaskControl {
    fn wait(&mut self) -> BoxFuture<'_, Result<ExitInfo, ExecError>> {
        Box::pin(async move {
            if self.ended.is_none() {
                let timed_out = ExitInfo {
                    timed_out: true,
                    ..ExitInfo::default()
                };
                let ended = match tokio::time::timeout_at(self.deadline, &mut self.task).await {
                    Err(_) => {
                        self.task.abort();
                        Ok(timed_out)
                    }
                    Ok(Ok(Ok(code))) => Ok(ExitInfo {
                        exit_code: Some(i32::try_from(code).unwrap_or(-1)),
                        ..ExitInfo::default()
                    }),
                    Ok(Ok(Err(ToolboxError::Timeout(_)))) => Ok(timed_out),
                    Ok(Ok(Err(e))) => Err(e),
                    Ok(Err(e)) if e.is_cancelled() => {
                        Err(ToolboxError::Transport("the call was aborted".into()))
                    }
                    Ok(Err(e)) => Err(ToolboxError::Transport(e.to_string())),
                };
                tracing::debug!(
                    timeout_ms = self.timeout.as_millis() as u64,
                    ?ended,
                    "toolbox call ended"
                );
                self.ended = Some(ended);
            }
            match &self.ended {
                Some(Ok(info)) => Ok(info.clone()),
                Some(Err(e @ ToolboxError::TooLarge { .. })) => {
                    Err(ExecError::Limit(e.to_string()))
                }
                Some(Err(e)) => Err(ExecError::Toolbox {
                    call: self.call,
                    message: e.to_string(),
                }),
                None => Err(ExecError::Unsupported("no status".into())),
            }
        })
    }

    fn abort(&mut self) {
        self.task.abort();
    }
}

/// The stdin of a probe run through the toolbox: there is none.
struct NoStdin;

impl tokio::io::AsyncWrite for NoStdin {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        _: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::task::Poll::Ready(Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "a Daytona command has no stdin",
        )))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

impl SandboxStdin for NoStdin {}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn argv_words_are_quoted() {
        assert_eq!(
            argv_to_sh(&["sh".into(), "-c".into(), "echo 'x' $y".into()]).unwrap(),
            "'sh' '-c' 'echo '\\''x'\\'' $y'"
        );
    }
}
