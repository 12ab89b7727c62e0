//! Exec backends: how the host starts a process in the sandbox.
//!
//! Every backend returns a [`Process`]: a stdin writer, a stdout reader and
//! a [`Control`] that waits for the exit status (stderr captured under a
//! cap, a deadline enforced) or aborts. The shim wraps the streams as
//! `wasi:io` streams for the component.

pub mod codec;
pub mod counting;
#[cfg(feature = "daytona")]
pub mod daytona;
#[cfg(feature = "kube")]
pub mod kube;
pub mod local;
pub(crate) mod pipes;
pub mod scripted;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};

/// One host file to append to a process's stdin, as it was planned: the
/// handle that is read must still be exactly this file (device and inode)
/// with this size and mtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedFile {
    /// Bytes written before the file's contents (padding and headers).
    pub prefix: Vec<u8>,
    /// Path beneath the grant.
    pub path: String,
    /// Planned size: exactly this many bytes are sent.
    pub size: u64,
    /// Planned mtime, seconds.
    pub mtime_sec: i64,
    /// Planned mtime, nanoseconds within the second.
    pub mtime_nsec: u32,
    /// Planned device.
    pub device: u64,
    /// Planned inode.
    pub inode: u64,
}

/// Why appending planned files to a stdin stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The file disappeared, shrank, grew or was modified.
    #[error("{0}")]
    SourceChanged(String),
    /// Reading the file failed.
    #[error("{0}")]
    ReadFailed(String),
    /// Stdin failed or closed; the exit status says why.
    #[error("{0}")]
    StdinFailed(String),
}

/// A boxed, sendable future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What to start.
#[derive(Debug, Clone)]
pub struct ExecRequest {
    /// argv; `argv[0]` is the program.
    pub argv: Vec<String>,
    /// Kill the process after this long.
    pub timeout: Duration,
    /// Keep at most this many stderr bytes; more fails the process closed.
    pub max_stderr: u64,
}

/// How a process ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExitInfo {
    /// Exit code; `None` when killed by a signal.
    pub exit_code: Option<i32>,
    /// Killed because the deadline passed.
    pub timed_out: bool,
    /// Captured stderr (at most the cap).
    pub stderr: Vec<u8>,
    /// Stderr went past the cap and the process was killed.
    pub stderr_truncated: bool,
}

/// Errors starting or waiting for a process.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The process could not be started.
    #[error("failed to start {program}: {source}")]
    Spawn {
        /// What was started.
        program: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// Waiting for the process failed.
    #[error("failed to wait for the sandbox process: {0}")]
    Wait(#[source] std::io::Error),
    /// The backend cannot run this request.
    #[error("{0}")]
    Unsupported(String),
    /// A backend's own typed error before the process ran (a kube
    /// [`kube::KubeError`], say; `downcast_ref` gets it back).
    #[error("failed to start {program}: {source}")]
    BackendStart {
        /// What was started.
        program: String,
        /// The backend's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A backend's own typed error while or after the process ran.
    #[error("failed to wait for the sandbox process: {0}")]
    BackendWait(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A toolbox call (`execute`, `bulk-upload`, ...) failed, with the
    /// backend's own typed error (a Daytona `ToolboxError`, which its
    /// `find` gets back).
    #[error("the toolbox's {call} failed: {source}")]
    Toolbox {
        /// Which call.
        call: &'static str,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The other side sent more than the host reads: the call fails with
    /// `limit-exceeded`, not `transport`.
    #[error("{0}")]
    Limit(String),
}

/// A sandbox process's stdin.
pub trait SandboxStdin: AsyncWrite + Send + Unpin {
    /// Moves up to `len` bytes from `file`'s current offset into stdin
    /// inside the kernel (`splice(2)`), when stdin is a local pipe.
    /// `Ready(Ok(None))` when this stdin cannot: the caller copies instead.
    fn poll_splice_from(
        &mut self,
        cx: &mut std::task::Context<'_>,
        file: &std::fs::File,
        len: usize,
    ) -> std::task::Poll<std::io::Result<Option<usize>>> {
        let _ = (cx, file, len);
        std::task::Poll::Ready(Ok(None))
    }
}

impl SandboxStdin for tokio::io::Sink {}

/// An in-memory pipe (a toolbox upload's body): it cannot splice, so every
/// byte goes through the copy path.
impl SandboxStdin for tokio::io::DuplexStream {}

impl SandboxStdin for Box<dyn SandboxStdin> {
    fn poll_splice_from(
        &mut self,
        cx: &mut std::task::Context<'_>,
        file: &std::fs::File,
        len: usize,
    ) -> std::task::Poll<std::io::Result<Option<usize>>> {
        (**self).poll_splice_from(cx, file, len)
    }
}

/// A started process.
pub struct Process {
    /// Its stdin.
    pub stdin: Box<dyn SandboxStdin>,
    /// Its stdout.
    pub stdout: Box<dyn AsyncRead + Send + Unpin>,
    /// Waits for or stops it.
    pub control: Box<dyn Control>,
    /// Shutting `stdin` down reaches the process as EOF. Not so on
    /// Kubernetes' v4 exec protocol, which has no half-close; a compressed
    /// transport needs it (the sandbox's decompressor reads to EOF).
    pub stdin_ends: bool,
}

/// Lifecycle of a started process.
pub trait Control: Send + Sync {
    /// Waits for the exit (or the deadline) and returns its status.
    fn wait(&mut self) -> BoxFuture<'_, Result<ExitInfo, ExecError>>;
    /// Kills the process now.
    fn abort(&mut self);
}

/// A way to run processes in a sandbox.
pub trait ExecBackend: Send + Sync {
    /// Starts `req.argv`.
    fn start(&self, req: ExecRequest) -> BoxFuture<'_, Result<Process, ExecError>>;
    /// A short name for logs ("local", "kube", "scripted").
    fn name(&self) -> &'static str;
    /// The sandbox is on this machine: compressing would only cost CPU.
    fn is_local(&self) -> bool {
        false
    }
    /// The sandbox's file-and-command API, when it is reached through one
    /// (Daytona) rather than a streaming exec.
    fn toolbox(&self) -> Option<&dyn Toolbox> {
        None
    }
}

/// A sandbox reached through a file-and-command API instead of a streaming
/// exec: each operation is a [`Process`], so the component drives it with
/// the same streams, `send-files` and codecs as a process.
pub trait Toolbox: Send + Sync {
    /// Streams the process's stdin into a new file at `path`; it exits 0
    /// once the sandbox confirmed every byte.
    fn upload(&self, path: String, timeout: Duration) -> Result<Process, ExecError>;
    /// Runs `command` (sh text) with no stdin; its stdout yields the
    /// command's combined output once it has ended.
    fn run(&self, command: String, timeout: Duration) -> Result<Process, ExecError>;
    /// Streams the file at `path` as stdout; with `then_remove`, deletes it
    /// once the transfer has begun.
    fn download(
        &self,
        path: String,
        then_remove: bool,
        timeout: Duration,
    ) -> Result<Process, ExecError>;
    /// Deletes `path` (recursively; one already gone is no error); exits 0
    /// once it is gone.
    fn remove(&self, path: String, timeout: Duration) -> Result<Process, ExecError>;
}

/// Runs a short program that reads no input: its stdout (at most `max`
/// bytes, as text) and how it ended. For probes (`doctor`, `cp`).
///
/// # Errors
/// When it cannot start, or its output cannot be read.
pub async fn run_short(
    backend: &dyn ExecBackend,
    req: ExecRequest,
    max: u64,
) -> Result<(String, ExitInfo), ExecError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut p = backend.start(req).await?;
    let mut out = String::new();
    (&mut p.stdout)
        .take(max)
        .read_to_string(&mut out)
        .await
        .map_err(ExecError::Wait)?;
    let _ = p.stdin.shutdown().await;
    let status = p.control.wait().await?;
    Ok((out, status))
}

/// Longest wait any deadline stands for: a timeout past it (say `u64::MAX`
/// milliseconds from a request) means "this long", not an overflow.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(30 * 24 * 3600);

/// The instant `timeout` from now, `timeout` capped at [`MAX_TIMEOUT`].
pub fn deadline_after(timeout: Duration) -> tokio::time::Instant {
    tokio::time::Instant::now() + timeout.min(MAX_TIMEOUT)
}

/// Reads `stderr` to its end keeping at most `cap` bytes. The first time
/// the cap is passed it calls `on_overflow` (the backend fails the process
/// closed) and keeps draining, so the writer never blocks on a full pipe.
/// Returns the kept bytes and whether the cap was passed.
pub async fn capture_capped<R: AsyncRead + Unpin>(
    mut stderr: R,
    cap: u64,
    on_overflow: impl FnOnce(),
) -> (Vec<u8>, bool) {
    use tokio::io::AsyncReadExt;
    let cap = usize::try_from(cap).unwrap_or(usize::MAX);
    let mut kept = Vec::new();
    let mut on_overflow = Some(on_overflow);
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match stderr.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = cap.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
                if n > room {
                    if let Some(f) = on_overflow.take() {
                        f();
                    }
                }
            }
        }
    }
    (kept, on_overflow.is_none())
}
