//! The supervisor: waits for the status frame, the deadline, the stderr cap
//! or an abort, whichever comes first, and the control the shim holds.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::api::AttachedProcess;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::exec::{BoxFuture, Control, ExecError, ExitInfo};

use super::error::wait_error;
use super::status::exit_code_of;
use super::streams::{GatedRead, Shared};
use super::KubeError;
use crate::exec::capture_capped;

/// How long to wait for the stderr reader after the exec has ended.
pub(super) const STDERR_GRACE: Duration = Duration::from_secs(2);

/// How long to let kube-rs's message loop wind down after the status frame.
pub(super) const JOIN_GRACE: Duration = Duration::from_secs(2);

/// Reads stderr up to `cap` bytes; past the cap it asks the supervisor to
/// abort (fail closed) and keeps draining so the message loop never blocks
/// on a full stderr pipe.
pub(super) async fn capture_stderr(
    stderr: GatedRead,
    cap: u64,
    shared: Arc<Shared>,
) -> (Vec<u8>, bool) {
    capture_capped(stderr, cap, move || shared.stderr_overflow.notify_one()).await
}

/// Why the supervisor stopped waiting.
pub(super) enum Ending {
    /// kube-rs resolved the status future: a frame, or `None` when its
    /// loop ended without one.
    Status(Option<Box<Status>>),
    Aborted,
    StderrOverflow,
    TimedOut,
}

/// Owns the exec: waits for the status frame, the deadline, the stderr cap
/// or an abort, whichever comes first, then closes the caller's streams.
pub(super) async fn supervise(
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

pub(super) struct KubeControl {
    pub(super) shared: Arc<Shared>,
    pub(super) supervisor: Option<JoinHandle<Result<ExitInfo, KubeError>>>,
    /// What the supervisor returned, for repeated `wait`s.
    pub(super) outcome: Option<Result<ExitInfo, String>>,
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
