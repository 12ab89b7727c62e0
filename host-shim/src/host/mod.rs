//! One module per imported WIT interface: look up, check, delegate, convert.

pub mod exec;
pub mod fs;
pub mod records;
pub mod toolbox;

impl crate::bindings::types::Host for crate::state::ShimState {}

/// A `host-fs` call's failure: the component's typed error, or a trap.
#[derive(Debug)]
pub enum FsFailure {
    /// Returned to the component.
    Fs(crate::bindings::host_fs::FsError),
    /// Traps the component (a broken resource handle, say).
    Trap(wasmtime::Error),
}

/// An `execution.send-files` failure: the component's typed error, or a trap.
#[derive(Debug)]
pub enum SendFailure {
    /// Returned to the component.
    Send(crate::bindings::sandbox_exec::SendError),
    /// Traps the component.
    Trap(wasmtime::Error),
}

impl From<crate::bindings::host_fs::FsError> for FsFailure {
    fn from(e: crate::bindings::host_fs::FsError) -> Self {
        FsFailure::Fs(e)
    }
}

impl From<crate::bindings::sandbox_exec::SendError> for SendFailure {
    fn from(e: crate::bindings::sandbox_exec::SendError) -> Self {
        SendFailure::Send(e)
    }
}

impl From<wasmtime::component::ResourceTableError> for FsFailure {
    fn from(e: wasmtime::component::ResourceTableError) -> Self {
        FsFailure::Trap(e.into())
    }
}

impl From<wasmtime::component::ResourceTableError> for SendFailure {
    fn from(e: wasmtime::component::ResourceTableError) -> Self {
        SendFailure::Trap(e.into())
    }
}
