//! The `local` backend: `/bin/sh` on this machine, optionally inside a
//! sandbox root the way a container runtime would run a pod.
//!
//! With a sandbox root the process is jailed the way a container runtime
//! would run a pod's (see [`jail`]): its own namespaces, `pivot_root` into
//! the root, a fresh `/proc`, a bound `/dev/null`, a container's capability
//! set, optionally another user. Without one it runs directly on the host
//! (the seeds' test harness does the same), optionally dropped to another
//! user with `setpriv`.

mod jail;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rustix::process::{kill_process_group, Pid, Signal};
use tokio::io::AsyncRead;
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::{BoxFuture, Control, ExecBackend, ExecError, ExecRequest, ExitInfo, Process};

/// How long a timed-out process gets between TERM and KILL to clean up. The
/// sync program stops itself before its deadline, so TERM only reaches a
/// program that is stuck or hostile: it gets little time.
const TERM_GRACE: Duration = Duration::from_millis(300);

/// How long to wait for stderr EOF after the process exits (a stray
/// grandchild may hold the pipe open).
const STDERR_GRACE: Duration = Duration::from_secs(2);

/// Runs sandbox commands as local processes.
#[derive(Debug, Clone, Default)]
pub struct LocalBackend {
    root: Option<PathBuf>,
    host_userland: bool,
    user: Option<u32>,
    exec_latency: Duration,
    reply_latency: Duration,
    mounts: jail::Mounts,
    /// The sandbox's `PATH` (default: the usual directories).
    path: Option<String>,
}

/// `PATH` of a local sandbox unless one is given.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

impl LocalBackend {
    /// Runs commands directly on this machine.
    pub fn host() -> Self {
        Self::default()
    }

    /// Runs commands jailed in `root` (see [`jail`]).
    ///
    /// # Errors
    /// When `root` is not a directory.
    pub fn sandbox_root(root: impl AsRef<Path>) -> std::io::Result<Self> {
        Self::prepare_root(root, false)
    }

    /// Like [`LocalBackend::sandbox_root`], but the host's userland
    /// (`/bin`, `/lib*`, `/usr/{bin,sbin,lib,libexec,share}`) is bound
    /// read-only into the root, so the sandbox runs GNU tools while its own
    /// `/usr/local`, `/etc` and data stay its own.
    ///
    /// # Errors
    /// When `root` is not a directory.
    pub fn sandbox_root_with_host_userland(root: impl AsRef<Path>) -> std::io::Result<Self> {
        Self::prepare_root(root, true)
    }

    fn prepare_root(root: impl AsRef<Path>, host_userland: bool) -> std::io::Result<Self> {
        // Nothing inside the root is touched from the host side: the root is
        // the sandbox's, and a path in it may be a link it planted. `/proc`
        // and `/dev/null` are set up inside the jail (see `jail`).
        let root = std::fs::canonicalize(root.as_ref())?;
        if !root.is_dir() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("sandbox root {} is not a directory", root.display()),
            ));
        }
        Ok(LocalBackend {
            root: Some(root),
            host_userland,
            ..Self::default()
        })
    }

    /// Runs commands as `uid` (and gid `uid`, no supplementary groups).
    #[must_use]
    pub fn user(mut self, uid: u32) -> Self {
        self.user = Some(uid);
        self
    }

    /// Gives the sandbox's processes `path` as `PATH`, as an image's
    /// environment does (distroless `:debug` adds `/busybox`).
    #[must_use]
    pub fn path(mut self, path: impl Into<String>) -> Self {
        self.path = Some(path.into());
        self
    }

    /// Leaves the sandbox root's `/dev` empty: no `null`, `zero` or
    /// `urandom`, as some pods have (no effect without a root).
    #[must_use]
    pub fn without_devices(mut self) -> Self {
        self.mounts.devices = false;
        self
    }

    /// Mounts no `/proc` in the sandbox root, as a misconfigured runtime
    /// might (no effect without a root).
    #[must_use]
    pub fn without_proc(mut self) -> Self {
        self.mounts.proc = false;
        self
    }

    /// Delays every exec start, to model an API server's round trip.
    #[must_use]
    pub fn exec_latency(mut self, latency: Duration) -> Self {
        self.exec_latency = latency;
        self
    }

    /// Delays each exec's first stdout bytes, to model a link's round trip
    /// between the program's first words and the host hearing them.
    #[must_use]
    pub fn reply_latency(mut self, latency: Duration) -> Self {
        self.reply_latency = latency;
        self
    }

    /// The command that runs `argv` the way this backend does (namespaces,
    /// chroot, user, clean environment, own process group, piped stdio);
    /// for test servers that stand in for a pod.
    ///
    /// # Errors
    /// An empty argv.
    pub fn command(&self, argv: &[String]) -> Result<Command, ExecError> {
        let (program, args) = argv
            .split_first()
            .ok_or_else(|| ExecError::Unsupported("empty argv".into()))?;
        let mut cmd = match (&self.root, self.user) {
            (Some(root), user) => {
                let jail = jail::Jail::new(root, user, self.host_userland, self.mounts).map_err(
                    |source| ExecError::Spawn {
                        program: program.clone(),
                        source,
                    },
                )?;
                let mut c = Command::new(program);
                c.args(args);
                // SAFETY: `enter` only makes system calls (it runs between
                // fork and exec of a multi-threaded process); see `jail`.
                unsafe {
                    c.pre_exec(move || jail.enter());
                }
                c
            }
            (None, Some(uid)) => {
                let mut c = Command::new("setpriv");
                c.arg(format!("--reuid={uid}"))
                    .arg(format!("--regid={uid}"))
                    .arg("--clear-groups")
                    .arg("--")
                    .arg(program)
                    .args(args);
                c
            }
            (None, None) => {
                let mut c = Command::new(program);
                c.args(args);
                c
            }
        };
        cmd.env_clear()
            .env("PATH", self.path.as_deref().unwrap_or(DEFAULT_PATH))
            .env("LC_ALL", "C")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        Ok(cmd)
    }
}

/// A reader whose first bytes come only after `wait`.
struct LateReader<R> {
    wait: Option<Pin<Box<tokio::time::Sleep>>>,
    inner: R,
}

impl<R: AsyncRead + Unpin> AsyncRead for LateReader<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if let Some(wait) = &mut self.wait {
            std::task::ready!(wait.as_mut().poll(cx));
            self.wait = None;
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl ExecBackend for LocalBackend {
    fn start(&self, req: ExecRequest) -> BoxFuture<'_, Result<Process, ExecError>> {
        Box::pin(async move {
            if !self.exec_latency.is_zero() {
                tokio::time::sleep(self.exec_latency).await;
            }
            let mut cmd = self.command(&req.argv)?;
            let program = req.argv.first().cloned().unwrap_or_default();
            let mut child = cmd.spawn().map_err(|source| ExecError::Spawn {
                program: program.clone(),
                source,
            })?;
            let deadline = crate::exec::deadline_after(req.timeout);
            let (stdin, stdout, stderr) =
                match (child.stdin.take(), child.stdout.take(), child.stderr.take()) {
                    (Some(i), Some(o), Some(e)) => (i, o, e),
                    _ => return Err(ExecError::Unsupported("child pipes missing".into())),
                };
            widen_pipe(&stdin);
            widen_pipe(&stdout);
            let stdin =
                PipeStdin::new(stdin).map_err(|source| ExecError::Spawn { program, source })?;
            let pgid = child.id().and_then(|id| Pid::from_raw(id as i32));
            let stderr_task = tokio::spawn(capture_stderr(stderr, req.max_stderr, pgid));
            let timed_out = Arc::new(AtomicBool::new(false));
            let watchdog = tokio::spawn(watchdog(deadline, pgid, Arc::clone(&timed_out)));
            let stdout: Box<dyn AsyncRead + Send + Unpin> = if self.reply_latency.is_zero() {
                Box::new(stdout)
            } else {
                Box::new(LateReader {
                    wait: Some(Box::pin(tokio::time::sleep(self.reply_latency))),
                    inner: stdout,
                })
            };
            Ok(Process {
                stdin: Box::new(stdin),
                stdout,
                control: Box::new(LocalControl {
                    child,
                    pgid,
                    timed_out,
                    watchdog,
                    stderr_task: Some(stderr_task),
                    reaped: false,
                }),
                stdin_ends: true,
            })
        })
    }

    fn name(&self) -> &'static str {
        "local"
    }

    fn is_local(&self) -> bool {
        true
    }
}

/// Pipe buffer for the sandbox's stdin and stdout. The default 64 KiB
/// makes both ends wake each other every 64 KiB; 1 MiB (the default
/// `pipe-max-size`) lets each side move a megabyte per wakeup.
const PIPE_SIZE: usize = 1 << 20;

/// Grows a pipe to [`PIPE_SIZE`]; an unprivileged host over its pipe quota
/// keeps the default, which is only slower.
fn widen_pipe(pipe: &impl std::os::fd::AsFd) {
    if let Err(e) = rustix::pipe::fcntl_setpipe_size(pipe, PIPE_SIZE) {
        tracing::debug!(error = %e, "could not grow the sandbox pipe");
    }
}

/// The sandbox's stdin pipe, registered with tokio as a plain pipe so that
/// host files can be spliced into it.
pub(crate) struct PipeStdin(tokio::net::unix::pipe::Sender);

impl PipeStdin {
    #[cfg(test)]
    pub(crate) fn from_sender(sender: tokio::net::unix::pipe::Sender) -> Self {
        PipeStdin(sender)
    }

    fn new(stdin: tokio::process::ChildStdin) -> std::io::Result<Self> {
        let fd = stdin.into_owned_fd()?;
        Ok(PipeStdin(tokio::net::unix::pipe::Sender::from_owned_fd(
            fd,
        )?))
    }
}

impl tokio::io::AsyncWrite for PipeStdin {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl super::SandboxStdin for PipeStdin {
    fn poll_splice_from(
        &mut self,
        cx: &mut Context<'_>,
        file: &std::fs::File,
        len: usize,
    ) -> Poll<std::io::Result<Option<usize>>> {
        use rustix::pipe::{splice, SpliceFlags};
        loop {
            if let Err(e) = std::task::ready!(self.0.poll_write_ready(cx)) {
                return Poll::Ready(Err(e));
            }
            let pipe = &self.0;
            match pipe.try_io(|| Ok(splice(file, None, pipe, None, len, SpliceFlags::NONBLOCK)?)) {
                Ok(n) => return Poll::Ready(Ok(Some(n))),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

/// Reads stderr up to `cap` bytes; past the cap the process group is
/// killed (fail closed).
async fn capture_stderr(
    stderr: tokio::process::ChildStderr,
    cap: u64,
    pgid: Option<Pid>,
) -> (Vec<u8>, bool) {
    super::capture_capped(stderr, cap, move || kill_group(pgid)).await
}

fn kill_group(pgid: Option<Pid>) {
    signal_group(pgid, Signal::KILL);
}

fn signal_group(pgid: Option<Pid>, signal: Signal) {
    if let Some(pgid) = pgid {
        // The group may already be gone; nothing else to do then.
        let _ = kill_process_group(pgid, signal);
    }
}

/// Enforces the deadline whether or not anyone is waiting: TERM first so the
/// script's trap removes its scratch dir, KILL after a grace period.
async fn watchdog(deadline: Instant, pgid: Option<Pid>, timed_out: Arc<AtomicBool>) {
    tokio::time::sleep_until(deadline).await;
    timed_out.store(true, Ordering::SeqCst);
    signal_group(pgid, Signal::TERM);
    tokio::time::sleep(TERM_GRACE).await;
    kill_group(pgid);
}

struct LocalControl {
    child: Child,
    pgid: Option<Pid>,
    timed_out: Arc<AtomicBool>,
    watchdog: JoinHandle<()>,
    stderr_task: Option<JoinHandle<(Vec<u8>, bool)>>,
    reaped: bool,
}

impl Drop for LocalControl {
    /// A call dropped at its hard deadline takes the process group with it
    /// (once reaped, `wait` has done so and the id may be reused).
    fn drop(&mut self) {
        self.watchdog.abort();
        if !self.reaped {
            kill_group(self.pgid);
        }
    }
}

impl Control for LocalControl {
    fn wait(&mut self) -> BoxFuture<'_, Result<ExitInfo, ExecError>> {
        Box::pin(async move {
            let status = self.child.wait().await.map_err(ExecError::Wait)?;
            self.reaped = true;
            self.watchdog.abort();
            let timed_out = self.timed_out.load(Ordering::SeqCst);
            // Whatever the shell left behind in its group goes with it.
            kill_group(self.pgid);
            let (stderr, stderr_truncated) = match self.stderr_task.take() {
                Some(mut task) => match tokio::time::timeout(STDERR_GRACE, &mut task).await {
                    Ok(Ok(v)) => v,
                    _ => {
                        task.abort();
                        (Vec::new(), false)
                    }
                },
                None => (Vec::new(), false),
            };
            Ok(ExitInfo {
                exit_code: if timed_out { None } else { status.code() },
                timed_out,
                stderr,
                stderr_truncated,
            })
        })
    }

    fn abort(&mut self) {
        if !self.reaped {
            kill_group(self.pgid);
        }
    }
}
