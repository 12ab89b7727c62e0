//! `sandbox-sync:provider/sandbox-exec` for the component.

use std::os::unix::fs::MetadataExt;
use std::sync::atomic::Ordering;
use std::time::Duration;

use wasmtime::component::Resource;
use wasmtime_wasi::p2::{DynInputStream, DynOutputStream};

use crate::bindings::host_fs::FsError;
use crate::bindings::sandbox_exec::{
    ExecOptions, ExecStatus, FileSend, Host, HostExecution, SendError,
};
use crate::exec::{Control, ExecRequest};
use crate::fs::GrantedDir;
use crate::pipes::{ExecStdin, ExecStdout, SendFail, WeakStdin};
use crate::state::ShimState;

/// A running sandbox process, as a component resource.
pub struct Execution {
    /// Until the component takes it.
    stdin: Option<ExecStdin>,
    /// For `send-files`; does not keep stdin open after the component
    /// dropped its stream.
    pipe: WeakStdin,
    stdout: Option<DynInputStream>,
    control: Box<dyn Control>,
}

impl Host for ShimState {
    async fn start(
        &mut self,
        argv: Vec<String>,
        options: ExecOptions,
    ) -> wasmtime::Result<Result<Resource<Execution>, String>> {
        let mut timeout = Duration::from_millis(options.timeout_ms);
        if let Some(deadline) = self.exec_deadline {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return Ok(Err("the sync's deadline has passed".into()));
            }
            timeout = timeout.min(left);
        }
        self.execs.fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            backend = self.backend.name(),
            timeout_ms = timeout.as_millis() as u64,
            "sandbox exec started"
        );
        let req = ExecRequest {
            argv,
            timeout,
            max_stderr: options.max_stderr_bytes,
        };
        let process = match self.backend.start(req).await {
            Ok(p) => p,
            Err(e) => return Ok(Err(e.to_string())),
        };
        let stdin = ExecStdin::new(process.stdin);
        let exec = Execution {
            pipe: stdin.downgrade(),
            stdin: Some(stdin),
            stdout: Some(Box::new(ExecStdout::new(process.stdout))),
            control: process.control,
        };
        Ok(Ok(self.table.push(exec)?))
    }
}

impl HostExecution for ShimState {
    async fn stdin(
        &mut self,
        this: Resource<Execution>,
    ) -> wasmtime::Result<Result<Resource<DynOutputStream>, String>> {
        let stream: DynOutputStream = match self.table.get_mut(&this)?.stdin.take() {
            Some(s) => Box::new(s),
            None => return Ok(Err("stdin was already taken".into())),
        };
        Ok(Ok(self.table.push_child(stream, &this)?))
    }

    async fn stdout(
        &mut self,
        this: Resource<Execution>,
    ) -> wasmtime::Result<Result<Resource<DynInputStream>, String>> {
        let stream = match self.table.get_mut(&this)?.stdout.take() {
            Some(s) => s,
            None => return Ok(Err("stdout was already taken".into())),
        };
        Ok(Ok(self.table.push_child(stream, &this)?))
    }

    async fn send_files(
        &mut self,
        this: Resource<Execution>,
        source: Resource<GrantedDir>,
        files: Vec<FileSend>,
    ) -> wasmtime::Result<Result<(), SendError>> {
        let exec = self.table.get(&this)?;
        let pipe = match (&exec.stdin, exec.pipe.upgrade()) {
            (None, Some(pipe)) => pipe,
            (Some(_), _) => return Ok(Err(SendError::StdinFailed("take stdin first".into()))),
            (None, None) => return Ok(Err(SendError::StdinFailed("stdin was closed".into()))),
        };
        for f in files {
            if let Err(e) = pipe.write_all(f.prefix.into()).await {
                return Ok(Err(send_error(&f.path, e)));
            }
            let changed = |why: &str| {
                SendError::SourceChanged(format!(
                    "source file {} {why} while it was being sent",
                    f.path
                ))
            };
            let file = match self.table.get(&source)?.open_file(&f.path) {
                Ok(file) => file,
                Err(FsError::NotFound(_)) => return Ok(Err(changed("disappeared"))),
                Err(_) => return Ok(Err(changed("was replaced"))),
            };
            match pipe.send_file(&file, f.size).await {
                Ok(n) if n < f.size => return Ok(Err(changed("shrank"))),
                Ok(_) => {}
                Err(e) => return Ok(Err(send_error(&f.path, e))),
            }
            // Checked on the handle that was read: the bytes sent are that
            // file's, and it still is exactly what was planned.
            let now = match file.metadata() {
                Ok(m) => m,
                Err(e) => return Ok(Err(send_error(&f.path, SendFail::Read(e)))),
            };
            if (now.dev(), now.ino()) != (f.device, f.inode) {
                return Ok(Err(changed("was replaced")));
            }
            if now.len() != f.size
                || now.mtime() != f.mtime_sec
                || u32::try_from(now.mtime_nsec()).ok() != Some(f.mtime_nsec)
            {
                return Ok(Err(changed("changed")));
            }
        }
        Ok(Ok(()))
    }

    async fn abort(&mut self, this: Resource<Execution>) -> wasmtime::Result<()> {
        self.table.get_mut(&this)?.control.abort();
        Ok(())
    }

    async fn finish(
        &mut self,
        this: Resource<Execution>,
    ) -> wasmtime::Result<Result<ExecStatus, String>> {
        let exec = self.table.get_mut(&this)?;
        match exec.control.wait().await {
            Ok(info) => Ok(Ok(ExecStatus {
                exit_code: info.exit_code,
                timed_out: info.timed_out,
                stderr: info.stderr,
                stderr_truncated: info.stderr_truncated,
            })),
            Err(e) => Ok(Err(e.to_string())),
        }
    }

    async fn drop(&mut self, this: Resource<Execution>) -> wasmtime::Result<()> {
        let mut exec = self.table.delete(this)?;
        exec.control.abort();
        Ok(())
    }
}

fn send_error(path: &str, e: SendFail) -> SendError {
    match e {
        SendFail::Read(e) => SendError::ReadFailed(format!("failed to read {path}: {e}")),
        SendFail::Stdin(m) => SendError::StdinFailed(m),
    }
}
