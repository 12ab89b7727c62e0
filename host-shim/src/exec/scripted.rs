//! A scripted fake sandbox: stdout comes from memory, stdin is discarded.
//!
//! For tests and fuzzing of the component's handling of hostile output
//! without any process: the fuzzer's bytes become the sandbox's stdout.

use std::sync::{Arc, Mutex};

use super::{BoxFuture, Control, ExecBackend, ExecError, ExecRequest, ExitInfo, Process};

/// Replies to every exec with the same stdout and exit status.
#[derive(Debug, Clone)]
pub struct ScriptedBackend {
    stdout: Arc<Vec<u8>>,
    exit: ExitInfo,
    argvs: Arc<Mutex<Vec<Vec<String>>>>,
}

impl ScriptedBackend {
    /// A sandbox whose every exec prints `stdout` and exits with `exit_code`.
    pub fn new(stdout: Vec<u8>, exit_code: i32) -> Self {
        ScriptedBackend {
            stdout: Arc::new(stdout),
            exit: ExitInfo {
                exit_code: Some(exit_code),
                ..ExitInfo::default()
            },
            argvs: Arc::default(),
        }
    }

    /// The argv of every exec started so far.
    pub fn argvs(&self) -> Vec<Vec<String>> {
        self.argvs.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

struct Done(ExitInfo);

impl Control for Done {
    fn wait(&mut self) -> BoxFuture<'_, Result<ExitInfo, ExecError>> {
        let info = self.0.clone();
        Box::pin(async move { Ok(info) })
    }
    fn abort(&mut self) {}
}

impl ExecBackend for ScriptedBackend {
    fn start(&self, req: ExecRequest) -> BoxFuture<'_, Result<Process, ExecError>> {
        if let Ok(mut v) = self.argvs.lock() {
            v.push(req.argv);
        }
        let stdout = std::io::Cursor::new(Arc::clone(&self.stdout).as_ref().clone());
        let exit = self.exit.clone();
        Box::pin(async move {
            Ok(Process {
                stdin: Box::new(tokio::io::sink()),
                stdout: Box::new(stdout),
                control: Box::new(Done(exit)),
            })
        })
    }

    fn name(&self) -> &'static str {
        "scripted"
    }
}
