//! Access policies through the real router: who may call what once policies are stored, what a
//! refusal looks like, that a refused call changes nothing, and that no operation gets past the
//! gate unasked.

#![allow(clippy::unwrap_used)]

mod support;

use axum::http::StatusCode;
use serde_json::{Value, json};
use support::{Harness, harness, submit_body};
use trainyard_access::Principal;

const EXAMPLES: &str = include_str!("../../../docs/examples/access-policies.cedar");

const PLATFORM: &str = "arn:aws:sts::000000000000:assumed-role/platform-admin/dana";
const ALICE: &str = "arn:aws:sts::000000000000:assumed-role/vision-researcher/alice";
const BOB: &str = "arn:aws:sts::000000000000:assumed-role/vision-researcher/bob";
const ONCALL: &str = "arn:aws:iam::000000000000:user/oncall";

/// `POST path` with `body` as `caller` (`None`: anonymous); status, error type and body.
async fn call_as(
    h: &Harness,
    caller: Option<&str>,
    path: &str,
    body: Value,
) -> (StatusCode, Option<String>, Value) {
    h.send_as(caller, "POST", path, body.to_string()).await
}

/// `PutAccessPolicies` with `body` as `caller`.
async fn put_as(h: &Harness, caller: &str, body: Value) -> (StatusCode, Option<String>, Value) {
    call_as(h, Some(caller), "/trainyard/v1/putaccesspolicies", body).await
}

async fn ok_as(h: &Harness, caller: &str, op: &str, body: Value) -> Value {
    let (status, _, value) = call_as(h, Some(caller), &format!("/v1/{op}"), body.clone()).await;
    assert_eq!(status, StatusCode::OK, "{caller} {op} {body} -> {value}");
    value
}

/// Asserts `op` is refused for `caller` as access denied; returns the message.
async fn denied_as(h: &Harness, caller: Option<&str>, path: &str, body: Value) -> String {
    let (status, error_type, value) = call_as(h, caller, path, body.clone()).await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "{caller:?} {path} {body} -> {value}"
    );
    assert_eq!(error_type.as_deref(), Some("AccessDeniedException"));
    assert_eq!(value["__type"], "AccessDeniedException");
    value["message"].as_str().unwrap().to_owned()
}

fn vision_submit(name: &str, queue: &str, priority: i64) -> Value {
    let mut body = submit_body(name, queue);
    body["shareIdentifier"] = json!("vision");
    body["schedulingPriority"] = json!(priority);
    body
}

/// Queue research (fair share) and production (FIFO) on one environment, and the example
/// policies stored by the platform team.
async fn with_examples() -> Harness {
    let h = harness();
    h.fifo_queue("gpus", "production", 900, 8).await;
    h.fair_share_queues("gpus", &[("research", 10)]).await;
    let (status, _, body) = put_as(&h, PLATFORM, json!({ "policies": EXAMPLES })).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["policies"], 9);
    h
}

async fn job_count(h: &Harness) -> usize {
    let listed = h
        .ok(
            "listservicejobs",
            json!({"jobQueue": "research", "filters": [{"name": "JOB_NAME", "values": ["*"]}]}),
        )
        .await;
    listed["jobSummaryList"].as_array().unwrap().len()
}

#[tokio::test]
async fn without_policies_every_caller_may_do_everything() {
    let h = harness();
    h.fifo_queue("gpus", "research", 10, 8).await;
    ok_as(
        &h,
        ALICE,
        "createjobqueue",
        json!({"jobQueueName": "mine", "priority": 1,
        "jobQueueType": "SAGEMAKER_TRAINING",
        "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": "gpus"}]}),
    )
    .await;
    let submitted = ok_as(&h, BOB, "submitservicejob", submit_body("a", "research")).await;
    let described = ok_as(
        &h,
        ALICE,
        "describeservicejob",
        json!({"jobId": submitted["jobId"]}),
    )
    .await;
    assert_eq!(
        described["trainyard"]["owner"], BOB,
        "the owner is who submitted"
    );
    let (_, _, whoami) = call_as(&h, Some(ALICE), "/trainyard/v1/whoami", json!({})).await;
    assert_eq!(
        whoami,
        json!({"arn": ALICE, "account": "000000000000", "kind": "role", "name": "vision-researcher"})
    );
    // An anonymous submit records no owner.
    let anonymous = h.ok("submitservicejob", submit_body("b", "research")).await;
    let described = h
        .ok("describeservicejob", json!({"jobId": anonymous["jobId"]}))
        .await;
    assert!(
        described
            .get("trainyard")
            .and_then(|t| t.get("owner"))
            .is_none(),
        "{described}"
    );
}

#[tokio::test]
async fn the_example_policies_hold_through_the_router_and_a_refusal_changes_nothing() {
    let h = with_examples().await;

    // Team vision submits to research under its share, up to priority 50.
    let alices = ok_as(
        &h,
        ALICE,
        "submitservicejob",
        vision_submit("a1", "research", 50),
    )
    .await;
    let bobs = ok_as(
        &h,
        BOB,
        "submitservicejob",
        vision_submit("b1", "research", 5),
    )
    .await;
    let message = denied_as(
        &h,
        Some(ALICE),
        "/v1/submitservicejob",
        vision_submit("a2", "research", 51),
    )
    .await;
    assert_eq!(
        message,
        format!(
            "User: {ALICE} is not authorized to perform: batch:SubmitServiceJob on resource: \
             arn:aws:batch:us-east-1:000000000000:job-queue/research (no policy permits it)"
        )
    );
    denied_as(
        &h,
        Some(ALICE),
        "/v1/submitservicejob",
        vision_submit("a3", "production", 10),
    )
    .await;
    denied_as(
        &h,
        None,
        "/v1/submitservicejob",
        vision_submit("x", "research", 1),
    )
    .await;
    assert_eq!(job_count(&h).await, 2, "refused submits store nothing");

    // Owners terminate their own jobs; others may not; on-call may.
    let bob_terminates_alice = json!({"jobId": alices["jobId"], "reason": "mine now"});
    denied_as(
        &h,
        Some(BOB),
        "/v1/terminateservicejob",
        bob_terminates_alice,
    )
    .await;
    let bulk = json!({"jobs": [bobs["jobId"], alices["jobId"]], "reason": "all"});
    denied_as(&h, Some(BOB), "/v1/terminateservicejobs", bulk).await;
    for id in [&alices["jobId"], &bobs["jobId"]] {
        let job = h.ok("describeservicejob", json!({"jobId": id})).await;
        assert_eq!(
            job["isTerminated"], false,
            "a refused terminate terminates nothing: {job}"
        );
    }
    denied_as(
        &h,
        Some(ALICE),
        "/v1/updateservicejob",
        json!({"jobId": alices["jobId"], "schedulingPriority": 99}),
    )
    .await;
    ok_as(
        &h,
        ALICE,
        "updateservicejob",
        json!({"jobId": alices["jobId"], "schedulingPriority": 40}),
    )
    .await;
    ok_as(
        &h,
        ALICE,
        "terminateservicejob",
        json!({"jobId": alices["jobId"], "reason": "done"}),
    )
    .await;
    ok_as(
        &h,
        ONCALL,
        "terminateservicejob",
        json!({"jobId": bobs["jobId"], "reason": "page"}),
    )
    .await;

    // Only the platform team administers; nobody deletes production.
    let queue = json!({"jobQueueName": "nlp", "priority": 5, "jobQueueType": "SAGEMAKER_TRAINING",
        "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": "gpus"}]});
    denied_as(&h, Some(ALICE), "/v1/createjobqueue", queue.clone()).await;
    ok_as(&h, PLATFORM, "createjobqueue", queue).await;
    ok_as(
        &h,
        PLATFORM,
        "updatejobqueue",
        json!({"jobQueue": "production", "state": "DISABLED"}),
    )
    .await;
    let message = denied_as(
        &h,
        Some(PLATFORM),
        "/v1/deletejobqueue",
        json!({"jobQueue": "production"}),
    )
    .await;
    assert!(
        message.ends_with("(forbidden by production-queue-stays)"),
        "{message}"
    );
    let queues = h
        .ok("describejobqueues", json!({"jobQueues": ["production"]}))
        .await;
    assert_eq!(
        queues["jobQueues"].as_array().unwrap().len(),
        1,
        "production is still there"
    );

    // Tags follow the same rules, by the resource's ARN.
    let queue_arn = "arn:aws:batch:us-east-1:000000000000:job-queue/research";
    let tag_path = format!("/v1/tags/{}", queue_arn.replace('/', "%2F"));
    denied_as(
        &h,
        Some(ALICE),
        &tag_path,
        json!({"tags": {"team": "vision"}}),
    )
    .await;
    let (status, _, _) = call_as(
        &h,
        Some(PLATFORM),
        &tag_path,
        json!({"tags": {"team": "all"}}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, tags) = h
        .send_as(Some(ALICE), "GET", &tag_path, String::new())
        .await;
    assert_eq!(
        (status, &tags["tags"]),
        (StatusCode::OK, &json!({"team": "all"}))
    );
}

#[tokio::test]
async fn policies_are_validated_when_written_and_cannot_lock_their_writer_out() {
    let h = with_examples().await;
    // Not an administrator.
    denied_as(
        &h,
        Some(ALICE),
        "/trainyard/v1/putaccesspolicies",
        json!({"policies": "permit(principal, action, resource);"}),
    )
    .await;
    denied_as(
        &h,
        Some(ALICE),
        "/trainyard/v1/deleteaccesspolicies",
        json!({}),
    )
    .await;
    // Invalid policies name the line.
    let bad = "permit(principal, action in Trainyard::Action::\"Read\", resource);\n\
               permit(principal, action == Trainyard::Action::\"SubmitServiceJob\", resource)\n\
               when { context.team == \"vision\" };";
    let (status, error_type, body) = put_as(&h, PLATFORM, json!({"policies": bad})).await;
    assert_eq!(
        (status, error_type.as_deref()),
        (StatusCode::BAD_REQUEST, Some("ClientException"))
    );
    let message = body["message"].as_str().unwrap();
    assert!(
        message.starts_with("The access policies are not valid: line 3"),
        "{message}"
    );
    // A set that would leave its writer unable to change it again is refused.
    let lockout = "permit(principal, action in Trainyard::Action::\"Read\", resource);";
    let (status, _, body) = put_as(&h, PLATFORM, json!({"policies": lockout})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("would not let you"),
        "{body}"
    );
    // The examples are still in force, as written.
    let (_, _, stored) = call_as(
        &h,
        Some(ALICE),
        "/trainyard/v1/getaccesspolicies",
        json!({}),
    )
    .await;
    assert_eq!(stored["policies"], EXAMPLES);
    assert_eq!(stored["updatedBy"], PLATFORM);
    // Deleting them lets everyone do everything again.
    let (status, _, _) = call_as(
        &h,
        Some(PLATFORM),
        "/trainyard/v1/deleteaccesspolicies",
        json!({}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    ok_as(
        &h,
        ALICE,
        "updatejobqueue",
        json!({"jobQueue": "production", "state": "DISABLED"}),
    )
    .await;
    ok_as(
        &h,
        ALICE,
        "deletejobqueue",
        json!({"jobQueue": "production"}),
    )
    .await;
}

#[tokio::test]
async fn no_operation_gets_past_the_gate_unasked() {
    let h = harness();
    h.fifo_queue("gpus", "research", 10, 8).await;
    let job = h.ok("submitservicejob", submit_body("j", "research")).await;
    let id = job["jobId"].clone();
    let arn = job["jobArn"].as_str().unwrap().to_owned();
    // Only the policies' own writer is allowed anything.
    let only_admin =
        format!("permit(principal == Trainyard::Principal::\"{PLATFORM}\", action, resource);");
    let (status, _, body) = put_as(&h, PLATFORM, json!({"policies": only_admin})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let operations = operations(&id, &arn);
    for (op, body) in operations {
        denied_as(&h, Some(ALICE), &format!("/v1/{op}"), body).await;
    }
    for path in [
        "/trainyard/v1/getaccesspolicies",
        "/trainyard/v1/putaccesspolicies",
        "/trainyard/v1/deleteaccesspolicies",
    ] {
        denied_as(
            &h,
            Some(ALICE),
            path,
            json!({"policies": "permit(principal, action, resource);"}),
        )
        .await;
    }
    let tag_path = format!("/v1/tags/{}", arn.replace('/', "%2F"));
    for method in ["GET", "POST", "DELETE"] {
        let (status, error_type, _) = h
            .send_as(
                Some(ALICE),
                method,
                &format!("{tag_path}?tagKeys=a"),
                json!({"tags": {"a": "b"}}).to_string(),
            )
            .await;
        assert_eq!(
            (status, error_type.as_deref()),
            (StatusCode::FORBIDDEN, Some("AccessDeniedException")),
            "{method}"
        );
    }
    // The job is as it was.
    let described = ok_as(&h, PLATFORM, "describeservicejob", json!({"jobId": id})).await;
    assert_eq!(described["isTerminated"], false);
    assert!(described.get("schedulingPriority").is_none());
}

/// Every operation of the router with a plausible body, on the job `id` (`arn`) of queue
/// research.
fn operations(id: &Value, arn: &str) -> Vec<(&'static str, Value)> {
    let q = "arn:aws:batch:us-east-1:000000000000:job-queue/research";
    let share = format!("{q}/quota-share/s");
    vec![
        ("submitservicejob", submit_body("k", "research")),
        ("describeservicejob", json!({"jobId": id})),
        ("describeservicejob", json!({"jobId": arn})),
        ("listservicejobs", json!({"jobQueue": "research"})),
        ("listservicejobs", json!({})),
        ("terminateservicejob", json!({"jobId": id, "reason": "r"})),
        ("terminateservicejobs", json!({"jobs": [id], "reason": "r"})),
        (
            "updateservicejob",
            json!({"jobId": id, "schedulingPriority": 1}),
        ),
        ("getjobqueuesnapshot", json!({"jobQueue": "research"})),
        (
            "createjobqueue",
            json!({"jobQueueName": "x", "priority": 1}),
        ),
        ("describejobqueues", json!({})),
        (
            "updatejobqueue",
            json!({"jobQueue": "research", "priority": 2}),
        ),
        ("deletejobqueue", json!({"jobQueue": q})),
        (
            "createserviceenvironment",
            json!({"serviceEnvironmentName": "e"}),
        ),
        ("describeserviceenvironments", json!({})),
        (
            "updateserviceenvironment",
            json!({"serviceEnvironment": "gpus", "state": "DISABLED"}),
        ),
        (
            "deleteserviceenvironment",
            json!({"serviceEnvironment": "gpus"}),
        ),
        ("createschedulingpolicy", json!({"name": "p"})),
        ("describeschedulingpolicies", json!({"arns": []})),
        ("listschedulingpolicies", json!({})),
        ("updateschedulingpolicy", json!({"arn": "p"})),
        ("deleteschedulingpolicy", json!({"arn": "p"})),
        (
            "createquotashare",
            json!({"quotaShareName": "s", "jobQueue": "research"}),
        ),
        ("describequotashare", json!({"quotaShareArn": share})),
        ("listquotashares", json!({"jobQueue": "research"})),
        ("updatequotashare", json!({"quotaShareArn": share})),
        ("deletequotashare", json!({"quotaShareArn": share})),
        // Case and percent-encoding reach the same operation, and the same check.
        ("SubmitServiceJob", submit_body("k", "research")),
        ("submitservice%6Aob", submit_body("k", "research")),
    ]
}

#[tokio::test]
async fn every_question_the_gate_asks_fits_the_schema() {
    let h = harness();
    h.fifo_queue("gpus", "research", 10, 8).await;
    let job = h.ok("submitservicejob", submit_body("j", "research")).await;
    let arn = job["jobArn"].as_str().unwrap().to_owned();
    let principal = Principal::from_arn(ALICE);
    let mut asked = 0;
    let own = [
        "getaccesspolicies",
        "putaccesspolicies",
        "deleteaccesspolicies",
    ]
    .map(|op| (op, json!({})));
    for (op, body) in operations(&job["jobId"], &arn).into_iter().chain(own) {
        let op = op.replace("%6A", "j");
        let requests =
            trainyard_api::access::requests(&h.service, &op, body.to_string().as_bytes())
                .await
                .unwrap();
        assert!(!requests.is_empty(), "{op} asks nothing");
        for (request, _) in requests {
            trainyard_access::fits_schema(&principal, &request)
                .unwrap_or_else(|e| panic!("{op}: {e}"));
            asked += 1;
        }
    }
    for action in ["TagResource", "UntagResource", "ListTagsForResource"] {
        for resource in [
            arn.as_str(),
            "arn:aws:batch:us-east-1:000000000000:job-queue/research",
        ] {
            let requests = trainyard_api::access::tag_requests(
                &h.service,
                trainyard_access::Action::named(action),
                resource,
            )
            .await
            .unwrap();
            assert_eq!(requests.len(), 1);
            trainyard_access::fits_schema(&principal, &requests[0].0)
                .unwrap_or_else(|e| panic!("{action} {resource}: {e}"));
            asked += 1;
        }
    }
    assert!(asked > 30, "{asked}");
}

#[tokio::test]
async fn a_listing_shows_only_the_jobs_the_caller_may_describe() {
    let h = harness();
    h.fifo_queue("gpus", "research", 10, 8).await;
    let alices = ok_as(&h, ALICE, "submitservicejob", submit_body("a", "research")).await;
    ok_as(&h, BOB, "submitservicejob", submit_body("b", "research")).await;
    // Anyone may list, but a job may be described only by its owner (and the platform team).
    let policies = format!(
        "permit(principal, action == Trainyard::Action::\"ListServiceJobs\", resource);\n\
         permit(principal, action == Trainyard::Action::\"DescribeServiceJob\", resource)\n\
           when {{ resource.owner == principal.arn }};\n\
         permit(principal == Trainyard::Principal::\"{PLATFORM}\", action, resource);"
    );
    let (status, _, body) = put_as(&h, PLATFORM, json!({ "policies": policies })).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let list = json!({"jobQueue": "research", "filters": [{"name": "JOB_NAME", "values": ["*"]}]});
    let names = |listed: &Value| -> Vec<String> {
        let mut names: Vec<String> = listed["jobSummaryList"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["jobName"].as_str().unwrap().to_owned())
            .collect();
        names.sort();
        names
    };
    assert_eq!(
        names(&ok_as(&h, ALICE, "listservicejobs", list.clone()).await),
        ["a"]
    );
    assert_eq!(
        names(&ok_as(&h, BOB, "listservicejobs", list.clone()).await),
        ["b"]
    );
    assert_eq!(
        names(&ok_as(&h, PLATFORM, "listservicejobs", list.clone()).await),
        ["a", "b"]
    );
    let (status, _, _) = call_as(&h, None, "/v1/listservicejobs", list).await;
    assert_eq!(status, StatusCode::OK);
    denied_as(
        &h,
        Some(BOB),
        "/v1/describeservicejob",
        json!({"jobId": alices["jobId"]}),
    )
    .await;
}

/// The configuration listings hide what the caller may not describe: a forbid on one queue,
/// environment, scheduling policy or quota share takes it out of the caller's listings, and
/// only the caller's.
#[tokio::test]
async fn configuration_listings_show_only_what_the_caller_may_describe() {
    let h = harness();
    h.fifo_queue("gpus", "production", 10, 8).await;
    h.fair_share_queues("gpus", &[("research", 1), ("secret", 5)])
        .await;
    h.ok(
        "createserviceenvironment",
        json!({"serviceEnvironmentName": "hidden", "serviceEnvironmentType": "SAGEMAKER_TRAINING",
            "capacityLimits": [{"maxCapacity": 2, "capacityUnit": "NUM_INSTANCES"}]}),
    )
    .await;
    let policies = format!(
        "permit(principal, action in Trainyard::Action::\"Read\", resource);\n\
         permit(principal == Trainyard::Principal::\"{PLATFORM}\", action, resource);\n\
         forbid(principal, action, resource == Trainyard::Queue::\"secret\")\n\
           when {{ principal.name like \"vision-*\" }};\n\
         forbid(principal, action, resource == Trainyard::Environment::\"hidden\")\n\
           when {{ principal.name like \"vision-*\" }};\n\
         forbid(principal, action, resource == Trainyard::SchedulingPolicy::\"fair\")\n\
           when {{ principal.name like \"vision-*\" }};"
    );
    let (status, _, body) = put_as(&h, PLATFORM, json!({ "policies": policies })).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let names = |answer: &Value, key: &str, member: &str| -> Vec<String> {
        let mut names: Vec<String> = answer[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|item| item[member].as_str().unwrap().to_owned())
            .collect();
        names.sort();
        names
    };
    let h = &h;
    let queues = |caller| async move {
        names(
            &ok_as(h, caller, "describejobqueues", json!({})).await,
            "jobQueues",
            "jobQueueName",
        )
    };
    assert_eq!(queues(ALICE).await, ["production", "research"]);
    assert_eq!(queues(PLATFORM).await, ["production", "research", "secret"]);
    let environments = |caller| async move {
        names(
            &ok_as(h, caller, "describeserviceenvironments", json!({})).await,
            "serviceEnvironments",
            "serviceEnvironmentName",
        )
    };
    assert_eq!(environments(ALICE).await, ["gpus"]);
    assert_eq!(environments(PLATFORM).await, ["gpus", "hidden"]);
    for op in ["describeschedulingpolicies", "listschedulingpolicies"] {
        let body = if op == "describeschedulingpolicies" {
            json!({"arns": ["arn:aws:batch:us-east-1:000000000000:scheduling-policy/fair"]})
        } else {
            json!({})
        };
        let alices = ok_as(h, ALICE, op, body.clone()).await;
        assert_eq!(alices["schedulingPolicies"], json!([]), "{op}: {alices}");
        let platforms = ok_as(h, PLATFORM, op, body).await;
        assert_eq!(
            platforms["schedulingPolicies"].as_array().unwrap().len(),
            1,
            "{op}: {platforms}"
        );
    }
    // Naming a hidden queue outright is refused, as before.
    denied_as(
        h,
        Some(ALICE),
        "/v1/getjobqueuesnapshot",
        json!({"jobQueue": "secret"}),
    )
    .await;
}
