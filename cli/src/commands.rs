//! The commands for people: `submit`, `jobs`, `describe`, `terminate`, `queues`.
//!
//! Each speaks the Batch API through [`Client`], exactly as the AWS CLI would, and prints either
//! a table or the JSON it got (`--output json`), so scripts never parse tables.

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Args;
use serde_json::{Map, Value, json};
use trainyard_domain::job::JobStatus;
use trainyard_domain::limits::SNAPSHOT_FRONT_OF_QUEUE;

use crate::client::{Client, ClientError};
use crate::payload::{self, TrainingSpec};
use crate::{ClientArgs, Output, table};

/// Page size for listings (Batch's maximum).
const PAGE_SIZE: u64 = 100;

/// Counting jobs for `queues` stops here; the table then shows `1000+`. Counting is a listing,
/// so a bound keeps `trainyard queues` quick on a queue with a huge backlog.
const COUNT_CAP: usize = 1000;

/// Arguments of `trainyard submit`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    trainyard submit --queue research --instance-type ml.g5.12xlarge --instance-count 2\n  \
    trainyard submit --queue research --name bert-base --payload create-training-job.json\n  \
    JOB=$(trainyard submit --queue sweeps --instance-type ml.m5.large --duration-s 60)")]
pub struct SubmitArgs {
    /// Queue (name or ARN) to submit to.
    #[arg(long)]
    pub queue: String,
    /// Job name: letters, digits, `-` and `_`, up to 128 characters. Defaults to the payload's
    /// TrainingJobName, or `job-<time>`.
    #[arg(long)]
    pub name: Option<String>,
    /// A file holding the SageMaker CreateTrainingJob request as JSON (`-` for stdin).
    #[arg(long, required_unless_present = "instance_type", conflicts_with_all = ["instance_type", "instance_count", "role_arn", "image", "duration_s"])]
    pub payload: Option<PathBuf>,
    /// Instance type when building the request from flags, such as `ml.g5.xlarge`.
    #[arg(long)]
    pub instance_type: Option<String>,
    /// Number of instances when building the request from flags (default 1).
    #[arg(long, requires = "instance_type", value_parser = clap::value_parser!(u32).range(1..))]
    pub instance_count: Option<u32>,
    /// IAM role SageMaker would assume (built requests only).
    #[arg(long)]
    pub role_arn: Option<String>,
    /// Training image (built requests only).
    #[arg(long)]
    pub image: Option<String>,
    /// How long the (emulated) training runs, in seconds (built requests only).
    #[arg(long)]
    pub duration_s: Option<u64>,
    /// Scheduling priority within a share, 0–9999 (fair-share and quota-share queues).
    #[arg(long)]
    pub priority: Option<i64>,
    /// Share identifier (required on fair-share queues, refused elsewhere).
    #[arg(long)]
    pub share: Option<String>,
    /// Quota share name (required on quota-share queues, refused elsewhere).
    #[arg(long)]
    pub quota_share: Option<String>,
    /// How many times the job may be moved to RUNNABLE, 1–10.
    #[arg(long)]
    pub attempts: Option<i64>,
    /// Idempotency token: repeating a submit with the same token returns the same job.
    #[arg(long)]
    pub client_token: Option<String>,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Arguments of `trainyard jobs`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    trainyard jobs                              active jobs, every queue, newest first\n  \
    trainyard jobs --all --limit 20             the 20 newest jobs, finished ones too\n  \
    trainyard jobs --queue research --status RUNNABLE\n  \
    trainyard jobs --name 'bert-*' --share vision")]
pub struct JobsArgs {
    /// Only this queue (name or ARN); default every queue.
    #[arg(long)]
    pub queue: Option<String>,
    /// Only this status (SUBMITTED, RUNNABLE, SCHEDULED, STARTING, RUNNING, SUCCEEDED, FAILED).
    #[arg(long, value_parser = parse_status)]
    pub status: Option<JobStatus>,
    /// Every status, finished jobs too (the default is jobs not yet SUCCEEDED or FAILED).
    #[arg(long, conflicts_with = "status")]
    pub all: bool,
    /// Only jobs of this name; a trailing `*` matches any ending.
    #[arg(long)]
    pub name: Option<String>,
    /// Only jobs of this share identifier or quota share.
    #[arg(long)]
    pub share: Option<String>,
    /// Only jobs you submitted (the server's idea of you: `trainyard whoami`).
    #[arg(long)]
    pub mine: bool,
    /// At most this many jobs, the newest.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub limit: Option<u64>,
    /// List again every `--interval-s` seconds until Ctrl-C (on a terminal, in place).
    #[arg(long)]
    pub watch: bool,
    /// Seconds between listings with `--watch`.
    #[arg(long, default_value_t = 2, requires = "watch", value_parser = clap::value_parser!(u64).range(1..))]
    pub interval_s: u64,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Arguments of `trainyard why`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    trainyard why 3c734b03-8309-4dd7-bd71-d0ae55611e6c\n  \
    trainyard why bert-base                        by name, when only one job has it\n  \
    trainyard why \"$JOB\" --output json | jq .blockers")]
pub struct WhyArgs {
    /// Job id, job ARN, or a job name that only one job has.
    pub job: String,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Arguments of `trainyard describe`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    trainyard describe 3c734b03-8309-4dd7-bd71-d0ae55611e6c\n  \
    trainyard describe bert-base                   by name, when only one job has it\n  \
    trainyard describe \"$JOB\" --output json | jq .attempts")]
pub struct DescribeArgs {
    /// Job id, job ARN, or a job name that only one job has.
    pub job: String,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Arguments of `trainyard terminate`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    trainyard terminate \"$JOB\" --reason \"wrong dataset\"")]
pub struct TerminateArgs {
    /// Job id or job ARN.
    pub job: String,
    /// Why; shown as the job's statusReason.
    #[arg(long, default_value = "Terminated with the trainyard CLI")]
    pub reason: String,
    #[command(flatten)]
    pub client: ClientArgs,
}

fn parse_status(value: &str) -> Result<JobStatus, String> {
    JobStatus::parse(&value.to_ascii_uppercase()).ok_or_else(|| {
        let all: Vec<&str> = JobStatus::ALL.iter().map(|s| s.as_str()).collect();
        format!(
            "{value:?} is not a job status; expected one of {}",
            all.join(", ")
        )
    })
}

/// `trainyard submit`.
pub fn submit(args: &SubmitArgs) -> anyhow::Result<()> {
    let request = submit_request(args, now_ms())?;
    let client = Client::new(&args.client.endpoint);
    let response = client.call("submitservicejob", &request)?;
    match args.client.output {
        Output::Json => print_json(&response)?,
        Output::Table => {
            let id = response
                .get("jobId")
                .and_then(Value::as_str)
                .context("the response has no jobId")?;
            crate::outln!("{id}")?;
        }
    }
    Ok(())
}

/// The SubmitServiceJob request for `args`; `now_ms` names jobs that have no name.
fn submit_request(args: &SubmitArgs, now_ms: i64) -> anyhow::Result<Value> {
    let payload = match (&args.payload, &args.instance_type, args.instance_count) {
        (Some(path), _, _) => read_payload(path)?,
        (None, Some(instance_type), instance_count) => payload::build(&TrainingSpec {
            name: args.name.clone().unwrap_or_else(|| format!("job-{now_ms}")),
            instance_type: instance_type.clone(),
            instance_count: instance_count.unwrap_or(1),
            role_arn: args
                .role_arn
                .clone()
                .unwrap_or_else(|| payload::DEFAULT_ROLE_ARN.into()),
            image: args
                .image
                .clone()
                .unwrap_or_else(|| payload::DEFAULT_IMAGE.into()),
            duration_s: args.duration_s,
        }),
        _ => bail!("give --payload FILE, or --instance-type (and --instance-count, default 1)"),
    };
    let name = args
        .name
        .clone()
        .or_else(|| payload::payload_training_job_name(&payload))
        .unwrap_or_else(|| format!("job-{now_ms}"));
    let mut request = Map::new();
    request.insert("jobName".into(), json!(name));
    request.insert("jobQueue".into(), json!(args.queue));
    request.insert("serviceJobType".into(), json!("SAGEMAKER_TRAINING"));
    request.insert("serviceRequestPayload".into(), json!(payload));
    if let Some(priority) = args.priority {
        request.insert("schedulingPriority".into(), json!(priority));
    }
    if let Some(share) = &args.share {
        request.insert("shareIdentifier".into(), json!(share));
    }
    if let Some(quota_share) = &args.quota_share {
        request.insert("quotaShareName".into(), json!(quota_share));
    }
    if let Some(attempts) = args.attempts {
        request.insert("retryStrategy".into(), json!({ "attempts": attempts }));
    }
    if let Some(token) = &args.client_token {
        request.insert("clientToken".into(), json!(token));
    }
    Ok(Value::Object(request))
}

fn read_payload(path: &PathBuf) -> anyhow::Result<String> {
    let text = if path.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin()).context("reading the payload from stdin")?
    } else {
        std::fs::read_to_string(path)
            .with_context(|| format!("reading the payload from {}", path.display()))?
    };
    // Re-encode compactly: Batch limits the payload to 10 KiB, and indentation would count.
    let value: Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    Ok(value.to_string())
}

/// `trainyard jobs`.
pub fn jobs(args: &JobsArgs) -> anyhow::Result<()> {
    let client = Client::new(&args.client.endpoint);
    if !args.watch {
        return crate::out!("{}", jobs_listing(args, &client)?);
    }
    let in_place = table::colour_stdout();
    loop {
        let listing = jobs_listing(args, &client)?;
        if in_place {
            // Home the cursor and clear the screen, as `watch` does.
            crate::out!(
                "\x1b[H\x1b[2J{} UTC, every {} s (Ctrl-C to stop)\n\n{listing}",
                table::timestamp(Some(now_ms())),
                args.interval_s
            )?;
        } else {
            crate::out!("{listing}\n")?;
        }
        std::thread::sleep(std::time::Duration::from_secs(args.interval_s));
    }
}

/// A job that changed status while the statuses were listed one after another shows up in both
/// listings: keeps only its last appearance (statuses are listed in lifecycle order, so the
/// later one is the newer).
fn keep_latest_per_job(jobs: &mut Vec<Value>) {
    let mut seen = std::collections::HashSet::new();
    jobs.reverse();
    jobs.retain(|job| seen.insert(text(job, "jobId")));
    jobs.reverse();
}

/// One listing for `trainyard jobs`, as printed.
fn jobs_listing(args: &JobsArgs, client: &Client) -> anyhow::Result<String> {
    let queues = match &args.queue {
        Some(queue) => vec![queue.clone()],
        None => queue_names(client)?,
    };
    let statuses: Vec<JobStatus> = match (args.status, args.all) {
        (Some(status), _) => vec![status],
        (None, true) => JobStatus::ALL.to_vec(),
        (None, false) => JobStatus::ALL
            .into_iter()
            .filter(|status| !status.is_terminal())
            .collect(),
    };
    let me = if args.mine {
        let me = client.call_trainyard("whoami", &json!({}))?;
        Some(text(&me, "arn"))
    } else {
        None
    };
    let mut jobs = Vec::new();
    for queue in &queues {
        for status in &statuses {
            let request = json!({
                "jobQueue": queue,
                "jobStatus": status.as_str(),
                "maxResults": PAGE_SIZE,
            });
            for mut job in client.call_all("listservicejobs", &request, "jobSummaryList")? {
                // Summaries do not name their queue; people listing several queues need it.
                if let Some(fields) = job.as_object_mut() {
                    fields.insert("jobQueue".into(), json!(short_name(queue)));
                }
                jobs.push(job);
            }
        }
    }
    keep_latest_per_job(&mut jobs);
    jobs.retain(|job| {
        args.name
            .as_deref()
            .is_none_or(|name| name_matches(name, &text(job, "jobName")))
            && args.share.as_deref().is_none_or(|share| {
                text(job, "shareIdentifier") == share || text(job, "quotaShareName") == share
            })
            && me.as_deref().is_none_or(|me| {
                job.pointer("/trainyard/owner").and_then(Value::as_str) == Some(me)
            })
    });
    sort_newest_first(&mut jobs);
    if let Some(limit) = args.limit {
        jobs.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    }
    Ok(match args.client.output {
        Output::Json => json_text(&Value::Array(jobs)) + "\n",
        Output::Table => {
            let now = now_ms();
            let colour = table::colour_stdout();
            let positions = queue_positions(client, &jobs)?;
            let rows: Vec<Vec<String>> = jobs
                .iter()
                .map(|job| {
                    let mut row = job_row(job, now, colour);
                    let position = positions.get(&text(job, "jobArn"));
                    let waiting = text(job, "status") == JobStatus::Runnable.as_str();
                    row.insert(
                        4,
                        match position {
                            Some(n) => n.to_string(),
                            None if waiting => format!(">{SNAPSHOT_FRONT_OF_QUEUE}"),
                            None => "-".into(),
                        },
                    );
                    row
                })
                .collect();
            table::render(
                &[
                    "JOB ID",
                    "NAME",
                    "QUEUE",
                    "STATUS",
                    "POSITION",
                    "SHARE",
                    "INSTANCES",
                    "WAITED",
                    "START p50/p90",
                    "RAN",
                    "CREATED (UTC)",
                    "REASON",
                ],
                &rows,
            )
        }
    })
}

/// The 1-based place of each RUNNABLE job among `jobs` in its queue's dispatch order, from one
/// `GetJobQueueSnapshot` per queue that has any (its front: the first hundred).
fn queue_positions(
    client: &Client,
    jobs: &[Value],
) -> Result<std::collections::HashMap<String, usize>, ClientError> {
    let mut queues: Vec<String> = jobs
        .iter()
        .filter(|job| text(job, "status") == JobStatus::Runnable.as_str())
        .map(|job| text(job, "jobQueue"))
        .collect();
    queues.sort();
    queues.dedup();
    let mut positions = std::collections::HashMap::new();
    for queue in queues {
        let snapshot = client.call("getjobqueuesnapshot", &json!({ "jobQueue": queue }))?;
        let front = snapshot["frontOfQueue"]["jobs"].as_array();
        for (n, job) in front.into_iter().flatten().enumerate() {
            positions.insert(text(job, "jobArn"), n + 1);
        }
    }
    Ok(positions)
}

/// One `jobs` row (without its POSITION). WAITED runs from submit to start (to now while the job waits); RAN from
/// start to stop (to now while it runs).
fn job_row(job: &Value, now_ms: i64, colour: bool) -> Vec<String> {
    let at = |key: &str| job.get(key).and_then(Value::as_i64);
    let created = at("createdAt");
    let started = at("startedAt");
    let stopped = at("stoppedAt");
    let finished = JobStatus::parse(&text(job, "status")).is_some_and(JobStatus::is_terminal);
    let waited = match (created, started, stopped) {
        (Some(c), Some(s), _) => table::duration(s - c),
        (Some(c), None, Some(stop)) => table::duration(stop - c),
        (Some(c), None, None) if !finished => table::duration(now_ms - c),
        _ => "-".into(),
    };
    let ran = match (started, stopped) {
        (Some(s), Some(stop)) => table::duration(stop - s),
        (Some(s), None) if !finished => table::duration(now_ms - s),
        _ => "-".into(),
    };
    let share = [text(job, "shareIdentifier"), text(job, "quotaShareName")]
        .into_iter()
        .find(|s| !s.is_empty())
        .unwrap_or_else(|| "-".into());
    vec![
        text(job, "jobId"),
        text(job, "jobName"),
        text(job, "jobQueue"),
        table::status(&text(job, "status"), colour),
        share,
        instances(job),
        waited,
        start_estimate(job, now_ms),
        ran,
        table::timestamp(created),
        text(job, "statusReason"),
    ]
}

/// A waiting job's estimated start as `in 12m00s/1h30m` (p50/p90 from now; `>7d` beyond the
/// horizon, `?` uncalibrated), from the `trainyard.startEstimate` the API adds; `-` without one.
fn start_estimate(job: &Value, now_ms: i64) -> String {
    let Some(estimate) = job.pointer("/trainyard/startEstimate") else {
        return "-".into();
    };
    let when = |key: &str| match estimate.get(key).and_then(Value::as_i64) {
        Some(at) => table::duration(at - now_ms),
        None => ">7d".into(),
    };
    let calibrated = if estimate.get("coverage").is_some_and(|c| !c.is_null()) {
        ""
    } else {
        " ?"
    };
    format!("in {}/{}{calibrated}", when("p50Ms"), when("p90Ms"))
}

/// A job's instances as `2 ml.g5.12xlarge`, from its `capacityUsage`.
fn instances(job: &Value) -> String {
    let usage = job.get("capacityUsage").and_then(Value::as_array);
    let parts: Vec<String> = usage
        .into_iter()
        .flatten()
        .map(|u| {
            // A double on the wire (`2.0`); instances are whole.
            let quantity = u.get("quantity").and_then(Value::as_f64).unwrap_or(0.0);
            format!("{quantity} {}", text(u, "capacityUnit"))
        })
        .collect();
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(", ")
    }
}

/// `pattern` is a job name, or a prefix and `*`, as Batch's JOB_NAME filter takes.
fn name_matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => name == pattern,
    }
}

/// Newest first, as Batch lists them, with the job id as the tie-breaker.
fn sort_newest_first(jobs: &mut [Value]) {
    jobs.sort_by(|a, b| {
        let key = |j: &Value| {
            (
                j.get("createdAt").and_then(Value::as_i64).unwrap_or(0),
                j.get("jobId")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
            )
        };
        key(b).cmp(&key(a))
    });
}

/// `trainyard describe`.
pub fn describe(args: &DescribeArgs) -> anyhow::Result<()> {
    let client = Client::new(&args.client.endpoint);
    let id = job_id_of(&client, &args.job)?;
    let job = client.call("describeservicejob", &json!({ "jobId": id }))?;
    match args.client.output {
        Output::Json => print_json(&job)?,
        Output::Table => crate::out!("{}", describe_table(&job))?,
    }
    Ok(())
}

/// The id of `job`: a job id or ARN as it is, or the id of the one job with that name.
pub(crate) fn job_id_of(client: &Client, job: &str) -> anyhow::Result<String> {
    if looks_like_job_id(job) {
        Ok(job.to_owned())
    } else {
        job_id_by_name(client, job)
    }
}

/// Whether `job` is a job id (a UUID) or a job ARN rather than a name.
fn looks_like_job_id(job: &str) -> bool {
    let uuid = job.len() == 36
        && job.chars().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        });
    uuid || job.starts_with("arn:")
}

/// The id of the one job named `name`, in any queue and status; an error names the candidates
/// when there are several.
fn job_id_by_name(client: &Client, name: &str) -> anyhow::Result<String> {
    let mut found = Vec::new();
    for queue in queue_names(client)? {
        let request = json!({
            "jobQueue": queue,
            "filters": [{"name": "JOB_NAME", "values": [name]}],
            "maxResults": PAGE_SIZE,
        });
        found.extend(client.call_all("listservicejobs", &request, "jobSummaryList")?);
    }
    sort_newest_first(&mut found);
    match found.as_slice() {
        [] => bail!("no job is named {name:?} (describe takes a job id, ARN or unique name)"),
        [job] => Ok(text(job, "jobId")),
        several => {
            let ids: Vec<String> = several
                .iter()
                .map(|job| format!("  {}  {}", text(job, "jobId"), text(job, "status")))
                .collect();
            bail!(
                "{} jobs are named {name:?}; describe one by id:\n{}",
                several.len(),
                ids.join("\n")
            )
        }
    }
}

/// The fields people look at first, one per line, then one row per attempt, then the payload.
fn describe_table(job: &Value) -> String {
    let time = |key: &str| table::timestamp(job.get(key).and_then(Value::as_i64));
    let mut rows = vec![
        ("Job id", text(job, "jobId")),
        ("Name", text(job, "jobName")),
        ("ARN", text(job, "jobArn")),
        ("Queue", short_name(&text(job, "jobQueue"))),
        ("Status", text(job, "status")),
        ("Reason", text(job, "statusReason")),
        ("Priority", text(job, "schedulingPriority")),
        ("Share", text(job, "shareIdentifier")),
        ("Quota share", text(job, "quotaShareName")),
        (
            "Owner",
            job.pointer("/trainyard/owner")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        ),
        ("Attempts", attempts_summary(job)),
        ("Created (UTC)", time("createdAt")),
        ("Scheduled (UTC)", time("scheduledAt")),
        ("Started (UTC)", time("startedAt")),
        ("Stopped (UTC)", time("stoppedAt")),
        ("Training job", training_job(job)),
    ];
    rows.retain(|(_, v)| !v.is_empty() && v != "-");
    let rows: Vec<Vec<String>> = rows
        .into_iter()
        .map(|(k, v)| vec![format!("{k}:"), v])
        .collect();
    let mut out = String::new();
    for line in table::render(&["", ""], &rows).lines().skip(1) {
        out.push_str(line);
        out.push('\n');
    }
    let attempts = job.get("attempts").and_then(Value::as_array);
    if let Some(attempts) = attempts.filter(|a| !a.is_empty()) {
        let at = |a: &Value, key: &str| table::timestamp(a.get(key).and_then(Value::as_i64));
        let rows: Vec<Vec<String>> = attempts
            .iter()
            .enumerate()
            .map(|(n, a)| {
                let resource = a
                    .get("serviceResourceId")
                    .and_then(|r| r.get("value"))
                    .and_then(Value::as_str)
                    .and_then(|arn| arn.rsplit('/').next())
                    .unwrap_or("-");
                vec![
                    (n + 1).to_string(),
                    resource.to_owned(),
                    at(a, "startedAt"),
                    at(a, "stoppedAt"),
                    text(a, "statusReason"),
                ]
            })
            .collect();
        out.push_str("Attempts:\n");
        let header = [
            "#",
            "TRAINING JOB",
            "STARTED (UTC)",
            "STOPPED (UTC)",
            "REASON",
        ];
        for line in table::render(&header, &rows).lines() {
            out.push_str("  ");
            out.push_str(line);
            out.push('\n');
        }
    }
    if let Some(payload) = job.get("serviceRequestPayload").and_then(Value::as_str) {
        let pretty = serde_json::from_str::<Value>(payload)
            .ok()
            .and_then(|v| serde_json::to_string_pretty(&v).ok())
            .unwrap_or_else(|| payload.to_owned());
        out.push_str("Payload:\n");
        for line in pretty.lines() {
            out.push_str("  ");
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

fn attempts_summary(job: &Value) -> String {
    let made = job
        .get("attempts")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let allowed = job
        .get("retryStrategy")
        .and_then(|r| r.get("attempts"))
        .and_then(Value::as_u64);
    match allowed {
        Some(allowed) => format!("{made} of {allowed}"),
        None => made.to_string(),
    }
}

fn training_job(job: &Value) -> String {
    job.get("latestAttempt")
        .and_then(|a| a.get("serviceResourceId"))
        .and_then(|r| r.get("value"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned()
}

/// `trainyard terminate`.
pub fn terminate(args: &TerminateArgs) -> anyhow::Result<()> {
    let client = Client::new(&args.client.endpoint);
    let response = client.call(
        "terminateservicejob",
        &json!({ "jobId": args.job, "reason": args.reason }),
    )?;
    match args.client.output {
        Output::Json => print_json(&response)?,
        Output::Table => crate::outln!("terminated {}", args.job)?,
    }
    Ok(())
}

/// `trainyard queues`.
pub fn queues(args: &ClientArgs) -> anyhow::Result<()> {
    let client = Client::new(&args.endpoint);
    let queues = queues_by_priority(&client)?;
    let mut rows = Vec::with_capacity(queues.len());
    for queue in &queues {
        let name = text(queue, "jobQueueName");
        let mut row = json!({
            "jobQueueName": name,
            "jobQueueArn": text(queue, "jobQueueArn"),
            "priority": queue.get("priority").cloned().unwrap_or(Value::Null),
            "state": text(queue, "state"),
            "schedulingPolicy": queue
                .get("schedulingPolicyArn")
                .and_then(Value::as_str)
                .map_or_else(|| "FIFO".to_owned(), short_name),
            "serviceEnvironment": environments(queue),
        });
        for status in COUNTED {
            row[count_key(status)] = json!(count_jobs(&client, &name, status)?);
        }
        rows.push(row);
    }
    match args.output {
        Output::Json => print_json(&Value::Array(rows))?,
        Output::Table => {
            let cells: Vec<Vec<String>> = rows
                .iter()
                .map(|r| {
                    let count = |key: &str| match r.get(key).and_then(Value::as_u64) {
                        Some(n) if n as usize >= COUNT_CAP => format!("{COUNT_CAP}+"),
                        Some(n) => n.to_string(),
                        None => "-".into(),
                    };
                    let mut cells = vec![
                        text(r, "jobQueueName"),
                        text(r, "priority"),
                        text(r, "state"),
                        text(r, "schedulingPolicy"),
                        text(r, "serviceEnvironment"),
                    ];
                    cells.extend(COUNTED.map(|status| count(count_key(status))));
                    cells
                })
                .collect();
            let mut header = vec!["QUEUE", "PRIORITY", "STATE", "POLICY", "ENVIRONMENT"];
            header.extend(COUNTED.map(JobStatus::as_str));
            crate::out!("{}", table::render(&header, &cells))?;
        }
    }
    Ok(())
}

/// `trainyard environments`: each service environment's capacity limits against the instances
/// its queues' jobs hold, then what each fair share holds (the snapshot's top users) and each
/// quota share's limit, use and sharing rule.
///
/// Use comes from `GetJobQueueSnapshot` (each queue's `totalCapacityUsage`), charged to the
/// queue's first environment: exact for queues that feed one environment, as most do.
pub fn environments_command(args: &ClientArgs) -> anyhow::Result<()> {
    let client = Client::new(&args.endpoint);
    let described = client.call_all(
        "describeserviceenvironments",
        &json!({ "maxResults": PAGE_SIZE }),
        "serviceEnvironments",
    )?;
    let queues = queues_by_priority(&client)?;
    let mut in_use: std::collections::BTreeMap<String, f64> = Default::default();
    let mut fed_by: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    let mut shares = Vec::new();
    let mut fair_shares = Vec::new();
    for queue in &queues {
        let name = text(queue, "jobQueueName");
        let snapshot = client.call("getjobqueuesnapshot", &json!({ "jobQueue": name }))?;
        let utilization = &snapshot["queueUtilization"];
        if let Some(first) = environments(queue)
            .split(',')
            .next()
            .filter(|e| !e.is_empty())
        {
            *in_use.entry(first.to_owned()).or_default() +=
                quantity(&utilization["totalCapacityUsage"]);
            fed_by
                .entry(first.to_owned())
                .or_default()
                .push(name.clone());
        }
        let fair = utilization["fairshareUtilization"]["topCapacityUtilization"].as_array();
        for share in fair.into_iter().flatten() {
            fair_shares.push(json!({
                "shareIdentifier": text(share, "shareIdentifier"),
                "jobQueue": name,
                "inUse": quantity(&share["capacityUsage"]),
            }));
        }
        let Some(used) = utilization["quotaShareUtilization"]["topCapacityUtilization"].as_array()
        else {
            continue;
        };
        let listed = client.call_all(
            "listquotashares",
            &json!({ "jobQueue": name, "maxResults": PAGE_SIZE }),
            "quotaShares",
        )?;
        for share in listed {
            let share_name = text(&share, "quotaShareName");
            let use_of = used
                .iter()
                .find(|u| text(u, "quotaShareName") == share_name)
                .map_or(0.0, |u| quantity(&u["capacityUsage"]));
            let sharing = &share["resourceSharingConfiguration"];
            shares.push(json!({
                "quotaShareName": share_name,
                "jobQueue": name,
                "state": text(&share, "state"),
                "capacityLimits": share["capacityLimits"],
                "inUse": use_of,
                "strategy": text(sharing, "strategy"),
                "borrowLimit": sharing.get("borrowLimit").cloned().unwrap_or(Value::Null),
            }));
        }
    }
    let rows: Vec<Value> = described
        .iter()
        .map(|env| {
            let name = text(env, "serviceEnvironmentName");
            json!({
                "serviceEnvironmentName": name,
                "state": text(env, "state"),
                "status": text(env, "status"),
                "capacityLimits": env["capacityLimits"],
                "inUse": in_use.get(&name).copied().unwrap_or(0.0),
                "jobQueues": fed_by.get(&name).cloned().unwrap_or_default(),
            })
        })
        .collect();
    match args.output {
        Output::Json => print_json(&json!({
            "serviceEnvironments": rows,
            "fairShares": fair_shares,
            "quotaShares": shares,
        })),
        Output::Table => {
            let cells: Vec<Vec<String>> = rows
                .iter()
                .map(|r| {
                    let queues: Vec<String> = r["jobQueues"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|q| q.as_str().map(str::to_owned))
                        .collect();
                    vec![
                        text(r, "serviceEnvironmentName"),
                        text(r, "state"),
                        text(r, "status"),
                        limits(&r["capacityLimits"]),
                        count_of(&r["inUse"]),
                        if queues.is_empty() {
                            "-".into()
                        } else {
                            queues.join(",")
                        },
                    ]
                })
                .collect();
            let header = [
                "ENVIRONMENT",
                "STATE",
                "STATUS",
                "LIMIT",
                "IN USE",
                "QUEUES",
            ];
            crate::out!("{}", table::render(&header, &cells))?;
            if !fair_shares.is_empty() {
                let cells: Vec<Vec<String>> = fair_shares
                    .iter()
                    .map(|s| {
                        vec![
                            text(s, "shareIdentifier"),
                            text(s, "jobQueue"),
                            count_of(&s["inUse"]),
                        ]
                    })
                    .collect();
                crate::outln!()?;
                crate::out!(
                    "{}",
                    table::render(&["FAIR SHARE", "QUEUE", "IN USE"], &cells)
                )?;
            }
            if !shares.is_empty() {
                let cells: Vec<Vec<String>> = shares
                    .iter()
                    .map(|s| {
                        let borrow = match s["borrowLimit"].as_i64() {
                            Some(-1) | None => String::new(),
                            Some(limit) => format!(", borrow ≤ {limit}%"),
                        };
                        vec![
                            text(s, "quotaShareName"),
                            text(s, "jobQueue"),
                            text(s, "state"),
                            limits(&s["capacityLimits"]),
                            count_of(&s["inUse"]),
                            format!("{}{borrow}", text(s, "strategy")),
                        ]
                    })
                    .collect();
                let header = [
                    "QUOTA SHARE",
                    "QUEUE",
                    "STATE",
                    "LIMIT",
                    "IN USE",
                    "SHARING",
                ];
                crate::outln!()?;
                crate::out!("{}", table::render(&header, &cells))?;
            }
            Ok(())
        }
    }
}

/// A number of instances as people write it (`3`, not `3.0`).
fn count_of(value: &Value) -> String {
    value
        .as_f64()
        .map_or_else(|| "-".into(), |n| format!("{n}"))
}

/// The instances in a `capacityUsage` list, all units together.
fn quantity(usage: &Value) -> f64 {
    usage
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|u| u.get("quantity").and_then(Value::as_f64))
        .sum()
}

/// `capacityLimits` as `8 NUM_INSTANCES` or `4 ml.g5.xlarge, 2 ml.p4d.24xlarge`.
fn limits(limits: &Value) -> String {
    let parts: Vec<String> = limits
        .as_array()
        .into_iter()
        .flatten()
        .map(|l| format!("{} {}", text(l, "maxCapacity"), text(l, "capacityUnit")))
        .collect();
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(", ")
    }
}

/// The statuses `queues` counts: every one a job waits or runs in. On SageMaker a job spends
/// minutes SCHEDULED and STARTING, so a pool counted by RUNNABLE and RUNNING alone looks idle.
const COUNTED: [JobStatus; 5] = [
    JobStatus::Submitted,
    JobStatus::Runnable,
    JobStatus::Scheduled,
    JobStatus::Starting,
    JobStatus::Running,
];

/// The JSON key of a `queues` count: the status in lower case.
fn count_key(status: JobStatus) -> &'static str {
    match status {
        JobStatus::Submitted => "submitted",
        JobStatus::Pending => "pending",
        JobStatus::Runnable => "runnable",
        JobStatus::Scheduled => "scheduled",
        JobStatus::Starting => "starting",
        JobStatus::Running => "running",
        JobStatus::Succeeded => "succeeded",
        JobStatus::Failed => "failed",
    }
}

/// Highest priority first, then by name: the order queues are considered in.
fn sort_by_priority(queues: &mut [Value]) {
    queues.sort_by(|a, b| {
        let priority = |q: &Value| q.get("priority").and_then(Value::as_i64).unwrap_or(0);
        priority(b)
            .cmp(&priority(a))
            .then_with(|| text(a, "jobQueueName").cmp(&text(b, "jobQueueName")))
    });
}

fn environments(queue: &Value) -> String {
    let mut order: Vec<(i64, String)> = queue
        .get("serviceEnvironmentOrder")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .map(|o| {
                    (
                        o.get("order").and_then(Value::as_i64).unwrap_or(0),
                        short_name(&text(o, "serviceEnvironment")),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    order.sort();
    order
        .into_iter()
        .map(|(_, name)| name)
        .collect::<Vec<_>>()
        .join(",")
}

/// Counts a queue's jobs in one status, stopping at [`COUNT_CAP`].
fn count_jobs(client: &Client, queue: &str, status: JobStatus) -> Result<usize, ClientError> {
    let mut request =
        json!({ "jobQueue": queue, "jobStatus": status.as_str(), "maxResults": PAGE_SIZE });
    let mut count = 0;
    while count < COUNT_CAP {
        let page = client.call("listservicejobs", &request)?;
        count += page
            .get("jobSummaryList")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        match page.get("nextToken").and_then(Value::as_str) {
            Some(token) if !token.is_empty() => request["nextToken"] = json!(token),
            _ => break,
        }
    }
    Ok(count.min(COUNT_CAP))
}

/// Names of every queue.
fn queue_names(client: &Client) -> Result<Vec<String>, ClientError> {
    let queues = queues_by_priority(client)?;
    Ok(queues.iter().map(|q| text(q, "jobQueueName")).collect())
}

/// Every job queue, highest priority first.
fn queues_by_priority(client: &Client) -> Result<Vec<Value>, ClientError> {
    let mut queues = client.call_all(
        "describejobqueues",
        &json!({ "maxResults": PAGE_SIZE }),
        "jobQueues",
    )?;
    sort_by_priority(&mut queues);
    Ok(queues)
}

/// The last path segment of an ARN (`…:job-queue/research` → `research`); names pass through.
fn short_name(name_or_arn: &str) -> String {
    if name_or_arn.starts_with("arn:") {
        name_or_arn
            .rsplit('/')
            .next()
            .unwrap_or(name_or_arn)
            .to_owned()
    } else {
        name_or_arn.to_owned()
    }
}

/// A field as display text: strings as they are, numbers and booleans printed, absent empty.
pub(crate) fn text(value: &Value, key: &str) -> String {
    match value.get(key) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

pub(crate) fn print_json(value: &Value) -> anyhow::Result<()> {
    crate::outln!("{}", json_text(value))
}

fn json_text(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}

pub(crate) fn now_ms() -> i64 {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[test]
    fn a_job_listed_under_two_statuses_is_kept_once_with_the_later_one() {
        let mut jobs = vec![
            json!({"jobId": "a", "status": "RUNNABLE"}),
            json!({"jobId": "b", "status": "RUNNABLE"}),
            json!({"jobId": "a", "status": "RUNNING"}),
            json!({"jobId": "c", "status": "SUCCEEDED"}),
            json!({"jobId": "a", "status": "SUCCEEDED"}),
        ];
        keep_latest_per_job(&mut jobs);
        let kept: Vec<(&str, &str)> = jobs
            .iter()
            .map(|j| (j["jobId"].as_str().unwrap(), j["status"].as_str().unwrap()))
            .collect();
        assert_eq!(
            kept,
            [("b", "RUNNABLE"), ("c", "SUCCEEDED"), ("a", "SUCCEEDED")]
        );
    }

    #[derive(Parser)]
    struct Submit {
        #[command(flatten)]
        args: SubmitArgs,
    }

    fn submit_args(extra: &[&str]) -> SubmitArgs {
        let mut argv = vec!["submit", "--queue", "research"];
        argv.extend_from_slice(extra);
        Submit::try_parse_from(argv).expect("valid arguments").args
    }

    #[test]
    fn a_flag_built_submit_carries_exactly_the_options_given() {
        let args = submit_args(&[
            "--instance-type",
            "ml.g5.xlarge",
            "--instance-count",
            "2",
            "--name",
            "bert",
            "--priority",
            "7",
            "--share",
            "team-a",
            "--attempts",
            "3",
            "--client-token",
            "tok",
            "--duration-s",
            "5",
        ]);
        let request = submit_request(&args, 1_000).expect("request");
        assert_eq!(request["jobName"], json!("bert"));
        assert_eq!(request["jobQueue"], json!("research"));
        assert_eq!(request["serviceJobType"], json!("SAGEMAKER_TRAINING"));
        assert_eq!(request["schedulingPriority"], json!(7));
        assert_eq!(request["shareIdentifier"], json!("team-a"));
        assert_eq!(request["retryStrategy"], json!({ "attempts": 3 }));
        assert_eq!(request["clientToken"], json!("tok"));
        assert!(request.get("quotaShareName").is_none());
        let payload: Value = serde_json::from_str(
            request["serviceRequestPayload"]
                .as_str()
                .expect("payload is a string"),
        )
        .expect("payload is JSON");
        assert_eq!(payload["ResourceConfig"]["InstanceCount"], json!(2));
        assert_eq!(
            payload["HyperParameters"]["emulator_duration_s"],
            json!("5")
        );
    }

    #[test]
    fn a_minimal_submit_sends_no_optional_members_and_names_the_job_by_time() {
        let args = submit_args(&["--instance-type", "ml.m5.large", "--instance-count", "1"]);
        let request = submit_request(&args, 1_722_507_600_000).expect("request");
        let keys: Vec<&String> = request.as_object().expect("object").keys().collect();
        assert_eq!(
            keys,
            vec![
                "jobName",
                "jobQueue",
                "serviceJobType",
                "serviceRequestPayload"
            ]
        );
        assert_eq!(request["jobName"], json!("job-1722507600000"));
    }

    /// The README's Quick start submits with an instance type and no count: one instance.
    #[test]
    fn a_flag_built_submit_without_an_instance_count_asks_for_one_instance() {
        let args = submit_args(&[
            "--name",
            "quick",
            "--instance-type",
            "ml.m5.large",
            "--duration-s",
            "1",
        ]);
        let request = submit_request(&args, 0).expect("request");
        let payload: Value = serde_json::from_str(
            request["serviceRequestPayload"]
                .as_str()
                .expect("payload is a string"),
        )
        .expect("payload is JSON");
        assert_eq!(payload["ResourceConfig"]["InstanceCount"], json!(1));
        let counted = Submit::try_parse_from(["submit", "--queue", "q", "--instance-count", "2"]);
        assert!(counted.is_err(), "a count without a type is refused");
    }

    #[test]
    fn a_payload_file_is_sent_compactly_in_its_own_key_order_and_names_the_job() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("job.json");
        std::fs::write(
            &path,
            "{\n  \"TrainingJobName\": \"from-file\",\n  \"RoleArn\": \"r\"\n}\n",
        )
        .expect("write");
        let args = submit_args(&["--payload", path.to_str().expect("utf-8 path")]);
        let request = submit_request(&args, 0).expect("request");
        assert_eq!(request["jobName"], json!("from-file"));
        assert_eq!(
            request["serviceRequestPayload"],
            json!(r#"{"TrainingJobName":"from-file","RoleArn":"r"}"#)
        );
    }

    #[test]
    fn statuses_parse_in_any_case_and_unknown_ones_list_the_choices() {
        assert_eq!(parse_status("runnable"), Ok(JobStatus::Runnable));
        assert_eq!(parse_status("FAILED"), Ok(JobStatus::Failed));
        let error = parse_status("DONE").expect_err("unknown");
        assert!(error.contains("SUCCEEDED"), "{error}");
    }

    #[test]
    fn queues_sort_by_priority_then_name_and_jobs_newest_first() {
        let mut queues = vec![
            json!({"jobQueueName": "b", "priority": 5}),
            json!({"jobQueueName": "a", "priority": 5}),
            json!({"jobQueueName": "z", "priority": 900}),
        ];
        sort_by_priority(&mut queues);
        let names: Vec<String> = queues.iter().map(|q| text(q, "jobQueueName")).collect();
        assert_eq!(names, ["z", "a", "b"]);

        let mut jobs = vec![
            json!({"jobId": "1", "createdAt": 10}),
            json!({"jobId": "3", "createdAt": 20}),
            json!({"jobId": "2", "createdAt": 20}),
        ];
        sort_newest_first(&mut jobs);
        let ids: Vec<String> = jobs.iter().map(|j| text(j, "jobId")).collect();
        assert_eq!(ids, ["3", "2", "1"]);
    }

    #[test]
    fn arns_shorten_to_names_and_names_pass_through() {
        assert_eq!(
            short_name("arn:aws:batch:us-east-1:000000000000:job-queue/research"),
            "research"
        );
        assert_eq!(short_name("research"), "research");
    }

    #[test]
    fn describe_shows_the_fields_present_and_the_payload_pretty() {
        let job = json!({
            "jobId": "j-1",
            "jobName": "bert",
            "jobQueue": "arn:aws:batch:us-east-1:000000000000:job-queue/research",
            "status": "RUNNABLE",
            "createdAt": 0,
            "retryStrategy": {"attempts": 2},
            "serviceRequestPayload": "{\"TrainingJobName\":\"bert\"}",
        });
        let text = describe_table(&job);
        assert!(text.contains("Queue:"), "{text}");
        assert!(text.contains("research"), "{text}");
        assert!(text.contains("Attempts:"), "{text}");
        assert!(text.contains("0 of 2"), "{text}");
        assert!(text.contains("1970-01-01 00:00:00"), "{text}");
        assert!(
            !text.contains("Stopped"),
            "absent fields are left out: {text}"
        );
        assert!(text.contains("  \"TrainingJobName\": \"bert\""), "{text}");
    }
}
