//! Per-call store data: WASI context, resource table, limits, exec backend.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use wasmtime::component::ResourceTable;
use wasmtime::{StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::exec::ExecBackend;

/// Guest linear memory cap per call.
pub const GUEST_MEMORY_BYTES: usize = 512 << 20;

/// What the host shares with one component instance.
pub struct ShimState {
    wasi: WasiCtx,
    pub(crate) table: ResourceTable,
    pub(crate) limits: StoreLimits,
    pub(crate) backend: Arc<dyn ExecBackend>,
    pub(crate) execs: Arc<AtomicU64>,
}

impl ShimState {
    pub fn new(backend: Arc<dyn ExecBackend>) -> Self {
        // The component gets no preopens, no environment, no network: only
        // stderr (for panic messages) and random numbers.
        let wasi = WasiCtx::builder().inherit_stderr().build();
        ShimState {
            wasi,
            table: ResourceTable::new(),
            limits: StoreLimitsBuilder::new()
                .memory_size(GUEST_MEMORY_BYTES)
                .instances(8)
                .build(),
            backend,
            execs: Arc::new(AtomicU64::new(0)),
        }
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
