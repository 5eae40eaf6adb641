//! Service-job use-cases: submit, accept into the queue, describe, list, terminate, re-prioritise,
//! and the queue snapshot.
//!
//! The API layer has already checked each request's formats and ranges; the rules here are the
//! ones that need stored state (does the queue exist, is it enabled, what policy does it have,
//! is this client token new). Scheduling is not here: a job is stored SUBMITTED, moved to
//! RUNNABLE by [`Service::accept_submitted`], and waits there for the scheduler.

use std::collections::BTreeMap;

use serde::Serialize;
use sha2::{Digest, Sha256};
use trainyard_domain::Tags;
use trainyard_domain::arn::ResourceKind;
use trainyard_domain::job::{
    JobPreemptionConfiguration, JobStatus, RetryStrategy, ServiceJob, ServiceJobType, TimeoutConfig,
};
use trainyard_domain::payload::parse_training_request;
use trainyard_domain::policy::SchedulingPolicy;
use trainyard_domain::queue::{JobQueue, JobQueueType};
use trainyard_domain::quota_share::QuotaShare;
use trainyard_domain::{ResourceStatus, State};

use crate::error::AppError;
use crate::ports::{
    ClientTokenRecord, Event, EventSink, InsertJob, JobQuery, Page, Store, StoreError, Versioned,
    quota_share_key, runnable_rank, share_key,
};
use crate::service::Service;
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

fn position(job: &ServiceJob) -> QueuePosition {
    QueuePosition {
        job_id: job.job_id.clone(),
        earliest_time_at_position: job.runnable_at.unwrap_or(job.created_at),
    }
}

fn add_usage(usage: &mut CapacityUsage, job: &ServiceJob) {
    for (instance_type, count) in &job.training.instances {
        *usage.entry(instance_type.clone()).or_insert(0) += u64::from(*count);
    }
}

/// Usage per group, largest total first, then by name (a total order).
fn ranked(groups: BTreeMap<String, CapacityUsage>) -> Vec<(String, CapacityUsage)> {
    let mut ranked: Vec<_> = groups.into_iter().collect();
    ranked.sort_by(|(a_name, a), (b_name, b)| {
        let total = |u: &CapacityUsage| u.values().sum::<u64>();
        total(b).cmp(&total(a)).then_with(|| a_name.cmp(b_name))
    });
    ranked
}

/// SHA-256 (hex) of the canonical request: the resolved queue name and every member but the
/// client token, serialised with a fixed member order (tags are a sorted map).
fn request_hash(queue: &str, cmd: &SubmitJob) -> String {
    let mut hasher = Sha256::new();
    hasher.update(queue.as_bytes());
    hasher.update(b"\n");
    // Serialising plain structs and sorted maps cannot fail; an empty body would only make
    // distinct requests collide on the same token, never accept a different one silently.
    hasher.update(serde_json::to_vec(cmd).unwrap_or_default());
    format!("{:x}", hasher.finalize())
}

impl<S: Store, E: EventSink> Service<S, E> {
    /// Resolves a job id or service-job ARN to the id.
    fn job_id_of(&self, id_or_arn: &str) -> Result<String, AppError> {
        self.arns
            .resolve(ResourceKind::ServiceJob, id_or_arn)
            .map_err(|e| AppError::Invalid(format!("jobId: {e}")))
    }

    /// Reads a job by id or ARN; a missing job is [`AppError::NotFound`] naming it.
    async fn load_job(&self, id_or_arn: &str) -> Result<Versioned<ServiceJob>, AppError> {
        let job_id = self.job_id_of(id_or_arn)?;
        self.store
            .get_job(&job_id)
            .await?
            .ok_or_else(|| AppError::NotFound(format!("Service job {job_id} does not exist")))
    }

    /// Reads a queue by name or ARN; a missing queue is [`AppError::NotFound`] naming it.
    async fn load_queue(&self, name_or_arn: &str) -> Result<JobQueue, AppError> {
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
    async fn ordering_of(&self, queue: &JobQueue) -> Result<QueueOrdering, AppError> {
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

    /// Checks `shareIdentifier` / `quotaShareName` against the queue's policy.
    async fn check_share(
        &self,
        queue: &JobQueue,
        ordering: QueueOrdering,
        cmd: &SubmitJob,
    ) -> Result<(), AppError> {
        let queue_name = &queue.job_queue_name;
        if cmd.share_identifier.is_some() && cmd.quota_share_name.is_some() {
            return Err(AppError::Invalid(
                "Specify shareIdentifier or quotaShareName, not both".into(),
            ));
        }
        match ordering {
            QueueOrdering::Fifo => {
                if cmd.share_identifier.is_some() {
                    return Err(AppError::Invalid(format!(
                        "shareIdentifier is not allowed: job queue {queue_name} has no fair-share scheduling policy"
                    )));
                }
                if cmd.quota_share_name.is_some() {
                    return Err(AppError::Invalid(format!(
                        "quotaShareName is not allowed: job queue {queue_name} has no quota-share scheduling policy"
                    )));
                }
            }
            QueueOrdering::FairShare => {
                if cmd.quota_share_name.is_some() {
                    return Err(AppError::Invalid(format!(
                        "quotaShareName is not allowed: job queue {queue_name} has a fair-share scheduling policy; use shareIdentifier"
                    )));
                }
                if cmd.share_identifier.is_none() {
                    return Err(AppError::Invalid(format!(
                        "shareIdentifier is required: job queue {queue_name} has a fair-share scheduling policy"
                    )));
                }
            }
            QueueOrdering::QuotaShare => {
                if cmd.share_identifier.is_some() {
                    return Err(AppError::Invalid(format!(
                        "shareIdentifier is not allowed: job queue {queue_name} has a quota-share scheduling policy; use quotaShareName"
                    )));
                }
                let Some(share) = &cmd.quota_share_name else {
                    return Err(AppError::Invalid(format!(
                        "quotaShareName is required: job queue {queue_name} has a quota-share scheduling policy"
                    )));
                };
                let found = self
                    .store
                    .get_resource::<QuotaShare>(&quota_share_key(queue_name, share))
                    .await?
                    .ok_or_else(|| {
                        AppError::NotFound(format!(
                            "Quota share {share} does not exist in job queue {queue_name}"
                        ))
                    })?
                    .value;
                if found.state != State::Enabled {
                    return Err(AppError::Invalid(format!(
                        "Quota share {share} in job queue {queue_name} is DISABLED and accepts no new jobs"
                    )));
                }
            }
        }
        Ok(())
    }

    /// `SubmitServiceJob`: stores the job as SUBMITTED and publishes `JobSubmitted`.
    ///
    /// Idempotent on `clientToken`: the same request with the same token returns the job the
    /// first call created; a different request with a used token is refused.
    pub async fn submit(&self, cmd: SubmitJob) -> Result<SubmittedJob, AppError> {
        let queue = self.load_queue(&cmd.job_queue).await?;
        let queue_name = queue.job_queue_name.clone();
        if queue.job_queue_type != JobQueueType::SagemakerTraining {
            return Err(AppError::Invalid(format!(
                "Job queue {queue_name} is not of type SAGEMAKER_TRAINING"
            )));
        }
        if queue.state != State::Enabled {
            return Err(AppError::Invalid(format!(
                "Job queue {queue_name} is DISABLED and accepts no new jobs"
            )));
        }
        if matches!(
            queue.status,
            ResourceStatus::Deleting | ResourceStatus::Deleted
        ) {
            return Err(AppError::Invalid(format!(
                "Job queue {queue_name} is being deleted and accepts no new jobs"
            )));
        }
        let ordering = self.ordering_of(&queue).await?;
        self.check_share(&queue, ordering, &cmd).await?;
        let training = parse_training_request(&cmd.service_request_payload)
            .map_err(|e| AppError::Invalid(e.to_string()))?;

        let now = self.clock.now_ms();
        let job_id = self.ids.job_id();
        let token = cmd.client_token.as_ref().map(|token| ClientTokenRecord {
            token: token.clone(),
            request_hash: request_hash(&queue_name, &cmd),
            job_id: job_id.clone(),
            created_at: now,
        });
        let job = ServiceJob {
            job_id: job_id.clone(),
            job_name: cmd.job_name,
            job_queue: queue_name.clone(),
            service_job_type: cmd.service_job_type,
            service_request_payload: cmd.service_request_payload,
            training,
            share_identifier: cmd.share_identifier,
            quota_share_name: cmd.quota_share_name,
            scheduling_priority: cmd.scheduling_priority,
            retry_strategy: cmd.retry_strategy,
            timeout_config: cmd.timeout_config,
            preemption_configuration: cmd.preemption_configuration,
            tags: cmd.tags,
            client_token: cmd.client_token,
            status: JobStatus::Submitted,
            status_reason: None,
            is_terminated: false,
            termination_reason: None,
            not_before: None,
            attempts: Vec::new(),
            preemption_summary: None,
            created_at: now,
            runnable_at: None,
            scheduled_at: None,
            started_at: None,
            stopped_at: None,
            updated_at: now,
        };

        match self.store.insert_job(&job, token.as_ref()).await? {
            InsertJob::Inserted => {}
            InsertJob::TokenExists(earlier) => {
                let same = token
                    .as_ref()
                    .is_some_and(|t| t.request_hash == earlier.request_hash);
                if !same {
                    return Err(AppError::Invalid(format!(
                        "clientToken {} was already used for a different request; use a new token for a new job",
                        earlier.token
                    )));
                }
                let job_name = match self.store.get_job(&earlier.job_id).await? {
                    Some(stored) => stored.value.job_name,
                    // Same hash means same jobName, so the request's name is the earlier one.
                    None => job.job_name,
                };
                return Ok(SubmittedJob {
                    job_arn: self.arns.job_arn(&earlier.job_id),
                    job_id: earlier.job_id,
                    job_name,
                });
            }
        }
        tracing::info!(job_id = %job.job_id, job_queue = %queue_name, "job submitted");
        self.events
            .publish(Event::JobSubmitted {
                job_id: job.job_id.clone(),
                job_queue: queue_name,
            })
            .await;
        Ok(SubmittedJob {
            job_arn: self.arns.job_arn(&job.job_id),
            job_id: job.job_id,
            job_name: job.job_name,
        })
    }

    /// Reads every job matching `query` (paging through the store), up to `cap` jobs.
    async fn scan_jobs(
        &self,
        mut query: JobQuery,
        cap: usize,
    ) -> Result<Vec<ServiceJob>, AppError> {
        query.limit = SCAN_PAGE;
        query.after = None;
        let mut jobs = Vec::new();
        loop {
            let page = self.store.list_jobs(&query).await?;
            jobs.extend(page.items.into_iter().map(|v| v.value));
            match page.next {
                Some(next) if jobs.len() < cap => query.after = Some(next),
                _ => break,
            }
        }
        jobs.truncate(cap);
        Ok(jobs)
    }

    /// Moves up to `limit` SUBMITTED jobs, oldest first, into their queues (RUNNABLE). A job
    /// whose queue no longer exists fails with a reason saying so. A job someone else changed
    /// meanwhile (a version conflict) is left alone. Returns how many jobs were moved.
    pub async fn accept_submitted(&self, limit: usize, min_age_ms: i64) -> Result<usize, AppError> {
        if limit == 0 {
            return Ok(0);
        }
        // Only jobs at least `min_age_ms` old: a client that describes its job right after
        // submitting must still see SUBMITTED (the SageMaker SDK asserts it).
        let cutoff = self.clock.now_ms().saturating_sub(min_age_ms.max(0));
        let query = JobQuery {
            status: Some(JobStatus::Submitted),
            created_before: Some(cutoff.saturating_add(1)),
            ..JobQuery::default()
        };
        let mut submitted = self.scan_jobs(query, ACCEPT_SCAN_CAP).await?;
        // Oldest first, so that a FIFO queue's runnable order matches submission order.
        submitted.sort_by(|a, b| (a.created_at, &a.job_id).cmp(&(b.created_at, &b.job_id)));
        submitted.truncate(limit);

        let mut queue_exists: BTreeMap<String, bool> = BTreeMap::new();
        let mut moved = 0;
        for job in submitted {
            let exists = match queue_exists.get(&job.job_queue) {
                Some(exists) => *exists,
                None => {
                    let exists = self
                        .store
                        .get_resource::<JobQueue>(&job.job_queue)
                        .await?
                        .is_some();
                    queue_exists.insert(job.job_queue.clone(), exists);
                    exists
                }
            };
            // Re-read for the version: the scan's copy may be stale by now.
            let Some(Versioned {
                value: mut job,
                version,
            }) = self.store.get_job(&job.job_id).await?
            else {
                continue;
            };
            if job.status != JobStatus::Submitted {
                continue;
            }
            let now = self.clock.now_ms();
            let (next, reason) = if exists {
                (JobStatus::Runnable, None)
            } else {
                (
                    JobStatus::Failed,
                    Some(format!(
                        "Job queue {} no longer exists; the job was never queued",
                        job.job_queue
                    )),
                )
            };
            if job.transition(next, reason, now).is_err() {
                continue;
            }
            match self.store.update_job(&job, version).await {
                Ok(_) => {}
                Err(StoreError::Conflict) => continue,
                Err(e) => return Err(e.into()),
            }
            moved += 1;
            self.publish_status(&job).await;
        }
        Ok(moved)
    }

    /// `DescribeServiceJob`: the job by id or ARN.
    pub async fn describe_job(&self, id_or_arn: &str) -> Result<ServiceJob, AppError> {
        Ok(self.load_job(id_or_arn).await?.value)
    }

    /// Where a RUNNABLE job stands: its 1-based position among the RUNNABLE jobs it is ordered
    /// with (the whole queue for FIFO queues, its share for queues with a policy), in dispatch
    /// order. `None` for jobs that are not RUNNABLE or lie beyond the first
    /// [`POSITION_SCAN_LIMIT`] (reading further would make one describe cost the backlog).
    pub async fn queue_position(&self, job: &ServiceJob) -> Result<Option<QueuePlace>, AppError> {
        if job.status != JobStatus::Runnable {
            return Ok(None);
        }
        let Some(queue) = self.store.get_resource::<JobQueue>(&job.job_queue).await? else {
            return Ok(None);
        };
        let share = queue
            .value
            .scheduling_policy
            .as_ref()
            .map(|_| share_key(job));
        let ahead = self
            .store
            .runnable_jobs(&job.job_queue, share_key(job), POSITION_SCAN_LIMIT)
            .await?;
        Ok(ahead
            .iter()
            .position(|v| v.value.job_id == job.job_id)
            .map(|i| QueuePlace {
                position: i as u64 + 1,
                share: share.map(str::to_owned),
            }))
    }

    /// `ListServiceJobs`: one page of jobs, newest first. `query.queue` may be a name or an ARN
    /// and must name an existing queue.
    pub async fn list_jobs(&self, mut query: JobQuery) -> Result<Page<ServiceJob>, AppError> {
        if let Some(queue) = &query.queue {
            query.queue = Some(self.load_queue(queue).await?.job_queue_name);
        }
        query.limit = query.limit.max(1);
        let page = self.store.list_jobs(&query).await?;
        Ok(Page {
            items: page.items.into_iter().map(|v| v.value).collect(),
            next: page.next,
        })
    }

    /// Applies `change` to a job, retrying once on a version conflict (re-reading first).
    /// `change` returns `Ok(false)` when there is nothing to write.
    async fn update_with_retry<F>(
        &self,
        id_or_arn: &str,
        mut change: F,
    ) -> Result<ServiceJob, AppError>
    where
        F: FnMut(&mut ServiceJob) -> Result<bool, AppError> + Send,
    {
        let mut tries = 0;
        loop {
            tries += 1;
            let Versioned {
                value: mut job,
                version,
            } = self.load_job(id_or_arn).await?;
            if !change(&mut job)? {
                return Ok(job);
            }
            match self.store.update_job(&job, version).await {
                Ok(_) => return Ok(job),
                Err(StoreError::Conflict) if tries < 2 => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// `TerminateServiceJob`: a job that has not finished becomes FAILED with `reason` and
    /// `isTerminated`; a finished job is left as it is (not an error).
    pub async fn terminate_job(&self, job_id_or_arn: &str, reason: &str) -> Result<(), AppError> {
        let now = self.clock.now_ms();
        let mut changed = false;
        let job = self
            .update_with_retry(job_id_or_arn, |job| {
                match terminate_action(job) {
                    TerminateAction::AlreadyFinished => {
                        changed = false;
                        Ok(false)
                    }
                    TerminateAction::FailNow => {
                        job.transition(JobStatus::Failed, Some(reason.to_owned()), now)
                            .map_err(|e| AppError::Conflict(e.to_string()))?;
                        job.is_terminated = true;
                        changed = true;
                        Ok(true)
                    }
                    // A dispatched job: mark it, and the scheduling loop stops its attempt. The
                    // job becomes FAILED, with this reason, when SageMaker reports it stopped, so
                    // its capacity is released only once the instances really are free.
                    TerminateAction::StopAttempt { .. } => {
                        if job.is_terminated {
                            changed = false;
                            return Ok(false);
                        }
                        job.is_terminated = true;
                        job.termination_reason = Some(reason.to_owned());
                        job.updated_at = now;
                        changed = true;
                        Ok(true)
                    }
                }
            })
            .await?;
        if changed {
            tracing::info!(job_id = %job.job_id, reason, status = %job.status, "job terminated");
            self.publish_status(&job).await;
        }
        Ok(())
    }

    /// `TerminateServiceJobs`: terminates each job; jobs that do not exist count as successful
    /// (Batch's documented behaviour). One failure does not stop the others.
    pub async fn terminate_jobs(&self, ids: &[String], reason: &str) -> BulkTerminate {
        let mut out = BulkTerminate::default();
        for id in ids {
            match self.terminate_job(id, reason).await {
                Ok(()) | Err(AppError::NotFound(_)) => out.successful.push(id.clone()),
                Err(e) => out.errors.push(TerminateFailure {
                    job: id.clone(),
                    code: if e.is_client_error() {
                        "ClientException"
                    } else {
                        "ServerException"
                    },
                    message: if e.is_client_error() {
                        e.to_string()
                    } else {
                        tracing::error!(job = %id, error = %e, "bulk terminate failed");
                        "Failed to read job state. Please retry this job.".to_owned()
                    },
                }),
            }
        }
        out
    }

    /// `UpdateServiceJob`: sets the job's `schedulingPriority`. Finished jobs are refused.
    pub async fn update_priority(
        &self,
        id_or_arn: &str,
        priority: u32,
    ) -> Result<ServiceJob, AppError> {
        let now = self.clock.now_ms();
        self.update_with_retry(id_or_arn, |job| {
            if job.status.is_terminal() {
                return Err(AppError::Invalid(format!(
                    "Service job {} is {} and its schedulingPriority can no longer be updated",
                    job.job_id, job.status
                )));
            }
            if job.scheduling_priority == Some(priority) {
                return Ok(false);
            }
            job.scheduling_priority = Some(priority);
            job.updated_at = now;
            Ok(true)
        })
        .await
    }

    /// The first `limit` RUNNABLE jobs of each share of `queue` (of the whole queue when it is
    /// FIFO), merged in dispatch order. Read from the runnable index, so the cost grows with
    /// shares × `limit`, never with the backlog; the first `limit` of the result are exactly the
    /// queue's first `limit`, and every share with a RUNNABLE job has its first one in it.
    async fn front_runnable(
        &self,
        queue: &str,
        ordering: QueueOrdering,
        limit: usize,
    ) -> Result<Vec<ServiceJob>, AppError> {
        let mut jobs = Vec::new();
        if ordering == QueueOrdering::Fifo {
            jobs = self.store.runnable_jobs(queue, "", limit).await?;
        } else {
            for share in self.store.runnable_shares(queue).await? {
                let head = self.store.runnable_jobs(queue, &share, limit).await?;
                jobs.extend(head);
            }
        }
        let mut jobs: Vec<ServiceJob> = jobs.into_iter().map(|v| v.value).collect();
        jobs.sort_by(|a, b| runnable_rank(a).cmp(&runnable_rank(b)));
        Ok(jobs)
    }

    /// `GetJobQueueSnapshot`: the front of the queue in dispatch order and the capacity its
    /// dispatched jobs hold.
    pub async fn queue_snapshot(&self, name_or_arn: &str) -> Result<QueueSnapshot, AppError> {
        let queue = self.load_queue(name_or_arn).await?;
        let ordering = self.ordering_of(&queue).await?;
        let name = queue.job_queue_name;
        let of_status = |status| JobQuery {
            queue: Some(name.clone()),
            status: Some(status),
            ..JobQuery::default()
        };

        let runnable = self
            .front_runnable(
                &name,
                ordering,
                trainyard_domain::limits::SNAPSHOT_FRONT_OF_QUEUE,
            )
            .await?;
        let front_of_queue = runnable
            .iter()
            .take(trainyard_domain::limits::SNAPSHOT_FRONT_OF_QUEUE)
            .map(position)
            .collect();
        let front_of_quota_shares = (ordering == QueueOrdering::QuotaShare).then(|| {
            let mut front = BTreeMap::new();
            for job in &runnable {
                if let Some(share) = &job.quota_share_name {
                    front.entry(share.clone()).or_insert_with(|| position(job));
                }
            }
            front
        });

        let mut total = CapacityUsage::new();
        let mut per_share: BTreeMap<String, CapacityUsage> = BTreeMap::new();
        let mut per_quota_share: BTreeMap<String, CapacityUsage> = BTreeMap::new();
        for status in [
            JobStatus::Scheduled,
            JobStatus::Starting,
            JobStatus::Running,
        ] {
            for job in self.scan_jobs(of_status(status), SCAN_CAP).await? {
                add_usage(&mut total, &job);
                if let Some(share) = &job.share_identifier {
                    add_usage(per_share.entry(share.clone()).or_default(), &job);
                }
                if let Some(share) = &job.quota_share_name {
                    add_usage(per_quota_share.entry(share.clone()).or_default(), &job);
                }
            }
        }
        let fairshare = (ordering == QueueOrdering::FairShare).then(|| {
            let active = per_share.len() as u64;
            let mut top = ranked(per_share);
            top.truncate(TOP_SHARES);
            (active, top)
        });
        let quota_shares = (ordering == QueueOrdering::QuotaShare).then(|| ranked(per_quota_share));

        Ok(QueueSnapshot {
            job_queue: name,
            ordering,
            front_of_queue,
            front_of_quota_shares,
            total_capacity_usage: total,
            fairshare,
            quota_shares,
            at_ms: self.clock.now_ms(),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::memory::MemoryStore;
    use crate::ports::{Document, NoEvents, Resource, Write};
    use crate::testing::{ManualClock, SequentialIds};
    use trainyard_domain::arn::ArnContext;
    use trainyard_domain::payload::TrainingRequest;

    /// The memory store, except that the next `conflicts` job updates fail as if another writer
    /// got there first.
    #[derive(Default)]
    struct RacingStore {
        inner: MemoryStore,
        conflicts: AtomicUsize,
    }

    impl Store for RacingStore {
        fn insert_job(
            &self,
            job: &ServiceJob,
            token: Option<&ClientTokenRecord>,
        ) -> impl Future<Output = Result<InsertJob, StoreError>> + Send {
            self.inner.insert_job(job, token)
        }
        fn get_job(
            &self,
            job_id: &str,
        ) -> impl Future<Output = Result<Option<Versioned<ServiceJob>>, StoreError>> + Send
        {
            self.inner.get_job(job_id)
        }
        async fn update_job(&self, job: &ServiceJob, expected: u64) -> Result<u64, StoreError> {
            let injected = self
                .conflicts
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
            if injected.is_ok() {
                return Err(StoreError::Conflict);
            }
            self.inner.update_job(job, expected).await
        }
        fn list_jobs(
            &self,
            query: &JobQuery,
        ) -> impl Future<Output = Result<Page<Versioned<ServiceJob>>, StoreError>> + Send {
            self.inner.list_jobs(query)
        }
        fn create_resource<R: Resource>(
            &self,
            resource: &R,
        ) -> impl Future<Output = Result<(), StoreError>> + Send {
            self.inner.create_resource(resource)
        }
        fn get_resource<R: Resource>(
            &self,
            key: &str,
        ) -> impl Future<Output = Result<Option<Versioned<R>>, StoreError>> + Send {
            self.inner.get_resource(key)
        }
        fn list_resources<R: Resource>(
            &self,
        ) -> impl Future<Output = Result<Vec<Versioned<R>>, StoreError>> + Send {
            self.inner.list_resources()
        }
        fn update_resource<R: Resource>(
            &self,
            resource: &R,
            expected_version: u64,
        ) -> impl Future<Output = Result<u64, StoreError>> + Send {
            self.inner.update_resource(resource, expected_version)
        }
        fn delete_resource<R: Resource>(
            &self,
            key: &str,
            expected_version: u64,
        ) -> impl Future<Output = Result<(), StoreError>> + Send {
            self.inner.delete_resource::<R>(key, expected_version)
        }
        fn get_document<D: Document>(
            &self,
            key: &str,
        ) -> impl Future<Output = Result<Option<Versioned<D>>, StoreError>> + Send {
            self.inner.get_document(key)
        }
        fn list_documents<D: Document>(
            &self,
        ) -> impl Future<Output = Result<Vec<Versioned<D>>, StoreError>> + Send {
            self.inner.list_documents()
        }
        fn commit(&self, writes: &[Write]) -> impl Future<Output = Result<(), StoreError>> + Send {
            self.inner.commit(writes)
        }
        fn runnable_jobs(
            &self,
            queue: &str,
            share: &str,
            limit: usize,
        ) -> impl Future<Output = Result<Vec<Versioned<ServiceJob>>, StoreError>> + Send {
            self.inner.runnable_jobs(queue, share, limit)
        }
        fn runnable_shares(
            &self,
            queue: &str,
        ) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send {
            self.inner.runnable_shares(queue)
        }
        fn dispatched_jobs(
            &self,
        ) -> impl Future<Output = Result<Vec<Versioned<ServiceJob>>, StoreError>> + Send {
            self.inner.dispatched_jobs()
        }
    }

    async fn racing_service(status: JobStatus, conflicts: usize) -> Service<RacingStore, NoEvents> {
        let service = Service::new(
            RacingStore::default(),
            NoEvents,
            Arc::new(ManualClock::new(1_000)),
            Arc::new(SequentialIds::default()),
            ArnContext::default(),
        );
        let mut stored = job("j", None, 10, None);
        stored.status = status;
        service.store.insert_job(&stored, None).await.unwrap();
        service.store.conflicts.store(conflicts, Ordering::SeqCst);
        service
    }

    #[tokio::test]
    async fn terminate_and_update_retry_one_conflict_and_then_give_up() {
        // (case, conflicts injected, succeeds)
        let cases = [
            ("no race", 0, true),
            ("one lost race is retried", 1, true),
            ("two lost races give up", 2, false),
        ];
        for (case, conflicts, succeeds) in cases {
            let service = racing_service(JobStatus::Runnable, conflicts).await;
            let result = service.terminate_job("j", "stop").await;
            assert_eq!(result.is_ok(), succeeds, "{case}: {result:?}");
            if let Err(e) = result {
                assert!(
                    !e.is_client_error(),
                    "{case}: a lost race is the server's problem"
                );
            }
            let job = service.describe_job("j").await.unwrap();
            assert_eq!(job.status == JobStatus::Failed, succeeds, "{case}");
            assert_eq!(job.is_terminated, succeeds, "{case}");

            let service = racing_service(JobStatus::Runnable, conflicts).await;
            let result = service.update_priority("j", 7).await;
            assert_eq!(result.is_ok(), succeeds, "{case}: {result:?}");
            let job = service.describe_job("j").await.unwrap();
            assert_eq!(job.scheduling_priority == Some(7), succeeds, "{case}");
        }
    }

    #[tokio::test]
    async fn accepting_skips_a_job_someone_else_just_changed() {
        let service = racing_service(JobStatus::Submitted, 1).await;
        // The job's queue "q" does not exist either way; what matters is the conflict.
        assert_eq!(service.accept_submitted(10, 0).await.unwrap(), 0);
        assert_eq!(
            service.describe_job("j").await.unwrap().status,
            JobStatus::Submitted
        );
        assert_eq!(service.accept_submitted(10, 0).await.unwrap(), 1);
        let job = service.describe_job("j").await.unwrap();
        assert_eq!(job.status, JobStatus::Failed);
        assert!(job.status_reason.unwrap().contains("no longer exists"));
    }

    fn job(
        id: &str,
        priority: Option<u32>,
        created_at: i64,
        runnable_at: Option<i64>,
    ) -> ServiceJob {
        ServiceJob {
            job_id: id.into(),
            job_name: id.into(),
            job_queue: "q".into(),
            service_job_type: ServiceJobType::SagemakerTraining,
            service_request_payload: "{}".into(),
            training: TrainingRequest::single("t", "ml.g5.xlarge", 1),
            share_identifier: None,
            quota_share_name: None,
            scheduling_priority: priority,
            retry_strategy: None,
            timeout_config: None,
            preemption_configuration: None,
            tags: Tags::new(),
            client_token: None,
            status: JobStatus::Runnable,
            status_reason: None,
            is_terminated: false,
            termination_reason: None,
            not_before: None,
            attempts: Vec::new(),
            preemption_summary: None,
            created_at,
            runnable_at,
            scheduled_at: None,
            started_at: None,
            stopped_at: None,
            updated_at: created_at,
        }
    }

    /// The jobs' ids in line, submitted to a queue of `ordering` (so with a share, or not).
    fn order(ordering: QueueOrdering, mut jobs: Vec<ServiceJob>) -> Vec<String> {
        for job in &mut jobs {
            match ordering {
                QueueOrdering::Fifo => {}
                QueueOrdering::FairShare => job.share_identifier = Some("s".into()),
                QueueOrdering::QuotaShare => job.quota_share_name = Some("s".into()),
            }
        }
        jobs.sort_by(|a, b| runnable_rank(a).cmp(&runnable_rank(b)));
        jobs.into_iter().map(|j| j.job_id).collect()
    }

    #[test]
    fn fifo_ignores_priority_and_breaks_ties_on_the_id() {
        let jobs = vec![
            job("c", Some(9), 30, Some(30)),
            job("b", None, 10, Some(20)),
            job("a", None, 10, Some(20)),
            job("d", None, 5, None),
        ];
        assert_eq!(order(QueueOrdering::Fifo, jobs), ["d", "a", "b", "c"]);
    }

    #[test]
    fn jobs_accepted_in_one_batch_keep_their_submission_order() {
        // Ids that sort against submission order, all accepted at the same instant.
        let jobs: Vec<ServiceJob> = ["z", "y", "x"]
            .into_iter()
            .zip([10, 20, 30])
            .map(|(id, created_at)| {
                let mut j = job(id, None, created_at, None);
                j.status = JobStatus::Submitted;
                j.transition(JobStatus::Runnable, None, 500).unwrap();
                j
            })
            .collect();
        assert_eq!(order(QueueOrdering::Fifo, jobs), ["z", "y", "x"]);
    }

    #[test]
    fn policy_queues_put_higher_priority_first_then_age() {
        let jobs = vec![
            job("old-low", Some(1), 10, Some(10)),
            job("new-high", Some(50), 40, Some(40)),
            job("old-high", Some(50), 20, Some(20)),
            job("unset", None, 0, Some(0)),
        ];
        for ordering in [QueueOrdering::FairShare, QueueOrdering::QuotaShare] {
            assert_eq!(
                order(ordering, jobs.clone()),
                ["old-high", "new-high", "old-low", "unset"]
            );
        }
    }

    #[tokio::test]
    async fn the_front_read_from_each_shares_head_equals_sorting_the_whole_backlog() {
        let service = Service::new(
            MemoryStore::default(),
            NoEvents,
            Arc::new(ManualClock::new(1_000)),
            Arc::new(SequentialIds::default()),
            ArnContext::default(),
        );
        // 600 RUNNABLE jobs in a fair-share queue over 4 shares, and the same 600 without shares
        // in a FIFO queue, with repeated priorities and times so that ties are broken by the id;
        // more than `limit` in every share.
        let mut shared = Vec::new();
        let mut fifo = Vec::new();
        for i in 0..600_i64 {
            let mut j = job(
                &format!("job-{:03}", (i * 37) % 600),
                Some(u32::try_from(i % 3).unwrap()),
                i / 7,
                Some(i / 5),
            );
            let mut plain = j.clone();
            plain.job_queue = "fifo".into();
            plain.job_id = format!("fifo-{}", j.job_id);
            j.share_identifier = Some(["a", "b", "c", "d"][(i % 4) as usize].to_owned());
            for j in [&j, &plain] {
                service.store.insert_job(j, None).await.unwrap();
            }
            shared.push(j);
            fifo.push(plain);
        }
        for (queue, ordering, limit, all) in [
            ("q", QueueOrdering::FairShare, 100, &shared),
            ("q", QueueOrdering::FairShare, 7, &shared),
            ("fifo", QueueOrdering::Fifo, 100, &fifo),
        ] {
            let front = service
                .front_runnable(queue, ordering, limit)
                .await
                .unwrap();
            let got: Vec<String> = front.iter().take(limit).map(|j| j.job_id.clone()).collect();
            let mut want = order(ordering, all.clone());
            want.truncate(limit);
            assert_eq!(got, want, "{ordering:?}, limit {limit}");
            if ordering == QueueOrdering::FairShare {
                // Every share's first job is in what was read.
                let shares: std::collections::BTreeSet<Option<String>> =
                    front.iter().map(|j| j.share_identifier.clone()).collect();
                assert_eq!(shares.len(), 4, "{ordering:?}, limit {limit}");
            }
        }
    }

    #[test]
    fn ranking_is_by_total_instances_then_name() {
        let usage = |n: u64| CapacityUsage::from([("ml.g5.xlarge".to_owned(), n)]);
        let groups = BTreeMap::from([
            ("b".to_owned(), usage(2)),
            ("a".to_owned(), usage(2)),
            ("c".to_owned(), usage(5)),
        ]);
        let names: Vec<String> = ranked(groups).into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["c", "a", "b"]);
    }

    #[test]
    fn the_request_hash_ignores_the_token_but_not_the_request() {
        let cmd = SubmitJob {
            job_name: "j".into(),
            job_queue: "q".into(),
            service_job_type: ServiceJobType::SagemakerTraining,
            service_request_payload: "{}".into(),
            share_identifier: None,
            quota_share_name: None,
            scheduling_priority: None,
            retry_strategy: None,
            timeout_config: None,
            preemption_configuration: None,
            tags: Tags::new(),
            client_token: Some("t1".into()),
        };
        let other_token = SubmitJob {
            client_token: Some("t2".into()),
            job_queue: "arn-or-name".into(),
            ..cmd.clone()
        };
        assert_eq!(request_hash("q", &cmd), request_hash("q", &other_token));
        let other_priority = SubmitJob {
            scheduling_priority: Some(1),
            ..cmd.clone()
        };
        assert_ne!(request_hash("q", &cmd), request_hash("q", &other_priority));
        assert_ne!(request_hash("q", &cmd), request_hash("other", &cmd));
        assert_eq!(request_hash("q", &cmd).len(), 64);
    }
}
