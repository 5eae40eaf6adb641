//! Quota management: capacity reserved per instance type for each quota share of a queue,
//! lent when idle, borrowed within `borrowLimit`, and reclaimed by preemption.
//!
//! # Vocabulary
//!
//! For a share `S` and an instance type `t`:
//!
//! ```text
//! L(S,t)   own limit (capacityLimits; 0 when t is not listed)
//! U(S,t)   instances in use: running attempts (including those being preempted, which hold
//!          their instances until they stop) + this cycle's dispatches + instances claimed by
//!          its jobs waiting for preempted capacity
//! U_p(S,t) the same, of its jobs of `schedulingPriority` p or higher
//! cap(S,t) borrow cap: floor(L(S,t) × borrowLimit / 100) for LEND_AND_BORROW (unlimited when
//!          borrowLimit < 0), 0 for RESERVE and LEND
//! E(t)     the environment's limit for t
//! ```
//!
//! **A share's limit serves its highest-priority jobs first.** A share with `U > L` for a type
//! is borrowing `U − L` of it. The borrowing is attributed to its jobs already asked to stop
//! (`RunningJob::stopping`: their instances are on their way back), then to its
//! *lowest-priority* running jobs holding that type, the most recently started first (then the
//! greater job id), marking jobs until the marked instances cover `U − L`: the share's
//! production keeps its entitlement while its sweeps are the ones on lent capacity, and among
//! equals the jobs that started last are the ones that could only start by borrowing. See [`borrowed_jobs`]. Likewise a job is *entitled*
//! when it fits within its share's limit together with the share's jobs of its priority or
//! higher, `U_p(S,t) + n ≤ L(S,t)`, and the share stays within `L + cap` with all of them: a
//! production job of a share whose sweeps borrow is entitled, and goes before borrowers.
//!
//! # Admission (per instance type, every type of the job must pass)
//!
//! 1. **Never fits** → `QUOTA_MANAGEMENT_LIMIT_EXCEEDED` (blocks nobody), when
//!    `n > L(S,t) + min(cap(S,t), lendable(S,t))` with
//!    `lendable(S,t) = Σ L(X,t) over lending shares X ≠ S + max(0, E(t) − Σ L(·,t))`
//!    (capacity no share claims is lendable too). The cause names the bound that binds.
//! 2. **Pass 1, entitled jobs** — every share's jobs, by `schedulingPriority` desc, then
//!    `runnable_at`, then job id. A job with `U_p(S,t) + n ≤ L(S,t)` (and `U(S,t) + n ≤
//!    L(S,t) + cap(S,t)`) for all its types is *entitled*: dispatched if the environment has the
//!    instances free, otherwise it tries to
//!    make room by preemption (below), otherwise it waits with `InsufficientCapacity`. Jobs that
//!    are not entitled go to pass 2, so that a lender's own jobs always get its idle capacity
//!    before borrowers do.
//! 3. **Pass 2, borrowers** — the rest, FIFO (`runnable_at`, then job id: Batch's only
//!    `idleResourceAssignmentStrategy`). The job may borrow if `S` is LEND_AND_BORROW and
//!    `U(S,t) + n − L(S,t) ≤ cap(S,t)`; it then takes free instances except the idle capacity of
//!    RESERVE shares, `Σ max(0, L(X,t) − U(X,t))` over RESERVE shares X ≠ S. Otherwise, with
//!    in-share preemption on, it may preempt lower-priority jobs of its share; otherwise it
//!    waits with `QuotaExhausted`, `BorrowLimitReached`, `ReservedByQuotaShares` or
//!    `InsufficientCapacity`. A borrower never preempts anyone to borrow.
//!
//! The environment's capacity stays the hard limit throughout (the pool is checked for every
//! dispatch). A quota-managed queue holds no backfill reservation of its own unless it sets
//! `QueueState::reserve_after_ms` (`trainyard:reserve-after-hours`): then the first borrower in
//! pass 2 that does not fit and has waited that long holds the environment's reservation, and
//! the borrowers after it start only where they do not delay it (entitled jobs, in pass 1, are
//! not held back: the capacity is theirs).
//!
//! # Preemption
//!
//! Candidates for a waiting job `J` of share `S`, among running attempts of the queue that are
//! *preemptible* (below) and not already victims:
//! - *cross-share* (a *reclaim*): borrowed jobs of other shares (always on in Batch), once `J`
//!   has waited `Config::min_wait_before_reclaim_s` since it last became runnable (default 0);
//! - *in-share* (if `S` enables it): jobs of `S` with priority strictly below `J`'s, once `J`
//!   has waited `Config::min_wait_before_in_share_preemption_s`, and only if `J`'s priority is
//!   at least `Config::min_priority_for_in_share_preemption` (default 0).
//!
//! Both waits let jobs that end free the capacity first, which costs no work.
//!
//! An attempt is preemptible once it has run `Config::min_runtime_before_preemption_s`, and
//! always once it has been asked to stop (choosing it again loses nothing more). Anti-
//! thrash protects from *in-share* preemption only (a borrower runs on lent capacity at the
//! lender's pleasure, so reclaiming it is never delayed by it), for a job whose attempts resume
//! from checkpoints (`RunningJob::resumable`) and that was preempted before
//! (`RunningJob::preemptions = k > 0`): once it has also run
//! `Config::min_runtime_after_preemption_s` or saved a checkpoint since it started, for `k = 1`;
//! once it has run that × 2^(k−1) (at most a day), checkpoint or not, for `k ≥ 2`. A resumed job
//! makes progress before it can lose it again, and no job is stopped over and over. A job that
//! starts over after a preemption gets no such protection: protecting it would only push the
//! preemption onto jobs that have run longer, and lose more.
//!
//! **What a victim loses.** For a running attempt `V` holding `g(V)` instances:
//!
//! ```text
//! tck(V)   its newest observed checkpoint if it is newer than its start; for a job that
//!          publishes none, max(start, now − M) where M is the median checkpoint interval
//!          observed among the queue's running jobs (none observed: its start)
//! cost(V)  g(V) × (now − tck(V) + Config::restart_overhead_s)          instance-seconds
//! ```
//!
//! so hiding checkpoints buys no protection. Candidates are ordered: jobs already asked to stop
//! first, then borrowed, then lowest priority (the rules stay first), then least cost per
//! instance freed of the types `J` needs, then job id, and taken greedily until `J` would fit
//! **within its share's own limit** and the environment's capacity; then victims that turn out
//! unnecessary are dropped, walking back from the last. A share already over its limit (`U(S,t) + n > L(S,t)`) lent nothing: it reclaims
//! nothing, and an entitled job of it needs only the environment's room (and its share within
//! `L + cap`), so it preempts as many of its share's lower-priority jobs as that takes, not
//! enough to bring the share back within its limit (those would only borrow again). If the candidates cannot make room, nobody is preempted. Each [`Preemption`] carries
//! its victim's estimated loss and `tck`. `J` does not start in the same cycle: it claims the
//! victims' instances (and the free ones it needs), waits with `WaitingForPreemptedCapacity`,
//! and starts once the victims' capacity is released.
//!
//! **Waiting for a due checkpoint.** With `Config::checkpoint_alignment_s = W > 0`, if every
//! chosen victim saved a checkpoint since it started and its next one is due (that checkpoint
//! plus its observed interval, or the queue's median `M`) within `W`, and sooner than the time
//! since its last one (waiting costs `J` less than the victim would lose), nobody is preempted
//! yet:
//! `J` claims the same capacity and waits with `WaitingForVictimCheckpoint` until the last is
//! due; a later cycle, which sees the new checkpoints, preempts them at the cost of what they did
//! since. A victim whose checkpoint does not come stays a victim the same way once its due
//! time has passed (nothing is waited for twice).
//!
//! **Borrowers start after entitled jobs.** Borrowed capacity is counted on a share's jobs that
//! started last, so nothing is borrowed in a cycle in which some job starts, or reclaims lent
//! capacity, within its share's limit (`BorrowingAfterEntitledStart`; hosts cycle again at once
//! after a cycle that dispatched, and borrowers start then, all shares' together, as before).
//! Otherwise a borrower starting beside an entitled job, or before the job that reclaimed for
//! its share, could leave that entitled job counted as borrowed, and reclaimed back by the share
//! it took from: 2 of 100,000 seeds of `tests/quota_properties.rs` did that, 0 do now.
//!
//! # Preemption never loops
//!
//! Suppose `J` preempts `V`. Either
//! - *in-share*: `priority(J) > priority(V)`, so `V` can never in-share preempt `J` (that would
//!   need `priority(V) > priority(J)`), and they share a share, so no cross-share preemption
//!   between them exists; or
//! - *cross-share*: `V` was borrowed (its share over its limit) and `J` is admitted within its
//!   own share's limit. For `V` to preempt `J` back, `J` would have to be borrowed; but `J` fits
//!   within `L(S)`, and borrowing is attributed to a share's lowest-priority jobs, the most
//!   recently started first, so `J` only becomes borrowed if its own share later starts jobs of
//!   **higher priority** than `J`'s beyond its limit (its limit serves them first), or borrows
//!   more than the jobs of `J`'s priority started after `J` hold — which needs a configuration
//!   change (a lowered limit, as in Batch) or equal start times.
//!
//! So a job may be reclaimed back by the job it reclaimed from, but only after its share started
//! higher-priority work: each such turn takes a job start, and none repeats without one.
//! Longer cycles (`A` preempts `B` preempts … preempts `A`) likewise need some job to go from
//! entitled to borrowed (through such a start, or a limit lowered), or a priority to go up
//! (`UpdateServiceJob`), between two of its preemptions. This argument is not a formal proof for
//! every interleaving with jobs ending: `tests/quota_properties.rs` simulates 40 cycles per seed
//! (with and without jobs ending, victims re-queued each time) and checks that, between starts
//! of higher-priority jobs in a share, none of its jobs preempts a job that preempted it, and the
//! preempted-by graph has no cycle.

use std::cell::OnceCell;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

use crate::decision::{
    Plan, Preemption, PreemptionReason, QuotaLimitCause, Skip, SkipReason, Unit,
};
use crate::env::{EnvPlan, dispatch, fifo, within_share};
use crate::pool::Fit;
use crate::snapshot::{
    Config, PendingJob, QueuePolicy, QueueState, QuotaShareState, RunningJob, SharedStr, Snapshot,
};
use trainyard_domain::quota_share::SharingStrategy;

/// The jobs treated as borrowed: for each share and instance type in use above its own limit,
/// its lowest-priority jobs holding that type, the most recently started first (then the
/// greater job id), until they cover the excess. Jobs of unknown shares are never borrowed.
pub fn borrowed_jobs<'a>(
    shares: &[QuotaShareState],
    running: impl IntoIterator<Item = &'a RunningJob>,
) -> BTreeSet<&'a str> {
    borrowed(shares, running)
        .into_iter()
        .map(|job| job.job_id.as_str())
        .collect()
}

/// Whether `plan`'s dispatches change which running jobs of a quota-managed queue of
/// `snapshot` count as borrowed ([`borrowed_jobs`]), once they run. A cycle works the borrowed
/// jobs out when it begins and again after each preemption, not after its starts; when its
/// starts move them (a share's new jobs outrank its older ones, which now count as borrowed,
/// or the other way round), the next cycle may reclaim from jobs this one could not, or no
/// longer from one it could. A host that cycles again only when that cycle could act asks this.
pub fn dispatches_move_borrowing(snapshot: &Snapshot, plan: &Plan, now_ms: i64) -> bool {
    if plan.dispatches.is_empty() {
        return false;
    }
    snapshot.queues.iter().any(|queue| {
        let QueuePolicy::QuotaShare(shares) = &queue.policy else {
            return false;
        };
        let of_queue = |name: &str| name == queue.name.as_str();
        let started: Vec<&PendingJob> = plan
            .dispatches
            .iter()
            .filter(|d| of_queue(&d.queue))
            .filter_map(|d| snapshot.pending.iter().find(|p| p.job_id == d.job_id))
            .collect();
        let running = snapshot.running.iter().filter(|r| of_queue(&r.queue));
        !started.is_empty() && starts_move_borrowing(shares, running, &started, now_ms)
    })
}

/// [`dispatches_move_borrowing`] for one queue: its `shares`, its `running` jobs and the jobs
/// `started` at `now_ms`. Borrowing is counted per share and instance type, on a share's jobs in
/// one order ([`borrowed_among`]), the started ones among them; the old jobs counted are the
/// first of that order in both cases, so they are the same jobs when they are as many.
fn starts_move_borrowing<'a>(
    shares: &[QuotaShareState],
    running: impl Iterator<Item = &'a RunningJob> + Clone,
    started: &[&PendingJob],
    now_ms: i64,
) -> bool {
    shares.iter().any(|share| {
        let name = share.name.as_str();
        let of_share = |s: &Option<SharedStr>| s.as_deref() == Some(name);
        let new: Vec<&PendingJob> = started
            .iter()
            .copied()
            .filter(|j| of_share(&j.share))
            .collect();
        if new.is_empty() {
            return false;
        }
        let old: Vec<&RunningJob> = running.clone().filter(|r| of_share(&r.share)).collect();
        let types: BTreeSet<&str> = new
            .iter()
            .flat_map(|j| j.instances.keys())
            .map(|t| t.as_str())
            .collect();
        types.into_iter().any(|ty| {
            let held = |instances: &crate::snapshot::Instances| {
                u64::from(instances.get(ty).copied().unwrap_or(0))
            };
            let used: u64 = old.iter().map(|r| held(&r.instances)).sum();
            let added: u64 = new.iter().map(|j| held(&j.instances)).sum();
            let limit = share.limit(ty);
            if used + added <= limit {
                return false;
            }
            // (rank, instances of `ty`, whether it is an old job).
            let old_jobs = old.iter().map(|r| {
                let rank = borrow_rank(r.stopping, r.priority, r.started_at_ms, &r.job_id);
                (rank, held(&r.instances), true)
            });
            let new_jobs = new.iter().map(|j| {
                let rank = borrow_rank(false, j.priority, now_ms, &j.job_id);
                (rank, held(&j.instances), false)
            });
            let mut order: Vec<(BorrowRank<'_>, u64, bool)> = old_jobs
                .chain(new_jobs)
                .filter(|(_, n, _)| *n > 0)
                .collect();
            // Most often every started job comes before every old one (the newest, of no higher
            // priority): they then cover what they add to the excess, and no old job moves.
            let last_new = order
                .iter()
                .filter(|(_, _, old)| !old)
                .map(|(r, ..)| r)
                .max();
            let first_old = order
                .iter()
                .filter(|(_, _, old)| *old)
                .map(|(r, ..)| r)
                .min();
            if let (Some(last_new), Some(first_old)) = (last_new, first_old)
                && last_new < first_old
            {
                return false;
            }
            order.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            // How many old jobs are counted to cover `over`, with or without the new ones.
            let counted = |over: u64, with_new: bool| {
                let mut marked = 0;
                let mut jobs = 0;
                for (_, n, is_old) in order.iter().filter(|(_, _, is_old)| with_new || *is_old) {
                    if marked >= over {
                        break;
                    }
                    marked += n;
                    jobs += usize::from(*is_old);
                }
                jobs
            };
            counted(used.saturating_sub(limit), false) != counted(used + added - limit, true)
        })
    })
}

/// A running job's identity within one cycle: the address of its id's text, which every copy
/// of the snapshot's [`SharedStr`] shares. Sets of jobs are kept by it, so that looking a job
/// up compares a number rather than 36 characters with a long common prefix.
fn key(job: &RunningJob) -> usize {
    job.job_id.as_str().as_ptr() as usize
}

/// A set of running jobs by [`key`], hashed with a fixed seed.
#[allow(clippy::disallowed_types)] // Only looked up, never iterated: no order leaks into a plan.
type Keys = std::collections::HashSet<usize, foldhash::fast::FixedState>;

/// A share of the queue being planned, by its place in the queue's shares.
type ShareIx = usize;

/// An instance type of one cycle, by its place in [`Names::types`].
type TypeIx = usize;

/// The shares and instance types of one queue's cycle, numbered, so that the planner's tallies
/// are tables indexed by small numbers rather than maps searched by name (comparing names was a
/// quarter of a `quota-shares` replay). A share is found by its name's hash, one probe whether or
/// not the store shares one string per name (the memory store does; an ordered map by the
/// names' addresses cost 5% of a `quota-shares` replay).
struct Names<'a> {
    shares: &'a [QuotaShareState],
    /// Each share's number by its name (the first, should two have one name).
    by_name: crate::plan::NameNumbers<'a>,
    /// Every instance type that a share limits or a job holds, in text order.
    types: Vec<&'a str>,
    /// The same, each as the one text every skip reason of the cycle names it with.
    units: Vec<SharedStr>,
    /// Each share's own limit of each type, by [`Names::cell`].
    limits: Vec<u64>,
}

impl<'a> Names<'a> {
    fn new(
        shares: &'a [QuotaShareState],
        running: impl Iterator<Item = &'a RunningJob>,
        pending: impl Iterator<Item = &'a PendingJob>,
    ) -> Self {
        // A cycle has few types and many jobs: each job's compared with the few found so far.
        let mut types: Vec<&'a str> = Vec::new();
        let every = shares
            .iter()
            .flat_map(|s| s.limits.keys())
            .chain(running.flat_map(|r| r.instances.keys()))
            .chain(pending.flat_map(|p| p.instances.keys()));
        for ty in every {
            if !types.contains(&ty.as_str()) {
                types.push(ty);
            }
        }
        types.sort_unstable();
        let mut by_name = crate::plan::NameNumbers::default();
        for (i, share) in shares.iter().enumerate() {
            by_name.entry(share.name.as_str()).or_insert(i);
        }
        let limits = shares
            .iter()
            .flat_map(|share| types.iter().map(|ty| share.limit(ty)))
            .collect();
        let units = types.iter().map(|ty| SharedStr::from(*ty)).collect();
        Self {
            shares,
            by_name,
            types,
            units,
            limits,
        }
    }

    /// The share named `name`, if the queue has it.
    fn share(&self, name: &str) -> Option<ShareIx> {
        self.by_name.get(name).copied()
    }

    /// The number of an instance type: types no share limits and no job of the cycle held when
    /// it began have none (nothing is tallied of them).
    fn ty(&self, ty: &str) -> Option<TypeIx> {
        self.types.iter().position(|t| *t == ty)
    }

    /// The unit a skip reason names for a [`Fit`]'s instance type (`None`: the total), without
    /// copying the text of a type the cycle numbered (a cycle skips thousands of jobs).
    fn unit(&self, ty: Option<&str>) -> Unit {
        match ty.map(|ty| (ty, self.ty(ty))) {
            Some((_, Some(t))) => Unit::Type(self.units[t].clone()),
            Some((ty, None)) => Unit::Type(ty.into()),
            None => Unit::Total,
        }
    }

    /// The index of (share, type) in tables of every share by every type.
    fn cell(&self, s: ShareIx, t: TypeIx) -> Option<usize> {
        (s < self.shares.len() && t < self.types.len()).then(|| s * self.types.len() + t)
    }

    /// The size of tables of every share by every type.
    fn cells(&self) -> usize {
        self.shares.len() * self.types.len()
    }
}

/// [`borrowed_jobs`], as the jobs themselves.
fn borrowed<'a>(
    shares: &[QuotaShareState],
    running: impl IntoIterator<Item = &'a RunningJob>,
) -> Vec<&'a RunningJob> {
    let running: Vec<&RunningJob> = running.into_iter().collect();
    let names = Names::new(shares, running.iter().copied(), std::iter::empty());
    let holdings = Holdings::of(&names, &running);
    let order = borrow_order(names.shares.len());
    borrowed_among(&names, &holdings, &running, &order, |_| true)
}

/// What each running job of a cycle holds, by number: its share, if the queue has it, and its
/// instances per type, worked out once a cycle so that tallying the running jobs (each cycle,
/// and again after each preemption) compares no names.
struct Holdings {
    /// By the job's place in the cycle's running jobs.
    share: Vec<Option<ShareIx>>,
    /// Every job's (type, instances), one job after the other: job `i`'s are
    /// `held[start[i]..start[i + 1]]`.
    held: Vec<(TypeIx, u32)>,
    start: Vec<usize>,
}

impl Holdings {
    fn of(names: &Names<'_>, running: &[&RunningJob]) -> Self {
        let mut holdings = Self {
            share: Vec::with_capacity(running.len()),
            held: Vec::with_capacity(running.len()),
            start: Vec::with_capacity(running.len() + 1),
        };
        for job in running {
            let share = job.share.as_deref().and_then(|name| names.share(name));
            holdings.share.push(share);
            holdings.start.push(holdings.held.len());
            // Every type a running job holds was numbered (`Names::new`). Pushed one by one:
            // `extend` from a filtered iterator, which cannot reserve, cost a third more.
            for (ty, n) in job.instances.iter() {
                if let Some(t) = names.ty(ty) {
                    holdings.held.push((t, *n));
                }
            }
        }
        holdings.start.push(holdings.held.len());
        holdings
    }

    /// What running job `i` holds, per type.
    fn of_job(&self, i: usize) -> &[(TypeIx, u32)] {
        &self.held[self.start[i]..self.start[i + 1]]
    }
}

/// Where a share's job stands in the order its borrowing is counted in ([`borrowed_among`]):
/// jobs already stopping first (their instances are the ones on their way back), then the
/// lowest `schedulingPriority`, the most recently started, the greater id.
type BorrowRank<'a> = (bool, u32, Reverse<i64>, Reverse<&'a str>);

fn borrow_rank(stopping: bool, priority: u32, started_at_ms: i64, id: &str) -> BorrowRank<'_> {
    (!stopping, priority, Reverse(started_at_ms), Reverse(id))
}

/// Each share's running jobs (places in `running`) in the order their borrowing is counted in
/// ([`BorrowRank`]), worked out for a share the first time it is over its limit in a cycle: the
/// running jobs do not change within a cycle, so one order serves every count of the cycle
/// (sorting a share's jobs again after each preemption was 4% of a `quota-shares` replay).
type BorrowOrder = Vec<OnceCell<Vec<usize>>>;

/// A [`BorrowOrder`] with nothing worked out, for `shares` shares.
fn borrow_order(shares: usize) -> BorrowOrder {
    vec![OnceCell::new(); shares]
}

/// [`borrowed`], with the cycle's names, holdings and order, among the running jobs that `among`
/// keeps (by place in `running`).
fn borrowed_among<'a>(
    names: &Names<'_>,
    holdings: &Holdings,
    running: &[&'a RunningJob],
    order: &BorrowOrder,
    among: impl Fn(usize) -> bool,
) -> Vec<&'a RunningJob> {
    let types = names.types.len();
    // `Names::cell`, for numbers known to be in range.
    let cell = |s: ShareIx, t: TypeIx| s * types + t;
    // What each share's jobs hold, by `Names::cell`.
    let mut used = vec![0u64; names.cells()];
    for i in (0..running.len()).filter(|i| among(*i)) {
        if let Some(s) = holdings.share[i] {
            for (t, n) in holdings.of_job(i) {
                used[cell(s, *t)] += u64::from(*n);
            }
        }
    }
    // Every running job by share, in place order, once a share's order is first needed.
    let mut members: Option<Vec<Vec<usize>>> = None;
    let mut borrowed = Vec::new();
    for s in 0..names.shares.len() {
        let over = |t: TypeIx| used[cell(s, t)].saturating_sub(names.limits[cell(s, t)]);
        // Most shares are within their limits: nothing of theirs is borrowed, and their jobs
        // need no order.
        if (0..types).all(|t| over(t) == 0) {
            continue;
        }
        let jobs = order[s].get_or_init(|| {
            let members = members.get_or_insert_with(|| {
                let mut members = vec![Vec::new(); names.shares.len()];
                for (i, share) in holdings.share.iter().enumerate() {
                    if let Some(share) = share {
                        members[*share].push(i);
                    }
                }
                members
            });
            let mut jobs = std::mem::take(&mut members[s]);
            jobs.sort_by_key(|i| {
                let r = running[*i];
                borrow_rank(r.stopping, r.priority, r.started_at_ms, &r.job_id)
            });
            jobs
        });
        // Types in text order, as `Names::types` numbers them.
        for t in 0..types {
            let over = over(t);
            let mut marked = 0;
            for i in jobs.iter().filter(|i| among(**i)) {
                if marked >= over {
                    break;
                }
                let held = holdings.of_job(*i).iter().find(|(ty, _)| *ty == t);
                if let Some((_, n)) = held.filter(|(_, n)| *n > 0) {
                    marked += u64::from(*n);
                    borrowed.push(running[*i]);
                }
            }
        }
    }
    borrowed
}

/// Planning state of one quota-managed queue.
struct Quota<'a> {
    names: Names<'a>,
    /// `U(S,t)` (see the module docs), by [`Names::cell`].
    used: Vec<u64>,
    /// The same by priority: `U(S,t)` of the jobs of each `schedulingPriority`, by
    /// [`Names::cell`], in priority order.
    used_by_priority: Vec<Vec<(u32, u64)>>,
    /// Running attempts of the queue.
    running: Vec<&'a RunningJob>,
    /// What each of them holds.
    holdings: Holdings,
    /// Jobs being preempted in this cycle.
    victims: BTreeSet<usize>,
    /// The first job dispatched, or reclaiming lent capacity, within its share's limit in this
    /// cycle, with its share: nothing is borrowed after it in this cycle (see the module docs).
    entitled_start: Option<(&'a str, SharedStr)>,
    /// Borrowed running jobs, recomputed after each preemption.
    borrowed: Keys,
    /// Each share's running jobs in the order borrowing is counted in, once a count needs it.
    borrow_order: BorrowOrder,
    /// Running jobs old enough to be preempted, per share, in `running` order: the only
    /// candidates preemption ever looks at (see [`Quota::make_room`]).
    preemptible: Vec<Vec<&'a RunningJob>>,
    /// How long a job runs before its capacity may be reclaimed from a borrowing share
    /// (`min_runtime_before_preemption_s`; anti-thrash protects from in-share preemption only):
    /// asked of the few borrowed jobs, not worked out for every running job in every cycle.
    reclaim_after_s: u64,
    /// Of those, the borrowed ones (all shares), recomputed with `borrowed`, in the order
    /// [`borrowed_among`] finds them (candidates are ranked by a total order, so the order
    /// does not show).
    preemptible_borrowed: Vec<&'a RunningJob>,
    /// Demands for which [`Quota::make_room`] found no room in this cycle, per (share,
    /// instance type): (priority, instances) pairs. Room only shrinks within a cycle (capacity is
    /// taken, victims are set aside, usage grows), so a job of the same share and type with no
    /// higher priority that needs no fewer instances finds none either, and is not searched for.
    no_room: BTreeMap<(ShareIx, TypeIx), Vec<(u32, u32)>>,
    /// [`Quota::bound`] per (share, instance type), worked out once a cycle.
    bounds: BTreeMap<(ShareIx, &'a str), (u64, u64, QuotaLimitCause)>,
    /// What [`Loss::of`] needs beside the job: the cycle's time, the queue's median checkpoint
    /// interval and the restart overhead. A loss is worked out when a candidate is weighed, as
    /// most cycles weigh none (every candidate is old enough to be reclaimed, so it has one).
    loss_at: (i64, Option<i64>, u64),
    /// [`Quota::lent`] per (share, instance type), until the borrowed jobs change (a few
    /// entries: shares × types).
    lent_cache: Vec<(&'a str, String, Option<LentTo>)>,
}

/// What preempting a running attempt now loses (see the module docs).
#[derive(Debug, Clone, Copy)]
struct Loss {
    /// `cost(V)`, instance-seconds.
    instance_s: u64,
    /// The newest observed checkpoint counted, if any.
    checkpoint_ms: Option<i64>,
    /// When its next checkpoint is due: the newest observed one plus its observed interval (or
    /// the queue's median), if it saved one since it started.
    next_checkpoint_ms: Option<i64>,
}

impl Loss {
    fn of(
        job: &RunningJob,
        now_ms: i64,
        median_interval_ms: Option<i64>,
        restart_overhead_s: u64,
    ) -> Self {
        let ran_ms = now_ms.saturating_sub(job.started_at_ms).max(0);
        let checkpoint_ms = job.checkpoint_since_start();
        let since_ms = match (checkpoint_ms, median_interval_ms) {
            (Some(c), _) => now_ms.saturating_sub(c).clamp(0, ran_ms),
            (None, Some(m)) => ran_ms.min(m.max(0)),
            (None, None) => ran_ms,
        };
        let instances = job.instances.total();
        let seconds = u64::try_from(since_ms / 1000)
            .unwrap_or(0)
            .saturating_add(restart_overhead_s);
        let interval_ms = job.checkpoint_interval_ms.or(median_interval_ms);
        Self {
            instance_s: instances.saturating_mul(seconds),
            checkpoint_ms,
            next_checkpoint_ms: checkpoint_ms
                .zip(interval_ms.filter(|i| *i > 0))
                .map(|(c, i)| c.saturating_add(i)),
        }
    }
}

/// The longest a job's attempt is protected for by its past preemptions.
const MAX_PROTECTION_S: u64 = 86_400;

/// When `job`'s capacity may be reclaimed, if it runs on borrowed capacity: once it has run
/// `min_runtime_before_preemption_s`, whatever its past preemptions.
fn reclaimable_from(job: &RunningJob, config: &Config) -> i64 {
    reclaimable_after(job, config.min_runtime_before_preemption_s)
}

/// [`reclaimable_from`], given `min_runtime_before_preemption_s`.
fn reclaimable_after(job: &RunningJob, min_runtime_s: u64) -> i64 {
    job.started_at_ms.saturating_add(seconds_ms(min_runtime_s))
}

/// When `job` becomes preemptible by a job of its own share (see the module docs).
fn preemptible_from(job: &RunningJob, config: &Config) -> i64 {
    let after = |s: u64| job.started_at_ms.saturating_add(seconds_ms(s));
    let first = reclaimable_from(job, config);
    let saved = job.checkpoint_since_start().is_some();
    match job.preemptions {
        _ if !job.resumable => first,
        0 => first,
        1 if saved => first,
        k => {
            let doubled = config
                .min_runtime_after_preemption_s
                .saturating_mul(1 << (k - 1).min(16))
                .min(MAX_PROTECTION_S.max(config.min_runtime_after_preemption_s));
            first.max(after(doubled))
        }
    }
}

/// The median observed checkpoint interval among `running`, if any reports one.
fn median_interval(running: &[&RunningJob]) -> Option<i64> {
    let mut intervals: Vec<i64> = running
        .iter()
        .filter_map(|r| r.checkpoint_interval_ms)
        .filter(|i| *i > 0)
        .collect();
    if intervals.is_empty() {
        return None;
    }
    let mid = intervals.len() / 2;
    Some(*intervals.select_nth_unstable(mid).1)
}

impl<'a> Quota<'a> {
    /// Recomputes which running jobs are borrowed (after a preemption, from those left).
    fn set_borrowed(&mut self, borrowed: Vec<&'a RunningJob>) {
        self.lent_cache.clear();
        self.borrowed.clear();
        self.preemptible_borrowed.clear();
        // A job borrowed in several types is listed once per type: kept once.
        for job in borrowed {
            if self.borrowed.insert(key(job)) && self.reclaimable(job) {
                self.preemptible_borrowed.push(job);
            }
        }
    }

    /// Whether a running job of a share is old enough to have its capacity reclaimed. A job
    /// already stopping loses nothing more by being chosen again, however young.
    fn reclaimable(&self, job: &RunningJob) -> bool {
        let now_ms = self.loss_at.0;
        job.share.is_some()
            && (job.stopping || now_ms >= reclaimable_after(job, self.reclaim_after_s))
    }

    /// What preempting a candidate would lose now (see the module docs).
    fn loss(&self, job: &RunningJob) -> Loss {
        let (now_ms, median, restart_overhead_s) = self.loss_at;
        Loss::of(job, now_ms, median, restart_overhead_s)
    }

    /// The number of one of the queue's shares: every share the planner asks about is one of
    /// `names.shares` (names are unique within a queue), found by its address among the few
    /// (hashing its name was 1.6% of a `quota-shares` replay's instructions); another tallies
    /// nothing.
    fn ix(&self, share: &QuotaShareState) -> ShareIx {
        let mut shares = self.names.shares.iter();
        shares
            .position(|s| std::ptr::eq(s, share))
            .unwrap_or(usize::MAX)
    }

    fn used(&self, s: ShareIx, ty: &str) -> u64 {
        self.names
            .ty(ty)
            .and_then(|t| self.names.cell(s, t))
            .map_or(0, |cell| self.used[cell])
    }

    /// Counts instances of share `s` of a job of `priority` as used.
    fn add(&mut self, s: ShareIx, job: &crate::snapshot::Instances, priority: u32) {
        for (ty, n) in job {
            if let Some(t) = self.names.ty(ty) {
                self.add_cell(s, t, *n, priority);
            }
        }
    }

    /// [`Quota::add`] of `n` instances of type `t`.
    fn add_cell(&mut self, s: ShareIx, t: TypeIx, n: u32, priority: u32) {
        let Some(cell) = self.names.cell(s, t) else {
            return;
        };
        self.used[cell] += u64::from(n);
        let by_priority = &mut self.used_by_priority[cell];
        match by_priority.binary_search_by_key(&priority, |(p, _)| *p) {
            Ok(i) => by_priority[i].1 += u64::from(n),
            Err(i) => by_priority.insert(i, (priority, u64::from(n))),
        }
    }

    /// The share's tally of an instance type: its table cell, if the cycle numbered the type
    /// (a job's type always is), and the share's own limit of it. Looked up once per type of a
    /// job, where the checks below would each search the type's name again.
    fn tally(&self, share: &QuotaShareState, ty: &str) -> (Option<usize>, u64) {
        let cell = self
            .names
            .ty(ty)
            .and_then(|t| self.names.cell(self.ix(share), t));
        let limit = cell.map_or_else(|| share.limit(ty), |cell| self.names.limits[cell]);
        (cell, limit)
    }

    /// `U(S,t)` at a [`Quota::tally`]'s cell.
    fn used_at(&self, cell: Option<usize>) -> u64 {
        cell.map_or(0, |cell| self.used[cell])
    }

    /// `U_p(S,t)` at a [`Quota::tally`]'s cell: what the share's jobs of priority `p` or higher
    /// use of the type.
    fn used_from_at(&self, cell: Option<usize>, p: u32) -> u64 {
        cell.map_or(0, |cell| {
            self.used_by_priority[cell]
                .iter()
                .filter(|(priority, _)| *priority >= p)
                .map(|(_, n)| n)
                .sum()
        })
    }

    /// Whether the job fits within its share's own limit, all the share's jobs counted.
    fn within_limit(&self, share: &QuotaShareState, job: &PendingJob) -> bool {
        job.instances.iter().all(|(ty, n)| {
            let (cell, limit) = self.tally(share, ty);
            self.used_at(cell) + u64::from(*n) <= limit
        })
    }

    /// Whether the job is entitled: it fits within its share's own limit with the share's jobs
    /// of its priority or higher (`U_p(S,t) + n ≤ L(S,t)`), and the share stays within its
    /// limit plus its borrow cap with all of them (see the module docs).
    fn entitled(&self, share: &QuotaShareState, job: &PendingJob) -> bool {
        // Both bounds per type, each type looked up once.
        job.instances.iter().all(|(ty, n)| {
            let (cell, limit) = self.tally(share, ty);
            let n = u64::from(*n);
            self.used_from_at(cell, job.priority) + n <= limit
                && share
                    .cap_over(limit)
                    .is_none_or(|cap| self.used_at(cell) + n <= limit.saturating_add(cap))
        })
    }

    /// Whether the job fits within its share's own limit with the share's jobs of its
    /// priority or higher: `U_p(S,t) + n ≤ L(S,t)` for every type it needs.
    fn first_at_its_priority(&self, share: &QuotaShareState, job: &PendingJob) -> bool {
        job.instances.iter().all(|(ty, n)| {
            let (cell, limit) = self.tally(share, ty);
            self.used_from_at(cell, job.priority) + u64::from(*n) <= limit
        })
    }

    /// Rule 1's bound for a share and an instance type: its own limit, what it could ever
    /// borrow of the type, and which of the two binds. Configuration alone decides it, so a
    /// cycle works it out once per (share, type).
    fn bound(
        &mut self,
        share: &'a QuotaShareState,
        ty: &'a str,
        env: &EnvPlan,
    ) -> (u64, u64, QuotaLimitCause) {
        if let Some(bound) = self.bounds.get(&(self.ix(share), ty)) {
            return *bound;
        }
        let limit = share.limit(ty);
        let claimed: u64 = self.names.shares.iter().map(|s| s.limit(ty)).sum();
        let unassigned = env.pool.type_limit(ty).saturating_sub(claimed);
        let lendable: u64 = self
            .names
            .shares
            .iter()
            .filter(|s| s.name != share.name && s.lends())
            .map(|s| s.limit(ty))
            .sum::<u64>()
            + unassigned;
        let (borrowable, cause) = match share.borrow_cap(ty) {
            _ if share.strategy != SharingStrategy::LendAndBorrow => {
                (0, QuotaLimitCause::ShareLimits)
            }
            Some(cap) if cap < lendable => (cap, QuotaLimitCause::BorrowLimits),
            _ => (lendable, QuotaLimitCause::BorrowableCapacity),
        };
        let bound = (limit, borrowable, cause);
        self.bounds.insert((self.ix(share), ty), bound);
        bound
    }

    /// Rule 1: why the job can never fit its share, if so.
    fn never_fits(
        &mut self,
        share: &'a QuotaShareState,
        job: &'a PendingJob,
        env: &EnvPlan,
    ) -> Option<SkipReason> {
        for (ty, n) in job.instances.iter() {
            let needed = u64::from(*n);
            let (limit, borrowable, cause) = self.bound(share, ty, env);
            if needed > limit.saturating_add(borrowable) {
                return Some(SkipReason::QuotaLimitExceeded {
                    quota_share: share.name.clone(),
                    unit: self.names.unit(Some(ty)),
                    needed,
                    limit,
                    borrowable,
                    cause,
                });
            }
        }
        None
    }

    /// Pass 2: whether the share may borrow what the job needs beyond its limit.
    fn may_borrow(&self, share: &QuotaShareState, job: &PendingJob) -> Result<(), SkipReason> {
        for (ty, n) in job.instances.iter() {
            let needed = u64::from(*n);
            let (cell, limit) = self.tally(share, ty);
            let in_use = self.used_at(cell);
            let over = (in_use + needed).saturating_sub(limit);
            if over == 0 {
                continue;
            }
            if share.strategy != SharingStrategy::LendAndBorrow {
                return Err(SkipReason::QuotaExhausted {
                    quota_share: share.name.clone(),
                    unit: self.names.unit(Some(ty)),
                    needed,
                    limit,
                    in_use,
                });
            }
            if let Some(cap) = share.cap_over(limit)
                && over > cap
            {
                return Err(SkipReason::BorrowLimitReached {
                    quota_share: share.name.clone(),
                    unit: self.names.unit(Some(ty)),
                    needed,
                    limit,
                    in_use,
                    borrow_limit: cap,
                });
            }
        }
        Ok(())
    }

    /// Idle capacity of RESERVE shares other than `share`, which is never lent.
    fn reserved_idle(&self, share: &str, ty: &str) -> u64 {
        self.names
            .shares
            .iter()
            .filter(|s| s.name != share && s.strategy == SharingStrategy::Reserve)
            .map(|s| s.limit(ty).saturating_sub(self.used(self.ix(s), ty)))
            .sum()
    }

    /// Whether an earlier search this cycle already shows that `job` (of one instance type) finds
    /// no room (see `no_room`).
    fn known_no_room(&self, share: &QuotaShareState, job: &PendingJob, priority: u32) -> bool {
        let mut types = job.instances.iter();
        let (Some((ty, n)), None) = (types.next(), types.next()) else {
            return false;
        };
        let Some(t) = self.names.ty(ty) else {
            return false;
        };
        self.no_room
            .get(&(self.ix(share), t))
            .is_some_and(|failed| failed.iter().any(|(p, m)| priority <= *p && n >= m))
    }

    /// Notes that `job` (of share `share`) found no room when preempting as a job of
    /// `priority` would (its own when it may preempt in its share, else 0: reclaims only).
    fn note_no_room(&mut self, share: &QuotaShareState, job: &PendingJob, priority: u32) {
        let mut types = job.instances.iter();
        if let (Some((ty, n)), None) = (types.next(), types.next())
            && let Some(t) = self.names.ty(ty)
        {
            let key = (self.ix(share), t);
            let failed = self.no_room.entry(key).or_default();
            // Keep only what the others do not already imply.
            if !failed.iter().any(|(p, m)| priority <= *p && n >= m) {
                failed.retain(|(p, m)| !(*p <= priority && m >= n));
                failed.push((priority, *n));
            }
        }
    }

    /// The borrowed instances of type `unit` that other shares hold (not already victims), per
    /// share, and when the first of those jobs may be preempted if that is still ahead; `None`
    /// when nothing of the type is lent.
    fn lent(
        &mut self,
        share: &'a QuotaShareState,
        unit: &str,
        now_ms: i64,
        config: &Config,
    ) -> Option<LentTo> {
        let known = self
            .lent_cache
            .iter()
            .find(|(s, u, _)| *s == share.name.as_str() && u == unit);
        if let Some((_, _, lent)) = known {
            return lent.clone();
        }
        let found = self.find_lent(share, unit, now_ms, config);
        self.lent_cache
            .push((&share.name, unit.to_owned(), found.clone()));
        found
    }

    /// [`Quota::lent`], worked out.
    fn find_lent(
        &self,
        share: &QuotaShareState,
        unit: &str,
        now_ms: i64,
        config: &Config,
    ) -> Option<LentTo> {
        let mut lent: BTreeMap<SharedStr, u64> = BTreeMap::new();
        let mut reclaim_from: Option<i64> = None;
        for r in &self.running {
            let theirs = r.share.as_ref();
            let Some(n) = r.instances.get(unit) else {
                continue;
            };
            if !self.borrowed.contains(&key(r))
                || self.victims.contains(&key(r))
                || theirs.is_none_or(|t| **t == *share.name)
            {
                continue;
            }
            if let Some(t) = theirs {
                *lent.entry(t.clone()).or_insert(0) += u64::from(*n);
            }
            let from = reclaimable_from(r, config);
            reclaim_from = Some(reclaim_from.map_or(from, |f| f.min(from)));
        }
        if lent.is_empty() {
            return None;
        }
        Some((
            lent.into_iter().collect(),
            reclaim_from.filter(|t| *t > now_ms),
        ))
    }

    /// Preemption: the fewest victims (in victim order) that let the job fit within its share's
    /// own limit and the environment, or `None` when the candidates cannot make room. Linear in
    /// the candidates while choosing (the fit is kept up to date victim by victim); only a
    /// successful choice is then pruned.
    fn make_room(
        &self,
        share: &QuotaShareState,
        job: &PendingJob,
        env: &EnvPlan,
        in_share: bool,
        reclaim: bool,
    ) -> Option<Vec<&'a RunningJob>> {
        // Candidates: borrowed jobs of other shares, and (in-share) the share's own jobs of
        // lower priority; all old enough (`preemptible`), not already victims, and holding a type
        // the job needs. Ordered below by a total order, so the order they are gathered in does
        // not matter.
        let usable = |r: &&RunningJob| {
            !self.victims.contains(&key(r))
                && r.instances.keys().any(|ty| job.instances.contains_key(ty))
        };
        // A share over its own limit lent nothing: it makes room in itself alone, by
        // priority, and the job need only be entitled (its share's jobs of lower priority are
        // the ones counted as borrowed).
        let over = !self.within_limit(share, job);
        if over && !self.first_at_its_priority(share, job) {
            return None;
        }
        let others = self
            .preemptible_borrowed
            .iter()
            .copied()
            .filter(|_| reclaim && !over)
            .filter(|r| r.share.as_deref() != Some(share.name.as_str()))
            .filter(usable)
            .map(|r| (r, true));
        let own = self
            .preemptible
            .get(self.ix(share))
            .filter(|_| share.in_share_preemption && in_share)
            .into_iter()
            .flatten()
            .copied()
            .filter(|r| r.priority < job.priority)
            .filter(usable)
            .map(|r| (r, self.borrowed.contains(&key(r))));
        let candidates: Vec<(&RunningJob, bool)> = others.chain(own).collect();
        if candidates.is_empty() {
            return None;
        }
        // Whether the share, once `leaving` of its instances of `ty` are gone and the job's `n`
        // added, is within its limit (over it: within its limit plus its borrow cap).
        let within = |ty: &str, n: u32, leaving: u64| {
            let after = (self.used(self.ix(share), ty) + u64::from(n)).saturating_sub(leaving);
            let limit = share.limit(ty);
            match share.borrow_cap(ty) {
                _ if !over => after <= limit,
                Some(cap) => after <= limit.saturating_add(cap),
                None => true,
            }
        };
        // The fit as victims are given back one at a time: the pool with their instances, and
        // what the job's own share gives up per type.
        let fits_now = |pool: &crate::pool::Pool, leaving: &BTreeMap<&str, u64>| {
            pool.fits(&job.instances)
                && job
                    .instances
                    .iter()
                    .all(|(ty, n)| within(ty, *n, leaving.get(ty.as_str()).copied().unwrap_or(0)))
        };
        let give_back = |pool: &mut crate::pool::Pool,
                         leaving: &mut BTreeMap<&'a str, u64>,
                         candidate: &'a RunningJob| {
            pool.give(&candidate.instances);
            if candidate.share.as_deref() == Some(share.name.as_str()) {
                for (ty, n) in candidate.instances.iter() {
                    if job.instances.contains_key(ty) {
                        *leaving.entry(ty.as_str()).or_insert(0) += u64::from(*n);
                    }
                }
            }
        };
        // Whether giving back `chosen` makes room.
        let fits = |chosen: &[&'a RunningJob]| {
            let mut pool = env.pool.clone();
            let mut leaving = BTreeMap::new();
            for victim in chosen {
                give_back(&mut pool, &mut leaving, victim);
            }
            fits_now(&pool, &leaving)
        };
        // Giving back more only makes more room: when every candidate together makes too
        // little, no choice does, and they need not be ranked (most searches end here).
        let mut pool = env.pool.clone();
        let mut leaving: BTreeMap<&str, u64> = BTreeMap::new();
        for (candidate, _) in &candidates {
            give_back(&mut pool, &mut leaving, candidate);
        }
        if !fits_now(&pool, &leaving) {
            return None;
        }
        // Cost per instance freed of the types the job needs, compared exactly as
        // cost(a) × freed(b) against cost(b) × freed(a).
        let per_freed = |r: &RunningJob| {
            let freed: u64 = job
                .instances
                .keys()
                .filter_map(|ty| r.instances.get(ty))
                .map(|n| u64::from(*n))
                .sum();
            let cost = self.loss(r).instance_s;
            (u128::from(cost), u128::from(freed.max(1)))
        };
        let mut candidates: Vec<(&RunningJob, bool, (u128, u128))> = candidates
            .into_iter()
            .map(|(r, borrowed)| (r, borrowed, per_freed(r)))
            .collect();
        // A total order (ids are distinct), so an unstable sort orders them as a stable one.
        candidates.sort_unstable_by(|(a, ab, (ca, fa)), (b, bb, (cb, fb))| {
            (!a.stopping, !ab, a.priority)
                .cmp(&(!b.stopping, !bb, b.priority))
                .then((ca * fb).cmp(&(cb * fa)))
                .then_with(|| a.job_id.cmp(&b.job_id))
        });
        // Greedy, in victim order, until the job fits.
        let mut pool = env.pool.clone();
        let mut leaving: BTreeMap<&str, u64> = BTreeMap::new();
        let mut chosen: Vec<&RunningJob> = Vec::new();
        for (candidate, _, _) in candidates {
            if fits_now(&pool, &leaving) {
                break;
            }
            give_back(&mut pool, &mut leaving, candidate);
            chosen.push(candidate);
        }
        if chosen.is_empty() || !fits_now(&pool, &leaving) {
            return None;
        }
        // Take only as many victims as needed.
        for i in (0..chosen.len()).rev() {
            let mut without = chosen.clone();
            without.remove(i);
            if fits(&without) {
                chosen = without;
            }
        }
        Some(chosen)
    }
}

/// Seconds as milliseconds, saturating.
fn seconds_ms(s: u64) -> i64 {
    i64::try_from(s.saturating_mul(1000)).unwrap_or(i64::MAX)
}

/// What happened to one job.
enum Decision {
    Done,
    /// Pass 1 only: not entitled, try borrowing in pass 2.
    Defer,
}

/// Who borrowed a share's idle capacity ([`SkipReason::QuotaLent`]).
type LentTo = (Vec<(SharedStr, u64)>, Option<i64>);

/// The job waits, for `reason`.
fn skip_job(plan: &mut Plan, job: &PendingJob, reason: SkipReason) -> Decision {
    plan.skips.push(Skip {
        job_id: job.job_id.clone(),
        reason,
    });
    Decision::Done
}

/// Plans one quota-managed queue (see the module docs).
#[allow(clippy::too_many_arguments)]
pub(crate) fn plan_quota_queue<'a>(
    plan: &mut Plan,
    queue: &QueueState,
    shares: &'a [QuotaShareState],
    mut jobs: Vec<&'a PendingJob>,
    running: &[&'a RunningJob],
    env: &mut EnvPlan<'a>,
    now_ms: i64,
    config: &Config,
) {
    let median = median_interval(running);
    let names = Names::new(shares, running.iter().copied(), jobs.iter().copied());
    let holdings = Holdings::of(&names, running);
    let mut preemptible: Vec<Vec<&RunningJob>> = vec![Vec::new(); shares.len()];
    for (job, share) in running.iter().zip(&holdings.share) {
        if job.share.is_none() {
            continue;
        }
        // A job already stopping loses nothing more by being chosen again, however young.
        if (job.stopping || now_ms >= preemptible_from(job, config))
            && let Some(s) = *share
        {
            preemptible[s].push(job);
        }
    }
    let mut quota = Quota {
        used: vec![0; names.cells()],
        used_by_priority: vec![Vec::new(); names.cells()],
        borrow_order: borrow_order(names.shares.len()),
        names,
        borrowed: Keys::default(),
        preemptible,
        reclaim_after_s: config.min_runtime_before_preemption_s,
        preemptible_borrowed: Vec::new(),
        victims: BTreeSet::new(),
        entitled_start: None,
        running: running.to_vec(),
        holdings,
        no_room: BTreeMap::new(),
        bounds: BTreeMap::new(),
        loss_at: (now_ms, median, config.restart_overhead_s),
        lent_cache: Vec::new(),
    };
    let (names, holdings, running) = (&quota.names, &quota.holdings, &quota.running);
    let borrowed = borrowed_among(names, holdings, running, &quota.borrow_order, |_| true);
    quota.set_borrowed(borrowed);
    for i in 0..quota.running.len() {
        let Some(s) = quota.holdings.share[i] else {
            continue;
        };
        let priority = quota.running[i].priority;
        for j in quota.holdings.start[i]..quota.holdings.start[i + 1] {
            let (t, n) = quota.holdings.held[j];
            quota.add_cell(s, t, n, priority);
        }
    }

    // Pass 1: entitled jobs, priority first. The jobs come as one line per share, each already
    // in this order: the stable sort finds those runs and merges them, where an unstable one
    // would sort from scratch (both orders end with the job id, so either gives one order).
    jobs.sort_by(within_share);
    let mut deferred = Vec::new();
    for job in jobs {
        if let Decision::Defer = decide(plan, queue, &mut quota, job, env, now_ms, config, true) {
            deferred.push(job);
        }
    }
    // Pass 2: borrowers, FIFO.
    deferred.sort_by(fifo);
    for job in deferred {
        decide(plan, queue, &mut quota, job, env, now_ms, config, false);
    }
}

#[allow(clippy::too_many_arguments)]
fn decide<'a>(
    plan: &mut Plan,
    queue: &QueueState,
    quota: &mut Quota<'a>,
    job: &'a PendingJob,
    env: &mut EnvPlan<'a>,
    now_ms: i64,
    config: &Config,
    first_pass: bool,
) -> Decision {
    let skip = |plan: &mut Plan, reason: SkipReason| skip_job(plan, job, reason);
    let shares: &'a [QuotaShareState] = quota.names.shares;
    let found = job
        .share
        .as_deref()
        .and_then(|s| quota.names.share(s))
        .map(|s| &shares[s]);
    let Some(share) = found else {
        let reason = SkipReason::UnknownQuotaShare {
            quota_share: job.share.clone().unwrap_or_default(),
        };
        return skip(plan, reason);
    };
    // Pass 2 decides only the jobs pass 1 found not entitled. A share's use only grows within a
    // cycle (`Quota::add`), so they still are not; and whether such a job fits matters only if
    // it may borrow.
    if !first_pass {
        let waiting = match quota.may_borrow(share, job) {
            // Over its share's limit, a job reclaims nothing and makes room only in its share,
            // by priority (`make_room`): where the share may not, it waits for this reason.
            Err(reason) if !share.in_share_preemption => return skip(plan, reason),
            Err(reason) => Some(reason),
            Ok(()) => match env.pool.check(&job.instances) {
                Fit::NotNow { ty, needed, free }
                | Fit::Never {
                    ty,
                    needed,
                    max: free,
                } => Some(SkipReason::InsufficientCapacity {
                    environment: env.name.clone(),
                    unit: quota.names.unit(ty),
                    needed,
                    free,
                }),
                Fit::Fits => job.instances.iter().find_map(|(ty, n)| {
                    let free = env.pool.type_free(ty);
                    let reserved = quota.reserved_idle(&share.name, ty);
                    (u64::from(*n) > free.saturating_sub(reserved)).then(|| {
                        SkipReason::ReservedByQuotaShares {
                            unit: quota.names.unit(Some(ty)),
                            needed: u64::from(*n),
                            free,
                            reserved,
                        }
                    })
                }),
            },
        };
        return wait_or_start(
            plan, queue, quota, share, job, env, now_ms, config, false, waiting,
        );
    }
    if let Some(until_ms) = job.not_before_ms.filter(|t| *t > now_ms) {
        return skip(plan, SkipReason::Backoff { until_ms });
    }
    let fit = env.pool.check(&job.instances);
    if let Fit::Never { ty, needed, max } = fit {
        let reason = SkipReason::ExceedsEnvironment {
            environment: env.name.clone(),
            unit: quota.names.unit(ty),
            needed,
            max,
        };
        return skip(plan, reason);
    }
    if let Some(reason) = quota.never_fits(share, job, env) {
        return skip(plan, reason);
    }
    let entitled = quota.entitled(share, job);
    let waiting = match fit {
        Fit::Fits if entitled => None,
        Fit::NotNow { ty, needed, free } if entitled => Some(SkipReason::InsufficientCapacity {
            environment: env.name.clone(),
            unit: quota.names.unit(ty),
            needed,
            free,
        }),
        _ => return Decision::Defer,
    };
    wait_or_start(
        plan, queue, quota, share, job, env, now_ms, config, true, waiting,
    )
}

/// The rest of [`decide`], once it is known whether the job is `entitled` and why it would wait
/// if it does not start (`waiting`): a borrower's reservation, borrowing after entitled starts,
/// the dispatch, or the preemption that makes room.
#[allow(clippy::too_many_arguments)]
fn wait_or_start<'a>(
    plan: &mut Plan,
    queue: &QueueState,
    quota: &mut Quota<'a>,
    share: &'a QuotaShareState,
    job: &'a PendingJob,
    env: &mut EnvPlan<'a>,
    now_ms: i64,
    config: &Config,
    entitled: bool,
    waiting: Option<SkipReason>,
) -> Decision {
    let skip = |plan: &mut Plan, reason: SkipReason| skip_job(plan, job, reason);
    // A borrower that does not fit holds the environment's reservation once it has waited as
    // long as its queue says, if it says (`reserve_after_ms`; by default none does, as in Batch):
    // the borrowers after it then start only where they do not delay it.
    if !entitled
        && matches!(waiting, Some(SkipReason::InsufficientCapacity { .. }))
        && queue
            .reserve_after_ms
            .is_some_and(|after_ms| now_ms.saturating_sub(job.runnable_at_ms) >= after_ms)
    {
        env.hold_reservation(job, queue);
    }
    // A borrower starts only after the entitled jobs of this cycle: borrowed capacity is counted
    // on the jobs that started last, so one starting beside them (or before a job that reclaims
    // within the limit) could make that entitled job the one counted as borrowed, and reclaimed
    // back (see the module docs). All shares wait, so that who borrows next cycle is decided as
    // it would have been in this one.
    if waiting.is_none()
        && !entitled
        && let Some((entitled_share, entitled_job_id)) = &quota.entitled_start
    {
        let reason = SkipReason::BorrowingAfterEntitledStart {
            quota_share: (*entitled_share).into(),
            entitled_job_id: entitled_job_id.clone(),
        };
        return skip(plan, reason);
    }
    let Some(reason) = waiting else {
        return match dispatch(plan, queue, job, env, now_ms, config) {
            Ok(()) => {
                quota.add(quota.ix(share), &job.instances, job.priority);
                if entitled {
                    quota
                        .entitled_start
                        .get_or_insert_with(|| (share.name.as_str(), job.job_id.clone()));
                }
                Decision::Done
            }
            Err(reason) => skip(plan, reason),
        };
    };
    // Preemption is a last resort: in-share only for a job that has waited
    // `min_wait_before_in_share_preemption_s`, a reclaim only once it has waited
    // `min_wait_before_reclaim_s` (jobs that end free capacity for it meanwhile, at no loss).
    // Counted from when it last became runnable: a preempted job keeps its place in line
    // (`runnable_at_ms`), not its wait, so a reclaim does not cascade into an in-share
    // preemption at once.
    let since_ms = job.waited_since_ms();
    let waited_ms = now_ms.saturating_sub(since_ms);
    let in_share = waited_ms >= seconds_ms(config.min_wait_before_in_share_preemption_s)
        && job.priority >= config.min_priority_for_in_share_preemption;
    let reclaim_at_ms = since_ms.saturating_add(seconds_ms(config.min_wait_before_reclaim_s));
    let reclaim = now_ms >= reclaim_at_ms;
    // No room to be made: an entitled job waiting for a full environment is told who holds
    // its share's lent capacity, when there is any.
    let no_room = |plan: &mut Plan, quota: &mut Quota<'a>, reason: SkipReason| match reason {
        SkipReason::InsufficientCapacity {
            environment,
            unit,
            needed,
            free,
        } if entitled && quota.within_limit(share, job) => {
            let reason = match quota.lent(share, &unit, now_ms, config) {
                Some((lent_to, preemptible_from_ms)) => SkipReason::QuotaLent {
                    quota_share: share.name.clone(),
                    unit,
                    needed,
                    free,
                    lent_to,
                    reclaim_from_ms: Some(preemptible_from_ms.unwrap_or(now_ms).max(reclaim_at_ms))
                        .filter(|t| *t > now_ms),
                },
                None => SkipReason::InsufficientCapacity {
                    environment,
                    unit,
                    needed,
                    free,
                },
            };
            skip(plan, reason)
        }
        other => skip(plan, other),
    };
    // A job that may not preempt in its share has the candidates of a job of priority 0 (none
    // of its own share's jobs is below that): it shares the memo of failures with them.
    let as_priority = if in_share { job.priority } else { 0 };
    if (in_share || reclaim) && quota.known_no_room(share, job, as_priority) {
        return no_room(plan, quota, reason);
    }
    let Some(victims) = quota.make_room(share, job, env, in_share, reclaim) else {
        if reclaim {
            quota.note_no_room(share, job, as_priority);
        }
        return no_room(plan, quota, reason);
    };

    // Wait for the victims' due checkpoints, when each lands within the alignment window.
    let window_end = now_ms.saturating_add(seconds_ms(config.checkpoint_alignment_s));
    let due_ms = (config.checkpoint_alignment_s > 0)
        .then(|| {
            victims
                .iter()
                .map(|v| {
                    // Worth waiting for: due within the window, and sooner than the work it
                    // saves took (so a job that has just saved is not waited for again).
                    let loss = quota.loss(v);
                    let saved_ms = loss.checkpoint_ms?;
                    loss.next_checkpoint_ms.filter(|due| {
                        *due > now_ms && *due <= window_end && due - now_ms < now_ms - saved_ms
                    })
                })
                .collect::<Option<Vec<i64>>>()
        })
        .flatten()
        .and_then(|due| due.into_iter().max());

    // Preempt (or, waiting for checkpoints, get ready to): the job claims the victims'
    // instances and the free ones it still needs.
    let mut claim = (*job.instances).clone();
    for victim in &victims {
        for (ty, n) in victim.instances.iter() {
            if let Some(c) = claim.get_mut(ty) {
                *c = c.saturating_sub(*n);
            }
        }
        quota.victims.insert(key(victim));
        let theirs = victim.share.as_deref().unwrap_or_default();
        if theirs != share.name.as_str() {
            quota
                .entitled_start
                .get_or_insert_with(|| (share.name.as_str(), job.job_id.clone()));
        }
        let reason = if theirs == share.name.as_str() {
            PreemptionReason::InSharePriority {
                quota_share: share.name.clone(),
                priority: job.priority,
                victim_priority: victim.priority,
            }
        } else {
            PreemptionReason::ReclaimBorrowed {
                quota_share: share.name.clone(),
                victim_quota_share: victim.share.clone().unwrap_or_default(),
            }
        };
        if due_ms.is_some() {
            continue;
        }
        let loss = quota.loss(victim);
        plan.preemptions.push(Preemption {
            victim_job_id: victim.job_id.clone(),
            for_job_id: job.job_id.clone(),
            reason,
            lost_instance_s: loss.instance_s,
            checkpoint_ms: loss.checkpoint_ms,
        });
    }
    env.pool.take(&claim.into());
    quota.add(quota.ix(share), &job.instances, job.priority);
    let running = &quota.running;
    let left = |i: usize| !quota.victims.contains(&key(running[i]));
    let borrowed = borrowed_among(
        &quota.names,
        &quota.holdings,
        running,
        &quota.borrow_order,
        left,
    );
    quota.set_borrowed(borrowed);
    let victims = victims.iter().map(|v| v.job_id.clone()).collect();
    match due_ms {
        Some(due_ms) => skip(
            plan,
            SkipReason::WaitingForVictimCheckpoint { victims, due_ms },
        ),
        None => skip(plan, SkipReason::WaitingForPreemptedCapacity { victims }),
    }
}
