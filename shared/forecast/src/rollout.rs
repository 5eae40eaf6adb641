//! One rollout: the real planner run forward in virtual time from a snapshot, with running
//! attempts ending when a sampled runtime says, dispatched jobs running for a sampled runtime,
//! and new jobs arriving at each line's recent rate. What comes out is when each waiting job of
//! the snapshot was dispatched, if it was within the horizon.
//!
//! The planner sees in each step what a host's cycle would: the environments and queues of the
//! snapshot, every running attempt, and the first `free + heads_extra` jobs of each line (the
//! order of `trainyard_domain::order`). Capacity in use comes from the running attempts (the
//! snapshot's `in_use` records are a host's and are not carried forward).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use trainyard_domain::random::SplitMix64;
use trainyard_scheduler::fair_share::ShareUsage;
use trainyard_scheduler::{
    Config, PendingJob, QueuePolicy, RunningJob, ShareKey, SharedStr, Snapshot, plan_cycle,
};

use crate::history::{Arrival, Family, History, Line};

/// How far and how finely rollouts look ahead.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// Rollouts per forecast.
    pub rollouts: u32,
    /// A job not dispatched this far ahead is "beyond the horizon".
    pub horizon_s: u64,
    /// Heads planned per line beyond its environment's free instances (as a host's cycle).
    pub heads_extra: usize,
    /// The shortest step between two planner runs, in seconds.
    pub min_step_s: u64,
    /// Steps grow with the time looked ahead: at least this fraction of it. Start times are
    /// resolved to about this fraction of the wait, far finer than the estimates' spread. Fine
    /// steps matter beyond resolution: instances that free within one step pile up, and a job
    /// of many instances then starts on them, where a host's cycle at each release would have
    /// given each to a smaller job (5% made the multi-instance sweeps of replayed Philly start
    /// far too early once their runtimes were drawn by their limits; 1% costs a rollout about
    /// 2.5 times as much).
    pub step_fraction: f64,
    /// Most jobs arriving in one rollout, all lines together.
    pub max_arrivals: usize,
    /// Seed of the first rollout; rollout `k` uses `mix64(seed + k)`.
    pub seed: u64,
    /// Wall time after which a forecast starts no more rollouts, once it has run
    /// [`Self::min_rollouts`]: a host's CPU budget per round, whatever the backlog. `None` runs
    /// all [`Self::rollouts`] (the simulator, whose replays must not depend on the machine).
    pub budget: Option<std::time::Duration>,
    /// Rollouts run whatever the budget.
    pub min_rollouts: u32,
}

impl Options {
    /// [`Self::horizon_s`] in milliseconds.
    pub fn horizon_ms(&self) -> i64 {
        secs_ms(self.horizon_s)
    }
}

impl Default for Options {
    fn default() -> Self {
        Self {
            rollouts: 32,
            horizon_s: 7 * 86_400,
            heads_extra: 16,
            min_step_s: 60,
            step_fraction: 0.01,
            max_arrivals: 2_000,
            seed: 0,
            budget: None,
            min_rollouts: 8,
        }
    }
}

/// What a rollout draws runtimes and arrivals from.
#[derive(Debug, Clone, Copy)]
pub enum World<'a> {
    /// Runtimes sampled from history (capped by `MaxRuntimeInSeconds`), arrivals at each line's
    /// recent rate.
    Sampled(&'a History),
    /// Slurm's shadow schedule: every attempt runs to its `MaxRuntimeInSeconds`, nothing
    /// arrives. The baseline the sampled estimates are measured against.
    Shadow,
}

/// A line's future arrivals.
struct Arrivals {
    line: Line,
    rate_per_ms: f64,
    like: Vec<Arrival>,
    next_ms: i64,
}

/// The world of one rollout.
struct Rollout<'a> {
    world: World<'a>,
    planner: &'a Config,
    options: &'a Options,
    rng: SplitMix64,
    snapshot: Snapshot,
    /// When each of `snapshot.running` ends, in the same order.
    ends: Vec<i64>,
    /// Each line's waiting jobs in order; dispatches take from the front.
    lines: BTreeMap<Line, VecDeque<PendingJob>>,
    /// The line of each waiting job (a dispatch names the job and its queue, not its share).
    line_of_job: BTreeMap<SharedStr, Line>,
    environment_of: BTreeMap<SharedStr, String>,
    capacity: BTreeMap<String, u64>,
    half_life_s: BTreeMap<SharedStr, u32>,
    shares: Shares,
    arrivals: Vec<Arrivals>,
    arrived: usize,
}

/// The shares a rollout accounts fair-share usage for, numbered once, so that a step sums what
/// each holds without looking its name up (at 1,000 shares, three searches of a map of 1,000
/// names for each running attempt and step).
#[derive(Default)]
struct Shares {
    numbers: BTreeMap<ShareKey, usize>,
    keys: Vec<ShareKey>,
    /// Whether the snapshot's usage has an entry for each share.
    in_usage: Vec<bool>,
    /// The share of each of `snapshot.running`, in the same order.
    of_running: Vec<Option<usize>>,
    /// The share of each entry of `snapshot.usage`, in its order, and its queue's half-life
    /// (`None`: not a fair-share queue, left as it is).
    of_usage: Vec<(usize, Option<u32>)>,
}

impl Shares {
    /// The number of a job's share (`None` for a job without one).
    fn number(&mut self, queue: &SharedStr, share: Option<&SharedStr>) -> Option<usize> {
        let key = ShareKey {
            queue: queue.clone(),
            share: share?.clone(),
        };
        Some(self.number_key(&key))
    }

    fn number_key(&mut self, key: &ShareKey) -> usize {
        if let Some(n) = self.numbers.get(key) {
            return *n;
        }
        let n = self.keys.len();
        self.numbers.insert(key.clone(), n);
        self.keys.push(key.clone());
        self.in_usage.push(false);
        n
    }

    /// Numbers the shares of `usage` (all of its entries) and notes their order.
    fn index_usage(
        &mut self,
        usage: &BTreeMap<ShareKey, ShareUsage>,
        half_life_s: &BTreeMap<SharedStr, u32>,
    ) {
        self.of_usage = usage
            .keys()
            .map(|key| {
                let n = self.number_key(key);
                self.in_usage[n] = true;
                (n, half_life_s.get(&key.queue).copied())
            })
            .collect();
    }
}

/// Where a waiting job stands in its line (`trainyard_domain::order::runnable_rank`).
fn rank(job: &PendingJob) -> (Reverse<u32>, i64, &str) {
    let priority = if job.share.is_some() { job.priority } else { 0 };
    (Reverse(priority), job.line_at_ms(), &job.job_id)
}

fn line_of(queue: &SharedStr, share: Option<&SharedStr>) -> Line {
    (queue.clone(), share.cloned())
}

fn cap_s(max_runtime_s: Option<u64>, planner: &Config) -> u64 {
    max_runtime_s.unwrap_or(planner.default_runtime_s)
}

/// When each of the snapshot's waiting jobs would be dispatched in one rollout from `now_ms`;
/// a job missing from the result was not dispatched within the horizon.
pub fn roll(
    snapshot: &Snapshot,
    now_ms: i64,
    planner: &Config,
    world: World<'_>,
    options: &Options,
    rng: SplitMix64,
) -> BTreeMap<SharedStr, i64> {
    let mut rollout = Rollout::new(snapshot, now_ms, planner, world, options, rng);
    let targets: BTreeSet<SharedStr> = snapshot.pending.iter().map(|p| p.job_id.clone()).collect();
    rollout.run(now_ms, &targets)
}

impl<'a> Rollout<'a> {
    fn new(
        snapshot: &Snapshot,
        now_ms: i64,
        planner: &'a Config,
        world: World<'a>,
        options: &'a Options,
        mut rng: SplitMix64,
    ) -> Self {
        let mut lines: BTreeMap<Line, VecDeque<PendingJob>> = BTreeMap::new();
        let mut line_of_job = BTreeMap::new();
        for job in &snapshot.pending {
            let line = line_of(&job.queue, job.share.as_ref());
            line_of_job.insert(job.job_id.clone(), line.clone());
            lines.entry(line).or_default().push_back(job.clone());
        }
        for line in lines.values_mut() {
            line.make_contiguous().sort_by(|a, b| rank(a).cmp(&rank(b)));
        }
        let environment_of = snapshot
            .queues
            .iter()
            .filter_map(|q| Some((SharedStr::from(q.name.as_str()), q.environment.clone()?)))
            .collect();
        let capacity = snapshot
            .environments
            .iter()
            .map(|e| {
                let total = e.limits.iter().find(|l| l.is_total());
                let max = match total {
                    Some(l) => u64::from(l.max_capacity),
                    None => e.limits.iter().map(|l| u64::from(l.max_capacity)).sum(),
                };
                (e.name.clone(), max)
            })
            .collect();
        let half_life_s = snapshot
            .queues
            .iter()
            .filter_map(|q| match &q.policy {
                QueuePolicy::FairShare(p) => Some((q.name.as_str().into(), p.share_decay_s())),
                _ => None,
            })
            .collect();
        // Running attempts end when their sampled runtime says (in the shadow world, at their
        // cap, as the planner itself assumes).
        let ends = snapshot
            .running
            .iter()
            .map(|job| match world {
                World::Shadow => job.expected_end_ms,
                World::Sampled(history) => {
                    let family = Family::of(&job.queue, job.share.as_ref(), job.instances.total());
                    let elapsed_s =
                        u64::try_from((now_ms - job.started_at_ms) / 1_000).unwrap_or(0);
                    let cap = u64::try_from((job.expected_end_ms - job.started_at_ms) / 1_000)
                        .unwrap_or(0);
                    let total =
                        history.sample_runtime(&family, elapsed_s, cap, Some(cap), &mut rng);
                    job.started_at_ms + i64::try_from(total).unwrap_or(i64::MAX / 4) * 1_000
                }
            })
            .collect();
        let known_queues: BTreeSet<&str> =
            snapshot.queues.iter().map(|q| q.name.as_str()).collect();
        let arrivals = match world {
            World::Shadow => Vec::new(),
            World::Sampled(history) => history
                .arrival_rates(now_ms)
                .into_iter()
                .filter(|(line, rate, _)| *rate > 0.0 && known_queues.contains(line.0.as_str()))
                .map(|(line, rate_per_ms, like)| Arrivals {
                    line,
                    rate_per_ms,
                    like,
                    next_ms: now_ms,
                })
                .collect(),
        };
        let mut shares = Shares::default();
        shares.of_running = snapshot
            .running
            .iter()
            .map(|job| shares.number(&job.queue, job.share.as_ref()))
            .collect();
        shares.index_usage(&snapshot.usage, &half_life_s);
        let mut rollout = Self {
            world,
            planner,
            options,
            rng,
            snapshot: Snapshot {
                environments: snapshot.environments.clone(),
                queues: snapshot.queues.clone(),
                running: snapshot.running.clone(),
                pending: Vec::new(),
                usage: snapshot.usage.clone(),
                in_use: BTreeMap::new(),
            },
            ends,
            lines,
            line_of_job,
            environment_of,
            capacity,
            half_life_s,
            shares,
            arrivals,
            arrived: 0,
        };
        for i in 0..rollout.arrivals.len() {
            rollout.draw_next_arrival(i);
        }
        rollout
    }

    fn run(&mut self, now_ms: i64, targets: &BTreeSet<SharedStr>) -> BTreeMap<SharedStr, i64> {
        let horizon_ms = now_ms.saturating_add(self.options.horizon_ms());
        let mut starts = BTreeMap::new();
        let mut t = now_ms;
        loop {
            self.fill_heads();
            let plan = plan_cycle(&self.snapshot, t, self.planner);
            for preemption in &plan.preemptions {
                self.requeue(&preemption.victim_job_id, t);
            }
            for dispatch in &plan.dispatches {
                if let Some(job) = self.take_pending(&dispatch.job_id) {
                    if targets.contains(&job.job_id) {
                        starts.entry(job.job_id.clone()).or_insert(t);
                    }
                    self.start(job, t);
                }
            }
            if starts.len() == targets.len() {
                break;
            }
            let step = secs_ms(self.options.min_step_s)
                .max(((t - now_ms) as f64 * self.options.step_fraction) as i64);
            let Some(next) = self.next_event(t) else {
                break; // Nothing will change: whatever waits now waits for ever.
            };
            let next = next.max(t + step);
            if next > horizon_ms {
                break;
            }
            self.advance(t, next);
            t = next;
        }
        starts
    }

    /// Puts the first jobs of each line, as many as a host's cycle would read, in the snapshot
    /// (in the space the last step's took).
    fn fill_heads(&mut self) {
        let mut heads = std::mem::take(&mut self.snapshot.pending);
        heads.clear();
        self.extend_heads(&mut heads);
        self.snapshot.pending = heads;
    }

    fn extend_heads(&self, heads: &mut Vec<PendingJob>) {
        let mut held: BTreeMap<&str, u64> = BTreeMap::new();
        for job in &self.snapshot.running {
            if let Some(env) = self.environment_of.get(&job.queue) {
                *held.entry(env).or_default() += job.instances.total();
            }
        }
        for ((queue, _), line) in &self.lines {
            let free = self.environment_of.get(queue).map_or(0, |env| {
                let max = self.capacity.get(env).copied().unwrap_or(0);
                max.saturating_sub(held.get(env.as_str()).copied().unwrap_or(0))
            });
            let n = usize::try_from(free)
                .unwrap_or(usize::MAX)
                .saturating_add(self.options.heads_extra);
            heads.extend(line.iter().take(n).cloned());
        }
    }

    fn take_pending(&mut self, job_id: &SharedStr) -> Option<PendingJob> {
        let line = self.lines.get_mut(&self.line_of_job.remove(job_id)?)?;
        // Dispatches come from the front of a line.
        let i = line.iter().position(|j| j.job_id == *job_id)?;
        line.remove(i)
    }

    /// A dispatched job holds its instances until its sampled runtime is up.
    fn start(&mut self, job: PendingJob, t: i64) {
        let cap = cap_s(job.max_runtime_s, self.planner);
        let runtime_s = match self.world {
            World::Shadow => cap,
            World::Sampled(history) => {
                let family = Family::of(&job.queue, job.share.as_ref(), job.instances.total());
                history.sample_runtime(&family, 0, cap, job.max_runtime_s, &mut self.rng)
            }
        };
        self.ends.push(t.saturating_add(secs_ms(runtime_s)));
        let share = self.shares.number(&job.queue, job.share.as_ref());
        self.shares.of_running.push(share);
        self.snapshot.running.push(RunningJob {
            job_id: job.job_id,
            queue: job.queue,
            share: job.share,
            priority: job.priority,
            started_at_ms: t,
            instances: job.instances,
            expected_end_ms: t.saturating_add(secs_ms(cap)),
            checkpoint_ms: None,
            checkpoint_interval_ms: None,
            preemptions: 0,
            resumable: false,
            stopping: false,
        });
    }

    /// A preempted attempt frees its instances now and its job waits again, from now.
    fn requeue(&mut self, job_id: &SharedStr, t: i64) {
        let Some(i) = self
            .snapshot
            .running
            .iter()
            .position(|r| r.job_id == *job_id)
        else {
            return;
        };
        let job = self.snapshot.running.swap_remove(i);
        self.ends.swap_remove(i);
        self.shares.of_running.swap_remove(i);
        let max_runtime_s = u64::try_from((job.expected_end_ms - job.started_at_ms) / 1_000).ok();
        self.enqueue(PendingJob {
            job_id: job.job_id,
            queue: job.queue,
            share: job.share,
            priority: job.priority,
            runnable_at_ms: t,
            instances: job.instances,
            max_runtime_s,
            not_before_ms: None,
            line_offset_ms: 0,
        });
    }

    fn enqueue(&mut self, job: PendingJob) {
        let key = line_of(&job.queue, job.share.as_ref());
        self.line_of_job.insert(job.job_id.clone(), key.clone());
        let line = self.lines.entry(key).or_default();
        let at = line.partition_point(|j| rank(j) < rank(&job));
        line.insert(at, job);
    }

    /// The next time something changes after `t`: an attempt ends, a job arrives or a backoff
    /// runs out.
    fn next_event(&self, t: i64) -> Option<i64> {
        let end = self.ends.iter().copied().min();
        let arrival = self.arrivals.iter().map(|a| a.next_ms).min();
        let backoff = self
            .lines
            .values()
            .flatten()
            .filter_map(|j| j.not_before_ms)
            .filter(|at| *at > t)
            .min();
        [end, arrival, backoff].into_iter().flatten().min()
    }

    /// Moves the world from `from` to `to`: fair-share usage grows with what each share held,
    /// attempts that ended by `to` release their instances, and jobs due by `to` arrive.
    fn advance(&mut self, from: i64, to: i64) {
        // What each share held since `from`, `None` for a share no running attempt belongs to.
        let mut held: Vec<Option<u64>> = vec![None; self.shares.keys.len()];
        for (job, share) in self.snapshot.running.iter().zip(&self.shares.of_running) {
            if let Some(n) = share {
                *held[*n].get_or_insert(0) += job.instances.total();
            }
        }
        let mut added = false;
        for (n, _) in held.iter().enumerate().filter(|(_, h)| h.is_some()) {
            let key = &self.shares.keys[n];
            if !self.shares.in_usage[n] && self.half_life_s.contains_key(&key.queue) {
                self.snapshot.usage.insert(
                    key.clone(),
                    ShareUsage {
                        instance_seconds: 0.0,
                        at_ms: from,
                    },
                );
                added = true;
            }
        }
        if added {
            self.shares
                .index_usage(&self.snapshot.usage, &self.half_life_s);
        }
        let usages = self.snapshot.usage.values_mut();
        for (usage, (n, half_life_s)) in usages.zip(&self.shares.of_usage) {
            if let Some(half_life_s) = half_life_s {
                let instances = held.get(*n).copied().flatten().unwrap_or(0);
                *usage = usage.advance(to, instances, *half_life_s);
            }
        }
        let mut i = 0;
        while i < self.ends.len() {
            if self.ends[i] <= to {
                self.ends.swap_remove(i);
                self.snapshot.running.swap_remove(i);
                self.shares.of_running.swap_remove(i);
            } else {
                i += 1;
            }
        }
        for a in 0..self.arrivals.len() {
            while self.arrivals[a].next_ms <= to && self.arrived < self.options.max_arrivals {
                let arrivals = &self.arrivals[a];
                let like = &arrivals.like[self.rng.below(arrivals.like.len() as u64) as usize];
                let job = PendingJob {
                    job_id: format!("~arrival-{}", self.arrived).into(),
                    queue: arrivals.line.0.clone(),
                    share: arrivals.line.1.clone(),
                    priority: like.priority,
                    runnable_at_ms: arrivals.next_ms,
                    instances: like.instances.clone(),
                    max_runtime_s: like.max_runtime_s,
                    not_before_ms: None,
                    line_offset_ms: like.line_offset_ms,
                };
                self.arrived += 1;
                self.enqueue(job);
                self.draw_next_arrival(a);
            }
            if self.arrived >= self.options.max_arrivals {
                self.arrivals[a].next_ms = i64::MAX;
            }
        }
    }

    /// Poisson arrivals: exponential gaps at the line's rate.
    fn draw_next_arrival(&mut self, a: usize) {
        let u = 1.0 - self.rng.unit(); // (0, 1]
        let gap = -u.ln() / self.arrivals[a].rate_per_ms;
        let next = self.arrivals[a].next_ms as f64 + gap.max(1.0);
        self.arrivals[a].next_ms = if next >= i64::MAX as f64 / 2.0 {
            i64::MAX
        } else {
            next as i64
        };
    }
}

fn secs_ms(s: u64) -> i64 {
    i64::try_from(s)
        .unwrap_or(i64::MAX / 4_000)
        .saturating_mul(1_000)
}
