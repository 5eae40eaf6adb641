//! What a host keeps between forecasts: the history it learns from, the calibration, and the
//! estimates it published that have not met their outcome yet. Each round a host gives it a
//! snapshot (with every waiting job to estimate) and a way to read a job; it learns what
//! started and what ended since the last round, then makes the estimates.
//!
//! ```text
//! round:  learn(&snapshot, read_job) -> resolved estimates (for hosts that score them)
//!         estimate(now, &snapshot, &planner, all) -> { job: Estimate }
//! ```
//!
//! Everything it keeps is bounded by the jobs waiting or running, except the history's own
//! bounded windows.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use trainyard_domain::job::{Requeue, ServiceJob};
use trainyard_scheduler::{Config, PendingJob, SharedStr, Snapshot};

use crate::estimate::{Calibration, Estimate, Scope};
use crate::history::{Arrival, Family, History, Line};
use crate::rollout::Options;

/// A published estimate waiting for its outcome, with what the host keeps beside it.
#[derive(Debug, Clone)]
pub struct Open<T> {
    /// The job.
    pub job_id: SharedStr,
    /// Its queue (the calibration's scope, with `instances`).
    pub queue: SharedStr,
    /// Instances it takes.
    pub instances: u64,
    /// Whether it was the job's first estimate of this wait.
    pub first: bool,
    /// The estimate.
    pub estimate: Estimate,
    /// The host's own data.
    pub extra: T,
}

/// An estimate whose job started.
#[derive(Debug, Clone)]
pub struct Resolved<T> {
    /// The estimate.
    pub open: Open<T>,
    /// When the job started (dispatch).
    pub started_ms: i64,
}

/// What one round learnt.
#[derive(Debug, Clone)]
pub struct Learnt<T> {
    /// Estimates whose job started since the last round.
    pub resolved: Vec<Resolved<T>>,
    /// Estimates whose job left the line without starting after them.
    pub dropped: usize,
}

/// What a forecaster has learnt, for a host that restarts (a Lambda instance's cold start) to
/// keep as JSON and estimate from where it left off rather than from nothing: the history, the
/// calibration, and what it knew of the jobs at its last round (so that a job that ends while no
/// process runs still gives its runtime, and one seen before is not a second arrival). The
/// estimates still open are not in it: after a restart the calibration learns from new
/// estimates only.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Learned {
    /// Runtimes per family and arrivals per line.
    pub history: History,
    /// The calibration's state per group.
    pub calibration: Calibration,
    /// The family of every job waiting or running at the last round.
    #[serde(default)]
    pub families: BTreeMap<SharedStr, Family>,
    /// Jobs whose arrival is known.
    #[serde(default)]
    pub arrived: BTreeSet<SharedStr>,
}

/// A host's forecasting state.
#[derive(Debug, Clone)]
pub struct Forecaster<T = ()> {
    options: Options,
    history: History,
    calibration: Calibration,
    open: BTreeMap<SharedStr, Vec<Open<T>>>,
    /// The family of every job waiting or running at the last round (for the runtimes of
    /// attempts that end).
    families: BTreeMap<SharedStr, Family>,
    /// Jobs whose arrival is known: reported by the host, or seen at the last round.
    arrived: BTreeSet<SharedStr>,
    /// Jobs estimated during their current wait.
    estimated: BTreeSet<SharedStr>,
}

impl<T> Forecaster<T> {
    /// A forecaster that has seen nothing yet: its first estimates are uncalibrated and assume
    /// every attempt runs to its time limit, until attempts end.
    pub fn new(options: Options) -> Self {
        Self {
            options,
            history: History::default(),
            calibration: Calibration::default(),
            open: BTreeMap::new(),
            families: BTreeMap::new(),
            arrived: BTreeSet::new(),
            estimated: BTreeSet::new(),
        }
    }

    /// A forecaster that starts from what another learnt (see [`Learned`]).
    pub fn with_learned(options: Options, learned: Learned) -> Self {
        Self {
            history: learned.history,
            calibration: learned.calibration,
            families: learned.families,
            arrived: learned.arrived,
            ..Self::new(options)
        }
    }

    /// What it has learnt, to keep across a restart.
    pub fn learned(&self) -> Learned {
        Learned {
            history: self.history.clone(),
            calibration: self.calibration.clone(),
            families: self.families.clone(),
            arrived: self.arrived.clone(),
        }
    }

    /// Whether what it has learnt is `learned` and nothing more (compared in place: nothing
    /// new since `learned` was taken, so nothing to keep).
    pub fn has_learned_only(&self, learned: &Learned) -> bool {
        self.history == learned.history
            && self.calibration == learned.calibration
            && self.families == learned.families
            && self.arrived == learned.arrived
    }

    /// The options rounds run with.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// How its estimates have held.
    pub fn calibration(&self) -> &Calibration {
        &self.calibration
    }

    /// What it has learnt.
    pub fn history(&self) -> &History {
        &self.history
    }

    /// A job was submitted to `line` (for hosts that see submissions; others learn arrivals
    /// from the jobs that appear in the snapshots, missing those that start and end between two
    /// rounds).
    pub fn submitted(&mut self, job_id: SharedStr, line: Line, arrival: Arrival) {
        self.arrived.insert(job_id);
        self.history.observe_arrival(line, arrival);
    }

    /// Learns from `snapshot`: estimates of jobs that started are resolved and teach the
    /// calibration, attempts that ended give their runtimes, and jobs seen for the first time
    /// are arrivals. `read_job` reads a job from the store (for those that left the snapshot).
    pub fn learn(
        &mut self,
        snapshot: &Snapshot,
        read_job: &mut dyn FnMut(&str) -> Option<ServiceJob>,
    ) -> Learnt<T> {
        let waiting: BTreeSet<&str> = snapshot.pending.iter().map(|p| p.job_id.as_str()).collect();
        let running: BTreeMap<&str, i64> = snapshot
            .running
            .iter()
            .map(|r| (r.job_id.as_str(), r.started_at_ms))
            .collect();
        let present = |id: &str| waiting.contains(id) || running.contains_key(id);
        let mut stored: BTreeMap<SharedStr, ServiceJob> = BTreeMap::new();
        for id in self.departed(snapshot) {
            if let Some(job) = read_job(&id) {
                stored.insert(id, job);
            }
        }
        for (id, job) in &stored {
            let Some(family) = self.families.get(id).filter(|_| job.status.is_terminal()) else {
                continue;
            };
            for attempt in &job.attempts {
                // Preempted, capacity-refused and lost attempts were cut short.
                let ran_its_course = matches!(attempt.failed_as, None | Some(Requeue::Retry));
                if let (Some(start), Some(stop), true) =
                    (attempt.started_at, attempt.stopped_at, ran_its_course)
                {
                    let runtime_s = u64::try_from((stop - start) / 1_000).unwrap_or(0);
                    self.history.observe_runtime(
                        family.clone(),
                        runtime_s,
                        job.training.max_runtime_s,
                    );
                }
            }
        }

        let mut learnt = Learnt {
            resolved: Vec::new(),
            dropped: 0,
        };
        for (id, opens) in std::mem::take(&mut self.open) {
            let started_after = |made_ms: i64| -> Option<i64> {
                if let Some(at) = running.get(id.as_str()).filter(|at| **at >= made_ms) {
                    return Some(*at);
                }
                if waiting.contains(id.as_str()) {
                    return None;
                }
                stored
                    .get(&id)?
                    .attempts
                    .iter()
                    .filter_map(|a| a.started_at)
                    .find(|at| *at >= made_ms)
            };
            let mut still_open = Vec::new();
            for open in opens {
                let started = started_after(open.estimate.at_ms);
                match started {
                    Some(started_ms) => {
                        self.teach(&open, started_ms);
                        learnt.resolved.push(Resolved { open, started_ms });
                    }
                    // Still waiting: in the snapshot, or beyond the jobs a line shows it (others
                    // went ahead of it), or between a dispatch and its start.
                    None if present(&id)
                        || stored.get(&id).is_some_and(|job| !job.status.is_terminal()) =>
                    {
                        still_open.push(open)
                    }
                    // It ended without starting after the estimate (it started before it and
                    // was preempted since, or it was cancelled).
                    None => learnt.dropped += 1,
                }
            }
            if !still_open.is_empty() {
                self.open.insert(id, still_open);
            }
        }
        self.calibration.settle();

        // Jobs seen for the first time arrived (when they became RUNNABLE, or started).
        let new_arrivals: Vec<(Line, Arrival)> = snapshot
            .pending
            .iter()
            .filter(|p| !self.arrived.contains(&p.job_id))
            .map(|p| {
                let arrival = Arrival {
                    at_ms: p.runnable_at_ms,
                    priority: p.priority,
                    instances: p.instances.clone(),
                    max_runtime_s: p.max_runtime_s,
                    line_offset_ms: p.line_offset_ms,
                };
                ((p.queue.clone(), p.share.clone()), arrival)
            })
            .chain(
                snapshot
                    .running
                    .iter()
                    .filter(|r| !self.arrived.contains(&r.job_id))
                    .map(|r| {
                        let arrival = Arrival {
                            at_ms: r.started_at_ms,
                            priority: r.priority,
                            instances: r.instances.clone(),
                            max_runtime_s: u64::try_from(
                                (r.expected_end_ms - r.started_at_ms) / 1_000,
                            )
                            .ok(),
                            // Unknown once it runs; it no longer matters to its own line.
                            line_offset_ms: 0,
                        };
                        ((r.queue.clone(), r.share.clone()), arrival)
                    }),
            )
            .collect();
        for (line, arrival) in new_arrivals {
            self.history.observe_arrival(line, arrival);
        }
        self.families = snapshot
            .pending
            .iter()
            .map(|p| {
                (
                    p.job_id.clone(),
                    Family::of(&p.queue, p.share.as_ref(), p.instances.total()),
                )
            })
            .chain(snapshot.running.iter().map(|r| {
                (
                    r.job_id.clone(),
                    Family::of(&r.queue, r.share.as_ref(), r.instances.total()),
                )
            }))
            .collect();
        self.arrived = self.families.keys().cloned().collect();
        self.estimated.retain(|id| waiting.contains(id.as_str()));
        learnt
    }

    /// The jobs [`Self::learn`] reads for `snapshot` (through its `read_job`): those of the last
    /// round, or with open estimates, that are neither waiting nor running now. They have left
    /// the line or ended: when they started, and their attempts' runtimes, are in the store.
    pub fn departed(&self, snapshot: &Snapshot) -> Vec<SharedStr> {
        let present: BTreeSet<&str> = snapshot
            .pending
            .iter()
            .map(|p| p.job_id.as_str())
            .chain(snapshot.running.iter().map(|r| r.job_id.as_str()))
            .collect();
        let gone: BTreeSet<&SharedStr> = self
            .families
            .keys()
            .chain(self.open.keys())
            .filter(|id| !present.contains(id.as_str()))
            .collect();
        gone.into_iter().cloned().collect()
    }

    /// Teaches the calibration the outcomes of `open`, whose job started at `started_ms`.
    fn teach(&mut self, open: &Open<T>, started_ms: i64) {
        let scope = Scope {
            queue: &open.queue,
            instances: open.instances,
            first: open.first,
        };
        self.calibration.observe(scope, &open.estimate, started_ms);
    }

    /// Estimates the waiting jobs of `snapshot` at `now_ms`: every one with `all`, otherwise
    /// only those not estimated yet in their current wait (and nothing at all, without running
    /// a rollout, when there are none). `extra` gives what the host keeps beside each.
    pub fn estimate(
        &mut self,
        now_ms: i64,
        snapshot: &Snapshot,
        planner: &Config,
        all: bool,
        mut extra: impl FnMut(&PendingJob) -> T,
    ) -> BTreeMap<SharedStr, Estimate> {
        let mut estimates = BTreeMap::new();
        if !self.wants(snapshot, all) {
            return estimates;
        }
        let options = Options {
            seed: self.options.seed ^ (now_ms as u64),
            ..self.options.clone()
        };
        let horizon_ms = options.horizon_ms();
        let samples = crate::forecast(snapshot, now_ms, planner, &self.history, &options);
        for p in &snapshot.pending {
            let first = !self.estimated.contains(&p.job_id);
            if !all && !first {
                continue;
            }
            let Some(s) = samples.get(&p.job_id) else {
                continue;
            };
            let scope = Scope {
                queue: &p.queue,
                instances: p.instances.total(),
                first,
            };
            let estimate = self.calibration.estimate(scope, now_ms, s, horizon_ms);
            let open = Open {
                job_id: p.job_id.clone(),
                queue: p.queue.clone(),
                instances: scope.instances,
                first,
                estimate: estimate.clone(),
                extra: extra(p),
            };
            self.estimated.insert(p.job_id.clone());
            self.open.entry(p.job_id.clone()).or_default().push(open);
            estimates.insert(p.job_id.clone(), estimate);
        }
        estimates
    }

    /// Whether [`Self::estimate`] would estimate anything.
    pub fn wants(&self, snapshot: &Snapshot, all: bool) -> bool {
        if all {
            return !snapshot.pending.is_empty();
        }
        snapshot
            .pending
            .iter()
            .any(|p| !self.estimated.contains(&p.job_id))
    }

    /// Estimates still waiting for their outcome.
    pub fn open(&self) -> usize {
        self.open.values().map(Vec::len).sum()
    }
}
