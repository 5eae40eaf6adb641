//! A record of what one cycle decided and from what: the snapshot the planner planned over, its
//! settings, the plan, and how its commits ended. The planner is a pure function of the first
//! two, so planning the recorded snapshot again gives the recorded plan, bit for bit
//! ([`DecisionRecord::replay`]); under other settings, it shows what they would have changed.

use std::collections::BTreeMap;
use std::future::Future;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use trainyard_scheduler::{Config as PlannerConfig, Plan, SharedStr, Snapshot, plan_cycle};

use super::CycleReport;
use crate::ports::{LineWaits, StoreError};

/// One cycle's decisions and their inputs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DecisionRecord {
    /// Unique, minted by the cycle.
    pub id: String,
    /// The time the cycle planned at (epoch ms): the planner's `now`.
    pub at_ms: i64,
    /// What started the pass the cycle ran in.
    pub trigger: String,
    /// SHA-256 of the configuration part of the snapshot (environments and queues, with their
    /// policies and quota shares): equal digests, equal configuration.
    pub configuration_digest: String,
    /// SHA-256 of the whole snapshot, as recorded.
    pub snapshot_digest: String,
    /// The planner's settings.
    pub planner: PlannerConfig,
    /// What the planner planned over: configuration, the jobs holding capacity, the heads of
    /// each line, fair-share usage, capacity in use. Bounded by the lines and the capacity (a
    /// cycle reads each line's heads only), not by the backlog.
    pub snapshot: Snapshot,
    /// The plan, its skips capped per line ([`capped`]).
    pub plan: Plan,
    /// Skips in the whole plan, before the cap.
    pub skips_total: usize,
    /// How the cycle's commits, launches and preemptions ended.
    pub outcome: CycleReport,
    /// How long the cycle took, in microseconds of wall time (not replayed).
    pub duration_us: u64,
}

/// What planning a recorded snapshot again gave.
#[derive(Debug, Clone, PartialEq)]
pub struct Replay {
    /// The plan, its skips capped as the record's were.
    pub plan: Plan,
    /// Whether it is the recorded plan.
    pub same: bool,
}

impl DecisionRecord {
    /// Builds the record of a cycle that planned `plan` over `snapshot` at `at_ms`.
    pub fn new(
        id: String,
        at_ms: i64,
        snapshot: &Snapshot,
        planner: &PlannerConfig,
        plan: &Plan,
    ) -> Self {
        let configuration = (&snapshot.environments, &snapshot.queues);
        Self {
            id,
            at_ms,
            trigger: String::new(),
            configuration_digest: digest(&configuration),
            snapshot_digest: digest(snapshot),
            planner: planner.clone(),
            snapshot: snapshot.clone(),
            plan: capped(plan, snapshot),
            skips_total: plan.skips.len(),
            outcome: CycleReport::default(),
            duration_us: 0,
        }
    }

    /// Plans the recorded snapshot again, under the recorded settings or `planner`.
    pub fn replay(&self, planner: Option<&PlannerConfig>) -> Replay {
        let planner = planner.unwrap_or(&self.planner);
        let plan = capped(
            &plan_cycle(&self.snapshot, self.at_ms, planner),
            &self.snapshot,
        );
        let same = plan == self.plan;
        Replay { plan, same }
    }

    /// Whether the recorded snapshot is the one its digest names (a record altered or
    /// truncated since says no).
    pub fn intact(&self) -> bool {
        digest(&self.snapshot) == self.snapshot_digest
    }
}

/// `plan` with at most [`LineWaits::MAX_WAITS`] skips per line (queue and share), the first in
/// evaluation order: the record's size is bounded by the lines, not by the backlog.
pub fn capped(plan: &Plan, snapshot: &Snapshot) -> Plan {
    let line_of: BTreeMap<&str, (&str, Option<&SharedStr>)> = snapshot
        .pending
        .iter()
        .map(|j| (j.job_id.as_str(), (j.queue.as_str(), j.share.as_ref())))
        .collect();
    let mut per_line: BTreeMap<(&str, Option<&SharedStr>), usize> = BTreeMap::new();
    let skips = plan
        .skips
        .iter()
        .filter(|skip| {
            let line = line_of
                .get(skip.job_id.as_str())
                .copied()
                .unwrap_or(("", None));
            let n = per_line.entry(line).or_insert(0);
            *n += 1;
            *n <= LineWaits::MAX_WAITS
        })
        .cloned()
        .collect();
    Plan {
        dispatches: plan.dispatches.clone(),
        skips,
        preemptions: plan.preemptions.clone(),
    }
}

/// SHA-256 of a value's JSON, in hex.
fn digest<T: Serialize + ?Sized>(value: &T) -> String {
    let json = serde_json::to_vec(value).unwrap_or_default();
    format!("{:x}", Sha256::digest(&json))
}

/// Where a host keeps decision records.
pub trait DecisionLog: Send + Sync + 'static {
    /// Appends one record; a log keeps only so many (its retention), dropping the oldest.
    fn append_decision(
        &self,
        record: &DecisionRecord,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// A host that keeps no decision records.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoDecisions;

impl DecisionLog for NoDecisions {
    async fn append_decision(&self, _record: &DecisionRecord) -> Result<(), StoreError> {
        Ok(())
    }
}

impl<L: DecisionLog> DecisionLog for std::sync::Arc<L> {
    fn append_decision(
        &self,
        record: &DecisionRecord,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).append_decision(record)
    }
}
