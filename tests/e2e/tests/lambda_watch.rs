//! End to end on the real function binaries: `cargo lambda watch` runs `api`, `scheduler`,
//! `training-events` and `retry`, each with the credentials of its own role as the SAM template
//! defines it, against the AWS stand (`tests/stand/aws_stand.py`: moto's DynamoDB and
//! EventBridge, and the SageMaker emulator, behind a gate that refuses what a role does not
//! allow, as IAM does); this test invokes them the way API Gateway, EventBridge and the schedule
//! would, checks each job's story through the API, and at the end that the stand refused nothing
//! and heard from every function's role. Events reach the functions only through the template's
//! rules: Trainyard's own events are those the functions put on the bus, SageMaker's state
//! changes are put on the default bus as SageMaker puts them, and moto's EventBridge matches each
//! rule's pattern and delivers to a queue per rule, which this test drains into the rule's
//! function (at least once; duplicates and late, reordered deliveries are added on purpose). The functions tolerate some failed calls (a describe that fails is
//! retried next tick), so a refusal is found by that audit, not only by a failed step.
//!
//! `scripts/lib/lambda.sh` (`run_lambda_e2e`) starts the servers and sets:
//!
//! - `TRAINYARD_E2E_LAMBDA_API`, `_SCHEDULER`, `_TRAINING_EVENTS`, `_RETRY`: each function's
//!   watch server (`http://127.0.0.1:PORT`);
//! - `TRAINYARD_E2E_STAND` (the stand, also every `AWS_ENDPOINT_URL_*`) and
//!   `TRAINYARD_E2E_EMULATOR` (the emulator itself, which this test reads unsigned), with the
//!   account's root key and a region;
//! - `TRAINYARD_TABLE`, `TRAINYARD_EVENT_BUS`, `TRAINYARD_DECISIONS_BUCKET`: what the functions
//!   were started with (this test
//!   creates the table before the first invocation, so the `api` function's cold start finds
//!   it; the bus is deployed with the stack);
//! - `TRAINYARD_E2E_ROUTES`: the rules `tests/stand/deploy_stack.py` put on the buses, each
//!   with the queue it delivers to and the function it stands for.
//!
//! SageMaker's state-change events are built the way EventBridge builds them: the emulator's
//! `DescribeTrainingJob` answer (the same shape as the event's `detail`) in an envelope. Every
//! wait is bounded.

#![cfg(feature = "lambda-e2e")]
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use trainyard_app::service::scheduling::DecisionRecord;

const ROLE: &str = "arn:aws:iam::123456789012:role/SageMakerRole";
/// Longest wait for one invocation (the first one of a function starts its process).
const INVOKE_TIMEOUT: Duration = Duration::from_secs(120);
/// Longest wait for a training job to reach a state (emulated jobs take a few seconds).
const STATE_TIMEOUT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(200);

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run this test through scripts/lib/lambda.sh (run_lambda_e2e)")
    })
}

struct Stand {
    agent: ureq::Agent,
    stand: String,
    sagemaker: String,
    /// (function, queue) of each rule.
    routes: Vec<(&'static str, String)>,
    /// Invocations made, per function, for the summary.
    invocations: std::collections::BTreeMap<&'static str, usize>,
}

/// One SageMaker state already delivered for a training job: (status, secondary status).
type Seen = (String, String);

impl Stand {
    fn new() -> Self {
        Self {
            agent: ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(INVOKE_TIMEOUT))
                .build()
                .new_agent(),
            stand: var("TRAINYARD_E2E_STAND").trim_end_matches('/').to_owned(),
            sagemaker: var("TRAINYARD_E2E_EMULATOR")
                .trim_end_matches('/')
                .to_owned(),
            invocations: Default::default(),
            routes: routes(),
        }
    }

    /// A JSON-protocol call to the stand as the account's root (whose key the stand knows; the
    /// signature is not checked for it). The stand injects DynamoDB's throttles and 500s into
    /// every caller's requests, this test's too: like an SDK, it tries again (up to 8 times).
    fn aws(&self, service: &str, target: &str, body: &Value) -> Value {
        let authorization = format!(
            "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/{service}/aws4_request, \
             SignedHeaders=host, Signature=0"
        );
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut response = self
                .agent
                .post(&self.stand)
                .header("authorization", &authorization)
                .header("x-amz-target", target)
                .header("content-type", "application/x-amz-json-1.1")
                .send(body.to_string())
                .unwrap();
            let status = response.status().as_u16();
            let text = response.body_mut().read_to_string().unwrap();
            let transient = status >= 500
                || text.contains("ProvisionedThroughputExceededException")
                || text.contains("ThrottlingException");
            if status != 200 && transient && attempt < 8 {
                std::thread::sleep(Duration::from_millis(50 * attempt));
                continue;
            }
            assert_eq!(status, 200, "{target}: {text}");
            return serde_json::from_str(&text).unwrap();
        }
    }

    /// A query-protocol IAM call to the stand as the account's root: `params` besides `Action`
    /// and `Version`.
    fn iam(&self, action: &str, params: &[(&str, &str)]) -> String {
        let authorization = "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/iam/aws4_request,              SignedHeaders=host, Signature=0";
        let mut form = vec![("Action", action), ("Version", "2010-05-08")];
        form.extend_from_slice(params);
        let body: Vec<String> = form
            .iter()
            .map(|(k, v)| format!("{k}={}", urlencoding(v)))
            .collect();
        let mut response = self
            .agent
            .post(&self.stand)
            .header("authorization", authorization)
            .header("content-type", "application/x-www-form-urlencoded")
            .send(body.join("&"))
            .unwrap();
        let text = response.body_mut().read_to_string().unwrap();
        assert_eq!(response.status().as_u16(), 200, "{action}: {text}");
        text
    }

    /// A path-style S3 `GET` from the stand as the account's root; the body.
    fn s3(&self, path_and_query: &str) -> String {
        let authorization = "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/s3/aws4_request, \
             SignedHeaders=host, Signature=0";
        let mut response = self
            .agent
            .get(format!("{}{path_and_query}", self.stand))
            .header("authorization", authorization)
            .call()
            .unwrap();
        let text = response.body_mut().read_to_string().unwrap();
        assert_eq!(response.status().as_u16(), 200, "{path_and_query}: {text}");
        text
    }

    /// Creates `bucket` (path style) as the account's root.
    fn s3_create_bucket(&self, bucket: &str) {
        let authorization = "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/s3/aws4_request, \
             SignedHeaders=host, Signature=0";
        let mut response = self
            .agent
            .put(format!("{}/{bucket}", self.stand))
            .header("authorization", authorization)
            .send_empty()
            .unwrap();
        let text = response.body_mut().read_to_string().unwrap();
        assert_eq!(response.status().as_u16(), 200, "create {bucket}: {text}");
    }

    /// The keys under `prefix` in `bucket` (one page: up to 1,000).
    fn s3_keys(&self, bucket: &str, prefix: &str) -> Vec<String> {
        let listing = self.s3(&format!(
            "/{bucket}?list-type=2&prefix={}",
            urlencoding(prefix)
        ));
        listing
            .split("<Key>")
            .skip(1)
            .filter_map(|rest| rest.split_once("</Key>").map(|(key, _)| key.to_owned()))
            .collect()
    }

    /// The object at `key` in `bucket`.
    fn s3_get(&self, bucket: &str, key: &str) -> String {
        self.s3(&format!("/{bucket}/{key}"))
    }

    /// Puts a SageMaker state change on the default bus, as SageMaker does.
    fn put_state_change(&self, detail: &Value) {
        let entry = json!({
            "Source": "aws.sagemaker",
            "DetailType": "SageMaker Training Job State Change",
            "Resources": [detail["TrainingJobArn"].clone()],
            "Detail": detail.to_string(),
        });
        let put = self.aws(
            "events",
            "AWSEvents.PutEvents",
            &json!({"Entries": [entry]}),
        );
        assert_eq!(put["FailedEntryCount"], 0, "{put}");
    }

    /// Drains every rule's queue into its function until all are empty (a function's events
    /// land on the queues too); each delivery's function and response, in order.
    fn deliver_bus(&mut self) -> Vec<(&'static str, Value)> {
        let mut delivered = Vec::new();
        for _ in 0..50 {
            let before = delivered.len();
            for (function, queue) in self.routes.clone() {
                let received = self.aws(
                    "sqs",
                    "AmazonSQS.ReceiveMessage",
                    &json!({"QueueUrl": queue, "MaxNumberOfMessages": 10}),
                );
                for message in received["Messages"].as_array().cloned().unwrap_or_default() {
                    let event: Value =
                        serde_json::from_str(message["Body"].as_str().unwrap()).unwrap();
                    delivered.push((function, self.invoke(function, &event)));
                    self.aws(
                        "sqs",
                        "AmazonSQS.DeleteMessage",
                        &json!({"QueueUrl": queue, "ReceiptHandle": message["ReceiptHandle"]}),
                    );
                }
            }
            if delivered.len() == before {
                return delivered;
            }
        }
        panic!("the queues never emptied: {delivered:?}");
    }

    /// The passes the bus delivered: how many attempts they launched in all.
    fn launched_by_bus(&mut self) -> u64 {
        let delivered = self.deliver_bus();
        let passes: Vec<&Value> = delivered
            .iter()
            .filter(|(f, _)| *f == "scheduler")
            .map(|(_, r)| r)
            .collect();
        assert!(!passes.is_empty(), "no pass was woken: {delivered:?}");
        passes.iter().map(|r| r["launched"].as_u64().unwrap()).sum()
    }

    /// Invokes `function` with `event` through the Lambda invoke API; (HTTP status, response).
    /// `cargo lambda watch` answers a function error with 500.
    fn invoke_raw(&mut self, function: &'static str, event: &Value) -> (u16, Value) {
        *self.invocations.entry(function).or_default() += 1;
        let server = var(&format!(
            "TRAINYARD_E2E_LAMBDA_{}",
            function.to_uppercase().replace('-', "_")
        ));
        let url = format!(
            "{}/2015-03-31/functions/{function}/invocations",
            server.trim_end_matches('/')
        );
        let mut response = self
            .agent
            .post(&url)
            .header("content-type", "application/json")
            .send(event.to_string())
            .unwrap_or_else(|e| panic!("invoking {function}: {e}"));
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().unwrap();
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, body)
    }

    fn invoke(&mut self, function: &'static str, event: &Value) -> Value {
        let (status, body) = self.invoke_raw(function, event);
        assert_eq!(status, 200, "{function} failed: {body}");
        body
    }

    /// Calls a Batch operation through the `api` function with an HTTP API (v2) event built
    /// from the `submit.json` sample; (HTTP status, body).
    fn api(&mut self, operation: &str, body: &Value) -> (u16, Value) {
        self.api_at(&format!("/v1/{operation}"), body)
    }

    /// [`Stand::api`] for any path (Trainyard's own operations are under `/trainyard/v1/`).
    fn api_at(&mut self, path: &str, body: &Value) -> (u16, Value) {
        self.api_as(None, path, body)
    }

    /// [`Stand::api_at`] as the IAM principal `caller` (the sample's when `None`).
    fn api_as(&mut self, caller: Option<&str>, path: &str, body: &Value) -> (u16, Value) {
        let mut event = fixture("api", "submit.json");
        if let Some(caller) = caller {
            event["requestContext"]["authorizer"]["iam"]["userArn"] = json!(caller);
        }
        event["rawPath"] = json!(path);
        event["requestContext"]["http"]["path"] = json!(path);
        event["body"] = json!(body.to_string());
        let response = self.invoke("api", &event);
        let status = response["statusCode"].as_u64().unwrap() as u16;
        let body = serde_json::from_str(response["body"].as_str().unwrap()).unwrap();
        (status, body)
    }

    fn submit(&mut self, name: &str, hyper: Value, extra: Value) -> String {
        self.submit_wide(name, 1, hyper, extra)
    }

    /// [`Stand::submit`] of a job needing `instances` instances.
    fn submit_wide(&mut self, name: &str, instances: u32, hyper: Value, extra: Value) -> String {
        let resources = json!({"ResourceConfig": {"InstanceType": "ml.g5.xlarge",
            "InstanceCount": instances, "VolumeSizeInGB": 50}});
        self.submit_shaped(name, hyper, resources, extra)
    }

    /// [`Stand::submit`] with the members of `payload_extra` set in the `CreateTrainingJob`
    /// payload (replacing the sample's) and those of `extra` in the request.
    fn submit_shaped(
        &mut self,
        name: &str,
        hyper: Value,
        payload_extra: Value,
        extra: Value,
    ) -> String {
        let mut payload = json!({
            "TrainingJobName": name,
            "RoleArn": ROLE,
            "AlgorithmSpecification": {"TrainingImage": "img:1", "TrainingInputMode": "File"},
            "HyperParameters": hyper,
            "OutputDataConfig": {"S3OutputPath": "s3://bucket/out"},
            "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 50},
            "StoppingCondition": {"MaxRuntimeInSeconds": 3600}
        });
        for (k, v) in payload_extra.as_object().unwrap() {
            payload[k] = v.clone();
        }
        let mut request = json!({
            "jobName": name,
            "jobQueue": "default",
            "serviceJobType": "SAGEMAKER_TRAINING",
            "serviceRequestPayload": payload.to_string(),
        });
        for (k, v) in extra.as_object().unwrap() {
            request[k] = v.clone();
        }
        let (status, body) = self.api("submitservicejob", &request);
        assert_eq!(status, 200, "submit {name}: {body}");
        body["jobId"].as_str().unwrap().to_owned()
    }

    fn describe(&mut self, job_id: &str) -> Value {
        let (status, body) = self.api("describeservicejob", &json!({"jobId": job_id}));
        assert_eq!(status, 200, "describe {job_id}: {body}");
        body
    }

    fn schedule(&mut self) -> Value {
        self.invoke("scheduler", &fixture("scheduler", "schedule.json"))
    }

    /// Ticks the schedule until job `job_id` has `attempts` attempts (the event-woken passes
    /// may have launched it already; an index that lags can leave it to a tick).
    fn tick_until_attempts(&mut self, job_id: &str, attempts: usize) {
        let start = Instant::now();
        while self.describe(job_id)["attempts"]
            .as_array()
            .map_or(0, Vec::len)
            < attempts
        {
            assert!(
                start.elapsed() < STATE_TIMEOUT,
                "{job_id} never had {attempts} attempts"
            );
            std::thread::sleep(POLL);
            self.schedule();
        }
    }

    /// What the stand allowed, per principal and action, and what it refused.
    fn audit(&self) -> Value {
        let mut response = self
            .agent
            .get(format!("{}/_stand/audit", self.stand))
            .call()
            .unwrap();
        serde_json::from_str(&response.body_mut().read_to_string().unwrap()).unwrap()
    }

    /// `DescribeTrainingJob` on the emulator.
    fn describe_training_job(&self, name: &str) -> Value {
        let mut response = self
            .agent
            .post(&self.sagemaker)
            .header("content-type", "application/x-amz-json-1.1")
            .header("x-amz-target", "SageMaker.DescribeTrainingJob")
            .send(json!({"TrainingJobName": name}).to_string())
            .unwrap();
        let text = response.body_mut().read_to_string().unwrap();
        assert_eq!(response.status().as_u16(), 200, "describe {name}: {text}");
        serde_json::from_str(&text).unwrap()
    }

    /// Puts each new state of training job `name` on the bus, as SageMaker does, and delivers
    /// what the rules route, until `stop` holds for (status, secondary); returns the events
    /// `training-events` got and its responses.
    fn deliver_until(
        &mut self,
        name: &str,
        seen: &mut Option<Seen>,
        stop: impl Fn(&str, &str) -> bool,
    ) -> (Vec<Value>, Vec<Value>) {
        let start = Instant::now();
        let mut events = Vec::new();
        let mut responses = Vec::new();
        loop {
            let detail = self.describe_training_job(name);
            let status = detail["TrainingJobStatus"].as_str().unwrap().to_owned();
            let secondary = detail["SecondaryStatus"].as_str().unwrap().to_owned();
            let state = (status.clone(), secondary.clone());
            if seen.as_ref() != Some(&state) {
                self.put_state_change(&detail);
                let got: Vec<Value> = self
                    .deliver_bus()
                    .into_iter()
                    .filter(|(f, _)| *f == "training-events")
                    .map(|(_, r)| r)
                    .collect();
                assert_eq!(got.len(), 1, "{name} {state:?}: the rule delivered {got:?}");
                responses.extend(got);
                events.push(detail);
                *seen = Some(state);
            }
            if stop(&status, &secondary) {
                return (events, responses);
            }
            assert!(
                start.elapsed() < STATE_TIMEOUT,
                "{name} stuck at {status}/{secondary}"
            );
            std::thread::sleep(POLL);
        }
    }
}

/// The rules' queues, from `TRAINYARD_E2E_ROUTES`.
fn routes() -> Vec<(&'static str, String)> {
    let text = std::fs::read_to_string(var("TRAINYARD_E2E_ROUTES")).unwrap();
    let routes: Vec<Value> = serde_json::from_str(&text).unwrap();
    routes
        .iter()
        .map(|r| {
            let function = match r["function"].as_str().unwrap() {
                "scheduler" => "scheduler",
                "training-events" => "training-events",
                other => panic!("a rule invokes {other}, which this test does not drive"),
            };
            (function, r["queue_url"].as_str().unwrap().to_owned())
        })
        .collect()
}

fn fixture(function: &str, file: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../events")
        .join(function)
        .join(file);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// A "SageMaker Training Job State Change" around a DescribeTrainingJob answer.
fn state_change(detail: &Value, n: usize) -> Value {
    let mut event = fixture("training-events", "completed.json");
    event["id"] = json!(format!(
        "e2e-{}-{n}",
        detail["TrainingJobName"].as_str().unwrap()
    ));
    event["resources"] = json!([detail["TrainingJobArn"].clone()]);
    event["detail"] = detail.clone();
    event
}

/// The SageMaker name of attempt `n` of a job (`attempt_name`, for names without odd
/// characters).
fn attempt(name: &str, job_id: &str, n: usize) -> String {
    format!("ty-{name}-{}-{n}", job_id.replace('-', ""))
}

fn terminal(status: &str, _: &str) -> bool {
    matches!(status, "Completed" | "Failed" | "Stopped")
}

/// Creates the table the functions were started with (the bus is the stack's, deployed by
/// `tests/stand/deploy_stack.py` with its rules).
fn create_table() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
        let dynamodb = aws_sdk_dynamodb::Client::new(&config);
        trainyard_aws::dynamodb::create_table(&dynamodb, &var("TRAINYARD_TABLE"))
            .await
            .unwrap();
    });
}

#[test]
fn jobs_live_their_whole_lives_through_the_four_functions() {
    create_table();
    let mut s = Stand::new();
    let began = Instant::now();

    // A request naming a role outside TRAINYARD_TRAINING_ROLE_ARNS, and a malformed one, are
    // refused as Batch refuses them; neither fails the function.
    let mut bad = fixture("api", "bad-request.json");
    let response = s.invoke("api", &bad);
    assert_eq!(response["statusCode"], 400, "{response}");
    bad["body"] = json!("{}");
    assert_eq!(s.invoke("api", &bad)["statusCode"], 400);
    let mut foreign_role = fixture("api", "submit.json");
    let body = foreign_role["body"]
        .as_str()
        .unwrap()
        .replace("role/SageMakerRole", "role/Admin");
    foreign_role["body"] = json!(body);
    let response = s.invoke("api", &foreign_role);
    assert_eq!(response["statusCode"], 400, "{response}");
    assert!(
        response["body"].as_str().unwrap().contains("role/Admin"),
        "{response}"
    );

    // 1. Submit → the Job Submitted event through its rule → a pass → SageMaker's events →
    // SUCCEEDED. The pass reads the job the event names, so an index that lags behind the
    // submit does not leave it waiting for the schedule.
    let ok = s.submit("e2e-ok", json!({"emulator_duration_s": "1"}), json!({}));
    assert_eq!(s.describe(&ok)["status"], "SUBMITTED");
    assert_eq!(s.launched_by_bus(), 1);
    assert_eq!(s.describe(&ok)["status"], "SCHEDULED");
    let mut seen = None;
    let (events, responses) = s.deliver_until(&attempt("e2e-ok", &ok, 1), &mut seen, terminal);
    assert!(
        responses
            .iter()
            .all(|r| r["outcome"] == "applied" || r["outcome"] == "ignored"),
        "{responses:?}"
    );
    let done = s.describe(&ok);
    assert_eq!(done["status"], "SUCCEEDED", "{done}");

    // 1b. A job wider than the environment waits. Why is shown from its line's waits, which
    // the scheduler function writes as its own role and the api function reads as its own: the
    // explanation's `asOf` is that document's cycle.
    let wide = s.submit_wide(
        "e2e-wide",
        10_000,
        json!({"emulator_duration_s": "1"}),
        json!({}),
    );
    assert_eq!(s.launched_by_bus(), 0);
    let waiting = s.describe(&wide);
    assert_eq!(waiting["status"], "RUNNABLE", "{waiting}");
    let reason = waiting["statusReason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("MISCONFIGURATION:SERVICE_ENVIRONMENT_MAX_RESOURCE - "),
        "{waiting}"
    );
    let (status, why) = s.api_at("/trainyard/v1/explainservicejob", &json!({"jobId": wide}));
    assert_eq!(status, 200, "{why}");
    assert!(why["asOf"].as_i64().is_some(), "{why}");
    assert_eq!(why["blockers"][0]["kind"], "NEVER_RUNS", "{why}");
    // A schedule tick also estimates when waiting jobs start (the scheduler's forecast round,
    // as its role): the reason then carries the estimate; this job's is beyond the horizon.
    let tick = s.schedule();
    assert!(tick["estimated"].as_u64().unwrap_or(0) >= 1, "{tick}");
    let waiting = s.describe(&wide);
    let reason = waiting["statusReason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("; start p50 beyond the horizon"),
        "{waiting}"
    );
    let (status, body) = s.api(
        "terminateservicejob",
        &json!({"jobId": wide, "reason": "e2e: wide case done"}),
    );
    assert_eq!(status, 200, "{body}");

    // 2. Delivery is at least once and unordered: every event again, latest first, changes
    // nothing.
    for (n, detail) in events.iter().enumerate().rev() {
        let again = s.invoke("training-events", &state_change(detail, n));
        assert_eq!(again["outcome"], "ignored", "{again}");
    }
    assert_eq!(s.describe(&ok), done);
    // A state change of a training job Trainyard did not launch never reaches the function.
    s.put_state_change(&json!({
        "TrainingJobName": "someone-elses-job",
        "TrainingJobArn": "arn:aws:sagemaker:us-east-1:123456789012:training-job/someone-elses-job",
        "TrainingJobStatus": "Completed",
        "SecondaryStatus": "Completed"
    }));
    let delivered = s.deliver_bus();
    assert!(
        delivered.iter().all(|(f, _)| *f != "training-events"),
        "{delivered:?}"
    );

    // 3. A capacity error puts the job back to RUNNABLE without using an attempt (it has no
    // retryStrategy: a counted attempt would have failed it). The capacity it gave back wakes a
    // pass, which may dispatch it again at once.
    let short = s.submit(
        "e2e-capacity",
        json!({"emulator_duration_s": "1", "emulator_outcome": "CapacityError"}),
        json!({}),
    );
    assert_eq!(s.launched_by_bus(), 1);
    let mut seen = None;
    let (_, responses) = s.deliver_until(&attempt("e2e-capacity", &short, 1), &mut seen, terminal);
    let ended = responses.last().unwrap();
    assert_eq!(ended["outcome"], "applied", "{ended}");
    assert_eq!(ended["status"], "RUNNABLE", "{ended}");
    let requeued = s.describe(&short);
    assert_ne!(requeued["status"], "FAILED", "{requeued}");
    assert!(
        requeued["attempts"][0]["statusReason"]
            .as_str()
            .unwrap()
            .contains("CapacityError"),
        "{requeued}"
    );
    let (status, body) = s.api(
        "terminateservicejob",
        &json!({"jobId": short, "reason": "e2e: capacity case done"}),
    );
    assert_eq!(status, 200, "{body}");

    // 4. A failed attempt is retried by the strategy, then the job fails for good.
    let flaky = s.submit(
        "e2e-retry",
        json!({"emulator_duration_s": "1", "emulator_outcome": "Failed:AlgorithmError: e2e"}),
        json!({"retryStrategy": {"attempts": 2}}),
    );
    assert_eq!(s.launched_by_bus(), 1);
    let mut seen = None;
    let (_, responses) = s.deliver_until(&attempt("e2e-retry", &flaky, 1), &mut seen, terminal);
    // Back to RUNNABLE for its retry (the pass its released capacity woke may already have
    // dispatched it again: the backoff is scaled down for the test, TRAINYARD_BACKOFF_SCALE).
    let ended = responses.last().unwrap();
    assert_eq!(ended["outcome"], "applied", "{ended}");
    assert_eq!(ended["status"], "RUNNABLE", "{ended}");
    // Keep ticking until the second attempt is launched.
    let start = Instant::now();
    while s.describe(&flaky)["attempts"].as_array().unwrap().len() < 2 {
        assert!(start.elapsed() < STATE_TIMEOUT, "no second attempt");
        std::thread::sleep(POLL);
        s.schedule();
    }
    let mut seen = None;
    s.deliver_until(&attempt("e2e-retry", &flaky, 2), &mut seen, terminal);
    let failed = s.describe(&flaky);
    assert_eq!(failed["status"], "FAILED", "{failed}");
    assert_eq!(failed["attempts"].as_array().unwrap().len(), 2, "{failed}");

    // 5. Terminating a running job: the retry function stops its attempt; the Stopped event
    // ends it.
    let long = s.submit("e2e-long", json!({"emulator_duration_s": "600"}), json!({}));
    assert_eq!(s.launched_by_bus(), 1);
    let name = attempt("e2e-long", &long, 1);
    let mut seen = None;
    s.deliver_until(&name, &mut seen, |_, secondary| secondary == "Training");
    assert_eq!(s.describe(&long)["status"], "RUNNING");
    let (status, body) = s.api(
        "terminateservicejob",
        &json!({"jobId": long, "reason": "e2e: terminate"}),
    );
    assert_eq!(status, 200, "{body}");
    let due = s.invoke("retry", &fixture("retry", "schedule.json"));
    assert!(due["stopsRequested"].as_u64().unwrap() >= 1, "{due}");
    s.deliver_until(&name, &mut seen, terminal);
    let stopped = s.describe(&long);
    assert_eq!(stopped["status"], "FAILED", "{stopped}");
    assert_eq!(stopped["isTerminated"], true, "{stopped}");

    // 6. Checkpoint-aware preemption on S3. A quota-managed queue whose owner lends its two
    // instances to a borrower; the emulated SageMaker copies each checkpoint a job saves into
    // its CheckpointConfig.S3Uri (`trainyard emulator --copy-checkpoints-to-s3`), as SageMaker
    // uploads a checkpoint directory. When the owner wants its capacity back, the scheduler
    // lists the borrowed jobs' checkpoints in S3 as its role (the stack's CheckpointBucketArns)
    // and stops the one that loses least: b3, which saved a moment ago, rather than b2, which
    // publishes nothing and so counts as having saved one observed interval ago (without the
    // listing, b3 would have run longer and lost more). b3 resumes under the same URI.
    let checkpoints = var("TRAINYARD_E2E_CHECKPOINT_BUCKET");
    s.s3_create_bucket(&checkpoints);
    let (status, env) = s.api(
        "createserviceenvironment",
        &json!({"serviceEnvironmentName": "e2e-teams", "serviceEnvironmentType": "SAGEMAKER_TRAINING",
            "capacityLimits": [{"maxCapacity": 4, "capacityUnit": "ml.g5.xlarge"}]}),
    );
    assert_eq!(status, 200, "{env}");
    let (status, policy) = s.api(
        "createschedulingpolicy",
        &json!({"name": "e2e-quota", "quotaSharePolicy": {"idleResourceAssignmentStrategy": "FIFO"}}),
    );
    assert_eq!(status, 200, "{policy}");
    let (status, queue) = s.api(
        "createjobqueue",
        &json!({"jobQueueName": "e2e-teams", "priority": 5, "jobQueueType": "SAGEMAKER_TRAINING",
            "schedulingPolicyArn": policy["arn"],
            "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": env["serviceEnvironmentArn"]}]}),
    );
    assert_eq!(status, 200, "{queue}");
    for share in ["owner", "borrower"] {
        let (status, body) = s.api(
            "createquotashare",
            &json!({"quotaShareName": share, "jobQueue": "e2e-teams",
                "capacityLimits": [{"maxCapacity": 2, "capacityUnit": "ml.g5.xlarge"}],
                "resourceSharingConfiguration": {"strategy": "LEND_AND_BORROW", "borrowLimit": 100},
                "preemptionConfiguration": {"inSharePreemption": "DISABLED"}}),
        );
        assert_eq!(status, 200, "{share}: {body}");
    }
    let in_share = |share: &str| json!({"jobQueue": "e2e-teams", "quotaShareName": share});
    let long_run = || json!({"emulator_duration_s": "120"});
    let b3_uri = format!("s3://{checkpoints}/e2e/b3");
    let mut borrowed = Vec::new();
    for name in ["e2e-b0", "e2e-b1", "e2e-b3"] {
        let (hyper, payload) = if name == "e2e-b3" {
            (
                json!({"emulator_duration_s": "120", "emulator_checkpoint_interval_s": "6"}),
                json!({"CheckpointConfig": {"S3Uri": b3_uri}}),
            )
        } else {
            (long_run(), json!({}))
        };
        borrowed.push(s.submit_shaped(name, hyper, payload, in_share("borrower")));
    }
    // b0 and b1 start within the borrower's own two, b3 on the owner's idle capacity.
    s.deliver_bus();
    for id in &borrowed {
        s.tick_until_attempts(id, 1);
    }
    let training = |_: &str, secondary: &str| secondary == "Training";
    let mut seen_b3 = None;
    for (name, id) in ["e2e-b0", "e2e-b1", "e2e-b3"].into_iter().zip(&borrowed) {
        let mut seen = None;
        let seen = if name == "e2e-b3" {
            &mut seen_b3
        } else {
            &mut seen
        };
        s.deliver_until(&attempt(name, id, 1), seen, training);
    }
    let b2 = s.submit_shaped("e2e-b2", long_run(), json!({}), in_share("borrower"));
    s.deliver_bus();
    s.tick_until_attempts(&b2, 1);
    s.deliver_until(&attempt("e2e-b2", &b2, 1), &mut None, training);
    // b3's second checkpoint in S3 (12 s of training): its interval is observed.
    let start = Instant::now();
    let markers = |s: &Stand| {
        s.s3_keys(&checkpoints, "e2e/b3/")
            .into_iter()
            .filter(|k| k.ends_with("/_SUCCESS"))
            .count()
    };
    while markers(&s) < 2 {
        assert!(
            start.elapsed() < STATE_TIMEOUT,
            "b3's checkpoints never reached S3"
        );
        std::thread::sleep(POLL);
    }
    let owner = s.submit_shaped(
        "e2e-o0",
        json!({"emulator_duration_s": "1"}),
        json!({}),
        in_share("owner"),
    );
    s.deliver_bus();
    assert_eq!(
        s.describe(&owner)["status"],
        "RUNNABLE",
        "the owner waits for its capacity to be given back"
    );
    // The preempting cycle's record names b3 and the checkpoint it counted from.
    let bucket = var("TRAINYARD_DECISIONS_BUCKET");
    let preemptions: Vec<_> = s
        .s3_keys(&bucket, "decisions/")
        .iter()
        .map(|key| serde_json::from_str::<DecisionRecord>(&s.s3_get(&bucket, key)).unwrap())
        .flat_map(|record| record.plan.preemptions)
        .collect();
    let first = preemptions
        .first()
        .expect("a preempting cycle was recorded");
    assert_eq!(
        first.victim_job_id.as_str(),
        borrowed[2],
        "b3 ({}) saved a moment ago and b2 ({b2}) publishes nothing, yet: {preemptions:?}",
        borrowed[2]
    );
    assert!(first.checkpoint_ms.is_some(), "{first:?}");
    let b3_first = attempt("e2e-b3", &borrowed[2], 1);
    s.deliver_until(&b3_first, &mut seen_b3, terminal);
    let b3 = s.describe(&borrowed[2]);
    assert_eq!(
        b3["status"], "RUNNABLE",
        "b3 preempted and back in line: {b3}"
    );
    assert_eq!(b3["preemptionSummary"]["preemptedAttemptCount"], 1, "{b3}");
    assert_eq!(s.describe(&b2)["status"], "RUNNING", "b2 was spared");
    // The owner runs on the instance b3 gave back; once it is done, b3 borrows again and
    // resumes: its second attempt saves checkpoints past the first one's under the same URI.
    s.tick_until_attempts(&owner, 1);
    s.deliver_until(&attempt("e2e-o0", &owner, 1), &mut None, terminal);
    assert_eq!(s.describe(&owner)["status"], "SUCCEEDED");
    s.tick_until_attempts(&borrowed[2], 2);
    let b3_second = attempt("e2e-b3", &borrowed[2], 2);
    let described = s.describe_training_job(&b3_second);
    assert_eq!(described["CheckpointConfig"]["S3Uri"], json!(b3_uri));
    assert_eq!(
        described["Environment"]["TRAINYARD_ATTEMPT"], "2",
        "{described}"
    );
    assert_eq!(described["Environment"]["TRAINYARD_PREEMPTIONS"], "1");
    let saved = |s: &Stand| {
        s.s3_keys(&checkpoints, "e2e/b3/")
            .iter()
            .filter_map(|k| {
                k.strip_suffix("/_SUCCESS")?
                    .rsplit("checkpoint-")
                    .next()?
                    .parse()
                    .ok()
            })
            .collect::<Vec<u64>>()
    };
    let before = saved(&s);
    let first_attempt_saved = *before.iter().max().unwrap();
    let start = Instant::now();
    while saved(&s).len() == before.len() {
        assert!(
            start.elapsed() < STATE_TIMEOUT,
            "b3's second attempt saved nothing"
        );
        std::thread::sleep(POLL);
    }
    let resumed = saved(&s).into_iter().max().unwrap();
    assert!(
        resumed > first_attempt_saved,
        "the second attempt's checkpoint ({resumed} ms of training) continues the first's \
         ({first_attempt_saved} ms)"
    );
    for id in borrowed.iter().chain([&b2]) {
        let (status, body) = s.api(
            "terminateservicejob",
            &json!({"jobId": id, "reason": "e2e: preemption case done"}),
        );
        assert_eq!(status, 200, "{body}");
    }
    s.invoke("retry", &fixture("retry", "schedule.json"));

    // Foreign and malformed events are acknowledged, not failed.
    for (file, outcome) in [
        ("foreign-training-job.json", "foreign"),
        ("invalid-shape.json", "malformed"),
    ] {
        let response = s.invoke("training-events", &fixture("training-events", file));
        assert_eq!(response["outcome"], outcome, "{file}: {response}");
    }
    assert_eq!(
        s.invoke("scheduler", &fixture("scheduler", "invalid.json"))["outcome"],
        "ignored"
    );

    // A team's own rule for the audit trail's events (the stack routes none of them), to a
    // queue this test reads.
    let audit_queue = s.aws(
        "sqs",
        "AmazonSQS.CreateQueue",
        &json!({"QueueName": "e2e-audit-records"}),
    )["QueueUrl"]
        .as_str()
        .unwrap()
        .to_owned();
    let audit_queue_arn = s.aws(
        "sqs",
        "AmazonSQS.GetQueueAttributes",
        &json!({"QueueUrl": audit_queue, "AttributeNames": ["QueueArn"]}),
    )["Attributes"]["QueueArn"]
        .clone();
    let bus = var("TRAINYARD_EVENT_BUS");
    s.aws(
        "events",
        "AWSEvents.PutRule",
        &json!({"Name": "e2e-audit", "EventBusName": bus,
            "EventPattern": json!({"source": ["trainyard"],
                "detail-type": ["Trainyard Audit Record"]}).to_string()}),
    );
    let targets = s.aws(
        "events",
        "AWSEvents.PutTargets",
        &json!({"Rule": "e2e-audit", "EventBusName": bus,
            "Targets": [{"Id": "queue", "Arn": audit_queue_arn}]}),
    );
    assert_eq!(targets["FailedEntryCount"], 0, "{targets}");

    // Access policies, written and read by the api function as its own role and enforced by
    // it: under a set that lets the sample's caller read and administer only, its submit is
    // refused; deleting the set lets every caller do everything again.
    let text = "permit(principal, action in \
                [Trainyard::Action::\"Read\", Trainyard::Action::\"Administer\"], resource);";
    let (status, body) = s.api_at(
        "/trainyard/v1/putaccesspolicies",
        &json!({"policies": text}),
    );
    assert_eq!(status, 200, "{body}");
    let (status, body) = s.api_at("/trainyard/v1/getaccesspolicies", &json!({}));
    assert_eq!((status, &body["policies"]), (200, &json!(text)), "{body}");
    let (status, body) = s.api("submitservicejob", &json!({"jobName": "refused"}));
    assert_eq!(
        (status, &body["__type"]),
        (403, &json!("AccessDeniedException")),
        "{body}"
    );
    // A policy on an IAM tag: a role tagged team=e2e in the stand's IAM (which the api function
    // reads as its own role) gets past the gate (its empty submit is then refused as invalid,
    // 400); the sample's untagged caller is still refused (403).
    s.iam(
        "CreateRole",
        &[
            ("RoleName", "e2e-tagged"),
            (
                "AssumeRolePolicyDocument",
                "{\"Version\":\"2012-10-17\",\"Statement\":[]}",
            ),
            ("Tags.member.1.Key", "team"),
            ("Tags.member.1.Value", "e2e"),
        ],
    );
    let tagged = format!(
        "{text}\npermit(principal, action == Trainyard::Action::\"SubmitServiceJob\", resource) when {{ principal.hasTag(\"team\") && principal.getTag(\"team\") == \"e2e\" }};"
    );
    let (status, body) = s.api_at(
        "/trainyard/v1/putaccesspolicies",
        &json!({"policies": tagged}),
    );
    assert_eq!(status, 200, "{body}");
    let tagged_caller = "arn:aws:sts::123456789012:assumed-role/e2e-tagged/carol";
    let (status, body) = s.api_as(
        Some(tagged_caller),
        "/v1/submitservicejob",
        &json!({"jobName": "tagged"}),
    );
    assert_eq!(
        (status, &body["__type"]),
        (400, &json!("ClientException")),
        "{body}"
    );
    let (status, body) = s.api("submitservicejob", &json!({"jobName": "untagged"}));
    assert_eq!(status, 403, "{body}");
    let (status, body) = s.api_at("/trainyard/v1/deleteaccesspolicies", &json!({}));
    assert_eq!(status, 200, "{body}");
    let (status, body) = s.api_at("/trainyard/v1/getaccesspolicies", &json!({}));
    assert_eq!((status, &body["policies"]), (200, &Value::Null), "{body}");

    // The audit trail, kept in DynamoDB by the api function: the put, the refused submit and
    // the delete, newest first, each as the sample's caller.
    let (status, body) = s.api_at(
        "/trainyard/v1/listauditrecords",
        &json!({"action": "SubmitServiceJob", "deniedOnly": true}),
    );
    assert_eq!(status, 200, "{body}");
    let refused = &body["auditRecords"][0];
    assert_eq!(
        (&refused["outcome"], &refused["decidedBy"]),
        (
            &json!("AccessDeniedException"),
            &json!("no policy permits it")
        ),
        "{body}"
    );
    let caller = refused["principal"].as_str().unwrap().to_owned();
    assert!(caller.starts_with("arn:aws:sts::"), "{refused}");
    let (status, body) = s.api_at(
        "/trainyard/v1/listauditrecords",
        &json!({"principal": caller, "maxResults": 3}),
    );
    assert_eq!(status, 200, "{body}");
    let actions: Vec<&str> = body["auditRecords"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        [
            "DeleteAccessPolicies",
            "SubmitServiceJob",
            "PutAccessPolicies"
        ],
        "{body}"
    );
    // The tagged caller's submit is recorded as allowed, then refused as invalid.
    let (status, body) = s.api_at(
        "/trainyard/v1/listauditrecords",
        &json!({"principal": tagged_caller}),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["auditRecords"][0]["allowed"], true, "{body}");
    assert_eq!(
        body["auditRecords"][0]["outcome"], "ClientException",
        "{body}"
    );
    // And published: the team's rule delivered the refusal.
    let delivered = s.aws(
        "sqs",
        "AmazonSQS.ReceiveMessage",
        &json!({"QueueUrl": audit_queue, "MaxNumberOfMessages": 10}),
    );
    let published: Vec<Value> = delivered["Messages"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|m| serde_json::from_str(m["Body"].as_str().unwrap()).unwrap())
        .collect();
    assert!(
        published
            .iter()
            .any(|e: &Value| e["detail-type"] == "Trainyard Audit Record"
                && e["detail"]["action"] == "SubmitServiceJob"
                && e["detail"]["allowed"] == false),
        "no refused submit among the audit events the rule delivered: {published:?}"
    );

    // Every cycle the scheduler ran with jobs to plan left its decision record in the stack's
    // bucket (as the scheduler's role), summarised in the table; each replays to its plan.
    let bucket = var("TRAINYARD_DECISIONS_BUCKET");
    let keys = s.s3_keys(&bucket, "decisions/");
    assert!(!keys.is_empty(), "no decision records in {bucket}");
    for key in &keys {
        let record: DecisionRecord = serde_json::from_str(&s.s3_get(&bucket, key)).unwrap();
        assert!(
            record.intact(),
            "{key}: the snapshot does not match its digest"
        );
        assert!(
            record.replay(None).same,
            "{key}: replays to other decisions"
        );
    }
    let days: std::collections::BTreeSet<&str> =
        keys.iter().filter_map(|k| k.split('/').nth(1)).collect();
    let mut summaries = 0;
    for day in days {
        let found = s.aws(
            "dynamodb",
            "DynamoDB_20120810.Query",
            &json!({"TableName": var("TRAINYARD_TABLE"), "KeyConditionExpression": "pk = :pk",
                "ExpressionAttributeValues": {":pk": {"S": format!("DECISION#{day}")}}}),
        );
        summaries += found["Count"].as_u64().unwrap();
    }
    assert_eq!(summaries, keys.len() as u64, "one summary per record");
    // What the scheduler's forecaster learnt is kept beside them (its first round found none
    // and read that as NoSuchKey, which takes s3:ListBucket): at least the jobs it saw arrive.
    let learned: Value =
        serde_json::from_str(&s.s3_get(&bucket, "forecaster/learned.json")).unwrap();
    assert!(
        learned["arrived"].as_array().is_some_and(|a| !a.is_empty())
            || learned["history"]["arrivals"]
                .as_array()
                .is_some_and(|a| !a.is_empty()),
        "the forecaster kept nothing it saw: {learned}"
    );

    // Every function ran as its own role, and no call any of them made was refused.
    let audit = s.audit();
    assert_eq!(
        audit["refused"],
        json!([]),
        "the stand refused calls: {audit}"
    );
    for function in ["api", "scheduler", "training-events", "retry"] {
        let role = audit["allowed"]
            .as_object()
            .unwrap()
            .keys()
            .find(|principal| principal.ends_with(&format!("/{function}")));
        assert!(role.is_some(), "no call as {function}'s role: {audit}");
    }

    // And the faults were met: each kind the stand was set to inject was injected (the rates in
    // scripts/lib/lambda.sh expect 7 to 12 of each in a run of ~250 DynamoDB requests).
    let settings = audit["faults"]["settings"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    for (kind, rate) in &settings {
        if ["seed", "index_lag_ms", "attempts"].contains(&kind.as_str())
            || rate.as_f64() == Some(0.0)
        {
            continue;
        }
        let injected = audit["faults"]["injected"][kind].as_u64().unwrap_or(0);
        assert!(injected > 0, "no {kind} fault was injected: {audit}");
    }

    println!(
        "lambda e2e: {:?} invocations in {:.1} s; DynamoDB faults {}",
        s.invocations,
        began.elapsed().as_secs_f64(),
        audit["faults"]
    );
}

/// `value` percent-encoded for a form body (unreserved characters kept).
fn urlencoding(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
