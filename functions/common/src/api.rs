//! The `api` function's router: the same Batch router as local mode. The one check only a
//! deployment can make — a submitted job's `RoleArn` must be one of the training roles the
//! scheduler may pass to SageMaker (`TRAINYARD_TRAINING_ROLE_ARNS`) — is the submit use-case's
//! own (`Service::with_training_roles`, set by [`Adapters::service`](crate::aws::Adapters::service)),
//! so it holds whatever path or encoding a request reaches the operation by. Checking at submit
//! turns what would be an `AccessDenied` at launch, minutes later, into a `ClientException` now.

use std::sync::Arc;

use axum::Router;
use trainyard_app::{EventSink, Service, Store};

/// The Batch router over `service`.
pub fn router<S: Store, E: EventSink>(service: Arc<Service<S, E>>) -> Router {
    trainyard_api::router(service)
}
