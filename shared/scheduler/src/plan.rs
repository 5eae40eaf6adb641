//! One cycle's plan: see the crate docs for the rules, numbered as in the code below.

use std::cmp::{Ordering, Reverse};
use std::collections::binary_heap::PeekMut;
use std::collections::{BTreeMap, BinaryHeap};

use foldhash::fast::FixedState;

use crate::decision::{Plan, Skip, SkipReason};
use crate::env::{EnvPlan, dispatch, fifo, within_share};
use crate::fair_share::{ShareUsage, reserved_instances, score};
use crate::pool::{self, Fit, Pool};
use crate::quota::plan_quota_queue;

use crate::snapshot::{
    Config, PendingJob, QueuePolicy, QueueState, RunningJob, SharedStr, Snapshot,
};
use trainyard_domain::queue::Aging;

/// Plans one cycle. Pure: the same arguments give the same plan.
pub fn plan_cycle(snapshot: &Snapshot, now_ms: i64, config: &Config) -> Plan {
    // Most pending jobs are skipped: room for all of them, rather than copies as it grows.
    let mut plan = Plan {
        skips: Vec::with_capacity(snapshot.pending.len()),
        ..Plan::default()
    };

    // 1. Capacity in use, derived from the running attempts.
    let queue_env: BTreeMap<&str, &str> = snapshot
        .queues
        .iter()
        .filter_map(|q| Some((q.name.as_str(), q.environment.as_deref()?)))
        .collect();
    let mut envs: BTreeMap<&str, EnvPlan> = snapshot
        .environments
        .iter()
        .map(|e| {
            let plan = EnvPlan {
                name: e.name.as_str().into(),
                enabled: e.enabled,
                pool: Pool::new(&e.limits),
                releases: Vec::new(),
                head: None,
            };
            (e.name.as_str(), plan)
        })
        .collect();
    // What each environment's usage record says is in use, where the host keeps one.
    for (name, in_use) in &snapshot.in_use {
        if let Some(env) = envs.get_mut(name.as_str()) {
            env.pool.take_counts(in_use);
        }
    }
    // Running jobs by queue (in snapshot order within each): the queues' plans read only
    // their own. They are charged only where no usage record is kept; their ends are when
    // capacity comes back either way.
    let running_by_queue = Groups::of(&snapshot.running, |job| &job.queue);
    for (queue, jobs) in running_by_queue.iter() {
        if let Some((name, env)) = queue_env
            .get(queue)
            .and_then(|e| envs.get_mut(e).map(|env| (*e, env)))
        {
            let recorded = snapshot.in_use.contains_key(name);
            for job in jobs {
                if !recorded {
                    env.pool.take(&job.instances);
                }
                env.releases.push((job.expected_end_ms, &job.instances));
            }
        }
    }

    // 2. Queues take turns in priority order (descending), then by name. A queue without
    // aging takes one turn for all its jobs; a queue with aging takes a turn per job, at the
    // priority its next job has aged to (see `Turn`).
    let mut pending_by_queue = Groups::of(&snapshot.pending, |job| &job.queue);
    // Shares' decayed usage, looked up by (queue, share) without building keys.
    let usage: UsageByShare = snapshot
        .usage
        .iter()
        .map(|(k, u)| ((k.queue.as_str(), k.share.as_str()), *u))
        .collect();

    // Lines are numbered in priority order (descending), then by name, so that a line's number
    // breaks ties between turns as rule 2 does.
    let mut queues: Vec<&QueueState> = snapshot.queues.iter().collect();
    queues.sort_by(|a, b| {
        b.priority
            .cmp(&a.priority)
            .then_with(|| a.name.cmp(&b.name))
    });
    let mut turns: BinaryHeap<Reverse<Turn>> = BinaryHeap::new();
    let mut lines: Vec<(&QueueState, &str, Age, Line)> = Vec::new();
    for queue in queues {
        let Some(jobs) = pending_by_queue.take(queue.name.as_str()) else {
            continue;
        };
        let env = queue
            .environment
            .as_deref()
            .and_then(|name| envs.get_mut(name).map(|env| (name, env)));
        let Some((env_name, env)) = env else {
            skip_all(&mut plan, jobs, &SkipReason::NoEnvironment);
            continue;
        };
        if !env.enabled {
            let reason = SkipReason::EnvironmentDisabled {
                environment: env.name.clone(),
            };
            skip_all(&mut plan, jobs, &reason);
            continue;
        }
        let running = running_by_queue.get(queue.name.as_str());
        let age = Age {
            aging: queue.aging,
            base: queue.priority,
            now_ms,
        };
        let mut line = Line::new(queue, jobs, running, env, &usage, age);
        if let Some(turn) = line.turn(lines.len(), &age) {
            turns.push(Reverse(turn));
        }
        lines.push((queue, env_name, age, line));
    }
    while let Some(Reverse(turn)) = turns.pop() {
        let (queue, env_name, age, line) = &mut lines[turn.line];
        let queue: &QueueState = queue;
        let Some(env) = envs.get_mut(*env_name) else {
            continue;
        };
        if age.aging.is_none() {
            while line.step(&mut plan, queue, env, age, config) {}
        } else {
            line.step(&mut plan, queue, env, age, config);
            if let Some(turn) = line.turn(turn.line, age) {
                turns.push(Reverse(turn));
            }
        }
    }

    // Jobs of queues the snapshot does not know, by queue name.
    let mut unknown: Vec<(&str, Vec<&PendingJob>)> = pending_by_queue.rest().collect();
    unknown.sort_by(|a, b| a.0.cmp(b.0));
    for (_, jobs) in unknown {
        skip_all(&mut plan, jobs, &SkipReason::UnknownQueue);
    }
    plan
}

/// Names numbered in the order they first appear. A cycle looks up the queue and the share of
/// every running and pending job: a name numbered recently is found by its address (hosts
/// share one string per name); otherwise a few names are found by a scan (by address first,
/// then by text), more by a hash map (with a fixed seed; only looked up, never iterated): over
/// an ordered map, it makes a forecast's rollout at 1,000 shares a quarter faster
/// (docs/benchmarks.md, "Cost" of start-time estimates).
#[derive(Default)]
struct Names<'a> {
    names: Vec<&'a str>,
    many: Option<NameNumbers<'a>>,
    /// Names numbered recently, by their text's address (see [`Names::slot`]): hosts share
    /// one string per name, so most lookups end here, without a scan or a hash of the text.
    recent: [Option<(&'a str, usize)>; Names::RECENT],
}

/// Names' numbers by their text, hashed with a fixed seed.
#[allow(clippy::disallowed_types)] // Only looked up, never iterated: no order leaks into a plan.
pub(crate) type NameNumbers<'a> = std::collections::HashMap<&'a str, usize, FixedState>;

/// Fair shares' decayed usage by (queue, share), hashed with a fixed seed (one probe a share,
/// where an ordered map of 1,000 shares compared names ten times).
#[allow(clippy::disallowed_types)] // Only looked up, never iterated: no order leaks into a plan.
type UsageByShare<'a> = std::collections::HashMap<(&'a str, &'a str), ShareUsage, FixedState>;

impl<'a> Names<'a> {
    /// Names kept in a list before they are mapped.
    const SCANNED: usize = 16;

    fn get(&self, name: &str) -> Option<usize> {
        match &self.many {
            Some(many) => many.get(name).copied(),
            None => self
                .names
                .iter()
                .position(|n| std::ptr::eq(*n, name))
                .or_else(|| self.names.iter().position(|n| *n == name)),
        }
    }

    /// Slots of [`Names::recent`].
    const RECENT: usize = 32;

    /// Where `name` is kept among the recent names: by its address, leaving out the lowest
    /// four bits (allocations are aligned, so they tell names apart poorly).
    fn slot(name: &str) -> usize {
        (name.as_ptr() as usize >> 4) % Self::RECENT
    }

    /// The number of `name`, numbering it if it is new.
    #[inline]
    fn number(&mut self, name: &'a str) -> usize {
        let slot = Self::slot(name);
        match self.recent[slot] {
            Some((recent, i)) if std::ptr::eq(recent, name) => i,
            _ => self.number_anew(name, slot),
        }
    }

    /// [`Names::number`] of a name not among the recent ones (kept apart, so that the common
    /// case inlines into its callers).
    #[inline(never)]
    fn number_anew(&mut self, name: &'a str, slot: usize) -> usize {
        let i = self.get(name).unwrap_or_else(|| self.add(name));
        self.recent[slot] = Some((name, i));
        i
    }

    /// Numbers a name it does not have yet.
    fn add(&mut self, name: &'a str) -> usize {
        let i = self.names.len();
        self.names.push(name);
        match &mut self.many {
            Some(many) => {
                many.insert(name, i);
            }
            None if self.names.len() > Self::SCANNED => {
                let many = self.names.iter().enumerate().map(|(i, n)| (*n, i));
                self.many = Some(many.collect());
            }
            None => {}
        }
        i
    }
}

/// Items grouped by a name, in the order each name first appears.
struct Groups<'a, T> {
    names: Names<'a>,
    groups: Vec<Vec<&'a T>>,
}

impl<'a, T> Groups<'a, T> {
    fn of(items: &'a [T], name: impl Fn(&'a T) -> &'a str) -> Self {
        let mut grouped = Self {
            names: Names::default(),
            groups: Vec::new(),
        };
        for item in items {
            let i = grouped.names.number(name(item));
            if i == grouped.groups.len() {
                grouped.groups.push(Vec::new());
            }
            grouped.groups[i].push(item);
        }
        grouped
    }

    fn get(&self, name: &str) -> &[&'a T] {
        self.names
            .get(name)
            .map_or(&[][..], |i| self.groups[i].as_slice())
    }

    /// Takes a group out (an empty group afterwards counts as absent).
    fn take(&mut self, name: &str) -> Option<Vec<&'a T>> {
        let i = self.names.get(name)?;
        Some(std::mem::take(&mut self.groups[i])).filter(|g| !g.is_empty())
    }

    fn iter(&self) -> impl Iterator<Item = (&'a str, &[&'a T])> {
        let names = self.names.names.iter().copied();
        names.zip(self.groups.iter().map(Vec::as_slice))
    }

    /// The groups not taken, in first-appearance order.
    fn rest(self) -> impl Iterator<Item = (&'a str, Vec<&'a T>)> {
        let names = self.names.names.into_iter();
        names.zip(self.groups).filter(|(_, g)| !g.is_empty())
    }
}

fn skip_all(plan: &mut Plan, mut jobs: Vec<&PendingJob>, reason: &SkipReason) {
    jobs.sort_by(|a, b| a.job_id.cmp(&b.job_id));
    for job in jobs {
        plan.skips.push(Skip {
            job_id: job.job_id.clone(),
            reason: reason.clone(),
        });
    }
}

/// How long a queue's jobs have waited counts toward their priority (`Aging`).
#[derive(Debug, Clone, Copy)]
struct Age {
    aging: Option<Aging>,
    /// The queue's priority.
    base: u32,
    now_ms: i64,
}

impl Age {
    /// The priority `job` is evaluated at.
    fn priority(&self, job: &PendingJob) -> u32 {
        self.aging.map_or(self.base, |aging| {
            aging.priority(self.base, self.now_ms.saturating_sub(job.runnable_at_ms))
        })
    }

    /// Since when `job` has been in line, if it is overdue (aged to the ceiling); `i64::MAX`
    /// (after every overdue job) otherwise.
    fn overdue_since(&self, job: &PendingJob) -> i64 {
        match self.aging {
            Some(aging)
                if aging.overdue(self.base, self.now_ms.saturating_sub(job.runnable_at_ms)) =>
            {
                job.runnable_at_ms
            }
            _ => i64::MAX,
        }
    }
}

/// A queue's turn: the next of its jobs to consider, ranked against the other queues' next
/// jobs. Lowest first: evaluated priority (descending), overdue jobs oldest first, then the
/// queue's line number (its own priority descending, then its name). Without aging every job of
/// a queue has the same rank, so queues go one after the other in priority order (rule 2).
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Turn {
    priority: Reverse<u32>,
    overdue_since: i64,
    /// Index of the queue's line.
    line: usize,
}

/// A share's place in the fair-share interleaving: (overdue since, score, index of the share
/// in identifier order). A share whose next job is overdue goes first, oldest first; then the
/// lowest score. `f64::total_cmp` makes the order total.
#[derive(Debug, Clone, PartialEq)]
struct Ranked(i64, f64, usize);
impl Eq for Ranked {}
impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0
            .cmp(&other.0)
            .then_with(|| self.1.total_cmp(&other.1))
            .then_with(|| self.2.cmp(&other.2))
    }
}

/// A fair-share queue's shares: its weight, decayed average and instances held, and its
/// waiting jobs in order (rule 3).
struct ShareState<'a> {
    weight: f64,
    average: f64,
    held: u64,
    jobs: std::vec::IntoIter<&'a PendingJob>,
}

impl ShareState<'_> {
    /// Its place in line, if it has jobs left.
    fn rank(&self, i: usize, age: &Age) -> Option<Ranked> {
        let next = self.jobs.as_slice().first()?;
        let score = score(self.average, self.held, self.weight);
        Some(Ranked(age.overdue_since(next), score, i))
    }
}

/// A queue's waiting jobs in the order its policy gives them out (rule 3).
enum Line<'a> {
    /// FIFO, and the head that blocks the rest under `strict_fifo`.
    Fifo {
        jobs: std::iter::Peekable<std::vec::IntoIter<&'a PendingJob>>,
        blocked_by: Option<SharedStr>,
    },
    /// Fair share: shares interleaved by rank, lowest first; only shares with jobs left are
    /// in `order`.
    FairShare {
        shares: Vec<ShareState<'a>>,
        order: BinaryHeap<Reverse<Ranked>>,
        /// `computeReservation`'s instances (rule 5).
        reserve: u64,
    },
    /// A quota-managed queue, planned in one turn by [`plan_quota_queue`].
    Quota {
        jobs: Vec<&'a PendingJob>,
        running: Vec<&'a RunningJob>,
    },
}

impl<'a> Line<'a> {
    fn new(
        queue: &'a QueueState,
        mut jobs: Vec<&'a PendingJob>,
        running: &[&'a RunningJob],
        env: &EnvPlan<'a>,
        usage: &UsageByShare,
        age: Age,
    ) -> Self {
        let now_ms = age.now_ms;
        match &queue.policy {
            QueuePolicy::Fifo => {
                jobs.sort_by(fifo);
                Line::Fifo {
                    jobs: jobs.into_iter().peekable(),
                    blocked_by: None,
                }
            }
            QueuePolicy::QuotaShare(_) => Line::Quota {
                jobs,
                running: running.to_vec(),
            },
            QueuePolicy::FairShare(policy) => {
                let half_life = policy.share_decay_s();
                // Active shares: with jobs waiting or running in this queue. Per share, its
                // waiting jobs and the instances its running jobs hold.
                type Share<'a> = (&'a str, Vec<&'a PendingJob>, u64);
                fn slot<'s, 'a>(
                    names: &mut Names<'a>,
                    shares: &'s mut Vec<Share<'a>>,
                    share: &'a str,
                ) -> &'s mut Share<'a> {
                    let i = names.number(share);
                    if i == shares.len() {
                        shares.push((share, Vec::new(), 0));
                    }
                    &mut shares[i]
                }
                let mut names = Names::default();
                let mut by_share: Vec<Share> = Vec::new();
                for job in jobs {
                    let share = job.share.as_deref().unwrap_or_default();
                    slot(&mut names, &mut by_share, share).1.push(job);
                }
                for job in running {
                    if let Some(share) = job.share.as_deref() {
                        slot(&mut names, &mut by_share, share).2 += job.instances.total();
                    }
                }
                let reserve = match (policy.compute_reservation, env.pool.total_max()) {
                    (Some(r), Some(max)) => reserved_instances(max, r, by_share.len()),
                    _ => 0,
                };
                // The shares with waiting jobs, in identifier order, so that ranking by index
                // breaks ties by share identifier.
                by_share.retain(|(_, jobs, _)| !jobs.is_empty());
                by_share.sort_unstable_by(|a, b| a.0.cmp(b.0));
                let weights = policy.weights();
                let shares: Vec<ShareState> = by_share
                    .into_iter()
                    .map(|(share, mut list, held)| {
                        list.sort_by(within_share);
                        let usage = usage.get(&(queue.name.as_str(), share)).copied().unwrap_or(
                            ShareUsage {
                                instance_seconds: 0.0,
                                at_ms: now_ms,
                            },
                        );
                        ShareState {
                            weight: weights.of(share),
                            average: usage
                                .advance(now_ms, 0, half_life)
                                .average_instances(half_life),
                            held,
                            jobs: list.into_iter(),
                        }
                    })
                    .collect();
                let order = shares
                    .iter()
                    .enumerate()
                    .filter_map(|(i, s)| s.rank(i, &age).map(Reverse))
                    .collect();
                Line::FairShare {
                    shares,
                    order,
                    reserve,
                }
            }
        }
    }

    /// The job the line gives out next.
    fn peek(&mut self) -> Option<&'a PendingJob> {
        match self {
            Line::Fifo { jobs, .. } => jobs.peek().copied(),
            Line::FairShare { shares, order, .. } => {
                let Reverse(Ranked(_, _, i)) = order.peek()?;
                shares[*i].jobs.as_slice().first().copied()
            }
            Line::Quota { jobs, .. } => jobs.first().copied(),
        }
    }

    /// The line's next turn, if it has jobs left.
    fn turn(&mut self, line: usize, age: &Age) -> Option<Turn> {
        let next = self.peek()?;
        Some(Turn {
            priority: Reverse(age.priority(next)),
            overdue_since: age.overdue_since(next),
            line,
        })
    }

    /// Considers the next job (a quota-managed queue's jobs all at once), if any; whether there
    /// may be more. `age` says when it is.
    fn step(
        &mut self,
        plan: &mut Plan,
        queue: &'a QueueState,
        env: &mut EnvPlan<'a>,
        age: &Age,
        config: &Config,
    ) -> bool {
        let now_ms = age.now_ms;
        match self {
            Line::Fifo { jobs, blocked_by } => {
                let Some(job) = jobs.next() else {
                    return false;
                };
                if let Some(head) = blocked_by {
                    let reason = SkipReason::BehindHead {
                        head_job_id: head.clone(),
                    };
                    plan.skips.push(Skip {
                        job_id: job.job_id.clone(),
                        reason,
                    });
                    return true;
                }
                let outcome = consider(plan, queue, job, env, 0, now_ms, config);
                if outcome == Outcome::Waiting && config.strict_fifo {
                    *blocked_by = Some(job.job_id.clone());
                }
                true
            }
            Line::FairShare {
                shares,
                order,
                reserve,
            } => {
                // The first share's rank is replaced in place (one sift instead of a pop and a
                // push); ranks are distinct, so the order is the same.
                let Some(mut first) = order.peek_mut() else {
                    return false;
                };
                let Reverse(Ranked(_, _, i)) = *first;
                let state = &mut shares[i];
                let Some(job) = state.jobs.next() else {
                    PeekMut::pop(first);
                    return true;
                };
                if consider(plan, queue, job, env, *reserve, now_ms, config) == Outcome::Dispatched
                {
                    state.held += job.instances.total();
                }
                match state.rank(i, age) {
                    Some(rank) => *first = Reverse(rank),
                    None => {
                        PeekMut::pop(first);
                    }
                }
                true
            }
            // A quota-managed queue is planned in one step.
            Line::Quota { jobs, running } => {
                let QueuePolicy::QuotaShare(shares) = &queue.policy else {
                    unreachable!("a quota line is made only for a quota-share queue");
                };
                let jobs = std::mem::take(jobs);
                plan_quota_queue(plan, queue, shares, jobs, running, env, now_ms, config);
                false
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Dispatched,
    /// Does not fit now (it may have become the head).
    Waiting,
    /// Skipped for a reason that blocks nobody.
    Passed,
}

/// Decides one job: dispatch it or record why not.
fn consider<'a>(
    plan: &mut Plan,
    queue: &QueueState,
    job: &'a PendingJob,
    env: &mut EnvPlan<'a>,
    reserve: u64,
    now_ms: i64,
    config: &Config,
) -> Outcome {
    let mut skip = |reason: SkipReason| {
        plan.skips.push(Skip {
            job_id: job.job_id.clone(),
            reason,
        })
    };

    // Rule 6: backoff.
    if let Some(until_ms) = job.not_before_ms.filter(|t| *t > now_ms) {
        skip(SkipReason::Backoff { until_ms });
        return Outcome::Passed;
    }
    match env.pool.check(&job.instances) {
        Fit::Never { ty, needed, max } => {
            skip(SkipReason::ExceedsEnvironment {
                environment: env.name.clone(),
                unit: pool::unit(ty),
                needed,
                max,
            });
            Outcome::Passed
        }
        Fit::NotNow { ty, needed, free } => {
            // Rule 4: the first job that does not fit holds a reservation (backfill mode), if
            // it has waited as long as its queue asks (`reserve_after_ms`).
            let may_reserve =
                now_ms.saturating_sub(job.runnable_at_ms) >= queue.reserve_after_ms.unwrap_or(0);
            if !config.strict_fifo && may_reserve {
                env.hold_reservation(job, queue);
            }
            skip(SkipReason::InsufficientCapacity {
                environment: env.name.clone(),
                unit: pool::unit(ty),
                needed,
                free,
            });
            Outcome::Waiting
        }
        Fit::Fits => {
            // Rule 5: computeReservation.
            if reserve > 0 {
                let free_after = env
                    .pool
                    .total_free()
                    .unwrap_or(u64::MAX)
                    .saturating_sub(job.instances.total());
                if free_after < reserve {
                    skip(SkipReason::ComputeReservation { reserved: reserve });
                    return Outcome::Passed;
                }
            }
            match dispatch(plan, queue, job, env, now_ms, config) {
                Ok(()) => Outcome::Dispatched,
                Err(reason) => {
                    plan.skips.push(Skip {
                        job_id: job.job_id.clone(),
                        reason,
                    });
                    Outcome::Passed
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_keep_their_numbers_when_scanned_and_when_mapped() {
        let texts: Vec<String> = (0..40).map(|i| format!("share-{i:02}")).collect();
        let copies = texts.clone();
        let mut names = Names::default();
        for (i, text) in texts.iter().enumerate() {
            assert_eq!(names.number(text), i);
            // Found again by address, and by text in another string.
            assert_eq!(names.number(text), i);
            assert_eq!(names.number(&copies[i]), i);
            assert_eq!(names.get(&text.clone()), Some(i));
            // The last name's number is not another's.
            if i > 0 {
                assert_eq!(names.number(&texts[i - 1]), i - 1);
                assert_eq!(names.number(text), i);
            }
            // Past the scanned few, every earlier name is still found.
            assert_eq!(names.get(&texts[0]), Some(0));
        }
        assert!(names.many.is_some(), "40 names are mapped");
        assert_eq!(names.get("share-99"), None);
        // 80 strings share 32 slots of recent names: each keeps its number, in any order.
        for (i, text) in texts.iter().enumerate().rev() {
            assert_eq!(names.number(text), i);
            assert_eq!(names.number(&copies[i]), i);
            assert_eq!(names.number(&texts[i / 2]), i / 2);
        }
    }

    #[test]
    fn groups_keep_first_appearance_order_and_give_each_group_once() {
        let items = ["b", "a", "b", "c", "a"];
        let mut groups = Groups::of(&items, |s| s);
        let order: Vec<&str> = groups.iter().map(|(name, _)| name).collect();
        assert_eq!(order, ["b", "a", "c"]);
        assert_eq!(groups.get("a").len(), 2);
        assert_eq!(groups.take("b").map(|g| g.len()), Some(2));
        assert_eq!(groups.take("b"), None, "a taken group counts as absent");
        let left: Vec<&str> = groups.rest().map(|(name, _)| name).collect();
        assert_eq!(left, ["a", "c"]);
    }

    /// The stores keep each share's line in `trainyard_domain::order::runnable_rank` order and
    /// the planner sorts a share's heads with `within_share` (or `fifo` without a share): the two
    /// must agree, or a cycle would read the wrong heads.
    #[test]
    fn the_stores_dispatch_order_agrees_with_the_planners() {
        use trainyard_domain::job::ServiceJob;
        use trainyard_domain::order::{runnable_rank, share_key};
        use trainyard_domain::payload::TrainingRequest;
        use trainyard_domain::random::SplitMix64;

        for seed in 0..200 {
            let mut rng = SplitMix64::new(seed);
            let shared = rng.below(2) == 0;
            let jobs: Vec<ServiceJob> = (0..12)
                .map(|i| {
                    let training = TrainingRequest::single("t", "ml.g5.xlarge", 1);
                    let created = rng.below(4) as i64;
                    let mut job = ServiceJob::submitted(
                        format!("job-{:02}", rng.below(100) * 100 + i),
                        "j".into(),
                        "q".into(),
                        "{}",
                        training,
                        created,
                    );
                    job.share_identifier = shared.then(|| "team".to_owned());
                    job.scheduling_priority = (rng.below(3) > 0).then(|| rng.below(3) as u32);
                    job.runnable_at = (rng.below(2) == 0).then(|| created + rng.below(3) as i64);
                    job.line_offset_ms = rng.below(3) as i64;
                    job
                })
                .collect();
            let mut by_rank: Vec<&ServiceJob> = jobs.iter().collect();
            by_rank.sort_by(|a, b| runnable_rank(a).cmp(&runnable_rank(b)));
            // What the app hands the planner of each job (`RunnableHead` → `PendingJob`).
            let pending: Vec<PendingJob> = jobs
                .iter()
                .map(|job| PendingJob {
                    job_id: job.job_id.as_str().into(),
                    queue: job.job_queue.as_str().into(),
                    share: (!share_key(job).is_empty()).then(|| share_key(job).into()),
                    priority: job.priority(),
                    runnable_at_ms: job.runnable_at.unwrap_or(job.created_at),
                    instances: job.training.instances.clone().into(),
                    max_runtime_s: None,
                    not_before_ms: None,
                    line_offset_ms: job.line_offset_ms,
                })
                .collect();
            let mut by_planner: Vec<&PendingJob> = pending.iter().collect();
            by_planner.sort_by(if shared { within_share } else { fifo });
            let ranked: Vec<&str> = by_rank.iter().map(|j| j.job_id.as_str()).collect();
            let planned: Vec<&str> = by_planner.iter().map(|j| j.job_id.as_str()).collect();
            assert_eq!(ranked, planned, "seed {seed}");
        }
    }
}
