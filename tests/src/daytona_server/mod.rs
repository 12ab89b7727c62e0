//! A fake Daytona toolbox, for the Daytona client's tests: the endpoints a
//! file-sync provider uses, under `http://127.0.0.1:<port>/toolbox/<id>/`,
//! with the daemon's behaviour as `daytona-toolbox.md` records it, and
//! every request served by real processes in a sandbox (an
//! [`ExecBackend`]: the host's GNU userland or a BusyBox root).
//!
//! - `POST /process/execute` `{command, cwd?, timeout?}`: the command text
//!   is the stdin of a shell whose stderr is its stdout; 200
//!   `{exitCode, result}`; a `cwd` it cannot enter gives `exitCode: -1`;
//!   past `timeout` seconds (absent or 0: none) the process is killed and
//!   the answer is 408 with a JSON `ErrorResponse`.
//! - `POST /files/bulk-upload`: a streamed multipart body, `files[i].path`
//!   before `files[i].file`; parents are created, the file is written
//!   through `cat >` (born 0644 under umask 022, an existing file keeps its
//!   mode, symlinks are followed); 200 `{files:[{path, bytes}]}`, or 400
//!   `{errors, files}` (a cut body is `reading part: ...`).
//! - `POST /files/bulk-download` `{paths}`: 200, multipart with the fixed
//!   boundary `DAYTONA-FILE-BOUNDARY`, a `file` part (with
//!   `Content-Length`) or an `error` part (JSON, `FILE_NOT_FOUND`,
//!   `INVALID_FILE_PATH`) per path, in order, then the closing boundary.
//! - `DELETE /files?path=&recursive=`: 204; 404 with an empty body for a
//!   missing path; 400 (empty) for a directory without `recursive=true`.
//! - A wrong or missing `Authorization: Bearer` is 401, an unknown sandbox
//!   404, both with JSON bodies.
//!
//! [`Faults`] inject failures (`faults.rs`); `process.rs` serves
//! `process/execute`, `files.rs` the file endpoints; [`ToolboxServer::calls`] lists the requests
//! served, for call counts.

mod faults;
mod files;
mod process;

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use sandbox_sync_host::exec::{ExecBackend, ExecRequest, MAX_TIMEOUT};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};

use faults::flood_answer;
pub use faults::{Faults, Flood};
use files::{delete, download, upload};
use process::execute;

type Body = BoxBody<Bytes, std::io::Error>;

/// The daemon's fixed `bulk-download` boundary.
const BOUNDARY: &str = "DAYTONA-FILE-BOUNDARY";

struct State {
    sandbox: String,
    key: String,
    backend: Arc<dyn ExecBackend>,
    faults: Mutex<Faults>,
    calls: Mutex<Vec<String>>,
    /// Bytes uploaded, downloaded, and of commands and their answers.
    wire: Arc<std::sync::atomic::AtomicU64>,
}

/// A running fake toolbox.
pub struct ToolboxServer {
    /// The toolbox URL (`http://127.0.0.1:<port>/toolbox`).
    pub url: String,
    /// The API URL (`http://127.0.0.1:<port>/api`), which answers
    /// `GET /sandbox/{id}/toolbox-proxy-url`.
    pub api_url: String,
    /// The sandbox id it serves.
    pub sandbox: String,
    /// The API key it accepts.
    pub key: String,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ToolboxServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ToolboxServer {
    /// Serves sandbox `sandbox` (key `key`) on a fresh port, each request
    /// run through `backend`.
    ///
    /// # Errors
    /// When no port can be bound.
    pub async fn start(
        backend: Arc<dyn ExecBackend>,
        sandbox: &str,
        key: &str,
    ) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let state = Arc::new(State {
            sandbox: sandbox.to_owned(),
            key: key.to_owned(),
            backend,
            faults: Mutex::new(Faults::default()),
            calls: Mutex::new(Vec::new()),
            wire: Arc::new(std::sync::atomic::AtomicU64::new(0)),
        });
        let served = Arc::clone(&state);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let state = Arc::clone(&served);
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let state = Arc::clone(&state);
                        async move { Ok::<_, Infallible>(handle(&state, req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Ok(ToolboxServer {
            url: format!("http://127.0.0.1:{port}/toolbox"),
            api_url: format!("http://127.0.0.1:{port}/api"),
            sandbox: sandbox.to_owned(),
            key: key.to_owned(),
            state,
            task,
        })
    }

    /// Injects `faults` into the requests that follow.
    pub fn set_faults(&self, faults: Faults) {
        if let Ok(mut f) = self.state.faults.lock() {
            *f = faults;
        }
    }

    /// Bytes moved so far: uploaded and downloaded file bytes (multipart
    /// framing aside), commands and their JSON answers; what crossed the
    /// link, compressed or not.
    pub fn wire_bytes(&self) -> u64 {
        self.state.wire.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The requests served so far (`"POST /process/execute"`, ...).
    pub fn calls(&self) -> Vec<String> {
        self.state
            .calls
            .lock()
            .map(|c| c.clone())
            .unwrap_or_default()
    }
}

async fn handle(state: &State, req: Request<Incoming>) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let mut body = Some(body);
    let answer = route(state, Request::from_parts(parts, ()), &mut body).await;
    if let Some(unread) = body {
        // Go's server reads up to 256 KiB of a body its handler left
        // unread before it answers, so a client still sending gets the
        // answer rather than a reset.
        drain(unread, 256 << 10).await;
    }
    answer
}

/// Reads and drops up to `max` bytes of `body`.
async fn drain(mut body: Incoming, max: usize) {
    let mut n = 0;
    while n < max {
        match body.frame().await {
            Some(Ok(f)) => n += f.data_ref().map_or(0, Bytes::len),
            _ => break,
        }
    }
}

async fn route(state: &State, req: Request<()>, body: &mut Option<Incoming>) -> Response<Body> {
    let faults = state.faults.lock().map(|f| f.clone()).unwrap_or_default();
    let path = req.uri().path().to_owned();
    if let Some(id) = path
        .strip_prefix("/api/sandbox/")
        .and_then(|p| p.strip_suffix("/toolbox-proxy-url"))
    {
        return toolbox_url(state, &req, id, &path);
    }
    let Some(rest) = path.strip_prefix("/toolbox/") else {
        return json_error(
            StatusCode::NOT_FOUND,
            "not found: no route",
            &path,
            "NOT_FOUND",
        );
    };
    let (sandbox, endpoint) = rest.split_once('/').unwrap_or((rest, ""));
    let endpoint = format!("/{endpoint}");
    if bearer(&req) != Some(state.key.as_str()) {
        return json_error(
            StatusCode::UNAUTHORIZED,
            "unauthorized: authentication failed: Bearer token is invalid",
            &path,
            "UNAUTHORIZED",
        );
    }
    if sandbox != state.sandbox {
        return json_error(
            StatusCode::NOT_FOUND,
            "sandbox container not found",
            &path,
            "NOT_FOUND",
        );
    }
    if let Ok(mut calls) = state.calls.lock() {
        calls.push(format!("{} {endpoint}", req.method()));
    }
    if let Some(l) = faults.latency {
        tokio::time::sleep(l).await;
    }
    if let Some(s) = faults
        .status
        .filter(|_| faults.status_on.is_none_or(|e| e == endpoint))
    {
        let status = StatusCode::from_u16(s).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return json_error(status, "injected failure", &path, "INTERNAL_SERVER_ERROR");
    }
    if let Some((f, n)) = faults.flood.filter(|(f, _)| {
        f.endpoint() == endpoint.trim_end_matches('/') && f.endpoint() != "/files/bulk-download"
    }) {
        state.clear_flood();
        return flood_answer(f, n, "");
    }
    let query = req.uri().query().unwrap_or_default().to_owned();
    let Some(incoming) = body.take() else {
        return json_error(
            StatusCode::BAD_REQUEST,
            "bad request: body",
            &path,
            "BAD_REQUEST",
        );
    };
    let req = req.map(|()| incoming);
    match (req.method().clone(), endpoint.as_str()) {
        (Method::POST, "/process/execute") => execute(state, req, &faults, &path).await,
        (Method::POST, "/files/bulk-upload") => upload(state, req, &faults).await,
        (Method::POST, "/files/bulk-download") => download(state, req, &faults).await,
        (Method::DELETE, "/files" | "/files/") => delete(state, &query).await,
        _ => json_error(
            StatusCode::NOT_FOUND,
            "not found: no route",
            &path,
            "NOT_FOUND",
        ),
    }
}

/// The request's bearer token.
fn bearer(req: &Request<()>) -> Option<&str> {
    req.headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
}

/// `GET /api/sandbox/{id}/toolbox-proxy-url`: where the toolbox is.
fn toolbox_url(state: &State, req: &Request<()>, id: &str, path: &str) -> Response<Body> {
    if bearer(req) != Some(state.key.as_str()) {
        return json_error(
            StatusCode::UNAUTHORIZED,
            "Invalid credentials",
            path,
            "UNAUTHORIZED",
        );
    }
    if id != state.sandbox {
        return json_error(
            StatusCode::NOT_FOUND,
            &format!("Sandbox with ID or name {id} not found"),
            path,
            "NOT_FOUND",
        );
    }
    if let Ok(mut calls) = state.calls.lock() {
        calls.push("GET /toolbox-proxy-url".to_owned());
    }
    let host = req
        .headers()
        .get(http::header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("127.0.0.1");
    ok_json(serde_json::json!({ "url": format!("http://{host}/toolbox") }))
}

impl State {
    /// A flood is the first answer of its kind only.
    fn clear_flood(&self) {
        if let Ok(mut f) = self.faults.lock() {
            f.flood = None;
        }
    }

    /// Counts `n` bytes that crossed the link.
    fn count(&self, n: usize) {
        self.wire
            .fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Paces a transfer to a byte rate.
struct Pacer {
    rate: Option<u64>,
    start: tokio::time::Instant,
    bytes: u64,
}

impl Pacer {
    fn new(rate: Option<u64>) -> Self {
        Pacer {
            rate: rate.filter(|&r| r > 0),
            start: tokio::time::Instant::now(),
            bytes: 0,
        }
    }

    /// Waits until `n` more bytes fit the rate.
    async fn pace(&mut self, n: u64) {
        let Some(rate) = self.rate else { return };
        self.bytes += n;
        let due = Duration::from_secs_f64(self.bytes as f64 / rate as f64);
        tokio::time::sleep_until(self.start + due).await;
    }
}

fn ok_json(v: serde_json::Value) -> Response<Body> {
    json_status(StatusCode::OK, v)
}

fn json_status(status: StatusCode, v: serde_json::Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(
            http::header::CONTENT_TYPE,
            "application/json; charset=utf-8",
        )
        .body(full(v.to_string()))
        .unwrap_or_else(|_| Response::new(empty()))
}

/// The daemon's and proxy's `ErrorResponse`.
fn json_error(status: StatusCode, message: &str, path: &str, code: &str) -> Response<Body> {
    json_status(
        status,
        serde_json::json!({
            "statusCode": status.as_u16(), "message": message, "code": code,
            "timestamp": "2026-12-01T00:00:00Z", "path": path, "method": "POST",
        }),
    )
}

fn full(s: String) -> Body {
    BoxBody::new(Full::new(Bytes::from(s)).map_err(|never| match never {}))
}

fn empty() -> Body {
    full(String::new())
}

/// Streams the whole stream, for tests that want it at once.
pub async fn collect_stream<S, E>(mut s: S) -> Result<Vec<u8>, E>
where
    S: futures_util::Stream<Item = Result<Bytes, E>> + Unpin,
{
    let mut out = Vec::new();
    while let Some(c) = s.next().await {
        out.extend_from_slice(&c?);
    }
    Ok(out)
}
