//! Service environments: the capacity pools job queues feed. Create, describe, update and
//! delete with Batch's rules (reference §2.5), plus the helpers the other configuration
//! use-cases share: resolving "a name or an ARN" and mapping store outcomes to client errors.

use std::collections::BTreeSet;

use trainyard_domain::arn::ResourceKind;
use trainyard_domain::environment::{
    CapacityLimit, NUM_INSTANCES, ServiceEnvironment, ServiceEnvironmentType,
};
use trainyard_domain::limits::{CAPACITY_LIMITS, MAX_SERVICE_ENVIRONMENTS};
use trainyard_domain::policy::SchedulingPolicy;
use trainyard_domain::queue::JobQueue;
use trainyard_domain::quota_share::QuotaShare;
use trainyard_domain::{ResourceStatus, State, Tags};

use super::Service;
use crate::error::AppError;
use crate::ports::{ConfigStore, EventSink, Resource, StoreError, Versioned};

/// What `CreateServiceEnvironment` asks for, after the API decoded and range-checked it.
#[derive(Debug, Clone, PartialEq)]
pub struct NewServiceEnvironment {
    /// Name (already checked against Batch's naming rule).
    pub name: String,
    /// Initial state; Batch's default is ENABLED.
    pub state: State,
    /// 1–5 limits, all `NUM_INSTANCES` or all instance types.
    pub capacity_limits: Vec<CapacityLimit>,
    /// Tags.
    pub tags: Tags,
}

/// What `UpdateServiceEnvironment` changes; `None` leaves a field as it is.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ServiceEnvironmentUpdate {
    /// New state.
    pub state: Option<State>,
    /// New capacity limits (replacing the old ones entirely).
    pub capacity_limits: Option<Vec<CapacityLimit>>,
}

/// Whether `unit` names a SageMaker instance type (`ml.` followed by something).
pub fn is_instance_type(unit: &str) -> bool {
    unit.strip_prefix("ml.")
        .is_some_and(|rest| !rest.is_empty() && !rest.contains(char::is_whitespace))
}

/// Checks an environment's `capacityLimits`: 1–5 entries, each unit `NUM_INSTANCES` or an
/// instance type, never both kinds (an environment is quota-managed or it is not), no unit
/// twice.
pub fn check_capacity_limits(limits: &[CapacityLimit]) -> Result<(), AppError> {
    if !CAPACITY_LIMITS.contains(&limits.len()) {
        return Err(AppError::Invalid(format!(
            "capacityLimits must have between {} and {} entries, got {}",
            CAPACITY_LIMITS.start(),
            CAPACITY_LIMITS.end(),
            limits.len()
        )));
    }
    let mut seen = BTreeSet::new();
    for (i, limit) in limits.iter().enumerate() {
        let unit = limit.capacity_unit.as_str();
        if unit != NUM_INSTANCES && !is_instance_type(unit) {
            return Err(AppError::Invalid(format!(
                "capacityLimits[{i}].capacityUnit must be {NUM_INSTANCES} or a SageMaker \
                 instance type such as ml.m5.large, got {unit:?}"
            )));
        }
        if !seen.insert(unit) {
            return Err(AppError::Invalid(format!(
                "capacityLimits[{i}].capacityUnit {unit:?} appears twice: give each unit one limit"
            )));
        }
    }
    let totals = limits.iter().filter(|l| l.is_total()).count();
    if totals > 0 && totals < limits.len() {
        return Err(AppError::Invalid(format!(
            "capacityLimits mixes {NUM_INSTANCES} with instance types: use {NUM_INSTANCES} alone, \
             or only instance types (a quota-managed environment)"
        )));
    }
    Ok(())
}

/// Maps a create's outcome: a taken key is Batch's "Object already exists".
pub(super) fn created(result: Result<(), StoreError>) -> Result<(), AppError> {
    match result {
        Err(StoreError::AlreadyExists) => Err(AppError::AlreadyExists),
        other => other.map_err(AppError::from),
    }
}

/// Maps an update's or delete's outcome: a version conflict means another request changed the
/// resource between our read and our write; the caller may simply retry.
pub(super) fn written<T>(
    kind: ResourceKind,
    name: &str,
    result: Result<T, StoreError>,
) -> Result<T, AppError> {
    match result {
        Err(StoreError::Conflict) => Err(AppError::Conflict(format!(
            "{} {name:?} was changed by another request at the same time; retry the request",
            kind.noun()
        ))),
        other => other.map_err(AppError::from),
    }
}

/// The "does not exist" error for a resource, with what to do about it.
pub(super) fn not_found(kind: ResourceKind, name: &str) -> AppError {
    AppError::NotFound(format!(
        "{} {name:?} does not exist: check the name or ARN, or create it first",
        kind.noun()
    ))
}

impl<S: ConfigStore, E: EventSink> Service<S, E> {
    /// Resolves a name or ARN of `kind` to its name; a malformed or foreign ARN is refused.
    pub(super) fn resolve_reference(
        &self,
        kind: ResourceKind,
        value: &str,
    ) -> Result<String, AppError> {
        self.arns
            .resolve(kind, value)
            .map_err(|e| AppError::Invalid(e.to_string()))
    }

    /// Loads a configuration resource (not a quota share) by name or ARN.
    pub(super) async fn load_resource<R: Resource>(
        &self,
        reference: &str,
    ) -> Result<Versioned<R>, AppError> {
        let name = self.resolve_reference(R::KIND, reference)?;
        self.store
            .get_resource::<R>(&name)
            .await?
            .ok_or_else(|| not_found(R::KIND, &name))
    }

    /// `CreateServiceEnvironment`.
    pub async fn create_service_environment(
        &self,
        new: NewServiceEnvironment,
    ) -> Result<ServiceEnvironment, AppError> {
        check_capacity_limits(&new.capacity_limits)?;
        let existing = self.store.list_resources::<ServiceEnvironment>().await?;
        if existing
            .iter()
            .any(|e| e.value.service_environment_name == new.name)
        {
            return Err(AppError::AlreadyExists);
        }
        if existing.len() >= MAX_SERVICE_ENVIRONMENTS {
            return Err(AppError::Invalid(format!(
                "at most {MAX_SERVICE_ENVIRONMENTS} service environments may exist; delete one \
                 before creating another"
            )));
        }
        let environment = ServiceEnvironment {
            service_environment_name: new.name,
            service_environment_type: ServiceEnvironmentType::SagemakerTraining,
            state: new.state,
            status: ResourceStatus::Valid,
            capacity_limits: new.capacity_limits,
            tags: new.tags,
            created_at: self.clock.now_ms(),
        };
        created(self.store.create_resource(&environment).await)?;
        Ok(environment)
    }

    /// `DescribeServiceEnvironments`: the named environments (unknown ones are simply absent,
    /// as in Batch) or all of them, ordered by name.
    pub async fn describe_service_environments(
        &self,
        references: Option<&[String]>,
    ) -> Result<Vec<ServiceEnvironment>, AppError> {
        let wanted = match references {
            Some(refs) => Some(
                refs.iter()
                    .map(|r| self.resolve_reference(ResourceKind::ServiceEnvironment, r))
                    .collect::<Result<BTreeSet<_>, _>>()?,
            ),
            None => None,
        };
        Ok(self
            .store
            .list_resources::<ServiceEnvironment>()
            .await?
            .into_iter()
            .map(|v| v.value)
            .filter(|e| {
                wanted
                    .as_ref()
                    .is_none_or(|w| w.contains(&e.service_environment_name))
            })
            .collect())
    }

    /// `UpdateServiceEnvironment`: state and/or capacity limits.
    ///
    /// New limits must keep the environment fit for the queues it feeds: a quota-share queue
    /// needs instance-type limits, and each of its quota shares needs a limit for its units.
    pub async fn update_service_environment(
        &self,
        reference: &str,
        update: ServiceEnvironmentUpdate,
    ) -> Result<ServiceEnvironment, AppError> {
        let Versioned {
            value: mut env,
            version,
        } = self.load_resource::<ServiceEnvironment>(reference).await?;
        if let Some(limits) = update.capacity_limits {
            check_capacity_limits(&limits)?;
            env.capacity_limits = limits;
            self.check_environment_still_fits(&env).await?;
        }
        if let Some(state) = update.state {
            env.state = state;
        }
        written(
            ResourceKind::ServiceEnvironment,
            &env.service_environment_name,
            self.store.update_resource(&env, version).await,
        )?;
        Ok(env)
    }

    async fn check_environment_still_fits(&self, env: &ServiceEnvironment) -> Result<(), AppError> {
        let name = env.service_environment_name.as_str();
        let queues = self.store.list_resources::<JobQueue>().await?;
        for queue in queues.iter().map(|q| &q.value) {
            if queue.service_environment() != Some(name) {
                continue;
            }
            let Some(policy_name) = &queue.scheduling_policy else {
                continue;
            };
            let policy = self
                .store
                .get_resource::<SchedulingPolicy>(policy_name)
                .await?;
            if policy.is_none_or(|p| p.value.quota_share_policy.is_none()) {
                continue;
            }
            if !env.is_quota_managed() {
                return Err(AppError::Invalid(format!(
                    "service environment {name:?} feeds quota-share job queue {:?}, so its \
                     capacityLimits must all be instance types (such as ml.m5.large), not \
                     {NUM_INSTANCES}",
                    queue.job_queue_name
                )));
            }
            let shares = self.store.list_resources::<QuotaShare>().await?;
            for share in shares.iter().map(|s| &s.value) {
                if share.job_queue != queue.job_queue_name {
                    continue;
                }
                for limit in &share.capacity_limits {
                    if !env
                        .capacity_limits
                        .iter()
                        .any(|l| l.capacity_unit == limit.capacity_unit)
                    {
                        return Err(AppError::Invalid(format!(
                            "quota share {:?} of job queue {:?} uses {:?}, so service \
                             environment {name:?} must keep a capacity limit for it; update or \
                             delete the quota share first",
                            share.quota_share_name, queue.job_queue_name, limit.capacity_unit
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    /// `DeleteServiceEnvironment`: only when DISABLED and no job queue uses it.
    pub async fn delete_service_environment(&self, reference: &str) -> Result<(), AppError> {
        let Versioned {
            value: env,
            version,
        } = self.load_resource::<ServiceEnvironment>(reference).await?;
        let name = env.service_environment_name.as_str();
        if env.state == State::Enabled {
            return Err(AppError::Conflict(format!(
                "service environment {name:?} is ENABLED: set its state to DISABLED with \
                 UpdateServiceEnvironment before deleting it"
            )));
        }
        let queues = self.store.list_resources::<JobQueue>().await?;
        if let Some(queue) = queues.iter().find(|q| {
            q.value
                .service_environment_order
                .iter()
                .any(|o| o.service_environment == name)
        }) {
            return Err(AppError::Conflict(format!(
                "service environment {name:?} is used by job queue {:?}: remove it from the \
                 queue's serviceEnvironmentOrder with UpdateJobQueue (or delete the queue) first",
                queue.value.job_queue_name
            )));
        }
        written(
            ResourceKind::ServiceEnvironment,
            name,
            self.store
                .delete_resource::<ServiceEnvironment>(name, version)
                .await,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(unit: &str, max: u32) -> CapacityLimit {
        CapacityLimit {
            max_capacity: max,
            capacity_unit: unit.into(),
        }
    }

    #[test]
    fn capacity_limits_are_one_kind_without_repeats() {
        let cases: Vec<(&str, Vec<CapacityLimit>, Option<&str>)> = vec![
            (
                "a total alone is fine",
                vec![limit("NUM_INSTANCES", 4)],
                None,
            ),
            (
                "instance types alone are fine",
                vec![limit("ml.p4d.24xlarge", 2), limit("ml.g5.xlarge", 8)],
                None,
            ),
            ("none at all is refused", vec![], Some("between 1 and 5")),
            (
                "six is one too many",
                (0..6)
                    .map(|i| limit(&format!("ml.t{i}.large"), 1))
                    .collect(),
                Some("got 6"),
            ),
            (
                "mixing kinds is refused",
                vec![limit("NUM_INSTANCES", 4), limit("ml.g5.xlarge", 1)],
                Some("mixes"),
            ),
            (
                "a unit twice is refused",
                vec![limit("ml.g5.xlarge", 1), limit("ml.g5.xlarge", 2)],
                Some("appears twice"),
            ),
            (
                "an unknown unit is refused",
                vec![limit("GPUS", 1)],
                Some("\"GPUS\""),
            ),
            (
                "a bare ml. is refused",
                vec![limit("ml.", 1)],
                Some("capacityUnit"),
            ),
        ];
        for (story, limits, expected) in cases {
            let result = check_capacity_limits(&limits);
            match expected {
                None => assert!(result.is_ok(), "{story}: {result:?}"),
                Some(needle) => {
                    let message = result.expect_err(story).to_string();
                    assert!(message.contains(needle), "{story}: {message}");
                }
            }
        }
    }
}
