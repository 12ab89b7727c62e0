//! What a test configures: the pods the server knows, what runs behind an
//! exec, the accepted subprotocols and the initial faults.

use std::io;
use std::sync::Arc;

use tokio::process::Command;

use super::faults::Faults;
use super::protocol::Protocols;

/// A `tokio::process::Command` for an exec's argv, e.g. `unshare … chroot
/// ROOT argv…`. The server sets the three stdio pipes and `kill_on_drop`.
pub trait CommandFactory: Send + Sync + 'static {
    /// The command that runs `argv` (never empty).
    ///
    /// # Errors
    /// When the command cannot be built; the exec then ends with an
    /// `InternalError` status, like a kubelet that failed to start it.
    fn command(&self, argv: &[String]) -> io::Result<Command>;
}

impl<F> CommandFactory for F
where
    F: Fn(&[String]) -> io::Result<Command> + Send + Sync + 'static,
{
    fn command(&self, argv: &[String]) -> io::Result<Command> {
        self(argv)
    }
}

/// Runs argv directly on this machine.
#[derive(Debug, Clone, Copy, Default)]
pub struct HostCommands;

impl CommandFactory for HostCommands {
    fn command(&self, argv: &[String]) -> io::Result<Command> {
        let (program, args) = argv
            .split_first()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty argv"))?;
        let mut cmd = Command::new(program);
        cmd.args(args);
        Ok(cmd)
    }
}

/// A pod the server knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakePod {
    /// `metadata.name`.
    pub name: String,
    /// `status.phase` (`Running`, `Pending`, `Succeeded`, …).
    pub phase: String,
    /// `spec.containers[].name`.
    pub containers: Vec<String>,
}

impl FakePod {
    /// A `Running` pod with one container.
    pub fn running(name: impl Into<String>, container: impl Into<String>) -> Self {
        FakePod {
            name: name.into(),
            phase: "Running".into(),
            containers: vec![container.into()],
        }
    }

    /// The same pod in another phase.
    #[must_use]
    pub fn phase(mut self, phase: impl Into<String>) -> Self {
        self.phase = phase.into();
        self
    }
}

/// How to run the server.
#[derive(Clone)]
pub struct ServerConfig {
    pub(super) namespace: String,
    pub(super) pods: Vec<FakePod>,
    pub(super) protocols: Protocols,
    pub(super) faults: Faults,
    pub(super) channel_preamble: bool,
    pub(super) commands: Arc<dyn CommandFactory>,
}

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field("namespace", &self.namespace)
            .field("pods", &self.pods)
            .field("protocols", &self.protocols)
            .field("faults", &self.faults)
            .field("channel_preamble", &self.channel_preamble)
            .finish_non_exhaustive()
    }
}

impl ServerConfig {
    /// One `Running` pod `namespace/pod` with one container, v5 and v4
    /// accepted, no faults; execs run through `commands`.
    pub fn new(
        namespace: impl Into<String>,
        pod: impl Into<String>,
        container: impl Into<String>,
        commands: impl CommandFactory,
    ) -> Self {
        ServerConfig {
            namespace: namespace.into(),
            pods: vec![FakePod::running(pod, container)],
            protocols: Protocols { v5: true, v4: true },
            faults: Faults::default(),
            channel_preamble: true,
            commands: Arc::new(commands),
        }
    }

    /// Adds (or replaces, by name) a pod.
    #[must_use]
    pub fn pod(mut self, pod: FakePod) -> Self {
        self.pods.retain(|p| p.name != pod.name);
        self.pods.push(pod);
        self
    }

    /// Chooses the accepted subprotocols (`v5: false` forces v4).
    #[must_use]
    pub fn protocols(mut self, protocols: Protocols) -> Self {
        self.protocols = protocols;
        self
    }

    /// Starts with these faults (see also [`K8sExecServer::set_faults`]).
    ///
    /// [`K8sExecServer::set_faults`]: super::K8sExecServer::set_faults
    #[must_use]
    pub fn faults(mut self, faults: Faults) -> Self {
        self.faults = faults;
        self
    }

    /// Sends one empty frame on stdout right after the upgrade, as a
    /// kubelet does on the lowest channel it writes (kube-rs skips it).
    /// On by default.
    #[must_use]
    pub fn channel_preamble(mut self, on: bool) -> Self {
        self.channel_preamble = on;
        self
    }
}
