//! One pass of the scheduling loop, the same for every host. The scheduler Lambda, local mode,
//! the simulator, the fault harness and the test worlds each keep only their trigger and their
//! clock, and call [`Service::pass`] with what they have:
//!
//! 1. **Accept** SUBMITTED jobs into their queues, in batches ([`Accept`]).
//! 2. **Apply** SageMaker's state changes, in order, so that capacity they free is seen by the
//!    cycle below.
//! 3. **Due work**, when the host says it is due, the parts it names ([`DueWork`]: launches to
//!    retry, stops for terminations and timeouts, missed events).
//! 4. **Cycle**, again while the last one dispatched, up to [`PassInput::max_cycles`] times.
//!
//! A step that fails is reported ([`PassReport::errors`]) and the next steps still run: each step
//! is safe to repeat, and the next pass retries. No step starts after the input's deadline.

use std::future::Future;

use super::{CycleConfig, CycleReport, DueReport, DueWork, StateOutcome};
use crate::error::AppError;
use crate::ports::{
    ConfigStore, EventSink, Fence, SchedulingStore, TrainingBackend, TrainingJobState,
};
use crate::service::Service;

/// How a pass accepts SUBMITTED jobs: at most `batch` × `max_batches` of them, only jobs at
/// least `min_age_ms` old. (A host that only accepts calls [`accept_in_batches`] with it.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accept {
    /// Jobs per `accept_submitted` call (at least 1).
    pub batch: usize,
    /// Most calls in one pass.
    pub max_batches: usize,
    /// Jobs younger than this stay SUBMITTED (see local mode's settle pause).
    pub min_age_ms: i64,
}

impl Accept {
    /// Every SUBMITTED job at least `min_age_ms` old, in batches of `batch`.
    pub fn all(batch: usize, min_age_ms: i64) -> Self {
        Self {
            batch,
            max_batches: usize::MAX,
            min_age_ms,
        }
    }
}

/// Whether a pass may run its next cycle, asked before each, given the pass's report so far
/// (its earlier cycles included). The simulator skips cycles that cannot change anything (no
/// waiting job, no free capacity) to replay a trace in seconds.
pub type CycleGate<'a> = &'a (dyn Fn(&PassReport) -> bool + Sync);

/// What one pass is asked to do. The default does nothing.
#[derive(Default)]
pub struct PassInput<'a> {
    /// Step 1, when given.
    pub accept: Option<Accept>,
    /// Jobs step 1 reads by id before the others: those the pass's trigger names (a job just
    /// submitted, which an eventually consistent index may not list yet).
    pub accept_named: &'a [String],
    /// Step 2: SageMaker's state changes, in the order they arrived.
    pub changes: &'a [TrainingJobState],
    /// Step 3, when given: the due work (see [`Service::run_due_work`]).
    pub due_work: Option<DueWork>,
    /// Step 4: most cycles (0: none).
    pub max_cycles: usize,
    /// Each cycle of step 4 runs only if this says so (none: always).
    pub cycle_gate: Option<CycleGate<'a>>,
    /// No step starts at or after this instant (the service's clock, epoch milliseconds).
    pub deadline_ms: Option<i64>,
    /// The scheduler lease this pass holds, if any: its cycles dispatch with it, and stand
    /// aside for a newer one (see [`Fence`](crate::ports::Fence)).
    pub fence: Option<Fence>,
}

/// A pass's step, for its errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Accepting SUBMITTED jobs.
    Accept,
    /// Applying the state change of this training job.
    StateChange(String),
    /// The due work.
    DueWork,
    /// A cycle.
    Cycle,
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Accept => f.write_str("accepting submitted jobs"),
            Self::StateChange(name) => write!(f, "applying the state of {name}"),
            Self::DueWork => f.write_str("due work"),
            Self::Cycle => f.write_str("scheduling cycle"),
        }
    }
}

/// A step that failed, and why.
#[derive(Debug)]
pub struct StepError {
    /// Which step.
    pub step: Step,
    /// Its error.
    pub error: AppError,
}

/// What one pass did.
#[derive(Debug, Default)]
pub struct PassReport {
    /// Jobs moved SUBMITTED → RUNNABLE.
    pub accepted: usize,
    /// Each state change that applied without error, in order, with what it did.
    pub applied: Vec<StateOutcome>,
    /// The due work's report, when it ran and succeeded.
    pub due: Option<DueReport>,
    /// Each cycle that ran and succeeded, in order.
    pub cycles: Vec<CycleReport>,
    /// The steps that failed.
    pub errors: Vec<StepError>,
    /// Whether the deadline stopped the pass before its last step.
    pub out_of_time: bool,
}

impl PassReport {
    /// The cycles' reports added up.
    pub fn cycle_totals(&self) -> CycleReport {
        let mut total = CycleReport::default();
        for c in &self.cycles {
            total.dispatched += c.dispatched;
            total.launched += c.launched;
            total.conflicts += c.conflicts;
            total.over_limit += c.over_limit;
            total.capacity_errors += c.capacity_errors;
            total.launch_deferred += c.launch_deferred;
            total.rejected += c.rejected;
            total.reasons_updated += c.reasons_updated;
            total.preemptions += c.preemptions;
            total.reclaims += c.reclaims;
            total.borrowers_held += c.borrowers_held;
            total.borrowing_moved |= c.borrowing_moved;
            total.fenced |= c.fenced;
        }
        total
    }

    fn failed(&mut self, step: Step, error: AppError) {
        self.errors.push(StepError { step, error });
    }
}

/// Accepts in batches with `call(limit, min_age_ms)` until a batch comes back short, the
/// batches run out, `out_of_time()` says stop, or a call fails; returns how many moved and the
/// error, if one ended it. Shared by [`Service::pass`] and hosts that only accept.
pub async fn accept_in_batches<F, Fut>(
    accept: Accept,
    mut out_of_time: impl FnMut() -> bool,
    mut call: F,
) -> (usize, Option<AppError>)
where
    F: FnMut(usize, i64) -> Fut,
    Fut: Future<Output = Result<usize, AppError>>,
{
    let batch = accept.batch.max(1);
    let mut total = 0;
    for _ in 0..accept.max_batches {
        if out_of_time() {
            break;
        }
        match call(batch, accept.min_age_ms).await {
            Ok(moved) => {
                total += moved;
                if moved < batch {
                    break;
                }
            }
            Err(error) => return (total, Some(error)),
        }
    }
    (total, None)
}

impl<S: ConfigStore + SchedulingStore, E: EventSink> Service<S, E> {
    /// Runs one pass of the scheduling loop (see the module docs).
    pub async fn pass<B: TrainingBackend>(
        &self,
        backend: &B,
        config: &CycleConfig,
        input: PassInput<'_>,
    ) -> PassReport {
        let mut report = PassReport::default();
        let out_of_time = || input.deadline_ms.is_some_and(|d| self.clock.now_ms() >= d);

        // 1. Accept: one scan, each job read once. The first cycle plans the accepted jobs
        // even if the runnable index does not show them yet.
        let mut fresh = Vec::new();
        if let Some(accept) = input.accept {
            let limit = accept.batch.max(1).saturating_mul(accept.max_batches);
            match self
                .accept_submitted_until(limit, accept.min_age_ms, input.accept_named, out_of_time)
                .await
            {
                Ok(accepted) => {
                    report.accepted = accepted.moved;
                    fresh = accepted.runnable;
                }
                Err(error) => report.failed(Step::Accept, error),
            }
        }

        // 2. Apply state changes.
        for state in input.changes {
            if out_of_time() {
                report.out_of_time = true;
                return report;
            }
            match self.on_training_state(state, config).await {
                Ok(outcome) => report.applied.push(outcome),
                Err(error) => report.failed(Step::StateChange(state.name.clone()), error),
            }
        }

        // 3. Due work.
        if let Some(work) = input.due_work {
            if out_of_time() {
                report.out_of_time = true;
                return report;
            }
            let work = DueWork {
                deadline_ms: work.deadline_ms.or(input.deadline_ms),
                ..work
            };
            match self.run_due_work(backend, config, work).await {
                Ok(due) => report.due = Some(due),
                Err(error) => report.failed(Step::DueWork, error),
            }
        }

        // 4. Cycles.
        for _ in 0..input.max_cycles {
            if input.cycle_gate.is_some_and(|gate| !gate(&report)) {
                break;
            }
            if out_of_time() {
                report.out_of_time = true;
                break;
            }
            match self
                .run_cycle_with(backend, config, &std::mem::take(&mut fresh), input.fence)
                .await
            {
                Ok(mut cycle) => {
                    let (dispatched, fenced) = (cycle.dispatched, cycle.fenced);
                    if let Some(decision) = &mut cycle.decision {
                        decision.trigger = format!(
                            "pass: {} jobs accepted, {} state changes, due work {}; cycle {} of the pass",
                            report.accepted,
                            input.changes.len(),
                            if report.due.is_some() {
                                "done"
                            } else {
                                "not run"
                            },
                            report.cycles.len() + 1
                        );
                    }
                    report.cycles.push(cycle);
                    if dispatched == 0 || fenced {
                        break;
                    }
                }
                Err(error) => {
                    report.failed(Step::Cycle, error);
                    break;
                }
            }
        }
        report
    }
}
