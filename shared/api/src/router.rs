//! The router: `POST /v1/{operation}` dispatched by name, the tag routes, a body limit, and a
//! `ClientException` for anything else. One router serves local mode and the Lambda function.

use std::sync::Arc;

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::{Method, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, post};
use serde_json::Value;
use trainyard_app::{EventSink, Service, Store};
use trainyard_domain::limits::MAX_REQUEST_BYTES;

use crate::error::ApiError;
use crate::{environments, jobs, policies, queues, quota_shares, tags};

/// The shared application state.
pub type AppState<S, E> = Arc<Service<S, E>>;

/// Builds the API router over a service.
pub fn router<S: Store, E: EventSink>(service: Arc<Service<S, E>>) -> Router {
    Router::new()
        .route("/v1/tags/{resource_arn}", any(tag_route::<S, E>))
        .route("/v1/{operation}", post(operation::<S, E>))
        .fallback(unknown)
        .with_state(service)
}

/// Reads a body of at most [`MAX_REQUEST_BYTES`].
async fn read_body(body: Body) -> Result<axum::body::Bytes, ApiError> {
    to_bytes(body, MAX_REQUEST_BYTES).await.map_err(|_| {
        ApiError::client(format!(
            "Request body is larger than the limit of {MAX_REQUEST_BYTES} bytes (30 KiB)"
        ))
    })
}

fn ok_json(value: Value) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}

async fn operation<S: Store, E: EventSink>(
    State(service): State<AppState<S, E>>,
    Path(operation): Path<String>,
    body: Body,
) -> Response {
    let result = async {
        let body = read_body(body).await?;
        let service = service.as_ref();
        let op = operation.as_str();
        let handled = match jobs::handle(service, op, &body).await {
            Some(r) => Some(r),
            None => match environments::handle(service, op, &body).await {
                Some(r) => Some(r),
                None => match queues::handle(service, op, &body).await {
                    Some(r) => Some(r),
                    None => match policies::handle(service, op, &body).await {
                        Some(r) => Some(r),
                        None => quota_shares::handle(service, op, &body).await,
                    },
                },
            },
        };
        handled.unwrap_or_else(|| {
            Err(ApiError::client(format!(
                "Unknown operation: POST /v1/{op} is not part of the AWS Batch service-job API"
            )))
        })
    }
    .await;
    match result {
        Ok(value) => ok_json(value),
        Err(err) => err.into_response(),
    }
}

async fn tag_route<S: Store, E: EventSink>(
    State(service): State<AppState<S, E>>,
    method: Method,
    Path(resource_arn): Path<String>,
    RawQuery(query): RawQuery,
    body: Body,
) -> Response {
    let result = async {
        let body = read_body(body).await?;
        let service = service.as_ref();
        match method {
            Method::POST => tags::tag_resource(service, &resource_arn, &body).await,
            Method::DELETE => {
                tags::untag_resource(service, &resource_arn, query.as_deref().unwrap_or("")).await
            }
            Method::GET => tags::list_tags_for_resource(service, &resource_arn).await,
            other => Err(ApiError::client(format!(
                "Unknown operation: {other} /v1/tags/{{resourceArn}} (use GET, POST or DELETE)"
            ))),
        }
    }
    .await;
    match result {
        Ok(value) => ok_json(value),
        Err(err) => err.into_response(),
    }
}

async fn unknown(method: Method, uri: Uri) -> Response {
    ApiError::client(format!(
        "Unknown operation: {method} {} is not part of the AWS Batch service-job API",
        uri.path()
    ))
    .into_response()
}
