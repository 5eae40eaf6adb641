//! The `retry` function: on the schedule, relaunch, stop and reconcile whatever is due
//! (`run_due_work`). A composition root: configuration and clients once per cold start, then
//! `trainyard_functions::retry` per event.

use std::sync::Arc;

use trainyard_functions::aws::Adapters;
use trainyard_functions::retry::RetryFunction;
use trainyard_functions::runtime;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    let config = runtime::cold_start("retry")?;
    let adapters = Adapters::load(&config).await;
    let (service, metrics) = adapters.service(&config);
    let handler = Arc::new(RetryFunction::new(
        service,
        adapters.sagemaker.clone(),
        config.cycle(),
        config.reconcile_quiet_ms,
    ));
    runtime::serve("retry", metrics, |event| {
        let handler = handler.clone();
        async move {
            let deadline =
                runtime::deadline_from(event.context.deadline(), std::time::SystemTime::now());
            handler.handle(&event.payload, deadline).await
        }
    })
    .await
}
