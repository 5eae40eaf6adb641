//! The `retry` function's handler: on the schedule, `Service::run_due_work` — relaunch attempts
//! whose launch did not get through, stop terminated and timed-out attempts, and describe
//! attempts that have been quiet too long, in case their state-change events were lost.
//!
//! The input does not matter (the schedule sends `{"trigger":"schedule"}`): the work is whatever
//! is due now, so a retried or duplicated invocation only repeats idempotent steps. A store
//! failure is an error (Lambda retries); a SageMaker failure for one attempt is logged by the
//! use-case and that attempt waits for the next tick.

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;
use trainyard_app::Service;
use trainyard_app::ports::{EventSink, SchedulingStore, TrainingBackend};
use trainyard_app::service::scheduling::CycleConfig;

use crate::error::FunctionError;

/// What one invocation did (the function's response, and its log line).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DueWorkReport {
    /// Attempts whose launch was retried.
    pub relaunched: usize,
    /// Attempts asked to stop (terminated or timed out).
    pub stops_requested: usize,
    /// State changes found by describing quiet attempts.
    pub reconciled: usize,
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

    /// Runs the due work; `event` is only logged.
    pub async fn handle(&self, event: &Value) -> Result<DueWorkReport, FunctionError> {
        let due = self
            .service
            .run_due_work(&self.backend, &self.cycle, self.quiet_ms)
            .await?;
        let report = DueWorkReport {
            relaunched: due.relaunched,
            stops_requested: due.stops_requested,
            reconciled: due.reconciled,
        };
        let trigger = event
            .get("trigger")
            .and_then(Value::as_str)
            .unwrap_or("event");
        tracing::info!(
            trigger,
            relaunched = report.relaunched,
            stops_requested = report.stops_requested,
            reconciled = report.reconciled,
            "due work"
        );
        Ok(report)
    }
}
