//! The policies compared, each mapped onto real Trainyard configuration (environments, queues,
//! scheduling policies, quota shares and the planner's settings), so that every run goes through
//! the same use-cases and planner:
//!
//! | policy | configuration |
//! | --- | --- |
//! | `fifo` | one queue, no scheduling policy, `strict_fifo` (Batch's FIFO) |
//! | `batch-fair-share` | one queue with a fair-share policy, teams as shares (`weightFactor` = 1/weight), tiers as `schedulingPriority`, `strict_fifo` |
//! | `trainyard` | one queue per tier (queue priority), each with the fair-share policy and the tier's aging and line rules (shorter first, reserve after); backfill |
//! | `quota-shares` | one quota-managed queue, a quota share per team sized by weight, `LEND_AND_BORROW` without a borrow limit, in-share preemption; tiers as `schedulingPriority` |
//! | `static-partition` | the same with `RESERVE`: each team's slice proportional to its offered load (instances × duration in the trace) unless the scenario sets it; teams without load get none (see [`static_slices`]) |

use std::collections::BTreeMap;

use trainyard_domain::environment::{CapacityLimit, ServiceEnvironment, ServiceEnvironmentType};
use trainyard_domain::policy::{
    FairsharePolicy, QuotaSharePolicy, SchedulingPolicy, ShareAttributes,
};
use trainyard_domain::queue::{JobQueue, JobQueueType, ServiceEnvironmentOrder};
use trainyard_domain::quota_share::{
    InSharePreemption, QuotaShare, QuotaShareCapacityLimit, QuotaSharePreemptionConfiguration,
    ResourceSharingConfiguration, SharingStrategy,
};
use trainyard_domain::{ResourceStatus, State};
use trainyard_scheduler::Config as PlannerConfig;

use crate::scenario::{Scenario, apportion};

/// A policy to compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Policy {
    /// Batch's strict FIFO over one queue.
    Fifo,
    /// Fair share between teams as Batch documents it.
    BatchFairShare,
    /// Trainyard's default: priority queues, backfill, fair share.
    Trainyard,
    /// Quota shares with lending, borrowing and preemption.
    QuotaShares,
    /// A fixed slice per team that is never lent.
    StaticPartition,
}

/// Every policy, in report order.
pub const ALL: [Policy; 5] = [
    Policy::Fifo,
    Policy::BatchFairShare,
    Policy::Trainyard,
    Policy::QuotaShares,
    Policy::StaticPartition,
];

impl Policy {
    /// The policy's name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Fifo => "fifo",
            Self::BatchFairShare => "batch-fair-share",
            Self::Trainyard => "trainyard",
            Self::QuotaShares => "quota-shares",
            Self::StaticPartition => "static-partition",
        }
    }

    /// A policy by name.
    pub fn parse(name: &str) -> Option<Self> {
        ALL.into_iter().find(|p| p.name() == name.trim())
    }

    /// Whether the policy may preempt (so a cycle is useful even with no free capacity).
    pub fn preempts(self) -> bool {
        self == Self::QuotaShares
    }
}

/// A team as the policies see it.
#[derive(Debug, Clone, PartialEq)]
pub struct TeamLoad {
    /// Share identifier.
    pub name: String,
    /// Offered load in the trace: instances × duration, summed.
    pub instance_s: f64,
}

/// Where a job is submitted under a policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// Job queue.
    pub queue: String,
    /// `shareIdentifier`.
    pub share_identifier: Option<String>,
    /// `quotaShareName`.
    pub quota_share_name: Option<String>,
    /// `schedulingPriority`.
    pub scheduling_priority: Option<u32>,
}

/// The configuration a policy runs with.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The policy.
    pub policy: Policy,
    /// The one service environment.
    pub environment: ServiceEnvironment,
    /// Scheduling policies.
    pub policies: Vec<SchedulingPolicy>,
    /// Job queues.
    pub queues: Vec<JobQueue>,
    /// Quota shares.
    pub quota_shares: Vec<QuotaShare>,
    /// Planner settings.
    pub planner: PlannerConfig,
    /// Each team's entitlement, summing to 1 (weights, or quota slices).
    pub entitlements: BTreeMap<String, f64>,
    /// Each team's slice in instances (quota policies only).
    pub slices: BTreeMap<String, u32>,
    /// Tier name → (queue priority, scheduling priority).
    tiers: BTreeMap<String, u32>,
}

/// Each team's `static-partition` slice, in the order of `teams`: the scenario's fixed
/// `static_instances` first, then the rest of the capacity split among the other teams in
/// proportion to their offered load, at least one instance each while instances remain.
/// A team with no offered load gets nothing: a slice that is never lent and never used is
/// capacity thrown away, not a partition anyone would configure.
pub fn static_slices(scenario: &Scenario, teams: &[TeamLoad]) -> Vec<u32> {
    let fixed: Vec<Option<u32>> = teams
        .iter()
        .map(|team| {
            scenario
                .teams
                .iter()
                .find(|t| t.name == team.name)
                .and_then(|t| t.static_instances)
        })
        .collect();
    let taken: u32 = fixed.iter().flatten().sum();
    let rest = scenario.capacity_instances.saturating_sub(taken);
    // Only loaded teams without a fixed slice take part in the split.
    let open: Vec<usize> = (0..teams.len())
        .filter(|i| fixed[*i].is_none() && teams[*i].instance_s > 0.0)
        .collect();
    let loads: Vec<f64> = open.iter().map(|i| teams[*i].instance_s).collect();
    let mut parts: Vec<u32> = fixed.iter().map(|f| f.unwrap_or(0)).collect();
    for (i, part) in open.iter().zip(apportion(rest, &loads, 1)) {
        parts[*i] = part;
    }
    parts
}

/// Queue of the single-queue policies.
const SHARED_QUEUE: &str = "shared";
/// Name of the scheduling policy.
const POLICY_NAME: &str = "teams";

fn queue(name: &str, priority: u32, policy: Option<&str>, env: &str) -> JobQueue {
    JobQueue {
        job_queue_name: name.into(),
        state: State::Enabled,
        status: ResourceStatus::Valid,
        status_reason: None,
        priority,
        scheduling_policy: policy.map(str::to_owned),
        service_environment_order: vec![ServiceEnvironmentOrder {
            order: 1,
            service_environment: env.into(),
        }],
        job_state_time_limit_actions: vec![],
        job_queue_type: JobQueueType::SagemakerTraining,
        tags: BTreeMap::new(),
        created_at: 0,
    }
}

impl Setup {
    /// The configuration of `policy` for `scenario` and the trace's `teams` (in name order).
    pub fn new(policy: Policy, scenario: &Scenario, teams: &[TeamLoad]) -> Self {
        let env_name = scenario.environment.clone();
        let quota_managed = matches!(policy, Policy::QuotaShares | Policy::StaticPartition);
        let environment = ServiceEnvironment {
            service_environment_name: env_name.clone(),
            service_environment_type: ServiceEnvironmentType::SagemakerTraining,
            state: State::Enabled,
            status: ResourceStatus::Valid,
            capacity_limits: vec![CapacityLimit {
                max_capacity: scenario.capacity_instances,
                capacity_unit: if quota_managed {
                    scenario.instance_type.clone()
                } else {
                    "NUM_INSTANCES".into()
                },
            }],
            tags: BTreeMap::new(),
            created_at: 0,
        };
        let weights: Vec<f64> = teams.iter().map(|t| scenario.weight(&t.name)).collect();
        let weight_sum: f64 = weights.iter().sum();
        let mut entitlements: BTreeMap<String, f64> = teams
            .iter()
            .zip(&weights)
            .map(|(t, w)| (t.name.clone(), w / weight_sum.max(f64::MIN_POSITIVE)))
            .collect();
        let fair = SchedulingPolicy {
            name: POLICY_NAME.into(),
            fairshare_policy: Some(FairsharePolicy {
                share_decay_seconds: Some(scenario.share_decay_s),
                compute_reservation: None,
                share_distribution: teams
                    .iter()
                    .zip(&weights)
                    .map(|(t, w)| ShareAttributes {
                        share_identifier: t.name.clone(),
                        weight_factor: Some(1.0 / w),
                    })
                    .collect(),
            }),
            quota_share_policy: None,
            tags: BTreeMap::new(),
            created_at: 0,
        };
        let quota = SchedulingPolicy {
            name: POLICY_NAME.into(),
            fairshare_policy: None,
            quota_share_policy: Some(QuotaSharePolicy::default()),
            tags: BTreeMap::new(),
            created_at: 0,
        };
        let mut slices = BTreeMap::new();
        let mut quota_shares = Vec::new();
        let (policies, queues, strict_fifo) = match policy {
            Policy::Fifo => (vec![], vec![queue(SHARED_QUEUE, 1, None, &env_name)], true),
            Policy::BatchFairShare => (
                vec![fair],
                vec![queue(SHARED_QUEUE, 1, Some(POLICY_NAME), &env_name)],
                true,
            ),
            Policy::Trainyard => (
                vec![fair],
                scenario
                    .tiers
                    .iter()
                    .map(|t| JobQueue {
                        tags: t.queue_tags(),
                        ..queue(&t.name, t.priority, Some(POLICY_NAME), &env_name)
                    })
                    .collect(),
                false,
            ),
            Policy::QuotaShares | Policy::StaticPartition => {
                let (strategy, parts) = if policy == Policy::QuotaShares {
                    (
                        SharingStrategy::LendAndBorrow,
                        apportion(scenario.capacity_instances, &weights, 1),
                    )
                } else {
                    let parts = static_slices(scenario, teams);
                    (SharingStrategy::Reserve, parts)
                };
                let total: f64 = parts.iter().map(|p| f64::from(*p)).sum();
                for (team, part) in teams.iter().zip(&parts) {
                    slices.insert(team.name.clone(), *part);
                    entitlements.insert(
                        team.name.clone(),
                        f64::from(*part) / total.max(f64::MIN_POSITIVE),
                    );
                    quota_shares.push(QuotaShare {
                        quota_share_name: team.name.clone(),
                        job_queue: SHARED_QUEUE.into(),
                        capacity_limits: vec![QuotaShareCapacityLimit {
                            max_capacity: *part,
                            capacity_unit: scenario.instance_type.clone(),
                        }],
                        resource_sharing_configuration: ResourceSharingConfiguration {
                            strategy,
                            borrow_limit: None,
                        },
                        preemption_configuration: QuotaSharePreemptionConfiguration {
                            in_share_preemption: if policy == Policy::QuotaShares {
                                InSharePreemption::Enabled
                            } else {
                                InSharePreemption::Disabled
                            },
                        },
                        state: State::Enabled,
                        status: ResourceStatus::Valid,
                        tags: BTreeMap::new(),
                        created_at: 0,
                    });
                }
                let reserve_after = scenario
                    .quota_reserve_after_hours
                    .filter(|_| policy == Policy::QuotaShares);
                let tags = reserve_after
                    .map(|h| {
                        let tag = trainyard_domain::queue::RESERVE_AFTER_HOURS_TAG;
                        (tag.to_owned(), h.to_string())
                    })
                    .into_iter()
                    .collect();
                (
                    vec![quota],
                    vec![JobQueue {
                        tags,
                        ..queue(SHARED_QUEUE, 1, Some(POLICY_NAME), &env_name)
                    }],
                    false,
                )
            }
        };
        let planner = PlannerConfig {
            strict_fifo,
            min_runtime_before_preemption_s: scenario.min_runtime_before_preemption_s,
            min_wait_before_in_share_preemption_s: scenario.min_wait_before_in_share_preemption_s,
            min_priority_for_in_share_preemption: scenario.min_priority_for_in_share_preemption,
            min_wait_before_reclaim_s: scenario.min_wait_before_reclaim_s,
            min_runtime_after_preemption_s: scenario.min_runtime_after_preemption_s,
            restart_overhead_s: scenario.restart_overhead_s,
            checkpoint_alignment_s: scenario.checkpoint_alignment_s,
            ..PlannerConfig::default()
        };
        let tiers = scenario
            .tiers
            .iter()
            .map(|t| (t.name.clone(), t.scheduling_priority))
            .collect();
        Self {
            policy,
            environment,
            policies,
            queues,
            quota_shares,
            planner,
            entitlements,
            slices,
            tiers,
        }
    }

    /// Where a job of `tier` and `team` goes. `priority` is the trace's own
    /// `schedulingPriority`, which wins over the tier's.
    pub fn route(&self, tier: &str, team: &str, priority: Option<u32>) -> Route {
        let tier_priority = priority.or_else(|| self.tiers.get(tier).copied());
        match self.policy {
            Policy::Fifo => Route {
                queue: SHARED_QUEUE.into(),
                share_identifier: None,
                quota_share_name: None,
                scheduling_priority: None,
            },
            Policy::BatchFairShare => Route {
                queue: SHARED_QUEUE.into(),
                share_identifier: Some(team.into()),
                quota_share_name: None,
                scheduling_priority: tier_priority,
            },
            Policy::Trainyard => Route {
                queue: tier.into(),
                share_identifier: Some(team.into()),
                quota_share_name: None,
                scheduling_priority: priority,
            },
            Policy::QuotaShares | Policy::StaticPartition => Route {
                queue: SHARED_QUEUE.into(),
                share_identifier: None,
                quota_share_name: Some(team.into()),
                scheduling_priority: tier_priority,
            },
        }
    }
}
