//! Measures computed from a [`RunRecord`]: utilization, waits, completion times, slowdown,
//! fairness, starvation and preemption cost, gathered into one [`PolicySummary`] per policy.
//!
//! Everything here is a pure function of the record, so the same record always gives the same
//! summary, and every measure can be checked on hand-made records with known answers.
//!
//! # Definitions
//!
//! - **Utilization** is busy instance-time over capacity instance-time. *Backlogged* utilization
//!   only counts the usage intervals during which some job was waiting: idle capacity while
//!   nothing waits is not a scheduler's fault, idle capacity while work waits is. Either is
//!   `null` when its denominator is zero (for example, a run that never had a backlog). A value
//!   above 1 would mean the record shows capacity overrun; it is reported, not clamped.
//! - **Wait** is submission to first dispatch. A job that never started is counted with a wait
//!   *censored* at the end of the run (`end_s - submit_s`), a lower bound on its true wait: leaving
//!   it out would reward a policy for starving it. [`PolicySummary::jobs_never_started`] says how
//!   many such lower bounds a distribution contains.
//! - **Percentiles** are nearest-rank: the `p`-th percentile of `n` sorted values is the value of
//!   rank `ceil(p/100 * n)` (at least 1). Every statistic of an empty list is `None` (`null` in
//!   JSON); nothing is invented for an empty group.
//! - **Job completion time** (JCT) is submission to end, over jobs that ended (succeeded or
//!   failed) before the run did.
//! - **Slowdown** is JCT over the job's trace duration, with the duration floored at
//!   [`SLOWDOWN_FLOOR_S`] so that a one-second job that waited a minute does not count as a
//!   slowdown of 60 and swamp the mean.
//! - **Fairness** is Jain's index `(Σx)² / (n·Σx²)` of `x_i = held_i / entitlement_i`, where
//!   `held_i` is share `i`'s instance-seconds in a window of [`FAIRNESS_WINDOW_S`]. In each window
//!   a share *counts* if it was backlogged at some point in the window (it wanted more than it
//!   got) or held more than its entitlement of what all shares held (it got more than its due).
//!   A share that neither waited nor exceeded its entitlement was satisfied, and leaving it out
//!   keeps a team with little work from reading as unfairly treated. Shares with a zero
//!   entitlement never count. Windows with fewer than two counted shares (trivially fair) or with
//!   nothing held are skipped; the run's index is the mean over the remaining windows, weighted
//!   by window length, and `null` if none remain. 1 is proportional; `1/n` is one share taking
//!   everything from `n`.
//! - **Longest wait** (starvation) is the largest wait, censored waits included.
//! - **Wait after first start** is, for a preempted job that completed, the time from its
//!   first start to its end less its run time and the work its preempted attempts lost (their
//!   time on the instances, stop grace included, less the training their checkpoints kept):
//!   the time it spent waiting again after being preempted. *Wait* above stops at the first
//!   start, so it does not count this; a policy that preempts is judged on both.
//! - **Preemption cost**: preemptions per job, and the work preempted attempts threw away (their
//!   instance-time less what their checkpoints kept) over all busy instance-time.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::record::{JobRecord, RunRecord, ShareInterval, UsageInterval};

/// Durations below this count as this long when computing slowdown, so that very short jobs do
/// not dominate the mean (10 s: shorter than any real training job's start-up).
pub const SLOWDOWN_FLOOR_S: f64 = 10.0;

/// Length of the windows over which fairness is measured. One hour: long enough that a single
/// multi-instance job starting or ending does not swing a window, short enough that a day of
/// one team monopolising the pool is not averaged away by the rest of the trace.
pub const FAIRNESS_WINDOW_S: f64 = 3600.0;

/// Mean and nearest-rank percentiles of a list of values; every field is `None` when the list
/// is empty.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Distribution {
    /// How many values.
    pub count: usize,
    /// Arithmetic mean.
    pub mean: Option<f64>,
    /// Median (nearest rank).
    pub p50: Option<f64>,
    /// 95th percentile (nearest rank).
    pub p95: Option<f64>,
    /// 99th percentile (nearest rank).
    pub p99: Option<f64>,
    /// The largest value: the longest wait of a tier or share, where starvation shows.
    #[serde(default)]
    pub max: Option<f64>,
}

impl Distribution {
    /// Summarises `values` (in any order).
    pub fn of(values: &[f64]) -> Self {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        Self {
            count: sorted.len(),
            mean: mean(&sorted),
            p50: percentile_sorted(&sorted, 50.0),
            p95: percentile_sorted(&sorted, 95.0),
            p99: percentile_sorted(&sorted, 99.0),
            max: sorted.last().copied(),
        }
    }
}

/// Everything measured about one policy's run. Field names are the `summary.json` contract.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicySummary {
    /// Busy over capacity instance-time while some job waited (0–1), `None` if nothing waited.
    pub utilization_backlogged: Option<f64>,
    /// Busy over capacity instance-time over the whole run (0–1), `None` for an empty run.
    pub utilization_overall: Option<f64>,
    /// Waits of all jobs (censored for jobs that never started).
    pub wait_s: Distribution,
    /// Waits per queue (priority tier).
    pub wait_s_by_queue: BTreeMap<String, Distribution>,
    /// Waits per share (team); jobs without a share appear only in the overall and per-queue
    /// waits.
    pub wait_s_by_share: BTreeMap<String, Distribution>,
    /// Mean job completion time of jobs that ended.
    pub jct_s_mean: Option<f64>,
    /// Job completion times of jobs that ended.
    pub jct_s: Distribution,
    /// Slowdown (JCT over floored duration) of jobs that ended.
    pub slowdown: Distribution,
    /// Jain's fairness index over backlogged windows, `None` if no window qualified.
    pub jain_fairness: Option<f64>,
    /// Fairness windows that counted towards [`PolicySummary::jain_fairness`].
    pub fairness_windows: usize,
    /// Longest wait, censored waits included; `None` for a run without jobs.
    pub max_wait_s: Option<f64>,
    /// Preemptions over all jobs.
    pub preemptions: u64,
    /// Of those, the ones reclaiming capacity another quota share borrowed (the rest are
    /// in-share, by priority).
    #[serde(default)]
    pub reclaims: u64,
    /// Waits of the jobs for which lent capacity was reclaimed: how long owners waited to get
    /// it back (submission to first start).
    #[serde(default)]
    pub reclaim_wait_s: Distribution,
    /// Owners' reclaim latency: for each job that waited for capacity its quota share lent,
    /// from the first cycle that found it so blocked to its first start
    /// ([`JobRecord::lent_wait_s`]).
    #[serde(default)]
    pub lent_wait_s: Distribution,
    /// Instance-seconds of work lost to preemptions.
    pub preempted_instance_s: f64,
    /// Preemptions per job.
    #[serde(default)]
    pub preemptions_per_job: Option<f64>,
    /// Work lost to preemptions over all busy instance-time (0–1): the share of the pool's
    /// work that was thrown away. `None` for a run that used nothing.
    #[serde(default)]
    pub preempted_fraction: Option<f64>,
    /// Of preempted jobs that completed: the time they waited again after their first start
    /// (see the module docs), which `wait_s` does not count.
    #[serde(default)]
    pub wait_after_start_s: Distribution,
    /// Jobs that ended (succeeded or failed) before the run did.
    pub jobs_completed: usize,
    /// Jobs that ended in `SUCCEEDED`.
    pub jobs_succeeded: usize,
    /// Jobs that ended in `FAILED`.
    pub jobs_failed: usize,
    /// Jobs that had not ended when the run did.
    pub jobs_unfinished: usize,
    /// Jobs that never started (their waits are censored lower bounds).
    pub jobs_never_started: usize,
    /// Jobs that can never run under the policy (and so never started), by the planner's
    /// reason code (`MISCONFIGURATION:...`).
    #[serde(default)]
    pub never_runnable: BTreeMap<String, NeverRunnable>,
}

/// Jobs that can never run for one reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct NeverRunnable {
    /// How many.
    pub count: usize,
    /// The first few, by trace id in trace order.
    pub examples: Vec<String>,
}

/// Examples of never-runnable jobs kept per reason.
const NEVER_RUNNABLE_EXAMPLES: usize = 5;

impl PolicySummary {
    /// Measures one run.
    pub fn of(run: &RunRecord) -> Self {
        let waits: Vec<f64> = run
            .jobs
            .iter()
            .map(|j| wait_or_censored(j, run.end_s))
            .collect();
        let mut by_queue: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        let mut by_share: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        for (job, wait) in run.jobs.iter().zip(&waits) {
            by_queue.entry(job.queue.clone()).or_default().push(*wait);
            if let Some(share) = &job.share {
                by_share.entry(share.clone()).or_default().push(*wait);
            }
        }
        let jcts: Vec<f64> = run.jobs.iter().filter_map(JobRecord::jct_s).collect();
        let slowdowns: Vec<f64> = run.jobs.iter().filter_map(slowdown).collect();
        let jct_s = Distribution::of(&jcts);
        let (jain_fairness, fairness_windows) = jain_fairness(&run.shares, run.end_s);
        let jobs_completed = run.jobs.iter().filter(|j| j.end_s.is_some()).count();
        let preemptions: u64 = run.jobs.iter().map(|j| u64::from(j.preemptions)).sum();
        // From +0.0: `sum` of no floats is -0.0.
        let preempted_instance_s = run
            .jobs
            .iter()
            .fold(0.0, |sum, j| sum + j.preempted_instance_s);
        let busy_instance_s: f64 = run
            .usage
            .iter()
            .map(|u| u.busy_instances as f64 * (u.end_s - u.start_s))
            .sum();
        Self {
            utilization_backlogged: utilization(&run.usage, true),
            utilization_overall: utilization(&run.usage, false),
            wait_s: Distribution::of(&waits),
            wait_s_by_queue: by_queue
                .iter()
                .map(|(k, v)| (k.clone(), Distribution::of(v)))
                .collect(),
            wait_s_by_share: by_share
                .iter()
                .map(|(k, v)| (k.clone(), Distribution::of(v)))
                .collect(),
            jct_s_mean: jct_s.mean,
            jct_s,
            slowdown: Distribution::of(&slowdowns),
            jain_fairness,
            fairness_windows,
            max_wait_s: waits.iter().copied().max_by(f64::total_cmp),
            preemptions,
            reclaims: run.reclaims,
            reclaim_wait_s: Distribution::of(
                &run.jobs
                    .iter()
                    .filter(|j| j.reclaimed)
                    .filter_map(JobRecord::wait_s)
                    .collect::<Vec<_>>(),
            ),
            lent_wait_s: Distribution::of(
                &run.jobs
                    .iter()
                    .filter_map(|j| j.lent_wait_s)
                    .collect::<Vec<_>>(),
            ),
            preempted_instance_s,
            preemptions_per_job: (!run.jobs.is_empty())
                .then(|| preemptions as f64 / run.jobs.len() as f64),
            preempted_fraction: (busy_instance_s > 0.0)
                .then(|| preempted_instance_s / busy_instance_s),
            wait_after_start_s: Distribution::of(
                &run.jobs
                    .iter()
                    .filter_map(wait_after_start_s)
                    .collect::<Vec<_>>(),
            ),
            jobs_completed,
            jobs_succeeded: ended_with(run, "SUCCEEDED"),
            jobs_failed: ended_with(run, "FAILED"),
            jobs_unfinished: run.jobs.len() - jobs_completed,
            jobs_never_started: run
                .jobs
                .iter()
                .filter(|j| j.first_start_s.is_none())
                .count(),
            never_runnable: never_runnable(run),
        }
    }
}

/// How long a preempted job that completed waited again after its first start: its time from
/// first start to end, less its run time and the work its preempted attempts lost.
fn wait_after_start_s(job: &JobRecord) -> Option<f64> {
    if job.preemptions == 0 {
        return None;
    }
    let (start, end) = (job.first_start_s?, job.end_s?);
    let in_preempted = job.preempted_instance_s / f64::from(job.instances.max(1));
    Some((end - start - job.duration_s - in_preempted).max(0.0))
}

/// The never-runnable jobs of a run, by reason code (the text before ` - `).
fn never_runnable(run: &RunRecord) -> BTreeMap<String, NeverRunnable> {
    let mut out: BTreeMap<String, NeverRunnable> = BTreeMap::new();
    for job in &run.jobs {
        if let Some(reason) = &job.never_runs {
            let code = reason.split(" - ").next().unwrap_or(reason);
            let entry = out.entry(code.to_owned()).or_default();
            entry.count += 1;
            if entry.examples.len() < NEVER_RUNNABLE_EXAMPLES {
                entry.examples.push(job.trace_id.clone());
            }
        }
    }
    out
}

fn ended_with(run: &RunRecord, status: &str) -> usize {
    run.jobs
        .iter()
        .filter(|j| j.end_s.is_some() && j.status == status)
        .count()
}

/// A job's wait, or for a job that never started, the time it had waited when the run ended.
pub fn wait_or_censored(job: &JobRecord, run_end_s: f64) -> f64 {
    job.wait_s()
        .unwrap_or_else(|| (run_end_s - job.submit_s).max(0.0))
}

/// A job's slowdown (JCT over its duration floored at [`SLOWDOWN_FLOOR_S`]), if it ended.
pub fn slowdown(job: &JobRecord) -> Option<f64> {
    job.jct_s()
        .map(|jct| jct / job.duration_s.max(SLOWDOWN_FLOOR_S))
}

/// Arithmetic mean; `None` for an empty list.
pub fn mean(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let n = values.len() as f64;
    Some(values.iter().sum::<f64>() / n)
}

/// Nearest-rank percentile `p` (0–100) of `values` sorted ascending; `None` if empty.
pub fn percentile_sorted(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let n = sorted.len() as f64;
    let rank = (p / 100.0 * n).ceil();
    // Rank is clamped to 1..=len, so the cast back is exact and in range.
    let index = (rank.clamp(1.0, n) as usize) - 1;
    sorted.get(index).copied()
}

/// Busy over capacity instance-time, over the backlogged intervals only or over all of them;
/// `None` when no capacity-time was covered.
pub fn utilization(usage: &[UsageInterval], backlogged_only: bool) -> Option<f64> {
    let (mut busy, mut capacity) = (0.0, 0.0);
    for interval in usage.iter().filter(|u| u.backlogged || !backlogged_only) {
        let dt = (interval.end_s - interval.start_s).max(0.0);
        busy += interval.busy_instances as f64 * dt;
        capacity += interval.capacity_instances as f64 * dt;
    }
    (capacity > 0.0).then(|| busy / capacity)
}

/// One time slice of a utilization series.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UtilizationSlice {
    /// Middle of the slice.
    pub t_s: f64,
    /// Busy over capacity instance-time within the slice, `None` if no capacity was recorded.
    pub utilization: Option<f64>,
    /// Fraction of the slice during which some job was waiting.
    pub backlogged_fraction: f64,
}

/// Utilization over time in `bins` equal slices of `[0, end_s)`. Used for plots, which need a
/// bounded number of points however long the trace.
pub fn utilization_series(
    usage: &[UsageInterval],
    end_s: f64,
    bins: usize,
) -> Vec<UtilizationSlice> {
    if bins == 0 || end_s <= 0.0 {
        return Vec::new();
    }
    let width = end_s / bins as f64;
    let mut busy = vec![0.0; bins];
    let mut capacity = vec![0.0; bins];
    let mut backlogged = vec![0.0; bins];
    for interval in usage {
        let (start, end) = (interval.start_s.max(0.0), interval.end_s.min(end_s));
        if end <= start {
            continue;
        }
        let first = ((start / width) as usize).min(bins - 1);
        let last = ((end / width) as usize).min(bins - 1);
        for bin in first..=last {
            let (lo, hi) = (bin as f64 * width, (bin + 1) as f64 * width);
            let dt = (end.min(hi) - start.max(lo)).max(0.0);
            busy[bin] += interval.busy_instances as f64 * dt;
            capacity[bin] += interval.capacity_instances as f64 * dt;
            if interval.backlogged {
                backlogged[bin] += dt;
            }
        }
    }
    (0..bins)
        .map(|bin| UtilizationSlice {
            t_s: (bin as f64 + 0.5) * width,
            utilization: (capacity[bin] > 0.0).then(|| busy[bin] / capacity[bin]),
            backlogged_fraction: backlogged[bin] / width,
        })
        .collect()
}

/// Jain's fairness index `(Σx)² / (n·Σx²)`; `None` for an empty list or all zeros.
pub fn jain_index(values: &[f64]) -> Option<f64> {
    let sum: f64 = values.iter().sum();
    let sum_sq: f64 = values.iter().map(|x| x * x).sum();
    if values.is_empty() || sum_sq <= 0.0 {
        return None;
    }
    let n = values.len() as f64;
    Some(sum * sum / (n * sum_sq))
}

/// One share's totals within a fairness window.
#[derive(Default)]
struct ShareWindow {
    held_instance_s: f64,
    entitlement_weighted: f64,
    covered_s: f64,
    backlogged: bool,
}

/// Jain's index over windows of [`FAIRNESS_WINDOW_S`] (see the module documentation for which
/// shares and windows count), and the number of windows that counted.
///
/// One pass over the intervals, each spread over the windows it overlaps, so the cost grows
/// with intervals plus windows, not their product (a two-month trace has ~1,500 windows and
/// may record millions of share intervals).
pub fn jain_fairness(shares: &[ShareInterval], end_s: f64) -> (Option<f64>, usize) {
    if end_s <= 0.0 {
        return (None, 0);
    }
    let count = (end_s / FAIRNESS_WINDOW_S).ceil() as usize;
    let mut windows: Vec<BTreeMap<&str, ShareWindow>> =
        (0..count).map(|_| BTreeMap::new()).collect();
    for interval in shares {
        let (start, end) = (interval.start_s.max(0.0), interval.end_s.min(end_s));
        if end <= start {
            continue;
        }
        let first = ((start / FAIRNESS_WINDOW_S) as usize).min(count - 1);
        let last = ((end / FAIRNESS_WINDOW_S) as usize).min(count - 1);
        for (index, window) in windows.iter_mut().enumerate().take(last + 1).skip(first) {
            let lo = index as f64 * FAIRNESS_WINDOW_S;
            let hi = (lo + FAIRNESS_WINDOW_S).min(end_s);
            let overlap = end.min(hi) - start.max(lo);
            if overlap <= 0.0 {
                continue;
            }
            let totals = window.entry(interval.share.as_str()).or_default();
            totals.held_instance_s += interval.held_instances as f64 * overlap;
            totals.entitlement_weighted += interval.entitlement * overlap;
            totals.covered_s += overlap;
            totals.backlogged |= interval.backlogged;
        }
    }
    let (mut weighted_sum, mut weight, mut counted) = (0.0, 0.0, 0);
    for (index, window) in windows.iter().enumerate() {
        let lo = index as f64 * FAIRNESS_WINDOW_S;
        let length = (lo + FAIRNESS_WINDOW_S).min(end_s) - lo;
        if let Some(jain) = window_index(window) {
            weighted_sum += jain * length;
            weight += length;
            counted += 1;
        }
    }
    ((weight > 0.0).then(|| weighted_sum / weight), counted)
}

/// Jain's index for one window's per-share totals, or `None` if the window does not count.
fn window_index(per_share: &BTreeMap<&str, ShareWindow>) -> Option<f64> {
    let total_held: f64 = per_share.values().map(|w| w.held_instance_s).sum();
    if total_held <= 0.0 {
        return None;
    }
    let normalised: Vec<f64> = per_share
        .values()
        .filter_map(|w| {
            let entitlement = w.entitlement_weighted / w.covered_s;
            let counts =
                entitlement > 0.0 && (w.backlogged || w.held_instance_s / total_held > entitlement);
            counts.then(|| w.held_instance_s / entitlement)
        })
        .collect();
    if normalised.len() < 2 {
        return None;
    }
    jain_index(&normalised)
}
