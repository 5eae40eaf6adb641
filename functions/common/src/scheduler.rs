//! The `scheduler` function's handler: EventBridge's `Job Submitted` and `Capacity Released`
//! (source `trainyard`) and the schedule (`{"trigger":"schedule"}`) each run one pass:
//!
//! 1. **Lease.** Take the `scheduler` lease (a fencing token; see
//!    `trainyard_app::service::lease`). If another invocation holds it, poll for a bounded
//!    time (well inside the function timeout) instead of dropping the trigger: the holder may
//!    have taken its snapshot before this trigger's job existed. If it is still held after
//!    that, the invocation ends without work; the holder's repeat cycles and the next schedule
//!    tick cover it.
//! 2. **Pass** (`Service::pass`, the same pass every host runs; state changes are the
//!    `training-events` function's, stops and reconciliation the `retry` function's): accept
//!    SUBMITTED jobs into their queues (the job a `Job Submitted` event names first, read by
//!    id: the index of submitted jobs may not list it yet), at most [`ACCEPT_BATCH`] ×
//!    [`MAX_ACCEPT_BATCHES`]; on the schedule, launch again the attempts whose launch did not
//!    get through (only this function may create training jobs), once [`LAUNCH_GRACE_MS`]
//!    past their dispatch; then cycle, again while the
//!    last one dispatched (capacity may remain for jobs a conflict or a per-cycle bound left
//!    waiting), at most [`MAX_CYCLES`] times. A failed step does not stop the next; the first
//!    failure is the invocation's error. No step starts within [`STEP_MARGIN`] of the
//!    invocation's deadline.
//! 3. **Release** the lease, whatever happened in 2.
//!
//! The lease only saves duelling work: two passes at once are still correct, because each
//! dispatch commits with version checks on the job and the environment's usage.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use tokio::time::Instant;
use trainyard_app::ports::{ConfigStore, EventSink, Fence, SchedulingStore, TrainingBackend};
pub use trainyard_app::ports::{ForecastMemory, MemoryFuture};
use trainyard_app::service::estimates::{
    EstimateReport, KeptForecaster, QueueEstimates, ROUND_BUDGET, host_forecaster,
};
use trainyard_app::service::lease::Lease;
use trainyard_app::service::scheduling::{Accept, CycleConfig, DueWork, PassInput};
pub use trainyard_app::service::scheduling::{DecisionLog, NoDecisions};
use trainyard_app::{AppError, Service};

use crate::error::FunctionError;
use crate::runtime::{by_deadline, step_end};

/// The lease's name in the store.
pub const LEASE_NAME: &str = "scheduler";
/// How long a taken lease lasts: longer than the function's 60 s timeout, so a live pass never
/// loses it; a crashed holder blocks others for at most this long.
pub const LEASE_TTL_MS: i64 = 70_000;
/// The longest an invocation waits for a held lease (the function times out at 60 s).
pub const LEASE_WAIT: Duration = Duration::from_secs(15);
/// Time an invocation keeps for its own pass: the lease wait ends this long before the
/// invocation's deadline at the latest.
pub const PASS_RESERVE: Duration = Duration::from_secs(30);
/// Time between attempts to take a held lease.
pub const LEASE_POLL: Duration = Duration::from_millis(500);
/// Jobs per `accept_submitted` call.
pub const ACCEPT_BATCH: usize = 100;
/// Most `accept_submitted` calls per invocation (bounds one pass at 5,000 jobs accepted).
pub const MAX_ACCEPT_BATCHES: usize = 50;
/// Most cycles per invocation.
pub const MAX_CYCLES: usize = 5;
pub use crate::runtime::STEP_MARGIN;
/// How long after its dispatch an attempt without a recorded launch is left to the pass that
/// dispatched it: longer than a scheduler invocation can run (its 60 s timeout), so that pass
/// has finished or died before the next relaunches the attempt or the retry function ends it.
pub const LAUNCH_GRACE_MS: i64 = 120_000;
/// The `detail-type`s of Trainyard's internal events that trigger a pass.
pub const TRIGGER_DETAIL_TYPES: [&str; 2] = ["Job Submitted", "Capacity Released"];
/// The `source` of Trainyard's own events.
pub const TRAINYARD_SOURCE: &str = "trainyard";

/// What woke the scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Trigger {
    /// A job was submitted.
    JobSubmitted,
    /// A job gave its instances back.
    CapacityReleased,
    /// The periodic schedule (bounds the delay of any lost event).
    Schedule,
}

/// Reads a trigger: `{"trigger":"schedule"}`, EventBridge's own `Scheduled Event`, or one of
/// Trainyard's internal events; anything else is described in the error.
pub fn parse_trigger(event: &Value) -> Result<Trigger, String> {
    if event.get("trigger").and_then(Value::as_str) == Some("schedule") {
        return Ok(Trigger::Schedule);
    }
    let text = |k: &str| event.get(k).and_then(Value::as_str);
    match (text("source"), text("detail-type")) {
        (Some("aws.events"), Some("Scheduled Event")) => Ok(Trigger::Schedule),
        (Some(TRAINYARD_SOURCE), Some("Job Submitted")) => Ok(Trigger::JobSubmitted),
        (Some(TRAINYARD_SOURCE), Some("Capacity Released")) => Ok(Trigger::CapacityReleased),
        (source, detail_type) => Err(format!(
            "not a scheduler trigger (source {source:?}, detail-type {detail_type:?}); expected \
             {{\"trigger\":\"schedule\"}} or source {TRAINYARD_SOURCE:?} with detail-type one of \
             {TRIGGER_DETAIL_TYPES:?}"
        )),
    }
}

/// The last instant (the service's clock, `now_ms` now) at which a step may start: the
/// invocation's `deadline` less [`STEP_MARGIN`].
pub fn step_deadline_ms(now_ms: i64, deadline: Instant) -> i64 {
    let left = step_end(deadline).saturating_duration_since(Instant::now());
    now_ms.saturating_add(i64::try_from(left.as_millis()).unwrap_or(i64::MAX))
}

/// The job a `Job Submitted` event names (`detail.jobId`): the pass accepts it by id, so that it
/// is planned even while the index of submitted jobs lags behind the submit.
pub fn submitted_job(event: &Value) -> Option<String> {
    let detail_type = event.get("detail-type").and_then(Value::as_str);
    if detail_type != Some("Job Submitted") {
        return None;
    }
    let id = event.pointer("/detail/jobId").and_then(Value::as_str)?;
    Some(id.to_owned())
}

/// How an invocation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PassOutcome {
    /// The pass ran.
    Ran,
    /// Another invocation held the lease for the whole wait.
    LeaseBusy,
    /// The event was not a trigger; acknowledged without work.
    Ignored,
}

/// What one invocation did (the function's response, and its log line).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PassReport {
    /// What woke it (absent when ignored).
    pub trigger: Option<Trigger>,
    /// How it ended.
    pub outcome: Option<PassOutcome>,
    /// The lease's fencing token, when taken.
    pub lease_token: Option<u64>,
    /// Jobs moved SUBMITTED → RUNNABLE.
    pub accepted: usize,
    /// Cycles run.
    pub cycles: usize,
    /// Jobs dispatched over all cycles.
    pub dispatched: usize,
    /// Attempts SageMaker accepted.
    pub launched: usize,
    /// Dispatches refused by a version check (another writer got there first).
    pub conflicts: usize,
    /// Launches refused for lack of capacity.
    pub capacity_errors: usize,
    /// Dispatches refused because the environment's stored usage had no room (the plan's view
    /// of capacity in use lagged).
    pub over_limit: usize,
    /// Whether a cycle stood aside for a pass holding a newer lease (this one had lapsed).
    pub fenced: bool,
    /// Attempts launched again because their first launch did not get through.
    pub relaunched: usize,
    /// Waiting jobs given a start-time estimate by this invocation's forecast round (schedule
    /// ticks only; absent when no round ran).
    pub estimated: Option<usize>,
    /// That round per queue, for its metrics (`trainyard_aws::metrics::estimate_lines`).
    #[serde(skip)]
    pub estimates: Vec<QueueEstimates>,
    /// Why the event was ignored.
    pub reason: Option<String>,
}

/// What a warm process keeps between its forecast rounds: its forecaster (and where what it
/// learns is kept), and how long the last round took.
struct Rounds {
    forecasts: KeptForecaster,
    last_took: Duration,
}

/// The scheduler's handler over any store, event sink and training backend. Its store ports are
/// [`ConfigStore`] (the configuration a cycle plans under) and [`SchedulingStore`] (accepting
/// submitted jobs, the lease, the cycle's indexes, documents and commits).
pub struct SchedulerFunction<
    S: ConfigStore + SchedulingStore,
    E: EventSink,
    B: TrainingBackend,
    L: DecisionLog = NoDecisions,
> {
    service: Arc<Service<S, E>>,
    backend: B,
    cycle: CycleConfig,
    /// This process's id: with the request id it names the lease holder.
    instance: String,
    lease_wait: Duration,
    /// Where each cycle's decision record goes.
    decisions: L,
    /// Forecast rounds on schedule ticks, when on.
    estimates: Option<tokio::sync::Mutex<Rounds>>,
}

impl<S: ConfigStore + SchedulingStore, E: EventSink, B: TrainingBackend>
    SchedulerFunction<S, E, B>
{
    /// A handler that waits up to [`LEASE_WAIT`] for a held lease and keeps no decision records.
    pub fn new(service: Arc<Service<S, E>>, backend: B, cycle: CycleConfig) -> Self {
        Self {
            service,
            backend,
            cycle,
            instance: uuid::Uuid::new_v4().to_string(),
            lease_wait: LEASE_WAIT,
            decisions: NoDecisions,
            estimates: None,
        }
    }

    /// The same handler, appending each cycle's decision record to `log` (after the cycle has
    /// acted: a record that cannot be kept is logged, and loses no decision).
    pub fn with_decisions<L: DecisionLog>(self, log: L) -> SchedulerFunction<S, E, B, L> {
        SchedulerFunction {
            service: self.service,
            backend: self.backend,
            cycle: CycleConfig {
                record_decisions: true,
                ..self.cycle
            },
            instance: self.instance,
            lease_wait: self.lease_wait,
            decisions: log,
            estimates: self.estimates,
        }
    }
}

impl<S: ConfigStore + SchedulingStore, E: EventSink, B: TrainingBackend, L: DecisionLog>
    SchedulerFunction<S, E, B, L>
{
    /// The same handler, running a forecast round on each schedule tick after its pass (see
    /// its `estimate` step). What the forecaster learns stays in this process, unless
    /// [`Self::with_forecast_memory`] keeps it.
    pub fn with_start_estimates(mut self) -> Self {
        self.estimates = Some(tokio::sync::Mutex::new(Rounds {
            forecasts: KeptForecaster::new(host_forecaster(ROUND_BUDGET)),
            last_took: Duration::ZERO,
        }));
        self
    }

    /// The same, keeping what the forecaster learns in `memory`: the first round of a process
    /// starts from what was kept, and each round that learnt something new keeps it (both
    /// bounded by the invocation's deadline, like the round). Without start estimates on, it
    /// does nothing.
    pub fn with_forecast_memory(mut self, memory: impl ForecastMemory + 'static) -> Self {
        if let Some(rounds) = self.estimates.as_mut() {
            rounds.get_mut().forecasts.keep_in(memory);
        }
        self
    }

    /// The same with another bound on the lease wait.
    pub fn with_lease_wait(mut self, wait: Duration) -> Self {
        self.lease_wait = wait;
        self
    }

    /// The service (for hosts and tests).
    pub fn service(&self) -> &Arc<Service<S, E>> {
        &self.service
    }

    /// Handles one event. `request_id` names this invocation in the lease; `deadline` (the
    /// invocation's) shortens the lease wait when less time is left.
    pub async fn handle(
        &self,
        event: &Value,
        request_id: &str,
        deadline: Option<Instant>,
    ) -> Result<PassReport, FunctionError> {
        let trigger = match parse_trigger(event) {
            Ok(trigger) => trigger,
            Err(reason) => {
                tracing::warn!(%reason, "ignored an event that is not a scheduler trigger");
                return Ok(PassReport {
                    outcome: Some(PassOutcome::Ignored),
                    reason: Some(reason),
                    ..PassReport::default()
                });
            }
        };
        let mut report = PassReport {
            trigger: Some(trigger),
            ..PassReport::default()
        };
        let holder = format!("{}/{request_id}", self.instance);
        let Some(lease) = self.take_lease(&holder, deadline).await? else {
            tracing::warn!(
                ?trigger,
                wait_ms = u64::try_from(self.lease_wait.as_millis()).unwrap_or(u64::MAX),
                "the scheduler lease stayed held; its holder and the next tick cover this trigger"
            );
            report.outcome = Some(PassOutcome::LeaseBusy);
            return Ok(report);
        };
        report.lease_token = Some(lease.token);
        let named: Vec<String> = submitted_job(event).into_iter().collect();
        let worked = self
            .pass(trigger, &named, &lease, &mut report, deadline)
            .await;
        // Give the lease back whether or not the pass failed; a failed release only delays
        // the next pass until the lease expires.
        if let Err(error) = self.service.release_lease(&lease).await {
            tracing::warn!(%error, token = lease.token, "releasing the scheduler lease failed");
        }
        worked?;
        if trigger == Trigger::Schedule
            && let Some(round) = self.estimate(deadline).await
        {
            report.estimated = Some(round.jobs);
            report.estimates = round.per_queue;
        }
        report.outcome = Some(PassOutcome::Ran);
        tracing::info!(
            ?trigger,
            lease_token = lease.token,
            accepted = report.accepted,
            cycles = report.cycles,
            dispatched = report.dispatched,
            launched = report.launched,
            conflicts = report.conflicts,
            capacity_errors = report.capacity_errors,
            over_limit = report.over_limit,
            relaunched = report.relaunched,
            "scheduler pass"
        );
        Ok(report)
    }

    /// Takes the lease, polling while another holder has it, until the wait (or the
    /// invocation's time, less a margin for the pass itself) runs out.
    async fn take_lease(
        &self,
        holder: &str,
        deadline: Option<Instant>,
    ) -> Result<Option<Lease>, AppError> {
        let mut give_up = Instant::now() + self.lease_wait;
        if let Some(deadline) = deadline {
            give_up = give_up.min(deadline.checked_sub(PASS_RESERVE).unwrap_or(deadline));
        }
        loop {
            if let Some(lease) = self
                .service
                .acquire_lease(LEASE_NAME, holder, LEASE_TTL_MS)
                .await?
            {
                return Ok(Some(lease));
            }
            if Instant::now() + LEASE_POLL > give_up {
                return Ok(None);
            }
            tokio::time::sleep(LEASE_POLL).await;
        }
    }

    /// One forecast round (`Service::estimate_start_times`): every waiting job's start-time
    /// estimate, from what this process's forecaster has learnt. It starts only when the time
    /// left before `deadline` exceeds [`STEP_MARGIN`] plus three times the last round's (a
    /// round's CPU grows with the backlog and cannot be cut short); otherwise the next tick
    /// tries again. Returns what the round did.
    async fn estimate(&self, deadline: Option<Instant>) -> Option<EstimateReport> {
        let mut rounds = self.estimates.as_ref()?.try_lock().ok()?;
        if let Some(deadline) = deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            if left < STEP_MARGIN + rounds.last_took * 3 {
                tracing::info!(
                    left_ms = u64::try_from(left.as_millis()).unwrap_or(u64::MAX),
                    last_round_ms = u64::try_from(rounds.last_took.as_millis()).unwrap_or(u64::MAX),
                    "no forecast round: too little time left in this invocation"
                );
                return None;
            }
        }
        let started = Instant::now();
        let by = deadline.map(step_end);
        restore(&mut rounds.forecasts, by).await;
        let result = self
            .service
            .estimate_start_times(rounds.forecasts.forecaster_mut(), &self.cycle)
            .await;
        rounds.last_took = started.elapsed();
        if result.is_ok() {
            keep(&mut rounds.forecasts, by).await;
        }
        match result {
            Ok(round) => {
                tracing::info!(
                    jobs = round.jobs,
                    resolved = round.resolved,
                    moved = round.moved,
                    took_ms = u64::try_from(rounds.last_took.as_millis()).unwrap_or(u64::MAX),
                    "start times estimated"
                );
                Some(round)
            }
            Err(error) => {
                tracing::warn!(%error, "estimating start times failed; the next tick tries again");
                None
            }
        }
    }

    /// Appends the decision records of `pass`'s cycles, each by [`STEP_MARGIN`] before
    /// `deadline`: one that would run past it is dropped and logged, so keeping records never
    /// costs the invocation its deadline (nor a decision: the cycles have acted already).
    async fn keep_decisions(
        &self,
        pass: &mut trainyard_app::service::scheduling::PassReport,
        trigger: Trigger,
        deadline: Option<Instant>,
    ) {
        let by = deadline.map(step_end);
        for cycle in &mut pass.cycles {
            let Some(mut record) = cycle.decision.take() else {
                continue;
            };
            record.trigger = format!("{trigger:?} ({})", record.trigger);
            match by_deadline(by, self.decisions.append_decision(&record)).await {
                Some(Ok(())) => {}
                Some(Err(error)) => {
                    tracing::warn!(%error, cycle = %record.id, "decision record not kept");
                }
                None => {
                    tracing::warn!(cycle = %record.id, "decision record not kept: the invocation's deadline is near");
                }
            }
        }
    }

    /// Runs the pass (accept, relaunches on the schedule, then cycles) and adds what it did to
    /// `report`; the first failed step is the invocation's error. No step starts within
    /// [`STEP_MARGIN`] of `deadline`.
    async fn pass(
        &self,
        trigger: Trigger,
        named: &[String],
        lease: &Lease,
        report: &mut PassReport,
        deadline: Option<Instant>,
    ) -> Result<(), AppError> {
        let deadline_ms = deadline.map(|d| step_deadline_ms(self.service.now_ms(), d));
        let input = PassInput {
            accept: Some(Accept {
                batch: ACCEPT_BATCH,
                max_batches: MAX_ACCEPT_BATCHES,
                min_age_ms: 0,
            }),
            accept_named: named,
            due_work: (trigger == Trigger::Schedule).then_some(DueWork {
                relaunch: true,
                stops: false,
                reconcile_quiet_ms: None,
                reconcile_since_ms: None,
                launch_grace_ms: LAUNCH_GRACE_MS,
                deadline_ms: None,
            }),
            max_cycles: MAX_CYCLES,
            deadline_ms,
            fence: Some(Fence {
                token: lease.token,
                until_ms: lease.expires_at_ms,
            }),
            ..PassInput::default()
        };
        let mut pass = self.service.pass(&self.backend, &self.cycle, input).await;
        self.keep_decisions(&mut pass, trigger, deadline).await;
        let cycles = pass.cycle_totals();
        report.accepted += pass.accepted;
        report.cycles += pass.cycles.len();
        report.dispatched += cycles.dispatched;
        report.launched += cycles.launched;
        report.conflicts += cycles.conflicts;
        report.capacity_errors += cycles.capacity_errors;
        report.over_limit += cycles.over_limit;
        report.fenced = report.fenced || cycles.fenced;
        report.relaunched += pass.due.map_or(0, |due| due.relaunched);
        if pass.out_of_time {
            tracing::warn!(
                "the invocation's deadline cut the pass short; the next trigger goes on"
            );
        }
        let mut errors = pass.errors.into_iter();
        let first = errors.next();
        for later in errors {
            tracing::warn!(step = %later.step, error = %later.error, "a later step failed too");
        }
        match first {
            Some(failed) => {
                tracing::warn!(step = %failed.step, error = %failed.error, "a pass step failed");
                Err(failed.error)
            }
            None => Ok(()),
        }
    }
}

/// A process's first round starts from what its forecast memory kept, if it has one; a read
/// that fails (or runs out of time) is tried again at the next round.
async fn restore(forecasts: &mut KeptForecaster, by: Option<Instant>) {
    match by_deadline(by, forecasts.restore()).await {
        Some(Ok(())) => {}
        Some(Err(error)) => {
            tracing::warn!(%error, "what the forecaster learnt could not be read; the next round tries again");
        }
        None => tracing::warn!(
            "what the forecaster learnt was not read: the invocation's deadline is near"
        ),
    }
}

/// Keeps what the forecaster learnt, when it learnt something since it last kept it.
async fn keep(forecasts: &mut KeptForecaster, by: Option<Instant>) {
    match by_deadline(by, forecasts.keep()).await {
        Some(Ok(_)) => {}
        Some(Err(error)) => tracing::warn!(%error, "what the forecaster learnt was not kept"),
        None => tracing::warn!(
            "what the forecaster learnt was not kept: the invocation's deadline is near"
        ),
    }
}
