//! The router: `POST /v1/{operation}` dispatched by name, the tag routes, Trainyard's own
//! operations under `POST /trainyard/v1/{operation}`, a body limit, and a `ClientException` for
//! anything else. One router serves local mode and the Lambda function.
//!
//! Every request passes the [edge](crate::edge) checks (JSON bodies only, nothing a browser marks
//! as sent by another site's page), then every operation passes the access [`Gate`], with the [`Caller`] the host put on the
//! request (anonymous when none), before anything is read for it or changed.

use std::sync::Arc;

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::{Extension, Path, RawQuery, State};
use axum::http::{Method, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, post};
use serde_json::{Value, json};
use trainyard_access::Principal;
use trainyard_app::{EventSink, Service, Store};
use trainyard_domain::limits::MAX_REQUEST_BYTES;

use crate::access::{Caller, Checked, Gate};
use crate::error::ApiError;
use crate::{environments, extract, jobs, policies, queues, quota_shares, tags};

/// What the handlers share: the use-cases and the access gate.
pub struct Api<S: Store, E: EventSink> {
    service: Arc<Service<S, E>>,
    gate: Arc<Gate>,
}

/// The shared application state.
pub type AppState<S, E> = Arc<Api<S, E>>;

/// Builds the API router over a service, with a gate of its own.
pub fn router<S: Store, E: EventSink>(service: Arc<Service<S, E>>) -> Router {
    router_with_gate(service, Arc::new(Gate::default()))
}

/// Builds the API router over a service and `gate` (which a host keeps to report its refusals).
pub fn router_with_gate<S: Store, E: EventSink>(
    service: Arc<Service<S, E>>,
    gate: Arc<Gate>,
) -> Router {
    Router::new()
        .route("/v1/tags/{resource_arn}", any(tag_route::<S, E>))
        .route("/v1/{operation}", post(operation::<S, E>))
        .route(
            "/trainyard/v1/{operation}",
            post(trainyard_operation::<S, E>),
        )
        .fallback(unknown)
        .layer(axum::middleware::from_fn(crate::edge::guard))
        .with_state(Arc::new(Api { service, gate }))
}

/// The caller a host put on the request, or an anonymous one.
fn principal(caller: Option<Extension<Caller>>) -> Principal {
    caller.map_or_else(Principal::anonymous, |Extension(Caller(p))| p)
}

/// Reads a body of at most [`MAX_REQUEST_BYTES`].
async fn read_body(body: Body) -> Result<axum::body::Bytes, ApiError> {
    to_bytes(body, MAX_REQUEST_BYTES).await.map_err(|_| {
        ApiError::client(format!(
            "Request body is larger than the limit of {MAX_REQUEST_BYTES} bytes (30 KiB)"
        ))
    })
}

/// The answer as Batch's wire shape: the JSON value, or the error.
fn respond(result: Result<Value, ApiError>) -> Response {
    match result {
        Ok(value) => ok_json(value),
        Err(err) => err.into_response(),
    }
}

fn ok_json(value: Value) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}

async fn operation<S: Store, E: EventSink>(
    State(api): State<AppState<S, E>>,
    caller: Option<Extension<Caller>>,
    Path(operation): Path<String>,
    body: Body,
) -> Response {
    let caller = principal(caller);
    let result = async {
        let service = api.service.as_ref();
        api.gate.admit(&caller, service.now_ms())?;
        let body = read_body(body).await?;
        let op = operation.as_str();
        let checked = api.gate.check(service, &caller, op, &body).await?;
        run_checked(
            &api,
            &caller,
            checked,
            run_operation(&api, &caller, op, &body),
        )
        .await
    }
    .await;
    respond(result)
}

/// Runs `run` (not started yet) if the gate let the call through, else answers with the
/// refusal; either way the call then goes in the audit trail.
async fn run_checked<S: Store, E: EventSink>(
    api: &Api<S, E>,
    caller: &Principal,
    checked: Checked,
    run: impl std::future::Future<Output = Result<Value, ApiError>>,
) -> Result<Value, ApiError> {
    let result = match checked.refused() {
        Ok(()) => run.await,
        Err(refused) => Err(refused),
    };
    api.gate
        .record(api.service.as_ref(), caller, &checked, &result)
        .await;
    result
}

/// Runs a Batch operation the gate let through.
async fn run_operation<S: Store, E: EventSink>(
    api: &Api<S, E>,
    caller: &Principal,
    op: &str,
    body: &[u8],
) -> Result<Value, ApiError> {
    let service = api.service.as_ref();
    let reader = if crate::access::FILTERED_LISTINGS.contains(&op) {
        api.gate.reader(service, caller).await?
    } else {
        None
    };
    let handled = match jobs::handle(service, caller, reader.as_ref(), op, body).await {
        Some(r) => Some(r),
        None => match environments::handle(service, op, body).await {
            Some(r) => Some(r),
            None => match queues::handle(service, op, body).await {
                Some(r) => Some(r),
                None => match policies::handle(service, op, body).await {
                    Some(r) => Some(r),
                    None => quota_shares::handle(service, op, body).await,
                },
            },
        },
    };
    let mut answer = handled.unwrap_or_else(|| {
        Err(ApiError::client(format!(
            "Unknown operation: POST /v1/{op} is not part of the AWS Batch service-job API"
        )))
    })?;
    if let Some(reader) = &reader {
        reader.filter_listing(service.arns(), op, &mut answer);
    }
    Ok(answer)
}

async fn tag_route<S: Store, E: EventSink>(
    State(api): State<AppState<S, E>>,
    caller: Option<Extension<Caller>>,
    method: Method,
    Path(resource_arn): Path<String>,
    RawQuery(query): RawQuery,
    body: Body,
) -> Response {
    let caller = principal(caller);
    let result = async {
        let service = api.service.as_ref();
        api.gate.admit(&caller, service.now_ms())?;
        let body = read_body(body).await?;
        let action = match method {
            Method::POST => "TagResource",
            Method::DELETE => "UntagResource",
            _ => "ListTagsForResource",
        };
        let checked = api
            .gate
            .check_tags(service, &caller, action, &resource_arn)
            .await?;
        let run = async {
            match method {
                Method::POST => tags::tag_resource(service, &resource_arn, &body).await,
                Method::DELETE => {
                    let keys = query.as_deref().unwrap_or("");
                    tags::untag_resource(service, &resource_arn, keys).await
                }
                Method::GET => tags::list_tags_for_resource(service, &resource_arn).await,
                other => Err(ApiError::client(format!(
                    "Unknown operation: {other} /v1/tags/{{resourceArn}} (use GET, POST or DELETE)"
                ))),
            }
        };
        run_checked(&api, &caller, checked, run).await
    }
    .await;
    respond(result)
}

/// `PutAccessPolicies` input.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct PutPoliciesRequest {
    policies: Option<String>,
}

/// Trainyard's own operations: `WhoAmI` (who the server takes the caller for; always allowed),
/// and `GetAccessPolicies`, `PutAccessPolicies`, `DeleteAccessPolicies`.
async fn trainyard_operation<S: Store, E: EventSink>(
    State(api): State<AppState<S, E>>,
    caller: Option<Extension<Caller>>,
    Path(operation): Path<String>,
    body: Body,
) -> Response {
    let caller = principal(caller);
    let result = async {
        let service = api.service.as_ref();
        api.gate.admit(&caller, service.now_ms())?;
        let body = read_body(body).await?;
        let op = operation.to_ascii_lowercase();
        if op == "whoami" {
            return extract::to_value(&caller);
        }
        // Explaining a job shows what describing it shows, and is allowed as that.
        let checked_as = match op.as_str() {
            "explainservicejob" => "DescribeServiceJob",
            "getaccesspolicies"
            | "putaccesspolicies"
            | "deleteaccesspolicies"
            | "listauditrecords" => op.as_str(),
            _ => {
                return Err(ApiError::client(format!(
                    "Unknown operation: POST /trainyard/v1/{operation} (Trainyard's operations \
                     are WhoAmI, ExplainServiceJob, GetAccessPolicies, PutAccessPolicies, \
                     DeleteAccessPolicies and ListAuditRecords)"
                )));
            }
        };
        let checked = api.gate.check(service, &caller, checked_as, &body).await?;
        let run = run_trainyard_operation(&api, &caller, &op, &body);
        run_checked(&api, &caller, checked, run).await
    }
    .await;
    respond(result)
}

/// Runs one of Trainyard's own operations the gate let through.
async fn run_trainyard_operation<S: Store, E: EventSink>(
    api: &Api<S, E>,
    caller: &Principal,
    op: &str,
    body: &[u8],
) -> Result<Value, ApiError> {
    let service = api.service.as_ref();
    match op {
        "putaccesspolicies" => {
            let req: PutPoliciesRequest = extract::json(body)?;
            let text = crate::validate::required("policies", req.policies)?;
            let count = api.gate.put(service, caller, text).await?;
            Ok(json!({ "policies": count }))
        }
        "deleteaccesspolicies" => {
            api.gate.delete(service, caller).await?;
            Ok(json!({}))
        }
        "listauditrecords" => crate::audit::list(service, &api.gate, body).await,
        "explainservicejob" => crate::jobs::explain(service, body).await,
        _ => Ok(match api.gate.stored(service).await? {
            Some((stored, version)) => json!({
                "policies": stored.text, "updatedAt": stored.updated_at,
                "updatedBy": stored.updated_by, "version": version,
            }),
            None => json!({ "policies": null }),
        }),
    }
}

async fn unknown(method: Method, uri: Uri) -> Response {
    ApiError::client(format!(
        "Unknown operation: {method} {} is not part of the AWS Batch service-job API",
        uri.path()
    ))
    .into_response()
}
