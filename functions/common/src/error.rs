//! What a function invocation can fail with, and how that reaches Lambda.
//!
//! An invocation fails only when retrying it may help (the store or SageMaker is unavailable, a
//! race was lost too many times): Lambda then retries the asynchronous invocation and, after its
//! retries, sends it to the function's dead-letter queue. Events that can never succeed (a
//! malformed event, a training job Trainyard did not launch) are acknowledged and logged
//! instead, so they neither retry nor raise the errors alarm.
//!
//! Errors map to [`Diagnostic`] with `error_type` = [`FunctionError::kind`], so the kind is what
//! CloudWatch and a dead-lettered record show.

use lambda_runtime::Diagnostic;
use trainyard_app::AppError;

use crate::config::ConfigError;

/// Why an invocation (or a cold start) failed.
#[derive(Debug, thiserror::Error)]
pub enum FunctionError {
    /// The environment is misconfigured (cold start only).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A use-case failed; for the functions' use-cases this is the store (or a race lost too
    /// often), so a retry may succeed.
    #[error("use-case failed: {0}")]
    App(#[from] AppError),
    /// The event could not be read at all (the runtime normally rejects these first).
    #[error("unreadable event: {0}")]
    Event(String),
    /// The invocation's deadline came before the work was done; a retry does it.
    #[error("out of time: the invocation's deadline is near; retried")]
    OutOfTime,
}

impl FunctionError {
    /// A stable name for the kind of failure: `Diagnostic::error_type`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Config(_) => "Trainyard.ConfigError",
            Self::App(AppError::Internal(_)) => "Trainyard.StoreUnavailable",
            Self::App(_) => "Trainyard.Rejected",
            Self::Event(_) => "Trainyard.InvalidEvent",
            Self::OutOfTime => "Trainyard.OutOfTime",
        }
    }
}

impl From<FunctionError> for Diagnostic {
    fn from(error: FunctionError) -> Self {
        Diagnostic {
            error_type: error.kind().to_owned(),
            error_message: error.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use trainyard_app::ports::StoreError;

    use super::*;

    #[test]
    fn each_kind_of_failure_has_its_own_error_type() {
        let cases = [
            (
                FunctionError::Config(ConfigError {
                    problems: vec!["TRAINYARD_TABLE is not set".into()],
                }),
                "Trainyard.ConfigError",
                "TRAINYARD_TABLE is not set",
            ),
            (
                FunctionError::App(AppError::Internal(StoreError::Unavailable {
                    message: "throttled".into(),
                    source: None,
                })),
                "Trainyard.StoreUnavailable",
                "throttled",
            ),
            (
                FunctionError::App(AppError::Invalid("bad lease ttl".into())),
                "Trainyard.Rejected",
                "bad lease ttl",
            ),
            (
                FunctionError::Event("not JSON".into()),
                "Trainyard.InvalidEvent",
                "not JSON",
            ),
            (FunctionError::OutOfTime, "Trainyard.OutOfTime", "deadline"),
        ];
        for (error, kind, text) in cases {
            let diagnostic = Diagnostic::from(error);
            assert_eq!(diagnostic.error_type, kind);
            assert!(
                diagnostic.error_message.contains(text),
                "{}",
                diagnostic.error_message
            );
        }
    }
}
