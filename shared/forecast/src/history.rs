//! What the past says about the future: how long attempts of each job family ran, and how often
//! each line received new jobs. A host feeds it what it observes (an attempt that ended, a job
//! submitted) and a rollout samples from it. Everything is bounded: the newest
//! [`History::RUNTIMES_KEPT`] runtimes per family and [`History::ARRIVALS_KEPT`] arrivals per line.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use trainyard_domain::random::SplitMix64;
use trainyard_scheduler::SharedStr;
use trainyard_scheduler::snapshot::SharedInstances;
use trainyard_scheduler::snapshot::pairs;

/// Jobs whose attempts are expected to run alike: same queue, same share, same instances. The
/// queue and share stand in for "who submits it and what for"; the instance count for its size.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Family {
    /// Queue.
    pub queue: SharedStr,
    /// Fair-share identifier or quota share (`None` in a FIFO queue).
    pub share: Option<SharedStr>,
    /// Instances taken, all types together.
    pub instances: u64,
}

impl Family {
    /// The family of a job that takes `instances` (all types together) in `queue` and `share`.
    pub fn of(queue: &SharedStr, share: Option<&SharedStr>, instances: u64) -> Self {
        Self {
            queue: queue.clone(),
            share: share.cloned(),
            instances,
        }
    }
}

/// A line of jobs: a FIFO queue, or one share of a queue.
pub type Line = (SharedStr, Option<SharedStr>);

/// A job as submitted, enough to stand for a future arrival of the same line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Arrival {
    /// When it was submitted (epoch ms).
    pub at_ms: i64,
    /// `schedulingPriority`.
    pub priority: u32,
    /// Instances it needs.
    pub instances: SharedInstances,
    /// `MaxRuntimeInSeconds`, if set.
    pub max_runtime_s: Option<u64>,
    /// How much later than its arrival it stood in line (`PendingJob::line_offset_ms`).
    pub line_offset_ms: i64,
}

/// An attempt that ran its course: how long, and the `MaxRuntimeInSeconds` its job asked for.
/// As JSON, the runtime alone when the job asked for none (as a history kept before the limit
/// was, which reads back as asking for none), otherwise `[runtime, limit]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "RanJson", into = "RanJson")]
struct Ran {
    runtime_s: u64,
    asked_s: Option<u64>,
}

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum RanJson {
    Runtime(u64),
    WithLimit(u64, u64),
}

impl From<RanJson> for Ran {
    fn from(json: RanJson) -> Self {
        match json {
            RanJson::Runtime(runtime_s) => Self {
                runtime_s,
                asked_s: None,
            },
            RanJson::WithLimit(runtime_s, asked_s) => Self {
                runtime_s,
                asked_s: Some(asked_s),
            },
        }
    }
}

impl From<Ran> for RanJson {
    fn from(ran: Ran) -> Self {
        match ran.asked_s {
            None => Self::Runtime(ran.runtime_s),
            Some(asked_s) => Self::WithLimit(ran.runtime_s, asked_s),
        }
    }
}

/// Runtimes per family and arrivals per line, newest kept. As JSON (to keep it across
/// restarts), maps are lists of pairs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct History {
    #[serde(with = "pairs")]
    runtimes: BTreeMap<Family, VecDeque<Ran>>,
    /// The same runtimes by queue and share, by queue, and all together: the wider groups a
    /// family borrows from (kept apart so that a draw never gathers them).
    #[serde(with = "pairs")]
    by_share: BTreeMap<Line, VecDeque<Ran>>,
    by_queue: BTreeMap<SharedStr, VecDeque<Ran>>,
    all: VecDeque<Ran>,
    #[serde(with = "pairs")]
    arrivals: BTreeMap<Line, VecDeque<Arrival>>,
}

/// Runtimes a group needs before it is drawn from.
const MIN_SAMPLE: usize = 8;
/// Runtimes longer than what an attempt has already run that a group needs before the
/// attempt's remaining runtime is drawn from it: with fewer, the group knows too little of the
/// tail the attempt is in, and a wider group is asked.
const MIN_LONGER: usize = 4;
/// Runtimes within this factor of each other make a regular family, whose running
/// attempts draw from them rather than by their age.
const TIGHT: u64 = 2;

/// Whether runtimes spread wider than [`TIGHT`] (not a regular family).
fn spreads_wide(runtimes: impl Iterator<Item = u64>) -> bool {
    let (shortest, longest) = runtimes.fold((u64::MAX, 0), |(lo, hi), r| (lo.min(r), hi.max(r)));
    longest > shortest.saturating_mul(TIGHT)
}

fn keep(ring: &mut VecDeque<Ran>, value: Ran, kept: usize) {
    if ring.len() == kept {
        ring.pop_front();
    }
    ring.push_back(value);
}

impl History {
    /// Runtimes kept per family: enough for a stable p90, few enough to follow a change.
    pub const RUNTIMES_KEPT: usize = 64;
    /// Runtimes kept per wider group (queue and share, queue), and 4 times this all together.
    pub const GROUP_RUNTIMES_KEPT: usize = 256;
    /// Arrivals kept per line, from which its rate and the shapes of future arrivals come.
    pub const ARRIVALS_KEPT: usize = 64;
    /// Arrivals older than this do not count towards a line's rate.
    pub const ARRIVAL_WINDOW_MS: i64 = 24 * 3_600_000;

    /// An attempt of `family` ran `runtime_s` (dispatch to end, so provisioning is included) and
    /// ended by itself (not preempted, which would cut it short); its job asked for `asked_s`
    /// (`MaxRuntimeInSeconds`, if set).
    pub fn observe_runtime(&mut self, family: Family, runtime_s: u64, asked_s: Option<u64>) {
        let ran = Ran { runtime_s, asked_s };
        let line = (family.queue.clone(), family.share.clone());
        keep(
            self.by_share.entry(line).or_default(),
            ran,
            Self::GROUP_RUNTIMES_KEPT,
        );
        keep(
            self.by_queue.entry(family.queue.clone()).or_default(),
            ran,
            Self::GROUP_RUNTIMES_KEPT,
        );
        keep(&mut self.all, ran, 4 * Self::GROUP_RUNTIMES_KEPT);
        keep(
            self.runtimes.entry(family).or_default(),
            ran,
            Self::RUNTIMES_KEPT,
        );
    }

    /// A job was submitted to `line`.
    pub fn observe_arrival(&mut self, line: Line, arrival: Arrival) {
        let kept = self.arrivals.entry(line).or_default();
        if kept.len() == Self::ARRIVALS_KEPT {
            kept.pop_front();
        }
        kept.push_back(arrival);
    }

    /// Runtimes kept, all families together.
    pub fn runtimes_observed(&self) -> usize {
        self.runtimes.values().map(VecDeque::len).sum()
    }

    /// A total runtime for an attempt of `family` that has run `elapsed_s` so far, never beyond
    /// `cap_s` (the `MaxRuntimeInSeconds` it runs under; `asked_s` is what its job asked for, if
    /// anything). The narrowest group (the family, its queue and share, its queue, everything)
    /// with 8 runtimes (`MIN_SAMPLE`) of which 4 (`MIN_LONGER`) are longer than `elapsed_s`
    /// answers; for an attempt not yet started, those of jobs that asked for the same limit go
    /// first, group by group, before any group's runtimes of all limits:
    ///
    /// - an attempt not yet started, or one whose group's runtimes all lie within a factor
    ///   of 2 (`TIGHT`) of each other (a regular family), draws from those longer runtimes (it is
    ///   known to outlast the others);
    /// - a running attempt of a group whose runtimes spread wider is drawn by its age, as
    ///   `elapsed_s / u` with `u` uniform in (0, 1]: even odds of ending before it has run as
    ///   long again, and a heavy tail. The group's runtimes are the newest attempts that
    ///   *ended*, which are the short ones first while long ones still run; an attempt's age is
    ///   the one measure of its own length free of that bias, and it is what held a busy pool
    ///   for hours on Philly (docs/benchmarks.md, start-time estimates).
    ///
    /// Why the limit first: the jobs still waiting are seldom like the runtimes that ended. A
    /// queue that puts shorter limits first (`trainyard:shorter-first-hours`) leaves the long
    /// jobs waiting, and a family's newest ended runtimes are its short ones while its long
    /// ones still run: on replayed Philly, the multi-instance sweeps waiting at one moment
    /// drew a median of 0.46 hours from their families and ran a median of 45
    /// (docs/benchmarks.md, start-time estimates).
    ///
    /// An attempt that has outlived what every group knows is assumed half-way through; without
    /// any history, it runs to its cap, as Slurm assumes.
    pub fn sample_runtime(
        &self,
        family: &Family,
        elapsed_s: u64,
        cap_s: u64,
        asked_s: Option<u64>,
        rng: &mut SplitMix64,
    ) -> u64 {
        let line = (family.queue.clone(), family.share.clone());
        let groups = [
            self.runtimes.get(family),
            self.by_share.get(&line),
            self.by_queue.get(&family.queue),
            Some(&self.all),
        ];
        let same_limit = |ran: &Ran| ran.asked_s == asked_s;
        let any_limit = |_: &Ran| true;
        let passes: &[&dyn Fn(&Ran) -> bool] = if elapsed_s == 0 {
            &[&same_limit, &any_limit]
        } else {
            &[&any_limit]
        };
        let mut known = false;
        for alike in passes {
            for ring in groups.into_iter().flatten() {
                let runtimes = || ring.iter().filter(|r| alike(r)).map(|r| r.runtime_s);
                let (alike_n, longer) = runtimes().fold((0, 0), |(n, longer), r| {
                    (n + 1, longer + usize::from(r > elapsed_s))
                });
                if alike_n < MIN_SAMPLE {
                    continue;
                }
                known = true;
                if longer >= MIN_LONGER {
                    if elapsed_s > 0 && spreads_wide(runtimes()) {
                        let by_age = elapsed_s as f64 / (1.0 - rng.unit());
                        return (by_age.min(cap_s as f64) as u64).max(elapsed_s);
                    }
                    let pick = rng.below(longer as u64) as usize;
                    let total = runtimes()
                        .filter(|r| *r > elapsed_s)
                        .nth(pick)
                        .unwrap_or(elapsed_s);
                    return total.min(cap_s).max(elapsed_s);
                }
            }
        }
        if !known {
            return cap_s.max(elapsed_s);
        }
        elapsed_s
            .saturating_mul(2)
            .max(elapsed_s + 60)
            .min(cap_s)
            .max(elapsed_s)
    }

    /// Each line's arrival rate (per ms) as of `now_ms`, over the arrivals of the last
    /// [`Self::ARRIVAL_WINDOW_MS`] (over the time since the first one kept when that is shorter,
    /// at least an hour), with the arrivals future ones are drawn like.
    pub fn arrival_rates(&self, now_ms: i64) -> Vec<(Line, f64, Vec<Arrival>)> {
        self.arrivals
            .iter()
            .filter_map(|(line, kept)| {
                let recent: Vec<Arrival> = kept
                    .iter()
                    .filter(|a| a.at_ms > now_ms - Self::ARRIVAL_WINDOW_MS && a.at_ms <= now_ms)
                    .cloned()
                    .collect();
                let first = recent.first()?.at_ms;
                let span_ms = if kept.len() == Self::ARRIVALS_KEPT {
                    now_ms - first
                } else {
                    Self::ARRIVAL_WINDOW_MS.min(now_ms - first)
                }
                .max(3_600_000);
                Some((line.clone(), recent.len() as f64 / span_ms as f64, recent))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn family(queue: &str, instances: u32) -> Family {
        Family::of(&queue.into(), Some(&"team".into()), u64::from(instances))
    }

    /// A history whose one family, returned, ran from a minute to 11 hours.
    fn spread_family() -> (History, Family) {
        let mut history = History::default();
        let spread = family("q", 1);
        for r in [60, 120, 600, 3_600, 7_200, 10_000, 20_000, 40_000] {
            history.observe_runtime(spread.clone(), r, None);
        }
        (history, spread)
    }

    #[test]
    fn a_runtime_is_drawn_from_longer_ones_seen_and_never_beyond_the_cap() {
        let (mut history, spread) = spread_family();
        let regular = family("q", 2);
        for r in [3_000, 3_300, 3_500, 3_600, 3_700, 3_900, 4_000, 5_000] {
            history.observe_runtime(regular.clone(), r, None);
        }
        let mut rng = SplitMix64::new(7);
        for _ in 0..200 {
            let fresh = history.sample_runtime(&spread, 0, 30_000, None, &mut rng);
            assert!(
                [60, 120, 600, 3_600, 7_200, 10_000, 20_000, 30_000].contains(&fresh),
                "not started: one of those seen, capped: {fresh}"
            );
            let running = history.sample_runtime(&regular, 1_000, 30_000, None, &mut rng);
            assert!(
                [3_000, 3_300, 3_500, 3_600, 3_700, 3_900, 4_000, 5_000].contains(&running),
                "a regular family: one of the longer ones seen: {running}"
            );
        }
        assert_eq!(
            history.sample_runtime(&spread, 50_000, 86_400, None, &mut rng),
            86_400,
            "outlived everything: twice its age (100,000 s), capped"
        );
    }

    #[test]
    fn a_running_attempt_of_a_spread_family_is_drawn_by_its_age() {
        let (history, spread) = spread_family();
        let mut rng = SplitMix64::new(7);
        let mut totals: Vec<u64> = (0..2_000)
            .map(|_| history.sample_runtime(&spread, 1_000, 30_000, None, &mut rng))
            .collect();
        totals.sort_unstable();
        assert!(totals.iter().all(|t| (1_000..=30_000).contains(t)));
        let median = totals[totals.len() / 2];
        assert!(
            (1_800..=2_200).contains(&median),
            "even odds of ending before running as long again: {median}"
        );
        let capped = totals.iter().filter(|t| **t == 30_000).count();
        assert!(
            (40..=100).contains(&capped),
            "about 1 in 30 outlives 30 times its age, and stops at the cap: {capped}"
        );
    }

    #[test]
    fn a_job_not_yet_started_draws_from_runtimes_of_jobs_that_asked_for_its_limit() {
        let mut history = History::default();
        let sweeps = family("q", 4);
        // Its newest ended runtimes are short jobs that asked for an hour; 8 that asked for a
        // week ran 2 to 5 days, and a wider group knows 8 more of those.
        for i in 0..56 {
            history.observe_runtime(sweeps.clone(), 600 + i * 10, Some(3_600));
        }
        let long = [
            172_800, 200_000, 250_000, 300_000, 350_000, 400_000, 420_000, 432_000,
        ];
        for r in long {
            history.observe_runtime(sweeps.clone(), r, Some(604_800));
        }
        let mut rng = SplitMix64::new(3);
        for _ in 0..200 {
            let week = history.sample_runtime(&sweeps, 0, 604_800, Some(604_800), &mut rng);
            assert!(long.contains(&week), "asked for a week: {week}");
        }
        let mut asked_none: Vec<u64> = (0..2_000)
            .map(|_| history.sample_runtime(&sweeps, 0, 604_800, None, &mut rng))
            .collect();
        asked_none.sort_unstable();
        assert!(
            asked_none[1_000] < 3_600,
            "no runtime of its limit: the family's, mostly short: {}",
            asked_none[1_000]
        );
        // A family with too few of its limit borrows them from a wider group before it draws
        // from its own runtimes of other limits.
        let few = family("q", 8);
        for i in 0..60 {
            history.observe_runtime(few.clone(), 900 + i, Some(3_600));
        }
        for _ in 0..200 {
            let week = history.sample_runtime(&few, 0, 604_800, Some(604_800), &mut rng);
            assert!(
                long.contains(&week),
                "from the queue's week-long jobs: {week}"
            );
        }
    }

    #[test]
    fn a_history_kept_before_limits_were_reads_back_and_limits_round_trip() {
        let mut history = History::default();
        history.observe_runtime(family("q", 1), 60, None);
        history.observe_runtime(family("q", 1), 120, Some(3_600));
        let json = serde_json::to_value(&history).unwrap();
        assert_eq!(json["all"], serde_json::json!([60, [120, 3_600]]));
        assert_eq!(serde_json::from_value::<History>(json).unwrap(), history);
    }

    #[test]
    fn a_family_with_few_runtimes_borrows_from_its_queue_then_from_everything() {
        let mut history = History::default();
        let mut rng = SplitMix64::new(1);
        assert_eq!(
            history.sample_runtime(&family("q", 1), 0, 86_400, None, &mut rng),
            86_400,
            "no history: the cap"
        );
        for _ in 0..8 {
            history.observe_runtime(family("other", 4), 100, None);
        }
        assert_eq!(
            history.sample_runtime(&family("q", 1), 0, 86_400, None, &mut rng),
            100
        );
        for _ in 0..8 {
            history.observe_runtime(family("q", 2), 500, None);
        }
        assert_eq!(
            history.sample_runtime(&family("q", 1), 0, 86_400, None, &mut rng),
            500,
            "its queue and share before everything"
        );
    }

    #[test]
    fn a_line_rate_counts_recent_arrivals_over_their_span() {
        let mut history = History::default();
        let line: Line = ("q".into(), None);
        for i in 0..10 {
            history.observe_arrival(
                line.clone(),
                Arrival {
                    at_ms: i * 360_000,
                    priority: 0,
                    instances: trainyard_scheduler::snapshot::Instances::from([(
                        "ml.a".to_owned(),
                        1,
                    )])
                    .into(),
                    max_runtime_s: None,
                    line_offset_ms: 0,
                },
            );
        }
        let rates = history.arrival_rates(3_600_000);
        assert_eq!(rates.len(), 1);
        // 10 arrivals in the first hour.
        assert!(
            (rates[0].1 * 3_600_000.0 - 10.0).abs() < 1e-9,
            "{}",
            rates[0].1
        );
        assert!(
            history.arrival_rates(30 * 3_600_000).is_empty(),
            "all too old"
        );
    }
}
