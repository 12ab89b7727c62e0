//! Driving a toolbox sandbox (Daytona): commands that run to completion
//! and report their output at the end, and whole-file uploads and
//! downloads as the bulk channels (see `sandbox_sync_core::script::toolbox`).

use sandbox_sync_core::script;
use sandbox_sync_core::script::toolbox::{self as wrapper, split_output, Program};

use sandbox_sync_driver::bindings::sandbox_sync::provider::sandbox_exec::{
    ExecOptions, ExecStatus, Execution,
};
use sandbox_sync_driver::bindings::sandbox_sync::provider::sandbox_toolbox;
use sandbox_sync_driver::bindings::sandbox_sync::provider::types::SyncError;
use sandbox_sync_driver::bindings::wasi::io::streams::OutputStream;
use sandbox_sync_driver::errors::exit;
use sandbox_sync_driver::io;
use sandbox_sync_driver::report::take_degraded;

/// Most bytes of a command's output read back: its status lines and the
/// tail of its stderr, both bounded by the program itself.
const MAX_OUTPUT: usize = 16 << 20;

/// Whether this call's sandbox is a toolbox sandbox.
pub fn available() -> bool {
    sandbox_toolbox::available()
}

/// A fresh separator between a wrapped command's stdout and stderr.
pub fn separator() -> String {
    format!("sandbox-sync-stderr-{}", io::random_hex(16))
}

/// How a wrapped command ended.
pub struct Ran {
    /// What the program printed on stdout.
    pub stdout: Vec<u8>,
    /// Its status, with the tail of its stderr.
    pub status: ExecStatus,
}

/// Runs `command` (built with separator `sep`) to completion.
///
/// # Errors
/// `transport` when the toolbox failed to run it or to answer;
/// `limit-exceeded` for more output than a program of ours prints.
pub fn run(command: &str, sep: &str, timeout_ms: u64, max_stderr: u64) -> Result<Ran, SyncError> {
    start(command, sep, timeout_ms, max_stderr)?.wait()
}

/// A command the sandbox runs while the component goes on (a report runs
/// while the host walks its side); [`Started::wait`] takes its output.
pub struct Started {
    exec: Execution,
    sep: String,
    max_stderr: u64,
}

/// Starts `command` (built with separator `sep`).
///
/// # Errors
/// `transport` when the toolbox failed to start it.
pub fn start(
    command: &str,
    sep: &str,
    timeout_ms: u64,
    max_stderr: u64,
) -> Result<Started, SyncError> {
    let exec = sandbox_toolbox::run(command, options(timeout_ms, max_stderr))
        .map_err(|e| SyncError::Transport(format!("failed to run the sync command: {e}")))?;
    Ok(Started {
        exec,
        sep: sep.to_owned(),
        max_stderr,
    })
}

impl Started {
    /// Waits for the command to end and splits its output.
    ///
    /// # Errors
    /// `transport` when the toolbox failed to run it or to answer;
    /// `limit-exceeded` for more output than a program of ours prints.
    pub fn wait(self) -> Result<Ran, SyncError> {
        let Started {
            exec,
            sep,
            max_stderr,
        } = self;
        let mut output = Vec::new();
        if let Ok(stdout) = exec.stdout() {
            while let Ok(chunk) = stdout.blocking_read(64 << 10) {
                if output.len() + chunk.len() > MAX_OUTPUT {
                    exec.abort();
                    return Err(SyncError::LimitExceeded(format!(
                        "the sandbox's command printed more than {} MiB",
                        MAX_OUTPUT >> 20
                    )));
                }
                output.extend_from_slice(&chunk);
            }
        }
        let mut status = exec
            .finish()
            .map_err(|e| SyncError::Transport(format!("the sync command failed: {e}")))?;
        let split = split_output(&output, &sep);
        // Past the cap it fails closed, as a streaming exec does.
        let cap = usize::try_from(max_stderr).unwrap_or(usize::MAX);
        status.stderr_truncated = split.stderr.len() > cap;
        status.stderr = split.stderr[split.stderr.len().saturating_sub(cap)..].to_vec();
        take_degraded(&mut status);
        Ok(Ran {
            stdout: split.stdout.to_vec(),
            status,
        })
    }
}

/// Runs `program` as it is (inline), to completion.
///
/// # Errors
/// `transport` when the toolbox failed to run it or to answer;
/// `invalid-request` for a program that cannot be quoted.
pub fn run_program(program: &str, timeout_ms: u64, max_stderr: u64) -> Result<Ran, SyncError> {
    start_program(program, timeout_ms, max_stderr)?.wait()
}

/// Starts `program` as it is (inline); see [`Started`].
///
/// # Errors
/// `transport` when the toolbox failed to start it; `invalid-request` for
/// a program that cannot be quoted.
pub fn start_program(
    program: &str,
    timeout_ms: u64,
    max_stderr: u64,
) -> Result<Started, SyncError> {
    let sep = separator();
    let command = wrapper::plain(Program::Inline(program), &sep, max_stderr)?;
    start(&command, &sep, timeout_ms, max_stderr)
}

/// Why writing an upload's body stopped.
pub enum UploadStopped {
    /// The component's own error, which stands as it is.
    Own(SyncError),
    /// The body's stream failed; the upload's status says why.
    Stream(String),
}

/// Uploads to the sandbox file `path` what `write` writes to the body.
/// A write that fails aborts the upload (a cut body is never confirmed),
/// and after any failure whatever the toolbox kept of it is deleted.
/// `what` names the upload in errors ("the upload").
///
/// # Errors
/// The write's own error, else `transport`: the upload's failure, or its
/// stream's.
pub fn upload(
    path: &str,
    what: &str,
    timeout_ms: u64,
    max_stderr: u64,
    write: impl FnOnce(&Execution, &OutputStream) -> Result<(), UploadStopped>,
) -> Result<(), SyncError> {
    let exec = sandbox_toolbox::upload(path, options(timeout_ms, max_stderr))
        .map_err(|e| SyncError::Transport(format!("failed to start {what}: {e}")))?;
    let stdin = exec.stdin().map_err(SyncError::Transport)?;
    let written = write(&exec, &stdin);
    if written.is_err() {
        exec.abort();
    }
    // The end of stdin ends the upload's body.
    drop(stdin);
    let status = exec.finish();
    drop(exec);
    // The toolbox call is named: a person reading the error can tell the
    // upload from the command that follows it.
    let failed = match (written, status) {
        (Ok(()), Ok(s)) if s.exit_code == Some(0) => return Ok(()),
        (Err(UploadStopped::Own(e)), _) => e,
        // The deadline, not the stream it cut, is why.
        (_, Ok(s)) if s.timed_out => SyncError::LimitExceeded(format!(
            "{what} (bulk-upload) did not finish within its {timeout_ms} ms timeout"
        )),
        (_, Err(e)) | (Err(UploadStopped::Stream(e)), Ok(_)) => {
            let e = if e.trim().is_empty() {
                "the stream closed"
            } else {
                e.as_str()
            };
            SyncError::Transport(format!("{what} (bulk-upload) failed: {e}"))
        }
        (Ok(()), Ok(s)) => SyncError::Transport(format!(
            "{what} (bulk-upload) failed: {}",
            exit(&s).describe(timeout_ms)
        )),
    };
    // The toolbox may have kept what arrived.
    remove(&[path], timeout_ms);
    Err(failed)
}

/// Starts a download of the sandbox file `path`, removed once the
/// transfer has begun.
///
/// # Errors
/// `transport` when it cannot start.
pub fn download_and_remove(
    path: &str,
    timeout_ms: u64,
    max_stderr: u64,
) -> Result<Execution, SyncError> {
    sandbox_toolbox::download(path, true, options(timeout_ms, max_stderr))
        .map_err(|e| SyncError::Transport(format!("failed to start the download: {e}")))
}

/// Best effort: removes sandbox scratch `paths` (after a failure), with
/// the toolbox's delete rather than a command, which may be what failed.
pub fn remove(paths: &[&str], timeout_ms: u64) {
    for p in paths {
        if let Ok(exec) = sandbox_toolbox::remove(p, options(timeout_ms.min(10_000), 4096)) {
            let _ = exec.finish();
        }
    }
}

/// After a program was killed (its trap never ran): removes its scratch
/// directory and the wrapper's `files` (best effort).
pub fn cleanup(root: &str, scratch: &str, files: &[&str], timeout_ms: u64) {
    if let Ok(program) = script::cleanup(root, scratch, &sandbox_sync_driver::scratch::fresh()) {
        let _ = run_program(&program, timeout_ms.min(10_000), 4096);
    }
    remove(files, timeout_ms);
}

fn options(timeout_ms: u64, max_stderr_bytes: u64) -> ExecOptions {
    ExecOptions {
        timeout_ms,
        max_stderr_bytes,
    }
}
