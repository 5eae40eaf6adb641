//! The HTTP face, in process (`tower::ServiceExt::oneshot`) with a clock the test moves, the
//! driver over paused tokio time, and boto3 over a real socket when boto3 is installed.

// Tests may panic on what they did not expect.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tower::ServiceExt;
use trainyard_emulator::driver::{self, DriverExit};
use trainyard_emulator::http::{CONTENT_TYPE, MAX_REQUEST_BYTES, router, serve};
use trainyard_emulator::model::{Config, Emulator};
use trainyard_emulator::shared::SharedEmulator;

const T0: i64 = 1_800_000_000_000;

/// The router over a fresh emulator whose clock the test sets.
struct Harness {
    router: Router,
    clock_ms: Arc<AtomicI64>,
}

/// One response, decoded.
#[derive(Debug)]
struct Reply {
    status: StatusCode,
    content_type: String,
    request_id: String,
    error_type: Option<String>,
    body: Value,
}

impl Reply {
    fn code(&self) -> &str {
        self.body["__type"].as_str().unwrap_or("")
    }
}

fn harness(config: Config) -> Harness {
    let clock_ms = Arc::new(AtomicI64::new(T0));
    let clock = Arc::clone(&clock_ms);
    let shared = SharedEmulator::new(
        Emulator::new(config),
        Arc::new(move || clock.load(Ordering::SeqCst)),
    );
    Harness {
        router: router(shared),
        clock_ms,
    }
}

impl Harness {
    fn at(&self, ms: i64) -> &Self {
        self.clock_ms.store(ms, Ordering::SeqCst);
        self
    }

    async fn raw(&self, method: &str, target: Option<&str>, body: impl Into<Body>) -> Reply {
        let mut req = Request::builder()
            .method(method)
            .uri("/")
            .header("content-type", CONTENT_TYPE);
        if let Some(t) = target {
            req = req.header("x-amz-target", t);
        }
        let resp = self
            .router
            .clone()
            .oneshot(req.body(body.into()).unwrap())
            .await
            .unwrap();
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .map(|v| v.to_str().unwrap().to_owned())
        };
        let status = resp.status();
        let content_type = header("content-type").unwrap_or_default();
        let request_id = header("x-amzn-requestid").unwrap_or_default();
        let error_type = header("x-amzn-errortype");
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&bytes)));
        Reply {
            status,
            content_type,
            request_id,
            error_type,
            body,
        }
    }

    async fn op(&self, operation: &str, body: Value) -> Reply {
        let target = format!("SageMaker.{operation}");
        self.raw("POST", Some(&target), body.to_string()).await
    }

    /// Calls `operation` and insists that it succeeded.
    async fn ok(&self, operation: &str, body: Value) -> Value {
        let reply = self.op(operation, body).await;
        assert_eq!(
            reply.status,
            StatusCode::OK,
            "{operation}: {:?}",
            reply.body
        );
        reply.body
    }

    async fn create(&self, name: &str, hyper: Value) -> Value {
        self.ok("CreateTrainingJob", request(name, hyper)).await
    }

    async fn status(&self, name: &str) -> (String, String) {
        let d = self
            .ok("DescribeTrainingJob", json!({"TrainingJobName": name}))
            .await;
        (
            d["TrainingJobStatus"].as_str().unwrap().into(),
            d["SecondaryStatus"].as_str().unwrap().into(),
        )
    }

    async fn names(&self, list_request: Value) -> (Vec<String>, Option<String>) {
        let body = self.ok("ListTrainingJobs", list_request).await;
        let names = body["TrainingJobSummaries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["TrainingJobName"].as_str().unwrap().to_owned())
            .collect();
        (names, body["NextToken"].as_str().map(str::to_owned))
    }
}

fn request(name: &str, hyper: Value) -> Value {
    json!({
        "TrainingJobName": name,
        "RoleArn": "arn:aws:iam::000000000000:role/SageMakerRole",
        "AlgorithmSpecification": {"TrainingImage": "img:1", "TrainingInputMode": "File"},
        "HyperParameters": hyper,
        "OutputDataConfig": {"S3OutputPath": "s3://bucket/out/"},
        "ResourceConfig": {"InstanceType": "ml.m5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 10},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
        "Tags": [{"Key": "team", "Value": "vision"}]
    })
}

fn one_second() -> Value {
    json!({"emulator_duration_s": "1"})
}

fn pair(a: &str, b: &str) -> (String, String) {
    (a.into(), b.into())
}

#[tokio::test]
async fn describe_follows_the_lifecycle_as_the_clock_moves() {
    let h = harness(Config::default());
    let created = h.create("Resnet-50", one_second()).await;
    assert_eq!(
        created,
        json!({"TrainingJobArn": "arn:aws:sagemaker:us-east-1:000000000000:training-job/resnet-50"})
    );
    // Default timings: 300 ms provisioning, 100 ms download, 1 s training, 100 ms upload.
    let timeline = [
        (T0, pair("InProgress", "Starting")),
        (T0 + 299, pair("InProgress", "Starting")),
        (T0 + 300, pair("InProgress", "Downloading")),
        (T0 + 400, pair("InProgress", "Training")),
        (T0 + 1_400, pair("InProgress", "Uploading")),
        (T0 + 1_500, pair("Completed", "Completed")),
        (T0 + 60_000, pair("Completed", "Completed")),
    ];
    for (at, want) in timeline {
        assert_eq!(
            h.at(at).status("resnet-50").await,
            want,
            "at T0+{}",
            at - T0
        );
    }
    let d = h
        .ok(
            "DescribeTrainingJob",
            json!({"TrainingJobName": "Resnet-50"}),
        )
        .await;
    assert_eq!(d["CreationTime"], json!(1_800_000_000.0), "epoch seconds");
    assert_eq!(d["TrainingStartTime"], json!(1_800_000_000.4));
    assert_eq!(d["TrainingEndTime"], json!(1_800_000_001.5));
    assert_eq!(d["SecondaryStatusTransitions"].as_array().unwrap().len(), 5);
}

#[tokio::test]
async fn a_clock_stepped_back_does_not_undo_progress() {
    let h = harness(Config::default());
    h.create("job", one_second()).await;
    assert_eq!(
        h.at(T0 + 2_000).status("job").await,
        pair("Completed", "Completed")
    );
    assert_eq!(h.at(T0).status("job").await, pair("Completed", "Completed"));
    h.at(T0 + 100).create("later", one_second()).await;
    let d = h
        .ok("DescribeTrainingJob", json!({"TrainingJobName": "later"}))
        .await;
    assert_eq!(
        d["CreationTime"],
        json!(1_800_000_002.0),
        "created at the latest time seen, not the stepped-back clock"
    );
}

#[tokio::test]
async fn every_response_is_amz_json_with_its_own_request_id() {
    let h = harness(Config::default());
    let ok = h.op("ListTrainingJobs", json!({})).await;
    let err = h.op("DescribeTrainingJob", json!({})).await;
    for reply in [&ok, &err] {
        assert_eq!(reply.content_type, "application/x-amz-json-1.1");
        assert!(!reply.request_id.is_empty(), "{reply:?}");
    }
    assert_ne!(ok.request_id, err.request_id);
    assert_eq!(ok.error_type, None);
}

#[tokio::test]
async fn errors_name_their_code_in_the_body_and_the_header() {
    let quota = Config {
        account_quotas: [("ml.m5.xlarge".to_owned(), 1)].into(),
        ..Config::default()
    };
    let h = harness(quota);
    h.create("existing", one_second()).await;
    h.at(T0 + 10);
    let long_name = "x".repeat(64);
    let arn_unknown = "arn:aws:sagemaker:us-east-1:000000000000:training-job/nope";
    // (case, target, body, code)
    let cases: Vec<(&str, Option<&str>, String, &str)> = vec![
        (
            "a target we do not serve",
            Some("SageMaker.DeleteTrainingJob"),
            "{}".into(),
            "UnknownOperationException",
        ),
        (
            "another service's target",
            Some("Batch.ListTags"),
            "{}".into(),
            "UnknownOperationException",
        ),
        (
            "no target at all",
            None,
            "{}".into(),
            "UnknownOperationException",
        ),
        (
            "a body that is not JSON",
            Some("SageMaker.DescribeTrainingJob"),
            "{\"TrainingJobName\": ".into(),
            "SerializationException",
        ),
        (
            "a body that is a JSON array",
            Some("SageMaker.ListTrainingJobs"),
            "[1, 2]".into(),
            "SerializationException",
        ),
        (
            "a name that is a number",
            Some("SageMaker.DescribeTrainingJob"),
            r#"{"TrainingJobName": 7}"#.into(),
            "SerializationException",
        ),
        (
            "MaxResults as a string",
            Some("SageMaker.ListTrainingJobs"),
            r#"{"MaxResults": "10"}"#.into(),
            "SerializationException",
        ),
        (
            "a timestamp as a word",
            Some("SageMaker.ListTrainingJobs"),
            r#"{"CreationTimeAfter": "yesterday"}"#.into(),
            "SerializationException",
        ),
        (
            "describe without a name",
            Some("SageMaker.DescribeTrainingJob"),
            "{}".into(),
            "ValidationException",
        ),
        (
            "describe with a name too long",
            Some("SageMaker.DescribeTrainingJob"),
            json!({"TrainingJobName": long_name}).to_string(),
            "ValidationException",
        ),
        (
            "describe an unknown job",
            Some("SageMaker.DescribeTrainingJob"),
            r#"{"TrainingJobName": "nope"}"#.into(),
            "ResourceNotFound",
        ),
        (
            "create a name that exists, in another case",
            Some("SageMaker.CreateTrainingJob"),
            request("EXISTING", one_second()).to_string(),
            "ResourceInUse",
        ),
        (
            "create without a role",
            Some("SageMaker.CreateTrainingJob"),
            json!({"TrainingJobName": "a", "OutputDataConfig": {"S3OutputPath": "s3://b/"}})
                .to_string(),
            "ValidationException",
        ),
        (
            "create over the account quota",
            Some("SageMaker.CreateTrainingJob"),
            request("second", one_second()).to_string(),
            "ResourceLimitExceeded",
        ),
        (
            "MaxResults of zero",
            Some("SageMaker.ListTrainingJobs"),
            r#"{"MaxResults": 0}"#.into(),
            "ValidationException",
        ),
        (
            "MaxResults over 100",
            Some("SageMaker.ListTrainingJobs"),
            r#"{"MaxResults": 101}"#.into(),
            "ValidationException",
        ),
        (
            "a status SageMaker does not have",
            Some("SageMaker.ListTrainingJobs"),
            r#"{"StatusEquals": "Paused"}"#.into(),
            "ValidationException",
        ),
        (
            "a sort key SageMaker does not have",
            Some("SageMaker.ListTrainingJobs"),
            r#"{"SortBy": "Size"}"#.into(),
            "ValidationException",
        ),
        (
            "NameContains outside the name alphabet",
            Some("SageMaker.ListTrainingJobs"),
            r#"{"NameContains": "a_b"}"#.into(),
            "ValidationException",
        ),
        (
            "a NextToken we never issued",
            Some("SageMaker.ListTrainingJobs"),
            r#"{"NextToken": "not-a-token"}"#.into(),
            "ValidationException",
        ),
        (
            "ListTags without an ARN",
            Some("SageMaker.ListTags"),
            "{}".into(),
            "ValidationException",
        ),
        (
            "ListTags of an unknown ARN",
            Some("SageMaker.ListTags"),
            json!({"ResourceArn": arn_unknown}).to_string(),
            "ResourceNotFound",
        ),
        (
            "stop an unknown job",
            Some("SageMaker.StopTrainingJob"),
            r#"{"TrainingJobName": "nope"}"#.into(),
            "ResourceNotFound",
        ),
    ];
    for (case, target, body, code) in cases {
        let reply = h.raw("POST", target, body).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{case}: {reply:?}");
        assert_eq!(reply.code(), code, "{case}: {reply:?}");
        assert_eq!(reply.error_type.as_deref(), Some(code), "{case}");
        let message = reply.body["message"].as_str().unwrap_or("");
        assert!(!message.is_empty(), "{case}: a message for the caller");
        assert_eq!(reply.body["Message"], reply.body["message"], "{case}");
    }
}

#[tokio::test]
async fn methods_other_than_post_are_unknown_operations_not_404s() {
    let h = harness(Config::default());
    for method in ["GET", "PUT", "DELETE"] {
        let reply = h
            .raw(method, Some("SageMaker.ListTrainingJobs"), "{}")
            .await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{method}");
        assert_eq!(reply.code(), "UnknownOperationException", "{method}");
    }
}

#[tokio::test]
async fn a_body_over_the_limit_is_refused_not_buffered() {
    let h = harness(Config::default());
    let huge = format!(
        r#"{{"TrainingJobName": "{}"}}"#,
        "a".repeat(MAX_REQUEST_BYTES)
    );
    let reply = h
        .raw("POST", Some("SageMaker.DescribeTrainingJob"), huge)
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.code(), "ValidationException");
}

#[tokio::test]
async fn no_request_body_makes_a_server_error() {
    let h = harness(Config::default());
    h.create("seed", one_second()).await;
    let bodies = [
        "",
        "null",
        "1",
        "\"s\"",
        "{}",
        r#"{"TrainingJobName": null}"#,
        r#"{"TrainingJobName": ""}"#,
        r#"{"TrainingJobName": "seed", "MaxResults": -1}"#,
        r#"{"MaxResults": 1e300}"#,
        r#"{"CreationTimeAfter": 1e300, "CreationTimeBefore": -1e300}"#,
        r#"{"SortBy": "Status", "SortOrder": "Descending", "MaxResults": 1}"#,
        r#"{"ResourceArn": ["a"]}"#,
        r#"{"TrainingJobName": {"nested": true}}"#,
        r#"{"NextToken": "76310a4e616d650a410a730a73"}"#,
    ];
    let targets = [
        "CreateTrainingJob",
        "DescribeTrainingJob",
        "ListTrainingJobs",
        "ListTags",
        "StopTrainingJob",
    ];
    for target in targets {
        for body in bodies {
            let target = format!("SageMaker.{target}");
            let reply = h.raw("POST", Some(target.as_str()), body).await;
            assert!(
                reply.status == StatusCode::OK || reply.status == StatusCode::BAD_REQUEST,
                "{target} {body}: {reply:?}"
            );
            if reply.status == StatusCode::BAD_REQUEST {
                assert!(!reply.code().is_empty(), "{target} {body}: {reply:?}");
            }
        }
    }
}

#[tokio::test]
async fn list_filters_and_sorts_like_sagemaker() {
    let h = harness(Config::default());
    // Created 1 s apart: b-long, a-short, C-long; a-short completes at T0+2.5 s.
    h.at(T0).create("b-long", json!({})).await;
    h.at(T0 + 1_000).create("a-short", one_second()).await;
    h.at(T0 + 2_000).create("C-long", json!({})).await;
    h.at(T0 + 3_000);
    let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
    let cases = [
        (
            "the default is CreationTime, Ascending",
            json!({}),
            s(&["b-long", "a-short", "C-long"]),
        ),
        (
            "newest first",
            json!({"SortOrder": "Descending"}),
            s(&["C-long", "a-short", "b-long"]),
        ),
        (
            "by name, ignoring case",
            json!({"SortBy": "Name"}),
            s(&["a-short", "b-long", "C-long"]),
        ),
        (
            "by status, ties by name",
            json!({"SortBy": "Status"}),
            s(&["a-short", "b-long", "C-long"]),
        ),
        (
            "NameContains ignores case",
            json!({"NameContains": "LONG"}),
            s(&["b-long", "C-long"]),
        ),
        (
            "StatusEquals",
            json!({"StatusEquals": "Completed"}),
            s(&["a-short"]),
        ),
        (
            "StatusEquals a status no job has",
            json!({"StatusEquals": "Stopping"}),
            s(&[]),
        ),
        (
            "created strictly after",
            json!({"CreationTimeAfter": 1_800_000_001.0}),
            s(&["C-long"]),
        ),
        (
            "created strictly before",
            json!({"CreationTimeBefore": 1_800_000_001.0}),
            s(&["b-long"]),
        ),
        (
            "modified after (a-short changed last when it completed)",
            json!({"LastModifiedTimeAfter": 1_800_000_002.4}),
            s(&["a-short"]),
        ),
        (
            "no emulated job has a warm pool",
            json!({"WarmPoolStatusEquals": "Available"}),
            s(&[]),
        ),
    ];
    for (case, list_request, want) in cases {
        let (names, token) = h.names(list_request).await;
        assert_eq!(names, want, "{case}");
        assert_eq!(token, None, "{case}: one page holds everything");
    }
    let summary = &h
        .ok("ListTrainingJobs", json!({"NameContains": "short"}))
        .await["TrainingJobSummaries"][0];
    assert_eq!(summary["TrainingJobStatus"], "Completed");
    assert_eq!(summary["SecondaryStatus"], "Completed");
    assert_eq!(summary["CreationTime"], json!(1_800_000_001.0));
    assert_eq!(summary["TrainingEndTime"], json!(1_800_000_002.5));
    assert_eq!(
        summary["TrainingJobArn"],
        "arn:aws:sagemaker:us-east-1:000000000000:training-job/a-short"
    );
}

/// Follows `NextToken` from `first` to the end; at most 20 pages.
async fn walk(h: &Harness, first: Value) -> Vec<Vec<String>> {
    let mut pages = Vec::new();
    let mut list_request = first;
    for _ in 0..20 {
        let (names, token) = h.names(list_request.clone()).await;
        pages.push(names);
        match token {
            Some(t) => list_request["NextToken"] = json!(t),
            None => return pages,
        }
    }
    panic!("more than 20 pages: {pages:?}");
}

#[tokio::test]
async fn next_token_walks_every_job_once_in_order() {
    let h = harness(Config::default());
    // Pairs share a creation millisecond, so the name breaks ties.
    for i in 0..25 {
        h.at(T0 + (i / 2) * 1_000)
            .create(&format!("job-{i:02}"), json!({}))
            .await;
    }
    let cases = [
        ("default page size", json!({}), vec![10, 10, 5]),
        ("pages of 10", json!({"MaxResults": 10}), vec![10, 10, 5]),
        ("pages of 7", json!({"MaxResults": 7}), vec![7, 7, 7, 4]),
        ("one page of 100", json!({"MaxResults": 100}), vec![25]),
        ("exactly 25", json!({"MaxResults": 25}), vec![25]),
        (
            "descending by name in pages of 12",
            json!({"MaxResults": 12, "SortBy": "Name", "SortOrder": "Descending"}),
            vec![12, 12, 1],
        ),
    ];
    for (case, first, sizes) in cases {
        let descending = first["SortOrder"] == "Descending";
        let pages = walk(&h, first).await;
        assert_eq!(
            pages.iter().map(Vec::len).collect::<Vec<_>>(),
            sizes,
            "{case}"
        );
        let mut want: Vec<String> = (0..25).map(|i| format!("job-{i:02}")).collect();
        if descending {
            want.reverse();
        }
        assert_eq!(pages.concat(), want, "{case}: every job once, in order");
    }
}

#[tokio::test]
async fn a_job_created_between_pages_is_neither_repeated_nor_skipped_before_the_cursor() {
    let h = harness(Config::default());
    for i in 0..6 {
        h.at(T0 + i * 1_000)
            .create(&format!("job-{i}"), json!({}))
            .await;
    }
    // Ascending: the newcomer sorts after every cursor, so it appears on a later page.
    let (first, token) = h.names(json!({"MaxResults": 4})).await;
    h.at(T0 + 10_000).create("job-new", json!({})).await;
    let (rest, end) = h
        .names(json!({"MaxResults": 4, "NextToken": token.unwrap()}))
        .await;
    assert_eq!(first, ["job-0", "job-1", "job-2", "job-3"]);
    assert_eq!(rest, ["job-4", "job-5", "job-new"]);
    assert_eq!(end, None);
    // Descending: the newcomer sorts before the cursor, so the walk does not repeat anything.
    let (first, token) = h
        .names(json!({"MaxResults": 3, "SortOrder": "Descending"}))
        .await;
    h.at(T0 + 20_000).create("job-newer", json!({})).await;
    let (rest, _) = h
        .names(json!({"MaxResults": 10, "SortOrder": "Descending", "NextToken": token.unwrap()}))
        .await;
    assert_eq!(first, ["job-new", "job-5", "job-4"]);
    assert_eq!(rest, ["job-3", "job-2", "job-1", "job-0"]);
}

#[tokio::test]
async fn a_token_is_refused_under_another_sort() {
    let h = harness(Config::default());
    for i in 0..3 {
        h.create(&format!("job-{i}"), json!({})).await;
    }
    let (_, token) = h.names(json!({"MaxResults": 1})).await;
    let reply = h
        .op(
            "ListTrainingJobs",
            json!({"MaxResults": 1, "SortBy": "Name", "NextToken": token.unwrap()}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.code(), "ValidationException");
}

#[tokio::test]
async fn list_tags_returns_the_tags_given_at_creation() {
    let h = harness(Config::default());
    let arn = h.create("tagged", one_second()).await["TrainingJobArn"].clone();
    let mut untagged = request("untagged", one_second());
    untagged.as_object_mut().unwrap().remove("Tags");
    let untagged_arn = h.ok("CreateTrainingJob", untagged).await["TrainingJobArn"].clone();
    assert_eq!(
        h.ok("ListTags", json!({"ResourceArn": arn})).await,
        json!({"Tags": [{"Key": "team", "Value": "vision"}]})
    );
    assert_eq!(
        h.ok("ListTags", json!({"ResourceArn": untagged_arn})).await,
        json!({"Tags": []})
    );
}

#[tokio::test]
async fn stop_moves_a_job_through_stopping_to_stopped() {
    let h = harness(Config::default());
    h.create("job", json!({"emulator_duration_s": "60"})).await;
    h.at(T0 + 1_000);
    assert_eq!(
        h.ok("StopTrainingJob", json!({"TrainingJobName": "job"}))
            .await,
        json!({})
    );
    assert_eq!(h.status("job").await, pair("Stopping", "Stopping"));
    // Stopping a job that is already stopping is accepted, as SageMaker does.
    h.at(T0 + 1_200);
    assert_eq!(
        h.ok("StopTrainingJob", json!({"TrainingJobName": "job"}))
            .await,
        json!({})
    );
    // The default stop grace is 500 ms from the first stop.
    assert_eq!(
        h.at(T0 + 1_499).status("job").await,
        pair("Stopping", "Stopping")
    );
    assert_eq!(
        h.at(T0 + 1_500).status("job").await,
        pair("Stopped", "Stopped")
    );
    let again = h
        .op("StopTrainingJob", json!({"TrainingJobName": "job"}))
        .await;
    assert_eq!(again.status, StatusCode::BAD_REQUEST);
    assert_eq!(again.code(), "ValidationException");
}

/// A shared emulator on paused tokio time, starting at T0.
fn on_tokio_time() -> SharedEmulator {
    let start = tokio::time::Instant::now();
    SharedEmulator::new(
        Emulator::new(Config::default()),
        Arc::new(move || T0 + i64::try_from(start.elapsed().as_millis()).unwrap()),
    )
}

#[tokio::test(start_paused = true)]
async fn the_driver_delivers_every_event_at_its_time() {
    let shared = on_tokio_time();
    let (tx, mut rx) = mpsc::channel(4);
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(driver::run(
        shared.clone(),
        tx,
        Duration::from_secs(60),
        async move {
            let _ = stopped.await;
        },
    ));
    // Let the driver go to sleep with nothing to do, so the create must wake it.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let created_at = T0 + 5_000;
    let reply = router(shared.clone())
        .oneshot(
            Request::post("/")
                .header("x-amz-target", "SageMaker.CreateTrainingJob")
                .body(Body::from(request("job", one_second()).to_string()))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(reply.status(), StatusCode::OK);
    let mut seen = Vec::new();
    for _ in 0..5 {
        let event = tokio::time::timeout(Duration::from_secs(30), rx.recv())
            .await
            .expect("an event within 30 s")
            .expect("the driver is running");
        let d = &event.detail();
        seen.push((
            event.time_ms - created_at,
            d["TrainingJobStatus"].as_str().unwrap().to_owned(),
            d["SecondaryStatus"].as_str().unwrap().to_owned(),
        ));
    }
    let want = [
        (0, "InProgress", "Starting"),
        (300, "InProgress", "Downloading"),
        (400, "InProgress", "Training"),
        (1_400, "InProgress", "Uploading"),
        (1_500, "Completed", "Completed"),
    ]
    .map(|(t, a, b)| (t, a.to_owned(), b.to_owned()));
    assert_eq!(seen, want);
    // Nothing more happens by itself; the driver stops when told.
    assert!(
        tokio::time::timeout(Duration::from_secs(120), rx.recv())
            .await
            .is_err()
    );
    stop.send(()).unwrap();
    assert_eq!(task.await.unwrap(), DriverExit::Shutdown);
}

#[tokio::test(start_paused = true)]
async fn the_driver_stops_when_nobody_listens() {
    let shared = on_tokio_time();
    let (tx, rx) = mpsc::channel(1);
    let task = tokio::spawn(driver::run(
        shared,
        tx,
        Duration::from_secs(1),
        std::future::pending(),
    ));
    drop(rx);
    let exit = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the driver notices within 10 s")
        .unwrap();
    assert_eq!(exit, DriverExit::ReceiverClosed);
}

/// boto3's `sagemaker` client against a real socket, when boto3 is installed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boto3_works_against_the_emulator_over_a_socket() {
    let has_boto3 = std::process::Command::new("python3")
        .args(["-c", "import boto3"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has_boto3 {
        eprintln!("boto3 check NOT run: `python3 -c 'import boto3'` failed");
        return;
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    // A long stop grace, so a stopped job is still Stopping when the script looks.
    let config = Config {
        stop_grace_ms: 60_000,
        ..Config::default()
    };
    let shared = SharedEmulator::with_wall_clock(Emulator::new(config));
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, shared, async move {
        let _ = stopped.await;
    }));
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scripts/check-emulator-boto3.py"
    );
    let output = tokio::task::spawn_blocking(move || {
        let mut child = std::process::Command::new("python3")
            .args([script, &url])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // At most 60 s, polled every 50 ms.
        for _ in 0..1_200 {
            if child.try_wait().unwrap().is_some() {
                return child.wait_with_output().unwrap();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let output = child.wait_with_output().unwrap();
        panic!(
            "the boto3 check did not finish within 60 s: {}",
            String::from_utf8_lossy(&output.stdout)
        );
    })
    .await
    .unwrap();
    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "boto3 check failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stdout.contains("all boto3 checks passed"), "{stdout}");
    eprintln!("{stdout}");
}

#[tokio::test]
async fn an_absurd_emulated_duration_is_refused_rather_than_overflowing_time() {
    let h = harness(Config::default());
    for duration in ["1e300", "1e10"] {
        let mut r = request("huge", json!({ "emulator_duration_s": duration }));
        // Without a MaxRuntimeInSeconds nothing else bounds the training phase.
        r.as_object_mut().unwrap().remove("StoppingCondition");
        let reply = h.op("CreateTrainingJob", r).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{duration}");
        assert_eq!(reply.code(), "ValidationException", "{duration}");
    }
    let mut r = request("long", json!({ "emulator_duration_s": "1e9" }));
    r.as_object_mut().unwrap().remove("StoppingCondition");
    h.ok("CreateTrainingJob", r).await;
    assert_eq!(
        h.at(T0 + 10_000).status("long").await,
        pair("InProgress", "Training")
    );
}
