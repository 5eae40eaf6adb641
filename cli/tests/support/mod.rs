//! Drives the real `trainyard` binary: starts `trainyard up` on a free port in a temporary data
//! directory, runs client commands against it, calls the API directly where a test needs to be
//! faster than a process spawn, and stops the server with SIGTERM. Every wait has a deadline.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_trainyard");

/// Longest a server may take to print its address, or to stop after SIGTERM.
pub const START_STOP_DEADLINE: Duration = Duration::from_secs(30);

/// Longest a test waits for a job to change status.
pub const STATUS_DEADLINE: Duration = Duration::from_secs(15);

/// A running `trainyard up`.
pub struct Server {
    child: Option<Child>,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// Banner and later stdout lines.
    lines: mpsc::Receiver<String>,
    /// Everything printed to stdout so far.
    pub stdout: Vec<String>,
    stderr_path: PathBuf,
}

impl Server {
    /// Starts `trainyard up --listen 127.0.0.1:0 --data-dir <dir>` plus `extra` arguments and
    /// waits for its address.
    pub fn start(data_dir: &Path, extra: &[&str]) -> Server {
        let stderr_path = data_dir.with_extension(format!("stderr-{}", std::process::id()));
        let stderr = std::fs::File::create(&stderr_path).expect("stderr file");
        let mut child = Command::new(BIN)
            .args(["up", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data_dir)
            .args(extra)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn trainyard up");
        let stdout = child.stdout.take().expect("piped stdout");
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        let mut server = Server {
            child: Some(child),
            url: String::new(),
            lines,
            stdout: Vec::new(),
            stderr_path,
        };
        let line = server.wait_for_line("Listening on http://");
        server.url = line
            .split_whitespace()
            .last()
            .expect("an address after 'Listening on'")
            .to_owned();
        server
    }

    /// Waits for a stdout line containing `needle` and returns it.
    pub fn wait_for_line(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + START_STOP_DEADLINE;
        loop {
            if let Some(line) = self.stdout.iter().find(|l| l.contains(needle)) {
                return line.clone();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.stdout.push(line),
                Err(_) => panic!(
                    "no stdout line with {needle:?} within {START_STOP_DEADLINE:?}.\nstdout: {:#?}\nstderr: {}",
                    self.stdout,
                    self.stderr()
                ),
            }
        }
    }

    /// What the server logged.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// Kills the process outright (SIGKILL, as `kill -9` or a crash would) and waits for it.
    pub fn kill(&mut self) {
        let mut child = self.child.take().expect("server still running");
        child.kill().expect("kill the server");
        child.wait().expect("wait for the killed server");
    }

    /// Sends SIGTERM and waits for the process to exit; returns its status and collects the
    /// rest of its stdout.
    pub fn terminate(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("server still running");
        let sent = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -TERM failed");
        let status = exit_within(&mut child, START_STOP_DEADLINE, "the server, after SIGTERM");
        // The reader thread ends at EOF; take what it read.
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(2)) {
            self.stdout.push(line);
        }
        status
    }

    /// Runs a client command against this server.
    pub fn cli(&self, args: &[&str]) -> CliRun {
        cli_at(&self.url, args)
    }

    /// Runs a client command and parses its `--output json` stdout, asserting success.
    pub fn cli_json(&self, args: &[&str]) -> Value {
        let mut all: Vec<&str> = args.to_vec();
        all.extend_from_slice(&["--output", "json"]);
        let run = self.cli(&all);
        assert!(run.success, "{args:?} failed: {}", run.stderr);
        serde_json::from_str(&run.stdout)
            .unwrap_or_else(|e| panic!("{args:?} printed no JSON ({e}): {}", run.stdout))
    }

    /// Calls an API operation directly, asserting HTTP 200.
    pub fn api(&self, operation: &str, body: &Value) -> Value {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(10)))
            .build()
            .new_agent();
        let mut response = agent
            .post(&format!("{}/v1/{operation}", self.url))
            .send_json(body)
            .expect("API call");
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().expect("body");
        assert_eq!(status, 200, "{operation}: {text}");
        if text.trim().is_empty() {
            Value::Object(Default::default())
        } else {
            serde_json::from_str(&text).expect("JSON body")
        }
    }

    /// A job's status, read through the API.
    pub fn status(&self, job_id: &str) -> String {
        let job = self.api(
            "describeservicejob",
            &serde_json::json!({ "jobId": job_id }),
        );
        job["status"].as_str().unwrap_or_default().to_owned()
    }

    /// Polls until the job has `status`; panics with what it saw after [`STATUS_DEADLINE`].
    pub fn wait_for_status(&self, job_id: &str, status: &str) {
        let deadline = Instant::now() + STATUS_DEADLINE;
        loop {
            let seen = self.status(job_id);
            if seen == status {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "job {job_id} still {seen}, not {status}, after {STATUS_DEADLINE:?}"
            );
            std::thread::sleep(Duration::from_millis(25));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // A failed test must not leave a server behind; this kills only our own child.
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Waits up to `deadline` for `child` to exit by itself; `what` names it in the failure (the
/// child is killed first).
pub fn exit_within(child: &mut Child, deadline: Duration, what: &str) -> ExitStatus {
    let until = Instant::now() + deadline;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running {deadline:?} later");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A finished client command.
pub struct CliRun {
    /// Exit status was zero.
    pub success: bool,
    /// Stdout.
    pub stdout: String,
    /// Stderr.
    pub stderr: String,
}

/// Runs `trainyard <args>` with `TRAINYARD_ENDPOINT=url`.
pub fn cli_at(url: &str, args: &[&str]) -> CliRun {
    let mut command = Command::new(BIN);
    command.args(args).env("TRAINYARD_ENDPOINT", url);
    finish(command)
}

/// Runs `trainyard <args>` against `url` as a caller whose only credentials are `keys` (access
/// key id, secret), or none: no other AWS variable, and `home` (with no `.aws`) as HOME.
pub fn cli_as(url: &str, args: &[&str], keys: Option<(&str, &str)>, home: &Path) -> CliRun {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .env("TRAINYARD_ENDPOINT", url)
        .env("HOME", home);
    for name in [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_SHARED_CREDENTIALS_FILE",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
    ] {
        command.env_remove(name);
    }
    if let Some((id, secret)) = keys {
        command
            .env("AWS_ACCESS_KEY_ID", id)
            .env("AWS_SECRET_ACCESS_KEY", secret);
    }
    finish(command)
}

fn finish(mut command: Command) -> CliRun {
    let output = command
        .stdin(Stdio::null())
        .output()
        .expect("run trainyard");
    CliRun {
        success: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// A minimal SubmitServiceJob request for `queue`.
pub fn submit_request(queue: &str, name: &str) -> Value {
    let payload = serde_json::json!({
        "TrainingJobName": name,
        "RoleArn": "arn:aws:iam::000000000000:role/Test",
        "AlgorithmSpecification": {"TrainingImage": "img", "TrainingInputMode": "File"},
        "OutputDataConfig": {"S3OutputPath": "s3://bucket/out"},
        "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 10},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
    });
    serde_json::json!({
        "jobName": name,
        "jobQueue": queue,
        "serviceJobType": "SAGEMAKER_TRAINING",
        "serviceRequestPayload": payload.to_string(),
    })
}
