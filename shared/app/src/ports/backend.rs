//! The training backend port: SageMaker as the use-cases need it, and its classified errors.

use std::future::Future;

pub use trainyard_domain::training::{TrainingJobState, TrainingStatus};

/// Why the training backend refused or failed a call, classified once by the adapter.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// `ResourceInUse`: a training job with this name exists (an earlier launch got through).
    #[error("already exists: {0}")]
    AlreadyExists(String),
    /// `ResourceLimitExceeded`: no account quota for the instances now; retry later.
    #[error("ResourceLimitExceeded: {0}")]
    Capacity(String),
    /// The request is invalid (`ValidationException` and the like); retrying will not help.
    #[error("{code}: {message}")]
    Rejected {
        /// SageMaker's error code.
        code: String,
        /// Its message.
        message: String,
    },
    /// No such training job.
    #[error("not found: {0}")]
    NotFound(String),
    /// Throttled or unavailable; retry with backoff.
    #[error("unavailable: {0}")]
    Unavailable(String),
}

impl BackendError {
    /// A SageMaker error answer by its code: `ResourceInUse`, `ResourceLimitExceeded` and
    /// `ResourceNotFound` have their own kinds, any other code is a rejection. (Throttling and
    /// failures without an answer are the cloud adapter's to tell apart; the emulator has none.)
    pub fn from_sagemaker(code: &str, message: String) -> Self {
        match code {
            "ResourceInUse" => Self::AlreadyExists(message),
            "ResourceLimitExceeded" => Self::Capacity(message),
            "ResourceNotFound" => Self::NotFound(message),
            _ => Self::Rejected {
                code: code.to_owned(),
                message,
            },
        }
    }

    /// A response SageMaker should never give: `operation`'s answer lacks a usable `member`.
    pub fn malformed(operation: &str, member: &str) -> Self {
        Self::Rejected {
            code: "InternalFailure".into(),
            message: format!("SageMaker's {operation} response has no usable {member}"),
        }
    }
}

/// The state in a `DescribeTrainingJob` document (the emulator's, or an event's `detail`), or
/// [`BackendError::malformed`] when it has none: what every adapter over the emulator answers.
pub fn described(detail: &serde_json::Value) -> Result<TrainingJobState, BackendError> {
    TrainingJobState::from_sagemaker(detail).ok_or_else(|| {
        BackendError::malformed(
            "DescribeTrainingJob",
            "TrainingJobName or TrainingJobStatus",
        )
    })
}

/// SageMaker, as the use-cases need it. Production: `aws-sdk-sagemaker`; local mode and the
/// simulator: the emulator.
pub trait TrainingBackend: Send + Sync + 'static {
    /// `CreateTrainingJob` with `request` (whose `TrainingJobName` is the attempt's name);
    /// returns the training job's ARN.
    fn create_training_job(
        &self,
        request: serde_json::Value,
    ) -> impl Future<Output = Result<String, BackendError>> + Send;

    /// `DescribeTrainingJob`.
    fn describe_training_job(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<TrainingJobState, BackendError>> + Send;

    /// `StopTrainingJob`. Stopping a job that is already stopping or finished is not an error.
    fn stop_training_job(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// The newest complete checkpoint under `s3_uri` (a request's `CheckpointConfig.S3Uri`), as
    /// observed in storage rather than as the job reports it; `None` when there is none. A
    /// backend that cannot observe checkpoints sees none (this default): the planner then costs
    /// a preemption as if the job published nothing.
    fn latest_checkpoint(
        &self,
        s3_uri: &str,
    ) -> impl Future<Output = Result<Option<ObservedCheckpoint>, BackendError>> + Send {
        let _ = s3_uri;
        std::future::ready(Ok(None))
    }
}

/// A checkpoint seen under a `CheckpointConfig.S3Uri`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObservedCheckpoint {
    /// When the newest complete checkpoint landed (epoch ms).
    pub at_ms: i64,
    /// How long before it the previous one landed, if there is one.
    pub interval_ms: Option<i64>,
}
