//! The `kube` backend's errors: one variant per failure.

use std::path::PathBuf;
use std::time::Duration;

use kube::config::{InferConfigError, KubeconfigError};

use crate::exec::ExecError;

/// Errors of the `kube` backend.
///
/// They reach the shim as [`ExecError::BackendStart`] (before the process
/// runs) or [`ExecError::BackendWait`] (after); [`KubeError::find`] gets
/// them back.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    /// The kubeconfig file could not be read or parsed.
    #[error("failed to read kubeconfig {path}: {source}")]
    ReadKubeconfig {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: KubeconfigError,
    },
    /// The kubeconfig has no usable context, cluster or user.
    #[error("failed to load kubeconfig: {0}")]
    LoadKubeconfig(#[source] KubeconfigError),
    /// Neither `KUBECONFIG`/`~/.kube/config` nor an in-cluster service
    /// account gave a configuration.
    #[error("failed to infer a Kubernetes configuration: {0}")]
    InferConfig(#[source] InferConfigError),
    /// The client could not be built (TLS setup, proxy).
    #[error("failed to build the Kubernetes client: {0}")]
    BuildClient(#[source] kube::Error),
    /// The pod does not exist.
    #[error("pod {namespace}/{pod} not found")]
    PodNotFound {
        /// Its namespace.
        namespace: String,
        /// Its name.
        pod: String,
    },
    /// The pod exists but is not `Running`.
    #[error("pod {namespace}/{pod} is not running (phase {phase})")]
    PodNotRunning {
        /// Its namespace.
        namespace: String,
        /// Its name.
        pod: String,
        /// `status.phase` (`Unknown` when unset).
        phase: String,
    },
    /// The configured container is not in the pod's spec.
    #[error("pod {namespace}/{pod} has no container {container:?} (containers: {available:?})")]
    ContainerMissing {
        /// The pod's namespace.
        namespace: String,
        /// The pod.
        pod: String,
        /// The configured container.
        container: String,
        /// The containers it has.
        available: Vec<String>,
    },
    /// No container was configured and the pod has several.
    #[error("pod {namespace}/{pod} has several containers; choose one of {available:?}")]
    ContainerAmbiguous {
        /// The pod's namespace.
        namespace: String,
        /// The pod.
        pod: String,
        /// The containers it has.
        available: Vec<String>,
    },
    /// The container exists but is waiting or terminated.
    #[error("container {container:?} in pod {namespace}/{pod} is not running ({state})")]
    ContainerNotRunning {
        /// The pod's namespace.
        namespace: String,
        /// The pod.
        pod: String,
        /// The container.
        container: String,
        /// `waiting: <reason>` or `terminated: <reason>`.
        state: String,
    },
    /// Reading the pod failed for another reason (auth, network).
    #[error("failed to get pod {namespace}/{pod}: {source}")]
    GetPod {
        /// Its namespace.
        namespace: String,
        /// Its name.
        pod: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// The exec request or the WebSocket upgrade failed.
    #[error("failed to exec in pod {namespace}/{pod}: {source}")]
    Connect {
        /// The pod's namespace.
        namespace: String,
        /// The pod.
        pod: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// Reading the pod and opening the exec stream took the whole timeout.
    #[error("timed out after {0:?} starting the exec")]
    ConnectTimeout(Duration),
    /// The status frame on channel 3 is not a `metav1.Status`.
    #[error("exec status frame is not a Status: {0}")]
    BadStatus(#[source] serde_json::Error),
    /// The stream ended without a status frame on channel 3: the exit
    /// status is unknown.
    #[error("connection closed before a status frame")]
    NoStatus,
    /// The stream failed before a status frame on channel 3.
    #[error("connection closed before a status frame: {0}")]
    ConnectionLost(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The status frame reports a failure other than a non-zero exit
    /// (for example the executable was not found).
    #[error("exec failed: {message} (reason {reason})")]
    ExecFailed {
        /// `status.reason`.
        reason: String,
        /// `status.message`.
        message: String,
    },
    /// A `NonZeroExitCode` status whose `ExitCode` cause is not an `i32`.
    #[error("exec status frame has no valid exit code: {0:?}")]
    BadExitCode(String),
    /// The session task died (panic or runtime shutdown).
    #[error("the exec session task failed: {0}")]
    Supervisor(String),
    /// `wait` was called again after it had failed.
    #[error("{0}")]
    Earlier(String),
}

impl KubeError {
    /// A stable, machine-readable name for the failure (the CLI's JSON
    /// `cause`).
    pub fn code(&self) -> &'static str {
        match self {
            KubeError::ReadKubeconfig { .. }
            | KubeError::LoadKubeconfig(_)
            | KubeError::InferConfig(_) => "kubeconfig",
            KubeError::BuildClient(_) => "client",
            KubeError::PodNotFound { .. } => "pod-not-found",
            KubeError::PodNotRunning { .. } => "pod-not-running",
            KubeError::ContainerMissing { .. } => "container-missing",
            KubeError::ContainerAmbiguous { .. } => "container-ambiguous",
            KubeError::ContainerNotRunning { .. } => "container-not-running",
            KubeError::GetPod { .. } => "get-pod",
            KubeError::Connect { .. } => "connect",
            KubeError::ConnectTimeout(_) => "connect-timeout",
            KubeError::BadStatus(_) | KubeError::NoStatus | KubeError::BadExitCode(_) => {
                "bad-status"
            }
            KubeError::ConnectionLost(_) => "connection-lost",
            KubeError::ExecFailed { .. } => "exec-failed",
            KubeError::Supervisor(_) | KubeError::Earlier(_) => "session",
        }
    }

    /// What a user should check, where this failure says more than the
    /// backend's general hint.
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            KubeError::PodNotFound { .. } => {
                Some("check the pod name and --namespace (or the kubeconfig context's namespace)")
            }
            KubeError::PodNotRunning { .. } | KubeError::ContainerNotRunning { .. } => {
                Some("the pod is not Running yet: wait for it, or check its events")
            }
            KubeError::ContainerMissing { .. } | KubeError::ContainerAmbiguous { .. } => {
                Some("check --container against the pod's containers")
            }
            KubeError::ReadKubeconfig { .. }
            | KubeError::LoadKubeconfig(_)
            | KubeError::InferConfig(_) => {
                Some("check your kubeconfig (--kubeconfig, KUBECONFIG) and its context")
            }
            _ => None,
        }
    }

    /// The `KubeError` inside an [`ExecError`] from this backend, if any.
    pub fn find(err: &ExecError) -> Option<&KubeError> {
        match err {
            ExecError::BackendStart { source, .. } | ExecError::BackendWait(source) => {
                source.downcast_ref::<KubeError>()
            }
            _ => None,
        }
    }
}

pub(super) fn start_error(program: &str, err: KubeError) -> ExecError {
    ExecError::BackendStart {
        program: program.to_owned(),
        source: Box::new(err),
    }
}

pub(super) fn wait_error(err: KubeError) -> ExecError {
    ExecError::BackendWait(Box::new(err))
}
