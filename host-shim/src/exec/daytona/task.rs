//! A toolbox call as a [`Process`](crate::exec::Process)'s control: the
//! task that makes the call, bounded by its deadline whatever the toolbox
//! does.

use std::time::Duration;

use tokio::task::JoinHandle;

use super::ToolboxError;
use crate::exec::{BoxFuture, Control, ExecError, ExitInfo, SandboxStdin};

/// A toolbox call's task: its exit code, or why it failed, within its
/// deadline.
pub(super) struct TaskControl {
    call: &'static str,
    task: JoinHandle<Result<i64, ToolboxError>>,
    deadline: tokio::time::Instant,
    timeout: Duration,
    ended: Option<Result<ExitInfo, ToolboxError>>,
}

impl TaskControl {
    pub(super) fn new(
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
                    call = self.call,
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
                    source: Box::new(e.clone()),
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
pub(super) struct NoStdin;

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
