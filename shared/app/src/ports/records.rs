//! The records the store ports exchange: client tokens, job queries and pages, the scheduler's
//! documents (capacity in use, fair-share usage) and the summaries a cycle reads of jobs.

use std::collections::BTreeMap;

use trainyard_domain::job::{JobStatus, ServiceJob};
use trainyard_domain::order::share_key;

use super::store::{Document, Versioned};

/// The store key of a quota share: `{queue}/{name}`.
pub fn quota_share_key(queue: &str, name: &str) -> String {
    // Not `format!`: a cycle builds one key per fair share.
    let mut key = String::with_capacity(queue.len() + 1 + name.len());
    key.push_str(queue);
    key.push('/');
    key.push_str(name);
    key
}

/// A `clientToken` remembered with the request it came with, so a retry of the same request
/// returns the same job and a different request reusing the token is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientTokenRecord {
    /// The token.
    pub token: String,
    /// SHA-256 (hex) of the canonical request, without the token.
    pub request_hash: String,
    /// The job the token created.
    pub job_id: String,
    /// When it was recorded (epoch ms); tokens may be forgotten after a day.
    pub created_at: i64,
}

/// Result of inserting a job with a client token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InsertJob {
    /// The job was stored (with its token, if any) atomically.
    Inserted,
    /// The token was already recorded; nothing was written. Carries the earlier record.
    TokenExists(ClientTokenRecord),
}

/// The case-insensitive `JOB_NAME` filter: exact, or a prefix when the value ends with `*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameFilter {
    /// Case-insensitive equality (the value is stored lower-cased).
    Exact(String),
    /// Case-insensitive prefix (lower-cased, without the `*`).
    Prefix(String),
}

/// Where a page of jobs continues: strictly after this (created_at, job_id) in newest-first order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobCursor {
    /// `createdAt` of the last job returned.
    pub created_at: i64,
    /// `jobId` of the last job returned (tie-breaker).
    pub job_id: String,
}

/// A query over jobs. All set fields must match. Results are newest first: `created_at`
/// descending, then `job_id` descending.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JobQuery {
    /// Queue name.
    pub queue: Option<String>,
    /// Status.
    pub status: Option<JobStatus>,
    /// Fair-share share identifier.
    pub share_identifier: Option<String>,
    /// Quota share name.
    pub quota_share_name: Option<String>,
    /// Job name filter.
    pub name: Option<NameFilter>,
    /// Only jobs created strictly before this time (epoch ms).
    pub created_before: Option<i64>,
    /// Only jobs created strictly after this time (epoch ms).
    pub created_after: Option<i64>,
    /// Continue after this position.
    pub after: Option<JobCursor>,
    /// Page size, at least 1.
    pub limit: usize,
}

/// One page of results; `next` is set only when more may follow.
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T> {
    /// The items.
    pub items: Vec<T>,
    /// Where the next page starts.
    pub next: Option<JobCursor>,
}

/// Instances a service environment has handed out, per instance type, and per quota share.
///
/// Every dispatch changes it in the same atomic commit as the job, with a version check, so two
/// cycles planning at once can never both hand out the last instance: the second commit fails
/// and its job waits for the next cycle. The dispatch commit checks the totals it writes against
/// the environment's limits and the job's quota share's, so a plan made from a lagging index
/// cannot over-commit either.
///
/// A release does not write it: the attempt's end creates a [`CapacityRelease`] in the same
/// commit as the job, and the scheduler folds the environment's releases into this document
/// (deleting them in the same commit) before it plans. So the capacity in use is this document
/// less the releases not yet folded ([`EnvironmentUsage::net_of`]); until they are folded it is
/// over-counted, never under-counted, and a burst of job endings writes one new item each
/// instead of queueing on this one.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvironmentUsage {
    /// The service environment.
    pub environment: String,
    /// Instances in use per instance type (types at zero are removed).
    pub instances: BTreeMap<String, u64>,
    /// Instances in use per quota share ([`quota_share_key`]) and instance type, counted from the
    /// same dispatches and releases as `instances` (shares at zero are removed). A job's queue
    /// and quota share never change, so its dispatch and its release name the same entry.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub quota_shares: BTreeMap<String, BTreeMap<String, u64>>,
    /// The lease of the last scheduler pass that dispatched here, if it held one: a pass
    /// holding an older lease while this one is live dispatches nothing (see [`Fence`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<Fence>,
}

/// A scheduler lease as a dispatch records it: its fencing token and when it lapses.
///
/// A pass that holds the `scheduler` lease dispatches with its fence. A dispatch commit reads
/// the environment's usage document, and refuses when the document's fence has a higher token
/// that has not lapsed: another pass has taken the lease since this one's and is dispatching,
/// so this pass is the stale one (paused past its lease, say). The version check on the document
/// makes that read and the write one step. Releases keep the fence as it is. Once the fence's
/// lease has lapsed any pass may dispatch again, so a lease document that was lost (its tokens
/// starting over) blocks dispatching for one lease period at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Fence {
    /// The lease's fencing token.
    pub token: u64,
    /// When the lease lapses (epoch ms).
    pub until_ms: i64,
}

impl Fence {
    /// Whether a pass holding `self` must stand aside for `recorded` at `now_ms`.
    pub fn is_fenced_by(self, recorded: Option<Fence>, now_ms: i64) -> bool {
        recorded.is_some_and(|r| r.token > self.token && now_ms < r.until_ms)
    }
}

impl EnvironmentUsage {
    /// All instances in use.
    pub fn total(&self) -> u64 {
        self.instances.values().sum()
    }

    /// Takes a dispatched job's instances ([`ServiceJob::held_instances`]), charged to its quota
    /// share too when it has one.
    pub fn add(&mut self, job: &ServiceJob) {
        let held = job.held_instances();
        add_counts(&mut self.instances, &held);
        if let Some(key) = quota_share_of(job) {
            add_counts(self.quota_shares.entry(key).or_default(), &held);
        }
    }

    /// Gives back the instances of a job's ended attempt, never below zero.
    pub fn remove(&mut self, release: &CapacityRelease) {
        remove_counts(&mut self.instances, &release.instances);
        if let Some(key) = &release.quota_share
            && let Some(counts) = self.quota_shares.get_mut(key)
        {
            remove_counts(counts, &release.instances);
            if counts.is_empty() {
                self.quota_shares.remove(key);
            }
        }
    }

    /// Usage documents keyed by their environment.
    pub fn by_environment(
        usage: Vec<Versioned<EnvironmentUsage>>,
    ) -> BTreeMap<String, Versioned<EnvironmentUsage>> {
        usage
            .into_iter()
            .map(|u| (u.value.environment.clone(), u))
            .collect()
    }

    /// The usage of each environment in `usage` less the `releases` not yet folded into it.
    /// Versions are kept as stored: write a net document only in the commit that deletes the
    /// releases it nets out, or they would be given back twice.
    pub fn net_of(
        usage: Vec<Versioned<EnvironmentUsage>>,
        releases: &[Versioned<CapacityRelease>],
    ) -> BTreeMap<String, Versioned<EnvironmentUsage>> {
        let mut net = Self::by_environment(usage);
        for release in releases {
            if let Some(usage) = net.get_mut(&release.value.environment) {
                usage.value.remove(&release.value);
            }
        }
        net
    }
}

/// The instances one ended attempt gave back, until the scheduler folds them into its
/// environment's [`EnvironmentUsage`].
///
/// Created in the same commit as the job's move out of SCHEDULED, STARTING or RUNNING; the key
/// names the attempt, so it is created once. Each release is its own item: job endings never
/// wait for each other, nor for a dispatch.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CapacityRelease {
    /// The environment the attempt was dispatched to.
    pub environment: String,
    /// The job.
    pub job_id: String,
    /// The attempt (1-based).
    pub attempt: usize,
    /// Instances given back, per instance type.
    pub instances: BTreeMap<String, u32>,
    /// The job's quota share ([`quota_share_key`]), if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_share: Option<String>,
    /// Which part of the attempt's instances, when not all at its end: [`UNSELECTED`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub part: Option<String>,
}

/// [`CapacityRelease::part`] of the preferences SageMaker did not launch.
pub const UNSELECTED: &str = "unselected";

impl CapacityRelease {
    /// What attempt `attempt` of `job`, dispatched to `environment`, gives back.
    pub fn of(environment: &str, job: &ServiceJob, attempt: usize) -> Self {
        let instances = match attempt.checked_sub(1).and_then(|i| job.attempts.get(i)) {
            Some(held) => job.attempt_instances(held).into_owned(),
            None => job.training.instances.clone(),
        };
        Self {
            environment: environment.to_owned(),
            job_id: job.job_id.clone(),
            attempt,
            instances,
            quota_share: quota_share_of(job),
            part: None,
        }
    }

    /// What attempt `attempt` of `job` gives back once SageMaker launched it on one of its
    /// `InstancePreferences` (recorded on the attempt): the instances of the others, held since
    /// its dispatch in case SageMaker picked them, never launched.
    pub fn unselected(environment: &str, job: &ServiceJob, attempt: usize) -> Self {
        let selected = Self::of(environment, job, attempt);
        let mut instances = job.training.instances.clone();
        for (ty, n) in &selected.instances {
            if let Some(count) = instances.get_mut(ty) {
                *count = count.saturating_sub(*n);
            }
        }
        instances.retain(|_, n| *n > 0);
        Self {
            instances,
            part: Some(UNSELECTED.to_owned()),
            ..selected
        }
    }
}

impl Document for CapacityRelease {
    const KIND: &'static str = "capacity-release";
    fn key(&self) -> String {
        match &self.part {
            Some(part) => format!(
                "{}/{}/{}/{part}",
                self.environment, self.job_id, self.attempt
            ),
            None => format!("{}/{}/{}", self.environment, self.job_id, self.attempt),
        }
    }
}

fn quota_share_of(job: &ServiceJob) -> Option<String> {
    let share = job.quota_share_name.as_deref()?;
    Some(quota_share_key(&job.job_queue, share))
}

fn add_counts(counts: &mut BTreeMap<String, u64>, instances: &BTreeMap<String, u32>) {
    for (ty, n) in instances {
        *counts.entry(ty.clone()).or_insert(0) += u64::from(*n);
    }
}

fn remove_counts(counts: &mut BTreeMap<String, u64>, instances: &BTreeMap<String, u32>) {
    for (ty, n) in instances {
        if let Some(used) = counts.get_mut(ty) {
            *used = used.saturating_sub(u64::from(*n));
            if *used == 0 {
                counts.remove(ty);
            }
        }
    }
}

impl Document for EnvironmentUsage {
    const KIND: &'static str = "environment-usage";
    fn key(&self) -> String {
        self.environment.clone()
    }
}

/// The decayed usage of one fair share (see `trainyard_scheduler::fair_share`), and the
/// instances it has held since.
///
/// Usage at any later instant follows from these alone ([`ShareUsageRecord::at`]), as long as
/// the share keeps holding `held`: so a cycle rewrites the record only when the instances a share
/// holds change, never for a share that is idle (or busy) as before. Because the decay is exact
/// for any cut of an interval, the numbers are the same as if it had been rewritten every cycle.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShareUsageRecord {
    /// Queue name.
    pub queue: trainyard_scheduler::SharedStr,
    /// Share identifier.
    pub share: trainyard_scheduler::SharedStr,
    /// Decayed instance-seconds and when they were last brought up to date.
    pub usage: trainyard_scheduler::fair_share::ShareUsage,
    /// Instances the share has held since `usage.at_ms`, as the cycle that wrote the record
    /// counted them (its own dispatches included).
    #[serde(default)]
    pub held: u64,
}

impl ShareUsageRecord {
    /// The share's usage at `now_ms`, with `held` instances held since the record was written.
    pub fn at(&self, now_ms: i64, half_life_s: u32) -> trainyard_scheduler::fair_share::ShareUsage {
        self.usage.advance(now_ms, self.held, half_life_s)
    }
}

impl Document for ShareUsageRecord {
    const KIND: &'static str = "share-usage";
    fn key(&self) -> String {
        quota_share_key(&self.queue, &self.share)
    }
}

/// Why the jobs at the front of one line wait, as the latest cycle that planned the line saw
/// it: a line is a FIFO queue, or one share of a fair-share or quota-managed queue.
///
/// The cycle writes a job's reason into the job only when its code changes; the figures after
/// the code ("needs 4, 2 free") move from cycle to cycle, and writing every waiting job each
/// time would cost a write per job per cycle. The cycle writes this document instead, one per
/// line and only when something in it changed, and whoever reads a job shows its reason from
/// here. Its size is bounded by [`LineWaits::MAX_WAITS`], not by the backlog.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LineWaits {
    /// Queue name.
    pub queue: String,
    /// Share identifier or quota share name (empty for a FIFO queue).
    pub share: String,
    /// When the cycle that wrote it planned (epoch ms).
    pub at_ms: i64,
    /// The line's place among the queue's lines with waiting jobs, in the order the cycle
    /// served them (1-based; always 1 in a FIFO queue).
    pub rank: u32,
    /// How many of the queue's lines had waiting jobs.
    pub lines: u32,
    /// The first [`LineWaits::MAX_WAITS`] waiting jobs planned, in line order, each with why
    /// (shared: a copy costs a pointer).
    pub waits: std::sync::Arc<[JobWait]>,
    /// Where the job named furthest back in line stands: a job that joined the line after the
    /// cycle planned, behind that place, waits behind every job named (absent from documents
    /// written before it was kept, and when none is named).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub furthest: Option<LinePlace>,
}

/// A place in a line, ordered as [`runnable_rank`](trainyard_domain::order::runnable_rank)
/// orders jobs: `schedulingPriority` (counted only within a share) descending, then the time it
/// stands in line, then the job id.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LinePlace {
    /// `schedulingPriority` as the line counts it (0 in a line that is not a share's).
    pub priority: u32,
    /// When it stands in line (epoch ms).
    pub line_at_ms: i64,
    /// The job there.
    pub job_id: trainyard_scheduler::SharedStr,
}

impl LinePlace {
    /// Its sort key, as [`runnable_rank`](trainyard_domain::order::runnable_rank)'s.
    pub fn rank(&self) -> (std::cmp::Reverse<u32>, i64, &str) {
        (
            std::cmp::Reverse(self.priority),
            self.line_at_ms,
            self.job_id.as_str(),
        )
    }
}

impl LineWaits {
    /// Most jobs a line's document names (the rest wait behind them).
    pub const MAX_WAITS: usize = 8;

    /// Whether a job standing at `rank` in the line
    /// ([`runnable_rank`](trainyard_domain::order::runnable_rank)) stands behind every job the
    /// document names.
    pub fn behind_all_named(&self, rank: (std::cmp::Reverse<u32>, i64, &str)) -> bool {
        self.furthest
            .as_ref()
            .is_some_and(|last| rank > last.rank())
    }

    /// The wait of `job_id`, if the document names it.
    pub fn wait_of(&self, job_id: &str) -> Option<(usize, &JobWait)> {
        self.waits
            .iter()
            .enumerate()
            .find(|(_, w)| w.job_id.as_str() == job_id)
    }

    /// [`LineWaits::wait_of`], looking at place `hint` first (the line keeps its order from
    /// cycle to cycle, but for the jobs that left it).
    pub fn wait_near(&self, job_id: &str, hint: usize) -> Option<(usize, &JobWait)> {
        match self.waits.get(hint) {
            Some(w) if w.job_id.as_str() == job_id => Some((hint, w)),
            _ => self.wait_of(job_id),
        }
    }
}

impl LineWaits {
    /// A fingerprint of what a reader is shown: the line's place, the jobs named and their
    /// reasons with their figures (not how many jobs the cycle read, which moves with free
    /// capacity and is shown nowhere); not when the line was planned, nor since when each job
    /// waits. Equal digests, nothing to rewrite.
    ///
    /// Hashed with a fixed seed, so the same in every process; a build with another hasher
    /// version may digest differently, which costs one rewrite of each line, no more. (Every
    /// cycle digests every line: a hasher that reads a word at a time, not a byte.)
    pub fn digest(&self) -> u64 {
        let waits = self.waits.iter().map(|w| (w.job_id.as_str(), &w.reason));
        let furthest = self.furthest.as_ref().map(LinePlace::rank);
        Self::digest_of(self.rank, self.lines, waits, furthest)
    }

    /// [`LineWaits::digest`] of a line's place, its jobs' ids and reasons, and the rank of
    /// the one furthest back ([`LinePlace::rank`]), wherever they are kept.
    pub fn digest_of<'w>(
        rank: u32,
        lines: u32,
        waits: impl Iterator<Item = (&'w str, &'w trainyard_scheduler::SkipReason)>,
        furthest: Option<(std::cmp::Reverse<u32>, i64, &str)>,
    ) -> u64 {
        use std::hash::{BuildHasher, Hash, Hasher};
        let mut hash = foldhash::fast::FixedState::with_seed(0x7472_6169_6e79_6172).build_hasher();
        (rank, lines).hash(&mut hash);
        for (job_id, reason) in waits {
            job_id.hash(&mut hash);
            reason.hash(&mut hash);
        }
        furthest.hash(&mut hash);
        hash.finish()
    }
}

impl Document for LineWaits {
    const KIND: &'static str = "line-waits";
    fn key(&self) -> String {
        quota_share_key(&self.queue, &self.share)
    }
}

/// Per queue, what each of its lines' [`LineWaits`] holds, in brief: a cycle reads these (one
/// small document a queue) to tell which lines changed, and reads and rewrites only those.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WaitDigests {
    /// Queue name.
    pub queue: String,
    /// By share (empty for a FIFO queue's line).
    pub lines: BTreeMap<String, LineDigest>,
}

/// A line's [`LineWaits`] in brief.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LineDigest {
    /// [`LineWaits::digest`] of the stored document.
    pub digest: u64,
    /// Whether it names any job.
    pub waiting: bool,
}

impl Document for WaitDigests {
    const KIND: &'static str = "wait-digests";
    fn key(&self) -> String {
        self.queue.clone()
    }
}

/// When the last complete reconciliation pass began, whichever host ran it: every quiet attempt
/// whose silence crossed a checkpoint before then has been described
/// (`Service::run_due_work`). A host that starts (a new Lambda instance of `retry`) describes
/// only what fell due since, not every quiet attempt again. One document; it only moves forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReconcileMark {
    /// When that pass began (epoch ms).
    pub complete_pass_began_ms: i64,
}

impl ReconcileMark {
    /// The key of the one mark.
    pub const KEY: &'static str = "due-work";
}

impl Document for ReconcileMark {
    const KIND: &'static str = "reconcile-mark";
    fn key(&self) -> String {
        Self::KEY.to_owned()
    }
}

/// What the latest forecast round wrote for a queue: when it ran, how many of the queue's waiting
/// jobs it estimated, the lines whose [`LineEstimates`] it wrote, and how the queue's estimates
/// have held. One small document a queue, replaced every round; metrics read these, and the next
/// round reads its queue's to clear the lines that no longer have waiting jobs.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StartEstimates {
    /// Queue name.
    pub queue: String,
    /// When the round ran (epoch ms).
    pub at_ms: i64,
    /// Waiting jobs of the queue the round estimated, all lines together.
    #[serde(default)]
    pub estimated: usize,
    /// The lines with estimates: share identifier or quota share name (empty for a FIFO queue).
    #[serde(default)]
    pub lines: Vec<String>,
    /// How the queue's estimates have held so far (all its outcomes counted), for metrics;
    /// `None` before any outcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coverage: Option<trainyard_forecast::Coverage>,
}

impl Document for StartEstimates {
    const KIND: &'static str = "start-estimates";
    fn key(&self) -> String {
        self.queue.clone()
    }
}

/// The latest start-time estimates of one line's waiting jobs (`trainyard_forecast`), written by
/// the host that forecasts, read with the jobs: one document a line, as [`LineWaits`], so its
/// size is bounded by the jobs a round estimates per line (about 300 bytes each), not by the
/// queue's backlog.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LineEstimates {
    /// Queue name.
    pub queue: String,
    /// Share identifier or quota share name (empty for a FIFO queue).
    pub share: String,
    /// By job id (each estimate says when it was made).
    pub jobs: BTreeMap<String, trainyard_forecast::Estimate>,
}

impl Document for LineEstimates {
    const KIND: &'static str = "line-estimates";
    fn key(&self) -> String {
        quota_share_key(&self.queue, &self.share)
    }
}

/// One waiting job of a [`LineWaits`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobWait {
    /// The job.
    pub job_id: trainyard_scheduler::SharedStr,
    /// Why it waits, with the figures of the cycle.
    pub reason: trainyard_scheduler::SkipReason,
    /// Since when it has waited for a reason of this code (epoch ms).
    pub since_ms: i64,
}

/// A RUNNABLE job, as the scheduler sees it (see [`SchedulingStore::runnable_heads`](super::SchedulingStore::runnable_heads)): what the planner
/// orders and fits, plus the status reason and version a cycle needs to record why it waits.
///
/// Its text and instances are shared ([`SharedStr`], [`SharedInstances`]) like [`CapacityHolder`]'s: a store
/// that keeps the summaries hands every cycle the same ones, and the planner's [`PendingJob`]
/// takes them as they are.
///
/// [`PendingJob`]: trainyard_scheduler::PendingJob
/// [`SharedStr`]: trainyard_scheduler::SharedStr
/// [`SharedInstances`]: trainyard_scheduler::SharedInstances
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnableHead {
    /// Job id.
    pub job_id: trainyard_scheduler::SharedStr,
    /// Queue name.
    pub job_queue: trainyard_scheduler::SharedStr,
    /// Its fair share or quota share ([`share_key`]; empty when none).
    pub share: trainyard_scheduler::SharedStr,
    /// `schedulingPriority` (0 when unset).
    pub priority: u32,
    /// Its place in line: its submission, or its last requeue (its creation if never recorded).
    pub runnable_at: i64,
    /// How much later than `runnable_at` it stands in its share's line
    /// ([`ServiceJob::line_offset_ms`]).
    pub line_offset_ms: i64,
    /// Instances it needs, per instance type.
    pub instances: trainyard_scheduler::SharedInstances,
    /// `MaxRuntimeInSeconds` of the request, if given.
    pub max_runtime_s: Option<u64>,
    /// Not to be dispatched before this time (retry backoff).
    pub not_before: Option<i64>,
    /// The status reason stored on the job (the last skip reason recorded).
    pub status_reason: Option<trainyard_scheduler::SharedStr>,
    /// The job's stored version: a write based on this summary expects it.
    pub version: u64,
}

impl RunnableHead {
    /// Where it stands in its share's line, as a time ([`ServiceJob::line_at`]).
    pub fn line_at(&self) -> i64 {
        self.runnable_at.saturating_add(self.line_offset_ms)
    }

    /// The summary of a RUNNABLE job stored at `version`.
    pub fn of(job: &ServiceJob, version: u64) -> Self {
        Self {
            job_id: job.job_id.as_str().into(),
            job_queue: job.job_queue.as_str().into(),
            share: share_key(job).into(),
            priority: job.priority(),
            runnable_at: job.runnable_at.unwrap_or(job.created_at),
            line_offset_ms: job.line_offset_ms,
            instances: job.held_instances().into_owned().into(),
            max_runtime_s: job.training.max_runtime_s,
            not_before: job.not_before,
            status_reason: job.status_reason.as_deref().map(Into::into),
            version,
        }
    }
}

/// A job holding capacity, as the scheduler sees it (see [`SchedulingStore::capacity_holders`](super::SchedulingStore::capacity_holders)).
#[derive(Debug, Clone, PartialEq, Eq)]
///
/// Ids and instances are shared ([`SharedStr`], [`SharedInstances`]): a store that keeps the summaries (the memory store does)
/// hands every cycle the same ones, and the planner's [`RunningJob`] takes them as they are.
///
/// [`RunningJob`]: trainyard_scheduler::RunningJob
/// [`SharedInstances`]: trainyard_scheduler::SharedInstances
/// [`SharedStr`]: trainyard_scheduler::SharedStr
pub struct CapacityHolder {
    /// Job id.
    pub job_id: trainyard_scheduler::SharedStr,
    /// Queue name.
    pub job_queue: trainyard_scheduler::SharedStr,
    /// Its fair share or quota share ([`share_key`]; empty when none).
    pub share: trainyard_scheduler::SharedStr,
    /// `schedulingPriority` (0 when unset).
    pub priority: u32,
    /// When its latest attempt started (the job's last update if the attempt has no start).
    pub started_at: i64,
    /// Instances held, per instance type.
    pub instances: trainyard_scheduler::SharedInstances,
    /// `MaxRuntimeInSeconds` of the request, if given.
    pub max_runtime_s: Option<u64>,
    /// `CheckpointConfig.S3Uri` of the request, if given: where its checkpoints are observed.
    pub checkpoint_s3_uri: Option<trainyard_scheduler::SharedStr>,
    /// How many of its attempts were preempted before (`preemptionSummary`).
    pub preemptions: u32,
    /// Whether its attempt has been asked to stop ([`CapacityHolder::stopping_of`]).
    pub stopping: bool,
}

impl CapacityHolder {
    /// The summary of a dispatched job.
    pub fn of(job: &ServiceJob) -> Self {
        Self {
            job_id: job.job_id.as_str().into(),
            job_queue: job.job_queue.as_str().into(),
            share: share_key(job).into(),
            priority: job.priority(),
            started_at: Self::started_at_of(job),
            instances: job.held_instances().into_owned().into(),
            max_runtime_s: job.training.max_runtime_s,
            checkpoint_s3_uri: job.training.checkpoint_s3_uri.as_deref().map(Into::into),
            preemptions: job.preemptions(),
            stopping: Self::stopping_of(job),
        }
    }

    /// Whether a dispatched job's attempt has been asked to stop: it was preempted, timed out
    /// or terminated, and its instances come back when SageMaker reports it stopped.
    pub fn stopping_of(job: &ServiceJob) -> bool {
        job.is_terminated
            || job
                .latest_attempt()
                .is_some_and(|attempt| attempt.stop_requested.is_some())
    }

    /// [`started_at`](Self::started_at) of a dispatched job: when its latest attempt started,
    /// else its last update.
    pub fn started_at_of(job: &ServiceJob) -> i64 {
        job.latest_attempt()
            .and_then(|a| a.started_at)
            .unwrap_or(job.updated_at)
    }

    /// All instances held.
    pub fn total_instances(&self) -> u64 {
        self.instances.values().map(|n| u64::from(*n)).sum()
    }
}

/// How far a reader of [`SchedulingStore::capacity_holders_since`] has followed one store's jobs
/// holding capacity: the store (its number in the process) and how many changes to them it had
/// seen.
///
/// [`SchedulingStore::capacity_holders_since`]: super::SchedulingStore::capacity_holders_since
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldersSeen {
    /// Which store: a number no other store of the process has.
    pub store: u64,
    /// Changes to its holders seen.
    pub changes: u64,
}

/// What [`SchedulingStore::capacity_holders_since`] answers.
///
/// [`SchedulingStore::capacity_holders_since`]: super::SchedulingStore::capacity_holders_since
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HoldersRead {
    /// Every job holding capacity, ordered by job id ([`capacity_holders`]).
    ///
    /// [`capacity_holders`]: super::SchedulingStore::capacity_holders
    All(Vec<CapacityHolder>),
    /// The jobs whose summary changed since what the reader saw, ordered by job id, each with its
    /// summary now, or `None` if it no longer holds capacity.
    Changed(Vec<(String, Option<CapacityHolder>)>),
}
