//! Why a toolbox call failed, typed.

use std::time::Duration;

use crate::exec::ExecError;

/// Why a toolbox call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolboxError {
    /// 401: the API key was refused.
    #[error("Daytona refused the API key (401): {0}")]
    Unauthorized(String),
    /// The sandbox does not exist or is not started.
    #[error("Daytona sandbox {sandbox} is not reachable ({status}): {message}")]
    NoSandbox {
        /// The sandbox id.
        sandbox: String,
        /// The HTTP status.
        status: u16,
        /// The toolbox's message.
        message: String,
    },
    /// 408, or no answer within the command's timeout and a margin.
    #[error("the command timed out in the Daytona sandbox after {0:?}")]
    Timeout(Duration),
    /// Any other failing status.
    #[error("the Daytona toolbox answered {status} to {call}: {message}")]
    Status {
        /// Which call.
        call: &'static str,
        /// The HTTP status.
        status: u16,
        /// The toolbox's message (its JSON `message` or `errors`, else
        /// the body).
        message: String,
    },
    /// The toolbox could not read a file it was asked for.
    #[error("Daytona could not read {path}: {code}: {message}")]
    File {
        /// The path asked for.
        path: String,
        /// `FILE_NOT_FOUND`, `FILE_ACCESS_DENIED`, `INVALID_FILE_PATH`,
        /// `FILE_READ_FAILED`.
        code: String,
        /// Its message.
        message: String,
    },
    /// A transfer ended early.
    #[error("the Daytona transfer was cut: {0}")]
    Cut(String),
    /// An answer longer than the client reads (a hostile or broken toolbox).
    #[error("the Daytona toolbox's answer to {call} exceeded {}", size(*.limit))]
    TooLarge {
        /// Which call.
        call: &'static str,
        /// The cap it crossed.
        limit: usize,
    },
    /// An answer that does not follow the protocol.
    #[error("the Daytona toolbox's answer is malformed: {0}")]
    Malformed(String),
    /// The connection failed.
    #[error("cannot reach the Daytona toolbox: {0}")]
    Transport(String),
}

impl ToolboxError {
    /// The `ToolboxError` inside an [`ExecError`] from this backend, if any.
    pub fn find(err: &ExecError) -> Option<&ToolboxError> {
        match err {
            ExecError::Toolbox { source, .. }
            | ExecError::BackendStart { source, .. }
            | ExecError::BackendWait(source) => source.downcast_ref::<ToolboxError>(),
            _ => None,
        }
    }

    /// A stable, machine-readable name for the failure (the CLI's JSON
    /// `cause`).
    pub fn code(&self) -> &'static str {
        match self {
            ToolboxError::Unauthorized(_) => "unauthorized",
            ToolboxError::NoSandbox { .. } => "no-sandbox",
            ToolboxError::Timeout(_) => "timeout",
            ToolboxError::Status { .. } => "status",
            ToolboxError::File { .. } => "file",
            ToolboxError::Cut(_) => "cut",
            ToolboxError::TooLarge { .. } => "too-large",
            ToolboxError::Malformed(_) => "malformed",
            ToolboxError::Transport(_) => "transport",
        }
    }

    /// What a user should check, where this failure says more than the
    /// backend's general hint.
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            ToolboxError::Unauthorized(_) => Some("the Daytona toolbox refused DAYTONA_API_KEY: check the key and that it belongs to this sandbox's organization"),
            ToolboxError::NoSandbox { .. } => Some("check the Daytona sandbox id and that the sandbox is started"),
            ToolboxError::Timeout(_) => Some("the toolbox call ran out of time: raise --timeout-ms"),
            _ => None,
        }
    }
}

/// `n` bytes as a person reads them (the caps are whole KiB or MiB).
fn size(n: usize) -> String {
    match n {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} bytes"),
    }
}
