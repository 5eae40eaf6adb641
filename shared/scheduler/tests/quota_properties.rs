//! Seeded property tests of quota shares over many simulated cycles. Each case is generated from
//! one `u64` seed, which proptest prints on failure; `world(seed)` and `simulate` replay it
//! exactly.
//!
//! The simulation is the host's loop in miniature: plan, check the invariants, start the
//! dispatched jobs, stop the victims and put them back as RUNNABLE, end jobs whose runtime is
//! over, advance time past the minimum runtime, repeat.

use std::collections::{BTreeMap, BTreeSet};
use trainyard_domain::random::SplitMix64;

use proptest::prelude::*;
use trainyard_domain::environment::CapacityLimit;
use trainyard_domain::quota_share::SharingStrategy;
use trainyard_scheduler::{
    Config, EnvironmentState, PendingJob, Plan, QueuePolicy, QueueState, QuotaShareState,
    RunningJob, SkipReason, Snapshot, plan_cycle,
};

const NOW: i64 = 1_000_000_000;
const TYPES: [&str; 2] = ["ml.p4d.24xlarge", "ml.g5.xlarge"];
const CYCLES: usize = 40;
/// Each cycle advances past the default minimum runtime, so that preemption is possible.
const STEP_MS: i64 = 700_000;

/// A seed fully determines a case.
type Rng = SplitMix64;

/// The starting world: one quota-managed environment with two instance types, 2–4 shares with
/// random limits, strategies, borrow limits and in-share preemption, and 10–40 pending jobs.
/// `finite` jobs end after their runtime; otherwise they run until preempted.
fn world(seed: u64) -> (Snapshot, bool) {
    let mut rng = Rng::new(seed);
    let capacity: Vec<u32> = TYPES.iter().map(|_| 2 + rng.below(12) as u32).collect();
    let share_count = 2 + rng.below(3);
    let strategies = [
        SharingStrategy::Reserve,
        SharingStrategy::Lend,
        SharingStrategy::LendAndBorrow,
    ];
    let shares: Vec<QuotaShareState> = (0..share_count)
        .map(|i| QuotaShareState {
            name: format!("s{i}").into(),
            limits: TYPES
                .iter()
                .zip(&capacity)
                .map(|(t, c)| ((*t).to_owned(), rng.below(u64::from(*c) / 2 + 2) as u32))
                .collect(),
            strategy: strategies[rng.below(3) as usize],
            borrow_limit_percent: [-1, 0, 50, 100, 200][rng.below(5) as usize],
            in_share_preemption: rng.below(2) == 0,
            enabled: true,
        })
        .collect();
    let pending = (0..10 + rng.below(31))
        .map(|i| {
            let ty = TYPES[rng.below(2) as usize];
            let mut instances = BTreeMap::from([(ty.to_owned(), 1 + rng.below(4) as u32)]);
            if rng.below(5) == 0 {
                let other = TYPES.iter().find(|t| **t != ty).copied().unwrap_or(ty);
                instances.insert(other.to_owned(), 1);
            }
            PendingJob {
                job_id: format!("j{i:02}").into(),
                queue: "q".into(),
                share: Some(format!("s{}", rng.below(share_count)).into()),
                priority: rng.below(4) as u32,
                runnable_at_ms: NOW - 1000 * rng.below(100) as i64,
                instances: instances.into(),
                max_runtime_s: Some(600 + rng.below(20_000)),
                not_before_ms: None,
                line_offset_ms: 0,
            }
        })
        .collect();
    let finite = rng.below(2) == 0;
    let snapshot = Snapshot {
        environments: vec![EnvironmentState {
            name: "qm".into(),
            enabled: true,
            limits: TYPES
                .iter()
                .zip(&capacity)
                .map(|(t, c)| CapacityLimit {
                    max_capacity: *c,
                    capacity_unit: (*t).into(),
                })
                .collect(),
        }],
        queues: vec![QueueState {
            name: "q".into(),
            priority: 1,
            environment: Some("qm".into()),
            policy: QueuePolicy::QuotaShare(shares),
            aging: None,
            reserve_after_ms: None,
        }],
        running: vec![],
        pending,
        usage: BTreeMap::new(),
        in_use: BTreeMap::new(),
    };
    (snapshot, finite)
}

fn shares(s: &Snapshot) -> &[QuotaShareState] {
    match &s.queues[0].policy {
        QueuePolicy::QuotaShare(shares) => shares,
        _ => &[],
    }
}

/// Instances in use per (share, type) and per type, once the plan's dispatches have started.
fn usage_after(
    s: &Snapshot,
    plan: &Plan,
) -> (BTreeMap<(String, String), u64>, BTreeMap<String, u64>) {
    let mut by_share = BTreeMap::new();
    let mut by_type = BTreeMap::new();
    let pending: BTreeMap<&str, &PendingJob> =
        s.pending.iter().map(|p| (p.job_id.as_str(), p)).collect();
    let held = s
        .running
        .iter()
        .map(|r| {
            (
                r.share.as_deref().unwrap_or_default().to_owned(),
                &*r.instances,
            )
        })
        .chain(plan.dispatches.iter().map(|d| {
            let share = pending[d.job_id.as_str()]
                .share
                .as_deref()
                .unwrap_or_default();
            (share.to_owned(), &*d.instances)
        }));
    for (share, instances) in held {
        for (ty, n) in instances {
            *by_share.entry((share.clone(), ty.clone())).or_insert(0) += u64::from(*n);
            *by_type.entry(ty.clone()).or_insert(0) += u64::from(*n);
        }
    }
    (by_share, by_type)
}

/// Checks one plan's invariants; returns the first violation, or how many shares were
/// [`full`](QuotaShareState::full) when the cycle began.
fn check(s: &Snapshot, plan: &Plan, now: i64, config: &Config) -> Result<usize, String> {
    // A full share's jobs neither start nor preempt (a cycle reads only its first few).
    let (held, _) = usage_after(s, &Plan::default());
    let mut full = 0;
    for share in shares(s).iter().filter(|share| {
        share.full(|ty| {
            let key = (share.name.to_string(), ty.to_owned());
            held.get(&key).copied().unwrap_or(0)
        })
    }) {
        full += 1;
        let of_share = |job_id: &str| {
            s.pending
                .iter()
                .any(|p| *p.job_id == *job_id && p.share.as_deref() == Some(share.name.as_str()))
        };
        let acted = plan.dispatches.iter().map(|d| d.job_id.as_str());
        let acted = acted.chain(plan.preemptions.iter().map(|p| p.for_job_id.as_str()));
        if let Some(job_id) = acted.clone().find(|j| of_share(j)) {
            return Err(format!(
                "{job_id} acted, but its share {} was full",
                share.name
            ));
        }
    }
    let (by_share, by_type) = usage_after(s, plan);
    for limit in &s.environments[0].limits {
        let used = by_type.get(&limit.capacity_unit).copied().unwrap_or(0);
        if used > u64::from(limit.max_capacity) {
            return Err(format!(
                "capacity of {} exceeded: {used}",
                limit.capacity_unit
            ));
        }
    }
    for share in shares(s) {
        for ty in TYPES {
            let used = by_share
                .get(&(share.name.to_string(), ty.to_owned()))
                .copied()
                .unwrap_or(0);
            if let Some(cap) = share.borrow_cap(ty)
                && used > share.limit(ty) + cap
            {
                return Err(format!(
                    "share {} uses {used} {ty}: limit {} + borrow cap {cap}",
                    share.name,
                    share.limit(ty)
                ));
            }
        }
    }
    let mut victims = BTreeSet::new();
    for p in &plan.preemptions {
        let victim = s
            .running
            .iter()
            .find(|r| *r.job_id == *p.victim_job_id)
            .ok_or(format!("victim {} is not running", p.victim_job_id))?;
        if now - victim.started_at_ms < config.min_runtime_before_preemption_s as i64 * 1000 {
            return Err(format!("victim {} is too young", p.victim_job_id));
        }
        if !victims.insert(p.victim_job_id.as_str()) {
            return Err(format!("{} preempted twice", p.victim_job_id));
        }
        let waiting = plan.skips.iter().any(|k| {
            k.job_id == p.for_job_id
                && matches!(&k.reason, SkipReason::WaitingForPreemptedCapacity { victims } if victims.contains(&p.victim_job_id))
        });
        if !waiting {
            return Err(format!(
                "{} does not wait for {}",
                p.for_job_id, p.victim_job_id
            ));
        }
    }
    Ok(full)
}

/// Runs the cycles; returns the preemption edges (preemptor, victim) in order.
///
/// A share's limit serves its highest-priority jobs first, so a job that reclaimed within its
/// share's limit is counted as borrowed once its share starts jobs of higher priority beyond
/// the limit, and may then be reclaimed back: such a start (progress) ends the edges out of the
/// share's lower-priority jobs for the loop check. Without one, no job preempts a job that
/// preempted it, and no cycle forms.
fn simulate(seed: u64) -> Result<Vec<(String, String)>, String> {
    simulate_counting(seed).map(|(edges, _)| edges)
}

/// How a victim stops.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// At once: it is requeued in the cycle that preempts it.
    AtOnce,
    /// As SageMaker stops a job, within a grace: it holds its instances, marked
    /// [`RunningJob::stopping`], through the next cycle, and is requeued after it.
    NextCycle,
}

/// [`simulate`], also counting the shares found full at the start of a cycle.
fn simulate_counting(seed: u64) -> Result<(Vec<(String, String)>, usize), String> {
    simulate_stopping(seed, Stop::AtOnce).map(|run| (run.edges, run.full))
}

/// What a simulated run saw.
struct Run {
    /// The preemption edges (preemptor, victim), in order.
    edges: Vec<(String, String)>,
    /// Shares found full at the start of a cycle.
    full: usize,
    /// Preemptions planned of a job already stopping.
    stopping_again: usize,
}

/// [`simulate_counting`], victims stopping as `stop` says.
fn simulate_stopping(seed: u64, stop: Stop) -> Result<Run, String> {
    let (mut s, finite) = world(seed);
    let mut full = 0;
    let mut stopping_again = 0;
    let config = Config::default();
    let mut now = NOW;
    let mut edges: Vec<(String, String)> = Vec::new();
    let mut live: Vec<(String, String)> = Vec::new();
    let job_of: BTreeMap<String, (Option<String>, u32)> = s
        .pending
        .iter()
        .map(|p| {
            let share = p.share.as_deref().map(str::to_owned);
            (p.job_id.to_string(), (share, p.priority))
        })
        .collect();
    for cycle in 0..CYCLES {
        let plan = plan_cycle(&s, now, &config);
        full += check(&s, &plan, now, &config).map_err(|e| format!("cycle {cycle}: {e}"))?;
        let mut shuffled = s.clone();
        shuffled.pending.reverse();
        shuffled.running.reverse();
        if plan_cycle(&shuffled, now, &config) != plan {
            return Err(format!("cycle {cycle}: the plan depends on input order"));
        }
        for p in &plan.preemptions {
            let victim = s.running.iter().find(|r| r.job_id == p.victim_job_id);
            stopping_again += usize::from(victim.is_some_and(|r| r.stopping));
            if live
                .iter()
                .any(|(a, b)| *a == *p.victim_job_id && *b == *p.for_job_id)
            {
                return Err(format!(
                    "cycle {cycle}: {} preempts {}, which preempted it",
                    p.for_job_id, p.victim_job_id
                ));
            }
            let edge = (p.for_job_id.to_string(), p.victim_job_id.to_string());
            edges.push(edge.clone());
            live.push(edge);
        }
        for d in &plan.dispatches {
            let (share, priority) = &job_of[d.job_id.as_str()];
            live.retain(|(a, _)| {
                let (a_share, a_priority) = &job_of[a.as_str()];
                a_share != share || a_priority >= priority
            });
        }
        if let Some(jobs) = find_cycle(&live) {
            return Err(format!("cycle {cycle}: preemption cycle: {jobs:?}"));
        }
        // Commit: start the dispatched jobs, stop the victims and requeue them (those that
        // were stopping since the last cycle, when a stop takes a cycle).
        let stopped: Vec<String> = s
            .running
            .iter()
            .filter(|r| r.stopping)
            .map(|r| r.job_id.to_string())
            .collect();
        for d in &plan.dispatches {
            let Some(i) = s.pending.iter().position(|p| p.job_id == d.job_id) else {
                continue;
            };
            let job = s.pending.remove(i);
            let runtime_ms = job.max_runtime_s.unwrap_or(86_400) as i64 * 1000;
            s.running.push(RunningJob {
                job_id: job.job_id,
                queue: job.queue,
                share: job.share,
                priority: job.priority,
                started_at_ms: now,
                instances: job.instances,
                expected_end_ms: if finite { now + runtime_ms } else { i64::MAX },
                checkpoint_ms: None,
                checkpoint_interval_ms: None,
                preemptions: 0,
                resumable: false,
                stopping: false,
            });
        }
        let requeued: Vec<&str> = match stop {
            Stop::AtOnce => plan
                .preemptions
                .iter()
                .map(|p| p.victim_job_id.as_str())
                .collect(),
            Stop::NextCycle => {
                for p in &plan.preemptions {
                    let victim = s.running.iter_mut().find(|r| *r.job_id == *p.victim_job_id);
                    if let Some(victim) = victim {
                        victim.stopping = true;
                    }
                }
                stopped.iter().map(String::as_str).collect()
            }
        };
        for id in requeued {
            let Some(i) = s.running.iter().position(|r| *r.job_id == *id) else {
                continue;
            };
            let victim = s.running.remove(i);
            s.pending.push(PendingJob {
                job_id: victim.job_id,
                queue: victim.queue,
                share: victim.share,
                priority: victim.priority,
                runnable_at_ms: now,
                instances: victim.instances,
                max_runtime_s: Some(3600),
                not_before_ms: None,
                line_offset_ms: 0,
            });
        }
        now += STEP_MS;
        s.running.retain(|r| r.expected_end_ms > now);
    }
    Ok(Run {
        edges,
        full,
        stopping_again,
    })
}

/// A cycle in the preempted-by graph, if any (depth-first search).
fn find_cycle(edges: &[(String, String)]) -> Option<Vec<String>> {
    let mut graph: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (a, b) in edges {
        graph.entry(a.as_str()).or_default().push(b.as_str());
    }
    fn visit<'a>(
        node: &'a str,
        graph: &BTreeMap<&'a str, Vec<&'a str>>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|n| *n == node) {
            return Some(path[i..].iter().map(|s| (*s).to_owned()).collect());
        }
        if !done.insert(node) {
            return None;
        }
        path.push(node);
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        if let Some(cycle) = visit(node, &graph, &mut Vec::new(), &mut done) {
            return Some(cycle);
        }
    }
    None
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Capacity is never exceeded, no share exceeds its limit plus borrow cap, victims are
    /// running and old enough, the same input gives the same plan whatever its order, and
    /// preemption never loops (no job preempts a job that preempted it, and no cycle forms).
    #[test]
    fn quota_invariants_hold_over_many_cycles(seed in any::<u64>()) {
        if let Err(e) = simulate(seed) {
            prop_assert!(false, "seed {seed}: {e}");
        }
    }

    /// The same, with victims that hold their instances through the next cycle, marked
    /// stopping, as SageMaker's stop grace does: a cycle during a stop plans the stopping job
    /// again, and nothing above may break for it.
    #[test]
    fn quota_invariants_hold_when_victims_take_a_cycle_to_stop(seed in any::<u64>()) {
        if let Err(e) = simulate_stopping(seed, Stop::NextCycle) {
            prop_assert!(false, "seed {seed}: {e}");
        }
    }
}

/// Seeds that once made two jobs of different shares reclaim from each other: a share's job
/// started as a borrower in the cycle in which another of its jobs reclaimed within the share's
/// limit (or started beside it), so the entitled job, starting no earlier, was the one counted
/// as borrowed and was reclaimed back. 2 seeds in 100,000 did; a share now borrows nothing in
/// such a cycle (`QUOTA:BORROWING_AFTER_ENTITLED_START`).
#[test]
fn a_reclaiming_job_is_never_counted_as_its_shares_borrower() {
    for seed in [8_371_696_350_215_278_382, 4_230_530_660_690_684_850] {
        if let Err(e) = simulate(seed) {
            panic!("seed {seed}: {e}");
        }
    }
}

/// A seed in which a job reclaims back from the job that reclaimed from it: `j04` (share `s2`,
/// priority 0) reclaims from `j13` (`s1`) within `s2`'s limit; later `s2` starts `j14`
/// (priority 3) beyond its limit, which makes `j04`, its lowest-priority job, the one counted as
/// borrowed, and `j13` reclaims from it. It took a start of higher priority in between.
#[test]
fn a_job_is_reclaimed_back_only_after_its_share_starts_higher_priority_work() {
    let seed = 15_146_130_885_058_380_428;
    let edges = simulate(seed).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    let edge = |a: &str, b: &str| edges.iter().any(|(x, y)| x == a && y == b);
    assert!(edge("j04", "j13") && edge("j13", "j04"), "{edges:?}");
}

/// With victims that take a cycle to stop, cycles during a stop do plan the stopping job again
/// (otherwise that property would not reach the planner's rule for them).
#[test]
fn the_simulation_plans_stopping_victims_again() {
    let again: usize = (0..200u64)
        .map(|seed| simulate_stopping(seed, Stop::NextCycle).map_or(0, |run| run.stopping_again))
        .sum();
    // 45 in these 200 seeds.
    assert!(
        again >= 20,
        "only {again} stopping victims planned again in 200 seeds"
    );
}

/// The generator does produce full shares (otherwise the check that their jobs never act would
/// be vacuous).
#[test]
fn the_simulation_fills_shares() {
    let full: usize = (0..200u64)
        .map(|seed| simulate_counting(seed).map(|(_, full)| full).unwrap_or(0))
        .sum();
    assert!(full >= 1_000, "only {full} full shares in 200 seeds");
}

/// The generator does produce preemptions (otherwise the loop property would be vacuous).
#[test]
fn the_simulation_exercises_preemption() {
    let preemptions: usize = (0..200u64)
        .map(|seed| simulate(seed).map(|e| e.len()).unwrap_or(0))
        .sum();
    assert!(
        preemptions >= 20,
        "only {preemptions} preemptions in 200 seeds"
    );
}
