//! The `api` function's router: the same Batch router as local mode, behind one check that only
//! a deployment can make — a submitted job's `RoleArn` must be one of the training roles the
//! scheduler may pass to SageMaker (`TRAINYARD_TRAINING_ROLE_ARNS`). Checking at submit turns
//! what would be an `AccessDenied` at launch, minutes later, into a `ClientException` now.

use std::sync::Arc;

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use trainyard_api::ApiError;
use trainyard_app::{EventSink, Service, Store};
use trainyard_domain::limits::MAX_REQUEST_BYTES;

/// The path of `SubmitServiceJob`.
const SUBMIT_PATH: &str = "/v1/submitservicejob";

/// The Batch router over `service`, refusing submissions that name a role outside `roles`.
pub fn router<S: Store, E: EventSink>(service: Arc<Service<S, E>>, roles: Vec<String>) -> Router {
    let roles = Arc::new(roles);
    trainyard_api::router(service).layer(middleware::from_fn(move |request, next| {
        check_role(roles.clone(), request, next)
    }))
}

/// The `RoleArn` inside a submit body's `serviceRequestPayload`, when there is one to check
/// (anything malformed is left for the router to report with its own message).
fn payload_role(body: &[u8]) -> Option<String> {
    let request: Value = serde_json::from_slice(body).ok()?;
    let payload = request.get("serviceRequestPayload")?.as_str()?;
    let payload: Value = serde_json::from_str(payload).ok()?;
    payload.get("RoleArn")?.as_str().map(str::to_owned)
}

async fn check_role(roles: Arc<Vec<String>>, request: Request, next: Next) -> Response {
    if request.uri().path() != SUBMIT_PATH {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = to_bytes(body, MAX_REQUEST_BYTES).await else {
        return ApiError::client(format!(
            "Request body is larger than the limit of {MAX_REQUEST_BYTES} bytes (30 KiB)"
        ))
        .into_response();
    };
    if let Some(role) = payload_role(&bytes)
        && !roles.contains(&role)
    {
        return ApiError::client(format!(
            "serviceRequestPayload.RoleArn {role} is not one of the training roles this \
             deployment may pass to SageMaker (the stack's TrainingRoleArns parameter)"
        ))
        .into_response();
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}
