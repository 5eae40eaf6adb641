//! `trainyard-loadgen`: a loopback load generator for Trainyard's `SubmitServiceJob`.
//!
//! It opens N keep-alive HTTP/1.1 connections to a local `trainyard up` and, on each, sends
//! `POST /v1/submitservicejob` back to back for D seconds, every request with a fresh
//! `clientToken` exactly as botocore sends one (so idempotency bookkeeping is on the measured
//! path). It then prints requests sent, successes, errors, the sustained success rate and
//! latency p50/p90/p99/max.
//!
//! Layout: `target` refuses anything but loopback, `stats` turns samples into figures (pure),
//! and this file is the composition root plus the per-connection loop. Every loop is bounded
//! in time (`--duration-s`, a per-request timeout) and in count (`--max-requests`).

mod stats;
mod target;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper::header::{CONTENT_TYPE, HOST};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::stats::{Summary, Tally, summarise};
use crate::target::{Target, parse_target};

/// A request that takes longer than this is abandoned and counted as a transport error; it
/// bounds how long one stuck connection can hold the run open past its deadline.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause before reconnecting after a failed connection, so a dead server produces a bounded
/// trickle of errors rather than a busy loop.
const RECONNECT_PAUSE: Duration = Duration::from_millis(50);

/// Command-line options.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "trainyard-loadgen",
    about = "Sustained SubmitServiceJob load against a loopback Trainyard server"
)]
struct Args {
    /// Server base URL; must be loopback (127.0.0.0/8, ::1 or localhost).
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    target: String,
    /// Concurrent keep-alive connections, each with one request in flight.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=1024))]
    connections: u32,
    /// Measured duration in seconds.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=600))]
    duration_s: u64,
    /// Unmeasured warm-up before the measured run, in seconds.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(0..=60))]
    warmup_s: u64,
    /// Upper bound on requests in the measured run (the run ends at whichever comes first).
    #[arg(long, default_value_t = 5_000_000, value_parser = clap::value_parser!(u64).range(1..=50_000_000))]
    max_requests: u64,
    /// Job queue to submit to (name or ARN); `trainyard up` creates `production`.
    #[arg(long, default_value = "production")]
    queue: String,
    /// Instance type asked for in each training request.
    #[arg(long, default_value = "ml.m5.large")]
    instance_type: String,
}

/// The request body, split around the `clientToken` value so each request costs one `format!`.
#[derive(Debug, Clone)]
struct BodyTemplate {
    prefix: String,
    suffix: String,
}

impl BodyTemplate {
    fn new(queue: &str, instance_type: &str) -> anyhow::Result<Self> {
        let payload = serde_json::json!({
            "TrainingJobName": "loadgen",
            "RoleArn": "arn:aws:iam::123456789012:role/SageMakerRole",
            "AlgorithmSpecification": {
                "TrainingImage": "123456789012.dkr.ecr.us-east-1.amazonaws.com/train:latest",
                "TrainingInputMode": "File"
            },
            "OutputDataConfig": {"S3OutputPath": "s3://bucket/output"},
            "ResourceConfig": {"InstanceType": instance_type, "InstanceCount": 1, "VolumeSizeInGB": 30},
            "StoppingCondition": {"MaxRuntimeInSeconds": 3600}
        });
        const MARKER: &str = "@@CLIENT_TOKEN@@";
        let body = serde_json::json!({
            "jobName": "loadgen",
            "jobQueue": queue,
            "serviceJobType": "SAGEMAKER_TRAINING",
            "serviceRequestPayload": payload.to_string(),
            "clientToken": MARKER,
        })
        .to_string();
        let (prefix, suffix) = body
            .split_once(MARKER)
            .context("the body template lost its token marker")?;
        Ok(Self {
            prefix: prefix.to_owned(),
            suffix: suffix.to_owned(),
        })
    }

    /// The body with `token` as its `clientToken` (tokens are `[0-9a-f-]`, no JSON escaping).
    fn render(&self, token: &str) -> String {
        format!("{}{token}{}", self.prefix, self.suffix)
    }
}

/// What every connection shares in one phase.
struct Phase {
    target: Target,
    template: BodyTemplate,
    /// Distinguishes this run's tokens from any earlier run against the same data dir.
    run_id: String,
    deadline: Instant,
    /// Requests still allowed in this phase.
    budget: AtomicU64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let target = parse_target(&args.target)?;
    let command_line = std::env::args().collect::<Vec<_>>().join(" ");
    println!("command: {command_line}");
    println!(
        "target: {} connections: {} duration_s: {} warmup_s: {} max_requests: {} queue: {}",
        args.target,
        args.connections,
        args.duration_s,
        args.warmup_s,
        args.max_requests,
        args.queue
    );
    let template = BodyTemplate::new(&args.queue, &args.instance_type)?;
    let run_id = run_id();

    if args.warmup_s > 0 {
        let (warm, _) = run_phase(
            &target,
            &template,
            &format!("{run_id}w"),
            args.connections,
            Duration::from_secs(args.warmup_s),
            args.max_requests,
        )
        .await;
        println!(
            "warm-up: {} sent, {} succeeded",
            warm.sent(),
            warm.successes
        );
    }

    let (tally, elapsed) = run_phase(
        &target,
        &template,
        &run_id,
        args.connections,
        Duration::from_secs(args.duration_s),
        args.max_requests,
    )
    .await;
    let http_errors = tally.http_errors;
    let transport_errors = tally.transport_errors;
    let summary = summarise(tally, elapsed);
    print_summary(&summary, elapsed, http_errors, transport_errors);
    if summary.successes == 0 {
        bail!(
            "no request succeeded; is `trainyard up` listening on {}?",
            args.target
        );
    }
    Ok(())
}

/// Runs `connections` request loops until `duration` or `max_requests` runs out.
async fn run_phase(
    target: &Target,
    template: &BodyTemplate,
    run_id: &str,
    connections: u32,
    duration: Duration,
    max_requests: u64,
) -> (Tally, Duration) {
    let started = Instant::now();
    let phase = Arc::new(Phase {
        target: target.clone(),
        template: template.clone(),
        run_id: run_id.to_owned(),
        deadline: started + duration,
        budget: AtomicU64::new(max_requests),
    });
    let workers: Vec<_> = (0..connections)
        .map(|conn| tokio::spawn(connection_loop(Arc::clone(&phase), conn)))
        .collect();
    let mut tally = Tally::default();
    for worker in workers {
        match worker.await {
            Ok(t) => tally.merge(t),
            Err(e) => eprintln!("loadgen: a connection task failed: {e}"),
        }
    }
    (tally, started.elapsed())
}

/// Takes one request from the phase budget; false when the budget is spent.
fn take_one(budget: &AtomicU64) -> bool {
    budget
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
        .is_ok()
}

/// One keep-alive connection, one request in flight, reconnecting after transport failures.
async fn connection_loop(phase: Arc<Phase>, conn: u32) -> Tally {
    let mut tally = Tally::default();
    let mut seq: u64 = 0;
    let mut reported_http_error = false;
    'connect: while Instant::now() < phase.deadline {
        let mut sender = match connect(&phase.target).await {
            Ok(s) => s,
            Err(_) => {
                tally.transport_errors += 1;
                tokio::time::sleep(RECONNECT_PAUSE).await;
                continue;
            }
        };
        while Instant::now() < phase.deadline {
            if !take_one(&phase.budget) {
                break 'connect;
            }
            seq += 1;
            let token = format!("{}-{conn:x}-{seq:x}", phase.run_id);
            let request = match Request::builder()
                .method(Method::POST)
                .uri("/v1/submitservicejob")
                .header(HOST, phase.target.authority.as_str())
                .header(CONTENT_TYPE, "application/json")
                .body(Full::new(Bytes::from(phase.template.render(&token))))
            {
                Ok(r) => r,
                Err(_) => {
                    tally.transport_errors += 1;
                    continue;
                }
            };
            let sent_at = Instant::now();
            let outcome = tokio::time::timeout(REQUEST_TIMEOUT, async {
                let response = sender.send_request(request).await?;
                let status = response.status();
                let body = response.into_body().collect().await?.to_bytes();
                Ok::<_, hyper::Error>((status, body))
            })
            .await;
            match outcome {
                Ok(Ok((status, body))) => {
                    tally.latencies_us.push(micros(sent_at.elapsed()));
                    if status == StatusCode::OK {
                        tally.successes += 1;
                    } else {
                        tally.http_errors += 1;
                        if !reported_http_error {
                            reported_http_error = true;
                            eprintln!(
                                "loadgen: connection {conn}: HTTP {status}: {}",
                                String::from_utf8_lossy(&body[..body.len().min(300)])
                            );
                        }
                    }
                }
                // A timeout or a broken connection: count it and start a fresh connection.
                Ok(Err(_)) | Err(_) => {
                    tally.transport_errors += 1;
                    continue 'connect;
                }
            }
        }
    }
    tally
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

async fn connect(target: &Target) -> anyhow::Result<Sender> {
    let stream = TcpStream::connect(target.addr).await?;
    stream.set_nodelay(true)?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    // The connection future drives the socket; it ends when the sender is dropped.
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// A short hex id from the wall clock and the process id; only uniqueness matters.
fn run_id() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("{:x}{:x}", nanos & 0xffff_ffff_ffff, std::process::id())
}

fn print_summary(s: &Summary, elapsed: Duration, http_errors: u64, transport_errors: u64) {
    println!("requests sent:   {}", s.sent);
    println!("successes:       {}", s.successes);
    println!(
        "errors:          {} (http {http_errors}, transport {transport_errors})",
        s.errors
    );
    println!("elapsed_s:       {:.2}", elapsed.as_secs_f64());
    println!("rate:            {:.0} submissions/s", s.success_rate_per_s);
    match &s.latency_ms {
        Some(p) => println!(
            "latency_ms:      p50 {:.2}  p90 {:.2}  p99 {:.2}  max {:.2}",
            p.p50, p.p90, p.p99, p.max
        ),
        None => println!("latency_ms:      none (no request was answered)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rendered_bodies_are_valid_submit_requests_with_the_given_token() {
        let t = BodyTemplate::new("production", "ml.m5.large").unwrap();
        let body: serde_json::Value = serde_json::from_str(&t.render("abc-1-2")).unwrap();
        assert_eq!(body["clientToken"], "abc-1-2");
        assert_eq!(body["jobQueue"], "production");
        assert_eq!(body["serviceJobType"], "SAGEMAKER_TRAINING");
        let payload: serde_json::Value =
            serde_json::from_str(body["serviceRequestPayload"].as_str().unwrap()).unwrap();
        assert_eq!(payload["ResourceConfig"]["InstanceType"], "ml.m5.large");
        assert_eq!(payload["ResourceConfig"]["InstanceCount"], 1);
    }

    #[test]
    fn the_budget_stops_at_zero_and_never_wraps() {
        let budget = AtomicU64::new(2);
        assert!(take_one(&budget));
        assert!(take_one(&budget));
        assert!(!take_one(&budget));
        assert!(!take_one(&budget));
        assert_eq!(budget.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn tokens_fit_botocore_limit_of_64_characters() {
        let token = format!("{}-{:x}-{:x}", run_id(), 1023u32, u64::MAX);
        assert!(token.len() <= 64, "{token} is {} long", token.len());
    }
}
