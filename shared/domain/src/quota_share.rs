//! Quota shares: virtual queues inside a quota-managed job queue, each with capacity reserved per
//! instance type and a rule for lending idle capacity and borrowing more.

use serde::{Deserialize, Serialize};

use crate::{ResourceStatus, State, Tags};

/// `capacityLimits[]` of a quota share: instances of one type reserved for the share.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QuotaShareCapacityLimit {
    /// Instances of `capacity_unit` the share may use without borrowing.
    pub max_capacity: u32,
    /// Instance type, e.g. `ml.p4d.24xlarge`.
    pub capacity_unit: String,
}

/// `resourceSharingConfiguration.strategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SharingStrategy {
    /// Idle capacity stays reserved for the share's own jobs.
    Reserve,
    /// Idle capacity may be lent to other shares (and reclaimed by preemption).
    Lend,
    /// Lends idle capacity and borrows others', up to `borrowLimit`.
    LendAndBorrow,
}

/// `resourceSharingConfiguration`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSharingConfiguration {
    /// Reserve, lend, or lend and borrow.
    pub strategy: SharingStrategy,
    /// Percent of the share's own capacity it may borrow on top; -1 (the default) is unlimited.
    /// Only meaningful with LEND_AND_BORROW.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrow_limit: Option<i32>,
}

/// `preemptionConfiguration.inSharePreemption`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum InSharePreemption {
    /// Higher-priority jobs may preempt lower-priority jobs of the same share.
    Enabled,
    /// No preemption within the share.
    #[default]
    Disabled,
}

/// `preemptionConfiguration` of a quota share.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct QuotaSharePreemptionConfiguration {
    /// Whether in-share preemption is on.
    pub in_share_preemption: InSharePreemption,
}

/// A quota share as stored. Its identity is (job queue, name).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QuotaShare {
    /// Name, unique within its queue.
    pub quota_share_name: String,
    /// Name of the job queue it belongs to.
    pub job_queue: String,
    /// 1–5 per-instance-type limits.
    pub capacity_limits: Vec<QuotaShareCapacityLimit>,
    /// Lending and borrowing.
    pub resource_sharing_configuration: ResourceSharingConfiguration,
    /// In-share preemption.
    pub preemption_configuration: QuotaSharePreemptionConfiguration,
    /// ENABLED shares accept submissions.
    pub state: State,
    /// Lifecycle status.
    pub status: ResourceStatus,
    /// Tags.
    #[serde(default)]
    pub tags: Tags,
    /// Creation time (epoch ms).
    pub created_at: i64,
}
