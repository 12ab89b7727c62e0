//! Generated host bindings for the `provider` world.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "provider",
    imports: { default: async | trappable },
    // Host functions return these and `?` works; a trap is its own variant.
    trappable_error_type: {
        "sandbox-sync:provider/host-fs.fs-error" => crate::host::FsFailure,
        "sandbox-sync:provider/sandbox-exec.send-error" => crate::host::SendFailure,
    },
    exports: { default: async },
    with: {
        "wasi:io": wasmtime_wasi::p2::bindings::io,
        "sandbox-sync:provider/sandbox-exec.execution": crate::host::exec::Execution,
        "sandbox-sync:provider/host-fs.granted-dir": crate::fs::GrantedDir,
    },
});

pub use sandbox_sync::provider::{
    host_fs, sandbox_exec, sandbox_toolbox, sync_report, sync_state, types,
};
