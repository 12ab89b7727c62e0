//! The HTTP client of one Daytona sandbox's toolbox API.

use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use http::{header, Method, Request, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper_util::client::legacy::{connect::HttpConnector, Client as HttpClient};
use hyper_util::rt::TokioExecutor;

use super::error::ToolboxError;
use super::multipart;

/// A request or response body.
type Body = BoxBody<Bytes, std::io::Error>;

/// Most bytes of a toolbox answer the client reads: a status's JSON, an
/// error body, an upload's or a delete's confirmation. Anything longer is
/// not the daemon's and is refused, not buffered.
pub const MAX_ANSWER: usize = 64 << 10;
/// Most bytes of `process/execute`'s answer: the component reads at most
/// 16 MiB of a command's output (our programs' text, which JSON escapes
/// little: a newline a line).
pub const MAX_EXECUTE_ANSWER: usize = 17 << 20;

/// How much longer than a command's own timeout the client waits for the
/// toolbox's answer (the Python SDK's margin) before it gives up itself.
const EXECUTE_MARGIN: Duration = Duration::from_secs(5);

/// What `process/execute` returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Executed {
    /// The exit code (`-1`: the command could not start).
    pub exit_code: i64,
    /// Its stdout and stderr, combined (text: invalid UTF-8 arrives as
    /// U+FFFD).
    pub output: String,
}

/// `process/execute`'s answer (older daemons say `code`).
#[derive(serde::Deserialize)]
struct ExecuteAnswer {
    #[serde(rename = "exitCode")]
    exit_code: Option<i64>,
    code: Option<i64>,
    result: Option<String>,
}

/// A file's bytes as the toolbox streams them; the stream ends with an
/// error if the transfer was cut.
pub type Download = std::pin::Pin<Box<dyn Stream<Item = Result<Bytes, ToolboxError>> + Send>>;

/// One sandbox's toolbox: the HTTP client of its API.
#[derive(Clone)]
pub struct Client {
    base: String,
    sandbox: String,
    auth: http::HeaderValue,
    client: HttpClient<hyper_rustls::HttpsConnector<HttpConnector>, Body>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// The toolbox of `sandbox` under `toolbox_url` (a region's
    /// `toolboxProxyUrl`, e.g. `https://proxy.app.daytona.io/toolbox`),
    /// authenticated with `api_key`.
    ///
    /// # Errors
    /// A key that cannot be a header, or no TLS roots on this machine.
    pub fn new(toolbox_url: &str, sandbox: &str, api_key: &str) -> Result<Self, ToolboxError> {
        if sandbox.is_empty() || sandbox.contains(['/', '?', '#']) {
            return Err(ToolboxError::Malformed(format!(
                "{sandbox:?} is not a sandbox id"
            )));
        }
        let auth = http::HeaderValue::from_str(&format!("Bearer {api_key}"))
            .map_err(|_| ToolboxError::Malformed("the API key is not a header value".into()))?;
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_native_roots()
            .map_err(|e| ToolboxError::Transport(format!("no TLS roots: {e}")))?
            .https_or_http()
            .enable_http1()
            .build();
        let client = HttpClient::builder(TokioExecutor::new()).build(https);
        Ok(Client {
            base: format!("{}/{sandbox}", toolbox_url.trim_end_matches('/')),
            sandbox: sandbox.to_owned(),
            auth,
            client,
        })
    }

    /// The toolbox of `sandbox`, its URL asked of the Daytona API at
    /// `api_url` (e.g. `https://app.daytona.io/api`):
    /// `GET {api_url}/sandbox/{id}/toolbox-proxy-url`.
    ///
    /// # Errors
    /// As [`Client::new`], and as [`ToolboxError`] for the lookup.
    pub async fn resolve(
        api_url: &str,
        sandbox: &str,
        api_key: &str,
    ) -> Result<Self, ToolboxError> {
        // A client for the API itself: same key, same TLS.
        let api = Client::new(api_url, sandbox, api_key)?;
        let uri = format!(
            "{}/sandbox/{sandbox}/toolbox-proxy-url",
            api_url.trim_end_matches('/')
        );
        let req = || {
            Request::builder()
                .method(Method::GET)
                .uri(&uri)
                .header(header::AUTHORIZATION, api.auth.clone())
                .body(empty())
                .map_err(|e| ToolboxError::Malformed(e.to_string()))
        };
        let (status, bytes) = api
            .send(req, Resend::Idempotent, "toolbox-proxy-url", MAX_ANSWER)
            .await?;
        api.check(status, &bytes, "toolbox-proxy-url")?;
        let url = serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|v| v["url"].as_str().map(str::to_owned))
            .ok_or_else(|| ToolboxError::Malformed("toolbox-proxy-url: no url".into()))?;
        Client::new(&url, sandbox, api_key)
    }

    /// Runs `command` (a script for the sandbox's shell; wrap it in
    /// `sh -c '...'`, as daemons before 0.156 split the text themselves)
    /// in `cwd`, killed after `timeout` (`None`: never).
    ///
    /// # Errors
    /// As [`ToolboxError`]; a command that outlives its timeout is
    /// [`ToolboxError::Timeout`] whether the toolbox says so (408) or not.
    pub async fn execute(
        &self,
        command: &str,
        cwd: Option<&str>,
        timeout: Option<Duration>,
    ) -> Result<Executed, ToolboxError> {
        let mut body = serde_json::json!({ "command": command });
        if let Some(cwd) = cwd {
            body["cwd"] = cwd.into();
        }
        if let Some(t) = timeout {
            // Whole seconds, at least one: 0 would mean no limit.
            body["timeout"] = t.as_secs().max(1).into();
        }
        let req = || self.json_request(Method::POST, "/process/execute", &body);
        // Never sent twice: the command may have run.
        let call = self.send(req, Resend::Never, "execute", MAX_EXECUTE_ANSWER);
        let (status, bytes) = match timeout {
            Some(t) => tokio::time::timeout(t + EXECUTE_MARGIN, call)
                .await
                .map_err(|_| ToolboxError::Timeout(t))??,
            None => call.await?,
        };
        if status == StatusCode::REQUEST_TIMEOUT {
            return Err(ToolboxError::Timeout(timeout.unwrap_or_default()));
        }
        self.check(status, &bytes, "execute")?;
        // Typed, so the output is decoded once, straight into its String.
        let answer: ExecuteAnswer = serde_json::from_slice(&bytes)
            .map_err(|e| ToolboxError::Malformed(format!("execute: {e}")))?;
        drop(bytes);
        let exit_code = answer
            .exit_code
            .or(answer.code)
            .ok_or_else(|| ToolboxError::Malformed("execute: no exitCode".into()))?;
        Ok(Executed {
            exit_code,
            output: answer.result.unwrap_or_default(),
        })
    }

    /// Streams `data` into a new file at `dest` (an absolute path with no
    /// control characters or quotes) with one `bulk-upload`, which
    /// creates its parents; the file is born `0644`. Returns the bytes
    /// sent. An error in `data` cuts the body, so the toolbox sees a
    /// truncated request and nothing is confirmed.
    ///
    /// # Errors
    /// As [`ToolboxError`]; a body that broke is [`ToolboxError::Cut`].
    pub async fn upload<S>(&self, dest: &str, data: S) -> Result<u64, ToolboxError>
    where
        S: Stream<Item = Result<Bytes, std::io::Error>> + Send + Sync + 'static,
    {
        let boundary = multipart::boundary()?;
        let (head, tail) = multipart::upload_frame(&boundary, dest)?;
        let sent = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counted = std::sync::Arc::clone(&sent);
        let broke = std::sync::Arc::new(std::sync::Mutex::new(None::<String>));
        let noted = std::sync::Arc::clone(&broke);
        let data = data.map(move |chunk| {
            match &chunk {
                Ok(b) => {
                    counted.fetch_add(b.len() as u64, std::sync::atomic::Ordering::Relaxed);
                }
                Err(e) => {
                    if let Ok(mut slot) = noted.lock() {
                        *slot = Some(e.to_string());
                    }
                }
            }
            chunk
        });
        let frames = futures_util::stream::once(async move { Ok(head) })
            .chain(data)
            .chain(futures_util::stream::once(async move { Ok(tail) }))
            .map(|r| r.map(Frame::data));
        // The body streams once, so the request is built once.
        let mut req = Request::builder()
            .method(Method::POST)
            .uri(format!("{}/files/bulk-upload", self.base))
            .header(header::AUTHORIZATION, self.auth.clone())
            .header(
                header::CONTENT_TYPE,
                format!("multipart/form-data; boundary={boundary}"),
            )
            .body(BoxBody::new(StreamBody::new(frames)))
            .map_err(|e| ToolboxError::Malformed(e.to_string()))
            .map(Some)?;
        let req = move || {
            req.take()
                .ok_or_else(|| ToolboxError::Malformed("bulk-upload: sent twice".into()))
        };
        let answer = self
            .send(req, Resend::Never, "bulk-upload", MAX_ANSWER)
            .await;
        if let Some(e) = broke.lock().ok().and_then(|mut s| s.take()) {
            return Err(ToolboxError::Cut(format!("upload of {dest}: {e}")));
        }
        let (status, bytes) = answer?;
        self.check(status, &bytes, "bulk-upload")?;
        let sent = sent.load(std::sync::atomic::Ordering::Relaxed);
        // Newer daemons confirm each file's size; older ones send nothing.
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&bytes) {
            let confirmed = v["files"]
                .as_array()
                .and_then(|f| f.iter().find(|f| f["path"] == dest))
                .and_then(|f| f["bytes"].as_u64());
            if confirmed.is_some_and(|n| n != sent) {
                return Err(ToolboxError::Cut(format!(
                    "upload of {dest}: sent {sent} bytes, the sandbox got {confirmed:?}"
                )));
            }
        }
        Ok(sent)
    }

    /// Streams the file at `path` out of the sandbox with one
    /// `bulk-download`.
    ///
    /// # Errors
    /// As [`ToolboxError`]; a file the toolbox could not read is
    /// [`ToolboxError::File`] (here, or as the stream's only item).
    pub async fn download(&self, path: &str) -> Result<Download, ToolboxError> {
        let body = serde_json::json!({ "paths": [path] });
        // A read: the file is removed by a later call, never by this one.
        let req = || self.json_request(Method::POST, "/files/bulk-download", &body);
        let resp = self
            .request(req, Resend::Idempotent, "bulk-download")
            .await?;
        let status = resp.status();
        if !status.is_success() {
            let bytes = collect(resp.into_body(), "bulk-download", MAX_ANSWER).await?;
            self.check(status, &bytes, "bulk-download")?;
            return Err(ToolboxError::Malformed(format!(
                "bulk-download: status {status}"
            )));
        }
        let boundary = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| multer::parse_boundary(v).ok())
            .ok_or_else(|| ToolboxError::Malformed("bulk-download: not multipart".into()))?;
        let body = resp.into_body().into_data_stream();
        Ok(multipart::single_file(body, boundary, path.to_owned()))
    }

    /// Removes `path` (recursively: a directory and all it holds).
    /// A path that is already gone is not an error.
    ///
    /// # Errors
    /// As [`ToolboxError`].
    pub async fn remove(&self, path: &str) -> Result<(), ToolboxError> {
        let query: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("path", path)
            .append_pair("recursive", "true")
            .finish();
        let req = || {
            Request::builder()
                .method(Method::DELETE)
                .uri(format!("{}/files?{query}", self.base))
                .header(header::AUTHORIZATION, self.auth.clone())
                .body(empty())
                .map_err(|e| ToolboxError::Malformed(e.to_string()))
        };
        let (status, bytes) = self
            .send(req, Resend::Idempotent, "delete", MAX_ANSWER)
            .await?;
        // An empty 404 is the daemon's "no such path"; one with a JSON
        // body comes from the proxy (no such sandbox).
        if status == StatusCode::NOT_FOUND && bytes.is_empty() {
            return Ok(());
        }
        self.check(status, &bytes, "delete")
    }

    fn json_request(
        &self,
        method: Method,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<Request<Body>, ToolboxError> {
        Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header(header::AUTHORIZATION, self.auth.clone())
            .header(header::CONTENT_TYPE, "application/json")
            .body(full(body.to_string()))
            .map_err(|e| ToolboxError::Malformed(e.to_string()))
    }

    /// Sends the request `make` builds and reads the whole answer, at most
    /// `cap` bytes of it (a failing status's body at most [`MAX_ANSWER`]).
    async fn send(
        &self,
        make: impl FnMut() -> Result<Request<Body>, ToolboxError>,
        resend: Resend,
        call: &'static str,
        cap: usize,
    ) -> Result<(StatusCode, Bytes), ToolboxError> {
        let resp = self.request(make, resend, call).await?;
        let status = resp.status();
        let cap = if status.is_success() { cap } else { MAX_ANSWER };
        Ok((status, collect(resp.into_body(), call, cap).await?))
    }

    /// Sends the request `make` builds; see [`Resend`].
    async fn request(
        &self,
        mut make: impl FnMut() -> Result<Request<Body>, ToolboxError>,
        resend: Resend,
        call: &'static str,
    ) -> Result<http::Response<hyper::body::Incoming>, ToolboxError> {
        let answer = match self.client.request(make()?).await {
            Err(e) if resend == Resend::Idempotent && closed_unanswered(&e) => {
                tracing::debug!(call, "a reused connection closed unanswered; sending again");
                self.client.request(make()?).await
            }
            answer => answer,
        };
        answer.map_err(|e| ToolboxError::Transport(format!("{call}: {}", chain(&e))))
    }

    /// Maps a failing status to its error.
    fn check(
        &self,
        status: StatusCode,
        body: &[u8],
        call: &'static str,
    ) -> Result<(), ToolboxError> {
        if status.is_success() {
            return Ok(());
        }
        let message = error_message(body);
        Err(match status.as_u16() {
            401 => ToolboxError::Unauthorized(message),
            400 | 404 | 502 if looks_like_sandbox(&message, status, call) => {
                ToolboxError::NoSandbox {
                    sandbox: self.sandbox.clone(),
                    status: status.as_u16(),
                    message,
                }
            }
            s => ToolboxError::Status {
                call,
                status: s,
                message,
            },
        })
    }
}

/// Whether a request is sent again when the connection the pool reused
/// for it closed before any answer. A server may close an idle
/// keep-alive connection at any moment, and does after refusing an upload
/// it did not read to the end; a request that does the same thing twice
/// (RFC 9110, 9.2.2) then goes once more, on a new connection, as
/// browsers and Go's client do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resend {
    Never,
    Idempotent,
}

/// Whether the connection closed before the answer began: cleanly (an
/// incomplete message) or with a reset, which is what a server that closes
/// with unread bytes in its socket sends (a refused upload's leftovers).
fn closed_unanswered(e: &hyper_util::client::legacy::Error) -> bool {
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        if c.downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_incomplete_message)
        {
            return true;
        }
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::BrokenPipe
            );
        }
        cause = c.source();
    }
    false
}

/// An error and its causes, on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// Whether an error came from the proxy or runner (no such sandbox, not
/// started, unreachable) rather than the daemon. A 400 from `bulk-upload`
/// is the daemon's per-file error, whose message names the destination
/// (which may well contain "sandbox").
fn looks_like_sandbox(message: &str, status: StatusCode, call: &str) -> bool {
    status == StatusCode::BAD_GATEWAY
        || status == StatusCode::NOT_FOUND
        || (call != "bulk-upload" && (message.contains("sandbox") || message.contains("Sandbox")))
}

/// The useful part of an error body: its JSON `message` or `errors`, else
/// the text.
fn error_message(body: &[u8]) -> String {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) {
        if let Some(m) = v.get("message").and_then(serde_json::Value::as_str) {
            return m.to_owned();
        }
        if let Some(e) = v.get("errors").and_then(serde_json::Value::as_array) {
            let all: Vec<&str> = e.iter().filter_map(serde_json::Value::as_str).collect();
            return all.join("; ");
        }
        if let Some(m) = v.get("error").and_then(serde_json::Value::as_str) {
            return m.to_owned();
        }
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        "(no body)".to_owned()
    } else {
        text.chars().take(500).collect()
    }
}

/// Reads `body` whole, refusing it once it passes `cap` bytes.
async fn collect(
    body: hyper::body::Incoming,
    call: &'static str,
    cap: usize,
) -> Result<Bytes, ToolboxError> {
    let mut body = std::pin::pin!(body.into_data_stream());
    let mut whole = bytes::BytesMut::new();
    while let Some(chunk) = body.next().await {
        let chunk =
            chunk.map_err(|e| ToolboxError::Cut(format!("reading the answer to {call}: {e}")))?;
        if whole.len() + chunk.len() > cap {
            return Err(ToolboxError::TooLarge { call, limit: cap });
        }
        whole.extend_from_slice(&chunk);
    }
    Ok(whole.freeze())
}

fn full(s: String) -> Body {
    BoxBody::new(Full::new(Bytes::from(s)).map_err(|never| match never {}))
}

fn empty() -> Body {
    full(String::new())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::sync::{Arc, Mutex};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server that answers each connection's first request with 204 and
    /// keeps it open, then closes it on its second request unanswered: a
    /// keep-alive connection the server dropped just as it was reused
    /// (with a reset when `reset`, as a close with unread bytes sends).
    /// Returns the address and a log of the request lines it read.
    async fn closes_reused_with(reset: bool) -> (String, Arc<Mutex<Vec<String>>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let log = Arc::clone(&log);
                tokio::spawn(async move {
                    for answered in [true, false] {
                        let Some(head) = read_head(&mut conn).await else {
                            return;
                        };
                        log.lock().unwrap().push(head);
                        if !answered {
                            if reset {
                                let _ = conn.set_zero_linger();
                            }
                            return;
                        }
                        let ok = b"HTTP/1.1 204 No Content\r\n\r\n";
                        if conn.write_all(ok).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (format!("http://{addr}"), seen)
    }

    async fn closes_reused() -> (String, Arc<Mutex<Vec<String>>>) {
        closes_reused_with(false).await
    }

    /// The request line of the next request (its headers read; the bodies
    /// here are small and sent with them).
    async fn read_head(conn: &mut tokio::net::TcpStream) -> Option<String> {
        let mut got = Vec::new();
        let mut byte = [0u8; 4096];
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = conn.read(&mut byte).await.ok().filter(|&n| n > 0)?;
            got.extend_from_slice(&byte[..n]);
        }
        let text = String::from_utf8_lossy(&got);
        text.lines().next().map(str::to_owned)
    }

    fn methods(seen: &Mutex<Vec<String>>) -> Vec<String> {
        let seen = seen.lock().unwrap();
        seen.iter()
            .map(|l| l.split(' ').next().unwrap_or_default().to_owned())
            .collect()
    }

    #[tokio::test]
    async fn a_delete_on_a_connection_closed_unanswered_goes_again() {
        let (url, seen) = closes_reused().await;
        let toolbox = Client::new(&url, "sb", "key").unwrap();
        toolbox.remove("/a").await.unwrap();
        toolbox.remove("/b").await.unwrap();
        assert_eq!(methods(&seen), ["DELETE", "DELETE", "DELETE"]);
    }

    #[tokio::test]
    async fn a_delete_on_a_connection_reset_unanswered_goes_again() {
        let (url, seen) = closes_reused_with(true).await;
        let toolbox = Client::new(&url, "sb", "key").unwrap();
        toolbox.remove("/a").await.unwrap();
        toolbox.remove("/b").await.unwrap();
        assert_eq!(methods(&seen), ["DELETE", "DELETE", "DELETE"]);
    }

    #[tokio::test]
    async fn a_command_is_never_sent_twice() {
        let (url, seen) = closes_reused().await;
        let toolbox = Client::new(&url, "sb", "key").unwrap();
        toolbox.remove("/a").await.unwrap();
        let err = toolbox.execute("true", None, None).await.unwrap_err();
        assert!(
            matches!(&err, ToolboxError::Transport(m) if m.contains("connection closed")),
            "{err}"
        );
        assert_eq!(methods(&seen), ["DELETE", "POST"]);
    }
}
