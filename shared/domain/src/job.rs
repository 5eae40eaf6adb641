//! The service job: one SageMaker `CreateTrainingJob` request submitted to a queue, run as one
//! or more attempts, and its status state machine.
//!
//! # State machine
//!
//! Batch's statuses, with SageMaker's mapping (reference §4.1):
//!
//! ```text
//! SUBMITTED ─► RUNNABLE ─► SCHEDULED ─► STARTING ─► RUNNING ─► SUCCEEDED
//!     │            │  ▲         │           │          │
//!     │            │  └─────────┴───────────┴──────────┤  retry, capacity error, preemption
//!     └────────────┴────────────────────────────────────┴─► FAILED
//! ```
//!
//! - Forward skips among SCHEDULED → STARTING → RUNNING → SUCCEEDED are legal: SageMaker's events
//!   may be missed, and reconciliation then sees a later state directly.
//! - SCHEDULED, STARTING and RUNNING may return to RUNNABLE (retry, capacity error, preemption).
//! - `PENDING` is in Batch's enum but unused for service jobs; it may only move on to RUNNABLE
//!   or FAILED.
//! - SUCCEEDED and FAILED are terminal and absorbing.
//! - Staying in the same status is not a transition (callers treat it as a no-op).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::Tags;
use crate::payload::TrainingRequest;

/// Batch's `ServiceJobStatus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobStatus {
    /// Accepted by the API, not yet in its queue's runnable set.
    Submitted,
    /// In Batch's enum; not used for service jobs.
    Pending,
    /// Waiting for capacity.
    Runnable,
    /// Dispatched: the SageMaker training job was created (`InProgress/Pending|Starting`).
    Scheduled,
    /// SageMaker acquired capacity and downloads data (`InProgress/Downloading`).
    Starting,
    /// Training or uploading (`InProgress/Training|Uploading`).
    Running,
    /// The training job completed.
    Succeeded,
    /// Failed, stopped, or terminated.
    Failed,
}

impl JobStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [JobStatus; 8] = [
        Self::Submitted,
        Self::Pending,
        Self::Runnable,
        Self::Scheduled,
        Self::Starting,
        Self::Running,
        Self::Succeeded,
        Self::Failed,
    ];

    /// The wire spelling (`RUNNABLE`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Submitted => "SUBMITTED",
            Self::Pending => "PENDING",
            Self::Runnable => "RUNNABLE",
            Self::Scheduled => "SCHEDULED",
            Self::Starting => "STARTING",
            Self::Running => "RUNNING",
            Self::Succeeded => "SUCCEEDED",
            Self::Failed => "FAILED",
        }
    }

    /// Parses the wire spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|status| status.as_str() == s)
    }

    /// SUCCEEDED or FAILED.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed)
    }

    /// SCHEDULED, STARTING or RUNNING: an attempt exists and holds capacity.
    pub fn is_dispatched(self) -> bool {
        matches!(self, Self::Scheduled | Self::Starting | Self::Running)
    }

    /// Whether `self → next` is a legal transition (see the module docs).
    pub fn can_transition_to(self, next: Self) -> bool {
        use JobStatus::*;
        match (self, next) {
            (a, b) if a == b => false,
            (Succeeded | Failed, _) => false,
            (_, Failed) => true,
            (Submitted | Pending, Runnable) => true,
            (Runnable, Scheduled) => true,
            (Scheduled, Starting | Running | Succeeded) => true,
            (Starting, Running | Succeeded) => true,
            (Running, Succeeded) => true,
            (Scheduled | Starting | Running, Runnable) => true,
            _ => false,
        }
    }
}

impl std::fmt::Display for JobStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An illegal status change; carries both ends for the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a service job cannot move from {from} to {to}")]
pub struct IllegalTransition {
    /// Current status.
    pub from: JobStatus,
    /// Requested status.
    pub to: JobStatus,
}

/// `serviceJobType`: only SageMaker training exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum ServiceJobType {
    /// `SAGEMAKER_TRAINING`.
    #[default]
    #[serde(rename = "SAGEMAKER_TRAINING")]
    SagemakerTraining,
}

/// `evaluateOnExit[].action`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RetryAction {
    /// Retry if attempts remain.
    Retry,
    /// Fail the job now.
    Exit,
}

/// One `evaluateOnExit` rule: a glob on the status reason and what to do on a match.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EvaluateOnExit {
    /// What to do when the pattern matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<RetryAction>,
    /// Glob (`*` wildcards) matched against the attempt's status reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_status_reason: Option<String>,
}

/// `retryStrategy`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetryStrategy {
    /// Total times the job may be placed in RUNNABLE, the first included (1–10).
    pub attempts: u32,
    /// Rules evaluated in order; at most 5.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evaluate_on_exit: Vec<EvaluateOnExit>,
}

/// `timeoutConfig`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct TimeoutConfig {
    /// Longest an attempt may run before Trainyard stops it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt_duration_seconds: Option<u32>,
}

/// `preemptionConfiguration` of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct JobPreemptionConfiguration {
    /// Preemptions tolerated before the job fails; unset means unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption_retries_before_termination: Option<u32>,
}

/// One attempt: one SageMaker training job launched for this service job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Attempt {
    /// Deterministic SageMaker training-job name for this attempt.
    pub training_job_name: String,
    /// ARN of the training job, once created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub training_job_arn: Option<String>,
    /// When the attempt was dispatched (epoch ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<i64>,
    /// When the attempt ended (epoch ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_at: Option<i64>,
    /// How it ended, e.g. `Received status from SageMaker: Training job completed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_reason: Option<String>,
    /// The service environment whose capacity the attempt holds (released when it ends).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_environment: Option<String>,
    /// Why Trainyard asked SageMaker to stop the attempt, if it did (a terminate is the job's
    /// `is_terminated`). The stop's Stopped state change is read by this, not by the words of
    /// `status_reason`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_requested: Option<StopRequest>,
    /// How the attempt failed, in the classes that decide whether it used one of
    /// `retryStrategy.attempts` (capacity errors, preemptions and lost training jobs do not):
    /// what the retry rules read, rather than the words of `status_reason`. Absent while it runs
    /// and when it completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_as: Option<Requeue>,
    /// The instance type SageMaker launched, of a request with `InstancePreferences`, once a
    /// state change said so (`ResourceConfig.SelectedInstanceType`): from then on the attempt
    /// holds that preference's instances only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selected_instance_type: Option<String>,
}

/// Why Trainyard asked SageMaker to stop a running attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum StopRequest {
    /// It ran past `timeout.attemptDurationSeconds`.
    Timeout,
    /// Its capacity is wanted by a job the policy ranks above it.
    Preemption,
}

/// Why a job that had an attempt went back to RUNNABLE (metrics count each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Requeue {
    /// No capacity: SageMaker's `CapacityError` or `ResourceLimitExceeded`, or the wait for
    /// capacity ran out. The attempt is not counted against `retryStrategy.attempts`.
    CapacityError,
    /// The attempt was stopped to free capacity for another job.
    Preemption,
    /// Any other ended attempt with retries left.
    Retry,
    /// The attempt's training job vanished from SageMaker (see `trainyard_scheduler::retry::
    /// LOST_REASON`). The attempt is not counted against `retryStrategy.attempts`.
    Lost,
}

/// `preemptionSummary` of a job that has been preempted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct PreemptionSummary {
    /// Times the job has been preempted.
    pub preempted_attempt_count: u32,
    /// The most recent preempted attempts (a sliding window).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recent_preempted_attempts: Vec<Attempt>,
}

/// A service job as stored. Times are epoch milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceJob {
    /// UUID, minted by the app layer.
    pub job_id: String,
    /// `jobName`.
    pub job_name: String,
    /// Name (not ARN) of the job queue.
    pub job_queue: String,
    /// Always SageMaker training.
    pub service_job_type: ServiceJobType,
    /// The submitted `serviceRequestPayload`, verbatim. Shared by the job's copies: it never
    /// changes, and every read of a job copies the job.
    pub service_request_payload: Arc<str>,
    /// What scheduling needs from the payload, parsed once at submission.
    /// Shared by the job's copies, as the payload it comes from.
    pub training: Arc<TrainingRequest>,
    /// Fair-share share, if the queue has a fair-share policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_identifier: Option<String>,
    /// Quota share, if the queue has a quota-share policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_share_name: Option<String>,
    /// 0–9999, higher first within a share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_priority: Option<u32>,
    /// Retry rules; absent means one attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_strategy: Option<RetryStrategy>,
    /// Attempt timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_config: Option<TimeoutConfig>,
    /// Preemption tolerance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption_configuration: Option<JobPreemptionConfiguration>,
    /// Tags, shared by the job's copies until one is edited.
    #[serde(default)]
    pub tags: Arc<Tags>,
    /// Idempotency token the job was submitted with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_token: Option<String>,
    /// The ARN of the caller who submitted it (the IAM principal on AWS, a verified access key's
    /// principal locally); `None` when nobody authenticated the submit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Current status.
    pub status: JobStatus,
    /// Why it is in its status (skip reason while RUNNABLE, failure reason once FAILED).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_reason: Option<String>,
    /// Set by TerminateServiceJob.
    #[serde(default)]
    pub is_terminated: bool,
    /// The reason given to TerminateServiceJob, kept until the attempt being stopped ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_reason: Option<String>,
    /// Not to be dispatched before this time (retry and capacity backoff, epoch ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<i64>,
    /// Attempts so far, oldest first.
    #[serde(default)]
    pub attempts: Vec<Attempt>,
    /// Why the job last went back to RUNNABLE after an attempt (none before its first attempt
    /// ends that way).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requeued_by: Option<Requeue>,
    /// Present once preempted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption_summary: Option<PreemptionSummary>,
    /// Submission time.
    pub created_at: i64,
    /// The job's place in line: its submission time when it first enters RUNNABLE (so jobs
    /// accepted together keep their submission order), the time of entry after a requeue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runnable_at: Option<i64>,
    /// How much later than `runnable_at` the job stands in its share's line: set at submission
    /// by a queue that puts shorter jobs first (`trainyard:shorter-first-hours`), from the job's
    /// `MaxRuntimeInSeconds`; 0 otherwise. See [`ServiceJob::line_at`].
    #[serde(default, skip_serializing_if = "is_zero")]
    pub line_offset_ms: i64,
    /// First dispatch to SageMaker (SCHEDULED).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_at: Option<i64>,
    /// First time the job reached RUNNING.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<i64>,
    /// When the job reached a terminal status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_at: Option<i64>,
    /// Last change of any kind.
    pub updated_at: i64,
}

impl ServiceJob {
    /// A job just submitted at `now`: SUBMITTED, with no attempt, no share, priority, retry
    /// strategy, timeout, tags or token (set those with struct update syntax).
    pub fn submitted(
        job_id: String,
        job_name: String,
        job_queue: String,
        service_request_payload: impl Into<Arc<str>>,
        training: TrainingRequest,
        now: i64,
    ) -> Self {
        Self {
            job_id,
            job_name,
            job_queue,
            service_job_type: ServiceJobType::SagemakerTraining,
            service_request_payload: service_request_payload.into(),
            training: Arc::new(training),
            share_identifier: None,
            quota_share_name: None,
            scheduling_priority: None,
            retry_strategy: None,
            timeout_config: None,
            preemption_configuration: None,
            tags: Arc::default(),
            client_token: None,
            owner: None,
            status: JobStatus::Submitted,
            status_reason: None,
            is_terminated: false,
            termination_reason: None,
            not_before: None,
            attempts: Vec::new(),
            requeued_by: None,
            preemption_summary: None,
            created_at: now,
            runnable_at: None,
            line_offset_ms: 0,
            scheduled_at: None,
            started_at: None,
            stopped_at: None,
            updated_at: now,
        }
    }

    /// The job's scheduling priority, 0 when unset.
    pub fn priority(&self) -> u32 {
        self.scheduling_priority.unwrap_or(0)
    }

    /// Where the job stands in its share's line, as a time: when it became RUNNABLE (its
    /// submission before that), plus its [`line_offset_ms`](Self::line_offset_ms).
    pub fn line_at(&self) -> i64 {
        self.runnable_at
            .unwrap_or(self.created_at)
            .saturating_add(self.line_offset_ms)
    }

    /// Moves the job to `next`, stamping the timestamps that status implies.
    ///
    /// `reason` replaces the status reason (a `None` clears it). Returns an error and leaves the
    /// job untouched when the transition is illegal.
    pub fn transition(
        &mut self,
        next: JobStatus,
        reason: Option<String>,
        now_ms: i64,
    ) -> Result<(), IllegalTransition> {
        if !self.status.can_transition_to(next) {
            return Err(IllegalTransition {
                from: self.status,
                to: next,
            });
        }
        match next {
            JobStatus::Runnable if self.status == JobStatus::Submitted => {
                self.runnable_at = Some(self.created_at.min(now_ms));
            }
            JobStatus::Runnable => self.runnable_at = Some(now_ms),
            JobStatus::Scheduled => {
                self.scheduled_at.get_or_insert(now_ms);
            }
            JobStatus::Running | JobStatus::Succeeded => {
                self.started_at.get_or_insert(now_ms);
            }
            _ => {}
        }
        if next.is_terminal() {
            self.stopped_at = Some(now_ms);
        }
        self.status = next;
        self.status_reason = reason;
        self.updated_at = now_ms;
        Ok(())
    }

    /// The latest attempt, if any.
    pub fn latest_attempt(&self) -> Option<&Attempt> {
        self.attempts.last()
    }

    /// The instances the job holds or asks for, per type: its request's, except that a
    /// dispatched job whose attempt SageMaker launched on one of its `InstancePreferences`
    /// holds that preference's instances only.
    pub fn held_instances(&self) -> std::borrow::Cow<'_, BTreeMap<String, u32>> {
        match self.latest_attempt() {
            Some(attempt) if self.status.is_dispatched() => self.attempt_instances(attempt),
            _ => std::borrow::Cow::Borrowed(&self.training.instances),
        }
    }

    /// The instances `attempt` held: the request's, or the preference SageMaker launched.
    pub fn attempt_instances(
        &self,
        attempt: &Attempt,
    ) -> std::borrow::Cow<'_, BTreeMap<String, u32>> {
        let preference = attempt.selected_instance_type.as_deref().and_then(|ty| {
            self.training
                .preferences
                .iter()
                .find(|(preferred, _)| preferred == ty)
        });
        match preference {
            Some((ty, count)) => std::borrow::Cow::Owned(BTreeMap::from([(ty.clone(), *count)])),
            None => std::borrow::Cow::Borrowed(&self.training.instances),
        }
    }

    /// The instances of [`ServiceJob::held_instances`], across types.
    pub fn held_total(&self) -> u64 {
        self.held_instances().values().map(|n| u64::from(*n)).sum()
    }

    /// How many of its attempts were preempted (`preemptionSummary.preemptedAttemptCount`).
    pub fn preemptions(&self) -> u32 {
        self.preemption_summary
            .as_ref()
            .map_or(0, |s| s.preempted_attempt_count)
    }
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use JobStatus::*;

    /// Every legal transition, written out; everything else must be refused.
    const LEGAL: &[(JobStatus, JobStatus)] = &[
        (Submitted, Runnable),
        (Submitted, Failed),
        (Pending, Runnable),
        (Pending, Failed),
        (Runnable, Scheduled),
        (Runnable, Failed),
        (Scheduled, Starting),
        (Scheduled, Running),
        (Scheduled, Succeeded),
        (Scheduled, Failed),
        (Scheduled, Runnable),
        (Starting, Running),
        (Starting, Succeeded),
        (Starting, Failed),
        (Starting, Runnable),
        (Running, Succeeded),
        (Running, Failed),
        (Running, Runnable),
    ];

    #[test]
    fn only_the_listed_transitions_are_legal() {
        for from in JobStatus::ALL {
            for to in JobStatus::ALL {
                let expected = LEGAL.contains(&(from, to));
                assert_eq!(from.can_transition_to(to), expected, "{from} -> {to}");
            }
        }
    }

    #[test]
    fn terminal_states_are_absorbing() {
        for terminal in [Succeeded, Failed] {
            assert!(terminal.is_terminal());
            assert!(
                JobStatus::ALL
                    .iter()
                    .all(|next| !terminal.can_transition_to(*next))
            );
        }
    }

    #[test]
    fn wire_names_round_trip() {
        for status in JobStatus::ALL {
            assert_eq!(JobStatus::parse(status.as_str()), Some(status));
            let json = serde_json::to_string(&status).unwrap();
            assert_eq!(json, format!("\"{}\"", status.as_str()));
        }
        assert_eq!(JobStatus::parse("running"), None);
    }

    fn job() -> ServiceJob {
        ServiceJob::submitted(
            "j1".into(),
            "train".into(),
            "q".into(),
            "{}",
            TrainingRequest::single("t", "ml.p4d.24xlarge", 2),
            1_000,
        )
    }

    #[test]
    fn transitions_stamp_their_timestamps() {
        let mut j = job();
        j.transition(Runnable, None, 2_000).unwrap();
        assert_eq!(
            j.runnable_at,
            Some(1_000),
            "first entry keeps the submission time"
        );
        j.transition(Scheduled, None, 3_000).unwrap();
        j.transition(Running, None, 4_000).unwrap();
        j.transition(Runnable, Some("retry".into()), 5_000).unwrap();
        assert_eq!(j.runnable_at, Some(5_000), "a requeue goes to the back");
        j.transition(Scheduled, None, 6_000).unwrap();
        assert_eq!(j.scheduled_at, Some(3_000), "first dispatch is kept");
        j.transition(Succeeded, Some("done".into()), 7_000).unwrap();
        assert_eq!((j.started_at, j.stopped_at), (Some(4_000), Some(7_000)));
        assert_eq!(j.status_reason.as_deref(), Some("done"));
    }

    #[test]
    fn an_illegal_transition_leaves_the_job_untouched() {
        let mut j = job();
        let before = j.clone();
        let err = j.transition(Running, None, 9).unwrap_err();
        assert_eq!(
            err,
            IllegalTransition {
                from: Submitted,
                to: Running
            }
        );
        assert_eq!(j, before);
    }
}
