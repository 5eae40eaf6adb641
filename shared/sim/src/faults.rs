//! Seeded fault injection with invariants checked at every step (TigerBeetle's VOPR, scaled to
//! Trainyard's control plane).
//!
//! One seed decides everything: the workload (a small generated trace), the policy, the fleet,
//! and a fault mix, each fault with its own rate, so that different seeds stress different
//! things. The run drives the **real** use-cases (`submit`, `run_cycle`, `on_training_state`,
//! `run_due_work`) over the memory store, wrapped twice: [`Interleaving`] (so that two cycles
//! joined together interleave at every store access) and [`FaultyStore`] (conflicts,
//! unavailability, and crashes after a write landed). The backend is the SageMaker emulator's
//! model behind [`FaultyBackend`] (throttling, `ResourceLimitExceeded`, creates whose response
//! is lost). Events are duplicated, delayed, reordered and dropped on their way to the service.
//!
//! # Faults and what they stand for
//!
//! | fault | what really happens |
//! | --- | --- |
//! | event duplicated / delayed / reordered / dropped | EventBridge's at-least-once, unordered delivery; a lost event |
//! | create throttled | `ThrottlingException` from `CreateTrainingJob`: nothing created |
//! | create refused for quota | `ResourceLimitExceeded`: nothing created, a capacity error |
//! | create landed, response lost | the cycle crashes between launch and recording the ARN |
//! | commit landed, then crash | the cycle crashes between commit and launch (or any write's ack is lost) |
//! | store conflict / unavailable | a conditional write lost a race; DynamoDB throttled |
//! | two cycles at once | two scheduler invocations overlapping |
//! | index read answered as the previous read was | a DynamoDB global secondary index that has not caught up (runnable jobs, their shares, the jobs holding capacity; those fetched by id are current) |
//! | capacity error (emulator) | SageMaker's `CapacityError` failure after provisioning |
//! | training job lost | a training job in progress vanishes from SageMaker (describe finds nothing, no more events): the due work ends its attempt without using one and requeues the job |
//! | configuration changed | an operator halves the environment's capacity (and restores it), re-points a queue to a second environment (and back), disables a queue (and enables it), or deletes a queue (its jobs terminated) and creates it again, while jobs run |
//!
//! A use-case that returns an error after a fault was injected is a crashed invocation: the
//! run goes on, and the periodic due work must repair whatever it left half done. An error with
//! no fault injected is a violation.
//!
//! # Invariants, after every step
//!
//! 1. **No job lost**: every submitted job is stored.
//! 2. **Capacity**: each environment's usage document equals the instances of the dispatched
//!    jobs whose attempt it holds, in all and per quota share; no step raises an environment's
//!    usage above its limits as they are then (a shrunk environment may stay above its new
//!    limits while its jobs drain, never climb), nor a quota share's above its own limit plus
//!    what it may borrow; the instances of live training jobs stay within both environments.
//! 3. **No double launch**: at most one live training job per job; every live training job is
//!    the latest attempt of a dispatched job; a recorded ARN is the training job's own.
//! 4. **Attempts within `retryStrategy.attempts`**: attempts that consume one (all but capacity
//!    failures and preemptions) never exceed the limit.
//! 5. **Terminal states absorb**: a SUCCEEDED or FAILED job never changes again.
//!
//! # Liveness
//!
//! After the fault phase every fault is switched off (new training jobs complete, no event is
//! lost) and every job must reach a terminal state within [`Workload::liveness_bound_ms`],
//! whose derivation is written beside it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use trainyard_app::ports::{ConfigStore, JobStore, SchedulingStore};
use trainyard_domain::random::SplitMix64;

use serde_json::{Value, json};
use trainyard_app::Service;
use trainyard_app::memory::MemoryStore;
use trainyard_app::ports::{
    AuditPage, AuditQuery, AuditRecord, AuditStore, BackendError, ClientTokenRecord, Clock,
    Document, EnvironmentUsage, InsertJob, JobQuery, LineWaits, NoEvents, Page, Resource,
    StoreError, TrainingBackend, TrainingJobState, Versioned, WaitDigests, Write,
};
use trainyard_app::ports::{ManualClock, SequentialIds};
use trainyard_app::service::environments::ServiceEnvironmentUpdate;
use trainyard_app::service::jobs::SubmitJob;
use trainyard_app::service::queues::JobQueueUpdate;
use trainyard_app::service::scheduling::{Accept, CycleConfig, DueWork, PassInput, PassReport};
use trainyard_app::testing::Interleaving;
use trainyard_domain::State;
use trainyard_domain::arn::ArnContext;
use trainyard_domain::environment::{CapacityLimit, ServiceEnvironment};
use trainyard_domain::job::{JobStatus, RetryStrategy, ServiceJob};
use trainyard_domain::queue::ServiceEnvironmentOrder;
use trainyard_domain::quota_share::QuotaShare;
use trainyard_domain::training::parse_attempt_name;
use trainyard_emulator::backend::EmulatedSageMaker;
use trainyard_emulator::model::{Config as EmulatorConfig, Emulator, StateChange};
use trainyard_scheduler::retry::{RetryConfig, consumes_attempt};
use trainyard_scheduler::{QuotaShareState, within_limits};

use crate::driver::{requested_runtime_s, team_loads};
use crate::policies::{ALL as ALL_POLICIES, Policy, Setup};
use crate::scenario::Scenario;
use crate::trace::{Trace, TraceJob};

/// Virtual time of the first submission (epoch ms).
const T0_MS: i64 = 1_600_000_000_000;

/// Most steps in one run: far above what the liveness bound allows (a step happens at least
/// every due-work interval, and at most a few dozen times per job and attempt), so reaching it
/// means the loop itself is stuck.
const MAX_STEPS: u64 = 200_000;

/// Most polls of one use-case (or two joined): each store access yields once, and a cycle over
/// a few dozen jobs makes a few hundred accesses.
const MAX_POLLS: u32 = 1_000_000;

/// Seconds from the last submission during which faults stay on.
const FAULT_WINDOW_S: i64 = 300;

/// How long a reordered event is held back: longer than any emulated phase here (at most
/// 5 s provisioning), so the job's next events arrive first.
const REORDER_HOLD_MS: i64 = 30_000;

/// The run's one source of randomness, fully determined by the seed.
type Rng = SplitMix64;

/// Uniform in `[0, max)`: the chance of a fault, at most `max`.
fn rate(rng: &mut Rng, max: f64) -> f64 {
    rng.unit() * max
}

/// The fault mix of one seed: each rate is the chance of the fault at each opportunity.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultRates {
    /// An event is delivered twice.
    pub event_duplicate: f64,
    /// An event is never delivered.
    pub event_drop: f64,
    /// An event is held back so that later ones overtake it.
    pub event_reorder: f64,
    /// Longest delay of an event, ms.
    pub event_max_delay_ms: i64,
    /// `CreateTrainingJob` is throttled (nothing created).
    pub create_throttled: f64,
    /// `CreateTrainingJob` fails with `ResourceLimitExceeded` (nothing created).
    pub create_limit_exceeded: f64,
    /// `CreateTrainingJob` creates the job but its response is lost.
    pub create_ack_lost: f64,
    /// A conditional write fails with a conflict (nothing written).
    pub store_conflict: f64,
    /// A write fails as unavailable (nothing written).
    pub store_unavailable: f64,
    /// A write lands, then the invocation crashes before seeing the acknowledgement.
    pub store_crash_after_write: f64,
    /// A step runs two cycles at once.
    pub concurrent_cycles: f64,
    /// A training job fails with SageMaker's `CapacityError` (drawn by the emulator).
    pub capacity_error: f64,
    /// A training job fails with an algorithm error (drawn by the emulator; consumes an attempt).
    pub algorithm_error: f64,
    /// A read of an index (runnable jobs, runnable shares, jobs holding capacity) answers as
    /// the previous read of it did: an eventually consistent index that has not caught up.
    pub index_lag: f64,
    /// At a step, a training job in progress vanishes from SageMaker (its state lost, as an
    /// emulator restarted without it would lose it).
    pub training_job_lost: f64,
    /// At a step, an operator changes the configuration under the running jobs (see
    /// `Harness::change_config`). Drawn from its own stream, like `training_job_lost`, so that
    /// the other rates of a seed are as they were before these faults existed.
    pub config_change: f64,
}

impl FaultRates {
    /// A mix drawn from `rng`: every fault is possible, at a seed-chosen rate.
    fn draw(rng: &mut Rng) -> Self {
        Self {
            event_duplicate: rate(rng, 0.3),
            event_drop: rate(rng, 0.2),
            event_reorder: rate(rng, 0.5),
            event_max_delay_ms: rng.range(0, 30_000) as i64,
            create_throttled: rate(rng, 0.3),
            create_limit_exceeded: rate(rng, 0.2),
            create_ack_lost: rate(rng, 0.2),
            store_conflict: rate(rng, 0.1),
            store_unavailable: rate(rng, 0.05),
            store_crash_after_write: rate(rng, 0.05),
            concurrent_cycles: rate(rng, 0.5),
            capacity_error: rate(rng, 0.2),
            algorithm_error: rate(rng, 0.2),
            index_lag: rate(rng, 0.5),
            training_job_lost: 0.0,
            config_change: 0.0,
        }
    }

    fn lines(&self) -> Vec<(String, String)> {
        let r = |v: f64| format!("{v:.4}");
        vec![
            ("event_duplicate".into(), r(self.event_duplicate)),
            ("event_drop".into(), r(self.event_drop)),
            ("event_reorder".into(), r(self.event_reorder)),
            (
                "event_max_delay_ms".into(),
                self.event_max_delay_ms.to_string(),
            ),
            ("create_throttled".into(), r(self.create_throttled)),
            (
                "create_limit_exceeded".into(),
                r(self.create_limit_exceeded),
            ),
            ("create_ack_lost".into(), r(self.create_ack_lost)),
            ("store_conflict".into(), r(self.store_conflict)),
            ("store_unavailable".into(), r(self.store_unavailable)),
            (
                "store_crash_after_write".into(),
                r(self.store_crash_after_write),
            ),
            ("concurrent_cycles".into(), r(self.concurrent_cycles)),
            ("capacity_error".into(), r(self.capacity_error)),
            ("algorithm_error".into(), r(self.algorithm_error)),
            ("index_lag".into(), r(self.index_lag)),
            ("training_job_lost".into(), r(self.training_job_lost)),
            ("config_change".into(), r(self.config_change)),
        ]
    }
}

/// Deliberate bugs, to prove that the checks catch them (tests only; all off by default).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sabotage {
    /// The backend runs a repeated create as a second training job instead of refusing it.
    pub launch_twice: bool,
    /// The due work never describes quiet attempts, so lost events are never found.
    pub no_reconciliation: bool,
    /// Not a bug but an unverified SageMaker ordering: a repeated create of a training job that
    /// exists may be refused for quota (`ResourceLimitExceeded`) instead of as in use.
    pub quota_before_name: bool,
}

/// Everything one seed decides.
#[derive(Debug, Clone)]
pub struct Workload {
    /// The seed.
    pub seed: u64,
    /// The policy under test.
    pub policy: Policy,
    /// Fleet, timings, attempts.
    pub scenario: Scenario,
    /// The generated jobs.
    pub trace: Trace,
    /// The fault mix.
    pub rates: FaultRates,
}

impl Workload {
    /// The workload of `seed`: 6–20 jobs on 2–6 instances, submitted over two minutes, each
    /// running 5–90 s, under a seed-chosen policy and fault mix.
    pub fn generate(seed: u64) -> Self {
        let mut rng = Rng::new(seed ^ 0xFA17_5EED);
        let policy = ALL_POLICIES[rng.range(0, ALL_POLICIES.len() as u64 - 1) as usize];
        let mut rates = FaultRates::draw(&mut rng);
        let mut later = Rng::new(seed ^ 0xC0F1_6C4A);
        rates.config_change = rate(&mut later, 0.2);
        rates.training_job_lost = rate(&mut later, 0.05);
        let mut scenario = small_scenario();
        scenario.capacity_instances = rng.range(2, 6) as u32;
        scenario.attempts = rng.range(1, 3) as u32;
        scenario.failure_rate = rates.algorithm_error;
        scenario.capacity_error_rate = rates.capacity_error;
        scenario.seed = seed;
        // Partitioned policies give a team as little as one instance: larger jobs could never
        // run there, which is a configuration problem, not a liveness one.
        let widest = match policy {
            Policy::StaticPartition | Policy::QuotaShares => 1,
            _ => u64::from(scenario.capacity_instances).min(3),
        };
        let n = rng.range(6, 20);
        let mut jobs: Vec<TraceJob> = (0..n)
            .map(|i| TraceJob {
                id: format!("fault-{i}"),
                submit_s: rng.range(0, 120) as f64,
                duration_s: rng.range(5, 90) as f64,
                instances: rng.range(1, widest) as u32,
                instance_type: None,
                queue: None,
                share: None,
                scheduling_priority: None,
            })
            .collect();
        // Under the partitioned policies the jobs belong to both of the scenario's teams, so
        // that a share can be over its own limit while the environment is not. Drawn from a
        // stream of its own, so that the other policies' workloads are as they were.
        if matches!(policy, Policy::StaticPartition | Policy::QuotaShares) {
            let mut teams = Rng::new(seed ^ 0x7EA5_5EED);
            let names: Vec<String> = scenario.teams.iter().map(|t| t.name.clone()).collect();
            for job in &mut jobs {
                job.share = names.get(teams.below(names.len() as u64) as usize).cloned();
            }
        }
        jobs.sort_by(|a, b| a.submit_s.total_cmp(&b.submit_s).then(a.id.cmp(&b.id)));
        Self {
            seed,
            policy,
            scenario,
            trace: Trace {
                jobs,
                skipped: Vec::new(),
            },
            rates,
        }
    }

    /// How long, after faults stop, every job may take to reach a terminal state, ms.
    ///
    /// Derivation. When the liveness phase starts, a job may be waiting out a backoff: at most
    /// the capacity cap plus jitter (a capacity failure) or the retry cap plus jitter (a failed
    /// attempt). An attempt whose events were all dropped is found by the due work within
    /// `reconcile_quiet_s + due_work_interval_s`, and a launch left unrecorded is retried
    /// within `due_work_interval_s`. From then on every new training job completes, so each job
    /// needs at most two more runs (the one in flight, which may still fail, and its retry),
    /// each of provisioning + download + duration + upload, plus a stop grace if it is
    /// preempted once. In the worst case they run one after another (a job may need the whole
    /// pool), hence `jobs × 2 × (run + grace + due_work_interval)`.
    pub fn liveness_bound_ms(&self) -> i64 {
        let s = &self.scenario;
        let retry = RetryConfig::default();
        let backoff_ms = retry.capacity_cap_ms.max(retry.retry_cap_ms) + retry.jitter_max_ms;
        let repair_ms =
            ((s.reconcile_quiet_s + 2 * s.due_work_interval_s) as i64).saturating_mul(1_000);
        let longest_s = self
            .trace
            .jobs
            .iter()
            .map(|j| j.duration_s)
            .fold(0.0, f64::max);
        let run_s = s.provisioning_s + s.download_s + longest_s + s.upload_s + s.stop_grace_s;
        let per_job_ms = ((2.0 * (run_s + s.due_work_interval_s as f64)) * 1_000.0) as i64;
        backoff_ms + repair_ms + per_job_ms * self.trace.jobs.len() as i64
    }

    /// Every parameter, in print order.
    pub fn parameters(&self) -> Vec<(String, String)> {
        let s = &self.scenario;
        let mut out = vec![
            ("seed".into(), self.seed.to_string()),
            ("policy".into(), self.policy.name().into()),
            ("jobs".into(), self.trace.jobs.len().to_string()),
            (
                "capacity_instances".into(),
                s.capacity_instances.to_string(),
            ),
            ("attempts".into(), s.attempts.to_string()),
            (
                "due_work_interval_s".into(),
                s.due_work_interval_s.to_string(),
            ),
            ("reconcile_quiet_s".into(), s.reconcile_quiet_s.to_string()),
            ("fault_window_s".into(), FAULT_WINDOW_S.to_string()),
            (
                "liveness_bound_s".into(),
                format!("{:.0}", self.liveness_bound_ms() as f64 / 1_000.0),
            ),
        ];
        out.extend(self.rates.lines());
        out
    }
}

/// The built-in small scenario with the short timings of a fault run.
fn small_scenario() -> Scenario {
    let mut s = Scenario::load("small").unwrap_or_else(|_| {
        // The built-in scenario is compiled in and tested; this is only a fallback.
        Scenario::parse(r#"{"name":"small","capacity_instances":4,"tiers":[{"name":"research","priority":500,"scheduling_priority":200,"fraction":1}],"teams":[{"name":"vision","weight":1}],"default_queue":"research","default_share":"vision"}"#)
            .unwrap_or_else(|e| panic!("fallback scenario: {e}"))
    });
    s.provisioning_s = 5.0;
    s.download_s = 2.0;
    s.upload_s = 2.0;
    s.stop_grace_s = 10.0;
    s.min_runtime_before_preemption_s = 20;
    s.due_work_interval_s = 30;
    s.reconcile_quiet_s = 60;
    s
}

/// The documents a reader is merely shown (each line's waits and their digests), whose writes
/// draw their faults from a stream of their own.
const SHOWN: [&str; 2] = [LineWaits::KIND, WaitDigests::KIND];

/// Which random stream a fault is drawn from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stream {
    /// Every fault but those of [`Stream::Shown`].
    Main,
    /// Writes of what a reader is merely shown ([`SHOWN`]).
    Shown,
}

/// The shared fault switchboard: one random stream, the on/off switch, and the journal.
struct Chaos {
    state: Mutex<ChaosState>,
    clock: Arc<ManualClock>,
}

struct ChaosState {
    rng: Rng,
    /// The stream for writes of what a reader is merely shown ([`SHOWN`]): their own, so that
    /// adding or dropping such a write does not move every later fault of a seed.
    shown_rng: Rng,
    on: bool,
    injected: u64,
    by_kind: BTreeMap<&'static str, u64>,
    journal: Vec<String>,
}

impl Chaos {
    fn lock(&self) -> MutexGuard<'_, ChaosState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Draws whether fault `kind` happens now (never while faults are off); journals it.
    fn roll(&self, rate: f64, kind: &'static str, what: &str) -> bool {
        self.roll_in(Stream::Main, rate, kind, what)
    }

    /// [`Chaos::roll`], drawing from `stream`.
    fn roll_in(&self, stream: Stream, rate: f64, kind: &'static str, what: &str) -> bool {
        let mut s = self.lock();
        if !s.on || rate <= 0.0 {
            return false;
        }
        let draw = match stream {
            Stream::Main => s.rng.unit(),
            Stream::Shown => s.shown_rng.unit(),
        };
        if draw >= rate {
            return false;
        }
        s.injected += 1;
        *s.by_kind.entry(kind).or_insert(0) += 1;
        let line = format!("t={} fault {kind}: {what}", clock_s(self.clock.now_ms()));
        s.journal.push(line);
        true
    }

    fn note(&self, line: String) {
        let at = clock_s(self.clock.now_ms());
        self.lock().journal.push(format!("t={at} {line}"));
    }

    fn injected(&self) -> u64 {
        self.lock().injected
    }
}

fn clock_s(ms: i64) -> String {
    format!("{:.3}", (ms - T0_MS) as f64 / 1_000.0)
}

fn unavailable(what: &str) -> StoreError {
    StoreError::Unavailable {
        message: format!("injected: {what}"),
        source: None,
    }
}

/// A store that fails writes at seeded points: a conflict or an outage before the write, or a
/// crash after it landed (the caller sees an error for a write that is durable).
pub struct FaultyStore<S> {
    inner: S,
    chaos: Arc<Chaos>,
    rates: FaultRates,
    /// What each index read answered last, by its arguments: a lagging read answers it again.
    indexes: Mutex<IndexReads>,
}

/// The last answer of each index read.
#[derive(Default)]
struct IndexReads {
    runnable: BTreeMap<(String, String, usize), Vec<Versioned<ServiceJob>>>,
    shares: BTreeMap<String, Vec<String>>,
    /// The ids the dispatched index listed (a lagging read fetches these again, current).
    dispatched: Option<Vec<String>>,
}

impl<S> FaultyStore<S> {
    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// A store over `inner` with the faults of `rates`.
    fn new(inner: S, chaos: Arc<Chaos>, rates: FaultRates) -> Self {
        Self {
            inner,
            chaos,
            rates,
            indexes: Mutex::default(),
        }
    }

    fn index_reads(&self) -> MutexGuard<'_, IndexReads> {
        self.indexes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether this index read lags (answers as the last one did).
    fn lags(&self, what: &str) -> bool {
        self.chaos.roll(self.rates.index_lag, "index_lag", what)
    }

    /// The fault drawn from `stream` for a write: `Err` before it, or `Ok(true)` to fail after
    /// it.
    fn before_write(&self, stream: Stream, what: &str) -> Result<bool, StoreError> {
        let roll = |rate, kind| self.chaos.roll_in(stream, rate, kind, what);
        if roll(self.rates.store_conflict, "store_conflict") {
            return Err(StoreError::Conflict);
        }
        if roll(self.rates.store_unavailable, "store_unavailable") {
            return Err(unavailable(what));
        }
        Ok(roll(
            self.rates.store_crash_after_write,
            "store_crash_after_write",
        ))
    }
}

fn describe_writes(writes: &[Write]) -> String {
    format!("commit of {} writes", writes.len())
}

impl<S: JobStore> JobStore for FaultyStore<S> {
    async fn insert_job(
        &self,
        job: &ServiceJob,
        token: Option<&ClientTokenRecord>,
    ) -> Result<InsertJob, StoreError> {
        self.inner.insert_job(job, token).await
    }

    async fn get_job(&self, job_id: &str) -> Result<Option<Versioned<ServiceJob>>, StoreError> {
        self.inner.get_job(job_id).await
    }

    async fn update_job(&self, job: &ServiceJob, expected: u64) -> Result<u64, StoreError> {
        let what = format!("update of job {} ({})", job.job_id, job.status);
        let crash = self.before_write(Stream::Main, &what)?;
        let version = self.inner.update_job(job, expected).await?;
        if crash {
            return Err(unavailable(&what));
        }
        Ok(version)
    }

    async fn list_jobs(&self, query: &JobQuery) -> Result<Page<Versioned<ServiceJob>>, StoreError> {
        self.inner.list_jobs(query).await
    }
}

impl<S: ConfigStore> ConfigStore for FaultyStore<S> {
    async fn create_resource<R: Resource>(&self, resource: &R) -> Result<(), StoreError> {
        self.inner.create_resource(resource).await
    }

    async fn get_resource<R: Resource>(
        &self,
        key: &str,
    ) -> Result<Option<Versioned<R>>, StoreError> {
        self.inner.get_resource(key).await
    }

    async fn list_resources<R: Resource>(&self) -> Result<Vec<Versioned<R>>, StoreError> {
        self.inner.list_resources().await
    }

    async fn update_resource<R: Resource>(
        &self,
        resource: &R,
        expected_version: u64,
    ) -> Result<u64, StoreError> {
        self.inner.update_resource(resource, expected_version).await
    }

    async fn delete_resource<R: Resource>(
        &self,
        key: &str,
        expected_version: u64,
    ) -> Result<(), StoreError> {
        self.inner.delete_resource::<R>(key, expected_version).await
    }
}

/// The audit trail is the API's; the simulator drives no API calls, so it passes through.
impl<S: AuditStore> AuditStore for FaultyStore<S> {
    async fn append_audit(&self, record: &AuditRecord) -> Result<(), StoreError> {
        self.inner.append_audit(record).await
    }
    async fn list_audit(&self, query: &AuditQuery) -> Result<AuditPage, StoreError> {
        self.inner.list_audit(query).await
    }
}

impl<S: SchedulingStore> SchedulingStore for FaultyStore<S> {
    async fn get_document<D: Document>(
        &self,
        key: &str,
    ) -> Result<Option<Versioned<D>>, StoreError> {
        self.inner.get_document(key).await
    }

    async fn list_documents<D: Document>(&self) -> Result<Vec<Versioned<D>>, StoreError> {
        self.inner.list_documents().await
    }

    async fn commit(&self, writes: &[Write]) -> Result<(), StoreError> {
        let what = describe_writes(writes);
        let shown = writes
            .iter()
            .all(|w| matches!(w, Write::Document { kind, .. } if SHOWN.contains(kind)));
        let stream = if shown { Stream::Shown } else { Stream::Main };
        let crash = self.before_write(stream, &what)?;
        self.inner.commit(writes).await?;
        if crash {
            return Err(unavailable(&what));
        }
        Ok(())
    }

    async fn runnable_jobs(
        &self,
        queue: &str,
        share: &str,
        limit: usize,
    ) -> Result<Vec<Versioned<ServiceJob>>, StoreError> {
        let key = (queue.to_owned(), share.to_owned(), limit);
        let stale = self.index_reads().runnable.get(&key).cloned();
        if let Some(stale) = stale
            && self.lags(&format!("runnable jobs of {queue}/{share}"))
        {
            return Ok(stale);
        }
        let fresh = self.inner.runnable_jobs(queue, share, limit).await?;
        self.index_reads().runnable.insert(key, fresh.clone());
        Ok(fresh)
    }

    async fn runnable_shares(&self, queue: &str) -> Result<Vec<String>, StoreError> {
        let stale = self.index_reads().shares.get(queue).cloned();
        if let Some(stale) = stale
            && self.lags(&format!("runnable shares of {queue}"))
        {
            return Ok(stale);
        }
        let fresh = self.inner.runnable_shares(queue).await?;
        self.index_reads()
            .shares
            .insert(queue.to_owned(), fresh.clone());
        Ok(fresh)
    }

    async fn dispatched_jobs(&self) -> Result<Vec<Versioned<ServiceJob>>, StoreError> {
        let stale = self.index_reads().dispatched.clone();
        if let Some(ids) = stale
            && self.lags("jobs holding capacity")
        {
            // The index's keys are stale; the jobs fetched by them are current, whatever their
            // status is now.
            let mut jobs = Vec::with_capacity(ids.len());
            for id in ids {
                if let Some(job) = self.inner.get_job(&id).await? {
                    jobs.push(job);
                }
            }
            return Ok(jobs);
        }
        let fresh = self.inner.dispatched_jobs().await?;
        self.index_reads().dispatched =
            Some(fresh.iter().map(|j| j.value.job_id.clone()).collect());
        Ok(fresh)
    }
}

/// The emulated SageMaker (the one emulator adapter, [`EmulatedSageMaker`]) behind seeded
/// faults, counting every `CreateTrainingJob` per name.
pub struct FaultyBackend {
    sagemaker: EmulatedSageMaker,
    state: Mutex<BackendState>,
    chaos: Arc<Chaos>,
    rates: FaultRates,
    sabotage: Sabotage,
}

#[derive(Default)]
struct BackendState {
    /// `CreateTrainingJob` calls per lower-cased name.
    creates: BTreeMap<String, u32>,
    /// Of those, the ones refused with `ResourceInUse`.
    refused: BTreeMap<String, u32>,
    /// Instances of each training job created, by lower-cased name.
    instances: BTreeMap<String, u64>,
    /// Events taken from the emulator, waiting for their (possibly delayed) delivery.
    in_flight: BTreeMap<(i64, u64), StateChange>,
    /// Training jobs made to vanish (the `training_job_lost` fault), by lower-cased name.
    lost: BTreeSet<String>,
    seq: u64,
}

impl FaultyBackend {
    fn lock(&self) -> MutexGuard<'_, BackendState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on the emulator's model, advanced to now.
    fn model<R>(&self, f: impl FnOnce(&mut Emulator, i64) -> R) -> R {
        self.sagemaker.shared().with(f)
    }

    /// The next instant an emulated phase ends or an event is due.
    fn next_deadline(&self) -> Option<i64> {
        let phase = self.model(|model, _| model.next_deadline());
        let event = self.lock().in_flight.keys().next().map(|(at, _)| *at);
        phase.into_iter().chain(event).min()
    }

    /// Advances the emulator to `now`, passes new events through the event faults, and returns
    /// the ones due for delivery.
    fn deliverable(&self, now: i64) -> Vec<StateChange> {
        let taken = self.model(|model, _| model.take_events(now));
        let mut s = self.lock();
        for event in taken {
            let what = format!(
                "{} {}",
                event.training_job_name(),
                event.secondary_status().as_str()
            );
            if self
                .chaos
                .roll(self.rates.event_drop, "event_dropped", &what)
            {
                continue;
            }
            let copies = if self
                .chaos
                .roll(self.rates.event_duplicate, "event_duplicated", &what)
            {
                2
            } else {
                1
            };
            // Held back long enough that the job's next phases (seconds apart) overtake it.
            let held_ms = if self
                .chaos
                .roll(self.rates.event_reorder, "event_reordered", &what)
            {
                REORDER_HOLD_MS
            } else {
                0
            };
            for _ in 0..copies {
                let mut delay = held_ms;
                if self.rates.event_max_delay_ms > 0 {
                    let mut c = self.chaos.lock();
                    if c.on {
                        delay +=
                            (c.rng.next_u64() % (self.rates.event_max_delay_ms as u64 + 1)) as i64;
                    }
                }
                s.seq += 1;
                let key = (event.time_ms + delay, s.seq);
                s.in_flight.insert(key, event.clone());
            }
        }
        let later = s.in_flight.split_off(&(now + 1, 0));
        std::mem::replace(&mut s.in_flight, later)
            .into_values()
            .collect()
    }

    /// Live (in progress or stopping) training jobs: lower-cased name → instances.
    fn live(&self) -> BTreeMap<String, u64> {
        let names: Vec<String> = self.model(|model, _| {
            ["InProgress", "Stopping"]
                .into_iter()
                .flat_map(|status| model.list_training_jobs(None, Some(status), usize::MAX))
                .map(|j| {
                    j["TrainingJobName"]
                        .as_str()
                        .unwrap_or_default()
                        .to_lowercase()
                })
                .collect()
        });
        let s = self.lock();
        names
            .into_iter()
            .map(|name| {
                let n = s.instances.get(&name).copied().unwrap_or(0);
                (name, n)
            })
            .collect()
    }

    /// Forgets the first training job in progress, if any (journalled by the caller's roll).
    fn lose_one(&self) {
        let lost = self.model(|model, _| {
            let first = model
                .list_training_jobs(None, Some("InProgress"), 1)
                .first()
                .and_then(|j| j["TrainingJobName"].as_str().map(str::to_owned))?;
            model.forget_training_job(&first);
            Some(first)
        });
        if let Some(name) = lost {
            self.lock().lost.insert(name.to_lowercase());
            self.chaos.note(format!("lost: {name}"));
        }
    }

    /// Whether the `training_job_lost` fault made this training job vanish.
    fn was_lost(&self, name: &str) -> bool {
        self.lock().lost.contains(&name.to_lowercase())
    }

    /// The ARN of a training job, if it exists.
    fn arn_of(&self, name: &str) -> Option<String> {
        self.model(|model, _| model.training_job_state(name).ok())
            .map(|state| state.arn)
    }
}

fn request_instances(request: &Value) -> u64 {
    request["ResourceConfig"]["InstanceCount"]
        .as_u64()
        .unwrap_or(0)
}

impl TrainingBackend for FaultyBackend {
    async fn create_training_job(&self, mut request: Value) -> Result<String, BackendError> {
        let name = request["TrainingJobName"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let key = name.to_lowercase();
        *self.lock().creates.entry(key.clone()).or_insert(0) += 1;
        if self
            .chaos
            .roll(self.rates.create_throttled, "create_throttled", &name)
        {
            return Err(BackendError::Unavailable(
                "ThrottlingException: Rate exceeded".into(),
            ));
        }
        // SageMaker checks the name before the account quota (as the emulator does): a repeated
        // create of a job that exists is refused as in use, never as over quota.
        let exists = !self.sabotage.quota_before_name && self.arn_of(&name).is_some();
        if !exists
            && self.chaos.roll(
                self.rates.create_limit_exceeded,
                "create_limit_exceeded",
                &name,
            )
        {
            return Err(BackendError::Capacity(format!(
                "The account-level service limit for training job usage would be exceeded by {name}"
            )));
        }
        // With faults off, new training jobs complete: the liveness phase asks whether the
        // control plane finishes the work, not whether the work succeeds.
        if !self.chaos.lock().on
            && let Some(h) = request
                .get_mut("HyperParameters")
                .and_then(Value::as_object_mut)
        {
            h.entry("emulator_outcome").or_insert(json!("Completed"));
        }
        let instances = request_instances(&request);
        let arn = match self.sagemaker.create_training_job(request.clone()).await {
            Ok(arn) => arn,
            Err(BackendError::AlreadyExists(m)) => {
                *self.lock().refused.entry(key.clone()).or_insert(0) += 1;
                if self.sabotage.launch_twice {
                    request["TrainingJobName"] = json!(format!("{name}-again"));
                    let arn = self.sagemaker.create_training_job(request).await?;
                    self.lock()
                        .instances
                        .insert(format!("{key}-again"), instances);
                    return Ok(arn);
                }
                return Err(BackendError::AlreadyExists(m));
            }
            Err(e) => return Err(e),
        };
        self.lock().instances.insert(key, instances);
        if self
            .chaos
            .roll(self.rates.create_ack_lost, "create_ack_lost", &name)
        {
            return Err(BackendError::Unavailable(
                "the connection closed before the response arrived".into(),
            ));
        }
        Ok(arn)
    }

    async fn describe_training_job(&self, name: &str) -> Result<TrainingJobState, BackendError> {
        self.sagemaker.describe_training_job(name).await
    }

    async fn stop_training_job(&self, name: &str) -> Result<(), BackendError> {
        self.sagemaker.stop_training_job(name).await
    }
}

/// Polls a future to completion with a no-op waker. The stores here never wait; they only yield
/// (the [`Interleaving`] wrapper), so a bounded number of polls always suffices.
fn block<F: Future>(future: F) -> Result<F::Output, String> {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..MAX_POLLS {
        if let Poll::Ready(v) = future.as_mut().poll(&mut cx) {
            return Ok(v);
        }
    }
    Err("a use-case did not complete within the poll bound".into())
}

/// Runs two futures to completion, alternating polls, so they interleave at every yield.
fn join2<A: Future, B: Future>(a: A, b: B) -> Result<(A::Output, B::Output), String> {
    let mut a = pin!(a);
    let mut b = pin!(b);
    let mut cx = Context::from_waker(Waker::noop());
    let (mut ra, mut rb) = (None, None);
    for _ in 0..MAX_POLLS {
        if ra.is_none()
            && let Poll::Ready(v) = a.as_mut().poll(&mut cx)
        {
            ra = Some(v);
        }
        if rb.is_none()
            && let Poll::Ready(v) = b.as_mut().poll(&mut cx)
        {
            rb = Some(v);
        }
        if let (Some(_), Some(_)) = (&ra, &rb) {
            return match (ra, rb) {
                (Some(x), Some(y)) => Ok((x, y)),
                _ => Err("unreachable".into()),
            };
        }
    }
    Err("two joined cycles did not complete within the poll bound".into())
}

/// How a seed's run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every invariant held at every step and every job finished in time.
    Passed,
    /// An invariant failed (or a job did not finish in time).
    Violated {
        /// Which invariant.
        invariant: String,
        /// What was seen.
        detail: String,
    },
}

/// The result of one seed: the verdict and the full, byte-reproducible output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultRun {
    /// The seed.
    pub seed: u64,
    /// Whether it passed.
    pub verdict: Verdict,
    /// Parameters, every injected fault, the phases and the result, one per line.
    pub output: String,
}

impl FaultRun {
    /// Whether every check held.
    pub fn passed(&self) -> bool {
        self.verdict == Verdict::Passed
    }
}

/// The command that replays a seed.
pub fn replay_command(seed: u64) -> String {
    format!("trainyard simulate --faults --seed {seed}")
}

type FaultService = Service<Interleaving<FaultyStore<MemoryStore>>, NoEvents>;

struct Violation {
    invariant: &'static str,
    detail: String,
}

fn violation(invariant: &'static str, detail: impl Into<String>) -> Violation {
    Violation {
        invariant,
        detail: detail.into(),
    }
}

/// The run's state between steps.
struct Harness {
    workload: Workload,
    service: FaultService,
    backend: FaultyBackend,
    chaos: Arc<Chaos>,
    config: CycleConfig,
    /// Submitted job ids, in submission order.
    ids: Vec<String>,
    /// Jobs seen terminal: status and attempt count when first seen.
    terminal: BTreeMap<String, (JobStatus, usize)>,
    /// The configuration changes made so far, to undo when faults stop.
    operator: Operator,
    /// Each environment's usage at the previous check: a step may leave an environment (or a
    /// quota share) above limits that were lowered under it, never raise it further.
    last_usage: BTreeMap<String, EnvironmentUsage>,
}

/// The configuration an operator has changed under the running jobs (the `config_change`
/// fault), so that the liveness phase can put it back.
struct Operator {
    /// The environment the queues feed as set up.
    main: ServiceEnvironment,
    /// A second environment, as large, that queues are re-pointed to.
    spare: String,
    /// Whether the main environment's capacity is halved.
    shrunk: bool,
    /// Queues disabled.
    disabled: BTreeSet<String>,
    /// Queues pointed at the spare environment.
    on_spare: BTreeSet<String>,
}

impl Harness {
    fn memory(&self) -> &MemoryStore {
        self.service.store().inner().inner()
    }

    /// Runs one use-case call; an error is a crashed invocation if a fault was injected during
    /// it, and a violation otherwise.
    fn call<T>(
        &self,
        what: &str,
        result: Result<Result<T, trainyard_app::AppError>, String>,
        injected_before: u64,
    ) -> Result<Option<T>, Violation> {
        match result {
            Err(e) => Err(violation("progress", format!("{what}: {e}"))),
            Ok(Ok(v)) => Ok(Some(v)),
            Ok(Err(e)) if self.chaos.injected() > injected_before => {
                self.chaos
                    .note(format!("crashed: {what} failed after a fault: {e}"));
                Ok(None)
            }
            Ok(Err(e)) => Err(violation(
                "no unexpected errors",
                format!("{what} failed with no fault injected: {e}"),
            )),
        }
    }

    /// Each failed step of a pass, through [`Harness::call`]: an error is a crash after a
    /// fault injected since `injected_before`, or a violation.
    fn pass(
        &self,
        what: &str,
        report: Result<PassReport, String>,
        injected_before: u64,
    ) -> Result<(), Violation> {
        let report = report.map_err(|e| violation("progress", format!("{what}: {e}")))?;
        for failed in report.errors {
            let step = format!("{what}: {}", failed.step);
            self.call::<()>(&step, Ok(Err(failed.error)), injected_before)?;
        }
        Ok(())
    }

    /// Runs an operator's call with faults paused (an operator retries until it is through);
    /// a refusal is a violation: every change made here is one the API should accept.
    fn operate<T>(
        &self,
        what: &str,
        call: impl Future<Output = Result<T, trainyard_app::AppError>>,
    ) -> Result<T, Violation> {
        let was_on = std::mem::replace(&mut self.chaos.lock().on, false);
        let result = block(call);
        self.chaos.lock().on = was_on;
        self.chaos.note(format!("config: {what}"));
        result
            .map_err(|e| violation("progress", format!("{what}: {e}")))?
            .map_err(|e| violation("no unexpected errors", format!("{what}: {e}")))
    }

    /// One configuration change, chosen by the fault stream: halve (or restore) the main
    /// environment's capacity, re-point a queue to the other environment, disable (or enable)
    /// a queue, or delete a queue and create it again.
    fn change_config(&mut self, setup: &Setup) -> Result<(), Violation> {
        let (action, pick) = {
            let mut c = self.chaos.lock();
            (
                c.rng.below(4),
                c.rng.below(setup.queues.len() as u64) as usize,
            )
        };
        let Some(queue) = setup.queues.get(pick) else {
            return Ok(());
        };
        let name = queue.job_queue_name.clone();
        let main = self.operator.main.service_environment_name.clone();
        match action {
            0 => {
                let shrink = !self.operator.shrunk;
                let limits = self
                    .operator
                    .main
                    .capacity_limits
                    .iter()
                    .map(|l| CapacityLimit {
                        max_capacity: if shrink {
                            (l.max_capacity / 2).max(1)
                        } else {
                            l.max_capacity
                        },
                        capacity_unit: l.capacity_unit.clone(),
                    })
                    .collect();
                let update = ServiceEnvironmentUpdate {
                    state: None,
                    capacity_limits: Some(limits),
                };
                let what = if shrink { "halve" } else { "restore" };
                self.operate(
                    &format!("{what} the capacity of {main}"),
                    self.service.update_service_environment(&main, update),
                )?;
                self.operator.shrunk = shrink;
            }
            1 => {
                let to_spare = !self.operator.on_spare.contains(&name);
                let env = if to_spare {
                    self.operator.spare.clone()
                } else {
                    main
                };
                self.point(&name, &env)?;
                if to_spare {
                    self.operator.on_spare.insert(name);
                } else {
                    self.operator.on_spare.remove(&name);
                }
            }
            2 => {
                let disable = !self.operator.disabled.contains(&name);
                self.set_state(
                    &name,
                    if disable {
                        State::Disabled
                    } else {
                        State::Enabled
                    },
                )?;
                if disable {
                    self.operator.disabled.insert(name);
                } else {
                    self.operator.disabled.remove(&name);
                }
            }
            _ => {
                if !self.operator.disabled.contains(&name) {
                    self.set_state(&name, State::Disabled)?;
                }
                self.operate(
                    &format!("delete {name} (its jobs terminated)"),
                    self.service.delete_job_queue(&name),
                )?;
                let store = self.service.store();
                self.operate(&format!("create {name} again"), async {
                    Ok(store.create_resource(queue).await?)
                })?;
                for share in setup.quota_shares.iter().filter(|s| s.job_queue == name) {
                    self.operate(
                        &format!("create quota share {} again", share.key()),
                        async { Ok(store.create_resource(share).await?) },
                    )?;
                }
                self.operator.disabled.remove(&name);
                self.operator.on_spare.remove(&name);
            }
        }
        Ok(())
    }

    /// Puts back what [`Harness::change_config`] changed (when faults stop).
    fn restore_config(&mut self) -> Result<(), Violation> {
        if self.operator.shrunk {
            let main = self.operator.main.service_environment_name.clone();
            let update = ServiceEnvironmentUpdate {
                state: None,
                capacity_limits: Some(self.operator.main.capacity_limits.clone()),
            };
            self.operate(
                &format!("restore the capacity of {main}"),
                self.service.update_service_environment(&main, update),
            )?;
            self.operator.shrunk = false;
        }
        for name in std::mem::take(&mut self.operator.disabled) {
            self.set_state(&name, State::Enabled)?;
        }
        let main = self.operator.main.service_environment_name.clone();
        for name in std::mem::take(&mut self.operator.on_spare) {
            self.point(&name, &main)?;
        }
        Ok(())
    }

    fn point(&self, queue: &str, environment: &str) -> Result<(), Violation> {
        let update = JobQueueUpdate {
            service_environment_order: Some(vec![ServiceEnvironmentOrder {
                order: 1,
                service_environment: environment.to_owned(),
            }]),
            ..JobQueueUpdate::default()
        };
        self.operate(
            &format!("point {queue} at {environment}"),
            self.service.update_job_queue(queue, update),
        )
        .map(|_| ())
    }

    fn set_state(&self, queue: &str, state: State) -> Result<(), Violation> {
        let update = JobQueueUpdate {
            state: Some(state),
            ..JobQueueUpdate::default()
        };
        self.operate(
            &format!("set {queue} {state:?}"),
            self.service.update_job_queue(queue, update),
        )
        .map(|_| ())
    }

    fn check(&mut self) -> Result<(), Violation> {
        let memory = self.memory();
        // 1. No job lost.
        let mut jobs = BTreeMap::new();
        for id in &self.ids {
            let stored = block(memory.get_job(id))
                .map_err(|e| violation("progress", e))?
                .map_err(|e| violation("no job lost", format!("reading {id}: {e}")))?;
            let Some(stored) = stored else {
                return Err(violation("no job lost", format!("job {id} is gone")));
            };
            jobs.insert(id.clone(), stored.value);
        }
        // 2. Capacity, per environment and quota share.
        let capacity = u64::from(self.workload.scenario.capacity_instances);
        let mut expected: BTreeMap<String, EnvironmentUsage> = BTreeMap::new();
        for job in jobs.values().filter(|j| j.status.is_dispatched()) {
            let Some(env) = job
                .latest_attempt()
                .and_then(|a| a.service_environment.clone())
            else {
                continue;
            };
            expected
                .entry(env.clone())
                .or_insert_with(|| EnvironmentUsage {
                    environment: env,
                    ..EnvironmentUsage::default()
                })
                .add(job);
        }
        // Net of the releases the scheduler has not folded yet.
        let stored: BTreeMap<String, EnvironmentUsage> = block(memory.capacity_in_use())
            .map_err(|e| violation("progress", e))?
            .map_err(|e| violation("capacity", e.to_string()))?
            .into_iter()
            .map(|(env, u)| (env, u.value))
            .filter(|(_, u)| u.total() > 0 || !u.quota_shares.is_empty())
            .collect();
        if stored != expected {
            return Err(violation(
                "capacity",
                format!("usage documents say {stored:?}, dispatched jobs hold {expected:?}"),
            ));
        }
        let environments = block(memory.list_resources::<ServiceEnvironment>())
            .map_err(|e| violation("progress", e))?
            .map_err(|e| violation("capacity", e.to_string()))?;
        let shares = block(memory.list_resources::<QuotaShare>())
            .map_err(|e| violation("progress", e))?
            .map_err(|e| violation("capacity", e.to_string()))?;
        for (name, usage) in &stored {
            let before = self.last_usage.get(name);
            let limits = environments
                .iter()
                .find(|e| e.value.service_environment_name == *name)
                .map(|e| e.value.capacity_limits.clone())
                .unwrap_or_default();
            if !within_limits(&limits, &usage.instances)
                && grew(&usage.instances, before.map(|b| &b.instances))
            {
                return Err(violation(
                    "capacity",
                    format!(
                        "{name} went from {:?} to {:?} instances in use, limits {limits:?}",
                        before.map(|b| &b.instances),
                        usage.instances
                    ),
                ));
            }
        }
        // A quota share's limits hold over every environment its jobs run in.
        let per_share = |usage: &BTreeMap<String, EnvironmentUsage>| {
            let mut sums: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
            for u in usage.values() {
                for (key, counts) in &u.quota_shares {
                    let sum = sums.entry(key.clone()).or_default();
                    for (ty, n) in counts {
                        *sum.entry(ty.clone()).or_insert(0) += n;
                    }
                }
            }
            sums
        };
        let (now, then) = (per_share(&stored), per_share(&self.last_usage));
        for (key, in_use) in &now {
            let Some(share) = shares.iter().find(|s| s.value.key() == *key) else {
                continue;
            };
            let before = then.get(key);
            if !QuotaShareState::from(&share.value).admits(in_use) && grew(in_use, before) {
                return Err(violation(
                    "quota share capacity",
                    format!(
                        "{key} went from {before:?} to {in_use:?} instances in use, limits {:?}",
                        share.value.capacity_limits
                    ),
                ));
            }
        }
        self.last_usage = stored;
        let live = self.backend.live();
        let live_instances: u64 = live.values().sum();
        if live_instances > 2 * capacity {
            return Err(violation(
                "capacity",
                format!(
                    "{live_instances} instances of live training jobs, capacity {capacity} in \
                     each of two environments"
                ),
            ));
        }
        // 3. No double launch.
        let mut live_per_job: BTreeMap<String, Vec<&String>> = BTreeMap::new();
        for name in live.keys() {
            let owner = parse_attempt_name(name).and_then(|(id, n)| {
                let job = jobs.get(&id)?;
                let latest = job.attempts.len() == n && job.status.is_dispatched();
                latest.then_some(id)
            });
            let Some(id) = owner else {
                return Err(violation(
                    "no double launch",
                    format!(
                        "live training job {name} is not the latest attempt of a dispatched job"
                    ),
                ));
            };
            live_per_job.entry(id).or_default().push(name);
        }
        if let Some((id, names)) = live_per_job.iter().find(|(_, n)| n.len() > 1) {
            return Err(violation(
                "no double launch",
                format!("job {id} has {} live training jobs: {names:?}", names.len()),
            ));
        }
        for job in jobs.values() {
            for a in &job.attempts {
                if let Some(arn) = &a.training_job_arn {
                    let actual = self.backend.arn_of(&a.training_job_name);
                    let lost = actual.is_none() && self.backend.was_lost(&a.training_job_name);
                    if !lost && actual.as_deref() != Some(arn.as_str()) {
                        return Err(violation(
                            "no double launch",
                            format!(
                                "job {} attempt {} records {arn}, the backend has {actual:?}",
                                job.job_id, a.training_job_name
                            ),
                        ));
                    }
                }
            }
        }
        // 4. Attempts within limits.
        let limit = self.workload.scenario.attempts.max(1) as usize;
        for job in jobs.values() {
            let used = job.attempts.iter().filter(|a| consumes_attempt(a)).count();
            if used > limit {
                return Err(violation(
                    "attempts within limits",
                    format!("job {} used {used} attempts, limit {limit}", job.job_id),
                ));
            }
        }
        // 5. Terminal states absorb.
        for job in jobs.values() {
            match self.terminal.get(&job.job_id) {
                Some(&(status, n)) if status != job.status || n != job.attempts.len() => {
                    return Err(violation(
                        "terminal states absorb",
                        format!(
                            "job {} was {status} after {n} attempts, is now {} after {}",
                            job.job_id,
                            job.status,
                            job.attempts.len()
                        ),
                    ));
                }
                Some(_) => {}
                None if job.status.is_terminal() => {
                    self.terminal
                        .insert(job.job_id.clone(), (job.status, job.attempts.len()));
                }
                None => {}
            }
        }
        Ok(())
    }
}

/// Whether any instance type's count in `now` is above its count in `then`.
fn grew(now: &BTreeMap<String, u64>, then: Option<&BTreeMap<String, u64>>) -> bool {
    now.iter()
        .any(|(ty, n)| *n > then.and_then(|t| t.get(ty)).copied().unwrap_or(0))
}

/// Runs one seed under its own workload and fault mix.
pub fn run_seed(seed: u64) -> FaultRun {
    run_workload(Workload::generate(seed), Sabotage::default())
}

/// Runs a workload, optionally with deliberate bugs (to test the checks).
pub fn run_workload(workload: Workload, sabotage: Sabotage) -> FaultRun {
    let mut output = String::new();
    let _ = writeln!(output, "trainyard fault simulation");
    for (k, v) in workload.parameters() {
        let _ = writeln!(output, "{k}: {v}");
    }
    let seed = workload.seed;
    let (verdict, journal, summary) = execute(workload, sabotage);
    for line in journal {
        let _ = writeln!(output, "{line}");
    }
    output.push_str(&summary);
    match &verdict {
        Verdict::Passed => {
            let _ = writeln!(output, "result: passed");
        }
        Verdict::Violated { invariant, detail } => {
            let _ = writeln!(output, "result: VIOLATED {invariant}: {detail}");
            let _ = writeln!(output, "replay: {}", replay_command(seed));
        }
    }
    FaultRun {
        seed,
        verdict,
        output,
    }
}

fn execute(workload: Workload, sabotage: Sabotage) -> (Verdict, Vec<String>, String) {
    let clock = Arc::new(ManualClock::new(T0_MS));
    let chaos = Arc::new(Chaos {
        state: Mutex::new(ChaosState {
            rng: Rng::new(workload.seed ^ 0xC4A0_5EED),
            shown_rng: Rng::new(workload.seed ^ 0x5407_5EED),
            on: false,
            injected: 0,
            by_kind: BTreeMap::new(),
            journal: Vec::new(),
        }),
        clock: clock.clone(),
    });
    let rates = workload.rates.clone();
    let store = FaultyStore::new(MemoryStore::new(), chaos.clone(), rates.clone());
    let service = Service::new(
        Interleaving::new(store),
        NoEvents,
        clock.clone(),
        Arc::new(SequentialIds::default()),
        ArnContext::default(),
    );
    let emulator = EmulatorConfig {
        provisioning_ms: secs_ms(workload.scenario.provisioning_s),
        download_ms: secs_ms(workload.scenario.download_s),
        upload_ms: secs_ms(workload.scenario.upload_s),
        stop_grace_ms: secs_ms(workload.scenario.stop_grace_s),
        failure_rate: workload.scenario.failure_rate,
        capacity_error_rate: workload.scenario.capacity_error_rate,
        seed: workload.seed,
        ..EmulatorConfig::default()
    };
    let backend = FaultyBackend {
        sagemaker: EmulatedSageMaker::on_clock(emulator, clock.clone()),
        state: Mutex::new(BackendState::default()),
        chaos: chaos.clone(),
        rates,
        sabotage,
    };
    let teams = team_loads(&workload.trace, &workload.scenario);
    let setup = Setup::new(workload.policy, &workload.scenario, &teams);
    let config = CycleConfig {
        planner: setup.planner.clone(),
        ..CycleConfig::default()
    };
    let operator = Operator {
        spare: format!("{}-spare", setup.environment.service_environment_name),
        main: setup.environment.clone(),
        shrunk: false,
        disabled: BTreeSet::new(),
        on_spare: BTreeSet::new(),
    };
    let mut h = Harness {
        workload,
        service,
        backend,
        chaos: chaos.clone(),
        config,
        ids: Vec::new(),
        terminal: BTreeMap::new(),
        operator,
        last_usage: BTreeMap::new(),
    };
    let verdict = match simulate(&mut h, &setup, sabotage) {
        Ok(()) => Verdict::Passed,
        Err(v) => {
            chaos.note(format!("violation of {}", v.invariant));
            Verdict::Violated {
                invariant: v.invariant.to_owned(),
                detail: v.detail,
            }
        }
    };
    let mut summary = String::new();
    let c = chaos.lock();
    let _ = writeln!(summary, "faults injected: {}", c.injected);
    for (kind, n) in &c.by_kind {
        let _ = writeln!(summary, "  {kind}: {n}");
    }
    drop(c);
    let b = h.backend.lock();
    let repeated = b.creates.values().filter(|n| **n > 1).count();
    let refused: u32 = b.refused.values().sum();
    let _ = writeln!(
        summary,
        "training jobs created: {}, names created more than once: {repeated}, refused as in use (adopted): {refused}",
        b.instances.len()
    );
    drop(b);
    let journal = std::mem::take(&mut chaos.lock().journal);
    (verdict, journal, summary)
}

fn secs_ms(s: f64) -> i64 {
    (s * 1_000.0).round() as i64
}

fn training_payload(job: &TraceJob, instance_type: &str) -> String {
    json!({
        "TrainingJobName": job.id,
        "RoleArn": "arn:aws:iam::000000000000:role/TrainyardFaults",
        "AlgorithmSpecification": {"TrainingImage": "simulated:1", "TrainingInputMode": "File"},
        "HyperParameters": {"emulator_duration_s": format!("{}", job.duration_s)},
        "OutputDataConfig": {"S3OutputPath": "s3://simulated/out"},
        "ResourceConfig": {"InstanceType": instance_type, "InstanceCount": job.instances, "VolumeSizeInGB": 1},
        "StoppingCondition": {"MaxRuntimeInSeconds": requested_runtime_s(job.duration_s)}
    })
    .to_string()
}

/// The fault phase, then the liveness phase; checks after every step.
fn simulate(h: &mut Harness, setup: &Setup, sabotage: Sabotage) -> Result<(), Violation> {
    let store = h.service.store();
    let setup_err = |e: String| violation("progress", format!("setting up: {e}"));
    let mut spare = setup.environment.clone();
    spare.service_environment_name = h.operator.spare.clone();
    for env in [&setup.environment, &spare] {
        block(store.create_resource(env))
            .map_err(setup_err)?
            .map_err(|e| setup_err(e.to_string()))?;
    }
    for p in &setup.policies {
        block(store.create_resource(p))
            .map_err(setup_err)?
            .map_err(|e| setup_err(e.to_string()))?;
    }
    for q in &setup.queues {
        block(store.create_resource(q))
            .map_err(setup_err)?
            .map_err(|e| setup_err(e.to_string()))?;
    }
    for s in &setup.quota_shares {
        block(store.create_resource(s))
            .map_err(setup_err)?
            .map_err(|e| setup_err(e.to_string()))?;
    }
    let scenario = h.workload.scenario.clone();
    let jobs = h.workload.trace.jobs.clone();
    let retry = (scenario.attempts > 1).then(|| RetryStrategy {
        attempts: scenario.attempts,
        evaluate_on_exit: vec![],
    });
    let due_ms = (scenario.due_work_interval_s as i64) * 1_000;
    let quiet_ms = if sabotage.no_reconciliation {
        i64::MAX
    } else {
        (scenario.reconcile_quiet_s as i64) * 1_000
    };
    let last_submit_ms = jobs.last().map_or(0, |j| secs_ms(j.submit_s));
    let faults_end = T0_MS + last_submit_ms + FAULT_WINDOW_S * 1_000;
    let bound_ms = h.workload.liveness_bound_ms();
    let mut liveness_deadline = None;
    let mut next_job = 0usize;
    let mut next_due = T0_MS + due_ms;
    let mut now = T0_MS;
    h.chaos.lock().on = true;
    h.chaos.note("phase: faults on".into());

    for _step in 0..MAX_STEPS {
        // The next instant something happens.
        let next_submit = jobs.get(next_job).map(|j| T0_MS + secs_ms(j.submit_s));
        let next_backoff = h.memory().next_not_before_after(now);
        let candidates = [
            next_submit,
            h.backend.next_deadline(),
            next_backoff,
            Some(next_due),
        ];
        let mut at = candidates.into_iter().flatten().min().unwrap_or(next_due);
        if liveness_deadline.is_none() {
            at = at.min(faults_end);
        }
        now = at.max(now);
        h.chaos.clock.set(now);

        // Faults off: the liveness phase starts, with its deadline.
        if liveness_deadline.is_none() && now >= faults_end {
            h.chaos.lock().on = false;
            h.restore_config()?;
            liveness_deadline = Some(now + bound_ms);
            h.chaos.note(format!(
                "phase: faults off; liveness bound {} s",
                bound_ms / 1_000
            ));
        }

        // 1. Submit (faults paused: a refused submission is the client's to retry, and is not
        //    what this harness tests) and accept.
        let mut submitted = 0;
        while let Some(job) = jobs
            .get(next_job)
            .filter(|j| T0_MS + secs_ms(j.submit_s) <= now)
        {
            let route = setup.route(
                &scenario.tier_of(job),
                &scenario.share_of(job),
                job.scheduling_priority,
            );
            // A disabled queue refuses submissions: the client waits until it is enabled again
            // (at the latest when faults stop).
            if h.operator.disabled.contains(&route.queue) {
                break;
            }
            let cmd = SubmitJob {
                job_name: job.id.clone(),
                job_queue: route.queue,
                service_job_type: Default::default(),
                service_request_payload: training_payload(job, &scenario.instance_type),
                share_identifier: route.share_identifier,
                quota_share_name: route.quota_share_name,
                scheduling_priority: route.scheduling_priority,
                retry_strategy: retry.clone(),
                timeout_config: None,
                preemption_configuration: None,
                tags: [("team".to_owned(), scenario.share_of(job))].into(),
                client_token: None,
            };
            let was_on = std::mem::replace(&mut h.chaos.lock().on, false);
            let result = block(h.service.submit(cmd));
            h.chaos.lock().on = was_on;
            let created = h
                .call(&format!("submitting {}", job.id), result, u64::MAX)?
                .ok_or_else(|| violation("progress", "submit"))?;
            h.ids.push(created.job_id);
            next_job += 1;
            submitted += 1;
        }
        // 2. The pass, as every host runs it. Accepting runs with faults paused, like the
        //    submissions above: a pass of its own.
        if submitted > 0 {
            let was_on = std::mem::replace(&mut h.chaos.lock().on, false);
            let input = PassInput {
                accept: Some(Accept {
                    batch: submitted,
                    max_batches: 1,
                    min_age_ms: 0,
                }),
                ..PassInput::default()
            };
            let result = block(h.service.pass(&h.backend, &h.config, input));
            h.chaos.lock().on = was_on;
            h.pass("accepting", result, u64::MAX)?;
        }

        // A training job in progress vanishes from SageMaker.
        if h.chaos.roll(
            h.workload.rates.training_job_lost,
            "training_job_lost",
            "a training job in progress",
        ) {
            h.backend.lose_one();
        }

        // An operator changes the configuration under the running jobs.
        if h.chaos.roll(
            h.workload.rates.config_change,
            "config_changed",
            "the operator",
        ) {
            h.change_config(setup)?;
        }

        // The events due now, the due work when its interval is up, and a cycle, or two at once.
        let changes: Vec<TrainingJobState> = h
            .backend
            .deliverable(now)
            .iter()
            .map(StateChange::state)
            .collect();
        let due_now = now >= next_due;
        if due_now {
            next_due = now + due_ms;
        }
        let input = PassInput {
            changes: &changes,
            due_work: due_now.then_some(DueWork::all(quiet_ms)),
            ..PassInput::default()
        };
        let before = h.chaos.injected();
        let result = block(h.service.pass(&h.backend, &h.config, input));
        h.pass("the pass", result, before)?;
        // The cycle is a pass of its own, so that it can race a second one.
        let cycle = || PassInput {
            max_cycles: 1,
            ..PassInput::default()
        };
        let before = h.chaos.injected();
        if h.chaos.roll(
            h.workload.rates.concurrent_cycles,
            "concurrent_cycles",
            "two cycles",
        ) {
            let joined = join2(
                h.service.pass(&h.backend, &h.config, cycle()),
                h.service.pass(&h.backend, &h.config, cycle()),
            );
            match joined {
                Ok((a, b)) => {
                    h.pass("first of two cycles", Ok(a), before)?;
                    h.pass("second of two cycles", Ok(b), before)?;
                }
                Err(e) => return Err(violation("progress", e)),
            }
        } else {
            let result = block(h.service.pass(&h.backend, &h.config, cycle()));
            h.pass("cycle", result, before)?;
        }

        // 5. Invariants.
        h.check()?;

        // Liveness: done when every job has ended, failed when the bound passes first.
        if let Some(deadline) = liveness_deadline {
            if next_job == jobs.len() && h.terminal.len() == h.ids.len() {
                h.chaos.note(format!(
                    "all {} jobs terminal ({} after faults stopped)",
                    h.ids.len(),
                    clock_s(now - (deadline - bound_ms) + T0_MS)
                ));
                return Ok(());
            }
            if now > deadline {
                let open: Vec<String> = h
                    .ids
                    .iter()
                    .filter(|id| !h.terminal.contains_key(*id))
                    .cloned()
                    .collect();
                return Err(violation(
                    "liveness",
                    format!(
                        "{} jobs not terminal {} s after faults stopped: {open:?}",
                        open.len(),
                        bound_ms / 1_000
                    ),
                ));
            }
        }
    }
    Err(violation(
        "progress",
        format!("no end after {MAX_STEPS} steps"),
    ))
}
