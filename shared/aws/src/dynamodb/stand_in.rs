//! Test support: a stand-in DynamoDB endpoint on a free loopback port that answers as a test
//! scripts it and keeps what it was sent, for the behaviours moto does not have (throttles,
//! transaction conflicts, what a request asked for).
// Test support: a broken set-up should fail loudly where it broke.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde_json::Value;

use crate::dynamodb::DynamoStore;

/// What the stand-in answers, call by call, and the bodies it was sent.
#[derive(Default)]
pub(crate) struct Script {
    pub(crate) answers: VecDeque<(StatusCode, Value)>,
    pub(crate) requests: Vec<Value>,
}

/// A store on a stand-in that gives `answers` in turn (retries after 1 ms); the script
/// collects the requests. The server stops with the test's runtime.
pub(crate) async fn stand_in(
    answers: Vec<(StatusCode, Value)>,
) -> (DynamoStore, Arc<Mutex<Script>>) {
    let script = Arc::new(Mutex::new(Script {
        answers: answers.into(),
        requests: Vec::new(),
    }));
    let shared = Arc::clone(&script);
    let app = axum::Router::new().fallback(move |body: axum::body::Bytes| {
        let shared = Arc::clone(&shared);
        async move {
            let mut script = shared.lock().unwrap();
            script.requests.push(serde_json::from_slice(&body).unwrap());
            let (status, answer) = script.answers.pop_front().expect("an answer left");
            let mut response = (status, answer.to_string()).into_response();
            let json = "application/x-amz-json-1.0".parse().unwrap();
            response.headers_mut().insert("content-type", json);
            response
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "test"))
        .retry_config(RetryConfig::standard().with_initial_backoff(Duration::from_millis(1)))
        .endpoint_url(url)
        .build();
    let client = aws_sdk_dynamodb::Client::from_conf(config);
    (DynamoStore::new(client, "jobs".to_owned()), script)
}
