//! Start-time estimates, measured: while a run replays, [`Tracker`] makes an estimate for every
//! waiting job at its submission and every `every_s` of virtual time while it waits, from only
//! what is known at that time (the store's snapshot, the runtimes of attempts that have ended,
//! the submissions so far), and scores each against the start that followed.
//!
//! Four estimators are scored on the same prediction points (the baselines of
//! `docs/benchmarks.md#start-time-estimates`):
//!
//! - `position`: jobs ahead in its environment ÷ the environment's starts over the last hour
//!   (Kueue's idea of an estimate); a point, used as every quantile.
//! - `shadow`: Slurm's shadow schedule, the planner run forward with every attempt running to its
//!   `MaxRuntimeInSeconds` and nothing arriving; a point.
//! - `rollouts`: the raw quantiles of `trainyard_forecast::forecast`.
//! - `trainyard`: what Trainyard publishes: the raw p50 and the p90 calibrated online.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use trainyard_domain::job::ServiceJob;
use trainyard_domain::random::SplitMix64;
use trainyard_forecast::estimate::pinball;
use trainyard_forecast::{Arrival, Forecaster, Line, Options, Resolved};
use trainyard_scheduler::{Config, SharedStr, Snapshot};

/// How estimates are made and measured in a run.
#[derive(Debug, Clone, PartialEq)]
pub struct EtaSettings {
    /// Rollouts, horizon and steps of each forecast; the seed is mixed with the time.
    pub options: Options,
    /// How often a waiting job gets a new estimate (virtual seconds).
    pub every_s: u64,
    /// Waiting jobs read per line for a forecast (the first ones in line order).
    pub per_line: usize,
    /// A job submitted since the last forecast gets its estimate at the first pass at least
    /// this long after the last forecast (virtual seconds).
    pub min_gap_s: u64,
}

impl Default for EtaSettings {
    fn default() -> Self {
        Self {
            options: Options::default(),
            every_s: 900,
            per_line: 1_000,
            min_gap_s: 60,
        }
    }
}

/// One estimate, scored. Waits are seconds from when the estimate was made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    /// The job (its id in the run's store).
    pub job_id: String,
    /// When it was made (virtual seconds from the trace's start).
    pub made_s: f64,
    /// Whether it was the job's first (made at its submission).
    pub at_submission: bool,
    /// Its queue (the calibration scope).
    pub queue: String,
    /// Instances the job takes.
    pub instances: u64,
    /// The wait that followed.
    pub actual_s: f64,
    /// `position`'s estimate.
    pub position_s: Option<f64>,
    /// `shadow`'s estimate (`None`: beyond the horizon).
    pub shadow_s: Option<f64>,
    /// Raw p50 and p90 of the rollouts.
    pub raw_s: [Option<f64>; 2],
    /// Published (calibrated) p50 and p90.
    pub published_s: [Option<f64>; 2],
    /// Whether its scope was calibrated when it was made.
    pub calibrated: bool,
}

/// What a run's estimates came to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EtaRun {
    /// Every prediction whose job started before the run ended.
    pub predictions: Vec<Prediction>,
    /// Predictions with no start to score against: no attempt of the job started at or after
    /// them, though it left the line (ended or cancelled), or it still waited when the run ended.
    pub unresolved: usize,
    /// Forecasts made.
    pub forecasts: usize,
    /// Rollouts per forecast.
    pub rollouts: u32,
    /// The horizon, in seconds (estimates beyond it count as the horizon in losses).
    pub horizon_s: u64,
}

/// What the baselines said when an estimate was made.
#[derive(Debug, Clone, Copy)]
struct Baselines {
    made_ms: i64,
    position_ms: Option<i64>,
}

/// Makes and scores estimates over one run.
pub struct Tracker {
    settings: EtaSettings,
    forecaster: Forecaster<Baselines>,
    next_tick_ms: i64,
    last_ms: i64,
    submitted_since: bool,
    starts: VecDeque<(i64, String)>,
    run: EtaRun,
    t0_ms: i64,
}

impl Tracker {
    /// A tracker for a run whose virtual time starts at `t0_ms`.
    pub fn new(settings: EtaSettings, t0_ms: i64) -> Self {
        let run = EtaRun {
            rollouts: settings.options.rollouts,
            horizon_s: settings.options.horizon_s,
            ..EtaRun::default()
        };
        Self {
            next_tick_ms: t0_ms,
            last_ms: i64::MIN / 2,
            forecaster: Forecaster::new(settings.options.clone()),
            settings,
            submitted_since: false,
            starts: VecDeque::new(),
            run,
            t0_ms,
        }
    }

    /// Job `job_id` was submitted to `line`.
    pub fn submitted(&mut self, job_id: SharedStr, line: Line, arrival: Arrival) {
        self.forecaster.submitted(job_id, line, arrival);
        self.submitted_since = true;
    }

    /// Whether a forecast is due at `now_ms`: the periodic one, or a job submitted since the
    /// last forecast (at most one per `min_gap_s`).
    pub fn due(&self, now_ms: i64) -> bool {
        now_ms >= self.next_tick_ms
            || (self.submitted_since && now_ms - self.last_ms >= secs_ms(self.settings.min_gap_s))
    }

    /// Waiting jobs read per line for a forecast.
    pub fn per_line(&self) -> usize {
        self.settings.per_line
    }

    /// Scores what started since the last forecast, learns from what ended, and makes the
    /// estimates due at `now_ms` from `snapshot` (read with [`Self::per_line`] jobs a line).
    /// `job` reads a job from the store.
    pub fn forecast(
        &mut self,
        now_ms: i64,
        snapshot: &Snapshot,
        planner: &Config,
        job: &mut dyn FnMut(&str) -> Option<ServiceJob>,
    ) {
        let periodic = now_ms >= self.next_tick_ms;
        let learnt = self.forecaster.learn(snapshot, job);
        self.run.unresolved += learnt.dropped;
        for resolved in learnt.resolved {
            self.score(resolved);
        }
        if !self.forecaster.wants(snapshot, periodic) {
            self.last_ms = now_ms;
            self.submitted_since = false;
            return;
        }
        let positions = self.positions(now_ms, snapshot);
        let made = self
            .forecaster
            .estimate(now_ms, snapshot, planner, periodic, |p| Baselines {
                made_ms: now_ms,
                position_ms: positions.get(&p.job_id).copied(),
            });
        self.run.forecasts += usize::from(!made.is_empty());
        self.last_ms = now_ms;
        self.submitted_since = false;
        if periodic {
            self.next_tick_ms = now_ms + secs_ms(self.settings.every_s);
        }
    }

    /// The run's scored estimates; estimates still open count as unresolved.
    pub fn finish(mut self) -> EtaRun {
        self.run.unresolved += self.forecaster.open();
        self.run
    }

    fn score(&mut self, resolved: Resolved<Baselines>) {
        let Resolved { open, started_ms } = resolved;
        let made_ms = open.extra.made_ms;
        self.starts.push_back((started_ms, open.queue.to_string()));
        let wait = |at: Option<i64>| at.map(|at| (at - made_ms) as f64 / 1_000.0);
        self.run.predictions.push(Prediction {
            job_id: open.job_id.to_string(),
            made_s: (made_ms - self.t0_ms) as f64 / 1_000.0,
            at_submission: open.first,
            queue: open.queue.to_string(),
            instances: open.instances,
            actual_s: (started_ms - made_ms) as f64 / 1_000.0,
            position_s: wait(open.extra.position_ms),
            shadow_s: wait(open.estimate.shadow_ms),
            raw_s: open.estimate.raw_ms.map(wait),
            published_s: [open.estimate.p50_ms, open.estimate.p90_ms].map(wait),
            calibrated: open.estimate.coverage.is_some(),
        });
    }

    /// `position`: the jobs ahead of each waiting job in its environment (every job of a
    /// higher-priority queue, and those of its own queue that became RUNNABLE before it) over
    /// the starts of the last hour in the environment's queues.
    fn positions(&mut self, now_ms: i64, snapshot: &Snapshot) -> BTreeMap<SharedStr, i64> {
        while self
            .starts
            .front()
            .is_some_and(|(at, _)| *at < now_ms - 3_600_000)
        {
            self.starts.pop_front();
        }
        let env_of: BTreeMap<&str, (&str, u32)> = snapshot
            .queues
            .iter()
            .filter_map(|q| Some((q.name.as_str(), (q.environment.as_deref()?, q.priority))))
            .collect();
        let mut per_env_starts: BTreeMap<&str, usize> = BTreeMap::new();
        for (_, queue) in &self.starts {
            if let Some((env, _)) = env_of.get(queue.as_str()) {
                *per_env_starts.entry(env).or_default() += 1;
            }
        }
        // Jobs per queue in the order they became RUNNABLE, and per environment and priority.
        let mut in_queue: BTreeMap<&str, Vec<(i64, &str)>> = BTreeMap::new();
        let mut by_priority: BTreeMap<&str, BTreeMap<u32, usize>> = BTreeMap::new();
        for p in &snapshot.pending {
            in_queue
                .entry(p.queue.as_str())
                .or_default()
                .push((p.runnable_at_ms, p.job_id.as_str()));
            if let Some((env, priority)) = env_of.get(p.queue.as_str()) {
                *by_priority
                    .entry(env)
                    .or_default()
                    .entry(*priority)
                    .or_default() += 1;
            }
        }
        for jobs in in_queue.values_mut() {
            jobs.sort_unstable();
        }
        let mut positions = BTreeMap::new();
        for p in &snapshot.pending {
            let Some((env, priority)) = env_of.get(p.queue.as_str()) else {
                continue;
            };
            let Some(rate) = per_env_starts.get(env).copied().filter(|n| *n > 0) else {
                continue;
            };
            let higher: usize = by_priority.get(env).map_or(0, |counts| {
                counts.range(priority + 1..).map(|(_, n)| n).sum()
            });
            let own = in_queue.get(p.queue.as_str()).map_or(0, |jobs| {
                jobs.partition_point(|j| *j < (p.runnable_at_ms, p.job_id.as_str()))
            });
            let ahead = (higher + own) as i64;
            positions.insert(
                p.job_id.clone(),
                now_ms + (ahead + 1) * 3_600_000 / rate as i64,
            );
        }
        positions
    }
}

/// Whole seconds as milliseconds.
pub(crate) fn secs_ms(s: u64) -> i64 {
    i64::try_from(s).unwrap_or(i64::MAX / 4_000) * 1_000
}

/// How one estimator did on one group of predictions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Score {
    /// The group (`all`, `at submission`, a wait bucket, a size bucket).
    pub stratum: String,
    /// `position`, `shadow`, `rollouts` or `trainyard`.
    pub method: String,
    /// Predictions in the group.
    pub n: usize,
    /// Share of starts at or before the p50.
    pub p50_coverage: f64,
    /// Share of starts at or before the p90.
    pub p90_coverage: f64,
    /// Mean pinball loss of the p50 at τ = 0.5, hours.
    pub pinball_p50_h: f64,
    /// Mean pinball loss of the p90 at τ = 0.9, hours.
    pub pinball_p90_h: f64,
    /// Share of p50s within max(10 min, 20%) of the wait that followed.
    pub hit_rate: f64,
}

/// The estimators scored, in report order.
pub const METHODS: [&str; 4] = ["position", "shadow", "rollouts", "trainyard"];

/// A prediction's p50 and p90 wait under `method` (a point estimator gives the same for both);
/// beyond the horizon counts as the horizon.
fn quantiles(p: &Prediction, method: &str, horizon_s: f64) -> [f64; 2] {
    let or_horizon = |w: Option<f64>| w.unwrap_or(horizon_s);
    match method {
        "position" => [or_horizon(p.position_s); 2],
        "shadow" => [or_horizon(p.shadow_s); 2],
        "rollouts" => p.raw_s.map(or_horizon),
        _ => p.published_s.map(or_horizon),
    }
}

/// The groups predictions are scored in: every prediction, those made at submission, by the
/// wait that followed, and by the job's size.
fn strata(p: &Prediction) -> Vec<String> {
    let wait = match p.actual_s {
        w if w < 600.0 => "wait < 10 min",
        w if w < 3_600.0 => "wait 10 min-1 h",
        w if w < 6.0 * 3_600.0 => "wait 1-6 h",
        _ => "wait > 6 h",
    };
    let size = match p.instances {
        0 | 1 => "1 instance",
        2..=8 => "2-8 instances",
        _ => "9+ instances",
    };
    let mut strata = vec!["all".to_owned()];
    if p.at_submission {
        strata.push("at submission".to_owned());
    }
    strata.extend([wait.to_owned(), size.to_owned()]);
    strata
}

/// Every estimator's score, overall and per stratum (strata in first-seen order of a fixed list).
pub fn scores(run: &EtaRun) -> Vec<Score> {
    let horizon_s = run.horizon_s as f64;
    let mut groups: BTreeMap<String, Vec<&Prediction>> = BTreeMap::new();
    for p in &run.predictions {
        for s in strata(p) {
            groups.entry(s).or_default().push(p);
        }
    }
    let order = [
        "all",
        "at submission",
        "wait < 10 min",
        "wait 10 min-1 h",
        "wait 1-6 h",
        "wait > 6 h",
        "1 instance",
        "2-8 instances",
        "9+ instances",
    ];
    let mut out = Vec::new();
    for stratum in order {
        let Some(group) = groups.get(stratum) else {
            continue;
        };
        let n = group.len();
        for method in METHODS {
            let (mut c50, mut c90, mut l50, mut l90, mut hits) = (0usize, 0usize, 0.0, 0.0, 0usize);
            for p in group {
                let [q50, q90] = quantiles(p, method, horizon_s);
                let y = p.actual_s;
                c50 += usize::from(y <= q50);
                c90 += usize::from(y <= q90);
                l50 += pinball(0.5, y, q50);
                l90 += pinball(0.9, y, q90);
                hits += usize::from((q50 - y).abs() <= (0.2 * y).max(600.0));
            }
            let share = |k: usize| k as f64 / n as f64;
            out.push(Score {
                stratum: stratum.to_owned(),
                method: method.to_owned(),
                n,
                p50_coverage: share(c50),
                p90_coverage: share(c90),
                pinball_p50_h: l50 / n as f64 / 3_600.0,
                pinball_p90_h: l90 / n as f64 / 3_600.0,
                hit_rate: share(hits),
            });
        }
    }
    out
}

/// How far a run's overall p90 coverage (of what Trainyard publishes) could have fallen from
/// another stretch of the same workload: a 90% interval from a bootstrap over whole days.
///
/// A job that waits a day gets about a hundred estimates, and the jobs waiting at one moment wait
/// for the same capacity, so estimates miss or cover together; counted one by one they look far
/// more certain than they are. The days in which estimates were made are the units here: 2,000
/// resamples of as many days as the run has, drawn with replacement from its days (seeded, so the
/// interval is a function of the run), the 5th and 95th percentiles of their coverage.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CoverageSpread {
    /// Days (of virtual time) in which estimates were made.
    pub days: usize,
    /// 5th percentile of the resampled coverage.
    pub low: f64,
    /// 95th percentile of the resampled coverage.
    pub high: f64,
}

/// The overall p90 coverage's [`CoverageSpread`]; `None` without predictions.
pub fn coverage_spread(run: &EtaRun) -> Option<CoverageSpread> {
    const DAY_S: f64 = 86_400.0;
    const RESAMPLES: usize = 2_000;
    let horizon_s = run.horizon_s as f64;
    // Per day: (estimates, covered).
    let mut per_day: BTreeMap<i64, (usize, usize)> = BTreeMap::new();
    for p in &run.predictions {
        let [_, q90] = quantiles(p, "trainyard", horizon_s);
        let day = per_day
            .entry((p.made_s / DAY_S).floor() as i64)
            .or_default();
        day.0 += 1;
        day.1 += usize::from(p.actual_s <= q90);
    }
    let days: Vec<(usize, usize)> = per_day.into_values().collect();
    if days.is_empty() {
        return None;
    }
    let mut rng = SplitMix64::new(0x5EED_C0DE_u64);
    let mut resampled: Vec<f64> = (0..RESAMPLES)
        .map(|_| {
            let (n, covered) = (0..days.len()).fold((0, 0), |(n, c), _| {
                let (dn, dc) = days[rng.below(days.len() as u64) as usize];
                (n + dn, c + dc)
            });
            covered as f64 / n as f64
        })
        .collect();
    resampled.sort_unstable_by(f64::total_cmp);
    Some(CoverageSpread {
        days: days.len(),
        low: resampled[RESAMPLES / 20],
        high: resampled[RESAMPLES - 1 - RESAMPLES / 20],
    })
}

/// Published p90s that said "beyond the horizon", and how many of their jobs did start beyond
/// it. Losses and coverage count such a p90 as the horizon, so each of the latter is a miss
/// there, though "later than the horizon" was true: on a trace whose waits run past the horizon
/// (OpenB at 7 days), they are most of the misses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BeyondHorizon {
    /// Predictions whose published p90 was beyond the horizon.
    pub published: usize,
    /// Of those, predictions whose job started beyond the horizon.
    pub started_beyond: usize,
}

/// The run's [`BeyondHorizon`].
pub fn beyond_horizon(run: &EtaRun) -> BeyondHorizon {
    let horizon_s = run.horizon_s as f64;
    run.predictions
        .iter()
        .filter(|p| p.published_s[1].is_none())
        .fold(BeyondHorizon::default(), |acc, p| BeyondHorizon {
            published: acc.published + 1,
            started_beyond: acc.started_beyond + usize::from(p.actual_s > horizon_s),
        })
}

/// The report of a run's estimates, as markdown: the scores and whether the targets of
/// `docs/benchmarks.md#start-time-estimates` were met.
pub fn markdown(policy: &str, run: &EtaRun) -> String {
    let scores = scores(run);
    let mut out = format!(
        "# Start-time estimates under `{policy}`\n\n{} predictions scored ({} of them at \
         submission), {} unresolved (no start followed them); {} forecasts of {} rollouts each, horizon \
         {} h. Losses in hours; beyond the horizon counts as the horizon.\n\n",
        run.predictions.len(),
        run.predictions.iter().filter(|p| p.at_submission).count(),
        run.unresolved,
        run.forecasts,
        run.rollouts,
        run.horizon_s / 3_600
    );
    out.push_str(
        "| stratum | n | method | p50 coverage | p90 coverage | pinball 0.5 | pinball 0.9 | hit rate |\n\
         |---|---:|---|---:|---:|---:|---:|---:|\n",
    );
    for s in &scores {
        out.push_str(&format!(
            "| {} | {} | {} | {:.3} | {:.3} | {:.2} | {:.2} | {:.3} |\n",
            s.stratum,
            s.n,
            s.method,
            s.p50_coverage,
            s.p90_coverage,
            s.pinball_p50_h,
            s.pinball_p90_h,
            s.hit_rate
        ));
    }
    out.push('\n');
    for verdict in verdicts(&scores) {
        out.push_str(&format!("- {verdict}\n"));
    }
    let beyond = beyond_horizon(run);
    if beyond.published > 0 {
        out.push_str(&format!(
            "- published p90 beyond the {} h horizon: {} estimates, of which {} ({:.1}% of all \
             estimates) started beyond it too: counted as misses above, though \"later\" held\n",
            run.horizon_s / 3_600,
            beyond.published,
            beyond.started_beyond,
            100.0 * beyond.started_beyond as f64 / run.predictions.len().max(1) as f64
        ));
    }
    if let Some(spread) = coverage_spread(run) {
        out.push_str(&format!(
            "- p90 coverage's spread over the {} days estimates were made in: {:.3}-{:.3} (90% \
             of resamples of whole days); the estimates of one day miss or cover together, so a \
             replay of a few days measures coverage only this closely\n",
            spread.days, spread.low, spread.high
        ));
    }
    out
}

/// The targets, each with its measured figure and whether it was met.
pub fn verdicts(scores: &[Score]) -> Vec<String> {
    let get = |stratum: &str, method: &str| {
        scores
            .iter()
            .find(|s| s.stratum == stratum && s.method == method)
    };
    let mark = |ok: bool| if ok { "met" } else { "NOT met" };
    let mut out = Vec::new();
    if let Some(all) = get("all", "trainyard") {
        let ok = (0.87..=0.93).contains(&all.p90_coverage);
        out.push(format!(
            "p90 coverage overall {:.3} (target 0.87-0.93): {}",
            all.p90_coverage,
            mark(ok)
        ));
        if let Some(shadow) = get("all", "shadow") {
            let ratio = all.pinball_p90_h / shadow.pinball_p90_h.max(f64::MIN_POSITIVE);
            out.push(format!(
                "pinball 0.9 {:.2} h vs shadow schedule {:.2} h, ratio {ratio:.2} (target <= 0.7): {}",
                all.pinball_p90_h,
                shadow.pinball_p90_h,
                mark(ratio <= 0.7)
            ));
            out.push(format!(
                "hit rate {:.3} vs shadow schedule {:.3}",
                all.hit_rate, shadow.hit_rate
            ));
        }
    }
    let low: Vec<String> = scores
        .iter()
        .filter(|s| s.method == "trainyard" && s.n >= 200 && s.p90_coverage < 0.85)
        .map(|s| format!("{} {:.3}", s.stratum, s.p90_coverage))
        .collect();
    out.push(if low.is_empty() {
        "p90 coverage >= 0.85 in every stratum of 200 or more: met".to_owned()
    } else {
        format!(
            "p90 coverage >= 0.85 in every stratum of 200 or more: NOT met ({})",
            low.join(", ")
        )
    });
    out
}
