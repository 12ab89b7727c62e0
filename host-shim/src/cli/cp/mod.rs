//! `sandbox-sync cp SRC DST`, in `kubectl cp` syntax, through the component.

use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use sandbox_sync_host::backend::BackendConfig;
use sandbox_sync_host::cpspec::{parse_copy, Copy, Spec};
use sandbox_sync_host::error::BackendFailure;
use sandbox_sync_host::exec::counting::Counting;
use sandbox_sync_host::exec::{ExecBackend, ExecError, ExecRequest};
use sandbox_sync_host::provider::Direction;
use sandbox_sync_host::{
    ErrorKind, FileMapping, MappingKind, Runtime, SyncError, SyncOperation, SyncOptions,
    SyncOutcome,
};

use super::args::{backend_failure, DaytonaArgs, KubeArgs, LocalArgs};
use super::hint;

mod progress;

#[derive(Debug, Args)]
pub struct CpArgs {
    /// Source: a host path, `[NAMESPACE/]POD:PATH`, or `local:PATH`.
    src: String,
    /// Destination, in the same forms; exactly one side is in a sandbox.
    dst: String,
    /// For `POD:PATH`.
    #[command(flatten)]
    kube: KubeArgs,
    /// For `local:PATH`.
    #[command(flatten)]
    local: LocalArgs,
    /// For `daytona:SANDBOX_ID:PATH`.
    #[command(flatten)]
    daytona: DaytonaArgs,
    /// Confine the sandbox side under this dir (default: its parent).
    #[arg(long)]
    remote_dir: Option<String>,
    /// Glob to exclude from a directory copy (repeatable).
    #[arg(long)]
    exclude: Vec<String>,
    /// Dereference symlinks in a directory copy (tar -h).
    #[arg(short = 'L', long)]
    dereference: bool,
    /// Refuse a symlink that leads outside the copied directory instead
    /// of leaving it out with a warning (copies out of a sandbox).
    #[arg(long)]
    strict_links: bool,
    /// Judge files the target already holds by their content (as rsync's
    /// -c), not only by what the last copy recorded.
    #[arg(long)]
    checksum: bool,
    /// Mode for a single copied file, in octal (e.g. 600).
    #[arg(long, value_parser = parse_mode)]
    mode: Option<u32>,
    /// Load this provider component instead of the embedded one.
    #[arg(long, value_name = "FILE.wasm")]
    component: Option<PathBuf>,
    /// Wall-time limit.
    #[arg(long, default_value_t = 300_000)]
    timeout_ms: u64,
    /// No progress bar and no summary.
    #[arg(short, long)]
    quiet: bool,
    /// Print the result as JSON on stdout (schema in the README).
    #[arg(long)]
    json: bool,
}

fn parse_mode(s: &str) -> Result<u32, String> {
    u32::from_str_radix(s.trim_start_matches("0o"), 8)
        .ok()
        .filter(|m| *m <= 0o7777)
        .ok_or_else(|| format!("{s:?} is not an octal mode"))
}

fn usage(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {msg}");
    ExitCode::from(2)
}

fn fail(json: bool, backend: &str, e: &SyncError) -> ExitCode {
    if json {
        let mut error = serde_json::json!({ "kind": e.kind.as_str(), "message": e.message });
        if let Some(cause) = hint::cause(e) {
            error["cause"] = cause.into();
        }
        println!("{}", serde_json::json!({ "error": error }));
    } else {
        eprintln!("{e}");
        eprintln!("hint: {}", hint::hint(e, backend));
    }
    ExitCode::from(1)
}

fn absolute(p: &str) -> PathBuf {
    let p = p
        .strip_prefix("~/")
        .and_then(|rest| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(rest)))
        .unwrap_or_else(|| PathBuf::from(p));
    std::path::absolute(&p).unwrap_or(p)
}

/// Asks the sandbox whether `path` is a file or a directory (one exec).
async fn probe_kind(
    backend: &dyn ExecBackend,
    path: &str,
) -> Result<Option<MappingKind>, ExecError> {
    let req = ExecRequest {
        argv: vec![
            sandbox_sync_core::script::SHELL.into(),
            "-c".into(),
            include_str!("kind.sh").into(),
            "sandbox-sync-cp".into(),
            path.into(),
        ],
        timeout: Duration::from_secs(30),
        max_stderr: 64 << 10,
    };
    let (out, _) = sandbox_sync_host::exec::run_short(backend, req, 16).await?;
    Ok(match out.trim() {
        "d" => Some(MappingKind::Directory),
        "f" => Some(MappingKind::File),
        _ => None,
    })
}

/// What a `cp` invocation means, once its specs are parsed.
struct CopyPlan {
    direction: Direction,
    config: BackendConfig,
    sandbox_path: String,
    host_path: PathBuf,
    /// The sandbox side, for messages (`pod ns/p:/x`, `local:/x`).
    where_: String,
    remote_dir: String,
}

/// Parses the specs and flags; a usage error is `Err` (already printed).
fn resolve(a: &CpArgs) -> Result<CopyPlan, ExitCode> {
    let copy = parse_copy(&a.src, &a.dst).map_err(usage)?;
    let (sandbox, host, direction) = match copy {
        Copy::In { host, sandbox } => (sandbox, host, Direction::In),
        Copy::Out { sandbox, host } => (sandbox, host, Direction::Out),
    };
    let (config, sandbox_path, where_) = match sandbox {
        Spec::Pod {
            namespace,
            pod,
            path,
        } => {
            if a.local.any() {
                return Err(usage(
                    "--sandbox-root and --sandbox-user apply to local:PATH",
                ));
            }
            let config = a.kube.config(namespace, pod.clone());
            let ns = match &config {
                BackendConfig::Kube { namespace, .. } => namespace.clone(),
                _ => None,
            };
            let label = format!(
                "pod {}{pod}:{path}",
                ns.as_deref().map(|n| format!("{n}/")).unwrap_or_default()
            );
            (config, path, label)
        }
        Spec::Local(path) => (a.local.config(), path.clone(), format!("local:{path}")),
        Spec::Daytona { sandbox, path } => {
            if a.local.any() {
                return Err(usage(
                    "--sandbox-root and --sandbox-user apply to local:PATH",
                ));
            }
            let config = a.daytona.config(sandbox.clone()).map_err(usage)?;
            (config, path.clone(), format!("daytona:{sandbox}:{path}"))
        }
        Spec::Host(_) => return Err(usage("internal: no sandbox side")),
    };
    let remote_dir = match &a.remote_dir {
        Some(d) => d.clone(),
        None => match Path::new(&sandbox_path).parent().map(|p| p.display().to_string()) {
            Some(p) if p != "/" => p,
            _ => {
                return Err(usage(format!(
                    "{sandbox_path} is directly under /: pass --remote-dir to say what it is confined to"
                )))
            }
        },
    };
    Ok(CopyPlan {
        direction,
        config,
        sandbox_path,
        host_path: absolute(&host),
        where_,
        remote_dir,
    })
}

/// Whether the source is a file or a directory (the sandbox is asked).
async fn source_kind(plan: &CopyPlan, backend: &dyn ExecBackend) -> Result<MappingKind, SyncError> {
    match plan.direction {
        Direction::In => match std::fs::metadata(&plan.host_path) {
            Ok(m) if m.is_dir() => Ok(MappingKind::Directory),
            Ok(_) => Ok(MappingKind::File),
            Err(_) => Err(SyncError::new(
                ErrorKind::InvalidRequest,
                format!("source {} does not exist", plan.host_path.display()),
            )),
        },
        Direction::Out => match probe_kind(backend, &plan.sandbox_path).await {
            Ok(Some(k)) => Ok(k),
            Ok(None) => Err(SyncError::new(
                ErrorKind::InvalidRequest,
                format!("source {} does not exist", plan.where_),
            )),
            Err(e) => {
                let mut error = SyncError::new(ErrorKind::Transport, format!("{e:#}"));
                error.cause = Some(BackendFailure::new(e));
                Err(error)
            }
        },
    }
}

pub async fn run(a: CpArgs) -> ExitCode {
    let plan = match resolve(&a) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let backend = match plan.config.build().await {
        Ok(b) => b,
        Err(e) => return backend_failure(&e),
    };
    let name = backend.name();
    let kind = match source_kind(&plan, backend.as_ref()).await {
        Ok(k) => k,
        Err(e) => return fail(a.json, name, &e),
    };
    let host = plan.host_path.display().to_string();
    let (source, target) = match plan.direction {
        Direction::In => (host, plan.sandbox_path.clone()),
        Direction::Out => (plan.sandbox_path.clone(), host),
    };
    let ops = [SyncOperation {
        operation_id: "cp".into(),
        files: vec![FileMapping {
            source_path: source.clone(),
            target_path: target.clone(),
            kind,
            mode: a.mode,
            exclude: (!a.exclude.is_empty()).then(|| a.exclude.clone()),
            follow_symlinks: a.dereference.then_some(true),
        }],
        post_upload_commands: None,
    }];
    let runtime = match Runtime::load(a.component.as_deref()).await {
        Ok(r) => r,
        Err(e) => {
            return fail(
                a.json,
                name,
                &SyncError::new(ErrorKind::InvalidRequest, e.to_string()),
            )
        }
    };
    let counting = Arc::new(Counting::new(backend));
    let counters = counting.counters();
    let mut opts = SyncOptions::new(plan.remote_dir.clone());
    opts.timeout = Duration::from_millis(a.timeout_ms);
    opts.strict_links = a.strict_links;
    opts.checksum = a.checksum;
    let started = Instant::now();
    let show = !a.quiet && !a.json && std::io::stderr().is_terminal();
    let progress =
        progress::Progress::start(show, plan.direction, &plan.host_path, Arc::clone(&counters));
    let result = runtime.sync(plan.direction, &ops, &opts, counting).await;
    progress.finish().await;
    match result {
        Ok(out) => {
            let wire =
                counters.sent.load(Ordering::Relaxed) + counters.received.load(Ordering::Relaxed);
            report(
                &a,
                &plan,
                &out,
                kind,
                (&source, &target),
                wire,
                started.elapsed(),
            );
            ExitCode::SUCCESS
        }
        Err(f) => fail(a.json, name, &f.error),
    }
}

/// Prints what a finished copy did: JSON on stdout, or a line on stderr.
fn report(
    a: &CpArgs,
    plan: &CopyPlan,
    out: &SyncOutcome,
    kind: MappingKind,
    (source, target): (&str, &str),
    wire: u64,
    elapsed: Duration,
) {
    let (files, bytes) = out
        .operations
        .first()
        .map(|r| (r.files_transferred, r.bytes_transferred))
        .unwrap_or_default();
    let (skipped, skipped_named) = out.skipped_links();
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "direction": plan.direction.as_str(),
                "source": source, "target": target,
                "kind": if kind == MappingKind::Directory { "directory" } else { "file" },
                "filesTransferred": files, "bytesTransferred": bytes,
                "wireBytes": wire, "execs": out.execs,
                "elapsedMs": elapsed.as_millis() as u64,
                "skippedLinks": skipped_named.iter().map(|(p, _)| p).collect::<Vec<_>>(),
                "skippedLinkCount": skipped,
            })
        );
    } else if !a.quiet {
        let dir = match plan.direction {
            Direction::In => format!("to {}", plan.where_),
            Direction::Out => format!("from {}", plan.where_),
        };
        eprintln!(
            "copied {files} file(s), {bytes} bytes {dir} in {:.2?} ({} exec)",
            elapsed, out.execs
        );
    }
    if !a.json {
        if let Some(line) = super::sync::skipped_warning(out) {
            eprintln!("{line}");
        }
    }
}
