//! Jobs as AWS Batch's API renders them: `DescribeServiceJob`'s detail and `ListServiceJobs`'
//! summary, member for member (see `../shared/reference/`). Shared by the API and by every
//! other rendering of a job, such as the EventBridge state-change events.

use serde::Serialize;

use crate::Tags;
use crate::arn::ArnContext;
use crate::job::{
    Attempt, JobPreemptionConfiguration, JobStatus, RetryStrategy, ServiceJob, ServiceJobType,
    TimeoutConfig,
};

/// `serviceResourceId`: the attempt's training job.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceResourceId {
    name: &'static str,
    value: String,
}

fn resource_id(arns: &ArnContext, attempt: &Attempt) -> ServiceResourceId {
    ServiceResourceId {
        name: "TrainingJobArn",
        value: attempt
            .training_job_arn
            .clone()
            .unwrap_or_else(|| arns.training_job_arn(&attempt.training_job_name)),
    }
}

/// One of `attempts`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AttemptDetail<'a> {
    service_resource_id: ServiceResourceId,
    #[serde(skip_serializing_if = "Option::is_none")]
    started_at: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stopped_at: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status_reason: Option<&'a str>,
}

fn attempt_detail<'a>(arns: &ArnContext, attempt: &'a Attempt) -> AttemptDetail<'a> {
    AttemptDetail {
        service_resource_id: resource_id(arns, attempt),
        started_at: attempt.started_at,
        stopped_at: attempt.stopped_at,
        status_reason: attempt.status_reason.as_deref(),
    }
}

/// `latestAttempt`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LatestAttempt {
    service_resource_id: ServiceResourceId,
}

fn latest_attempt(arns: &ArnContext, job: &ServiceJob) -> Option<LatestAttempt> {
    job.latest_attempt().map(|a| LatestAttempt {
        service_resource_id: resource_id(arns, a),
    })
}

/// One of `capacityUsage`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Capacity {
    capacity_unit: String,
    quantity: f64,
}

/// `capacityUsage` from instances per instance type.
pub fn capacity<'a>(usage: impl IntoIterator<Item = (&'a String, u64)>) -> Vec<Capacity> {
    usage
        .into_iter()
        .map(|(unit, n)| Capacity {
            capacity_unit: unit.clone(),
            quantity: n as f64,
        })
        .collect()
}

fn job_capacity(job: &ServiceJob) -> Vec<Capacity> {
    capacity(
        job.training
            .instances
            .iter()
            .map(|(t, n)| (t, u64::from(*n))),
    )
}

/// `preemptionSummary`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PreemptionSummaryDetail<'a> {
    preempted_attempt_count: u32,
    recent_preempted_attempts: Vec<AttemptDetail<'a>>,
}

/// `DescribeServiceJob` output.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JobDetail<'a> {
    job_id: &'a str,
    job_arn: String,
    job_name: &'a str,
    job_queue: String,
    service_job_type: ServiceJobType,
    status: JobStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    status_reason: Option<&'a str>,
    created_at: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    scheduled_at: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    started_at: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stopped_at: Option<i64>,
    is_terminated: bool,
    service_request_payload: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    scheduling_priority: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    share_identifier: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    quota_share_name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_strategy: Option<&'a RetryStrategy>,
    #[serde(skip_serializing_if = "Option::is_none")]
    timeout_config: Option<&'a TimeoutConfig>,
    #[serde(skip_serializing_if = "Option::is_none")]
    preemption_configuration: Option<&'a JobPreemptionConfiguration>,
    #[serde(skip_serializing_if = "Option::is_none")]
    preemption_summary: Option<PreemptionSummaryDetail<'a>>,
    tags: &'a Tags,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    attempts: Vec<AttemptDetail<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    latest_attempt: Option<LatestAttempt>,
    capacity_usage: Vec<Capacity>,
}

/// `job` as `DescribeServiceJob` renders it.
pub fn job_detail<'a>(arns: &ArnContext, job: &'a ServiceJob) -> JobDetail<'a> {
    JobDetail {
        job_id: &job.job_id,
        job_arn: arns.job_arn(&job.job_id),
        job_name: &job.job_name,
        job_queue: arns.queue_arn(&job.job_queue),
        service_job_type: job.service_job_type,
        status: job.status,
        status_reason: job.status_reason.as_deref(),
        created_at: job.created_at,
        scheduled_at: job.scheduled_at,
        started_at: job.started_at,
        stopped_at: job.stopped_at,
        is_terminated: job.is_terminated,
        service_request_payload: &job.service_request_payload,
        scheduling_priority: job.scheduling_priority,
        share_identifier: job.share_identifier.as_deref(),
        quota_share_name: job.quota_share_name.as_deref(),
        retry_strategy: job.retry_strategy.as_ref(),
        timeout_config: job.timeout_config.as_ref(),
        preemption_configuration: job.preemption_configuration.as_ref(),
        preemption_summary: job
            .preemption_summary
            .as_ref()
            .map(|p| PreemptionSummaryDetail {
                preempted_attempt_count: p.preempted_attempt_count,
                recent_preempted_attempts: p
                    .recent_preempted_attempts
                    .iter()
                    .map(|a| attempt_detail(arns, a))
                    .collect(),
            }),
        tags: &job.tags,
        attempts: job
            .attempts
            .iter()
            .map(|a| attempt_detail(arns, a))
            .collect(),
        latest_attempt: latest_attempt(arns, job),
        capacity_usage: job_capacity(job),
    }
}

/// `ListServiceJobs` summary.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JobSummary<'a> {
    job_arn: String,
    job_id: &'a str,
    job_name: &'a str,
    service_job_type: ServiceJobType,
    status: JobStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    status_reason: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    share_identifier: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    quota_share_name: Option<&'a str>,
    created_at: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    scheduled_at: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    started_at: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stopped_at: Option<i64>,
    capacity_usage: Vec<Capacity>,
    #[serde(skip_serializing_if = "Option::is_none")]
    latest_attempt: Option<LatestAttempt>,
}

/// `job` as `ListServiceJobs` summarises it.
pub fn job_summary<'a>(arns: &ArnContext, job: &'a ServiceJob) -> JobSummary<'a> {
    JobSummary {
        job_arn: arns.job_arn(&job.job_id),
        job_id: &job.job_id,
        job_name: &job.job_name,
        service_job_type: job.service_job_type,
        status: job.status,
        status_reason: job.status_reason.as_deref(),
        share_identifier: job.share_identifier.as_deref(),
        quota_share_name: job.quota_share_name.as_deref(),
        created_at: job.created_at,
        scheduled_at: job.scheduled_at,
        started_at: job.started_at,
        stopped_at: job.stopped_at,
        capacity_usage: job_capacity(job),
        latest_attempt: latest_attempt(arns, job),
    }
}
