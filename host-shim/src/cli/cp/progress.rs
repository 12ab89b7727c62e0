//! The `cp` progress bar: on a terminal, for copies that outlive a second.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use sandbox_sync_host::exec::counting::Counters;
use sandbox_sync_host::provider::Direction;
use tokio::task::JoinHandle;

/// A running progress display; [`Progress::finish`] clears it.
pub struct Progress {
    done: Arc<AtomicBool>,
    task: Option<JoinHandle<()>>,
}

impl Progress {
    /// Starts a bar for a copy in `direction` (sized from `host_source` when
    /// it is the host side that is read), when `show` is true.
    pub fn start(
        show: bool,
        direction: Direction,
        host_source: &Path,
        counters: Arc<Counters>,
    ) -> Self {
        let done = Arc::new(AtomicBool::new(false));
        let task = show.then(|| {
            let (total, files) = match direction {
                Direction::In => host_size(host_source),
                Direction::Out => (0, 0),
            };
            let done = Arc::clone(&done);
            tokio::spawn(async move {
                // Only transfers that last more than about a second get a bar.
                tokio::time::sleep(Duration::from_millis(900)).await;
                if done.load(Ordering::SeqCst) {
                    return;
                }
                let pb = bar(direction, total, files);
                while !done.load(Ordering::SeqCst) {
                    let n = match direction {
                        Direction::In => counters.sent.load(Ordering::Relaxed),
                        Direction::Out => counters.received.load(Ordering::Relaxed),
                    };
                    pb.set_position(n);
                    pb.tick();
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                pb.finish_and_clear();
            })
        });
        Progress { done, task }
    }

    /// Stops and clears the bar.
    pub async fn finish(mut self) {
        self.done.store(true, Ordering::SeqCst);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

fn bar(direction: Direction, total: u64, files: u64) -> ProgressBar {
    match direction {
        Direction::In => {
            let pb = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            if let Ok(style) = ProgressStyle::with_template(
                "{spinner} {bytes}/{total_bytes} {wide_bar} {bytes_per_sec} ETA {eta} {msg}",
            ) {
                pb.set_style(style);
            }
            pb.set_message(format!("{files} files"));
            pb
        }
        Direction::Out => {
            let pb = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            if let Ok(style) =
                ProgressStyle::with_template("{spinner} {bytes} {bytes_per_sec} {msg}")
            {
                pb.set_style(style);
            }
            pb.set_message("receiving");
            pb
        }
    }
}

/// Total bytes and files under a host path.
fn host_size(p: &Path) -> (u64, u64) {
    let mut stack = vec![p.to_path_buf()];
    let (mut bytes, mut files) = (0, 0);
    while let Some(p) = stack.pop() {
        let Ok(m) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if m.is_dir() {
            stack.extend(
                std::fs::read_dir(&p)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .map(|e| e.path()),
            );
        } else {
            files += 1;
            bytes += m.len();
        }
    }
    (bytes, files)
}
