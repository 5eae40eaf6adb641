//! The attacks a web page can mount through a browser, against the real router: each is
//! refused, and the queue it aimed at is untouched.

#![allow(clippy::unwrap_used)]

mod support;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::json;
use support::{harness, submit_body};
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

/// Well-formed JSON of the wrong shape is refused with the member at fault named: a wrong type
/// anywhere (an enum given a number, a list given an object), and a structure given as a list
/// (serde would otherwise read `[3, ...]` positionally into `retryStrategy`).
#[tokio::test]
async fn wrong_types_and_structures_given_as_lists_are_refused_naming_the_member() {
    let h = harness();
    h.fifo_queue("gpus", "research", 10, 4).await;
    let mut retry_as_list = submit_body("a", "research");
    retry_as_list["retryStrategy"] = json!([3, []]);
    let mut attempts_as_text = submit_body("b", "research");
    attempts_as_text["retryStrategy"] = json!({"attempts": "three"});
    let mut tags_as_list = submit_body("c", "research");
    tags_as_list["tags"] = json!(["a", "b"]);
    let mut timeout_as_list = submit_body("d", "research");
    timeout_as_list["timeoutConfig"] = json!([60]);
    let cases = [
        (
            "updatejobqueue",
            json!({"jobQueue": "research", "state": 1}),
            "state",
        ),
        (
            "updatejobqueue",
            json!({"jobQueue": "research", "serviceEnvironmentOrder": {"order": 1}}),
            "serviceEnvironmentOrder",
        ),
        ("submitservicejob", retry_as_list, "retryStrategy"),
        (
            "submitservicejob",
            attempts_as_text,
            "retryStrategy.attempts",
        ),
        ("submitservicejob", tags_as_list, "tags"),
        ("submitservicejob", timeout_as_list, "timeoutConfig"),
        (
            "createserviceenvironment",
            json!({"serviceEnvironmentName": "x", "serviceEnvironmentType": "SAGEMAKER_TRAINING",
                "capacityLimits": [[4, "NUM_INSTANCES"]]}),
            "capacityLimits[0]",
        ),
    ];
    for (op, body, member) in cases {
        let message = h.client_error(op, body.clone()).await;
        assert!(
            message.contains(member) && !message.contains("Malformed JSON"),
            "{op} {body}: {message}"
        );
    }
    let listed = h
        .ok("listservicejobs", json!({"jobQueue": "research"}))
        .await;
    assert_eq!(listed["jobSummaryList"], json!([]), "nothing was submitted");
}
