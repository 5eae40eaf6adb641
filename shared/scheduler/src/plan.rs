//! One cycle's plan: see the crate docs for the rules, numbered as in the code below.

use std::borrow::Cow;
use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BinaryHeap};

use serde::Serialize;

use crate::fair_share::{ShareUsage, reserved_instances, score};
use crate::pool::{Fit, Pool};
use crate::quota::plan_quota_queue;
use std::sync::Arc;

use crate::snapshot::{
    Config, Instances, PendingJob, QueuePolicy, QueueState, RunningJob, SharedStr, Snapshot,
};

/// Launch an attempt for a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Dispatch {
    /// The job.
    pub job_id: SharedStr,
    /// Its queue.
    pub queue: SharedStr,
    /// The environment whose capacity it takes.
    pub environment: SharedStr,
    /// Instances taken.
    pub instances: Arc<Instances>,
}

/// Stop a running attempt to make room for a waiting job (quota-managed queues only). The host
/// stops the attempt with `retry::PREEMPTED_REASON`; the job goes back to RUNNABLE.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Preemption {
    /// The job whose attempt is stopped.
    pub victim_job_id: SharedStr,
    /// The waiting job the capacity is for.
    pub for_job_id: SharedStr,
    /// Why this victim.
    pub reason: PreemptionReason,
}

/// Why a job is preempted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PreemptionReason {
    /// Cross-share: the victim runs on capacity its share borrowed, and the lender reclaims it.
    ReclaimBorrowed {
        /// The reclaiming (lending) share.
        quota_share: String,
        /// The borrowing share.
        victim_quota_share: String,
    },
    /// In-share: a job of strictly higher `schedulingPriority` in the same share.
    InSharePriority {
        /// The share.
        quota_share: String,
        /// The preemptor's priority.
        priority: u32,
        /// The victim's (strictly lower) priority.
        victim_priority: u32,
    },
}

impl std::fmt::Display for PreemptionReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::ReclaimBorrowed {
                quota_share,
                victim_quota_share,
            } => write!(
                f,
                "quota share {quota_share} reclaims capacity borrowed by quota share {victim_quota_share}"
            ),
            Self::InSharePriority {
                quota_share,
                priority,
                victim_priority,
            } => write!(
                f,
                "a job of priority {priority} in quota share {quota_share} preempts priority {victim_priority}"
            ),
        }
    }
}

/// Why `QUOTA_MANAGEMENT_LIMIT_EXCEEDED`: which bound the job can never fit (Batch's three texts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum QuotaLimitCause {
    /// The share may not borrow and its own limit is too small.
    ShareLimits,
    /// The share's limit plus its `borrowLimit` is too small.
    BorrowLimits,
    /// Even borrowing everything other shares could ever lend is not enough.
    BorrowableCapacity,
}

/// Why a runnable job was not dispatched in this cycle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SkipReason {
    /// Not enough free capacity now.
    InsufficientCapacity {
        /// Environment.
        environment: SharedStr,
        /// `NUM_INSTANCES` or an instance type.
        unit: Cow<'static, str>,
        /// Instances the job needs of the unit.
        needed: u64,
        /// Instances free of the unit.
        free: u64,
    },
    /// The job can never fit the environment as configured.
    ExceedsEnvironment {
        /// Environment.
        environment: SharedStr,
        /// The unit it exceeds.
        unit: Cow<'static, str>,
        /// Instances it needs.
        needed: u64,
        /// The limit (0 when the type is not offered).
        max: u64,
    },
    /// Capacity is held for the head job; starting this one would delay it.
    ReservedForHead {
        /// The waiting head job.
        head_job_id: SharedStr,
        /// Its queue.
        head_queue: SharedStr,
        /// When it is expected to start at the latest (epoch ms).
        head_start_ms: i64,
    },
    /// A strict FIFO queue whose head is waiting.
    BehindHead {
        /// The waiting head job.
        head_job_id: SharedStr,
    },
    /// Kept free for fair shares that are not active yet (`computeReservation`).
    ComputeReservation {
        /// Instances reserved.
        reserved: u64,
    },
    /// Retry backoff.
    Backoff {
        /// Not before (epoch ms).
        until_ms: i64,
    },
    /// The environment is disabled.
    EnvironmentDisabled {
        /// Environment.
        environment: SharedStr,
    },
    /// The queue has no (existing) service environment.
    NoEnvironment,
    /// The job's queue is not in the snapshot.
    UnknownQueue,
    /// The job names no quota share of its quota-managed queue.
    UnknownQuotaShare {
        /// The name it gave (empty when none).
        quota_share: String,
    },
    /// The job can never fit its quota share's limits plus what it may borrow.
    QuotaLimitExceeded {
        /// Quota share.
        quota_share: String,
        /// Instance type.
        unit: Cow<'static, str>,
        /// Instances it needs.
        needed: u64,
        /// The share's own limit.
        limit: u64,
        /// The most it could ever borrow on top.
        borrowable: u64,
        /// Which bound binds.
        cause: QuotaLimitCause,
    },
    /// The share's own limit is in use and it may not borrow (RESERVE or LEND).
    QuotaExhausted {
        /// Quota share.
        quota_share: String,
        /// Instance type.
        unit: Cow<'static, str>,
        /// Instances the job needs.
        needed: u64,
        /// The share's limit.
        limit: u64,
        /// Instances the share uses (including this cycle's decisions).
        in_use: u64,
    },
    /// Starting the job would borrow more than the share's `borrowLimit` allows.
    BorrowLimitReached {
        /// Quota share.
        quota_share: String,
        /// Instance type.
        unit: Cow<'static, str>,
        /// Instances the job needs.
        needed: u64,
        /// The share's limit.
        limit: u64,
        /// Instances the share uses.
        in_use: u64,
        /// The most it may borrow on top of its limit.
        borrow_limit: u64,
    },
    /// Free capacity exists, but it is the idle capacity of RESERVE shares, which is not lent.
    ReservedByQuotaShares {
        /// Instance type.
        unit: Cow<'static, str>,
        /// Instances the job needs.
        needed: u64,
        /// Instances free in the environment.
        free: u64,
        /// Of those, instances reserved by RESERVE shares.
        reserved: u64,
    },
    /// Running jobs are being preempted for this one; it starts once their capacity is released.
    WaitingForPreemptedCapacity {
        /// The jobs being preempted.
        victims: Vec<SharedStr>,
    },
}

impl SkipReason {
    /// The code that prefixes the reason's text (before ` - `): what kind of wait it is, without
    /// the figures of the moment. `jobStateTimeLimitActions` match on it, and a host can compare
    /// it with a stored reason without formatting the text.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InsufficientCapacity { .. } => "CAPACITY:SERVICE_ENVIRONMENT_FULL",
            Self::ExceedsEnvironment { .. } => "MISCONFIGURATION:SERVICE_ENVIRONMENT_MAX_RESOURCE",
            Self::ReservedForHead { .. } => "PRIORITY:RESERVED_FOR_HEAD",
            Self::BehindHead { .. } => "PRIORITY:BEHIND_HEAD_OF_QUEUE",
            Self::ComputeReservation { .. } => "FAIR_SHARE:COMPUTE_RESERVATION",
            Self::Backoff { .. } => "BACKOFF",
            Self::EnvironmentDisabled { .. } => "MISCONFIGURATION:SERVICE_ENVIRONMENT_DISABLED",
            Self::NoEnvironment => "MISCONFIGURATION:NO_SERVICE_ENVIRONMENT",
            Self::UnknownQueue => "MISCONFIGURATION:UNKNOWN_QUEUE",
            Self::UnknownQuotaShare { .. } => "MISCONFIGURATION:UNKNOWN_QUOTA_SHARE",
            Self::QuotaLimitExceeded { .. } => "MISCONFIGURATION:QUOTA_MANAGEMENT_LIMIT_EXCEEDED",
            Self::QuotaExhausted { .. } => "QUOTA:QUOTA_SHARE_EXHAUSTED",
            Self::BorrowLimitReached { .. } => "QUOTA:BORROW_LIMIT_REACHED",
            Self::ReservedByQuotaShares { .. } => "QUOTA:CAPACITY_RESERVED",
            Self::WaitingForPreemptedCapacity { .. } => "PREEMPTION:WAITING_FOR_PREEMPTED_CAPACITY",
        }
    }
}

impl std::fmt::Display for SkipReason {
    /// The status reason shown on the RUNNABLE job: its [`SkipReason::code`], ` - `, and what
    /// it waits for in words.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} - ", self.code())?;
        match self {
            Self::InsufficientCapacity {
                environment,
                unit,
                needed,
                free,
            } => write!(
                f,
                "needs {needed} {unit}, {free} free in service environment {environment}"
            ),
            Self::ExceedsEnvironment {
                environment,
                unit,
                needed,
                max,
            } => write!(
                f,
                "Service environment {environment} cannot meet the capacity requirement of the job: needs {needed} {unit}, the limit is {max}"
            ),
            Self::ReservedForHead {
                head_job_id,
                head_queue,
                head_start_ms,
            } => write!(
                f,
                "capacity is held for job {head_job_id} of queue {head_queue}, expected to start by {head_start_ms}; starting this job would delay it"
            ),
            Self::BehindHead { head_job_id } => write!(
                f,
                "the queue is strict FIFO and job {head_job_id} at its head is waiting for capacity"
            ),
            Self::ComputeReservation { reserved } => write!(
                f,
                "{reserved} instances are kept free for shares that are not active yet"
            ),
            Self::Backoff { until_ms } => {
                write!(f, "waiting to retry, not before {until_ms}")
            }
            Self::EnvironmentDisabled { environment } => {
                write!(f, "service environment {environment} is disabled")
            }
            Self::NoEnvironment => write!(f, "the job queue has no service environment"),
            Self::UnknownQueue => write!(f, "the job queue does not exist"),
            Self::UnknownQuotaShare { quota_share } => {
                write!(f, "the job queue has no quota share named '{quota_share}'")
            }
            Self::QuotaLimitExceeded {
                quota_share,
                unit,
                needed,
                limit,
                borrowable,
                cause,
            } => {
                let text = match cause {
                    QuotaLimitCause::ShareLimits => {
                        "Job requirements exceed quota share capacity limits."
                    }
                    QuotaLimitCause::BorrowLimits => {
                        "Job requirements exceed quota share capacity limits and borrow limits."
                    }
                    QuotaLimitCause::BorrowableCapacity => {
                        "Job requires borrowing that exceeds all configured borrowable capacity."
                    }
                };
                write!(
                    f,
                    "{text} Quota share {quota_share}: needs {needed} {unit}, limit {limit}, borrowable {borrowable}"
                )
            }
            Self::QuotaExhausted {
                quota_share,
                unit,
                needed,
                limit,
                in_use,
            } => write!(
                f,
                "needs {needed} {unit}; quota share {quota_share} uses {in_use} of its limit of {limit} and does not borrow"
            ),
            Self::BorrowLimitReached {
                quota_share,
                unit,
                needed,
                limit,
                in_use,
                borrow_limit,
            } => write!(
                f,
                "needs {needed} {unit}; quota share {quota_share} uses {in_use} against a limit of {limit} and may borrow at most {borrow_limit} more"
            ),
            Self::ReservedByQuotaShares {
                unit,
                needed,
                free,
                reserved,
            } => write!(
                f,
                "needs {needed} {unit} borrowed; {free} free, of which {reserved} are reserved by RESERVE quota shares"
            ),
            Self::WaitingForPreemptedCapacity { victims } => write!(
                f,
                "preempting {}; the job starts when their capacity is released",
                victims
                    .iter()
                    .map(SharedStr::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

/// A pending job not dispatched, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skip {
    /// The job.
    pub job_id: SharedStr,
    /// Why.
    pub reason: SkipReason,
}

/// The decisions of one cycle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct Plan {
    /// Attempts to launch, in decision order.
    pub dispatches: Vec<Dispatch>,
    /// Every other pending job, with its reason, in evaluation order.
    pub skips: Vec<Skip>,
    /// Running attempts to stop, in decision order (quota-managed queues only).
    pub preemptions: Vec<Preemption>,
}

/// The blocked head of an environment and the reservation it holds (EASY backfill).
pub(crate) struct Head {
    job_id: SharedStr,
    queue: SharedStr,
    /// When enough capacity will have freed for the head.
    shadow_ms: i64,
    /// Capacity left over at the shadow time once the head has started.
    extra: Pool,
}

/// Per-environment planning state. `'a` is the snapshot's: releases borrow its instances.
pub(crate) struct EnvPlan<'a> {
    pub(crate) name: SharedStr,
    enabled: bool,
    pub(crate) pool: Pool,
    /// (expected end, instances) of every attempt holding capacity, incl. this cycle's.
    releases: Vec<(i64, &'a Instances)>,
    head: Option<Head>,
}

impl EnvPlan<'_> {
    /// Rule 4: the earliest time `demand` fits, given the releases, and what is left then.
    fn reserve(&self, demand: &Instances) -> (i64, Pool) {
        let mut pool = self.pool.clone();
        let mut shadow = i64::MIN;
        if pool.check(demand) != Fit::Fits {
            // Releases in end order (ties by instances: releases equal in both are
            // interchangeable), until the demand fits. A heap: usually a few suffice.
            let mut releases: BinaryHeap<Reverse<(i64, &Instances)>> = self
                .releases
                .iter()
                .map(|(end, instances)| Reverse((*end, *instances)))
                .collect();
            while let Some(Reverse((end, instances))) = releases.pop() {
                pool.give(instances);
                shadow = end;
                if pool.check(demand) == Fit::Fits {
                    break;
                }
            }
        }
        pool.take(demand);
        (shadow, pool)
    }
}

fn total(instances: &Instances) -> u64 {
    instances.values().map(|n| u64::from(*n)).sum()
}

/// Plans one cycle. Pure: the same arguments give the same plan.
pub fn plan_cycle(snapshot: &Snapshot, now_ms: i64, config: &Config) -> Plan {
    let mut plan = Plan::default();

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
    // Running jobs by queue (in snapshot order within each): the queues' plans read only
    // their own.
    let running_by_queue = Groups::of(&snapshot.running, |job| &job.queue);
    for (queue, jobs) in running_by_queue.iter() {
        if let Some(env) = queue_env.get(queue).and_then(|e| envs.get_mut(e)) {
            for job in jobs {
                env.pool.take(&job.instances);
                env.releases.push((job.expected_end_ms, &job.instances));
            }
        }
    }

    // 2. Queues by priority (descending), then name.
    let mut queues: Vec<&QueueState> = snapshot.queues.iter().collect();
    queues.sort_by(|a, b| {
        b.priority
            .cmp(&a.priority)
            .then_with(|| a.name.cmp(&b.name))
    });
    let mut pending_by_queue = Groups::of(&snapshot.pending, |job| &job.queue);
    // Shares' decayed usage, looked up by (queue, share) without building keys.
    let usage: BTreeMap<(&str, &str), ShareUsage> = snapshot
        .usage
        .iter()
        .map(|(k, u)| ((k.queue.as_str(), k.share.as_str()), *u))
        .collect();

    for queue in queues {
        let Some(jobs) = pending_by_queue.take(queue.name.as_str()) else {
            continue;
        };
        let env = queue
            .environment
            .as_deref()
            .and_then(|name| envs.get_mut(name));
        let Some(env) = env else {
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
        plan_queue(&mut plan, queue, jobs, running, env, &usage, now_ms, config);
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
/// every running and pending job: a few names are found by a scan (by address first, for hosts
/// that share one string per name, then by text), more by an ordered map.
#[derive(Default)]
struct Names<'a> {
    names: Vec<&'a str>,
    many: Option<BTreeMap<&'a str, usize>>,
}

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

    /// The number of `name`, numbering it if it is new.
    fn number(&mut self, name: &'a str) -> usize {
        if let Some(i) = self.get(name) {
            return i;
        }
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

/// Rule 3: within a share (or a FIFO queue), priority desc, then age, then id.
pub(crate) fn within_share(a: &&PendingJob, b: &&PendingJob) -> Ordering {
    (Reverse(a.priority), a.runnable_at_ms, &a.job_id).cmp(&(
        Reverse(b.priority),
        b.runnable_at_ms,
        &b.job_id,
    ))
}

/// Rule 3: FIFO order.
pub(crate) fn fifo(a: &&PendingJob, b: &&PendingJob) -> Ordering {
    (a.runnable_at_ms, &a.job_id).cmp(&(b.runnable_at_ms, &b.job_id))
}

/// A share's place in the fair-share interleaving: (score, index of the share in identifier
/// order). `f64::total_cmp` makes the order total.
#[derive(Debug, Clone, PartialEq)]
struct Ranked(f64, usize);
impl Eq for Ranked {}
impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0
            .total_cmp(&other.0)
            .then_with(|| self.1.cmp(&other.1))
    }
}

/// Plans one queue: its pending `jobs` against `env`, knowing its `running` jobs.
#[allow(clippy::too_many_arguments)]
fn plan_queue<'a>(
    plan: &mut Plan,
    queue: &'a QueueState,
    mut jobs: Vec<&'a PendingJob>,
    running: &[&'a RunningJob],
    env: &mut EnvPlan<'a>,
    usage: &BTreeMap<(&str, &str), ShareUsage>,
    now_ms: i64,
    config: &Config,
) {
    match &queue.policy {
        QueuePolicy::Fifo => {
            jobs.sort_by(fifo);
            let mut blocked_by: Option<SharedStr> = None;
            for job in jobs {
                if let Some(head) = &blocked_by {
                    let reason = SkipReason::BehindHead {
                        head_job_id: head.clone(),
                    };
                    plan.skips.push(Skip {
                        job_id: job.job_id.clone(),
                        reason,
                    });
                    continue;
                }
                let outcome = consider(plan, queue, job, env, 0, now_ms, config);
                if outcome == Outcome::Waiting && config.strict_fifo {
                    blocked_by = Some(job.job_id.clone());
                }
            }
        }
        QueuePolicy::QuotaShare(shares) => {
            plan_quota_queue(plan, queue, shares, jobs, running, env, now_ms, config);
        }
        QueuePolicy::FairShare(policy) => {
            let half_life = policy.share_decay_s();
            // Active shares: with jobs waiting or running in this queue. Per share, its waiting
            // jobs and the instances its running jobs hold.
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
                    slot(&mut names, &mut by_share, share).2 += total(&job.instances);
                }
            }
            let reserve = match (policy.compute_reservation, env.pool.total_max()) {
                (Some(r), Some(max)) => reserved_instances(max, r, by_share.len()),
                _ => 0,
            };
            // The shares with waiting jobs, in identifier order.
            by_share.retain(|(_, jobs, _)| !jobs.is_empty());
            by_share.sort_unstable_by(|a, b| a.0.cmp(b.0));
            // Per share, computed once: its weight, decayed average and instances held.
            // Shares are indexed in identifier order, so ranking by (score, index) breaks ties by
            // share identifier.
            struct ShareState<'a> {
                weight: f64,
                average: f64,
                held: u64,
                jobs: std::vec::IntoIter<&'a PendingJob>,
            }
            let mut shares: Vec<ShareState> =
                by_share
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
                            weight: policy.weight_factor(share),
                            average: usage
                                .advance(now_ms, 0, half_life)
                                .average_instances(half_life),
                            held,
                            jobs: list.into_iter(),
                        }
                    })
                    .collect();
            let rank = |i: usize, s: &ShareState| Ranked(score(s.average, s.held, s.weight), i);
            // Lowest (score, index) first.
            let mut order: BinaryHeap<Reverse<Ranked>> = shares
                .iter()
                .enumerate()
                .map(|(i, s)| Reverse(rank(i, s)))
                .collect();
            while let Some(Reverse(Ranked(_, i))) = order.pop() {
                let state = &mut shares[i];
                let Some(job) = state.jobs.next() else {
                    continue;
                };
                if consider(plan, queue, job, env, reserve, now_ms, config) == Outcome::Dispatched {
                    state.held += total(&job.instances);
                }
                order.push(Reverse(rank(i, state)));
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
        Fit::Never { unit, needed, max } => {
            skip(SkipReason::ExceedsEnvironment {
                environment: env.name.clone(),
                unit,
                needed,
                max,
            });
            Outcome::Passed
        }
        Fit::NotNow { unit, needed, free } => {
            // Rule 4: the first job that does not fit holds a reservation (backfill mode).
            if env.head.is_none() && !config.strict_fifo {
                let (shadow_ms, extra) = env.reserve(&job.instances);
                env.head = Some(Head {
                    job_id: job.job_id.clone(),
                    queue: queue.name.as_str().into(),
                    shadow_ms,
                    extra,
                });
            }
            skip(SkipReason::InsufficientCapacity {
                environment: env.name.clone(),
                unit,
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
                    .saturating_sub(total(&job.instances));
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

/// Dispatches a job that fits the pool, unless that would delay the environment's waiting head
/// (rule 4); then the reason.
pub(crate) fn dispatch<'a>(
    plan: &mut Plan,
    queue: &QueueState,
    job: &'a PendingJob,
    env: &mut EnvPlan<'a>,
    now_ms: i64,
    config: &Config,
) -> Result<(), SkipReason> {
    let runtime_ms =
        (job.max_runtime_s.unwrap_or(config.default_runtime_s) as i64).saturating_mul(1000);
    let end_ms = now_ms.saturating_add(runtime_ms);
    // Rule 4: backfill only what does not delay the head.
    if let Some(head) = &mut env.head
        && end_ms > head.shadow_ms
    {
        if head.extra.check(&job.instances) != Fit::Fits {
            return Err(SkipReason::ReservedForHead {
                head_job_id: head.job_id.clone(),
                head_queue: head.queue.clone(),
                head_start_ms: head.shadow_ms.max(now_ms),
            });
        }
        head.extra.take(&job.instances);
    }
    env.pool.take(&job.instances);
    env.releases.push((end_ms, &job.instances));
    plan.dispatches.push(Dispatch {
        job_id: job.job_id.clone(),
        queue: queue.name.as_str().into(),
        environment: env.name.clone(),
        instances: job.instances.clone(),
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_keep_their_numbers_when_scanned_and_when_mapped() {
        let texts: Vec<String> = (0..40).map(|i| format!("share-{i:02}")).collect();
        let mut names = Names::default();
        for (i, text) in texts.iter().enumerate() {
            assert_eq!(names.number(text), i);
            // Found again by address, and by text in another string.
            assert_eq!(names.number(text), i);
            assert_eq!(names.get(&text.clone()), Some(i));
            // Past the scanned few, every earlier name is still found.
            assert_eq!(names.get(&texts[0]), Some(0));
        }
        assert!(names.many.is_some(), "40 names are mapped");
        assert_eq!(names.get("share-99"), None);
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
                        "{}".into(),
                        training,
                        created,
                    );
                    job.share_identifier = shared.then(|| "team".to_owned());
                    job.scheduling_priority = (rng.below(3) > 0).then(|| rng.below(3) as u32);
                    job.runnable_at = (rng.below(2) == 0).then(|| created + rng.below(3) as i64);
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
                    instances: Arc::new(job.training.instances.clone()),
                    max_runtime_s: None,
                    not_before_ms: None,
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
