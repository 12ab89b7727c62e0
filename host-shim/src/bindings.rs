//! Generated host bindings for the `provider` world.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "provider",
    imports: { default: async | trappable },
    exports: { default: async },
    with: {
        "wasi:io": wasmtime_wasi::p2::bindings::io,
        "sandbox-sync:provider/sandbox-exec.execution": crate::host::exec::Execution,
        "sandbox-sync:provider/host-fs.granted-dir": crate::fs::GrantedDir,
    },
});

pub use sandbox_sync::provider::{host_fs, sandbox_exec, types};
