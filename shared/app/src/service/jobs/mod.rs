//! Service-job use-cases: submit, accept into the queue, describe, list, terminate, re-prioritise,
//! and the queue snapshot.
//!
//! The API layer has already checked each request's formats and ranges; the rules here are the
//! ones that need stored state (does the queue exist, is it enabled, what policy does it have,
//! is this client token new). Scheduling is not here: a job is stored SUBMITTED, moved to
//! RUNNABLE by [`Service::accept_submitted`], and waits there for the scheduler.
//!
//! # Layout
//!
//! - `submit`: submit and accept into the queue.
//! - `read`: describe, list, and a job's place in line.
//! - `change`: terminate and re-prioritise.
//! - `snapshot`: `GetJobQueueSnapshot`.

mod change;
mod read;
mod snapshot;
mod submit;
pub use submit::Accepted;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use serde::Serialize;
use sha2::{Digest, Sha256};
use trainyard_domain::Tags;
use trainyard_domain::arn::ResourceKind;
use trainyard_domain::job::{
    JobPreemptionConfiguration, JobStatus, RetryStrategy, ServiceJob, ServiceJobType, TimeoutConfig,
};
use trainyard_domain::limits::MAX_ACTIVE_SHARES;
use trainyard_domain::payload::{parse_training_request, role_arn};
use trainyard_domain::policy::SchedulingPolicy;
use trainyard_domain::queue::{JobQueue, JobQueueType};
use trainyard_domain::quota_share::QuotaShare;
use trainyard_domain::{ResourceStatus, State};

use crate::error::AppError;
use crate::ports::{
    ClientTokenRecord, ConfigStore, Event, EventSink, InsertJob, JobQuery, JobStore, Page,
    RunnableHead, SchedulingStore, StoreError, Versioned, quota_share_key,
};
use crate::service::Service;
use trainyard_domain::order::{runnable_rank, share_key};
use trainyard_scheduler::retry::{TerminateAction, terminate_action};

/// Page size for the use-cases' own scans of the job list.
const SCAN_PAGE: usize = 500;

/// Most jobs one scan reads. Scans are a stop-gap until the scheduling issue adds a runnable
/// index; the bound keeps one request's cost finite even on a huge backlog (results past it are
/// left out, which only shortens a snapshot or delays acceptance to a later pass).
const SCAN_CAP: usize = 100_000;

/// Most SUBMITTED jobs [`Service::accept_submitted`] reads to find the oldest. SUBMITTED is
/// transient (every submission wakes the loop that drains it), so this is rarely reached.
const ACCEPT_SCAN_CAP: usize = 10_000;

/// Most RUNNABLE jobs [`Service::queue_position`] reads to place a job.
pub const POSITION_SCAN_LIMIT: usize = 10_000;

/// A RUNNABLE job's place in line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuePlace {
    /// 1 means next to be dispatched from its queue (or share).
    pub position: u64,
    /// The share it is ordered within, for queues with a scheduling policy.
    pub share: Option<String>,
}

/// Shares listed in `fairshareUtilization.topCapacityUtilization` (Batch's limit).
const TOP_SHARES: usize = 20;

/// A `SubmitServiceJob` request, already checked for formats and ranges by the API layer.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SubmitJob {
    /// `jobName`.
    pub job_name: String,
    /// `jobQueue`: a name or an ARN. Not hashed as given: the resolved name is.
    #[serde(skip)]
    pub job_queue: String,
    /// `serviceJobType`.
    pub service_job_type: ServiceJobType,
    /// `serviceRequestPayload`, verbatim.
    pub service_request_payload: String,
    /// `shareIdentifier`.
    pub share_identifier: Option<String>,
    /// `quotaShareName`.
    pub quota_share_name: Option<String>,
    /// `schedulingPriority` (0–9999).
    pub scheduling_priority: Option<u32>,
    /// `retryStrategy`.
    pub retry_strategy: Option<RetryStrategy>,
    /// `timeoutConfig`.
    pub timeout_config: Option<TimeoutConfig>,
    /// `preemptionConfiguration`.
    pub preemption_configuration: Option<JobPreemptionConfiguration>,
    /// `tags`.
    pub tags: Tags,
    /// `clientToken`; left out of the request hash so that a retry hashes the same.
    #[serde(skip)]
    pub client_token: Option<String>,
}

/// What `SubmitServiceJob` returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubmittedJob {
    /// The job's id.
    pub job_id: String,
    /// The job's name.
    pub job_name: String,
    /// The job's ARN.
    pub job_arn: String,
}

/// Per-job outcome of a bulk terminate that did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TerminateFailure {
    /// The id or ARN as the caller gave it.
    pub job: String,
    /// `ClientException` or `ServerException`.
    pub code: &'static str,
    /// Why.
    pub message: String,
}

/// Outcome of `TerminateServiceJobs`: each id is either successful or an error.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BulkTerminate {
    /// Ids (as given) that are now terminated, were already finished, or do not exist.
    pub successful: Vec<String>,
    /// Ids that could not be terminated.
    pub errors: Vec<TerminateFailure>,
}

/// How a queue orders its runnable jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueOrdering {
    /// No scheduling policy: submission order.
    Fifo,
    /// Fair-share policy: priority, then age, within shares.
    FairShare,
    /// Quota-share policy: priority, then age, within quota shares.
    QuotaShare,
}

/// A runnable job's place at the front of a queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuePosition {
    /// The job.
    pub job_id: String,
    /// When it took this position (when it last became RUNNABLE), epoch ms.
    pub earliest_time_at_position: i64,
}

/// Instances in use, per instance type.
pub type CapacityUsage = BTreeMap<String, u64>;

/// What `GetJobQueueSnapshot` reports, computed at `at_ms`.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueSnapshot {
    /// The queue's name.
    pub job_queue: String,
    /// Its ordering.
    pub ordering: QueueOrdering,
    /// The first runnable jobs, in dispatch order (at most 100).
    pub front_of_queue: Vec<QueuePosition>,
    /// For quota-share queues: the first runnable job of each quota share that has one.
    pub front_of_quota_shares: Option<BTreeMap<String, QueuePosition>>,
    /// Instances held by dispatched (SCHEDULED, STARTING, RUNNING) jobs.
    pub total_capacity_usage: CapacityUsage,
    /// For fair-share queues: how many shares hold capacity, and the top 20 by instances held.
    pub fairshare: Option<(u64, Vec<(String, CapacityUsage)>)>,
    /// For quota-share queues: capacity held per quota share, largest first.
    pub quota_shares: Option<Vec<(String, CapacityUsage)>>,
    /// When the snapshot was taken.
    pub at_ms: i64,
}

impl<S: JobStore + ConfigStore, E: EventSink> Service<S, E> {
    /// Resolves a job id or service-job ARN to the id.
    pub(super) fn job_id_of(&self, id_or_arn: &str) -> Result<String, AppError> {
        self.arns
            .resolve(ResourceKind::ServiceJob, id_or_arn)
            .map_err(|e| AppError::Invalid(format!("jobId: {e}")))
    }

    /// Reads a job by id or ARN; a missing job is [`AppError::NotFound`] naming it.
    pub(super) async fn load_job(
        &self,
        id_or_arn: &str,
    ) -> Result<Versioned<ServiceJob>, AppError> {
        let job_id = self.job_id_of(id_or_arn)?;
        self.store
            .get_job(&job_id)
            .await?
            .ok_or_else(|| AppError::NotFound(format!("Service job {job_id} does not exist")))
    }

    /// Reads a queue by name or ARN; a missing queue is [`AppError::NotFound`] naming it.
    pub(super) async fn load_queue(&self, name_or_arn: &str) -> Result<JobQueue, AppError> {
        let name = self
            .arns
            .resolve(ResourceKind::JobQueue, name_or_arn)
            .map_err(|e| AppError::Invalid(format!("jobQueue: {e}")))?;
        self.store
            .get_resource::<JobQueue>(&name)
            .await?
            .map(|v| v.value)
            .ok_or_else(|| AppError::NotFound(format!("Job queue {name} does not exist")))
    }

    /// How a queue orders its jobs, from its scheduling policy.
    pub(super) async fn ordering_of(&self, queue: &JobQueue) -> Result<QueueOrdering, AppError> {
        let Some(policy_ref) = &queue.scheduling_policy else {
            return Ok(QueueOrdering::Fifo);
        };
        // Queues may record the policy by ARN or by name; the store keys policies by name.
        let name = self
            .arns
            .resolve(ResourceKind::SchedulingPolicy, policy_ref)
            .unwrap_or_else(|_| policy_ref.clone());
        let policy = self
            .store
            .get_resource::<SchedulingPolicy>(&name)
            .await?
            .ok_or_else(|| {
                AppError::Conflict(format!(
                    "Job queue {} uses scheduling policy {name}, which does not exist",
                    queue.job_queue_name
                ))
            })?
            .value;
        Ok(if policy.quota_share_policy.is_some() {
            QueueOrdering::QuotaShare
        } else if policy.fairshare_policy.is_some() {
            QueueOrdering::FairShare
        } else {
            QueueOrdering::Fifo
        })
    }

    /// Reads every job matching `query` (paging through the store), up to `cap` jobs.
    pub(super) async fn scan_jobs(
        &self,
        query: JobQuery,
        cap: usize,
    ) -> Result<Vec<ServiceJob>, AppError> {
        let jobs = self.scan_versioned(query, cap).await?;
        Ok(jobs.into_iter().map(|v| v.value).collect())
    }

    /// [`Service::scan_jobs`] with each job's stored version.
    pub(super) async fn scan_versioned(
        &self,
        mut query: JobQuery,
        cap: usize,
    ) -> Result<Vec<Versioned<ServiceJob>>, AppError> {
        query.limit = SCAN_PAGE;
        query.after = None;
        let mut jobs = Vec::new();
        loop {
            let page = self.store.list_jobs(&query).await?;
            jobs.extend(page.items);
            match page.next {
                Some(next) if jobs.len() < cap => query.after = Some(next),
                _ => break,
            }
        }
        jobs.truncate(cap);
        Ok(jobs)
    }
}
