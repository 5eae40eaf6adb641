//! Quota shares: virtual queues inside a quota-share job queue, each with capacity per instance
//! type and a rule for lending and borrowing. Create, describe, list, update and delete with
//! Batch's rules (reference §2.9, §4.3). A share is addressed by its ARN,
//! `…:job-queue/{queue}/quota-share/{name}`.

use trainyard_domain::arn::{QuotaShareId, ResourceKind};
use trainyard_domain::environment::ServiceEnvironment;
use trainyard_domain::limits::{CAPACITY_LIMITS, MAX_QUOTA_SHARES_PER_QUEUE};
use trainyard_domain::policy::SchedulingPolicy;
use trainyard_domain::queue::JobQueue;
use trainyard_domain::quota_share::{
    QuotaShare, QuotaShareCapacityLimit, QuotaSharePreemptionConfiguration,
    ResourceSharingConfiguration, SharingStrategy,
};
use trainyard_domain::{ResourceStatus, State, Tags};

use super::Service;
use super::environments::{created, not_found, written};
use crate::error::AppError;
use crate::ports::{ConfigStore, EventSink, JobStore, Versioned, quota_share_key};

/// Reason given to jobs terminated because their quota share was deleted.
pub const QUOTA_SHARE_DELETED_REASON: &str = "Quota share deleted";

/// What `CreateQuotaShare` asks for, after the API decoded and range-checked it.
#[derive(Debug, Clone, PartialEq)]
pub struct NewQuotaShare {
    /// Name (already checked against Batch's naming rule).
    pub name: String,
    /// The job queue, by name or ARN.
    pub job_queue: String,
    /// 1–5 instance-type limits.
    pub capacity_limits: Vec<QuotaShareCapacityLimit>,
    /// Lending and borrowing.
    pub resource_sharing_configuration: ResourceSharingConfiguration,
    /// In-share preemption.
    pub preemption_configuration: QuotaSharePreemptionConfiguration,
    /// Initial state; Batch's default is ENABLED.
    pub state: State,
    /// Tags.
    pub tags: Tags,
}

/// What `UpdateQuotaShare` changes; `None` leaves a field as it is.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct QuotaShareUpdate {
    /// New limits (replacing the old ones).
    pub capacity_limits: Option<Vec<QuotaShareCapacityLimit>>,
    /// New lending and borrowing rule.
    pub resource_sharing_configuration: Option<ResourceSharingConfiguration>,
    /// New preemption setting.
    pub preemption_configuration: Option<QuotaSharePreemptionConfiguration>,
    /// New state.
    pub state: Option<State>,
}

/// `borrowLimit` is a percentage of the share's own capacity, -1 meaning unlimited, and only
/// a share that borrows can have one.
pub fn check_sharing(config: &ResourceSharingConfiguration) -> Result<(), AppError> {
    let Some(limit) = config.borrow_limit else {
        return Ok(());
    };
    if config.strategy != SharingStrategy::LendAndBorrow {
        return Err(AppError::Invalid(
            "resourceSharingConfiguration.borrowLimit applies only to the LEND_AND_BORROW \
             strategy; remove it or change the strategy"
                .into(),
        ));
    }
    if limit < -1 {
        return Err(AppError::Invalid(format!(
            "resourceSharingConfiguration.borrowLimit must be -1 (unlimited) or a percentage of \
             at least 0, got {limit}"
        )));
    }
    Ok(())
}

/// A share's limits: 1–5, each an instance type the queue's environment has a limit for, none
/// twice.
fn check_share_limits(
    limits: &[QuotaShareCapacityLimit],
    environment: &ServiceEnvironment,
) -> Result<(), AppError> {
    if !CAPACITY_LIMITS.contains(&limits.len()) {
        return Err(AppError::Invalid(format!(
            "capacityLimits must have between {} and {} entries, got {}",
            CAPACITY_LIMITS.start(),
            CAPACITY_LIMITS.end(),
            limits.len()
        )));
    }
    let available: Vec<&str> = environment
        .capacity_limits
        .iter()
        .map(|l| l.capacity_unit.as_str())
        .collect();
    for (i, limit) in limits.iter().enumerate() {
        let unit = limit.capacity_unit.as_str();
        if limits[..i].iter().any(|l| l.capacity_unit == unit) {
            return Err(AppError::Invalid(format!(
                "capacityLimits[{i}].capacityUnit {unit:?} appears twice: give each instance \
                 type one limit"
            )));
        }
        if !available.contains(&unit) {
            return Err(AppError::Invalid(format!(
                "capacityLimits[{i}].capacityUnit {unit:?} is not limited by service \
                 environment {:?}, which has limits for {}; use one of those or add it to the \
                 environment first",
                environment.service_environment_name,
                available.join(", ")
            )));
        }
    }
    Ok(())
}

impl<S: JobStore + ConfigStore, E: EventSink> Service<S, E> {
    /// Resolves a quota share ARN to its identity.
    fn quota_share_id(&self, arn: &str) -> Result<QuotaShareId, AppError> {
        self.arns
            .resolve_quota_share(arn)
            .map_err(|e| AppError::Invalid(e.to_string()))
    }

    /// Loads a quota share by ARN; an unknown one is a client error naming it.
    async fn load_quota_share(&self, arn: &str) -> Result<Versioned<QuotaShare>, AppError> {
        let id = self.quota_share_id(arn)?;
        self.store
            .get_resource::<QuotaShare>(&quota_share_key(&id.queue, &id.name))
            .await?
            .ok_or_else(|| {
                AppError::NotFound(format!(
                    "quota share {arn:?} does not exist: list the queue's quota shares with \
                     ListQuotaShares"
                ))
            })
    }

    /// The environment a quota-share queue feeds, or why shares cannot be attached to it.
    async fn quota_environment(&self, queue: &JobQueue) -> Result<ServiceEnvironment, AppError> {
        let name = queue.job_queue_name.as_str();
        let policy = match &queue.scheduling_policy {
            Some(p) => self.store.get_resource::<SchedulingPolicy>(p).await?,
            None => None,
        };
        if policy.is_none_or(|p| p.value.quota_share_policy.is_none()) {
            return Err(AppError::Invalid(format!(
                "job queue {name:?} has no quota-share scheduling policy; quota shares belong \
                 to queues created with a quotaSharePolicy policy"
            )));
        }
        let Some(env) = queue.service_environment() else {
            return Err(AppError::Invalid(format!(
                "job queue {name:?} has no service environment; associate one with \
                 UpdateJobQueue first"
            )));
        };
        Ok(self
            .store
            .get_resource::<ServiceEnvironment>(env)
            .await?
            .ok_or_else(|| not_found(ResourceKind::ServiceEnvironment, env))?
            .value)
    }

    /// `CreateQuotaShare`.
    pub async fn create_quota_share(&self, new: NewQuotaShare) -> Result<QuotaShare, AppError> {
        let queue = self.load_resource::<JobQueue>(&new.job_queue).await?.value;
        let environment = self.quota_environment(&queue).await?;
        check_share_limits(&new.capacity_limits, &environment)?;
        check_sharing(&new.resource_sharing_configuration)?;
        let siblings: Vec<_> = self
            .store
            .list_resources::<QuotaShare>()
            .await?
            .into_iter()
            .filter(|s| s.value.job_queue == queue.job_queue_name)
            .collect();
        if siblings
            .iter()
            .any(|s| s.value.quota_share_name == new.name)
        {
            return Err(AppError::AlreadyExists);
        }
        if siblings.len() >= MAX_QUOTA_SHARES_PER_QUEUE {
            return Err(AppError::Invalid(format!(
                "job queue {:?} already has {MAX_QUOTA_SHARES_PER_QUEUE} quota shares, the \
                 most a queue may have; delete one first",
                queue.job_queue_name
            )));
        }
        let share = QuotaShare {
            quota_share_name: new.name,
            job_queue: queue.job_queue_name,
            capacity_limits: new.capacity_limits,
            resource_sharing_configuration: new.resource_sharing_configuration,
            preemption_configuration: new.preemption_configuration,
            state: new.state,
            status: ResourceStatus::Valid,
            tags: new.tags,
            created_at: self.clock.now_ms(),
        };
        created(self.store.create_resource(&share).await)?;
        Ok(share)
    }

    /// `DescribeQuotaShare`.
    pub async fn describe_quota_share(&self, arn: &str) -> Result<QuotaShare, AppError> {
        Ok(self.load_quota_share(arn).await?.value)
    }

    /// `ListQuotaShares`: the shares of one queue, by name.
    pub async fn list_quota_shares(&self, job_queue: &str) -> Result<Vec<QuotaShare>, AppError> {
        let queue = self.load_resource::<JobQueue>(job_queue).await?.value;
        let mut shares: Vec<QuotaShare> = self
            .store
            .list_resources::<QuotaShare>()
            .await?
            .into_iter()
            .map(|s| s.value)
            .filter(|s| s.job_queue == queue.job_queue_name)
            .collect();
        // Store order is by `queue/name`; sorting by name alone keeps paging by name exact
        // whatever a store does with the separator.
        shares.sort_by(|a, b| a.quota_share_name.cmp(&b.quota_share_name));
        Ok(shares)
    }

    /// `UpdateQuotaShare`.
    pub async fn update_quota_share(
        &self,
        arn: &str,
        update: QuotaShareUpdate,
    ) -> Result<QuotaShare, AppError> {
        let Versioned {
            value: mut share,
            version,
        } = self.load_quota_share(arn).await?;
        if let Some(limits) = update.capacity_limits {
            let queue = self
                .load_resource::<JobQueue>(&share.job_queue)
                .await?
                .value;
            let environment = self.quota_environment(&queue).await?;
            check_share_limits(&limits, &environment)?;
            share.capacity_limits = limits;
        }
        if let Some(config) = update.resource_sharing_configuration {
            check_sharing(&config)?;
            share.resource_sharing_configuration = config;
        }
        if let Some(config) = update.preemption_configuration {
            share.preemption_configuration = config;
        }
        if let Some(state) = update.state {
            share.state = state;
        }
        let key = quota_share_key(&share.job_queue, &share.quota_share_name);
        written(
            ResourceKind::QuotaShare,
            &key,
            self.store.update_resource(&share, version).await,
        )?;
        Ok(share)
    }

    /// `DeleteQuotaShare`: only when DISABLED; terminates the share's unfinished jobs first.
    pub async fn delete_quota_share(&self, arn: &str) -> Result<(), AppError> {
        let share = self.load_quota_share(arn).await?.value;
        if share.state == State::Enabled {
            return Err(AppError::Conflict(format!(
                "quota share {arn:?} is ENABLED: set its state to DISABLED with \
                 UpdateQuotaShare before deleting it"
            )));
        }
        self.terminate_unfinished_jobs(
            &share.job_queue,
            Some(&share.quota_share_name),
            QUOTA_SHARE_DELETED_REASON,
        )
        .await?;
        let current = self.load_quota_share(arn).await?;
        let key = quota_share_key(&share.job_queue, &share.quota_share_name);
        written(
            ResourceKind::QuotaShare,
            &key,
            self.store
                .delete_resource::<QuotaShare>(&key, current.version)
                .await,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn borrow_limits_belong_to_borrowers_and_are_minus_one_or_a_percentage() {
        let cases = [
            ("no limit is fine", SharingStrategy::Reserve, None, None),
            (
                "unlimited borrowing",
                SharingStrategy::LendAndBorrow,
                Some(-1),
                None,
            ),
            (
                "double the quota",
                SharingStrategy::LendAndBorrow,
                Some(200),
                None,
            ),
            (
                "zero borrowing",
                SharingStrategy::LendAndBorrow,
                Some(0),
                None,
            ),
            (
                "below -1",
                SharingStrategy::LendAndBorrow,
                Some(-2),
                Some("got -2"),
            ),
            (
                "a lender cannot borrow",
                SharingStrategy::Lend,
                Some(10),
                Some("LEND_AND_BORROW"),
            ),
        ];
        for (story, strategy, borrow_limit, expected) in cases {
            let result = check_sharing(&ResourceSharingConfiguration {
                strategy,
                borrow_limit,
            });
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
