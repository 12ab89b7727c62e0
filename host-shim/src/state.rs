//! Per-call store data: WASI context, resource table, limits, exec backend.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use wasmtime::component::ResourceTable;
use wasmtime::{StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::exec::ExecBackend;

/// Guest linear memory cap per call, by default.
pub const GUEST_MEMORY_BYTES: usize = 512 << 20;

/// What the host shares with one component instance.
pub struct ShimState {
    wasi: WasiCtx,
    pub(crate) table: ResourceTable,
    pub(crate) limits: StoreLimits,
    pub(crate) backend: Arc<dyn ExecBackend>,
    pub(crate) execs: Arc<AtomicU64>,
    /// No sandbox exec of this call may run past this instant.
    pub(crate) exec_deadline: Option<tokio::time::Instant>,
}

impl ShimState {
    pub fn new(backend: Arc<dyn ExecBackend>, memory_bytes: usize) -> Self {
        // The component gets no preopens, no environment, no network: only
        // stderr (for panic messages) and random numbers.
        let wasi = WasiCtx::builder().inherit_stderr().build();
        ShimState {
            wasi,
            table: ResourceTable::new(),
            limits: StoreLimitsBuilder::new()
                .memory_size(memory_bytes)
                .instances(8)
                .build(),
            backend,
            execs: Arc::new(AtomicU64::new(0)),
            exec_deadline: None,
        }
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
}

impl WasiView for ShimState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}
