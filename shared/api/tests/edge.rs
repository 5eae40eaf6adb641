//! The attacks a web page can mount through a browser, against the real router: each is
//! refused, and the queue it aimed at is untouched.

#![allow(clippy::unwrap_used)]

mod support;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::json;
use support::harness;
use tower::ServiceExt;

#[tokio::test]
async fn requests_a_page_can_make_a_browser_send_are_refused_and_change_nothing() {
    let h = harness();
    h.fifo_queue("gpus", "research", 10, 8).await;
    let disable = json!({"jobQueue": "research", "state": "DISABLED"}).to_string();
    // (headers, what it is)
    let attacks: [(&[(&str, &str)], &str); 5] = [
        (
            &[
                ("content-type", "text/plain;charset=UTF-8"),
                ("origin", "https://evil.example"),
            ],
            "a text/plain fetch from another site (no preflight)",
        ),
        (
            &[("content-type", "application/x-www-form-urlencoded")],
            "a form post",
        ),
        (
            &[("content-type", "text/plain")],
            "a text/plain post without Origin",
        ),
        (
            &[
                ("content-type", "application/json"),
                ("sec-fetch-site", "cross-site"),
            ],
            "JSON the browser marks cross-site",
        ),
        (
            &[
                ("content-type", "application/json"),
                ("origin", "http://evil.example:8080"),
                ("host", "127.0.0.1:8080"),
            ],
            "JSON from a page of another origin",
        ),
    ];
    for (headers, what) in attacks {
        let mut request = Request::builder()
            .method("POST")
            .uri("/v1/updatejobqueue")
            .header("content-length", disable.len().to_string());
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = h
            .router
            .clone()
            .oneshot(request.body(Body::from(disable.clone())).unwrap())
            .await
            .unwrap();
        assert!(
            matches!(
                response.status(),
                StatusCode::FORBIDDEN | StatusCode::UNSUPPORTED_MEDIA_TYPE
            ),
            "{what}: {}",
            response.status()
        );
        assert!(
            response.headers().contains_key("x-amzn-ErrorType"),
            "{what}"
        );
    }
    let queues = h
        .ok("describejobqueues", json!({"jobQueues": ["research"]}))
        .await;
    assert_eq!(
        queues["jobQueues"][0]["state"], "ENABLED",
        "no attack changed the queue"
    );
    // The same request as a Batch client sends it goes through.
    h.ok(
        "updatejobqueue",
        json!({"jobQueue": "research", "state": "DISABLED"}),
    )
    .await;
}
