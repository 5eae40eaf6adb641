//! How [`EventBridgeSink`] handles failures, against a stand-in EventBridge endpoint on a free
//! loopback port that answers `PutEvents` as told: entries that fail are sent once more (only
//! those), and then the sink gives up without failing its caller.
// Test support: a broken set-up should fail loudly where it broke.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use trainyard_app::contract::job;
use trainyard_app::ports::{Event, EventSink};
use trainyard_aws::eventbridge::EventBridgeSink;
use trainyard_domain::arn::ArnContext;
use trainyard_domain::job::{Attempt, JobStatus};

/// What the stand-in answers, call by call (the last answer repeats), and what it was sent.
#[derive(Default)]
struct Script {
    answers: VecDeque<(StatusCode, Value)>,
    requests: Vec<Value>,
}

/// Serves `answers` on a free loopback port until the returned sender is dropped.
async fn stand_in(
    answers: Vec<(StatusCode, Value)>,
) -> (String, Arc<Mutex<Script>>, tokio::sync::oneshot::Sender<()>) {
    let script = Arc::new(Mutex::new(Script {
        answers: answers.into(),
        requests: Vec::new(),
    }));
    let shared = script.clone();
    let app = axum::Router::new().fallback(move |body: axum::body::Bytes| {
        let shared = shared.clone();
        async move {
            let mut script = shared.lock().unwrap();
            script
                .requests
                .push(serde_json::from_slice(&body).unwrap_or(Value::Null));
            let (status, answer) = if script.answers.len() > 1 {
                script.answers.pop_front().unwrap()
            } else {
                script.answers.front().cloned().unwrap()
            };
            let mut response: Response = (status, answer.to_string()).into_response();
            response.headers_mut().insert(
                "content-type",
                "application/x-amz-json-1.1".parse().unwrap(),
            );
            response
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
    });
    (url, script, stop)
}

fn sink(url: &str) -> EventBridgeSink {
    let config = aws_sdk_eventbridge::Config::builder()
        .behavior_version(aws_sdk_eventbridge::config::BehaviorVersion::latest())
        .region(aws_sdk_eventbridge::config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_eventbridge::config::Credentials::new(
            "test", "test", None, None, "test",
        ))
        .endpoint_url(url)
        .build();
    EventBridgeSink::new(
        aws_sdk_eventbridge::Client::from_conf(config),
        "bus",
        ArnContext::default(),
    )
}

/// A SUCCEEDED job: two entries (the state change and the capacity it released).
fn finished() -> Event {
    let mut j = job("j1").status(JobStatus::Succeeded).build();
    j.attempts = vec![Attempt {
        stop_requested: None,
        failed_as: None,
        selected_instance_type: None,
        training_job_name: "ty-t-j1-1".into(),
        training_job_arn: None,
        started_at: Some(1),
        stopped_at: Some(2),
        status_reason: None,
        service_environment: Some("env".into()),
    }];
    Event::JobStatusChanged {
        job_id: "j1".into(),
        job_queue: "q".into(),
        status: JobStatus::Succeeded,
        job: Box::new(j),
    }
}

fn detail_types(request: &Value) -> Vec<String> {
    request["Entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["DetailType"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn failed_entries_are_sent_once_more_and_then_dropped() {
    let second_fails = json!({"FailedEntryCount": 1, "Entries": [
        {"EventId": "e1"},
        {"ErrorCode": "InternalFailure", "ErrorMessage": "try again"}
    ]});
    let first_fails = json!({"FailedEntryCount": 1, "Entries": [
        {"ErrorCode": "InternalFailure", "ErrorMessage": "still failing"}
    ]});
    let ok_one = json!({"FailedEntryCount": 0, "Entries": [{"EventId": "e2"}]});
    // (case, answers, calls expected)
    let cases = [
        (
            "a failed entry succeeds on its retry",
            vec![
                (StatusCode::OK, second_fails.clone()),
                (StatusCode::OK, ok_one),
            ],
            2,
        ),
        (
            "a failed entry that fails again is dropped after one retry",
            vec![
                (StatusCode::OK, second_fails),
                (StatusCode::OK, first_fails),
            ],
            2,
        ),
        (
            "everything accepted: one call",
            vec![(
                StatusCode::OK,
                json!({"FailedEntryCount": 0, "Entries": [{"EventId": "a"}, {"EventId": "b"}]}),
            )],
            1,
        ),
    ];
    for (case, answers, calls) in cases {
        let (url, script, _stop) = stand_in(answers).await;
        tokio::time::timeout(Duration::from_secs(30), sink(&url).publish(finished()))
            .await
            .expect(case);
        let script = script.lock().unwrap();
        assert_eq!(script.requests.len(), calls, "{case}");
        assert_eq!(
            detail_types(&script.requests[0]),
            ["Batch Service Job State Change", "Capacity Released"],
            "{case}: both entries in one call"
        );
        if calls == 2 {
            assert_eq!(
                detail_types(&script.requests[1]),
                ["Capacity Released"],
                "{case}: only the failed entry is sent again"
            );
        }
    }
}

#[tokio::test]
async fn a_refused_call_is_tried_once_more_and_never_fails_the_caller() {
    // A client error (not retried by the SDK itself): the sink's own retry is the only one.
    let refused = json!({"__type": "ResourceNotFoundException", "message": "no bus"});
    let (url, script, _stop) = stand_in(vec![(StatusCode::BAD_REQUEST, refused)]).await;
    tokio::time::timeout(Duration::from_secs(30), sink(&url).publish(finished()))
        .await
        .expect("publishing returns");
    let script = script.lock().unwrap();
    assert_eq!(script.requests.len(), 2);
    assert_eq!(
        detail_types(&script.requests[1]).len(),
        2,
        "both entries again"
    );
}
