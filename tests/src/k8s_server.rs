//! A fake Kubernetes API server for the `kube` backend's tests: just enough
//! of `GET pods/{name}` and the `pods/{name}/exec` WebSocket protocol, over
//! plain HTTP/1.1 on `127.0.0.1:0`, with real processes behind each exec.
//!
//! - `GET /api/v1/namespaces/{ns}/pods/{name}` answers a minimal `Pod`
//!   (phase and containers from [`FakePod`]) or a `404` `Status`.
//! - `GET /api/v1/namespaces/{ns}/pods/{name}/exec?command=…&container=…&stdin=true…`
//!   with `Upgrade: websocket` becomes a WebSocket (tokio-tungstenite's
//!   `accept_hdr_async_with_config`), negotiating `v5.channel.k8s.io` when
//!   offered and enabled, else `v4.channel.k8s.io`. The argv runs as a real
//!   process built by the test's [`CommandFactory`] (e.g. `unshare` +
//!   `chroot` into a sandbox root, as the `local` backend does).
//! - Frames are binary, first byte the channel: 0 stdin, 1 stdout, 2 stderr,
//!   3 status (`metav1.Status` JSON), 4 resize, and on v5 255 = close, whose
//!   payload is the closed channel. After the process exits and its output
//!   is forwarded, one status frame is sent and the socket is closed.
//! - Stdin is pumped with backpressure: a stdin frame is only read off the
//!   socket once the previous few were written to the child.
//! - [`Faults`] inject failures: drop the connection after N stdout bytes,
//!   withhold the status frame, stall stdin, throttle stdin.
//!
//! Use [`K8sExecServer::kubeconfig`] to point a client at it:
//!
//! ```ignore
//! let server = K8sExecServer::start(ServerConfig::new("ns", "pod", "box", HostCommands)).await?;
//! let dir = tempfile::tempdir()?;
//! let kubeconfig = dir.path().join("kubeconfig");
//! std::fs::write(&kubeconfig, server.kubeconfig())?;
//! let backend = KubeBackend::from_config(Some(kubeconfig), None, None, "pod", None).await?;
//! server.set_faults(Faults { withhold_status: true, ..Faults::default() });
//! ```
//!
//! What kube-rs 5.0.0 sends (read from kube-core/kube-client 5.0.0):
//! `GET {url_path}/{name}/exec?&stdin=true&stdout=true&stderr=true&container=C&command=A&command=B`
//! (the `&` after `?` is really there; optional params come before the
//! commands, each `true` only when set) with `Connection: Upgrade`,
//! `Upgrade: websocket`, `Sec-WebSocket-Version: 13`, a `Sec-WebSocket-Key`
//! and one `Sec-WebSocket-Protocol: v5.channel.k8s.io, v4.channel.k8s.io`
//! header. It requires `101`, `Upgrade: websocket`, `Connection: Upgrade`,
//! the accept key, and a `Sec-WebSocket-Protocol` equal to v4 or v5; a 4xx
//! or 5xx body is parsed as a `Status` and surfaces as `kube::Error::Api`.
//! Its client pings every 60 s (tungstenite answers while we read).

// Test support: not every test binary uses every knob.
#![allow(dead_code)]

use std::io;
use std::net::SocketAddr;
use std::os::unix::process::ExitStatusExt;
use std::pin::Pin;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{ChildStdin, Command};
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinHandle, JoinSet};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::{header, HeaderValue, StatusCode};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Bytes, Message};
use tokio_tungstenite::WebSocketStream;

/// Channel ids, from
/// <https://github.com/kubernetes/kubernetes/blob/master/staging/src/k8s.io/apimachinery/pkg/util/remotecommand/constants.go>.
const STDIN_CHANNEL: u8 = 0;
const STDOUT_CHANNEL: u8 = 1;
const STDERR_CHANNEL: u8 = 2;
const STATUS_CHANNEL: u8 = 3;
const RESIZE_CHANNEL: u8 = 4;
/// v5 only: "this channel is at EOF"; the payload is the channel id.
const CLOSE_CHANNEL: u8 = 255;

/// Largest request head we read.
const MAX_HEAD: usize = 64 * 1024;
/// Largest WebSocket message we accept (kube-rs sends stdin in 4 KiB frames).
const MAX_MESSAGE: usize = 1 << 20;
/// Bytes read from the child's stdout/stderr per frame.
const OUTPUT_CHUNK: usize = 32 * 1024;
/// Stdin frames queued between the socket and the child: the whole of our
/// stdin buffering, so a slow child pushes back on the client over TCP.
const STDIN_QUEUE: usize = 4;
/// Frames queued for the socket.
const OUT_QUEUE: usize = 16;
/// After the child exits, how long its stdout/stderr may stay open (a
/// stray grandchild) before we stop forwarding them.
const OUTPUT_GRACE: Duration = Duration::from_secs(2);
/// How long to flush queued frames before cutting a connection.
const FLUSH_GRACE: Duration = Duration::from_secs(2);
/// After our close frame, how long the client gets to close its side.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// A `tokio::process::Command` for an exec's argv, e.g. `unshare … chroot
/// ROOT argv…`. The server sets the three stdio pipes and `kill_on_drop`.
pub trait CommandFactory: Send + Sync + 'static {
    /// The command that runs `argv` (never empty).
    ///
    /// # Errors
    /// When the command cannot be built; the exec then ends with an
    /// `InternalError` status, like a kubelet that failed to start it.
    fn command(&self, argv: &[String]) -> io::Result<Command>;
}

impl<F> CommandFactory for F
where
    F: Fn(&[String]) -> io::Result<Command> + Send + Sync + 'static,
{
    fn command(&self, argv: &[String]) -> io::Result<Command> {
        self(argv)
    }
}

/// Runs argv directly on this machine.
#[derive(Debug, Clone, Copy, Default)]
pub struct HostCommands;

impl CommandFactory for HostCommands {
    fn command(&self, argv: &[String]) -> io::Result<Command> {
        let (program, args) = argv
            .split_first()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty argv"))?;
        let mut cmd = Command::new(program);
        cmd.args(args);
        Ok(cmd)
    }
}

/// A pod the server knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakePod {
    /// `metadata.name`.
    pub name: String,
    /// `status.phase` (`Running`, `Pending`, `Succeeded`, …).
    pub phase: String,
    /// `spec.containers[].name`.
    pub containers: Vec<String>,
}

impl FakePod {
    /// A `Running` pod with one container.
    pub fn running(name: impl Into<String>, container: impl Into<String>) -> Self {
        FakePod {
            name: name.into(),
            phase: "Running".into(),
            containers: vec![container.into()],
        }
    }

    /// The same pod in another phase.
    #[must_use]
    pub fn phase(mut self, phase: impl Into<String>) -> Self {
        self.phase = phase.into();
        self
    }
}

/// Failures to inject into execs; read when each exec starts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Faults {
    /// Forward exactly this many stdout bytes, then cut the TCP connection
    /// (no close frame, no status) and kill the process.
    pub drop_after_stdout_bytes: Option<u64>,
    /// Never send the status frame: after the process exits, keep the
    /// socket open until the client gives up.
    pub withhold_status: bool,
    /// After this many stdin bytes reached the process, stop reading stdin
    /// (`Some(0)`: from the first frame on). The client's writes then block
    /// once the queue and the TCP buffers are full.
    pub stall_stdin_after: Option<u64>,
    /// Feed stdin to the process at this many bytes per second at most.
    pub stdin_bytes_per_sec: Option<u64>,
}

/// Which WebSocket subprotocols the server accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Protocols {
    /// Accept `v5.channel.k8s.io` (stdin CLOSE frames).
    pub v5: bool,
    /// Accept `v4.channel.k8s.io`.
    pub v4: bool,
}

/// A negotiated subprotocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// `v4.channel.k8s.io`.
    V4,
    /// `v5.channel.k8s.io`.
    V5,
}

impl Protocol {
    /// The `Sec-WebSocket-Protocol` token.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::V4 => "v4.channel.k8s.io",
            Protocol::V5 => "v5.channel.k8s.io",
        }
    }
}

/// How to run the server.
#[derive(Clone)]
pub struct ServerConfig {
    namespace: String,
    pods: Vec<FakePod>,
    protocols: Protocols,
    faults: Faults,
    channel_preamble: bool,
    commands: Arc<dyn CommandFactory>,
}

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field("namespace", &self.namespace)
            .field("pods", &self.pods)
            .field("protocols", &self.protocols)
            .field("faults", &self.faults)
            .field("channel_preamble", &self.channel_preamble)
            .finish_non_exhaustive()
    }
}

impl ServerConfig {
    /// One `Running` pod `namespace/pod` with one container, v5 and v4
    /// accepted, no faults; execs run through `commands`.
    pub fn new(
        namespace: impl Into<String>,
        pod: impl Into<String>,
        container: impl Into<String>,
        commands: impl CommandFactory,
    ) -> Self {
        ServerConfig {
            namespace: namespace.into(),
            pods: vec![FakePod::running(pod, container)],
            protocols: Protocols { v5: true, v4: true },
            faults: Faults::default(),
            channel_preamble: true,
            commands: Arc::new(commands),
        }
    }

    /// Adds (or replaces, by name) a pod.
    #[must_use]
    pub fn pod(mut self, pod: FakePod) -> Self {
        self.pods.retain(|p| p.name != pod.name);
        self.pods.push(pod);
        self
    }

    /// Chooses the accepted subprotocols (`v5: false` forces v4).
    #[must_use]
    pub fn protocols(mut self, protocols: Protocols) -> Self {
        self.protocols = protocols;
        self
    }

    /// Starts with these faults (see also [`K8sExecServer::set_faults`]).
    #[must_use]
    pub fn faults(mut self, faults: Faults) -> Self {
        self.faults = faults;
        self
    }

    /// Sends one empty frame on stdout, stderr and status right after the
    /// upgrade, as API servers do (kube-rs skips them). On by default.
    #[must_use]
    pub fn channel_preamble(mut self, on: bool) -> Self {
        self.channel_preamble = on;
        self
    }
}

/// Errors starting the server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Binding `127.0.0.1:0` failed.
    #[error("failed to bind 127.0.0.1:0: {0}")]
    Bind(#[source] io::Error),
    /// The bound address could not be read.
    #[error("failed to read the listener's address: {0}")]
    LocalAddr(#[source] io::Error),
}

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

struct Shared {
    config: ServerConfig,
    faults: Mutex<Faults>,
    execs: AtomicU64,
    argvs: Mutex<Vec<Vec<String>>>,
}

impl Shared {
    fn faults(&self) -> Faults {
        self.faults
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn pod(&self, name: &str) -> Option<&FakePod> {
        self.config.pods.iter().find(|p| p.name == name)
    }
}

/// A running fake API server; dropping it stops it, its connections and
/// their processes.
pub struct K8sExecServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl Drop for K8sExecServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl K8sExecServer {
    /// Binds `127.0.0.1:0` and starts serving.
    ///
    /// # Errors
    /// When the listener cannot be bound.
    pub async fn start(config: ServerConfig) -> Result<Self, ServerError> {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(ServerError::Bind)?;
        let addr = listener.local_addr().map_err(ServerError::LocalAddr)?;
        let shared = Arc::new(Shared {
            faults: Mutex::new(config.faults.clone()),
            config,
            execs: AtomicU64::new(0),
            argvs: Mutex::new(Vec::new()),
        });
        let task = tokio::spawn(accept_loop(listener, Arc::clone(&shared)));
        tracing::debug!(%addr, "fake k8s exec server listening");
        Ok(K8sExecServer { addr, shared, task })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kubeconfig (YAML) whose current context `fake` points here, with
    /// the server's namespace and no credentials.
    ///
    /// It carries a throwaway CA (`certificate-authority-data`) that is
    /// never used over plain HTTP: with a CA configured, kube-rs's rustls
    /// setup does not need the OS trust store, so it also works on machines
    /// without `ca-certificates`.
    pub fn kubeconfig(&self) -> String {
        let lines = [
            "apiVersion: v1".to_owned(),
            "kind: Config".to_owned(),
            "clusters:".to_owned(),
            "- name: fake".to_owned(),
            "  cluster:".to_owned(),
            format!("    server: {}", self.url()),
            format!("    certificate-authority-data: {UNUSED_CA_PEM_BASE64}"),
            "users:".to_owned(),
            "- name: fake".to_owned(),
            "  user: {}".to_owned(),
            "contexts:".to_owned(),
            "- name: fake".to_owned(),
            "  context:".to_owned(),
            "    cluster: fake".to_owned(),
            "    user: fake".to_owned(),
            format!("    namespace: {}", self.shared.config.namespace),
            "current-context: fake".to_owned(),
        ];
        let mut yaml = lines.join("\n");
        yaml.push('\n');
        yaml
    }

    /// Replaces the faults for execs started from now on.
    pub fn set_faults(&self, faults: Faults) {
        *self
            .shared
            .faults
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = faults;
    }

    /// Execs upgraded to a WebSocket so far.
    pub fn execs_served(&self) -> u64 {
        self.shared.execs.load(Ordering::SeqCst)
    }

    /// The argv of every exec served so far.
    pub fn argvs(&self) -> Vec<Vec<String>> {
        self.shared
            .argvs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Base64 of a self-signed P-256 certificate whose key was discarded
/// (`CN=k8s-exec-test-server unused trust anchor`, valid to 2126). Only
/// there so kube-rs builds its TLS config from it rather than the OS store.
const UNUSED_CA_PEM_BASE64: &str = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJ2RENDQVdPZ0F3SUJBZ0lVYlJuM1lacXpiaHFJbnZ2QjdwMnovSWZRQUNVd0NnWUlLb1pJemowRUF3SXcKTXpFeE1DOEdBMVVFQXd3b2F6aHpMV1Y0WldNdGRHVnpkQzF6WlhKMlpYSWdkVzUxYzJWa0lIUnlkWE4wSUdGdQpZMmh2Y2pBZ0Z3MHlOakV4TWprd09URTJOREphR0E4eU1USTJNVEV3TlRBNU1UWTBNbG93TXpFeE1DOEdBMVVFCkF3d29hemh6TFdWNFpXTXRkR1Z6ZEMxelpYSjJaWElnZFc1MWMyVmtJSFJ5ZFhOMElHRnVZMmh2Y2pCWk1CTUcKQnlxR1NNNDlBZ0VHQ0NxR1NNNDlBd0VIQTBJQUJFZ1pJbkIybEt4RlFEbmlsaUZ5WWRIVHEzNk5kSkJvZ1VjRwpDSjNHVURqRnU3MEFkVUJONVpNSFl6b0xQVlpEM3p0M25yU0plZjFTUlcvS2ZidW5aaG1qVXpCUk1CMEdBMVVkCkRnUVdCQlI4TnVxc3FWMXFvL0RWYXpjSGpJOWlHSW1tbURBZkJnTlZIU01FR0RBV2dCUjhOdXFzcVYxcW8vRFYKYXpjSGpJOWlHSW1tbURBUEJnTlZIUk1CQWY4RUJUQURBUUgvTUFvR0NDcUdTTTQ5QkFNQ0EwY0FNRVFDSUM5Qwo5YnlqNUd0RHZYQ2JIQUVubFlEWCtxVWdaa0VQd3oxbDhWaHhCTkdoQWlBQWhuVy92RXRiM2pMZnMzMHRJNzZsCkdTSW0yNjd1cUxzVTVPZkU4eGJCcVE9PQotLS0tLUVORCBDRVJUSUZJQ0FURS0tLS0tCg==";

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    // Dropping the set (when this task is aborted) aborts every connection.
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    tracing::trace!(%peer, "connection");
                    // As the API server does (Go enables TCP_NODELAY by default).
                    if let Err(e) = stream.set_nodelay(true) {
                        tracing::debug!(error = %e, "set_nodelay failed");
                    }
                    connections.spawn(handle_connection(stream, Arc::clone(&shared)));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
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
    let mut headers = [httparse::EMPTY_HEADER; 64];
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

async fn handle_connection(mut stream: TcpStream, shared: Arc<Shared>) {
    let buf = match read_head(&mut stream).await {
        Ok(Some(buf)) => buf,
        Ok(None) => return,
        Err(e) => {
            tracing::debug!(error = %e, "bad request head");
            respond(stream, 400, &status_json(400, "BadRequest", &e.to_string())).await;
            return;
        }
    };
    let head = match parse_head(&buf) {
        Ok(head) => head,
        Err(e) => {
            tracing::debug!(error = %e, "bad request head");
            respond(stream, 400, &status_json(400, "BadRequest", &e.to_string())).await;
            return;
        }
    };
    if head.method != "GET" {
        let msg = format!("method {} is not supported by this fake", head.method);
        respond(stream, 405, &status_json(405, "MethodNotAllowed", &msg)).await;
        return;
    }
    let (path, query) = head.path_and_query();
    let namespace_ok = |ns: &str| ns == shared.config.namespace;
    match route(path) {
        Route::Pod { namespace, pod } => match shared.pod(pod) {
            Some(found) if namespace_ok(namespace) => {
                respond(stream, 200, &pod_json(namespace, found)).await;
            }
            _ => respond(stream, 404, &not_found_json(pod)).await,
        },
        Route::Exec { namespace, pod } => {
            let found = match shared.pod(pod) {
                Some(found) if namespace_ok(namespace) => found.clone(),
                _ => return respond(stream, 404, &not_found_json(pod)).await,
            };
            let exec = parse_exec_query(query);
            if let Err((code, reason, message)) = validate_exec(&found, &exec, &head) {
                tracing::debug!(code, %message, "exec rejected");
                respond(stream, code, &status_json(code, reason, &message)).await;
                return;
            }
            upgrade_exec(stream, buf, exec.command, shared).await;
        }
        Route::Unknown => {
            let msg = format!("the server could not find the requested resource {path}");
            respond(stream, 404, &status_json(404, "NotFound", &msg)).await;
        }
    }
}

/// The API server's own checks before it upgrades an exec.
fn validate_exec(
    pod: &FakePod,
    exec: &ExecQuery,
    head: &Head,
) -> Result<(), (u16, &'static str, String)> {
    let bad = |message: String| -> Result<(), (u16, &'static str, String)> {
        Err((400, "BadRequest", message))
    };
    if !head
        .header("Upgrade")
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
    {
        return bad("Upgrade request required".into());
    }
    if !exec.stdin && !exec.stdout && !exec.stderr {
        return bad("you must specify at least 1 of stdin, stdout, stderr".into());
    }
    if exec.tty && exec.stderr {
        return bad("tty and stderr cannot both be true".into());
    }
    if exec.command.is_empty() {
        return bad("you must specify at least one command for the container".into());
    }
    let container = match (&exec.container, pod.containers.as_slice()) {
        (Some(c), _) => c.clone(),
        (None, [only]) => only.clone(),
        (None, all) => {
            return bad(format!(
                "a container name must be specified for pod {}, choose one of: [{}]",
                pod.name,
                all.join(" ")
            ))
        }
    };
    if !pod.containers.contains(&container) {
        return bad(format!(
            "container {container} is not valid for pod {}",
            pod.name
        ));
    }
    match pod.phase.as_str() {
        "Running" => Ok(()),
        phase @ ("Succeeded" | "Failed") => bad(format!(
            "cannot exec into a container in a completed pod; current phase is {phase}"
        )),
        _ => bad(format!(
            "unable to upgrade connection: container not found (\"{container}\")"
        )),
    }
}

/// Writes a complete JSON response and closes the connection (the client
/// then opens a fresh one for its next request).
async fn respond(mut stream: TcpStream, code: u16, body: &str) {
    let reason = StatusCode::from_u16(code)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Unknown");
    let head = format!(
        "HTTP/1.1 {code} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
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

fn json_string(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

fn status_json(code: u16, reason: &str, message: &str) -> String {
    serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    })
    .to_string()
}

fn not_found_json(pod: &str) -> String {
    serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": format!("pods \"{pod}\" not found"),
        "reason": "NotFound",
        "details": { "name": pod, "kind": "pods" },
        "code": 404,
    })
    .to_string()
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

/// Picks the subprotocol: v5 when offered and enabled, else v4.
fn negotiate(offered: Option<&HeaderValue>, supported: Protocols) -> Option<Protocol> {
    let offered: Vec<&str> = offered
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(',').map(str::trim).collect())
        .unwrap_or_default();
    let has = |p: Protocol| offered.contains(&p.as_str());
    if supported.v5 && has(Protocol::V5) {
        Some(Protocol::V5)
    } else if supported.v4 && has(Protocol::V4) {
        Some(Protocol::V4)
    } else {
        None
    }
}

/// Hands the already-read head back to tungstenite, then the socket.
struct Prefixed<S> {
    prefix: Vec<u8>,
    pos: usize,
    inner: S,
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.pos < this.prefix.len() {
            let n = buf.remaining().min(this.prefix.len() - this.pos);
            buf.put_slice(&this.prefix[this.pos..this.pos + n]);
            this.pos += n;
            if this.pos == this.prefix.len() {
                this.prefix = Vec::new();
                this.pos = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

type Ws = WebSocketStream<Prefixed<TcpStream>>;
type WsSink = SplitSink<Ws, Message>;
type WsSource = SplitStream<Ws>;

// tungstenite's handshake callback fixes the `Result<Response, ErrorResponse>` shape.
#[allow(clippy::result_large_err)]
async fn upgrade_exec(stream: TcpStream, head: Vec<u8>, argv: Vec<String>, shared: Arc<Shared>) {
    let supported = shared.config.protocols;
    let mut chosen = None;
    let negotiate_protocol =
        |req: &Request, mut resp: Response| -> Result<Response, ErrorResponse> {
            match negotiate(req.headers().get(header::SEC_WEBSOCKET_PROTOCOL), supported) {
                Some(protocol) => {
                    resp.headers_mut().insert(
                        header::SEC_WEBSOCKET_PROTOCOL,
                        HeaderValue::from_static(protocol.as_str()),
                    );
                    chosen = Some(protocol);
                    Ok(resp)
                }
                None => {
                    let body = status_json(
                        400,
                        "BadRequest",
                        "no supported channel.k8s.io subprotocol was offered",
                    );
                    let length = HeaderValue::from(body.len());
                    let mut err = ErrorResponse::new(Some(body));
                    *err.status_mut() = StatusCode::BAD_REQUEST;
                    let headers = err.headers_mut();
                    headers.insert(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("application/json"),
                    );
                    headers.insert(header::CONTENT_LENGTH, length);
                    Err(err)
                }
            }
        };
    let config = WebSocketConfig::default()
        .max_message_size(Some(MAX_MESSAGE))
        .max_frame_size(Some(MAX_MESSAGE));
    let prefixed = Prefixed {
        prefix: head,
        pos: 0,
        inner: stream,
    };
    let ws = match tokio_tungstenite::accept_hdr_async_with_config(
        prefixed,
        negotiate_protocol,
        Some(config),
    )
    .await
    {
        Ok(ws) => ws,
        Err(e) => {
            tracing::debug!(error = %e, "exec upgrade failed");
            return;
        }
    };
    let Some(protocol) = chosen else {
        tracing::warn!("upgraded without a subprotocol");
        return;
    };
    shared.execs.fetch_add(1, Ordering::SeqCst);
    shared
        .argvs
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(argv.clone());
    tracing::debug!(protocol = protocol.as_str(), argv = ?argv, "exec upgraded");
    serve_exec(ws, protocol, argv, shared).await;
}

/// Aborts its tasks when dropped, however the session ends.
#[derive(Default)]
struct AbortOnDrop(Vec<AbortHandle>);

impl AbortOnDrop {
    fn add<T>(&mut self, task: &JoinHandle<T>) {
        self.0.push(task.abort_handle());
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// How an exec's process ended, for the status frame.
enum Outcome {
    Exited(i32),
    Internal(String),
}

/// The exit code kubelets report: the code, or 128 + signal.
fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// The channel-3 frame for `outcome`, byte for byte what a kubelet sends.
fn status_frame(outcome: &Outcome, argv: &[String]) -> Vec<u8> {
    let json = match outcome {
        Outcome::Exited(0) => r#"{"metadata":{},"status":"Success"}"#.to_owned(),
        Outcome::Exited(code) => {
            let message = format!(
                "command terminated with non-zero exit code: error executing command [{}], exit code {code}",
                argv.join(" ")
            );
            format!(
                r#"{{"metadata":{{}},"status":"Failure","message":{},"reason":"NonZeroExitCode","details":{{"causes":[{{"reason":"ExitCode","message":"{code}"}}]}}}}"#,
                json_string(&message)
            )
        }
        Outcome::Internal(detail) => format!(
            r#"{{"metadata":{{}},"status":"Failure","message":{},"reason":"InternalError","details":{{"causes":[{{"message":{}}}]}},"code":500}}"#,
            json_string(&format!("Internal error occurred: {detail}")),
            json_string(detail)
        ),
    };
    frame(STATUS_CHANNEL, json.as_bytes())
}

fn frame(channel: u8, payload: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(payload.len() + 1);
    frame.push(channel);
    frame.extend_from_slice(payload);
    frame
}

/// Sends queued frames in order; returns the sink once every sender is
/// gone (`None` if the socket failed).
async fn write_frames(mut sink: WsSink, mut frames: mpsc::Receiver<Message>) -> Option<WsSink> {
    while let Some(message) = frames.recv().await {
        if let Err(e) = sink.send(message).await {
            tracing::debug!(error = %e, "websocket write failed");
            return None;
        }
    }
    Some(sink)
}

/// How the client side of the socket ended.
#[derive(Debug)]
enum ReaderEnd {
    /// The client sent a close frame (on v4 also its way to say stdin EOF;
    /// nothing can be sent back after it).
    Closed,
    /// The connection failed or ended without a close frame.
    Disconnected,
}

/// Reads client frames: stdin goes to `stdin` (awaiting room, which is the
/// backpressure), a v5 CLOSE of channel 0 ends stdin.
async fn read_frames(
    mut source: WsSource,
    protocol: Protocol,
    stdin: mpsc::Sender<Bytes>,
) -> ReaderEnd {
    let mut stdin = Some(stdin);
    while let Some(message) = source.next().await {
        let data = match message {
            Ok(Message::Binary(data)) => data,
            Ok(Message::Close(frame)) => {
                tracing::debug!(?frame, "client closed the websocket");
                return ReaderEnd::Closed;
            }
            // Pings are answered by tungstenite; nothing else is expected.
            Ok(_) => continue,
            Err(e) => {
                tracing::debug!(error = %e, "websocket read failed");
                return ReaderEnd::Disconnected;
            }
        };
        match data.first().copied() {
            Some(STDIN_CHANNEL) if data.len() > 1 => {
                if let Some(tx) = &stdin {
                    if tx.send(data.slice(1..)).await.is_err() {
                        tracing::debug!("process stdin is closed; discarding stdin");
                        stdin = None;
                    }
                }
            }
            Some(CLOSE_CHANNEL) if protocol == Protocol::V5 => {
                if data.get(1) == Some(&STDIN_CHANNEL) {
                    tracing::debug!("client closed stdin");
                    stdin = None;
                }
            }
            Some(STDIN_CHANNEL | RESIZE_CHANNEL) | None => {}
            Some(other) => tracing::debug!(channel = other, "ignoring a frame"),
        }
    }
    ReaderEnd::Disconnected
}

/// Paces stdin to a byte rate.
struct Pacer {
    start: Instant,
    bytes_per_sec: u64,
}

impl Pacer {
    /// Largest write that keeps the pace smooth (about 50 ms of data).
    fn piece(&self) -> usize {
        usize::try_from(self.bytes_per_sec / 20)
            .unwrap_or(usize::MAX)
            .max(1)
    }

    async fn after(&self, total: u64) {
        let secs = total as f64 / self.bytes_per_sec as f64;
        tokio::time::sleep_until(self.start + Duration::from_secs_f64(secs)).await;
    }
}

/// Writes stdin frames into the process, honouring the stall and throttle
/// faults; closing (dropping) the process's stdin when the channel ends.
async fn feed_stdin(mut stdin: ChildStdin, mut frames: mpsc::Receiver<Bytes>, faults: Faults) {
    let pacer = match faults.stdin_bytes_per_sec {
        Some(0) => {
            tracing::debug!("fault: stdin rate 0; stalling stdin");
            std::future::pending::<()>().await;
            return;
        }
        Some(rate) => Some(Pacer {
            start: Instant::now(),
            bytes_per_sec: rate,
        }),
        None => None,
    };
    let mut fed: u64 = 0;
    while let Some(data) = frames.recv().await {
        let mut rest: &[u8] = &data;
        while !rest.is_empty() {
            let mut n = rest.len();
            if let Some(limit) = faults.stall_stdin_after {
                if fed >= limit {
                    tracing::debug!(fed, "fault: stalling stdin");
                    // Holding `frames` keeps the queue full: the reader
                    // stops reading and TCP pushes back on the client.
                    std::future::pending::<()>().await;
                }
                n = n.min(usize::try_from(limit - fed).unwrap_or(usize::MAX));
            }
            if let Some(pacer) = &pacer {
                n = n.min(pacer.piece());
            }
            if let Err(e) = stdin.write_all(&rest[..n]).await {
                tracing::debug!(error = %e, "process stdin closed");
                return;
            }
            fed += n as u64;
            rest = &rest[n..];
            if let Some(pacer) = &pacer {
                pacer.after(fed).await;
            }
        }
    }
    tracing::trace!(fed, "stdin at EOF");
    // Dropping `stdin` closes the pipe: the process sees EOF.
}

/// How an output pump ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PumpEnd {
    Eof,
    /// The stdout budget of [`Faults::drop_after_stdout_bytes`] is spent.
    DropConnection,
}

/// Forwards a process pipe as frames on `channel`. When the socket is gone
/// it keeps reading (and discarding) so the process never blocks on it.
async fn forward_output(
    mut pipe: impl AsyncRead + Unpin,
    channel: u8,
    frames: mpsc::Sender<Message>,
    mut budget: Option<u64>,
) -> PumpEnd {
    let mut buf = vec![0u8; OUTPUT_CHUNK];
    let mut open = true;
    loop {
        let n = match pipe.read(&mut buf).await {
            Ok(0) => return PumpEnd::Eof,
            Ok(n) => n,
            Err(e) => {
                tracing::debug!(channel, error = %e, "process output failed");
                return PumpEnd::Eof;
            }
        };
        if !open {
            continue;
        }
        let mut send = n;
        let mut spent = false;
        if let Some(left) = budget.as_mut() {
            let allowed = usize::try_from(*left).unwrap_or(usize::MAX);
            if n >= allowed {
                send = allowed;
                spent = true;
            }
            *left -= send as u64;
        }
        if send > 0
            && frames
                .send(Message::binary(frame(channel, &buf[..send])))
                .await
                .is_err()
        {
            open = false;
        }
        if spent {
            return PumpEnd::DropConnection;
        }
    }
}

/// Why the session's wait loop stopped.
enum Next {
    /// The process exited and its output is forwarded (or given up on).
    Finished(io::Result<ExitStatus>),
    /// The stdout budget fault fired.
    DropConnection,
    /// The client went away.
    ClientGone(ReaderEnd),
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Runs one exec over an upgraded socket.
async fn serve_exec(ws: Ws, protocol: Protocol, argv: Vec<String>, shared: Arc<Shared>) {
    let faults = shared.faults();
    let mut tasks = AbortOnDrop::default();
    let (sink, source) = ws.split();
    let (out_tx, out_rx) = mpsc::channel::<Message>(OUT_QUEUE);
    let writer = tokio::spawn(write_frames(sink, out_rx));
    tasks.add(&writer);
    let (stdin_tx, stdin_rx) = mpsc::channel::<Bytes>(STDIN_QUEUE);
    let mut reader = tokio::spawn(read_frames(source, protocol, stdin_tx));
    tasks.add(&reader);

    if shared.config.channel_preamble {
        for channel in [STDOUT_CHANNEL, STDERR_CHANNEL, STATUS_CHANNEL] {
            if out_tx.send(Message::binary(vec![channel])).await.is_err() {
                return;
            }
        }
    }

    let spawned = shared.config.commands.command(&argv).and_then(|mut cmd| {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd.spawn()
    });
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            tracing::debug!(error = %e, argv = ?argv, "failed to start the exec's process");
            drop(stdin_rx);
            let outcome = Outcome::Internal(format!("failed to start {}: {e}", argv.join(" ")));
            finish(outcome, &argv, &faults, out_tx, writer, &mut reader).await;
            return;
        }
    };
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        drop(stdin_rx);
        let outcome = Outcome::Internal("process pipes missing".into());
        finish(outcome, &argv, &faults, out_tx, writer, &mut reader).await;
        return;
    };
    let feeder = tokio::spawn(feed_stdin(stdin, stdin_rx, faults.clone()));
    tasks.add(&feeder);
    let mut stdout_task = tokio::spawn(forward_output(
        stdout,
        STDOUT_CHANNEL,
        out_tx.clone(),
        faults.drop_after_stdout_bytes,
    ));
    tasks.add(&stdout_task);
    let mut stderr_task =
        tokio::spawn(forward_output(stderr, STDERR_CHANNEL, out_tx.clone(), None));
    tasks.add(&stderr_task);

    let mut exit = None;
    let mut stdout_done = false;
    let mut stderr_done = false;
    let mut grace = None;
    let next = loop {
        if stdout_done && stderr_done {
            if let Some(status) = exit.take() {
                break Next::Finished(status);
            }
        }
        tokio::select! {
            end = &mut stdout_task, if !stdout_done => {
                stdout_done = true;
                if matches!(end, Ok(PumpEnd::DropConnection)) {
                    break Next::DropConnection;
                }
            }
            _ = &mut stderr_task, if !stderr_done => stderr_done = true,
            status = child.wait(), if exit.is_none() => {
                exit = Some(status);
                grace = Some(Instant::now() + OUTPUT_GRACE);
            }
            () = sleep_until_opt(grace), if !(stdout_done && stderr_done) => {
                tracing::debug!("process output still open after exit; not forwarding the rest");
                stdout_task.abort();
                stderr_task.abort();
                stdout_done = true;
                stderr_done = true;
            }
            end = &mut reader => break Next::ClientGone(end.unwrap_or(ReaderEnd::Disconnected)),
        }
    };

    match next {
        Next::Finished(status) => {
            let outcome = match status {
                Ok(status) => Outcome::Exited(exit_code(status)),
                Err(e) => Outcome::Internal(format!("failed to wait for the process: {e}")),
            };
            finish(outcome, &argv, &faults, out_tx, writer, &mut reader).await;
        }
        Next::DropConnection => {
            tracing::debug!("fault: cutting the connection after the stdout budget");
            let _ = child.start_kill();
            stderr_task.abort();
            let _ = stderr_task.await;
            drop(out_tx);
            // Deliver exactly the budget, then close the TCP connection
            // without a close frame or a status.
            let sink = tokio::time::timeout(FLUSH_GRACE, writer)
                .await
                .ok()
                .and_then(Result::ok)
                .flatten();
            reader.abort();
            let _ = reader.await;
            drop(sink);
        }
        Next::ClientGone(end) => {
            tracing::debug!(?end, "client went away; killing the process");
            let _ = child.start_kill();
        }
    }
}

/// Sends the status frame (unless withheld), closes the socket and lets
/// the client finish.
async fn finish(
    outcome: Outcome,
    argv: &[String],
    faults: &Faults,
    out_tx: mpsc::Sender<Message>,
    writer: JoinHandle<Option<WsSink>>,
    reader: &mut JoinHandle<ReaderEnd>,
) {
    if faults.withhold_status {
        tracing::debug!("fault: withholding the status frame");
        drop(out_tx);
        // Keep the socket open until the client gives up.
        let sink = writer.await.ok().flatten();
        let end = reader.await;
        tracing::debug!(?end, "client gave up waiting for a status");
        drop(sink);
        return;
    }
    if out_tx
        .send(Message::binary(status_frame(&outcome, argv)))
        .await
        .is_err()
    {
        tracing::debug!("socket gone before the status frame");
    }
    drop(out_tx);
    // Every pump has finished, so the writer ends once the queue is sent.
    if let Ok(Some(mut sink)) = writer.await {
        if let Err(e) = sink.close().await {
            tracing::debug!(error = %e, "failed to close the websocket");
        }
        let _ = tokio::time::timeout(CLOSE_GRACE, reader).await;
        drop(sink);
    }
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

    #[test]
    fn negotiation_prefers_v5_unless_disabled() {
        let offered = HeaderValue::from_static("v5.channel.k8s.io, v4.channel.k8s.io");
        let both = Protocols { v5: true, v4: true };
        let v4_only = Protocols {
            v5: false,
            v4: true,
        };
        let v5_only = Protocols {
            v5: true,
            v4: false,
        };
        assert_eq!(negotiate(Some(&offered), both), Some(Protocol::V5));
        assert_eq!(negotiate(Some(&offered), v4_only), Some(Protocol::V4));
        let old = HeaderValue::from_static("v4.channel.k8s.io");
        assert_eq!(negotiate(Some(&old), v5_only), None);
        assert_eq!(negotiate(None, both), None);
    }

    #[test]
    fn status_frames_match_kubelet() {
        let argv = vec!["sh".to_owned(), "-c".to_owned(), "exit 3".to_owned()];
        let ok = status_frame(&Outcome::Exited(0), &argv);
        assert_eq!(ok[0], STATUS_CHANNEL);
        assert_eq!(&ok[1..], br#"{"metadata":{},"status":"Success"}"#);
        let failed = status_frame(&Outcome::Exited(3), &argv);
        assert_eq!(
            std::str::from_utf8(&failed[1..]).ok(),
            Some(
                r#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}"#
            )
        );
        let internal = status_frame(&Outcome::Internal("no \"x\"".into()), &argv);
        let parsed: serde_json::Value =
            serde_json::from_slice(&internal[1..]).expect("internal status is JSON");
        assert_eq!(parsed["reason"], "InternalError");
    }
}
