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
//! # Our own message loop
//!
//! kube-rs opens the connection (auth, TLS, the upgrade) but its message
//! loop sends stdin in 4 KiB frames, each flushed alone, and stops reading
//! while it sends; `session` replaces it with one that sends the caller's
//! batches as frames of up to 256 KiB and reads and writes at once.
//!
//! # Stdin EOF
//!
//! Ending stdin (shutdown or drop) sends a v5 CLOSE of channel 0. On v4 the
//! only way to signal stdin EOF is to close the whole WebSocket, losing any
//! output still in flight, so there nothing is sent: the remote command
//! must know how much input to read (the component frames its stdin).
//!
//! # Abort
//!
//! Aborting (or the deadline, or the stderr cap) closes the connection.
//! The API server then tears down the stream, but Kubernetes does not kill
//! processes started by exec: a command that ignores EOF/SIGPIPE keeps
//! running in the container. Wrap long-running commands (e.g. `timeout`);
//! the component's program runs under its own watchdog.
//!
//! Layout: [`error`] (one typed error per failure), `config` (clients from
//! kubeconfig or the service account), `pod` (reading the pod, opening the
//! exec), `session` (the message loop: frames, deadline, stderr cap,
//! status), `streams` (the caller's stdin/stdout, queues of frames) and
//! `status` (the exit code a status frame reports).

mod config;
mod error;
mod pod;
mod protocol;
mod session;
mod status;
mod streams;

use kube::Client;

use super::{BoxFuture, ExecBackend, ExecError, ExecRequest, Process};

use error::start_error;
pub use error::KubeError;

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
            let connection = match tokio::time::timeout_at(deadline, self.connect(&req.argv)).await
            {
                Ok(Ok(connection)) => connection,
                Ok(Err(e)) => return Err(start_error(&program, e)),
                Err(_) => {
                    return Err(start_error(
                        &program,
                        KubeError::ConnectTimeout(req.timeout),
                    ))
                }
            };
            let v5 = connection.supports_stream_close();
            tracing::debug!(
                namespace = %self.namespace,
                pod = %self.pod,
                argv_len = req.argv.len(),
                v5,
                "kube exec started"
            );
            // Re-wrapped so that our session sets the frame limits; nothing
            // has been read from the connection yet.
            let io = connection.into_stream().into_inner();
            let started = session::start(io, v5, req.max_stderr, deadline);
            Ok(Process {
                stdin: Box::new(started.stdin),
                stdout: Box::new(started.stdout),
                control: Box::new(started.control),
                stdin_ends: v5,
            })
        })
    }

    fn name(&self) -> &'static str {
        "kube"
    }
}
