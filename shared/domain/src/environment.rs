//! Service environments: capacity pools for SageMaker training jobs.
//!
//! Capacity is counted in instances. A limit in `NUM_INSTANCES` caps all instances together; a
//! limit whose unit is an instance type (`ml.p4d.24xlarge`) caps that type alone, which is how
//! Batch marks an environment as quota-managed.

use serde::{Deserialize, Serialize};

use crate::{ResourceStatus, State, Tags};

/// The `capacityUnit` that counts all instances together.
pub const NUM_INSTANCES: &str = "NUM_INSTANCES";

/// `capacityLimits[]`: at most `max_capacity` of `capacity_unit`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CapacityLimit {
    /// Maximum number of instances (of the unit) in use at once.
    pub max_capacity: u32,
    /// `NUM_INSTANCES`, or an instance type such as `ml.m5.large`.
    pub capacity_unit: String,
}

impl CapacityLimit {
    /// Whether this limit counts all instances (`NUM_INSTANCES`) rather than one type.
    pub fn is_total(&self) -> bool {
        self.capacity_unit == NUM_INSTANCES
    }
}

/// `serviceEnvironmentType`: only SageMaker training exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum ServiceEnvironmentType {
    /// `SAGEMAKER_TRAINING`.
    #[default]
    #[serde(rename = "SAGEMAKER_TRAINING")]
    SagemakerTraining,
}

/// A service environment as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceEnvironment {
    /// Unique name.
    pub service_environment_name: String,
    /// Always SageMaker training.
    pub service_environment_type: ServiceEnvironmentType,
    /// ENABLED environments accept new dispatches.
    pub state: State,
    /// Lifecycle status.
    pub status: ResourceStatus,
    /// 1–5 limits.
    pub capacity_limits: Vec<CapacityLimit>,
    /// Tags.
    #[serde(default)]
    pub tags: Tags,
    /// Creation time (epoch ms).
    pub created_at: i64,
}

/// Whether `in_use` (instances per instance type) is within `limits`, as the planner counts them:
/// all instances against the smallest `NUM_INSTANCES` limit, each type against its own limit,
/// and a type with no limit of its own against the total limit alone (no limit at all admits
/// nothing). The dispatch commit checks this on the environment's usage as stored, so that a
/// planner whose view of capacity in use lags cannot over-commit.
pub fn within_limits(
    limits: &[CapacityLimit],
    in_use: &std::collections::BTreeMap<String, u64>,
) -> bool {
    let total_max = limits
        .iter()
        .filter(|l| l.is_total())
        .map(|l| u64::from(l.max_capacity))
        .min();
    if total_max.is_some_and(|max| in_use.values().sum::<u64>() > max) {
        return false;
    }
    in_use.iter().all(|(ty, n)| {
        let own = limits
            .iter()
            .filter(|l| !l.is_total() && l.capacity_unit == *ty)
            .map(|l| u64::from(l.max_capacity))
            .min();
        match own {
            Some(max) => *n <= max,
            None => *n == 0 || total_max.is_some(),
        }
    })
}

impl ServiceEnvironment {
    /// Quota-managed environments express capacity per instance type, never `NUM_INSTANCES`.
    pub fn is_quota_managed(&self) -> bool {
        !self.capacity_limits.is_empty() && self.capacity_limits.iter().all(|l| !l.is_total())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn limit(unit: &str, max: u32) -> CapacityLimit {
        CapacityLimit {
            max_capacity: max,
            capacity_unit: unit.into(),
        }
    }

    fn usage(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
        pairs.iter().map(|(t, n)| ((*t).to_owned(), *n)).collect()
    }

    #[test]
    fn usage_is_checked_against_the_total_and_each_types_limit() {
        let total = [limit(NUM_INSTANCES, 4)];
        assert!(within_limits(&total, &usage(&[("ml.a", 3), ("ml.b", 1)])));
        assert!(!within_limits(&total, &usage(&[("ml.a", 3), ("ml.b", 2)])));
        let typed = [limit("ml.a", 2), limit("ml.b", 1)];
        assert!(within_limits(&typed, &usage(&[("ml.a", 2), ("ml.b", 1)])));
        assert!(!within_limits(&typed, &usage(&[("ml.a", 3)])));
        assert!(
            !within_limits(&typed, &usage(&[("ml.c", 1)])),
            "a type no limit covers"
        );
        let both = [limit(NUM_INSTANCES, 3), limit("ml.a", 2)];
        assert!(within_limits(&both, &usage(&[("ml.a", 2), ("ml.c", 1)])));
        assert!(!within_limits(&both, &usage(&[("ml.a", 2), ("ml.c", 2)])));
        assert!(
            within_limits(&[], &usage(&[])),
            "nothing in use fits anything"
        );
        assert!(
            !within_limits(&[], &usage(&[("ml.a", 1)])),
            "no limit admits nothing"
        );
    }
}
