//! Per-call store data: WASI context, resource table, limits, exec backend.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::bindings::sandbox_exec::Compression;
use crate::exec::codec::{Codec, CodecMeter};
use crate::exec::ExecBackend;

/// Guest linear memory cap per call, by default.
pub const GUEST_MEMORY_BYTES: usize = 512 << 20;

/// What the host shares with one component instance.
pub struct ShimState {
    wasi: WasiCtx,
    pub(crate) table: ResourceTable,
    pub(crate) limits: MemoryLimits,
    pub(crate) backend: Arc<dyn ExecBackend>,
    pub(crate) execs: Arc<AtomicU64>,
    /// Toolbox calls (uploads, commands, downloads) this call made.
    pub(crate) toolbox_calls: Arc<AtomicU64>,
    /// No sandbox exec of this call may run past this instant.
    pub(crate) exec_deadline: Option<tokio::time::Instant>,
    /// The call's compression policy, as the component asks for it.
    pub(crate) compression: Compression,
    /// Every compressed stream of the call, for telemetry.
    pub(crate) codecs: Vec<CodecUse>,
    /// Features the sandbox turned off, as the component reported them
    /// (`sync-report`), each once.
    pub(crate) degraded: Vec<crate::provider::Degraded>,
    /// The symlinks sync-out left out, by operation (`sync-report`).
    pub(crate) skipped: Vec<crate::request::SkippedLinks>,
    /// Sync-out refuses a symlink that leaves its mapping instead.
    pub(crate) strict_links: bool,
    /// Syncs may keep unchanged target files.
    pub(crate) incremental: bool,
    /// Incremental syncs judge every file by its content.
    pub(crate) checksum: bool,
    /// The sandbox is across a network link.
    pub(crate) remote: bool,
    /// Where the component's records between calls live (none: it keeps
    /// none, and incremental sync-out keeps nothing).
    pub(crate) records: Option<crate::records::RecordStore>,
    /// A cap the host enforced on what the sandbox's side sent (a toolbox
    /// answer too long): the call's error is `limit-exceeded`, this message.
    pub(crate) host_limit: Option<String>,
    /// The first error the backend gave (a start or a wait that failed):
    /// the component gets its text, a `transport` failure carries it typed.
    pub(crate) backend_failure: Option<crate::error::BackendFailure>,
}

/// The store's limits, and the most linear memory the component grew to
/// (a wasm memory never shrinks, so its peak is its size at the end).
pub struct MemoryLimits {
    limits: StoreLimits,
    peak: usize,
    refused: Option<usize>,
}

impl MemoryLimits {
    /// The largest linear memory the component was granted, in bytes.
    pub fn peak(&self) -> usize {
        self.peak
    }

    /// The size a refused growth asked for, if any was refused.
    pub fn refused(&self) -> Option<usize> {
        self.refused
    }
}

impl ResourceLimiter for MemoryLimits {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let grow = self.limits.memory_growing(current, desired, maximum)?;
        if grow {
            self.peak = self.peak.max(desired);
        } else {
            self.refused = Some(desired);
        }
        Ok(grow)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.limits.table_growing(current, desired, maximum)
    }

    fn instances(&self) -> usize {
        self.limits.instances()
    }

    fn tables(&self) -> usize {
        self.limits.tables()
    }

    fn memories(&self) -> usize {
        self.limits.memories()
    }
}

/// One compressed stream: which, with what, and what it moved.
pub struct CodecUse {
    /// `"stdin"` or `"stdout"`.
    pub stream: &'static str,
    /// The codec.
    pub codec: Codec,
    /// What it moved.
    pub meter: Arc<CodecMeter>,
}

impl ShimState {
    pub fn new(backend: Arc<dyn ExecBackend>, memory_bytes: usize) -> Self {
        // The component gets no preopens, no environment, no network: only
        // stderr (for panic messages) and random numbers.
        let wasi = WasiCtx::builder().inherit_stderr().build();
        ShimState {
            wasi,
            table: ResourceTable::new(),
            limits: MemoryLimits {
                limits: StoreLimitsBuilder::new()
                    .memory_size(memory_bytes)
                    .instances(8)
                    .build(),
                peak: 0,
                refused: None,
            },
            backend,
            execs: Arc::new(AtomicU64::new(0)),
            toolbox_calls: Arc::new(AtomicU64::new(0)),
            exec_deadline: None,
            compression: Compression::None,
            codecs: Vec::new(),
            degraded: Vec::new(),
            skipped: Vec::new(),
            strict_links: false,
            checksum: false,
            incremental: false,
            remote: false,
            records: None,
            host_limit: None,
            backend_failure: None,
        }
    }

    /// Notes `e` as the call's backend failure (the first one stands) and
    /// returns its text, which is what the component gets.
    pub(crate) fn backend_failed(&mut self, e: crate::exec::ExecError) -> String {
        let text = e.to_string();
        if let crate::exec::ExecError::Limit(m) = &e {
            self.host_limit.get_or_insert_with(|| m.clone());
        } else if self.backend_failure.is_none() {
            self.backend_failure = Some(crate::error::BackendFailure::new(e));
        }
        text
    }

    /// Sets the call's compression policy.
    pub fn with_compression(mut self, compression: Compression) -> Self {
        self.compression = compression;
        self
    }

    /// Lets sync-in keep files its targets already hold.
    pub fn with_incremental(mut self, incremental: bool) -> Self {
        self.incremental = incremental;
        self
    }

    /// Has incremental syncs judge every file by its content.
    pub fn with_checksum(mut self, checksum: bool) -> Self {
        self.checksum = checksum;
        self
    }

    /// Has sync-out refuse symlinks that leave their mapping.
    pub fn with_strict_links(mut self, strict: bool) -> Self {
        self.strict_links = strict;
        self
    }

    /// Tells the component whether the sandbox is across a network link.
    pub fn with_remote(mut self, remote: bool) -> Self {
        self.remote = remote;
        self
    }

    /// Where the component keeps its records between calls.
    pub fn with_records(mut self, records: Option<crate::records::RecordStore>) -> Self {
        self.records = records;
        self
    }

    /// The call's compressed streams.
    pub fn codecs(&self) -> &[CodecUse] {
        &self.codecs
    }

    /// Bounds every exec this call starts by `deadline`, whatever timeout
    /// the component asks for: a provider that runs many execs (or a
    /// cleanup exec after a timeout) cannot stretch the call.
    pub fn with_exec_deadline(mut self, deadline: tokio::time::Instant) -> Self {
        self.exec_deadline = Some(deadline);
        self
    }

    pub fn exec_count(&self) -> u64 {
        self.execs.load(Ordering::Relaxed)
    }

    /// Toolbox calls made so far (each is one HTTP request, or two for a
    /// download that also removes its file).
    pub fn toolbox_call_count(&self) -> u64 {
        self.toolbox_calls.load(Ordering::Relaxed)
    }
}

impl WasiView for ShimState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}
