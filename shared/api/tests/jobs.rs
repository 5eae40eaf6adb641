//! Service-job operations through the real router, over the memory store: submit, describe,
//! accept, list with every filter and pagination, update, terminate (single and bulk), the queue
//! snapshot, and every way a request can be refused.

// The helpers below are not `#[test]` functions, so clippy's test exemption does not reach them;
// in a test, a failed unwrap is exactly the failure report we want.
#![allow(clippy::unwrap_used)]

mod support;

use std::collections::BTreeSet;
use trainyard_app::ports::{ConfigStore, JobStore};

use axum::http::StatusCode;
use serde_json::{Value, json};
use support::{Harness, T0_MS, harness, submit_body, training_payload};
use trainyard_domain::job::JobStatus;
use trainyard_domain::policy::{FairsharePolicy, QuotaSharePolicy, SchedulingPolicy};
use trainyard_domain::queue::{JobQueue, JobQueueType, ServiceEnvironmentOrder};
use trainyard_domain::quota_share::{
    QuotaShare, QuotaShareCapacityLimit, QuotaSharePreemptionConfiguration,
    ResourceSharingConfiguration, SharingStrategy,
};
use trainyard_domain::{ResourceStatus, State, Tags};

const QUEUE_ARN_PREFIX: &str = "arn:aws:batch:us-east-1:000000000000:job-queue/";
const JOB_ARN_PREFIX: &str = "arn:aws:batch:us-east-1:000000000000:service-job/";

// ---------------------------------------------------------------------------------------------
// Builders: configuration goes straight into the store, so these tests depend only on the job
// operations.

#[derive(Clone, Copy)]
enum Policy {
    Fifo,
    FairShare,
    QuotaShare,
}

async fn queue_with(h: &Harness, name: &str, policy: Policy, state: State) {
    let store = h.service.store();
    let scheduling_policy = match policy {
        Policy::Fifo => None,
        Policy::FairShare | Policy::QuotaShare => {
            let policy_name = format!("{name}-policy");
            store
                .create_resource(&SchedulingPolicy {
                    name: policy_name.clone(),
                    fairshare_policy: matches!(policy, Policy::FairShare)
                        .then(FairsharePolicy::default),
                    quota_share_policy: matches!(policy, Policy::QuotaShare)
                        .then(QuotaSharePolicy::default),
                    tags: Tags::new(),
                    created_at: T0_MS,
                })
                .await
                .unwrap();
            Some(policy_name)
        }
    };
    store
        .create_resource(&JobQueue {
            job_queue_name: name.into(),
            state,
            status: ResourceStatus::Valid,
            status_reason: None,
            priority: 1,
            scheduling_policy,
            service_environment_order: vec![ServiceEnvironmentOrder {
                order: 1,
                service_environment: "env".into(),
            }],
            job_state_time_limit_actions: Vec::new(),
            job_queue_type: JobQueueType::SagemakerTraining,
            tags: Tags::new(),
            created_at: T0_MS,
        })
        .await
        .unwrap();
}

async fn queue(h: &Harness, name: &str, policy: Policy) {
    queue_with(h, name, policy, State::Enabled).await;
}

async fn quota_share(h: &Harness, queue: &str, name: &str, state: State) {
    h.service
        .store()
        .create_resource(&QuotaShare {
            quota_share_name: name.into(),
            job_queue: queue.into(),
            capacity_limits: vec![QuotaShareCapacityLimit {
                max_capacity: 4,
                capacity_unit: "ml.g5.xlarge".into(),
            }],
            resource_sharing_configuration: ResourceSharingConfiguration {
                strategy: SharingStrategy::Reserve,
                borrow_limit: None,
            },
            preemption_configuration: QuotaSharePreemptionConfiguration::default(),
            state,
            status: ResourceStatus::Valid,
            tags: Tags::new(),
            created_at: T0_MS,
        })
        .await
        .unwrap();
}

/// Submits `body` and returns the job id.
async fn submit(h: &Harness, body: Value) -> String {
    let out = h.ok("submitservicejob", body).await;
    out["jobId"].as_str().unwrap().to_owned()
}

async fn describe(h: &Harness, job_id: &str) -> Value {
    h.ok("describeservicejob", json!({"jobId": job_id})).await
}

/// Moves a job to `status` behind the API's back, as the scheduler would.
async fn force_status(h: &Harness, job_id: &str, status: JobStatus) {
    let store = h.service.store();
    let mut stored = store.get_job(job_id).await.unwrap().unwrap();
    let now = h.service.now_ms();
    let job = &mut stored.value;
    if !job.status.can_transition_to(status) {
        // Walk the forward path up to the target, e.g. SUBMITTED → RUNNABLE → SCHEDULED → RUNNING.
        let path = [
            JobStatus::Runnable,
            JobStatus::Scheduled,
            JobStatus::Starting,
            JobStatus::Running,
        ];
        for step in path.into_iter().take_while(|s| *s != status) {
            if job.status.can_transition_to(step) {
                job.transition(step, None, now).unwrap();
            }
        }
    }
    job.transition(status, None, now).unwrap();
    store
        .update_job(&stored.value, stored.version)
        .await
        .unwrap();
}

/// Asserts that no member anywhere in `value` is `null` (Batch omits absent optionals).
fn assert_no_nulls(value: &Value, path: &str) {
    match value {
        Value::Null => panic!("{path} is null"),
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                assert_no_nulls(v, &format!("{path}[{i}]"));
            }
        }
        Value::Object(map) => {
            for (k, v) in map {
                assert_no_nulls(v, &format!("{path}.{k}"));
            }
        }
        _ => {}
    }
}

fn names(list: &Value) -> Vec<String> {
    list["jobSummaryList"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["jobName"].as_str().unwrap().to_owned())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Submit, describe, accept

#[tokio::test]
async fn a_submitted_job_is_described_by_id_and_arn_and_becomes_runnable_when_accepted() {
    let h = harness();
    queue(&h, "research", Policy::Fifo).await;
    let mut body = submit_body("resnet-50", "research");
    body["tags"] = json!({"team": "vision"});
    body["retryStrategy"] = json!({"attempts": 3, "evaluateOnExit": [{"action": "retry", "onStatusReason": "Capacity*"}]});
    body["timeoutConfig"] = json!({"attemptDurationSeconds": 3600});
    let out = h.ok("submitservicejob", body).await;
    let job_id = out["jobId"].as_str().unwrap();
    assert_eq!(out["jobName"], "resnet-50");
    assert_eq!(out["jobArn"], format!("{JOB_ARN_PREFIX}{job_id}"));

    let by_id = describe(&h, job_id).await;
    let by_arn = describe(&h, out["jobArn"].as_str().unwrap()).await;
    assert_eq!(by_id, by_arn);
    assert_no_nulls(&by_id, "describe");
    assert_eq!(
        by_id["status"], "SUBMITTED",
        "the SageMaker SDK expects SUBMITTED right after submit"
    );
    assert_eq!(by_id["jobQueue"], format!("{QUEUE_ARN_PREFIX}research"));
    assert_eq!(by_id["serviceJobType"], "SAGEMAKER_TRAINING");
    assert_eq!(by_id["createdAt"], T0_MS);
    assert_eq!(by_id["isTerminated"], false);
    assert_eq!(by_id["tags"], json!({"team": "vision"}));
    assert_eq!(
        by_id["retryStrategy"]["evaluateOnExit"][0]["action"],
        "RETRY"
    );
    assert_eq!(by_id["timeoutConfig"]["attemptDurationSeconds"], 3600);
    assert_eq!(
        by_id["capacityUsage"],
        json!([{"capacityUnit": "ml.g5.xlarge", "quantity": 1.0}])
    );
    assert_eq!(
        by_id["serviceRequestPayload"],
        training_payload("resnet-50", "ml.g5.xlarge", 1)
    );
    for absent in [
        "startedAt",
        "stoppedAt",
        "scheduledAt",
        "latestAttempt",
        "attempts",
        "statusReason",
    ] {
        assert!(
            by_id.get(absent).is_none(),
            "{absent} must be omitted: {by_id}"
        );
    }

    h.clock.advance(1_000);
    assert_eq!(h.service.accept_submitted(10, 0).await.unwrap(), 1);
    assert_eq!(describe(&h, job_id).await["status"], "RUNNABLE");
    assert_eq!(
        h.service.accept_submitted(10, 0).await.unwrap(),
        0,
        "nothing left to accept"
    );
}

#[tokio::test]
async fn a_job_submitted_without_tags_describes_empty_tags() {
    let h = harness();
    queue(&h, "q", Policy::Fifo).await;
    let id = submit(&h, submit_body("plain", "q")).await;
    assert_eq!(describe(&h, &id).await["tags"], json!({}));
}

#[tokio::test]
async fn accepting_moves_the_oldest_first_and_fails_jobs_whose_queue_is_gone() {
    let h = harness();
    queue(&h, "keep", Policy::Fifo).await;
    queue(&h, "doomed", Policy::Fifo).await;
    let first = submit(&h, submit_body("first", "keep")).await;
    h.clock.advance(10);
    let second = submit(&h, submit_body("second", "keep")).await;
    h.clock.advance(10);
    let orphan = submit(&h, submit_body("orphan", "doomed")).await;
    let store = h.service.store();
    let doomed = store
        .get_resource::<JobQueue>("doomed")
        .await
        .unwrap()
        .unwrap();
    store
        .delete_resource::<JobQueue>("doomed", doomed.version)
        .await
        .unwrap();

    assert_eq!(h.service.accept_submitted(1, 0).await.unwrap(), 1);
    assert_eq!(
        describe(&h, &first).await["status"],
        "RUNNABLE",
        "oldest first"
    );
    assert_eq!(describe(&h, &second).await["status"], "SUBMITTED");
    assert_eq!(h.service.accept_submitted(10, 0).await.unwrap(), 2);
    assert_eq!(describe(&h, &second).await["status"], "RUNNABLE");
    let failed = describe(&h, &orphan).await;
    assert_eq!(failed["status"], "FAILED");
    assert!(
        failed["statusReason"].as_str().unwrap().contains("doomed"),
        "{failed}"
    );
}

#[tokio::test]
async fn client_tokens_make_a_retried_submission_return_the_same_job() {
    let h = harness();
    queue(&h, "q", Policy::Fifo).await;
    let with_token = |name: &str, token: Option<&str>| {
        let mut body = submit_body(name, "q");
        if let Some(token) = token {
            body["clientToken"] = json!(token);
        }
        body
    };
    let first = h
        .ok("submitservicejob", with_token("job", Some("tok-1")))
        .await;

    // (case, body, expected: Ok(same job as first?) or Err(message fragment))
    let mut by_arn = with_token("job", Some("tok-1"));
    by_arn["jobQueue"] = json!(format!("{QUEUE_ARN_PREFIX}q"));
    let cases: Vec<(&str, Value, Result<bool, &str>)> = vec![
        (
            "the same request and token",
            with_token("job", Some("tok-1")),
            Ok(true),
        ),
        ("the queue by ARN instead of name", by_arn, Ok(true)),
        ("a new token", with_token("job", Some("tok-2")), Ok(false)),
        ("no token at all", with_token("job", None), Ok(false)),
        ("no token again", with_token("job", None), Ok(false)),
        (
            "a different request reusing the token",
            with_token("other-job", Some("tok-1")),
            Err("already used for a different request"),
        ),
    ];
    for (case, body, expected) in cases {
        match expected {
            Ok(same) => {
                let out = h.ok("submitservicejob", body).await;
                assert_eq!(out == first, same, "{case}: {out} vs {first}");
                assert_eq!(out["jobName"], "job", "{case}");
            }
            Err(needle) => {
                let msg = h.client_error("submitservicejob", body).await;
                assert!(msg.contains(needle), "{case}: {msg}");
            }
        }
    }
    let all = h
        .ok(
            "listservicejobs",
            json!({"jobQueue": "q", "filters": [{"name": "JOB_NAME", "values": ["*"]}]}),
        )
        .await;
    assert_eq!(
        names(&all).len(),
        4,
        "one job per distinct submission: {all}"
    );
}

// ---------------------------------------------------------------------------------------------
// Share rules

#[tokio::test]
async fn share_identifiers_and_quota_shares_follow_the_queue_policy() {
    let h = harness();
    queue(&h, "fifo", Policy::Fifo).await;
    queue(&h, "fair", Policy::FairShare).await;
    queue(&h, "quota", Policy::QuotaShare).await;
    queue_with(&h, "off", Policy::Fifo, State::Disabled).await;
    quota_share(&h, "quota", "team-a", State::Enabled).await;
    quota_share(&h, "quota", "team-paused", State::Disabled).await;

    let body = |queue: &str, extra: Value| {
        let mut b = submit_body("job", queue);
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    // (case, body, Ok or the message fragment of the refusal)
    let cases: Vec<(&str, Value, Result<(), &str>)> = vec![
        ("FIFO without shares", body("fifo", json!({})), Ok(())),
        (
            "FIFO refuses a share identifier",
            body("fifo", json!({"shareIdentifier": "a"})),
            Err("shareIdentifier is not allowed"),
        ),
        (
            "FIFO refuses a quota share",
            body("fifo", json!({"quotaShareName": "a"})),
            Err("quotaShareName is not allowed"),
        ),
        (
            "fair share with a share",
            body("fair", json!({"shareIdentifier": "teama"})),
            Ok(()),
        ),
        (
            "fair share requires a share",
            body("fair", json!({})),
            Err("shareIdentifier is required"),
        ),
        (
            "fair share refuses a quota share",
            body("fair", json!({"quotaShareName": "team-a"})),
            Err("quotaShareName is not allowed"),
        ),
        (
            "quota share with an enabled share",
            body("quota", json!({"quotaShareName": "team-a"})),
            Ok(()),
        ),
        (
            "quota share requires a share",
            body("quota", json!({})),
            Err("quotaShareName is required"),
        ),
        (
            "quota share must exist",
            body("quota", json!({"quotaShareName": "ghost"})),
            Err("ghost"),
        ),
        (
            "quota share must be enabled",
            body("quota", json!({"quotaShareName": "team-paused"})),
            Err("DISABLED"),
        ),
        (
            "both at once",
            body(
                "quota",
                json!({"quotaShareName": "team-a", "shareIdentifier": "x"}),
            ),
            Err("not both"),
        ),
        ("a disabled queue", body("off", json!({})), Err("DISABLED")),
    ];
    for (case, body, expected) in cases {
        match expected {
            Ok(()) => {
                let (status, out) = h.call("submitservicejob", body).await;
                assert_eq!(status, StatusCode::OK, "{case}: {out}");
            }
            Err(needle) => {
                let msg = h.client_error("submitservicejob", body).await;
                assert!(msg.contains(needle), "{case}: {msg}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Validation

#[tokio::test]
async fn every_out_of_range_member_is_a_client_exception_naming_it() {
    let h = harness();
    queue(&h, "q", Policy::Fifo).await;
    let set = |path: &[&str], value: Value| {
        let mut b = submit_body("job", "q");
        let (last, parents) = path.split_last().unwrap();
        let mut cur = &mut b;
        for p in parents {
            if cur.get(*p).is_none() {
                cur[*p] = json!({});
            }
            cur = cur.get_mut(*p).unwrap();
        }
        cur[*last] = value;
        b
    };
    let too_many_rules: Vec<Value> = (0..6).map(|_| json!({"action": "EXIT"})).collect();
    let too_many_tags: serde_json::Map<String, Value> =
        (0..51).map(|i| (format!("k{i}"), json!("v"))).collect();
    // (case, body, fragment the message must contain)
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "priority above 9999",
            set(&["schedulingPriority"], json!(10_000)),
            "schedulingPriority must be between 0 and 9999",
        ),
        (
            "negative priority",
            set(&["schedulingPriority"], json!(-1)),
            "schedulingPriority",
        ),
        (
            "priority beyond i64",
            set(&["schedulingPriority"], json!(1e30)),
            "schedulingPriority",
        ),
        (
            "priority of the wrong type",
            set(&["schedulingPriority"], json!("high")),
            "schedulingPriority",
        ),
        (
            "zero attempts",
            set(&["retryStrategy", "attempts"], json!(0)),
            "retryStrategy.attempts must be between 1 and 10",
        ),
        (
            "eleven attempts",
            set(&["retryStrategy", "attempts"], json!(11)),
            "retryStrategy.attempts",
        ),
        (
            "retry strategy without attempts",
            set(&["retryStrategy", "evaluateOnExit"], json!([])),
            "retryStrategy.attempts is required",
        ),
        (
            "six evaluateOnExit rules",
            set(
                &["retryStrategy"],
                json!({"attempts": 2, "evaluateOnExit": too_many_rules}),
            ),
            "at most 5",
        ),
        (
            "a rule without action",
            set(
                &["retryStrategy"],
                json!({"attempts": 2, "evaluateOnExit": [{"onStatusReason": "x"}]}),
            ),
            "evaluateOnExit[0].action is required",
        ),
        (
            "an unknown action",
            set(
                &["retryStrategy"],
                json!({"attempts": 2, "evaluateOnExit": [{"action": "MAYBE"}]}),
            ),
            "RETRY or EXIT",
        ),
        (
            "a 513-character pattern",
            set(
                &["retryStrategy"],
                json!({"attempts": 2, "evaluateOnExit": [{"action": "EXIT", "onStatusReason": "x".repeat(513)}]}),
            ),
            "onStatusReason must be at most 512",
        ),
        (
            "a pattern with a control character",
            set(
                &["retryStrategy"],
                json!({"attempts": 2, "evaluateOnExit": [{"action": "EXIT", "onStatusReason": "a\u{7}b"}]}),
            ),
            "printable",
        ),
        (
            "zero-second timeout",
            set(&["timeoutConfig", "attemptDurationSeconds"], json!(0)),
            "timeoutConfig.attemptDurationSeconds",
        ),
        (
            "negative preemption retries",
            set(
                &[
                    "preemptionConfiguration",
                    "preemptionRetriesBeforeTermination",
                ],
                json!(-1),
            ),
            "preemptionRetriesBeforeTermination",
        ),
        (
            "an empty client token",
            set(&["clientToken"], json!("")),
            "clientToken must be 1–64",
        ),
        (
            "a 65-character client token",
            set(&["clientToken"], json!("t".repeat(65))),
            "clientToken",
        ),
        (
            "a 256-character share identifier",
            set(&["shareIdentifier"], json!("s".repeat(256))),
            "shareIdentifier",
        ),
        (
            "fifty-one tags",
            set(&["tags"], Value::Object(too_many_tags)),
            "at most 50",
        ),
        (
            "a reserved tag key",
            set(&["tags"], json!({"aws:owner": "x"})),
            "reserved",
        ),
        (
            "a job name with a space",
            set(&["jobName"], json!("my job")),
            "jobName",
        ),
        (
            "a 129-character job name",
            set(&["jobName"], json!("j".repeat(129))),
            "jobName",
        ),
        (
            "a container job type",
            set(&["serviceJobType"], json!("EKS")),
            "serviceJobType must be SAGEMAKER_TRAINING",
        ),
        (
            "no job name",
            json!({"jobQueue": "q", "serviceJobType": "SAGEMAKER_TRAINING", "serviceRequestPayload": "{}"}),
            "jobName is required",
        ),
        (
            "no payload",
            json!({"jobName": "j", "jobQueue": "q", "serviceJobType": "SAGEMAKER_TRAINING"}),
            "serviceRequestPayload is required",
        ),
        (
            "no queue",
            json!({"jobName": "j", "serviceJobType": "SAGEMAKER_TRAINING", "serviceRequestPayload": "{}"}),
            "jobQueue is required",
        ),
        (
            "a payload that is not JSON",
            set(&["serviceRequestPayload"], json!("not json")),
            "serviceRequestPayload is not valid JSON",
        ),
        (
            "a payload without instances",
            set(
                &["serviceRequestPayload"],
                json!(
                    r#"{"TrainingJobName":"a","RoleArn":"r","OutputDataConfig":{"S3OutputPath":"s3://b"}}"#
                ),
            ),
            "ResourceConfig",
        ),
    ];
    for (case, body, needle) in cases {
        let msg = h.client_error("submitservicejob", body).await;
        assert!(msg.contains(needle), "{case}: {msg}");
    }

    // Update uses the same range.
    let id = submit(&h, submit_body("ok", "q")).await;
    for (case, priority) in [("too high", json!(10_000)), ("negative", json!(-5))] {
        let msg = h
            .client_error(
                "updateservicejob",
                json!({"jobId": id, "schedulingPriority": priority}),
            )
            .await;
        assert!(
            msg.contains("schedulingPriority must be between 0 and 9999"),
            "{case}: {msg}"
        );
    }
}

#[tokio::test]
async fn an_oversize_payload_states_its_size_and_the_limit() {
    let h = harness();
    queue(&h, "q", Policy::Fifo).await;
    let mut body = submit_body("big", "q");
    let payload = format!("{{\"pad\": \"{}\"}}", "x".repeat(11 * 1024));
    let size = payload.len();
    body["serviceRequestPayload"] = json!(payload);
    let msg = h.client_error("submitservicejob", body).await;
    assert!(
        msg.contains(&size.to_string()) && msg.contains("10240"),
        "{msg}"
    );
}

#[tokio::test]
async fn malformed_json_and_wrong_shapes_are_client_exceptions_not_server_errors() {
    let h = harness();
    queue(&h, "q", Policy::Fifo).await;
    let ops = [
        "submitservicejob",
        "describeservicejob",
        "listservicejobs",
        "terminateservicejob",
        "terminateservicejobs",
        "updateservicejob",
        "getjobqueuesnapshot",
    ];
    let bodies: [&[u8]; 4] = [
        b"{\"jobName\": ",
        b"[1, 2]",
        b"{\"jobId\": 5, \"jobs\": 3, \"jobQueue\": 7, \"filters\": 1}",
        b"\xff\xfe",
    ];
    for op in ops {
        for body in bodies {
            let (status, value) = h.raw("POST", &format!("/v1/{op}"), body.to_vec()).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{op} {body:?}: {value}");
            assert_eq!(value["__type"], "ClientException");
        }
    }
    let msg = h
        .client_error("submitservicejob", json!({"jobName": "a", "ignored": 1}))
        .await;
    assert!(
        msg.contains("jobQueue is required"),
        "unknown members are ignored: {msg}"
    );
}

#[tokio::test]
async fn unknown_queues_and_jobs_are_client_exceptions_naming_them() {
    let h = harness();
    queue(&h, "q", Policy::Fifo).await;
    let ghost = "00000000-0000-4000-8000-0000000000ff";
    // (case, op, body, fragment)
    let cases = [
        (
            "submit to an unknown queue",
            "submitservicejob",
            submit_body("j", "nowhere"),
            "nowhere",
        ),
        (
            "submit to a foreign queue ARN",
            "submitservicejob",
            submit_body("j", "arn:aws:batch:eu-west-1:123456789012:job-queue/q"),
            "eu-west-1",
        ),
        (
            "describe an unknown job",
            "describeservicejob",
            json!({"jobId": ghost}),
            ghost,
        ),
        (
            "describe by a queue ARN",
            "describeservicejob",
            json!({"jobId": format!("{QUEUE_ARN_PREFIX}q")}),
            "service-job",
        ),
        (
            "describe without jobId",
            "describeservicejob",
            json!({}),
            "jobId is required",
        ),
        (
            "update an unknown job",
            "updateservicejob",
            json!({"jobId": ghost, "schedulingPriority": 1}),
            ghost,
        ),
        (
            "terminate an unknown job",
            "terminateservicejob",
            json!({"jobId": ghost, "reason": "r"}),
            ghost,
        ),
        (
            "terminate without reason",
            "terminateservicejob",
            json!({"jobId": ghost}),
            "reason is required",
        ),
        (
            "list an unknown queue",
            "listservicejobs",
            json!({"jobQueue": "nowhere"}),
            "nowhere",
        ),
        (
            "snapshot an unknown queue",
            "getjobqueuesnapshot",
            json!({"jobQueue": "nowhere"}),
            "nowhere",
        ),
        (
            "snapshot without a queue",
            "getjobqueuesnapshot",
            json!({}),
            "jobQueue is required",
        ),
    ];
    for (case, op, body, needle) in cases {
        let msg = h.client_error(op, body).await;
        assert!(msg.contains(needle), "{case}: {msg}");
    }
}

// ---------------------------------------------------------------------------------------------
// ListServiceJobs

#[tokio::test]
async fn listing_defaults_to_running_and_honours_each_filter() {
    let h = harness();
    queue(&h, "fair", Policy::FairShare).await;
    queue(&h, "quota", Policy::QuotaShare).await;
    quota_share(&h, "quota", "team-q", State::Enabled).await;
    // Submitted one second apart: Train-A at T0, train-b at T0+1s, …
    let mut ids = Vec::new();
    for (name, queue, share) in [
        ("Train-A", "fair", json!({"shareIdentifier": "vision"})),
        ("train-b", "fair", json!({"shareIdentifier": "nlp"})),
        ("train-c", "fair", json!({"shareIdentifier": "vision"})),
        ("eval-1", "quota", json!({"quotaShareName": "team-q"})),
    ] {
        let mut body = submit_body(name, queue);
        for (k, v) in share.as_object().unwrap() {
            body[k] = v.clone();
        }
        ids.push(submit(&h, body).await);
        h.clock.advance(1_000);
    }
    h.service.accept_submitted(100, 0).await.unwrap();
    force_status(&h, &ids[2], JobStatus::Running).await;
    force_status(&h, &ids[1], JobStatus::Scheduled).await;

    let filter = |name: &str, value: &str| json!([{"name": name, "values": [value]}]);
    // (case, request, expected names, newest first)
    let cases: Vec<(&str, Value, Vec<&str>)> = vec![
        (
            "no status means RUNNING",
            json!({"jobQueue": "fair"}),
            vec!["train-c"],
        ),
        (
            "RUNNABLE in one queue",
            json!({"jobQueue": "fair", "jobStatus": "RUNNABLE"}),
            vec!["Train-A"],
        ),
        (
            "RUNNABLE across queues",
            json!({"jobStatus": "RUNNABLE"}),
            vec!["eval-1", "Train-A"],
        ),
        (
            "the queue by ARN",
            json!({"jobQueue": format!("{QUEUE_ARN_PREFIX}fair"), "jobStatus": "SCHEDULED"}),
            vec!["train-b"],
        ),
        (
            "nothing SUCCEEDED",
            json!({"jobStatus": "SUCCEEDED"}),
            vec![],
        ),
        (
            "JOB_NAME is case-insensitive",
            json!({"jobQueue": "fair", "filters": filter("JOB_NAME", "TRAIN-B")}),
            vec!["train-b"],
        ),
        (
            "JOB_NAME ignores jobStatus",
            json!({"jobQueue": "fair", "jobStatus": "SUCCEEDED", "filters": filter("JOB_NAME", "train-a")}),
            vec!["Train-A"],
        ),
        (
            "JOB_NAME with * is a prefix",
            json!({"filters": filter("JOB_NAME", "TRAIN*")}),
            vec!["train-c", "train-b", "Train-A"],
        ),
        (
            "JOB_NAME without * is exact",
            json!({"filters": filter("JOB_NAME", "train")}),
            vec![],
        ),
        (
            "BEFORE_CREATED_AT is strict",
            json!({"filters": filter("BEFORE_CREATED_AT", &(T0_MS + 1_000).to_string())}),
            vec!["Train-A"],
        ),
        (
            "AFTER_CREATED_AT is strict",
            json!({"filters": filter("AFTER_CREATED_AT", &(T0_MS + 1_000).to_string())}),
            vec!["eval-1", "train-c"],
        ),
        (
            "SHARE_IDENTIFIER alone matches any status",
            json!({"filters": filter("SHARE_IDENTIFIER", "vision")}),
            vec!["train-c", "Train-A"],
        ),
        (
            "SHARE_IDENTIFIER with jobStatus",
            json!({"jobStatus": "RUNNABLE", "filters": filter("SHARE_IDENTIFIER", "vision")}),
            vec!["Train-A"],
        ),
        (
            "QUOTA_SHARE_NAME with jobStatus",
            json!({"jobQueue": "quota", "jobStatus": "RUNNABLE", "filters": filter("QUOTA_SHARE_NAME", "team-q")}),
            vec!["eval-1"],
        ),
        (
            "QUOTA_SHARE_NAME with another status",
            json!({"jobStatus": "RUNNING", "filters": filter("QUOTA_SHARE_NAME", "team-q")}),
            vec![],
        ),
        (
            "legacy JOB_STATUS",
            json!({"filters": filter("JOB_STATUS", "SCHEDULED")}),
            vec!["train-b"],
        ),
    ];
    for (case, body, expected) in cases {
        let out = h.ok("listservicejobs", body).await;
        assert_eq!(names(&out), expected, "{case}: {out}");
        assert!(
            out.get("nextToken").is_none(),
            "{case}: single page has no nextToken"
        );
        assert_no_nulls(&out, case);
    }

    let out = h.ok("listservicejobs", json!({"jobQueue": "fair"})).await;
    let summary = &out["jobSummaryList"][0];
    assert_eq!(summary["jobArn"], format!("{JOB_ARN_PREFIX}{}", ids[2]));
    assert_eq!(summary["shareIdentifier"], "vision");
    assert_eq!(summary["status"], "RUNNING");
    assert_eq!(summary["createdAt"], T0_MS + 2_000);
    assert!(
        summary["startedAt"].is_i64() && summary["scheduledAt"].is_i64(),
        "{summary}"
    );
    assert_eq!(summary["capacityUsage"][0]["capacityUnit"], "ml.g5.xlarge");

    for (case, body, needle) in [
        (
            "two filters",
            json!({"filters": [{"name": "JOB_NAME", "values": ["a"]}, {"name": "JOB_NAME", "values": ["b"]}]}),
            "only one filter",
        ),
        (
            "an unknown filter",
            json!({"filters": filter("COLOUR", "red")}),
            "SHARE_IDENTIFIER",
        ),
        (
            "a non-numeric time",
            json!({"filters": filter("AFTER_CREATED_AT", "yesterday")}),
            "AFTER_CREATED_AT",
        ),
        (
            "an unknown status",
            json!({"jobStatus": "DONE"}),
            "jobStatus",
        ),
        (
            "maxResults 0",
            json!({"maxResults": 0}),
            "maxResults must be between 1 and 100",
        ),
        ("maxResults 101", json!({"maxResults": 101}), "maxResults"),
        (
            "a forged nextToken",
            json!({"nextToken": "abc"}),
            "nextToken",
        ),
    ] {
        let msg = h.client_error("listservicejobs", body).await;
        assert!(msg.contains(needle), "{case}: {msg}");
    }
}

#[tokio::test]
async fn pagination_returns_every_job_once_newest_first_and_ends_without_a_token() {
    let h = harness();
    queue(&h, "q", Policy::Fifo).await;
    let total = 233;
    let mut submitted = Vec::new();
    for i in 0..total {
        submitted.push(submit(&h, submit_body(&format!("job-{i:03}"), "q")).await);
        // Pairs of jobs share a createdAt so that the id tie-breaker is exercised.
        if i % 2 == 1 {
            h.clock.advance(1);
        }
    }
    h.service.accept_submitted(1_000, 0).await.unwrap();

    // (case, maxResults, expected page sizes)
    let cases: Vec<(&str, Option<i64>, Vec<usize>)> = vec![
        ("default page size of 100", None, vec![100, 100, 33]),
        ("pages of 7", Some(7), {
            let mut v = vec![7; 33];
            v.push(2);
            v
        }),
        ("one page of 100 … exactly", Some(100), vec![100, 100, 33]),
    ];
    for (case, max_results, expected_pages) in cases {
        let mut seen = Vec::new();
        let mut pages = Vec::new();
        let mut token: Option<String> = None;
        for _ in 0..100 {
            let mut body = json!({"jobQueue": "q", "jobStatus": "RUNNABLE"});
            if let Some(n) = max_results {
                body["maxResults"] = json!(n);
            }
            if let Some(t) = &token {
                body["nextToken"] = json!(t);
            }
            let out = h.ok("listservicejobs", body).await;
            let page: Vec<(i64, String)> = out["jobSummaryList"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| {
                    (
                        s["createdAt"].as_i64().unwrap(),
                        s["jobId"].as_str().unwrap().to_owned(),
                    )
                })
                .collect();
            pages.push(page.len());
            seen.extend(page);
            match out.get("nextToken") {
                Some(t) => token = Some(t.as_str().unwrap().to_owned()),
                None => break,
            }
        }
        assert_eq!(pages, expected_pages, "{case}");
        let unique: BTreeSet<&String> = seen.iter().map(|(_, id)| id).collect();
        assert_eq!(unique.len(), total, "{case}: no duplicates, no gaps");
        let mut sorted = seen.clone();
        sorted.sort_by(|a, b| b.cmp(a));
        assert_eq!(seen, sorted, "{case}: newest first, ties by id");
        assert_eq!(seen.last().map(|(_, id)| id), submitted.first(), "{case}");
    }
}

// ---------------------------------------------------------------------------------------------
// Update and terminate

#[tokio::test]
async fn updating_priority_shows_in_describe_and_is_refused_once_the_job_has_finished() {
    let h = harness();
    queue(&h, "q", Policy::FairShare).await;
    let mut body = submit_body("job", "q");
    body["shareIdentifier"] = json!("a");
    let id = submit(&h, body).await;
    let out = h
        .ok(
            "updateservicejob",
            json!({"jobId": format!("{JOB_ARN_PREFIX}{id}"), "schedulingPriority": 42}),
        )
        .await;
    assert_eq!(
        out,
        json!({"jobArn": format!("{JOB_ARN_PREFIX}{id}"), "jobName": "job", "jobId": id})
    );
    assert_eq!(describe(&h, &id).await["schedulingPriority"], 42);
    let out = h
        .ok(
            "updateservicejob",
            json!({"jobId": id, "schedulingPriority": 0}),
        )
        .await;
    assert_eq!(out["jobId"], id.as_str());
    assert_eq!(describe(&h, &id).await["schedulingPriority"], 0);

    h.ok(
        "terminateservicejob",
        json!({"jobId": id, "reason": "done"}),
    )
    .await;
    let msg = h
        .client_error(
            "updateservicejob",
            json!({"jobId": id, "schedulingPriority": 5}),
        )
        .await;
    assert!(msg.contains("FAILED"), "{msg}");
    let msg = h
        .client_error("updateservicejob", json!({"jobId": id}))
        .await;
    assert!(msg.contains("schedulingPriority is required"), "{msg}");
}

#[tokio::test]
async fn terminating_fails_the_job_with_the_reason_and_terminating_again_is_harmless() {
    let h = harness();
    queue(&h, "q", Policy::Fifo).await;
    // (case, status to put the job in first, whether terminate changes it)
    let cases = [
        ("a SUBMITTED job", JobStatus::Submitted, true),
        ("a RUNNABLE job", JobStatus::Runnable, true),
        ("a RUNNING job", JobStatus::Running, true),
        (
            "a SUCCEEDED job stays SUCCEEDED",
            JobStatus::Succeeded,
            false,
        ),
    ];
    for (case, status, changes) in cases {
        let id = submit(&h, submit_body("job", "q")).await;
        if status != JobStatus::Submitted {
            force_status(&h, &id, status).await;
        }
        h.clock.advance(500);
        let out = h
            .ok(
                "terminateservicejob",
                json!({"jobId": format!("{JOB_ARN_PREFIX}{id}"), "reason": "no longer needed"}),
            )
            .await;
        assert_eq!(out, json!({}), "{case}");
        let job = describe(&h, &id).await;
        if changes {
            assert_eq!(job["status"], "FAILED", "{case}");
            assert_eq!(job["isTerminated"], true, "{case}");
            assert_eq!(job["statusReason"], "no longer needed", "{case}");
            assert_eq!(job["stoppedAt"], h.service.now_ms(), "{case}");
        } else {
            assert_eq!(job["status"], status.as_str(), "{case}");
            assert_eq!(job["isTerminated"], false, "{case}");
        }
        // A second terminate is fine and does not overwrite the first reason.
        h.ok(
            "terminateservicejob",
            json!({"jobId": id, "reason": "again"}),
        )
        .await;
        assert_eq!(
            describe(&h, &id).await,
            job,
            "{case}: second terminate changes nothing"
        );
    }
}

#[tokio::test]
async fn bulk_terminate_reports_each_job_and_treats_unknown_jobs_as_done() {
    let h = harness();
    queue(&h, "q", Policy::Fifo).await;
    let a = submit(&h, submit_body("a", "q")).await;
    let b = submit(&h, submit_body("b", "q")).await;
    let ghost = "00000000-0000-4000-8000-0000000000ff".to_owned();
    let bad = format!("{QUEUE_ARN_PREFIX}q");
    let b_arn = format!("{JOB_ARN_PREFIX}{b}");
    let out = h
        .ok(
            "terminateservicejobs",
            json!({"jobs": [a, b_arn, ghost, bad], "reason": "cleanup"}),
        )
        .await;
    assert_eq!(out["successful"], json!([a, b_arn, ghost]));
    let errors = out["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{out}");
    assert_eq!(errors[0]["job"], bad);
    assert_eq!(errors[0]["code"], "ClientException");
    assert!(
        errors[0]["message"]
            .as_str()
            .unwrap()
            .contains("service-job"),
        "{out}"
    );
    for id in [&a, &b] {
        let job = describe(&h, id).await;
        assert_eq!(
            (job["status"].as_str(), job["statusReason"].as_str()),
            (Some("FAILED"), Some("cleanup"))
        );
    }

    let fifty_one: Vec<String> = (0..51).map(|i| format!("id-{i}")).collect();
    for (case, body, needle) in [
        (
            "more than 50 ids",
            json!({"jobs": fifty_one, "reason": "r"}),
            "between 1 and 50",
        ),
        (
            "no ids",
            json!({"jobs": [], "reason": "r"}),
            "between 1 and 50",
        ),
        ("no jobs member", json!({"reason": "r"}), "jobs is required"),
    ] {
        let msg = h.client_error("terminateservicejobs", body).await;
        assert!(msg.contains(needle), "{case}: {msg}");
    }
}

// ---------------------------------------------------------------------------------------------
// GetJobQueueSnapshot

fn front(snapshot: &Value) -> Vec<String> {
    snapshot["frontOfQueue"]["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            j["jobArn"]
                .as_str()
                .unwrap()
                .trim_start_matches(JOB_ARN_PREFIX)
                .to_owned()
        })
        .collect()
}

#[tokio::test]
async fn a_fifo_snapshot_lists_runnable_jobs_in_submission_order_and_sums_dispatched_capacity() {
    let h = harness();
    queue(&h, "q", Policy::Fifo).await;
    let mut ids = Vec::new();
    for (i, (instance_type, count)) in [
        ("ml.g5.xlarge", 1),
        ("ml.p4d.24xlarge", 2),
        ("ml.g5.xlarge", 3),
        ("ml.g5.xlarge", 1),
    ]
    .into_iter()
    .enumerate()
    {
        let mut body = submit_body(&format!("job-{i}"), "q");
        body["serviceRequestPayload"] =
            json!(training_payload(&format!("job-{i}"), instance_type, count));
        // Rising priorities: a FIFO queue must ignore them.
        body["schedulingPriority"] = json!(1_000 + i as i64 * 1_000);
        ids.push(submit(&h, body).await);
        h.clock.advance(100);
    }
    // Still SUBMITTED: not at the front of anything yet.
    let snap = h.ok("getjobqueuesnapshot", json!({"jobQueue": "q"})).await;
    assert!(front(&snap).is_empty(), "{snap}");

    h.service.accept_submitted(100, 0).await.unwrap();
    force_status(&h, &ids[1], JobStatus::Running).await;
    force_status(&h, &ids[2], JobStatus::Scheduled).await;
    h.clock.advance(5);
    let snap = h
        .ok(
            "getjobqueuesnapshot",
            json!({"jobQueue": format!("{QUEUE_ARN_PREFIX}q")}),
        )
        .await;
    assert_no_nulls(&snap, "snapshot");
    assert_eq!(
        front(&snap),
        [ids[0].clone(), ids[3].clone()],
        "FIFO ignores priority"
    );
    // A job's place in line dates from its submission, not from the batch that accepted it.
    for (position, submitted_at) in [(0, T0_MS), (1, T0_MS + 300)] {
        assert_eq!(
            snap["frontOfQueue"]["jobs"][position]["earliestTimeAtPosition"],
            submitted_at
        );
    }
    assert_eq!(snap["frontOfQueue"]["lastUpdatedAt"], h.service.now_ms());
    assert_eq!(
        snap["queueUtilization"]["totalCapacityUsage"],
        json!([{"capacityUnit": "ml.g5.xlarge", "quantity": 3.0}, {"capacityUnit": "ml.p4d.24xlarge", "quantity": 2.0}])
    );
    assert!(snap.get("frontOfQuotaShares").is_none());
    assert!(
        snap["queueUtilization"]
            .get("fairshareUtilization")
            .is_none()
    );

    // A dispatched job that returns to RUNNABLE (a retry) queues behind the jobs already waiting.
    h.clock.advance(1_000);
    force_status(&h, &ids[2], JobStatus::Runnable).await;
    let snap = h.ok("getjobqueuesnapshot", json!({"jobQueue": "q"})).await;
    assert_eq!(
        front(&snap),
        [ids[0].clone(), ids[3].clone(), ids[2].clone()]
    );
    assert_eq!(
        snap["frontOfQueue"]["jobs"][2]["earliestTimeAtPosition"],
        h.service.now_ms()
    );
}

#[tokio::test]
async fn a_fair_share_snapshot_orders_by_priority_then_age_and_reports_share_usage() {
    let h = harness();
    queue(&h, "fair", Policy::FairShare).await;
    // (name, share, priority)
    let jobs = [
        ("low", "a", 1),
        ("high-1", "b", 50),
        ("high-2", "a", 50),
        ("none", "b", 0),
        ("runner", "c", 7),
    ];
    let mut ids = std::collections::BTreeMap::new();
    for (name, share, priority) in jobs {
        let mut body = submit_body(name, "fair");
        body["shareIdentifier"] = json!(share);
        body["schedulingPriority"] = json!(priority);
        ids.insert(name, submit(&h, body).await);
        h.clock.advance(10);
        // Accept one at a time so that each job has its own runnable_at.
        h.service.accept_submitted(1, 0).await.unwrap();
    }
    force_status(&h, &ids["runner"], JobStatus::Running).await;
    let snap = h
        .ok("getjobqueuesnapshot", json!({"jobQueue": "fair"}))
        .await;
    let expected: Vec<String> = ["high-1", "high-2", "low", "none"]
        .iter()
        .map(|n| ids[n].clone())
        .collect();
    assert_eq!(front(&snap), expected);
    let fair = &snap["queueUtilization"]["fairshareUtilization"];
    assert_eq!(fair["activeShareCount"], 1);
    assert_eq!(fair["topCapacityUtilization"][0]["shareIdentifier"], "c");

    // Raising a job's priority moves it to the front.
    h.ok(
        "updateservicejob",
        json!({"jobId": ids["none"], "schedulingPriority": 9999}),
    )
    .await;
    let snap = h
        .ok("getjobqueuesnapshot", json!({"jobQueue": "fair"}))
        .await;
    assert_eq!(front(&snap)[0], ids["none"]);
}

#[tokio::test]
async fn a_quota_share_snapshot_lists_the_front_of_each_quota_share() {
    let h = harness();
    queue(&h, "quota", Policy::QuotaShare).await;
    quota_share(&h, "quota", "team-a", State::Enabled).await;
    quota_share(&h, "quota", "team-b", State::Enabled).await;
    let mut ids = Vec::new();
    for (name, share, priority) in [
        ("a1", "team-a", 1),
        ("b1", "team-b", 1),
        ("a2", "team-a", 5),
        ("b-run", "team-b", 1),
    ] {
        let mut body = submit_body(name, "quota");
        body["quotaShareName"] = json!(share);
        body["schedulingPriority"] = json!(priority);
        ids.push(submit(&h, body).await);
        h.clock.advance(10);
    }
    h.service.accept_submitted(100, 0).await.unwrap();
    force_status(&h, &ids[3], JobStatus::Starting).await;
    let snap = h
        .ok("getjobqueuesnapshot", json!({"jobQueue": "quota"}))
        .await;
    assert_eq!(
        front(&snap),
        [ids[2].clone(), ids[0].clone(), ids[1].clone()]
    );
    let shares = &snap["frontOfQuotaShares"]["quotaShares"];
    assert_eq!(
        shares["team-a"][0]["jobArn"],
        format!("{JOB_ARN_PREFIX}{}", ids[2])
    );
    assert_eq!(
        shares["team-b"][0]["jobArn"],
        format!("{JOB_ARN_PREFIX}{}", ids[1])
    );
    assert_eq!(shares["team-a"].as_array().unwrap().len(), 1);
    let usage = &snap["queueUtilization"]["quotaShareUtilization"]["topCapacityUtilization"];
    assert_eq!(
        usage,
        &json!([{"quotaShareName": "team-b", "capacityUsage": [{"capacityUnit": "ml.g5.xlarge", "quantity": 1.0}]}])
    );
}

// ---------------------------------------------------------------------------------------------
// With configuration created through the API (the path real clients take)

#[tokio::test]
async fn jobs_flow_through_queues_and_policies_created_by_the_api() {
    let h = harness();
    h.fifo_queue("env", "prod", 10, 8).await;
    let id = submit(&h, submit_body("first", "prod")).await;
    h.service.accept_submitted(10, 0).await.unwrap();
    let runnable = h
        .ok(
            "listservicejobs",
            json!({"jobQueue": "prod", "jobStatus": "RUNNABLE"}),
        )
        .await;
    assert_eq!(names(&runnable), ["first"]);
    let snap = h
        .ok("getjobqueuesnapshot", json!({"jobQueue": "prod"}))
        .await;
    assert_eq!(front(&snap), [id]);

    h.ok(
        "createschedulingpolicy",
        json!({"name": "fair", "fairsharePolicy": {"shareDistribution": [{"shareIdentifier": "a"}]}}),
    )
    .await;
    h.ok(
        "createjobqueue",
        json!({"jobQueueName": "shared", "priority": 1, "jobQueueType": "SAGEMAKER_TRAINING",
               "schedulingPolicyArn": "arn:aws:batch:us-east-1:000000000000:scheduling-policy/fair",
               "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": "env"}]}),
    )
    .await;
    let msg = h
        .client_error("submitservicejob", submit_body("no-share", "shared"))
        .await;
    assert!(msg.contains("shareIdentifier is required"), "{msg}");
    let mut body = submit_body("with-share", "shared");
    body["shareIdentifier"] = json!("a");
    submit(&h, body).await;
}

#[tokio::test]
async fn a_runnable_job_shows_its_place_in_line_and_others_do_not() {
    let h = harness();
    h.fifo_queue("env", "q", 10, 8).await;
    let ids: Vec<String> = futures_in_order(&h, 3).await;
    let place = |v: &Value| v["trainyard"]["queuePosition"].as_u64();
    assert_eq!(
        place(&describe(&h, &ids[0]).await),
        None,
        "SUBMITTED jobs are not in line yet"
    );
    h.service.accept_submitted(10, 0).await.unwrap();
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(place(&describe(&h, id).await), Some(i as u64 + 1), "{id}");
    }
    h.ok(
        "terminateservicejob",
        json!({"jobId": ids[0], "reason": "not needed"}),
    )
    .await;
    assert_eq!(
        place(&describe(&h, &ids[0]).await),
        None,
        "a FAILED job has no place"
    );
    assert_eq!(
        place(&describe(&h, &ids[2]).await),
        Some(2),
        "the line moved up"
    );
}

async fn futures_in_order(h: &Harness, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(submit(h, submit_body(&format!("j{i}"), "q")).await);
        // Distinct submission times make the FIFO order unambiguous.
        h.clock.advance(10);
    }
    ids
}
