//! `sandbox-sync:provider/sandbox-exec` for the component.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::Resource;
use wasmtime_wasi::p2::{DynInputStream, DynOutputStream};

use super::SendFailure;
use crate::bindings::sandbox_exec::{
    Codec, CodecStats, Compression, ExecOptions, ExecStatus, FileSend, Host, HostExecution,
    SendError,
};
use crate::exec::codec::{self, CodecMeter};
use crate::exec::pipes::{ExecStdin, ExecStdout, WeakStdin, WeakStdout};
use crate::exec::{self as mechanism, Control, ExecRequest, Process};
use crate::fs::GrantedDir;
use crate::state::{CodecUse, ShimState};

/// A running sandbox process, as a component resource.
pub struct Execution {
    /// Until the component takes it.
    stdin: Option<ExecStdin>,
    /// For `send-files`; does not keep stdin open after the component
    /// dropped its stream.
    pipe: WeakStdin,
    stdout: Option<DynInputStream>,
    /// The same stream as `stdout`, to switch it to decompressing; does
    /// not keep it open.
    stdout_pipe: WeakStdout,
    control: Box<dyn Control>,
    /// The transport can end stdin (a compressed stream needs that).
    stdin_ends: bool,
}

impl Execution {
    /// Stdin, once the component has taken it and while it keeps it.
    fn taken_stdin(&self) -> Result<ExecStdin, String> {
        match (&self.stdin, self.pipe.upgrade()) {
            (None, Some(pipe)) => Ok(pipe),
            (Some(_), _) => Err("take stdin first".into()),
            (None, None) => Err("stdin was closed".into()),
        }
    }
}

impl ShimState {
    /// `timeout_ms`, clamped to what is left of the call's deadline; `None`
    /// once it has passed.
    pub(crate) fn exec_timeout(&self, timeout_ms: u64) -> Option<Duration> {
        let timeout = Duration::from_millis(timeout_ms);
        let Some(deadline) = self.exec_deadline else {
            return Some(timeout);
        };
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        (!left.is_zero()).then(|| timeout.min(left))
    }

    /// `process` as a component resource.
    pub(crate) fn push_execution(
        &mut self,
        process: Process,
    ) -> wasmtime::Result<Resource<Execution>> {
        let stdin = ExecStdin::new(process.stdin);
        let stdout = ExecStdout::new(process.stdout);
        let exec = Execution {
            pipe: stdin.downgrade(),
            stdin: Some(stdin),
            stdout_pipe: stdout.downgrade(),
            stdout: Some(Box::new(stdout)),
            control: process.control,
            stdin_ends: process.stdin_ends,
        };
        Ok(self.table.push(exec)?)
    }
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
        let Some(timeout) = self.exec_timeout(options.timeout_ms) else {
            return Ok(Err("the sync's deadline has passed".into()));
        };
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
            Err(e) => return Ok(Err(self.backend_failed(e))),
        };
        Ok(Ok(self.push_execution(process)?))
    }

    async fn transfer_compression(&mut self) -> wasmtime::Result<Compression> {
        Ok(self.compression)
    }

    async fn transfer_incremental(&mut self) -> wasmtime::Result<bool> {
        Ok(self.incremental)
    }

    async fn transfer_remote(&mut self) -> wasmtime::Result<bool> {
        Ok(self.remote)
    }

    async fn transfer_strict_links(&mut self) -> wasmtime::Result<bool> {
        Ok(self.strict_links)
    }

    async fn transfer_checksum(&mut self) -> wasmtime::Result<bool> {
        Ok(self.checksum)
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
        let pipe = self
            .table
            .get(&this)?
            .taken_stdin()
            .map_err(SendError::StdinFailed)?;
        let files = files.into_iter().map(planned).collect();
        Ok(pipe.send_files(self.table.get(&source)?, files).await?)
    }

    async fn stdin_ends(&mut self, this: Resource<Execution>) -> wasmtime::Result<bool> {
        Ok(self.table.get(&this)?.stdin_ends)
    }

    async fn compress_stdin(
        &mut self,
        this: Resource<Execution>,
        codec: Codec,
    ) -> wasmtime::Result<Result<(), String>> {
        let exec = self.table.get(&this)?;
        if !exec.stdin_ends {
            return Ok(Err(format!(
                "the {} transport cannot end stdin, which a compressed stream needs",
                self.backend.name()
            )));
        }
        let pipe = match exec.taken_stdin() {
            Ok(pipe) => pipe,
            Err(e) => return Ok(Err(e)),
        };
        let codec = core_codec(codec);
        let meter = Arc::new(CodecMeter::default());
        if let Err(e) = pipe.compress(codec, Arc::clone(&meter)) {
            return Ok(Err(e));
        }
        tracing::debug!(codec = codec::name(codec), "compressing stdin");
        self.codecs.push(CodecUse {
            stream: "stdin",
            codec,
            meter,
        });
        Ok(Ok(()))
    }

    async fn finish_compressed_stdin(
        &mut self,
        this: Resource<Execution>,
    ) -> wasmtime::Result<Result<CodecStats, String>> {
        Ok(self
            .table
            .get(&this)?
            .taken_stdin()
            .and_then(|pipe| pipe.finish_compressed())
            .map(codec_stats))
    }

    async fn decompress_stdout(
        &mut self,
        this: Resource<Execution>,
        codec: Codec,
        max_wire_bytes: u64,
    ) -> wasmtime::Result<Result<(), String>> {
        let exec = self.table.get(&this)?;
        if exec.stdout.is_some() {
            return Ok(Err("take stdout first".into()));
        }
        let Some(stdout) = exec.stdout_pipe.upgrade() else {
            return Ok(Err("stdout was closed".into()));
        };
        let codec = core_codec(codec);
        let meter = Arc::new(CodecMeter::default());
        stdout.decompress(codec, max_wire_bytes, Arc::clone(&meter));
        tracing::debug!(codec = codec::name(codec), "decompressing stdout");
        self.codecs.push(CodecUse {
            stream: "stdout",
            codec,
            meter,
        });
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
            Err(e) => Ok(Err(self.backend_failed(e))),
        }
    }

    async fn drop(&mut self, this: Resource<Execution>) -> wasmtime::Result<()> {
        let mut exec = self.table.delete(this)?;
        exec.control.abort();
        Ok(())
    }
}

/// The component's file to send, in the pipe's terms.
fn planned(f: FileSend) -> mechanism::PlannedFile {
    let FileSend {
        prefix,
        path,
        size,
        mtime_sec,
        mtime_nsec,
        device,
        inode,
    } = f;
    mechanism::PlannedFile {
        prefix,
        path,
        size,
        mtime_sec,
        mtime_nsec,
        device,
        inode,
    }
}

fn core_codec(c: Codec) -> codec::Codec {
    match c {
        Codec::Gzip => codec::Codec::Gzip,
        Codec::Zstd => codec::Codec::Zstd,
    }
}

fn codec_stats(s: codec::CodecStats) -> CodecStats {
    let codec::CodecStats {
        plain_bytes,
        wire_bytes,
        busy_us,
    } = s;
    CodecStats {
        plain_bytes,
        wire_bytes,
        busy_us,
    }
}
