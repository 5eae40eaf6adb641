//! Step 4 of a cycle, and preemption: creating an attempt's training job under its
//! deterministic name (adopting one that an earlier launch created), recording its ARN, and
//! asking a victim's training job to stop.

use serde_json::Value;
use trainyard_domain::job::{ServiceJob, StopRequest};
use trainyard_scheduler::retry::{self, AttemptFailure, StopCause};

use super::snapshot::Loaded;
use super::{CycleConfig, CycleReport, Ending, RACE_RETRIES};
use crate::error::AppError;
use crate::ports::{
    BackendError, EnvironmentUsage, EventSink, SchedulingStore, StoreError, TrainingBackend,
    Versioned, Write,
};
use crate::service::Service;

/// Whether a launch's ARN was recorded on its attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Recorded {
    /// On the live attempt (or it already was).
    Recorded,
    /// The attempt had ended, or the job moved on: nothing will track the training job.
    AttemptOver,
}

/// How many preempted attempts a job's `preemptionSummary` lists (a sliding window).
const RECENT_PREEMPTIONS: usize = 5;

/// SageMaker's limit on `Environment` entries.
const MAX_ENVIRONMENT_ENTRIES: usize = 100;

/// The CreateTrainingJob request of an attempt: the submitted payload under the attempt's name,
/// with `Environment` entries telling the container which job and attempt it is and how often
/// the job was preempted (`TRAINYARD_JOB_ID`, `TRAINYARD_ATTEMPT`, `TRAINYARD_PREEMPTIONS`), so
/// a resumed attempt knows to load its checkpoint. They replace entries of the same names, and
/// are left out when they would take the payload past SageMaker's 100 entries.
fn launch_request(job: &ServiceJob, name: &str) -> Result<Value, AppError> {
    let mut request: Value = serde_json::from_str(&job.service_request_payload).map_err(|e| {
        AppError::Internal(StoreError::Corrupt {
            key: job.job_id.clone(),
            message: e.to_string(),
        })
    })?;
    if let Value::Object(map) = &mut request {
        map.insert("TrainingJobName".into(), Value::String(name.to_owned()));
        let ours = [
            ("TRAINYARD_JOB_ID", job.job_id.clone()),
            ("TRAINYARD_ATTEMPT", job.attempts.len().to_string()),
            ("TRAINYARD_PREEMPTIONS", job.preemptions().to_string()),
        ];
        let environment = map
            .entry("Environment")
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
        if let Value::Object(entries) = environment {
            let added = ours
                .iter()
                .filter(|(k, _)| !entries.contains_key(*k))
                .count();
            if entries.len() + added <= MAX_ENVIRONMENT_ENTRIES {
                for (k, v) in ours {
                    entries.insert(k.to_owned(), Value::String(v));
                }
            }
        }
    }
    Ok(request)
}

/// Counts a preemption of the job's latest attempt in its `preemptionSummary`.
pub(super) fn record_preemption(job: &mut ServiceJob) {
    let Some(attempt) = job.latest_attempt().cloned() else {
        return;
    };
    let summary = job.preemption_summary.get_or_insert_with(Default::default);
    summary.preempted_attempt_count += 1;
    summary.recent_preempted_attempts.push(attempt);
    let excess = summary
        .recent_preempted_attempts
        .len()
        .saturating_sub(RECENT_PREEMPTIONS);
    summary.recent_preempted_attempts.drain(..excess);
}

/// What a refused launch ends the attempt with, counted in `report`.
fn refusal_failure(refusal: BackendError, report: &mut CycleReport) -> AttemptFailure {
    match refusal {
        BackendError::Capacity(message) => {
            report.capacity_errors += 1;
            AttemptFailure::Rejected {
                code: "ResourceLimitExceeded".into(),
                message,
            }
        }
        BackendError::Rejected { code, message } => {
            report.rejected += 1;
            AttemptFailure::Rejected { code, message }
        }
        other => AttemptFailure::Rejected {
            code: "Unknown".into(),
            message: other.to_string(),
        },
    }
}

impl<S: SchedulingStore, E: EventSink> Service<S, E> {
    /// Step 4: creates the attempt's training job and records its ARN, or ends the attempt.
    pub(super) async fn launch<B: TrainingBackend>(
        &self,
        backend: &B,
        job: &ServiceJob,
        config: &CycleConfig,
        report: &mut CycleReport,
    ) -> Result<(), AppError> {
        let n = job.attempts.len();
        let Some(attempt) = job.latest_attempt() else {
            return Ok(());
        };
        let name = attempt.training_job_name.clone();
        let created = backend
            .create_training_job(launch_request(job, &name)?)
            .await;
        let arn = match created {
            Ok(arn) => arn,
            // An earlier launch of this very attempt got through (a crash, a retried call).
            Err(BackendError::AlreadyExists(_)) => {
                match backend.describe_training_job(&name).await {
                    Ok(state) => state.arn,
                    Err(e) => {
                        tracing::warn!(job_id = %job.job_id, error = %e, "launch adopted but not described; will retry");
                        report.launch_deferred += 1;
                        return Ok(());
                    }
                }
            }
            // Refused. But an earlier create of this very attempt may have landed with its
            // response lost, and SageMaker may check the quota before the name: only a describe
            // that finds nothing proves that no training job runs under this name.
            Err(refusal @ (BackendError::Capacity(_) | BackendError::Rejected { .. })) => {
                match backend.describe_training_job(&name).await {
                    Ok(state) => state.arn,
                    Err(BackendError::NotFound(_)) => {
                        let failure = refusal_failure(refusal, report);
                        self.finish_attempt(&job.job_id, n, Ending::Failed(failure), config)
                            .await?;
                        return Ok(());
                    }
                    Err(e) => {
                        tracing::warn!(job_id = %job.job_id, error = %e, "refused launch not described; will retry");
                        report.launch_deferred += 1;
                        return Ok(());
                    }
                }
            }
            Err(e @ (BackendError::NotFound(_) | BackendError::Unavailable(_))) => {
                tracing::warn!(job_id = %job.job_id, error = %e, "launch deferred to the next pass");
                report.launch_deferred += 1;
                return Ok(());
            }
        };
        report.launched += 1;
        if self.record_arn(&job.job_id, n, &arn).await? == Recorded::AttemptOver {
            self.stop_orphan(backend, &job.job_id, &name).await;
        }
        Ok(())
    }

    /// Stores attempt `n`'s training-job ARN while the attempt is still the job's live one.
    async fn record_arn(&self, job_id: &str, n: usize, arn: &str) -> Result<Recorded, AppError> {
        for _ in 0..RACE_RETRIES {
            let Some(stored) = self.store.get_job(job_id).await? else {
                return Ok(Recorded::AttemptOver);
            };
            let mut job = stored.value;
            let live = job.status.is_dispatched() && job.attempts.len() == n;
            let Some(attempt) = job.attempts.get_mut(n.wrapping_sub(1)) else {
                return Ok(Recorded::AttemptOver);
            };
            if !live || attempt.stopped_at.is_some() {
                return Ok(Recorded::AttemptOver);
            }
            if attempt.training_job_arn.as_deref() == Some(arn) {
                return Ok(Recorded::Recorded);
            }
            attempt.training_job_arn = Some(arn.to_owned());
            match self.store.update_job(&job, stored.version).await {
                Ok(_) => return Ok(Recorded::Recorded),
                Err(StoreError::Conflict) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(Recorded::Recorded)
    }

    /// A launch landed after its attempt had ended (the job was terminated or ended by another
    /// process while the create was in flight): nothing tracks that training job any more, so
    /// it is stopped unless it has already finished by itself.
    async fn stop_orphan<B: TrainingBackend>(&self, backend: &B, job_id: &str, name: &str) {
        let running = match backend.describe_training_job(name).await {
            Ok(state) => !state.status.is_terminal(),
            Err(BackendError::NotFound(_)) => false,
            Err(_) => true,
        };
        if !running {
            return;
        }
        match backend.stop_training_job(name).await {
            Ok(()) => {
                tracing::warn!(%job_id, training_job = name, "stopped a training job launched after its attempt ended")
            }
            Err(e) => {
                tracing::warn!(%job_id, training_job = name, error = %e, "a training job launched after its attempt ended could not be stopped")
            }
        }
    }

    /// Asks the backend to stop a running job so that its capacity goes to a preemptor. The
    /// attempt is marked first ([`Self::mark_victim`]), so that its Stopped state change is read
    /// as a preemption. Returns whether this was a new preemption: false if the victim had
    /// already ended or moved on, had already been asked to stop, or a newer lease holder was
    /// found to be scheduling.
    pub(super) async fn preempt<B: TrainingBackend>(
        &self,
        backend: &B,
        loaded: &mut Loaded,
        victim: &str,
        config: &CycleConfig,
    ) -> Result<bool, AppError> {
        let Some(stored) = self.store.get_job(victim).await? else {
            return Ok(false);
        };
        let mut job = stored.value;
        let n = job.attempts.len();
        if !job.status.is_dispatched() || job.is_terminated {
            return Ok(false);
        }
        let Some(attempt) = job.attempts.last_mut() else {
            return Ok(false);
        };
        let name = attempt.training_job_name.clone();
        // A cycle during the victim's stop grace plans the same preemption again: the stop is
        // asked for again (harmless), but counted once, when the attempt is first marked.
        let first = attempt.stop_requested.is_none();
        if first {
            attempt.stop_requested = Some(StopRequest::Preemption);
            attempt.status_reason = Some(retry::PREEMPTED_REASON.to_owned());
            let environment = attempt.service_environment.clone();
            if !self
                .mark_victim(loaded, &job, stored.version, environment.as_deref())
                .await?
            {
                return Ok(false);
            }
        }
        match backend.stop_training_job(&name).await {
            Ok(()) => Ok(first),
            // Never launched: nothing runs, so the attempt ends here.
            Err(BackendError::NotFound(_)) => {
                let ending = Ending::Failed(AttemptFailure::Stopped(StopCause::Preempted));
                self.finish_attempt(victim, n, ending, config).await?;
                Ok(first)
            }
            Err(e) => {
                tracing::warn!(job_id = %victim, error = %e, "preemption stop deferred");
                Ok(false)
            }
        }
    }
    /// Stores the victim's marked attempt. A pass holding the scheduler lease writes, in the same
    /// commit, the environment's usage document as it last read it with its own fence (the
    /// totals unchanged), as a dispatch does: if a newer lease holder dispatched there since this
    /// cycle's snapshot, the commit conflicts, the usage is read again (and shows the newer
    /// fence), and this pass stops nobody on a plan the newer one does not share. Returns whether
    /// the mark was stored; a conflict (the victim changed, or the usage did) leaves the
    /// preemption to the next cycle.
    async fn mark_victim(
        &self,
        loaded: &mut Loaded,
        job: &ServiceJob,
        version: u64,
        environment: Option<&str>,
    ) -> Result<bool, AppError> {
        let fenced = loaded.fence.zip(environment).and_then(|(fence, env)| {
            let usage = loaded.usage.get(env)?;
            let mut value = usage.value.clone();
            value.fence = Some(fence);
            Some((env, value, usage.version))
        });
        let Some((environment, usage, usage_version)) = fenced else {
            return match self.store.update_job(job, version).await {
                Ok(_) => Ok(true),
                Err(StoreError::Conflict) => Ok(false),
                Err(e) => Err(e.into()),
            };
        };
        let writes = [
            Write::job(job.clone(), version),
            Write::document(&usage, usage_version)?,
        ];
        match self.store.commit(&writes).await {
            Ok(()) => {
                let stored = Versioned {
                    value: usage,
                    version: usage_version + 1,
                };
                loaded.usage.insert(environment.to_owned(), stored);
                Ok(true)
            }
            Err(StoreError::Conflict) => {
                self.reread_usage(loaded, environment).await?;
                Ok(false)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// After a conflicting dispatch or victim mark: another writer changed the job or the
    /// environment, so the environment's usage is read again and the rest of the cycle checks
    /// against what is really stored.
    pub(super) async fn reread_usage(
        &self,
        loaded: &mut Loaded,
        environment: &str,
    ) -> Result<(), AppError> {
        let fresh = self
            .store
            .get_document::<EnvironmentUsage>(environment)
            .await?;
        if let Some(fresh) = fresh {
            loaded.usage.insert(environment.to_owned(), fresh);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::{Value, json};
    use trainyard_domain::job::{PreemptionSummary, ServiceJob};
    use trainyard_domain::payload::TrainingRequest;

    use super::{MAX_ENVIRONMENT_ENTRIES, launch_request};

    fn job(environment: Option<Value>) -> ServiceJob {
        let mut payload = json!({"TrainingJobName": "t", "HyperParameters": {"lr": "0.1"}});
        if let Some(environment) = environment {
            payload["Environment"] = environment;
        }
        let training = TrainingRequest::single("t", "ml.g5.xlarge", 1);
        ServiceJob::submitted(
            "job-1".into(),
            "t".into(),
            "q".into(),
            payload.to_string(),
            training,
            0,
        )
    }

    #[test]
    fn an_attempt_is_told_its_job_attempt_and_preemptions_in_its_environment() {
        let mut preempted = job(Some(json!({"MY_VAR": "x", "TRAINYARD_ATTEMPT": "forged"})));
        preempted.preemption_summary = Some(PreemptionSummary {
            preempted_attempt_count: 2,
            ..PreemptionSummary::default()
        });
        let request = launch_request(&preempted, "t-a3").unwrap();
        assert_eq!(request["TrainingJobName"], "t-a3");
        assert_eq!(
            request["Environment"],
            json!({
                "MY_VAR": "x",
                "TRAINYARD_JOB_ID": "job-1",
                "TRAINYARD_ATTEMPT": "0",
                "TRAINYARD_PREEMPTIONS": "2"
            })
        );
        assert_eq!(
            request["HyperParameters"],
            json!({"lr": "0.1"}),
            "the rest as submitted"
        );

        // A payload without an Environment gets one.
        let fresh = launch_request(&job(None), "t-a1").unwrap();
        assert_eq!(fresh["Environment"]["TRAINYARD_PREEMPTIONS"], "0");

        // Never past SageMaker's 100 entries: then the payload goes as submitted.
        let full: serde_json::Map<String, Value> = (0..MAX_ENVIRONMENT_ENTRIES - 2)
            .map(|i| (format!("V{i}"), json!("v")))
            .collect();
        let request = launch_request(&job(Some(Value::Object(full.clone()))), "t-a1").unwrap();
        assert_eq!(request["Environment"], Value::Object(full));
    }
}
