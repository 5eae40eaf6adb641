//! The `training-events` function's handler: EventBridge's "SageMaker Training Job State
//! Change" → `Service::on_training_state`.
//!
//! SageMaker delivers at least once and in no particular order; the use-case ignores
//! duplicates, stale attempts and backward moves, so this handler only sorts events into:
//!
//! - **applied** or **ignored** by the use-case;
//! - **foreign**: a training job Trainyard did not launch (its name is not an attempt name),
//!   or whose job no longer exists — acknowledged, since no retry can make it ours;
//! - **malformed**: not a SageMaker state change at all — acknowledged and logged, for the same
//!   reason.
//!
//! A store failure is an error, so that EventBridge and Lambda retry the event (the template
//! allows 185 retries over a day; the retry function's reconciliation is the backstop after).
//! So is running out of time: the use-case is cut [`STEP_MARGIN`](crate::runtime::STEP_MARGIN) before the invocation's
//! deadline (a store that stalls, or a race retried until then) and the event retried. Its
//! commit is one atomic write, so a cut leaves it applied or not, and a retry of an applied
//! change is a duplicate (ignored); what a cut after the commit loses is the job's state-change
//! event (the next schedule tick wakes the scheduler for the capacity).

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;
use trainyard_app::Service;
use trainyard_app::ports::{EventSink, SchedulingStore, TrainingJobState};
use trainyard_app::service::scheduling::{CycleConfig, StateOutcome};
use trainyard_domain::job::JobStatus;
use trainyard_domain::training::parse_attempt_name;

use crate::error::FunctionError;
use crate::runtime::{by_deadline, step_end};

/// The `detail-type` of SageMaker's training-job events.
pub const DETAIL_TYPE: &str = "SageMaker Training Job State Change";
/// Their `source`.
pub const SOURCE: &str = "aws.sagemaker";

/// What the handler did with one event (the function's response, and its log line).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub enum EventOutcome {
    /// The job moved to `status`.
    Applied {
        /// Training job name.
        training_job: String,
        /// The job's new status.
        status: JobStatus,
    },
    /// A duplicate, stale or out-of-order event, or a finished job: nothing changed.
    Ignored {
        /// Training job name.
        training_job: String,
    },
    /// Not one of Trainyard's training jobs (or its job is gone).
    Foreign {
        /// Training job name.
        training_job: String,
    },
    /// Not a SageMaker training-job state change.
    Malformed {
        /// What is wrong with it.
        reason: String,
    },
}

/// Reads a state change from an EventBridge event: the envelope's `source` and `detail-type`,
/// then the members of `detail` Trainyard needs.
pub fn parse_state_change(event: &Value) -> Result<TrainingJobState, String> {
    let text = |k: &str| event.get(k).and_then(Value::as_str);
    if text("source") != Some(SOURCE) || text("detail-type") != Some(DETAIL_TYPE) {
        return Err(format!(
            "expected source {SOURCE:?} and detail-type {DETAIL_TYPE:?}, got {:?} and {:?}",
            text("source"),
            text("detail-type")
        ));
    }
    let detail = event
        .get("detail")
        .filter(|d| d.is_object())
        .ok_or("the event has no detail object")?;
    TrainingJobState::from_sagemaker(detail).ok_or_else(|| {
        "detail lacks TrainingJobName or a known TrainingJobStatus \
         (InProgress, Completed, Failed, Stopping, Stopped)"
            .to_owned()
    })
}

/// The training-events handler over any store and event sink (it never calls SageMaker). Its
/// store port is [`SchedulingStore`] alone (job reads and writes, usage documents, commits).
pub struct TrainingEventsFunction<S: SchedulingStore, E: EventSink> {
    service: Arc<Service<S, E>>,
    cycle: CycleConfig,
}

impl<S: SchedulingStore, E: EventSink> TrainingEventsFunction<S, E> {
    /// A handler applying state changes with `cycle`'s retry settings.
    pub fn new(service: Arc<Service<S, E>>, cycle: CycleConfig) -> Self {
        Self { service, cycle }
    }

    /// The service (for hosts and tests).
    pub fn service(&self) -> &Arc<Service<S, E>> {
        &self.service
    }

    /// Handles one EventBridge event, within [`STEP_MARGIN`](crate::runtime::STEP_MARGIN) of `deadline` (the invocation's).
    pub async fn handle(
        &self,
        event: &Value,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<EventOutcome, FunctionError> {
        let state = match parse_state_change(event) {
            Ok(state) => state,
            Err(reason) => {
                let event_id = event.get("id").and_then(Value::as_str).unwrap_or_default();
                tracing::warn!(
                    %reason,
                    event_id,
                    "acknowledged a malformed training event"
                );
                return Ok(EventOutcome::Malformed { reason });
            }
        };
        let training_job = state.name.clone();
        if parse_attempt_name(&state.name).is_none() {
            tracing::info!(%training_job, "acknowledged a training job Trainyard did not launch");
            return Ok(EventOutcome::Foreign { training_job });
        }
        let applied = by_deadline(
            deadline.map(step_end),
            self.service.on_training_state(&state, &self.cycle),
        )
        .await;
        let Some(applied) = applied else {
            tracing::warn!(%training_job, "the invocation's deadline is near; the event is retried");
            return Err(FunctionError::OutOfTime);
        };
        let outcome = match applied? {
            StateOutcome::Applied(status) => EventOutcome::Applied {
                training_job,
                status,
            },
            StateOutcome::Ignored => EventOutcome::Ignored { training_job },
            StateOutcome::Unknown => EventOutcome::Foreign { training_job },
        };
        tracing::info!(
            status = ?state.status,
            secondary = %state.secondary,
            outcome = ?outcome,
            "training event"
        );
        Ok(outcome)
    }
}
