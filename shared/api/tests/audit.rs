//! The audit trail through the real router: every call that asks to change something is
//! recorded, allowed or refused, with the policy that decided and how it ended; reads are not;
//! and only those the policies let read the trail may list it.

#![allow(clippy::unwrap_used)]

mod support;

use axum::http::StatusCode;
use serde_json::{Value, json};
use support::{Harness, harness, submit_body};

const EXAMPLES: &str = include_str!("../../../docs/examples/access-policies.cedar");
const PLATFORM: &str = "arn:aws:sts::000000000000:assumed-role/platform-admin/dana";
const ALICE: &str = "arn:aws:sts::000000000000:assumed-role/vision-researcher/alice";
const BOB: &str = "arn:aws:sts::000000000000:assumed-role/vision-researcher/bob";

async fn call_as(h: &Harness, caller: &str, path: &str, body: Value) -> (StatusCode, Value) {
    let (status, _, value) = h
        .send_as(Some(caller), "POST", path, body.to_string())
        .await;
    (status, value)
}

/// The whole trail as `caller` reads it, newest first, `page` records at a time.
async fn trail(h: &Harness, caller: &str, filter: Value, page: i64) -> Vec<Value> {
    let mut out = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut body = filter.clone();
        body["maxResults"] = json!(page);
        if let Some(t) = &token {
            body["nextToken"] = json!(t);
        }
        let (status, value) = call_as(h, caller, "/trainyard/v1/listauditrecords", body).await;
        assert_eq!(status, StatusCode::OK, "{value}");
        let records = value["auditRecords"].as_array().unwrap();
        assert!(records.len() <= page as usize);
        out.extend(records.iter().cloned());
        match value.get("nextToken").and_then(Value::as_str) {
            Some(t) => token = Some(t.to_owned()),
            None => return out,
        }
    }
}

fn vision_submit(name: &str, priority: i64) -> Value {
    let mut body = submit_body(name, "research");
    body["shareIdentifier"] = json!("vision");
    body["schedulingPriority"] = json!(priority);
    body
}

fn summary(record: &Value) -> (String, String, bool, String) {
    let short = |v: &Value| v.as_str().unwrap().rsplit('/').next().unwrap().to_owned();
    (
        short(&record["principal"]),
        record["action"].as_str().unwrap().to_owned(),
        record["allowed"].as_bool().unwrap(),
        record["outcome"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test]
async fn every_change_is_recorded_allowed_or_refused_and_reads_are_not() {
    let h = harness();
    h.fifo_queue("gpus", "production", 900, 8).await;
    h.fair_share_queues("gpus", &[("research", 10)]).await;
    let (status, body) = call_as(
        &h,
        PLATFORM,
        "/trainyard/v1/putaccesspolicies",
        json!({ "policies": EXAMPLES }),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");

    h.clock.advance(1);
    let (status, submitted) =
        call_as(&h, ALICE, "/v1/submitservicejob", vision_submit("a", 10)).await;
    assert_eq!(status, StatusCode::OK, "{submitted}");
    h.clock.advance(1);
    let (status, _) = call_as(&h, ALICE, "/v1/submitservicejob", vision_submit("b", 99)).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    h.clock.advance(1);
    let terminate = json!({"jobId": submitted["jobId"], "reason": "mine now"});
    let (status, _) = call_as(&h, BOB, "/v1/terminateservicejob", terminate).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    h.clock.advance(1);
    // Reads, allowed or not, are not recorded.
    let (status, _) = call_as(
        &h,
        BOB,
        "/v1/describeservicejob",
        json!({"jobId": submitted["jobId"]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    // A refused read of the trail itself is a read too.
    let (status, refused) = call_as(&h, ALICE, "/trainyard/v1/listauditrecords", json!({})).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    // A change that fails after it was allowed is recorded with its error.
    h.clock.advance(1);
    let (status, _) = call_as(
        &h,
        PLATFORM,
        "/v1/deletejobqueue",
        json!({"jobQueue": "nope"}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    let mut records = trail(&h, PLATFORM, json!({}), 2).await;
    // Before these: the set-up's creates, at the same millisecond as the put.
    assert!(records.len() > 5);
    records.truncate(5);
    let got: Vec<_> = records.iter().map(summary).collect();
    let row = |who: &str, action: &str, allowed: bool, outcome: &str| {
        (
            who.to_owned(),
            action.to_owned(),
            allowed,
            outcome.to_owned(),
        )
    };
    assert_eq!(
        got,
        [
            row("dana", "DeleteJobQueue", true, "ClientException"),
            row("bob", "TerminateServiceJob", false, "AccessDeniedException"),
            row("alice", "SubmitServiceJob", false, "AccessDeniedException"),
            row("alice", "SubmitServiceJob", true, "OK"),
            row("dana", "PutAccessPolicies", true, "OK"),
        ],
        "newest first: {records:#?}"
    );
    // What each says: the resource, the policy that decided, what the call made or why it failed.
    let [deleted, bobs, refused_submit, submit, put] = records.as_slice() else {
        panic!("five records")
    };
    assert_eq!(submit["decidedBy"], "permitted by vision-submits");
    assert_eq!(submit["detail"], submitted["jobArn"]);
    assert_eq!(
        submit["resource"],
        "arn:aws:batch:us-east-1:000000000000:job-queue/research"
    );
    assert_eq!(refused_submit["decidedBy"], "no policy permits it");
    assert_eq!(bobs["resource"], submitted["jobArn"]);
    assert!(
        bobs["detail"].as_str().unwrap().contains("not authorized"),
        "{bobs}"
    );
    assert_eq!(deleted["decidedBy"], "permitted by platform-administers");
    assert!(
        deleted["detail"].as_str().unwrap().contains("nope"),
        "{deleted}"
    );
    assert_eq!(
        put["decidedBy"],
        "no access policies are stored: every caller is allowed"
    );
    assert!(
        put.get("detail").is_none(),
        "nothing secret: the policy text is not recorded: {put}"
    );
    let expires = submit["expiresAtMs"].as_i64().unwrap() - submit["atMs"].as_i64().unwrap();
    assert_eq!(expires, 90 * 86_400_000, "kept 90 days by default");

    // Filters.
    let alices = trail(&h, PLATFORM, json!({"principal": ALICE}), 10).await;
    assert_eq!(alices.len(), 2);
    let denied = trail(&h, PLATFORM, json!({"deniedOnly": true}), 10).await;
    assert_eq!(
        denied.iter().map(summary).collect::<Vec<_>>(),
        [
            row("bob", "TerminateServiceJob", false, "AccessDeniedException"),
            row("alice", "SubmitServiceJob", false, "AccessDeniedException"),
        ]
    );
    let window = trail(
        &h,
        PLATFORM,
        json!({"action": "SubmitServiceJob", "startTime": submit["atMs"], "endTime": refused_submit["atMs"]}),
        10,
    )
    .await;
    assert_eq!(window, std::slice::from_ref(submit), "[start, end)");
    for bad in [
        json!({"action": "Nope"}),
        json!({"startTime": 5, "endTime": 5}),
        json!({"nextToken": "garbage"}),
        json!({"maxResults": 0}),
        json!({"surprise": 1}),
    ] {
        let (status, value) = call_as(&h, PLATFORM, "/trainyard/v1/listauditrecords", bad).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{value}");
    }
}

#[tokio::test]
async fn without_policies_changes_are_recorded_as_allowed_and_a_bulk_terminate_per_job() {
    let h = harness();
    h.fifo_queue("gpus", "research", 10, 8).await;
    let a = h.ok("submitservicejob", submit_body("a", "research")).await;
    let b = h.ok("submitservicejob", submit_body("b", "research")).await;
    h.clock.advance(1);
    h.ok(
        "terminateservicejobs",
        json!({"jobs": [a["jobId"], b["jobId"]], "reason": "all"}),
    )
    .await;
    // A terminate of a job that does not exist is recorded too, with nothing to check.
    h.clock.advance(1);
    h.client_error(
        "terminateservicejob",
        json!({"jobId": "nope", "reason": "x"}),
    )
    .await;
    let records = trail(&h, "arn:aws:iam::000000000000:user/anyone", json!({}), 100).await;
    let terminates: Vec<&Value> = records
        .iter()
        .filter(|r| r["action"] == "TerminateServiceJob")
        .collect();
    assert_eq!(terminates.len(), 3, "{records:#?}");
    assert_eq!(terminates[0]["resource"], "*");
    assert_eq!(terminates[0]["outcome"], "ClientException");
    let mut resources: Vec<&str> = terminates[1..]
        .iter()
        .map(|r| r["resource"].as_str().unwrap())
        .collect();
    resources.sort_unstable();
    let mut expected = [a["jobArn"].as_str().unwrap(), b["jobArn"].as_str().unwrap()];
    expected.sort_unstable();
    assert_eq!(
        resources, expected,
        "one record per job of the bulk terminate"
    );
    for r in &records {
        assert_eq!(r["principal"], "anonymous");
        assert_eq!(r["allowed"], true);
    }
    // The queue and environment set-up and the two submits are there too.
    assert_eq!(
        records
            .iter()
            .filter(|r| r["action"] == "SubmitServiceJob")
            .count(),
        2
    );
    assert!(records.iter().any(|r| r["action"] == "CreateJobQueue"));
}
