//! Trace loaders: Philly (`philly.csv`), Alibaba OpenB (`openb_pod_list_default.csv`) and the
//! native JSONL format, all read into one list of [`TraceJob`]s sorted by submission time.
//!
//! # Mappings (stated in every report)
//!
//! - **GPUs → instances**: one instance of a single-GPU type per GPU
//!   ([`DEFAULT_INSTANCE_TYPE`], `ml.p3.2xlarge`, one V100). Capacity is therefore counted in
//!   GPUs, which keeps the trace's GPU-time exactly; a job of `n` GPUs asks for `n` instances.
//! - **Philly VC → share**: `vc-<cluster>` (the VC is Philly's team unit); the scenario then
//!   maps shares to its teams (`other_team`, see `scenario`). No priority: the scenario's tier
//!   rule assigns one.
//! - **OpenB qos → tier (queue)**: `LS` and `Guaranteed` → `production`, `Burstable` →
//!   `research`, `BE` → `sweeps`. No tenant: every job goes to the scenario's default share.
//!   CPU-only tasks (`num_gpu = 0`) are skipped and counted. Run time is `deletion_time −
//!   scheduled_time` (`− creation_time` for tasks that were never scheduled), at least 1 s.
//! - **JSONL**: as written; missing `queue`/`share` fall back to the scenario's defaults.

use std::path::Path;

use serde::Deserialize;

/// The instance type a GPU maps to when the trace does not name one.
pub const DEFAULT_INSTANCE_TYPE: &str = "ml.p3.2xlarge";

/// Shortest run time a job is given (traces round some to zero).
const MIN_DURATION_S: f64 = 1.0;

/// A trace's file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Microsoft Philly, Pollux's job table.
    Philly,
    /// Alibaba OpenB pod list.
    Openb,
    /// One JSON object per line (see [`JsonlJob`]).
    Jsonl,
}

impl Format {
    /// Parses `philly`, `openb` or `jsonl`.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "philly" => Some(Self::Philly),
            "openb" => Some(Self::Openb),
            "jsonl" => Some(Self::Jsonl),
            _ => None,
        }
    }

    /// The format's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Philly => "philly",
            Self::Openb => "openb",
            Self::Jsonl => "jsonl",
        }
    }

    /// The mappings this format's loader applies, for reports.
    pub fn mappings(self) -> Vec<String> {
        let gpus = format!(
            "GPUs -> instances: one {DEFAULT_INSTANCE_TYPE} (1 GPU) per GPU; capacity counts GPUs"
        );
        let mut out = vec![gpus];
        match self {
            Self::Philly => {
                out.push(
                    "Philly VC (cluster) -> share vc-<cluster>; shares outside the scenario's teams fold into its other_team"
                        .into(),
                );
                out.push("no priority in the trace: tiers assigned by the scenario's rule".into());
            }
            Self::Openb => {
                out.push(
                    "OpenB qos -> tier: LS, Guaranteed -> production; Burstable -> research; BE -> sweeps"
                        .into(),
                );
                out.push(
                    "no tenant in the trace: every job in the scenario's default share".into(),
                );
                out.push("CPU-only tasks (num_gpu = 0) skipped".into());
                out.push("run time = deletion_time - scheduled_time (or - creation_time if never scheduled)".into());
            }
            Self::Jsonl => {
                out.push("JSONL: missing queue/share -> scenario defaults".into());
            }
        }
        out
    }
}

/// One job of a trace, in the trace's own terms.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceJob {
    /// Identifier, unique within the trace (`<format>-<line>` unless the trace gives one).
    pub id: String,
    /// Submission, seconds from the trace's first submission.
    pub submit_s: f64,
    /// Run time when undisturbed, seconds.
    pub duration_s: f64,
    /// Instances it needs (≥ 1).
    pub instances: u32,
    /// Instance type, if the trace names one.
    pub instance_type: Option<String>,
    /// Tier (queue) name, if the trace gives one.
    pub queue: Option<String>,
    /// Share (team), if the trace gives one.
    pub share: Option<String>,
    /// `schedulingPriority`, if the trace gives one.
    pub scheduling_priority: Option<u32>,
}

/// A loaded trace.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Trace {
    /// Jobs, by submission time then line.
    pub jobs: Vec<TraceJob>,
    /// Rows the loader skipped on purpose (CPU-only tasks), with the reason.
    pub skipped: Vec<(usize, String)>,
}

impl Trace {
    /// The same jobs arriving `rate` times as fast: each submission time (from the first)
    /// divided by `rate`, the jobs and their order unchanged. A heavier load than the trace
    /// recorded, for asking how the pool would fare under it.
    pub fn with_arrival_rate(mut self, rate: f64) -> Result<Self, TraceError> {
        if !(rate.is_finite() && rate > 0.0) {
            return Err(TraceError::ArrivalRate(rate));
        }
        for job in &mut self.jobs {
            job.submit_s /= rate;
        }
        Ok(self)
    }
}

/// The native format: one object per line; blank lines and lines starting with `#` are ignored.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonlJob {
    /// Optional identifier (default `jsonl-<line>`).
    #[serde(default)]
    pub id: Option<String>,
    /// Submission time, seconds (any origin; shifted so the first is 0).
    pub submit_s: f64,
    /// Run time, seconds.
    pub duration_s: f64,
    /// Instances.
    pub instances: u32,
    /// Instance type (default [`DEFAULT_INSTANCE_TYPE`]).
    #[serde(default)]
    pub instance_type: Option<String>,
    /// Tier queue (default: the scenario's tier rule, or its default queue).
    #[serde(default)]
    pub queue: Option<String>,
    /// Share (default: the scenario's default share).
    #[serde(default)]
    pub share: Option<String>,
    /// `schedulingPriority` (0–9999).
    #[serde(default)]
    pub scheduling_priority: Option<u32>,
}

/// A trace that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be read.
    #[error("cannot read trace {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A line is malformed.
    #[error("line {line}: {message}")]
    Line {
        /// 1-based line number in the file.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The header lacks a column the format needs.
    #[error("header lacks column {0:?}")]
    MissingColumn(&'static str),
    /// Nothing to replay.
    #[error("the trace has no jobs")]
    Empty,
    /// An arrival rate that is not a positive number.
    #[error("the arrival rate must be a positive number, got {0}")]
    ArrivalRate(f64),
}

fn bad(line: usize, message: impl Into<String>) -> TraceError {
    TraceError::Line {
        line,
        message: message.into(),
    }
}

/// Reads and parses the trace at `path`.
pub fn load(path: &Path, format: Format) -> Result<Trace, TraceError> {
    let text = std::fs::read_to_string(path).map_err(|source| TraceError::Io {
        path: path.display().to_string(),
        source,
    })?;
    parse(&text, format)
}

/// Parses a trace's text.
pub fn parse(text: &str, format: Format) -> Result<Trace, TraceError> {
    let mut trace = match format {
        Format::Philly => parse_philly(text)?,
        Format::Openb => parse_openb(text)?,
        Format::Jsonl => parse_jsonl(text)?,
    };
    if trace.jobs.is_empty() {
        return Err(TraceError::Empty);
    }
    // Total order: submission, then the order of the file (ids carry the line).
    trace.jobs.sort_by(|a, b| a.submit_s.total_cmp(&b.submit_s));
    let first = trace.jobs[0].submit_s;
    for job in &mut trace.jobs {
        job.submit_s -= first;
    }
    Ok(trace)
}

/// A CSV file with a header: the header's column positions, then rows split on commas (these
/// traces quote nothing).
struct Csv<'a> {
    columns: Vec<&'a str>,
    rows: Vec<(usize, Vec<&'a str>)>,
}

impl<'a> Csv<'a> {
    fn new(text: &'a str) -> Result<Self, TraceError> {
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty());
        let Some((_, header)) = lines.next() else {
            return Err(TraceError::Empty);
        };
        let columns = header.split(',').map(str::trim).collect();
        let rows = lines
            .map(|(i, l)| (i + 1, l.split(',').map(str::trim).collect()))
            .collect();
        Ok(Self { columns, rows })
    }

    fn column(&self, name: &'static str) -> Result<usize, TraceError> {
        self.columns
            .iter()
            .position(|c| *c == name)
            .ok_or(TraceError::MissingColumn(name))
    }
}

fn field<'a>(row: &[&'a str], at: usize, line: usize, name: &str) -> Result<&'a str, TraceError> {
    row.get(at).copied().ok_or_else(|| {
        bad(
            line,
            format!("missing field {name} (expected more columns)"),
        )
    })
}

fn number(row: &[&str], at: usize, line: usize, name: &str) -> Result<f64, TraceError> {
    let raw = field(row, at, line, name)?;
    match raw.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        _ => Err(bad(line, format!("{name} must be a number, got {raw:?}"))),
    }
}

fn gpus(row: &[&str], at: usize, line: usize, name: &str) -> Result<u32, TraceError> {
    let raw = field(row, at, line, name)?;
    raw.parse::<u32>()
        .map_err(|_| bad(line, format!("{name} must be a whole number, got {raw:?}")))
}

fn parse_philly(text: &str) -> Result<Trace, TraceError> {
    let csv = Csv::new(text)?;
    let (ts, dur, gp, vc) = (
        csv.column("timestamp")?,
        csv.column("duration")?,
        csv.column("num_gpus")?,
        csv.column("cluster")?,
    );
    let mut trace = Trace::default();
    for (line, row) in &csv.rows {
        let line = *line;
        let stamp = field(row, ts, line, "timestamp")?;
        let submit = parse_timestamp(stamp).ok_or_else(|| {
            bad(
                line,
                format!("timestamp must be YYYY-MM-DD HH:MM:SS, got {stamp:?}"),
            )
        })?;
        let duration = number(row, dur, line, "duration")?;
        if duration < 0.0 {
            return Err(bad(line, format!("duration must be ≥ 0, got {duration}")));
        }
        let n = gpus(row, gp, line, "num_gpus")?;
        if n == 0 {
            return Err(bad(line, "num_gpus must be ≥ 1"));
        }
        let cluster = field(row, vc, line, "cluster")?;
        if cluster.is_empty() {
            return Err(bad(line, "cluster (VC) is empty"));
        }
        trace.jobs.push(TraceJob {
            id: format!("philly-{line}"),
            submit_s: submit as f64,
            duration_s: duration.max(MIN_DURATION_S),
            instances: n,
            instance_type: None,
            queue: None,
            share: Some(format!("vc-{cluster}")),
            scheduling_priority: None,
        });
    }
    Ok(trace)
}

/// `YYYY-MM-DD HH:MM:SS` as seconds since 1970-01-01 in the trace's own (zone-less) clock.
pub fn parse_timestamp(s: &str) -> Option<i64> {
    let (date, time) = s.trim().split_once(' ')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let mut t = time.split(':').map(|p| p.parse::<i64>().ok());
    let (hh, mm, ss) = (t.next()??, t.next()??, t.next()??);
    if d.next().is_some() || t.next().is_some() {
        return None;
    }
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    if hh < 0 || mm < 0 || ss < 0 {
        return None;
    }
    Some(days_from_civil(y, m, day) * 86_400 + hh * 3_600 + mm * 60 + ss)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The tier an OpenB `qos` maps to.
pub fn openb_tier(qos: &str) -> Option<&'static str> {
    match qos {
        "LS" | "Guaranteed" => Some("production"),
        "Burstable" => Some("research"),
        "BE" => Some("sweeps"),
        _ => None,
    }
}

fn parse_openb(text: &str) -> Result<Trace, TraceError> {
    let csv = Csv::new(text)?;
    let (name, gp, qos, created, scheduled, deleted) = (
        csv.column("name")?,
        csv.column("num_gpu")?,
        csv.column("qos")?,
        csv.column("creation_time")?,
        csv.column("scheduled_time")?,
        csv.column("deletion_time")?,
    );
    let mut trace = Trace::default();
    for (line, row) in &csv.rows {
        let line = *line;
        let n = gpus(row, gp, line, "num_gpu")?;
        if n == 0 {
            trace
                .skipped
                .push((line, "CPU-only task (num_gpu = 0)".into()));
            continue;
        }
        let q = field(row, qos, line, "qos")?;
        let tier = openb_tier(q).ok_or_else(|| {
            bad(
                line,
                format!("qos must be LS, Guaranteed, Burstable or BE, got {q:?}"),
            )
        })?;
        let created_s = number(row, created, line, "creation_time")?;
        let deleted_s = number(row, deleted, line, "deletion_time")?;
        let start_s = match field(row, scheduled, line, "scheduled_time")? {
            "" => created_s,
            _ => number(row, scheduled, line, "scheduled_time")?,
        };
        if deleted_s < start_s {
            return Err(bad(
                line,
                format!("deletion_time {deleted_s} is before the task started ({start_s})"),
            ));
        }
        let id = field(row, name, line, "name")?;
        trace.jobs.push(TraceJob {
            id: if id.is_empty() {
                format!("openb-{line}")
            } else {
                id.to_owned()
            },
            submit_s: created_s,
            duration_s: (deleted_s - start_s).max(MIN_DURATION_S),
            instances: n,
            instance_type: None,
            queue: Some(tier.to_owned()),
            share: None,
            scheduling_priority: None,
        });
    }
    Ok(trace)
}

fn parse_jsonl(text: &str) -> Result<Trace, TraceError> {
    let mut trace = Trace::default();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let raw = raw.trim();
        if raw.is_empty() || raw.starts_with('#') {
            continue;
        }
        let job: JsonlJob =
            serde_json::from_str(raw).map_err(|e| bad(line, format!("invalid job: {e}")))?;
        if !job.submit_s.is_finite() {
            return Err(bad(line, "submit_s must be a finite number"));
        }
        if !job.duration_s.is_finite() || job.duration_s < 0.0 {
            return Err(bad(line, "duration_s must be a number ≥ 0"));
        }
        if job.instances == 0 {
            return Err(bad(line, "instances must be ≥ 1"));
        }
        if job.scheduling_priority.is_some_and(|p| p > 9_999) {
            return Err(bad(line, "scheduling_priority must be 0–9999"));
        }
        trace.jobs.push(TraceJob {
            id: job.id.unwrap_or_else(|| format!("jsonl-{line}")),
            submit_s: job.submit_s,
            duration_s: job.duration_s.max(MIN_DURATION_S),
            instances: job.instances,
            instance_type: job.instance_type,
            queue: job.queue,
            share: job.share,
            scheduling_priority: job.scheduling_priority,
        });
    }
    Ok(trace)
}
