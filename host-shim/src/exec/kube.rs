//! The `kube` backend: sandbox commands run in a pod's container through
//! the Kubernetes `pods/exec` subresource (a WebSocket speaking
//! `v5.channel.k8s.io`, falling back to `v4.channel.k8s.io`), via kube-rs.
//!
//! Every exec first reads the pod, so a missing pod, a pod that is not
//! `Running` and a wrong container come back as typed [`KubeError`]s rather
//! than as an opaque upgrade failure. The process then gets the same
//! contract as the `local` backend: the deadline is enforced whether or
//! not anyone waits, stderr is captured under a cap (past it the exec is
//! aborted and marked truncated), and the exit code comes from the status
//! frame on channel 3.
//!
//! # Stdin is never closed before the status frame
//!
//! The caller gets a stdin writer whose `shutdown` only flushes and whose
//! drop does not reach the pod: the real pipe is parked until the status
//! frame arrives. The remote command must therefore know how much input to
//! read (the component frames its stdin). This sidesteps the v4 protocol,
//! where the only way to signal stdin EOF is to close the whole WebSocket,
//! losing any output still in flight.
//!
//! # Abort
//!
//! Aborting (or the deadline, or the stderr cap) closes the WebSocket. The
//! API server then tears down the stream, but Kubernetes does not kill
//! processes started by exec: a command that ignores EOF/SIGPIPE keeps
//! running in the container. Wrap long-running commands (e.g. `timeout`).
//
// ---------------------------------------------------------------------------
// API surface this file relies on, read from the crate sources of kube
// 5.0.0, kube-client 5.0.0, kube-core 5.0.0, k8s-openapi 0.29.0 (`v1_33`)
// and tokio 1.54.1:
//
// kube::api (kube_client::api, feature "ws"):
//   impl<K: Resource<Scope = NamespaceResourceScope>> Api<K> {
//       pub fn namespaced(client: Client, ns: &str) -> Self }
//   impl<K: Clone + DeserializeOwned + Debug> Api<K> {
//       pub async fn get(&self, name: &str) -> kube::Result<K> }
//   impl<K: Clone + DeserializeOwned + Execute> Api<K> {
//       pub async fn exec<I, T>(&self, name: &str, command: I, ap: &AttachParams)
//           -> kube::Result<AttachedProcess>
//       where I: IntoIterator<Item = T> + Debug, T: Into<String> }
//   #[derive(Debug)] pub struct AttachParams {
//       pub container: Option<String>, pub stdin: bool /* default false */,
//       pub stdout: bool /* true */, pub stderr: bool /* true */, pub tty: bool,
//       pub max_stdin_buf_size: Option<usize>, pub max_stdout_buf_size: Option<usize>,
//       pub max_stderr_buf_size: Option<usize> /* each defaults to 1024; not sent */ }
//     builders: container<T: Into<String>>(self, T), stdin(self, bool), stdout(..),
//       stderr(..), tty(..), max_stdin_buf_size(self, usize), max_stdout_buf_size(..),
//       max_stderr_buf_size(..)
//     Request query: `exec?&stdin=true&stdout=true&stderr=true&container=C&command=A&command=B`
//   pub struct AttachedProcess (impl Drop: aborts its message-loop task):
//       pub fn stdin(&mut self)  -> Option<tokio::io::WriteHalf<SimplexStream>>
//       pub fn stdout(&mut self) -> Option<tokio::io::ReadHalf<SimplexStream>>
//       pub fn stderr(&mut self) -> Option<tokio::io::ReadHalf<SimplexStream>>
//       pub fn take_status(&mut self)
//           -> Option<impl Future<Output = Option<meta::v1::Status>> + use<>>
//       pub fn abort(&self)
//       pub async fn join(mut self) -> Result<(), remote_command::Error>
//         (remote_command::Error is NOT re-exported: it is boxed below)
//   Message loop facts (remote_command.rs): stdout/stderr are forwarded with
//   `write_all(..).await` into the simplex pipes, so an undrained pipe stalls
//   the loop (pings, stdin, status). It breaks after the channel-3 frame and
//   then shuts down the stdout/stderr pipes; on an error it returns early
//   WITHOUT shutting them down. Split simplex halves do not signal on drop:
//   dropping the stdin WriteHalf sends nothing (only `shutdown()` makes the
//   loop send CLOSE `[255, 0]` on v5 or close the socket on v4), and dropping
//   a ReadHalf does not unblock the writer.
// kube::config (kube_client::config):
//   pub async fn Config::infer() -> Result<Config, InferConfigError>
//   pub async fn Config::from_kubeconfig(&KubeConfigOptions) -> Result<Config, KubeconfigError>
//   pub async fn Config::from_custom_kubeconfig(Kubeconfig, &KubeConfigOptions)
//       -> Result<Config, KubeconfigError>
//   pub fn Kubeconfig::read_from<P: AsRef<Path>>(P) -> Result<Kubeconfig, KubeconfigError>
//   #[derive(Default, Clone)] pub struct KubeConfigOptions {
//       pub context: Option<String>, pub cluster: Option<String>, pub user: Option<String> }
//   Config { pub cluster_url: http::Uri, pub default_namespace: String,
//            pub proxy_url: Option<http::Uri>, .. } (proxy_url falls back to $HTTPS_PROXY)
//   impl TryFrom<Config> for Client { type Error = kube::Error }
// kube::Error::Api(Box<kube::core::Status>); kube::core::Status { code: u16, message: String,
//   reason: String, .. }, is_not_found() == (reason == "NotFound").
// k8s_openapi::apimachinery::pkg::apis::meta::v1::Status { status: Option<String>,
//   reason: Option<String>, message: Option<String>, details: Option<StatusDetails>, .. };
//   StatusDetails { causes: Option<Vec<StatusCause>>, .. };
//   StatusCause { reason: Option<String>, message: Option<String>, field: Option<String> }.
// k8s_openapi::api::core::v1::Pod { spec: Option<PodSpec>, status: Option<PodStatus>, .. };
//   PodSpec { containers: Vec<Container> }; Container { name: String };
//   PodStatus { phase: Option<String>, container_statuses: Option<Vec<ContainerStatus>> };
//   ContainerStatus { name: String, state: Option<ContainerState> };
//   ContainerState { running, terminated, waiting: Option<_> }
//   (waiting/terminated carry `reason: Option<String>`).
// ---------------------------------------------------------------------------

use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::task::AtomicWaker;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::api::{Api, AttachParams, AttachedProcess};
use kube::config::{InferConfigError, KubeConfigOptions, Kubeconfig, KubeconfigError};
use kube::{Client, Config};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf, ReadHalf, SimplexStream, WriteHalf};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::{BoxFuture, Control, ExecBackend, ExecError, ExecRequest, ExitInfo, Process};

/// Bytes kube-rs buffers per stream between its message loop and us (its
/// default, 1 KiB, makes bulk transfer crawl).
const PIPE_BUF: usize = 1 << 20;

/// How long to wait for the stderr reader after the exec has ended.
const STDERR_GRACE: Duration = Duration::from_secs(2);

/// How long to let kube-rs's message loop wind down after the status frame.
const JOIN_GRACE: Duration = Duration::from_secs(2);

/// `metav1.Status` values of the exec status frame; see
/// <https://github.com/kubernetes/kubernetes/blob/master/staging/src/k8s.io/apimachinery/pkg/util/remotecommand/constants.go>
/// and `k8s.io/apimachinery/pkg/api/errors` (`NonZeroExitCodeReason`,
/// `ExitCodeCauseType`).
const STATUS_SUCCESS: &str = "Success";
const STATUS_FAILURE: &str = "Failure";
const REASON_NON_ZERO_EXIT: &str = "NonZeroExitCode";
const CAUSE_EXIT_CODE: &str = "ExitCode";

/// Errors of the `kube` backend.
///
/// They reach the shim wrapped in [`ExecError::Spawn`] (before the process
/// runs) or [`ExecError::Wait`] (after); [`KubeError::find`] gets them back.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    /// The kubeconfig file could not be read or parsed.
    #[error("failed to read kubeconfig {path}: {source}")]
    ReadKubeconfig {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: KubeconfigError,
    },
    /// The kubeconfig has no usable context, cluster or user.
    #[error("failed to load kubeconfig: {0}")]
    LoadKubeconfig(#[source] KubeconfigError),
    /// Neither `KUBECONFIG`/`~/.kube/config` nor an in-cluster service
    /// account gave a configuration.
    #[error("failed to infer a Kubernetes configuration: {0}")]
    InferConfig(#[source] InferConfigError),
    /// The client could not be built (TLS setup, proxy).
    #[error("failed to build the Kubernetes client: {0}")]
    BuildClient(#[source] kube::Error),
    /// The pod does not exist.
    #[error("pod {namespace}/{pod} not found")]
    PodNotFound {
        /// Its namespace.
        namespace: String,
        /// Its name.
        pod: String,
    },
    /// The pod exists but is not `Running`.
    #[error("pod {namespace}/{pod} is not running (phase {phase})")]
    PodNotRunning {
        /// Its namespace.
        namespace: String,
        /// Its name.
        pod: String,
        /// `status.phase` (`Unknown` when unset).
        phase: String,
    },
    /// The configured container is not in the pod's spec.
    #[error("pod {namespace}/{pod} has no container {container:?} (containers: {available:?})")]
    ContainerMissing {
        /// The pod's namespace.
        namespace: String,
        /// The pod.
        pod: String,
        /// The configured container.
        container: String,
        /// The containers it has.
        available: Vec<String>,
    },
    /// No container was configured and the pod has several.
    #[error("pod {namespace}/{pod} has several containers; choose one of {available:?}")]
    ContainerAmbiguous {
        /// The pod's namespace.
        namespace: String,
        /// The pod.
        pod: String,
        /// The containers it has.
        available: Vec<String>,
    },
    /// The container exists but is waiting or terminated.
    #[error("container {container:?} in pod {namespace}/{pod} is not running ({state})")]
    ContainerNotRunning {
        /// The pod's namespace.
        namespace: String,
        /// The pod.
        pod: String,
        /// The container.
        container: String,
        /// `waiting: <reason>` or `terminated: <reason>`.
        state: String,
    },
    /// Reading the pod failed for another reason (auth, network).
    #[error("failed to get pod {namespace}/{pod}: {source}")]
    GetPod {
        /// Its namespace.
        namespace: String,
        /// Its name.
        pod: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// The exec request or the WebSocket upgrade failed.
    #[error("failed to exec in pod {namespace}/{pod}: {source}")]
    Connect {
        /// The pod's namespace.
        namespace: String,
        /// The pod.
        pod: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// Reading the pod and opening the exec stream took the whole timeout.
    #[error("timed out after {0:?} starting the exec")]
    ConnectTimeout(Duration),
    /// kube-rs handed out no pipe for a stream that was requested.
    #[error("the exec stream has no {0} pipe")]
    MissingPipe(&'static str),
    /// The stream ended without a status frame on channel 3: the exit
    /// status is unknown.
    #[error("connection closed before a status frame")]
    NoStatus,
    /// The stream failed before a status frame on channel 3.
    #[error("connection closed before a status frame: {0}")]
    ConnectionLost(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The status frame reports a failure other than a non-zero exit
    /// (for example the executable was not found).
    #[error("exec failed: {message} (reason {reason})")]
    ExecFailed {
        /// `status.reason`.
        reason: String,
        /// `status.message`.
        message: String,
    },
    /// A `NonZeroExitCode` status whose `ExitCode` cause is not an `i32`.
    #[error("exec status frame has no valid exit code: {0:?}")]
    BadExitCode(String),
    /// The supervisor task died (panic or runtime shutdown).
    #[error("the exec supervisor task failed: {0}")]
    Supervisor(String),
    /// `wait` was called again after it had failed.
    #[error("{0}")]
    Earlier(String),
}

impl KubeError {
    /// The `KubeError` inside an [`ExecError`] from this backend, if any.
    pub fn find(err: &ExecError) -> Option<&KubeError> {
        let io = match err {
            ExecError::Spawn { source, .. } => source,
            ExecError::Wait(source) => source,
            ExecError::Unsupported(_) => return None,
        };
        io.get_ref().and_then(|e| e.downcast_ref::<KubeError>())
    }
}

fn start_error(program: &str, err: KubeError) -> ExecError {
    ExecError::Spawn {
        program: program.to_owned(),
        source: io::Error::other(err),
    }
}

fn wait_error(err: KubeError) -> ExecError {
    ExecError::Wait(io::Error::other(err))
}

/// Runs sandbox commands in one container of one pod.
#[derive(Clone)]
pub struct KubeBackend {
    client: Client,
    namespace: String,
    pod: String,
    container: Option<String>,
}

impl std::fmt::Debug for KubeBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeBackend")
            .field("namespace", &self.namespace)
            .field("pod", &self.pod)
            .field("container", &self.container)
            .finish_non_exhaustive()
    }
}

impl KubeBackend {
    /// Runs commands in `namespace/pod` through `client`; `container` may
    /// be left out when the pod has exactly one.
    pub fn new(
        client: Client,
        namespace: impl Into<String>,
        pod: impl Into<String>,
        container: Option<String>,
    ) -> Self {
        KubeBackend {
            client,
            namespace: namespace.into(),
            pod: pod.into(),
            container,
        }
    }

    /// Builds a client from configuration, the way `kubectl` does.
    ///
    /// - `kubeconfig` set: that file, with `context` (or its current context).
    /// - only `context` set: `$KUBECONFIG` or `~/.kube/config`, that context.
    /// - neither: [`Config::infer`] (`$KUBECONFIG`/`~/.kube/config`, else the
    ///   in-cluster service account).
    ///
    /// `namespace` defaults to the context's namespace (`default`, or the
    /// service account's namespace in-cluster). A loopback API server
    /// (`kubectl proxy`, the test server) is never reached through
    /// `$HTTPS_PROXY`.
    ///
    /// # Errors
    /// [`KubeError::ReadKubeconfig`], [`KubeError::LoadKubeconfig`],
    /// [`KubeError::InferConfig`] or [`KubeError::BuildClient`].
    pub async fn from_config(
        kubeconfig: Option<PathBuf>,
        context: Option<String>,
        namespace: Option<String>,
        pod: impl Into<String>,
        container: Option<String>,
    ) -> Result<Self, KubeError> {
        let options = KubeConfigOptions {
            context: context.clone(),
            ..KubeConfigOptions::default()
        };
        let mut config = match (kubeconfig, context) {
            (Some(path), _) => {
                let file = Kubeconfig::read_from(&path)
                    .map_err(|source| KubeError::ReadKubeconfig { path, source })?;
                Config::from_custom_kubeconfig(file, &options)
                    .await
                    .map_err(KubeError::LoadKubeconfig)?
            }
            (None, Some(_)) => Config::from_kubeconfig(&options)
                .await
                .map_err(KubeError::LoadKubeconfig)?,
            (None, None) => Config::infer().await.map_err(KubeError::InferConfig)?,
        };
        if config.proxy_url.is_some() && is_loopback_host(config.cluster_url.host()) {
            tracing::debug!(cluster = %config.cluster_url, "not proxying a loopback API server");
            config.proxy_url = None;
        }
        let namespace = namespace.unwrap_or_else(|| config.default_namespace.clone());
        let client = if config.proxy_url.is_none() {
            nodelay_client(&config)
        } else {
            Client::try_from(config)
        }
        .map_err(KubeError::BuildClient)?;
        Ok(Self::new(client, namespace, pod, container))
    }

    /// Reads the pod and returns the container to exec in.
    async fn check_pod(&self, api: &Api<Pod>) -> Result<String, KubeError> {
        let pod = match api.get(&self.pod).await {
            Ok(pod) => pod,
            Err(kube::Error::Api(status)) if status.is_not_found() || status.code == 404 => {
                return Err(KubeError::PodNotFound {
                    namespace: self.namespace.clone(),
                    pod: self.pod.clone(),
                })
            }
            Err(source) => {
                return Err(KubeError::GetPod {
                    namespace: self.namespace.clone(),
                    pod: self.pod.clone(),
                    source,
                })
            }
        };
        let phase = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_else(|| "Unknown".to_owned());
        if phase != "Running" {
            return Err(KubeError::PodNotRunning {
                namespace: self.namespace.clone(),
                pod: self.pod.clone(),
                phase,
            });
        }
        let available: Vec<String> = pod
            .spec
            .as_ref()
            .map(|s| s.containers.iter().map(|c| c.name.clone()).collect())
            .unwrap_or_default();
        let container = match (&self.container, available.as_slice()) {
            (Some(c), names) if names.contains(c) => c.clone(),
            (Some(c), _) => {
                return Err(KubeError::ContainerMissing {
                    namespace: self.namespace.clone(),
                    pod: self.pod.clone(),
                    container: c.clone(),
                    available: available.clone(),
                })
            }
            (None, [only]) => only.clone(),
            (None, _) => {
                return Err(KubeError::ContainerAmbiguous {
                    namespace: self.namespace.clone(),
                    pod: self.pod.clone(),
                    available: available.clone(),
                })
            }
        };
        // A Running pod can still have this container waiting (crash loop)
        // or terminated; say so instead of failing the upgrade obscurely.
        let state = pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|all| all.iter().find(|s| s.name == container))
            .and_then(|s| s.state.as_ref());
        if let Some(state) = state {
            if state.running.is_none() {
                let described = match (&state.waiting, &state.terminated) {
                    (Some(w), _) => {
                        format!("waiting: {}", w.reason.as_deref().unwrap_or("unknown"))
                    }
                    (None, Some(t)) => {
                        format!("terminated: {}", t.reason.as_deref().unwrap_or("unknown"))
                    }
                    (None, None) => "state unknown".to_owned(),
                };
                return Err(KubeError::ContainerNotRunning {
                    namespace: self.namespace.clone(),
                    pod: self.pod.clone(),
                    container,
                    state: described,
                });
            }
        }
        Ok(container)
    }

    /// Reads the pod, then opens the exec stream.
    async fn connect(&self, argv: &[String]) -> Result<AttachedProcess, KubeError> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let container = self.check_pod(&api).await?;
        let params = AttachParams::default()
            .container(container)
            .stdin(true)
            .stdout(true)
            .stderr(true)
            .tty(false)
            .max_stdin_buf_size(PIPE_BUF)
            .max_stdout_buf_size(PIPE_BUF)
            .max_stderr_buf_size(PIPE_BUF);
        api.exec(&self.pod, argv.to_vec(), &params)
            .await
            .map_err(|source| KubeError::Connect {
                namespace: self.namespace.clone(),
                pod: self.pod.clone(),
                source,
            })
    }
}

/// A client whose connections set `TCP_NODELAY`.
///
/// kube-rs forwards stdin in 4 KiB WebSocket frames (its `ReaderStream`),
/// each far below the MSS; with Nagle on, every frame after the first
/// waits for the server's delayed ACK, about 40 ms per sync. kube's own
/// builder hard-codes its connector, so this builds the client the way
/// kube documents for custom clients: its TLS, base-URI, auth and
/// extra-header layers over a connector with `nodelay`. Proxied configs
/// keep kube's builder, which owns proxy support.
fn nodelay_client(config: &Config) -> Result<Client, kube::Error> {
    use kube::client::ConfigExt;
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(config.connect_timeout);
    let https = config.rustls_https_connector_with_connector(http)?;
    let hyper = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build(https);
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(tower::BoxError::from)
        .service(hyper);
    Ok(Client::new(service, config.default_namespace.clone()))
}

/// True when the API server's host (`Config::cluster_url.host()`) is this
/// machine.
fn is_loopback_host(host: Option<&str>) -> bool {
    match host {
        Some("localhost") => true,
        Some(host) => host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback()),
        None => false,
    }
}

impl ExecBackend for KubeBackend {
    fn start(&self, req: ExecRequest) -> BoxFuture<'_, Result<Process, ExecError>> {
        Box::pin(async move {
            let program = match req.argv.first() {
                Some(p) => p.clone(),
                None => return Err(ExecError::Unsupported("empty argv".into())),
            };
            // One deadline covers the pod read, the upgrade and the run.
            let deadline = super::deadline_after(req.timeout);
            let mut attached =
                match tokio::time::timeout_at(deadline, self.connect(&req.argv)).await {
                    Ok(Ok(attached)) => attached,
                    Ok(Err(e)) => return Err(start_error(&program, e)),
                    Err(_) => {
                        return Err(start_error(
                            &program,
                            KubeError::ConnectTimeout(req.timeout),
                        ))
                    }
                };
            tracing::debug!(
                namespace = %self.namespace,
                pod = %self.pod,
                argv_len = req.argv.len(),
                "kube exec started"
            );
            let pipes = (
                attached.stdin(),
                attached.stdout(),
                attached.stderr(),
                attached.take_status(),
            );
            let (stdin, stdout, stderr, status) = match pipes {
                (Some(i), Some(o), Some(e), Some(s)) => (i, o, e, s),
                (None, ..) => return Err(start_error(&program, KubeError::MissingPipe("stdin"))),
                (_, None, ..) => {
                    return Err(start_error(&program, KubeError::MissingPipe("stdout")))
                }
                (_, _, None, _) => {
                    return Err(start_error(&program, KubeError::MissingPipe("stderr")))
                }
                (.., None) => return Err(start_error(&program, KubeError::MissingPipe("status"))),
            };

            let shared = Arc::new(Shared::default());
            let stderr_task = tokio::spawn(capture_stderr(
                GatedRead::new(stderr, Arc::clone(&shared), Slot::Stderr),
                req.max_stderr,
                Arc::clone(&shared),
            ));
            let supervisor = tokio::spawn(supervise(
                attached,
                status,
                stderr_task,
                Arc::clone(&shared),
                deadline,
            ));
            Ok(Process {
                stdin: Box::new(KubeStdin {
                    pipe: Some(stdin),
                    shared: Arc::clone(&shared),
                }),
                stdout: Box::new(KubeStdout {
                    pipe: Some(GatedRead::new(stdout, Arc::clone(&shared), Slot::Stdout)),
                }),
                control: Box::new(KubeControl {
                    shared,
                    supervisor: Some(supervisor),
                    outcome: None,
                }),
            })
        })
    }

    fn name(&self) -> &'static str {
        "kube"
    }
}

/// Which caller-facing stream a waker belongs to.
#[derive(Debug, Clone, Copy)]
enum Slot {
    Stdout,
    Stderr,
}

/// State shared by the streams, the supervisor and the control.
#[derive(Default)]
struct Shared {
    /// The exec is over: stdin writes fail, reads end once the pipe is empty.
    closed: AtomicBool,
    stdin_waker: AtomicWaker,
    stdout_waker: AtomicWaker,
    stderr_waker: AtomicWaker,
    /// The caller's stdin pipe after the caller dropped its writer; kept
    /// until the status frame so the drop never reaches the pod.
    parked_stdin: Mutex<Option<WriteHalf<SimplexStream>>>,
    /// `Control::abort` (or the control was dropped).
    abort: Notify,
    /// Stderr went past the cap.
    stderr_overflow: Notify,
}

impl Shared {
    fn waker(&self, slot: Slot) -> &AtomicWaker {
        match slot {
            Slot::Stdout => &self.stdout_waker,
            Slot::Stderr => &self.stderr_waker,
        }
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Ends the caller-facing streams. kube-rs does not shut its pipes down
    /// when its loop fails or is aborted, and split simplex halves do not
    /// signal on drop, so without this a reader or a full-pipe writer would
    /// wait forever.
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.stdin_waker.wake();
        self.stdout_waker.wake();
        self.stderr_waker.wake();
        let parked = self
            .parked_stdin
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        drop(parked);
    }
}

/// A kube-rs output pipe that ends (EOF) once the exec is over and the
/// bytes already in the pipe have been read.
struct GatedRead {
    pipe: ReadHalf<SimplexStream>,
    shared: Arc<Shared>,
    slot: Slot,
}

impl GatedRead {
    fn new(pipe: ReadHalf<SimplexStream>, shared: Arc<Shared>, slot: Slot) -> Self {
        GatedRead { pipe, shared, slot }
    }
}

impl AsyncRead for GatedRead {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // Register before polling so a `close` in between still wakes us.
        this.shared.waker(this.slot).register(cx.waker());
        match Pin::new(&mut this.pipe).poll_read(cx, buf) {
            Poll::Pending if this.shared.is_closed() => Poll::Ready(Ok(())),
            other => other,
        }
    }
}

/// The caller's stdout.
///
/// kube-rs's message loop blocks on a full stdout pipe, and then neither
/// forwards stdin nor reads the status frame. Our caller always drains
/// stdout (the shim reads ahead through `AsyncReadStream`); should it drop
/// the reader early, the rest is drained in the background until the exec
/// ends, so the loop never stalls.
struct KubeStdout {
    pipe: Option<GatedRead>,
}

impl AsyncRead for KubeStdout {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut().pipe.as_mut() {
            Some(pipe) => Pin::new(pipe).poll_read(cx, buf),
            None => Poll::Ready(Ok(())),
        }
    }
}

impl Drop for KubeStdout {
    fn drop(&mut self) {
        let Some(mut pipe) = self.pipe.take() else {
            return;
        };
        if pipe.shared.is_closed() {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            // Ends at EOF, i.e. at the latest when the exec is closed.
            Ok(rt) => {
                rt.spawn(async move {
                    let _ = tokio::io::copy(&mut pipe, &mut tokio::io::sink()).await;
                });
            }
            Err(_) => tracing::debug!("kube stdout dropped outside a runtime; not draining"),
        }
    }
}

/// The caller's stdin. Writes go to kube-rs's stdin pipe; `shutdown` only
/// flushes and drop parks the pipe, so stdin EOF never reaches the pod
/// before the status frame. Once the exec is over writes fail with
/// `BrokenPipe` (a blocked write is woken).
struct KubeStdin {
    pipe: Option<WriteHalf<SimplexStream>>,
    shared: Arc<Shared>,
}

fn broken_pipe() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "the sandbox process has ended")
}

impl AsyncWrite for KubeStdin {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.shared.is_closed() {
            return Poll::Ready(Err(broken_pipe()));
        }
        let Some(pipe) = this.pipe.as_mut() else {
            return Poll::Ready(Err(broken_pipe()));
        };
        this.shared.stdin_waker.register(cx.waker());
        match Pin::new(pipe).poll_write(cx, buf) {
            Poll::Pending if this.shared.is_closed() => Poll::Ready(Err(broken_pipe())),
            other => other,
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut().pipe.as_mut() {
            Some(pipe) => Pin::new(pipe).poll_flush(cx),
            None => Poll::Ready(Ok(())),
        }
    }

    /// Flushes only: see the type's docs.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        tracing::trace!("kube stdin shutdown deferred until the status frame");
        self.poll_flush(cx)
    }
}

impl super::SandboxStdin for KubeStdin {}

impl Drop for KubeStdin {
    fn drop(&mut self) {
        if let Some(pipe) = self.pipe.take() {
            if !self.shared.is_closed() {
                *self
                    .shared
                    .parked_stdin
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = Some(pipe);
            }
        }
    }
}

/// Reads stderr up to `cap` bytes; past the cap it asks the supervisor to
/// abort (fail closed) and keeps draining so the message loop never blocks
/// on a full stderr pipe.
async fn capture_stderr(stderr: GatedRead, cap: u64, shared: Arc<Shared>) -> (Vec<u8>, bool) {
    super::capture_capped(stderr, cap, move || shared.stderr_overflow.notify_one()).await
}

/// Why the supervisor stopped waiting.
enum Ending {
    /// kube-rs resolved the status future: a frame, or `None` when its
    /// loop ended without one.
    Status(Option<Box<Status>>),
    Aborted,
    StderrOverflow,
    TimedOut,
}

/// Owns the exec: waits for the status frame, the deadline, the stderr cap
/// or an abort, whichever comes first, then closes the caller's streams.
async fn supervise(
    attached: AttachedProcess,
    status_rx: impl std::future::Future<Output = Option<Status>>,
    stderr_task: JoinHandle<(Vec<u8>, bool)>,
    shared: Arc<Shared>,
    deadline: Instant,
) -> Result<ExitInfo, KubeError> {
    let ending = tokio::select! {
        biased;
        status = status_rx => Ending::Status(status.map(Box::new)),
        () = shared.abort.notified() => Ending::Aborted,
        () = shared.stderr_overflow.notified() => Ending::StderrOverflow,
        () = tokio::time::sleep_until(deadline) => Ending::TimedOut,
    };
    let mut timed_out = false;
    let exit_code = match ending {
        Ending::Status(Some(status)) => {
            // The loop has left; let it shut its pipes down cleanly.
            let _ = tokio::time::timeout(JOIN_GRACE, attached.join()).await;
            match exit_code_of(&status) {
                Ok(code) => Some(code),
                Err(e) => {
                    shared.close();
                    return Err(e);
                }
            }
        }
        Ending::Status(None) => {
            // The loop already ended, so this does not block.
            let err = match attached.join().await {
                Ok(()) => KubeError::NoStatus,
                Err(e) => KubeError::ConnectionLost(Box::new(e)),
            };
            tracing::debug!(error = %err, "kube exec ended without a status frame");
            shared.close();
            return Err(err);
        }
        Ending::Aborted => {
            attached.abort();
            None
        }
        Ending::StderrOverflow => {
            tracing::debug!("kube exec stderr past the cap; aborting");
            attached.abort();
            None
        }
        Ending::TimedOut => {
            tracing::debug!("kube exec past its deadline; aborting");
            attached.abort();
            timed_out = true;
            None
        }
    };
    shared.close();
    let (stderr, stderr_truncated) = match tokio::time::timeout(STDERR_GRACE, stderr_task).await {
        Ok(Ok(captured)) => captured,
        _ => (Vec::new(), false),
    };
    Ok(ExitInfo {
        exit_code,
        timed_out,
        stderr,
        stderr_truncated,
    })
}

/// The exit code a status frame reports.
fn exit_code_of(status: &Status) -> Result<i32, KubeError> {
    let reason = status.reason.as_deref().unwrap_or_default();
    match status.status.as_deref() {
        Some(STATUS_SUCCESS) => Ok(0),
        Some(STATUS_FAILURE) if reason == REASON_NON_ZERO_EXIT => {
            let cause = status
                .details
                .as_ref()
                .and_then(|d| d.causes.as_ref())
                .and_then(|causes| {
                    causes
                        .iter()
                        .find(|c| c.reason.as_deref() == Some(CAUSE_EXIT_CODE))
                })
                .and_then(|c| c.message.as_deref())
                .unwrap_or_default();
            cause
                .trim()
                .parse::<i32>()
                .map_err(|_| KubeError::BadExitCode(cause.to_owned()))
        }
        _ => Err(KubeError::ExecFailed {
            reason: reason.to_owned(),
            message: status.message.clone().unwrap_or_default(),
        }),
    }
}

struct KubeControl {
    shared: Arc<Shared>,
    supervisor: Option<JoinHandle<Result<ExitInfo, KubeError>>>,
    /// What the supervisor returned, for repeated `wait`s.
    outcome: Option<Result<ExitInfo, String>>,
}

impl Control for KubeControl {
    fn wait(&mut self) -> BoxFuture<'_, Result<ExitInfo, ExecError>> {
        Box::pin(async move {
            if let Some(supervisor) = self.supervisor.as_mut() {
                // Awaiting `&mut` keeps this cancel-safe.
                let result = match supervisor.await {
                    Ok(result) => result,
                    Err(e) => Err(KubeError::Supervisor(e.to_string())),
                };
                self.supervisor = None;
                self.outcome = Some(match &result {
                    Ok(info) => Ok(info.clone()),
                    Err(e) => Err(e.to_string()),
                });
                return result.map_err(wait_error);
            }
            match &self.outcome {
                Some(Ok(info)) => Ok(info.clone()),
                Some(Err(message)) => Err(wait_error(KubeError::Earlier(message.clone()))),
                None => Err(wait_error(KubeError::Supervisor("no supervisor".into()))),
            }
        })
    }

    fn abort(&mut self) {
        self.shared.abort.notify_one();
    }
}

impl Drop for KubeControl {
    fn drop(&mut self) {
        if self.supervisor.is_some() {
            // The supervisor aborts the stream; the streams end now.
            self.shared.abort.notify_one();
            self.shared.close();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{StatusCause, StatusDetails};

    fn status(json: &str) -> Status {
        serde_json::from_str(json).expect("test status parses")
    }

    #[test]
    fn success_is_zero() {
        let s = status(r#"{"metadata":{},"status":"Success"}"#);
        assert_eq!(exit_code_of(&s).ok(), Some(0));
    }

    #[test]
    fn non_zero_exit_code_is_parsed() {
        let s = status(
            r#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}"#,
        );
        assert_eq!(exit_code_of(&s).ok(), Some(3));
    }

    #[test]
    fn other_failure_is_an_error() {
        let s = Status {
            status: Some("Failure".into()),
            reason: Some("InternalError".into()),
            message: Some("executable file not found".into()),
            details: Some(StatusDetails {
                causes: Some(vec![StatusCause::default()]),
                ..StatusDetails::default()
            }),
            ..Status::default()
        };
        assert!(matches!(
            exit_code_of(&s),
            Err(KubeError::ExecFailed { .. })
        ));
    }

    #[test]
    fn garbage_exit_code_is_an_error() {
        let s = status(
            r#"{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"x"}]}}"#,
        );
        assert!(matches!(exit_code_of(&s), Err(KubeError::BadExitCode(_))));
    }

    #[test]
    fn loopback_hosts() {
        for (host, want) in [
            (Some("127.0.0.1"), true),
            (Some("localhost"), true),
            (Some("[::1]"), true),
            (Some("10.0.0.1"), false),
            (Some("kubernetes.default.svc"), false),
            (None, false),
        ] {
            assert_eq!(is_loopback_host(host), want, "{host:?}");
        }
    }
}
