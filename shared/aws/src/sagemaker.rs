//! The SageMaker training backend: [`TrainingBackend`] over `aws-sdk-sagemaker` (create,
//! describe, stop), plus [`SageMakerBackend::list_training_jobs`] for reconciliation.
//!
//! # The request
//!
//! Users submit `CreateTrainingJob` as PascalCase JSON (Batch's `serviceRequestPayload`), which is
//! also SageMaker's wire format (`awsJson1_1`). The launch sends that JSON as the request body
//! unchanged, through the SDK's own operation (signing, endpoint, retries and errors stay the
//! SDK's): every member SageMaker accepts is carried, including members newer than the SDK's
//! types (`ResourceConfig.InstancePreferences`, `ServerlessJobConfig`, ...). What SageMaker would
//! refuse was refused at submit, by member, against SageMaker's model
//! (`trainyard_domain::payload::shape`).
//!
//! # Errors
//!
//! [`classify`] is the one place SageMaker's errors become [`BackendError`]s:
//!
//! | SageMaker says                                          | Backend error   |
//! |---------------------------------------------------------|-----------------|
//! | `ResourceInUse`                                         | `AlreadyExists` |
//! | `ResourceLimitExceeded`                                 | `Capacity`      |
//! | `ResourceNotFound`                                      | `NotFound`      |
//! | `ValidationException` "Requested resource not found" on describe/stop | `NotFound` |
//! | throttling codes, HTTP 429 or 5xx, timeouts, no connection | `Unavailable` |
//! | anything else (`ValidationException`, access denied, …) | `Rejected`      |
//!
//! Throttling only reaches [`classify`] after the SDK's standard retry strategy has given up:
//! with `BehaviorVersion::latest()` that is 3 attempts in all (the first call and 2 retries),
//! with exponential backoff and full jitter (base 1 s, capped at 20 s), on throttling errors,
//! 5xx and transient connection errors (the tests count the attempts against a stand-in that
//! always throttles). The scheduler then retries on its own next cycle.
//!
//! # Endpoint
//!
//! [`SageMakerBackend::from_env`] loads the standard AWS configuration, so
//! `AWS_ENDPOINT_URL_SAGEMAKER` (or `AWS_ENDPOINT_URL`) points the same code at the project's
//! emulator; tests build the client explicitly instead.

use std::sync::{Arc, Mutex};

use aws_sdk_sagemaker::Client;
use aws_sdk_sagemaker::config::http::HttpResponse;
use aws_sdk_sagemaker::config::interceptors::AfterDeserializationInterceptorContextRef;
use aws_sdk_sagemaker::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_sagemaker::error::{BoxError, ProvideErrorMetadata, SdkError};
use aws_sdk_sagemaker::operation::create_training_job::{
    CreateTrainingJobError, CreateTrainingJobOutput,
};
use aws_sdk_sagemaker::operation::describe_training_job::DescribeTrainingJobOutput;
use aws_sdk_sagemaker::types::{SortBy, SortOrder, TrainingJobStatus};
use aws_smithy_types::body::SdkBody;
use serde_json::Value;
use trainyard_app::ports::{
    BackendError, ObservedCheckpoint, TrainingBackend, TrainingJobState, TrainingStatus,
};

use crate::checkpoints::S3Checkpoints;

/// SageMaker's API, as a [`TrainingBackend`].
#[derive(Debug, Clone)]
pub struct SageMakerBackend {
    client: Client,
    checkpoints: Option<S3Checkpoints>,
}

impl SageMakerBackend {
    /// A backend over `client` (built once per process and shared), that observes no
    /// checkpoints until given [`with_checkpoints`](Self::with_checkpoints).
    pub fn new(client: Client) -> Self {
        Self {
            client,
            checkpoints: None,
        }
    }

    /// The same backend, observing checkpoints in S3 with `checkpoints`.
    pub fn with_checkpoints(self, checkpoints: S3Checkpoints) -> Self {
        Self {
            checkpoints: Some(checkpoints),
            ..self
        }
    }

    /// A backend over the standard AWS configuration: region, credentials and
    /// `AWS_ENDPOINT_URL_SAGEMAKER` from the environment.
    pub async fn from_env() -> Self {
        let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
        Self::new(Client::new(&config))
    }

    /// The SDK client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// `ListTrainingJobs`, newest first: jobs whose name contains `name_contains` (attempt
    /// names share their job's prefix) and, when given, in `status`; at most `limit`, itself
    /// capped at [`MAX_LISTED`]. For reconciling missed state-change events. Summaries carry no
    /// `FailureReason`, so `failure_reason` is always `None`: describe a failed job for it.
    pub async fn list_training_jobs(
        &self,
        name_contains: Option<&str>,
        status: Option<TrainingStatus>,
        limit: usize,
    ) -> Result<Vec<TrainingJobState>, BackendError> {
        let limit = limit.min(MAX_LISTED);
        let mut jobs = Vec::new();
        if limit == 0 {
            return Ok(jobs);
        }
        let page_size = i32::try_from(limit.min(LIST_PAGE_SIZE)).unwrap_or(1);
        let mut items = self
            .client
            .list_training_jobs()
            .set_name_contains(name_contains.map(str::to_owned))
            .set_status_equals(status.map(|s| TrainingJobStatus::from(status_name(s))))
            .sort_by(SortBy::CreationTime)
            .sort_order(SortOrder::Descending)
            .into_paginator()
            .page_size(page_size)
            .items()
            .send();
        while jobs.len() < limit
            && let Some(item) = items.next().await
        {
            let summary = item.map_err(|e| classify(Call::List, failure(&e)))?;
            let status = summary
                .training_job_status()
                .and_then(|s| TrainingStatus::parse(s.as_str()))
                .ok_or_else(|| BackendError::malformed("ListTrainingJobs", "TrainingJobStatus"))?;
            jobs.push(TrainingJobState {
                name: summary
                    .training_job_name()
                    .ok_or_else(|| BackendError::malformed("ListTrainingJobs", "TrainingJobName"))?
                    .to_owned(),
                arn: summary.training_job_arn().unwrap_or_default().to_owned(),
                status,
                secondary: summary
                    .secondary_status()
                    .map(|s| s.as_str().to_owned())
                    .unwrap_or_default(),
                failure_reason: None,
                selected_instance_type: None,
            });
        }
        Ok(jobs)
    }
}

/// The most training jobs one [`SageMakerBackend::list_training_jobs`] returns: ten full pages,
/// so a reconciliation pass is bounded in calls and memory.
pub const MAX_LISTED: usize = 1_000;

/// `ListTrainingJobs.MaxResults`: SageMaker's largest page.
const LIST_PAGE_SIZE: usize = 100;

/// SageMaker's spelling of a status.
fn status_name(status: TrainingStatus) -> &'static str {
    match status {
        TrainingStatus::InProgress => "InProgress",
        TrainingStatus::Completed => "Completed",
        TrainingStatus::Failed => "Failed",
        TrainingStatus::Stopping => "Stopping",
        TrainingStatus::Stopped => "Stopped",
    }
}

/// Which call failed: "not found" means different things to a create and to a describe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// `CreateTrainingJob`.
    Create,
    /// `DescribeTrainingJob`.
    Describe,
    /// `StopTrainingJob`.
    Stop,
    /// `ListTrainingJobs`.
    List,
    /// S3 `ListObjectsV2` of a checkpoint prefix.
    ListCheckpoints,
}

/// What [`classify`] needs to know about a failed call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Failure {
    /// The service's error code, when it answered with one.
    pub code: Option<String>,
    /// Its message (or, without an answer, a description of what went wrong).
    pub message: String,
    /// The HTTP status, when there was a response.
    pub status: Option<u16>,
    /// The request never got an answer (timeout, connection refused or reset).
    pub no_answer: bool,
}

/// Error codes AWS uses for throttling and transient service trouble.
const TRANSIENT_CODES: &[&str] = &[
    "ThrottlingException",
    "Throttling",
    "ThrottledException",
    "TooManyRequestsException",
    "RequestLimitExceeded",
    "ProvisionedThroughputExceededException",
    "ServiceUnavailable",
    "InternalFailure",
    "InternalServerError",
];

/// SageMaker reports an unknown training job as a `ValidationException` with this message.
const NOT_FOUND_MESSAGE: &str = "Requested resource not found";

/// Classifies one failed SageMaker call, once, for the use-cases.
pub fn classify(call: Call, failure: Failure) -> BackendError {
    let Failure {
        code,
        message,
        status,
        no_answer,
    } = failure;
    let code = code.unwrap_or_default();
    let transient_status = status.is_some_and(|s| s == 429 || s >= 500);
    match code.as_str() {
        "ResourceInUse" => BackendError::AlreadyExists(message),
        "ResourceLimitExceeded" => BackendError::Capacity(message),
        "ResourceNotFound" => BackendError::NotFound(message),
        c if TRANSIENT_CODES.contains(&c) || transient_status || no_answer => {
            BackendError::Unavailable(if c.is_empty() {
                message
            } else {
                format!("{c}: {message}")
            })
        }
        "ValidationException" if call != Call::Create && message.starts_with(NOT_FOUND_MESSAGE) => {
            BackendError::NotFound(message)
        }
        "" => BackendError::Rejected {
            code: "UnknownError".into(),
            message,
        },
        _ => BackendError::Rejected { code, message },
    }
}

/// Reads what [`classify`] needs from an SDK error.
pub(crate) fn failure<E: ProvideErrorMetadata + std::error::Error + 'static>(
    error: &SdkError<E>,
) -> Failure {
    let status = error.raw_response().map(|r| r.status().as_u16());
    let described = aws_sdk_sagemaker::error::DisplayErrorContext(error).to_string();
    match error {
        SdkError::ServiceError(_) => Failure {
            code: error.code().map(str::to_owned),
            message: error.message().map_or(described, str::to_owned),
            status,
            no_answer: false,
        },
        // No usable answer: the request timed out, could not connect, or the response could
        // not be read. Transient as far as we can tell; a construction failure (missing
        // credentials, say) is an operator's problem, and failing the user's job for it would
        // be wrong, so it waits too.
        SdkError::TimeoutError(_)
        | SdkError::DispatchFailure(_)
        | SdkError::ResponseError(_)
        | SdkError::ConstructionFailure(_) => Failure {
            code: None,
            message: described,
            status,
            no_answer: true,
        },
        // `SdkError` is non-exhaustive; a future variant is treated like "no answer".
        _ => Failure {
            code: error.code().map(str::to_owned),
            message: described,
            status,
            no_answer: true,
        },
    }
}

impl TrainingBackend for SageMakerBackend {
    async fn latest_checkpoint(
        &self,
        s3_uri: &str,
    ) -> Result<Option<ObservedCheckpoint>, BackendError> {
        match &self.checkpoints {
            Some(checkpoints) => checkpoints.latest(s3_uri).await,
            None => Ok(None),
        }
    }

    async fn create_training_job(&self, request: Value) -> Result<String, BackendError> {
        let output = send_create_training_job(&self.client, &request)
            .await
            .map_err(|e| classify(Call::Create, failure(&e)))?;
        output
            .training_job_arn()
            .map(str::to_owned)
            .ok_or_else(|| BackendError::malformed("CreateTrainingJob", "TrainingJobArn"))
    }

    async fn describe_training_job(&self, name: &str) -> Result<TrainingJobState, BackendError> {
        let selected = SelectedInstanceType::default();
        let output = self
            .client
            .describe_training_job()
            .training_job_name(name)
            .customize()
            .interceptor(selected.clone())
            .send()
            .await
            .map_err(|e| classify(Call::Describe, failure(&e)))?;
        let mut state = training_job_state(&output)?;
        state.selected_instance_type = selected.take();
        Ok(state)
    }

    async fn stop_training_job(&self, name: &str) -> Result<(), BackendError> {
        let stopped = self
            .client
            .stop_training_job()
            .training_job_name(name)
            .send()
            .await
            .map_err(|e| classify(Call::Stop, failure(&e)));
        match stopped {
            Ok(_) => Ok(()),
            // SageMaker refuses to stop a job that is stopping or finished with a validation
            // error whose wording is not part of the API; asking for the status instead tells
            // "already on its way down" (fine, by the port's contract) from a real refusal.
            Err(refused @ BackendError::Rejected { .. }) => {
                match self.describe_training_job(name).await {
                    Ok(state)
                        if state.status == TrainingStatus::Stopping
                            || state.status.is_terminal() =>
                    {
                        Ok(())
                    }
                    _ => Err(refused),
                }
            }
            Err(other) => Err(other),
        }
    }
}

/// The members Trainyard needs from a `DescribeTrainingJob` response.
pub fn training_job_state(
    output: &DescribeTrainingJobOutput,
) -> Result<TrainingJobState, BackendError> {
    let status = output
        .training_job_status()
        .and_then(|s| TrainingStatus::parse(s.as_str()))
        .ok_or_else(|| BackendError::malformed("DescribeTrainingJob", "TrainingJobStatus"))?;
    Ok(TrainingJobState {
        name: output
            .training_job_name()
            .ok_or_else(|| BackendError::malformed("DescribeTrainingJob", "TrainingJobName"))?
            .to_owned(),
        arn: output.training_job_arn().unwrap_or_default().to_owned(),
        status,
        secondary: output
            .secondary_status()
            .map(|s| s.as_str().to_owned())
            .unwrap_or_default(),
        failure_reason: output.failure_reason().map(str::to_owned),
        // Not in the SDK's typed output yet: read from the response by [`SelectedInstanceType`].
        selected_instance_type: None,
    })
}

/// Reads `ResourceConfig.SelectedInstanceType` (the type SageMaker launched, of a request with
/// `InstancePreferences`) from one `DescribeTrainingJob` response's own JSON: the SDK's typed
/// output (aws-sdk-sagemaker 1.181) does not carry the member yet, and without it a job whose
/// state-change events were lost would hold every preference's capacity until it ended.
#[derive(Debug, Clone, Default)]
struct SelectedInstanceType(Arc<Mutex<Option<String>>>);

impl SelectedInstanceType {
    /// What the last response read said, if anything.
    fn take(&self) -> Option<String> {
        self.0.lock().ok().and_then(|mut slot| slot.take())
    }
}

impl Intercept for SelectedInstanceType {
    fn name(&self) -> &'static str {
        "trainyard SelectedInstanceType"
    }

    fn read_after_deserialization(
        &self,
        context: &AfterDeserializationInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        // A response that cannot be read says nothing: the attempt keeps what it holds.
        let selected = context
            .response()
            .body()
            .bytes()
            .and_then(selected_instance_type);
        if let Ok(mut slot) = self.0.lock() {
            *slot = selected;
        }
        Ok(())
    }
}

/// `ResourceConfig.SelectedInstanceType` of a `DescribeTrainingJob` response body.
fn selected_instance_type(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Described {
        #[serde(rename = "ResourceConfig")]
        resource_config: Option<Resources>,
    }
    #[derive(serde::Deserialize)]
    struct Resources {
        #[serde(rename = "SelectedInstanceType")]
        selected_instance_type: Option<String>,
    }
    serde_json::from_slice::<Described>(body)
        .ok()?
        .resource_config?
        .selected_instance_type
}

// ---------------------------------------------------------------------------------------------
// The request.

/// Sends `request`, the `CreateTrainingJob` JSON, as the operation's body, byte for byte: the SDK
/// builds, signs and sends the call (credentials, endpoint, retries, error parsing), and only the
/// body it would have serialized from its typed input is replaced. Members the SDK's types do not
/// know (SageMaker adds them faster than SDK releases) reach SageMaker unchanged; the submit-time
/// check against SageMaker's own model (`trainyard_domain::payload::shape`) already refused what
/// SageMaker would not take.
async fn send_create_training_job(
    client: &Client,
    request: &Value,
) -> Result<CreateTrainingJobOutput, SdkError<CreateTrainingJobError, HttpResponse>> {
    let body = serde_json::to_vec(request).unwrap_or_default();
    client
        .create_training_job()
        .customize()
        .mutate_request(move |http| {
            http.headers_mut()
                .insert("content-length", body.len().to_string());
            *http.body_mut() = SdkBody::from(body.clone());
        })
        .send()
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(code: &str, message: &str, status: u16) -> Failure {
        Failure {
            code: Some(code.into()),
            message: message.into(),
            status: Some(status),
            no_answer: false,
        }
    }

    #[test]
    fn each_sagemaker_error_is_classified_once_into_the_backend_vocabulary() {
        let rejected = |code: &str, message: &str| BackendError::Rejected {
            code: code.into(),
            message: message.into(),
        };
        let cases = [
            (
                "a duplicate name means an earlier launch got through",
                Call::Create,
                service("ResourceInUse", "exists", 400),
                BackendError::AlreadyExists("exists".into()),
            ),
            (
                "an account quota is capacity, to retry later",
                Call::Create,
                service("ResourceLimitExceeded", "quota", 400),
                BackendError::Capacity("quota".into()),
            ),
            (
                "throttling that outlasted the SDK's retries is unavailable",
                Call::Describe,
                service("ThrottlingException", "Rate exceeded", 400),
                BackendError::Unavailable("ThrottlingException: Rate exceeded".into()),
            ),
            (
                "a 5xx with an unknown code is unavailable",
                Call::Create,
                service("Whatever", "boom", 503),
                BackendError::Unavailable("Whatever: boom".into()),
            ),
            (
                "a 429 is unavailable",
                Call::Stop,
                service("SlowDown", "slow", 429),
                BackendError::Unavailable("SlowDown: slow".into()),
            ),
            (
                "no answer at all is unavailable",
                Call::Create,
                Failure {
                    message: "connection refused".into(),
                    no_answer: true,
                    ..Failure::default()
                },
                BackendError::Unavailable("connection refused".into()),
            ),
            (
                "a validation error rejects the job with SageMaker's message",
                Call::Create,
                service("ValidationException", "bad image", 400),
                rejected("ValidationException", "bad image"),
            ),
            (
                "SageMaker's not-found validation error on describe is not found",
                Call::Describe,
                service("ValidationException", "Requested resource not found.", 400),
                BackendError::NotFound("Requested resource not found.".into()),
            ),
            (
                "and on stop too",
                Call::Stop,
                service("ValidationException", "Requested resource not found.", 400),
                BackendError::NotFound("Requested resource not found.".into()),
            ),
            (
                "but on create it is a plain rejection (a missing role, say)",
                Call::Create,
                service("ValidationException", "Requested resource not found.", 400),
                rejected("ValidationException", "Requested resource not found."),
            ),
            (
                "the emulator's ResourceNotFound is not found",
                Call::Describe,
                service("ResourceNotFound", "nope", 400),
                BackendError::NotFound("nope".into()),
            ),
            (
                "access denied is a rejection naming its code",
                Call::Create,
                service("AccessDeniedException", "no", 400),
                rejected("AccessDeniedException", "no"),
            ),
        ];
        for (story, call, failure, expected) in cases {
            assert_eq!(classify(call, failure), expected, "{story}");
        }
    }
}
