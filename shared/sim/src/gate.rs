//! Whether a replay's cycle can change anything, judged from each team's waiting and running
//! jobs by `schedulingPriority`: the driver skips the cycles that cannot. A host runs them, and
//! they start nothing, preempt nothing and reclaim nothing.
//!
//! Each check here is a necessary condition for the quota planner to act (the rules are in
//! `trainyard_scheduler`'s `quota` module), loosened wherever a closer one would need the
//! planner's own state: a gate that says "maybe" too often costs a cycle; one that said "no"
//! wrongly would change the replay. Under both quota policies a team is its quota share.
//!
//! [`Lines::quota_may_act`] does not look at time. A waiting job's wait before it may reclaim
//! ends by itself, and the cycle that finds it waiting is the one that tells the driver when
//! (`Plan::next_change_ms`) and starts the owner's wait the report measures (`LentWaits`).
//! [`Lines::quota_fresh_may_act`] is for the passes after a cycle that did nothing and left no
//! owner waiting, in which jobs were only submitted.

use std::collections::BTreeMap;

use trainyard_domain::job::{JobStatus, ServiceJob};
use trainyard_scheduler::waited_since_ms;

/// A job as the gate counts it in its team.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counted {
    /// `schedulingPriority` (0 when unset).
    priority: u32,
    /// Where its instances count, if anywhere.
    place: Option<Place>,
}

/// Where a job's instances count in its team.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// RUNNABLE: it needs this many, and has waited since then (as the planner counts a wait
    /// before preempting, `trainyard_scheduler::waited_since_ms`).
    Waiting(u64, i64),
    /// Dispatched: it holds this many.
    Holding(u64),
}

impl Counted {
    /// Whether it waits (is RUNNABLE).
    pub(crate) fn waits(&self) -> bool {
        matches!(self.place, Some(Place::Waiting(..)))
    }

    /// The instances it holds (0 unless dispatched).
    pub(crate) fn held(&self) -> u64 {
        match self.place {
            Some(Place::Holding(instances)) => instances,
            _ => 0,
        }
    }

    /// `job` in its current status.
    pub(crate) fn of(job: &ServiceJob) -> Self {
        let instances = job.training.total_instances();
        let place = if job.status == JobStatus::Runnable {
            let runnable_at = job.runnable_at.unwrap_or(job.created_at);
            let since_ms = waited_since_ms(runnable_at, job.not_before);
            Some(Place::Waiting(instances, since_ms))
        } else if job.status.is_dispatched() {
            Some(Place::Holding(instances))
        } else {
            None
        };
        Self {
            priority: job.scheduling_priority.unwrap_or(0),
            place,
        }
    }
}

/// One team's jobs by `schedulingPriority`.
#[derive(Debug, Default)]
struct Team {
    /// RUNNABLE jobs: priority → instances needed → jobs.
    waiting: BTreeMap<u32, BTreeMap<u64, usize>>,
    /// The same jobs: priority → since when they have waited → jobs.
    since: BTreeMap<u32, BTreeMap<i64, usize>>,
    /// Instances its dispatched jobs hold: priority → instances.
    held: BTreeMap<u32, u64>,
}

impl Team {
    fn held(&self) -> u64 {
        self.held.values().sum()
    }

    /// Instances held by its jobs of `priority` or higher.
    fn held_from(&self, priority: u32) -> u64 {
        self.held.range(priority..).map(|(_, n)| n).sum()
    }

    /// Whether a job of `priority` needing `n` instances fits within `limit` beside the team's
    /// jobs of its priority or higher (it is entitled).
    fn entitles(&self, priority: u32, n: u64, limit: u64) -> bool {
        self.held_from(priority) + n <= limit
    }

    /// Whether jobs of the team below `priority` run (a job of `priority` could preempt them).
    fn runs_below(&self, priority: u32) -> bool {
        self.held() > self.held_from(priority)
    }

    /// Its smallest waiting job of each priority.
    fn smallest_waiting(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        let smallest =
            |(p, sizes): (&u32, &BTreeMap<u64, usize>)| Some((*p, *sizes.keys().next()?));
        self.waiting.iter().filter_map(smallest)
    }
}

/// Counts one job of `priority` under `key` in (`add`) or out, forgetting what reaches 0.
fn step<K: Ord + Copy>(
    counts: &mut BTreeMap<u32, BTreeMap<K, usize>>,
    priority: u32,
    key: K,
    add: bool,
) {
    let keys = counts.entry(priority).or_default();
    let jobs = keys.entry(key).or_default();
    *jobs = if add {
        *jobs + 1
    } else {
        jobs.saturating_sub(1)
    };
    if *jobs == 0 {
        keys.remove(&key);
    }
    if keys.is_empty() {
        counts.remove(&priority);
    }
}

/// Every team's waiting and running jobs, kept in step with their status changes.
#[derive(Debug, Default)]
pub(crate) struct Lines {
    teams: BTreeMap<String, Team>,
}

impl Lines {
    /// Counts `job` of `team` in (`add`) or out.
    pub(crate) fn count(&mut self, team: &str, job: Counted, add: bool) {
        let Some(place) = job.place else {
            return;
        };
        if !self.teams.contains_key(team) {
            self.teams.insert(team.to_owned(), Team::default());
        }
        let Some(entry) = self.teams.get_mut(team) else {
            return;
        };
        let p = job.priority;
        match place {
            Place::Waiting(instances, since_ms) => {
                step(&mut entry.waiting, p, instances, add);
                step(&mut entry.since, p, since_ms, add);
            }
            Place::Holding(instances) => {
                let held = entry.held.entry(p).or_default();
                *held = if add {
                    *held + instances
                } else {
                    held.saturating_sub(instances)
                };
                if *held == 0 {
                    entry.held.remove(&p);
                }
            }
        }
        if entry.waiting.is_empty() && entry.held.is_empty() {
            self.teams.remove(team);
        }
    }

    /// Under static slices (RESERVE quota shares, which neither lend nor borrow, without
    /// preemption): whether some team's smallest waiting job fits in what its `limits` entry
    /// leaves beside the instances it holds. A job starts only within its share's limit.
    pub(crate) fn slice_has_room(&self, limits: &BTreeMap<String, u32>) -> bool {
        self.teams.iter().any(|(name, team)| {
            let room = limit(limits, name).saturating_sub(team.held());
            team.smallest_waiting().any(|(_, n)| n <= room)
        })
    }

    /// Under quota shares that lend and borrow, with in-share preemption by jobs of
    /// `in_share_from` or higher: whether a cycle may start, preempt or reclaim, or find an
    /// owner waiting for the capacity its share lent. It may only if
    /// - a waiting job fits in the environment's `free` instances (every start is checked
    ///   against the environment);
    /// - or some share borrows, and a waiting job is entitled (it fits within its share's
    ///   limit beside the share's jobs of its priority or higher): it is owed capacity;
    /// - or a waiting job of `in_share_from` or higher has jobs of its share of lower priority
    ///   running: it may preempt them.
    pub(crate) fn quota_may_act(
        &self,
        limits: &BTreeMap<String, u32>,
        free: u64,
        in_share_from: u32,
    ) -> bool {
        let fits_free = self
            .teams
            .values()
            .any(|team| team.smallest_waiting().any(|(_, n)| n <= free));
        let borrowing = self.borrowing(limits);
        let may_preempt = |(name, team): (&String, &Team)| {
            team.smallest_waiting().any(|(priority, n)| {
                let owed = borrowing && team.entitles(priority, n, limit(limits, name));
                owed || (priority >= in_share_from && team.runs_below(priority))
            })
        };
        fits_free || self.teams.iter().any(may_preempt)
    }
}

/// A job just submitted: its team, `schedulingPriority` and instances.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fresh {
    pub team: String,
    pub priority: u32,
    pub instances: u64,
}

/// Preemption within a share: by jobs of `from` or higher, once they have waited `wait_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct InShare {
    pub from: u32,
    pub wait_ms: i64,
}

impl Lines {
    /// Under quota shares that lend and borrow, when the last cycle did nothing and found no
    /// owner waiting for capacity its share lent (nor a job waiting for its victims to stop),
    /// and jobs have only been submitted since: whether the next cycle at `now_ms` may do
    /// something. The jobs that were there could do nothing then, and a submission changes
    /// nothing they wait for; time does, only for a wait before preempting in the share. So it
    /// may only if
    /// - a fresh job may act as [`Lines::quota_may_act`] says (it fits in the `free`
    ///   instances, is owed capacity, or may preempt in its share at once);
    /// - or a job that may preempt in its share has waited to since, and jobs of lower priority
    ///   of its share run.
    pub(crate) fn quota_fresh_may_act(
        &self,
        fresh: &[Fresh],
        limits: &BTreeMap<String, u32>,
        free: u64,
        in_share: InShare,
        now_ms: i64,
    ) -> bool {
        let borrowing = self.borrowing(limits);
        let fresh_acts = fresh.iter().any(|job| {
            let nothing = Team::default();
            let team = self.teams.get(&job.team).unwrap_or(&nothing);
            let (p, n) = (job.priority, job.instances);
            let owed = borrowing && team.entitles(p, n, limit(limits, &job.team));
            let preempts = in_share.wait_ms <= 0 && p >= in_share.from && team.runs_below(p);
            n <= free || owed || preempts
        });
        let by_ms = now_ms.saturating_sub(in_share.wait_ms);
        let waited = |team: &Team| {
            let from = team.since.range(in_share.from..);
            from.into_iter().any(|(priority, since)| {
                let first = since.keys().next();
                team.runs_below(*priority) && first.is_some_and(|t| *t <= by_ms)
            })
        };
        fresh_acts || self.teams.values().any(waited)
    }

    /// Whether some team holds more than its limit.
    fn borrowing(&self, limits: &BTreeMap<String, u32>) -> bool {
        self.teams
            .iter()
            .any(|(name, team)| team.held() > limit(limits, name))
    }
}

fn limit(limits: &BTreeMap<String, u32>, team: &str) -> u64 {
    limits.get(team).map_or(0, |l| u64::from(*l))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::driver::{Cycles, replay};
    use crate::policies::Policy;
    use crate::record::{ReplayWork, RunRecord};
    use crate::scenario::Scenario;
    use crate::trace::{Format, load};

    fn limits() -> BTreeMap<String, u32> {
        [("a".to_owned(), 8), ("b".to_owned(), 8)].into()
    }

    fn waiting(priority: u32, instances: u64) -> Counted {
        let place = Some(Place::Waiting(instances, 0));
        Counted { priority, place }
    }

    fn holding(priority: u32, instances: u64) -> Counted {
        let place = Some(Place::Holding(instances));
        Counted { priority, place }
    }

    #[test]
    fn a_slice_has_room_only_for_a_waiting_job_that_fits_beside_what_its_team_holds() {
        let mut lines = Lines::default();
        lines.count("a", waiting(100, 4), true);
        lines.count("a", holding(300, 6), true);
        assert!(!lines.slice_has_room(&limits()), "4 waiting, 2 left");
        lines.count("a", waiting(100, 2), true);
        assert!(lines.slice_has_room(&limits()), "2 waiting, 2 left");
        lines.count("a", waiting(100, 2), false);
        lines.count("a", holding(300, 6), false);
        lines.count("a", holding(300, 4), true);
        assert!(lines.slice_has_room(&limits()), "4 waiting, 4 left");
        lines.count("a", waiting(100, 4), false);
        assert!(!lines.slice_has_room(&limits()), "nothing waits");
        lines.count("c", waiting(100, 1), true);
        assert!(!lines.slice_has_room(&limits()), "a team without a slice");
        lines.count("a", holding(300, 4), false);
        assert_eq!(lines.teams.len(), 1, "a team with nothing is forgotten");
    }

    #[test]
    fn quota_shares_act_on_free_capacity_owed_capacity_or_an_in_share_preemption() {
        let mut lines = Lines::default();
        // b borrows: 12 of its limit of 8.
        lines.count("b", holding(100, 12), true);
        lines.count("a", holding(100, 4), true);
        // a's sweep of 6 does not fit in 2 free, and is not entitled beside a's 4 (4 + 6 > 8).
        lines.count("a", waiting(100, 6), true);
        assert!(!lines.quota_may_act(&limits(), 2, 300));
        assert!(
            lines.quota_may_act(&limits(), 6, 300),
            "it fits what is free"
        );
        // a's production job of 4 is entitled beside a's production (none): it is owed, even
        // where it may not preempt in its share.
        lines.count("a", waiting(300, 4), true);
        assert!(lines.quota_may_act(&limits(), 2, 301));
        // Nobody borrows now, but a's production may preempt a's sweeps.
        lines.count("b", holding(100, 12), false);
        lines.count("b", holding(100, 8), true);
        assert!(lines.quota_may_act(&limits(), 2, 300));
        assert!(
            !lines.quota_may_act(&limits(), 2, 301),
            "it may not preempt in its share"
        );
        lines.count("a", holding(100, 4), false);
        lines.count("a", holding(300, 4), true);
        assert!(
            !lines.quota_may_act(&limits(), 2, 300),
            "a's running jobs are its production: nothing below it to preempt"
        );
    }

    #[test]
    fn after_an_idle_cycle_only_a_fresh_job_or_an_in_share_wait_run_out_lets_a_cycle_act() {
        const MINUTE: i64 = 60_000;
        let in_share = InShare {
            from: 300,
            wait_ms: 30 * MINUTE,
        };
        let fresh = |team: &str, priority, instances| Fresh {
            team: team.to_owned(),
            priority,
            instances,
        };
        let mut lines = Lines::default();
        lines.count("a", holding(100, 8), true);
        lines.count("b", holding(100, 8), true);
        // a's production job has waited since minute 10; nothing is free, nobody borrows.
        let production = Counted {
            priority: 300,
            place: Some(Place::Waiting(2, 10 * MINUTE)),
        };
        lines.count("a", production, true);
        let acts = |lines: &Lines, fresh: &[Fresh], free, now| {
            lines.quota_fresh_may_act(fresh, &limits(), free, in_share, now)
        };
        let sweep = [fresh("b", 100, 1)];
        assert!(
            !acts(&lines, &sweep, 0, 39 * MINUTE),
            "a sweep that fits nowhere"
        );
        assert!(
            acts(&lines, &sweep, 1, 39 * MINUTE),
            "a sweep that fits what is free"
        );
        assert!(
            acts(&lines, &sweep, 0, 40 * MINUTE),
            "a's production has waited 30 minutes beside a's sweeps"
        );
        let at_once = InShare {
            wait_ms: 0,
            ..in_share
        };
        let b_production = [fresh("b", 300, 1)];
        assert!(!acts(&lines, &b_production, 0, 39 * MINUTE));
        assert!(lines.quota_fresh_may_act(&b_production, &limits(), 0, at_once, 0));
        // b borrows: a fresh job of a within a's limit beside a's production is owed.
        lines.count("b", holding(100, 8), false);
        lines.count("b", holding(100, 12), true);
        assert!(acts(&lines, &[fresh("a", 300, 4)], 0, 39 * MINUTE));
        assert!(
            !acts(&lines, &[fresh("a", 100, 1)], 0, 39 * MINUTE),
            "a's sweep is not: a's 8 are in use"
        );
        let mut with_c = limits();
        with_c.insert("c".to_owned(), 4);
        let c = [fresh("c", 100, 2)];
        assert!(
            lines.quota_fresh_may_act(&c, &with_c, 0, in_share, 39 * MINUTE),
            "a job of a team with nothing counted yet is owed its limit"
        );
    }

    /// The JSONL trace `lines` replayed under quota-shares on the `small` scenario as `edit`
    /// changes it: skipping the cycles that cannot act, and running every one.
    fn small_replays(lines: &[String], edit: impl FnOnce(&mut Scenario)) -> (RunRecord, RunRecord) {
        let trace = crate::trace::parse(&lines.join("\n"), Format::Jsonl).unwrap();
        let mut scenario = Scenario::load("small").unwrap();
        edit(&mut scenario);
        let run = |cycles| {
            let policy = Policy::QuotaShares;
            replay(&trace, &scenario, policy, None, &mut |_| {}, cycles).unwrap()
        };
        (
            run(Cycles::WhenTheyMayAct),
            run(Cycles::WhenAnythingChanged),
        )
    }

    #[test]
    fn an_owner_waiting_for_borrowers_to_be_preemptible_is_cycled_for_at_the_next_event() {
        // language borrows 4 of vision's 4 instances: two jobs from t = 0, two from t = 500.
        // Vision's 4-instance job arrives at 700 and may reclaim from 1000, but only two
        // borrowers may be preempted (after 600 s) until 1100, and the planner gives no time
        // for that: the reclaim happens at the next event, language's submission at 1150.
        let mut lines = Vec::new();
        for (i, at) in [0, 0, 0, 0, 0, 0, 500, 500].into_iter().enumerate() {
            lines.push(format!(
                r#"{{"id":"lang-{i}","submit_s":{at},"duration_s":100000,"instances":1,"queue":"sweeps","share":"language"}}"#
            ));
        }
        lines.push(r#"{"id":"vis","submit_s":700,"duration_s":100,"instances":4,"queue":"sweeps","share":"vision"}"#.to_owned());
        lines.push(r#"{"id":"lang-late","submit_s":1150,"duration_s":100,"instances":1,"queue":"sweeps","share":"language"}"#.to_owned());
        let (gated, every) = small_replays(&lines, |scenario| {
            scenario.min_runtime_before_preemption_s = 600;
            scenario.min_wait_before_reclaim_s = 300;
        });
        let start = |record: &RunRecord| {
            let owner = record.jobs.iter().find(|j| j.trace_id == "vis").unwrap();
            owner.first_start_s
        };
        assert_eq!(
            start(&every),
            Some(1160.0),
            "reclaimed at 1150, 10 s to stop"
        );
        assert_eq!(start(&gated), start(&every));
    }

    #[test]
    fn a_start_that_makes_an_older_job_borrowed_is_followed_by_a_second_cycle() {
        // Both teams hold their limit of 4. Vision's sweep `y` waits from 500 for one of its
        // own to end; language's research job `d` from 600, above language's sweeps (it may not
        // preempt them). When vision's `v0` ends, the pass's first cycle starts `d` on the freed
        // instance (it goes first, by priority): language now holds 5, and its newest sweep
        // counts as borrowed. `y` found nothing to reclaim in that cycle; the second reclaims
        // that sweep for it at once, instead of at the next event, hours later.
        let mut lines = Vec::new();
        for i in 0..4 {
            lines.push(format!(
                r#"{{"id":"lang-{i}","submit_s":0,"duration_s":100000,"instances":1,"queue":"sweeps","share":"language"}}"#
            ));
        }
        lines.push(r#"{"id":"v0","submit_s":0,"duration_s":1000,"instances":1,"queue":"sweeps","share":"vision"}"#.to_owned());
        for i in 1..4 {
            lines.push(format!(
                r#"{{"id":"v{i}","submit_s":0,"duration_s":100000,"instances":1,"queue":"sweeps","share":"vision"}}"#
            ));
        }
        lines.push(r#"{"id":"y","submit_s":500,"duration_s":100,"instances":1,"queue":"sweeps","share":"vision"}"#.to_owned());
        lines.push(r#"{"id":"d","submit_s":600,"duration_s":100,"instances":1,"queue":"research","share":"language"}"#.to_owned());
        let (gated, every) = small_replays(&lines, |scenario| {
            scenario.min_runtime_before_preemption_s = 60;
            scenario.min_wait_before_reclaim_s = 60;
            scenario.min_priority_for_in_share_preemption = 1000;
        });
        let job = |record: &RunRecord, id: &str| {
            let job = record.jobs.iter().find(|j| j.trace_id == id).unwrap();
            (job.first_start_s, job.preemptions)
        };
        let (d, y) = (job(&every, "d"), job(&every, "y"));
        let v0_ended = job(&every, "v0").0.unwrap() + 1000.0;
        assert!(
            d.0.unwrap() < v0_ended + 1.0,
            "d starts as v0 ends: {d:?}, {v0_ended}"
        );
        assert!(
            y.0.unwrap() < v0_ended + 60.0,
            "y reclaims a sweep at once: {y:?}, {v0_ended}"
        );
        let preempted: u32 = every.jobs.iter().map(|j| j.preemptions).sum();
        assert_eq!(preempted, 1, "one of language's sweeps");
        assert_eq!(gated.jobs, every.jobs);
    }

    /// The first `jobs` Philly jobs by submission (from the trace beside the repository, or
    /// `$TRAINYARD_TRACES`; a missing trace fails the test).
    fn philly(jobs: usize) -> crate::trace::Trace {
        let root = std::env::var_os("TRAINYARD_TRACES").map_or_else(
            || std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces"),
            std::path::PathBuf::from,
        );
        let mut trace = load(&root.join("philly-pollux/philly.csv"), Format::Philly)
            .unwrap_or_else(|e| panic!("the Philly trace is needed for this check: {e}"));
        trace.jobs.truncate(jobs);
        trace
    }

    #[test]
    fn skipping_the_cycles_that_cannot_act_changes_no_replay() {
        // 4,000 jobs on an eighth of `fleet`: teams lend, borrow, reclaim and preempt in their
        // shares under quota-shares, and wait for their slices under static-partition. (With
        // fewer, no pass's second cycle acts after a first that preempted.)
        let trace = philly(4000);
        let mut scenario = Scenario::load("fleet").unwrap();
        scenario.capacity_instances = 64;
        for policy in [Policy::StaticPartition, Policy::QuotaShares] {
            let run = |cycles| replay(&trace, &scenario, policy, None, &mut |_| {}, cycles);
            let gated = run(Cycles::WhenTheyMayAct).unwrap();
            let every = run(Cycles::WhenAnythingChanged).unwrap();
            let (fewer, all) = (gated.work.cycles, every.work.cycles);
            assert!(fewer < all, "{}: {fewer} cycles of {all}", policy.name());
            let without_work = |record: RunRecord| RunRecord {
                work: ReplayWork::default(),
                ..record
            };
            let reclaims = every.reclaims;
            let preempted = every.jobs.iter().filter(|j| j.preemptions > 0).count();
            assert!(
                gated.jobs == every.jobs && without_work(gated) == without_work(every),
                "{}: the replay changed when {} of {all} cycles were skipped",
                policy.name(),
                all - fewer
            );
            if policy == Policy::QuotaShares {
                assert!(
                    reclaims > 0 && preempted > 0,
                    "{reclaims} reclaims, {preempted} preempted jobs"
                );
            }
        }
    }
}
