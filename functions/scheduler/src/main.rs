//! The `scheduler` function: EventBridge `Job Submitted` / `Capacity Released` (source
//! `trainyard`) and the schedule (`{"trigger":"schedule"}`) → lease, accept, cycle, release.
//! A composition root: configuration and clients once per cold start, then
//! `trainyard_functions::scheduler` per event.

use std::sync::Arc;

use trainyard_functions::aws::{Adapters, AwsScheduler};
use trainyard_functions::scheduler::{DecisionLog, SchedulerFunction, Trigger};
use trainyard_functions::{metrics, runtime};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    let config = runtime::cold_start("scheduler")?;
    let adapters = Adapters::load(&config).await;
    let (service, metrics) = adapters.service(&config);
    let mut handler = SchedulerFunction::new(service, adapters.sagemaker.clone(), config.cycle())
        .with_start_estimates();
    // Decision records, and what the forecaster learnt, are kept where the stack names a bucket
    // (`DecisionsBucket`).
    if let Some(memory) = adapters.forecast_memory(&config) {
        handler = handler.with_forecast_memory(memory);
    }
    match adapters.decision_log(&config) {
        Some(log) => serve(Arc::new(handler.with_decisions(log)), metrics).await,
        None => serve(Arc::new(handler), metrics).await,
    }
}

/// Serves `handler`'s events until Lambda stops the process.
async fn serve<L: DecisionLog>(
    handler: Arc<AwsScheduler<L>>,
    metrics: metrics::Metrics,
) -> Result<(), lambda_runtime::Error> {
    let stack = metrics.stack().to_owned();
    runtime::serve("scheduler", metrics, |event| {
        let handler = handler.clone();
        let stack = stack.clone();
        async move {
            let deadline =
                runtime::deadline_from(event.context.deadline(), std::time::SystemTime::now());
            let report = handler
                .handle(&event.payload, &event.context.request_id, deadline)
                .await?;
            // The schedule tick also reports the gauges the stuck-queue alarm watches, and
            // its forecast round's estimates and their coverage.
            if report.trigger == Some(Trigger::Schedule) {
                let service = handler.service();
                let now_ms = service.now_ms();
                let mut lines = metrics::schedule_lines(service.store(), &stack, now_ms).await;
                lines.extend(metrics::estimate_lines(&stack, now_ms, &report.estimates));
                metrics::print_lines(&lines);
            }
            Ok(report)
        }
    })
    .await
}
