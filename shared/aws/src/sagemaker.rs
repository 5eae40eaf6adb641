//! The SageMaker training backend: [`TrainingBackend`] over `aws-sdk-sagemaker` (create,
//! describe, stop), plus [`SageMakerBackend::list_training_jobs`] for reconciliation.
//!
//! # Mapping the request
//!
//! Users submit `CreateTrainingJob` as PascalCase JSON (Batch's `serviceRequestPayload`). The
//! SDK's input types have no serde support, so [`create_training_job_input`] reads that JSON
//! member by member onto the SDK's builders. Every JSON object is read through a `Members`
//! cursor that remembers which members it consumed; when the object is done, any member left
//! over is an error ([`RequestError::Unsupported`], naming its full path, e.g.
//! `ResourceConfig.InstanceGroups[0].Foo`). So a member we do not map fails the launch with
//! `Rejected` instead of being silently dropped, and the scheduler reports why. A member of the
//! wrong JSON type is [`RequestError::WrongType`], also `Rejected`. Enumerations are passed as
//! strings (`From<&str>`), so a value newer than this SDK still reaches SageMaker, whose own
//! validation has the last word.
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

use std::collections::{BTreeSet, HashMap};

use aws_sdk_sagemaker::Client;
use aws_sdk_sagemaker::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sagemaker::operation::create_training_job::builders::CreateTrainingJobInputBuilder;
use aws_sdk_sagemaker::operation::describe_training_job::DescribeTrainingJobOutput;
use aws_sdk_sagemaker::types::{
    AlgorithmSpecification, Channel, CheckpointConfig, CollectionConfiguration, DataSource,
    DebugHookConfig, DebugRuleConfiguration, ExperimentConfig, FileSystemDataSource,
    InfraCheckConfig, InstanceGroup, MetricDefinition, OutputDataConfig, ProfilerConfig,
    ProfilerRuleConfiguration, RemoteDebugConfig, ResourceConfig, RetryStrategy, S3DataSource,
    SessionChainingConfig, ShuffleConfig, SortBy, SortOrder, StoppingCondition, Tag,
    TensorBoardOutputConfig, TrainingImageConfig, TrainingJobStatus, TrainingRepositoryAuthConfig,
    VpcConfig,
};
use serde_json::{Map, Value};
use trainyard_app::ports::{BackendError, TrainingBackend, TrainingJobState, TrainingStatus};

/// SageMaker's API, as a [`TrainingBackend`].
#[derive(Debug, Clone)]
pub struct SageMakerBackend {
    client: Client,
}

impl SageMakerBackend {
    /// A backend over `client` (built once per process and shared).
    pub fn new(client: Client) -> Self {
        Self { client }
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
fn failure<E: ProvideErrorMetadata + std::error::Error + 'static>(error: &SdkError<E>) -> Failure {
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
    async fn create_training_job(&self, request: Value) -> Result<String, BackendError> {
        let input = create_training_job_input(&request)?;
        let output = input
            .send_with(&self.client)
            .await
            .map_err(|e| classify(Call::Create, failure(&e)))?;
        output
            .training_job_arn()
            .map(str::to_owned)
            .ok_or_else(|| BackendError::malformed("CreateTrainingJob", "TrainingJobArn"))
    }

    async fn describe_training_job(&self, name: &str) -> Result<TrainingJobState, BackendError> {
        let output = self
            .client
            .describe_training_job()
            .training_job_name(name)
            .send()
            .await
            .map_err(|e| classify(Call::Describe, failure(&e)))?;
        training_job_state(&output)
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
    })
}

// ---------------------------------------------------------------------------------------------
// The request.

/// Why a `CreateTrainingJob` request could not be put on the SDK's builder.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// The request is not a JSON object.
    #[error("the CreateTrainingJob request must be a JSON object")]
    NotObject,
    /// A member this backend does not map (unknown to it, or newer than it).
    #[error(
        "CreateTrainingJob member {member} is not supported by Trainyard's SageMaker backend; remove it or ask for it to be mapped"
    )]
    Unsupported {
        /// Its path, e.g. `ResourceConfig.InstanceGroups[0].Foo`.
        member: String,
    },
    /// A member has the wrong JSON type.
    #[error("CreateTrainingJob member {member} must be {expected}")]
    WrongType {
        /// Its path.
        member: String,
        /// What it should be.
        expected: &'static str,
    },
}

impl From<RequestError> for BackendError {
    fn from(error: RequestError) -> Self {
        let code = match error {
            RequestError::Unsupported { .. } => "UnsupportedMember",
            RequestError::NotObject | RequestError::WrongType { .. } => "SerializationException",
        };
        BackendError::Rejected {
            code: code.into(),
            message: error.to_string(),
        }
    }
}

type Read<T> = Result<Option<T>, RequestError>;

/// A JSON object read member by member. [`finish`](Self::finish) refuses whatever was not read,
/// which is what makes "every member is mapped or refused" hold by construction.
struct Members<'a> {
    /// Path of this object from the request's root, with a trailing dot (empty at the root).
    prefix: String,
    map: &'a Map<String, Value>,
    read: BTreeSet<&'static str>,
}

impl<'a> Members<'a> {
    fn new(prefix: String, map: &'a Map<String, Value>) -> Self {
        Self {
            prefix,
            map,
            read: BTreeSet::new(),
        }
    }

    fn path(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    fn wrong(&self, key: &str, expected: &'static str) -> RequestError {
        RequestError::WrongType {
            member: self.path(key),
            expected,
        }
    }

    /// The member's value, marking it read. JSON `null` counts as absent, as in botocore.
    fn get(&mut self, key: &'static str) -> Option<&'a Value> {
        self.read.insert(key);
        self.map.get(key).filter(|v| !v.is_null())
    }

    fn string(&mut self, key: &'static str) -> Read<String> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(self.wrong(key, "a string")),
        }
    }

    fn long(&mut self, key: &'static str) -> Read<i64> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_i64()
                .map(Some)
                .ok_or_else(|| self.wrong(key, "an integer")),
        }
    }

    fn int(&mut self, key: &'static str) -> Read<i32> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_i64()
                .and_then(|n| i32::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| self.wrong(key, "a 32-bit integer")),
        }
    }

    fn boolean(&mut self, key: &'static str) -> Read<bool> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => Err(self.wrong(key, "a boolean")),
        }
    }

    /// A SageMaker enumeration, passed through as its string.
    fn enumeration<T: for<'s> From<&'s str>>(&mut self, key: &'static str) -> Read<T> {
        Ok(self.string(key)?.map(|s| T::from(s.as_str())))
    }

    fn strings(&mut self, key: &'static str) -> Read<Vec<String>> {
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        let items = value
            .as_array()
            .ok_or_else(|| self.wrong(key, "a list of strings"))?;
        items
            .iter()
            .map(|item| {
                item.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| self.wrong(key, "a list of strings"))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    // The SDK's map members are `HashMap`s; their order never leaves this function.
    fn string_map(&mut self, key: &'static str) -> Read<HashMap<String, String>> {
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        let map = value
            .as_object()
            .ok_or_else(|| self.wrong(key, "a map of strings"))?;
        map.iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                _ => Err(RequestError::WrongType {
                    member: format!("{}.{k}", self.path(key)),
                    expected: "a string",
                }),
            })
            .collect::<Result<HashMap<_, _>, _>>()
            .map(Some)
    }

    /// A nested structure, read by `read` and then checked for leftovers.
    fn object<T>(
        &mut self,
        key: &'static str,
        read: impl FnOnce(&mut Members<'a>) -> Result<T, RequestError>,
    ) -> Read<T> {
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        let map = value
            .as_object()
            .ok_or_else(|| self.wrong(key, "an object"))?;
        let mut members = Members::new(format!("{}.", self.path(key)), map);
        let built = read(&mut members)?;
        members.finish()?;
        Ok(Some(built))
    }

    /// A list of structures, each read by `read` and checked for leftovers.
    fn list<T>(
        &mut self,
        key: &'static str,
        mut read: impl FnMut(&mut Members<'a>) -> Result<T, RequestError>,
    ) -> Read<Vec<T>> {
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        let items = value
            .as_array()
            .ok_or_else(|| self.wrong(key, "a list of objects"))?;
        let mut built = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let member = format!("{}[{i}]", self.path(key));
            let map = item.as_object().ok_or(RequestError::WrongType {
                member: member.clone(),
                expected: "an object",
            })?;
            let mut members = Members::new(format!("{member}."), map);
            built.push(read(&mut members)?);
            members.finish()?;
        }
        Ok(Some(built))
    }

    /// Refuses the first member (in name order) that was not read.
    fn finish(self) -> Result<(), RequestError> {
        match self
            .map
            .iter()
            .find(|(k, v)| !v.is_null() && !self.read.contains(k.as_str()))
        {
            Some((key, _)) => Err(RequestError::Unsupported {
                member: self.path(key),
            }),
            None => Ok(()),
        }
    }
}

/// Puts a PascalCase `CreateTrainingJob` request on the SDK's builder, refusing any member it
/// does not map (see the module docs). Required members are left for SageMaker to insist on, so
/// its own validation message reaches the user.
pub fn create_training_job_input(
    request: &Value,
) -> Result<CreateTrainingJobInputBuilder, RequestError> {
    let map = request.as_object().ok_or(RequestError::NotObject)?;
    let mut m = Members::new(String::new(), map);
    let input = CreateTrainingJobInputBuilder::default()
        .set_training_job_name(m.string("TrainingJobName")?)
        .set_hyper_parameters(m.string_map("HyperParameters")?)
        .set_algorithm_specification(m.object("AlgorithmSpecification", algorithm)?)
        .set_role_arn(m.string("RoleArn")?)
        .set_input_data_config(m.list("InputDataConfig", channel)?)
        .set_output_data_config(m.object("OutputDataConfig", |o| {
            Ok(OutputDataConfig::builder()
                .set_kms_key_id(o.string("KmsKeyId")?)
                .set_s3_output_path(o.string("S3OutputPath")?)
                .set_compression_type(o.enumeration("CompressionType")?)
                .build())
        })?)
        .set_resource_config(m.object("ResourceConfig", resources)?)
        .set_vpc_config(m.object("VpcConfig", |v| {
            Ok(VpcConfig::builder()
                .set_security_group_ids(v.strings("SecurityGroupIds")?)
                .set_subnets(v.strings("Subnets")?)
                .build())
        })?)
        .set_stopping_condition(m.object("StoppingCondition", |s| {
            Ok(StoppingCondition::builder()
                .set_max_runtime_in_seconds(s.int("MaxRuntimeInSeconds")?)
                .set_max_wait_time_in_seconds(s.int("MaxWaitTimeInSeconds")?)
                .set_max_pending_time_in_seconds(s.int("MaxPendingTimeInSeconds")?)
                .build())
        })?)
        .set_tags(m.list("Tags", |t| {
            Ok(Tag::builder()
                .set_key(t.string("Key")?)
                .set_value(t.string("Value")?)
                .build())
        })?)
        .set_enable_network_isolation(m.boolean("EnableNetworkIsolation")?)
        .set_enable_inter_container_traffic_encryption(
            m.boolean("EnableInterContainerTrafficEncryption")?,
        )
        .set_enable_managed_spot_training(m.boolean("EnableManagedSpotTraining")?)
        .set_checkpoint_config(m.object("CheckpointConfig", |c| {
            Ok(CheckpointConfig::builder()
                .set_s3_uri(c.string("S3Uri")?)
                .set_local_path(c.string("LocalPath")?)
                .build())
        })?)
        .set_debug_hook_config(m.object("DebugHookConfig", debug_hook)?)
        .set_debug_rule_configurations(m.list("DebugRuleConfigurations", debug_rule)?)
        .set_tensor_board_output_config(m.object("TensorBoardOutputConfig", |t| {
            Ok(TensorBoardOutputConfig::builder()
                .set_local_path(t.string("LocalPath")?)
                .set_s3_output_path(t.string("S3OutputPath")?)
                .build())
        })?)
        .set_experiment_config(m.object("ExperimentConfig", |e| {
            Ok(ExperimentConfig::builder()
                .set_experiment_name(e.string("ExperimentName")?)
                .set_trial_name(e.string("TrialName")?)
                .set_trial_component_display_name(e.string("TrialComponentDisplayName")?)
                .set_run_name(e.string("RunName")?)
                .build())
        })?)
        .set_profiler_config(m.object("ProfilerConfig", |p| {
            Ok(ProfilerConfig::builder()
                .set_s3_output_path(p.string("S3OutputPath")?)
                .set_profiling_interval_in_milliseconds(p.long("ProfilingIntervalInMilliseconds")?)
                .set_profiling_parameters(p.string_map("ProfilingParameters")?)
                .set_disable_profiler(p.boolean("DisableProfiler")?)
                .build())
        })?)
        .set_profiler_rule_configurations(m.list("ProfilerRuleConfigurations", profiler_rule)?)
        .set_environment(m.string_map("Environment")?)
        .set_retry_strategy(m.object("RetryStrategy", |r| {
            Ok(RetryStrategy::builder()
                .set_maximum_retry_attempts(r.int("MaximumRetryAttempts")?)
                .build())
        })?)
        .set_remote_debug_config(m.object("RemoteDebugConfig", |r| {
            Ok(RemoteDebugConfig::builder()
                .set_enable_remote_debug(r.boolean("EnableRemoteDebug")?)
                .build())
        })?)
        .set_infra_check_config(m.object("InfraCheckConfig", |i| {
            Ok(InfraCheckConfig::builder()
                .set_enable_infra_check(i.boolean("EnableInfraCheck")?)
                .build())
        })?)
        .set_session_chaining_config(m.object("SessionChainingConfig", |s| {
            Ok(SessionChainingConfig::builder()
                .set_enable_session_tag_chaining(s.boolean("EnableSessionTagChaining")?)
                .build())
        })?);
    m.finish()?;
    Ok(input)
}

fn algorithm(a: &mut Members<'_>) -> Result<AlgorithmSpecification, RequestError> {
    Ok(AlgorithmSpecification::builder()
        .set_training_image(a.string("TrainingImage")?)
        .set_algorithm_name(a.string("AlgorithmName")?)
        .set_training_input_mode(a.enumeration("TrainingInputMode")?)
        .set_metric_definitions(a.list("MetricDefinitions", |d| {
            Ok(MetricDefinition::builder()
                .set_name(d.string("Name")?)
                .set_regex(d.string("Regex")?)
                .build())
        })?)
        .set_enable_sage_maker_metrics_time_series(a.boolean("EnableSageMakerMetricsTimeSeries")?)
        .set_container_entrypoint(a.strings("ContainerEntrypoint")?)
        .set_container_arguments(a.strings("ContainerArguments")?)
        .set_training_image_config(a.object("TrainingImageConfig", |t| {
            Ok(TrainingImageConfig::builder()
                .set_training_repository_access_mode(t.enumeration("TrainingRepositoryAccessMode")?)
                .set_training_repository_auth_config(t.object(
                    "TrainingRepositoryAuthConfig",
                    |r| {
                        Ok(TrainingRepositoryAuthConfig::builder()
                            .set_training_repository_credentials_provider_arn(
                                r.string("TrainingRepositoryCredentialsProviderArn")?,
                            )
                            .build())
                    },
                )?)
                .build())
        })?)
        .build())
}

fn channel(c: &mut Members<'_>) -> Result<Channel, RequestError> {
    Ok(Channel::builder()
        .set_channel_name(c.string("ChannelName")?)
        .set_data_source(c.object("DataSource", |d| {
            Ok(DataSource::builder()
                .set_s3_data_source(d.object("S3DataSource", |s| {
                    Ok(S3DataSource::builder()
                        .set_s3_data_type(s.enumeration("S3DataType")?)
                        .set_s3_uri(s.string("S3Uri")?)
                        .set_s3_data_distribution_type(s.enumeration("S3DataDistributionType")?)
                        .set_attribute_names(s.strings("AttributeNames")?)
                        .set_instance_group_names(s.strings("InstanceGroupNames")?)
                        .build())
                })?)
                .set_file_system_data_source(d.object("FileSystemDataSource", |f| {
                    Ok(FileSystemDataSource::builder()
                        .set_file_system_id(f.string("FileSystemId")?)
                        .set_file_system_access_mode(f.enumeration("FileSystemAccessMode")?)
                        .set_file_system_type(f.enumeration("FileSystemType")?)
                        .set_directory_path(f.string("DirectoryPath")?)
                        .build())
                })?)
                .build())
        })?)
        .set_content_type(c.string("ContentType")?)
        .set_compression_type(c.enumeration("CompressionType")?)
        .set_record_wrapper_type(c.enumeration("RecordWrapperType")?)
        .set_input_mode(c.enumeration("InputMode")?)
        .set_shuffle_config(c.object("ShuffleConfig", |s| {
            Ok(ShuffleConfig::builder().set_seed(s.long("Seed")?).build())
        })?)
        .build())
}

fn resources(r: &mut Members<'_>) -> Result<ResourceConfig, RequestError> {
    Ok(ResourceConfig::builder()
        .set_instance_type(r.enumeration("InstanceType")?)
        .set_instance_count(r.int("InstanceCount")?)
        .set_volume_size_in_gb(r.int("VolumeSizeInGB")?)
        .set_volume_kms_key_id(r.string("VolumeKmsKeyId")?)
        .set_keep_alive_period_in_seconds(r.int("KeepAlivePeriodInSeconds")?)
        .set_instance_groups(r.list("InstanceGroups", |g| {
            Ok(InstanceGroup::builder()
                .set_instance_type(g.enumeration("InstanceType")?)
                .set_instance_count(g.int("InstanceCount")?)
                .set_instance_group_name(g.string("InstanceGroupName")?)
                .build())
        })?)
        .set_training_plan_arn(r.string("TrainingPlanArn")?)
        .build())
}

fn debug_hook(d: &mut Members<'_>) -> Result<DebugHookConfig, RequestError> {
    Ok(DebugHookConfig::builder()
        .set_local_path(d.string("LocalPath")?)
        .set_s3_output_path(d.string("S3OutputPath")?)
        .set_hook_parameters(d.string_map("HookParameters")?)
        .set_collection_configurations(d.list("CollectionConfigurations", |c| {
            Ok(CollectionConfiguration::builder()
                .set_collection_name(c.string("CollectionName")?)
                .set_collection_parameters(c.string_map("CollectionParameters")?)
                .build())
        })?)
        .build())
}

fn debug_rule(r: &mut Members<'_>) -> Result<DebugRuleConfiguration, RequestError> {
    Ok(DebugRuleConfiguration::builder()
        .set_rule_configuration_name(r.string("RuleConfigurationName")?)
        .set_local_path(r.string("LocalPath")?)
        .set_s3_output_path(r.string("S3OutputPath")?)
        .set_rule_evaluator_image(r.string("RuleEvaluatorImage")?)
        .set_instance_type(r.enumeration("InstanceType")?)
        .set_volume_size_in_gb(r.int("VolumeSizeInGB")?)
        .set_rule_parameters(r.string_map("RuleParameters")?)
        .build())
}

fn profiler_rule(r: &mut Members<'_>) -> Result<ProfilerRuleConfiguration, RequestError> {
    Ok(ProfilerRuleConfiguration::builder()
        .set_rule_configuration_name(r.string("RuleConfigurationName")?)
        .set_local_path(r.string("LocalPath")?)
        .set_s3_output_path(r.string("S3OutputPath")?)
        .set_rule_evaluator_image(r.string("RuleEvaluatorImage")?)
        .set_instance_type(r.enumeration("InstanceType")?)
        .set_volume_size_in_gb(r.int("VolumeSizeInGB")?)
        .set_rule_parameters(r.string_map("RuleParameters")?)
        .build())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

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

    fn minimal() -> Value {
        json!({
            "TrainingJobName": "j-1",
            "RoleArn": "arn:aws:iam::000000000000:role/R",
            "AlgorithmSpecification": {"TrainingImage": "img", "TrainingInputMode": "File"},
            "OutputDataConfig": {"S3OutputPath": "s3://b/o"},
            "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 10},
        })
    }

    fn with(path: &[&str], value: Value) -> Value {
        let mut request = minimal();
        let mut at = &mut request;
        for key in &path[..path.len() - 1] {
            at = at
                .as_object_mut()
                .unwrap()
                .entry(*key)
                .or_insert_with(|| json!({}));
        }
        at[path[path.len() - 1]] = value;
        request
    }

    #[test]
    fn a_member_that_is_not_mapped_or_has_the_wrong_type_is_refused_by_its_path() {
        let cases = [
            (
                "an unknown top-level member",
                with(&["ModelPackageConfig"], json!({"x": 1})),
                RequestError::Unsupported {
                    member: "ModelPackageConfig".into(),
                },
            ),
            (
                "an unknown nested member",
                with(&["ResourceConfig", "InstancePlacementConfig"], json!({})),
                RequestError::Unsupported {
                    member: "ResourceConfig.InstancePlacementConfig".into(),
                },
            ),
            (
                "an unknown member inside a list",
                with(
                    &["ResourceConfig", "InstanceGroups"],
                    json!([{"InstanceType": "ml.m5.large", "InstanceCount": 1, "InstanceGroupName": "g", "Oops": 1}]),
                ),
                RequestError::Unsupported {
                    member: "ResourceConfig.InstanceGroups[0].Oops".into(),
                },
            ),
            (
                "a number where a string belongs",
                with(&["RoleArn"], json!(7)),
                RequestError::WrongType {
                    member: "RoleArn".into(),
                    expected: "a string",
                },
            ),
            (
                "an integer too large for SageMaker's int",
                with(&["ResourceConfig", "InstanceCount"], json!(1_u64 << 40)),
                RequestError::WrongType {
                    member: "ResourceConfig.InstanceCount".into(),
                    expected: "a 32-bit integer",
                },
            ),
            (
                "a hyperparameter that is not a string",
                with(&["HyperParameters"], json!({"epochs": 3})),
                RequestError::WrongType {
                    member: "HyperParameters.epochs".into(),
                    expected: "a string",
                },
            ),
        ];
        for (story, request, expected) in cases {
            assert_eq!(
                create_training_job_input(&request).err(),
                Some(expected),
                "{story}"
            );
        }
        assert_eq!(
            create_training_job_input(&json!([])).err(),
            Some(RequestError::NotObject)
        );
    }

    #[test]
    fn mapped_members_land_on_the_builder_and_null_counts_as_absent() {
        let mut request = minimal();
        request["VpcConfig"] = Value::Null;
        request["HyperParameters"] = json!({"epochs": "3"});
        let input = create_training_job_input(&request).unwrap();
        assert_eq!(input.get_training_job_name().as_deref(), Some("j-1"));
        assert!(input.get_vpc_config().is_none());
        let resources = input.get_resource_config().as_ref().unwrap();
        assert_eq!(
            resources.instance_type().map(|t| t.as_str()),
            Some("ml.m5.large")
        );
        assert_eq!(resources.instance_count(), Some(1));
        assert_eq!(
            input
                .get_hyper_parameters()
                .as_ref()
                .and_then(|h| h.get("epochs"))
                .map(String::as_str),
            Some("3")
        );
    }

    #[test]
    fn a_refused_request_is_a_rejection_that_names_the_member() {
        let error: BackendError = RequestError::Unsupported {
            member: "Foo.Bar".into(),
        }
        .into();
        match error {
            BackendError::Rejected { code, message } => {
                assert_eq!(code, "UnsupportedMember");
                assert!(message.contains("Foo.Bar"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }
}
