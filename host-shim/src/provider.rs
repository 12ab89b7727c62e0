//! One sync call end to end: grant directories, instantiate, call, account.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sandbox_sync_core::ErrorKind;
use wasmtime::component::Resource;

use crate::bindings::sandbox_exec::Compression;
use crate::bindings::types as wit;
use crate::error::SyncError;
use crate::exec::codec;
use crate::exec::ExecBackend;
use crate::fs::GrantedDir;
use crate::request::{MappingKind, OperationResult, SkippedLinks, SyncOperation};
use crate::runtime::Runtime;
use crate::state::ShimState;

/// How long past the call's timeout a sandbox exec may still run: the
/// cleanup exec that sweeps a killed program's scratch fits in it.
const EXEC_GRACE: Duration = Duration::from_millis(900);

/// How long past the call's timeout the host waits for the component at
/// all. After it the call is dropped whatever the component or the sandbox
/// is doing (their processes are killed, the host's scratch swept), so a
/// call returns within its timeout plus this grace.
pub const HOST_GRACE: Duration = Duration::from_millis(1500);

/// Limits and the sandbox root of one sync call.
#[derive(Debug, Clone)]
pub struct SyncOptions {
    /// The sandbox-side root every sandbox path must stay under.
    pub remote_dir: String,
    /// Wall time for the sandbox exec.
    pub timeout: Duration,
    /// Outbound byte guard.
    pub max_output_bytes: u64,
    /// Stderr cap.
    pub max_stderr_bytes: u64,
    /// Most archive entries accepted from the sandbox.
    pub max_entries: u64,
    /// Most metadata bytes accepted from the sandbox.
    pub max_metadata_bytes: u64,
    /// Sync-in with `followSymlinks` (and file mapping sources): refuse a
    /// symlink that leads out of the mapping's source directory instead of
    /// dereferencing it as `tar -h` does. Off by default: host paths are the
    /// orchestrator's, already confined by it.
    pub confine_followed_symlinks: bool,
    /// Sync-out: refuse a symlink that leaves its mapping (absolute, or
    /// climbing above the mapping's top) instead of leaving it out and
    /// naming it in the operation's result.
    pub strict_links: bool,
    /// Linear memory the provider component may use for this call.
    pub guest_memory_bytes: usize,
    /// Transport compression.
    pub compress: Compress,
    /// Syncs keep target files that are exactly what the last sync landed
    /// and whose source has not changed since, instead of sending them
    /// (on by default; see ARCHITECTURE.md, incremental sync).
    pub incremental: bool,
    /// Incremental syncs judge every file by its content (rsync's
    /// `--checksum`): exact even against a writer that never moves a
    /// ctime, for a read of every kept file on the sender's side.
    pub checksum: bool,
    /// Where incremental sync-out keeps its account of what it landed
    /// (default: `records/` beside the compile cache; none: it keeps
    /// nothing between calls).
    pub records: Option<crate::records::RecordStore>,
}

/// Transport compression, as asked for (`--compress`, `compress`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Compress {
    /// Compress data that samples as compressible, over links that are not
    /// this machine.
    #[default]
    Auto,
    /// gzip, or zstd when the sandbox has no gzip.
    Gzip,
    /// zstd, or gzip when the sandbox has no zstd.
    Zstd,
    /// Never.
    None,
}

impl std::str::FromStr for Compress {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Compress::Auto),
            "gzip" => Ok(Compress::Gzip),
            "zstd" => Ok(Compress::Zstd),
            "none" => Ok(Compress::None),
            other => Err(format!(
                "compress must be auto, gzip, zstd or none, not {other:?}"
            )),
        }
    }
}

impl Compress {
    /// The policy the component sees: `auto` is `none` on a local backend.
    fn policy(self, backend: &dyn ExecBackend) -> Compression {
        match self {
            Compress::Auto if backend.is_local() => Compression::None,
            Compress::Auto => Compression::Auto,
            Compress::Gzip => Compression::Gzip,
            Compress::Zstd => Compression::Zstd,
            Compress::None => Compression::None,
        }
    }
}

/// A feature the sandbox turned off for this call for want of a tool
/// (README, "What the sandbox needs"), as the component reported it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Degraded {
    /// `incremental-out`, `compressed-sync-in`, ...
    pub feature: String,
    /// What the sandbox lacks (`a|b`: neither a nor b).
    pub missing: Vec<String>,
}

/// What one compressed stream of a call moved.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CompressionReport {
    /// `"stdin"` (host -> sandbox) or `"stdout"`.
    pub stream: &'static str,
    /// `"gzip"` or `"zstd"`.
    pub codec: &'static str,
    /// Uncompressed bytes.
    pub plain_bytes: u64,
    /// Compressed bytes on the transport.
    pub wire_bytes: u64,
    /// Host time spent in the codec.
    pub busy_ms: u64,
}

impl SyncOptions {
    /// Defaults: 300 s, 8 GiB output guard, 1 MiB stderr, 1,000,000 entries,
    /// 256 MiB of names and extension records.
    pub fn new(remote_dir: impl Into<String>) -> Self {
        SyncOptions {
            remote_dir: remote_dir.into(),
            timeout: Duration::from_secs(300),
            max_output_bytes: 8 << 30,
            max_stderr_bytes: 1 << 20,
            max_entries: 1_000_000,
            max_metadata_bytes: 256 << 20,
            confine_followed_symlinks: false,
            strict_links: false,
            guest_memory_bytes: crate::state::GUEST_MEMORY_BYTES,
            compress: Compress::Auto,
            incremental: true,
            checksum: false,
            records: crate::records::RecordStore::default_location(),
        }
    }

    fn to_wit(&self, ops: &[SyncOperation]) -> wit::SyncRequest {
        wit::SyncRequest {
            remote_dir: self.remote_dir.clone(),
            operations: ops.iter().map(SyncOperation::to_wit).collect(),
            limits: wit::SyncLimits {
                timeout_ms: u64::try_from(self.timeout.min(crate::exec::MAX_TIMEOUT).as_millis())
                    .unwrap_or(u64::MAX),
                max_output_bytes: self.max_output_bytes,
                max_stderr_bytes: self.max_stderr_bytes,
                max_entries: self.max_entries,
                max_metadata_bytes: self.max_metadata_bytes,
            },
        }
    }
}

/// A finished sync call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncOutcome {
    /// Per-operation results, in order.
    pub operations: Vec<OperationResult>,
    /// Sandbox execs the call used (on a toolbox sandbox, its commands).
    pub execs: u64,
    /// Toolbox calls the call made (uploads, commands, downloads; none on
    /// a streaming exec).
    pub toolbox_calls: u64,
    /// Its compressed streams (none when it moved plain bytes).
    pub compression: Vec<CompressionReport>,
    /// Features the sandbox turned off for this call (none where it has
    /// every tool).
    pub degraded: Vec<Degraded>,
    /// The symlinks sync-out left out because they leave their mapping,
    /// by operation (each operation's result names them too).
    pub skipped: Vec<SkippedLinks>,
}

impl SyncOutcome {
    /// The symlinks left out across operations: how many, and the first
    /// [`SkippedLinks::NAMED`] as (sandbox path, target).
    pub fn skipped_links(&self) -> (u64, Vec<(&str, &str)>) {
        let total = self.skipped.iter().map(|s| s.total).sum();
        let named = self
            .skipped
            .iter()
            .flat_map(|s| s.links.iter().map(|(p, t)| (p.as_str(), t.as_str())))
            .take(SkippedLinks::NAMED)
            .collect();
        (total, named)
    }
}

/// A failed sync call, with the execs it used.
#[derive(Debug, Clone)]
pub struct SyncFailure {
    /// The error.
    pub error: SyncError,
    /// Sandbox execs started before the failure.
    pub execs: u64,
}

/// Which way a sync moves files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Host -> sandbox (`sync-in`).
    In,
    /// Sandbox -> host (`sync-out`).
    Out,
}

impl Direction {
    /// `"in"` or `"out"`, as telemetry and JSON name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::In => "in",
            Direction::Out => "out",
        }
    }
}

impl Runtime {
    /// Host -> sandbox.
    ///
    /// # Errors
    /// The typed [`SyncError`] the component or the host reported, with the
    /// number of execs used.
    pub async fn sync_in(
        &self,
        ops: &[SyncOperation],
        opts: &SyncOptions,
        backend: Arc<dyn ExecBackend>,
    ) -> Result<SyncOutcome, SyncFailure> {
        self.sync(Direction::In, ops, opts, backend).await
    }

    /// Sandbox -> host.
    ///
    /// # Errors
    /// As [`Runtime::sync_in`].
    pub async fn sync_out(
        &self,
        ops: &[SyncOperation],
        opts: &SyncOptions,
        backend: Arc<dyn ExecBackend>,
    ) -> Result<SyncOutcome, SyncFailure> {
        self.sync(Direction::Out, ops, opts, backend).await
    }

    /// One sync call in `dir`: grants, a fresh store, the call under its
    /// hard deadline. A failed call leaves no host directory it created.
    ///
    /// # Errors
    /// As [`Runtime::sync_in`].
    pub async fn sync(
        &self,
        dir: Direction,
        ops: &[SyncOperation],
        opts: &SyncOptions,
        backend: Arc<dyn ExecBackend>,
    ) -> Result<SyncOutcome, SyncFailure> {
        let mut created = Vec::new();
        let result = self
            .sync_granted(dir, ops, opts, backend, &mut created)
            .await;
        if result.is_err() {
            remove_created(&created);
        }
        result
    }

    async fn sync_granted(
        &self,
        dir: Direction,
        ops: &[SyncOperation],
        opts: &SyncOptions,
        backend: Arc<dyn ExecBackend>,
        created: &mut Vec<PathBuf>,
    ) -> Result<SyncOutcome, SyncFailure> {
        let fail = |error: SyncError| SyncFailure { error, execs: 0 };
        if backend.toolbox().is_some() && !self.info().capabilities.iter().any(|c| c == "toolbox") {
            return Err(fail(SyncError::new(
                ErrorKind::Transport,
                format!(
                    "provider {} cannot drive a {} sandbox: it lacks the \"toolbox\" capability",
                    self.info().name,
                    backend.name()
                ),
            )));
        }
        let started = tokio::time::Instant::now();
        let timeout = opts.timeout.min(crate::exec::MAX_TIMEOUT);
        // Held for the whole call (see target_lock).
        let (grants, _locks) = match dir {
            Direction::In => (grant_all(dir, ops, opts, created).map_err(fail)?, None),
            Direction::Out => {
                let (g, l) = grant_locked(ops, opts, created, started + timeout)
                    .await
                    .map_err(fail)?;
                (g, Some(l))
            }
        };
        let policy = opts.compress.policy(backend.as_ref());
        let remote = !backend.is_local();
        let state = ShimState::new(backend, opts.guest_memory_bytes)
            .with_exec_deadline(started + timeout + EXEC_GRACE)
            .with_compression(policy)
            .with_incremental(opts.incremental)
            .with_checksum(opts.checksum)
            .with_strict_links(opts.strict_links)
            .with_remote(remote)
            .with_records(opts.records.clone());
        let (mut store, provider) = self.instantiate(state).await.map_err(|e| {
            fail(SyncError::new(
                ErrorKind::Transport,
                format!("failed to instantiate the provider: {e:#}"),
            ))
        })?;
        let mut handles: Vec<Resource<GrantedDir>> = Vec::with_capacity(grants.len());
        for g in grants {
            let r = store.data_mut().table.push(g).map_err(|e| {
                fail(SyncError::new(
                    ErrorKind::Io,
                    format!("resource table: {e}"),
                ))
            })?;
            handles.push(r);
        }
        let req = opts.to_wit(ops);
        let sync = provider.sandbox_sync_provider_sync();
        let call = async {
            match dir {
                Direction::In => sync.call_sync_in(&mut store, &req, &handles).await,
                Direction::Out => sync.call_sync_out(&mut store, &req, &handles).await,
            }
        };
        let direction = dir.as_str();
        // Attribute names follow the seeds' startup telemetry.
        let span = tracing::info_span!(
            "sandbox_sync.sync",
            paperclip.sandbox.startup.provider = %self.info().name,
            paperclip.sandbox.startup.direction = direction,
            paperclip.sandbox.startup.operations = ops.len(),
            paperclip.sandbox.startup.guard_bytes = opts.max_output_bytes,
        );
        let result = tracing::Instrument::instrument(
            tokio::time::timeout_at(started + timeout + HOST_GRACE, call),
            span.clone(),
        )
        .await;
        let execs = store.data().exec_count();
        let toolbox_calls = store.data().toolbox_call_count();
        let degraded = store.data().degraded.clone();
        let outcome_bytes: u64 = match &result {
            Ok(Ok(Ok(r))) => r.iter().map(|o| o.bytes_transferred).sum(),
            _ => 0,
        };
        let compression: Vec<CompressionReport> = store
            .data()
            .codecs()
            .iter()
            .map(|c| {
                let s = c.meter.stats();
                CompressionReport {
                    stream: c.stream,
                    codec: codec::name(c.codec),
                    plain_bytes: s.plain_bytes,
                    wire_bytes: s.wire_bytes,
                    busy_ms: s.busy_us / 1000,
                }
            })
            .collect();
        span.in_scope(|| {
            for c in &compression {
                // The seeds' attribute names: bytes_in is what went into
                // the codec, bytes_out what came out of it.
                let (bytes_in, bytes_out) = match c.stream {
                    "stdin" => (c.plain_bytes, c.wire_bytes),
                    _ => (c.wire_bytes, c.plain_bytes),
                };
                tracing::info!(
                    paperclip.sandbox.startup.transfer.direction = direction,
                    paperclip.sandbox.startup.transfer.compression.codec = c.codec,
                    paperclip.sandbox.startup.transfer.compression.bytes_in = bytes_in,
                    paperclip.sandbox.startup.transfer.compression.bytes_out = bytes_out,
                    paperclip.sandbox.startup.transfer.compression.wall_ms = c.busy_ms,
                    "transfer compressed"
                );
            }
            tracing::info!(
                paperclip.sandbox.startup.wall_ms = started.elapsed().as_millis() as u64,
                paperclip.sandbox.startup.exec_count = execs,
                sandbox_sync.toolbox_calls = toolbox_calls,
                paperclip.sandbox.startup.bytes = outcome_bytes,
                sandbox_sync.guest_memory_bytes = store.data().limits.peak(),
                paperclip.sandbox.startup.ok = matches!(result, Ok(Ok(Ok(_)))),
                "sync finished"
            )
        });
        let failed = |error: SyncError| SyncFailure { error, execs };
        match result {
            Err(_) => Err(failed(SyncError::new(
                ErrorKind::LimitExceeded,
                format!(
                    "the sync did not finish within {} ms",
                    (timeout + HOST_GRACE).as_millis()
                ),
            ))),
            // Memory the store refused is the limit that ended the call,
            // whatever the guest made of the failed allocation.
            Ok(Err(_)) | Ok(Ok(Err(_))) if store.data().limits.refused().is_some() => {
                Err(failed(SyncError::new(
                    ErrorKind::LimitExceeded,
                    format!(
                        "the provider component needed more than its {} MiB of memory \
                         (lower --max-entries or --max-metadata-bytes to fail sooner)",
                        opts.guest_memory_bytes >> 20
                    ),
                )))
            }
            // So is a cap the host enforced on what the other side sent.
            Ok(Err(_)) | Ok(Ok(Err(_))) if store.data().host_limit.is_some() => {
                Err(failed(SyncError::new(
                    ErrorKind::LimitExceeded,
                    store.data().host_limit.clone().unwrap_or_default(),
                )))
            }
            Ok(Err(trap)) => Err(failed(SyncError::new(
                ErrorKind::Transport,
                format!("the provider component trapped: {}", trap.root_cause()),
            ))),
            Ok(Ok(Err(e))) => {
                let mut error = SyncError::from(e);
                if error.kind == ErrorKind::Transport {
                    error.cause = store.data_mut().backend_failure.take();
                }
                Err(failed(error))
            }
            Ok(Ok(Ok(results))) => {
                let mut operations: Vec<OperationResult> =
                    results.into_iter().map(Into::into).collect();
                let skipped = std::mem::take(&mut store.data_mut().skipped);
                SkippedLinks::apply(&skipped, &mut operations);
                Ok(SyncOutcome {
                    operations,
                    execs,
                    toolbox_calls,
                    compression,
                    degraded,
                    skipped,
                })
            }
        }
    }
}

/// The sync-out grants, once every directory target is this call's alone
/// (see [`crate::target_lock`]): each grant names the very directory
/// locked. Waits for other calls up to `deadline`.
async fn grant_locked(
    ops: &[SyncOperation],
    opts: &SyncOptions,
    created: &mut Vec<PathBuf>,
    deadline: tokio::time::Instant,
) -> Result<(Vec<GrantedDir>, crate::target_lock::TargetLocks), SyncError> {
    use crate::target_lock::{pause, try_lock_all, Tried};
    let mappings: Vec<&crate::request::FileMapping> =
        ops.iter().flat_map(|o| o.files.iter()).collect();
    let targets: Vec<PathBuf> = mappings
        .iter()
        .filter(|m| m.kind == MappingKind::Directory)
        .map(|m| PathBuf::from(&m.target_path))
        .collect();
    loop {
        let grants = grant_all(Direction::Out, ops, opts, created)?;
        let tried = try_lock_all(&targets).map_err(|e| {
            SyncError::new(
                ErrorKind::Io,
                format!("failed to lock a sync-out target: {e}"),
            )
        })?;
        if let Tried::Held(locks, ids) = tried {
            let same = mappings.iter().zip(&grants).all(|(m, g)| {
                m.kind != MappingKind::Directory || g.identity().is_ok_and(|id| ids.contains(&id))
            });
            if same {
                targets
                    .iter()
                    .for_each(|t| crate::target_lock::sweep_beside(t));
                return Ok((grants, locks));
            }
        }
        drop(grants);
        if tokio::time::Instant::now() >= deadline {
            return Err(SyncError::new(
                ErrorKind::LimitExceeded,
                format!(
                    "another sync-out into {} held it for the whole of this call's timeout",
                    targets
                        .iter()
                        .map(|t| t.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        pause().await;
    }
}

/// Opens one grant per mapping, in order: read-only sources for sync-in,
/// read-write targets for sync-out. A file mapping grants its parent. A
/// source that is read as `tar -h` reads (`followSymlinks`, and a file
/// mapping's own source) follows symlinks wherever they lead, unless
/// `opts.confine_followed_symlinks`.
///
/// Sync-out creates a target's missing directories and notes each one in
/// `created`, so a failed call can take them back ([`remove_created`]).
fn grant_all(
    dir: Direction,
    ops: &[SyncOperation],
    opts: &SyncOptions,
    created: &mut Vec<PathBuf>,
) -> Result<Vec<GrantedDir>, SyncError> {
    let mut out = Vec::new();
    for m in ops.iter().flat_map(|o| o.files.iter()) {
        let host_path = Path::new(match dir {
            Direction::In => &m.source_path,
            Direction::Out => &m.target_path,
        });
        if !host_path.is_absolute() {
            return Err(SyncError::new(
                ErrorKind::InvalidRequest,
                format!("host path {} is not absolute", host_path.display()),
            ));
        }
        let granted = match m.kind {
            MappingKind::Directory => host_path.to_path_buf(),
            MappingKind::File => host_path.parent().map(Path::to_path_buf).ok_or_else(|| {
                SyncError::new(
                    ErrorKind::InvalidRequest,
                    format!("host path {} has no parent", host_path.display()),
                )
            })?,
        };
        if dir == Direction::Out {
            let missing: Vec<PathBuf> = granted
                .ancestors()
                .take_while(|a| std::fs::symlink_metadata(a).is_err())
                .map(Path::to_path_buf)
                .collect();
            // Deepest last: the order they are made in.
            created.extend(missing.into_iter().rev());
            std::fs::create_dir_all(&granted).map_err(|e| {
                SyncError::new(
                    ErrorKind::Io,
                    format!("failed to create {}: {e}", granted.display()),
                )
            })?;
        }
        let follow = match m.kind {
            MappingKind::Directory => m.follow_symlinks.unwrap_or(false),
            MappingKind::File => true,
        } && !opts.confine_followed_symlinks;
        let opened = match dir {
            Direction::In => GrantedDir::read_only(&granted, follow),
            Direction::Out => GrantedDir::read_write(&granted),
        };
        let g = opened.map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => SyncError::new(
                ErrorKind::InvalidRequest,
                format!("source {} does not exist", host_path.display()),
            ),
            std::io::ErrorKind::PermissionDenied if granted.parent().is_none() => SyncError::new(
                ErrorKind::Confinement,
                format!("refusing to grant {} to the provider", granted.display()),
            ),
            _ => SyncError::new(
                ErrorKind::Io,
                format!("failed to open {}: {e}", granted.display()),
            ),
        })?;
        out.push(g);
    }
    Ok(out)
}

/// Removes what [`grant_all`] created, deepest first, where it is still
/// empty: a failed sync-out leaves no new host directory behind.
fn remove_created(created: &[PathBuf]) {
    for d in created.iter().rev() {
        if let Err(e) = std::fs::remove_dir(d) {
            tracing::debug!(dir = %d.display(), error = %e, "kept a directory the sync created");
        }
    }
}
