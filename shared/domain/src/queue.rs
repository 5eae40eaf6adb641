//! Job queues of type `SAGEMAKER_TRAINING`: where jobs wait, with a priority across queues that
//! share a service environment and an optional scheduling policy (none means FIFO).

use serde::{Deserialize, Serialize};

use crate::{ResourceStatus, State, Tags};

/// `jobQueueType`. Trainyard serves only `SAGEMAKER_TRAINING`; the others exist so that a request
/// naming them gets a clear refusal rather than a parse error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobQueueType {
    /// Container jobs on EKS (not served).
    Eks,
    /// Container jobs on ECS (not served).
    Ecs,
    /// Container jobs on Fargate (not served).
    EcsFargate,
    /// SageMaker training service jobs.
    #[default]
    SagemakerTraining,
}

/// `serviceEnvironmentOrder[]`, with the environment by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceEnvironmentOrder {
    /// Order of preference (ascending).
    pub order: i32,
    /// Name of the service environment.
    pub service_environment: String,
}

/// `jobStateTimeLimitActions[].action`; service queues support only TERMINATE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TimeLimitAction {
    /// For container queues; refused on service queues.
    Cancel,
    /// Terminate the job (moves it to FAILED).
    Terminate,
}

/// `jobStateTimeLimitActions[].state`; only RUNNABLE exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TimeLimitState {
    /// The job waits in RUNNABLE.
    #[default]
    Runnable,
}

/// Terminate jobs left RUNNABLE for `reason` longer than `max_time_seconds`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobStateTimeLimitAction {
    /// Status-reason prefix that triggers it, e.g. `CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY`.
    pub reason: String,
    /// Always RUNNABLE.
    pub state: TimeLimitState,
    /// 600–86,400 seconds.
    pub max_time_seconds: u32,
    /// Always TERMINATE for service queues.
    pub action: TimeLimitAction,
}

/// A job queue as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobQueue {
    /// Unique name.
    pub job_queue_name: String,
    /// ENABLED queues accept submissions.
    pub state: State,
    /// Lifecycle status.
    pub status: ResourceStatus,
    /// Explains the status, e.g. `JobQueue Healthy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_reason: Option<String>,
    /// 0–1000; higher is evaluated first among queues sharing an environment.
    pub priority: u32,
    /// Name of the scheduling policy; none means FIFO.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_policy: Option<String>,
    /// The (single) service environment this queue feeds.
    pub service_environment_order: Vec<ServiceEnvironmentOrder>,
    /// Time limits for RUNNABLE jobs.
    #[serde(default)]
    pub job_state_time_limit_actions: Vec<JobStateTimeLimitAction>,
    /// Always SAGEMAKER_TRAINING.
    pub job_queue_type: JobQueueType,
    /// Tags.
    #[serde(default)]
    pub tags: Tags,
    /// Creation time (epoch ms).
    pub created_at: i64,
}

impl JobQueue {
    /// The environment the queue dispatches to (lowest `order`), if any.
    pub fn service_environment(&self) -> Option<&str> {
        self.service_environment_order
            .iter()
            .min_by_key(|o| (o.order, o.service_environment.as_str()))
            .map(|o| o.service_environment.as_str())
    }
}
