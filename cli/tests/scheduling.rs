//! End-to-end tests of the scheduling loop in local mode: the real `trainyard up` binary with
//! its in-process emulated SageMaker, on a free port and a temporary data directory. Jobs steer
//! the emulator through hyperparameters (`emulator_duration_s`, `emulator_outcome`). Every wait
//! has a deadline.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{BIN, Server};

/// Longest a test waits for jobs to reach a state.
const DEADLINE: Duration = Duration::from_secs(60);

fn data_dir() -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("data");
    (tmp, dir)
}

/// A SubmitServiceJob request: `instances` of ml.m5.large, the given hyperparameters, and
/// `extra` top-level members (retryStrategy, timeoutConfig, …).
fn job(queue: &str, name: &str, instances: u32, hyper: Value, extra: Value) -> Value {
    let payload = json!({
        "TrainingJobName": name,
        "RoleArn": "arn:aws:iam::000000000000:role/Test",
        "AlgorithmSpecification": {"TrainingImage": "img", "TrainingInputMode": "File"},
        "HyperParameters": hyper,
        "OutputDataConfig": {"S3OutputPath": "s3://bucket/out"},
        "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": instances, "VolumeSizeInGB": 10},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
    });
    let mut request = json!({
        "jobName": name,
        "jobQueue": queue,
        "serviceJobType": "SAGEMAKER_TRAINING",
        "serviceRequestPayload": payload.to_string(),
    });
    if let (Some(request), Some(extra)) = (request.as_object_mut(), extra.as_object()) {
        request.extend(extra.clone());
    }
    request
}

fn submit(server: &Server, request: &Value) -> String {
    server.api("submitservicejob", request)["jobId"]
        .as_str()
        .expect("a job id")
        .to_owned()
}

fn describe(server: &Server, job_id: &str) -> Value {
    server.api("describeservicejob", &json!({ "jobId": job_id }))
}

/// Polls the job until `done` holds; returns the description. Panics with it at the deadline.
fn wait_for(server: &Server, job_id: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let job = describe(server, job_id);
        if done(&job) {
            return job;
        }
        assert!(
            Instant::now() < deadline,
            "job {job_id} not {what} after {DEADLINE:?}: {job:#}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn status_is(status: &'static str) -> impl Fn(&Value) -> bool {
    move |job| job["status"] == json!(status)
}

#[test]
fn a_hundred_jobs_on_the_three_demo_queues_all_succeed_and_dispatch_in_queue_priority_order() {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &[]);
    // A job holding all 8 instances makes every later job wait, so the order they are
    // dispatched in is the scheduler's choice, not the order they happened to arrive in.
    let blocker = submit(
        &server,
        &job(
            "production",
            "blocker",
            8,
            json!({"emulator_duration_s": "6"}),
            json!({}),
        ),
    );
    wait_for(&server, &blocker, "dispatched", |j| {
        j["scheduledAt"].is_i64()
    });
    let tiers = ["sweeps", "research", "production"];
    let mut submitted: Vec<(usize, String)> = Vec::new();
    // Lowest priority first, so that arrival order is the opposite of the expected order.
    for (tier, queue) in tiers.iter().enumerate() {
        let count = if tier == 0 { 34 } else { 33 };
        for n in 0..count {
            let name = format!("{queue}-{n}");
            let id = submit(
                &server,
                &job(
                    queue,
                    &name,
                    1,
                    json!({"emulator_duration_s": "0.1"}),
                    json!({}),
                ),
            );
            submitted.push((tier, id));
        }
    }
    assert_eq!(submitted.len(), 100);
    assert_ne!(
        describe(&server, &blocker)["status"],
        json!("SUCCEEDED"),
        "the blocker ended before every job was submitted; the order check would prove nothing"
    );

    let mut scheduled: Vec<(usize, i64)> = Vec::new();
    for (tier, id) in &submitted {
        let done = wait_for(&server, id, "SUCCEEDED", status_is("SUCCEEDED"));
        assert_eq!(
            done["attempts"].as_array().map(Vec::len),
            Some(1),
            "{done:#}"
        );
        scheduled.push((*tier, done["scheduledAt"].as_i64().expect("scheduledAt")));
    }
    // Every job of a higher-priority queue was dispatched no later than any job of a lower one.
    for higher in 1..tiers.len() {
        let latest_higher = scheduled
            .iter()
            .filter(|(t, _)| *t == higher)
            .map(|(_, at)| *at)
            .max();
        let earliest_lower = scheduled
            .iter()
            .filter(|(t, _)| *t == higher - 1)
            .map(|(_, at)| *at)
            .min();
        assert!(
            latest_higher <= earliest_lower,
            "{} dispatched up to {latest_higher:?}, but {} started at {earliest_lower:?}",
            tiers[higher],
            tiers[higher - 1]
        );
    }
}

#[test]
fn a_capacity_error_puts_the_job_back_to_runnable_without_using_an_attempt() {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &[]);
    let id = submit(
        &server,
        &job(
            "research",
            "no-capacity",
            1,
            json!({"emulator_outcome": "CapacityError"}),
            json!({"retryStrategy": {"attempts": 1}}),
        ),
    );
    let job = wait_for(
        &server,
        &id,
        "back in RUNNABLE after a capacity error",
        |j| {
            j["status"] == json!("RUNNABLE")
                && j["attempts"][0]["statusReason"]
                    .as_str()
                    .is_some_and(|r| r.contains("CapacityError"))
        },
    );
    // With one attempt allowed, a failure that used it would have failed the job.
    assert!(job["scheduledAt"].is_i64(), "it was dispatched: {job:#}");
    assert_ne!(job["status"], json!("FAILED"));
    // The capacity reason is set when the job goes back; the next cycle may already have
    // replaced it with the backoff it waits out (see the report on issue 3).
    let reason = job["statusReason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY")
            || reason.starts_with("BACKOFF"),
        "{job:#}"
    );
    let metrics = scrape(&server);
    assert!(
        metric(&metrics, "trainyard_capacity_errors_total") >= 1.0,
        "{metrics}"
    );
}

#[test]
fn evaluate_on_exit_retries_or_exits_as_the_rule_says() {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &["--backoff-scale", "0.01"]);
    let failing =
        json!({"emulator_duration_s": "0.1", "emulator_outcome": "Failed:AlgorithmError: boom"});
    let retry = submit(
        &server,
        &job(
            "research",
            "retry",
            1,
            failing.clone(),
            json!({"retryStrategy": {"attempts": 2, "evaluateOnExit": [
                {"onReason": "AlgorithmError*", "action": "RETRY"}]}}),
        ),
    );
    let exit = submit(
        &server,
        &job(
            "research",
            "exit",
            1,
            failing,
            json!({"retryStrategy": {"attempts": 3, "evaluateOnExit": [
                {"onReason": "AlgorithmError*", "action": "EXIT"}]}}),
        ),
    );
    let retried = wait_for(&server, &retry, "FAILED", status_is("FAILED"));
    assert_eq!(
        retried["attempts"].as_array().map(Vec::len),
        Some(2),
        "{retried:#}"
    );
    let exited = wait_for(&server, &exit, "FAILED", status_is("FAILED"));
    assert_eq!(
        exited["attempts"].as_array().map(Vec::len),
        Some(1),
        "{exited:#}"
    );
    assert!(metric(&scrape(&server), "trainyard_retries_total") >= 1.0);
}

#[test]
fn an_attempt_past_its_timeout_is_stopped_and_the_job_fails() {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &[]);
    let id = submit(
        &server,
        &job(
            "research",
            "slow",
            1,
            json!({"emulator_duration_s": "120"}),
            json!({"timeoutConfig": {"attemptDurationSeconds": 1}}),
        ),
    );
    let job = wait_for(&server, &id, "FAILED", status_is("FAILED"));
    assert!(
        job["statusReason"]
            .as_str()
            .is_some_and(|r| r.contains("timeout")),
        "{job:#}"
    );
    assert!(job["stoppedAt"].is_i64());
}

#[test]
fn terminating_a_runnable_or_a_running_job_fails_it_with_the_reason() {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &[]);
    // The running job holds every instance, so the second one waits RUNNABLE.
    let running = submit(
        &server,
        &job(
            "research",
            "long",
            8,
            json!({"emulator_duration_s": "300"}),
            json!({}),
        ),
    );
    let waiting = submit(
        &server,
        &job(
            "sweeps",
            "waiting",
            1,
            json!({"emulator_duration_s": "1"}),
            json!({}),
        ),
    );
    wait_for(&server, &running, "RUNNING", status_is("RUNNING"));
    wait_for(&server, &waiting, "RUNNABLE", status_is("RUNNABLE"));
    for (id, reason) in [(&waiting, "not needed"), (&running, "wrong data")] {
        server.api(
            "terminateservicejob",
            &json!({"jobId": id, "reason": reason}),
        );
        let job = wait_for(&server, id, "FAILED", status_is("FAILED"));
        assert_eq!(job["isTerminated"], json!(true), "{job:#}");
        assert!(
            job["statusReason"]
                .as_str()
                .is_some_and(|r| r.contains(reason)),
            "{job:#}"
        );
    }
}

/// `GET /metrics` as text.
fn scrape(server: &Server) -> String {
    let agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .new_agent();
    agent
        .get(&format!("{}/metrics", server.url))
        .call()
        .expect("GET /metrics")
        .body_mut()
        .read_to_string()
        .expect("body")
}

/// The sum of every sample of `name` (any labels).
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn metrics_parse_as_prometheus_text_and_count_jobs_dispatches_and_waits() {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &[]);
    let ids: Vec<String> = (0..3)
        .map(|n| {
            submit(
                &server,
                &job(
                    "research",
                    &format!("m-{n}"),
                    1,
                    json!({"emulator_duration_s": "0.1"}),
                    json!({}),
                ),
            )
        })
        .collect();
    for id in &ids {
        wait_for(&server, id, "SUCCEEDED", status_is("SUCCEEDED"));
    }
    let text = scrape(&server);
    // Every line is a comment or `name{labels} value` with a numeric value.
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (series, value) = line.rsplit_once(' ').expect("a value");
        assert!(value.parse::<f64>().is_ok(), "{line}");
        assert!(series.starts_with("trainyard_"), "{line}");
    }
    assert!(
        text.contains("trainyard_jobs{queue=\"research\",share=\"\",status=\"SUCCEEDED\"} 3")
            || metric(&text, "trainyard_jobs") >= 3.0,
        "{text}"
    );
    assert_eq!(
        metric(&text, "trainyard_environment_instances_limit"),
        8.0,
        "{text}"
    );
    assert_eq!(
        metric(&text, "trainyard_environment_instances_in_use"),
        0.0,
        "{text}"
    );
    assert_eq!(metric(&text, "trainyard_dispatches_total"), 3.0, "{text}");
    assert_eq!(
        metric(&text, "trainyard_wait_time_seconds_count"),
        3.0,
        "{text}"
    );
    assert_eq!(
        metric(&text, "trainyard_dispatch_latency_seconds_count"),
        3.0,
        "{text}"
    );
    // Labelled by queue; nothing waits now.
    assert!(
        text.contains("trainyard_wait_time_seconds_count{queue=\"research\"} 3\n"),
        "{text}"
    );
    assert!(
        text.contains("trainyard_oldest_runnable_job_age_seconds{queue=\"research\"} 0\n"),
        "{text}"
    );
    assert_eq!(metric(&text, "trainyard_pending_jobs"), 0.0, "{text}");
}

/// `trainyard events --follow` (plus `extra`) against the server, once it is connected: a
/// change submitted after this returns is not missed. The rest of its stderr comes with it
/// (kept open, so that the follower can still write there).
fn follow(
    server: &Server,
    extra: &[&str],
) -> (std::process::Child, BufReader<std::process::ChildStderr>) {
    let mut follower = Command::new(BIN)
        .args(["events", "--follow", "--endpoint", &server.url])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn trainyard events");
    let mut stderr = BufReader::new(follower.stderr.take().expect("stderr"));
    let mut first = String::new();
    stderr.read_line(&mut first).expect("a line on stderr");
    assert!(first.contains("Following"), "{first}");
    (follower, stderr)
}

#[test]
fn events_follow_prints_each_change_as_it_happens() {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &[]);
    let (mut follower, _stderr) = follow(&server, &[]);

    let id = submit(
        &server,
        &job(
            "research",
            "followed",
            1,
            json!({"emulator_duration_s": "0.2"}),
            json!({}),
        ),
    );
    let (lines, received) = std::sync::mpsc::channel();
    let stdout = follower.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + DEADLINE;
    let mut seen: Vec<String> = Vec::new();
    while !seen
        .iter()
        .any(|l| l.contains(&id) && l.ends_with("SUCCEEDED"))
    {
        let left = deadline.saturating_duration_since(Instant::now());
        match received.recv_timeout(left) {
            Ok(line) => seen.push(line),
            Err(_) => break,
        }
    }
    let _ = follower.kill();
    let _ = follower.wait();
    let statuses: Vec<&str> = seen
        .iter()
        .filter(|l| l.contains(&id))
        .filter_map(|l| l.split_whitespace().last())
        .collect();
    assert_eq!(statuses, LIFECYCLE, "{seen:#?}");
    assert!(seen.iter().all(|l| l.contains("research")), "{seen:#?}");
}

/// A job RUNNING when the server is killed (`kill -9`) does not stay RUNNING after a restart.
/// Its training job lived in the old process's emulator, which keeps no state, so
/// reconciliation finds none: it ends the attempt as LOST (without using one of the job's
/// attempts: the job has one), frees its capacity, and the job runs again, to success.
#[test]
fn a_job_running_when_the_server_is_killed_runs_again_after_a_restart() {
    let (_tmp, dir) = data_dir();
    let mut server = Server::start(&dir, &[]);
    let id = submit(
        &server,
        &job(
            "research",
            "survivor",
            1,
            json!({"emulator_duration_s": "5"}),
            json!({}),
        ),
    );
    wait_for(&server, &id, "RUNNING", status_is("RUNNING"));
    server.kill();

    let server = Server::start(&dir, &["--quiet-ms", "500"]);
    let job = wait_for(&server, &id, "SUCCEEDED", status_is("SUCCEEDED"));
    let attempts = job["attempts"].as_array().expect("attempts");
    assert_eq!(attempts.len(), 2, "{job:#}");
    let lost = attempts[0]["statusReason"].as_str().unwrap_or_default();
    assert!(lost.starts_with("LOST - "), "{job:#}");

    // `describe` shows one row per attempt, the lost one first.
    let table = server.cli(&["describe", &id]).stdout;
    let rows: Vec<&str> = table
        .lines()
        .skip_while(|l| *l != "Attempts:")
        .skip(2)
        .take_while(|l| l.starts_with("  "))
        .collect();
    assert_eq!(rows.len(), 2, "{table}");
    assert!(
        rows[0].trim_start().starts_with("1 ") && rows[0].contains("LOST - "),
        "{table}"
    );
    assert!(rows[1].trim_start().starts_with("2 "), "{table}");
}

/// `events --limit N` exits as soon as it has printed the Nth change, without waiting for
/// another: here the job's six changes, the last of the stream.
#[test]
fn events_with_a_limit_exit_after_the_last_change_they_print() {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &[]);
    let (mut follower, _stderr) = follow(&server, &["--limit", "6"]);
    let id = submit(
        &server,
        &job(
            "research",
            "limited",
            1,
            json!({"emulator_duration_s": "0.2"}),
            json!({}),
        ),
    );
    wait_for(&server, &id, "SUCCEEDED", status_is("SUCCEEDED"));
    let out = succeeded(
        &mut follower,
        "events --limit 6, after the job's sixth change",
    );
    assert_eq!(out.lines().count(), 6, "{out}");
    assert!(
        out.lines().last().is_some_and(|l| l.ends_with("SUCCEEDED")),
        "{out}"
    );
}

/// `events` on a server that stops: it says the stream ended and exits non-zero, rather than
/// returning as if it had followed everything.
#[test]
fn events_report_a_server_that_goes_away_and_exit_non_zero() {
    let (_tmp, dir) = data_dir();
    let mut server = Server::start(&dir, &[]);
    let (mut follower, mut stderr) = follow(&server, &[]);
    assert!(server.terminate().success());

    let status = support::exit_within(
        &mut follower,
        Duration::from_secs(10),
        "events, after the server stopped",
    );
    let mut said = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut said).expect("stderr");
    assert!(!status.success(), "events exited {status}: {said}");
    assert!(
        said.contains("event stream") && said.contains("ended"),
        "{said}"
    );
}

/// `events --job ID` prints where that job is, then its changes only (though another job
/// changes beside it), and ends with the job.
#[test]
fn events_for_one_job_print_where_it_is_then_its_changes_until_it_ends() {
    let (_tmp, dir) = data_dir();
    // Both jobs stay SUBMITTED long enough for the follower to connect before either moves.
    let server = Server::start(&dir, &["--settle-ms", "1500"]);
    let quick = json!({"emulator_duration_s": "0.2"});
    let mine = submit(
        &server,
        &job("research", "mine", 1, quick.clone(), json!({})),
    );
    let other = submit(&server, &job("research", "other", 1, quick, json!({})));
    let (mut follower, _stderr) = follow(&server, &["--job", &mine]);

    let out = succeeded(&mut follower, "events --job");
    let statuses: Vec<&str> = out
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .collect();
    assert_eq!(statuses, LIFECYCLE, "{out}");
    assert!(out.lines().all(|l| l.contains(&mine)), "{out}");
    assert!(!out.contains(&other), "{out}");

    // A job that has ended: its status, and done.
    let (mut late, _stderr) = follow(&server, &["--job", &mine]);
    let out = succeeded(&mut late, "events --job, ended");
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(out.trim_end().ends_with("SUCCEEDED"), "{out}");
}

/// `up` serves SageMaker's own API (awsJson1_1 on `/`) for the training jobs its loop ran, so
/// SageMaker clients pointed at it (`AWS_ENDPOINT_URL_SAGEMAKER`) can describe them.
#[test]
fn the_training_job_of_an_attempt_is_described_by_sagemakers_api_on_the_same_port() {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &[]);
    let id = submit(
        &server,
        &job(
            "research",
            "described",
            1,
            json!({"emulator_duration_s": "0.2"}),
            json!({}),
        ),
    );
    let done = wait_for(&server, &id, "SUCCEEDED", status_is("SUCCEEDED"));
    let arn = done["latestAttempt"]["serviceResourceId"]["value"]
        .as_str()
        .expect("the attempt's training job ARN");
    let name = arn.rsplit('/').next().expect("a name after the last /");

    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .new_agent();
    let mut response = agent
        .post(&format!("{}/", server.url))
        .header("X-Amz-Target", "SageMaker.DescribeTrainingJob")
        .header("Content-Type", "application/x-amz-json-1.1")
        .send(json!({ "TrainingJobName": name }).to_string())
        .expect("DescribeTrainingJob");
    let status = response.status().as_u16();
    let body: Value = serde_json::from_str(&response.body_mut().read_to_string().expect("body"))
        .expect("a JSON body");
    assert_eq!(status, 200, "{body:#}");
    assert_eq!(body["TrainingJobArn"], json!(arn), "{body:#}");
    assert_eq!(body["TrainingJobStatus"], json!("Completed"), "{body:#}");
}

/// `environments` shows each environment's limit against the instances its queues' jobs hold,
/// and each quota share's limit, use and sharing rule.
#[test]
fn environments_show_capacity_in_use_against_limits_per_environment_and_quota_share() {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &[]);
    server.api(
        "createserviceenvironment",
        &json!({
            "serviceEnvironmentName": "gpus",
            "serviceEnvironmentType": "SAGEMAKER_TRAINING",
            "capacityLimits": [{"maxCapacity": 4, "capacityUnit": "ml.m5.large"}],
        }),
    );
    let policy = server.api(
        "createschedulingpolicy",
        &json!({"name": "quotas", "quotaSharePolicy": {"idleResourceAssignmentStrategy": "FIFO"}}),
    );
    create_queue(&server, "teams", 1, &policy["arn"], "gpus");
    server.api(
        "createquotashare",
        &json!({
            "quotaShareName": "vision",
            "jobQueue": "teams",
            "capacityLimits": [{"maxCapacity": 2, "capacityUnit": "ml.m5.large"}],
            "resourceSharingConfiguration": {"strategy": "LEND_AND_BORROW", "borrowLimit": 50},
            "preemptionConfiguration": {"inSharePreemption": "DISABLED"},
        }),
    );
    run_for_a_while(&server, "teams", json!({"quotaShareName": "vision"}));
    let fair = server.api(
        "createschedulingpolicy",
        &json!({"name": "fair", "fairsharePolicy": {"shareDecaySeconds": 0}}),
    );
    create_queue(&server, "shared", 2, &fair["arn"], "local");
    run_for_a_while(&server, "shared", json!({"shareIdentifier": "nlp"}));

    let shown = server.cli_json(&["environments"]);
    let envs = shown["serviceEnvironments"]
        .as_array()
        .expect("environments");
    let gpus = envs
        .iter()
        .find(|e| e["serviceEnvironmentName"] == json!("gpus"))
        .expect("gpus listed");
    assert_eq!(gpus["inUse"], json!(1.0), "{shown:#}");
    assert_eq!(gpus["jobQueues"], json!(["teams"]), "{shown:#}");
    assert_eq!(
        shown["fairShares"],
        json!([{"shareIdentifier": "nlp", "jobQueue": "shared", "inUse": 1.0}]),
        "{shown:#}"
    );
    let local = envs
        .iter()
        .find(|e| e["serviceEnvironmentName"] == json!("local"))
        .expect("local listed");
    assert_eq!(local["inUse"], json!(1.0), "{shown:#}");
    assert_eq!(
        local["jobQueues"],
        json!(["production", "research", "sweeps", "shared"]),
        "{shown:#}"
    );
    let share = &shown["quotaShares"][0];
    assert_eq!(
        (
            &share["quotaShareName"],
            &share["inUse"],
            &share["borrowLimit"]
        ),
        (&json!("vision"), &json!(1.0), &json!(50)),
        "{shown:#}"
    );

    let table = server.cli(&["pools"]).stdout;
    assert!(
        table.contains("QUOTA SHARE") && table.contains("FAIR SHARE"),
        "{table}"
    );
    let vision = table
        .lines()
        .find(|l| l.starts_with("vision"))
        .unwrap_or_default();
    assert!(
        vision.contains("2 ml.m5.large") && vision.contains("LEND_AND_BORROW, borrow ≤ 50%"),
        "{table}"
    );
}

/// Creates job queue `name` with `priority` and scheduling policy `policy`, on `environment`.
fn create_queue(server: &Server, name: &str, priority: u32, policy: &Value, environment: &str) {
    server.api(
        "createjobqueue",
        &json!({
            "jobQueueName": name,
            "priority": priority,
            "jobQueueType": "SAGEMAKER_TRAINING",
            "schedulingPolicyArn": policy,
            "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": environment}],
        }),
    );
}

/// Submits a one-instance job of 30 s to `queue` (with `extra` request fields) and waits until
/// it runs.
fn run_for_a_while(server: &Server, queue: &str, extra: Value) {
    let id = submit(
        server,
        &job(
            queue,
            "held",
            1,
            json!({"emulator_duration_s": "30"}),
            extra,
        ),
    );
    wait_for(server, &id, "RUNNING", status_is("RUNNING"));
}

/// Every status a job that succeeds at its first attempt goes through, in order.
const LIFECYCLE: [&str; 6] = [
    "SUBMITTED",
    "RUNNABLE",
    "SCHEDULED",
    "STARTING",
    "RUNNING",
    "SUCCEEDED",
];

/// Waits up to 10 s for `child` to exit by itself, requires success, and returns its stdout.
fn succeeded(child: &mut std::process::Child, what: &str) -> String {
    let status = support::exit_within(child, Duration::from_secs(10), what);
    assert!(status.success(), "{what}: {status}");
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().expect("stdout"), &mut out)
        .expect("stdout");
    out
}
