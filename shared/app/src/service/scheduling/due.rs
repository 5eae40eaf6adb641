//! The periodic pass over the jobs holding capacity: launches to retry, stops for terminated
//! and timed-out attempts, and a describe of attempts not heard from for a while (their events
//! may have been lost). [`DueWork`] says which of these a host does.

use trainyard_domain::job::{Attempt, ServiceJob, StopRequest};
use trainyard_domain::training::batch_status;
use trainyard_scheduler::retry::{self, AttemptFailure, StopCause};

use super::{CycleConfig, CycleReport, DueReport, Ending, StateOutcome};
use crate::error::AppError;
use crate::ports::{
    BackendError, EventSink, ReconcileMark, SchedulingStore, StoreError, TrainingBackend,
    TrainingJobState, Versioned, Write,
};
use crate::service::Service;

/// Which parts of the due work a host does. A host that runs the whole loop in one process
/// does all of it ([`DueWork::all`]). On AWS the work is split by who may do what: only the
/// scheduler function may create training jobs, so it relaunches; the retry function stops and
/// reconciles. Two processes then touch an attempt whose launch has not been recorded, so both
/// leave such an attempt alone for [`DueWork::launch_grace_ms`], longer than the pass that
/// dispatched it can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DueWork {
    /// Launch again the attempts whose launch did not get through (throttled, refused as
    /// unavailable, crashed before the ARN was recorded).
    pub relaunch: bool,
    /// Ask SageMaker to stop terminated and timed-out attempts (and end a terminated attempt
    /// that was never launched).
    pub stops: bool,
    /// Describe the attempts not heard from for this many milliseconds (their events may have
    /// been lost), on the schedule [`describe_due`] sets.
    pub reconcile_quiet_ms: Option<i64>,
    /// When this host's previous due-work pass began, if it knows: a quiet attempt is then
    /// described only when its silence crossed a checkpoint since (see [`describe_due`]).
    /// `None` describes every quiet attempt.
    pub reconcile_since_ms: Option<i64>,
    /// An attempt without a training-job ARN dispatched less than this long ago is left alone:
    /// its launch may still be in flight in another process.
    pub launch_grace_ms: i64,
    /// No job's work starts at or after this instant (the service's clock); the rest waits for
    /// the next pass ([`DueReport::out_of_time`]).
    pub deadline_ms: Option<i64>,
}

impl DueWork {
    /// All of it, with no grace: for a host whose launches and due work never overlap.
    pub fn all(reconcile_quiet_ms: i64) -> Self {
        Self {
            relaunch: true,
            stops: true,
            reconcile_quiet_ms: Some(reconcile_quiet_ms),
            reconcile_since_ms: None,
            launch_grace_ms: 0,
            deadline_ms: None,
        }
    }
}

impl<S: SchedulingStore, E: EventSink> Service<S, E> {
    /// When the last complete reconciliation pass began ([`ReconcileMark`]), with the version
    /// to move it forward from; `None` before any.
    pub async fn reconcile_mark(&self) -> Result<Option<Versioned<ReconcileMark>>, AppError> {
        Ok(self.store.get_document(ReconcileMark::KEY).await?)
    }

    /// Records that a complete pass began at `began_ms`, over `seen` (what
    /// [`Self::reconcile_mark`] read before the pass): only forward. A host that lost the race
    /// to another leaves the other's mark (at worst older: the next pass describes more, never
    /// less).
    pub async fn mark_reconciled(
        &self,
        began_ms: i64,
        seen: Option<&Versioned<ReconcileMark>>,
    ) -> Result<(), AppError> {
        if seen.is_some_and(|m| m.value.complete_pass_began_ms >= began_ms) {
            return Ok(());
        }
        let mark = ReconcileMark {
            complete_pass_began_ms: began_ms,
        };
        let version = seen.map_or(0, |m| m.version);
        match self
            .store
            .commit(&[Write::document_value(mark, version)])
            .await
        {
            Ok(()) | Err(StoreError::Conflict) => Ok(()),
            Err(error) => Err(error.into()),
        }
    }

    /// The periodic pass over jobs holding capacity, doing the parts `work` names: launches to
    /// retry, stops for terminated and timed-out attempts, and a describe of attempts not heard
    /// from for a while. Bounded by the number of dispatched jobs.
    pub async fn run_due_work<B: TrainingBackend>(
        &self,
        backend: &B,
        config: &CycleConfig,
        work: DueWork,
    ) -> Result<DueReport, AppError> {
        let mut report = DueReport::default();
        for stored in self.store.dispatched_jobs().await? {
            let now = self.clock.now_ms();
            if work.deadline_ms.is_some_and(|deadline| now >= deadline) {
                report.out_of_time = true;
                break;
            }
            let mut job = stored.value;
            let n = job.attempts.len();
            let Some(attempt) = job.latest_attempt().cloned() else {
                continue;
            };
            let name = attempt.training_job_name.clone();

            // A launch not recorded: in flight elsewhere for a while, then one that did not
            // get through.
            if attempt.training_job_arn.is_none() {
                let dispatched_at = attempt.started_at.unwrap_or(job.updated_at);
                if now - dispatched_at < work.launch_grace_ms {
                    continue;
                }
                if !job.is_terminated {
                    if work.relaunch
                        && let Some(current) = self.still_unlaunched(&job.job_id, n).await?
                    {
                        let mut launch = CycleReport::default();
                        self.launch(backend, &current, config, &mut launch).await?;
                        report.relaunched += 1;
                    }
                    continue;
                }
            }

            // Terminated, or past its attemptDurationSeconds: ask SageMaker to stop it. The
            // Stopped state change then ends the attempt.
            let timed_out = retry::timed_out(&job, now) && attempt.stop_requested.is_none();
            if work.stops && (job.is_terminated || timed_out) {
                if timed_out {
                    if let Some(a) = job.attempts.last_mut() {
                        a.stop_requested = Some(StopRequest::Timeout);
                        a.status_reason = Some(retry::TIMEOUT_REASON.to_owned());
                    }
                    match self.store.update_job(&job, stored.version).await {
                        Ok(_) => {}
                        Err(StoreError::Conflict) => continue,
                        Err(e) => return Err(e.into()),
                    }
                }
                match backend.stop_training_job(&name).await {
                    Ok(()) => report.stops_requested += 1,
                    // Never created: there is nothing to stop, so the attempt ends here.
                    Err(BackendError::NotFound(_)) => {
                        let cause = if job.is_terminated {
                            StopCause::Terminated {
                                reason: job.termination_reason.clone().unwrap_or_default(),
                            }
                        } else {
                            StopCause::Timeout
                        };
                        let ending = Ending::Failed(AttemptFailure::Stopped(cause));
                        self.finish_attempt(&job.job_id, n, ending, config).await?;
                    }
                    Err(e) => tracing::warn!(job_id = %job.job_id, error = %e, "stop deferred"),
                }
            }

            // Not heard from for a while: describe, in case an event was lost. A state that
            // shows the status the job already has changes nothing, and is not applied (which
            // would read the job again), unless it is the first to name the preference
            // SageMaker launched (the attempt then gives the others back).
            let overdue = job.is_terminated
                || attempt.stop_requested.is_some()
                || past_its_end(&job, &attempt, now, config);
            let window_ms = work.reconcile_since_ms.map(|since| now - since);
            if work.reconcile_quiet_ms.is_some_and(|quiet_ms| {
                describe_due(now - job.updated_at, quiet_ms, window_ms, overdue)
            }) {
                match backend.describe_training_job(&name).await {
                    Ok(state)
                        if batch_status(&state).is_none_or(|s| s == job.status)
                            && !names_the_launched_preference(&job, &attempt, &state) => {}
                    Ok(state) => {
                        if let StateOutcome::Applied(_) =
                            self.on_training_state(&state, config).await?
                        {
                            report.reconciled += 1;
                        }
                    }
                    // Launched (its ARN recorded), yet SageMaker has no such training job:
                    // it is gone, and waiting would hold its capacity for ever. The attempt
                    // ends, without using one of the job's attempts, and the job is requeued.
                    Err(BackendError::NotFound(_)) if attempt.training_job_arn.is_some() => {
                        tracing::warn!(job_id = %job.job_id, training_job = %name,
                            "the attempt's training job no longer exists; requeueing the job");
                        let ending = Ending::Failed(AttemptFailure::Lost);
                        if let StateOutcome::Applied(_) =
                            self.finish_attempt(&job.job_id, n, ending, config).await?
                        {
                            report.reconciled += 1;
                            report.lost += 1;
                        }
                    }
                    Err(e) => {
                        report.describe_failures += 1;
                        tracing::warn!(job_id = %job.job_id, error = %e, "describe failed");
                    }
                }
            }
        }
        Ok(report)
    }

    /// The job, read now, if attempt `n` is still its live attempt with no launch recorded: the
    /// list of jobs holding capacity comes from an index (and its batch read of the jobs) that
    /// may lag, and launching an attempt that has since ended would create a training job
    /// nothing tracks, to be stopped again at once.
    async fn still_unlaunched(
        &self,
        job_id: &str,
        n: usize,
    ) -> Result<Option<ServiceJob>, AppError> {
        let Some(stored) = self.store.get_job(job_id).await? else {
            return Ok(None);
        };
        let job = stored.value;
        let awaiting = job.status.is_dispatched()
            && !job.is_terminated
            && job.attempts.len() == n
            && job
                .latest_attempt()
                .is_some_and(|a| a.training_job_arn.is_none() && a.stopped_at.is_none());
        Ok(awaiting.then_some(job))
    }
}

/// The longest an attempt goes between describes while it stays quiet (see [`describe_due`]).
pub const RECONCILE_MAX_INTERVAL_MS: i64 = 3_600_000;

/// Whether a pass describes an attempt whose job has been silent (no change recorded) for
/// `silence_ms`, when the host's previous pass began `window_ms` ago (`None`: unknown).
///
/// Nothing is described before `quiet_ms` of silence. An attempt with an event *overdue* (asked
/// to stop, or past the end its maximum runtime allows) is then described on every pass. Any
/// other is described when its silence crosses a checkpoint: `quiet_ms`, then each time the
/// silence doubles, then every [`RECONCILE_MAX_INTERVAL_MS`] (5 min, 10, 20, 40, 80, 140, ...
/// with the defaults): a long training job that is simply running costs about 30 describes a
/// day rather than one a pass, and a lost end event is still found within an hour. A pass
/// describes the attempts whose latest checkpoint fell since the previous pass began, so every
/// checkpoint is seen by some pass however passes are spaced (or split across processes, each
/// with its own previous pass), and a host that does not know its previous pass describes every
/// quiet attempt.
pub fn describe_due(silence_ms: i64, quiet_ms: i64, window_ms: Option<i64>, overdue: bool) -> bool {
    if silence_ms < quiet_ms {
        return false;
    }
    let Some(window_ms) = window_ms.filter(|_| !overdue) else {
        return true;
    };
    silence_ms - latest_checkpoint(silence_ms, quiet_ms.max(1)) < window_ms
}

/// The latest reconciliation checkpoint at or before `silence_ms` (at least `quiet_ms`).
fn latest_checkpoint(silence_ms: i64, quiet_ms: i64) -> i64 {
    let mut checkpoint = quiet_ms;
    while checkpoint < RECONCILE_MAX_INTERVAL_MS {
        let next = checkpoint * 2;
        if next > silence_ms {
            return checkpoint;
        }
        checkpoint = next;
    }
    checkpoint + (silence_ms - checkpoint) / RECONCILE_MAX_INTERVAL_MS * RECONCILE_MAX_INTERVAL_MS
}

/// Whether `state` is the first word of which of its `InstancePreferences` SageMaker launched
/// the attempt on.
fn names_the_launched_preference(
    job: &ServiceJob,
    attempt: &Attempt,
    state: &TrainingJobState,
) -> bool {
    job.training.preferences.len() > 1
        && attempt.selected_instance_type.is_none()
        && state.selected_instance_type.is_some()
}

/// Whether the attempt has run past the longest its payload allows (`MaxRuntimeInSeconds`, or
/// the planner's default runtime): its end event is overdue.
fn past_its_end(job: &ServiceJob, attempt: &Attempt, now: i64, config: &CycleConfig) -> bool {
    let runtime_s = job
        .training
        .max_runtime_s
        .unwrap_or(config.planner.default_runtime_s);
    let runtime_ms = i64::try_from(runtime_s.saturating_mul(1000)).unwrap_or(i64::MAX);
    attempt
        .started_at
        .is_some_and(|started| now >= started.saturating_add(runtime_ms))
}

#[cfg(test)]
mod tests {
    use super::{RECONCILE_MAX_INTERVAL_MS as HOUR, describe_due};

    const MIN: i64 = 60_000;

    /// The passes, one a minute for a day, that describe an attempt silent since time 0.
    fn described(quiet: i64, overdue: bool) -> Vec<i64> {
        (1..=24 * 60)
            .map(|m| m * MIN)
            .filter(|now| describe_due(*now, quiet, Some(MIN), overdue))
            .collect()
    }

    #[test]
    fn a_quiet_attempt_is_described_as_its_silence_doubles_then_hourly() {
        let passes = described(5 * MIN, false);
        assert_eq!(
            passes[..6],
            [5, 10, 20, 40, 80, 140].map(|m| m * MIN),
            "{passes:?}"
        );
        assert!(
            passes.windows(2).all(|w| w[1] - w[0] <= HOUR),
            "never more than an hour apart"
        );
        assert_eq!(passes.len(), 27, "a day's describes: {passes:?}");
    }

    #[test]
    fn an_overdue_attempt_is_described_every_pass_once_quiet() {
        assert_eq!(described(5 * MIN, true).len(), 24 * 60 - 4);
        assert!(
            !describe_due(MIN, 5 * MIN, Some(MIN), true),
            "not before quiet"
        );
    }

    #[test]
    fn sparse_or_unknown_passes_still_see_every_checkpoint() {
        // Passes every 7 minutes: each checkpoint is described by the first pass after it.
        let passes: Vec<i64> = (1..=300)
            .map(|k| k * 7 * MIN)
            .filter(|now| describe_due(*now, 5 * MIN, Some(7 * MIN), false))
            .collect();
        assert_eq!(passes[..5], [7, 14, 21, 42, 84].map(|m| m * MIN));
        assert!(passes.windows(2).all(|w| w[1] - w[0] <= HOUR + 7 * MIN));
        // A host that does not know its previous pass describes every quiet attempt.
        assert!(describe_due(6 * MIN, 5 * MIN, None, false));
        assert!(!describe_due(4 * MIN, 5 * MIN, None, false));
    }
}
