//! The flags that name a sandbox, shared by every command that reaches one.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use sandbox_sync_host::backend::{BackendConfig, BackendError};
use sandbox_sync_host::exec::ExecBackend;

/// Which exec backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// A local process (optionally chrooted into --sandbox-root).
    Local,
    /// A Kubernetes pod via the API server's exec (WebSocket).
    Kube,
    /// A Daytona sandbox via its toolbox API (key from DAYTONA_API_KEY).
    Daytona,
}

/// How to reach Daytona (daytona backend).
#[derive(Debug, Args)]
pub struct DaytonaArgs {
    /// Daytona API URL (asked where the sandbox's toolbox is).
    #[arg(long, value_name = "URL", default_value = sandbox_sync_host::backend::DAYTONA_API_URL)]
    pub daytona_api_url: String,
    /// The sandbox's toolbox URL (its toolboxProxyUrl), skipping the lookup.
    #[arg(long, value_name = "URL")]
    pub daytona_toolbox_url: Option<String>,
}

impl DaytonaArgs {
    /// The daytona backend for `sandbox` (the key from `DAYTONA_API_KEY`).
    ///
    /// # Errors
    /// When `DAYTONA_API_KEY` is unset.
    pub fn config(&self, sandbox: String) -> Result<BackendConfig, BackendError> {
        Ok(BackendConfig::Daytona {
            sandbox,
            api_url: self.daytona_api_url.clone(),
            toolbox_url: self.daytona_toolbox_url.clone(),
            api_key: sandbox_sync_host::backend::ApiKey::from_env()?,
        })
    }
}

/// Which pod and how to reach it (kube backend).
#[derive(Debug, Args)]
pub struct KubeArgs {
    /// Kubernetes namespace (default: the kubeconfig context's).
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// Container (default: the pod's only container).
    #[arg(long, short = 'c')]
    pub container: Option<String>,
    /// Kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context.
    #[arg(long)]
    pub context: Option<String>,
}

impl KubeArgs {
    /// The kube backend for `pod` (a namespace in the spec wins).
    pub fn config(&self, namespace: Option<String>, pod: String) -> BackendConfig {
        BackendConfig::Kube {
            namespace: namespace.or_else(|| self.namespace.clone()),
            pod,
            container: self.container.clone(),
            kubeconfig: self.kubeconfig.clone(),
            context: self.context.clone(),
        }
    }
}

/// A local sandbox (local backend).
#[derive(Debug, Args)]
pub struct LocalArgs {
    /// Run the sandbox jailed in DIR (its own namespaces, pivot_root, a
    /// container's capabilities), as a container runtime runs a pod.
    #[arg(long, value_name = "DIR")]
    pub sandbox_root: Option<PathBuf>,
    /// Run sandbox commands as this uid.
    #[arg(long, value_name = "UID")]
    pub sandbox_user: Option<u32>,
    /// Delay each exec start (models an API server round trip).
    #[arg(long, default_value_t = 0, hide = true)]
    pub exec_latency_ms: u64,
}

impl LocalArgs {
    /// True when a local-only flag was given.
    pub fn any(&self) -> bool {
        self.sandbox_root.is_some() || self.sandbox_user.is_some()
    }

    /// The local backend these flags describe.
    pub fn config(&self) -> BackendConfig {
        BackendConfig::Local {
            sandbox_root: self.sandbox_root.clone(),
            user: self.sandbox_user,
            exec_latency: Duration::from_millis(self.exec_latency_ms),
        }
    }
}

/// Where sandbox commands run.
#[derive(Debug, Args)]
pub struct BackendArgs {
    /// Exec backend.
    #[arg(long, value_enum, default_value_t = Backend::Local)]
    pub backend: Backend,
    /// Pod name (kube backend).
    #[arg(long)]
    pub pod: Option<String>,
    /// Daytona sandbox id (daytona backend).
    #[arg(long, value_name = "ID")]
    pub sandbox_id: Option<String>,
    #[command(flatten)]
    pub kube: KubeArgs,
    #[command(flatten)]
    pub local: LocalArgs,
    #[command(flatten)]
    pub daytona: DaytonaArgs,
}

impl BackendArgs {
    /// The backend these flags describe.
    ///
    /// # Errors
    /// Flags of one backend given for the other, or a backend that cannot
    /// be built (see [`BackendError::is_usage`]).
    pub async fn backend(&self) -> Result<Arc<dyn ExecBackend>, BackendError> {
        if self.backend != Backend::Daytona && self.sandbox_id.is_some() {
            return Err(BackendError::Missing(
                "--sandbox-id needs --backend daytona",
            ));
        }
        let config = match self.backend {
            Backend::Local => {
                if self.pod.is_some() || self.kube.namespace.is_some() {
                    return Err(BackendError::Missing(
                        "--pod and --namespace need --backend kube",
                    ));
                }
                self.local.config()
            }
            Backend::Kube => {
                if self.local.any() {
                    return Err(BackendError::Missing(
                        "--sandbox-root and --sandbox-user apply to --backend local",
                    ));
                }
                let pod = self
                    .pod
                    .clone()
                    .ok_or(BackendError::Missing("--backend kube needs --pod"))?;
                self.kube.config(None, pod)
            }
            Backend::Daytona => {
                if self.local.any() || self.pod.is_some() || self.kube.namespace.is_some() {
                    return Err(BackendError::Missing(
                        "--backend daytona takes --sandbox-id, not local or kube flags",
                    ));
                }
                let sandbox = self.sandbox_id.clone().ok_or(BackendError::Missing(
                    "--backend daytona needs --sandbox-id",
                ))?;
                self.daytona.config(sandbox)?
            }
        };
        config.build().await
    }
}

/// Prints a backend error the CLI way: a usage error exits 2, an unusable
/// environment (a kubeconfig, a sandbox root) is a failed sync, exit 1.
pub fn backend_failure(e: &BackendError) -> ExitCode {
    if e.is_usage() {
        eprintln!("error[invalid-request]: {e}");
        ExitCode::from(2)
    } else {
        eprintln!("error[transport]: {e:#}");
        ExitCode::from(1)
    }
}
