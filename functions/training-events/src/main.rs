//! The `training-events` function: EventBridge "SageMaker Training Job State Change" →
//! `on_training_state`. A composition root: configuration and clients once per cold start,
//! then `trainyard_functions::training_events` per event.

use std::sync::Arc;

use trainyard_functions::aws::Adapters;
use trainyard_functions::runtime;
use trainyard_functions::training_events::TrainingEventsFunction;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    let config = runtime::cold_start("training-events")?;
    let adapters = Adapters::load(&config).await;
    let (service, metrics) = adapters.service(&config);
    let handler = Arc::new(TrainingEventsFunction::new(service, config.cycle()));
    runtime::serve("training-events", metrics, |event| {
        let handler = handler.clone();
        async move {
            let deadline =
                runtime::deadline_from(event.context.deadline(), std::time::SystemTime::now());
            handler.handle(&event.payload, deadline).await
        }
    })
    .await
}
