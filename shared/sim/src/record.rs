//! What one simulated run records: every job's life and the pool's use over time. The driver
//! fills it; the measures and reports only read it, so they can be tested on hand-made records.
//! Times are seconds of virtual time from the start of the trace.

use serde::{Deserialize, Serialize};

/// One job's life in a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    /// The trace's id for the job.
    pub trace_id: String,
    /// Queue it was submitted to (its priority tier).
    pub queue: String,
    /// Share (team) it belongs to, if the scenario uses shares.
    pub share: Option<String>,
    /// Instances it needs.
    pub instances: u32,
    /// Submission time.
    pub submit_s: f64,
    /// First dispatch (SCHEDULED), if it ever started.
    pub first_start_s: Option<f64>,
    /// When it reached SUCCEEDED or FAILED, if it did before the run ended.
    pub end_s: Option<f64>,
    /// Its run time in the trace (what it needs on the instances when undisturbed).
    pub duration_s: f64,
    /// Final status (`SUCCEEDED`, `FAILED`, or the last status if unfinished).
    pub status: String,
    /// Attempts made.
    pub attempts: u32,
    /// Times it was preempted.
    pub preemptions: u32,
    /// Instance-seconds lost to preemptions: the time its preempted attempts held their
    /// instances, less the training their checkpoints kept for the next attempt.
    pub preempted_instance_s: f64,
    /// Why the job can never run under the policy (the planner's `MISCONFIGURATION:` reason),
    /// if it cannot: such a job is not replayed, and counts as never started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub never_runs: Option<String>,
    /// Whether capacity another quota share borrowed was reclaimed (by preemption) for it: its
    /// wait is how long an owner waited to get its lent capacity back.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reclaimed: bool,
    /// Its start-time estimate at submission, p50 and p90, as waits in seconds (runs with
    /// estimates only; `None` also when the estimate was beyond the horizon).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eta_p50_s: Option<f64>,
    /// See `eta_p50_s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eta_p90_s: Option<f64>,
    /// Its owner's reclaim latency: how long it waited for capacity its quota share lent, from
    /// the first cycle that found it within its share's limit while other shares' borrowed jobs
    /// held that capacity (`QUOTA:CAPACITY_LENT`, or the cycle that reclaimed capacity for it)
    /// to the cycle that dispatched it, every cycle between finding it waiting so or for the
    /// jobs preempted for it. The first such wait of the job; `None` for a job that had none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lent_wait_s: Option<f64>,
}

impl JobRecord {
    /// Time from submission to first dispatch, if it started.
    pub fn wait_s(&self) -> Option<f64> {
        self.first_start_s.map(|s| (s - self.submit_s).max(0.0))
    }

    /// Job completion time (submission to end), if it ended.
    pub fn jct_s(&self) -> Option<f64> {
        self.end_s.map(|e| (e - self.submit_s).max(0.0))
    }
}

/// The pool's state over an interval `[start_s, end_s)` during which it did not change.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct UsageInterval {
    /// Start of the interval.
    pub start_s: f64,
    /// End of the interval.
    pub end_s: f64,
    /// Instances held by dispatched jobs.
    pub busy_instances: u64,
    /// Total capacity of the pool.
    pub capacity_instances: u64,
    /// Whether some job was waiting (RUNNABLE) during the interval.
    pub backlogged: bool,
}

/// Per-share allocation over an interval, for fairness measures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShareInterval {
    /// Start of the interval.
    pub start_s: f64,
    /// End of the interval.
    pub end_s: f64,
    /// Share.
    pub share: String,
    /// Instances the share held.
    pub held_instances: u64,
    /// Whether the share had jobs waiting during the interval.
    pub backlogged: bool,
    /// What the share is entitled to (its weight or quota, normalised by the driver so that the
    /// entitlements of all shares sum to 1).
    pub entitlement: f64,
}

/// Everything one run of one policy recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct RunRecord {
    /// Policy name (`fifo`, `batch-fair-share`, `trainyard`, `quota-shares`, `static-partition`).
    pub policy: String,
    /// Every job of the trace.
    pub jobs: Vec<JobRecord>,
    /// The pool's use over time, in order, without gaps.
    pub usage: Vec<UsageInterval>,
    /// Per-share allocation over time.
    pub shares: Vec<ShareInterval>,
    /// Virtual time covered by the run.
    pub end_s: f64,
    /// Preemptions that reclaimed capacity another quota share borrowed; the rest of the jobs'
    /// `preemptions` are in-share, by priority.
    #[serde(default)]
    pub reclaims: u64,
    /// Start-time estimates made and scored during the run, if it was asked for them.
    #[serde(skip)]
    pub eta: Option<crate::eta::EtaRun>,
    /// How much scheduling the replay took (not part of its results: a faster driver may
    /// cycle less for the same outcome).
    #[serde(skip)]
    pub work: ReplayWork,
}

/// How much scheduling a replay took, for its progress report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReplayWork {
    /// Passes (instants at which something happened).
    pub passes: u64,
    /// Cycles planned.
    pub cycles: u64,
    /// Cycles that dispatched something.
    pub dispatching_cycles: u64,
}
