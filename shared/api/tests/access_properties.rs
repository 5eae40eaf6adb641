//! No sequence of calls by a restricted principal changes what the policies keep from it: a
//! researcher under the example policies tries random sequences of every kind of change (to
//! other teams' jobs, queues, environments, the policies themselves), and afterwards everything
//! it may not change is as it was, and every job it got in is one it was allowed to submit.

#![allow(clippy::unwrap_used)]

mod support;

use proptest::prelude::*;
use serde_json::{Value, json};
use support::{Harness, harness, submit_body};

const EXAMPLES: &str = include_str!("../../../docs/examples/access-policies.cedar");
const PLATFORM: &str = "arn:aws:sts::000000000000:assumed-role/platform-admin/dana";
const ALICE: &str = "arn:aws:sts::000000000000:assumed-role/vision-researcher/alice";
const BOB: &str = "arn:aws:sts::000000000000:assumed-role/vision-researcher/bob";
const QUEUES: [&str; 3] = ["research", "production", "sweeps"];

/// One call alice tries.
#[derive(Debug, Clone)]
enum Try {
    Submit {
        queue: usize,
        share: usize,
        priority: i64,
    },
    Terminate {
        bobs: bool,
    },
    TerminateBoth,
    Update {
        bobs: bool,
        priority: i64,
    },
    DisableQueue {
        queue: usize,
    },
    DeleteQueue {
        queue: usize,
    },
    CreateQueue,
    ShrinkEnvironment,
    TagQueue {
        queue: usize,
    },
    PutPolicies,
    DeletePolicies,
}

fn a_try() -> impl Strategy<Value = Try> {
    prop_oneof![
        (
            0..3usize,
            0..3usize,
            prop::sample::select(vec![0i64, 50, 51, 900])
        )
            .prop_map(|(queue, share, priority)| Try::Submit {
                queue,
                share,
                priority
            }),
        any::<bool>().prop_map(|bobs| Try::Terminate { bobs }),
        Just(Try::TerminateBoth),
        (any::<bool>(), prop::sample::select(vec![10i64, 60]))
            .prop_map(|(bobs, priority)| Try::Update { bobs, priority }),
        (0..3usize).prop_map(|queue| Try::DisableQueue { queue }),
        (0..3usize).prop_map(|queue| Try::DeleteQueue { queue }),
        Just(Try::CreateQueue),
        Just(Try::ShrinkEnvironment),
        (0..3usize).prop_map(|queue| Try::TagQueue { queue }),
        Just(Try::PutPolicies),
        Just(Try::DeletePolicies),
    ]
}

async fn call(h: &Harness, caller: &str, path: &str, body: Value) -> (u16, Value) {
    let (status, _, value) = h
        .send_as(Some(caller), "POST", path, body.to_string())
        .await;
    (status.as_u16(), value)
}

/// What alice may not change: every queue, the environment, bob's job, the policies.
async fn protected(h: &Harness, bobs_job: &Value) -> Value {
    let (_, queues) = call(h, PLATFORM, "/v1/describejobqueues", json!({})).await;
    let (_, environments) = call(h, PLATFORM, "/v1/describeserviceenvironments", json!({})).await;
    let (_, bob) = call(
        h,
        PLATFORM,
        "/v1/describeservicejob",
        json!({"jobId": bobs_job}),
    )
    .await;
    let (_, policies) = call(h, PLATFORM, "/trainyard/v1/getaccesspolicies", json!({})).await;
    json!({
        "queues": queues["jobQueues"],
        "environments": environments["serviceEnvironments"],
        "bob": [bob["isTerminated"], bob["schedulingPriority"], bob["status"]],
        "policies": policies["policies"],
    })
}

async fn run(tries: Vec<Try>) -> Result<(), TestCaseError> {
    let h = harness();
    h.fifo_queue("gpus", "production", 900, 8).await;
    h.fair_share_queues("gpus", &[("research", 500), ("sweeps", 100)])
        .await;
    let (status, _) = call(
        &h,
        PLATFORM,
        "/trainyard/v1/putaccesspolicies",
        json!({"policies": EXAMPLES}),
    )
    .await;
    prop_assert_eq!(status, 200);
    let mut bobs = submit_body("bobs", "research");
    bobs["shareIdentifier"] = json!("vision");
    let (_, bobs) = call(&h, BOB, "/v1/submitservicejob", bobs).await;
    let mut alices = submit_body("alices", "research");
    alices["shareIdentifier"] = json!("vision");
    let (_, alices) = call(&h, ALICE, "/v1/submitservicejob", alices).await;
    let before = protected(&h, &bobs["jobId"]).await;

    for t in &tries {
        let job = |bob: bool| {
            if bob {
                bobs["jobId"].clone()
            } else {
                alices["jobId"].clone()
            }
        };
        let (path, body) = match t {
            Try::Submit {
                queue,
                share,
                priority,
            } => {
                let mut body = submit_body("try", QUEUES[*queue]);
                if let Some(share) = ["vision", "nlp"].get(*share) {
                    body["shareIdentifier"] = json!(share);
                }
                body["schedulingPriority"] = json!(priority);
                ("/v1/submitservicejob", body)
            }
            Try::Terminate { bobs } => (
                "/v1/terminateservicejob",
                json!({"jobId": job(*bobs), "reason": "r"}),
            ),
            Try::TerminateBoth => (
                "/v1/terminateservicejobs",
                json!({"jobs": [job(false), job(true)]}),
            ),
            Try::Update { bobs, priority } => (
                "/v1/updateservicejob",
                json!({"jobId": job(*bobs), "schedulingPriority": priority}),
            ),
            Try::DisableQueue { queue } => (
                "/v1/updatejobqueue",
                json!({"jobQueue": QUEUES[*queue], "state": "DISABLED"}),
            ),
            Try::DeleteQueue { queue } => {
                ("/v1/deletejobqueue", json!({"jobQueue": QUEUES[*queue]}))
            }
            Try::CreateQueue => (
                "/v1/createjobqueue",
                json!({"jobQueueName": "mine", "priority": 999,
                "jobQueueType": "SAGEMAKER_TRAINING",
                "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": "gpus"}]}),
            ),
            Try::ShrinkEnvironment => (
                "/v1/updateserviceenvironment",
                json!({"serviceEnvironment": "gpus",
                "capacityLimits": [{"maxCapacity": 0, "capacityUnit": "NUM_INSTANCES"}]}),
            ),
            Try::TagQueue { queue } => {
                let arn = format!(
                    "arn:aws:batch:us-east-1:000000000000:job-queue/{}",
                    QUEUES[*queue]
                );
                let path = format!("/v1/tags/{}", arn.replace('/', "%2F"));
                let (status, _) = call(&h, ALICE, &path, json!({"tags": {"owner": "alice"}})).await;
                prop_assert_eq!(status, 403, "tagging {}", arn);
                continue;
            }
            Try::PutPolicies => (
                "/trainyard/v1/putaccesspolicies",
                json!({"policies": "permit(principal, action, resource);"}),
            ),
            Try::DeletePolicies => ("/trainyard/v1/deleteaccesspolicies", json!({})),
        };
        let (status, answer) = call(&h, ALICE, path, body).await;
        prop_assert!(
            status == 200 || status == 400 || status == 403,
            "{t:?}: {status} {answer}"
        );
    }

    let after = protected(&h, &bobs["jobId"]).await;
    prop_assert_eq!(&after, &before, "after {:?}", tries);
    // Every job that got in is one the policies let alice submit.
    let (_, listed) = call(
        &h,
        PLATFORM,
        "/v1/listservicejobs",
        json!({"filters": [{"name": "JOB_NAME", "values": ["try"]}]}),
    )
    .await;
    for summary in listed["jobSummaryList"].as_array().unwrap() {
        let (_, job) = call(
            &h,
            PLATFORM,
            "/v1/describeservicejob",
            json!({"jobId": summary["jobId"]}),
        )
        .await;
        prop_assert_eq!(&job["trainyard"]["owner"], ALICE);
        prop_assert!(
            job["jobQueue"].as_str().unwrap().ends_with("/research")
                || job["jobQueue"].as_str().unwrap().ends_with("/sweeps"),
            "{}",
            job
        );
        prop_assert_eq!(&job["shareIdentifier"], "vision");
        prop_assert!(
            job["schedulingPriority"].as_i64().unwrap_or(0) <= 50,
            "{}",
            job
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn a_restricted_principal_changes_nothing_the_policies_keep_from_it(
        tries in prop::collection::vec(a_try(), 1..16)
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(run(tries))?;
    }
}
