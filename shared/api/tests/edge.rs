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

/// Batch's documented limits on share identifiers: letters and digits only (no NUL, no spaces),
/// at most 255, and at most 500 active shares per fair-share queue:
/// the submit that would add the 501st fails, one under an active share still goes.
#[tokio::test]
async fn share_identifiers_keep_batch_limits_on_characters_length_and_active_count() {
    let h = harness();
    h.fifo_queue("gpus", "production", 10, 4).await;
    h.fair_share_queues("gpus", &[("research", 10)]).await;
    let submit = |share: &str| {
        let mut body = submit_body("j", "research");
        body["shareIdentifier"] = json!(share);
        body
    };
    for bad in [
        "nul\u{0}byte",
        "two words",
        "a/b",
        "team-a",
        "vision*",
        "",
        &"a".repeat(256),
    ] {
        let message = h.client_error("submitservicejob", submit(bad)).await;
        assert!(message.contains("shareIdentifier"), "{bad:?}: {message}");
    }
    let message = h
        .client_error(
            "createschedulingpolicy",
            json!({"name": "odd", "fairsharePolicy":
                {"shareDistribution": [{"shareIdentifier": "a b*"}]}}),
        )
        .await;
    assert!(
        message.contains("shareDistribution[0].shareIdentifier"),
        "{message}"
    );
    h.ok(
        "createschedulingpolicy",
        json!({"name": "prefixes", "fairsharePolicy":
            {"shareDistribution": [{"shareIdentifier": "team*"}]}}),
    )
    .await;

    for i in 0..500 {
        h.ok("submitservicejob", submit(&format!("team{i}"))).await;
    }
    h.service.accept_submitted(1_000, 0).await.unwrap();
    let message = h.client_error("submitservicejob", submit("team500")).await;
    assert!(
        message.contains("has 500 already") && message.contains("team500"),
        "{message}"
    );
    h.ok("submitservicejob", submit("team7")).await;
    // Once a share has nothing waiting or running, it is no longer active.
    let listed = h
        .ok(
            "listservicejobs",
            json!({"jobQueue": "research", "jobStatus": "RUNNABLE",
                "filters": [{"name": "SHARE_IDENTIFIER", "values": ["team3"]}]}),
        )
        .await;
    let id = &listed["jobSummaryList"][0]["jobId"];
    h.ok(
        "terminateservicejob",
        json!({"jobId": id, "reason": "make room"}),
    )
    .await;
    h.ok("submitservicejob", submit("team500")).await;
}

/// A caller over its rate limit gets `ThrottlingException` (HTTP 429) before anything is read
/// or changed for the request, while other callers are served; its bucket refills with time.
#[tokio::test]
async fn a_flood_from_one_caller_is_throttled_and_others_are_served() {
    let h = support::harness_with_gate(trainyard_api::Gate::default().with_rate_limit(5));
    let flood = "arn:aws:iam::000000000000:user/flood";
    let other = "arn:aws:iam::000000000000:user/other";
    let mut statuses = Vec::new();
    for _ in 0..15 {
        let (status, error_type, _) = h
            .send_as(Some(flood), "POST", "/v1/describejobqueues", "{}".into())
            .await;
        statuses.push((status.as_u16(), error_type));
    }
    let throttled = (429, Some("ThrottlingException".to_owned()));
    assert_eq!(
        statuses.iter().filter(|s| **s == (200, None)).count(),
        10,
        "a burst of twice the rate: {statuses:?}"
    );
    assert!(
        statuses[10..].iter().all(|s| *s == throttled),
        "{statuses:?}"
    );
    // Throttled before the gate or the operation: not even a submit's audit record is written.
    let (status, _, _) = h
        .send_as(
            Some(flood),
            "POST",
            "/v1/submitservicejob",
            submit_body("x", "q").to_string(),
        )
        .await;
    assert_eq!(status.as_u16(), 429);
    let (status, _, _) = h
        .send_as(Some(other), "POST", "/v1/describejobqueues", "{}".into())
        .await;
    assert_eq!(status.as_u16(), 200, "another caller is served");
    h.clock.advance(1_000);
    let (status, _, _) = h
        .send_as(Some(flood), "POST", "/v1/describejobqueues", "{}".into())
        .await;
    assert_eq!(
        status.as_u16(),
        200,
        "a second later the bucket has refilled"
    );
    let (status, _, body) = h
        .send_as(
            Some(other),
            "POST",
            "/trainyard/v1/listauditrecords",
            "{}".into(),
        )
        .await;
    assert_eq!(status.as_u16(), 200, "{body}");
    assert_eq!(body["auditRecords"], json!([]), "nothing was recorded");
}
