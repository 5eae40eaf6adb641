//! The `api` function: API Gateway HTTP API (payload v2) → the Batch router, the same one local
//! mode serves. A composition root: configuration and clients once per cold start, the initial
//! service environment and queue created if this deployment has never had them
//! (`trainyard_functions::setup`), then `lambda_http` serves requests.

use std::sync::Arc;

use trainyard_aws::iam::PrincipalTags;
use trainyard_functions::aws::Adapters;
use trainyard_functions::{api, runtime, setup};

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    let config = runtime::cold_start("api")?;
    let adapters = Adapters::load(&config).await;
    // API calls cause none of the transitions the other metrics count (dispatches and requeues
    // happen in the other functions); what the api function counts is its access refusals.
    let (service, metrics) = adapters.service(&config);
    // Not fatal: requests that need no initial setup still work, and the next cold start
    // tries again.
    if let Err(error) =
        setup::ensure_initial_setup(service.store(), &config.initial, service.now_ms()).await
    {
        tracing::warn!(%error, "creating the initial setup failed; the next cold start retries");
    }
    // The configuration checked the retention's range already.
    let gate = api::Gate::with_audit_retention_days(config.audit_retention_days)
        .map_err(lambda_http::Error::from)?
        .with_rate_limit(config.rate_limit);
    let tags = Arc::new(PrincipalTags::new(adapters.iam()));
    runtime::ready("api");
    lambda_http::run(api::router_with_metrics(
        service,
        gate,
        metrics.stack().to_owned(),
        tags,
    ))
    .await
}
