//! `sandbox-sync sync-in` and `sync-out`: operations from JSON, through
//! the component, the result as JSON.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use sandbox_sync_host::provider::{Compress, Direction, SyncOutcome};
use sandbox_sync_host::{Runtime, SyncOperation, SyncOptions};

use super::args::{backend_failure, BackendArgs};
use super::hint;

#[derive(Debug, Args)]
pub struct SyncArgs {
    /// The sandbox-side root every sandbox path must stay under.
    #[arg(long)]
    pub(super) remote_dir: String,
    /// JSON array of operations: a file, or `-` for stdin.
    #[arg(long)]
    pub(super) ops: String,
    #[command(flatten)]
    pub(super) backend: BackendArgs,
    /// Load this provider component instead of the embedded one.
    #[arg(long, value_name = "FILE.wasm")]
    pub(super) component: Option<PathBuf>,
    /// Wall-time limit for the sandbox exec.
    #[arg(long, default_value_t = 300_000)]
    pub(super) timeout_ms: u64,
    /// Outbound byte guard: most bytes the sandbox may send.
    #[arg(long, default_value_t = 8 << 30)]
    pub(super) max_output_bytes: u64,
    /// Most archive entries accepted from the sandbox.
    #[arg(long, default_value_t = 1_000_000)]
    pub(super) max_entries: u64,
    /// Most bytes of names, link targets and extension records accepted.
    #[arg(long, default_value_t = 256 << 20)]
    pub(super) max_metadata_bytes: u64,
    /// Most stderr bytes kept from the sandbox (more fails the sync).
    #[arg(long, default_value_t = 1 << 20)]
    pub(super) max_stderr_bytes: u64,
    /// With followSymlinks (and for file sources), refuse a link that leads
    /// out of the mapping's source instead of dereferencing it as `tar -h`.
    #[arg(long)]
    pub(super) confine_followed_symlinks: bool,
    /// Sync-out: refuse a symlink that leaves its mapping (absolute, or
    /// climbing above the mapping's top) instead of leaving it out with a
    /// warning.
    #[arg(long)]
    pub(super) strict_links: bool,
    /// Transport compression. `auto` compresses data that samples as
    /// compressible, except on the local backend.
    #[arg(long, value_enum, default_value_t = Compress::Auto)]
    pub(super) compress: Compress,
    /// Keep target files that are still exactly what the last sync moved
    /// instead of sending them again, both ways (ARCHITECTURE.md,
    /// Incremental sync).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub(super) incremental: bool,
    /// With --incremental, judge every file by its content (as rsync's
    /// -c): exact even against writers that move no ctime, for a read of
    /// every kept file on the sending side.
    #[arg(long)]
    pub(super) checksum: bool,
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

pub async fn run(direction: Direction, args: SyncArgs) -> ExitCode {
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
    opts.strict_links = args.strict_links;
    opts.compress = args.compress;
    opts.incremental = args.incremental;
    opts.checksum = args.checksum;
    let name = backend.name();
    let result = runtime.sync(direction, &ops, &opts, backend).await;
    match result {
        Ok(outcome) => {
            tracing::info!(execs = outcome.execs, "sync complete");
            if let Some(line) = skipped_warning(&outcome) {
                eprintln!("{line}");
            }
            println!(
                "{}",
                serde_json::json!({
                    "operations": outcome.operations,
                    "execs": outcome.execs,
                    "toolboxCalls": outcome.toolbox_calls,
                    "compression": outcome.compression,
                    "degraded": outcome.degraded,
                })
            );
            ExitCode::SUCCESS
        }
        Err(failed) => {
            // One line, as the CLI's contract says; the hint joins it
            // where the backend's own typed error says what to check.
            match hint::cause(&failed.error) {
                Some(_) => eprintln!(
                    "{} (hint: {})",
                    failed.error,
                    hint::hint(&failed.error, name)
                ),
                None => eprintln!("{}", failed.error),
            }
            ExitCode::from(1)
        }
    }
}

/// The one warning line for the symlinks a sync-out left out, if any.
pub(super) fn skipped_warning(outcome: &SyncOutcome) -> Option<String> {
    let (total, named) = outcome.skipped_links();
    if total == 0 {
        return None;
    }
    let more = total.saturating_sub(named.len() as u64);
    let list = named
        .iter()
        .map(|(path, target)| format!("{path:?} -> {target:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    let tail = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    Some(format!(
        "warning: left out {total} symlink(s) that lead outside their mapping: {list}{tail} \
         (--strict-links refuses them)"
    ))
}
