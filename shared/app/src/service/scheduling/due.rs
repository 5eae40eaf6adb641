//! The periodic pass over the jobs holding capacity: launches to retry, stops for terminated
//! and timed-out attempts, and a describe of attempts not heard from for a while (their events
//! may have been lost).

use trainyard_domain::job::StopRequest;
use trainyard_domain::training::batch_status;
use trainyard_scheduler::retry::{self, AttemptFailure, StopCause};

use super::{CycleConfig, CycleReport, DueReport, Ending, StateOutcome};
use crate::error::AppError;
use crate::ports::{BackendError, EventSink, SchedulingStore, StoreError, TrainingBackend};
use crate::service::Service;

impl<S: SchedulingStore, E: EventSink> Service<S, E> {
    /// The periodic pass over jobs holding capacity: launches to retry, stops for terminated and
    /// timed-out attempts, and a describe of attempts not heard from for `quiet_ms` (their
    /// events may have been lost). Bounded by the number of dispatched jobs.
    pub async fn run_due_work<B: TrainingBackend>(
        &self,
        backend: &B,
        config: &CycleConfig,
        quiet_ms: i64,
    ) -> Result<DueReport, AppError> {
        let mut report = DueReport::default();
        for stored in self.store.dispatched_jobs().await? {
            let now = self.clock.now_ms();
            let mut job = stored.value;
            let n = job.attempts.len();
            let Some(attempt) = job.latest_attempt().cloned() else {
                continue;
            };
            let name = attempt.training_job_name.clone();

            // A launch that did not get through (throttled, crashed before recording it).
            if attempt.training_job_arn.is_none() && !job.is_terminated {
                let mut launch = CycleReport::default();
                self.launch(backend, &job, config, &mut launch).await?;
                report.relaunched += 1;
                continue;
            }

            // Terminated, or past its attemptDurationSeconds: ask SageMaker to stop it. The
            // Stopped state change then ends the attempt.
            let timed_out = retry::timed_out(&job, now) && attempt.stop_requested.is_none();
            if job.is_terminated || timed_out {
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
            if now - job.updated_at >= quiet_ms {
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
