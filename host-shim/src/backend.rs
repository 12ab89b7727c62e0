//! Choosing an exec backend from CLI flags or plugin config.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::exec::local::LocalBackend;
use crate::exec::ExecBackend;

/// Why a backend could not be chosen or built.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The configuration names no known backend.
    #[error("unknown backend {0:?} (expected \"local\" or \"kube\")")]
    Unknown(String),
    /// The configuration lacks something the backend needs.
    #[error("{0}")]
    Missing(&'static str),
    /// The sandbox root cannot be used.
    #[error("sandbox root {root}: {source}")]
    SandboxRoot {
        /// The root.
        root: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The kube client cannot be built (an unusable kubeconfig, say).
    #[cfg(feature = "kube")]
    #[error("kube backend for pod {target}: {source}")]
    Kube {
        /// `namespace/pod`.
        target: String,
        /// Why.
        #[source]
        source: Box<crate::exec::kube::KubeError>,
    },
    /// This build has no kube backend.
    #[error("this build has no kube backend (feature \"kube\")")]
    NoKube,
}

impl BackendError {
    /// True when the request itself is wrong (a usage error), rather than
    /// the environment it names.
    pub fn is_usage(&self) -> bool {
        matches!(self, BackendError::Unknown(_) | BackendError::Missing(_))
    }
}

/// Where sandbox commands run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendConfig {
    /// A local process, optionally in a sandbox root and as another user.
    Local {
        /// Chroot into this directory with new mount and PID namespaces.
        sandbox_root: Option<PathBuf>,
        /// Run as this uid.
        user: Option<u32>,
        /// Delay each exec start.
        exec_latency: Duration,
    },
    /// A Kubernetes pod.
    Kube {
        /// Namespace (the kubeconfig context's when absent).
        namespace: Option<String>,
        /// Pod name.
        pod: String,
        /// Container (the pod's first when absent).
        container: Option<String>,
        /// Kubeconfig file (else `KUBECONFIG`, `~/.kube/config` or in-cluster).
        kubeconfig: Option<PathBuf>,
        /// Kubeconfig context.
        context: Option<String>,
    },
}

impl BackendConfig {
    /// Reads plugin `config` and lease metadata.
    ///
    /// `config.backend` is `"local"` (default; `config.sandboxRoot`,
    /// `config.sandboxUser`) or `"kube"`: namespace from `config.namespace`
    /// or `lease.metadata.namespace`; pod from `config.pod`,
    /// `lease.metadata.podName`, `lease.metadata.pod`, else the lease's
    /// `providerLeaseId`; container from `config.container` or
    /// `lease.metadata.container`; `config.kubeconfig`, `config.context`.
    ///
    /// # Errors
    /// An unknown backend or a missing namespace/pod.
    pub fn from_plugin(
        config: &Map<String, Value>,
        lease_id: Option<&str>,
        meta: &Map<String, Value>,
    ) -> Result<Self, BackendError> {
        let s =
            |m: &Map<String, Value>, k: &str| m.get(k).and_then(Value::as_str).map(str::to_owned);
        match config.get("backend").and_then(Value::as_str).unwrap_or("local") {
            "local" => Ok(BackendConfig::Local {
                sandbox_root: s(config, "sandboxRoot").map(PathBuf::from),
                user: config.get("sandboxUser").and_then(Value::as_u64).and_then(|u| u32::try_from(u).ok()),
                exec_latency: Duration::ZERO,
            }),
            "kube" => Ok(BackendConfig::Kube {
                namespace: Some(
                    s(config, "namespace")
                        .or_else(|| s(meta, "namespace"))
                        .ok_or(BackendError::Missing(
                            "kube backend needs config.namespace or lease.metadata.namespace",
                        ))?,
                ),
                pod: s(config, "pod")
                    .or_else(|| s(meta, "podName"))
                    .or_else(|| s(meta, "pod"))
                    .or_else(|| lease_id.map(str::to_owned))
                    .ok_or(BackendError::Missing(
                        "kube backend needs config.pod, lease.metadata.podName or a providerLeaseId",
                    ))?,
                container: s(config, "container").or_else(|| s(meta, "container")),
                kubeconfig: s(config, "kubeconfig").map(PathBuf::from),
                context: s(config, "context"),
            }),
            other => Err(BackendError::Unknown(other.to_owned())),
        }
    }

    /// Builds the backend.
    ///
    /// # Errors
    /// A sandbox root without `/bin/sh`, or an unusable kubeconfig.
    pub async fn build(&self) -> Result<Arc<dyn ExecBackend>, BackendError> {
        match self {
            BackendConfig::Local {
                sandbox_root,
                user,
                exec_latency,
            } => {
                let mut b = match sandbox_root {
                    Some(root) => LocalBackend::sandbox_root(root).map_err(|source| {
                        BackendError::SandboxRoot {
                            root: root.clone(),
                            source,
                        }
                    })?,
                    None => LocalBackend::host(),
                };
                if let Some(uid) = user {
                    b = b.user(*uid);
                }
                Ok(Arc::new(b.exec_latency(*exec_latency)))
            }
            #[cfg(feature = "kube")]
            BackendConfig::Kube {
                namespace,
                pod,
                container,
                kubeconfig,
                context,
            } => {
                let b = crate::exec::kube::KubeBackend::from_config(
                    kubeconfig.clone(),
                    context.clone(),
                    namespace.clone(),
                    pod.clone(),
                    container.clone(),
                )
                .await
                .map_err(|source| BackendError::Kube {
                    target: format!(
                        "{}/{pod}",
                        namespace.as_deref().unwrap_or("(context namespace)")
                    ),
                    source: Box::new(source),
                })?;
                Ok(Arc::new(b))
            }
            #[cfg(not(feature = "kube"))]
            BackendConfig::Kube { .. } => Err(BackendError::NoKube),
        }
    }
}
