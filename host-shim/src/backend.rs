//! Choosing an exec backend from CLI flags or plugin config.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use serde_json::{Map, Value};

use crate::exec::local::LocalBackend;
use crate::exec::ExecBackend;

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
    ) -> anyhow::Result<Self> {
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
                        .context("kube backend needs config.namespace or lease.metadata.namespace")?,
                ),
                pod: s(config, "pod")
                    .or_else(|| s(meta, "podName"))
                    .or_else(|| s(meta, "pod"))
                    .or_else(|| lease_id.map(str::to_owned))
                    .context("kube backend needs config.pod, lease.metadata.podName or a providerLeaseId")?,
                container: s(config, "container").or_else(|| s(meta, "container")),
                kubeconfig: s(config, "kubeconfig").map(PathBuf::from),
                context: s(config, "context"),
            }),
            other => bail!("unknown backend {other:?} (expected \"local\" or \"kube\")"),
        }
    }

    /// Builds the backend.
    ///
    /// # Errors
    /// A sandbox root without `/bin/sh`, or an unusable kubeconfig.
    pub async fn build(&self) -> anyhow::Result<Arc<dyn ExecBackend>> {
        match self {
            BackendConfig::Local {
                sandbox_root,
                user,
                exec_latency,
            } => {
                let mut b = match sandbox_root {
                    Some(root) => LocalBackend::sandbox_root(root)
                        .with_context(|| format!("sandbox root {}", root.display()))?,
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
                .with_context(|| {
                    format!(
                        "kube backend for pod {}/{pod}",
                        namespace.as_deref().unwrap_or("(context namespace)")
                    )
                })?;
                Ok(Arc::new(b))
            }
            #[cfg(not(feature = "kube"))]
            BackendConfig::Kube { .. } => {
                bail!("this build has no kube backend (feature \"kube\")")
            }
        }
    }
}
