//! Start-time estimates for waiting jobs, made by running Trainyard's own planner forward.
//!
//! ```text
//! forecast(&Snapshot, now_ms, &Config, &History, &Options) -> { job: Samples }
//! Calibration::estimate(Scope, now_ms, &Samples)          -> Estimate { p50, p90, within, coverage }
//! Calibration::observe(Scope, &Estimate, started_ms)       (when the job starts)
//! ```
//!
//! A forecast runs `Options::rollouts` rollouts from one snapshot whose `pending` holds every
//! waiting job to estimate (not only the heads a cycle reads). Each rollout samples what is
//! uncertain: how long each running attempt still runs and each dispatched job will run (from
//! the runtimes of its family, or a running attempt's by its age; never beyond its
//! `MaxRuntimeInSeconds`), and which jobs arrive
//! meanwhile (each line at its recent rate, shaped like its recent jobs), so that a higher
//! priority or a better-ranked share can overtake. The spread of a job's start over the rollouts
//! gives its raw quantiles; [`Calibration`] adjusts them against the starts that actually
//! followed, and publishes the coverage it measured.
//!
//! [`rollout::World::Shadow`] is Slurm's estimate (every attempt runs to its time limit, nothing
//! arrives): the baseline estimates are measured against, and the p90's other forecaster, which
//! a job of several instances, or at its first estimate, publishes when it is later
//! ([`estimate`]).
//!
//! Pure and deterministic like the planner: the same snapshot, history, options and seed give
//! the same samples.
//!
//! # Layout
//!
//! - [`history`]: runtimes per job family and arrivals per line, bounded.
//! - [`rollout`]: one rollout of the planner in virtual time.
//! - [`estimate`]: quantiles, probabilities and the online calibration.
//! - [`forecaster`]: what a host keeps between rounds, and a round: learn, then estimate.

pub mod estimate;
pub mod forecaster;
pub mod history;
pub mod rollout;

use std::collections::BTreeMap;

use trainyard_domain::random::{SplitMix64, mix64};
use trainyard_scheduler::snapshot::Instances;
use trainyard_scheduler::{Config, SharedInstances, SharedStr, Snapshot};

pub use estimate::{Calibration, Coverage, Estimate, P90From, Samples, Scope};
pub use forecaster::{Forecaster, Learned, Learnt, Open, Resolved};
pub use history::{Arrival, Family, History, Line};
pub use rollout::{Options, World};

/// Runs `options.rollouts` rollouts from `snapshot` (fewer, but at least `min_rollouts`, when
/// `options.budget` runs out first) and gathers each waiting job's start times, with its start
/// in the shadow schedule.
pub fn forecast(
    snapshot: &Snapshot,
    now_ms: i64,
    planner: &Config,
    history: &History,
    options: &Options,
) -> BTreeMap<SharedStr, Samples> {
    let mut samples: BTreeMap<SharedStr, Samples> = snapshot
        .pending
        .iter()
        .map(|job| {
            let empty = Samples {
                starts_ms: Vec::new(),
                rollouts: options.rollouts,
                shadow_ms: None,
            };
            (job.job_id.clone(), empty)
        })
        .collect();
    let started = std::time::Instant::now();
    let snapshot = &with_shared_shapes(snapshot);
    for (job, at) in shadow(snapshot, now_ms, planner, options) {
        if let Some(s) = samples.get_mut(&job) {
            s.shadow_ms = Some(at);
        }
    }
    let mut run = 0;
    for k in 0..options.rollouts {
        let spent = |budget| started.elapsed() >= budget;
        if k >= options.min_rollouts && options.budget.is_some_and(spent) {
            break;
        }
        run += 1;
        let rng = SplitMix64::new(mix64(options.seed.wrapping_add(u64::from(k))));
        let starts = rollout::roll(
            snapshot,
            now_ms,
            planner,
            World::Sampled(history),
            options,
            rng,
        );
        for (job, at) in starts {
            if let Some(s) = samples.get_mut(&job) {
                s.starts_ms.push(at);
            }
        }
    }
    for s in samples.values_mut() {
        s.starts_ms.sort_unstable();
        s.rollouts = run;
    }
    samples
}

/// A copy of `snapshot` in which jobs of the same shape (instances of each type) share one map:
/// every step of a rollout checks every head's instances against the pool, and a few shared maps
/// stay in the processor's cache where one map per job does not (docs/benchmarks.md, "Cost" of
/// start-time estimates).
fn with_shared_shapes(snapshot: &Snapshot) -> Snapshot {
    let mut shapes: BTreeMap<Instances, SharedInstances> = BTreeMap::new();
    let mut share = |instances: &mut SharedInstances| match shapes.get(&**instances) {
        Some(shape) => *instances = shape.clone(),
        None => {
            shapes.insert((**instances).clone(), instances.clone());
        }
    };
    let mut copy = snapshot.clone();
    for job in &mut copy.pending {
        share(&mut job.instances);
    }
    for job in &mut copy.running {
        share(&mut job.instances);
    }
    copy
}

/// Slurm's shadow schedule from `snapshot`: when each waiting job would start if every attempt
/// ran to its `MaxRuntimeInSeconds` and nothing arrived.
pub fn shadow(
    snapshot: &Snapshot,
    now_ms: i64,
    planner: &Config,
    options: &Options,
) -> BTreeMap<SharedStr, i64> {
    rollout::roll(
        snapshot,
        now_ms,
        planner,
        World::Shadow,
        options,
        SplitMix64::new(options.seed),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use trainyard_scheduler::PendingJob;

    fn pending(id: &str, n: u32) -> PendingJob {
        PendingJob {
            job_id: id.into(),
            queue: "q".into(),
            share: None,
            priority: 0,
            runnable_at_ms: 0,
            instances: Instances::from([("ml.g5.xlarge".to_owned(), n)]).into(),
            max_runtime_s: None,
            not_before_ms: None,
            line_offset_ms: 0,
        }
    }

    #[test]
    fn jobs_of_one_shape_share_one_map_and_nothing_else_changes() {
        let snapshot = Snapshot {
            pending: vec![pending("a", 1), pending("b", 2), pending("c", 1)],
            ..Snapshot::default()
        };
        let shared = with_shared_shapes(&snapshot);
        assert_eq!(shared, snapshot);
        let [a, b, c] = [0, 1, 2].map(|i| &shared.pending[i].instances);
        assert!(
            std::ptr::eq(&**a, &**c),
            "one map for the two jobs of one instance"
        );
        assert!(!std::ptr::eq(&**a, &**b));
    }
}
