//! `sandbox-sync:provider/sandbox-exec` for the component.

use std::sync::atomic::Ordering;
use std::time::Duration;

use wasmtime::component::Resource;
use wasmtime_wasi::p2::{DynInputStream, DynOutputStream};

use crate::bindings::sandbox_exec::{ExecOptions, ExecStatus, Host, HostExecution};
use crate::exec::{Control, ExecRequest};
use crate::state::ShimState;
use crate::streams::{ExecStdin, ExecStdout};

/// A running sandbox process, as a component resource.
pub struct Execution {
    stdin: Option<DynOutputStream>,
    stdout: Option<DynInputStream>,
    control: Box<dyn Control>,
}

impl Host for ShimState {
    async fn start(
        &mut self,
        argv: Vec<String>,
        options: ExecOptions,
    ) -> wasmtime::Result<Result<Resource<Execution>, String>> {
        self.execs.fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            backend = self.backend.name(),
            timeout_ms = options.timeout_ms,
            "sandbox exec started"
        );
        let req = ExecRequest {
            argv,
            timeout: Duration::from_millis(options.timeout_ms),
            max_stderr: options.max_stderr_bytes,
        };
        let process = match self.backend.start(req).await {
            Ok(p) => p,
            Err(e) => return Ok(Err(e.to_string())),
        };
        let exec = Execution {
            stdin: Some(Box::new(ExecStdin::new(process.stdin))),
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
        let stream = match self.table.get_mut(&this)?.stdin.take() {
            Some(s) => s,
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
