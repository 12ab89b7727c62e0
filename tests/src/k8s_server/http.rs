//! The plain HTTP/1.1 side: read and parse one request head, route it,
//! answer `GET pods/{name}` and every error with a complete JSON response,
//! and run the API server's own checks before an exec is upgraded.

use std::io;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::http::StatusCode;

use super::config::FakePod;
use super::status::{
    not_found_json, Failure, BAD_REQUEST, JSON_CONTENT_TYPE, METHOD_NOT_ALLOWED, NOT_FOUND,
};
use super::upgrade::upgrade_exec;
use super::Shared;

/// Largest request head we read.
const MAX_HEAD: usize = 64 * 1024;
/// Headers parsed per request head.
const MAX_HEADERS: usize = 64;

/// Errors reading a request head (logged, answered with a 400 or a close).
#[derive(Debug, thiserror::Error)]
enum HeadError {
    #[error("failed to read the request head: {0}")]
    Read(#[source] io::Error),
    #[error("the request head is larger than {MAX_HEAD} bytes")]
    TooLarge,
    #[error("the connection closed in the middle of a request head")]
    Truncated,
    #[error("failed to parse the request head: {0}")]
    Parse(#[source] httparse::Error),
}

/// A parsed request head.
struct Head {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
}

impl Head {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn path_and_query(&self) -> (&str, &str) {
        self.target
            .split_once('?')
            .unwrap_or((self.target.as_str(), ""))
    }
}

/// Reads until the end of the request head; returns every byte read, or
/// `None` when the client closed an idle connection.
async fn read_head(stream: &mut TcpStream) -> Result<Option<Vec<u8>>, HeadError> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        if buf.windows(4).any(|w| w == b"\r\n\r\n") {
            return Ok(Some(buf));
        }
        if buf.len() > MAX_HEAD {
            return Err(HeadError::TooLarge);
        }
        let n = stream.read(&mut chunk).await.map_err(HeadError::Read)?;
        if n == 0 {
            return if buf.is_empty() {
                Ok(None)
            } else {
                Err(HeadError::Truncated)
            };
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn parse_head(buf: &[u8]) -> Result<Head, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf).map_err(HeadError::Parse)? {
        httparse::Status::Complete(_) => Ok(Head {
            method: req.method.unwrap_or_default().to_owned(),
            target: req.path.unwrap_or_default().to_owned(),
            headers: req
                .headers
                .iter()
                .map(|h| {
                    (
                        h.name.to_owned(),
                        String::from_utf8_lossy(h.value).into_owned(),
                    )
                })
                .collect(),
        }),
        httparse::Status::Partial => Err(HeadError::Truncated),
    }
}

/// What a request asks for.
enum Route<'a> {
    Pod { namespace: &'a str, pod: &'a str },
    Exec { namespace: &'a str, pod: &'a str },
    Unknown,
}

fn route(path: &str) -> Route<'_> {
    let Some(rest) = path.strip_prefix("/api/v1/namespaces/") else {
        return Route::Unknown;
    };
    let parts: Vec<&str> = rest.split('/').collect();
    match *parts.as_slice() {
        [namespace, "pods", pod] => Route::Pod { namespace, pod },
        [namespace, "pods", pod, "exec"] => Route::Exec { namespace, pod },
        _ => Route::Unknown,
    }
}

/// The exec query, as the API server reads it.
#[derive(Debug, Default)]
struct ExecQuery {
    command: Vec<String>,
    container: Option<String>,
    stdin: bool,
    stdout: bool,
    stderr: bool,
    tty: bool,
}

fn truthy(value: &str) -> bool {
    value == "true" || value == "1"
}

fn parse_exec_query(query: &str) -> ExecQuery {
    let mut q = ExecQuery::default();
    // `form_urlencoded::parse` skips the empty pair kube-rs leaves after `?`.
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        match &*key {
            "command" => q.command.push(value.into_owned()),
            "container" => q.container = Some(value.into_owned()),
            "stdin" => q.stdin = truthy(&value),
            "stdout" => q.stdout = truthy(&value),
            "stderr" => q.stderr = truthy(&value),
            "tty" => q.tty = truthy(&value),
            other => tracing::trace!(param = other, "ignoring exec parameter"),
        }
    }
    q
}

/// Serves one connection: one plain request, or one exec.
pub(super) async fn handle_connection(mut stream: TcpStream, shared: Arc<Shared>) {
    let (buf, head) = match read_head(&mut stream).await {
        Ok(None) => return,
        Ok(Some(buf)) => match parse_head(&buf) {
            Ok(head) => (buf, head),
            Err(e) => return bad_head(stream, &e).await,
        },
        Err(e) => return bad_head(stream, &e).await,
    };
    if head.method != "GET" {
        let msg = format!("method {} is not supported by this fake", head.method);
        respond_failure(stream, METHOD_NOT_ALLOWED, &msg).await;
        return;
    }
    let (path, query) = head.path_and_query();
    let namespace_ok = |ns: &str| ns == shared.config.namespace;
    match route(path) {
        Route::Pod { namespace, pod } => match shared.pod(pod) {
            Some(found) if namespace_ok(namespace) => {
                respond(stream, StatusCode::OK, &pod_json(namespace, found)).await;
            }
            _ => respond(stream, NOT_FOUND.code, &not_found_json(pod)).await,
        },
        Route::Exec { namespace, pod } => {
            let found = match shared.pod(pod) {
                Some(found) if namespace_ok(namespace) => found.clone(),
                _ => return respond(stream, NOT_FOUND.code, &not_found_json(pod)).await,
            };
            let exec = parse_exec_query(query);
            if let Err(message) = validate_exec(&found, &exec, &head) {
                tracing::debug!(code = BAD_REQUEST.code.as_u16(), %message, "exec rejected");
                respond_failure(stream, BAD_REQUEST, &message).await;
                return;
            }
            upgrade_exec(stream, buf, exec.command, shared).await;
        }
        Route::Unknown => {
            let msg = format!("the server could not find the requested resource {path}");
            respond_failure(stream, NOT_FOUND, &msg).await;
        }
    }
}

async fn bad_head(stream: TcpStream, e: &HeadError) {
    tracing::debug!(error = %e, "bad request head");
    respond_failure(stream, BAD_REQUEST, &e.to_string()).await;
}

/// The API server's own checks before it upgrades an exec; the error is
/// the message of a `BadRequest`.
fn validate_exec(pod: &FakePod, exec: &ExecQuery, head: &Head) -> Result<(), String> {
    if !head
        .header("Upgrade")
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
    {
        return Err("Upgrade request required".into());
    }
    if !exec.stdin && !exec.stdout && !exec.stderr {
        return Err("you must specify at least 1 of stdin, stdout, stderr".into());
    }
    if exec.tty && exec.stderr {
        return Err("tty and stderr cannot both be true".into());
    }
    if exec.command.is_empty() {
        return Err("you must specify at least one command for the container".into());
    }
    let container = match (&exec.container, pod.containers.as_slice()) {
        (Some(c), _) => c.clone(),
        (None, [only]) => only.clone(),
        (None, all) => {
            return Err(format!(
                "a container name must be specified for pod {}, choose one of: [{}]",
                pod.name,
                all.join(" ")
            ))
        }
    };
    if !pod.containers.contains(&container) {
        return Err(format!(
            "container {container} is not valid for pod {}",
            pod.name
        ));
    }
    match pod.phase.as_str() {
        "Running" => Ok(()),
        phase @ ("Succeeded" | "Failed") => Err(format!(
            "cannot exec into a container in a completed pod; current phase is {phase}"
        )),
        _ => Err(format!(
            "unable to upgrade connection: container not found (\"{container}\")"
        )),
    }
}

/// Answers `failure` with its `Status` body.
async fn respond_failure(stream: TcpStream, failure: Failure, message: &str) {
    respond(stream, failure.code, &failure.json(message)).await;
}

/// Writes a complete JSON response and closes the connection (the client
/// then opens a fresh one for its next request).
async fn respond(mut stream: TcpStream, code: StatusCode, body: &str) {
    let reason = code.canonical_reason().unwrap_or("Unknown");
    let code = code.as_u16();
    let head = format!(
        "HTTP/1.1 {code} {reason}\r\ncontent-type: {JSON_CONTENT_TYPE}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let written = async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        stream.shutdown().await
    };
    if let Err(e) = written.await {
        tracing::debug!(error = %e, "failed to write a response");
    }
}

fn pod_json(namespace: &str, pod: &FakePod) -> String {
    let containers: Vec<serde_json::Value> = pod
        .containers
        .iter()
        .map(|c| serde_json::json!({ "name": c, "image": "sandbox:fake" }))
        .collect();
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod.name,
            "namespace": namespace,
            "uid": format!("00000000-0000-0000-0000-{:012x}", fnv(&pod.name)),
        },
        "spec": { "containers": containers },
        "status": { "phase": pod.phase },
    })
    .to_string()
}

/// A stable 48-bit id for a fake UID.
fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    }) & 0xffff_ffff_ffff
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kube_rs_exec_query() {
        let q = parse_exec_query(
            "&stdin=true&stdout=true&stderr=true&container=box&command=sh&command=-c&command=echo+a%26b",
        );
        assert_eq!(q.command, ["sh", "-c", "echo a&b"]);
        assert_eq!(q.container.as_deref(), Some("box"));
        assert!(q.stdin && q.stdout && q.stderr && !q.tty);
    }

    #[test]
    fn routes() {
        assert!(matches!(
            route("/api/v1/namespaces/ns/pods/p"),
            Route::Pod {
                namespace: "ns",
                pod: "p"
            }
        ));
        assert!(matches!(
            route("/api/v1/namespaces/ns/pods/p/exec"),
            Route::Exec {
                namespace: "ns",
                pod: "p"
            }
        ));
        assert!(matches!(
            route("/api/v1/namespaces/ns/pods/p/log"),
            Route::Unknown
        ));
    }
}
