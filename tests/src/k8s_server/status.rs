//! `metav1.Status`, the API server's error and result object, in the two
//! places it travels: as the JSON body of a failed HTTP request (which
//! kube-rs surfaces as `kube::Error::Api`) and as the payload of the exec's
//! status channel once the process has ended.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use tokio_tungstenite::tungstenite::http::StatusCode;

use super::protocol::{frame, STATUS_CHANNEL};

/// The media type of every `Status` body.
pub(super) const JSON_CONTENT_TYPE: &str = "application/json";

/// Exit codes of signalled processes are this plus the signal number, as
/// container runtimes report them.
const SIGNAL_EXIT_BASE: i32 = 128;

/// A failure the API server answers with: the HTTP code and the
/// `metav1.StatusReason` that goes with it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Failure {
    pub(super) code: StatusCode,
    pub(super) reason: &'static str,
}

pub(super) const BAD_REQUEST: Failure = Failure {
    code: StatusCode::BAD_REQUEST,
    reason: "BadRequest",
};
pub(super) const NOT_FOUND: Failure = Failure {
    code: StatusCode::NOT_FOUND,
    reason: "NotFound",
};
pub(super) const METHOD_NOT_ALLOWED: Failure = Failure {
    code: StatusCode::METHOD_NOT_ALLOWED,
    reason: "MethodNotAllowed",
};

impl Failure {
    /// The `Status` body for this failure.
    pub(super) fn json(self, message: &str) -> String {
        self.value(message).to_string()
    }

    fn value(self, message: &str) -> serde_json::Value {
        serde_json::json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": self.reason,
            "code": self.code.as_u16(),
        })
    }
}

/// The `Status` body of a `GET`/exec for a pod that does not exist.
pub(super) fn not_found_json(pod: &str) -> String {
    let mut status = NOT_FOUND.value(&format!("pods \"{pod}\" not found"));
    status["details"] = serde_json::json!({ "name": pod, "kind": "pods" });
    status.to_string()
}

/// How an exec's process ended, for the status frame.
pub(super) enum Outcome {
    Exited(i32),
    Internal(String),
}

/// The exit code kubelets report: the code, or 128 + signal.
pub(super) fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .unwrap_or_else(|| SIGNAL_EXIT_BASE + status.signal().unwrap_or(0))
}

/// The channel-3 frame for `outcome`, byte for byte what a kubelet sends.
/// Written by hand, not with `json!`, to keep Go's field order.
pub(super) fn status_frame(outcome: &Outcome, argv: &[String]) -> Vec<u8> {
    let json = match outcome {
        Outcome::Exited(0) => r#"{"metadata":{},"status":"Success"}"#.to_owned(),
        Outcome::Exited(code) => {
            let message = format!(
                "command terminated with non-zero exit code: error executing command [{}], exit code {code}",
                argv.join(" ")
            );
            format!(
                r#"{{"metadata":{{}},"status":"Failure","message":{},"reason":"NonZeroExitCode","details":{{"causes":[{{"reason":"ExitCode","message":"{code}"}}]}}}}"#,
                json_string(&message)
            )
        }
        Outcome::Internal(detail) => format!(
            r#"{{"metadata":{{}},"status":"Failure","message":{},"reason":"InternalError","details":{{"causes":[{{"message":{}}}]}},"code":{}}}"#,
            json_string(&format!("Internal error occurred: {detail}")),
            json_string(detail),
            StatusCode::INTERNAL_SERVER_ERROR.as_u16()
        ),
    };
    frame(STATUS_CHANNEL, json.as_bytes())
}

fn json_string(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_frames_match_kubelet() {
        let argv = vec!["sh".to_owned(), "-c".to_owned(), "exit 3".to_owned()];
        let ok = status_frame(&Outcome::Exited(0), &argv);
        assert_eq!(ok[0], STATUS_CHANNEL);
        assert_eq!(&ok[1..], br#"{"metadata":{},"status":"Success"}"#);
        let failed = status_frame(&Outcome::Exited(3), &argv);
        assert_eq!(
            std::str::from_utf8(&failed[1..]).ok(),
            Some(
                r#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}"#
            )
        );
        let internal = status_frame(&Outcome::Internal("no \"x\"".into()), &argv);
        let parsed: serde_json::Value =
            serde_json::from_slice(&internal[1..]).expect("internal status is JSON");
        assert_eq!(parsed["reason"], "InternalError");
        assert_eq!(
            std::str::from_utf8(&internal[1..]).ok(),
            Some(
                r#"{"metadata":{},"status":"Failure","message":"Internal error occurred: no \"x\"","reason":"InternalError","details":{"causes":[{"message":"no \"x\""}]},"code":500}"#
            )
        );
    }

    #[test]
    fn failure_bodies_are_api_server_statuses() {
        assert_eq!(
            BAD_REQUEST.json("no"),
            r#"{"apiVersion":"v1","code":400,"kind":"Status","message":"no","metadata":{},"reason":"BadRequest","status":"Failure"}"#
        );
        assert_eq!(
            not_found_json("p"),
            r#"{"apiVersion":"v1","code":404,"details":{"kind":"pods","name":"p"},"kind":"Status","message":"pods \"p\" not found","metadata":{},"reason":"NotFound","status":"Failure"}"#
        );
    }
}
