//! `trainyard events`: follows job state changes as they happen, one line each.
//!
//! It reads `GET /trainyard/events` (newline-delimited JSON) from a running `trainyard up` and
//! prints `time  job id  queue  status` per change, or the raw JSON lines with `--output json`.
//! There is no history: it shows what happens from the moment it connects.

use std::io::{BufRead, BufReader, Write};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use serde_json::Value;

use trainyard_domain::job::JobStatus;

use crate::table::timestamp;
use crate::{ClientArgs, Output};

/// How long connecting may take; the stream itself has no time limit.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Arguments of `trainyard events`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    trainyard events --follow                   every change, until Ctrl-C\n  \
    trainyard events --job \"$JOB\"               one job: where it is, then each change until it ends")]
pub struct EventsArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    /// Keep following (the default and only mode: there is no history to print). Accepted so
    /// that `trainyard events --follow` reads like `tail -f`.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Stop after this many changes (for scripts).
    #[arg(long)]
    pub limit: Option<u64>,
    /// Only this job (its id): its status now, then each change, until it ends.
    #[arg(long)]
    pub job: Option<String>,
}

/// One printable line for an event object, or `None` for a non-event line.
pub fn format_line(event: &Value) -> Option<String> {
    if let Some(missed) = event.get("missed").and_then(Value::as_u64) {
        return Some(format!(
            "({missed} changes missed: the follower fell behind)"
        ));
    }
    let text = |k: &str| event.get(k).and_then(Value::as_str);
    Some(format!(
        "{}  {}  {:<12} {}",
        timestamp(event.get("time").and_then(Value::as_i64)),
        text("jobId")?,
        text("jobQueue")?,
        text("status")?,
    ))
}

/// Follows the stream until the limit is reached or the user interrupts; a stream that ends
/// first (the server stopped) is an error.
pub fn run(args: &EventsArgs) -> anyhow::Result<()> {
    let endpoint = args.client.endpoint.trim_end_matches('/');
    let url = format!("{endpoint}{}", crate::routes::EVENTS_PATH);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_connect(Some(CONNECT_TIMEOUT))
        .http_status_as_error(false)
        .build()
        .new_agent();
    let mut request = agent.get(&url);
    match crate::client::Signer::for_endpoint(endpoint) {
        Ok(Some(signer)) => {
            for (name, value) in signer
                .headers("GET", &url, &[], b"")
                .map_err(anyhow::Error::msg)?
            {
                request = request.header(name, value);
            }
        }
        Ok(None) => {}
        Err(why) => bail!("{why}"),
    }
    let response = request.call().map_err(|error| {
        anyhow::anyhow!(
            "cannot reach {endpoint} ({error}); start a server with `trainyard up` or set \
             TRAINYARD_ENDPOINT"
        )
    })?;
    if response.status() != 200 {
        let status = response.status().as_u16();
        let kind = response
            .headers()
            .get("x-amzn-errortype")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let text = response.into_body().read_to_string().unwrap_or_default();
        let message = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(str::to_owned));
        match (kind, message) {
            // Trainyard refused the caller (the access policies, the rate limit).
            (Some(kind), Some(message)) => bail!("{kind} (HTTP {status}): {message}"),
            _ => bail!(
                "{url} answered HTTP {status} (events are served by `trainyard up`, not by AWS \
                 Batch)"
            ),
        }
    }
    eprintln!("Following job state changes from {endpoint} (Ctrl-C to stop).");
    let reader = BufReader::new(response.into_body().into_reader());
    let mut stdout = std::io::stdout().lock();
    let mut printed = 0u64;
    if args.limit == Some(0) {
        return Ok(());
    }
    let mut emit = |out: String| -> anyhow::Result<bool> {
        writeln!(stdout, "{out}").context("writing to stdout")?;
        // Each change should show up as it happens, even when piped.
        stdout.flush().context("writing to stdout")?;
        printed += 1;
        // Done at the last change asked for: the next may be long in coming, or never.
        Ok(args.limit.is_some_and(|limit| printed >= limit))
    };
    // One job: the stream has no history, so first where the job is now (read after the stream
    // is open, so nothing falls between); changes the stream still holds from before that read
    // are left out.
    let mut caught_up_from = None;
    if let Some(job) = &args.job {
        let now = now_event(&args.client.endpoint, job)?;
        let status = now["status"].as_str().and_then(JobStatus::parse);
        let out = match args.client.output {
            Output::Json => Some(now.to_string()),
            Output::Table => format_line(&now),
        };
        if let Some(out) = out
            && emit(out)?
        {
            return Ok(());
        }
        if status.is_some_and(JobStatus::is_terminal) {
            return Ok(());
        }
        caught_up_from = status;
    }
    for line in reader.lines() {
        let line = line.context("reading the event stream")?;
        if line.trim().is_empty() {
            continue;
        }
        let event = serde_json::from_str::<Value>(&line).ok();
        if let Some(job) = &args.job {
            let about = |e: &Value| e.get("jobId").and_then(Value::as_str) == Some(job.as_str());
            // A gap notice may hide the job's changes, so it stays.
            let missed = |e: &Value| e.get("missed").is_some();
            if !event.as_ref().is_some_and(|e| about(e) || missed(e)) {
                continue;
            }
        }
        let status = event
            .as_ref()
            .and_then(|e| e.get("status"))
            .and_then(Value::as_str)
            .and_then(JobStatus::parse);
        if let (Some(now), Some(status)) = (caught_up_from, status) {
            if rank(status) <= rank(now) {
                continue;
            }
            caught_up_from = None;
        }
        let out = match args.client.output {
            Output::Json => Some(line),
            Output::Table => event.as_ref().and_then(format_line),
        };
        if let Some(out) = out
            && emit(out)?
        {
            return Ok(());
        }
        // One job ends the stream with its end.
        if args.job.is_some() && status.is_some_and(JobStatus::is_terminal) {
            return Ok(());
        }
    }
    // `up` never ends the stream while it runs: it stopped, or the connection broke.
    bail!("the event stream from {endpoint} ended: the server stopped or the connection was lost")
}

/// The job's status now, shaped like an event of the stream.
fn now_event(endpoint: &str, job: &str) -> anyhow::Result<Value> {
    let described = crate::client::Client::new(endpoint)
        .call("describeservicejob", &serde_json::json!({ "jobId": job }))?;
    let queue = described["jobQueue"].as_str().unwrap_or_default();
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Ok(serde_json::json!({
        "time": i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX),
        "jobId": job,
        "jobQueue": queue.rsplit('/').next().unwrap_or(queue),
        "status": described["status"],
    }))
}

/// A status's place in the lifecycle, for leaving out changes older than a status read.
fn rank(status: JobStatus) -> usize {
    JobStatus::ALL
        .iter()
        .position(|s| *s == status)
        .unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_event_prints_as_time_id_queue_status_and_junk_prints_nothing() {
        let line = format_line(&json!({
            "time": 0, "jobId": "j-1", "jobQueue": "research", "status": "RUNNING"
        }));
        assert_eq!(
            line.as_deref(),
            Some("1970-01-01 00:00:00  j-1  research     RUNNING")
        );
        assert_eq!(format_line(&json!({"jobId": "j-1"})), None);
        assert!(format_line(&json!({"missed": 3})).is_some_and(|l| l.contains("3 changes missed")));
    }
}
