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

impl ServiceEnvironment {
    /// Quota-managed environments express capacity per instance type, never `NUM_INSTANCES`.
    pub fn is_quota_managed(&self) -> bool {
        !self.capacity_limits.is_empty() && self.capacity_limits.iter().all(|l| !l.is_total())
    }
}
