//! Tagging through the real router: `POST`, `DELETE` and `GET /v1/tags/{resourceArn}` on every
//! kind of resource, the tag limits, and ARNs that name nothing Trainyard serves.

// The helpers below are not `#[test]` functions, so clippy's test exemption does not reach them
// (nor the shared `support` module); in a test, a failed unwrap is the failure report we want.
#![allow(clippy::unwrap_used)]

mod support;

use axum::http::StatusCode;
use serde_json::{Value, json};
use support::{Harness, harness, submit_body};

const ARN_PREFIX: &str = "arn:aws:batch:us-east-1:000000000000:";

/// Encodes an ARN as one path segment, as botocore does (`:` and `/` escaped).
fn tags_path(arn: &str) -> String {
    let encoded: String = arn
        .chars()
        .map(|c| match c {
            ':' => "%3A".to_owned(),
            '/' => "%2F".to_owned(),
            c => c.to_string(),
        })
        .collect();
    format!("/v1/tags/{encoded}")
}

async fn tag(h: &Harness, arn: &str, tags: Value) -> (StatusCode, Value) {
    h.raw(
        "POST",
        &tags_path(arn),
        json!({ "tags": tags }).to_string().into_bytes(),
    )
    .await
}

async fn untag(h: &Harness, arn: &str, query: &str) -> (StatusCode, Value) {
    h.raw("DELETE", &format!("{}?{query}", tags_path(arn)), Vec::new())
        .await
}

async fn list(h: &Harness, arn: &str) -> (StatusCode, Value) {
    h.raw("GET", &tags_path(arn), Vec::new()).await
}

/// One resource of every kind, each created with the tag `created=yes`; returns their ARNs.
async fn one_of_each(h: &Harness) -> Vec<(&'static str, String)> {
    let created = json!({"created": "yes"});
    h.ok(
        "createserviceenvironment",
        json!({"serviceEnvironmentName": "qm-env", "serviceEnvironmentType": "SAGEMAKER_TRAINING",
               "capacityLimits": [{"maxCapacity": 4, "capacityUnit": "ml.g5.xlarge"}], "tags": created}),
    )
    .await;
    h.ok(
        "createschedulingpolicy",
        json!({"name": "quota", "quotaSharePolicy": {"idleResourceAssignmentStrategy": "FIFO"}, "tags": created}),
    )
    .await;
    h.ok(
        "createjobqueue",
        json!({"jobQueueName": "queue", "priority": 1, "schedulingPolicyArn": "quota", "tags": created,
               "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": "qm-env"}]}),
    )
    .await;
    h.ok(
        "createquotashare",
        json!({"quotaShareName": "team", "jobQueue": "queue", "tags": created,
               "capacityLimits": [{"maxCapacity": 2, "capacityUnit": "ml.g5.xlarge"}],
               "resourceSharingConfiguration": {"strategy": "RESERVE"},
               "preemptionConfiguration": {"inSharePreemption": "DISABLED"}}),
    )
    .await;
    let mut job = submit_body("train", "queue");
    job["quotaShareName"] = json!("team");
    job["tags"] = created;
    let submitted = h.ok("submitservicejob", job).await;
    vec![
        (
            "service environment",
            format!("{ARN_PREFIX}service-environment/qm-env"),
        ),
        (
            "scheduling policy",
            format!("{ARN_PREFIX}scheduling-policy/quota"),
        ),
        ("job queue", format!("{ARN_PREFIX}job-queue/queue")),
        (
            "quota share",
            format!("{ARN_PREFIX}job-queue/queue/quota-share/team"),
        ),
        (
            "service job",
            submitted["jobArn"].as_str().unwrap().to_owned(),
        ),
    ]
}

#[tokio::test]
async fn every_kind_of_resource_can_be_tagged_untagged_and_listed() {
    let h = harness();
    for (kind, arn) in one_of_each(&h).await {
        let listed = list(&h, &arn).await;
        assert_eq!(
            listed,
            (StatusCode::OK, json!({"tags": {"created": "yes"}})),
            "{kind}: tags given at creation"
        );

        let added = tag(&h, &arn, json!({"team": "vision", "cost-center": "42"})).await;
        assert_eq!(added, (StatusCode::OK, json!({})), "{kind}");
        let replaced = tag(&h, &arn, json!({"team": "nlp"})).await;
        assert_eq!(replaced.0, StatusCode::OK, "{kind}: {replaced:?}");
        assert_eq!(
            list(&h, &arn).await.1,
            json!({"tags": {"created": "yes", "team": "nlp", "cost-center": "42"}}),
            "{kind}: tags merge and values are replaced"
        );

        let removed = untag(
            &h,
            &arn,
            "tagKeys=cost-center&tagKeys=created&tagKeys=never-set",
        )
        .await;
        assert_eq!(removed, (StatusCode::OK, json!({})), "{kind}");
        assert_eq!(
            list(&h, &arn).await.1,
            json!({"tags": {"team": "nlp"}}),
            "{kind}: keys removed"
        );
    }
    // The describe operations show the same tags.
    let queue = h
        .ok("describejobqueues", json!({"jobQueues": ["queue"]}))
        .await;
    assert_eq!(queue["jobQueues"][0]["tags"], json!({"team": "nlp"}));
    let share = h
        .ok(
            "describequotashare",
            json!({"quotaShareArn": format!("{ARN_PREFIX}job-queue/queue/quota-share/team")}),
        )
        .await;
    assert_eq!(share["tags"], json!({"team": "nlp"}));
}

#[tokio::test]
async fn arns_that_name_nothing_trainyard_serves_are_client_errors_naming_them() {
    let h = harness();
    one_of_each(&h).await;
    let cases = [
        (
            "an unknown job queue",
            format!("{ARN_PREFIX}job-queue/ghost"),
            "job-queue/ghost",
        ),
        (
            "an unknown quota share",
            format!("{ARN_PREFIX}job-queue/queue/quota-share/ghost"),
            "quota-share/ghost",
        ),
        (
            "an unknown service job",
            format!("{ARN_PREFIX}service-job/00000000-0000-4000-8000-0000000000ff"),
            "0000000000ff",
        ),
        (
            "an unknown policy",
            format!("{ARN_PREFIX}scheduling-policy/ghost"),
            "scheduling-policy/ghost",
        ),
        (
            "another account",
            "arn:aws:batch:us-east-1:123456789012:job-queue/queue".to_owned(),
            "123456789012",
        ),
        (
            "another service",
            "arn:aws:s3:us-east-1:000000000000:bucket/x".to_owned(),
            "\"s3\"",
        ),
        (
            "a compute environment",
            format!("{ARN_PREFIX}compute-environment/ce"),
            "compute-environment/ce",
        ),
        (
            "a bare name",
            "queue".to_owned(),
            "does not start with \"arn:\"",
        ),
        (
            "a truncated ARN",
            "arn:aws:batch".to_owned(),
            "arn:aws:batch",
        ),
    ];
    for (story, arn, needle) in cases {
        for (method, (status, body)) in [
            ("GET", list(&h, &arn).await),
            ("POST", tag(&h, &arn, json!({"k": "v"})).await),
            ("DELETE", untag(&h, &arn, "tagKeys=k").await),
        ] {
            assert_eq!(status, StatusCode::BAD_REQUEST, "{story} {method}: {body}");
            assert_eq!(body["__type"], "ClientException", "{story} {method}");
            let message = body["message"].as_str().unwrap();
            assert!(
                message.contains(needle),
                "{story} {method}: {message:?} lacks {needle:?}"
            );
        }
    }
}

#[tokio::test]
async fn tag_limits_are_enforced_on_the_request_and_on_the_resource() {
    let h = harness();
    let arn = one_of_each(&h).await[2].1.clone();
    let many = |from: usize, to: usize| -> Value {
        (from..to)
            .map(|i| (format!("k{i}"), json!("v")))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    let cases: Vec<(&str, Value, &str)> = vec![
        ("no tags at all", json!({}), "at least one tag"),
        ("a reserved aws: key", json!({"aws:owner": "x"}), "reserved"),
        ("an empty key", json!({"": "x"}), "1–128"),
        (
            "a value over 256 characters",
            json!({"k": "v".repeat(257)}),
            "256",
        ),
        ("51 tags in one request", many(0, 51), "at most 50"),
        // The resource already has `created`; 50 more would make 51.
        ("a merge past 50", many(0, 50), "would have 51 tags"),
    ];
    for (story, tags, needle) in cases {
        let (status, body) = tag(&h, &arn, tags).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{story}: {body}");
        assert!(
            body["message"].as_str().unwrap().contains(needle),
            "{story}: {body}"
        );
    }
    assert_eq!(
        list(&h, &arn).await.1,
        json!({"tags": {"created": "yes"}}),
        "nothing refused was applied"
    );
    let (status, body) = tag(&h, &arn, many(0, 49)).await;
    assert_eq!(status, StatusCode::OK, "exactly 50 is fine: {body}");

    let (status, body) = h
        .raw("POST", &tags_path(&arn), br#"{"tags": "team"}"#.to_vec())
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["message"].as_str().unwrap().contains("tags"), "{body}");
    let (status, body) = untag(&h, &arn, "").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("tagKeys is required"),
        "{body}"
    );
    let (status, body) = untag(&h, &arn, "tagKeys=k%2").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("malformed escape"),
        "{body}"
    );
    let (status, body) = untag(&h, &arn, "tagKeys=k1&tagKeys=k%32").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let tags = list(&h, &arn).await.1;
    assert!(
        tags["tags"].get("k1").is_none() && tags["tags"].get("k2").is_none(),
        "percent-decoded keys: {tags}"
    );
    assert!(tags["tags"].get("k3").is_some());
}

#[tokio::test]
async fn deleted_resources_take_their_tags_with_them() {
    let h = harness();
    let arn = one_of_each(&h).await[3].1.clone();
    h.ok(
        "updatequotashare",
        json!({"quotaShareArn": arn, "state": "DISABLED"}),
    )
    .await;
    h.ok("deletequotashare", json!({"quotaShareArn": arn}))
        .await;
    let (status, body) = list(&h, &arn).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["message"].as_str().unwrap().contains(&arn), "{body}");
}
