//! `sandbox-sync serve`: a plugin worker speaking the orchestrator's
//! JSON-RPC 2.0 protocol, one JSON message per line on stdin/stdout.
//!
//! Wire facts (`paperclip-protocol.md` §1): `initialize` answers
//! `{ok: true, supportedMethods}` and lists both sync verbs (the host uses
//! native sync only when both are present); `health` and `shutdown` are
//! always there; a plugin method this provider lacks is `-32004`
//! METHOD_NOT_IMPLEMENTED; a failed sync is `-32002` WORKER_ERROR with the
//! typed error kind in `error.data`. Requests may overlap; responses are
//! matched by `id`. A malformed line gets `-32700` and the worker keeps
//! serving. `shutdown` drains in-flight work first.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Map, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, Mutex};
use tokio::task::JoinSet;

use crate::backend::BackendConfig;
use crate::request::SyncOperation;
use crate::runtime::{LoadError, Runtime};
use crate::{SyncError, SyncOptions};

/// Why the worker stopped serving.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The embedded provider component did not load.
    #[error("loading the embedded provider: {0}")]
    Load(#[from] LoadError),
    /// Reading requests failed.
    #[error("reading requests: {0}")]
    Input(#[from] std::io::Error),
}

/// JSON-RPC and plugin error codes.
pub mod code {
    /// Invalid JSON.
    pub const PARSE_ERROR: i64 = -32700;
    /// Not a request object.
    pub const INVALID_REQUEST: i64 = -32600;
    /// No such method.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// Params do not match the method.
    pub const INVALID_PARAMS: i64 = -32602;
    /// The plugin's handler failed.
    pub const WORKER_ERROR: i64 = -32002;
    /// A plugin method this provider does not implement.
    pub const METHOD_NOT_IMPLEMENTED: i64 = -32004;
}

/// The plugin methods this worker implements besides the lifecycle ones.
pub const SUPPORTED_METHODS: &[&str] = &["environmentSyncIn", "environmentSyncOut"];

/// Plugin methods of the environment-driver protocol this provider does not offer.
const PLUGIN_METHODS: &[&str] = &[
    "environmentExecute",
    "environmentValidateConfig",
    "environmentProbe",
    "environmentAcquireLease",
    "environmentResumeLease",
    "environmentReleaseLease",
    "environmentDestroyLease",
    "environmentRealizeWorkspace",
];

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SyncParams {
    #[allow(dead_code)]
    driver_key: String,
    #[allow(dead_code)]
    company_id: String,
    #[allow(dead_code)]
    environment_id: String,
    #[serde(default)]
    config: Map<String, Value>,
    lease: Lease,
    operations: Vec<SyncOperation>,
}

/// The sync knobs of a plugin config (the backend's own keys, read by
/// [`BackendConfig::from_plugin`], are left to it). A key of the wrong
/// type is an invalid-params error, never silently ignored.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SyncConfig {
    component_path: Option<PathBuf>,
    timeout_ms: Option<u64>,
    pod_activity_deadline_sec: Option<u64>,
    max_output_bytes: Option<u64>,
    max_entries: Option<u64>,
    max_metadata_bytes: Option<u64>,
    max_stderr_bytes: Option<u64>,
    confine_followed_symlinks: Option<bool>,
    strict_links: Option<bool>,
    incremental: Option<bool>,
    checksum: Option<bool>,
    compress: Option<String>,
}

impl SyncConfig {
    /// The options for a sync into `remote_dir` under this config.
    fn options(&self, remote_dir: String) -> Result<SyncOptions, String> {
        let mut opts = SyncOptions::new(remote_dir);
        if let Some(ms) = self.timeout_ms {
            opts.timeout = Duration::from_millis(ms);
        } else if let Some(s) = self.pod_activity_deadline_sec {
            opts.timeout = Duration::from_secs(s);
        }
        opts.max_output_bytes = self.max_output_bytes.unwrap_or(opts.max_output_bytes);
        opts.max_entries = self.max_entries.unwrap_or(opts.max_entries);
        opts.max_metadata_bytes = self.max_metadata_bytes.unwrap_or(opts.max_metadata_bytes);
        opts.max_stderr_bytes = self.max_stderr_bytes.unwrap_or(opts.max_stderr_bytes);
        opts.confine_followed_symlinks = self.confine_followed_symlinks.unwrap_or(false);
        opts.strict_links = self.strict_links.unwrap_or(false);
        opts.incremental = self.incremental.unwrap_or(opts.incremental);
        opts.checksum = self.checksum.unwrap_or(false);
        if let Some(c) = &self.compress {
            opts.compress = c
                .parse()
                .map_err(|e| format!("Invalid params: config.compress: {e}"))?;
        }
        Ok(opts)
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Lease {
    #[serde(default)]
    provider_lease_id: Option<String>,
    #[serde(default)]
    metadata: Map<String, Value>,
}

/// Longest message accepted; a longer line is answered with an error and
/// skipped, never buffered whole.
pub const MAX_MESSAGE: usize = 256 << 20;

enum Line {
    Message(Vec<u8>),
    TooLong,
}

/// NDJSON lines as bytes: a line that is not UTF-8 is a parse error for
/// that message only, and no line grows past [`MAX_MESSAGE`].
struct Lines<R> {
    reader: BufReader<R>,
}

impl<R: tokio::io::AsyncRead + Unpin> Lines<R> {
    fn new(input: R) -> Self {
        Lines {
            reader: BufReader::new(input),
        }
    }

    async fn next(&mut self) -> std::io::Result<Option<Line>> {
        let mut buf = Vec::new();
        let limit = MAX_MESSAGE as u64 + 1;
        let n = (&mut self.reader)
            .take(limit)
            .read_until(b'\n', &mut buf)
            .await?;
        if n == 0 {
            return Ok(None);
        }
        if buf.len() > MAX_MESSAGE {
            // Discard the rest of the line.
            let mut rest = Vec::new();
            while !rest.ends_with(b"\n") {
                rest.clear();
                if (&mut self.reader)
                    .take(64 << 10)
                    .read_until(b'\n', &mut rest)
                    .await?
                    == 0
                {
                    break;
                }
            }
            return Ok(Some(Line::TooLong));
        }
        Ok(Some(Line::Message(buf)))
    }
}

/// Shared worker state.
struct Worker {
    embedded: Arc<Runtime>,
    by_path: Mutex<HashMap<PathBuf, Arc<Runtime>>>,
    out: mpsc::UnboundedSender<Value>,
}

/// Serves requests from `input` until EOF or `shutdown`, writing responses to `output`.
///
/// # Errors
/// Only when the embedded component cannot be loaded or reading input
/// fails (a closed output ends the writer, and the worker with its input).
pub async fn serve<R, W>(input: R, output: W) -> Result<(), WorkerError>
where
    R: tokio::io::AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let embedded = Arc::new(Runtime::embedded().await?);
    let (tx, mut rx) = mpsc::unbounded_channel::<Value>();
    let writer = tokio::spawn(async move {
        let mut output = output;
        while let Some(msg) = rx.recv().await {
            let mut line = msg.to_string();
            line.push('\n');
            if output.write_all(line.as_bytes()).await.is_err() || output.flush().await.is_err() {
                break;
            }
        }
    });
    let worker = Arc::new(Worker {
        embedded,
        by_path: Mutex::new(HashMap::new()),
        out: tx,
    });
    let mut inflight = JoinSet::new();
    let mut lines = Lines::new(input);
    let mut shutdown_id = None;
    while let Some(line) = lines.next().await? {
        let line = match line {
            Line::Message(bytes) => bytes,
            Line::TooLong => {
                worker.send_error(
                    Value::Null,
                    code::INVALID_REQUEST,
                    format!("Invalid Request: a message longer than {MAX_MESSAGE} bytes"),
                    None,
                );
                continue;
            }
        };
        if line.trim_ascii().is_empty() {
            continue;
        }
        let msg: Value = match serde_json::from_slice(&line) {
            Ok(v) => v,
            Err(e) => {
                worker.send_error(
                    Value::Null,
                    code::PARSE_ERROR,
                    format!("Parse error: {e}"),
                    None,
                );
                continue;
            }
        };
        let Some(obj) = msg.as_object() else {
            worker.send_error(
                Value::Null,
                code::INVALID_REQUEST,
                "Invalid Request: not an object".into(),
                None,
            );
            continue;
        };
        let id = obj.get("id").cloned();
        let Some(method) = obj.get("method").and_then(Value::as_str) else {
            // A response to a call we never make, or junk: answer only if it has an id.
            if obj.contains_key("result") || obj.contains_key("error") {
                continue;
            }
            worker.send_error(
                id.unwrap_or(Value::Null),
                code::INVALID_REQUEST,
                "Invalid Request: no method".into(),
                None,
            );
            continue;
        };
        let Some(id) = id else {
            tracing::debug!(method, "ignoring notification");
            continue;
        };
        let params = obj.get("params").cloned().unwrap_or(Value::Null);
        match method {
            "initialize" => worker.send_result(
                id,
                json!({ "ok": true, "supportedMethods": SUPPORTED_METHODS }),
            ),
            "health" => {
                let info = worker.embedded.info();
                worker.send_result(
                    id,
                    json!({ "status": "ok", "provider": info.name, "version": info.version }),
                );
            }
            "shutdown" => {
                shutdown_id = Some(id);
                break;
            }
            "environmentSyncIn" | "environmentSyncOut" => {
                let inbound = method == "environmentSyncIn";
                let w = Arc::clone(&worker);
                inflight.spawn(async move { w.sync(id, inbound, params).await });
            }
            m if PLUGIN_METHODS.contains(&m) => worker.send_error(
                id,
                code::METHOD_NOT_IMPLEMENTED,
                format!("{m} is not implemented by this plugin"),
                None,
            ),
            m => worker.send_error(
                id,
                code::METHOD_NOT_FOUND,
                format!("Method not found: {m}"),
                None,
            ),
        }
    }
    // Drain in-flight work before answering shutdown (or on EOF).
    while inflight.join_next().await.is_some() {}
    if let Some(id) = shutdown_id {
        worker.send_result(id, Value::Null);
    }
    drop(worker);
    let _ = writer.await;
    Ok(())
}

impl Worker {
    fn send_result(&self, id: Value, result: Value) {
        let _ = self
            .out
            .send(json!({ "jsonrpc": "2.0", "id": id, "result": result }));
    }

    fn send_error(&self, id: Value, code: i64, message: String, data: Option<Value>) {
        let mut error = json!({ "code": code, "message": message });
        if let Some(d) = data {
            error["data"] = d;
        }
        let _ = self
            .out
            .send(json!({ "jsonrpc": "2.0", "id": id, "error": error }));
    }

    async fn sync(&self, id: Value, inbound: bool, params: Value) {
        let params: SyncParams = match serde_json::from_value(params) {
            Ok(p) => p,
            Err(e) => {
                return self.send_error(
                    id,
                    code::INVALID_PARAMS,
                    format!("Invalid params: {e}"),
                    None,
                )
            }
        };
        let remote_dir = match remote_dir(&params.lease.metadata) {
            Some(d) => d,
            None => {
                return self.send_error(
                    id,
                    code::INVALID_PARAMS,
                    "file sync requires a workspace remote dir: set lease.metadata.remoteCwd \
                     (or lease.metadata.workspaceRealization.remote.path)"
                        .into(),
                    None,
                )
            }
        };
        // The path to a mistyped key is part of the message (serde's own
        // errors do not name the field).
        let sync_config: SyncConfig =
            match serde_path_to_error::deserialize(Value::Object(params.config.clone())) {
                Ok(c) => c,
                Err(e) => {
                    return self.send_error(
                        id,
                        code::INVALID_PARAMS,
                        format!("Invalid params: config.{}: {}", e.path(), e.inner()),
                        None,
                    )
                }
            };
        let opts = match sync_config.options(remote_dir) {
            Ok(o) => o,
            Err(e) => return self.send_error(id, code::INVALID_PARAMS, e, None),
        };
        let config = match BackendConfig::from_plugin(
            &params.config,
            params.lease.provider_lease_id.as_deref(),
            &params.lease.metadata,
        ) {
            Ok(c) => c,
            Err(e) => {
                return self.send_error(
                    id,
                    code::INVALID_PARAMS,
                    format!("Invalid params: {e:#}"),
                    None,
                )
            }
        };
        let backend = match config.build().await {
            Ok(b) => b,
            Err(e) => {
                let data = json!({ "kind": "transport", "message": format!("{e:#}") });
                return self.send_error(
                    id,
                    code::WORKER_ERROR,
                    format!("error[transport]: {e:#}"),
                    Some(data),
                );
            }
        };
        let runtime = match &sync_config.component_path {
            None => Arc::clone(&self.embedded),
            Some(p) => match self.runtime_for(p.clone()).await {
                Ok(r) => r,
                Err(e) => {
                    return self.send_error(
                        id,
                        code::WORKER_ERROR,
                        format!("{e}"),
                        Some(json!({ "kind": "invalid-request" })),
                    )
                }
            },
        };
        let result = if inbound {
            runtime.sync_in(&params.operations, &opts, backend).await
        } else {
            runtime.sync_out(&params.operations, &opts, backend).await
        };
        match result {
            // `degraded` only where the sandbox turned a feature off: the
            // result otherwise stays the seed's shape.
            Ok(outcome) if outcome.degraded.is_empty() => {
                self.send_result(id, json!({ "operations": outcome.operations }))
            }
            Ok(outcome) => self.send_result(
                id,
                json!({ "operations": outcome.operations, "degraded": outcome.degraded }),
            ),
            Err(failed) => {
                let data = error_data(&failed.error, failed.execs);
                self.send_error(id, code::WORKER_ERROR, failed.error.to_string(), Some(data));
            }
        }
    }

    async fn runtime_for(&self, path: PathBuf) -> Result<Arc<Runtime>, LoadError> {
        let mut cache = self.by_path.lock().await;
        if let Some(r) = cache.get(&path) {
            return Ok(Arc::clone(r));
        }
        let r = Arc::new(Runtime::from_file(&path).await?);
        cache.insert(path, Arc::clone(&r));
        Ok(r)
    }
}

/// `lease.metadata.remoteCwd`, else `workspaceRealization.remote.path`
/// (the realization is filed there and not flattened: upstream #13864).
fn remote_dir(meta: &Map<String, Value>) -> Option<String> {
    meta.get("remoteCwd")
        .and_then(Value::as_str)
        .or_else(|| meta.pointer_str("/workspaceRealization/remote/path"))
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

trait PointerStr {
    fn pointer_str(&self, p: &str) -> Option<&str>;
}

impl PointerStr for Map<String, Value> {
    fn pointer_str(&self, p: &str) -> Option<&str> {
        let mut parts = p.trim_start_matches('/').split('/');
        let first = parts.next()?;
        let mut v = self.get(first)?;
        for part in parts {
            v = v.get(part)?;
        }
        v.as_str()
    }
}

fn error_data(e: &SyncError, execs: u64) -> Value {
    let mut d = json!({ "kind": e.kind.as_str(), "message": e.message, "execs": execs });
    if let Some(cause) = e.cause.as_ref().and_then(|c| c.code()) {
        d["cause"] = json!(cause);
    }
    if let Some(c) = &e.command {
        d["operationId"] = json!(c.operation_id);
        d["exitCode"] = json!(c.exit_code);
        d["timedOut"] = json!(c.timed_out);
        d["stderr"] = json!(c.stderr);
    }
    d
}
