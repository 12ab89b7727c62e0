//! `sandbox-sync cp SRC DST`, in `kubectl cp` syntax, through the component.

use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use sandbox_sync_host::backend::BackendConfig;
use sandbox_sync_host::cpspec::{parse_copy, Copy, Spec};
use sandbox_sync_host::exec::counting::Counting;
use sandbox_sync_host::exec::{ExecBackend, ExecRequest};
use sandbox_sync_host::{
    ErrorKind, FileMapping, MappingKind, Runtime, SyncError, SyncOperation, SyncOptions,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Debug, Args)]
pub struct CpArgs {
    /// Source: a host path, `[NAMESPACE/]POD:PATH`, or `local:PATH`.
    src: String,
    /// Destination, in the same forms; exactly one side is in a sandbox.
    dst: String,
    /// Container (default: the pod's only container).
    #[arg(short = 'c', long)]
    container: Option<String>,
    /// Namespace (default: the kubeconfig context's).
    #[arg(short = 'n', long)]
    namespace: Option<String>,
    /// Kubeconfig context.
    #[arg(long)]
    context: Option<String>,
    /// Kubeconfig file.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// For `local:PATH`: chroot the local sandbox into DIR.
    #[arg(long, value_name = "DIR")]
    sandbox_root: Option<PathBuf>,
    /// For `local:PATH`: run as this uid.
    #[arg(long, value_name = "UID")]
    sandbox_user: Option<u32>,
    /// Confine the sandbox side under this dir (default: its parent).
    #[arg(long)]
    remote_dir: Option<String>,
    /// Glob to exclude from a directory copy (repeatable).
    #[arg(long)]
    exclude: Vec<String>,
    /// Dereference symlinks in a directory copy (tar -h).
    #[arg(short = 'L', long)]
    dereference: bool,
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
    #[arg(long, default_value_t = 0, hide = true)]
    exec_latency_ms: u64,
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

fn hint(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Confinement => "the sandbox path must stay under --remote-dir (default: its parent directory), and no symlink may lead out of it",
        ErrorKind::InvalidRequest => "check that the source exists and is a file or directory",
        ErrorKind::Transport => "check that the pod is Running, the container name, and your kubeconfig/context",
        ErrorKind::LimitExceeded => "raise --timeout-ms, or check what the sandbox is sending",
        ErrorKind::UnsafeArchive => "the sandbox sent an archive that breaks policy; nothing was written",
        ErrorKind::CommandFailed => "see the sandbox's stderr above",
        ErrorKind::SourceChanged => "the source changed while it was being copied; copy it again",
        ErrorKind::Io => "check free space and permissions on the host target",
    }
}

fn fail(json: bool, e: &SyncError) -> ExitCode {
    if json {
        println!(
            "{}",
            serde_json::json!({ "error": { "kind": e.kind.as_str(), "message": e.message } })
        );
    } else {
        eprintln!("{e}");
        eprintln!("hint: {}", hint(e.kind));
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

/// Total bytes and files under a host path.
fn host_size(p: &Path) -> (u64, u64) {
    let mut stack = vec![p.to_path_buf()];
    let (mut bytes, mut files) = (0, 0);
    while let Some(p) = stack.pop() {
        let Ok(m) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if m.is_dir() {
            stack.extend(
                std::fs::read_dir(&p)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .map(|e| e.path()),
            );
        } else {
            files += 1;
            bytes += m.len();
        }
    }
    (bytes, files)
}

/// Asks the sandbox whether `path` is a file or a directory (one exec).
async fn probe_kind(backend: &dyn ExecBackend, path: &str) -> anyhow::Result<Option<MappingKind>> {
    let req = ExecRequest {
        argv: vec![
            "/bin/sh".into(),
            "-c".into(),
            "if [ -d \"$1\" ]; then echo d; elif [ -e \"$1\" ]; then echo f; else echo m; fi"
                .into(),
            "sandbox-sync-cp".into(),
            path.into(),
        ],
        timeout: Duration::from_secs(30),
        max_stderr: 64 << 10,
    };
    let mut p = backend.start(req).await?;
    let mut out = String::new();
    (&mut p.stdout).take(16).read_to_string(&mut out).await?;
    let _ = p.stdin.shutdown().await;
    p.control.wait().await?;
    Ok(match out.trim() {
        "d" => Some(MappingKind::Directory),
        "f" => Some(MappingKind::File),
        _ => None,
    })
}

pub async fn run(a: CpArgs) -> ExitCode {
    let copy = match parse_copy(&a.src, &a.dst) {
        Ok(c) => c,
        Err(e) => return usage(e),
    };
    let (sandbox, host, inbound) = match copy {
        Copy::In { host, sandbox } => (sandbox, host, true),
        Copy::Out { sandbox, host } => (sandbox, host, false),
    };
    let (config, sandbox_path, where_) = match sandbox {
        Spec::Pod {
            namespace,
            pod,
            path,
        } => {
            if a.sandbox_root.is_some() || a.sandbox_user.is_some() {
                return usage("--sandbox-root and --sandbox-user apply to local:PATH");
            }
            let ns = namespace.or_else(|| a.namespace.clone());
            let label = format!(
                "pod {}{pod}:{path}",
                ns.as_deref().map(|n| format!("{n}/")).unwrap_or_default()
            );
            (
                BackendConfig::Kube {
                    namespace: ns,
                    pod,
                    container: a.container.clone(),
                    kubeconfig: a.kubeconfig.clone(),
                    context: a.context.clone(),
                },
                path,
                label,
            )
        }
        Spec::Local(path) => (
            BackendConfig::Local {
                sandbox_root: a.sandbox_root.clone(),
                user: a.sandbox_user,
                exec_latency: Duration::from_millis(a.exec_latency_ms),
            },
            path.clone(),
            format!("local:{path}"),
        ),
        Spec::Host(_) => return usage("internal: no sandbox side"),
    };
    let remote_dir = match &a.remote_dir {
        Some(d) => d.clone(),
        None => match Path::new(&sandbox_path).parent().map(|p| p.display().to_string()) {
            Some(p) if p != "/" => p,
            _ => return usage(format!("{sandbox_path} is directly under /: pass --remote-dir to say what it is confined to")),
        },
    };
    let backend = match config.build().await {
        Ok(b) => b,
        Err(e) => return usage(format!("{e:#}")),
    };
    let host_path = absolute(&host);
    let kind = if inbound {
        match std::fs::metadata(&host_path) {
            Ok(m) if m.is_dir() => MappingKind::Directory,
            Ok(_) => MappingKind::File,
            Err(_) => {
                return fail(
                    a.json,
                    &SyncError::new(
                        ErrorKind::InvalidRequest,
                        format!("source {} does not exist", host_path.display()),
                    ),
                )
            }
        }
    } else {
        match probe_kind(backend.as_ref(), &sandbox_path).await {
            Ok(Some(k)) => k,
            Ok(None) => {
                return fail(
                    a.json,
                    &SyncError::new(
                        ErrorKind::InvalidRequest,
                        format!("source {where_} does not exist"),
                    ),
                )
            }
            Err(e) => {
                return fail(
                    a.json,
                    &SyncError::new(ErrorKind::Transport, format!("{e:#}")),
                )
            }
        }
    };
    let (source, target) = if inbound {
        (host_path.display().to_string(), sandbox_path.clone())
    } else {
        (sandbox_path.clone(), host_path.display().to_string())
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
    let runtime = match &a.component {
        Some(p) => Runtime::from_file(p).await,
        None => Runtime::embedded().await,
    };
    let runtime = match runtime {
        Ok(r) => r,
        Err(e) => {
            return fail(
                a.json,
                &SyncError::new(ErrorKind::InvalidRequest, e.to_string()),
            )
        }
    };
    let counting = Arc::new(Counting::new(backend));
    let counters = counting.counters();
    let mut opts = SyncOptions::new(remote_dir);
    opts.timeout = Duration::from_millis(a.timeout_ms);
    let started = Instant::now();
    let done = Arc::new(AtomicBool::new(false));
    let progress = (!a.quiet && !a.json && std::io::stderr().is_terminal()).then(|| {
        let (total, files) = if inbound {
            host_size(&host_path)
        } else {
            (0, 0)
        };
        let done = Arc::clone(&done);
        let counters = Arc::clone(&counters);
        tokio::spawn(async move {
            // Only transfers that last more than about a second get a bar.
            tokio::time::sleep(Duration::from_millis(900)).await;
            if done.load(Ordering::SeqCst) {
                return;
            }
            let pb = if inbound {
                let pb = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
                if let Ok(style) = ProgressStyle::with_template(
                    "{spinner} {bytes}/{total_bytes} {wide_bar} {bytes_per_sec} ETA {eta} {msg}",
                ) {
                    pb.set_style(style);
                }
                pb.set_message(format!("{files} files"));
                pb
            } else {
                let pb = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
                if let Ok(style) =
                    ProgressStyle::with_template("{spinner} {bytes} {bytes_per_sec} {msg}")
                {
                    pb.set_style(style);
                }
                pb.set_message("receiving");
                pb
            };
            while !done.load(Ordering::SeqCst) {
                let n = if inbound {
                    counters.sent.load(Ordering::Relaxed)
                } else {
                    counters.received.load(Ordering::Relaxed)
                };
                pb.set_position(n);
                pb.tick();
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            pb.finish_and_clear();
        })
    });
    let result = if inbound {
        runtime.sync_in(&ops, &opts, counting).await
    } else {
        runtime.sync_out(&ops, &opts, counting).await
    };
    done.store(true, Ordering::SeqCst);
    if let Some(p) = progress {
        let _ = p.await;
    }
    let elapsed = started.elapsed();
    match result {
        Ok(out) => {
            let r = out.operations.first();
            let (files, bytes) = r
                .map(|r| (r.files_transferred, r.bytes_transferred))
                .unwrap_or_default();
            let wire =
                counters.sent.load(Ordering::Relaxed) + counters.received.load(Ordering::Relaxed);
            if a.json {
                println!(
                    "{}",
                    serde_json::json!({
                        "direction": if inbound { "in" } else { "out" },
                        "source": source, "target": target,
                        "kind": if kind == MappingKind::Directory { "directory" } else { "file" },
                        "filesTransferred": files, "bytesTransferred": bytes,
                        "wireBytes": wire, "execs": out.execs,
                        "elapsedMs": elapsed.as_millis() as u64,
                    })
                );
            } else if !a.quiet {
                let dir = if inbound {
                    format!("to {where_}")
                } else {
                    format!("from {where_}")
                };
                eprintln!(
                    "copied {files} file(s), {bytes} bytes {dir} in {:.2?} ({} exec)",
                    elapsed, out.execs
                );
            }
            ExitCode::SUCCESS
        }
        Err(f) => fail(a.json, &f.error),
    }
}
