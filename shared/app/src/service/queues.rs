//! Job queues of type `SAGEMAKER_TRAINING`: create, describe, update and delete with Batch's
//! rules (reference §2.6): one service environment per queue, a scheduling policy that can be
//! replaced by one of its kind but never added to a FIFO queue nor removed, quota-share queues
//! on a quota-managed environment of their own, and deletion that terminates the queue's jobs.

use std::collections::BTreeSet;

use trainyard_domain::arn::ResourceKind;
use trainyard_domain::environment::ServiceEnvironment;
use trainyard_domain::job::JobStatus;
use trainyard_domain::limits::{MAX_ENVIRONMENTS_PER_QUEUE, MAX_JOB_QUEUES};
use trainyard_domain::policy::SchedulingPolicy;
use trainyard_domain::queue::{
    JobQueue, JobQueueType, JobStateTimeLimitAction, ServiceEnvironmentOrder, TimeLimitAction,
    check_queue_tags,
};
use trainyard_domain::quota_share::QuotaShare;
use trainyard_domain::{ResourceStatus, State, Tags};

use super::Service;
use super::environments::{created, not_found, written};
use crate::error::AppError;
use crate::ports::{ConfigStore, EventSink, JobQuery, JobStore, Resource, Versioned};

/// The status reason Batch reports for a healthy queue.
pub const HEALTHY: &str = "JobQueue Healthy";

/// Reason given to jobs terminated because their queue was deleted.
pub const QUEUE_DELETED_REASON: &str = "Job queue deleted";

/// Jobs read per page while terminating a queue's jobs.
const TERMINATE_PAGE: usize = 100;

/// What `CreateJobQueue` asks for, after the API decoded and range-checked it.
#[derive(Debug, Clone, PartialEq)]
pub struct NewJobQueue {
    /// Name (already checked against Batch's naming rule).
    pub name: String,
    /// Initial state; Batch's default is ENABLED.
    pub state: State,
    /// 0–1000.
    pub priority: u32,
    /// Scheduling policy name or ARN; none means FIFO.
    pub scheduling_policy: Option<String>,
    /// Exactly one entry; environments by name or ARN.
    pub service_environment_order: Vec<ServiceEnvironmentOrder>,
    /// Time limits for RUNNABLE jobs (ranges already checked).
    pub job_state_time_limit_actions: Vec<JobStateTimeLimitAction>,
    /// Tags.
    pub tags: Tags,
}

/// What `UpdateJobQueue` changes; `None` leaves a field as it is.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct JobQueueUpdate {
    /// New state.
    pub state: Option<State>,
    /// New priority (0–1000).
    pub priority: Option<u32>,
    /// Replacement scheduling policy (name or ARN); an empty string asks for removal, which
    /// Batch refuses.
    pub scheduling_policy: Option<String>,
    /// New environment order: one entry, or none to disassociate the environment.
    pub service_environment_order: Option<Vec<ServiceEnvironmentOrder>>,
    /// New time limits (replacing the old ones).
    pub job_state_time_limit_actions: Option<Vec<JobStateTimeLimitAction>>,
}

/// Service queues act on RUNNABLE jobs by terminating them; CANCEL is the container-queue
/// action, and a reason is what the action matches, so it cannot be empty.
fn check_time_limit_actions(actions: &[JobStateTimeLimitAction]) -> Result<(), AppError> {
    for (i, action) in actions.iter().enumerate() {
        if action.action == TimeLimitAction::Cancel {
            return Err(AppError::Invalid(format!(
                "jobStateTimeLimitActions[{i}].action CANCEL is for container job queues; \
                 SAGEMAKER_TRAINING queues support only TERMINATE"
            )));
        }
        if action.reason.trim().is_empty() {
            return Err(AppError::Invalid(format!(
                "jobStateTimeLimitActions[{i}].reason must not be empty: give the status reason \
                 it applies to, such as CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY"
            )));
        }
    }
    Ok(())
}

fn is_quota_policy(policy: Option<&SchedulingPolicy>) -> bool {
    policy.is_some_and(|p| p.quota_share_policy.is_some())
}

fn policy_kind(policy: &SchedulingPolicy) -> &'static str {
    if policy.quota_share_policy.is_some() {
        "quota-share"
    } else {
        "fair-share"
    }
}

impl<S: JobStore + ConfigStore, E: EventSink> Service<S, E> {
    /// Resolves the environments of a `serviceEnvironmentOrder` to names and checks they exist.
    async fn resolve_environment_order(
        &self,
        order: Vec<ServiceEnvironmentOrder>,
    ) -> Result<Vec<ServiceEnvironmentOrder>, AppError> {
        if order.len() > MAX_ENVIRONMENTS_PER_QUEUE {
            return Err(AppError::Invalid(format!(
                "serviceEnvironmentOrder may have at most {MAX_ENVIRONMENTS_PER_QUEUE} entry, got \
                 {}: a job queue feeds one service environment",
                order.len()
            )));
        }
        let mut resolved = Vec::with_capacity(order.len());
        for entry in order {
            let env = self
                .load_resource::<ServiceEnvironment>(&entry.service_environment)
                .await?;
            resolved.push(ServiceEnvironmentOrder {
                order: entry.order,
                service_environment: env.value.service_environment_name,
            });
        }
        Ok(resolved)
    }

    /// A quota-share queue needs a quota-managed environment that no other queue uses, and no
    /// queue may join an environment a quota-share queue already uses (Batch: one job queue per
    /// quota-managed environment).
    async fn check_environment_assignment(
        &self,
        queue: &str,
        environment: Option<&str>,
        policy: Option<&SchedulingPolicy>,
    ) -> Result<(), AppError> {
        let Some(environment) = environment else {
            return Ok(());
        };
        let quota = is_quota_policy(policy);
        if quota {
            let env = self
                .store
                .get_resource::<ServiceEnvironment>(environment)
                .await?
                .ok_or_else(|| not_found(ResourceKind::ServiceEnvironment, environment))?;
            if !env.value.is_quota_managed() {
                return Err(AppError::Invalid(format!(
                    "a quota-share scheduling policy needs a quota-managed service environment \
                     (capacityLimits in instance types such as ml.m5.large), but {environment:?} \
                     counts NUM_INSTANCES"
                )));
            }
        }
        let queues = self.store.list_resources::<JobQueue>().await?;
        for other in queues.iter().map(|q| &q.value) {
            if other.job_queue_name == queue || other.service_environment() != Some(environment) {
                continue;
            }
            if quota {
                return Err(AppError::Invalid(format!(
                    "service environment {environment:?} already feeds job queue {:?}; a \
                     quota-share job queue needs a service environment of its own",
                    other.job_queue_name
                )));
            }
            let other_policy = match &other.scheduling_policy {
                Some(name) => self
                    .store
                    .get_resource::<SchedulingPolicy>(name)
                    .await?
                    .map(|v| v.value),
                None => None,
            };
            if is_quota_policy(other_policy.as_ref()) {
                return Err(AppError::Invalid(format!(
                    "service environment {environment:?} feeds quota-share job queue {:?}, which \
                     needs it to itself; choose another service environment",
                    other.job_queue_name
                )));
            }
        }
        Ok(())
    }

    /// `CreateJobQueue`.
    pub async fn create_job_queue(&self, new: NewJobQueue) -> Result<JobQueue, AppError> {
        if new.service_environment_order.len() != MAX_ENVIRONMENTS_PER_QUEUE {
            return Err(AppError::Invalid(format!(
                "serviceEnvironmentOrder must have exactly {MAX_ENVIRONMENTS_PER_QUEUE} entry, \
                 got {}: name the service environment this queue feeds",
                new.service_environment_order.len()
            )));
        }
        check_time_limit_actions(&new.job_state_time_limit_actions)?;
        check_queue_tags(&new.tags).map_err(AppError::Invalid)?;
        let existing = self.store.list_resources::<JobQueue>().await?;
        if existing.iter().any(|q| q.value.job_queue_name == new.name) {
            return Err(AppError::AlreadyExists);
        }
        if existing.len() >= MAX_JOB_QUEUES {
            return Err(AppError::Invalid(format!(
                "at most {MAX_JOB_QUEUES} job queues may exist; delete one before creating another"
            )));
        }
        let order = self
            .resolve_environment_order(new.service_environment_order)
            .await?;
        let policy = match &new.scheduling_policy {
            Some(reference) => Some(
                self.load_resource::<SchedulingPolicy>(reference)
                    .await?
                    .value,
            ),
            None => None,
        };
        let queue = JobQueue {
            job_queue_name: new.name,
            state: new.state,
            status: ResourceStatus::Valid,
            status_reason: Some(HEALTHY.into()),
            priority: new.priority,
            scheduling_policy: policy.as_ref().map(|p| p.name.clone()),
            service_environment_order: order,
            job_state_time_limit_actions: new.job_state_time_limit_actions,
            job_queue_type: JobQueueType::SagemakerTraining,
            tags: new.tags,
            created_at: self.clock.now_ms(),
        };
        self.check_environment_assignment(
            &queue.job_queue_name,
            queue.service_environment(),
            policy.as_ref(),
        )
        .await?;
        created(self.store.create_resource(&queue).await)?;
        Ok(queue)
    }

    /// `DescribeJobQueues`: the named queues (unknown ones are absent) or all, by name.
    pub async fn describe_job_queues(
        &self,
        references: Option<&[String]>,
    ) -> Result<Vec<JobQueue>, AppError> {
        let wanted = match references {
            Some(refs) => Some(
                refs.iter()
                    .map(|r| self.resolve_reference(ResourceKind::JobQueue, r))
                    .collect::<Result<BTreeSet<_>, _>>()?,
            ),
            None => None,
        };
        Ok(self
            .store
            .list_resources::<JobQueue>()
            .await?
            .into_iter()
            .map(|v| v.value)
            .filter(|q| {
                wanted
                    .as_ref()
                    .is_none_or(|w| w.contains(&q.job_queue_name))
            })
            .collect())
    }

    /// `UpdateJobQueue`.
    pub async fn update_job_queue(
        &self,
        reference: &str,
        update: JobQueueUpdate,
    ) -> Result<JobQueue, AppError> {
        let Versioned {
            value: mut queue,
            version,
        } = self.load_resource::<JobQueue>(reference).await?;
        let name = queue.job_queue_name.clone();
        let current_policy = match &queue.scheduling_policy {
            Some(p) => self
                .store
                .get_resource::<SchedulingPolicy>(p)
                .await?
                .map(|v| v.value),
            None => None,
        };
        let mut policy = current_policy.clone();
        if let Some(reference) = &update.scheduling_policy {
            if reference.is_empty() {
                return Err(AppError::Invalid(format!(
                    "job queue {name:?}'s scheduling policy can be replaced but not removed"
                )));
            }
            let replacement = self
                .load_resource::<SchedulingPolicy>(reference)
                .await?
                .value;
            match &current_policy {
                None => {
                    return Err(AppError::Invalid(format!(
                        "job queue {name:?} is a FIFO queue (created without a scheduling \
                         policy) and cannot have one added; create a new job queue with \
                         schedulingPolicyArn instead"
                    )));
                }
                Some(current) if policy_kind(current) != policy_kind(&replacement) => {
                    return Err(AppError::Invalid(format!(
                        "job queue {name:?} has a {} scheduling policy; it can be replaced only \
                         by another {} policy, and {:?} is {}",
                        policy_kind(current),
                        policy_kind(current),
                        replacement.name,
                        policy_kind(&replacement)
                    )));
                }
                Some(_) => {}
            }
            queue.scheduling_policy = Some(replacement.name.clone());
            policy = Some(replacement);
        }
        if let Some(order) = update.service_environment_order {
            queue.service_environment_order = self.resolve_environment_order(order).await?;
        }
        if let Some(actions) = update.job_state_time_limit_actions {
            check_time_limit_actions(&actions)?;
            queue.job_state_time_limit_actions = actions;
        }
        if let Some(state) = update.state {
            queue.state = state;
        }
        if let Some(priority) = update.priority {
            queue.priority = priority;
        }
        self.check_environment_assignment(&name, queue.service_environment(), policy.as_ref())
            .await?;
        written(
            ResourceKind::JobQueue,
            &name,
            self.store.update_resource(&queue, version).await,
        )?;
        Ok(queue)
    }

    /// `DeleteJobQueue`: only when DISABLED. Terminates the queue's unfinished jobs and deletes
    /// its quota shares, then the queue. Each step is idempotent, so a failed delete can simply
    /// be retried.
    pub async fn delete_job_queue(&self, reference: &str) -> Result<(), AppError> {
        let Versioned { value: queue, .. } = self.load_resource::<JobQueue>(reference).await?;
        let name = queue.job_queue_name.as_str();
        if queue.state == State::Enabled {
            return Err(AppError::Conflict(format!(
                "job queue {name:?} is ENABLED: set its state to DISABLED with UpdateJobQueue \
                 before deleting it"
            )));
        }
        self.terminate_unfinished_jobs(name, None, QUEUE_DELETED_REASON)
            .await?;
        for share in self.store.list_resources::<QuotaShare>().await? {
            if share.value.job_queue == name {
                let key = share.value.key();
                written(
                    ResourceKind::QuotaShare,
                    &key,
                    self.store
                        .delete_resource::<QuotaShare>(&key, share.version)
                        .await,
                )?;
            }
        }
        // Re-read: terminating jobs does not touch the queue, but another request might have.
        let current = self
            .store
            .get_resource::<JobQueue>(name)
            .await?
            .ok_or_else(|| not_found(ResourceKind::JobQueue, name))?;
        written(
            ResourceKind::JobQueue,
            name,
            self.store
                .delete_resource::<JobQueue>(name, current.version)
                .await,
        )
    }

    /// Terminates every job of `queue` (and of `quota_share`, when given) that has not
    /// finished. Returns how many termination requests were made.
    ///
    /// Reads status by status, so finished history is never scanned; the cursor moves strictly
    /// forward, so a job that stays in its status while being stopped is not revisited.
    pub(super) async fn terminate_unfinished_jobs(
        &self,
        queue: &str,
        quota_share: Option<&str>,
        reason: &str,
    ) -> Result<usize, AppError> {
        let mut terminated = 0;
        for status in JobStatus::ALL.into_iter().filter(|s| !s.is_terminal()) {
            let mut query = JobQuery {
                queue: Some(queue.to_owned()),
                status: Some(status),
                quota_share_name: quota_share.map(str::to_owned),
                limit: TERMINATE_PAGE,
                ..JobQuery::default()
            };
            loop {
                let page = self.store.list_jobs(&query).await?;
                for job in &page.items {
                    self.terminate_job(&job.value.job_id, reason).await?;
                    terminated += 1;
                }
                match page.next {
                    Some(cursor) => query.after = Some(cursor),
                    None => break,
                }
            }
        }
        Ok(terminated)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trainyard_domain::queue::TimeLimitState;

    fn action(reason: &str, action: TimeLimitAction) -> JobStateTimeLimitAction {
        JobStateTimeLimitAction {
            reason: reason.into(),
            state: TimeLimitState::Runnable,
            max_time_seconds: 600,
            action,
        }
    }

    #[test]
    fn service_queues_terminate_with_a_reason_and_never_cancel() {
        let cases = [
            (
                "terminate with a reason is fine",
                action("CAPACITY:X", TimeLimitAction::Terminate),
                None,
            ),
            (
                "cancel is for containers",
                action("CAPACITY:X", TimeLimitAction::Cancel),
                Some("TERMINATE"),
            ),
            (
                "a blank reason is refused",
                action("  ", TimeLimitAction::Terminate),
                Some("reason"),
            ),
        ];
        for (story, a, expected) in cases {
            let result = check_time_limit_actions(&[a]);
            match expected {
                None => assert!(result.is_ok(), "{story}"),
                Some(needle) => {
                    let message = result.expect_err(story).to_string();
                    assert!(message.contains(needle), "{story}: {message}");
                }
            }
        }
    }
}
