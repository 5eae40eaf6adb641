//! The scheduling loop's use-cases: the cycle (snapshot → plan → commit → launch), SageMaker
//! state changes, and the periodic pass for due work (timeouts, time limits, terminations,
//! launches to retry, missed events).
//!
//! # The cycle
//!
//! 1. **Snapshot.** Configuration, the jobs holding capacity, capacity in use per environment
//!    (one document each), fair-share usage, and the *heads* of each queue and share: the first
//!    RUNNABLE jobs in dispatch order, as many as the environment has free instances plus
//!    [`CycleConfig::head_extra`]. Reads grow with queues, shares and free capacity, never with
//!    the backlog; jobs are read as summaries (`Store::capacity_holders`,
//!    `Store::runnable_heads`), and whole only when the cycle writes them.
//! 2. **Plan** with the pure planner (`trainyard_scheduler::plan_cycle`).
//! 3. **Commit** each dispatch atomically: the job RUNNABLE → SCHEDULED with a new attempt, and
//!    the environment's usage document, both version-checked. A concurrent cycle that got there
//!    first makes the commit fail; the job simply waits for the next cycle. Capacity can
//!    therefore never be over-committed, whatever runs at once.
//! 4. **Launch** the attempt under its deterministic name ([`attempt_name`]). `ResourceInUse`
//!    means an earlier launch got through: the attempt is adopted. `ResourceLimitExceeded` puts
//!    the job back to RUNNABLE without using an attempt; a rejected request fails the job; a
//!    throttled or failed call leaves the attempt SCHEDULED without an ARN, and the periodic
//!    pass launches it again (the name makes that idempotent).
//! 5. **Record** each waiting job's skip reason when its code changes (`CAPACITY:…`,
//!    `PRIORITY:…`: the text before ` - `). The figures after it (instances free, when a head
//!    should start) move from cycle to cycle; rewriting every waiting head whenever they do would
//!    cost a store write per head per cycle, so the text shows them as of when the job began
//!    waiting for that reason.
//! 6. **Account** fair-share usage: each share's decayed instance-seconds advance to now with
//!    the instances it held since the last cycle.
//!
//! # State changes
//!
//! SageMaker's events (or a describe, when reconciling) map to Batch statuses: `InProgress`
//! with `Downloading` → STARTING, `Training`/`Uploading` → RUNNING, `Completed` → SUCCEEDED,
//! `Failed`/`Stopped` → a retry decision (`trainyard_scheduler::retry`). Events for an older
//! attempt, for a finished job, or that would move a job backwards are ignored: duplicates and
//! reordering change nothing. Capacity is released in the same commit as the final state.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use serde_json::Value;
use trainyard_domain::environment::ServiceEnvironment;
use trainyard_domain::job::{Attempt, JobStatus, ServiceJob};
use trainyard_domain::policy::SchedulingPolicy;
use trainyard_domain::queue::JobQueue;
use trainyard_domain::quota_share::{InSharePreemption, QuotaShare};
use trainyard_domain::{ResourceStatus, State};
use trainyard_scheduler::fair_share::ShareUsage;
use trainyard_scheduler::retry::{self, AfterFailure, AttemptFailure, RetryConfig, StopCause};
use trainyard_scheduler::{
    Config as PlannerConfig, EnvironmentState, PendingJob, QueuePolicy, QueueState,
    QuotaShareState, RunningJob, ShareKey, SharedStr, Snapshot, plan_cycle,
};

use crate::error::AppError;
use crate::ports::{
    BackendError, CapacityHolder, EnvironmentUsage, EventSink, RunnableHead, ShareUsageRecord,
    Store, StoreError, TrainingBackend, TrainingJobState, TrainingStatus, Versioned, Write,
};
use crate::service::Service;

/// Settings of the scheduling loop.
#[derive(Debug, Clone, PartialEq)]
pub struct CycleConfig {
    /// The planner's settings (strict FIFO or backfill, default runtime).
    pub planner: PlannerConfig,
    /// Backoff for retries and capacity errors.
    pub retry: RetryConfig,
    /// Heads read per queue or share beyond the environment's free instances: candidates for
    /// backfill and for skip reasons.
    pub head_extra: usize,
    /// Most heads read per queue or share, whatever the free capacity (bounds one cycle).
    pub max_heads: usize,
}

impl Default for CycleConfig {
    fn default() -> Self {
        Self {
            planner: PlannerConfig::default(),
            retry: RetryConfig::default(),
            head_extra: 16,
            max_heads: 1_000,
        }
    }
}

/// What one cycle did, for logs and metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CycleReport {
    /// Jobs committed to SCHEDULED.
    pub dispatched: usize,
    /// Attempts SageMaker accepted (or already had).
    pub launched: usize,
    /// Dispatches refused because the job or the environment changed since the snapshot.
    pub conflicts: usize,
    /// Launches refused for lack of capacity (job back to RUNNABLE).
    pub capacity_errors: usize,
    /// Launches left for the next pass (throttled, unavailable).
    pub launch_deferred: usize,
    /// Jobs failed because SageMaker rejected the request.
    pub rejected: usize,
    /// Waiting jobs whose skip reason changed.
    pub reasons_updated: usize,
    /// Running attempts asked to stop to give their capacity back (quota shares), each counted
    /// in the cycle that first asked (later cycles during its stop grace ask again).
    pub preemptions: usize,
}

/// The prefix of every training job Trainyard launches, so that IAM policies can scope
/// SageMaker actions to Trainyard's own jobs (`training-job/ty-*`).
pub const ATTEMPT_NAME_PREFIX: &str = "ty-";

/// The SageMaker training-job name of attempt `n` (1-based) of `job`: [`ATTEMPT_NAME_PREFIX`],
/// a readable part from the payload's `TrainingJobName`, the job id without dashes, and the
/// attempt number. At most 63 characters of `[a-zA-Z0-9-]`, as SageMaker requires, and the same
/// every time, so that a repeated launch is recognised (`ResourceInUse`) instead of running twice.
pub fn attempt_name(job: &ServiceJob, n: usize) -> String {
    let id: String = job
        .job_id
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect();
    let suffix = format!("{id}-{n}");
    let room = 63usize.saturating_sub(ATTEMPT_NAME_PREFIX.len() + suffix.len() + 1);
    let prefix: String = job
        .training
        .training_job_name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .take(room)
        .collect();
    let prefix = prefix.trim_matches('-');
    if prefix.is_empty() {
        format!("{ATTEMPT_NAME_PREFIX}{suffix}")
    } else {
        format!("{ATTEMPT_NAME_PREFIX}{prefix}-{suffix}")
    }
}

/// The job id and attempt number an [`attempt_name`] encodes, if it is one of ours. Job ids are
/// UUIDs, so the 32 hex digits before the attempt number give the id back. SageMaker reports
/// names as created, but ARNs lower-case them, so the prefix is matched without regard to case.
pub fn parse_attempt_name(name: &str) -> Option<(String, usize)> {
    let head = name.get(..ATTEMPT_NAME_PREFIX.len())?;
    if !head.eq_ignore_ascii_case(ATTEMPT_NAME_PREFIX) {
        return None;
    }
    let (rest, n) = name[ATTEMPT_NAME_PREFIX.len()..].rsplit_once('-')?;
    let n: usize = n.parse().ok()?;
    let hex = rest.get(rest.len().checked_sub(32)?..)?;
    if !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let mut id = String::with_capacity(36);
    for (i, part) in [
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..],
    ]
    .into_iter()
    .enumerate()
    {
        if i > 0 {
            id.push('-');
        }
        id.push_str(part);
    }
    Some((id, n))
}

/// Batch status for a SageMaker state of a live attempt (reference §4.1).
fn batch_status(state: &TrainingJobState) -> Option<JobStatus> {
    match state.status {
        TrainingStatus::InProgress => match state.secondary.as_str() {
            "Downloading" | "DownloadingTrainingImage" => Some(JobStatus::Starting),
            "Training" | "Uploading" => Some(JobStatus::Running),
            // Starting, Pending, LaunchingMLInstances, …: still SCHEDULED.
            _ => None,
        },
        TrainingStatus::Completed => Some(JobStatus::Succeeded),
        // Stopping is not an end: capacity is held until Stopped.
        TrainingStatus::Stopping => None,
        TrainingStatus::Failed | TrainingStatus::Stopped => Some(JobStatus::Failed),
    }
}

/// What [`Service::on_training_state`] did with a state change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateOutcome {
    /// The job moved (to the contained status).
    Applied(JobStatus),
    /// Nothing to do: a duplicate, a stale or out-of-order event, or a finished job.
    Ignored,
    /// Not one of Trainyard's training jobs, or its job no longer exists.
    Unknown,
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ending {
    /// The training job completed.
    Completed,
    /// It failed, was stopped, or could not be created.
    Failed(AttemptFailure),
}

/// What one pass over the due work did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DueReport {
    /// Attempts whose launch was retried.
    pub relaunched: usize,
    /// Attempts asked to stop (terminated or timed out).
    pub stops_requested: usize,
    /// State changes found by describing attempts (events that went missing).
    pub reconciled: usize,
}

/// What a cycle remembers of a pending job it handed the planner, to act on the plan.
struct Waiting {
    /// The version the snapshot read: a dispatch or reason write expects it.
    version: u64,
    /// The status reason stored then.
    status_reason: Option<SharedStr>,
    /// Whether its queue has `jobStateTimeLimitActions` (then every skip reads the job whole).
    time_limits: bool,
}

/// The snapshot's pending jobs, looked up by the ids the plan hands back.
#[derive(Default)]
struct WaitingJobs {
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

    fn get(&self, id: &str) -> Option<&Waiting> {
        let found = self.by_address.get(&address(id)).map(|i| &self.jobs[*i]);
        found
            .filter(|(job, _)| std::ptr::eq(job.as_str(), id))
            .or_else(|| self.jobs.iter().find(|(job, _)| job.as_str() == id))
            .map(|(_, waiting)| waiting)
    }
}

/// The address of a string's text: the same for every clone of one [`SharedStr`], and distinct
/// between strings alive at once.
fn address(s: &str) -> usize {
    s.as_ptr() as usize
}

/// The planner's view of the world, plus what a cycle needs to act on the plan.
struct Loaded {
    snapshot: Snapshot,
    /// The pending jobs of the snapshot.
    waiting: WaitingJobs,
    queues: BTreeMap<String, JobQueue>,
    usage: BTreeMap<String, Versioned<EnvironmentUsage>>,
    /// Instances held per fair share before this cycle's dispatches.
    held: BTreeMap<ShareKey, u64>,
    /// Fair-share queues and their decay windows (seconds).
    fair_queues: BTreeMap<String, u32>,
    /// Each share's stored usage record, with its version for step 6's write.
    share_usage: BTreeMap<ShareKey, Versioned<ShareUsageRecord>>,
}

/// Whether a status reason has the code `code` (a [`trainyard_scheduler::SkipReason::code`],
/// which never contains ` - `): the text before ` - `, or all of it when there is none.
/// Compared as a prefix, without searching: a cycle asks this of every waiting head.
fn has_reason_code(reason: &str, code: &str) -> bool {
    reason
        .strip_prefix(code)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(" - "))
}

/// The planner's view of a head, and what the cycle keeps of it.
fn pending(head: RunnableHead, time_limits: bool) -> (PendingJob, Waiting) {
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
    };
    (job, waiting)
}

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
        expected_end_ms: started.saturating_add((runtime_s as i64).saturating_mul(1000)),
    }
}

/// The CreateTrainingJob request of an attempt: the submitted payload under the attempt's name.
fn launch_request(job: &ServiceJob, name: &str) -> Result<Value, AppError> {
    let mut request: Value = serde_json::from_str(&job.service_request_payload).map_err(|e| {
        AppError::Internal(StoreError::Corrupt {
            key: job.job_id.clone(),
            message: e.to_string(),
        })
    })?;
    if let Value::Object(map) = &mut request {
        map.insert("TrainingJobName".into(), Value::String(name.to_owned()));
    }
    Ok(request)
}

/// How many preempted attempts a job's `preemptionSummary` lists (a sliding window).
const RECENT_PREEMPTIONS: usize = 5;

/// Counts a preemption of the job's latest attempt in its `preemptionSummary`.
fn record_preemption(job: &mut ServiceJob) {
    let Some(attempt) = job.latest_attempt().cloned() else {
        return;
    };
    let summary = job.preemption_summary.get_or_insert_with(Default::default);
    summary.preempted_attempt_count += 1;
    summary.recent_preempted_attempts.push(attempt);
    let excess = summary
        .recent_preempted_attempts
        .len()
        .saturating_sub(RECENT_PREEMPTIONS);
    summary.recent_preempted_attempts.drain(..excess);
}

/// Most times a use-case re-reads and retries after losing a race on the same job.
const RACE_RETRIES: usize = 5;

impl<S: Store, E: EventSink> Service<S, E> {
    /// Runs one scheduling cycle (see the module docs for its steps).
    pub async fn run_cycle<B: TrainingBackend>(
        &self,
        backend: &B,
        config: &CycleConfig,
    ) -> Result<CycleReport, AppError> {
        let now = self.clock.now_ms();
        let mut report = CycleReport::default();

        // 1. Snapshot.
        let mut loaded = self.load_snapshot(config).await?;

        // 2. Plan.
        let plan = plan_cycle(&loaded.snapshot, now, &config.planner);

        // 3 and 4. Commit each dispatch, then launch it.
        for dispatch in &plan.dispatches {
            let Some(waiting) = loaded.waiting.get(dispatch.job_id.as_str()) else {
                continue;
            };
            // The job as the snapshot saw it, or a conflict: it changed since (another cycle
            // dispatched it, it was terminated), and the plan's assumption no longer holds.
            let stored = match self.store.get_job(&dispatch.job_id).await? {
                Some(stored) if stored.version == waiting.version => stored,
                _ => {
                    report.conflicts += 1;
                    self.reread_usage(&mut loaded, &dispatch.environment)
                        .await?;
                    continue;
                }
            };
            let usage = loaded
                .usage
                .get(dispatch.environment.as_str())
                .cloned()
                .unwrap_or(Versioned {
                    value: EnvironmentUsage {
                        environment: dispatch.environment.to_string(),
                        ..EnvironmentUsage::default()
                    },
                    version: 0,
                });
            let mut job = stored.value;
            let n = job.attempts.len() + 1;
            if job.transition(JobStatus::Scheduled, None, now).is_err() {
                continue;
            }
            job.not_before = None;
            job.attempts.push(Attempt {
                training_job_name: attempt_name(&job, n),
                training_job_arn: None,
                started_at: Some(now),
                stopped_at: None,
                status_reason: None,
                service_environment: Some(dispatch.environment.to_string()),
            });
            let mut new_usage = usage.value.clone();
            new_usage.add(&job.training.instances);
            let writes = [
                Write::job(job.clone(), stored.version),
                Write::document(&new_usage, usage.version)?,
            ];
            match self.store.commit(&writes).await {
                Ok(()) => {}
                Err(StoreError::Conflict) => {
                    report.conflicts += 1;
                    self.reread_usage(&mut loaded, &dispatch.environment)
                        .await?;
                    continue;
                }
                Err(e) => return Err(e.into()),
            }
            loaded.usage.insert(
                dispatch.environment.to_string(),
                Versioned {
                    value: new_usage,
                    version: usage.version + 1,
                },
            );
            report.dispatched += 1;
            tracing::info!(job_id = %job.job_id, queue = %job.job_queue, attempt = n,
                environment = %dispatch.environment, "dispatched");
            self.publish_status(&job).await;
            self.launch(backend, &job, config, &mut report).await?;
        }

        // 4b. Preempt: mark each victim's attempt, then stop it. Its Stopped state change
        // requeues it (or fails it once preemptionRetriesBeforeTermination is spent) and releases
        // the capacity the preemptor waits for.
        for preemption in &plan.preemptions {
            if self
                .preempt(backend, &preemption.victim_job_id, config)
                .await?
            {
                report.preemptions += 1;
                tracing::info!(victim = %preemption.victim_job_id, for_job = %preemption.for_job_id,
                    reason = ?preemption.reason, "preempting");
            }
        }

        // 5. Record why the others wait, and apply the queues' time limits to them.
        for skip in &plan.skips {
            let Some(waiting) = loaded.waiting.get(skip.job_id.as_str()) else {
                continue;
            };
            // During a capacity backoff Batch's CAPACITY reason says more than "backing off".
            let capacity_wait =
                matches!(skip.reason, trainyard_scheduler::SkipReason::Backoff { .. })
                    && waiting
                        .status_reason
                        .as_deref()
                        .is_some_and(retry::is_capacity_reason);
            // A reason is rewritten when its code changes, not its figures (see step 5).
            let changed = !capacity_wait
                && !waiting
                    .status_reason
                    .as_deref()
                    .is_some_and(|r| has_reason_code(r, skip.reason.code()));
            // Most waiting jobs keep their reason and their queue has no time limits: nothing
            // to write, so spare the read of the job.
            if !changed && !waiting.time_limits {
                continue;
            }
            // Without time limits only the reason is written, in place.
            if !waiting.time_limits {
                let reason = Some(skip.reason.to_string());
                match self
                    .store
                    .set_status_reason(&skip.job_id, waiting.version, reason)
                    .await
                {
                    Ok(_) => report.reasons_updated += 1,
                    // Changed since the snapshot: the next cycle sees the new state.
                    Err(StoreError::Conflict) => {}
                    Err(e) => return Err(e.into()),
                }
                continue;
            }
            // Changed since the snapshot: the next cycle sees the new state.
            let stored = match self.store.get_job(&skip.job_id).await? {
                Some(stored) if stored.version == waiting.version => stored,
                _ => continue,
            };
            let actions = loaded
                .queues
                .get(&stored.value.job_queue)
                .map_or(&[][..], |q| &q.job_state_time_limit_actions[..]);
            let mut job = stored.value.clone();
            if changed {
                job.status_reason = Some(skip.reason.to_string());
            }
            let limit = retry::time_limit_action(actions, &job, now);
            if let Some(reason) = limit {
                if job.transition(JobStatus::Failed, Some(reason), now).is_ok() {
                    job.is_terminated = true;
                    if self.store.update_job(&job, stored.version).await.is_ok() {
                        self.publish_status(&job).await;
                    }
                }
                continue;
            }
            if !changed {
                continue;
            }
            match self.store.update_job(&job, stored.version).await {
                Ok(_) => report.reasons_updated += 1,
                // Changed since the snapshot: the next cycle sees the new state.
                Err(StoreError::Conflict) => {}
                Err(e) => return Err(e.into()),
            }
        }

        // 6. Fair-share usage.
        self.account_usage(&loaded, now).await?;
        Ok(report)
    }

    /// After a conflicting dispatch: another writer changed the job or the environment, so the
    /// environment's usage is read again and the rest of the cycle checks against what is
    /// really stored.
    async fn reread_usage(&self, loaded: &mut Loaded, environment: &str) -> Result<(), AppError> {
        let fresh = self
            .store
            .get_document::<EnvironmentUsage>(environment)
            .await?;
        if let Some(fresh) = fresh {
            loaded.usage.insert(environment.to_owned(), fresh);
        }
        Ok(())
    }

    async fn load_snapshot(&self, config: &CycleConfig) -> Result<Loaded, AppError> {
        let environments = self.store.list_resources::<ServiceEnvironment>().await?;
        let queues = self.store.list_resources::<JobQueue>().await?;
        let policies: BTreeMap<String, SchedulingPolicy> = self
            .store
            .list_resources::<SchedulingPolicy>()
            .await?
            .into_iter()
            .map(|p| (p.value.name.clone(), p.value))
            .collect();
        // Quota shares by queue, in name order (the planner reads them per queue).
        let mut quota_shares: BTreeMap<String, Vec<QuotaShareState>> = BTreeMap::new();
        for share in self.store.list_resources::<QuotaShare>().await? {
            let share = share.value;
            let sharing = &share.resource_sharing_configuration;
            quota_shares
                .entry(share.job_queue.clone())
                .or_default()
                .push(QuotaShareState {
                    limits: share
                        .capacity_limits
                        .iter()
                        .map(|l| (l.capacity_unit.clone(), l.max_capacity))
                        .collect(),
                    strategy: sharing.strategy,
                    borrow_limit_percent: sharing.borrow_limit.unwrap_or(-1),
                    in_share_preemption: share.preemption_configuration.in_share_preemption
                        == InSharePreemption::Enabled,
                    enabled: share.state == State::Enabled,
                    name: share.quota_share_name,
                });
        }
        for shares in quota_shares.values_mut() {
            shares.sort_by(|a, b| a.name.cmp(&b.name));
        }
        let usage: BTreeMap<String, Versioned<EnvironmentUsage>> = self
            .store
            .list_documents::<EnvironmentUsage>()
            .await?
            .into_iter()
            .map(|u| (u.value.environment.clone(), u))
            .collect();

        let mut snapshot = Snapshot::default();
        let mut free: BTreeMap<String, u64> = BTreeMap::new();
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
            snapshot.environments.push(EnvironmentState {
                name: env.service_environment_name,
                enabled: env.state == State::Enabled && env.status != ResourceStatus::Deleting,
                limits: env.capacity_limits,
            });
        }

        let mut waiting = WaitingJobs::default();
        let mut fair_queues = BTreeMap::new();
        let mut queue_map = BTreeMap::new();
        for queue in queues {
            let queue = queue.value;
            let name = queue.job_queue_name.clone();
            let policy = match queue
                .scheduling_policy
                .as_ref()
                .and_then(|p| policies.get(p))
            {
                Some(SchedulingPolicy {
                    fairshare_policy: Some(fair),
                    ..
                }) => {
                    fair_queues.insert(name.clone(), fair.share_decay_s());
                    QueuePolicy::FairShare(fair.clone())
                }
                Some(SchedulingPolicy {
                    quota_share_policy: Some(_),
                    ..
                }) => QueuePolicy::QuotaShare(quota_shares.remove(&name).unwrap_or_default()),
                _ => QueuePolicy::Fifo,
            };
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
            // One list per share (one for a FIFO queue).
            let mut heads = Vec::new();
            match policy {
                QueuePolicy::Fifo => heads.push(self.store.runnable_heads(&name, "", limit).await?),
                QueuePolicy::FairShare(_) | QueuePolicy::QuotaShare(_) => {
                    for share in self.store.runnable_shares(&name).await? {
                        heads.push(self.store.runnable_heads(&name, &share, limit).await?);
                    }
                }
            }
            let time_limits = !queue.job_state_time_limit_actions.is_empty();
            let count = heads.iter().map(Vec::len).sum();
            snapshot.pending.reserve(count);
            waiting.reserve(count);
            for list in heads {
                for head in list {
                    let (job, head) = pending(head, time_limits);
                    waiting.insert(job.job_id.clone(), head);
                    snapshot.pending.push(job);
                }
            }
            snapshot.queues.push(QueueState {
                name: name.clone(),
                priority: queue.priority,
                environment: queue.service_environment().map(str::to_owned),
                policy,
            });
            queue_map.insert(name, queue);
        }

        // Summaries, not whole jobs: every cycle reads all of them.
        let holders = self.store.capacity_holders().await?;
        // Counted by the addresses of the names (a store that shares one string per name, as
        // the memory store does, gives one entry per share without comparing text), then
        // summed by name.
        let mut held_by: foldhash::HashMap<(usize, usize), (&CapacityHolder, u64)> =
            foldhash::HashMap::default();
        for job in holders.iter().filter(|j| !j.share.is_empty()) {
            let entry = held_by.entry((address(&job.job_queue), address(&job.share)));
            entry.or_insert((job, 0)).1 += job.total_instances();
        }
        let mut held: BTreeMap<ShareKey, u64> = BTreeMap::new();
        for (job, n) in held_by.into_values() {
            let key = ShareKey {
                queue: job.job_queue.clone(),
                share: job.share.clone(),
            };
            *held.entry(key).or_insert(0) += n;
        }
        snapshot.running = holders
            .into_iter()
            .map(|job| running(job, &config.planner))
            .collect();
        let share_usage: BTreeMap<ShareKey, Versioned<ShareUsageRecord>> = self
            .store
            .list_documents::<ShareUsageRecord>()
            .await?
            .into_iter()
            .map(|r| {
                let key = ShareKey {
                    queue: r.value.queue.as_str().into(),
                    share: r.value.share.as_str().into(),
                };
                (key, r)
            })
            .collect();
        snapshot.usage = share_usage
            .iter()
            .map(|(k, r)| (k.clone(), r.value.usage))
            .collect();
        Ok(Loaded {
            snapshot,
            waiting,
            queues: queue_map,
            usage,
            held,
            fair_queues,
            share_usage,
        })
    }

    /// Step 6: each fair share's decayed usage advances to `now` with the instances it held.
    async fn account_usage(&self, loaded: &Loaded, now: i64) -> Result<(), AppError> {
        // The records were read with the snapshot; a concurrent cycle that wrote one since makes
        // that write conflict, which is harmless (it accounted the same interval).
        // Every share that holds instances or has a record: the two maps merged in key order.
        let mut holding = loaded.held.iter().peekable();
        let mut stored = loaded.share_usage.iter().peekable();
        loop {
            let order = match (holding.peek(), stored.peek()) {
                (None, None) => break,
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (Some((h, _)), Some((s, _))) => h.cmp(s),
            };
            let (key, held, existing) = match order {
                Ordering::Less => holding.next().map(|(k, n)| (k, *n, None)),
                Ordering::Greater => stored.next().map(|(k, r)| (k, 0, Some(r))),
                Ordering::Equal => holding
                    .next()
                    .zip(stored.next())
                    .map(|((k, n), (_, r))| (k, *n, Some(r))),
            }
            .unwrap_or_else(|| unreachable!("peeked"));
            let Some(half_life) = loaded.fair_queues.get(key.queue.as_str()) else {
                continue;
            };
            let (usage, version) = match existing {
                Some(r) => (r.value.usage, r.version),
                None => (
                    ShareUsage {
                        instance_seconds: 0.0,
                        at_ms: now,
                    },
                    0,
                ),
            };
            let record = ShareUsageRecord {
                queue: key.queue.to_string(),
                share: key.share.to_string(),
                usage: usage.advance(now, held, *half_life),
            };
            match self
                .store
                .commit(&[Write::document_value(record, version)])
                .await
            {
                // A concurrent cycle accounted the same interval: nothing is lost.
                Ok(()) | Err(StoreError::Conflict) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Step 4: creates the attempt's training job and records its ARN, or ends the attempt.
    async fn launch<B: TrainingBackend>(
        &self,
        backend: &B,
        job: &ServiceJob,
        config: &CycleConfig,
        report: &mut CycleReport,
    ) -> Result<(), AppError> {
        let n = job.attempts.len();
        let Some(attempt) = job.latest_attempt() else {
            return Ok(());
        };
        let name = attempt.training_job_name.clone();
        let created = backend
            .create_training_job(launch_request(job, &name)?)
            .await;
        let arn = match created {
            Ok(arn) => arn,
            // An earlier launch of this very attempt got through (a crash, a retried call).
            Err(BackendError::AlreadyExists(_)) => {
                match backend.describe_training_job(&name).await {
                    Ok(state) => state.arn,
                    Err(e) => {
                        tracing::warn!(job_id = %job.job_id, error = %e, "launch adopted but not described; will retry");
                        report.launch_deferred += 1;
                        return Ok(());
                    }
                }
            }
            // Refused. But an earlier create of this very attempt may have landed with its
            // response lost, and SageMaker may check the quota before the name: only a describe
            // that finds nothing proves that no training job runs under this name.
            Err(refusal @ (BackendError::Capacity(_) | BackendError::Rejected { .. })) => {
                match backend.describe_training_job(&name).await {
                    Ok(state) => state.arn,
                    Err(BackendError::NotFound(_)) => {
                        let failure = match refusal {
                            BackendError::Capacity(message) => {
                                report.capacity_errors += 1;
                                AttemptFailure::Rejected {
                                    code: "ResourceLimitExceeded".into(),
                                    message,
                                }
                            }
                            BackendError::Rejected { code, message } => {
                                report.rejected += 1;
                                AttemptFailure::Rejected { code, message }
                            }
                            other => AttemptFailure::Rejected {
                                code: "Unknown".into(),
                                message: other.to_string(),
                            },
                        };
                        self.finish_attempt(&job.job_id, n, Ending::Failed(failure), config)
                            .await?;
                        return Ok(());
                    }
                    Err(e) => {
                        tracing::warn!(job_id = %job.job_id, error = %e, "refused launch not described; will retry");
                        report.launch_deferred += 1;
                        return Ok(());
                    }
                }
            }
            Err(e @ (BackendError::NotFound(_) | BackendError::Unavailable(_))) => {
                tracing::warn!(job_id = %job.job_id, error = %e, "launch deferred to the next pass");
                report.launch_deferred += 1;
                return Ok(());
            }
        };
        report.launched += 1;
        self.record_arn(&job.job_id, n, &arn).await
    }

    /// Stores attempt `n`'s training-job ARN (if it is still the job's latest attempt).
    async fn record_arn(&self, job_id: &str, n: usize, arn: &str) -> Result<(), AppError> {
        for _ in 0..RACE_RETRIES {
            let Some(stored) = self.store.get_job(job_id).await? else {
                return Ok(());
            };
            let mut job = stored.value;
            let Some(attempt) = job.attempts.get_mut(n.wrapping_sub(1)) else {
                return Ok(());
            };
            if attempt.training_job_arn.as_deref() == Some(arn) {
                return Ok(());
            }
            attempt.training_job_arn = Some(arn.to_owned());
            match self.store.update_job(&job, stored.version).await {
                Ok(_) => return Ok(()),
                Err(StoreError::Conflict) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Ends attempt `n` of a job: stamps the attempt, decides the job's next status (success,
    /// retry, capacity requeue, failure) and releases the attempt's capacity, all in one commit.
    /// Re-reads and retries when it loses a race.
    async fn finish_attempt(
        &self,
        job_id: &str,
        n: usize,
        ending: Ending,
        config: &CycleConfig,
    ) -> Result<StateOutcome, AppError> {
        for _ in 0..RACE_RETRIES {
            let now = self.clock.now_ms();
            let Some(stored) = self.store.get_job(job_id).await? else {
                return Ok(StateOutcome::Unknown);
            };
            let mut job = stored.value;
            if job.attempts.len() != n || !job.status.is_dispatched() {
                return Ok(StateOutcome::Ignored);
            }
            let Some(attempt) = job.attempts.last_mut() else {
                return Ok(StateOutcome::Ignored);
            };
            attempt.stopped_at = Some(now);
            let environment = attempt.service_environment.clone();
            let (next, reason) = match &ending {
                Ending::Completed => {
                    let reason = retry::sagemaker_reason("Training job completed");
                    attempt.status_reason = Some(reason.clone());
                    (JobStatus::Succeeded, reason)
                }
                Ending::Failed(failure) => {
                    attempt.status_reason = Some(retry::attempt_status_reason(failure));
                    let decision = retry::decide_after_failure(&job, failure, now, &config.retry);
                    if *failure == AttemptFailure::Stopped(StopCause::Preempted) {
                        record_preemption(&mut job);
                    }
                    match decision {
                        AfterFailure::Requeue {
                            not_before_ms,
                            status_reason,
                            ..
                        } => {
                            job.not_before = Some(not_before_ms);
                            (JobStatus::Runnable, status_reason)
                        }
                        AfterFailure::Failed { status_reason } => {
                            (JobStatus::Failed, status_reason)
                        }
                    }
                }
            };
            if job.transition(next, Some(reason), now).is_err() {
                return Ok(StateOutcome::Ignored);
            }
            let mut writes = vec![Write::job(job.clone(), stored.version)];
            if let Some(environment) = &environment {
                let usage = self
                    .store
                    .get_document::<EnvironmentUsage>(environment)
                    .await?;
                if let Some(mut usage) = usage {
                    usage.value.remove(&job.training.instances);
                    writes.push(Write::document(&usage.value, usage.version)?);
                }
            }
            match self.store.commit(&writes).await {
                Ok(()) => {
                    tracing::info!(job_id = %job.job_id, attempt = n, status = %next,
                        reason = job.status_reason.as_deref().unwrap_or(""), "attempt ended");
                    self.publish_status(&job).await;
                    return Ok(StateOutcome::Applied(next));
                }
                Err(StoreError::Conflict) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(AppError::Internal(StoreError::Conflict))
    }

    /// Asks the backend to stop a running job so that its capacity goes to a preemptor. The
    /// attempt is marked first, so that its Stopped state change is read as a preemption. Returns
    /// whether this was a new preemption: false if the victim had already ended or moved on, or
    /// had already been asked to stop.
    async fn preempt<B: TrainingBackend>(
        &self,
        backend: &B,
        victim: &str,
        config: &CycleConfig,
    ) -> Result<bool, AppError> {
        let Some(stored) = self.store.get_job(victim).await? else {
            return Ok(false);
        };
        let mut job = stored.value;
        let n = job.attempts.len();
        if !job.status.is_dispatched() || job.is_terminated {
            return Ok(false);
        }
        let Some(attempt) = job.attempts.last_mut() else {
            return Ok(false);
        };
        let name = attempt.training_job_name.clone();
        // A cycle during the victim's stop grace plans the same preemption again: the stop is
        // asked for again (harmless), but counted once, when the attempt is first marked.
        let first = attempt.status_reason.is_none();
        if first {
            attempt.status_reason = Some(retry::PREEMPTED_REASON.to_owned());
            match self.store.update_job(&job, stored.version).await {
                Ok(_) => {}
                // The victim changed (ended, terminated): the next cycle plans again.
                Err(StoreError::Conflict) => return Ok(false),
                Err(e) => return Err(e.into()),
            }
        }
        match backend.stop_training_job(&name).await {
            Ok(()) => Ok(first),
            // Never launched: nothing runs, so the attempt ends here.
            Err(BackendError::NotFound(_)) => {
                let ending = Ending::Failed(AttemptFailure::Stopped(StopCause::Preempted));
                self.finish_attempt(victim, n, ending, config).await?;
                Ok(first)
            }
            Err(e) => {
                tracing::warn!(job_id = %victim, error = %e, "preemption stop deferred");
                Ok(false)
            }
        }
    }

    /// Applies a SageMaker state change (from an event, or from describing an attempt).
    /// Duplicates, stale attempts, backward moves and finished jobs are ignored.
    pub async fn on_training_state(
        &self,
        state: &TrainingJobState,
        config: &CycleConfig,
    ) -> Result<StateOutcome, AppError> {
        let Some((job_id, n)) = parse_attempt_name(&state.name) else {
            return Ok(StateOutcome::Unknown);
        };
        for _ in 0..RACE_RETRIES {
            let Some(stored) = self.store.get_job(&job_id).await? else {
                return Ok(StateOutcome::Unknown);
            };
            let mut job = stored.value;
            if job.attempts.len() != n || !job.status.is_dispatched() {
                return Ok(StateOutcome::Ignored);
            }
            let Some(next) = batch_status(state) else {
                return Ok(StateOutcome::Ignored);
            };
            match next {
                JobStatus::Succeeded => {
                    return self
                        .finish_attempt(&job_id, n, Ending::Completed, config)
                        .await;
                }
                JobStatus::Failed => {
                    let failure = self.failure_of(&job, state);
                    return self
                        .finish_attempt(&job_id, n, Ending::Failed(failure), config)
                        .await;
                }
                _ => {}
            }
            if !job.status.can_transition_to(next) {
                return Ok(StateOutcome::Ignored);
            }
            let now = self.clock.now_ms();
            if let Some(attempt) = job.attempts.last_mut() {
                attempt
                    .training_job_arn
                    .get_or_insert_with(|| state.arn.clone());
            }
            let reason = job.status_reason.take().filter(|_| job.is_terminated);
            if job.transition(next, reason, now).is_err() {
                return Ok(StateOutcome::Ignored);
            }
            match self.store.update_job(&job, stored.version).await {
                Ok(_) => {
                    self.publish_status(&job).await;
                    return Ok(StateOutcome::Applied(next));
                }
                Err(StoreError::Conflict) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(AppError::Internal(StoreError::Conflict))
    }

    /// Why a `Failed` or `Stopped` attempt ended, using what Trainyard recorded when it asked
    /// for the stop.
    fn failure_of(&self, job: &ServiceJob, state: &TrainingJobState) -> AttemptFailure {
        if state.status == TrainingStatus::Failed {
            let reason = state
                .failure_reason
                .clone()
                .unwrap_or_else(|| "Unknown failure".into());
            return AttemptFailure::Failed {
                failure_reason: reason,
            };
        }
        let requested = job
            .latest_attempt()
            .and_then(|a| a.status_reason.as_deref());
        let cause = if job.is_terminated {
            StopCause::Terminated {
                reason: job
                    .termination_reason
                    .clone()
                    .unwrap_or_else(|| "Terminated".into()),
            }
        } else if requested == Some(retry::TIMEOUT_REASON) {
            StopCause::Timeout
        } else if requested == Some(retry::PREEMPTED_REASON) {
            StopCause::Preempted
        } else if state.secondary == "MaxWaitTimeExceeded" {
            StopCause::CapacityWait
        } else {
            StopCause::External
        };
        AttemptFailure::Stopped(cause)
    }

    /// The periodic pass over jobs holding capacity: launches to retry, stops for terminated and
    /// timed-out attempts, and a describe of attempts not heard from for `quiet_ms` (their
    /// events may have been lost). Bounded by the number of dispatched jobs.
    pub async fn run_due_work<B: TrainingBackend>(
        &self,
        backend: &B,
        config: &CycleConfig,
        quiet_ms: i64,
    ) -> Result<DueReport, AppError> {
        let mut report = DueReport::default();
        for stored in self.store.dispatched_jobs().await? {
            let now = self.clock.now_ms();
            let mut job = stored.value;
            let n = job.attempts.len();
            let Some(attempt) = job.latest_attempt().cloned() else {
                continue;
            };
            let name = attempt.training_job_name.clone();

            // A launch that did not get through (throttled, crashed before recording it).
            if attempt.training_job_arn.is_none() && !job.is_terminated {
                let mut launch = CycleReport::default();
                self.launch(backend, &job, config, &mut launch).await?;
                report.relaunched += 1;
                continue;
            }

            // Terminated, or past its attemptDurationSeconds: ask SageMaker to stop it. The
            // Stopped state change then ends the attempt.
            let timed_out = retry::timed_out(&job, now) && attempt.status_reason.is_none();
            if job.is_terminated || timed_out {
                if timed_out {
                    if let Some(a) = job.attempts.last_mut() {
                        a.status_reason = Some(retry::TIMEOUT_REASON.to_owned());
                    }
                    match self.store.update_job(&job, stored.version).await {
                        Ok(_) => {}
                        Err(StoreError::Conflict) => continue,
                        Err(e) => return Err(e.into()),
                    }
                }
                match backend.stop_training_job(&name).await {
                    Ok(()) => report.stops_requested += 1,
                    // Never created: there is nothing to stop, so the attempt ends here.
                    Err(BackendError::NotFound(_)) => {
                        let cause = if job.is_terminated {
                            StopCause::Terminated {
                                reason: job.termination_reason.clone().unwrap_or_default(),
                            }
                        } else {
                            StopCause::Timeout
                        };
                        let ending = Ending::Failed(AttemptFailure::Stopped(cause));
                        self.finish_attempt(&job.job_id, n, ending, config).await?;
                    }
                    Err(e) => tracing::warn!(job_id = %job.job_id, error = %e, "stop deferred"),
                }
            }

            // Not heard from for a while: describe, in case an event was lost. A state that
            // shows the status the job already has changes nothing, and is not applied (which
            // would read the job again).
            if now - job.updated_at >= quiet_ms {
                match backend.describe_training_job(&name).await {
                    Ok(state) if batch_status(&state).is_none_or(|s| s == job.status) => {}
                    Ok(state) => {
                        if let StateOutcome::Applied(_) =
                            self.on_training_state(&state, config).await?
                        {
                            report.reconciled += 1;
                        }
                    }
                    Err(e) => tracing::warn!(job_id = %job.job_id, error = %e, "describe failed"),
                }
            }
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trainyard_domain::payload::TrainingRequest;

    fn job(id: &str, name: &str) -> ServiceJob {
        let mut job: ServiceJob = serde_json::from_value(serde_json::json!({
            "jobId": id, "jobName": "j", "jobQueue": "q", "serviceJobType": "SAGEMAKER_TRAINING",
            "serviceRequestPayload": "{}", "status": "RUNNABLE", "createdAt": 0, "updatedAt": 0,
            "training": {"trainingJobName": name, "instances": {"ml.g5.xlarge": 1}}
        }))
        .unwrap();
        job.training = TrainingRequest::single(name, "ml.g5.xlarge", 1);
        job
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
    fn a_reason_code_is_the_text_before_the_dash() {
        let code = "CAPACITY:SERVICE_ENVIRONMENT_FULL";
        assert!(has_reason_code(code, code));
        assert!(has_reason_code(&format!("{code} - needs 2, 1 free"), code));
        assert!(!has_reason_code(&format!("{code}X - needs 2"), code));
        assert!(!has_reason_code("CAPACITY - needs 2", code));
        assert!(!has_reason_code("", code));
    }

    #[test]
    fn attempt_names_are_valid_for_sagemaker_and_round_trip() {
        let id = "0f8fad5b-d9cb-469f-a165-70867728950e";
        let cases = [
            (
                "resnet-50",
                "ty-resnet-50-0f8fad5bd9cb469fa16570867728950e-1",
            ),
            (
                "a".repeat(63).as_str(),
                &format!("ty-{}-0f8fad5bd9cb469fa16570867728950e-1", "a".repeat(25)),
            ),
            ("--", "ty-0f8fad5bd9cb469fa16570867728950e-1"),
        ]
        .map(|(a, b)| (a.to_owned(), b.to_owned()));
        for (training_name, expected) in cases {
            let name = attempt_name(&job(id, &training_name), 1);
            assert_eq!(name, expected);
            assert!(name.len() <= 63);
            assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
            assert_eq!(parse_attempt_name(&name), Some((id.to_owned(), 1)));
        }
        let name = attempt_name(&job(id, "x"), 10);
        assert_eq!(parse_attempt_name(&name), Some((id.to_owned(), 10)));
        for foreign in [
            "resnet-50",
            "AWSBatchfoo",
            "x-zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz-1",
            "-1",
            // One of ours but for the prefix: a user's own training job is never adopted.
            "resnet-50-0f8fad5bd9cb469fa16570867728950e-1",
        ] {
            assert_eq!(parse_attempt_name(foreign), None, "{foreign}");
        }
    }

    #[test]
    fn sagemaker_states_map_to_batch_statuses() {
        let state = |status, secondary: &str| TrainingJobState {
            name: "n".into(),
            arn: "a".into(),
            status,
            secondary: secondary.into(),
            failure_reason: None,
        };
        use TrainingStatus::*;
        let cases = [
            (InProgress, "Starting", None),
            (InProgress, "Pending", None),
            (InProgress, "Downloading", Some(JobStatus::Starting)),
            (InProgress, "Training", Some(JobStatus::Running)),
            (InProgress, "Uploading", Some(JobStatus::Running)),
            (Completed, "Completed", Some(JobStatus::Succeeded)),
            (Failed, "Failed", Some(JobStatus::Failed)),
            (Stopping, "Stopping", None),
            (Stopped, "Stopped", Some(JobStatus::Failed)),
        ];
        for (status, secondary, expected) in cases {
            assert_eq!(
                batch_status(&state(status, secondary)),
                expected,
                "{status:?}/{secondary}"
            );
        }
    }
}
