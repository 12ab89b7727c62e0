//! `sandbox-sync:provider/sandbox-toolbox` for the component: each call is
//! the backend's toolbox operation, handed over as an `execution`.

use std::sync::atomic::Ordering;
use std::time::Duration;

use wasmtime::component::Resource;

use super::exec::Execution;
use crate::bindings::sandbox_exec::ExecOptions;
use crate::bindings::sandbox_toolbox::Host;
use crate::exec::{ExecError, Process, Toolbox};
use crate::state::ShimState;

impl ShimState {
    /// Starts one toolbox operation within the call's deadline.
    fn toolbox_call(
        &mut self,
        what: &'static str,
        options: &ExecOptions,
        call: impl FnOnce(&dyn Toolbox, Duration) -> Result<Process, ExecError>,
    ) -> wasmtime::Result<Result<Resource<Execution>, String>> {
        let Some(timeout) = self.exec_timeout(options.timeout_ms) else {
            return Ok(Err("the sync's deadline has passed".into()));
        };
        let Some(toolbox) = self.backend.toolbox() else {
            return Ok(Err(format!(
                "the {} backend has no toolbox; use sandbox-exec",
                self.backend.name()
            )));
        };
        tracing::info!(
            backend = self.backend.name(),
            call = what,
            timeout_ms = timeout.as_millis() as u64,
            "toolbox call started"
        );
        let process = match call(toolbox, timeout) {
            Ok(p) => p,
            Err(e) => return Ok(Err(self.backend_failed(e))),
        };
        self.toolbox_calls.fetch_add(1, Ordering::Relaxed);
        Ok(Ok(self.push_execution(process)?))
    }
}

impl Host for ShimState {
    async fn available(&mut self) -> wasmtime::Result<bool> {
        Ok(self.backend.toolbox().is_some())
    }

    async fn upload(
        &mut self,
        path: String,
        options: ExecOptions,
    ) -> wasmtime::Result<Result<Resource<Execution>, String>> {
        self.toolbox_call("upload", &options, |t, timeout| t.upload(path, timeout))
    }

    async fn run(
        &mut self,
        command: String,
        options: ExecOptions,
    ) -> wasmtime::Result<Result<Resource<Execution>, String>> {
        // A command is what `execs` counts on every transport.
        self.execs.fetch_add(1, Ordering::Relaxed);
        self.toolbox_call("run", &options, |t, timeout| t.run(command, timeout))
    }

    async fn download(
        &mut self,
        path: String,
        then_remove: bool,
        options: ExecOptions,
    ) -> wasmtime::Result<Result<Resource<Execution>, String>> {
        self.toolbox_call("download", &options, |t, timeout| {
            t.download(path, then_remove, timeout)
        })
    }

    async fn remove(
        &mut self,
        path: String,
        options: ExecOptions,
    ) -> wasmtime::Result<Result<Resource<Execution>, String>> {
        self.toolbox_call("remove", &options, |t, timeout| t.remove(path, timeout))
    }
}
