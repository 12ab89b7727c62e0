//! A scripted fake sandbox: stdout comes from a script, stdin is discarded.
//!
//! For tests and fuzzing of the component's handling of hostile output
//! without any process: the fuzzer's bytes become the sandbox's stdout, and
//! the script may pause or hang the way a stuck sandbox would. Like the real
//! backends it enforces the exec's deadline: past it, stdout ends and the
//! status says `timed-out`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::task::JoinHandle;

use super::{BoxFuture, Control, ExecBackend, ExecError, ExecRequest, ExitInfo, Process};

/// One step of a scripted sandbox's stdout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Write these bytes.
    Write(Vec<u8>),
    /// Say nothing for this long.
    Pause(Duration),
    /// Say nothing, and never end (until the deadline or an abort).
    Hang,
}

/// Replies to every exec with the same script and exit status.
#[derive(Debug, Clone)]
pub struct ScriptedBackend {
    steps: Arc<Vec<Step>>,
    exit: ExitInfo,
    argvs: Arc<Mutex<Vec<Vec<String>>>>,
    /// Plays a sandbox across a link (`auto` then compresses).
    remote: bool,
}

impl ScriptedBackend {
    /// A sandbox whose every exec prints `stdout` and exits with `exit_code`.
    pub fn new(stdout: Vec<u8>, exit_code: i32) -> Self {
        Self::scripted(vec![Step::Write(stdout)], exit_code)
    }

    /// A sandbox whose every exec plays `steps` on stdout and then exits
    /// with `exit_code` (if it gets there before the deadline).
    pub fn scripted(steps: Vec<Step>, exit_code: i32) -> Self {
        ScriptedBackend {
            steps: Arc::new(steps),
            exit: ExitInfo {
                exit_code: Some(exit_code),
                ..ExitInfo::default()
            },
            argvs: Arc::default(),
            remote: false,
        }
    }

    /// The same sandbox, as if across a network link: `auto` compression
    /// applies, as to a pod.
    pub fn remote(mut self) -> Self {
        self.remote = true;
        self
    }

    /// The argv of every exec started so far.
    pub fn argvs(&self) -> Vec<Vec<String>> {
        self.argvs.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

/// Stdout buffered between the script and the reader.
const PIPE: usize = 64 << 10;

struct Played {
    task: JoinHandle<bool>,
    exit: ExitInfo,
}

impl Drop for Played {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Control for Played {
    fn wait(&mut self) -> BoxFuture<'_, Result<ExitInfo, ExecError>> {
        Box::pin(async move {
            let finished = (&mut self.task).await.unwrap_or(false);
            if finished {
                Ok(self.exit.clone())
            } else {
                Ok(ExitInfo {
                    exit_code: None,
                    timed_out: true,
                    ..ExitInfo::default()
                })
            }
        })
    }
    fn abort(&mut self) {
        self.task.abort();
    }
}

impl ExecBackend for ScriptedBackend {
    fn start(&self, req: ExecRequest) -> BoxFuture<'_, Result<Process, ExecError>> {
        if let Ok(mut v) = self.argvs.lock() {
            v.push(req.argv);
        }
        let (reader, mut writer) = tokio::io::duplex(PIPE);
        let steps = Arc::clone(&self.steps);
        let deadline = super::deadline_after(req.timeout);
        let exit = self.exit.clone();
        Box::pin(async move {
            // True when the script ran to its end; false past the deadline.
            let task = tokio::spawn(async move {
                let play = async {
                    for step in steps.iter() {
                        match step {
                            Step::Write(b) => {
                                if writer.write_all(b).await.is_err() {
                                    return;
                                }
                            }
                            Step::Pause(d) => tokio::time::sleep(*d).await,
                            Step::Hang => std::future::pending::<()>().await,
                        }
                    }
                };
                tokio::select! {
                    () = play => true,
                    () = tokio::time::sleep_until(deadline) => false,
                }
            });
            Ok(Process {
                stdin: Box::new(tokio::io::sink()),
                stdout: Box::new(reader),
                control: Box::new(Played { task, exit }),
                stdin_ends: true,
            })
        })
    }

    fn name(&self) -> &'static str {
        "scripted"
    }

    /// In-process: nothing to gain from compressing, unless it plays a
    /// remote sandbox.
    fn is_local(&self) -> bool {
        !self.remote
    }
}
