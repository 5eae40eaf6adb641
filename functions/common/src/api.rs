//! The `api` function's router: the same Batch router as local mode, behind one layer that
//! names the caller. API Gateway's IAM authorizer has verified the request's SigV4 signature
//! before the function runs and passes the principal in the request context (payload 2.0,
//! `requestContext.authorizer.iam.userArn`); the layer puts it on the request as the router's
//! [`Caller`], so the access policies and the job's owner see who is calling. A request without
//! one (an API deployed without the IAM authorizer) is anonymous. The caller's IAM tags, which the
//! context does not carry, are read from IAM ([`PrincipalTags`]) for the policies to group
//! principals by; a request whose caller's tags cannot be read is refused as throttled.
//!
//! The one check only a deployment can make — a submitted job's `RoleArn` must be one of the
//! training roles the scheduler may pass to SageMaker (`TRAINYARD_TRAINING_ROLE_ARNS`) — is the
//! submit use-case's own (`Service::with_training_roles`, set by
//! [`Adapters::service`](crate::aws::Adapters::service)), so it holds whatever path or encoding
//! a request reaches the operation by. Checking at submit turns what would be an `AccessDenied`
//! at launch, minutes later, into a `ClientException` now.

use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use lambda_http::RequestExt;
use lambda_http::request::RequestContext;
use trainyard_access::Principal;
pub use trainyard_api::Gate;
use trainyard_api::{ApiError, Caller};
use trainyard_app::{EventSink, Service, Store};
use trainyard_aws::iam::PrincipalTags;
use trainyard_aws::metrics::{EmfLine, Unit};

/// The Batch router over `service`, with the caller read from API Gateway's request context.
pub fn router<S: Store, E: EventSink>(service: Arc<Service<S, E>>) -> Router {
    router_with_gate(service, Arc::new(Gate::default()))
}

/// [`router`] with a gate the caller keeps (to report its refusals).
pub fn router_with_gate<S: Store, E: EventSink>(
    service: Arc<Service<S, E>>,
    gate: Arc<Gate>,
) -> Router {
    trainyard_api::router_with_gate(service, gate).layer(middleware::from_fn(identify))
}

/// [`router`] as the `api` function serves it, with `gate` (its audit retention configured) and
/// the callers' IAM tags read through `tags`: each request's access refusals printed as EMF
/// lines (`AccessDenied`, by `Stack` and `Action`: a fixed set of names, so the metric's cost is
/// bounded), for CloudWatch.
pub fn router_with_metrics<S: Store, E: EventSink>(
    service: Arc<Service<S, E>>,
    gate: Gate,
    stack: String,
    tags: Arc<PrincipalTags>,
) -> Router {
    let gate = Arc::new(gate);
    let counted = gate.clone();
    let clock = service.clone();
    let tag_clock = service.clone();
    let tagged = trainyard_api::router_with_gate(service, gate).layer(middleware::from_fn(
        move |request: Request, next: Next| {
            let tags = tags.clone();
            let now_ms = tag_clock.now_ms();
            async move { identify_with_tags(Some((&tags, now_ms)), request, next).await }
        },
    ));
    tagged.layer(middleware::from_fn(move |request: Request, next: Next| {
        let gate = counted.clone();
        let stack = stack.clone();
        let clock = clock.clone();
        async move {
            let response = next.run(request).await;
            crate::metrics::print_lines(&denied_lines(&gate, &stack, clock.now_ms()));
            response
        }
    }))
}

/// EMF lines for the refusals `gate` counted since the last call: `AccessDenied` by `Stack`
/// and `Action`, and `Throttled` (callers over their rate limit) by `Stack`.
pub fn denied_lines(gate: &Gate, stack: &str, now_ms: i64) -> Vec<String> {
    let mut lines: Vec<String> = gate
        .take_denied()
        .into_iter()
        .map(|(action, n)| {
            EmfLine {
                dimensions: vec![("Stack", stack.to_owned()), ("Action", action.to_owned())],
                metrics: vec![("AccessDenied", Unit::Count, serde_json::json!(n))],
            }
            .render(now_ms)
        })
        .collect();
    let throttled = gate.take_throttled();
    if throttled > 0 {
        lines.push(
            EmfLine {
                dimensions: vec![("Stack", stack.to_owned())],
                metrics: vec![("Throttled", Unit::Count, serde_json::json!(throttled))],
            }
            .render(now_ms),
        );
    }
    lines
}

/// The IAM principal API Gateway verified, if the request came through its IAM authorizer.
pub fn verified_principal(request: &Request) -> Option<Principal> {
    match request.request_context_ref()? {
        RequestContext::ApiGatewayV2(context) => {
            let iam = context.authorizer.as_ref()?.iam.as_ref()?;
            iam.user_arn.as_deref().map(Principal::from_arn)
        }
        #[allow(unreachable_patterns)] // Other payloads exist with other lambda_http features.
        _ => None,
    }
}

async fn identify(request: Request, next: Next) -> Response {
    identify_with_tags(None, request, next).await
}

/// Puts the caller on the request as [`Caller`], with its IAM tags read through `tags` (at
/// `now_ms`) when given.
async fn identify_with_tags(
    tags: Option<(&PrincipalTags, i64)>,
    mut request: Request,
    next: Next,
) -> Response {
    let mut principal = verified_principal(&request).unwrap_or_else(Principal::anonymous);
    if let (Some((tags, now_ms)), Some((kind, name))) = (tags, principal.tagged_identity()) {
        match tags.of(kind, name, now_ms).await {
            Ok(read) => principal.tags = read,
            Err(unreadable) => {
                return ApiError::throttled(format!("{unreadable}; try again")).into_response();
            }
        }
    }
    request.extensions_mut().insert(Caller(principal));
    next.run(request).await
}
