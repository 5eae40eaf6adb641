//! Changing a job after submission: terminate (one or many) and re-prioritise.

use super::*;
use crate::service::scheduling::RACE_RETRIES;

impl<S: JobStore + ConfigStore, E: EventSink> Service<S, E> {
    /// Applies `change` to a job, re-reading and retrying on a version conflict up to
    /// `RACE_RETRIES` times in all: the scheduler rewrites waiting jobs' reasons every cycle, so
    /// a request racing it loses now and then, and must not surface that as a server error.
    /// `change` returns `Ok(false)` when there is nothing to write.
    pub(super) async fn update_with_retry<F>(
        &self,
        id_or_arn: &str,
        mut change: F,
    ) -> Result<ServiceJob, AppError>
    where
        F: FnMut(&mut ServiceJob) -> Result<bool, AppError> + Send,
    {
        let mut tries = 0;
        loop {
            tries += 1;
            let Versioned {
                value: mut job,
                version,
            } = self.load_job(id_or_arn).await?;
            if !change(&mut job)? {
                return Ok(job);
            }
            match self.store.update_job(&job, version).await {
                Ok(_) => return Ok(job),
                Err(StoreError::Conflict) if tries < RACE_RETRIES => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// `TerminateServiceJob`: a job that has not finished becomes FAILED with `reason` and
    /// `isTerminated`; a finished job is left as it is (not an error).
    pub async fn terminate_job(&self, job_id_or_arn: &str, reason: &str) -> Result<(), AppError> {
        let now = self.clock.now_ms();
        let mut changed = false;
        let job = self
            .update_with_retry(job_id_or_arn, |job| {
                match terminate_action(job) {
                    TerminateAction::AlreadyFinished => {
                        changed = false;
                        Ok(false)
                    }
                    TerminateAction::FailNow => {
                        job.transition(JobStatus::Failed, Some(reason.to_owned()), now)
                            .map_err(|e| AppError::Conflict(e.to_string()))?;
                        job.is_terminated = true;
                        changed = true;
                        Ok(true)
                    }
                    // A dispatched job: mark it, and the scheduling loop stops its attempt. The
                    // job becomes FAILED, with this reason, when SageMaker reports it stopped, so
                    // its capacity is released only once the instances really are free.
                    TerminateAction::StopAttempt { .. } => {
                        if job.is_terminated {
                            changed = false;
                            return Ok(false);
                        }
                        job.is_terminated = true;
                        job.termination_reason = Some(reason.to_owned());
                        job.updated_at = now;
                        changed = true;
                        Ok(true)
                    }
                }
            })
            .await?;
        if changed {
            tracing::info!(job_id = %job.job_id, reason, status = %job.status, "job terminated");
            self.publish_status(&job).await;
        }
        Ok(())
    }

    /// `TerminateServiceJobs`: terminates each job; jobs that do not exist count as successful
    /// (Batch's documented behaviour). One failure does not stop the others.
    pub async fn terminate_jobs(&self, ids: &[String], reason: &str) -> BulkTerminate {
        let mut out = BulkTerminate::default();
        for id in ids {
            match self.terminate_job(id, reason).await {
                Ok(()) | Err(AppError::NotFound(_)) => out.successful.push(id.clone()),
                Err(e) => out.errors.push(TerminateFailure {
                    job: id.clone(),
                    code: if e.is_client_error() {
                        "ClientException"
                    } else {
                        "ServerException"
                    },
                    message: if e.is_client_error() {
                        e.to_string()
                    } else {
                        tracing::error!(job = %id, error = %e, "bulk terminate failed");
                        "Failed to read job state. Please retry this job.".to_owned()
                    },
                }),
            }
        }
        out
    }

    /// `UpdateServiceJob`: sets the job's `schedulingPriority`. Finished jobs are refused.
    pub async fn update_priority(
        &self,
        id_or_arn: &str,
        priority: u32,
    ) -> Result<ServiceJob, AppError> {
        let now = self.clock.now_ms();
        self.update_with_retry(id_or_arn, |job| {
            if job.status.is_terminal() {
                return Err(AppError::Invalid(format!(
                    "Service job {} is {} and its schedulingPriority can no longer be updated",
                    job.job_id, job.status
                )));
            }
            if job.scheduling_priority == Some(priority) {
                return Ok(false);
            }
            job.scheduling_priority = Some(priority);
            job.updated_at = now;
            Ok(true)
        })
        .await
    }
}
