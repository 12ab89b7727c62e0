//! `sandbox-sync:provider/sandbox-exec` for the component.

use std::sync::atomic::Ordering;
use std::time::Duration;

use wasmtime::component::Resource;
use wasmtime_wasi::p2::{DynInputStream, DynOutputStream};

use super::SendFailure;
use crate::bindings::sandbox_exec::{
    ExecOptions, ExecStatus, FileSend, Host, HostExecution, SendError,
};
use crate::exec::pipes::{ExecStdin, ExecStdout, WeakStdin};
use crate::exec::{Control, ExecRequest};
use crate::fs::GrantedDir;
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
    fn convert_send_error(&mut self, err: SendFailure) -> wasmtime::Result<SendError> {
        match err {
            SendFailure::Send(e) => Ok(e),
            SendFailure::Trap(e) => Err(e),
        }
    }

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
    ) -> Result<(), SendFailure> {
        let exec = self.table.get(&this)?;
        let pipe = match (&exec.stdin, exec.pipe.upgrade()) {
            (None, Some(pipe)) => pipe,
            (Some(_), _) => return Err(SendError::StdinFailed("take stdin first".into()).into()),
            (None, None) => return Err(SendError::StdinFailed("stdin was closed".into()).into()),
        };
        Ok(pipe.send_files(self.table.get(&source)?, files).await?)
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
