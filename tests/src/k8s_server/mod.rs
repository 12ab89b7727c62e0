//! A fake Kubernetes API server for the `kube` backend's tests: just enough
//! of `GET pods/{name}` and the `pods/{name}/exec` WebSocket protocol, over
//! plain HTTP/1.1 on `127.0.0.1:0`, with real processes behind each exec.
//!
//! - `GET /api/v1/namespaces/{ns}/pods/{name}` answers a minimal `Pod`
//!   (phase and containers from [`FakePod`]) or a `404` `Status`.
//! - `GET /api/v1/namespaces/{ns}/pods/{name}/exec?command=…&container=…&stdin=true…`
//!   with `Upgrade: websocket` becomes a WebSocket (tokio-tungstenite's
//!   `accept_hdr_async_with_config`), negotiating the first of
//!   `v5.channel.k8s.io` and `v4.channel.k8s.io` that the client offers
//!   and the config enables (the client's order, as in the API server's
//!   handshake), with no WebSocket extension (the exec stream has no
//!   compression). The argv runs as a real
//!   process built by the test's [`CommandFactory`] (e.g. `unshare` +
//!   `chroot` into a sandbox root, as the `local` backend does).
//! - Frames are binary, first byte the channel: 0 stdin, 1 stdout, 2 stderr,
//!   3 status (`metav1.Status` JSON), 4 resize, and on v5 255 = close, whose
//!   payload is the closed channel. One empty stdout frame opens the
//!   stream. After the process exits and every holder of its stdout and
//!   stderr has closed them (a background child that keeps them open keeps
//!   the exec open, as on a kubelet), one status frame is sent and the
//!   socket is closed. A client that goes away closes the process's stdin;
//!   the process is not killed ([`K8sExecServer::live_processes`]).
//! - Stdin is pumped with backpressure: a stdin frame is only read off the
//!   socket once the previous few were written to the child.
//! - [`Faults`] inject failures: drop the connection after N stdout bytes,
//!   withhold the status frame, stall stdin, throttle stdin and stdout
//!   (a slow link), delay each exec upgrade (API-server round trips).
//! - [`K8sExecServer::stdin_bytes`] and [`K8sExecServer::stdout_bytes`]
//!   count the stream payload that crossed the socket, for benchmarks.
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

//!
//! The pieces, in the order a request meets them: `http` (request head,
//! routing, pod and `Status` responses, exec checks), `upgrade` (the
//! WebSocket handshake and subprotocol), `session` (one exec from spawn to
//! status frame), `pumps` (the tasks that move stdin/stdout/stderr),
//! `protocol` (channel numbers and subprotocol names), `status` (the
//! `metav1.Status` bodies) and `faults` (the injectable failures).

// Test support: not every test binary uses every knob.
#![allow(dead_code)]

mod config;
mod faults;
mod http;
mod protocol;
mod pumps;
mod session;
mod status;
mod upgrade;

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

pub use config::{CommandFactory, FakePod, HostCommands, ServerConfig};
pub use faults::Faults;
pub use protocol::{Protocol, Protocols};

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

/// State shared by the server handle and every connection.
struct Shared {
    config: ServerConfig,
    faults: Mutex<Faults>,
    execs: AtomicU64,
    argvs: Mutex<Vec<Vec<String>>>,
    /// Stdin payload bytes received from clients, all execs.
    stdin_wire: Arc<AtomicU64>,
    /// Stdout payload bytes sent to clients, all execs.
    stdout_wire: Arc<AtomicU64>,
    /// Exec processes started and not yet reaped.
    live: Arc<AtomicU64>,
    /// Their process groups (each leads its own), for the server's drop.
    groups: Arc<Mutex<std::collections::BTreeSet<i32>>>,
}

impl Shared {
    fn faults(&self) -> Faults {
        lock(&self.faults).clone()
    }

    fn pod(&self, name: &str) -> Option<&FakePod> {
        self.config.pods.iter().find(|p| p.name == name)
    }

    /// Counts an exec upgraded to a WebSocket and remembers its argv.
    fn record_exec(&self, argv: &[String]) {
        self.execs.fetch_add(1, Ordering::SeqCst);
        lock(&self.argvs).push(argv.to_vec());
    }
}

/// Locks `mutex`; a panicked test thread does not make the data unusable.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A running fake API server; dropping it stops it and its connections.
/// Their processes run on while it serves, as a pod's do, and go with it
/// (as with the pod): a process that ignores everything (the stubborn
/// sandbox) must not outlive the test and spin on.
pub struct K8sExecServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl Drop for K8sExecServer {
    fn drop(&mut self) {
        self.task.abort();
        for &pid in lock(&self.shared.groups).iter() {
            if let Some(pgid) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
            }
        }
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
            stdin_wire: Arc::default(),
            stdout_wire: Arc::default(),
            live: Arc::default(),
            groups: Arc::default(),
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
        *lock(&self.shared.faults) = faults;
    }

    /// Execs upgraded to a WebSocket so far.
    pub fn execs_served(&self) -> u64 {
        self.shared.execs.load(Ordering::SeqCst)
    }

    /// The argv of every exec served so far.
    pub fn argvs(&self) -> Vec<Vec<String>> {
        lock(&self.shared.argvs).clone()
    }

    /// Stdin payload bytes received from clients so far (all execs; frame
    /// and WebSocket headers not counted).
    pub fn stdin_bytes(&self) -> u64 {
        self.shared.stdin_wire.load(Ordering::SeqCst)
    }

    /// Exec processes started and not yet exited (however their exec
    /// stream ended): what a sync left running in the pod.
    pub fn live_processes(&self) -> u64 {
        self.shared.live.load(Ordering::SeqCst)
    }

    /// Waits up to `limit` for every exec process to exit; the number
    /// still running then.
    pub fn wait_for_no_live_processes(&self, limit: Duration) -> u64 {
        let until = std::time::Instant::now() + limit;
        loop {
            let live = self.live_processes();
            if live == 0 || std::time::Instant::now() >= until {
                return live;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stdout payload bytes sent to clients so far (all execs; frame and
    /// WebSocket headers not counted).
    pub fn stdout_bytes(&self) -> u64 {
        self.shared.stdout_wire.load(Ordering::SeqCst)
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
                    connections.spawn(http::handle_connection(stream, Arc::clone(&shared)));
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
