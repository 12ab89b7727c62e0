//! The exit code a status frame (channel 3) reports.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;

use super::KubeError;

/// `metav1.Status` values of the exec status frame; see
/// <https://github.com/kubernetes/kubernetes/blob/master/staging/src/k8s.io/apimachinery/pkg/util/remotecommand/constants.go>
/// and `k8s.io/apimachinery/pkg/api/errors` (`NonZeroExitCodeReason`,
/// `ExitCodeCauseType`).
pub(super) const STATUS_SUCCESS: &str = "Success";
pub(super) const STATUS_FAILURE: &str = "Failure";
pub(super) const REASON_NON_ZERO_EXIT: &str = "NonZeroExitCode";
pub(super) const CAUSE_EXIT_CODE: &str = "ExitCode";

/// The exit code a status frame reports.
pub(super) fn exit_code_of(status: &Status) -> Result<i32, KubeError> {
    let reason = status.reason.as_deref().unwrap_or_default();
    match status.status.as_deref() {
        Some(STATUS_SUCCESS) => Ok(0),
        Some(STATUS_FAILURE) if reason == REASON_NON_ZERO_EXIT => {
            let cause = status
                .details
                .as_ref()
                .and_then(|d| d.causes.as_ref())
                .and_then(|causes| {
                    causes
                        .iter()
                        .find(|c| c.reason.as_deref() == Some(CAUSE_EXIT_CODE))
                })
                .and_then(|c| c.message.as_deref())
                .unwrap_or_default();
            cause
                .trim()
                .parse::<i32>()
                .map_err(|_| KubeError::BadExitCode(cause.to_owned()))
        }
        _ => Err(KubeError::ExecFailed {
            reason: reason.to_owned(),
            message: status.message.clone().unwrap_or_default(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{StatusCause, StatusDetails};

    fn status(json: &str) -> Status {
        serde_json::from_str(json).expect("test status parses")
    }

    #[test]
    fn success_is_zero() {
        let s = status(r#"{"metadata":{},"status":"Success"}"#);
        assert_eq!(exit_code_of(&s).ok(), Some(0));
    }

    #[test]
    fn non_zero_exit_code_is_parsed() {
        let s = status(
            r#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}"#,
        );
        assert_eq!(exit_code_of(&s).ok(), Some(3));
    }

    #[test]
    fn other_failure_is_an_error() {
        let s = Status {
            status: Some("Failure".into()),
            reason: Some("InternalError".into()),
            message: Some("executable file not found".into()),
            details: Some(StatusDetails {
                causes: Some(vec![StatusCause::default()]),
                ..StatusDetails::default()
            }),
            ..Status::default()
        };
        assert!(matches!(
            exit_code_of(&s),
            Err(KubeError::ExecFailed { .. })
        ));
    }

    #[test]
    fn garbage_exit_code_is_an_error() {
        let s = status(
            r#"{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"x"}]}}"#,
        );
        assert!(matches!(exit_code_of(&s), Err(KubeError::BadExitCode(_))));
    }
}
