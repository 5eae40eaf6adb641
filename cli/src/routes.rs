//! Local mode's routes beside the Batch API: `GET /metrics` (Prometheus text) and
//! `GET /trainyard/events` (job state changes as they happen, one JSON object per line).
//!
//! Both live outside Batch's `/v1/` namespace, so no Batch client can mistake them for an
//! operation. The event stream ends when the server stops, so a follower never holds up a
//! graceful shutdown. It names every job, so it is served only to callers the access policies
//! let list every queue's jobs (`ListServiceJobs` on the service as a whole), within their rate
//! limit. `/metrics` is rendered at most once per [`METRICS_CACHE_MS`]: scrapes in between get
//! the same text, so no rate of scrapes makes the server read every job more often.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;
use tokio::sync::{broadcast, mpsc, watch};
use trainyard_access::Principal;
use trainyard_api::{Caller, Gate};
use trainyard_app::Service;
use trainyard_app::ports::{Clock, Event, EventSink, Store, SystemClock};
use trainyard_domain::job::JobStatus;
use trainyard_local::event_loop::LocalEvents;
use trainyard_local::metrics::{self, Metrics};

/// What `up --credentials` checks every request against (except `GET /metrics`, which
/// scrapers cannot sign).
pub struct SignatureCheck {
    /// The access keys accepted, by profile name.
    pub keys: std::collections::BTreeMap<String, crate::sigv4::Keys>,
    /// The region requests must be signed for (`up --region`).
    pub region: String,
    /// Whom each access key's requests come from, by access key id.
    principals: std::collections::BTreeMap<String, Principal>,
}

impl SignatureCheck {
    /// Checks requests against `keys` (by profile name). Each key's caller is its profile's
    /// `principal_arn`, or else the IAM user named after the profile in `account`, with the
    /// profile's `principal_tags`.
    pub fn new(
        keys: std::collections::BTreeMap<String, crate::sigv4::Keys>,
        region: String,
        account: &str,
    ) -> Self {
        let principals = keys
            .iter()
            .map(|(profile, k)| {
                let arn = k
                    .principal_arn
                    .clone()
                    .unwrap_or_else(|| format!("arn:aws:iam::{account}:user/{profile}"));
                let principal = Principal::from_arn(&arn).with_tags(k.principal_tags.clone());
                (k.access_key_id.clone(), principal)
            })
            .collect();
        Self {
            keys,
            region,
            principals,
        }
    }
}

/// The most a signed request's body may hold (Batch's largest request, a submit with a 10 KiB
/// payload and tags, is far smaller).
const SIGNED_BODY_LIMIT: usize = 1 << 20;

/// Middleware: a request passes only with a valid SigV4 signature by one of the keys; any other
/// gets HTTP 403 with the error type Batch clients know (`x-amzn-ErrorType`, `__type`).
pub async fn require_signature(
    State(check): State<Arc<SignatureCheck>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if request.uri().path() == "/metrics" {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, SIGNED_BODY_LIMIT).await else {
        return StatusCode::PAYLOAD_TOO_LARGE.into_response();
    };
    let headers: Vec<(String, String)> = parts
        .headers
        .iter()
        .filter_map(|(name, value)| {
            Some((name.as_str().to_owned(), value.to_str().ok()?.to_owned()))
        })
        .collect();
    let received = crate::sigv4::Received {
        method: parts.method.as_str(),
        path_and_query: parts.uri.path_and_query().map_or("/", |p| p.as_str()),
        headers: &headers,
        body: &body,
    };
    let now = std::time::SystemTime::now();
    match crate::sigv4::verify(&received, &check.keys, &check.region, now) {
        Ok(access_key_id) => {
            tracing::debug!(%access_key_id, "signature verified");
            let mut parts = parts;
            if let Some(principal) = check.principals.get(access_key_id.as_str()) {
                parts.extensions.insert(Caller(principal.clone()));
            }
            next.run(axum::extract::Request::from_parts(parts, Body::from(body)))
                .await
        }
        Err(refusal) => {
            tracing::info!(kind = refusal.kind, message = %refusal.message, "request refused");
            (
                StatusCode::FORBIDDEN,
                [("x-amzn-ErrorType", refusal.kind)],
                axum::Json(json!({"__type": refusal.kind, "message": refusal.message})),
            )
                .into_response()
        }
    }
}

/// The `Host` values a server listening on `address` answers to: for a loopback address, the
/// loopback names of its port (a page that rebinds its own name to 127.0.0.1 sends its own name
/// and is refused); for any other address none is enforced (`None`), since its names are not
/// known here.
pub fn allowed_hosts(address: std::net::SocketAddr) -> Option<Vec<String>> {
    if !address.ip().is_loopback() {
        return None;
    }
    let port = address.port();
    Some(vec![
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
        address.to_string(),
    ])
}

/// Middleware: refuses a request whose `Host` is not one of `hosts` (DNS rebinding), with
/// Batch's error shape. A request without `Host` (HTTP/1.0) passes.
pub async fn require_host(
    State(hosts): State<Arc<Vec<String>>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok());
    match host {
        Some(host) if !hosts.iter().any(|h| h.eq_ignore_ascii_case(host)) => {
            tracing::info!(%host, "request for another host refused");
            let message = format!(
                "Host {host} is not served here: local mode answers only to {}",
                hosts.join(", ")
            );
            trainyard_api::ApiError::access_denied(message).into_response()
        }
        _ => next.run(request).await,
    }
}

/// The path of the event stream.
pub const EVENTS_PATH: &str = "/trainyard/events";

/// Lines a slow follower may have queued before the stream waits for it.
const FOLLOWER_BUFFER: usize = 256;

/// What the handlers need.
struct Shared<S: Store, E: EventSink> {
    service: Arc<Service<S, E>>,
    metrics: Arc<Metrics>,
    gate: Arc<Gate>,
    events: LocalEvents,
    stopping: watch::Receiver<bool>,
    rendered: RenderedMetrics,
}

/// The routes, to merge into the API router. `stopping` ends open event streams.
pub fn routes<S: Store, E: EventSink>(
    service: Arc<Service<S, E>>,
    metrics: Arc<Metrics>,
    gate: Arc<Gate>,
    events: LocalEvents,
    stopping: watch::Receiver<bool>,
) -> Router {
    let shared = Arc::new(Shared {
        service,
        metrics,
        gate,
        events,
        stopping,
        rendered: RenderedMetrics::default(),
    });
    Router::new()
        .route("/metrics", get(metrics_text::<S, E>))
        .route(EVENTS_PATH, get(follow::<S, E>))
        .with_state(shared)
}

/// How long a rendering of `/metrics` is served again. Rendering reads every job (the
/// `trainyard_jobs` gauge), which takes about a second at tens of thousands of jobs.
pub const METRICS_CACHE_MS: i64 = 5_000;

/// The last rendering of `/metrics` and when it was made; the lock is held while rendering, so
/// scrapes that arrive meanwhile wait for it instead of rendering again.
#[derive(Default)]
struct RenderedMetrics(tokio::sync::Mutex<Option<(i64, String)>>);

impl RenderedMetrics {
    async fn get_or_render<F>(&self, now_ms: i64, render: F) -> Result<String, String>
    where
        F: std::future::Future<Output = Result<String, String>>,
    {
        let mut last = self.0.lock().await;
        if let Some((at, text)) = last.as_ref()
            && (0..METRICS_CACHE_MS).contains(&(now_ms - at))
        {
            return Ok(text.clone());
        }
        let text = render.await?;
        *last = Some((now_ms, text.clone()));
        Ok(text)
    }
}

async fn metrics_text<S: Store, E: EventSink>(State(shared): State<Arc<Shared<S, E>>>) -> Response {
    let render = async {
        metrics::render(&shared.metrics, shared.service.store())
            .await
            .map_err(|e| e.to_string())
    };
    match shared
        .rendered
        .get_or_render(shared.service.now_ms(), render)
        .await
    {
        Ok(mut text) => {
            text.push_str(&access_denied_text(&shared.gate));
            (
                [(
                    header::CONTENT_TYPE,
                    "text/plain; version=0.0.4; charset=utf-8",
                )],
                text,
            )
                .into_response()
        }
        Err(error) => {
            tracing::warn!(%error, "rendering metrics failed");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("reading the store failed: {error}\n"),
            )
                .into_response()
        }
    }
}

/// `trainyard_access_denied_total`, by action (a bounded label: the actions are a fixed set), and
/// `trainyard_throttled_total`.
fn access_denied_text(gate: &Gate) -> String {
    let mut text = String::from(
        "# HELP trainyard_access_denied_total Requests the access policies refused, by action.\n\
         # TYPE trainyard_access_denied_total counter\n",
    );
    for (action, n) in gate.denied() {
        text.push_str(&format!(
            "trainyard_access_denied_total{{action=\"{action}\"}} {n}\n"
        ));
    }
    text.push_str(&format!(
        "# HELP trainyard_throttled_total Requests refused because their caller was over its rate limit.\n\
         # TYPE trainyard_throttled_total counter\n\
         trainyard_throttled_total {}\n",
        gate.throttled()
    ));
    text
}

/// One line of the event stream: job events only (audit records are read through
/// `ListAuditRecords`, which the access policies guard).
pub fn event_line(event: &Event, time_ms: i64) -> Option<String> {
    let (job_id, job_queue, status) = match event {
        Event::JobSubmitted { job_id, job_queue } => (job_id, job_queue, JobStatus::Submitted),
        Event::JobStatusChanged {
            job_id,
            job_queue,
            status,
            ..
        } => (job_id, job_queue, *status),
        Event::Audited(_) => return None,
        Event::StartEstimateMoved {
            job_id,
            job_queue,
            previous_p50_ms,
            p50_ms,
        } => {
            let mut line = json!({
                "time": time_ms,
                "jobId": job_id,
                "jobQueue": job_queue,
                "event": "startEstimateMoved",
                "previousP50": previous_p50_ms,
                "p50": p50_ms,
            })
            .to_string();
            line.push('\n');
            return Some(line);
        }
    };
    let mut line = json!({
        "time": time_ms,
        "jobId": job_id,
        "jobQueue": job_queue,
        "status": status.as_str(),
    })
    .to_string();
    line.push('\n');
    Some(line)
}

async fn follow<S: Store, E: EventSink>(
    State(shared): State<Arc<Shared<S, E>>>,
    caller: Option<axum::extract::Extension<Caller>>,
) -> Response {
    let caller = caller.map_or_else(
        Principal::anonymous,
        |axum::extract::Extension(Caller(p))| p,
    );
    let service = shared.service.as_ref();
    let allowed = async {
        shared.gate.admit(&caller, service.now_ms())?;
        shared
            .gate
            .check(service, &caller, "listservicejobs", b"{}")
            .await?
            .refused()
    };
    if let Err(refused) = allowed.await {
        return refused.into_response();
    }
    let mut feed = shared.events.subscribe();
    let mut stopping = shared.stopping.clone();
    let (lines, rx) = mpsc::channel::<Bytes>(FOLLOWER_BUFFER);
    tokio::spawn(async move {
        loop {
            let event = tokio::select! {
                _ = stopping.wait_for(|stop| *stop) => return,
                () = lines.closed() => return,
                event = feed.recv() => event,
            };
            let line = match event {
                Ok(event) => match event_line(&event, SystemClock.now_ms()) {
                    Some(line) => line,
                    None => continue,
                },
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    format!("{}\n", json!({ "missed": missed }))
                }
                Err(broadcast::error::RecvError::Closed) => return,
            };
            if lines.send(Bytes::from(line)).await.is_err() {
                return;
            }
        }
    });
    (
        [
            (header::CONTENT_TYPE, "application/x-ndjson"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::new(Lines { rx }),
    )
        .into_response()
}

/// A response body that yields each line as it is sent and ends when the sender goes.
struct Lines {
    rx: mpsc::Receiver<Bytes>,
}

impl http_body::Body for Lines {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        self.get_mut()
            .rx
            .poll_recv(cx)
            .map(|line| line.map(|bytes| Ok(http_body::Frame::data(bytes))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_loopback_server_answers_only_to_loopback_host_names() {
        use tower::ServiceExt;
        let address: std::net::SocketAddr = "127.0.0.1:8080".parse().expect("address");
        let hosts = allowed_hosts(address).expect("loopback has a list");
        let app = Router::new().route("/v1/x", get(|| async { "ok" })).layer(
            axum::middleware::from_fn_with_state(Arc::new(hosts), require_host),
        );
        let cases = [
            (Some("127.0.0.1:8080"), 200),
            (Some("localhost:8080"), 200),
            (Some("LOCALHOST:8080"), 200),
            (Some("[::1]:8080"), 200),
            (None, 200),
            // A page on evil.example whose name now resolves to 127.0.0.1 (DNS rebinding).
            (Some("evil.example:8080"), 403),
            (Some("127.0.0.1:9999"), 403),
        ];
        for (host, status) in cases {
            let mut request = axum::http::Request::builder().uri("/v1/x");
            if let Some(host) = host {
                request = request.header(header::HOST, host);
            }
            let response = app
                .clone()
                .oneshot(request.body(Body::empty()).expect("request"))
                .await
                .expect("response");
            assert_eq!(response.status().as_u16(), status, "{host:?}");
        }
        let open: std::net::SocketAddr = "0.0.0.0:8080".parse().expect("address");
        assert!(
            allowed_hosts(open).is_none(),
            "names of other addresses are not known"
        );
    }

    #[tokio::test]
    async fn metrics_are_rendered_at_most_once_per_period_however_often_scraped() {
        let rendered = RenderedMetrics::default();
        let renders = std::sync::atomic::AtomicUsize::new(0);
        let render = |label: &'static str| {
            let renders = &renders;
            async move {
                renders.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Ok::<_, String>(label.to_owned())
            }
        };
        for now in [0, 1, 2_500, METRICS_CACHE_MS - 1] {
            assert_eq!(
                rendered.get_or_render(now, render("first")).await.unwrap(),
                "first"
            );
        }
        assert_eq!(renders.load(std::sync::atomic::Ordering::SeqCst), 1);
        let later = rendered.get_or_render(METRICS_CACHE_MS, render("second"));
        assert_eq!(later.await.unwrap(), "second");
        // A clock stepped back renders again rather than serving a future rendering.
        let stepped = rendered.get_or_render(0, render("third"));
        assert_eq!(stepped.await.unwrap(), "third");
        assert_eq!(renders.load(std::sync::atomic::Ordering::SeqCst), 3);
        // A failed rendering is not kept.
        let failed = rendered
            .get_or_render(100_000, async { Err::<String, _>("store down".to_owned()) })
            .await;
        assert!(failed.is_err());
        let after = rendered.get_or_render(100_001, render("fourth"));
        assert_eq!(after.await.unwrap(), "fourth");
    }

    #[test]
    fn an_event_line_is_one_json_object_with_time_job_queue_and_status() {
        let cases = [
            (
                Event::JobSubmitted {
                    job_id: "j-1".into(),
                    job_queue: "research".into(),
                },
                "SUBMITTED",
            ),
            (
                Event::JobStatusChanged {
                    job_id: "j-1".into(),
                    job_queue: "research".into(),
                    status: JobStatus::Succeeded,
                    job: Box::new(
                        serde_json::from_value(json!({
                            "jobId": "j-1", "jobName": "j", "jobQueue": "research",
                            "serviceJobType": "SAGEMAKER_TRAINING", "serviceRequestPayload": "{}",
                            "status": "SUCCEEDED", "createdAt": 0, "updatedAt": 0,
                            "training": {"trainingJobName": "t", "instances": {"ml.g5.xlarge": 1}}
                        }))
                        .expect("a job"),
                    ),
                },
                "SUCCEEDED",
            ),
        ];
        for (event, status) in cases {
            let line = event_line(&event, 42).expect("a job event");
            assert!(line.ends_with('\n') && line.matches('\n').count() == 1);
            let value: serde_json::Value = serde_json::from_str(&line).expect("json");
            assert_eq!(
                value,
                json!({"time": 42, "jobId": "j-1", "jobQueue": "research", "status": status})
            );
        }
    }
}
