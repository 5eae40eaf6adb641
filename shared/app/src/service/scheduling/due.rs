//! The periodic pass over the jobs holding capacity: launches to retry, stops for terminated
//! and timed-out attempts, and a describe of attempts not heard from for a while (their events
//! may have been lost). [`DueWork`] says which of these a host does.

use trainyard_domain::job::StopRequest;
use trainyard_domain::training::batch_status;
use trainyard_scheduler::retry::{self, AttemptFailure, StopCause};

use super::{CycleConfig, CycleReport, DueReport, Ending, StateOutcome};
use crate::error::AppError;
use crate::ports::{BackendError, EventSink, SchedulingStore, StoreError, TrainingBackend};
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
    /// been lost).
    pub reconcile_quiet_ms: Option<i64>,
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
            launch_grace_ms: 0,
            deadline_ms: None,
        }
    }
}

impl<S: SchedulingStore, E: EventSink> Service<S, E> {
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
                    if work.relaunch {
                        let mut launch = CycleReport::default();
                        self.launch(backend, &job, config, &mut launch).await?;
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
            // would read the job again).
            if work
                .reconcile_quiet_ms
                .is_some_and(|quiet_ms| now - job.updated_at >= quiet_ms)
            {
                match backend.describe_training_job(&name).await {
                    Ok(state) if batch_status(&state).is_none_or(|s| s == job.status) => {}
                    Ok(state) => {
                        if let StateOutcome::Applied(_) =
                            self.on_training_state(&state, config).await?
                        {
                            report.reconciled += 1;
                        }
                    }
                    Err(e) => tracing::warn!(job_id = %job.job_id, error = %e, "describe failed"),
                }
            }
        }
        Ok(report)
    }
}
