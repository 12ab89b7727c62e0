//! One module per imported WIT interface: look up, check, delegate, convert.

pub mod exec;
pub mod fs;
pub mod records;
pub mod report;
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

impl From<crate::fs::Error> for FsFailure {
    fn from(e: crate::fs::Error) -> Self {
        use crate::bindings::host_fs::FsError;
        use crate::fs::Error;
        FsFailure::Fs(match e {
            Error::NotFound(m) => FsError::NotFound(m),
            Error::AlreadyExists(m) => FsError::AlreadyExists(m),
            Error::NotPermitted(m) => FsError::NotPermitted(m),
            Error::InvalidName(m) => FsError::InvalidName(m),
            Error::NoSpace(m) => FsError::NoSpace(m),
            Error::Io(m) => FsError::Io(m),
        })
    }
}

impl From<crate::exec::SendError> for SendFailure {
    fn from(e: crate::exec::SendError) -> Self {
        use crate::bindings::sandbox_exec::SendError;
        use crate::exec::SendError as Mechanism;
        SendFailure::Send(match e {
            Mechanism::SourceChanged(m) => SendError::SourceChanged(m),
            Mechanism::ReadFailed(m) => SendError::ReadFailed(m),
            Mechanism::StdinFailed(m) => SendError::StdinFailed(m),
        })
    }
}
