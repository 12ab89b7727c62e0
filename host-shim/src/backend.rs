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
    #[error("unknown backend {0:?} (expected \"local\", \"kube\" or \"daytona\")")]
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
    /// The Daytona sandbox's toolbox cannot be reached or named.
    #[cfg(feature = "daytona")]
    #[error("daytona backend for sandbox {sandbox}: {source}")]
    Daytona {
        /// The sandbox id.
        sandbox: String,
        /// Why.
        #[source]
        source: crate::exec::daytona::ToolboxError,
    },
    /// This build has no Daytona backend.
    #[error("this build has no daytona backend (feature \"daytona\")")]
    NoDaytona,
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
    /// A Daytona sandbox, through its toolbox API.
    Daytona {
        /// The sandbox id.
        sandbox: String,
        /// The Daytona API, which says where the sandbox's toolbox is.
        api_url: String,
        /// The toolbox URL, when known (no lookup then).
        toolbox_url: Option<String>,
        /// The API key.
        api_key: ApiKey,
    },
}

/// The Daytona API's default URL.
pub const DAYTONA_API_URL: &str = "https://app.daytona.io/api";

/// An API key: never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(pub String);

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(***)")
    }
}

impl ApiKey {
    /// `DAYTONA_API_KEY` from the environment.
    ///
    /// # Errors
    /// When it is unset or empty.
    pub fn from_env() -> Result<Self, BackendError> {
        match std::env::var("DAYTONA_API_KEY") {
            Ok(k) if !k.is_empty() => Ok(ApiKey(k)),
            _ => Err(BackendError::Missing(
                "the daytona backend needs DAYTONA_API_KEY in the environment",
            )),
        }
    }
}

impl BackendConfig {
    /// Reads plugin `config` and lease metadata.
    ///
    /// `config.backend` is `"local"` (default; `config.sandboxRoot`,
    /// `config.sandboxUser`), `"kube"`: namespace from `config.namespace`
    /// or `lease.metadata.namespace`; pod from `config.pod`,
    /// `lease.metadata.podName`, `lease.metadata.pod`, else the lease's
    /// `providerLeaseId`; container from `config.container` or
    /// `lease.metadata.container`; `config.kubeconfig`, `config.context`;
    /// or `"daytona"`: sandbox from `config.sandboxId`,
    /// `lease.metadata.sandboxId`, else the lease's `providerLeaseId`;
    /// `config.apiUrl` (default [`DAYTONA_API_URL`]), `config.toolboxUrl`
    /// or `lease.metadata.toolboxProxyUrl` (else asked of the API), and the
    /// key from `config.apiKey`, else `DAYTONA_API_KEY`.
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
            "daytona" => Ok(BackendConfig::Daytona {
                sandbox: s(config, "sandboxId")
                    .or_else(|| s(meta, "sandboxId"))
                    .or_else(|| lease_id.map(str::to_owned))
                    .ok_or(BackendError::Missing(
                        "daytona backend needs config.sandboxId, lease.metadata.sandboxId or a providerLeaseId",
                    ))?,
                api_url: s(config, "apiUrl").unwrap_or_else(|| DAYTONA_API_URL.to_owned()),
                toolbox_url: s(config, "toolboxUrl").or_else(|| s(meta, "toolboxProxyUrl")),
                api_key: match s(config, "apiKey") {
                    Some(k) if !k.is_empty() => ApiKey(k),
                    _ => ApiKey::from_env()?,
                },
            }),
            other => Err(BackendError::Unknown(other.to_owned())),
        }
    }

    /// Builds the backend.
    ///
    /// # Errors
    /// A sandbox root without `/bin/sh`, an unusable kubeconfig, or a
    /// Daytona sandbox whose toolbox cannot be found.
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
            #[cfg(feature = "daytona")]
            BackendConfig::Daytona {
                sandbox,
                api_url,
                toolbox_url,
                api_key,
            } => {
                use crate::exec::daytona::{Client, DaytonaBackend};
                let client = match toolbox_url {
                    Some(url) => Client::new(url, sandbox, &api_key.0),
                    None => Client::resolve(api_url, sandbox, &api_key.0).await,
                }
                .map_err(|source| BackendError::Daytona {
                    sandbox: sandbox.clone(),
                    source,
                })?;
                Ok(Arc::new(DaytonaBackend::new(client)))
            }
            #[cfg(not(feature = "daytona"))]
            BackendConfig::Daytona { .. } => Err(BackendError::NoDaytona),
        }
    }
}
