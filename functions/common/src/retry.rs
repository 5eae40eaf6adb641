//! The `retry` function's handler: on the schedule, `Service::run_due_work` — stop terminated and
//! timed-out attempts, and describe attempts that have been quiet too long, in case their
//! state-change events were lost. It creates no training job (its role may not): relaunching an
//! attempt whose launch did not get through is the scheduler's, and both leave such an attempt
//! alone for [`LAUNCH_GRACE_MS`] after its dispatch.
//!
//! The input does not matter (the schedule sends `{"trigger":"schedule"}`): the work is whatever
//! is due now, so a retried or duplicated invocation only repeats idempotent steps. A store
//! failure is an error (Lambda retries); a SageMaker failure for one attempt is logged by the
//! use-case and that attempt waits for the next tick.

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;
use tokio::time::Instant;
use trainyard_app::Service;
use trainyard_app::ports::{EventSink, SchedulingStore, TrainingBackend};
use trainyard_app::service::scheduling::{CycleConfig, DueWork};

use crate::error::FunctionError;
use crate::scheduler::{LAUNCH_GRACE_MS, step_deadline_ms};

/// What one invocation did (the function's response, and its log line).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DueWorkReport {
    /// Attempts asked to stop (terminated or timed out).
    pub stops_requested: usize,
    /// State changes found by describing quiet attempts.
    pub reconciled: usize,
    /// Whether the invocation's deadline left jobs for the next tick.
    pub out_of_time: bool,
}

/// The retry handler over any store, event sink and training backend. Its store port is
/// [`SchedulingStore`] alone (the jobs holding capacity, job reads and writes, usage documents
/// and commits); its SageMaker calls are the backend's create, describe and stop.
pub struct RetryFunction<S: SchedulingStore, E: EventSink, B: TrainingBackend> {
    service: Arc<Service<S, E>>,
    backend: B,
    cycle: CycleConfig,
    quiet_ms: i64,
}

impl<S: SchedulingStore, E: EventSink, B: TrainingBackend> RetryFunction<S, E, B> {
    /// A handler that describes attempts quiet for `quiet_ms`.
    pub fn new(service: Arc<Service<S, E>>, backend: B, cycle: CycleConfig, quiet_ms: i64) -> Self {
        Self {
            service,
            backend,
            cycle,
            quiet_ms,
        }
    }

    /// The service (for hosts and tests).
    pub fn service(&self) -> &Arc<Service<S, E>> {
        &self.service
    }

    /// The retry function's part of the due work, none of it started after `deadline_ms`,
    /// describing the quiet attempts due since the pass that began at `since_ms`.
    pub fn work(&self, deadline_ms: Option<i64>, since_ms: Option<i64>) -> DueWork {
        DueWork {
            relaunch: false,
            stops: true,
            reconcile_quiet_ms: Some(self.quiet_ms),
            reconcile_since_ms: since_ms,
            launch_grace_ms: LAUNCH_GRACE_MS,
            deadline_ms,
        }
    }

    /// Runs the due work; `event` is only logged. No job's work starts within
    /// [`STEP_MARGIN`](crate::scheduler::STEP_MARGIN) of `deadline` (the invocation's); the rest is the
    /// next tick's.
    pub async fn handle(
        &self,
        event: &Value,
        deadline: Option<Instant>,
    ) -> Result<DueWorkReport, FunctionError> {
        let started_ms = self.service.now_ms();
        let deadline_ms = deadline.map(|d| step_deadline_ms(started_ms, d));
        // The last complete pass of any instance: this one describes only the quiet attempts
        // whose silence crossed a checkpoint since (all of them before any pass completed).
        let mark = self.service.reconcile_mark().await?;
        let since_ms = mark.as_ref().map(|m| m.value.complete_pass_began_ms);
        let due = self
            .service
            .run_due_work(&self.backend, &self.cycle, self.work(deadline_ms, since_ms))
            .await?;
        if due.complete() {
            self.service
                .mark_reconciled(started_ms, mark.as_ref())
                .await?;
        }
        if due.out_of_time {
            tracing::warn!(
                "the invocation's deadline cut the due work short; the next tick goes on"
            );
        }
        let report = DueWorkReport {
            stops_requested: due.stops_requested,
            reconciled: due.reconciled,
            out_of_time: due.out_of_time,
        };
        let trigger = event
            .get("trigger")
            .and_then(Value::as_str)
            .unwrap_or("event");
        tracing::info!(
            trigger,
            stops_requested = report.stops_requested,
            reconciled = report.reconciled,
            "due work"
        );
        Ok(report)
    }
}
