//! Local mode's metrics, in Prometheus' text exposition format.
//!
//! Two sources feed them. Counters and histograms come from the event feed ([`observe`]): every
//! `JobStatusChanged` carries the job as it was stored, which tells a dispatch (→ SCHEDULED) from
//! a retry or a capacity error (→ RUNNABLE again). Gauges are read from the store when scraped
//! ([`render`]): jobs by queue, share and status, and instances in use against each
//! environment's limit. So a restart resets the counters (as any Prometheus counter may) but
//! never the gauges.
//!
//! Names start with `trainyard_`; units are suffixes (`_seconds`, `_total` for counters).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::broadcast;
use trainyard_app::ports::{
    Clock, Event, JobQuery, LineWaits, StartEstimates, Store, StoreError, SystemClock,
};
use trainyard_app::service::why::{every_line_waits, shown_reason_code};
use trainyard_domain::environment::{NUM_INSTANCES, ServiceEnvironment};
use trainyard_domain::job::{JobStatus, Requeue};
use trainyard_domain::labels::{MAX_SHARES_PER_QUEUE, bounded_shares};
use trainyard_domain::order::share_key;
use trainyard_domain::queue::JobQueue;

/// Upper bounds of the latency histograms' buckets, in seconds: from the loop's own reaction
/// time (milliseconds) to a busy queue's wait (an hour).
pub const BUCKETS_S: [f64; 16] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
];

/// Page size when counting jobs for a scrape.
const SCRAPE_PAGE: usize = 1_000;

/// A cumulative histogram over [`BUCKETS_S`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    /// Observations per bucket (not cumulative); the last slot is `+Inf`.
    counts: [u64; BUCKETS_S.len() + 1],
    sum_s: f64,
    count: u64,
}

impl Histogram {
    /// Records one observation of `seconds` (negative values, from clock steps, count as 0).
    pub fn observe(&mut self, seconds: f64) {
        let seconds = seconds.max(0.0);
        let slot = BUCKETS_S
            .iter()
            .position(|bound| seconds <= *bound)
            .unwrap_or(BUCKETS_S.len());
        self.counts[slot] += 1;
        self.sum_s += seconds;
        self.count += 1;
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The series of one histogram, `labels` (`key="value",` each, escaped) on every line.
    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let mut cumulative = 0;
        for (bound, count) in BUCKETS_S.iter().zip(self.counts) {
            cumulative += count;
            let _ = writeln!(out, "{name}_bucket{{{labels}le=\"{bound}\"}} {cumulative}");
        }
        let _ = writeln!(out, "{name}_bucket{{{labels}le=\"+Inf\"}} {}", self.count);
        let braced = match labels.trim_end_matches(',') {
            "" => String::new(),
            labels => format!("{{{labels}}}"),
        };
        let _ = writeln!(out, "{name}_sum{braced} {}", self.sum_s);
        let _ = writeln!(out, "{name}_count{braced} {}", self.count);
    }
}

/// A histogram per queue, rendered as one family labelled `queue`.
fn render_per_queue(
    out: &mut String,
    name: &str,
    help: &str,
    histograms: &BTreeMap<String, Histogram>,
) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} histogram");
    for (queue, histogram) in histograms {
        histogram.render(out, name, &format!("queue=\"{}\",", escape(queue)));
    }
}

/// What the event feed and the loop have counted since start.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counts {
    /// Jobs committed to SCHEDULED (each attempt counts).
    pub dispatches: u64,
    /// Jobs put back to RUNNABLE to retry after a failed attempt.
    pub retries: u64,
    /// Jobs put back to RUNNABLE because SageMaker had no capacity (no attempt used).
    pub capacity_errors: u64,
    /// Attempts preempted (stopped to free capacity for another job).
    pub preemptions: u64,
    /// Passes of the scheduling loop.
    pub loop_passes: u64,
    /// RUNNABLE → SCHEDULED, per dispatch, by queue.
    pub dispatch_latency: BTreeMap<String, Histogram>,
    /// Submitted → first SCHEDULED, per job, by queue.
    pub wait_time: BTreeMap<String, Histogram>,
}

/// The metrics registry. Cheap to share behind an [`Arc`].
#[derive(Debug, Default)]
pub struct Metrics {
    counts: Mutex<Counts>,
}

impl Metrics {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// A copy of the counters.
    pub fn counts(&self) -> Counts {
        self.lock().clone()
    }

    /// Counts one pass of the scheduling loop.
    pub fn record_pass(&self) {
        self.lock().loop_passes += 1;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        // Counters stay meaningful even if a holder panicked mid-update.
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Accounts one status change of a job, given the job as stored and `now_ms`.
    fn record_change(
        &self,
        job: &trainyard_domain::job::ServiceJob,
        status: JobStatus,
        now_ms: i64,
    ) {
        let mut counts = self.lock();
        match status {
            JobStatus::Scheduled => {
                counts.dispatches += 1;
                let runnable_since = job.runnable_at.unwrap_or(job.created_at);
                let queue = job.job_queue.clone();
                counts
                    .dispatch_latency
                    .entry(queue.clone())
                    .or_default()
                    .observe(seconds_between(runnable_since, now_ms));
                if job.attempts.len() <= 1 {
                    counts
                        .wait_time
                        .entry(queue)
                        .or_default()
                        .observe(seconds_between(job.created_at, now_ms));
                }
            }
            JobStatus::Runnable => match job.requeued_by {
                Some(Requeue::CapacityError) => counts.capacity_errors += 1,
                Some(Requeue::Preemption) => counts.preemptions += 1,
                Some(Requeue::Retry | Requeue::Lost) => counts.retries += 1,
                None => {}
            },
            _ => {}
        }
    }
}

fn seconds_between(from_ms: i64, to_ms: i64) -> f64 {
    (to_ms.saturating_sub(from_ms)) as f64 / 1000.0
}

/// Follows the event feed and counts dispatches, retries and capacity errors until `shutdown`
/// resolves. A lagging feed loses counts, never correctness: it is logged and followed on.
pub async fn observe(
    metrics: Arc<Metrics>,
    mut feed: broadcast::Receiver<Event>,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    loop {
        let event = tokio::select! {
            () = &mut shutdown => return,
            event = feed.recv() => event,
        };
        match event {
            Ok(Event::JobStatusChanged { status, job, .. })
                if matches!(status, JobStatus::Scheduled | JobStatus::Runnable) =>
            {
                metrics.record_change(&job, status, SystemClock.now_ms());
            }
            Ok(_) => {}
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                tracing::warn!(
                    missed,
                    "metrics fell behind the event feed; counts are short"
                );
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// The whole exposition: counters from `metrics`, gauges read from `store` now.
pub async fn render<S: Store>(metrics: &Metrics, store: &S) -> Result<String, StoreError> {
    let mut jobs: BTreeMap<(String, String, JobStatus), u64> = BTreeMap::new();
    let lines = every_line_waits(store).await?;
    let now_ms = SystemClock.now_ms();
    let mut waiting = Waiting::default();
    for queue in store.list_resources::<JobQueue>().await? {
        waiting.oldest.insert(queue.value.job_queue_name, 0.0);
    }
    let mut query = JobQuery {
        limit: SCRAPE_PAGE,
        ..JobQuery::default()
    };
    loop {
        let page = store.list_jobs(&query).await?;
        for job in &page.items {
            let job = &job.value;
            let key = (job.job_queue.clone(), share_key(job).to_owned(), job.status);
            *jobs.entry(key).or_insert(0) += 1;
            if job.status == JobStatus::Runnable {
                waiting.count(job, &lines, now_ms);
            }
        }
        match page.next {
            Some(next) => query.after = Some(next),
            None => break,
        }
    }
    let environments: Vec<_> = store.list_resources::<ServiceEnvironment>().await?;
    let usage: BTreeMap<String, u64> = store
        .capacity_in_use()
        .await?
        .into_iter()
        .map(|(env, u)| (env, u.value.total()))
        .collect();

    let counts = metrics.counts();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# HELP trainyard_jobs Jobs by queue, share and status (terminal jobs until they expire)."
    );
    let _ = writeln!(out, "# TYPE trainyard_jobs gauge");
    for ((queue, share, status), n) in &jobs {
        let _ = writeln!(
            out,
            "trainyard_jobs{{queue=\"{}\",share=\"{}\",status=\"{}\"}} {n}",
            escape(queue),
            escape(share),
            status.as_str()
        );
    }
    let _ = writeln!(
        out,
        "# HELP trainyard_environment_instances_in_use Instances held by dispatched jobs."
    );
    let _ = writeln!(out, "# TYPE trainyard_environment_instances_in_use gauge");
    for env in &environments {
        let name = &env.value.service_environment_name;
        let used = usage.get(name).copied().unwrap_or(0);
        let _ = writeln!(
            out,
            "trainyard_environment_instances_in_use{{environment=\"{}\"}} {used}",
            escape(name)
        );
    }
    let _ = writeln!(
        out,
        "# HELP trainyard_environment_instances_limit The environment's NUM_INSTANCES capacity limit."
    );
    let _ = writeln!(out, "# TYPE trainyard_environment_instances_limit gauge");
    for env in &environments {
        let limit: u64 = env
            .value
            .capacity_limits
            .iter()
            .filter(|l| l.capacity_unit == NUM_INSTANCES)
            .map(|l| u64::from(l.max_capacity))
            .sum();
        let _ = writeln!(
            out,
            "trainyard_environment_instances_limit{{environment=\"{}\"}} {limit}",
            escape(&env.value.service_environment_name)
        );
    }
    let counters = [
        (
            "trainyard_dispatches_total",
            "Attempts committed to SCHEDULED.",
            counts.dispatches,
        ),
        (
            "trainyard_retries_total",
            "Failed attempts retried (job back to RUNNABLE).",
            counts.retries,
        ),
        (
            "trainyard_capacity_errors_total",
            "Launches or attempts that found no SageMaker capacity (job back to RUNNABLE, no attempt used).",
            counts.capacity_errors,
        ),
        (
            "trainyard_preemptions_total",
            "Attempts stopped to free capacity for another job.",
            counts.preemptions,
        ),
        (
            "trainyard_loop_passes_total",
            "Passes of the scheduling loop.",
            counts.loop_passes,
        ),
    ];
    for (name, help, value) in counters {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} counter");
        let _ = writeln!(out, "{name} {value}");
    }
    render_per_queue(
        &mut out,
        "trainyard_dispatch_latency_seconds",
        "Time from RUNNABLE to SCHEDULED, per dispatch, by queue.",
        &counts.dispatch_latency,
    );
    render_per_queue(
        &mut out,
        "trainyard_wait_time_seconds",
        "Time from submission to the first SCHEDULED, per job, by queue (admission wait).",
        &counts.wait_time,
    );
    waiting.render(&mut out);
    let estimates = store.list_documents::<StartEstimates>().await?;
    render_estimates(&mut out, estimates.iter().map(|d| &d.value));
    Ok(out)
}

/// What the scrape learns of the RUNNABLE jobs: how many wait for each reason, and since when
/// the oldest of each queue has waited.
#[derive(Debug, Default)]
struct Waiting {
    /// RUNNABLE jobs by (queue, share, reason code), the reason as describe shows it.
    pending: BTreeMap<(String, String, String), u64>,
    /// Seconds the oldest RUNNABLE job of each queue has waited (since it joined its line).
    oldest: BTreeMap<String, f64>,
}

impl Waiting {
    fn count(
        &mut self,
        job: &trainyard_domain::job::ServiceJob,
        lines: &BTreeMap<String, LineWaits>,
        now_ms: i64,
    ) {
        let code = shown_reason_code(job, lines);
        let key = (job.job_queue.clone(), share_key(job).to_owned(), code);
        *self.pending.entry(key).or_insert(0) += 1;
        let waited = seconds_between(job.runnable_at.unwrap_or(job.created_at), now_ms);
        let oldest = self.oldest.entry(job.job_queue.clone()).or_insert(0.0);
        *oldest = oldest.max(waited);
    }

    /// `pending` with each queue's shares beyond its [`MAX_SHARES_PER_QUEUE`] busiest summed
    /// as `(other)`: the label set stays bounded however many shares submitters invent.
    fn bounded(&self) -> BTreeMap<(String, String, String), u64> {
        let mut per_share: BTreeMap<(String, String), BTreeMap<String, u64>> = BTreeMap::new();
        for ((queue, share, code), n) in &self.pending {
            let codes = per_share.entry((queue.clone(), share.clone())).or_default();
            *codes.entry(code.clone()).or_insert(0) += n;
        }
        let sum = |codes: &BTreeMap<String, u64>| codes.values().sum();
        let merge = |into: &mut BTreeMap<String, u64>, codes: BTreeMap<String, u64>| {
            for (code, n) in codes {
                *into.entry(code).or_insert(0) += n;
            }
        };
        bounded_shares(per_share, sum, merge)
            .into_iter()
            .flat_map(|((queue, share), codes)| {
                codes
                    .into_iter()
                    .map(move |(code, n)| ((queue.clone(), share.clone(), code), n))
            })
            .collect()
    }

    fn render(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "# HELP trainyard_pending_jobs RUNNABLE jobs by queue, share and the code of the reason they wait (as describe shows it); at most {MAX_SHARES_PER_QUEUE} shares a queue, the rest as (other)."
        );
        let _ = writeln!(out, "# TYPE trainyard_pending_jobs gauge");
        for ((queue, share, code), n) in self.bounded() {
            let _ = writeln!(
                out,
                "trainyard_pending_jobs{{queue=\"{}\",share=\"{}\",reason=\"{}\"}} {n}",
                escape(&queue),
                escape(&share),
                escape(&code)
            );
        }
        let _ = writeln!(
            out,
            "# HELP trainyard_oldest_runnable_job_age_seconds How long the longest-waiting RUNNABLE job of each queue has waited (since it joined its line); 0 when none waits."
        );
        let _ = writeln!(
            out,
            "# TYPE trainyard_oldest_runnable_job_age_seconds gauge"
        );
        for (queue, age) in &self.oldest {
            let _ = writeln!(
                out,
                "trainyard_oldest_runnable_job_age_seconds{{queue=\"{}\"}} {age}",
                escape(queue)
            );
        }
    }
}

/// Per queue: the waiting jobs the latest forecast round estimated, and how its estimates have
/// held (the share of recent outcomes within the p50 and the p90, and how many were counted).
fn render_estimates<'a>(out: &mut String, docs: impl Iterator<Item = &'a StartEstimates> + Clone) {
    let _ = writeln!(
        out,
        "# HELP trainyard_start_estimates Waiting jobs with a start-time estimate, by queue (the latest forecast round)."
    );
    let _ = writeln!(out, "# TYPE trainyard_start_estimates gauge");
    for doc in docs.clone() {
        let _ = writeln!(
            out,
            "trainyard_start_estimates{{queue=\"{}\"}} {}",
            escape(&doc.queue),
            doc.estimated
        );
    }
    let _ = writeln!(
        out,
        "# HELP trainyard_start_estimate_coverage Share of the queue's recent outcomes (at most 1,000) that started by the estimate's p50 or p90; absent before any."
    );
    let _ = writeln!(out, "# TYPE trainyard_start_estimate_coverage gauge");
    let covered = || {
        docs.clone()
            .filter_map(|d| Some((escape(&d.queue), d.coverage?)))
    };
    for (queue, c) in covered() {
        for (quantile, share) in [("p50", c.p50), ("p90", c.p90)] {
            let _ = writeln!(
                out,
                "trainyard_start_estimate_coverage{{queue=\"{queue}\",quantile=\"{quantile}\"}} {share}"
            );
        }
    }
    let _ = writeln!(
        out,
        "# HELP trainyard_start_estimate_outcomes Outcomes the queue's coverage counts."
    );
    let _ = writeln!(out, "# TYPE trainyard_start_estimate_outcomes gauge");
    for (queue, c) in covered() {
        let _ = writeln!(
            out,
            "trainyard_start_estimate_outcomes{{queue=\"{queue}\"}} {}",
            c.outcomes
        );
    }
}

/// Escapes a label value (backslash, double quote, newline), as the text format requires.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn start_estimates_render_per_queue_with_coverage_once_there_is_any() {
        let docs = [
            StartEstimates {
                queue: "research".into(),
                at_ms: 0,
                estimated: 2,
                lines: vec!["".to_owned()],
                coverage: Some(trainyard_forecast::Coverage {
                    p50: 0.5,
                    p90: 0.875,
                    outcomes: 8,
                }),
            },
            StartEstimates {
                queue: "sweeps".into(),
                ..StartEstimates::default()
            },
        ];
        let mut out = String::new();
        render_estimates(&mut out, docs.iter());
        for line in [
            "trainyard_start_estimates{queue=\"research\"} 2",
            "trainyard_start_estimates{queue=\"sweeps\"} 0",
            "trainyard_start_estimate_coverage{queue=\"research\",quantile=\"p90\"} 0.875",
            "trainyard_start_estimate_outcomes{queue=\"research\"} 8",
        ] {
            assert!(out.lines().any(|l| l == line), "{line} in\n{out}");
        }
        assert!(!out.contains("quantile=\"p50\"} 0.875"));
        assert!(
            !out.contains("coverage{queue=\"sweeps\""),
            "no outcome yet, no coverage"
        );
    }

    #[test]
    fn observations_land_in_the_first_bucket_that_holds_them() {
        let cases = [
            (0.0, 0),
            (0.005, 0),
            (0.006, 1),
            (-3.0, 0),
            (3600.0, BUCKETS_S.len() - 1),
            (1e6, BUCKETS_S.len()),
        ];
        for (seconds, slot) in cases {
            let mut h = Histogram::default();
            h.observe(seconds);
            assert_eq!(h.counts[slot], 1, "{seconds}");
            assert_eq!(h.count(), 1);
        }
    }

    #[test]
    fn a_histogram_renders_cumulative_buckets_ending_at_the_count() {
        let mut h = Histogram::default();
        for s in [0.001, 0.02, 0.02, 7.0] {
            h.observe(s);
        }
        let mut out = String::new();
        h.render(&mut out, "x_seconds", "");
        assert!(out.contains("x_seconds_bucket{le=\"0.005\"} 1\n"), "{out}");
        assert!(out.contains("x_seconds_bucket{le=\"0.025\"} 3\n"), "{out}");
        assert!(out.contains("x_seconds_bucket{le=\"5\"} 3\n"), "{out}");
        assert!(out.contains("x_seconds_bucket{le=\"10\"} 4\n"), "{out}");
        assert!(out.contains("x_seconds_bucket{le=\"+Inf\"} 4\n"), "{out}");
        assert!(out.contains("x_seconds_count 4\n"), "{out}");
    }

    #[test]
    fn pending_jobs_name_a_queues_busiest_shares_and_sum_the_rest() {
        let mut waiting = Waiting::default();
        for (i, n) in (1..=12u64).enumerate() {
            let key = ("q".to_owned(), format!("s{i:02}"), "CODE".to_owned());
            waiting.pending.insert(key, n);
        }
        let bounded = waiting.bounded();
        let shares: Vec<&str> = bounded.keys().map(|(_, s, _)| s.as_str()).collect();
        assert_eq!(shares.len(), MAX_SHARES_PER_QUEUE + 1, "{shares:?}");
        assert!(
            !shares.contains(&"s00") && !shares.contains(&"s01"),
            "{shares:?}"
        );
        let other = ("q".to_owned(), "(other)".to_owned(), "CODE".to_owned());
        assert_eq!(bounded[&other], 1 + 2, "the two least busy, summed");
        assert_eq!(
            bounded.values().sum::<u64>(),
            (1..=12).sum::<u64>(),
            "nothing lost"
        );
    }

    #[test]
    fn pending_jobs_count_each_job_by_the_reason_describe_shows() {
        use trainyard_app::ports::{Document, JobWait};
        use trainyard_scheduler::SkipReason;

        let job = |id: &str| {
            trainyard_app::contract::job(id)
                .queue("q")
                .runnable_at(1_000)
                .build()
        };
        let waits = LineWaits {
            queue: "q".into(),
            share: String::new(),
            at_ms: 2_000,
            rank: 1,
            lines: 1,
            waits: vec![JobWait {
                job_id: "a".into(),
                reason: SkipReason::NoEnvironment,
                since_ms: 2_000,
            }]
            .into(),
            furthest: None,
        };
        let lines: BTreeMap<String, LineWaits> = [(waits.key(), waits)].into();
        let mut waiting = Waiting::default();
        for id in ["a", "b"] {
            waiting.count(&job(id), &lines, 61_000);
        }
        let late = trainyard_app::contract::job("c")
            .queue("q")
            .runnable_at(3_000)
            .build();
        waiting.count(&late, &lines, 61_000);
        let codes: Vec<(&str, u64)> = waiting
            .pending
            .iter()
            .map(|((_, _, code), n)| (code.as_str(), *n))
            .collect();
        assert_eq!(
            codes,
            [
                ("MISCONFIGURATION:NO_SERVICE_ENVIRONMENT", 1),
                (trainyard_app::service::why::NOT_PLANNED_YET, 1),
                ("PRIORITY:JOBS_AHEAD", 1),
            ]
        );
        assert_eq!(waiting.oldest["q"], 60.0);
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(escape("a\nb"), "a\\nb");
    }
}
