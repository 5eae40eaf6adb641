//! Trainyard's planner: one pure, deterministic function from a snapshot of the world to the
//! decisions of one scheduling cycle.
//!
//! ```text
//! plan_cycle(&Snapshot, now_ms, &Config) -> Plan { dispatches, skips, preemptions }
//! ```
//!
//! The same input gives the same output, byte for byte: every collection is ordered and every
//! comparison ends on a unique key. No I/O, clock or randomness (see `Cargo.toml`).
//!
//! # Rules
//!
//! 1. **Capacity.** A service environment limits instances in use, either all together
//!    (`NUM_INSTANCES`) or per instance type (quota-managed environments). A job takes the
//!    instances its training request asks for, from the moment it is dispatched until its attempt
//!    ends. Capacity in use is derived from the running jobs in the snapshot, so a plan can never
//!    count it twice. A job that could never fit (more than the limit, or an instance type the
//!    environment does not offer) is skipped as a misconfiguration and blocks nobody.
//! 2. **Queue priority.** Queues sharing an environment are evaluated in descending `priority`,
//!    then by name. Jobs of a lower-priority queue are considered only after every job of the
//!    higher-priority queues, so a higher-priority job that fits is never passed over. A queue
//!    with *aging* (`trainyard_domain::queue::Aging`, from its tags) is evaluated job by job, each
//!    at the priority it has aged to (`p + per_hour × hours waited`, up to a ceiling); jobs at
//!    their ceiling are *overdue* and go first among equals, oldest first, in their queue too
//!    (ahead of the fair-share order). Quota-managed queues do not age.
//! 3. **Order within a queue.** A job's place in line is `runnable_at` plus its line offset
//!    (`PendingJob::line_at_ms`; 0 unless its queue puts shorter jobs first, which sets it at
//!    submission to `min(MaxRuntimeInSeconds, bound)`). FIFO queues: place in line ascending, then
//!    job id. Fair-share queues: shares are interleaved by [`fair_share`] score (lowest first,
//!    ties by share id); within a share, `schedulingPriority` descending, then place in line, then
//!    job id.
//!    Quota-managed queues: [`quota`] documents reservation, lending, borrowing (FIFO),
//!    `borrowLimit`, and cross-share and in-share preemption, with the proof that preemption
//!    never loops. They are the only queues that preempt.
//! 4. **Head of line.** When a job does not fit, it becomes the environment's *head*: the first
//!    blocked job in evaluation order that has waited its queue's `QueueState::reserve_after_ms`
//!    (0 unless the queue sets it: every blocked job may be the head). With `Config::strict_fifo` (Batch's behaviour) nothing after
//!    it in the environment is dispatched. Otherwise (the default) later jobs may *backfill*
//!    (EASY backfill): a job that fits now is dispatched only if it does not push back the head's
//!    earliest start. That start, the *shadow time*, is when enough running attempts will have
//!    ended, each by its `MaxRuntimeInSeconds` (86,400 s, SageMaker's default, when unset); a
//!    candidate may start if it will end by the shadow time, or if it fits in the capacity left
//!    over at the shadow time once the head has started.
//! 5. **Fair share.** [`fair_share`] documents the usage, decay and score formulas.
//!    `computeReservation` keeps `ceil(max × (r/100)^active)` instances free for shares that are
//!    not active yet, where `active` counts shares with jobs waiting or running in the queue.
//! 6. **Backoff.** A job whose `not_before_ms` is in the future is skipped and blocks nobody.
//! 7. **"Not now" is data.** Every pending job that is not dispatched gets exactly one
//!    [`SkipReason`].
//! 8. **Retries.** [`retry`] decides what follows a failed, timed-out or long-waiting attempt.
//! 9. **Preemption.** A [`Preemption`] names a running attempt to stop and the waiting job it
//!    makes room for; that job waits (`WaitingForPreemptedCapacity`) and starts in a later cycle,
//!    once the victims' capacity is released. Only attempts that have run
//!    `Config::min_runtime_before_preemption_s` are ever victims; a job preempts its own
//!    share's jobs only once it has waited `Config::min_wait_before_in_share_preemption_s`,
//!    and reclaims its share's lent capacity once it has waited
//!    `Config::min_wait_before_reclaim_s`.
//!
//! # Layout
//!
//! `plan` runs the cycle (rules 1 to 7) and hands quota-managed queues to [`quota`]; both place
//! jobs through `env` (an environment's capacity, its head's reservation, the order within a
//! share) and record what they decide in `decision`'s types ([`Plan`], [`SkipReason`], ...),
//! so neither depends on the other's internals.

mod decision;
mod env;
pub mod fair_share;
mod plan;
mod pool;
pub mod quota;
pub mod retry;
pub mod snapshot;

pub use decision::{
    Dispatch, Plan, Preemption, PreemptionReason, QuotaLimitCause, Skip, SkipReason, Unit, WaitKind,
};
pub use plan::plan_cycle;
pub use pool::within_limits;
pub use snapshot::{
    Config, EnvironmentState, PendingJob, QueuePolicy, QueueState, QuotaShareState, RunningJob,
    ShareKey, SharedInstances, SharedStr, Snapshot, waited_since_ms,
};
