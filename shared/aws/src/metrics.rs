//! Metrics as CloudWatch Embedded Metric Format (EMF): JSON log lines that CloudWatch Logs
//! turns into metrics, so a Lambda function reports them by printing, with no API call and no
//! added latency. Names, units and dimensions are listed in `docs/metrics.md`.
//!
//! Three sources, each rendered as EMF lines (one line per dimension set):
//!
//! - **Transitions** ([`Recorder`], fed by [`MetricsSink`]): dispatches, retries, preemptions and
//!   capacity errors, dispatch latency and wait time, per queue and share. They are counted as
//!   the use-cases publish their events, so they cost no reads, and [`Recorder::emf_lines`]
//!   drains them: each invocation prints what happened during it.
//! - **Cheap gauges** ([`gauges`]): instances in use and the limit per environment (one document
//!   and one resource each), and per queue the age of the oldest RUNNABLE job at the front of its
//!   line (one index read per share), also as `OldestRunnableJobAgeSeconds` for the whole stack,
//!   which an alarm watches.
//! - **Job counts** ([`job_counts`]): jobs per queue, share and status. Counting reads every job
//!   counted, so it grows with the backlog: only the non-terminal statuses are counted, at most
//!   [`MAX_COUNTED`] per queue and status, and the caller decides when (the schedule tick).
//!
//! Every line carries the `Stack` dimension so that several stacks in one account stay apart.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{Map, Value, json};
use trainyard_app::ports::{EnvironmentUsage, Event, EventSink, JobQuery, Store, StoreError};
use trainyard_app::service::estimates::QueueEstimates;
use trainyard_app::service::why::{every_line_waits, shown_reason_code};
use trainyard_domain::environment::ServiceEnvironment;
use trainyard_domain::job::{JobStatus, Requeue};
use trainyard_domain::labels::bounded_shares;
pub use trainyard_domain::labels::{MAX_SHARES_PER_QUEUE, OTHER_SHARES};
use trainyard_domain::order::share_key;
use trainyard_domain::queue::JobQueue;

/// The CloudWatch namespace of every metric.
pub const NAMESPACE: &str = "Trainyard";

/// Most jobs counted per queue and status by [`job_counts`]: a bound on what one count reads
/// (10,000 small items is a few hundred read units and well under a second of queries). A
/// count at the bound means "at least".
pub const MAX_COUNTED: usize = 10_000;

/// Page size of the counting queries.
const COUNT_PAGE: usize = 1_000;

/// EMF accepts at most 100 values in one metric's array; samples beyond it in one invocation
/// are dropped (the count metrics still count them).
const MAX_SAMPLES: usize = 100;

/// The statuses [`job_counts`] counts: every status a job can still leave.
pub const COUNTED_STATUSES: [JobStatus; 5] = [
    JobStatus::Submitted,
    JobStatus::Runnable,
    JobStatus::Scheduled,
    JobStatus::Starting,
    JobStatus::Running,
];

/// A CloudWatch unit, as EMF spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// A number of things.
    Count,
    /// A duration.
    Seconds,
    /// A plain number (a share between 0 and 1).
    None,
}

impl Unit {
    fn as_str(self) -> &'static str {
        match self {
            Self::Count => "Count",
            Self::Seconds => "Seconds",
            Self::None => "None",
        }
    }
}

/// One EMF log line: a dimension set and the metrics reported under it.
#[derive(Debug, Clone, PartialEq)]
pub struct EmfLine {
    /// Dimension names and values, in order (values are never empty).
    pub dimensions: Vec<(&'static str, String)>,
    /// Metric names, units and values (a number, or an array of samples).
    pub metrics: Vec<(&'static str, Unit, Value)>,
}

impl EmfLine {
    /// The line as CloudWatch expects it, timestamped `now_ms`.
    pub fn render(&self, now_ms: i64) -> String {
        let mut root = Map::new();
        let names: Vec<&str> = self.dimensions.iter().map(|(k, _)| *k).collect();
        let metrics: Vec<Value> = self
            .metrics
            .iter()
            .map(|(name, unit, _)| json!({ "Name": name, "Unit": unit.as_str() }))
            .collect();
        root.insert(
            "_aws".into(),
            json!({
                "Timestamp": now_ms,
                "CloudWatchMetrics": [{
                    "Namespace": NAMESPACE,
                    "Dimensions": [names],
                    "Metrics": metrics,
                }],
            }),
        );
        for (name, value) in &self.dimensions {
            root.insert((*name).into(), Value::String(value.clone()));
        }
        for (name, _, value) in &self.metrics {
            root.insert((*name).into(), value.clone());
        }
        Value::Object(root).to_string()
    }
}

/// What happened to the jobs of one queue and share since the last drain.
#[derive(Debug, Clone, Default, PartialEq)]
struct Tally {
    dispatches: u64,
    retries: u64,
    preemptions: u64,
    capacity_errors: u64,
    /// RUNNABLE → SCHEDULED, per dispatch, in seconds.
    dispatch_latency_s: Vec<f64>,
    /// Submitted → first SCHEDULED, per job, in seconds.
    wait_time_s: Vec<f64>,
}

impl Tally {
    fn add(&mut self, other: &Tally) {
        self.dispatches += other.dispatches;
        self.retries += other.retries;
        self.preemptions += other.preemptions;
        self.capacity_errors += other.capacity_errors;
        push_bounded(&mut self.dispatch_latency_s, &other.dispatch_latency_s);
        push_bounded(&mut self.wait_time_s, &other.wait_time_s);
    }

    fn is_empty(&self) -> bool {
        *self == Tally::default()
    }

    /// How busy the share was: what it is ranked by among its queue's shares.
    fn weight(&self) -> u64 {
        self.dispatches + self.retries + self.preemptions + self.capacity_errors
    }

    fn metrics(&self) -> Vec<(&'static str, Unit, Value)> {
        let mut out = vec![
            ("Dispatches", Unit::Count, json!(self.dispatches)),
            ("Retries", Unit::Count, json!(self.retries)),
            ("Preemptions", Unit::Count, json!(self.preemptions)),
            ("CapacityErrors", Unit::Count, json!(self.capacity_errors)),
        ];
        // An empty array is not a valid EMF value: no sample, no metric.
        if !self.dispatch_latency_s.is_empty() {
            out.push((
                "DispatchLatencySeconds",
                Unit::Seconds,
                json!(self.dispatch_latency_s),
            ));
        }
        if !self.wait_time_s.is_empty() {
            out.push(("WaitTimeSeconds", Unit::Seconds, json!(self.wait_time_s)));
        }
        out
    }
}

fn push_bounded(into: &mut Vec<f64>, from: &[f64]) {
    let room = MAX_SAMPLES.saturating_sub(into.len());
    into.extend(from.iter().take(room));
}

fn seconds_between(from_ms: i64, to_ms: i64) -> f64 {
    (to_ms.saturating_sub(from_ms).max(0)) as f64 / 1000.0
}

/// Counts transitions per (queue, share) until drained. Shared behind an [`Arc`] between the
/// [`MetricsSink`] and whoever prints the lines.
#[derive(Debug, Default)]
pub struct Recorder {
    tallies: Mutex<BTreeMap<(String, String), Tally>>,
}

impl Recorder {
    /// An empty recorder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Accounts one event. Only status changes to SCHEDULED or RUNNABLE count.
    pub fn record(&self, event: &Event) {
        let Event::JobStatusChanged { status, job, .. } = event else {
            return;
        };
        let mut tally = Tally::default();
        match status {
            JobStatus::Scheduled => {
                tally.dispatches = 1;
                // The attempt's start is when it was dispatched, on the writer's clock.
                let at = job
                    .latest_attempt()
                    .and_then(|a| a.started_at)
                    .unwrap_or(job.updated_at);
                let runnable_since = job.runnable_at.unwrap_or(job.created_at);
                tally
                    .dispatch_latency_s
                    .push(seconds_between(runnable_since, at));
                if job.attempts.len() <= 1 {
                    tally.wait_time_s.push(seconds_between(job.created_at, at));
                }
            }
            JobStatus::Runnable => match job.requeued_by {
                Some(Requeue::CapacityError) => tally.capacity_errors = 1,
                Some(Requeue::Preemption) => tally.preemptions = 1,
                Some(Requeue::Retry | Requeue::Lost) => tally.retries = 1,
                None => return,
            },
            _ => return,
        }
        let key = (job.job_queue.clone(), share_key(job).to_owned());
        self.lock().entry(key).or_default().add(&tally);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, String), Tally>> {
        // Counts stay meaningful even if a holder panicked mid-update.
        self.tallies.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The EMF lines for everything recorded since the last call, and resets: one line per
    /// queue (`Stack`, `JobQueue`) and one per named share (`Stack`, `JobQueue`, `Share`), at
    /// most [`MAX_SHARES_PER_QUEUE`] of them per queue (the busiest; the rest summed under
    /// [`OTHER_SHARES`]). Nothing recorded, no lines.
    pub fn emf_lines(&self, stack: &str, now_ms: i64) -> Vec<String> {
        let mut tallies = std::mem::take(&mut *self.lock());
        let mut per_queue: BTreeMap<String, Tally> = BTreeMap::new();
        for ((queue, _), tally) in &tallies {
            per_queue.entry(queue.clone()).or_default().add(tally);
        }
        tallies.retain(|(_, share), tally| !share.is_empty() && !tally.is_empty());
        let tallies = bounded_shares(tallies, Tally::weight, |a, b| a.add(&b));
        let mut lines = Vec::new();
        for ((queue, share), tally) in &tallies {
            {
                lines.push(EmfLine {
                    dimensions: vec![
                        ("Stack", stack.to_owned()),
                        ("JobQueue", queue.clone()),
                        ("Share", share.clone()),
                    ],
                    metrics: tally.metrics(),
                });
            }
        }
        let queue_lines =
            per_queue
                .into_iter()
                .filter(|(_, t)| !t.is_empty())
                .map(|(queue, tally)| EmfLine {
                    dimensions: vec![("Stack", stack.to_owned()), ("JobQueue", queue)],
                    metrics: tally.metrics(),
                });
        queue_lines
            .chain(lines)
            .map(|line| line.render(now_ms))
            .collect()
    }
}

/// An event sink that records transitions into a [`Recorder`] and forwards every event to the
/// sink it wraps.
#[derive(Debug)]
pub struct MetricsSink<E> {
    inner: E,
    recorder: Arc<Recorder>,
}

impl<E: EventSink> MetricsSink<E> {
    /// Wraps `inner`, recording into `recorder`.
    pub fn new(inner: E, recorder: Arc<Recorder>) -> Self {
        Self { inner, recorder }
    }

    /// The recorder.
    pub fn recorder(&self) -> &Arc<Recorder> {
        &self.recorder
    }

    /// The wrapped sink.
    pub fn inner(&self) -> &E {
        &self.inner
    }
}

impl<E: EventSink> EventSink for MetricsSink<E> {
    async fn publish(&self, event: Event) {
        self.recorder.record(&event);
        self.inner.publish(event).await;
    }

    fn publishes_audit(&self) -> bool {
        self.inner.publishes_audit()
    }
}

/// Instances in use against the limit for one environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvironmentGauge {
    /// Service environment name.
    pub environment: String,
    /// Instances held by dispatched attempts, all types.
    pub in_use: u64,
    /// The `NUM_INSTANCES` limit, or the sum of the per-type limits when there is none.
    pub limit: u64,
    /// Per instance type: (in use, limit); types with neither are absent.
    pub per_type: BTreeMap<String, (u64, u64)>,
}

/// The cheap gauges: read from a handful of items whatever the backlog.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Gauges {
    /// One per service environment, by name.
    pub environments: Vec<EnvironmentGauge>,
    /// Per queue: in ms, the age of the oldest RUNNABLE job at the front of a line (of the queue
    /// for a FIFO queue, of a share for a queue with a policy; 0 when none), by queue name.
    pub oldest_runnable_ms: BTreeMap<String, i64>,
}

/// Reads the cheap gauges at `now_ms`: environments and their usage documents, and the first
/// RUNNABLE job of each queue's shares (one index item per share).
pub async fn gauges<S: Store>(store: &S, now_ms: i64) -> Result<Gauges, StoreError> {
    let usage: BTreeMap<String, EnvironmentUsage> = store
        .capacity_in_use()
        .await?
        .into_iter()
        .map(|(env, u)| (env, u.value))
        .collect();
    let mut environments = Vec::new();
    for env in store.list_resources::<ServiceEnvironment>().await? {
        let env = env.value;
        let used = usage
            .get(&env.service_environment_name)
            .cloned()
            .unwrap_or_default();
        let total_limit: Option<u64> = env
            .capacity_limits
            .iter()
            .filter(|l| l.is_total())
            .map(|l| u64::from(l.max_capacity))
            .reduce(u64::min);
        let mut per_type: BTreeMap<String, (u64, u64)> = used
            .instances
            .iter()
            .map(|(ty, n)| (ty.clone(), (*n, 0)))
            .collect();
        for limit in env.capacity_limits.iter().filter(|l| !l.is_total()) {
            per_type.entry(limit.capacity_unit.clone()).or_default().1 +=
                u64::from(limit.max_capacity);
        }
        let limit = total_limit.unwrap_or_else(|| per_type.values().map(|(_, l)| l).sum());
        environments.push(EnvironmentGauge {
            environment: env.service_environment_name,
            in_use: used.total(),
            limit,
            per_type,
        });
    }
    let mut oldest_runnable_ms = BTreeMap::new();
    for queue in store.list_resources::<JobQueue>().await? {
        let name = queue.value.job_queue_name;
        // The front of each line: the queue's for a FIFO queue, each share's for one with a
        // policy (within a share, a higher priority goes first, so its front may not be its
        // oldest job; a job that waits behind higher priorities waits by design).
        let mut oldest: Option<i64> = None;
        for share in store.runnable_shares(&name).await? {
            for head in store.runnable_heads(&name, &share, 1).await? {
                oldest = Some(oldest.map_or(head.runnable_at, |o| o.min(head.runnable_at)));
            }
        }
        let age = oldest.map_or(0, |since| now_ms.saturating_sub(since).max(0));
        oldest_runnable_ms.insert(name, age);
    }
    Ok(Gauges {
        environments,
        oldest_runnable_ms,
    })
}

impl Gauges {
    /// The EMF lines: `OldestRunnableJobAgeSeconds` for the stack (`Stack` only: the alarm's
    /// dimension set) and per queue; instances in use and limit per environment and per
    /// environment and instance type.
    pub fn emf_lines(&self, stack: &str, now_ms: i64) -> Vec<String> {
        let stack_dim = || ("Stack", stack.to_owned());
        let age_s = |ms: i64| json!(ms as f64 / 1000.0);
        let oldest = self.oldest_runnable_ms.values().copied().max().unwrap_or(0);
        let mut lines = vec![EmfLine {
            dimensions: vec![stack_dim()],
            metrics: vec![("OldestRunnableJobAgeSeconds", Unit::Seconds, age_s(oldest))],
        }];
        for (queue, ms) in &self.oldest_runnable_ms {
            lines.push(EmfLine {
                dimensions: vec![stack_dim(), ("JobQueue", queue.clone())],
                metrics: vec![("OldestRunnableJobAgeSeconds", Unit::Seconds, age_s(*ms))],
            });
        }
        for env in &self.environments {
            lines.push(EmfLine {
                dimensions: vec![stack_dim(), ("ServiceEnvironment", env.environment.clone())],
                metrics: vec![
                    ("InstancesInUse", Unit::Count, json!(env.in_use)),
                    ("InstanceLimit", Unit::Count, json!(env.limit)),
                ],
            });
            for (ty, (used, limit)) in &env.per_type {
                lines.push(EmfLine {
                    dimensions: vec![
                        stack_dim(),
                        ("ServiceEnvironment", env.environment.clone()),
                        ("InstanceType", ty.clone()),
                    ],
                    metrics: vec![
                        ("InstancesInUse", Unit::Count, json!(used)),
                        ("InstanceLimit", Unit::Count, json!(limit)),
                    ],
                });
            }
        }
        lines.into_iter().map(|l| l.render(now_ms)).collect()
    }
}

/// Jobs per queue, share and status, for the [`COUNTED_STATUSES`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JobCounts {
    /// Per (queue, status): jobs counted (at most [`MAX_COUNTED`]).
    pub per_queue: BTreeMap<(String, JobStatus), u64>,
    /// Per (queue, share, status), for jobs with a share.
    pub per_share: BTreeMap<(String, String, JobStatus), u64>,
    /// RUNNABLE jobs counted per (queue, code of the reason they wait, as describe shows it;
    /// `NOT_PLANNED_YET` for one no cycle has planned since it joined its line).
    pub per_reason: BTreeMap<(String, String), u64>,
    /// The same per (queue, share, reason code), for jobs with a share.
    pub per_share_reason: BTreeMap<(String, String, String), u64>,
}

/// Counts the jobs of every queue in each of the [`COUNTED_STATUSES`], reading at most
/// [`MAX_COUNTED`] per queue and status (the queue-and-status index, newest first). Costs one
/// read of each job counted: call it on a schedule, not per event.
pub async fn job_counts<S: Store>(store: &S) -> Result<JobCounts, StoreError> {
    let mut counts = JobCounts::default();
    let lines = every_line_waits(store).await?;
    for queue in store.list_resources::<JobQueue>().await? {
        let name = queue.value.job_queue_name;
        for status in COUNTED_STATUSES {
            let mut query = JobQuery {
                queue: Some(name.clone()),
                status: Some(status),
                limit: COUNT_PAGE,
                ..JobQuery::default()
            };
            let mut counted = 0u64;
            // MAX_COUNTED / COUNT_PAGE pages at most.
            while counted < MAX_COUNTED as u64 {
                let page = store.list_jobs(&query).await?;
                for job in &page.items {
                    if counted == MAX_COUNTED as u64 {
                        break;
                    }
                    counted += 1;
                    let share = share_key(&job.value);
                    if status == JobStatus::Runnable {
                        let code = shown_reason_code(&job.value, &lines);
                        if !share.is_empty() {
                            *counts
                                .per_share_reason
                                .entry((name.clone(), share.to_owned(), code.clone()))
                                .or_insert(0) += 1;
                        }
                        *counts.per_reason.entry((name.clone(), code)).or_insert(0) += 1;
                    }
                    if !share.is_empty() {
                        *counts
                            .per_share
                            .entry((name.clone(), share.to_owned(), status))
                            .or_insert(0) += 1;
                    }
                }
                match page.next {
                    Some(next) => query.after = Some(next),
                    None => break,
                }
            }
            counts.per_queue.insert((name.clone(), status), counted);
        }
    }
    Ok(counts)
}

impl JobCounts {
    /// The EMF lines: `Jobs` per (`Stack`, `JobQueue`, `Status`), zeros included so that a
    /// queue that emptied reads 0 rather than nothing, and per (`Stack`, `JobQueue`, `Share`,
    /// `Status`) for shares with jobs; `PendingJobs` per (`Stack`, `JobQueue`, `Reason`), the
    /// reason codes being a fixed set, and per (`Stack`, `JobQueue`, `Share`, `Reason`), shares
    /// bounded as for `Jobs` (the ones with the most waiting jobs named, the rest summed).
    pub fn emf_lines(&self, stack: &str, now_ms: i64) -> Vec<String> {
        let queue_lines = self.per_queue.iter().map(|((queue, status), n)| EmfLine {
            dimensions: vec![
                ("Stack", stack.to_owned()),
                ("JobQueue", queue.clone()),
                ("Status", status.as_str().to_owned()),
            ],
            metrics: vec![("Jobs", Unit::Count, json!(n))],
        });
        // The shares with the most jobs are named, the rest summed (see MAX_SHARES_PER_QUEUE).
        let per_share = bounded_per_share(&self.per_share);
        let share_lines = per_share.iter().map(|((queue, share, status), n)| EmfLine {
            dimensions: vec![
                ("Stack", stack.to_owned()),
                ("JobQueue", queue.clone()),
                ("Share", share.clone()),
                ("Status", status.as_str().to_owned()),
            ],
            metrics: vec![("Jobs", Unit::Count, json!(n))],
        });
        let reason_lines = self.per_reason.iter().map(|((queue, code), n)| EmfLine {
            dimensions: vec![
                ("Stack", stack.to_owned()),
                ("JobQueue", queue.clone()),
                ("Reason", code.clone()),
            ],
            metrics: vec![("PendingJobs", Unit::Count, json!(n))],
        });
        let share_reason_lines = bounded_per_share(&self.per_share_reason).into_iter().map(
            |((queue, share, code), n)| EmfLine {
                dimensions: vec![
                    ("Stack", stack.to_owned()),
                    ("JobQueue", queue),
                    ("Share", share),
                    ("Reason", code),
                ],
                metrics: vec![("PendingJobs", Unit::Count, json!(n))],
            },
        );
        queue_lines
            .chain(share_lines)
            .chain(reason_lines)
            .chain(share_reason_lines)
            .map(|l| l.render(now_ms))
            .collect()
    }
}

/// Counts per (queue, share, key) with at most [`MAX_SHARES_PER_QUEUE`] shares a queue named,
/// those with the most in all, and the rest summed under [`OTHER_SHARES`] key by key.
fn bounded_per_share<K: Ord + Clone>(
    counts: &BTreeMap<(String, String, K), u64>,
) -> Vec<((String, String, K), u64)> {
    let mut by_share: BTreeMap<(String, String), BTreeMap<K, u64>> = BTreeMap::new();
    for ((queue, share, key), n) in counts {
        let per_key = by_share.entry((queue.clone(), share.clone())).or_default();
        *per_key.entry(key.clone()).or_insert(0) += *n;
    }
    let bounded = bounded_shares(
        by_share,
        |per_key| per_key.values().sum(),
        |a, b| {
            for (key, n) in b {
                *a.entry(key).or_insert(0) += n;
            }
        },
    );
    bounded
        .into_iter()
        .flat_map(|((queue, share), per_key)| {
            per_key
                .into_iter()
                .map(move |(key, n)| ((queue.clone(), share.clone(), key), n))
        })
        .collect()
}

/// A forecast round's lines, per (`Stack`, `JobQueue`): `StartEstimates`, the queue's waiting
/// jobs given an estimate, and once some of its estimates have been scored against the starts
/// that followed, `StartEstimateCoverageP50` and `StartEstimateCoverageP90` (the share of those
/// starts at or before the published p50 and p90; the p90's should read about 0.9) and
/// `StartEstimateOutcomes` (how many starts that counts, at most 1,000). Queues are the
/// configured ones: a bounded set.
pub fn estimate_lines(stack: &str, now_ms: i64, per_queue: &[QueueEstimates]) -> Vec<String> {
    per_queue
        .iter()
        .map(|q| {
            let mut metrics = vec![("StartEstimates", Unit::Count, json!(q.jobs))];
            if let Some(c) = &q.coverage {
                metrics.push(("StartEstimateCoverageP50", Unit::None, json!(c.p50)));
                metrics.push(("StartEstimateCoverageP90", Unit::None, json!(c.p90)));
                metrics.push(("StartEstimateOutcomes", Unit::Count, json!(c.outcomes)));
            }
            EmfLine {
                dimensions: vec![("Stack", stack.to_owned()), ("JobQueue", q.queue.clone())],
                metrics,
            }
            .render(now_ms)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use trainyard_app::ports::{ConfigStore, JobStore, SchedulingStore};

    use trainyard_app::contract::job;
    use trainyard_app::memory::MemoryStore;
    use trainyard_app::ports::Write;
    use trainyard_domain::environment::{CapacityLimit, ServiceEnvironmentType};
    use trainyard_domain::job::Attempt;
    use trainyard_domain::queue::{JobQueueType, ServiceEnvironmentOrder};
    use trainyard_domain::{ResourceStatus, State};
    use trainyard_scheduler::retry::PREEMPTED_REASON;

    use super::*;

    const NOW: i64 = 1_800_000_000_000;

    /// Dimension names and values a line must have.
    type Dims = &'static [(&'static str, &'static str)];

    fn parse(lines: &[String]) -> Vec<Value> {
        lines
            .iter()
            .map(|l| {
                assert!(!l.contains('\n'), "one line each: {l}");
                serde_json::from_str(l).unwrap()
            })
            .collect()
    }

    /// Checks the EMF envelope of `line` and returns (dimension names, metric name → unit).
    fn envelope(line: &Value) -> (Vec<String>, BTreeMap<String, String>) {
        let aws = &line["_aws"];
        assert_eq!(aws["Timestamp"], NOW, "{line}");
        let directives = aws["CloudWatchMetrics"].as_array().unwrap();
        assert_eq!(directives.len(), 1, "{line}");
        let d = &directives[0];
        assert_eq!(d["Namespace"], "Trainyard");
        let sets = d["Dimensions"].as_array().unwrap();
        assert_eq!(sets.len(), 1, "one dimension set per line: {line}");
        let dims: Vec<String> = sets[0]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect();
        for dim in &dims {
            let value = line[dim].as_str().unwrap();
            assert!(!value.is_empty(), "dimension {dim} has a value: {line}");
        }
        let mut metrics = BTreeMap::new();
        for m in d["Metrics"].as_array().unwrap() {
            let name = m["Name"].as_str().unwrap().to_owned();
            assert!(
                line[&name].is_number() || line[&name].is_array(),
                "metric {name} has a value: {line}"
            );
            metrics.insert(name, m["Unit"].as_str().unwrap().to_owned());
        }
        (dims, metrics)
    }

    fn attempt(started_at: i64, reason: Option<&str>) -> Attempt {
        Attempt {
            stop_requested: None,
            failed_as: None,
            selected_instance_type: None,
            training_job_name: "ty-x".into(),
            training_job_arn: None,
            started_at: Some(started_at),
            stopped_at: None,
            status_reason: reason.map(str::to_owned),
            service_environment: Some("env".into()),
        }
    }

    #[test]
    fn transitions_are_classified_and_drained_per_queue_and_share() {
        let recorder = Recorder::new();
        // (case, job, counted as)
        let mut first = job("a")
            .queue("prod")
            .share("vision")
            .status(JobStatus::Scheduled)
            .created_at(NOW - 10_000)
            .runnable_at(NOW - 4_000)
            .build();
        first.attempts = vec![attempt(NOW, None)];
        let mut second_attempt = job("b")
            .queue("prod")
            .share("vision")
            .status(JobStatus::Scheduled)
            .created_at(NOW - 60_000)
            .runnable_at(NOW - 2_000)
            .build();
        second_attempt.attempts = vec![
            attempt(
                NOW - 30_000,
                Some("Received status from SageMaker: AlgorithmError"),
            ),
            attempt(NOW, None),
        ];
        let mut capacity = job("c")
            .queue("prod")
            .share("nlp")
            .status(JobStatus::Runnable)
            .build();
        capacity.attempts = vec![attempt(
            NOW,
            Some("Received status from SageMaker: CapacityError: Unable to provision"),
        )];
        capacity.requeued_by = Some(Requeue::CapacityError);
        let mut capacity_launch = job("d").queue("prod").status(JobStatus::Runnable).build();
        capacity_launch.status_reason = Some(trainyard_scheduler::retry::CAPACITY_REASON.into());
        capacity_launch.attempts = vec![attempt(NOW, None)];
        capacity_launch.requeued_by = Some(Requeue::CapacityError);
        let mut preempted = job("e")
            .queue("prod")
            .share("nlp")
            .status(JobStatus::Runnable)
            .build();
        preempted.attempts = vec![attempt(NOW, Some(PREEMPTED_REASON))];
        preempted.requeued_by = Some(Requeue::Preemption);
        let mut retried = job("f")
            .queue("research")
            .status(JobStatus::Runnable)
            .build();
        retried.attempts = vec![attempt(
            NOW,
            Some("Received status from SageMaker: AlgorithmError"),
        )];
        retried.requeued_by = Some(Requeue::Retry);
        let accepted = job("g")
            .queue("research")
            .status(JobStatus::Runnable)
            .build();
        let mut running = job("h")
            .queue("research")
            .status(JobStatus::Running)
            .build();
        running.attempts = vec![attempt(NOW, None)];
        for j in [
            first,
            second_attempt,
            capacity,
            capacity_launch,
            preempted,
            retried,
            accepted,
            running,
        ] {
            recorder.record(&Event::status_changed(j));
        }
        recorder.record(&Event::JobSubmitted {
            job_id: "x".into(),
            job_queue: "prod".into(),
        });

        let lines = parse(&recorder.emf_lines("stack-1", NOW));
        let find = |dims: &[(&str, &str)]| {
            lines
                .iter()
                .find(|l| {
                    let (names, _) = envelope(l);
                    names.len() == dims.len() && dims.iter().all(|(k, v)| l[*k] == *v)
                })
                .unwrap_or_else(|| panic!("no line for {dims:?} in {lines:#?}"))
        };
        // (case, dimensions, dispatches, retries, preemptions, capacity errors)
        let cases: [(&str, Dims, u64, u64, u64, u64); 4] = [
            (
                "queue prod, all shares",
                &[("Stack", "stack-1"), ("JobQueue", "prod")],
                2,
                0,
                1,
                2,
            ),
            (
                "share vision",
                &[
                    ("Stack", "stack-1"),
                    ("JobQueue", "prod"),
                    ("Share", "vision"),
                ],
                2,
                0,
                0,
                0,
            ),
            (
                "share nlp",
                &[("Stack", "stack-1"), ("JobQueue", "prod"), ("Share", "nlp")],
                0,
                0,
                1,
                1,
            ),
            (
                "queue research: a retry; a first accept and RUNNING count nothing",
                &[("Stack", "stack-1"), ("JobQueue", "research")],
                0,
                1,
                0,
                0,
            ),
        ];
        for (case, dims, dispatches, retries, preemptions, capacity_errors) in cases {
            let line = find(dims);
            assert_eq!(line["Dispatches"], dispatches, "{case}: {line}");
            assert_eq!(line["Retries"], retries, "{case}: {line}");
            assert_eq!(line["Preemptions"], preemptions, "{case}: {line}");
            assert_eq!(line["CapacityErrors"], capacity_errors, "{case}: {line}");
        }
        assert_eq!(
            lines.len(),
            4,
            "prod, prod/vision, prod/nlp, research: {lines:#?}"
        );

        let vision = find(&[
            ("Stack", "stack-1"),
            ("JobQueue", "prod"),
            ("Share", "vision"),
        ]);
        let (_, units) = envelope(vision);
        assert_eq!(units["DispatchLatencySeconds"], "Seconds");
        assert_eq!(units["WaitTimeSeconds"], "Seconds");
        assert_eq!(units["Dispatches"], "Count");
        // Latency: runnable → dispatch for both; wait: submit → first dispatch, first job only.
        assert_eq!(vision["DispatchLatencySeconds"], json!([4.0, 2.0]));
        assert_eq!(vision["WaitTimeSeconds"], json!([10.0]));
        let nlp = find(&[("Stack", "stack-1"), ("JobQueue", "prod"), ("Share", "nlp")]);
        assert!(
            nlp.get("DispatchLatencySeconds").is_none(),
            "no samples, no metric: {nlp}"
        );

        assert!(recorder.emf_lines("stack-1", NOW).is_empty(), "drained");
    }

    /// `j` in queue `q`, dispatched now after a second RUNNABLE.
    fn dispatched_now(j: trainyard_app::contract::JobBuilder) -> trainyard_domain::job::ServiceJob {
        let mut j = j
            .queue("q")
            .status(JobStatus::Scheduled)
            .created_at(NOW - 1_000)
            .runnable_at(NOW - 1_000)
            .build();
        j.attempts = vec![attempt(NOW, None)];
        j
    }

    #[test]
    fn samples_are_bounded_per_line() {
        let recorder = Recorder::new();
        for n in 0..(MAX_SAMPLES + 20) {
            recorder.record(&Event::status_changed(dispatched_now(job(&format!(
                "j{n}"
            )))));
        }
        let lines = parse(&recorder.emf_lines("s", NOW));
        assert_eq!(lines[0]["Dispatches"], MAX_SAMPLES as u64 + 20);
        assert_eq!(
            lines[0]["DispatchLatencySeconds"].as_array().unwrap().len(),
            MAX_SAMPLES
        );
    }

    /// Share identifiers are the submitters' choice: however many there are, a queue reports
    /// at most MAX_SHARES_PER_QUEUE of them by name, the busiest, and the rest summed.
    #[test]
    fn share_dimensions_are_bounded_per_queue_and_nothing_is_lost() {
        let recorder = Recorder::new();
        let shares = MAX_SHARES_PER_QUEUE + 5;
        let mut total = 0;
        for s in 0..shares {
            // Share s dispatches s + 1 jobs: the last ones are the busiest.
            for n in 0..=s {
                let j = job(&format!("j{s}-{n}")).share(&format!("team-{s:02}"));
                recorder.record(&Event::status_changed(dispatched_now(j)));
                total += 1;
            }
        }
        let lines = parse(&recorder.emf_lines("s", NOW));
        let named: Vec<&str> = lines
            .iter()
            .filter_map(|l| l["Share"].as_str())
            .filter(|s| *s != OTHER_SHARES)
            .collect();
        assert_eq!(named.len(), MAX_SHARES_PER_QUEUE, "{named:?}");
        assert!(
            !named.contains(&"team-00") && named.contains(&"team-14"),
            "{named:?}"
        );
        let other = lines.iter().find(|l| l["Share"] == OTHER_SHARES).unwrap();
        // The five quietest: 1 + 2 + 3 + 4 + 5 dispatches.
        assert_eq!(other["Dispatches"], 15);
        let by_share: u64 = lines
            .iter()
            .filter(|l| l.get("Share").is_some())
            .map(|l| l["Dispatches"].as_u64().unwrap())
            .sum();
        let queue = lines.iter().find(|l| l.get("Share").is_none()).unwrap();
        assert_eq!(
            (by_share, queue["Dispatches"].as_u64().unwrap()),
            (total, total)
        );
    }

    #[tokio::test]
    async fn the_sink_records_and_forwards() {
        struct Collect(Arc<Mutex<Vec<Event>>>);
        impl EventSink for Collect {
            async fn publish(&self, event: Event) {
                self.0.lock().unwrap().push(event);
            }
        }
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = MetricsSink::new(Collect(seen.clone()), Arc::new(Recorder::new()));
        let mut j = job("a").queue("q").status(JobStatus::Runnable).build();
        j.attempts = vec![attempt(
            NOW,
            Some("Received status from SageMaker: AlgorithmError"),
        )];
        j.requeued_by = Some(Requeue::Retry);
        sink.publish(Event::status_changed(j)).await;
        sink.publish(Event::JobSubmitted {
            job_id: "b".into(),
            job_queue: "q".into(),
        })
        .await;
        assert_eq!(seen.lock().unwrap().len(), 2, "both forwarded");
        let lines = parse(&sink.recorder().emf_lines("s", NOW));
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0]["Retries"], 1);
    }

    fn environment(name: &str, limits: &[(&str, u32)]) -> ServiceEnvironment {
        ServiceEnvironment {
            service_environment_name: name.into(),
            service_environment_type: ServiceEnvironmentType::SagemakerTraining,
            state: State::Enabled,
            status: ResourceStatus::Valid,
            capacity_limits: limits
                .iter()
                .map(|(unit, n)| CapacityLimit {
                    max_capacity: *n,
                    capacity_unit: (*unit).into(),
                })
                .collect(),
            tags: BTreeMap::new(),
            created_at: 0,
        }
    }

    fn queue(name: &str) -> JobQueue {
        JobQueue {
            job_queue_name: name.into(),
            state: State::Enabled,
            status: ResourceStatus::Valid,
            status_reason: None,
            priority: 1,
            scheduling_policy: None,
            service_environment_order: vec![ServiceEnvironmentOrder {
                order: 1,
                service_environment: "pool".into(),
            }],
            job_state_time_limit_actions: vec![],
            job_queue_type: JobQueueType::SagemakerTraining,
            tags: BTreeMap::new(),
            created_at: 0,
        }
    }

    #[tokio::test]
    async fn gauges_read_usage_limits_and_the_oldest_runnable_job() {
        let store = MemoryStore::new();
        store
            .create_resource(&environment("pool", &[("NUM_INSTANCES", 8)]))
            .await
            .unwrap();
        store
            .create_resource(&environment(
                "quota",
                &[("ml.p4d.24xlarge", 2), ("ml.g5.xlarge", 6)],
            ))
            .await
            .unwrap();
        store.create_resource(&queue("prod")).await.unwrap();
        store.create_resource(&queue("idle")).await.unwrap();
        let usage = EnvironmentUsage {
            environment: "quota".into(),
            instances: BTreeMap::from([("ml.g5.xlarge".to_owned(), 3)]),
            ..EnvironmentUsage::default()
        };
        store
            .commit(&[Write::document(&usage, 0).unwrap()])
            .await
            .unwrap();
        for (id, runnable_at) in [("young", NOW - 5_000), ("old", NOW - 90_000)] {
            let j = job(id)
                .queue("prod")
                .status(JobStatus::Runnable)
                .runnable_at(runnable_at)
                .build();
            store.insert_job(&j, None).await.unwrap();
        }
        // A queue with shares: each share's front counts, and within share "a" a higher
        // priority is in front of the oldest job.
        store.create_resource(&queue("shared")).await.unwrap();
        for (id, share, priority, age_ms) in [
            ("a-high", "a", 9, 10_000),
            ("a-low", "a", 1, 200_000),
            ("b-only", "b", 0, 60_000),
        ] {
            let j = job(id)
                .queue("shared")
                .share(share)
                .priority(priority)
                .status(JobStatus::Runnable)
                .runnable_at(NOW - age_ms)
                .build();
            store.insert_job(&j, None).await.unwrap();
        }

        let g = gauges(&store, NOW).await.unwrap();
        assert_eq!(
            g.oldest_runnable_ms,
            BTreeMap::from([
                ("idle".to_owned(), 0),
                ("prod".to_owned(), 90_000),
                ("shared".to_owned(), 60_000)
            ])
        );
        let lines = parse(&g.emf_lines("stack-1", NOW));
        for line in &lines {
            envelope(line);
        }
        let stack_line = lines.iter().find(|l| envelope(l).0 == ["Stack"]).unwrap();
        assert_eq!(stack_line["OldestRunnableJobAgeSeconds"], 90.0);
        assert_eq!(
            envelope(stack_line).1["OldestRunnableJobAgeSeconds"],
            "Seconds"
        );
        // (case, dimensions, in use, limit)
        let cases: [(&str, Dims, u64, u64); 4] = [
            (
                "a pool with a total limit and nothing in use",
                &[("ServiceEnvironment", "pool")],
                0,
                8,
            ),
            (
                "a quota pool: per-type limits add up",
                &[("ServiceEnvironment", "quota")],
                3,
                8,
            ),
            (
                "a type in use",
                &[
                    ("ServiceEnvironment", "quota"),
                    ("InstanceType", "ml.g5.xlarge"),
                ],
                3,
                6,
            ),
            (
                "an idle type",
                &[
                    ("ServiceEnvironment", "quota"),
                    ("InstanceType", "ml.p4d.24xlarge"),
                ],
                0,
                2,
            ),
        ];
        for (case, dims, in_use, limit) in cases {
            let line = lines
                .iter()
                .find(|l| {
                    envelope(l).0.len() == dims.len() + 1 && dims.iter().all(|(k, v)| l[*k] == *v)
                })
                .unwrap_or_else(|| panic!("{case}: no line in {lines:#?}"));
            assert_eq!(line["InstancesInUse"], in_use, "{case}");
            assert_eq!(line["InstanceLimit"], limit, "{case}");
        }
        let prod = lines.iter().find(|l| l["JobQueue"] == "prod").unwrap();
        assert_eq!(prod["OldestRunnableJobAgeSeconds"], 90.0);
    }

    #[tokio::test]
    async fn job_counts_cover_live_statuses_per_queue_and_share() {
        let store = MemoryStore::new();
        store.create_resource(&queue("prod")).await.unwrap();
        let jobs = [
            ("a", JobStatus::Runnable, Some("vision")),
            ("b", JobStatus::Runnable, Some("vision")),
            ("c", JobStatus::Runnable, Some("nlp")),
            ("d", JobStatus::Running, None),
            ("e", JobStatus::Succeeded, Some("vision")),
        ];
        for (id, status, share) in jobs {
            let mut b = job(id).queue("prod").status(status);
            if let Some(share) = share {
                b = b.share(share);
            }
            store.insert_job(&b.build(), None).await.unwrap();
        }
        let counts = job_counts(&store).await.unwrap();
        let lines = parse(&counts.emf_lines("s", NOW));
        let jobs_at = |dims: &[(&str, &str)]| -> Option<u64> {
            lines
                .iter()
                .find(|l| {
                    envelope(l).0.len() == dims.len() + 1 && dims.iter().all(|(k, v)| l[*k] == *v)
                })
                .map(|l| l["Jobs"].as_u64().unwrap())
        };
        // (case, dimensions, jobs; None: no line)
        let cases: [(&str, Dims, Option<u64>); 7] = [
            (
                "runnable in the queue",
                &[("JobQueue", "prod"), ("Status", "RUNNABLE")],
                Some(3),
            ),
            (
                "running in the queue",
                &[("JobQueue", "prod"), ("Status", "RUNNING")],
                Some(1),
            ),
            (
                "an empty status reads zero",
                &[("JobQueue", "prod"), ("Status", "SUBMITTED")],
                Some(0),
            ),
            (
                "terminal statuses are not counted",
                &[("JobQueue", "prod"), ("Status", "SUCCEEDED")],
                None,
            ),
            (
                "per share",
                &[
                    ("JobQueue", "prod"),
                    ("Share", "vision"),
                    ("Status", "RUNNABLE"),
                ],
                Some(2),
            ),
            (
                "another share",
                &[
                    ("JobQueue", "prod"),
                    ("Share", "nlp"),
                    ("Status", "RUNNABLE"),
                ],
                Some(1),
            ),
            (
                "no share line for share-less jobs",
                &[("JobQueue", "prod"), ("Share", ""), ("Status", "RUNNING")],
                None,
            ),
        ];
        for (case, dims, expected) in cases {
            assert_eq!(jobs_at(dims), expected, "{case}");
        }
        // No cycle has planned the RUNNABLE jobs: that is their reason.
        let pending = lines
            .iter()
            .find(|l| l["Reason"] == "NOT_PLANNED_YET")
            .unwrap_or_else(|| panic!("no PendingJobs line in {lines:#?}"));
        assert_eq!(
            (&pending["JobQueue"], &pending["PendingJobs"]),
            (&json!("prod"), &json!(3))
        );
        // And per share, for the jobs with one (the share-less running job waits for nothing).
        let pending_in = |share: &str| {
            lines
                .iter()
                .find(|l| l["Share"] == share && l["Reason"] == "NOT_PLANNED_YET")
                .map(|l| l["PendingJobs"].clone())
        };
        assert_eq!(pending_in("vision"), Some(json!(2)));
        assert_eq!(pending_in("nlp"), Some(json!(1)));
        assert_eq!(lines.len(), COUNTED_STATUSES.len() + 2 + 1 + 2);
    }

    /// A round's lines: every queue's estimated jobs, and its coverage once it has any.
    #[test]
    fn estimate_lines_name_each_queue_and_its_coverage_once_scored() {
        let per_queue = [
            QueueEstimates {
                queue: "prod".into(),
                jobs: 12,
                coverage: Some(trainyard_forecast::Coverage {
                    p50: 0.48,
                    p90: 0.91,
                    outcomes: 240,
                }),
            },
            QueueEstimates {
                queue: "sweeps".into(),
                jobs: 3,
                coverage: None,
            },
        ];
        let lines = parse(&estimate_lines("s", NOW, &per_queue));
        assert_eq!(lines.len(), 2);
        let (names, units) = envelope(&lines[0]);
        assert_eq!(names, ["Stack", "JobQueue"]);
        assert_eq!(units["StartEstimateCoverageP90"], "None");
        assert_eq!(
            (
                &lines[0]["JobQueue"],
                &lines[0]["StartEstimates"],
                &lines[0]["StartEstimateCoverageP90"],
                &lines[0]["StartEstimateOutcomes"]
            ),
            (&json!("prod"), &json!(12), &json!(0.91), &json!(240))
        );
        assert_eq!(lines[1]["StartEstimates"], 3);
        assert!(
            lines[1].get("StartEstimateCoverageP90").is_none(),
            "no coverage before any start was scored: {}",
            lines[1]
        );
    }
}
