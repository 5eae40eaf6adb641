//! Step 1 of a cycle: the snapshot the planner plans over, and what the cycle keeps beside it
//! to act on the plan (each pending job's stored version and reason, capacity in use with its
//! version, fair-share usage records).

use std::cmp::Ordering;
use std::collections::BTreeMap;

use trainyard_domain::environment::ServiceEnvironment;
use trainyard_domain::policy::SchedulingPolicy;
use trainyard_domain::queue::JobQueue;
use trainyard_domain::quota_share::QuotaShare;
use trainyard_domain::{ResourceStatus, State};
use trainyard_scheduler::{
    Config as PlannerConfig, EnvironmentState, PendingJob, QueuePolicy, QueueState,
    QuotaShareState, RunningJob, ShareKey, SharedStr, Snapshot,
};

use super::CycleConfig;
use crate::error::AppError;
use crate::ports::{
    CapacityHolder, CapacityRelease, ConfigStore, Document, EnvironmentUsage, EventSink, Fence,
    HoldersRead, HoldersSeen, LineWaits, RunnableHead, SchedulingStore, ShareUsageRecord,
    StoreError, Versioned, WaitDigests, Write,
};
use crate::service::Service;

/// What a cycle remembers of a pending job it handed the planner, to act on the plan.
pub(crate) struct Waiting {
    /// The version the snapshot read: a dispatch or reason write expects it.
    pub(super) version: u64,
    /// The status reason stored then.
    pub(super) status_reason: Option<SharedStr>,
    /// Whether its queue has `jobStateTimeLimitActions` (then every skip reads the job whole).
    pub(super) time_limits: bool,
}

/// The snapshot's pending jobs, looked up by the ids the plan hands back: each in the place of
/// its [`PendingJob`] in the snapshot.
#[derive(Default)]
pub(super) struct WaitingJobs {
    jobs: Vec<(SharedStr, Waiting)>,
    /// Index in `jobs` by the address of the id's text. The plan's ids are clones of the
    /// snapshot's, so they are found without hashing or comparing 36 characters; any other
    /// string with the same text is found by a scan.
    by_address: foldhash::HashMap<usize, usize>,
}

impl WaitingJobs {
    fn reserve(&mut self, n: usize) {
        self.jobs.reserve(n);
        self.by_address.reserve(n);
    }

    fn insert(&mut self, id: SharedStr, waiting: Waiting) {
        self.by_address.insert(address(&id), self.jobs.len());
        self.jobs.push((id, waiting));
    }

    pub(super) fn get(&self, id: &str) -> Option<&Waiting> {
        self.place(id).map(|i| &self.jobs[i].1)
    }

    /// Where `id` is, among the jobs in the order inserted.
    fn place(&self, id: &str) -> Option<usize> {
        let found = self.by_address.get(&address(id)).copied();
        found
            .filter(|i| std::ptr::eq(self.jobs[*i].0.as_str(), id))
            .or_else(|| self.jobs.iter().position(|(job, _)| job.as_str() == id))
    }
}

/// The address of a string's text: the same for every clone of one [`SharedStr`], and distinct
/// between strings alive at once.
fn address(s: &str) -> usize {
    s.as_ptr() as usize
}

/// The planner's view of the world, plus what a cycle needs to act on the plan.
pub(super) struct Loaded {
    pub(super) snapshot: Snapshot,
    /// Each running job's `CheckpointConfig.S3Uri`, in `snapshot.running`'s order.
    pub(super) checkpoint_uris: Vec<Option<SharedStr>>,
    /// The pending jobs of the snapshot.
    pub(super) waiting: WaitingJobs,
    pub(super) queues: BTreeMap<String, JobQueue>,
    pub(super) usage: BTreeMap<String, Versioned<EnvironmentUsage>>,
    /// Instances per share that this cycle's committed dispatches took (step 6 records them
    /// with what the running set held before, [`Loaded::held`]).
    pub(super) dispatched: BTreeMap<ShareKey, u64>,
    /// Fair-share queues and their decay windows (seconds).
    pub(super) fair_queues: BTreeMap<String, u32>,
    /// Each share's stored usage record, with its version for step 6's write.
    pub(super) share_usage: BTreeMap<ShareKey, Versioned<ShareUsageRecord>>,
    /// The scheduler lease the cycle dispatches with, if its pass holds one.
    pub(super) fence: Option<Fence>,
    /// Each queue's digests of its lines' stored waits, with their version for the cycle's write.
    pub(super) wait_digests: BTreeMap<String, Versioned<WaitDigests>>,
    /// The running set `snapshot.running` and `checkpoint_uris` were taken from, to be given
    /// back for the next cycle (not once observed checkpoints were written into the jobs,
    /// [`RunningSet::forget`]).
    pub(super) kept: RunningSet,
}

impl Loaded {
    /// A pending job of the snapshot, by id: what the cycle keeps of it, and the job.
    pub(super) fn waiting_job(&self, id: &str) -> Option<(&Waiting, &PendingJob)> {
        let i = self.waiting.place(id)?;
        Some((&self.waiting.jobs[i].1, self.snapshot.pending.get(i)?))
    }

    /// Instances held per share after the dispatches committed so far, in key order: what the
    /// running set held when the snapshot was read, plus [`Loaded::dispatched`].
    pub(super) fn held(&self) -> impl Iterator<Item = (&ShareKey, u64)> {
        let before = self
            .kept
            .shares
            .iter()
            .map(|(k, tally)| (k, tally.instances));
        let dispatched = self.dispatched.iter().map(|(k, n)| (k, *n));
        merge_by_key(before, dispatched).map(|(k, a, b)| (k, a.unwrap_or(0) + b.unwrap_or(0)))
    }
}

/// Two iterators in ascending key order, each key at most once in each, merged into one in key
/// order: every key once, with what each had for it.
pub(super) fn merge_by_key<'k, K: Ord + 'k, A, B>(
    a: impl Iterator<Item = (&'k K, A)>,
    b: impl Iterator<Item = (&'k K, B)>,
) -> impl Iterator<Item = (&'k K, Option<A>, Option<B>)> {
    let (mut a, mut b) = (a.peekable(), b.peekable());
    std::iter::from_fn(move || {
        let order = match (a.peek(), b.peek()) {
            (None, None) => return None,
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (Some((x, _)), Some((y, _))) => x.cmp(y),
        };
        match order {
            Ordering::Less => a.next().map(|(k, x)| (k, Some(x), None)),
            Ordering::Greater => b.next().map(|(k, y)| (k, None, Some(y))),
            Ordering::Equal => {
                let ((k, x), (_, y)) = a.next().zip(b.next())?;
                Some((k, Some(x), Some(y)))
            }
        }
    })
}

/// The configuration a cycle plans under, as stored.
struct Configuration {
    environments: Vec<Versioned<ServiceEnvironment>>,
    queues: Vec<Versioned<JobQueue>>,
    policies: BTreeMap<String, SchedulingPolicy>,
    /// Quota shares by queue, in name order (the planner reads them per queue).
    quota_shares: BTreeMap<String, Vec<QuotaShareState>>,
}

/// The planner's view of a head, and what the cycle keeps of it.
pub(crate) fn pending(head: RunnableHead, time_limits: bool) -> (PendingJob, Waiting) {
    let waiting = Waiting {
        version: head.version,
        status_reason: head.status_reason,
        time_limits,
    };
    let job = PendingJob {
        job_id: head.job_id,
        queue: head.job_queue,
        share: (!head.share.is_empty()).then_some(head.share),
        priority: head.priority,
        runnable_at_ms: head.runnable_at,
        instances: head.instances,
        max_runtime_s: head.max_runtime_s,
        not_before_ms: head.not_before,
        line_offset_ms: head.line_offset_ms,
    };
    (job, waiting)
}

/// The planner's view of a job holding capacity.
fn running(job: CapacityHolder, planner: &PlannerConfig) -> RunningJob {
    let started = job.started_at;
    let runtime_s = job.max_runtime_s.unwrap_or(planner.default_runtime_s);
    RunningJob {
        job_id: job.job_id,
        queue: job.job_queue,
        share: (!job.share.is_empty()).then_some(job.share),
        priority: job.priority,
        started_at_ms: started,
        instances: job.instances,
        expected_end_ms: started.saturating_add(
            i64::try_from(runtime_s)
                .unwrap_or(i64::MAX)
                .saturating_mul(1000),
        ),
        checkpoint_ms: None,
        checkpoint_interval_ms: None,
        preemptions: job.preemptions,
        resumable: job.checkpoint_s3_uri.is_some(),
        stopping: job.stopping,
    }
}

/// The planner's view of every environment, and the instances each has free.
fn environment_states(
    environments: Vec<Versioned<ServiceEnvironment>>,
    usage: &BTreeMap<String, Versioned<EnvironmentUsage>>,
) -> (Vec<EnvironmentState>, BTreeMap<String, u64>) {
    let mut states = Vec::with_capacity(environments.len());
    let mut free = BTreeMap::new();
    for env in environments {
        let env = env.value;
        let max: u64 = env
            .capacity_limits
            .iter()
            .map(|l| u64::from(l.max_capacity))
            .sum();
        let used = usage
            .get(&env.service_environment_name)
            .map_or(0, |u| u.value.total());
        free.insert(
            env.service_environment_name.clone(),
            max.saturating_sub(used),
        );
        states.push(environment_state(env));
    }
    (states, free)
}

/// The quota shares of `queue` that are [`full`](QuotaShareState::full) with what its running
/// jobs hold (`held`): none of their waiting jobs can act in this cycle.
fn full_shares<'a>(policy: &'a QueuePolicy, queue: &str, held: &ShareCounts) -> Vec<&'a str> {
    let QueuePolicy::QuotaShare(shares) = policy else {
        return Vec::new();
    };
    let full = |share: &QuotaShareState| {
        let key = ShareKey {
            queue: queue.into(),
            share: share.name.as_str().into(),
        };
        let tally = held.get(&key);
        share.full(|ty| tally.map_or(0, |tally| tally.held(ty)))
    };
    // No key is built for a share that can never be full.
    let shares = shares.iter().filter(|s| s.may_fill() && full(s));
    shares.map(|s| s.name.as_str()).collect()
}

/// The planner's view of an environment: disabled or being deleted, it dispatches nothing.
pub(crate) fn environment_state(env: ServiceEnvironment) -> EnvironmentState {
    EnvironmentState {
        name: env.service_environment_name,
        enabled: env.state == State::Enabled && env.status != ResourceStatus::Deleting,
        limits: env.capacity_limits,
    }
}

/// Adds to a queue's lines the `fresh` RUNNABLE jobs of that queue that they lack (an index that
/// has not caught up with writes this process just made), each in its place in its share's line
/// (`trainyard_domain::order`), each line kept to its share's `limit`.
fn with_fresh(
    lines: &mut Vec<Vec<RunnableHead>>,
    fresh: &[RunnableHead],
    queue: &str,
    limit: impl Fn(&str) -> usize,
) {
    // `runnable_rank`'s order: priority counts only within a share.
    let rank = |h: &RunnableHead| {
        let priority = if h.share.is_empty() { 0 } else { h.priority };
        (std::cmp::Reverse(priority), h.line_at(), h.job_id.clone())
    };
    for head in fresh.iter().filter(|h| &*h.job_queue == queue) {
        if lines.iter().flatten().any(|h| h.job_id == head.job_id) {
            continue;
        }
        let share_of = |line: &Vec<RunnableHead>| line.first().map(|h| h.share.clone());
        let i = match lines
            .iter()
            .position(|line| share_of(line).is_none_or(|share| share == head.share))
        {
            Some(i) => i,
            None => {
                lines.push(Vec::new());
                lines.len() - 1
            }
        };
        let line = &mut lines[i];
        let at = line.partition_point(|h| rank(h) < rank(head));
        line.insert(at, head.clone());
        line.truncate(limit(&head.share));
    }
}

/// The planner's running jobs as a cycle read them, kept for the next cycle, which then reads
/// only the holders that changed since, where the store can tell
/// ([`SchedulingStore::capacity_holders_since`]; the memory store can). A cycle takes it and
/// gives it back when it ends without error, unless it wrote observed checkpoints into its
/// jobs; the next cycle otherwise reads every holder. Rebuilt every cycle, it copied and
/// dropped every summary (some 800 in a replay on 1,280 instances) and counted each share's
/// (`docs/benchmarks.md#simulator-speed`).
pub(crate) struct RunningSet {
    /// What of the store's holders it reflects (`None`: a store that follows nothing).
    seen: Option<HoldersSeen>,
    /// The `default_runtime_s` its jobs' expected ends were worked out with.
    default_runtime_s: u64,
    /// Ordered by job id, as the store lists them.
    jobs: Vec<RunningJob>,
    /// Each job's `CheckpointConfig.S3Uri`, in `jobs`' order.
    checkpoint_uris: Vec<Option<SharedStr>>,
    /// Per fair share or quota share with jobs here: how many, and the instances they hold.
    shares: ShareCounts,
}

/// Per share: jobs holding capacity, and the instances they hold.
type ShareCounts = BTreeMap<ShareKey, Tally>;

/// What a share's jobs holding capacity hold.
#[derive(Debug, Default, PartialEq)]
struct Tally {
    jobs: usize,
    instances: u64,
    /// The same per instance type, in name order; no type of none.
    by_type: Vec<(String, u64)>,
}

impl Tally {
    /// What the share's jobs hold of `ty`.
    fn held(&self, ty: &str) -> u64 {
        self.slot(ty).map_or(0, |i| self.by_type[i].1)
    }

    /// Where `ty` is in `by_type`, or where it would go.
    fn slot(&self, ty: &str) -> Result<usize, usize> {
        self.by_type.binary_search_by(|(t, _)| t.as_str().cmp(ty))
    }
}

/// Counts `job` into its share's tally (`into`) or out of it, if it has a share.
fn count(shares: &mut ShareCounts, job: &RunningJob, into: bool) {
    let Some(share) = &job.share else {
        return;
    };
    let key = ShareKey {
        queue: job.queue.clone(),
        share: share.clone(),
    };
    let instances = job.instances.total();
    if into {
        let tally = shares.entry(key).or_default();
        tally.jobs += 1;
        tally.instances += instances;
        for (ty, n) in job.instances.iter().filter(|(_, n)| **n > 0) {
            match tally.slot(ty) {
                Ok(i) => tally.by_type[i].1 += u64::from(*n),
                Err(i) => tally.by_type.insert(i, (ty.clone(), u64::from(*n))),
            }
        }
    } else if let Some(tally) = shares.get_mut(&key) {
        tally.jobs = tally.jobs.saturating_sub(1);
        tally.instances = tally.instances.saturating_sub(instances);
        for (ty, n) in job.instances.iter() {
            if let Ok(i) = tally.slot(ty) {
                tally.by_type[i].1 = tally.by_type[i].1.saturating_sub(u64::from(*n));
            }
        }
        tally.by_type.retain(|(_, held)| *held > 0);
        if tally.jobs == 0 {
            shares.remove(&key);
        }
    }
}

impl RunningSet {
    /// Not to be kept for the next cycle, which reads every holder anew.
    pub(super) fn forget(&mut self) {
        self.seen = None;
    }

    /// Every holder, in the store's order.
    fn of(
        holders: Vec<CapacityHolder>,
        seen: Option<HoldersSeen>,
        planner: &PlannerConfig,
    ) -> Self {
        let mut set = Self {
            seen,
            default_runtime_s: planner.default_runtime_s,
            jobs: Vec::with_capacity(holders.len()),
            checkpoint_uris: Vec::with_capacity(holders.len()),
            shares: ShareCounts::new(),
        };
        for holder in holders {
            set.checkpoint_uris.push(holder.checkpoint_s3_uri.clone());
            let job = running(holder, planner);
            count(&mut set.shares, &job, true);
            set.jobs.push(job);
        }
        set
    }

    /// Takes in what changed: each job's summary now, or `None` once it holds no capacity.
    fn apply(
        &mut self,
        changed: Vec<(String, Option<CapacityHolder>)>,
        seen: Option<HoldersSeen>,
        planner: &PlannerConfig,
    ) {
        self.seen = seen;
        for (id, now) in changed {
            let at = self.jobs.binary_search_by(|j| j.job_id.as_str().cmp(&id));
            if let Ok(i) = at {
                count(&mut self.shares, &self.jobs[i], false);
            }
            match (at, now) {
                (Ok(i), Some(holder)) => {
                    self.checkpoint_uris[i] = holder.checkpoint_s3_uri.clone();
                    self.jobs[i] = running(holder, planner);
                    count(&mut self.shares, &self.jobs[i], true);
                }
                (Ok(i), None) => {
                    self.jobs.remove(i);
                    self.checkpoint_uris.remove(i);
                }
                (Err(i), Some(holder)) => {
                    self.checkpoint_uris
                        .insert(i, holder.checkpoint_s3_uri.clone());
                    self.jobs.insert(i, running(holder, planner));
                    count(&mut self.shares, &self.jobs[i], true);
                }
                (Err(_), None) => {}
            }
        }
    }
}

/// Releases folded into a usage document per commit: with the document, DynamoDB's 100 items
/// of a transaction.
const FOLD_BATCH: usize = 99;

impl<S: ConfigStore + SchedulingStore, E: EventSink> Service<S, E> {
    /// Folds the [`CapacityRelease`]s written since the last cycle into their environments'
    /// usage documents, deleting them in the same commits, and returns the capacity in use.
    ///
    /// Each commit version-checks the document and each release, so a fold that loses a race
    /// (a dispatch, another pass's fold) changes nothing. The cycle then plans on the documents
    /// as stored, which count what it could not fold as still in use until a later cycle folds
    /// it: this cycle's dispatches write those documents, and a document written net of releases
    /// that still exist would give them back twice. A release of an environment without a usage
    /// document gives back nothing and is deleted.
    async fn fold_releases(
        &self,
    ) -> Result<BTreeMap<String, Versioned<EnvironmentUsage>>, AppError> {
        let mut usage = EnvironmentUsage::by_environment(
            self.store.list_documents::<EnvironmentUsage>().await?,
        );
        let releases = self.store.list_documents::<CapacityRelease>().await?;
        if releases.is_empty() {
            return Ok(usage);
        }
        let mut per_environment: BTreeMap<&str, Vec<&Versioned<CapacityRelease>>> = BTreeMap::new();
        for release in &releases {
            per_environment
                .entry(release.value.environment.as_str())
                .or_default()
                .push(release);
        }
        let mut all_folded = true;
        for (environment, releases) in per_environment {
            for batch in releases.chunks(FOLD_BATCH) {
                let mut writes = Vec::with_capacity(batch.len() + 1);
                let folded = usage.get(environment).map(|stored| {
                    let mut value = stored.value.clone();
                    for release in batch {
                        value.remove(&release.value);
                    }
                    writes.push(Write::document_value(value.clone(), stored.version));
                    Versioned {
                        value,
                        version: stored.version + 1,
                    }
                });
                writes.extend(batch.iter().map(|release| {
                    Write::delete_document::<CapacityRelease>(release.value.key(), release.version)
                }));
                match self.store.commit(&writes).await {
                    Ok(()) => {
                        if let Some(folded) = folded {
                            usage.insert(environment.to_owned(), folded);
                        }
                    }
                    Err(StoreError::Conflict) => {
                        all_folded = false;
                        break;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
        if all_folded {
            return Ok(usage);
        }
        let stored = self.store.list_documents::<EnvironmentUsage>().await?;
        Ok(EnvironmentUsage::by_environment(stored))
    }

    /// Step 1: reads everything the planner needs (see the module docs of `scheduling`).
    pub(super) async fn load_snapshot(
        &self,
        config: &CycleConfig,
        fresh: &[RunnableHead],
    ) -> Result<Loaded, AppError> {
        let mut configuration = self.load_configuration().await?;
        let usage = self.fold_releases().await?;

        let mut snapshot = Snapshot::default();
        let environments = std::mem::take(&mut configuration.environments);
        let (environments, free) = environment_states(environments, &usage);
        snapshot.environments = environments;
        // The capacity in use the planner charges: the usage documents, read consistently and
        // charged where each attempt was dispatched (the holders below come from an index).
        snapshot.in_use = usage
            .iter()
            .map(|(env, u)| (env.clone(), u.value.instances.clone()))
            .collect();

        // Summaries, not whole jobs: every cycle reads all of them, or what changed since the
        // last cycle where the store can tell. Read before the heads: they tell which quota
        // shares are full.
        let mut set = self.running_set(&config.planner).await?;

        let mut waiting = WaitingJobs::default();
        let mut fair_queues = BTreeMap::new();
        let mut queue_map = BTreeMap::new();
        for queue in std::mem::take(&mut configuration.queues) {
            let queue = queue.value;
            let name = queue.job_queue_name.clone();
            let scheduling = queue
                .scheduling_policy
                .as_ref()
                .and_then(|p| configuration.policies.get(p));
            if let Some(fair) = scheduling.and_then(|p| p.fairshare_policy.as_ref()) {
                fair_queues.insert(name.clone(), fair.share_decay_s());
            }
            let shares = configuration.quota_shares.remove(&name).unwrap_or_default();
            let state = queue_state(&queue, scheduling, shares);
            // The heads: enough to fill the free capacity, plus candidates for backfill.
            let env_free = queue
                .service_environment()
                .and_then(|e| free.get(e))
                .copied()
                .unwrap_or(0);
            let limit = usize::try_from(env_free)
                .unwrap_or(usize::MAX)
                .saturating_add(config.head_extra)
                .min(config.max_heads);
            // A full quota share's jobs are all skipped, however many are read: only the ones
            // its line's document names are read, for the reasons shown.
            let full = full_shares(&state.policy, &name, &set.shares);
            let limit = |share: &str| {
                if full.contains(&share) {
                    LineWaits::MAX_WAITS
                        .min(config.head_extra)
                        .min(config.max_heads)
                } else {
                    limit
                }
            };
            let mut heads = self.queue_heads(&name, &state.policy, limit).await?;
            with_fresh(&mut heads, fresh, &name, limit);
            let time_limits = !queue.job_state_time_limit_actions.is_empty();
            let count = heads.iter().map(Vec::len).sum();
            snapshot.pending.reserve(count);
            waiting.reserve(count);
            for head in heads.into_iter().flatten() {
                let (job, head) = pending(head, time_limits);
                waiting.insert(job.job_id.clone(), head);
                snapshot.pending.push(job);
            }
            snapshot.queues.push(state);
            queue_map.insert(name, queue);
        }

        // The snapshot holds the jobs for the cycle; `keep_running` puts them back.
        snapshot.running = std::mem::take(&mut set.jobs);
        let checkpoint_uris = std::mem::take(&mut set.checkpoint_uris);
        // Each share's usage now: its record brought forward with what it held since.
        let share_usage = self.share_usage().await?;
        let wait_digests = self
            .store
            .list_documents::<WaitDigests>()
            .await?
            .into_iter()
            .map(|w| (w.value.queue.clone(), w))
            .collect();
        let now = self.clock.now_ms();
        snapshot.usage = share_usage
            .iter()
            .filter_map(|(k, r)| {
                let half_life = fair_queues.get(k.queue.as_str())?;
                Some((k.clone(), r.value.at(now, *half_life)))
            })
            .collect();
        Ok(Loaded {
            snapshot,
            checkpoint_uris,
            waiting,
            queues: queue_map,
            usage,
            dispatched: BTreeMap::new(),
            fair_queues,
            share_usage,
            fence: None,
            wait_digests,
            kept: set,
        })
    }

    /// The running jobs: the last cycle's, with what changed since, or all of them read anew.
    async fn running_set(&self, planner: &PlannerConfig) -> Result<RunningSet, AppError> {
        let last = self
            .running
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
            .filter(|set| set.default_runtime_s == planner.default_runtime_s);
        let (read, seen) = self
            .store
            .capacity_holders_since(last.as_ref().and_then(|set| set.seen))
            .await?;
        Ok(match (read, last) {
            (HoldersRead::Changed(changed), Some(mut set)) => {
                set.apply(changed, seen, planner);
                set
            }
            (HoldersRead::All(holders), _) => RunningSet::of(holders, seen, planner),
            // Changes to a set it was not told of: not a store's answer; read everything.
            (HoldersRead::Changed(_), None) => {
                let holders = self.store.capacity_holders().await?;
                RunningSet::of(holders, None, planner)
            }
        })
    }

    /// Keeps a cycle's running jobs for the next cycle (see [`RunningSet`]).
    pub(super) fn keep_running(&self, loaded: Loaded) {
        // A store that follows nothing is read anew every cycle: nothing to keep.
        let mut set = loaded.kept;
        if set.seen.is_none() {
            return;
        }
        set.jobs = loaded.snapshot.running;
        set.checkpoint_uris = loaded.checkpoint_uris;
        *self
            .running
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(set);
    }

    /// What a start-time forecast rolls forward from: the snapshot a cycle would read, but with
    /// the first `per_line` RUNNABLE jobs of every line (the jobs to estimate) instead of the
    /// heads. A separate, less frequent read than the cycle's.
    pub async fn forecast_snapshot(
        &self,
        config: &CycleConfig,
        per_line: usize,
    ) -> Result<Snapshot, AppError> {
        let config = CycleConfig {
            head_extra: per_line,
            max_heads: per_line,
            ..config.clone()
        };
        Ok(self.load_snapshot(&config, &[]).await?.snapshot)
    }

    /// Every environment, queue, policy and quota share.
    async fn load_configuration(&self) -> Result<Configuration, AppError> {
        let environments = self.store.list_resources::<ServiceEnvironment>().await?;
        let queues = self.store.list_resources::<JobQueue>().await?;
        let policies: BTreeMap<String, SchedulingPolicy> = self
            .store
            .list_resources::<SchedulingPolicy>()
            .await?
            .into_iter()
            .map(|p| (p.value.name.clone(), p.value))
            .collect();
        let mut quota_shares: BTreeMap<String, Vec<QuotaShareState>> = BTreeMap::new();
        for share in self.store.list_resources::<QuotaShare>().await? {
            let queue = share.value.job_queue.clone();
            let state = QuotaShareState::from(&share.value);
            quota_shares.entry(queue).or_default().push(state);
        }
        for shares in quota_shares.values_mut() {
            shares.sort_by(|a, b| a.name.cmp(&b.name));
        }
        Ok(Configuration {
            environments,
            queues,
            policies,
            quota_shares,
        })
    }

    /// The first `limit(share)` RUNNABLE jobs of each of the queue's lines: one list per share
    /// (one for a FIFO queue, whose share is "").
    async fn queue_heads(
        &self,
        queue: &str,
        policy: &QueuePolicy,
        limit: impl Fn(&str) -> usize,
    ) -> Result<Vec<Vec<RunnableHead>>, AppError> {
        let mut heads = Vec::new();
        match policy {
            QueuePolicy::Fifo => {
                heads.push(self.store.runnable_heads(queue, "", limit("")).await?);
            }
            QueuePolicy::FairShare(_) | QueuePolicy::QuotaShare(_) => {
                for share in self.store.runnable_shares(queue).await? {
                    let line = self.store.runnable_heads(queue, &share, limit(&share));
                    heads.push(line.await?);
                }
            }
        }
        Ok(heads)
    }

    /// Each fair share's stored usage record, by share.
    async fn share_usage(
        &self,
    ) -> Result<BTreeMap<ShareKey, Versioned<ShareUsageRecord>>, AppError> {
        Ok(self
            .store
            .list_documents::<ShareUsageRecord>()
            .await?
            .into_iter()
            .map(|r| {
                let key = ShareKey {
                    queue: r.value.queue.clone(),
                    share: r.value.share.clone(),
                };
                (key, r)
            })
            .collect())
    }
}

/// The planner's view of a job queue: its priority, environment, ordering (from `policy`, its
/// scheduling policy; a quota-share queue's shares are `quota_shares`) and aging (from its tags,
/// which are checked when written: one that is not valid ages nothing).
pub fn queue_state(
    queue: &JobQueue,
    policy: Option<&SchedulingPolicy>,
    quota_shares: Vec<QuotaShareState>,
) -> QueueState {
    let policy = match policy {
        Some(SchedulingPolicy {
            fairshare_policy: Some(fair),
            ..
        }) => QueuePolicy::FairShare(fair.clone()),
        Some(SchedulingPolicy {
            quota_share_policy: Some(_),
            ..
        }) => QueuePolicy::QuotaShare(quota_shares),
        _ => QueuePolicy::Fifo,
    };
    QueueState {
        name: queue.job_queue_name.clone(),
        priority: queue.priority,
        environment: queue.service_environment().map(str::to_owned),
        policy,
        aging: queue.aging().ok().flatten(),
        reserve_after_ms: queue
            .line_rules()
            .reserve_after_s
            .map(|s| i64::try_from(s.saturating_mul(1_000)).unwrap_or(i64::MAX)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::job;
    use crate::memory::MemoryStore;
    use crate::ports::JobStore;
    use trainyard_domain::job::JobStatus;
    use trainyard_domain::payload::TrainingRequest;
    use trainyard_domain::random::SplitMix64;

    /// A running set kept from read to read, brought up to date by what changed, is the one
    /// read anew: the same jobs in the same order, checkpoint URIs and tallies per share, while
    /// jobs are dispatched, change and end in random order.
    #[tokio::test]
    async fn a_kept_running_set_is_the_one_read_anew() {
        let planner = PlannerConfig::default();
        for seed in 0..20 {
            let mut rng = SplitMix64::new(seed);
            let store = MemoryStore::new();
            let (read, seen) = store.capacity_holders_since(None).await.unwrap();
            let HoldersRead::All(all) = read else {
                panic!("everything, at first");
            };
            let mut kept = RunningSet::of(all, seen, &planner);
            for step in 0..60 {
                for _ in 0..rng.below(6) {
                    let id = format!("job-{:03}", rng.below(40));
                    let stored = store.get_job(&id).await.unwrap();
                    let Some(mut stored) = stored else {
                        let mut new = job(&id).status(JobStatus::Running);
                        new = match rng.below(3) {
                            0 => new.share(&format!("s{}", rng.below(3))),
                            1 => new.quota_share(&format!("q{}", rng.below(2))),
                            _ => new,
                        };
                        // Of one type or another, so that shares hold several.
                        let mut new = new.build();
                        let ty = ["ml.m5.large", "ml.p4d.24xlarge"][rng.below(2) as usize];
                        let n = 1 + rng.below(4) as u32;
                        new.training = TrainingRequest::single("t", ty, n).into();
                        store.insert_job(&new, None).await.unwrap();
                        continue;
                    };
                    let job = &mut stored.value;
                    match rng.below(3) {
                        0 => job.scheduling_priority = Some(rng.below(5) as u32),
                        1 => job.status = JobStatus::Succeeded,
                        _ => {
                            job.status = if job.status.is_dispatched() {
                                JobStatus::Runnable
                            } else {
                                JobStatus::Running
                            }
                        }
                    }
                    store.update_job(job, stored.version).await.unwrap();
                }
                let (read, seen) = store.capacity_holders_since(kept.seen).await.unwrap();
                let HoldersRead::Changed(changed) = read else {
                    panic!("seed {seed}, step {step}: a few changes are in the log");
                };
                kept.apply(changed, seen, &planner);
                let anew =
                    RunningSet::of(store.capacity_holders().await.unwrap(), kept.seen, &planner);
                assert_eq!(kept.jobs, anew.jobs, "seed {seed}, step {step}");
                assert_eq!(kept.checkpoint_uris, anew.checkpoint_uris);
                assert_eq!(kept.shares, anew.shares, "seed {seed}, step {step}");
            }
        }
    }

    #[test]
    fn waiting_jobs_are_found_by_their_own_id_or_by_an_equal_one() {
        let mut jobs = WaitingJobs::default();
        let id = SharedStr::from("0f8fad5b-d9cb-469f-a165-70867728950e");
        let waiting = |version| Waiting {
            version,
            status_reason: None,
            time_limits: false,
        };
        jobs.insert(id.clone(), waiting(3));
        jobs.insert("another".into(), waiting(4));
        assert_eq!(jobs.get(&id).map(|w| w.version), Some(3));
        // The same text in another string (not a clone of the snapshot's id).
        let copy = String::from(id.as_str());
        assert_eq!(jobs.get(&copy).map(|w| w.version), Some(3));
        assert_eq!(jobs.get("another").map(|w| w.version), Some(4));
        assert!(jobs.get("missing").is_none());
    }

    #[test]
    fn merging_by_key_gives_every_key_once_in_order_with_what_each_side_had() {
        let a = BTreeMap::from([(1, 'a'), (3, 'c'), (4, 'd')]);
        let b = BTreeMap::from([(2, 20), (3, 30), (5, 50)]);
        let merged: Vec<_> = merge_by_key(a.iter().map(|(k, v)| (k, *v)), b.iter())
            .map(|(k, x, y)| (*k, x, y.copied()))
            .collect();
        assert_eq!(
            merged,
            [
                (1, Some('a'), None),
                (2, None, Some(20)),
                (3, Some('c'), Some(30)),
                (4, Some('d'), None),
                (5, None, Some(50)),
            ]
        );
    }
}
