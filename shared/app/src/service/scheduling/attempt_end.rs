//! The end of an attempt and SageMaker's state changes: a state change (from an event, or from
//! describing an attempt) moves the job along; a terminal one ends the attempt, decides what
//! comes next (success, retry, capacity requeue, failure) and releases its capacity, in one
//! commit.

use trainyard_domain::job::{JobStatus, Requeue, ServiceJob, StopRequest};
use trainyard_domain::training::{batch_status, parse_attempt_name};
use trainyard_scheduler::retry::{self, AfterFailure, AttemptFailure, StopCause};

use super::launch::record_preemption;
use super::{CycleConfig, Ending, RACE_RETRIES, StateOutcome};
use crate::error::AppError;
use crate::ports::{
    CapacityRelease, EventSink, SchedulingStore, StoreError, TrainingJobState, TrainingStatus,
    Write,
};
use crate::service::Service;

/// Records which of its `InstancePreferences` SageMaker launched attempt `n` of `job` on, the
/// first time a state change says so (`ResourceConfig.SelectedInstanceType`), and returns what
/// the attempt gives back: the instances of the other preferences, held since its dispatch in
/// case SageMaker picked them, never launched. `None` when there is nothing to give back.
fn unselected_preferences(
    job: &mut ServiceJob,
    n: usize,
    state: &TrainingJobState,
) -> Option<CapacityRelease> {
    let selected = state.selected_instance_type.as_deref()?;
    let preferred = job
        .training
        .preferences
        .iter()
        .any(|(ty, _)| ty == selected);
    if job.training.preferences.len() < 2 || !preferred {
        return None;
    }
    let attempt = job.attempts.last_mut()?;
    if attempt.selected_instance_type.is_some() {
        return None;
    }
    attempt.selected_instance_type = Some(selected.to_owned());
    let environment = attempt.service_environment.clone()?;
    let release = CapacityRelease::unselected(&environment, job, n);
    (!release.instances.is_empty()).then_some(release)
}

impl<S: SchedulingStore, E: EventSink> Service<S, E> {
    /// Ends attempt `n` of a job: stamps the attempt, decides the job's next status (success,
    /// retry, capacity requeue, failure) and releases the attempt's capacity, all in one commit.
    /// Re-reads and retries when it loses a race.
    pub(super) async fn finish_attempt(
        &self,
        job_id: &str,
        n: usize,
        ending: Ending,
        config: &CycleConfig,
    ) -> Result<StateOutcome, AppError> {
        for _ in 0..RACE_RETRIES {
            let now = self.clock.now_ms();
            let Some(stored) = self.store.get_job(job_id).await? else {
                return Ok(StateOutcome::Unknown);
            };
            let mut job = stored.value;
            if job.attempts.len() != n || !job.status.is_dispatched() {
                return Ok(StateOutcome::Ignored);
            }
            let Some(attempt) = job.attempts.last_mut() else {
                return Ok(StateOutcome::Ignored);
            };
            attempt.stopped_at = Some(now);
            let environment = attempt.service_environment.clone();
            let (next, reason) = match &ending {
                Ending::Completed => {
                    let reason = retry::sagemaker_reason("Training job completed");
                    attempt.status_reason = Some(reason.clone());
                    (JobStatus::Succeeded, reason)
                }
                Ending::Failed(failure) => {
                    attempt.status_reason = Some(retry::attempt_status_reason(failure));
                    attempt.failed_as = Some(retry::requeue_of(failure));
                    let decision = retry::decide_after_failure(&job, failure, now, &config.retry);
                    if *failure == AttemptFailure::Stopped(StopCause::Preempted) {
                        record_preemption(&mut job);
                    }
                    match decision {
                        AfterFailure::Requeue {
                            not_before_ms,
                            status_reason,
                            ..
                        } => {
                            job.not_before = Some(not_before_ms);
                            job.requeued_by = Some(retry::requeue_of(failure));
                            (JobStatus::Runnable, status_reason)
                        }
                        AfterFailure::Failed { status_reason } => {
                            (JobStatus::Failed, status_reason)
                        }
                    }
                }
            };
            // A preempted job that resumes from its checkpoints keeps its place in line: it
            // lost its instances through no fault of its own, and little work. One without a
            // `CheckpointConfig` starts over, as a new job would, from the back.
            let place = job.runnable_at;
            if job.transition(next, Some(reason), now).is_err() {
                return Ok(StateOutcome::Ignored);
            }
            if next == JobStatus::Runnable
                && job.requeued_by == Some(Requeue::Preemption)
                && job.training.checkpoint_s3_uri.is_some()
            {
                job.runnable_at = place.or(job.runnable_at);
            }
            // The capacity goes back as an item of its own, which the next cycle folds into the
            // environment's usage: endings in a burst never queue on that one document.
            let mut writes = vec![Write::job(job.clone(), stored.version)];
            if let Some(environment) = &environment {
                let release = CapacityRelease::of(environment, &job, n);
                writes.push(Write::document_value(release, 0));
            }
            match self.store.commit(&writes).await {
                Ok(()) => {
                    tracing::info!(job_id = %job.job_id, attempt = n, status = %next,
                        reason = job.status_reason.as_deref().unwrap_or(""), "attempt ended");
                    self.publish_status(&job).await;
                    return Ok(StateOutcome::Applied(next));
                }
                Err(StoreError::Conflict) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(AppError::Internal(StoreError::Conflict))
    }

    /// Applies a SageMaker state change (from an event, or from describing an attempt).
    /// Duplicates, stale attempts, backward moves and finished jobs are ignored.
    pub async fn on_training_state(
        &self,
        state: &TrainingJobState,
        config: &CycleConfig,
    ) -> Result<StateOutcome, AppError> {
        let Some((job_id, n)) = parse_attempt_name(&state.name) else {
            return Ok(StateOutcome::Unknown);
        };
        for _ in 0..RACE_RETRIES {
            let Some(stored) = self.store.get_job(&job_id).await? else {
                return Ok(StateOutcome::Unknown);
            };
            let mut job = stored.value;
            if job.attempts.len() != n || !job.status.is_dispatched() {
                return Ok(StateOutcome::Ignored);
            }
            let Some(next) = batch_status(state) else {
                return Ok(StateOutcome::Ignored);
            };
            match next {
                JobStatus::Succeeded => {
                    return self
                        .finish_attempt(&job_id, n, Ending::Completed, config)
                        .await;
                }
                JobStatus::Failed => {
                    let failure = self.failure_of(&job, state);
                    return self
                        .finish_attempt(&job_id, n, Ending::Failed(failure), config)
                        .await;
                }
                _ => {}
            }
            // The first word of which preference SageMaker launched gives the others back.
            let unselected = unselected_preferences(&mut job, n, state);
            let moves = job.status.can_transition_to(next);
            if !moves && unselected.is_none() {
                return Ok(StateOutcome::Ignored);
            }
            let now = self.clock.now_ms();
            if let Some(attempt) = job.attempts.last_mut() {
                attempt
                    .training_job_arn
                    .get_or_insert_with(|| state.arn.clone());
            }
            if moves {
                let reason = job.status_reason.take().filter(|_| job.is_terminated);
                if job.transition(next, reason, now).is_err() {
                    return Ok(StateOutcome::Ignored);
                }
            }
            let mut writes = vec![Write::job(job.clone(), stored.version)];
            writes.extend(unselected.map(|release| Write::document_value(release, 0)));
            match self.store.commit(&writes).await {
                Ok(()) => {
                    if moves {
                        self.publish_status(&job).await;
                    }
                    return Ok(StateOutcome::Applied(job.status));
                }
                Err(StoreError::Conflict) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(AppError::Internal(StoreError::Conflict))
    }

    /// Why a `Failed` or `Stopped` attempt ended, using what Trainyard recorded when it asked
    /// for the stop.
    fn failure_of(&self, job: &ServiceJob, state: &TrainingJobState) -> AttemptFailure {
        if state.status == TrainingStatus::Failed {
            let reason = state
                .failure_reason
                .clone()
                .unwrap_or_else(|| "Unknown failure".into());
            return AttemptFailure::Failed {
                failure_reason: reason,
            };
        }
        let requested = job.latest_attempt().and_then(|a| a.stop_requested);
        let cause = if job.is_terminated {
            StopCause::Terminated {
                reason: job
                    .termination_reason
                    .clone()
                    .unwrap_or_else(|| "Terminated".into()),
            }
        } else if requested == Some(StopRequest::Timeout) {
            StopCause::Timeout
        } else if requested == Some(StopRequest::Preemption) {
            StopCause::Preempted
        } else if state.secondary == "MaxWaitTimeExceeded" {
            StopCause::CapacityWait
        } else {
            StopCause::External
        };
        AttemptFailure::Stopped(cause)
    }
}
