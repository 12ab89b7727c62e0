//! The failures a test can inject into execs, and the pacing used to
//! throttle stdin and stdout. The knobs are read when an exec starts; the
//! pumps in `pumps.rs`, the session in `session.rs` and the upgrade in
//! `upgrade.rs` act on them.

use std::time::Duration;

use tokio::time::Instant;

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
    /// Feed stdin to the process at this many bytes per second at most
    /// (`Some(0)`: never).
    pub stdin_bytes_per_sec: Option<u64>,
    /// Forward the process's stdout to the client at this many bytes per
    /// second at most (`Some(0)`: never; the process then blocks on a full
    /// pipe). With `stdin_bytes_per_sec`, a link of that bandwidth.
    pub stdout_bytes_per_sec: Option<u64>,
    /// Wait this long before answering each exec upgrade: the round trips
    /// a real API server and kubelet add to every exec.
    pub exec_latency: Option<Duration>,
}

/// Idle time a [`Pacer`] may catch up on: enough to absorb timer and
/// scheduling jitter, too little to let a paused stream burst.
const BURST: Duration = Duration::from_millis(50);

/// Paces a stream to a byte rate ([`Faults::stdin_bytes_per_sec`],
/// [`Faults::stdout_bytes_per_sec`]) the way a link of that bandwidth
/// would: each write books its transfer time after the previous one's and
/// the writer sleeps until the link is free again (no polling).
pub(super) struct Pacer {
    /// When the bytes booked so far are through.
    free_at: Instant,
    bytes_per_sec: u64,
}

impl Pacer {
    /// Paces from now on; `bytes_per_sec` is not 0.
    pub(super) fn new(bytes_per_sec: u64) -> Self {
        Pacer {
            free_at: Instant::now(),
            bytes_per_sec,
        }
    }

    /// Largest write that keeps the pace smooth (about 50 ms of data).
    pub(super) fn piece(&self) -> usize {
        usize::try_from(self.bytes_per_sec / 20)
            .unwrap_or(usize::MAX)
            .max(1)
    }

    /// Books `n` bytes just written and sleeps until the link carried them.
    pub(super) async fn sent(&mut self, n: usize) {
        let now = Instant::now();
        let earliest = now.checked_sub(BURST).unwrap_or(now);
        let secs = n as f64 / self.bytes_per_sec as f64;
        self.free_at = self.free_at.max(earliest) + Duration::from_secs_f64(secs);
        if self.free_at > now {
            tokio::time::sleep_until(self.free_at).await;
        }
    }
}
