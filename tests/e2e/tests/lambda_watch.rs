//! End to end on the real function binaries: `cargo lambda watch` runs `api`, `scheduler`,
//! `training-events` and `retry`, each with the credentials of its own role as the SAM template
//! defines it, against the AWS stand (`tests/stand/aws_stand.py`: moto's DynamoDB and
//! EventBridge, and the SageMaker emulator, behind a gate that refuses what a role does not
//! allow, as IAM does); this test invokes them the way API Gateway and EventBridge would, checks
//! each job's story through the API, and at the end that the stand refused nothing and heard from
//! every function's role. The functions tolerate some failed calls (a describe that fails is
//! retried next tick), so a refusal is found by that audit, not only by a failed step.
//!
//! `scripts/lib/lambda.sh` (`run_lambda_e2e`) starts the servers and sets:
//!
//! - `TRAINYARD_E2E_LAMBDA_API`, `_SCHEDULER`, `_TRAINING_EVENTS`, `_RETRY`: each function's
//!   watch server (`http://127.0.0.1:PORT`);
//! - `TRAINYARD_E2E_STAND` (the stand, also every `AWS_ENDPOINT_URL_*`) and
//!   `TRAINYARD_E2E_EMULATOR` (the emulator itself, which this test reads unsigned), with the
//!   account's root key and a region;
//! - `TRAINYARD_TABLE`, `TRAINYARD_EVENT_BUS`: what the functions were started with (this test
//!   creates both before the first invocation, so the `api` function's cold start finds them).
//!
//! SageMaker's state-change events are built the way EventBridge builds them: the emulator's
//! `DescribeTrainingJob` answer (the same shape as the event's `detail`) in an envelope. Every
//! wait is bounded.

#![cfg(feature = "lambda-e2e")]
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

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
        }
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
        let mut event = fixture("api", "submit.json");
        let path = format!("/v1/{operation}");
        event["rawPath"] = json!(path);
        event["requestContext"]["http"]["path"] = json!(path);
        event["body"] = json!(body.to_string());
        let response = self.invoke("api", &event);
        let status = response["statusCode"].as_u64().unwrap() as u16;
        let body = serde_json::from_str(response["body"].as_str().unwrap()).unwrap();
        (status, body)
    }

    fn submit(&mut self, name: &str, hyper: Value, extra: Value) -> String {
        let payload = json!({
            "TrainingJobName": name,
            "RoleArn": ROLE,
            "AlgorithmSpecification": {"TrainingImage": "img:1", "TrainingInputMode": "File"},
            "HyperParameters": hyper,
            "OutputDataConfig": {"S3OutputPath": "s3://bucket/out"},
            "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 50},
            "StoppingCondition": {"MaxRuntimeInSeconds": 3600}
        });
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

    /// Delivers each new state of training job `name` to `training-events`, as EventBridge
    /// would, until `stop` holds for (status, secondary); returns the last event delivered and
    /// every response.
    fn deliver_until(
        &mut self,
        name: &str,
        seen: &mut Option<Seen>,
        stop: impl Fn(&str, &str) -> bool,
    ) -> (Value, Vec<Value>) {
        let start = Instant::now();
        let mut responses = Vec::new();
        let mut last = Value::Null;
        loop {
            let detail = self.describe_training_job(name);
            let status = detail["TrainingJobStatus"].as_str().unwrap().to_owned();
            let secondary = detail["SecondaryStatus"].as_str().unwrap().to_owned();
            let state = (status.clone(), secondary.clone());
            if seen.as_ref() != Some(&state) {
                let event = state_change(&detail, responses.len());
                responses.push(self.invoke("training-events", &event));
                last = event;
                *seen = Some(state);
            }
            if stop(&status, &secondary) {
                return (last, responses);
            }
            assert!(
                start.elapsed() < STATE_TIMEOUT,
                "{name} stuck at {status}/{secondary}"
            );
            std::thread::sleep(POLL);
        }
    }
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

/// Creates the table and the bus the functions were started with.
fn create_table_and_bus() {
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
        aws_sdk_eventbridge::Client::new(&config)
            .create_event_bus()
            .name(var("TRAINYARD_EVENT_BUS"))
            .send()
            .await
            .unwrap();
    });
}

#[test]
fn jobs_live_their_whole_lives_through_the_four_functions() {
    create_table_and_bus();
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

    // 1. Submit → cycle → SageMaker's events → SUCCEEDED.
    let ok = s.submit("e2e-ok", json!({"emulator_duration_s": "1"}), json!({}));
    assert_eq!(s.describe(&ok)["status"], "SUBMITTED");
    let pass = s.invoke("scheduler", &fixture("scheduler", "job-submitted.json"));
    assert_eq!(pass["outcome"], "ran", "{pass}");
    assert!(pass["accepted"].as_u64().unwrap() >= 1, "{pass}");
    assert_eq!(pass["launched"], 1, "{pass}");
    assert_eq!(s.describe(&ok)["status"], "SCHEDULED");
    let mut seen = None;
    let (last, responses) = s.deliver_until(&attempt("e2e-ok", &ok, 1), &mut seen, terminal);
    assert!(
        responses
            .iter()
            .all(|r| r["outcome"] == "applied" || r["outcome"] == "ignored"),
        "{responses:?}"
    );
    let done = s.describe(&ok);
    assert_eq!(done["status"], "SUCCEEDED", "{done}");

    // 2. A duplicated event changes nothing.
    let again = s.invoke("training-events", &last);
    assert_eq!(again["outcome"], "ignored", "{again}");
    assert_eq!(s.describe(&ok), done);
    let released = s.invoke("scheduler", &fixture("scheduler", "capacity-released.json"));
    assert_eq!(released["outcome"], "ran", "{released}");

    // 3. A capacity error puts the job back to RUNNABLE without using an attempt.
    let short = s.submit(
        "e2e-capacity",
        json!({"emulator_duration_s": "1", "emulator_outcome": "CapacityError"}),
        json!({}),
    );
    assert_eq!(s.schedule()["launched"], 1);
    let mut seen = None;
    s.deliver_until(&attempt("e2e-capacity", &short, 1), &mut seen, terminal);
    let requeued = s.describe(&short);
    assert_eq!(requeued["status"], "RUNNABLE", "{requeued}");
    assert!(
        requeued["statusReason"]
            .as_str()
            .unwrap()
            .starts_with("CAPACITY:"),
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
    s.schedule();
    let mut seen = None;
    s.deliver_until(&attempt("e2e-retry", &flaky, 1), &mut seen, terminal);
    let between = s.describe(&flaky);
    assert_eq!(between["status"], "RUNNABLE", "{between}");
    // The backoff is scaled down for the test (TRAINYARD_BACKOFF_SCALE); keep ticking until
    // the second attempt is launched.
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
    s.schedule();
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

    println!(
        "lambda e2e: {:?} invocations in {:.1} s",
        s.invocations,
        began.elapsed().as_secs_f64()
    );
}
