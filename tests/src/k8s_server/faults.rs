//! The failures a test can inject into execs, and the pacing used to
//! throttle stdin. The knobs are read when an exec starts; the pumps in
//! `pumps.rs` and the session in `session.rs` act on them.

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
    /// Feed stdin to the process at this many bytes per second at most.
    pub stdin_bytes_per_sec: Option<u64>,
}

/// Paces stdin to a byte rate ([`Faults::stdin_bytes_per_sec`]).
pub(super) struct Pacer {
    start: Instant,
    bytes_per_sec: u64,
}

impl Pacer {
    /// Paces from now on; `bytes_per_sec` is not 0.
    pub(super) fn new(bytes_per_sec: u64) -> Self {
        Pacer {
            start: Instant::now(),
            bytes_per_sec,
        }
    }

    /// Largest write that keeps the pace smooth (about 50 ms of data).
    pub(super) fn piece(&self) -> usize {
        usize::try_from(self.bytes_per_sec / 20)
            .unwrap_or(usize::MAX)
            .max(1)
    }

    /// Sleeps until `total` bytes are due.
    pub(super) async fn after(&self, total: u64) {
        let secs = total as f64 / self.bytes_per_sec as f64;
        tokio::time::sleep_until(self.start + Duration::from_secs_f64(secs)).await;
    }
}
