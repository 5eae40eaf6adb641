//! End-to-end tests of local mode: the real `trainyard up` binary on a free port, driven by the
//! real `trainyard` client commands (and, where timing matters, the HTTP API directly).
//!
//! These tests are about the API, the store and the intake; they run with `--no-dispatch` where
//! jobs must stay RUNNABLE. The scheduling loop's tests are in `scheduling.rs`.

mod support;

use serde_json::{Value, json};
use support::{Server, cli_as, cli_at, submit_request};
use trainyard_app::ports::JobStore;

fn data_dir() -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("data");
    (tmp, dir)
}

fn names_and_priorities(queues: &Value) -> Vec<(String, u64)> {
    queues
        .as_array()
        .expect("an array of queues")
        .iter()
        .map(|q| {
            (
                q["jobQueueName"].as_str().unwrap_or_default().to_owned(),
                q["priority"].as_u64().unwrap_or_default(),
            )
        })
        .collect()
}

fn ids(jobs: &Value) -> Vec<String> {
    jobs.as_array()
        .expect("an array of jobs")
        .iter()
        .map(|j| j["jobId"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn first_start_creates_the_demo_setup_with_three_queues_in_descending_priority() {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &[]);
    let queues = server.cli_json(&["queues"]);
    assert_eq!(
        names_and_priorities(&queues),
        vec![
            ("production".to_owned(), 900),
            ("research".to_owned(), 500),
            ("sweeps".to_owned(), 100)
        ]
    );
    for queue in queues.as_array().expect("array") {
        assert_eq!(queue["schedulingPolicy"], json!("FIFO"));
        assert_eq!(queue["serviceEnvironment"], json!("local"));
        assert_eq!(queue["state"], json!("ENABLED"));
        assert_eq!(queue["runnable"], json!(0));
    }
    let environments = server.api("describeserviceenvironments", &json!({}));
    let environment = &environments["serviceEnvironments"][0];
    assert_eq!(environment["serviceEnvironmentName"], json!("local"));
    assert_eq!(
        environment["capacityLimits"],
        json!([{"capacityUnit": "NUM_INSTANCES", "maxCapacity": 8}])
    );

    let table = server.cli(&["queues"]);
    assert!(table.success, "{}", table.stderr);
    let first_columns: Vec<&str> = table
        .stdout
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(first_columns, ["QUEUE", "production", "research", "sweeps"]);
}

#[test]
fn a_submitted_job_is_submitted_when_submit_returns_then_becomes_runnable() {
    let (_tmp, dir) = data_dir();
    // No ticks: only the submit event may move the job, after its settle pause (made long here
    // so that a busy test machine cannot stretch the gap between the two calls past it).
    let server = Server::start(
        &dir,
        &[
            "--no-dispatch",
            "--interval-ms",
            "600000",
            "--settle-ms",
            "2000",
        ],
    );
    let submitted = server.api("submitservicejob", &submit_request("research", "first"));
    let job_id = submitted["jobId"].as_str().expect("jobId").to_owned();
    assert_eq!(server.status(&job_id), "SUBMITTED");
    server.wait_for_status(&job_id, "RUNNABLE");
}

#[test]
fn the_cli_submits_lists_filters_describes_and_terminates() {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &["--no-dispatch"]);

    let submit = |queue: &str, name: &str| {
        let run = server.cli(&[
            "submit",
            "--queue",
            queue,
            "--name",
            name,
            "--instance-type",
            "ml.g5.xlarge",
            "--instance-count",
            "2",
            "--duration-s",
            "60",
        ]);
        assert!(run.success, "submit failed: {}", run.stderr);
        run.stdout.trim().to_owned()
    };
    let research = submit("research", "bert_large");
    let sweep = submit("sweeps", "lr-sweep-1");
    assert_ne!(research, sweep);
    server.wait_for_status(&research, "RUNNABLE");
    server.wait_for_status(&sweep, "RUNNABLE");

    // Every queue, active jobs: both, newest first, each naming its queue.
    let all = server.cli_json(&["jobs"]);
    assert_eq!(ids(&all), vec![sweep.clone(), research.clone()]);
    assert_eq!(all[0]["jobQueue"], json!("sweeps"));
    assert_eq!(all[1]["jobQueue"], json!("research"));

    let in_research = server.cli_json(&["jobs", "--queue", "research"]);
    assert_eq!(ids(&in_research), vec![research.clone()]);
    let conflicting = server.cli(&["jobs", "--status", "RUNNABLE", "--all"]);
    assert!(!conflicting.success, "--status and --all conflict");
    let every_status = server.cli_json(&["jobs", "--all"]);
    assert_eq!(ids(&every_status), ids(&all));
    let runnable = server.cli_json(&["jobs", "--status", "RUNNABLE"]);
    assert_eq!(ids(&runnable).len(), 2);
    let succeeded = server.cli_json(&["jobs", "--status", "SUCCEEDED"]);
    assert_eq!(ids(&succeeded), Vec::<String>::new());

    let queues = server.cli_json(&["queues"]);
    for key in ["submitted", "runnable", "scheduled", "starting", "running"] {
        assert!(
            queues[0].get(key).is_some(),
            "queues counts {key}: {queues:#}"
        );
    }
    let runnable_counts: Vec<u64> = queues
        .as_array()
        .expect("array")
        .iter()
        .map(|q| q["runnable"].as_u64().unwrap_or(99))
        .collect();
    assert_eq!(runnable_counts, vec![0, 1, 1]);

    // Describe by id, and by ARN as the SageMaker SDK does.
    let described = server.cli_json(&["describe", &research]);
    assert_eq!(described["jobName"], json!("bert_large"));
    assert_eq!(described["status"], json!("RUNNABLE"));
    let payload: Value = serde_json::from_str(
        described["serviceRequestPayload"]
            .as_str()
            .expect("payload string"),
    )
    .expect("payload JSON");
    assert_eq!(payload["ResourceConfig"]["InstanceCount"], json!(2));
    assert_eq!(
        payload["HyperParameters"]["emulator_duration_s"],
        json!("60")
    );
    let arn = described["jobArn"].as_str().expect("jobArn");
    let by_arn = server.cli_json(&["describe", arn]);
    assert_eq!(by_arn["jobId"], json!(research));
    let table = server.cli(&["describe", &research]);
    assert!(table.stdout.contains("bert_large"), "{}", table.stdout);
    assert!(table.stdout.contains("RUNNABLE"), "{}", table.stdout);

    let terminated = server.cli(&["terminate", &research, "--reason", "wrong dataset"]);
    assert!(terminated.success, "{}", terminated.stderr);
    let described = server.cli_json(&["describe", &research]);
    assert_eq!(described["status"], json!("FAILED"));
    assert_eq!(described["statusReason"], json!("wrong dataset"));
    let failed = server.cli_json(&["jobs", "--status", "FAILED"]);
    assert_eq!(ids(&failed), vec![research.clone()]);

    // Finished jobs only with --all; --limit keeps the newest; --name matches names.
    assert_eq!(ids(&server.cli_json(&["jobs"])), vec![sweep.clone()]);
    let everything = server.cli_json(&["jobs", "--all"]);
    assert_eq!(ids(&everything), vec![sweep.clone(), research.clone()]);
    let newest = server.cli_json(&["jobs", "--all", "--limit", "1"]);
    assert_eq!(ids(&newest), vec![sweep.clone()]);
    let named = server.cli_json(&["jobs", "--all", "--name", "bert*"]);
    assert_eq!(ids(&named), vec![research.clone()]);
    let table = server.cli(&["jobs", "--all"]);
    let header = table.stdout.lines().next().unwrap_or_default();
    for column in ["SHARE", "INSTANCES", "WAITED", "RAN"] {
        assert!(header.contains(column), "{}", table.stdout);
    }
    assert!(table.stdout.contains("2 ml.g5.xlarge"), "{}", table.stdout);

    // Describe by a name only one job has, with a row per attempt (none yet here).
    let by_name = server.cli_json(&["describe", "lr-sweep-1"]);
    assert_eq!(by_name["jobId"], json!(sweep));
    let unknown = server.cli(&["describe", "no-such-name"]);
    assert!(!unknown.success);
    assert!(
        unknown.stderr.contains("no job is named"),
        "{}",
        unknown.stderr
    );
    submit("research", "lr-sweep-1");
    let ambiguous = server.cli(&["describe", "lr-sweep-1"]);
    assert!(!ambiguous.success);
    assert!(
        ambiguous.stderr.contains("2 jobs are named") && ambiguous.stderr.contains(&sweep),
        "{}",
        ambiguous.stderr
    );
}

#[test]
fn api_errors_and_unreachable_servers_exit_non_zero_with_a_useful_message() {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &[]);

    let missing = server.cli(&["describe", "00000000-0000-0000-0000-000000000000"]);
    assert!(!missing.success);
    assert!(
        missing.stderr.contains("ClientException"),
        "{}",
        missing.stderr
    );
    assert!(
        missing
            .stderr
            .contains("00000000-0000-0000-0000-000000000000"),
        "the message names the job: {}",
        missing.stderr
    );

    let no_queue = server.cli(&[
        "submit",
        "--queue",
        "no-such-queue",
        "--instance-type",
        "ml.m5.large",
        "--instance-count",
        "1",
    ]);
    assert!(!no_queue.success);
    assert!(
        no_queue.stderr.contains("no-such-queue"),
        "{}",
        no_queue.stderr
    );

    // A port where nothing listens.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    let down = cli_at(&format!("http://127.0.0.1:{port}"), &["queues"]);
    assert!(!down.success);
    assert!(down.stderr.contains("trainyard up"), "{}", down.stderr);

    // The server's log went to a file, not a terminal: plain text, no colour codes.
    let log = server.stderr();
    assert!(log.contains("trainyard up"), "{log}");
    assert!(!log.contains('\x1b'), "colour codes in a log file: {log:?}");
}

#[test]
fn sigterm_stops_cleanly_and_a_restart_keeps_jobs_without_recreating_the_demo_setup() {
    let (_tmp, dir) = data_dir();
    let mut server = Server::start(&dir, &["--no-dispatch"]);
    let job = server.api("submitservicejob", &submit_request("production", "keep-me"));
    let job_id = job["jobId"].as_str().expect("jobId").to_owned();
    server.wait_for_status(&job_id, "RUNNABLE");
    // Remove a demo queue on purpose: the next start must not bring it back.
    server.api(
        "updatejobqueue",
        &json!({"jobQueue": "sweeps", "state": "DISABLED"}),
    );
    server.api("deletejobqueue", &json!({"jobQueue": "sweeps"}));

    let status = server.terminate();
    assert_eq!(status.code(), Some(0), "stderr: {}", server.stderr());
    assert!(
        server
            .stdout
            .iter()
            .any(|l| l.contains("Trainyard stopped")),
        "{:#?}",
        server.stdout
    );
    assert!(dir.join("trainyard.db").exists());

    let restarted = Server::start(&dir, &["--no-dispatch"]);
    assert!(
        !restarted.stdout.iter().any(|l| l.contains("Demo setup")),
        "the demo setup is created only once: {:#?}",
        restarted.stdout
    );
    assert_eq!(restarted.status(&job_id), "RUNNABLE");
    let queues = restarted.cli_json(&["queues"]);
    assert_eq!(
        names_and_priorities(&queues),
        vec![("production".to_owned(), 900), ("research".to_owned(), 500)]
    );
}

#[test]
fn jobs_still_submitted_at_shutdown_are_accepted_when_the_server_starts_again() {
    let (_tmp, dir) = data_dir();
    let mut server = Server::start(&dir, &["--no-dispatch"]);
    let job = server.api("submitservicejob", &submit_request("research", "survivor"));
    let job_id = job["jobId"].as_str().expect("jobId").to_owned();
    server.wait_for_status(&job_id, "RUNNABLE");
    assert_eq!(server.terminate().code(), Some(0));

    // Put the job back to SUBMITTED in the stopped server's store, as if the server had been
    // stopped between the submit and the loop's pass.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let store =
            trainyard_local::SqliteStore::open(&dir.join("trainyard.db")).expect("open store");
        let stored = store
            .get_job(&job_id)
            .await
            .expect("read")
            .expect("job kept");
        let mut job = stored.value;
        job.status = trainyard_domain::job::JobStatus::Submitted;
        job.runnable_at = None;
        store.update_job(&job, stored.version).await.expect("write");
    });

    // No ticks and no submit event: only the pass at start can accept it.
    let restarted = Server::start(&dir, &["--no-dispatch", "--interval-ms", "600000"]);
    restarted.wait_for_status(&job_id, "RUNNABLE");
}

/// Runs `trainyard up` to its exit (it must exit by itself, within the deadline).
fn up_until_exit(args: &[&str]) -> std::process::Output {
    let mut child = std::process::Command::new(support::BIN)
        .arg("up")
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn trainyard up");
    support::exit_within(
        &mut child,
        support::START_STOP_DEADLINE,
        &format!("trainyard up {args:?}, which should have refused to start"),
    );
    child.wait_with_output().expect("output")
}

#[test]
fn a_second_up_on_the_same_data_directory_refuses_to_start_and_names_the_first() {
    let (_tmp, dir) = data_dir();
    let first = Server::start(&dir, &["--no-dispatch"]);
    let dir_arg = dir.to_str().expect("utf-8 path");

    let second = up_until_exit(&["--listen", "127.0.0.1:0", "--data-dir", dir_arg]);
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success(), "the second up ran: {stderr}");
    assert!(
        stderr.contains("another trainyard up is using the data directory"),
        "{stderr}"
    );
    assert!(
        stderr.contains("(pid "),
        "the message names the holder: {stderr}"
    );
    // The first one is untouched and still serves.
    assert_eq!(
        first.cli_json(&["queues"]).as_array().map(Vec::len),
        Some(3)
    );
}

#[test]
fn a_port_in_use_stops_up_before_it_creates_anything() {
    let (_tmp, dir) = data_dir();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let address = taken.local_addr().expect("address").to_string();

    let run = up_until_exit(&[
        "--listen",
        &address,
        "--data-dir",
        dir.to_str().expect("utf-8 path"),
    ]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success(), "up ran on a taken port: {stderr}");
    assert!(stderr.contains("cannot listen on"), "{stderr}");
    assert!(!dir.exists(), "the data directory was created: {stderr}");
}

/// A reader that stops early (`trainyard queues --output json | head -1`) is no error: the
/// command exits quietly instead of panicking on the closed pipe.
#[test]
fn a_closed_stdout_pipe_ends_a_command_quietly() {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &["--no-dispatch"]);
    for args in [
        &["queues", "--output", "json"][..],
        &["queues"],
        &["jobs", "--output", "json"],
    ] {
        let mut child = std::process::Command::new(support::BIN)
            .args(args)
            .args(["--endpoint", &server.url])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn trainyard");
        // Closed before the command has its answer, so its first write meets no reader.
        drop(child.stdout.take());
        let run = child.wait_with_output().expect("output");
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(run.status.success(), "{args:?}: {} {stderr}", run.status);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

/// `up --credentials FILE` serves only requests signed (SigV4) by a key in the file; the CLI
/// signs with the caller's keys. A wrong secret, no signature, or no keys at all are refused
/// with the error types Batch clients know; `/metrics` stays open for scrapers.
#[test]
fn with_credentials_up_serves_only_requests_signed_by_its_keys() {
    let (tmp, dir) = data_dir();
    let keys = tmp.path().join("keys");
    std::fs::write(
        &keys,
        "[alice]\naws_access_key_id = AKIDALICE\naws_secret_access_key = alice-secret\n",
    )
    .expect("write the keys file");
    let mut server = Server::start(
        &dir,
        &[
            "--no-dispatch",
            "--credentials",
            keys.to_str().expect("utf-8"),
        ],
    );
    server.wait_for_line("Signatures:  checked; 1 access key(s)");
    let home = tmp.path();
    let alice = Some(("AKIDALICE", "alice-secret"));

    let queues = cli_as(&server.url, &["queues"], alice, home);
    assert!(queues.success, "{}", queues.stderr);
    assert!(queues.stdout.contains("research"), "{}", queues.stdout);
    let submitted = cli_as(
        &server.url,
        &[
            "submit",
            "--queue",
            "research",
            "--instance-type",
            "ml.m5.large",
        ],
        alice,
        home,
    );
    assert!(submitted.success, "{}", submitted.stderr);
    let followed = cli_as(&server.url, &["events", "--limit", "0"], alice, home);
    assert!(followed.success, "{}", followed.stderr);

    let cases = [
        (
            Some(("AKIDALICE", "not-her-secret")),
            "InvalidSignatureException",
        ),
        (
            Some(("AKIDMALLORY", "whatever")),
            "UnrecognizedClientException",
        ),
        (None, "MissingAuthenticationTokenException"),
    ];
    for (keys, kind) in cases {
        let refused = cli_as(&server.url, &["queues"], keys, home);
        assert!(!refused.success, "{keys:?} got in: {}", refused.stdout);
        assert!(
            refused.stderr.contains(kind),
            "{keys:?}: {}",
            refused.stderr
        );
    }
    let refused = cli_as(&server.url, &["events", "--limit", "0"], None, home);
    assert!(!refused.success, "an unsigned follower got in");

    let metrics = ureq::get(&format!("{}/metrics", server.url))
        .call()
        .expect("GET /metrics unsigned");
    assert_eq!(metrics.status().as_u16(), 200);
}

/// Without credentials the CLI sends nothing to an endpoint that is not this machine: a
/// deployed stack would refuse it, and the message says where keys come from.
#[test]
fn without_credentials_the_cli_does_not_call_a_remote_endpoint() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let run = cli_as(
        "https://abcdef1234.execute-api.eu-west-1.amazonaws.com",
        &["queues"],
        None,
        tmp.path(),
    );
    assert!(!run.success);
    assert!(run.stderr.contains("no AWS credentials"), "{}", run.stderr);
    assert!(run.stderr.contains("AWS_ACCESS_KEY_ID"), "{}", run.stderr);
}

/// `jobs --watch` lists again every interval until stopped; when its reader goes away it ends
/// quietly.
#[test]
fn jobs_watch_lists_again_each_interval() {
    use std::io::BufRead as _;
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &["--no-dispatch"]);
    let mut child = std::process::Command::new(support::BIN)
        .args([
            "jobs",
            "--watch",
            "--interval-s",
            "1",
            "--endpoint",
            &server.url,
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn trainyard jobs --watch");
    let mut lines = std::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    let started = std::time::Instant::now();
    let mut headers = 0;
    while headers < 3 {
        let line = lines.next().expect("a line").expect("utf-8");
        headers += usize::from(line.starts_with("JOB ID"));
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "too slow"
        );
    }
    // Three listings take two intervals.
    assert!(started.elapsed() >= std::time::Duration::from_secs(2));
    drop(lines);
    let status = child.wait().expect("wait");
    assert!(
        status.success(),
        "a closed pipe ended --watch with {status}"
    );
}

/// `jobs` shows each waiting job's place in its queue's dispatch order (FIFO here: first
/// submitted, first placed).
#[test]
fn jobs_show_each_waiting_jobs_position_in_its_queue() {
    let (_tmp, dir) = data_dir();
    let server = Server::start(&dir, &["--no-dispatch"]);
    let mut ids = Vec::new();
    for name in ["first", "second", "third"] {
        let id = server.api("submitservicejob", &submit_request("research", name))["jobId"]
            .as_str()
            .expect("jobId")
            .to_owned();
        server.wait_for_status(&id, "RUNNABLE");
        ids.push(id);
    }
    let table = server.cli(&["jobs", "--queue", "research"]).stdout;
    let header = table.lines().next().unwrap_or_default();
    let column = header.find("POSITION").expect("a POSITION column");
    for (place, id) in ids.iter().enumerate() {
        let row = table
            .lines()
            .find(|l| l.starts_with(id.as_str()))
            .expect("a row per job");
        let cell = row[column..].split_whitespace().next().unwrap_or_default();
        assert_eq!(cell, (place + 1).to_string(), "{table}");
    }
}

/// Idle connections cannot take the server down: past `--max-connections` a connection is
/// closed at once, and a connection that sends no request headers within `--header-timeout-s`
/// is closed, after which the server answers again.
#[test]
fn idle_connections_are_capped_and_closed_and_the_server_keeps_answering() {
    use std::io::Read;
    use std::net::TcpStream;
    use std::time::{Duration, Instant};

    let (_tmp, dir) = data_dir();
    let mut server = Server::start(
        &dir,
        &[
            "--no-dispatch",
            "--max-connections",
            "4",
            "--header-timeout-s",
            "1",
        ],
    );
    let address = server.url.trim_start_matches("http://").to_owned();
    // Closed by the server: a read returns end of file (or a reset) before `within`.
    let closed_within = |stream: &mut TcpStream, within: Duration| -> bool {
        stream.set_read_timeout(Some(within)).expect("read timeout");
        let mut byte = [0u8; 1];
        match stream.read(&mut byte) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted
            ),
        }
    };
    let mut idle: Vec<TcpStream> = (0..4)
        .map(|_| TcpStream::connect(&address).expect("connect"))
        .collect();
    // Give the server time to take all four before the fifth arrives.
    std::thread::sleep(Duration::from_millis(300));
    let mut fifth = TcpStream::connect(&address).expect("connect");
    assert!(
        closed_within(&mut fifth, Duration::from_millis(800)),
        "the connection over the cap is closed at once"
    );
    let started = Instant::now();
    for stream in &mut idle {
        assert!(
            closed_within(stream, Duration::from_secs(5)),
            "an idle connection is closed after the header timeout"
        );
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    // The server answers again.
    let queues = server.api("describejobqueues", &json!({}));
    assert!(queues["jobQueues"].is_array(), "{queues}");
    assert!(
        server.stderr().contains("too many open connections"),
        "{}",
        server.stderr()
    );
    assert!(server.terminate().success());
}

/// Start estimates stay calibrated across a restart: what the forecaster learnt from a job that
/// ran is kept in the data directory's store, and the next `trainyard up` starts from it.
#[test]
fn what_the_forecaster_learnt_outlives_a_restart() {
    let (_tmp, dir) = data_dir();
    let mut server = Server::start(&dir, &["--estimate-every-s", "1"]);
    let mut request = submit_request("research", "learn-from-me");
    let mut payload: Value =
        serde_json::from_str(request["serviceRequestPayload"].as_str().expect("payload"))
            .expect("json");
    payload["HyperParameters"] = json!({"emulator_duration_s": "3"});
    request["serviceRequestPayload"] = json!(payload.to_string());
    let job = server.api("submitservicejob", &request);
    let job_id = job["jobId"].as_str().expect("jobId").to_owned();
    server.wait_for_status(&job_id, "SUCCEEDED");
    // Rounds run every second; the one after the job ended learns its runtime and keeps it.
    let db = dir.join("trainyard.db");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let learned = loop {
        let kept = trainyard_local::SqliteStore::open(&db)
            .expect("open store")
            .learned()
            .expect("read");
        match kept {
            Some(learned) if learned.history.runtimes_observed() > 0 => break learned,
            _ if std::time::Instant::now() > deadline => {
                panic!("no runtime kept: {kept:?}\n{}", server.stderr())
            }
            _ => std::thread::sleep(std::time::Duration::from_millis(200)),
        }
    };
    assert_eq!(learned.history.runtimes_observed(), 1, "{learned:?}");
    assert_eq!(server.terminate().code(), Some(0));

    let restarted = Server::start(&dir, &["--estimate-every-s", "1"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !restarted
        .stderr()
        .contains("forecaster restored from what was kept")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "not restored: {}",
            restarted.stderr()
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}
