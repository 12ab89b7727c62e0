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
//! [`Faults`] inject failures; [`ToolboxServer::calls`] lists the requests
//! served, for call counts.

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

type Body = BoxBody<Bytes, std::io::Error>;

/// The daemon's fixed `bulk-download` boundary.
const BOUNDARY: &str = "DAYTONA-FILE-BOUNDARY";

/// Failures the fake injects.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// Every request (or, with `status_on`, every request to that
    /// endpoint) is answered with this status and a JSON error.
    pub status: Option<u16>,
    /// The endpoint (`"/process/execute"`, ...) `status` applies to.
    pub status_on: Option<&'static str>,
    /// `bulk-upload` stops reading a file part after this many bytes and
    /// answers as the daemon does a truncated body (the bytes so far stay
    /// in the sandbox).
    pub cut_upload_after: Option<u64>,
    /// Upload and download file bytes, commands and their answers are
    /// paced to this many bytes a second (a throttled link).
    pub bytes_per_sec: Option<u64>,
    /// Every request waits this long before it is served (the round trips
    /// through the proxy and the runner).
    pub latency: Option<Duration>,
    /// `process/execute` never answers.
    pub execute_hangs: bool,
    /// `bulk-download` stops after this many bytes of file data and ends
    /// the answer without its closing boundary (a failed read, as the
    /// daemon ends it).
    pub cut_download_after: Option<u64>,
    /// The first answer of one kind is a flood of this many bytes that
    /// never becomes a valid answer (a hostile or broken toolbox),
    /// streamed as it is made.
    pub flood: Option<(Flood, u64)>,
}

/// An answer a hostile toolbox floods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flood {
    /// `process/execute`: 200, a JSON `result` string that never ends.
    Execute,
    /// `process/execute`: 500 with an endless body.
    ExecuteError,
    /// `bulk-upload`: 200, a confirmation that never ends.
    Upload,
    /// `DELETE /files`: 400 with an endless body.
    Delete,
    /// `bulk-download`: 500 with an endless body.
    DownloadError,
    /// `bulk-download`: 200 multipart whose preamble never ends.
    DownloadPreamble,
    /// `bulk-download`: 200 multipart whose first part's headers never end.
    DownloadHeaders,
    /// `bulk-download`: 200, an `error` part that never ends.
    DownloadErrorPart,
}

impl Flood {
    fn endpoint(self) -> &'static str {
        match self {
            Flood::Execute | Flood::ExecuteError => "/process/execute",
            Flood::Upload => "/files/bulk-upload",
            Flood::Delete => "/files",
            _ => "/files/bulk-download",
        }
    }
}

/// `head`, then `n` bytes of `fill`, made as they are sent.
fn flood_body(head: String, fill: u8, n: u64) -> Body {
    let chunk = Bytes::from(vec![fill; 64 << 10]);
    let rest = futures_util::stream::unfold(n, move |left| {
        let chunk = chunk.clone();
        async move {
            let k = usize::try_from(left.min(chunk.len() as u64)).ok()?;
            (k > 0).then(|| (Ok(Frame::data(chunk.slice(..k))), left - k as u64))
        }
    });
    let head = futures_util::stream::once(async move { Ok(Frame::data(Bytes::from(head))) });
    BoxBody::new(StreamBody::new(head.chain(rest)))
}

/// The flood `f` of `n` bytes, as an answer; `path` is the file asked for.
fn flood_answer(f: Flood, n: u64, path: &str) -> Response<Body> {
    let multipart = format!("multipart/form-data; boundary={BOUNDARY}");
    let (status, kind, head, fill) = match f {
        Flood::Execute => (200, "application/json", "{\"exitCode\":0,\"result\":\"".into(), b'A'),
        Flood::ExecuteError | Flood::Delete | Flood::DownloadError => {
            (if f == Flood::Delete { 400 } else { 500 }, "text/plain", String::new(), b'x')
        }
        Flood::Upload => (200, "application/json", "{\"files\":[{\"path\":\"".into(), b'p'),
        Flood::DownloadPreamble => (200, multipart.as_str(), String::new(), b'-'),
        Flood::DownloadHeaders => (
            200,
            multipart.as_str(),
            format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{path}\"\r\nX-Pad: "),
            b'h',
        ),
        Flood::DownloadErrorPart => (
            200,
            multipart.as_str(),
            format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"error\"; filename=\"{path}\"\r\n\r\n"),
            b'e',
        ),
    };
    Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, kind.to_owned())
        .body(flood_body(head, fill, n))
        .unwrap_or_else(|_| Response::new(empty()))
}

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

async fn execute(
    state: &State,
    req: Request<Incoming>,
    faults: &Faults,
    path: &str,
) -> Response<Body> {
    let Ok(body) = req.into_body().collect().await.map(|b| b.to_bytes()) else {
        return json_error(
            StatusCode::BAD_REQUEST,
            "bad request: body",
            path,
            "BAD_REQUEST",
        );
    };
    // A command's text and its output cross the link too.
    let mut pacer = Pacer::new(faults.bytes_per_sec);
    pacer.pace(body.len() as u64).await;
    state.count(body.len());
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(&body) else {
        return json_error(
            StatusCode::BAD_REQUEST,
            "bad request: invalid request body",
            path,
            "BAD_REQUEST",
        );
    };
    let command = v["command"].as_str().unwrap_or_default().to_owned();
    if command.trim().is_empty() {
        return json_error(
            StatusCode::BAD_REQUEST,
            "bad request: command cannot be empty or whitespace-only",
            path,
            "BAD_REQUEST",
        );
    }
    if faults.execute_hangs {
        tokio::time::sleep(MAX_TIMEOUT).await;
    }
    let timeout = v["timeout"]
        .as_u64()
        .filter(|&t| t > 0)
        .map_or(MAX_TIMEOUT, Duration::from_secs);
    // The command is the shell's stdin; its stderr joins its stdout.
    let mut argv = vec!["/bin/sh".to_owned(), "-c".to_owned()];
    match v["cwd"].as_str() {
        Some(cwd) => argv.extend([
            "cd -- \"$1\" || exit 255; exec 2>&1; exec /bin/sh".to_owned(),
            "toolbox".to_owned(),
            cwd.to_owned(),
        ]),
        None => argv.push("exec 2>&1; exec /bin/sh".to_owned()),
    }
    let started = state.backend.start(ExecRequest {
        argv,
        timeout,
        max_stderr: 1 << 20,
    });
    let mut p = match started.await {
        Ok(p) => p,
        Err(e) => return ok_json(serde_json::json!({"exitCode": -1, "result": e.to_string()})),
    };
    let _ = p.stdin.write_all(command.as_bytes()).await;
    // Only closing the pipe ends the shell's input.
    p.stdin = Box::new(tokio::io::sink());
    let mut out = Vec::new();
    let _ = p.stdout.read_to_end(&mut out).await;
    let status = match p.control.wait().await {
        Ok(s) => s,
        Err(e) => return ok_json(serde_json::json!({"exitCode": -1, "result": e.to_string()})),
    };
    if status.timed_out {
        return json_error(
            StatusCode::REQUEST_TIMEOUT,
            "request timeout: command execution timeout",
            path,
            "REQUEST_TIMEOUT",
        );
    }
    if status.exit_code == Some(255) && out.is_empty() {
        // The cwd could not be entered: the daemon's start failure.
        let why = String::from_utf8_lossy(&status.stderr).into_owned();
        return ok_json(serde_json::json!({"exitCode": -1, "result": why}));
    }
    let answer = serde_json::json!({
        "exitCode": status.exit_code.unwrap_or(-1),
        "result": String::from_utf8_lossy(&out),
    });
    let len = answer.to_string().len();
    pacer.pace(len as u64).await;
    state.count(len);
    ok_json(answer)
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

async fn upload(state: &State, req: Request<Incoming>, faults: &Faults) -> Response<Body> {
    let boundary = req
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| multer::parse_boundary(v).ok());
    let Some(boundary) = boundary else {
        return json_status(
            StatusCode::BAD_REQUEST,
            serde_json::json!({"errors": ["invalid multipart form"]}),
        );
    };
    let mut parts = multer::Multipart::new(req.into_body().into_data_stream(), boundary);
    let mut errors: Vec<String> = Vec::new();
    let mut files = Vec::new();
    let mut paths = std::collections::HashMap::new();
    loop {
        let mut field = match parts.next_field().await {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) => {
                errors.push(format!("reading part: {e}"));
                break;
            }
        };
        let name = field.name().unwrap_or_default().to_owned();
        let index = name
            .strip_prefix("files[")
            .and_then(|n| n.split_once(']'))
            .map(|(i, kind)| (i.to_owned(), kind.to_owned()));
        match index {
            Some((i, kind)) if kind == ".path" => match field.text().await {
                Ok(p) if !p.trim().is_empty() => {
                    paths.insert(i, p.trim().to_owned());
                }
                Ok(_) => errors.push(format!("path[{i}]: empty path")),
                Err(e) => errors.push(format!("reading part: {e}")),
            },
            Some((i, kind)) if kind == ".file" => {
                let Some(dest) = paths.get(&i).cloned() else {
                    errors.push(format!("file[{i}]: missing .path metadata"));
                    continue;
                };
                match write_file(state, &dest, &mut field, faults).await {
                    Ok(bytes) => files.push(serde_json::json!({"path": dest, "bytes": bytes})),
                    Err(e) => {
                        errors.push(format!("{dest}: {e}"));
                        if e.starts_with("reading part") {
                            break;
                        }
                    }
                }
            }
            _ => {}
        }
    }
    // The daemon drains the body before it answers.
    drop(parts);
    if errors.is_empty() {
        ok_json(serde_json::json!({ "files": files }))
    } else {
        json_status(
            StatusCode::BAD_REQUEST,
            serde_json::json!({"errors": errors, "files": files}),
        )
    }
}

/// Streams one part into `dest` in the sandbox; the bytes written.
async fn write_file(
    state: &State,
    dest: &str,
    field: &mut multer::Field<'_>,
    faults: &Faults,
) -> Result<u64, String> {
    let cut_after = faults.cut_upload_after;
    let mut pacer = Pacer::new(faults.bytes_per_sec);
    let mut p = state
        .backend
        .start(ExecRequest {
            argv: vec![
                "/bin/sh".into(),
                "-c".into(),
                "mkdir -p -- \"${1%/*}\" && exec cat > \"$1\"".into(),
                "upload".into(),
                dest.to_owned(),
            ],
            timeout: MAX_TIMEOUT,
            max_stderr: 1 << 16,
        })
        .await
        .map_err(|e| format!("create: {e}"))?;
    let mut n = 0u64;
    let mut cut = None;
    loop {
        match field.chunk().await {
            Ok(Some(c)) => {
                let room = cut_after.map_or(c.len(), |max| {
                    usize::try_from(max.saturating_sub(n))
                        .unwrap_or(usize::MAX)
                        .min(c.len())
                });
                n += room as u64;
                pacer.pace(room as u64).await;
                if p.stdin.write_all(&c[..room]).await.is_err() {
                    break;
                }
                if room < c.len() {
                    cut = Some("reading part: unexpected EOF".to_owned());
                    break;
                }
            }
            Ok(None) => break,
            Err(e) => {
                cut = Some(format!("reading part: {e}"));
                break;
            }
        }
    }
    p.stdin = Box::new(tokio::io::sink());
    state
        .wire
        .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    let status = p.control.wait().await.map_err(|e| format!("write: {e}"))?;
    if let Some(c) = cut {
        return Err(c);
    }
    if status.exit_code != Some(0) {
        return Err(format!(
            "create: {}",
            String::from_utf8_lossy(&status.stderr).trim()
        ));
    }
    Ok(n)
}

async fn download(state: &State, req: Request<Incoming>, faults: &Faults) -> Response<Body> {
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let paths: Vec<String> = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["paths"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|p| p.as_str().map(str::to_owned))
        .collect();
    if paths.is_empty() {
        return json_status(
            StatusCode::BAD_REQUEST,
            serde_json::json!({"error": "request body must be {\"paths\": [ ... ]} and non-empty"}),
        );
    }
    if let Some((f, n)) = faults
        .flood
        .filter(|(f, _)| f.endpoint() == "/files/bulk-download")
    {
        state.clear_flood();
        return flood_answer(f, n, &paths[0]);
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(8);
    let backend = Arc::clone(&state.backend);
    let mut budget = faults.cut_download_after;
    tokio::spawn(async move {
        for path in paths {
            if !send_part(&*backend, &path, &tx, &mut budget).await {
                // Cut: the answer ends here, without its closing boundary.
                return;
            }
        }
        let _ = tx
            .send(Ok(Frame::data(Bytes::from(format!("--{BOUNDARY}--\r\n")))))
            .await;
    });
    let counted = Arc::clone(&state.wire);
    let pacer = Pacer::new(faults.bytes_per_sec);
    let frames = futures_util::stream::unfold((rx, pacer), |(mut rx, mut pacer)| async move {
        let f = rx.recv().await?;
        if let Ok(f) = &f {
            pacer.pace(f.data_ref().map_or(0, Bytes::len) as u64).await;
        }
        Some((f, (rx, pacer)))
    })
    .inspect(move |f| {
        if let Ok(f) = f {
            let n = f.data_ref().map_or(0, Bytes::len) as u64;
            counted.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        }
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(
            http::header::CONTENT_TYPE,
            format!("multipart/form-data; boundary={BOUNDARY}"),
        )
        .body(BoxBody::new(StreamBody::new(frames)))
        .unwrap_or_else(|_| Response::new(empty()))
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

/// Sends `path`'s part; false once the injected cut happened.
async fn send_part(
    backend: &dyn ExecBackend,
    path: &str,
    tx: &tokio::sync::mpsc::Sender<Result<Frame<Bytes>, std::io::Error>>,
    budget: &mut Option<u64>,
) -> bool {
    let send = move |b: Bytes| async move { tx.send(Ok(Frame::data(b))).await.is_ok() };
    let disposition = format!("filename=\"{path}\"; filename*=utf-8''{path}");
    let started = backend
        .start(ExecRequest {
            argv: vec![
                "/bin/sh".into(),
                "-c".into(),
                // A failed `exec` redirection ends the shell (status 2), so
                // a missing path is told apart first.
                "[ -e \"$1\" ] || exit 3; exec 3<\"$1\"; [ ! -d /proc/self/fd/3 ] || exit 4; \
                 stat -L -c %s /proc/self/fd/3 || exit 5; exec cat <&3"
                    .into(),
                "download".into(),
                path.to_owned(),
            ],
            timeout: MAX_TIMEOUT,
            max_stderr: 1 << 16,
        })
        .await;
    let Ok(mut p) = started else {
        return error_part(tx, path, &disposition, 500, "FILE_READ_FAILED").await;
    };
    p.stdin = Box::new(tokio::io::sink());
    let mut out = tokio::io::BufReader::new(&mut p.stdout);
    let mut size_line = String::new();
    let _ = out.read_line(&mut size_line).await;
    let Ok(size) = size_line.trim().parse::<u64>() else {
        drop(out);
        let code = p.control.wait().await.ok().and_then(|s| s.exit_code);
        let (status, code) = match code {
            Some(4) => (400, "INVALID_FILE_PATH"),
            Some(3) => (404, "FILE_NOT_FOUND"),
            _ => (500, "FILE_READ_FAILED"),
        };
        return error_part(tx, path, &disposition, status, code).await;
    };
    let head = format!(
        "--{BOUNDARY}\r\nContent-Type: application/octet-stream\r\n\
Content-Disposition: form-data; name=\"file\"; {disposition}\r\nContent-Length: {size}\r\n\r\n"
    );
    if !send(Bytes::from(head)).await {
        return false;
    }
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match out.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let mut chunk = &buf[..n];
        if let Some(left) = budget.as_mut() {
            let take = chunk
                .len()
                .min(usize::try_from(*left).unwrap_or(usize::MAX));
            chunk = &chunk[..take];
            *left -= take as u64;
            if *left == 0 {
                let _ = send(Bytes::copy_from_slice(chunk)).await;
                p.control.abort();
                return false;
            }
        }
        if !send(Bytes::copy_from_slice(chunk)).await {
            return false;
        }
    }
    drop(out);
    let _ = p.control.wait().await;
    send(Bytes::from_static(b"\r\n")).await
}

async fn error_part(
    tx: &tokio::sync::mpsc::Sender<Result<Frame<Bytes>, std::io::Error>>,
    path: &str,
    disposition: &str,
    status: u16,
    code: &str,
) -> bool {
    let message = match code {
        "FILE_NOT_FOUND" => format!("file not found: {path}"),
        "INVALID_FILE_PATH" => "path points to a directory".to_owned(),
        _ => format!("failed to read file: {path}"),
    };
    let json = serde_json::json!({
        "statusCode": status, "message": message, "code": code,
        "timestamp": "2026-12-01T00:00:00Z", "path": path, "method": "POST",
    });
    let part = format!(
        "--{BOUNDARY}\r\nContent-Type: application/json; charset=utf-8\r\n\
Content-Disposition: form-data; name=\"error\"; {disposition}\r\n\r\n{json}\r\n"
    );
    tx.send(Ok(Frame::data(Bytes::from(part)))).await.is_ok()
}

async fn delete(state: &State, query: &str) -> Response<Body> {
    let mut path = String::new();
    let mut recursive = String::new();
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        match &*k {
            "path" => path = v.into_owned(),
            "recursive" => recursive = v.into_owned(),
            _ => {}
        }
    }
    let started = state.backend.start(ExecRequest {
        argv: vec![
            "/bin/sh".into(),
            "-c".into(),
            "[ -e \"$1\" ] || exit 3; if [ -d \"$1\" ] && [ \"$2\" != true ]; then exit 4; fi; \
             exec rm -rf -- \"$1\""
                .into(),
            "delete".into(),
            path,
            recursive,
        ],
        timeout: MAX_TIMEOUT,
        max_stderr: 1 << 16,
    });
    let code = match started.await {
        Ok(mut p) => {
            p.stdin = Box::new(tokio::io::sink());
            p.control.wait().await.ok().and_then(|s| s.exit_code)
        }
        Err(_) => None,
    };
    let status = match code {
        Some(0) => StatusCode::NO_CONTENT,
        Some(3) => StatusCode::NOT_FOUND,
        Some(4) => StatusCode::BAD_REQUEST,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    Response::builder()
        .status(status)
        .body(empty())
        .unwrap_or_else(|_| Response::new(empty()))
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
