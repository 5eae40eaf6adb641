//! Configuration resources through the real router: service environments, job queues,
//! scheduling policies and quota shares — create, describe (by name and by ARN), update,
//! delete, their preconditions, range checks, and pagination.

// The helpers below are not `#[test]` functions, so clippy's test exemption does not reach them
// (nor the shared `support` module); in a test, a failed unwrap is the failure report we want.
#![allow(clippy::unwrap_used)]

mod support;

use serde_json::{Value, json};
use support::{Harness, harness, submit_body};

const ARN_PREFIX: &str = "arn:aws:batch:us-east-1:000000000000:";

fn env_body(name: &str, limits: Value) -> Value {
    json!({"serviceEnvironmentName": name, "serviceEnvironmentType": "SAGEMAKER_TRAINING",
           "capacityLimits": limits})
}

fn queue_body(name: &str, env: &str) -> Value {
    json!({"jobQueueName": name, "priority": 10, "jobQueueType": "SAGEMAKER_TRAINING",
           "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": env}]})
}

fn share_body(name: &str, queue: &str, limits: Value) -> Value {
    json!({"quotaShareName": name, "jobQueue": queue, "capacityLimits": limits,
           "resourceSharingConfiguration": {"strategy": "LEND_AND_BORROW", "borrowLimit": 100},
           "preemptionConfiguration": {"inSharePreemption": "DISABLED"}})
}

fn share_arn(queue: &str, name: &str) -> String {
    format!("{ARN_PREFIX}job-queue/{queue}/quota-share/{name}")
}

/// A quota-managed environment `qm-env` (8 × ml.g5.xlarge, 2 × ml.p4d.24xlarge), a quota-share
/// policy `quota` and a queue `qm-queue` using both.
async fn quota_setup(h: &Harness) {
    h.ok(
        "createserviceenvironment",
        env_body(
            "qm-env",
            json!([{"maxCapacity": 8, "capacityUnit": "ml.g5.xlarge"},
                   {"maxCapacity": 2, "capacityUnit": "ml.p4d.24xlarge"}]),
        ),
    )
    .await;
    h.ok(
        "createschedulingpolicy",
        json!({"name": "quota", "quotaSharePolicy": {"idleResourceAssignmentStrategy": "FIFO"}}),
    )
    .await;
    let mut queue = queue_body("qm-queue", "qm-env");
    queue["schedulingPolicyArn"] = json!(format!("{ARN_PREFIX}scheduling-policy/quota"));
    h.ok("createjobqueue", queue).await;
}

async fn describe_env(h: &Harness, reference: &str) -> Vec<Value> {
    let out = h
        .ok(
            "describeserviceenvironments",
            json!({"serviceEnvironments": [reference]}),
        )
        .await;
    out["serviceEnvironments"].as_array().unwrap().clone()
}

#[tokio::test]
async fn a_service_environment_lives_from_create_to_delete() {
    let h = harness();
    let created = h
        .ok(
            "createserviceenvironment",
            env_body(
                "gpus",
                json!([{"maxCapacity": 10, "capacityUnit": "NUM_INSTANCES"}]),
            ),
        )
        .await;
    let arn = format!("{ARN_PREFIX}service-environment/gpus");
    assert_eq!(
        created,
        json!({"serviceEnvironmentName": "gpus", "serviceEnvironmentArn": arn})
    );

    // Described by name and by ARN alike, with Batch's defaults filled in.
    for reference in ["gpus", arn.as_str()] {
        let found = describe_env(&h, reference).await;
        assert_eq!(
            found,
            vec![json!({
                "serviceEnvironmentName": "gpus", "serviceEnvironmentArn": arn,
                "serviceEnvironmentType": "SAGEMAKER_TRAINING", "state": "ENABLED",
                "status": "VALID", "tags": {},
                "capacityLimits": [{"maxCapacity": 10, "capacityUnit": "NUM_INSTANCES"}],
            })],
            "{reference}"
        );
    }
    assert!(
        describe_env(&h, "unknown").await.is_empty(),
        "unknown names are simply absent"
    );

    h.ok(
        "updateserviceenvironment",
        json!({"serviceEnvironment": arn, "capacityLimits": [{"maxCapacity": 20, "capacityUnit": "NUM_INSTANCES"}]}),
    )
    .await;
    assert_eq!(
        describe_env(&h, "gpus").await[0]["capacityLimits"][0]["maxCapacity"],
        20
    );

    // Delete needs DISABLED, then no queue using it.
    h.ok("createjobqueue", queue_body("research", "gpus")).await;
    let msg = h
        .client_error(
            "deleteserviceenvironment",
            json!({"serviceEnvironment": "gpus"}),
        )
        .await;
    assert!(msg.contains("ENABLED") && msg.contains("DISABLED"), "{msg}");
    h.ok(
        "updateserviceenvironment",
        json!({"serviceEnvironment": "gpus", "state": "DISABLED"}),
    )
    .await;
    let msg = h
        .client_error(
            "deleteserviceenvironment",
            json!({"serviceEnvironment": "gpus"}),
        )
        .await;
    assert!(msg.contains("\"research\""), "names the queue: {msg}");
    h.ok(
        "updatejobqueue",
        json!({"jobQueue": "research", "serviceEnvironmentOrder": []}),
    )
    .await;
    h.ok(
        "deleteserviceenvironment",
        json!({"serviceEnvironment": arn}),
    )
    .await;
    assert!(describe_env(&h, "gpus").await.is_empty());
    let msg = h
        .client_error(
            "deleteserviceenvironment",
            json!({"serviceEnvironment": "gpus"}),
        )
        .await;
    assert!(msg.contains("does not exist"), "{msg}");
}

#[tokio::test]
async fn creating_a_name_that_exists_is_object_already_exists() {
    let h = harness();
    quota_setup(&h).await;
    h.ok(
        "createquotashare",
        share_body(
            "team-a",
            "qm-queue",
            json!([{"maxCapacity": 2, "capacityUnit": "ml.g5.xlarge"}]),
        ),
    )
    .await;
    let cases = [
        (
            "service environment",
            "createserviceenvironment",
            env_body(
                "qm-env",
                json!([{"maxCapacity": 1, "capacityUnit": "NUM_INSTANCES"}]),
            ),
        ),
        (
            "job queue",
            "createjobqueue",
            queue_body("qm-queue", "qm-env"),
        ),
        (
            "scheduling policy",
            "createschedulingpolicy",
            json!({"name": "quota", "quotaSharePolicy": {"idleResourceAssignmentStrategy": "FIFO"}}),
        ),
        (
            "quota share",
            "createquotashare",
            share_body(
                "team-a",
                "qm-queue",
                json!([{"maxCapacity": 1, "capacityUnit": "ml.g5.xlarge"}]),
            ),
        ),
    ];
    for (story, op, body) in cases {
        assert_eq!(
            h.client_error(op, body).await,
            "Object already exists",
            "{story}"
        );
    }
}

#[tokio::test]
async fn every_out_of_range_or_malformed_field_is_refused_by_name() {
    let h = harness();
    h.fifo_queue("env", "fifo", 1, 4).await;
    quota_setup(&h).await;
    let long_name = "n".repeat(129);
    let num = |max: i64| json!([{"maxCapacity": max, "capacityUnit": "NUM_INSTANCES"}]);
    let with = |mut base: Value, key: &str, value: Value| {
        base[key] = value;
        base
    };
    let action = |state: &str, seconds: i64, action: &str, reason: &str| {
        with(
            queue_body("q2", "env"),
            "jobStateTimeLimitActions",
            json!([{"state": state, "maxTimeSeconds": seconds, "action": action, "reason": reason}]),
        )
    };
    let fairshare = |policy: Value| json!({"name": "fs", "fairsharePolicy": policy});
    let g5 = |max: i64| json!([{"maxCapacity": max, "capacityUnit": "ml.g5.xlarge"}]);
    let cases: Vec<(&str, &str, Value, &str)> = vec![
        (
            "an environment name with a space",
            "createserviceenvironment",
            env_body("has space", num(1)),
            "serviceEnvironmentName",
        ),
        (
            "an environment name too long",
            "createserviceenvironment",
            env_body(&long_name, num(1)),
            "at most 128",
        ),
        (
            "a container environment type",
            "createserviceenvironment",
            with(
                env_body("e", num(1)),
                "serviceEnvironmentType",
                json!("ECS"),
            ),
            "serviceEnvironmentType",
        ),
        (
            "a negative capacity",
            "createserviceenvironment",
            env_body("e", num(-1)),
            "capacityLimits[0].maxCapacity must be between 0",
        ),
        (
            "a capacity beyond 32 bits",
            "createserviceenvironment",
            env_body("e", num(1 << 40)),
            "capacityLimits[0].maxCapacity",
        ),
        (
            "no capacity limits",
            "createserviceenvironment",
            env_body("e", json!([])),
            "capacityLimits must have between 1 and 5",
        ),
        (
            "six capacity limits",
            "createserviceenvironment",
            env_body(
                "e",
                json!(
                    (0..6)
                        .map(
                            |i| json!({"maxCapacity": 1, "capacityUnit": format!("ml.c{i}.large")})
                        )
                        .collect::<Vec<_>>()
                ),
            ),
            "got 6",
        ),
        (
            "a unit that is no instance type",
            "createserviceenvironment",
            env_body("e", json!([{"maxCapacity": 1, "capacityUnit": "GPU"}])),
            "capacityUnit",
        ),
        (
            "mixed units",
            "createserviceenvironment",
            env_body(
                "e",
                json!([{"maxCapacity": 1, "capacityUnit": "NUM_INSTANCES"}, {"maxCapacity": 1, "capacityUnit": "ml.g5.xlarge"}]),
            ),
            "mixes",
        ),
        (
            "a unit twice",
            "createserviceenvironment",
            env_body(
                "e",
                json!([{"maxCapacity": 1, "capacityUnit": "ml.g5.xlarge"}, {"maxCapacity": 2, "capacityUnit": "ml.g5.xlarge"}]),
            ),
            "appears twice",
        ),
        (
            "a bad state",
            "createserviceenvironment",
            with(env_body("e", num(1)), "state", json!("PAUSED")),
            "state",
        ),
        (
            "a capacity of the wrong type",
            "createserviceenvironment",
            env_body(
                "e",
                json!([{"maxCapacity": "ten", "capacityUnit": "NUM_INSTANCES"}]),
            ),
            "maxCapacity",
        ),
        (
            "too many tags",
            "createserviceenvironment",
            with(
                env_body("e", num(1)),
                "tags",
                json!(
                    (0..51)
                        .map(|i| (format!("k{i}"), json!("v")))
                        .collect::<serde_json::Map<_, _>>()
                ),
            ),
            "at most 50 tags",
        ),
        (
            "a queue priority above 1000",
            "createjobqueue",
            with(queue_body("q2", "env"), "priority", json!(1001)),
            "priority must be between 0 and 1000, got 1001",
        ),
        (
            "a negative queue priority",
            "createjobqueue",
            with(queue_body("q2", "env"), "priority", json!(-1)),
            "priority must be between 0 and 1000",
        ),
        (
            "a queue without priority",
            "createjobqueue",
            json!({"jobQueueName": "q2", "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": "env"}]}),
            "priority is required",
        ),
        (
            "a container queue type",
            "createjobqueue",
            with(queue_body("q2", "env"), "jobQueueType", json!("ECS")),
            "only SAGEMAKER_TRAINING",
        ),
        (
            "compute environments",
            "createjobqueue",
            with(
                queue_body("q2", "env"),
                "computeEnvironmentOrder",
                json!([{"order": 1, "computeEnvironment": "ce"}]),
            ),
            "only SAGEMAKER_TRAINING",
        ),
        (
            "two environments",
            "createjobqueue",
            with(
                queue_body("q2", "env"),
                "serviceEnvironmentOrder",
                json!([{"order": 1, "serviceEnvironment": "env"}, {"order": 2, "serviceEnvironment": "qm-env"}]),
            ),
            "exactly 1",
        ),
        (
            "no environment",
            "createjobqueue",
            with(
                queue_body("q2", "env"),
                "serviceEnvironmentOrder",
                json!([]),
            ),
            "exactly 1",
        ),
        (
            "an unknown environment",
            "createjobqueue",
            queue_body("q2", "nowhere"),
            "\"nowhere\" does not exist",
        ),
        (
            "an environment ARN of another account",
            "createjobqueue",
            queue_body(
                "q2",
                "arn:aws:batch:us-east-1:123456789012:service-environment/env",
            ),
            "123456789012",
        ),
        (
            "an unknown policy",
            "createjobqueue",
            with(
                queue_body("q2", "env"),
                "schedulingPolicyArn",
                json!(format!("{ARN_PREFIX}scheduling-policy/none")),
            ),
            "\"none\" does not exist",
        ),
        (
            "a time limit under 600 s",
            "createjobqueue",
            action("RUNNABLE", 599, "TERMINATE", "CAPACITY:X"),
            "maxTimeSeconds must be between 600 and 86400",
        ),
        (
            "a time limit over a day",
            "createjobqueue",
            action("RUNNABLE", 86_401, "TERMINATE", "CAPACITY:X"),
            "maxTimeSeconds",
        ),
        (
            "a time limit on another state",
            "createjobqueue",
            action("RUNNING", 600, "TERMINATE", "CAPACITY:X"),
            "must be RUNNABLE",
        ),
        (
            "a cancel action",
            "createjobqueue",
            action("RUNNABLE", 600, "CANCEL", "CAPACITY:X"),
            "only TERMINATE",
        ),
        (
            "an empty action reason",
            "createjobqueue",
            action("RUNNABLE", 600, "TERMINATE", ""),
            "reason must not be empty",
        ),
        (
            "a quota-share queue on a NUM_INSTANCES environment",
            "createjobqueue",
            with(
                queue_body("q2", "env"),
                "schedulingPolicyArn",
                json!("quota"),
            ),
            "quota-managed",
        ),
        (
            "a second queue on a quota-share queue's environment",
            "createjobqueue",
            queue_body("q2", "qm-env"),
            "\"qm-queue\"",
        ),
        (
            "a decay beyond a week",
            "createschedulingpolicy",
            fairshare(json!({"shareDecaySeconds": 604_801})),
            "fairsharePolicy.shareDecaySeconds must be between 0 and 604800",
        ),
        (
            "a negative decay",
            "createschedulingpolicy",
            fairshare(json!({"shareDecaySeconds": -1})),
            "shareDecaySeconds",
        ),
        (
            "a reservation of 100",
            "createschedulingpolicy",
            fairshare(json!({"computeReservation": 100})),
            "fairsharePolicy.computeReservation must be between 0 and 99",
        ),
        (
            "a zero weight",
            "createschedulingpolicy",
            fairshare(
                json!({"shareDistribution": [{"shareIdentifier": "a", "weightFactor": 0.0}]}),
            ),
            "shareDistribution[0].weightFactor must be between",
        ),
        (
            "a weight of 1000",
            "createschedulingpolicy",
            fairshare(
                json!({"shareDistribution": [{"shareIdentifier": "a", "weightFactor": 1000.0}]}),
            ),
            "weightFactor",
        ),
        (
            "a share id with punctuation",
            "createschedulingpolicy",
            fairshare(json!({"shareDistribution": [{"shareIdentifier": "team-a"}]})),
            "letters and digits",
        ),
        (
            "overlapping share ids",
            "createschedulingpolicy",
            fairshare(
                json!({"shareDistribution": [{"shareIdentifier": "UserA*"}, {"shareIdentifier": "UserA1"}]}),
            ),
            "\"UserA*\" and \"UserA1\" overlap",
        ),
        (
            "both policy kinds",
            "createschedulingpolicy",
            json!({"name": "both", "fairsharePolicy": {}, "quotaSharePolicy": {"idleResourceAssignmentStrategy": "FIFO"}}),
            "only one of",
        ),
        (
            "neither policy kind",
            "createschedulingpolicy",
            json!({"name": "neither"}),
            "set one of",
        ),
        (
            "an idle strategy other than FIFO",
            "createschedulingpolicy",
            json!({"name": "q", "quotaSharePolicy": {"idleResourceAssignmentStrategy": "LIFO"}}),
            "must be FIFO",
        ),
        (
            "a policy name with a slash",
            "createschedulingpolicy",
            json!({"name": "a/b", "quotaSharePolicy": {"idleResourceAssignmentStrategy": "FIFO"}}),
            "name may contain only",
        ),
        (
            "describing policies without arns",
            "describeschedulingpolicies",
            json!({}),
            "arns is required",
        ),
        (
            "maxResults of zero",
            "describeserviceenvironments",
            json!({"maxResults": 0}),
            "maxResults must be between 1 and 100",
        ),
        (
            "maxResults of 101",
            "listschedulingpolicies",
            json!({"maxResults": 101}),
            "maxResults",
        ),
        (
            "a forged nextToken",
            "describejobqueues",
            json!({"nextToken": "not-ours"}),
            "nextToken is not valid",
        ),
        (
            "a negative share capacity",
            "createquotashare",
            share_body("s", "qm-queue", g5(-1)),
            "capacityLimits[0].maxCapacity must be between 0",
        ),
        (
            "a share unit the environment lacks",
            "createquotashare",
            share_body(
                "s",
                "qm-queue",
                json!([{"maxCapacity": 1, "capacityUnit": "ml.m5.large"}]),
            ),
            "ml.g5.xlarge, ml.p4d.24xlarge",
        ),
        (
            "no share limits",
            "createquotashare",
            share_body("s", "qm-queue", json!([])),
            "between 1 and 5",
        ),
        (
            "a share unit twice",
            "createquotashare",
            share_body(
                "s",
                "qm-queue",
                json!([{"maxCapacity": 1, "capacityUnit": "ml.g5.xlarge"}, {"maxCapacity": 1, "capacityUnit": "ml.g5.xlarge"}]),
            ),
            "appears twice",
        ),
        (
            "an unknown strategy",
            "createquotashare",
            with(
                share_body("s", "qm-queue", g5(1)),
                "resourceSharingConfiguration",
                json!({"strategy": "HOARD"}),
            ),
            "RESERVE, LEND or LEND_AND_BORROW",
        ),
        (
            "a borrow limit below -1",
            "createquotashare",
            with(
                share_body("s", "qm-queue", g5(1)),
                "resourceSharingConfiguration",
                json!({"strategy": "LEND_AND_BORROW", "borrowLimit": -2}),
            ),
            "borrowLimit must be -1 (unlimited)",
        ),
        (
            "a borrow limit on a lender",
            "createquotashare",
            with(
                share_body("s", "qm-queue", g5(1)),
                "resourceSharingConfiguration",
                json!({"strategy": "LEND", "borrowLimit": 50}),
            ),
            "only to the LEND_AND_BORROW",
        ),
        (
            "an unknown preemption setting",
            "createquotashare",
            with(
                share_body("s", "qm-queue", g5(1)),
                "preemptionConfiguration",
                json!({"inSharePreemption": "MAYBE"}),
            ),
            "inSharePreemption must be ENABLED or DISABLED",
        ),
        (
            "a share without preemption configuration",
            "createquotashare",
            json!({"quotaShareName": "s", "jobQueue": "qm-queue", "capacityLimits": g5(1), "resourceSharingConfiguration": {"strategy": "RESERVE"}}),
            "preemptionConfiguration is required",
        ),
        (
            "a share on a FIFO queue",
            "createquotashare",
            share_body("s", "fifo", g5(1)),
            "no quota-share scheduling policy",
        ),
        (
            "a share on an unknown queue",
            "createquotashare",
            share_body("s", "nowhere", g5(1)),
            "\"nowhere\" does not exist",
        ),
        (
            "listing shares without a queue",
            "listquotashares",
            json!({}),
            "jobQueue is required",
        ),
        (
            "a share ARN that is a queue ARN",
            "describequotashare",
            json!({"quotaShareArn": format!("{ARN_PREFIX}job-queue/qm-queue")}),
            "quota-share",
        ),
        (
            "an unknown share ARN",
            "describequotashare",
            json!({"quotaShareArn": share_arn("qm-queue", "ghost")}),
            "ghost",
        ),
        (
            "malformed JSON",
            "createjobqueue",
            json!("not an object"),
            "Invalid request body",
        ),
    ];
    for (story, op, body, needle) in cases {
        let msg = h.client_error(op, body).await;
        assert!(msg.contains(needle), "{story}: {msg:?} lacks {needle:?}");
    }
    // Nothing refused was half-created.
    let queues = h.ok("describejobqueues", json!({})).await;
    let names: Vec<&str> = queues["jobQueues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["jobQueueName"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["fifo", "qm-queue"]);
}

#[tokio::test]
async fn a_job_queue_is_described_exactly_as_batch_describes_it() {
    let h = harness();
    h.ok(
        "createserviceenvironment",
        env_body(
            "env",
            json!([{"maxCapacity": 4, "capacityUnit": "NUM_INSTANCES"}]),
        ),
    )
    .await;
    // The SageMaker SDK sends an empty computeEnvironmentOrder and no jobQueueType.
    let created = h
        .ok(
            "createjobqueue",
            json!({"jobQueueName": "sdk", "priority": 1, "computeEnvironmentOrder": [],
                   "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": "env"}]}),
        )
        .await;
    let arn = format!("{ARN_PREFIX}job-queue/sdk");
    assert_eq!(created, json!({"jobQueueName": "sdk", "jobQueueArn": arn}));
    for reference in ["sdk", arn.as_str()] {
        let out = h
            .ok("describejobqueues", json!({"jobQueues": [reference]}))
            .await;
        assert_eq!(
            out,
            json!({"jobQueues": [{
                "jobQueueName": "sdk", "jobQueueArn": arn, "state": "ENABLED", "status": "VALID",
                "statusReason": "JobQueue Healthy", "priority": 1, "computeEnvironmentOrder": [],
                "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": format!("{ARN_PREFIX}service-environment/env")}],
                "jobQueueType": "SAGEMAKER_TRAINING", "tags": {}, "jobStateTimeLimitActions": [],
            }]}),
            "{reference}"
        );
    }

    // Updates: priority, state and time limits; the policy ARN appears once set.
    h.ok(
        "updatejobqueue",
        json!({"jobQueue": arn, "priority": 900, "state": "DISABLED",
               "jobStateTimeLimitActions": [{"reason": "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY",
                   "state": "RUNNABLE", "maxTimeSeconds": 3600, "action": "TERMINATE"}]}),
    )
    .await;
    let out = h
        .ok("describejobqueues", json!({"jobQueues": ["sdk"]}))
        .await;
    let queue = &out["jobQueues"][0];
    assert_eq!(queue["priority"], 900);
    assert_eq!(queue["state"], "DISABLED");
    assert_eq!(
        queue["jobStateTimeLimitActions"],
        json!([{"reason": "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY", "state": "RUNNABLE",
                "maxTimeSeconds": 3600, "action": "TERMINATE"}])
    );
    assert!(
        queue.get("schedulingPolicyArn").is_none(),
        "absent optionals are omitted"
    );
    let msg = h
        .client_error(
            "updatejobqueue",
            json!({"jobQueue": "sdk", "priority": 1001}),
        )
        .await;
    assert!(msg.contains("priority must be between 0 and 1000"), "{msg}");
}

#[tokio::test]
async fn scheduling_policies_can_be_replaced_in_kind_but_never_added_removed_or_changed() {
    let h = harness();
    h.fifo_queue("env", "fifo", 1, 4).await;
    for name in ["fair-a", "fair-b"] {
        h.ok(
            "createschedulingpolicy",
            json!({"name": name, "fairsharePolicy": {"shareDecaySeconds": 3600}}),
        )
        .await;
    }
    h.ok(
        "createschedulingpolicy",
        json!({"name": "quota", "quotaSharePolicy": {"idleResourceAssignmentStrategy": "FIFO"}}),
    )
    .await;
    let mut fair = queue_body("fair", "env");
    fair["schedulingPolicyArn"] = json!(format!("{ARN_PREFIX}scheduling-policy/fair-a"));
    h.ok("createjobqueue", fair).await;

    let cases = [
        (
            "a FIFO queue cannot get a policy",
            "fifo",
            "fair-a",
            Some("cannot have one added"),
        ),
        (
            "a policy cannot be removed",
            "fair",
            "",
            Some("not removed"),
        ),
        (
            "fair share cannot become quota share",
            "fair",
            "quota",
            Some("only by another fair-share"),
        ),
        (
            "a fair-share policy can be replaced by another",
            "fair",
            "fair-b",
            None,
        ),
    ];
    for (story, queue, policy, expected) in cases {
        let body = json!({"jobQueue": queue, "schedulingPolicyArn": policy});
        match expected {
            Some(needle) => {
                let msg = h.client_error("updatejobqueue", body).await;
                assert!(msg.contains(needle), "{story}: {msg}");
            }
            None => {
                h.ok("updatejobqueue", body).await;
            }
        }
    }
    let out = h
        .ok("describejobqueues", json!({"jobQueues": ["fair"]}))
        .await;
    assert_eq!(
        out["jobQueues"][0]["schedulingPolicyArn"],
        format!("{ARN_PREFIX}scheduling-policy/fair-b")
    );
}

#[tokio::test]
async fn a_scheduling_policy_keeps_its_kind_and_cannot_be_deleted_while_used() {
    let h = harness();
    let created = h
        .ok(
            "createschedulingpolicy",
            json!({"name": "teams", "fairsharePolicy": {"shareDecaySeconds": 0, "computeReservation": 50,
                   "shareDistribution": [{"shareIdentifier": "vision*", "weightFactor": 0.5}, {"shareIdentifier": "nlp"}]},
                   "tags": {"owner": "ml"}}),
        )
        .await;
    let arn = format!("{ARN_PREFIX}scheduling-policy/teams");
    assert_eq!(created, json!({"name": "teams", "arn": arn}));
    let described = h
        .ok(
            "describeschedulingpolicies",
            json!({"arns": [arn, format!("{ARN_PREFIX}scheduling-policy/ghost")]}),
        )
        .await;
    assert_eq!(
        described,
        json!({"schedulingPolicies": [{"name": "teams", "arn": arn, "tags": {"owner": "ml"},
            "fairsharePolicy": {"shareDecaySeconds": 0, "computeReservation": 50,
                "shareDistribution": [{"shareIdentifier": "vision*", "weightFactor": 0.5}, {"shareIdentifier": "nlp"}]}}]})
    );

    let msg = h
        .client_error(
            "updateschedulingpolicy",
            json!({"arn": arn, "quotaSharePolicy": {"idleResourceAssignmentStrategy": "FIFO"}}),
        )
        .await;
    assert!(msg.contains("cannot become a quota-share policy"), "{msg}");
    h.ok(
        "updateschedulingpolicy",
        json!({"arn": arn, "fairsharePolicy": {"computeReservation": 10}}),
    )
    .await;
    let described = h
        .ok("describeschedulingpolicies", json!({"arns": ["teams"]}))
        .await;
    assert_eq!(
        described["schedulingPolicies"][0]["fairsharePolicy"],
        json!({"computeReservation": 10, "shareDistribution": []})
    );
    let msg = h
        .client_error(
            "updateschedulingpolicy",
            json!({"arn": arn, "fairsharePolicy": {"computeReservation": 120}}),
        )
        .await;
    assert!(
        msg.contains("computeReservation must be between 0 and 99"),
        "{msg}"
    );

    h.ok(
        "createserviceenvironment",
        env_body(
            "env",
            json!([{"maxCapacity": 4, "capacityUnit": "NUM_INSTANCES"}]),
        ),
    )
    .await;
    let mut queue = queue_body("shared", "env");
    queue["schedulingPolicyArn"] = json!(arn);
    h.ok("createjobqueue", queue).await;
    let msg = h
        .client_error("deleteschedulingpolicy", json!({"arn": arn}))
        .await;
    assert!(msg.contains("\"shared\""), "names the queue: {msg}");
    h.ok(
        "updatejobqueue",
        json!({"jobQueue": "shared", "state": "DISABLED"}),
    )
    .await;
    h.ok("deletejobqueue", json!({"jobQueue": "shared"})).await;
    h.ok("deleteschedulingpolicy", json!({"arn": arn})).await;
    let described = h
        .ok("describeschedulingpolicies", json!({"arns": [arn]}))
        .await;
    assert_eq!(described, json!({"schedulingPolicies": []}));
    let msg = h
        .client_error("deleteschedulingpolicy", json!({"arn": arn}))
        .await;
    assert!(msg.contains("does not exist"), "{msg}");
}

#[tokio::test]
async fn quota_shares_live_inside_their_quota_share_queue() {
    let h = harness();
    quota_setup(&h).await;
    let created = h
        .ok(
            "createquotashare",
            share_body(
                "vision",
                "qm-queue",
                json!([{"maxCapacity": 4, "capacityUnit": "ml.g5.xlarge"}]),
            ),
        )
        .await;
    let arn = share_arn("qm-queue", "vision");
    assert_eq!(
        created,
        json!({"quotaShareName": "vision", "quotaShareArn": arn})
    );
    let expected = json!({
        "quotaShareName": "vision", "quotaShareArn": arn,
        "jobQueueArn": format!("{ARN_PREFIX}job-queue/qm-queue"),
        "capacityLimits": [{"maxCapacity": 4, "capacityUnit": "ml.g5.xlarge"}],
        "resourceSharingConfiguration": {"strategy": "LEND_AND_BORROW", "borrowLimit": 100},
        "preemptionConfiguration": {"inSharePreemption": "DISABLED"},
        "state": "ENABLED", "status": "VALID", "tags": {},
    });
    assert_eq!(
        h.ok("describequotashare", json!({"quotaShareArn": arn}))
            .await,
        expected
    );
    let listed = h
        .ok(
            "listquotashares",
            json!({"jobQueue": format!("{ARN_PREFIX}job-queue/qm-queue")}),
        )
        .await;
    assert_eq!(listed, json!({"quotaShares": [expected]}));

    h.ok(
        "updatequotashare",
        json!({"quotaShareArn": arn, "capacityLimits": [{"maxCapacity": 1, "capacityUnit": "ml.p4d.24xlarge"}],
               "resourceSharingConfiguration": {"strategy": "RESERVE"},
               "preemptionConfiguration": {"inSharePreemption": "ENABLED"}}),
    )
    .await;
    let share = h
        .ok("describequotashare", json!({"quotaShareArn": arn}))
        .await;
    assert_eq!(
        share["capacityLimits"],
        json!([{"maxCapacity": 1, "capacityUnit": "ml.p4d.24xlarge"}])
    );
    assert_eq!(
        share["resourceSharingConfiguration"],
        json!({"strategy": "RESERVE"})
    );
    assert_eq!(
        share["preemptionConfiguration"],
        json!({"inSharePreemption": "ENABLED"})
    );
    let msg = h
        .client_error("updatequotashare", json!({"quotaShareArn": arn, "capacityLimits": [{"maxCapacity": 1, "capacityUnit": "ml.m5.large"}]}))
        .await;
    assert!(
        msg.contains("ml.g5.xlarge, ml.p4d.24xlarge"),
        "names the units it has: {msg}"
    );

    // The environment must keep limits for the units its shares use.
    let msg = h
        .client_error(
            "updateserviceenvironment",
            json!({"serviceEnvironment": "qm-env", "capacityLimits": [{"maxCapacity": 8, "capacityUnit": "ml.g5.xlarge"}]}),
        )
        .await;
    assert!(
        msg.contains("\"vision\"") && msg.contains("ml.p4d.24xlarge"),
        "{msg}"
    );
    let msg = h
        .client_error(
            "updateserviceenvironment",
            json!({"serviceEnvironment": "qm-env", "capacityLimits": [{"maxCapacity": 8, "capacityUnit": "NUM_INSTANCES"}]}),
        )
        .await;
    assert!(msg.contains("\"qm-queue\""), "{msg}");

    // Delete needs DISABLED.
    let msg = h
        .client_error("deletequotashare", json!({"quotaShareArn": arn}))
        .await;
    assert!(msg.contains("DISABLED"), "{msg}");
    h.ok(
        "updatequotashare",
        json!({"quotaShareArn": arn, "state": "DISABLED"}),
    )
    .await;
    h.ok("deletequotashare", json!({"quotaShareArn": arn}))
        .await;
    let msg = h
        .client_error("describequotashare", json!({"quotaShareArn": arn}))
        .await;
    assert!(msg.contains("does not exist"), "{msg}");
    assert_eq!(
        h.ok("listquotashares", json!({"jobQueue": "qm-queue"}))
            .await,
        json!({"quotaShares": []})
    );
}

#[tokio::test]
async fn a_queue_holds_at_most_twenty_quota_shares() {
    let h = harness();
    quota_setup(&h).await;
    let limits = json!([{"maxCapacity": 1, "capacityUnit": "ml.g5.xlarge"}]);
    for i in 0..20 {
        h.ok(
            "createquotashare",
            share_body(&format!("share{i:02}"), "qm-queue", limits.clone()),
        )
        .await;
    }
    let msg = h
        .client_error(
            "createquotashare",
            share_body("one-more", "qm-queue", limits),
        )
        .await;
    assert!(msg.contains("already has 20 quota shares"), "{msg}");

    // Pagination by name; the last page has no nextToken.
    let mut names = Vec::new();
    let mut token: Option<String> = None;
    for _ in 0..10 {
        let mut body = json!({"jobQueue": "qm-queue", "maxResults": 7});
        if let Some(t) = &token {
            body["nextToken"] = json!(t);
        }
        let page = h.ok("listquotashares", body).await;
        names.extend(
            page["quotaShares"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["quotaShareName"].as_str().unwrap().to_owned()),
        );
        match page.get("nextToken") {
            Some(t) => token = Some(t.as_str().unwrap().to_owned()),
            None => break,
        }
    }
    let expected: Vec<String> = (0..20).map(|i| format!("share{i:02}")).collect();
    assert_eq!(names, expected);
}

#[tokio::test]
async fn describing_and_listing_page_by_name_and_omit_the_token_on_the_last_page() {
    let h = harness();
    for name in ["e", "c", "a", "d", "b"] {
        h.ok(
            "createserviceenvironment",
            env_body(
                name,
                json!([{"maxCapacity": 1, "capacityUnit": "NUM_INSTANCES"}]),
            ),
        )
        .await;
        h.ok("createjobqueue", queue_body(&format!("q-{name}"), name))
            .await;
        h.ok(
            "createschedulingpolicy",
            json!({"name": format!("p-{name}"), "fairsharePolicy": {}}),
        )
        .await;
    }
    let names = |prefix: &str| -> Vec<String> {
        ["a", "b", "c", "d", "e"]
            .iter()
            .map(|n| format!("{prefix}{n}"))
            .collect()
    };
    let cases = [
        (
            "describeserviceenvironments",
            "serviceEnvironments",
            "serviceEnvironmentName",
            names(""),
        ),
        (
            "describejobqueues",
            "jobQueues",
            "jobQueueName",
            names("q-"),
        ),
        (
            "listschedulingpolicies",
            "schedulingPolicies",
            "arn",
            names(&format!("{ARN_PREFIX}scheduling-policy/p-")),
        ),
    ];
    for (op, list_key, name_key, expected) in cases {
        let mut pages: Vec<Vec<String>> = Vec::new();
        let mut body = json!({"maxResults": 2});
        for _ in 0..10 {
            let page = h.ok(op, body.clone()).await;
            pages.push(
                page[list_key]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|i| i[name_key].as_str().unwrap().to_owned())
                    .collect(),
            );
            match page.get("nextToken") {
                Some(token) => body["nextToken"] = token.clone(),
                None => break,
            }
        }
        let sizes: Vec<usize> = pages.iter().map(Vec::len).collect();
        assert_eq!(sizes, [2, 2, 1], "{op}");
        assert_eq!(pages.concat(), expected, "{op}");
        // Exactly a full last page also ends without a token.
        let all = h.ok(op, json!({"maxResults": 5})).await;
        assert!(all.get("nextToken").is_none(), "{op}: {all}");
    }
    // A list of names is filtered, then paged.
    let page = h
        .ok(
            "describejobqueues",
            json!({"jobQueues": ["q-e", "q-a", "ghost"], "maxResults": 1}),
        )
        .await;
    assert_eq!(page["jobQueues"][0]["jobQueueName"], "q-a");
    let rest = h
        .ok(
            "describejobqueues",
            json!({"jobQueues": ["q-e", "q-a"], "nextToken": page["nextToken"]}),
        )
        .await;
    assert_eq!(rest["jobQueues"].as_array().unwrap().len(), 1);
    assert_eq!(rest["jobQueues"][0]["jobQueueName"], "q-e");
    assert!(rest.get("nextToken").is_none());
}

#[tokio::test]
async fn deleting_a_disabled_queue_terminates_its_jobs_and_removes_its_quota_shares() {
    let h = harness();
    h.fifo_queue("env", "work", 1, 4).await;
    let submitted = h.ok("submitservicejob", submit_body("train", "work")).await;
    let job_id = submitted["jobId"].as_str().unwrap().to_owned();

    let msg = h
        .client_error("deletejobqueue", json!({"jobQueue": "work"}))
        .await;
    assert!(msg.contains("ENABLED"), "{msg}");
    h.ok(
        "updatejobqueue",
        json!({"jobQueue": "work", "state": "DISABLED"}),
    )
    .await;
    h.ok(
        "deletejobqueue",
        json!({"jobQueue": format!("{ARN_PREFIX}job-queue/work")}),
    )
    .await;

    let job = h.ok("describeservicejob", json!({"jobId": job_id})).await;
    assert_eq!(job["status"], "FAILED");
    assert_eq!(job["statusReason"], "Job queue deleted");
    assert_eq!(
        h.ok("describejobqueues", json!({})).await,
        json!({"jobQueues": []})
    );
    // With the queue gone its environment can go too.
    h.ok(
        "updateserviceenvironment",
        json!({"serviceEnvironment": "env", "state": "DISABLED"}),
    )
    .await;
    h.ok(
        "deleteserviceenvironment",
        json!({"serviceEnvironment": "env"}),
    )
    .await;

    quota_setup(&h).await;
    h.ok(
        "createquotashare",
        share_body(
            "team",
            "qm-queue",
            json!([{"maxCapacity": 1, "capacityUnit": "ml.g5.xlarge"}]),
        ),
    )
    .await;
    h.ok(
        "updatejobqueue",
        json!({"jobQueue": "qm-queue", "state": "DISABLED"}),
    )
    .await;
    h.ok("deletejobqueue", json!({"jobQueue": "qm-queue"}))
        .await;
    let msg = h
        .client_error(
            "describequotashare",
            json!({"quotaShareArn": share_arn("qm-queue", "team")}),
        )
        .await;
    assert!(msg.contains("does not exist"), "{msg}");
    // A new queue of the same name starts without the old shares.
    let mut queue = queue_body("qm-queue", "qm-env");
    queue["schedulingPolicyArn"] = json!("quota");
    h.ok("createjobqueue", queue).await;
    assert_eq!(
        h.ok("listquotashares", json!({"jobQueue": "qm-queue"}))
            .await,
        json!({"quotaShares": []})
    );
}

#[tokio::test]
async fn deleting_a_disabled_quota_share_terminates_its_jobs() {
    let h = harness();
    quota_setup(&h).await;
    h.ok(
        "createquotashare",
        share_body(
            "team",
            "qm-queue",
            json!([{"maxCapacity": 2, "capacityUnit": "ml.g5.xlarge"}]),
        ),
    )
    .await;
    h.ok(
        "createquotashare",
        share_body(
            "other",
            "qm-queue",
            json!([{"maxCapacity": 2, "capacityUnit": "ml.g5.xlarge"}]),
        ),
    )
    .await;
    let mut ids = Vec::new();
    for share in ["team", "other"] {
        let mut body = submit_body(&format!("job-{share}"), "qm-queue");
        body["quotaShareName"] = json!(share);
        let out = h.ok("submitservicejob", body).await;
        ids.push(out["jobId"].as_str().unwrap().to_owned());
    }
    let arn = share_arn("qm-queue", "team");
    h.ok(
        "updatequotashare",
        json!({"quotaShareArn": arn, "state": "DISABLED"}),
    )
    .await;
    h.ok("deletequotashare", json!({"quotaShareArn": arn}))
        .await;
    let team = h.ok("describeservicejob", json!({"jobId": ids[0]})).await;
    assert_eq!(
        (team["status"].as_str(), team["statusReason"].as_str()),
        (Some("FAILED"), Some("Quota share deleted"))
    );
    let other = h.ok("describeservicejob", json!({"jobId": ids[1]})).await;
    assert_ne!(
        other["status"], "FAILED",
        "jobs of other shares are untouched"
    );
}

#[tokio::test]
async fn at_most_fifty_service_environments_may_exist() {
    let h = harness();
    for i in 0..50 {
        h.ok(
            "createserviceenvironment",
            env_body(
                &format!("env{i}"),
                json!([{"maxCapacity": 1, "capacityUnit": "NUM_INSTANCES"}]),
            ),
        )
        .await;
    }
    let msg = h
        .client_error(
            "createserviceenvironment",
            env_body(
                "env50",
                json!([{"maxCapacity": 1, "capacityUnit": "NUM_INSTANCES"}]),
            ),
        )
        .await;
    assert!(msg.contains("at most 50 service environments"), "{msg}");
}
