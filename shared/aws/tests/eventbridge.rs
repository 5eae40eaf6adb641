//! [`EventBridgeSink`] over the wire, on a moto server: a bus, a rule matching Trainyard's source
//! with an SQS queue as its target, one job driven through the real use-cases, and the queue
//! read back to see exactly what was published.
//!
//! Needs `AWS_ENDPOINT_URL` (or `AWS_ENDPOINT_URL_EVENTBRIDGE` and `AWS_ENDPOINT_URL_SQS`)
//! pointing at moto, with dummy credentials and a region (scripts/lib/moto.sh sets them).
#![cfg(feature = "moto-tests")]
// Test support: a broken set-up should fail loudly where it broke.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use aws_sdk_sqs::types::QueueAttributeName;
use serde_json::{Value, json};
use trainyard_app::memory::MemoryStore;
use trainyard_app::ports::{Event, EventSink};
use trainyard_aws::eventbridge::{EventBridgeSink, SOURCE};
use trainyard_domain::arn::ArnContext;

/// Most receive calls while collecting messages: a bound on the test's time, well above the
/// handful of messages one job produces.
const MAX_RECEIVES: usize = 20;

/// A bus with a rule sending every Trainyard event to a new SQS queue; returns (bus, queue URL).
async fn bus_with_queue(config: &aws_config::SdkConfig, case: &str) -> (String, String) {
    static SEQUENCE: AtomicU64 = AtomicU64::new(0);
    let suffix = format!(
        "{}-{}-{case}",
        std::process::id(),
        SEQUENCE.fetch_add(1, Ordering::Relaxed)
    );
    let events = aws_sdk_eventbridge::Client::new(config);
    let sqs = aws_sdk_sqs::Client::new(config);
    let bus = format!("trainyard-{suffix}");
    events.create_event_bus().name(&bus).send().await.unwrap();
    let queue_url = sqs
        .create_queue()
        .queue_name(format!("events-{suffix}"))
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let queue_arn = sqs
        .get_queue_attributes()
        .queue_url(&queue_url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap()
        .remove(&QueueAttributeName::QueueArn)
        .unwrap();
    events
        .put_rule()
        .name("all-trainyard")
        .event_bus_name(&bus)
        .event_pattern(json!({ "source": [SOURCE] }).to_string())
        .send()
        .await
        .unwrap();
    events
        .put_targets()
        .rule("all-trainyard")
        .event_bus_name(&bus)
        .targets(
            aws_sdk_eventbridge::types::Target::builder()
                .id("queue")
                .arn(queue_arn)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    (bus, queue_url)
}

/// Every message delivered so far, as parsed EventBridge events, in delivery order. Stops after
/// an empty receive (moto delivers synchronously within `PutEvents`).
async fn drain(config: &aws_config::SdkConfig, queue_url: &str) -> Vec<Value> {
    let sqs = aws_sdk_sqs::Client::new(config);
    let mut out = Vec::new();
    for _ in 0..MAX_RECEIVES {
        let got = sqs
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(10)
            .send()
            .await
            .unwrap();
        let messages = got.messages.unwrap_or_default();
        if messages.is_empty() {
            return out;
        }
        for m in messages {
            out.push(serde_json::from_str(m.body().unwrap()).unwrap());
            sqs.delete_message()
                .queue_url(queue_url)
                .receipt_handle(m.receipt_handle().unwrap())
                .send()
                .await
                .unwrap();
        }
    }
    panic!("more than {MAX_RECEIVES} receives: the queue never emptied");
}

fn arns() -> ArnContext {
    ArnContext {
        partition: "aws".into(),
        region: "us-east-1".into(),
        account: "123456789012".into(),
    }
}

#[tokio::test]
async fn one_job_publishes_its_submission_each_state_change_and_the_capacity_it_released() {
    common::require_endpoint(&["AWS_ENDPOINT_URL_EVENTBRIDGE", "AWS_ENDPOINT_URL_SQS"]);
    let config = common::sdk_config().await;
    let (bus, queue_url) = bus_with_queue(&config, "lifecycle").await;
    let sink = EventBridgeSink::new(aws_sdk_eventbridge::Client::new(&config), &bus, arns());
    let world = common::World::new(MemoryStore::new(), sink, arns());
    world.configure("env", "research", 4).await;

    let id = world.run_one_job("resnet", "research").await;

    let events = drain(&config, &queue_url).await;
    let seen: Vec<(String, String)> = events
        .iter()
        .map(|e| {
            let kind = e["detail-type"].as_str().unwrap().to_owned();
            let status = e["detail"]["status"].as_str().unwrap_or("-").to_owned();
            (kind, status)
        })
        .collect();
    let expected: Vec<(String, String)> = [
        ("Job Submitted", "-"),
        ("Batch Service Job State Change", "RUNNABLE"),
        ("Batch Service Job State Change", "SCHEDULED"),
        ("Batch Service Job State Change", "STARTING"),
        ("Batch Service Job State Change", "RUNNING"),
        ("Batch Service Job State Change", "SUCCEEDED"),
        ("Capacity Released", "SUCCEEDED"),
    ]
    .iter()
    .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
    .collect();
    // SQS standard queues do not promise order: compare as sorted multisets.
    let mut sorted_seen = seen.clone();
    sorted_seen.sort();
    let mut sorted_expected = expected.clone();
    sorted_expected.sort();
    assert_eq!(sorted_seen, sorted_expected, "{events:#?}");

    let job_arn = format!("arn:aws:batch:us-east-1:123456789012:service-job/{id}");
    for event in &events {
        assert_eq!(event["source"], "trainyard");
        assert_eq!(event["resources"], json!([job_arn]), "{event}");
    }
    let submitted = events
        .iter()
        .find(|e| e["detail-type"] == "Job Submitted")
        .unwrap();
    assert_eq!(
        submitted["detail"],
        json!({"jobId": id, "jobQueue": "research"})
    );
    let released = events
        .iter()
        .find(|e| e["detail-type"] == "Capacity Released")
        .unwrap();
    assert_eq!(
        released["detail"],
        json!({"jobId": id, "jobQueue": "research", "status": "SUCCEEDED"})
    );
    let done = events
        .iter()
        .find(|e| {
            e["detail-type"] == "Batch Service Job State Change"
                && e["detail"]["status"] == "SUCCEEDED"
        })
        .unwrap();
    let d = &done["detail"];
    assert_eq!(d["jobArn"], job_arn.as_str());
    assert_eq!(d["jobId"], id.as_str());
    assert_eq!(d["jobName"], "resnet");
    assert_eq!(
        d["jobQueue"],
        "arn:aws:batch:us-east-1:123456789012:job-queue/research"
    );
    assert_eq!(d["serviceJobType"], "SAGEMAKER_TRAINING");
    assert_eq!(d["createdAt"], common::T0);
    assert!(d["stoppedAt"].as_i64().unwrap() > common::T0, "{d}");
    let attempt_arn = d["attempts"][0]["serviceResourceId"]["value"]
        .as_str()
        .unwrap();
    assert!(attempt_arn.contains(":training-job/ty-resnet-"), "{d}");
    assert_eq!(
        d["latestAttempt"]["serviceResourceId"]["value"],
        attempt_arn
    );
    assert!(d.get("tags").is_none(), "Batch leaves tags out: {d}");
    assert!(
        d.get("serviceRequestPayload").is_none(),
        "and the payload: {d}"
    );
    assert_eq!(d["trainyard"]["jobQueueName"], "research");
}

#[tokio::test]
async fn a_missing_bus_is_logged_and_never_fails_the_caller() {
    common::require_endpoint(&["AWS_ENDPOINT_URL_EVENTBRIDGE"]);
    let config = common::sdk_config().await;
    let sink = EventBridgeSink::new(
        aws_sdk_eventbridge::Client::new(&config),
        "no-such-bus",
        arns(),
    );
    // `publish` returns `()`: the point is that it returns at all, promptly, without panicking.
    tokio::time::timeout(
        Duration::from_secs(30),
        sink.publish(Event::JobSubmitted {
            job_id: "j1".into(),
            job_queue: "q".into(),
        }),
    )
    .await
    .expect("publishing gave up within the SDK's retry budget");
}
