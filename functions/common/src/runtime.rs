//! Running a JSON handler under `lambda_runtime`: the cold start (logging, configuration) and
//! the invocation loop, shared by the event-driven functions.

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use lambda_runtime::{Diagnostic, LambdaEvent, service_fn};
use serde::Serialize;
use serde_json::Value;

use crate::config::Config;
use crate::error::FunctionError;
use crate::metrics::Metrics;

/// The invocation's deadline as a monotonic instant, from the wall-clock `deadline` Lambda
/// gives: `None` when it is not ahead of `now`. Lambda's deadline is always ahead of an
/// invocation it starts, so one already past says nothing about the time left (`cargo lambda
/// watch` sends a constant 600,000 ms since the epoch); the pass then runs without one rather
/// than doing nothing.
pub fn deadline_from(
    deadline: std::time::SystemTime,
    now: std::time::SystemTime,
) -> Option<tokio::time::Instant> {
    let left = deadline
        .duration_since(now)
        .ok()
        .filter(|left| !left.is_zero())?;
    Some(tokio::time::Instant::now() + left)
}

/// No step of an invocation starts this close to its deadline (and a step still running then is
/// cut short), so that leases are given back and the response sent before the function times
/// out.
pub const STEP_MARGIN: Duration = Duration::from_secs(5);

/// When a step must be done by: the invocation's `deadline` less [`STEP_MARGIN`].
pub fn step_end(deadline: tokio::time::Instant) -> tokio::time::Instant {
    deadline.checked_sub(STEP_MARGIN).unwrap_or(deadline)
}

/// `step`, unless `by` passes first (`None`: it did not finish in time, and was dropped).
pub async fn by_deadline<T>(
    by: Option<tokio::time::Instant>,
    step: impl Future<Output = T>,
) -> Option<T> {
    match by {
        Some(by) => tokio::time::timeout_at(by, step).await.ok(),
        None => Some(step.await),
    }
}

/// Starts logging and reads the configuration; on a bad configuration logs every problem as one
/// error and returns it (the process then exits, and Lambda reports the failed init).
pub fn cold_start(function: &'static str) -> Result<Config, FunctionError> {
    let _ = STARTED.set(Instant::now());
    crate::logging::init();
    match Config::from_env() {
        Ok(config) => {
            tracing::info!(
                function,
                table = %config.table,
                event_bus = %config.event_bus,
                region = %config.arns.region,
                "cold start"
            );
            Ok(config)
        }
        Err(error) => {
            tracing::error!(function, problems = ?error.problems, "{error}");
            Err(error.into())
        }
    }
}

/// When [`cold_start`] began: `main`'s first step.
static STARTED: OnceLock<Instant> = OnceLock::new();

/// Logs that initialisation is over (`init_ms` since [`cold_start`] began), just before the
/// runtime asks for the first event; scripts/bench-cold-start reads it.
pub fn ready(function: &'static str) {
    let init_ms = STARTED
        .get()
        .map_or(0.0, |t| t.elapsed().as_secs_f64() * 1000.0);
    tracing::info!(function, init_ms, "ready");
}

/// Serves invocations with `handler` until the runtime stops; the response is the handler's
/// report as JSON, an error becomes a [`Diagnostic`]. After each invocation, failed or not, the
/// metrics it recorded are printed.
pub async fn serve<F, Fut, R>(
    function: &'static str,
    metrics: Metrics,
    handler: F,
) -> Result<(), lambda_runtime::Error>
where
    F: Fn(LambdaEvent<Value>) -> Fut,
    Fut: Future<Output = Result<R, FunctionError>> + Send + 'static,
    R: Serialize,
{
    ready(function);
    lambda_runtime::run(service_fn(|event: LambdaEvent<Value>| {
        // Type-erased: the handlers' futures (store, SageMaker and EventBridge calls) nested in
        // the runtime's are otherwise too deep for rustc's default layout recursion limit.
        let fut: Pin<Box<dyn Future<Output = Result<R, FunctionError>> + Send>> =
            Box::pin(handler(event));
        let metrics = metrics.clone();
        async move {
            let result = fut.await;
            metrics.flush(now_ms());
            let report = result.map_err(|error| {
                tracing::error!(kind = error.kind(), %error, "invocation failed");
                Diagnostic::from(error)
            })?;
            serde_json::to_value(report).map_err(|e| Diagnostic {
                error_type: "Trainyard.Encode".into(),
                error_message: e.to_string(),
            })
        }
    }))
    .await
}

fn now_ms() -> i64 {
    use trainyard_app::ports::{Clock, SystemClock};
    SystemClock.now_ms()
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::deadline_from;

    #[test]
    fn a_deadline_already_past_is_no_deadline_and_one_ahead_is_kept() {
        let now = SystemTime::now();
        assert!(
            deadline_from(SystemTime::UNIX_EPOCH + Duration::from_millis(600_000), now).is_none()
        );
        assert!(deadline_from(now, now).is_none());
        let ahead = deadline_from(now + Duration::from_secs(60), now).unwrap();
        let left = ahead - tokio::time::Instant::now();
        assert!(
            left > Duration::from_secs(59) && left <= Duration::from_secs(60),
            "{left:?}"
        );
    }
}
