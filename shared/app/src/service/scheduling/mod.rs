//! The scheduling loop's use-cases: the cycle (snapshot → plan → commit → launch), SageMaker
//! state changes, and the periodic pass for due work (timeouts, time limits, terminations,
//! launches to retry, missed events).
//!
//! # The cycle
//!
//! 1. **Snapshot.** Configuration, the jobs holding capacity, capacity in use per environment
//!    (one document each), fair-share usage, and the *heads* of each queue and share: the first
//!    RUNNABLE jobs in dispatch order, as many as the environment has free instances plus
//!    [`CycleConfig::head_extra`] (for a quota share that is
//!    [`full`](trainyard_scheduler::QuotaShareState::full), only the
//!    [`LineWaits::MAX_WAITS`](crate::ports::LineWaits::MAX_WAITS) its line's document names:
//!    none of its jobs can act, however many are read). Reads grow with queues, shares and free capacity, never with the backlog;
//!    jobs are read as summaries (`Store::capacity_holders`, `Store::runnable_heads`), and whole
//!    only when the cycle writes them.
//! 2. **Plan** with the pure planner (`trainyard_scheduler::plan_cycle`).
//! 3. **Commit** each dispatch atomically: the job RUNNABLE → SCHEDULED with a new attempt, and
//!    the environment's usage document, both version-checked. A concurrent cycle that got there
//!    first makes the commit fail; the job simply waits for the next cycle. The new usage is
//!    checked against the environment's limits before the commit, so a plan made from a
//!    lagging index of jobs holding capacity cannot over-commit either: capacity can never be
//!    over-committed, whatever runs at once and however stale the plan's view.
//! 4. **Launch** the attempt under its deterministic name ([`attempt_name`](trainyard_domain::training::attempt_name)). `ResourceInUse`
//!    means an earlier launch got through: the attempt is adopted. `ResourceLimitExceeded` puts
//!    the job back to RUNNABLE without using an attempt; a rejected request fails the job; a
//!    throttled or failed call leaves the attempt SCHEDULED without an ARN, and the periodic
//!    pass launches it again (the name makes that idempotent).
//! 5. **Record** each waiting job's skip reason when its code changes (`CAPACITY:…`,
//!    `PRIORITY:…`: the text before ` - `). The figures after it (instances free, when a head
//!    should start) move from cycle to cycle; rewriting every waiting head whenever they do would
//!    cost a store write per head per cycle, so the text shows them as of when the job began
//!    waiting for that reason; step 7 shows current figures instead.
//! 6. **Account** fair-share usage: each share's decayed instance-seconds advance to now with
//!    the instances it held since the last cycle.
//! 7. **Show** why jobs wait: each line (a FIFO queue, or a share) gets one small document with
//!    the reasons of its first waiting jobs and the cycle's figures (`LineWaits`), written only
//!    when something in it changed. Whoever reads a job shows its reason from there
//!    (`Service::explain_job`, and describe and list through `Service::with_current_reasons`).
//!
//! # Layout
//!
//! One module a step: `snapshot` (step 1), `cycle` (steps 2, 3, 5 and 6), `launch` (step 4
//! and preemption), `attempt_end` (state changes, and the end of an attempt), `due` (the
//! periodic pass). `pass` strings them together as every host runs them: accept submitted jobs,
//! apply state changes, the due work, then cycles ([`Service::pass`](crate::Service::pass)).
//!
//! # State changes
//!
//! SageMaker's events (or a describe, when reconciling) map to Batch statuses: `InProgress`
//! with `Downloading` → STARTING, `Training`/`Uploading` → RUNNING, `Completed` → SUCCEEDED,
//! `Failed`/`Stopped` → a retry decision (`trainyard_scheduler::retry`). Events for an older
//! attempt, for a finished job, or that would move a job backwards are ignored: duplicates and
//! reordering change nothing. Capacity is released in the same commit as the final state.

mod attempt_end;
mod cycle;
mod decision;
mod due;
mod launch;
mod pass;
mod snapshot;
mod waits;

pub use cycle::CHECKPOINT_LISTINGS_AT_ONCE;
pub use decision::{DecisionLog, DecisionRecord, NoDecisions, Replay, capped};
pub use due::{DueWork, RECONCILE_MAX_INTERVAL_MS, describe_due};
pub use pass::{Accept, CycleGate, PassInput, PassReport, Step, StepError, accept_in_batches};
pub use snapshot::queue_state;
pub(crate) use snapshot::{RunningSet, environment_state, pending};

use trainyard_domain::job::JobStatus;
use trainyard_scheduler::Config as PlannerConfig;
use trainyard_scheduler::retry::{AttemptFailure, RetryConfig};

/// Settings of the scheduling loop.
#[derive(Debug, Clone, PartialEq)]
pub struct CycleConfig {
    /// The planner's settings (strict FIFO or backfill, default runtime).
    pub planner: PlannerConfig,
    /// Backoff for retries and capacity errors.
    pub retry: RetryConfig,
    /// Heads read per queue or share beyond the environment's free instances: candidates for
    /// backfill and for skip reasons.
    pub head_extra: usize,
    /// Most heads read per queue or share, whatever the free capacity (bounds one cycle).
    pub max_heads: usize,
    /// Whether each cycle that has a job to plan carries its [`DecisionRecord`] in its report
    /// (for a host that keeps them).
    pub record_decisions: bool,
}

impl Default for CycleConfig {
    fn default() -> Self {
        Self {
            planner: PlannerConfig::default(),
            retry: RetryConfig::default(),
            head_extra: 16,
            max_heads: 1_000,
            record_decisions: false,
        }
    }
}

/// What one cycle did, for logs and metrics.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CycleReport {
    /// Jobs committed to SCHEDULED.
    pub dispatched: usize,
    /// Attempts SageMaker accepted (or already had).
    pub launched: usize,
    /// Dispatches refused because the job or the environment changed since the snapshot.
    pub conflicts: usize,
    /// Dispatches refused because the environment's stored usage had no room for them: the
    /// plan's view of capacity in use (an index) lagged behind the usage document.
    pub over_limit: usize,
    /// Launches refused for lack of capacity (job back to RUNNABLE).
    pub capacity_errors: usize,
    /// Launches left for the next pass (throttled, unavailable).
    pub launch_deferred: usize,
    /// Jobs failed because SageMaker rejected the request.
    pub rejected: usize,
    /// Waiting jobs whose skip reason changed.
    pub reasons_updated: usize,
    /// Running attempts asked to stop to give their capacity back (quota shares), each counted
    /// in the cycle that first asked (later cycles during its stop grace ask again).
    pub preemptions: usize,
    /// Of `preemptions`, those reclaiming capacity another quota share borrowed (the rest are
    /// in-share, by priority).
    pub reclaims: usize,
    /// Borrowers that fitted but waited for this cycle's starts within their shares' limits
    /// (`QUOTA:BORROWING_AFTER_ENTITLED_START`): the next cycle may start them.
    #[serde(default)]
    pub borrowers_held: usize,
    /// Whether this cycle's dispatches changed which running jobs count as borrowed
    /// (`trainyard_scheduler::quota::dispatches_move_borrowing`): the next cycle may reclaim
    /// capacity from jobs this one could not.
    #[serde(default)]
    pub borrowing_moved: bool,
    /// The jobs those reclaims are for (each once).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reclaimed_for: Vec<trainyard_scheduler::SharedStr>,
    /// Jobs within their quota share's limit that waited this cycle only because the capacity
    /// their share lent is still held by borrowed jobs too young to preempt
    /// (`QUOTA:CAPACITY_LENT`): with `reclaimed_for`, when an owner began to wait for its
    /// capacity back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lent_waits: Vec<trainyard_scheduler::SharedStr>,
    /// Jobs that waited this cycle for jobs preempted for them to stop (or to save a due
    /// checkpoint first): `PREEMPTION:` reasons.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preemption_waits: Vec<trainyard_scheduler::SharedStr>,
    /// When a wait planned in this cycle ends by itself, if one does
    /// ([`Plan::next_change_ms`](trainyard_scheduler::Plan::next_change_ms)): a host that
    /// cycles only on events should cycle then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_change_ms: Option<i64>,
    /// Whether the cycle stood aside (dispatching nothing more, preempting nothing) for a pass
    /// holding a newer scheduler lease.
    pub fenced: bool,
    /// What the cycle decided and from what, when [`CycleConfig::record_decisions`] is set.
    #[serde(skip)]
    pub decision: Option<Box<DecisionRecord>>,
}

/// What [`Service::on_training_state`](crate::Service::on_training_state) did with a state
/// change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateOutcome {
    /// The job moved (to the contained status).
    Applied(JobStatus),
    /// Nothing to do: a duplicate, a stale or out-of-order event, or a finished job.
    Ignored,
    /// Not one of Trainyard's training jobs, or its job no longer exists.
    Unknown,
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ending {
    /// The training job completed.
    Completed,
    /// It failed, was stopped, or could not be created.
    Failed(AttemptFailure),
}

/// What one pass over the due work did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DueReport {
    /// Attempts whose launch was retried.
    pub relaunched: usize,
    /// Attempts asked to stop (terminated or timed out).
    pub stops_requested: usize,
    /// State changes found by describing attempts (events that went missing).
    pub reconciled: usize,
    /// Attempts whose training job SageMaker no longer had, ended and requeued (counted in
    /// `reconciled` too).
    pub lost: usize,
    /// Describes that failed (their attempts wait for the next pass).
    pub describe_failures: usize,
    /// Whether the deadline stopped it before every job holding capacity was looked at.
    pub out_of_time: bool,
}

impl DueReport {
    /// Whether every job holding capacity was looked at and every describe answered: a host
    /// that tracks its previous pass for [`DueWork::reconcile_since_ms`] counts only complete
    /// passes, so that a checkpoint a partial pass missed falls in the next pass's window.
    pub fn complete(&self) -> bool {
        !self.out_of_time && self.describe_failures == 0
    }
}

/// Most times a use-case re-reads and retries after losing a race on the same job.
pub(crate) const RACE_RETRIES: usize = 5;
