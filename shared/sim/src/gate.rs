//! Whether a replay's cycle can change anything, judged from each team's waiting and running
//! jobs by `schedulingPriority`: the driver skips the cycles that cannot. A host runs them, and
//! they start nothing, preempt nothing and reclaim nothing.
//!
//! Each test here is a necessary condition for the quota planner to act (the rules are in
//! `trainyard_scheduler`'s `quota` module), loosened wherever a closer one would need the
//! planner's own state: a gate that says "maybe" too often costs a cycle; one that said "no"
//! wrongly would change the replay. Under both quota policies a team is its quota share.
//!
//! Time is not looked at. A waiting job's wait before it may reclaim or preempt ends by itself,
//! and the cycle that finds it waiting is the one that tells the driver when
//! (`Plan::next_change_ms`) and starts the owner's wait the report measures (`LentWaits`).

use std::collections::BTreeMap;

use trainyard_domain::job::{JobStatus, ServiceJob};

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
    /// RUNNABLE: it needs this many.
    Waiting(u64),
    /// Dispatched: it holds this many.
    Holding(u64),
}

impl Counted {
    /// `job` in its current status.
    pub(crate) fn of(job: &ServiceJob) -> Self {
        let instances = job.training.total_instances();
        let place = if job.status == JobStatus::Runnable {
            Some(Place::Waiting(instances))
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

    /// Its smallest waiting job of each priority.
    fn smallest_waiting(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        let smallest =
            |(p, sizes): (&u32, &BTreeMap<u64, usize>)| Some((*p, *sizes.keys().next()?));
        self.waiting.iter().filter_map(smallest)
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
        let entry = self.teams.entry(team.to_owned()).or_default();
        let p = job.priority;
        match place {
            Place::Waiting(instances) => {
                let sizes = entry.waiting.entry(p).or_default();
                let jobs = sizes.entry(instances).or_default();
                *jobs = if add {
                    *jobs + 1
                } else {
                    jobs.saturating_sub(1)
                };
                if *jobs == 0 {
                    sizes.remove(&instances);
                }
                if sizes.is_empty() {
                    entry.waiting.remove(&p);
                }
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
        let borrowing = self
            .teams
            .iter()
            .any(|(name, team)| team.held() > limit(limits, name));
        let may_preempt = |(name, team): (&String, &Team)| {
            team.smallest_waiting().any(|(priority, n)| {
                let held_from = team.held_from(priority);
                let owed = borrowing && held_from + n <= limit(limits, name);
                let in_share = priority >= in_share_from && team.held() > held_from;
                owed || in_share
            })
        };
        fits_free || self.teams.iter().any(may_preempt)
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
        let place = Some(Place::Waiting(instances));
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
        // 1,000 jobs on an eighth of `fleet`: teams lend, borrow, reclaim and preempt in their
        // shares under quota-shares, and wait for their slices under static-partition.
        let trace = philly(1000);
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
