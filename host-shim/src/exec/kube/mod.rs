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
//!
//! Layout: [`error`] (one typed error per failure), `config` (clients from
//! kubeconfig or the service account), `pod` (reading the pod, opening the
//! exec), `streams` (the caller's stdin/stdout over kube-rs's pipes),
//! `supervise` (deadline, stderr cap, status) and `status` (the exit code a
//! status frame reports).

mod config;
mod error;
mod pod;
mod status;
mod streams;
mod supervise;

use std::sync::Arc;

use kube::Client;

use super::{BoxFuture, ExecBackend, ExecError, ExecRequest, Process};

use error::start_error;
pub use error::KubeError;
use streams::{GatedRead, KubeStdin, KubeStdout, Shared, Slot};
use supervise::{capture_stderr, supervise, KubeControl};

/// Bytes kube-rs buffers per stream between its message loop and us (its
/// default, 1 KiB, makes bulk transfer crawl).
const PIPE_BUF: usize = 1 << 20;

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
