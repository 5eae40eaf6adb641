//! The discrete-event driver: replays a trace through the real use-cases ([`Service`] over the
//! [`MemoryStore`]), the real planner, and the SageMaker emulator's model, over virtual time.
//!
//! # One pass per instant
//!
//! Time jumps to the next instant at which something happens: a submission, an emulated phase
//! end or event delivery, a job's backoff ending, or the periodic due-work pass. Everything due
//! at that instant is handled in one pass, in this order:
//!
//! 1. **Submit** the trace's jobs due now.
//! 2. **Pass** (`Service::pass`, as every host runs it): accept the jobs just submitted, deliver
//!    the emulator's state changes due now, the due work (timeouts, relaunches, reconciliation)
//!    every `due_work_interval_s`, and a cycle if it can change anything: something changed
//!    since the last cycle (a submission, an attempt that ended, a backoff that expired, due
//!    work), some job is RUNNABLE, and capacity is free (or the policy preempts).
//! 3. **Record** the pool's and each team's state if it changed.
//!
//! Launches inside the cycle create emulated training jobs whose first phase may end at the same
//! instant; the next pass then happens at the same time. The run ends when the trace is
//! exhausted and nothing is left to happen.
//!
//! # Determinism
//!
//! A manual clock, sequential ids, ordered maps everywhere, the emulator's seeded draws, and
//! futures polled to completion on the spot (the memory store and the emulated backend never
//! wait): the same trace, scenario and seed give byte-identical records.
//!
//! # The emulated backend
//!
//! SageMaker is the emulator's model behind the same adapter local mode uses
//! ([`EmulatedSageMaker`]), on the run's manual clock. The model indexes its training jobs by
//! their next deadline, so advancing time touches only the jobs with something due.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use trainyard_app::ports::{ConfigStore, JobStore};

use foldhash::fast::FixedState;
use trainyard_app::Service;
use trainyard_app::memory::MemoryStore;
use trainyard_app::ports::{Event, EventSink, TrainingJobState};
use trainyard_app::ports::{ManualClock, SequentialIds};
use trainyard_app::service::jobs::SubmitJob;
use trainyard_app::service::scheduling::{
    Accept, CycleConfig, DueWork, PassInput, PassReport, StateOutcome, queue_state,
};
use trainyard_domain::arn::ArnContext;
use trainyard_domain::job::{JobStatus, RetryStrategy, ServiceJob};
use trainyard_emulator::backend::EmulatedSageMaker;
use trainyard_emulator::model::{CheckpointProgress, Config as EmulatorConfig};

use crate::eta::{EtaSettings, Tracker, secs_ms};
use crate::gate::{Counted, Fresh, InShare, Lines};
use crate::policies::{Policy, Route, Setup, TeamLoad};
use crate::record::{JobRecord, ReplayWork, RunRecord, ShareInterval, UsageInterval};
use crate::scenario::Scenario;
use crate::trace::{Trace, TraceJob};
use trainyard_forecast::Arrival;
use trainyard_scheduler::{
    Config as PlannerConfig, EnvironmentState, PendingJob, QuotaShareState, SharedStr, SkipReason,
    Snapshot, plan_cycle,
};

/// Virtual time of the trace's first submission (epoch ms): any fixed instant will do.
const T0_MS: i64 = 1_500_000_000_000;

/// The job tag naming its team, which [`TeamCounts`] groups jobs by.
const TEAM_TAG: &str = "team";

/// Passes between progress reports.
const PROGRESS_EVERY: u64 = 4_096;

/// Requested `MaxRuntimeInSeconds` classes: a job asks for the smallest class above its run
/// time, as users pick a coarse limit (1 h, 4 h, 12 h, 1 d, 3 d, 7 d, 28 d). The planner's
/// backfill sees only this estimate, never the true duration.
const RUNTIME_CLASSES_S: [u64; 7] = [3_600, 14_400, 43_200, 86_400, 259_200, 604_800, 2_419_200];

/// A run that could not complete.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A use-case failed (a bug, or a trace the configuration rejects).
    #[error("{context}: {source}")]
    App {
        /// What the driver was doing.
        context: String,
        /// The use-case error.
        #[source]
        source: trainyard_app::AppError,
    },
    /// A store read failed.
    #[error("store: {0}")]
    Store(#[from] trainyard_app::ports::StoreError),
    /// A future waited, which the in-memory adapters never do.
    #[error("an in-memory operation did not complete at once")]
    Pending,
}

/// How far a run has come, for progress reports.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// The policy.
    pub policy: &'static str,
    /// Virtual time reached, seconds.
    pub now_s: f64,
    /// Last submission in the trace, seconds.
    pub last_submit_s: f64,
    /// Jobs that reached SUCCEEDED or FAILED.
    pub jobs_done: usize,
    /// Jobs in the run.
    pub jobs_total: usize,
}

/// Polls a future that is known to complete without waiting.
fn ready<F: Future>(future: F) -> Result<F::Output, SimError> {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    match future.as_mut().poll(&mut cx) {
        Poll::Ready(v) => Ok(v),
        Poll::Pending => Err(SimError::Pending),
    }
}

fn app(context: &str) -> impl FnOnce(trainyard_app::AppError) -> SimError + '_ {
    move |source| SimError::App {
        context: context.to_owned(),
        source,
    }
}

fn team_of(job: &ServiceJob) -> &str {
    job.tags.get(TEAM_TAG).map_or("", String::as_str)
}

/// What one team holds and waits for at an instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct TeamNow {
    /// RUNNABLE jobs.
    runnable: usize,
    /// Instances held by its dispatched jobs.
    held_instances: u64,
}

impl TeamNow {
    /// What a job, counted so, adds to its team.
    fn of(job: Counted) -> Self {
        Self {
            runnable: usize::from(job.waits()),
            held_instances: job.held(),
        }
    }
}

/// The service's event sink in a replay: counts each team's RUNNABLE jobs and held instances
/// from the status changes the use-cases publish (every change of status is published, after
/// its commit), so that the recorder reads them per pass without the store knowing of teams.
#[derive(Debug, Clone, Default)]
struct TeamCounts {
    inner: Arc<Mutex<TeamState>>,
}

#[derive(Debug, Default)]
struct TeamState {
    /// Each job's team and how it was last counted in it.
    jobs: JobsCounted,
    /// Teams with a RUNNABLE job or held instances.
    teams: BTreeMap<String, TeamNow>,
    /// Each team's waiting and running jobs by priority, for the cycle gate.
    lines: Lines,
}

/// Jobs by id, hashed with a fixed seed (every status change looks one up).
#[allow(clippy::disallowed_types)] // Only looked up, never iterated: no order shows in a replay.
type JobsCounted = std::collections::HashMap<String, (String, Counted), FixedState>;

/// Applies `f` to `team`'s counts, keeping only teams with something to count.
fn change(teams: &mut BTreeMap<String, TeamNow>, team: &str, f: impl FnOnce(&mut TeamNow)) {
    match teams.get_mut(team) {
        Some(entry) => {
            f(entry);
            if *entry == TeamNow::default() {
                teams.remove(team);
            }
        }
        None => {
            let mut entry = TeamNow::default();
            f(&mut entry);
            if entry != TeamNow::default() {
                teams.insert(team.to_owned(), entry);
            }
        }
    }
}

impl TeamCounts {
    fn lock(&self) -> MutexGuard<'_, TeamState> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl EventSink for TeamCounts {
    async fn publish(&self, event: Event) {
        if let Event::JobStatusChanged { job, .. } = event {
            self.publish_status(&job).await;
        }
    }

    /// Reads the job in place: the replay publishes every change of status.
    async fn publish_status(&self, job: &ServiceJob) {
        let (team, counted) = (team_of(job), Counted::of(job));
        let now = TeamNow::of(counted);
        let mut state = self.lock();
        let TeamState { jobs, teams, lines } = &mut *state;
        let before = jobs.remove_entry(job.job_id.as_str());
        if let Some((_, (old_team, old_counted))) = &before {
            let old = TeamNow::of(*old_counted);
            change(teams, old_team, |t| {
                t.runnable = t.runnable.saturating_sub(old.runnable);
                t.held_instances = t.held_instances.saturating_sub(old.held_instances);
            });
            lines.count(old_team, *old_counted, false);
        }
        change(teams, team, |t| {
            t.runnable += now.runnable;
            t.held_instances += now.held_instances;
        });
        lines.count(team, counted, true);
        if !job.status.is_terminal() {
            // The id and team kept from the job's last change, if it had one.
            let (id, kept) = match before {
                Some((id, (kept, _))) if kept == team => (id, kept),
                Some((id, _)) => (id, team.to_owned()),
                None => (job.job_id.clone(), team.to_owned()),
            };
            jobs.insert(id, (kept, counted));
        }
    }
}

/// Owners' waits for capacity their quota share lent, episode by episode: one starts at the
/// first cycle that finds a job within its share's limit while borrowed jobs hold the capacity
/// it lent (`QUOTA:CAPACITY_LENT`) or that reclaims capacity for it; it goes on while every
/// cycle finds it so, or waiting for the jobs preempted for it to stop; it ends at the cycle
/// that dispatches it (completed) or at one that finds it waiting for anything else
/// (abandoned: it was no longer owed capacity, say its share filled up).
#[derive(Debug, Default)]
struct LentWaits {
    /// Open episodes: job id → when it began.
    open: BTreeMap<String, i64>,
    /// Each job's first completed episode, ms.
    completed: BTreeMap<String, i64>,
}

impl LentWaits {
    /// One cycle's waits, at `now`; `dispatched` tells whether a job left waiting by starting.
    fn observe(
        &mut self,
        cycle: &trainyard_app::service::scheduling::CycleReport,
        now: i64,
        mut dispatched: impl FnMut(&str) -> bool,
    ) {
        let starting: BTreeSet<&str> = cycle
            .lent_waits
            .iter()
            .chain(&cycle.reclaimed_for)
            .map(SharedStr::as_str)
            .collect();
        let going_on: BTreeSet<&str> = cycle
            .preemption_waits
            .iter()
            .map(SharedStr::as_str)
            .chain(starting.iter().copied())
            .collect();
        let ended: Vec<String> = self
            .open
            .keys()
            .filter(|id| !going_on.contains(id.as_str()))
            .cloned()
            .collect();
        for id in ended {
            let Some(since) = self.open.remove(&id) else {
                continue;
            };
            if dispatched(&id) {
                self.completed.entry(id).or_insert(now - since);
            }
        }
        for id in starting {
            self.open.entry(id.to_owned()).or_insert(now);
        }
    }
}

/// Whether `cycle` found an owner waiting for capacity its share lent, or reclaimed some, or
/// waited for preempted jobs to stop: an episode [`LentWaits`] follows to the next cycle.
fn owes_lent(cycle: &trainyard_app::service::scheduling::CycleReport) -> bool {
    !(cycle.lent_waits.is_empty()
        && cycle.reclaimed_for.is_empty()
        && cycle.preemption_waits.is_empty())
}

/// Whether `cycle` started, stopped and deferred nothing, and left no job waiting for time to
/// pass to reclaim or to have its victims stop ([`owes_lent`]): for an owner the planner gives no
/// time when enough of the borrowers will have run long enough to be preempted, and a cycle
/// during the victims' stop plans the same preemption again and asks SageMaker again to stop
/// them (skipping either changed a replay).
fn did_nothing(cycle: &trainyard_app::service::scheduling::CycleReport) -> bool {
    cycle.dispatched == 0
        && cycle.preemptions == 0
        && cycle.reclaims == 0
        && cycle.conflicts == 0
        && cycle.capacity_errors == 0
        && cycle.launch_deferred == 0
        && !owes_lent(cycle)
}

/// Whether a pass's second cycle, at the instant of the `first` (which dispatched), can act.
/// The first planned its own dispatches: what it started, the capacity they took and the lines
/// behind them. The second sees more than that only where the first
/// - held borrowers back for its starts within the shares' limits (the second may start them);
/// - started jobs that change who counts as borrowed (the second may reclaim from others);
/// - stopped jobs: they are now marked stopping, which changes who counts as borrowed and whom
///   a waiting job chooses, and a victim that had not launched gave its capacity back at once;
/// - had a dispatch refused or failed, giving its capacity back;
/// - or found an owner waiting for the capacity its share lent: the report's reclaim latency
///   counts from the first cycle that finds it so ([`LentWaits`]).
///
/// (Measured: replays skipping the other second cycles are identical, docs/benchmarks.md.)
fn second_cycle_may_act(first: &trainyard_app::service::scheduling::CycleReport) -> bool {
    first.borrowers_held > 0
        || first.borrowing_moved
        || first.preemptions > 0
        || first.conflicts > 0
        || first.over_limit > 0
        || first.capacity_errors > 0
        || first.rejected > 0
        || first.launch_deferred > 0
        || !first.lent_waits.is_empty()
}

/// A trace job as submitted: its tier and team decided.
struct Planned<'a> {
    job: &'a TraceJob,
    tier: String,
    team: String,
    submit_ms: i64,
}

fn ms(s: f64) -> i64 {
    (s * 1_000.0).round() as i64
}

/// The policy's configuration as the planner sees it, in an idle environment: what each job
/// shape is put to, alone, to learn whether it can ever run.
struct Probe<'a> {
    snapshot: Snapshot,
    planner: &'a PlannerConfig,
}

impl<'a> Probe<'a> {
    fn new(setup: &'a Setup) -> Self {
        let environment = &setup.environment;
        let queues = setup
            .queues
            .iter()
            .map(|q| {
                let policy = q
                    .scheduling_policy
                    .as_deref()
                    .and_then(|name| setup.policies.iter().find(|p| p.name == name));
                let shares = setup
                    .quota_shares
                    .iter()
                    .filter(|s| s.job_queue == q.job_queue_name)
                    .map(QuotaShareState::from)
                    .collect();
                queue_state(q, policy, shares)
            })
            .collect();
        let snapshot = Snapshot {
            environments: vec![EnvironmentState {
                name: environment.service_environment_name.clone(),
                enabled: true,
                limits: environment.capacity_limits.clone(),
            }],
            queues,
            ..Snapshot::default()
        };
        Self {
            snapshot,
            planner: &setup.planner,
        }
    }

    /// Why a job of `route` needing `instances` of `instance_type` can never run, if it cannot:
    /// the planner's reason for it, if it is one that no amount of waiting changes
    /// ([`SkipReason::never_runs`]).
    fn never_runs(&self, route: &Route, instance_type: &str, instances: u32) -> Option<SkipReason> {
        let job = PendingJob {
            job_id: "probe".into(),
            queue: route.queue.as_str().into(),
            share: route
                .quota_share_name
                .as_deref()
                .or(route.share_identifier.as_deref())
                .map(SharedStr::from),
            priority: route.scheduling_priority.unwrap_or(0),
            runnable_at_ms: 0,
            instances: BTreeMap::from([(instance_type.to_owned(), instances)]).into(),
            max_runtime_s: None,
            not_before_ms: None,
            line_offset_ms: 0,
        };
        let mut snapshot = self.snapshot.clone();
        snapshot.pending = vec![job];
        let plan = plan_cycle(&snapshot, 0, self.planner);
        plan.skips
            .into_iter()
            .map(|skip| skip.reason)
            .find(SkipReason::never_runs)
    }
}

fn seconds(at_ms: i64) -> f64 {
    (at_ms - T0_MS) as f64 / 1_000.0
}

/// The `MaxRuntimeInSeconds` a job of this run time asks for.
pub fn requested_runtime_s(duration_s: f64) -> u64 {
    let needed = duration_s.ceil().max(1.0) as u64;
    RUNTIME_CLASSES_S
        .into_iter()
        .find(|c| *c > needed)
        .unwrap_or_else(|| needed.div_ceil(RUNTIME_CLASSES_S[6]) * RUNTIME_CLASSES_S[6] + 1)
}

/// A SageMaker-valid training-job name from a trace id.
fn training_name(id: &str) -> String {
    let name: String = id
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(40)
        .collect();
    let name = name.trim_matches('-');
    if name.is_empty() {
        "job".into()
    } else {
        name.to_owned()
    }
}

/// The `CreateTrainingJob` request a replayed job is submitted with. Serialized from these
/// types (not built as a JSON value) because every job of a replay builds one.
#[derive(serde::Serialize)]
#[serde(rename_all = "PascalCase")]
struct Payload<'a> {
    training_job_name: &'a str,
    role_arn: &'static str,
    algorithm_specification: Algorithm,
    hyper_parameters: Hyper,
    output_data_config: Output,
    resource_config: Resources<'a>,
    stopping_condition: Stopping,
    #[serde(skip_serializing_if = "Option::is_none")]
    checkpoint_config: Option<Checkpoint>,
}

#[derive(serde::Serialize)]
#[serde(rename_all = "PascalCase")]
struct Algorithm {
    training_image: &'static str,
    training_input_mode: &'static str,
}

/// The emulator's hyperparameters: how long the job trains, how often it checkpoints.
#[derive(serde::Serialize)]
struct Hyper {
    emulator_duration_s: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    emulator_checkpoint_interval_s: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    emulator_checkpoint_on_stop: Option<String>,
}

#[derive(serde::Serialize)]
#[serde(rename_all = "PascalCase")]
struct Output {
    s3_output_path: &'static str,
}

#[derive(serde::Serialize)]
#[serde(rename_all = "PascalCase")]
struct Resources<'a> {
    instance_type: &'a str,
    instance_count: u32,
    #[serde(rename = "VolumeSizeInGB")]
    volume_size_in_gb: u32,
}

#[derive(serde::Serialize)]
#[serde(rename_all = "PascalCase")]
struct Stopping {
    max_runtime_in_seconds: u64,
}

#[derive(serde::Serialize)]
#[serde(rename_all = "PascalCase")]
struct Checkpoint {
    s3_uri: String,
}

fn payload(job: &TraceJob, scenario: &Scenario) -> String {
    let name = training_name(&job.id);
    let interval_s = scenario.checkpoint_interval_of(job);
    let payload = Payload {
        training_job_name: &name,
        role_arn: "arn:aws:iam::000000000000:role/TrainyardSimulator",
        algorithm_specification: Algorithm {
            training_image: "simulated:1",
            training_input_mode: "File",
        },
        hyper_parameters: Hyper {
            emulator_duration_s: job.duration_s.to_string(),
            emulator_checkpoint_interval_s: interval_s.map(|s| s.to_string()),
            emulator_checkpoint_on_stop: interval_s
                .map(|_| scenario.checkpoint_on_stop.to_string()),
        },
        output_data_config: Output {
            s3_output_path: "s3://simulated/out",
        },
        resource_config: Resources {
            instance_type: job
                .instance_type
                .as_deref()
                .unwrap_or(&scenario.instance_type),
            instance_count: job.instances,
            volume_size_in_gb: 1,
        },
        stopping_condition: Stopping {
            max_runtime_in_seconds: requested_runtime_s(job.duration_s),
        },
        checkpoint_config: interval_s.map(|_| Checkpoint {
            s3_uri: format!("s3://simulated/checkpoints/{name}"),
        }),
    };
    serde_json::to_string(&payload).unwrap_or_else(|e| unreachable!("a payload serializes: {e}"))
}

/// Each team's offered load (instances × duration), in team-name order.
pub fn team_loads(trace: &Trace, scenario: &Scenario) -> Vec<TeamLoad> {
    let mut loads: BTreeMap<String, f64> = scenario
        .teams
        .iter()
        .map(|t| (t.name.clone(), 0.0))
        .collect();
    for job in &trace.jobs {
        *loads.entry(scenario.share_of(job)).or_insert(0.0) +=
            f64::from(job.instances) * job.duration_s;
    }
    loads
        .into_iter()
        .map(|(name, instance_s)| TeamLoad { name, instance_s })
        .collect()
}

/// The emulator's configuration for a scenario.
pub fn emulator_config(scenario: &Scenario) -> EmulatorConfig {
    EmulatorConfig {
        provisioning_ms: ms(scenario.provisioning_s),
        download_ms: ms(scenario.download_s),
        upload_ms: ms(scenario.upload_s),
        stop_grace_ms: ms(scenario.stop_grace_s),
        failure_rate: scenario.failure_rate,
        capacity_error_rate: scenario.capacity_error_rate,
        seed: scenario.seed,
        ..EmulatorConfig::default()
    }
}

/// What the pool and each team looked like since `since_ms`.
struct Recorder {
    capacity: u64,
    entitlements: BTreeMap<String, f64>,
    usage: Vec<UsageInterval>,
    shares: Vec<ShareInterval>,
    pool: Option<(i64, u64, bool)>,
    teams: BTreeMap<String, (i64, u64, bool)>,
}

/// The interval a team's counts `(since, held, backlogged)` held until `end_ms`, if it is
/// worth recording: not empty, and with instances held or jobs waiting.
fn share_interval(
    entitlements: &BTreeMap<String, f64>,
    name: &str,
    (start, held, backlogged): (i64, u64, bool),
    end_ms: i64,
) -> Option<ShareInterval> {
    (end_ms > start && (held > 0 || backlogged)).then(|| ShareInterval {
        start_s: seconds(start),
        end_s: seconds(end_ms),
        share: name.to_owned(),
        held_instances: held,
        backlogged,
        entitlement: entitlements.get(name).copied().unwrap_or(0.0),
    })
}

impl Recorder {
    fn observe(&mut self, now_ms: i64, store: &MemoryStore, teams: &TeamCounts) {
        let busy = store.held_instances();
        let backlogged = store.runnable_count() > 0;
        match self.pool {
            Some((start, b, l)) if (b, l) == (busy, backlogged) => {
                let _ = start;
            }
            Some((start, b, l)) => {
                if now_ms > start {
                    self.usage.push(UsageInterval {
                        start_s: seconds(start),
                        end_s: seconds(now_ms),
                        busy_instances: b,
                        capacity_instances: self.capacity,
                        backlogged: l,
                    });
                }
                self.pool = Some((now_ms, busy, backlogged));
            }
            None => self.pool = Some((now_ms, busy, backlogged)),
        }
        // Every pass: the teams' counts are read in place, and a team's record is written only
        // when its counts change (cloning the counts and the names each pass was 5% of a
        // replay's profile). The intervals ended here are put in order by `finish`.
        let state = teams.lock();
        let stats = &state.teams;
        let mut ended = |name: &str, last: (i64, u64, bool)| {
            let interval = share_interval(&self.entitlements, name, last, now_ms);
            self.shares.extend(interval);
        };
        for (name, now) in stats {
            let counts = (now.held_instances, now.runnable > 0);
            match self.teams.get_mut(name) {
                Some(last) if (last.1, last.2) == counts => {}
                Some(last) => {
                    ended(name, *last);
                    *last = (now_ms, counts.0, counts.1);
                }
                None => {
                    self.teams
                        .insert(name.clone(), (now_ms, counts.0, counts.1));
                }
            }
        }
        // Teams with nothing left to count are no longer in `stats`.
        for (name, last) in self.teams.iter_mut() {
            if !stats.contains_key(name) && (last.1, last.2) != (0, false) {
                ended(name, *last);
                *last = (now_ms, 0, false);
            }
        }
    }

    fn finish(mut self, end_ms: i64) -> (Vec<UsageInterval>, Vec<ShareInterval>) {
        if let Some((start, b, l)) = self.pool
            && end_ms > start
        {
            self.usage.push(UsageInterval {
                start_s: seconds(start),
                end_s: seconds(end_ms),
                busy_instances: b,
                capacity_instances: self.capacity,
                backlogged: l,
            });
        }
        for (name, last) in std::mem::take(&mut self.teams) {
            let interval = share_interval(&self.entitlements, &name, last, end_ms);
            self.shares.extend(interval);
        }
        self.shares
            .sort_by(|a, b| a.start_s.total_cmp(&b.start_s).then(a.share.cmp(&b.share)));
        (self.usage, self.shares)
    }
}

/// Replays `trace` under `policy` and records the run. `progress` is called every few thousand
/// passes.
pub fn run(
    trace: &Trace,
    scenario: &Scenario,
    policy: Policy,
    progress: &mut dyn FnMut(&Progress),
) -> Result<RunRecord, SimError> {
    run_with_estimates(trace, scenario, policy, None, progress)
}

/// [`run`], and with `eta`, start-time estimates made and scored along the way
/// ([`crate::eta`]): the run's `eta` and each job's `eta_p50_s` and `eta_p90_s`.
pub fn run_with_estimates(
    trace: &Trace,
    scenario: &Scenario,
    policy: Policy,
    eta: Option<&EtaSettings>,
    progress: &mut dyn FnMut(&Progress),
) -> Result<RunRecord, SimError> {
    replay(
        trace,
        scenario,
        policy,
        eta,
        progress,
        Cycles::WhenTheyMayAct,
    )
}

/// Which passes run a cycle. Either way a pass cycles only if something changed since the last
/// cycle, some job is RUNNABLE, and capacity is free or the policy preempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cycles {
    /// Only if the cycle may also start, preempt or reclaim something, as far as each team's
    /// waiting and running jobs tell ([`crate::gate`]); what a replay runs.
    WhenTheyMayAct,
    /// Whenever those hold: the same replay, with the cycles that cannot act too.
    WhenAnythingChanged,
}

/// [`run_with_estimates`], cycling as `cycles` says.
pub(crate) fn replay(
    trace: &Trace,
    scenario: &Scenario,
    policy: Policy,
    eta: Option<&EtaSettings>,
    progress: &mut dyn FnMut(&Progress),
    cycles_when: Cycles,
) -> Result<RunRecord, SimError> {
    let mut tracker = eta.map(|settings| Tracker::new(settings.clone(), T0_MS));
    let teams = team_loads(trace, scenario);
    let setup = Setup::new(policy, scenario, &teams);
    let clock = Arc::new(ManualClock::new(T0_MS));
    let teams = TeamCounts::default();
    let service = Service::new(
        MemoryStore::new(),
        teams.clone(),
        clock.clone(),
        Arc::new(SequentialIds::default()),
        ArnContext::default(),
    );
    let backend = EmulatedSageMaker::on_clock(emulator_config(scenario), clock.clone());
    let store = service.store();
    ready(store.create_resource(&setup.environment))??;
    for p in &setup.policies {
        ready(store.create_resource(p))??;
    }
    for q in &setup.queues {
        ready(store.create_resource(q))??;
    }
    for s in &setup.quota_shares {
        ready(store.create_resource(s))??;
    }
    let config = CycleConfig {
        planner: setup.planner.clone(),
        ..CycleConfig::default()
    };
    let planned: Vec<Planned<'_>> = trace
        .jobs
        .iter()
        .map(|job| Planned {
            job,
            tier: scenario.tier_of(job),
            team: scenario.share_of(job),
            submit_ms: T0_MS + ms(job.submit_s),
        })
        .collect();
    // Jobs that can never run under this policy are not replayed (they would only wait): they
    // are recorded as never started, with the planner's reason.
    let probe = Probe::new(&setup);
    let mut probes: BTreeMap<(String, Option<String>, &str, u32), Option<SkipReason>> =
        BTreeMap::new();
    let mut never = Vec::new();
    let mut records: Vec<Option<JobRecord>> = Vec::with_capacity(planned.len());
    let planned: Vec<Planned<'_>> = planned
        .into_iter()
        .filter_map(|p| {
            let route = setup.route(&p.tier, &p.team, p.job.scheduling_priority);
            let ty = p
                .job
                .instance_type
                .as_deref()
                .unwrap_or(&scenario.instance_type);
            let share = route
                .quota_share_name
                .clone()
                .or(route.share_identifier.clone());
            let reason = probes
                .entry((route.queue.clone(), share, ty, p.job.instances))
                .or_insert_with(|| probe.never_runs(&route, ty, p.job.instances));
            records.push(None);
            match reason {
                Some(reason) => {
                    never.push((records.len() - 1, p, reason.to_string()));
                    None
                }
                None => Some(p),
            }
        })
        .collect();
    let last_submit_s = trace.jobs.last().map_or(0.0, |j| j.submit_s);
    let retry = (scenario.attempts > 1).then(|| RetryStrategy {
        attempts: scenario.attempts,
        evaluate_on_exit: vec![],
    });
    let capacity = u64::from(scenario.capacity_instances);
    let mut recorder = Recorder {
        capacity,
        entitlements: setup.entitlements.clone(),
        usage: Vec::new(),
        shares: Vec::new(),
        pool: None,
        teams: BTreeMap::new(),
    };
    let due_interval_ms = (scenario.due_work_interval_s as i64).saturating_mul(1_000);
    let quiet_ms = (scenario.reconcile_quiet_s as i64).saturating_mul(1_000);
    let mut next_due = T0_MS + due_interval_ms;
    let mut ids: Vec<String> = Vec::with_capacity(planned.len());
    let mut next = 0usize;
    let mut done = 0usize;
    let mut passes = 0u64;
    let (mut cycles, mut dispatching_cycles) = (0u64, 0u64);
    let mut next_change: Option<i64> = None;
    let mut now = T0_MS;
    let mut dirty = false;
    // Under quota-shares, whether nothing waiting could act when last looked at: the last cycle
    // did nothing (`did_nothing`), or the gate found since that no cycle could, and the passes
    // since only submitted jobs that could not either (`Lines::quota_fresh_may_act`).
    let mut settled = false;
    // The jobs submitted in this pass.
    let mut fresh: Vec<Fresh> = Vec::new();
    let in_share = InShare {
        from: config.planner.min_priority_for_in_share_preemption,
        wait_ms: secs_ms(config.planner.min_wait_before_in_share_preemption_s),
    };
    let mut idle_due_passes = 0u32;
    let mut reclaims = 0u64;
    // Jobs for which a cycle reclaimed lent capacity.
    let mut reclaimed_for: BTreeSet<String> = BTreeSet::new();
    // Owners waiting for capacity their quota share lent: since when (see `LentWaits`).
    let mut lent_waits = LentWaits::default();

    loop {
        // The next instant something happens.
        let next_submit = planned.get(next).map(|p| p.submit_ms);
        let next_backend = backend.shared().with(|model, _| model.next_deadline());
        let next_backoff = store.next_not_before_after(now);
        // A wait the last cycle planned ends by itself then (lent capacity becomes
        // reclaimable, a victim's checkpoint is due): cycle then, as a host's tick would.
        let change_at = next_change.filter(|at| *at > now);
        let busy = next_submit.is_some()
            || next_backend.is_some()
            || store.runnable_count() > 0
            || store.held_instances() > 0;
        if !busy {
            break;
        }
        let event = [next_submit, next_backend, next_backoff, change_at]
            .into_iter()
            .flatten()
            .min();
        // Only the periodic pass is left: stop once it has run twice with nothing to show (jobs
        // that can never run stay RUNNABLE and are recorded unfinished).
        let at = match event {
            Some(at) if at < next_due => at,
            _ => {
                if event.is_none() {
                    idle_due_passes += 1;
                    if idle_due_passes > 2 {
                        break;
                    }
                }
                next_due
            }
        };
        now = at.max(now);
        clock.set(now);
        passes += 1;

        // 1. Submit.
        let mut submitted = 0;
        fresh.clear();
        while let Some(p) = planned.get(next).filter(|p| p.submit_ms <= now) {
            let route = setup.route(&p.tier, &p.team, p.job.scheduling_priority);
            let cmd = SubmitJob {
                job_name: training_name(&p.job.id),
                job_queue: route.queue,
                service_job_type: Default::default(),
                service_request_payload: payload(p.job, scenario),
                share_identifier: route.share_identifier,
                quota_share_name: route.quota_share_name,
                scheduling_priority: route.scheduling_priority,
                retry_strategy: retry.clone(),
                timeout_config: None,
                preemption_configuration: None,
                tags: [(TEAM_TAG.to_owned(), p.team.clone())].into(),
                client_token: None,
            };
            let share = cmd
                .quota_share_name
                .as_deref()
                .or(cmd.share_identifier.as_deref());
            let line = (cmd.job_queue.as_str().into(), share.map(SharedStr::from));
            let priority = cmd.scheduling_priority.unwrap_or(0);
            let max_runtime_s = requested_runtime_s(p.job.duration_s);
            // What submitting sets: the queue's line offset for this runtime.
            let line_offset_ms = setup
                .queues
                .iter()
                .find(|q| q.job_queue_name == cmd.job_queue)
                .map_or(0, |q| q.line_rules().line_offset_ms(Some(max_runtime_s)));
            let submitted_job =
                ready(service.submit(cmd))?.map_err(app(&format!("submitting {}", p.job.id)))?;
            if let Some(tracker) = tracker.as_mut() {
                let ty = p
                    .job
                    .instance_type
                    .as_deref()
                    .unwrap_or(&scenario.instance_type);
                let arrival = Arrival {
                    at_ms: now,
                    priority,
                    instances: BTreeMap::from([(ty.to_owned(), p.job.instances)]).into(),
                    max_runtime_s: Some(max_runtime_s),
                    line_offset_ms,
                };
                tracker.submitted(submitted_job.job_id.as_str().into(), line, arrival);
            }
            fresh.push(Fresh {
                team: p.team.clone(),
                priority,
                instances: u64::from(p.job.instances),
            });
            ids.push(submitted_job.job_id);
            next += 1;
            submitted += 1;
        }

        // 2. One pass: accept what was just submitted, deliver the state changes due now,
        // the due work when its interval is up, and a cycle when it can change something.
        let changes: Vec<TrainingJobState> = backend.shared().with(|model, now| {
            model
                .take_events(now)
                .iter()
                .map(|change| change.state())
                .collect()
        });
        let due_now = now >= next_due;
        let timed = next_backoff == Some(now) || change_at == Some(now);
        if submitted > 0 || timed {
            dirty = true;
        }
        let lent_open = !lent_waits.open.is_empty();
        // Whether the gate found that no cycle could do anything.
        let idle = AtomicBool::new(false);
        let gate = |so_far: &PassReport| {
            let changed = so_far.due.is_some()
                || so_far.applied.iter().any(|outcome| {
                    matches!(
                        outcome,
                        StateOutcome::Applied(
                            JobStatus::Succeeded | JobStatus::Failed | JobStatus::Runnable
                        )
                    )
                });
            if !(dirty || changed) {
                return false;
            }
            if store.runnable_count() == 0 {
                idle.store(true, Ordering::Relaxed);
                return false;
            }
            let free = capacity.saturating_sub(store.held_instances());
            if cycles_when == Cycles::WhenAnythingChanged {
                return free > 0 || policy.preempts();
            }
            match policy {
                Policy::StaticPartition => {
                    free > 0 && teams.lock().lines.slice_has_room(&setup.slices)
                }
                Policy::QuotaShares => {
                    if let Some(first) = so_far.cycles.last() {
                        return second_cycle_may_act(first);
                    }
                    let lines = &teams.lock().lines;
                    let only_submitted = so_far.cycles.is_empty() && !changed && !timed;
                    if settled && only_submitted {
                        return lines.quota_fresh_may_act(
                            &fresh,
                            &setup.slices,
                            free,
                            in_share,
                            now,
                        );
                    }
                    // An owner's wait for lent capacity is followed cycle by cycle
                    // (`LentWaits`).
                    let acts = lent_open
                        || so_far.cycles.iter().any(owes_lent)
                        || lines.quota_may_act(&setup.slices, free, in_share.from);
                    idle.store(!acts, Ordering::Relaxed);
                    acts
                }
                Policy::Fifo | Policy::BatchFairShare | Policy::Trainyard => free > 0,
            }
        };
        let input = PassInput {
            accept: (submitted > 0).then_some(Accept {
                batch: submitted,
                max_batches: 1,
                min_age_ms: 0,
            }),
            accept_named: &[],
            changes: &changes,
            due_work: due_now.then_some(DueWork::all(quiet_ms)),
            // Borrowers start a cycle after the entitled jobs of the cycle before (the hosts'
            // passes cycle again at once after one that dispatched); only quota-shares borrows.
            max_cycles: if policy == Policy::QuotaShares { 2 } else { 1 },
            cycle_gate: Some(&gate),
            deadline_ms: None,
            fence: None,
        };
        let pass = ready(service.pass(&backend, &config, input))?;
        if let Some(failed) = pass.errors.into_iter().next() {
            return Err(app(&failed.step.to_string())(failed.error));
        }
        done += pass
            .applied
            .iter()
            .filter(|o| {
                matches!(
                    o,
                    StateOutcome::Applied(JobStatus::Succeeded | JobStatus::Failed)
                )
            })
            .count();
        if due_now {
            if pass.due.is_some_and(|due| due != Default::default()) {
                idle_due_passes = 0;
            }
            next_due = now + due_interval_ms;
        }
        cycles += pass.cycles.len() as u64;
        settled = match pass.cycles.last() {
            Some(last) => {
                next_change = last.next_change_ms;
                did_nothing(last)
            }
            None => settled || idle.load(Ordering::Relaxed),
        };
        for cycle in &pass.cycles {
            dispatching_cycles += u64::from(cycle.dispatched > 0);
            done += cycle.rejected;
            reclaims += cycle.reclaims as u64;
            reclaimed_for.extend(cycle.reclaimed_for.iter().map(|id| id.to_string()));
            lent_waits.observe(cycle, now, |id| {
                ready(store.get_job(id))
                    .ok()
                    .and_then(Result::ok)
                    .flatten()
                    .is_some_and(|job| job.value.status.is_dispatched())
            });
            if cycle.dispatched > 0 {
                idle_due_passes = 0;
            }
        }
        dirty = false;

        // 3. Record (and estimate start times, when asked to).
        recorder.observe(now, store, &teams);
        if let Some(tracker) = tracker.as_mut().filter(|t| t.due(now)) {
            let snapshot = ready(service.forecast_snapshot(&config, tracker.per_line()))?
                .map_err(app("reading a forecast's snapshot"))?;
            let mut job = |id: &str| Some(ready(store.get_job(id)).ok()?.ok()??.value);
            tracker.forecast(now, &snapshot, &config.planner, &mut job);
        }
        if passes.is_multiple_of(PROGRESS_EVERY) {
            progress(&Progress {
                policy: policy.name(),
                now_s: seconds(now),
                last_submit_s,
                jobs_done: done,
                jobs_total: planned.len(),
            });
        }
    }

    let (usage, shares) = recorder.finish(now);
    for (i, p, reason) in never {
        records[i] = Some(JobRecord {
            never_runs: Some(reason),
            ..never_started(&p)
        });
    }
    let eta = tracker.map(Tracker::finish);
    // Each job's estimate at submission, to be written beside its realised start.
    let at_submission: BTreeMap<&str, [Option<f64>; 2]> = eta
        .iter()
        .flat_map(|eta| &eta.predictions)
        .filter(|p| p.at_submission)
        .map(|p| (p.job_id.as_str(), p.published_s))
        .collect();
    let mut replayed = planned.iter().zip(&ids);
    for slot in records.iter_mut().filter(|r| r.is_none()) {
        let Some((p, id)) = replayed.next() else {
            break;
        };
        if let Some(stored) = ready(store.get_job(id))?? {
            let [eta_p50_s, eta_p90_s] =
                at_submission.get(id.as_str()).copied().unwrap_or_default();
            let progress = |name: &str| {
                backend
                    .shared()
                    .with(|model, _| model.checkpoint_progress(name))
            };
            let lent_wait_s = lent_waits
                .completed
                .get(id.as_str())
                .map(|ms| *ms as f64 / 1_000.0);
            *slot = Some(JobRecord {
                eta_p50_s,
                eta_p90_s,
                reclaimed: reclaimed_for.contains(id.as_str()),
                lent_wait_s,
                ..job_record(p, &stored.value, &progress)
            });
        }
    }
    let jobs = records.into_iter().flatten().collect();
    Ok(RunRecord {
        policy: policy.name().into(),
        jobs,
        usage,
        shares,
        end_s: seconds(now),
        reclaims,
        eta,
        work: ReplayWork {
            passes,
            cycles,
            dispatching_cycles,
        },
    })
}

/// A job as submitted, before anything happened to it (a job never submitted stays so).
fn never_started(p: &Planned<'_>) -> JobRecord {
    JobRecord {
        trace_id: p.job.id.clone(),
        queue: p.tier.clone(),
        share: Some(p.team.clone()),
        instances: p.job.instances,
        submit_s: seconds(p.submit_ms),
        first_start_s: None,
        end_s: None,
        duration_s: p.job.duration_s,
        status: JobStatus::Runnable.to_string(),
        attempts: 0,
        preemptions: 0,
        preempted_instance_s: 0.0,
        never_runs: None,
        reclaimed: false,
        lent_wait_s: None,
        eta_p50_s: None,
        eta_p90_s: None,
    }
}

/// `job`'s record; `progress` gives a training job's checkpoint progress
/// ([`trainyard_emulator::model::Emulator::checkpoint_progress`]).
fn job_record(
    p: &Planned<'_>,
    job: &ServiceJob,
    progress: &dyn Fn(&str) -> Option<CheckpointProgress>,
) -> JobRecord {
    let instances = f64::from(p.job.instances);
    // What each preempted attempt held its instances for, less the training its checkpoints
    // kept for the next attempt.
    let preempted_instance_s = job
        .attempts
        .iter()
        .filter(|a| a.failed_as == Some(trainyard_domain::job::Requeue::Preemption))
        .filter_map(|a| {
            let held_ms = a.stopped_at? - a.started_at?;
            let kept_ms = progress(&a.training_job_name).map_or(0, |p| p.kept_ms());
            Some((held_ms - kept_ms).max(0) as f64 / 1_000.0 * instances)
        })
        // From +0.0: `sum` of no floats is -0.0, which reports print as "-0.0".
        .fold(0.0, |sum, lost| sum + lost);
    JobRecord {
        first_start_s: job.attempts.first().and_then(|a| a.started_at).map(seconds),
        end_s: job
            .status
            .is_terminal()
            .then_some(job.stopped_at)
            .flatten()
            .map(seconds),
        status: job.status.to_string(),
        attempts: job.attempts.len() as u32,
        preemptions: job.preemptions(),
        preempted_instance_s,
        ..never_started(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// The request a replayed job is submitted with, field by field as SageMaker names them.
    #[test]
    fn a_replayed_job_asks_for_its_instances_runtime_class_and_checkpoints() {
        let mut scenario = Scenario::load("fleet").unwrap();
        let job = TraceJob {
            id: "philly-7".into(),
            submit_s: 0.0,
            duration_s: 5400.5,
            instances: 4,
            instance_type: None,
            queue: None,
            share: None,
            scheduling_priority: None,
        };
        let request =
            |scenario: &Scenario| serde_json::from_str::<Value>(&payload(&job, scenario)).unwrap();
        let expected = json!({
            "TrainingJobName": "philly-7",
            "RoleArn": "arn:aws:iam::000000000000:role/TrainyardSimulator",
            "AlgorithmSpecification": {"TrainingImage": "simulated:1", "TrainingInputMode": "File"},
            "HyperParameters": {"emulator_duration_s": "5400.5"},
            "OutputDataConfig": {"S3OutputPath": "s3://simulated/out"},
            "ResourceConfig": {
                "InstanceType": scenario.instance_type,
                "InstanceCount": 4,
                "VolumeSizeInGB": 1
            },
            "StoppingCondition": {"MaxRuntimeInSeconds": 14_400}
        });
        scenario.checkpoint_interval_s = 0.0;
        assert_eq!(request(&scenario), expected);

        scenario.checkpoint_interval_s = 1800.0;
        scenario.checkpoint_fraction = 1.0;
        scenario.checkpoint_on_stop = true;
        let mut expected = expected;
        expected["HyperParameters"]["emulator_checkpoint_interval_s"] = json!("1800");
        expected["HyperParameters"]["emulator_checkpoint_on_stop"] = json!("true");
        expected["CheckpointConfig"] = json!({"S3Uri": "s3://simulated/checkpoints/philly-7"});
        assert_eq!(request(&scenario), expected);
    }
}
