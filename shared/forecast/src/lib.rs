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
use trainyard_scheduler::{Config, SharedStr, Snapshot};

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
