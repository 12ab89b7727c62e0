//! Argument parsing and the stable CLI contract: JSON on stdout, one typed
//! error line on stderr, exit 0 (ok), 1 (sync failed), 2 (usage).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use sandbox_sync_host::backend::{BackendConfig, BackendError};
use sandbox_sync_host::exec::ExecBackend;
use sandbox_sync_host::provider::{Compress, Direction};
use sandbox_sync_host::{Runtime, SyncOperation, SyncOptions};

#[derive(Debug, Parser)]
#[command(
    name = "sandbox-sync",
    version,
    about = "Move files between a host and a sandbox, safely and fast."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Host -> sandbox: apply operations (JSON, the seed's camelCase shape).
    SyncIn(SyncArgs),
    /// Sandbox -> host.
    SyncOut(SyncArgs),
    /// Create a local sandbox, sync a sample workspace in and results out.
    Demo,
    /// Serve the plugin worker protocol (JSON-RPC 2.0, NDJSON on stdin/stdout).
    Serve,
    /// Copy a file or directory to or from a sandbox, `kubectl cp` style.
    Cp(crate::cp::CpArgs),
    /// Probe a sandbox (one exec) and report what sandbox-sync can use.
    Doctor(DoctorArgs),
}

#[derive(Debug, Args)]
struct SyncArgs {
    /// The sandbox-side root every sandbox path must stay under.
    #[arg(long)]
    remote_dir: String,
    /// JSON array of operations: a file, or `-` for stdin.
    #[arg(long)]
    ops: String,
    #[command(flatten)]
    backend: BackendArgs,
    /// Load this provider component instead of the embedded one.
    #[arg(long, value_name = "FILE.wasm")]
    component: Option<PathBuf>,
    /// Wall-time limit for the sandbox exec.
    #[arg(long, default_value_t = 300_000)]
    timeout_ms: u64,
    /// Outbound byte guard: most bytes the sandbox may send.
    #[arg(long, default_value_t = 8 << 30)]
    max_output_bytes: u64,
    /// Most archive entries accepted from the sandbox.
    #[arg(long, default_value_t = 1_000_000)]
    max_entries: u64,
    /// Most bytes of names, link targets and extension records accepted.
    #[arg(long, default_value_t = 256 << 20)]
    max_metadata_bytes: u64,
    /// Most stderr bytes kept from the sandbox (more fails the sync).
    #[arg(long, default_value_t = 1 << 20)]
    max_stderr_bytes: u64,
    /// With followSymlinks (and for file sources), refuse a link that leads
    /// out of the mapping's source instead of dereferencing it as `tar -h`.
    #[arg(long)]
    confine_followed_symlinks: bool,
    /// Transport compression. `auto` compresses data that samples as
    /// compressible, except on the local backend.
    #[arg(long, value_enum, default_value_t = Compress::Auto)]
    compress: Compress,
    /// Keep target files whose size, mtime (seconds) and mode match the
    /// source instead of sending them again, both ways (sync-out needs GNU
    /// tar in the sandbox).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    incremental: bool,
}

#[derive(Debug, Args)]
struct DoctorArgs {
    /// The remote dir to check for writability.
    #[arg(long)]
    remote_dir: String,
    #[command(flatten)]
    backend: BackendArgs,
    /// Print the findings as JSON.
    #[arg(long)]
    json: bool,
}

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

pub fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: failed to start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match cli.cmd {
        Cmd::SyncIn(args) => rt.block_on(sync(Direction::In, args)),
        Cmd::SyncOut(args) => rt.block_on(sync(Direction::Out, args)),
        Cmd::Serve => match rt.block_on(sandbox_sync_host::worker::serve(
            tokio::io::stdin(),
            tokio::io::stdout(),
        )) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::from(1)
            }
        },
        Cmd::Cp(args) => rt.block_on(crate::cp::run(args)),
        Cmd::Doctor(args) => rt.block_on(doctor(args)),
        Cmd::Demo => match rt.block_on(crate::demo::run()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::from(1)
            }
        },
    }
}

async fn doctor(args: DoctorArgs) -> ExitCode {
    let backend = match args.backend.backend().await {
        Ok(b) => b,
        Err(e) => return backend_failure(&e),
    };
    match sandbox_sync_host::doctor::probe(backend.as_ref(), &args.remote_dir).await {
        Ok(report) => {
            if args.json {
                println!("{}", serde_json::json!(report));
            } else {
                print!("{}", report.render(&args.remote_dir));
            }
            if report.ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("error[transport]: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn read_ops(spec: &str) -> anyhow::Result<Vec<SyncOperation>> {
    let text = if spec == "-" {
        std::io::read_to_string(std::io::stdin()).context("failed to read --ops from stdin")?
    } else {
        std::fs::read_to_string(spec)
            .with_context(|| format!("failed to read --ops file {spec}"))?
    };
    serde_json::from_str(&text).context("--ops is not a JSON array of operations")
}

async fn sync(direction: Direction, args: SyncArgs) -> ExitCode {
    let ops = match read_ops(&args.ops) {
        Ok(ops) => ops,
        Err(e) => {
            eprintln!("error[invalid-request]: {e:#}");
            return ExitCode::from(2);
        }
    };
    let backend = match args.backend.backend().await {
        Ok(b) => b,
        Err(e) => return backend_failure(&e),
    };
    let runtime = match Runtime::load(args.component.as_deref()).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error[invalid-request]: {e}");
            return ExitCode::from(1);
        }
    };
    let mut opts = SyncOptions::new(args.remote_dir);
    opts.timeout = Duration::from_millis(args.timeout_ms);
    opts.max_output_bytes = args.max_output_bytes;
    opts.max_entries = args.max_entries;
    opts.max_metadata_bytes = args.max_metadata_bytes;
    opts.max_stderr_bytes = args.max_stderr_bytes;
    opts.confine_followed_symlinks = args.confine_followed_symlinks;
    opts.compress = args.compress;
    opts.incremental = args.incremental;
    let result = runtime.sync(direction, &ops, &opts, backend).await;
    match result {
        Ok(outcome) => {
            tracing::info!(execs = outcome.execs, "sync complete");
            println!(
                "{}",
                serde_json::json!({
                    "operations": outcome.operations,
                    "execs": outcome.execs,
                    "toolboxCalls": outcome.toolbox_calls,
                    "compression": outcome.compression,
                })
            );
            ExitCode::SUCCESS
        }
        Err(failed) => {
            eprintln!("{}", failed.error);
            ExitCode::from(1)
        }
    }
}
