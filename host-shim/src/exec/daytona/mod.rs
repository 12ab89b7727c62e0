//! A Daytona sandbox as an exec backend, over its toolbox API: run
//! a command without stdin, stream one file into the sandbox, stream one
//! file out of it, remove a path.
//!
//! Daytona has no streaming exec with stdin (see
//! `daytona-toolbox.md`): the bodies of `bulk-upload` and `bulk-download`
//! are the streaming channels, and `process/execute` runs the control
//! programs. Every request goes to `{toolbox-url}/{sandbox-id}/...` with
//! `Authorization: Bearer <key>`. Errors are typed ([`ToolboxError`]): a
//! refused key, a missing sandbox, a command timeout, a status the
//! toolbox gave, a file it could not read, and a transfer that was cut
//! (a download without its closing boundary, or shorter than it said).
//!
//! Every toolbox call is a [`Process`] whose streams are the call's HTTP
//! bodies, run by a task ([`task`]) and bounded by the call's deadline
//! whatever the toolbox does. [`Client`] is the HTTP client itself.

mod client;
mod error;
mod multipart;
mod task;

pub use client::{Client, Download, Executed, MAX_ANSWER, MAX_EXECUTE_ANSWER};
pub use error::ToolboxError;
pub use multipart::DOWNLOAD_BOUNDARY;

use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::io::{ReaderStream, StreamReader};

use crate::exec::{BoxFuture, ExecBackend, ExecError, ExecRequest, Process, SandboxStdin, Toolbox};

use task::{NoStdin, TaskControl};

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
