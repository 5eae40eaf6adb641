//! From rollouts to a published estimate: the spread of start times over the rollouts gives raw
//! quantiles; an online calibration widens or narrows the p90 until it covers about 90% of the
//! starts that followed, and the coverage measured so far (of the p50 and of the p90) is
//! published beside every estimate. The p50 is the rollouts' own: on the documented Philly
//! replay, correcting it the same way made its loss more than twice the raw one's
//! (docs/benchmarks.md#start-time-estimates).
//!
//! # Calibration
//!
//! Adaptive conformal inference (Gibbs & Candès 2021) on a log scale, per group of alike
//! estimates. The published p90 is the raw one moved by the group's correction `θ`:
//! `w' = (w + c)·e^θ − c`, with `c` = 300 s (so that a job expected to start at once is neither
//! stretched to zero nor to infinity). Every outcome moves `θ` by `γ·(miss − α)`, `γ` = 0.002,
//! `α` = 0.1, applied once a round ([`Calibration::settle`],
//! between two forecasts, so that every estimate of a forecast sees the same corrections):
//! misses more often than `α` widen the estimates, fewer narrow them, whatever the rollouts' own
//! bias, so that over time the share of covered outcomes tends to `1 − α`. `γ` is small because
//! outcomes come in correlated floods (a long job that ends starts many waiting jobs at once,
//! each estimated every few minutes); a larger one swings the estimates by the flood's size.
//! A published quantile never goes beyond the horizon; there it is "later".
//!
//! An outcome is learnt when the job starts: whether it started by each published quantile. A
//! quantile that passes while the job still waits is not counted as a miss then, though it is
//! one already: misses learnt that early, while the hits of the same forecasts are learnt only
//! as their jobs start, push the correction towards wider estimates whenever the backlog
//! grows, and it overshoots (on the documented Philly replay, under the runtime rules of the
//! time, counting misses then took the p90's pinball ratio to the shadow schedule from 0.725
//! to 0.95; docs/benchmarks.md#start-time-estimates).
//!
//! Learnt at the start, the outcome of an estimate made a day before says how the rollouts erred
//! a day ago: a backlog that grew for a day (its estimates missing) drains in a flood of such
//! outcomes, while the estimates made now already cover their starts. An outcome of a
//! one-instance estimate therefore moves the correction by `e^(−wait / 1 day)` of a step, its
//! wait from the estimate to the start (on the replayed 10,000 Philly jobs, the one-instance
//! p90's pinball loss fell by half at the same coverage; docs/benchmarks.md#start-time-estimates).
//! A job of several instances waits that long as a rule, and its outcomes keep their full step:
//! weighed too, they moved its corrections so little that its coverage fell (0.80 to 0.74).
//!
//! A group is the job's queue, its size (1, 2-8, 9+ instances) and where its raw median falls
//! (under 10 min, 1 h, 6 h, later, beyond the horizon): rollouts err differently for a large job
//! or a long wait, and one correction for all would over-cover some and under-cover others.
//! Every level keeps its own correction; an estimate takes the narrowest with
//! [`Calibration::MIN_OUTCOMES`] outcomes (then the queue and wait, then the queue). With none,
//! the estimate is raw and says it is uncalibrated.
//!
//! # Two forecasters of the p90
//!
//! The p90 comes from one of two forecasters: the rollouts' own p90, or the job's start in
//! Slurm's shadow schedule (every attempt runs to its `MaxRuntimeInSeconds`, nothing arrives),
//! each corrected by its calibration group's `θ` for that forecaster; an outcome teaches the
//! correction of the forecaster its p90 came from.
//!
//! - *A job of several instances, and every job at its first estimate of a wait, publishes the
//!   later of the two.* Rollouts sample runtimes from history, which suits a job that needs one
//!   instance of many that turn over; a job that needs many instances free at once waits for
//!   the long runners, whose time limits the shadow schedule reads, and a job just submitted
//!   has not yet been overtaken by the arrivals the rollouts underestimate. On the documented
//!   Philly replay the rollouts' p90 covers 59% of first estimates, the published one 93%; on
//!   its first 10,000 jobs the rollouts' p90 covers 55% of estimates of jobs of 2-8 instances,
//!   the later of the two, corrected, 80% (docs/benchmarks.md#start-time-estimates).
//! - *Any other estimate (one instance, already estimated in this wait)* publishes the
//!   rollouts' p90: sampled runtimes suit a job that needs one instance of many that turn
//!   over.
//!
//! A p90 beyond the horizon is "later", whichever forecaster it comes from.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

/// The start times one job had over a forecast's rollouts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Samples {
    /// Start times (epoch ms) in the rollouts in which it started, ascending.
    pub starts_ms: Vec<i64>,
    /// Rollouts run in all (those in which it did not start within the horizon count too).
    pub rollouts: u32,
    /// Its start in the shadow schedule (epoch ms); `None` beyond the horizon or not computed.
    pub shadow_ms: Option<i64>,
}

impl Samples {
    /// The `q` quantile of the start time, `None` when it falls beyond the horizon.
    pub fn quantile(&self, q: f64) -> Option<i64> {
        let rank = (q * f64::from(self.rollouts)).ceil().max(1.0) as usize;
        self.starts_ms.get(rank - 1).copied()
    }
}

/// What a job's estimate is calibrated with: its queue and its size, and whether it is the first
/// of the job's wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scope<'a> {
    /// Queue.
    pub queue: &'a str,
    /// Instances it takes.
    pub instances: u64,
    /// Whether it is the job's first estimate since it became RUNNABLE (or was requeued).
    pub first: bool,
}

/// A published start-time estimate of a waiting job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Estimate {
    /// When it was made (epoch ms).
    pub at_ms: i64,
    /// Median start time (epoch ms); `None`: beyond the horizon.
    pub p50_ms: Option<i64>,
    /// 90th-percentile start time (epoch ms); `None`: beyond the horizon.
    pub p90_ms: Option<i64>,
    /// Probability of starting within an hour, 6 hours and 24 hours of `at_ms`.
    pub within: [f64; 3],
    /// The rollouts' own p50 and p90 (epoch ms), before calibration.
    pub raw_ms: [Option<i64>; 2],
    /// Coverage measured in its calibration group so far; `None` while it is uncalibrated.
    pub coverage: Option<Coverage>,
    /// Which forecaster the p90 comes from.
    #[serde(default)]
    pub p90_from: P90From,
    /// The job's start in the shadow schedule (epoch ms), the other forecaster of the p90.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow_ms: Option<i64>,
}

impl Estimate {
    /// The rollouts' median wait from when it was made, in seconds: what places it in a group.
    fn raw_p50_wait_s(&self) -> Option<f64> {
        self.raw_ms[0].map(|at| wait_s(at, self.at_ms))
    }
}

/// The forecaster a published p90 comes from (see the module's docs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum P90From {
    /// The rollouts' own p90.
    #[default]
    Rollouts,
    /// The job's start in the shadow schedule.
    Shadow,
}

/// Horizons of [`Estimate::within`].
pub const WITHIN_S: [i64; 3] = [3_600, 6 * 3_600, 24 * 3_600];

/// How often published quantiles covered the starts that followed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Coverage {
    /// Share of starts at or before the published p50.
    pub p50: f64,
    /// Share of starts at or before the published p90.
    pub p90: f64,
    /// Starts counted (at most [`Calibration::WINDOW`]).
    pub outcomes: usize,
}

/// One group's corrections and newest outcomes, per quantile (p50, p90).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Group {
    theta: [f64; 2],
    outcomes: [usize; 2],
    /// Misses and outcomes learnt since the last [`Calibration::settle`].
    round: [f64; 2],
    /// Whether each recent outcome was covered, newest last.
    covered: [VecDeque<bool>; 2],
    /// The p90's correction and misses this round when it comes from the shadow schedule.
    #[serde(default)]
    shadow_theta: f64,
    #[serde(default)]
    shadow_round: f64,
}

impl Group {
    fn coverage(&self) -> Coverage {
        let share = |i: usize| {
            let window = &self.covered[i];
            window.iter().filter(|c| **c).count() as f64 / window.len().max(1) as f64
        };
        Coverage {
            p50: share(0),
            p90: share(1),
            outcomes: self.covered[1].len(),
        }
    }
}

/// Online calibration per group of alike estimates.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    groups: BTreeMap<String, Group>,
}

const OFFSET_S: f64 = 300.0;
/// Each quantile's step: the p50 is published raw (its coverage is still measured).
const GAMMA: [f64; 2] = [0.0, 0.002];
const ALPHA: [f64; 2] = [0.5, 0.1];
/// The most a correction moves a p90: by a factor of e (about 2.7) either way. With 5 (148×),
/// one episode of misses (the backlog growing for a day) widened the one-instance estimates so
/// far that the replayed Philly's calibrated p90 lost more than the raw one for days after
/// (docs/benchmarks.md#start-time-estimates).
const THETA_LIMIT: f64 = 1.0;
/// An outcome of a one-instance estimate teaches `e^(−wait / STALE_S)` of a fresh one, its wait
/// being from the estimate to the start (see the module's docs).
const STALE_S: f64 = 86_400.0;

fn wait_s(at_ms: i64, now_ms: i64) -> f64 {
    (at_ms - now_ms).max(0) as f64 / 1_000.0
}

/// Pinball (quantile) loss at `tau` of predicting `predicted` when `actual` followed: what a
/// quantile forecast is scored by (late misses weigh `tau`, early ones `1 − tau`).
pub fn pinball(tau: f64, actual: f64, predicted: f64) -> f64 {
    if actual >= predicted {
        tau * (actual - predicted)
    } else {
        (1.0 - tau) * (predicted - actual)
    }
}

/// One step of a correction towards the outcomes of a round, within bounds.
fn step(theta: &mut f64, gamma: f64, excess: f64) {
    *theta = (*theta + gamma * excess).clamp(-THETA_LIMIT, THETA_LIMIT);
}

fn adjust(wait_s: f64, theta: f64) -> i64 {
    (((wait_s + OFFSET_S) * theta.exp() - OFFSET_S).max(0.0) * 1_000.0) as i64
}

/// The size class of a job of `scope`.
fn size(scope: Scope<'_>) -> &'static str {
    match scope.instances {
        0 | 1 => "1",
        2..=8 => "2-8",
        _ => "9+",
    }
}

/// The groups an estimate belongs to, narrowest first.
fn groups(scope: Scope<'_>, raw_p50_wait_s: Option<f64>) -> [String; 3] {
    let size = size(scope);
    let wait = match raw_p50_wait_s {
        None => "beyond",
        Some(w) if w < 600.0 => "<10m",
        Some(w) if w < 3_600.0 => "<1h",
        Some(w) if w < 6.0 * 3_600.0 => "<6h",
        Some(_) => ">6h",
    };
    let queue = scope.queue;
    [
        format!("{queue}|{size}|{wait}"),
        format!("{queue}|*|{wait}"),
        format!("{queue}|*|*"),
    ]
}

impl Calibration {
    /// Outcomes a group needs before it calibrates estimates.
    pub const MIN_OUTCOMES: usize = 50;
    /// Outcomes its published coverage is measured over.
    pub const WINDOW: usize = 1_000;

    /// The estimate published for a job of `scope` whose rollouts from `now_ms` gave `samples`.
    pub fn estimate(
        &self,
        scope: Scope<'_>,
        now_ms: i64,
        samples: &Samples,
        horizon_ms: i64,
    ) -> Estimate {
        let raw_ms = [samples.quantile(0.5), samples.quantile(0.9)];
        let raw_wait = raw_ms.map(|at| at.map(|at| wait_s(at, now_ms)));
        let group = groups(scope, raw_wait[0]).into_iter().find_map(|g| {
            self.groups
                .get(&g)
                .filter(|g| g.outcomes[1] >= Self::MIN_OUTCOMES)
        });
        let theta = group.map_or([0.0, 0.0], |g| g.theta);
        let shadow_wait = samples.shadow_ms.map(|at| wait_s(at, now_ms));
        let shadow_theta = group.map_or(0.0, |g| g.shadow_theta);
        // See the module's docs for which forecaster's p90 an estimate publishes.
        let p90_from = if scope.instances > 1 || scope.first {
            let corrected = [(raw_wait[1], theta[1]), (shadow_wait, shadow_theta)]
                .map(|(wait, theta)| wait.map(|w| adjust(w, theta)));
            match corrected {
                [Some(rollouts), Some(shadow)] if shadow <= rollouts => P90From::Rollouts,
                [Some(_), _] => P90From::Shadow,
                [None, _] => P90From::Rollouts,
            }
        } else {
            P90From::Rollouts
        };
        let (p90_wait, p90_theta) = match p90_from {
            P90From::Shadow => (shadow_wait, shadow_theta),
            P90From::Rollouts => (raw_wait[1], theta[1]),
        };
        let publish = |wait: Option<f64>, theta: f64| {
            wait.map(|w| adjust(w, theta))
                .filter(|w| *w <= horizon_ms)
                .map(|w| now_ms + w)
        };
        let within = WITHIN_S.map(|h| {
            let started = samples
                .starts_ms
                .iter()
                .filter(|at| adjust(wait_s(**at, now_ms), theta[0]) <= h * 1_000)
                .count();
            started as f64 / f64::from(samples.rollouts.max(1))
        });
        // The two corrections are learnt apart: the p90 never goes before the p50.
        let p50_ms = publish(raw_wait[0], theta[0]);
        let p90_ms = publish(p90_wait, p90_theta).map(|p90| p50_ms.map_or(p90, |p50| p90.max(p50)));
        Estimate {
            at_ms: now_ms,
            p50_ms,
            p90_ms: if p50_ms.is_some() { p90_ms } else { None },
            within,
            raw_ms,
            coverage: group.map(Group::coverage),
            p90_from,
            shadow_ms: samples.shadow_ms,
        }
    }

    /// Learns the outcomes of `estimate`, made for a job of `scope` that started at `started_ms`:
    /// whether it started by each published quantile (see [`Self::outcomes`]; a quantile beyond
    /// the horizon teaches nothing), weighed by how stale they are (see the module's docs).
    pub fn observe(&mut self, scope: Scope<'_>, estimate: &Estimate, started_ms: i64) {
        let weight = if scope.instances > 1 {
            1.0
        } else {
            (-wait_s(started_ms, estimate.at_ms) / STALE_S).exp()
        };
        let mut outcomes = Self::outcomes(estimate, started_ms);
        outcomes.retain(|(i, _)| estimate.raw_ms[*i].is_some());
        if outcomes.is_empty() {
            return;
        }
        for name in groups(scope, estimate.raw_p50_wait_s()) {
            let group = self.groups.entry(name).or_default();
            for &(i, covered) in &outcomes {
                let excess = weight * (if covered { 0.0 } else { 1.0 } - ALPHA[i]);
                if i == 1 && estimate.p90_from == P90From::Shadow {
                    group.shadow_round += excess;
                } else {
                    group.round[i] += excess;
                }
                group.outcomes[i] += 1;
                let window = &mut group.covered[i];
                if window.len() == Self::WINDOW {
                    window.pop_front();
                }
                window.push_back(covered);
            }
        }
    }

    /// Ends a round: each group's corrections take one step towards the outcomes learnt since
    /// the last round.
    pub fn settle(&mut self) {
        for group in self.groups.values_mut() {
            for (i, gamma) in GAMMA.iter().enumerate() {
                step(
                    &mut group.theta[i],
                    *gamma,
                    std::mem::take(&mut group.round[i]),
                );
            }
            let excess = std::mem::take(&mut group.shadow_round);
            step(&mut group.shadow_theta, GAMMA[1], excess);
        }
    }

    /// The coverage measured over all of `queue`'s recent outcomes, `None` before any.
    pub fn queue_coverage(&self, queue: &str) -> Option<Coverage> {
        let group = self.groups.get(&format!("{queue}|*|*"))?;
        Some(group.coverage()).filter(|c| c.outcomes > 0)
    }

    /// The outcomes of `estimate` for a job that started at `started_ms`: `(quantile, covered)`
    /// for each quantile it published (see the module's docs for why they are learnt only then).
    pub fn outcomes(estimate: &Estimate, started_ms: i64) -> Vec<(usize, bool)> {
        [estimate.p50_ms, estimate.p90_ms]
            .into_iter()
            .enumerate()
            .filter_map(|(i, q)| Some((i, started_ms <= q?)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trainyard_domain::random::SplitMix64;

    /// A one-instance job already estimated once in its wait.
    const SCOPE: Scope<'static> = Scope {
        queue: "q",
        instances: 1,
        first: false,
    };

    fn samples(waits_s: &[i64], rollouts: u32) -> Samples {
        let mut starts_ms: Vec<i64> = waits_s.iter().map(|w| w * 1_000).collect();
        starts_ms.sort_unstable();
        Samples {
            starts_ms,
            rollouts,
            shadow_ms: None,
        }
    }

    #[test]
    fn quantiles_count_rollouts_beyond_the_horizon() {
        let s = samples(&[10, 20, 30, 40], 10);
        assert_eq!(s.quantile(0.1), Some(10_000));
        assert_eq!(s.quantile(0.4), Some(40_000));
        assert_eq!(s.quantile(0.5), None, "6 of 10 rollouts never started it");
        let uncal = Calibration::default().estimate(SCOPE, 0, &s, i64::MAX);
        assert_eq!(uncal.within, [0.4, 0.4, 0.4]);
        assert!(uncal.coverage.is_none(), "no history: uncalibrated");
    }

    /// The rollouts here are twice too optimistic (every job really waits twice its sampled
    /// wait, spread 1-3x); calibration must bring the p90's coverage to its target.
    #[test]
    fn calibration_corrects_biased_rollouts_to_the_target_coverage() {
        let mut calibration = Calibration::default();
        let mut rng = SplitMix64::new(42);
        let mut hits = (0, 0);
        let n = 40_000;
        for i in 0..n {
            let base = 600 + rng.below(7_200) as i64;
            let waits: Vec<i64> = (0..32).map(|_| base + rng.below(600) as i64).collect();
            let estimate = calibration.estimate(SCOPE, 0, &samples(&waits, 32), i64::MAX);
            let actual_ms = (base as f64 * (1.0 + 2.0 * rng.unit()) * 1_000.0) as i64;
            if i >= n / 2 {
                hits.0 += usize::from(estimate.p50_ms.is_some_and(|p| actual_ms <= p));
                hits.1 += usize::from(estimate.p90_ms.is_some_and(|p| actual_ms <= p));
            }
            calibration.observe(SCOPE, &estimate, actual_ms);
            if i % 20 == 19 {
                calibration.settle();
            }
        }
        let (p50, p90) = (
            hits.0 as f64 / (n / 2) as f64,
            hits.1 as f64 / (n / 2) as f64,
        );
        assert!(
            p50 < 0.2,
            "the p50 is the rollouts' own, twice too optimistic: {p50}"
        );
        assert!((0.87..=0.93).contains(&p90), "p90 coverage {p90}");
        let last = calibration.estimate(SCOPE, 0, &samples(&[3_600; 32], 32), i64::MAX);
        let published = last.coverage.expect("calibrated");
        assert_eq!(published.outcomes, Calibration::WINDOW);
        assert!((0.85..=0.95).contains(&published.p90), "{published:?}");
        let other = Scope {
            queue: "other",
            ..SCOPE
        };
        assert!(
            calibration
                .estimate(other, 0, &samples(&[60], 1), i64::MAX)
                .coverage
                .is_none()
        );
    }

    /// A miss learnt three days after its estimate moves a one-instance correction by e^-3 of
    /// a fresh one's step; a job of several instances learns it in full.
    #[test]
    fn a_stale_outcome_of_a_one_instance_estimate_teaches_little() {
        let several = Scope {
            instances: 2,
            ..SCOPE
        };
        // The p90's correction after 200 misses learnt `wait_s` after their estimates.
        let widened = |scope: Scope<'_>, wait_s: i64| {
            let mut calibration = Calibration::default();
            // A shadow start before the rollouts': a large job publishes the rollouts' p90 too.
            let rollouts = Samples {
                shadow_ms: Some(0),
                ..samples(&[60; 16], 16)
            };
            for _ in 0..200 {
                let estimate = calibration.estimate(scope, 0, &rollouts, i64::MAX);
                calibration.observe(scope, &estimate, wait_s * 1_000);
            }
            calibration.settle();
            let after = calibration.estimate(scope, 0, &rollouts, i64::MAX);
            assert!(after.coverage.is_some(), "calibrated");
            ((after.p90_ms.unwrap() as f64 / 1_000.0 + OFFSET_S) / (60.0 + OFFSET_S)).ln()
        };
        let (fresh, stale) = (widened(SCOPE, 600), widened(SCOPE, 3 * 86_400));
        assert!(fresh > 0.3, "fresh misses widen: {fresh}");
        let expected = fresh * (-3.0_f64).exp();
        assert!(
            (stale - expected).abs() < 0.01,
            "stale misses widen by e^-3 as much: {stale} vs {expected}"
        );
        let (fresh, stale) = (widened(several, 600), widened(several, 3 * 86_400));
        assert!(
            fresh > 0.3 && (stale - fresh).abs() < 0.01,
            "several instances: {fresh} vs {stale}"
        );
    }

    /// A job of several instances, and a job at its first estimate, publish the later of the two
    /// forecasters' p90, calibrated or not; a later estimate of a one-instance job publishes the
    /// rollouts'. A shadow start beyond the horizon makes the p90 "later".
    #[test]
    fn a_large_job_and_a_first_estimate_publish_the_later_p90() {
        let fresh = Calibration::default();
        let several = Scope {
            instances: 2,
            ..SCOPE
        };
        let first = Scope {
            first: true,
            ..SCOPE
        };
        let with_shadow = |rollout_s: i64, shadow_s: Option<i64>| {
            let mut s = samples(&[rollout_s; 16], 16);
            s.shadow_ms = shadow_s.map(|at| at * 1_000);
            s
        };
        let late_shadow = with_shadow(600, Some(20_000));
        for scope in [several, first] {
            let e = fresh.estimate(scope, 0, &late_shadow, i64::MAX);
            assert_eq!((e.p90_from, e.p90_ms), (P90From::Shadow, Some(20_000_000)));
            assert!(e.coverage.is_none(), "uncalibrated");
            let early_shadow = fresh.estimate(scope, 0, &with_shadow(600, Some(300)), i64::MAX);
            assert_eq!(early_shadow.p90_from, P90From::Rollouts);
            assert_eq!(early_shadow.p90_ms, Some(600_000));
            let beyond = fresh.estimate(scope, 0, &with_shadow(600, None), i64::MAX);
            assert_eq!(
                beyond.p90_ms, None,
                "the shadow schedule says beyond the horizon"
            );
        }
        let later = fresh.estimate(SCOPE, 0, &late_shadow, i64::MAX);
        assert_eq!(
            (later.p90_from, later.p90_ms),
            (P90From::Rollouts, Some(600_000))
        );
    }

    #[test]
    fn outcomes_are_the_quantiles_published_against_the_start() {
        let estimate = Calibration::default().estimate(SCOPE, 0, &samples(&[60, 120], 2), i64::MAX);
        let (p50, p90) = (estimate.p50_ms.unwrap(), estimate.p90_ms.unwrap());
        assert_eq!(
            Calibration::outcomes(&estimate, p90),
            [(0, false), (1, true)]
        );
        assert_eq!(
            Calibration::outcomes(&estimate, p50),
            [(0, true), (1, true)]
        );
        let beyond = Calibration::default().estimate(SCOPE, 0, &samples(&[60], 2), i64::MAX);
        assert_eq!(
            Calibration::outcomes(&beyond, 30_000),
            [(0, true)],
            "a p90 beyond the horizon has no outcome"
        );
    }
}
