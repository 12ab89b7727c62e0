//! What to check after a failed sync: from the error's kind and, for a
//! `transport` failure, the backend's own typed error (a Daytona
//! `ToolboxError`, a kube `KubeError`), so a refused key reads as a key
//! problem and a stopped sandbox as one, on the backend that was used.

use sandbox_sync_host::{ErrorKind, SyncError};

/// A stable name for what the backend said (the JSON error's `cause`),
/// where the host kept its typed error.
pub(super) fn cause(e: &SyncError) -> Option<&'static str> {
    e.cause.as_ref().and_then(|c| c.code())
}

/// One line on what to check, for a sync on `backend` (its `name()`).
pub(super) fn hint(e: &SyncError, backend: &str) -> &'static str {
    match e.kind {
        ErrorKind::Confinement => "the sandbox path must stay under --remote-dir (default: its parent directory), and no symlink may lead out of it",
        ErrorKind::InvalidRequest => "check that the source exists and is a file or directory",
        ErrorKind::LimitExceeded => "raise --timeout-ms, or check what the sandbox is sending",
        ErrorKind::UnsafeArchive => "the sandbox sent an archive that breaks policy; nothing was written",
        ErrorKind::CommandFailed => "see the sandbox's stderr above",
        ErrorKind::SourceChanged => "the source changed while it was being copied; copy it again",
        ErrorKind::Io => "check free space and permissions on the host target",
        ErrorKind::Transport => transport(e, backend),
    }
}

/// The backend's typed error's own hint, else the backend's general one.
fn transport(e: &SyncError, backend: &str) -> &'static str {
    e.cause
        .as_ref()
        .and_then(|c| c.hint())
        .unwrap_or(match backend {
            "daytona" => "check --daytona-toolbox-url (or DAYTONA_API_URL), the sandbox id, and that the sandbox is started",
            "kube" => "check that the pod is Running, the container name, and your kubeconfig/context",
            _ => "check that the sandbox root exists and holds a working sh and tar",
        })
}
