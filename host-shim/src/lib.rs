//! Native host shim for the sandbox-sync provider component.
//!
//! The component holds the policy; this crate supplies the mechanism and
//! hands it over as WIT imports:
//!
//! - [`exec`]: the backends, streaming exec into the sandbox
//!   (`sandbox-sync:provider/sandbox-exec`): a [`exec::local::LocalBackend`]
//!   process (optionally jailed in a sandbox root with its own mount and
//!   PID namespaces), a Kubernetes pod over WebSocket exec (`exec::kube`),
//!   a Daytona sandbox over its toolbox API (`exec::daytona`, which also
//!   serves `sandbox-sync:provider/sandbox-toolbox`) and a
//!   [`exec::scripted::ScriptedBackend`] fake.
//! - [`fs`]: host directories granted per call as `cap-std` capabilities
//!   (`sandbox-sync:provider/host-fs`).
//! - [`runtime`]: the wasmtime engine, the on-disk compile cache and one
//!   `InstancePre` per loaded component.
//! - [`provider`]: a sync call end to end: grants, a fresh store, limits.
//! - [`records`]: what the component keeps on the host between calls
//!   (`sandbox-sync:provider/sync-state`).
//!
//! - [`worker`]: the JSON-RPC plugin worker (`sandbox-sync serve`).
//! - [`backend`]: the backend a CLI flag set or a plugin config names;
//!   [`request`] and [`error`]: a call's input and typed failure;
//!   [`cpspec`] and [`doctor`]: `cp`'s `kubectl cp` syntax and the one-exec
//!   probe of a sandbox.
//!
//! The CLI lives in the binary.
#![deny(missing_docs)]

pub mod backend;
mod bindings;
pub mod cpspec;
pub mod doctor;
pub mod error;
pub mod exec;
pub mod fs;
mod host;
pub mod private_dir;
pub mod provider;
pub mod records;
pub mod request;
pub mod runtime;
mod state;
pub mod target_lock;
pub mod worker;

pub use error::SyncError;
pub use provider::{SyncOptions, SyncOutcome};
pub use request::{FileMapping, MappingKind, OperationResult, PostUploadCommand, SyncOperation};
pub use runtime::Runtime;
pub use sandbox_sync_core::ErrorKind;
