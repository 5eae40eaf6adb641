//! Local mode's event sink and the loops that react to it.
//!
//! In AWS, events travel over EventBridge and wake Lambda functions; locally they stay in the
//! process. [`LocalEvents`] is the sink the service publishes to: it wakes the loop through a
//! [`Notify`] (which remembers one wake-up if the loop is busy, so a burst of events costs one
//! extra pass, not one pass per event) and fans events out on a [`broadcast`] channel for
//! observers such as metrics and `trainyard events`.
//!
//! [`run_scheduling`] is the scheduling loop `trainyard up` runs: accept SUBMITTED jobs, apply
//! SageMaker's state changes, run the due work and a cycle, on every wake-up (an event, a state
//! change, a submit that has settled) and every interval. [`run`] is the intake-only loop
//! (accept SUBMITTED jobs, nothing else) for hosts without a training backend.
//! Errors are logged and the loops keep going; they return only when their shutdown future
//! resolves. Jobs left SUBMITTED by a previous run are taken by [`accept_backlog`], which a host
//! calls before it takes requests, so that the backlog pass cannot catch a job submitted a
//! moment ago.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, broadcast, mpsc};
use trainyard_app::ports::{Event, EventSink, Store, TrainingBackend, TrainingJobState};
use trainyard_app::service::estimates::KeptForecaster;
use trainyard_app::service::scheduling::{
    Accept, CycleConfig, DecisionLog, DueReport, DueWork, NoDecisions, PassInput, PassReport,
    StateOutcome, accept_in_batches,
};
use trainyard_app::{AppError, Service};
use trainyard_emulator::model::StateChange;

use crate::metrics::Metrics;

/// How many events a slow observer may fall behind before it starts missing some. Observers are
/// informational (the loop itself is woken by [`Notify`]), so lagging costs nothing but output.
pub const EVENT_BUFFER: usize = 1024;

/// How many jobs one `accept_submitted` call may move. Bounded so that one pass holds the store
/// briefly and shutdown is noticed between passes even under a flood of submissions.
pub const ACCEPT_BATCH: usize = 100;

/// How long the loop waits after being woken by an event before acting on it. Clients such as
/// the SageMaker SDK describe a job right after submitting it and expect it still SUBMITTED, as
/// on AWS Batch; this pause keeps the freshly submitted job in SUBMITTED for that round trip.
pub const SETTLE: Duration = Duration::from_millis(250);

/// The default interval between passes when no event arrives.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);

/// The in-process event sink. Cheap to clone: clones share the same channel and wake-up.
#[derive(Debug, Clone)]
pub struct LocalEvents {
    wake: Arc<Notify>,
    feed: broadcast::Sender<Event>,
}

impl Default for LocalEvents {
    fn default() -> Self {
        Self::new()
    }
}

impl LocalEvents {
    /// A sink with no observers yet.
    pub fn new() -> Self {
        let (feed, _) = broadcast::channel(EVENT_BUFFER);
        Self {
            wake: Arc::new(Notify::new()),
            feed,
        }
    }

    /// Observes every event published from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.feed.subscribe()
    }

    /// Resolves at the next publish, or at once if an event arrived since the last wake-up.
    pub async fn woken(&self) {
        self.wake.notified().await;
    }
}

impl EventSink for LocalEvents {
    async fn publish(&self, event: Event) {
        tracing::debug!(?event, "event published");
        // No observers is normal (nobody is following), not an error.
        let _ = self.feed.send(event);
        self.wake.notify_one();
    }
}

/// What the loop drives: the step that accepts SUBMITTED jobs into their queues. A trait so
/// that the loop can be tested against a counting fake as well as the real [`Service`].
pub trait Intake: Send + Sync + 'static {
    /// Moves at most `limit` SUBMITTED jobs that are at least `min_age_ms` old to RUNNABLE;
    /// returns how many moved.
    fn accept_submitted(
        &self,
        limit: usize,
        min_age_ms: i64,
    ) -> impl Future<Output = Result<usize, AppError>> + Send;
}

impl<S: Store, E: EventSink> Intake for Service<S, E> {
    fn accept_submitted(
        &self,
        limit: usize,
        min_age_ms: i64,
    ) -> impl Future<Output = Result<usize, AppError>> + Send {
        Service::accept_submitted(self, limit, min_age_ms)
    }
}

/// Why the loop woke up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wake {
    Event,
    Tick,
}

/// The loop's timing and batch size; [`LoopConfig::new`] gives the defaults for an interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopConfig {
    /// Time between passes when no event arrives (at least 1 ms, so the loop cannot spin).
    pub interval: Duration,
    /// Pause between an event's wake-up and the pass it triggers (see [`SETTLE`]).
    pub settle: Duration,
    /// Jobs per `accept_submitted` call, at least 1 (see [`ACCEPT_BATCH`]).
    pub batch: usize,
}

impl LoopConfig {
    /// The defaults ([`SETTLE`], [`ACCEPT_BATCH`]) with the given interval.
    pub fn new(interval: Duration) -> Self {
        Self {
            interval,
            settle: SETTLE,
            batch: ACCEPT_BATCH,
        }
    }
}

/// Runs the local loop with the default settle pause and batch size until `shutdown` resolves.
pub async fn run<I: Intake>(
    intake: Arc<I>,
    events: LocalEvents,
    interval: Duration,
    shutdown: impl Future<Output = ()>,
) {
    run_with(intake, events, LoopConfig::new(interval), shutdown).await;
}

/// Runs the local loop until `shutdown` resolves.
///
/// Each pass calls [`Intake::accept_submitted`] with `config.batch` until it moves fewer jobs
/// than that, so a backlog drains in one wake-up. A pass triggered by an event first waits
/// `config.settle`. Errors are logged and retried at the next wake-up.
pub async fn run_with<I: Intake>(
    intake: Arc<I>,
    events: LocalEvents,
    config: LoopConfig,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let interval = config.interval.max(Duration::from_millis(1));
    let batch = config.batch.max(1);
    // Jobs younger than the settle pause stay SUBMITTED even when a tick's pass runs while they
    // are being inserted: a client describing its job right after submit sees SUBMITTED.
    let settle_ms = i64::try_from(config.settle.as_millis()).unwrap_or(i64::MAX);
    tracing::info!(
        interval_ms = u64::try_from(interval.as_millis()).unwrap_or(u64::MAX),
        settle_ms,
        "local loop started"
    );
    loop {
        let wake = tokio::select! {
            // Biased: when an event and the tick are both due, the event's settle pause applies.
            biased;
            () = &mut shutdown => break,
            () = events.woken() => Wake::Event,
            () = tokio::time::sleep(interval) => Wake::Tick,
        };
        if wake == Wake::Event {
            tokio::select! {
                () = &mut shutdown => break,
                () = tokio::time::sleep(config.settle) => {}
            }
        }
        tokio::select! {
            () = &mut shutdown => break,
            _ = drain(intake.as_ref(), batch, settle_ms) => {}
        }
    }
    tracing::info!("local loop stopped");
}

/// Accepts every job still SUBMITTED (for example from before a restart), in batches of
/// [`ACCEPT_BATCH`]; returns how many moved. Call it before taking requests.
pub async fn accept_backlog<I: Intake>(intake: &I) -> usize {
    drain(intake, ACCEPT_BATCH, 0).await
}

/// Accepts SUBMITTED jobs until a batch comes back short or fails; returns how many moved.
async fn drain<I: Intake>(intake: &I, batch: usize, min_age_ms: i64) -> usize {
    let (moved, error) = accept_in_batches(
        Accept::all(batch, min_age_ms),
        || false,
        |limit, min_age| intake.accept_submitted(limit, min_age),
    )
    .await;
    log_accepted(moved);
    if let Some(error) = error {
        tracing::warn!(%error, "accepting submitted jobs failed; retrying at the next wake-up");
    }
    moved
}

fn log_accepted(moved: usize) {
    if moved > 0 {
        tracing::info!(jobs = moved, "accepted submitted jobs");
    }
}

/// What the scheduling loop drives: one pass (`Service::pass`) over the jobs accepted, the
/// state changes it was woken with, the due work and a cycle. A trait so that the loop can be
/// measured or tested with a wrapper around the real [`PassRunner`].
pub trait Scheduling: Intake {
    /// Runs one pass: accepts as `accept` says, applies `changes` in order, runs the due work
    /// and one cycle.
    fn pass(
        &self,
        accept: Accept,
        changes: &[TrainingJobState],
    ) -> impl Future<Output = PassReport> + Send;
}

/// Runs `Service::pass` for the loop: the service, a training backend, the loop's settings, and
/// where each cycle's decision record goes (nowhere, unless [`PassRunner::keeping_decisions`]).
pub struct PassRunner<S: Store, E: EventSink, B: TrainingBackend, L: DecisionLog = NoDecisions> {
    service: Arc<Service<S, E>>,
    backend: B,
    cycle: CycleConfig,
    quiet_ms: i64,
    decisions: L,
}

impl<S: Store, E: EventSink, B: TrainingBackend> PassRunner<S, E, B> {
    /// Schedules `service`'s jobs on `backend`. `quiet_ms`: how long an attempt may go without
    /// an event before the due-work pass describes it (see `Service::run_due_work`).
    pub fn new(service: Arc<Service<S, E>>, backend: B, cycle: CycleConfig, quiet_ms: i64) -> Self {
        Self {
            service,
            backend,
            cycle,
            quiet_ms,
            decisions: NoDecisions,
        }
    }

    /// The same runner, appending each cycle's decision record to `log`.
    pub fn keeping_decisions<L: DecisionLog>(self, log: L) -> PassRunner<S, E, B, L> {
        PassRunner {
            service: self.service,
            backend: self.backend,
            cycle: CycleConfig {
                record_decisions: true,
                ..self.cycle
            },
            quiet_ms: self.quiet_ms,
            decisions: log,
        }
    }
}

impl<S: Store, E: EventSink, B: TrainingBackend, L: DecisionLog> Intake for PassRunner<S, E, B, L> {
    fn accept_submitted(
        &self,
        limit: usize,
        min_age_ms: i64,
    ) -> impl Future<Output = Result<usize, AppError>> + Send {
        self.service.accept_submitted(limit, min_age_ms)
    }
}

impl<S: Store, E: EventSink, B: TrainingBackend, L: DecisionLog> Scheduling
    for PassRunner<S, E, B, L>
{
    async fn pass(&self, accept: Accept, changes: &[TrainingJobState]) -> PassReport {
        let input = PassInput {
            accept: Some(accept),
            changes,
            due_work: Some(DueWork::all(self.quiet_ms)),
            max_cycles: 1,
            ..PassInput::default()
        };
        let mut report = self.service.pass(&self.backend, &self.cycle, input).await;
        for cycle in &mut report.cycles {
            let Some(record) = cycle.decision.take() else {
                continue;
            };
            // A record that cannot be kept loses no decision: the cycle acted on it already.
            if let Err(error) = self.decisions.append_decision(&record).await {
                tracing::warn!(%error, cycle = %record.id, "decision record not kept");
            }
        }
        report
    }
}

/// Why the scheduling loop woke up.
#[derive(Debug)]
enum SchedulingWake {
    /// Something was published (a submit, a status change).
    Event,
    /// SageMaker's state changes arrived.
    Backend(Vec<StateChange>),
    /// Jobs submitted during the settle pause are old enough to accept.
    Settled,
    /// The interval passed without anything else.
    Tick,
}

/// Runs the scheduling loop until `shutdown` resolves.
///
/// It wakes on a published event, on SageMaker state changes from `backend_events`, when jobs
/// submitted a moment ago have settled, and every `config.interval`. Each pass, in order:
/// accepts SUBMITTED jobs at least `config.settle` old; applies the state changes it was woken
/// with (so capacity they free is seen by this same pass); runs the due work; runs one cycle.
///
/// Wake-ups coalesce: events published while a pass runs leave one stored wake-up, so a pass
/// that dispatches costs exactly one more pass, which finds nothing to do; the loop then sleeps.
/// A submit does not delay the pass it triggers (other jobs may be waiting for it); instead it
/// arms one extra wake-up `settle` later, when the new job is old enough to accept.
pub async fn run_scheduling<T: Scheduling>(
    scheduler: Arc<T>,
    events: LocalEvents,
    mut backend_events: mpsc::Receiver<StateChange>,
    config: LoopConfig,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let interval = config.interval.max(Duration::from_millis(1));
    let batch = config.batch.max(1);
    let settle_ms = i64::try_from(config.settle.as_millis()).unwrap_or(i64::MAX);
    let mut feed = events.subscribe();
    let mut settle_at: Option<tokio::time::Instant> = None;
    let mut backend_open = true;
    tracing::info!(
        interval_ms = u64::try_from(interval.as_millis()).unwrap_or(u64::MAX),
        settle_ms,
        "scheduling loop started"
    );
    loop {
        let settled = async {
            match settle_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let wake = tokio::select! {
            biased;
            () = &mut shutdown => break,
            change = backend_events.recv(), if backend_open => match change {
                Some(first) => {
                    let mut changes = vec![first];
                    while let Ok(more) = backend_events.try_recv() {
                        changes.push(more);
                    }
                    SchedulingWake::Backend(changes)
                }
                None => {
                    backend_open = false;
                    tracing::warn!("the training backend's event feed closed; polling only");
                    continue;
                }
            },
            () = events.woken() => SchedulingWake::Event,
            () = settled => SchedulingWake::Settled,
            () = tokio::time::sleep(interval) => SchedulingWake::Tick,
        };
        if matches!(wake, SchedulingWake::Settled) {
            settle_at = None;
        }
        if submitted_since_last_look(&mut feed) && settle_at.is_none() {
            settle_at = Some(tokio::time::Instant::now() + config.settle);
        }
        let changes = match wake {
            SchedulingWake::Backend(changes) => changes,
            _ => Vec::new(),
        };
        tokio::select! {
            () = &mut shutdown => break,
            () = pass(scheduler.as_ref(), batch, settle_ms, &changes) => {}
        }
        metrics.record_pass();
    }
    tracing::info!("scheduling loop stopped");
}

/// Drains the feed; whether a job was submitted since the last look (or events were missed, in
/// which case one may have been).
fn submitted_since_last_look(feed: &mut broadcast::Receiver<Event>) -> bool {
    let mut submitted = false;
    loop {
        match feed.try_recv() {
            Ok(Event::JobSubmitted { .. }) | Err(broadcast::error::TryRecvError::Lagged(_)) => {
                submitted = true;
            }
            Ok(_) => {}
            Err(_) => return submitted,
        }
    }
}

/// One pass of the scheduling loop, logged: each failed step is a warning (the next steps
/// still ran, and the next wake-up retries).
async fn pass<T: Scheduling>(scheduler: &T, batch: usize, settle_ms: i64, changes: &[StateChange]) {
    // Not shaped like a training job: nothing of ours.
    let states: Vec<TrainingJobState> = changes
        .iter()
        .filter_map(|change| TrainingJobState::from_sagemaker(&change.detail()))
        .collect();
    let report = scheduler.pass(Accept::all(batch, settle_ms), &states).await;
    log_accepted(report.accepted);
    for outcome in &report.applied {
        if let StateOutcome::Applied(status) = outcome {
            tracing::debug!(%status, "training state applied");
        }
    }
    if let Some(due) = report
        .due
        .as_ref()
        .filter(|due| **due != DueReport::default())
    {
        tracing::info!(
            relaunched = due.relaunched,
            stops_requested = due.stops_requested,
            reconciled = due.reconciled,
            lost = due.lost,
            describe_failures = due.describe_failures,
            out_of_time = due.out_of_time,
            "due work"
        );
    }
    for cycle in &report.cycles {
        if cycle.dispatched > 0
            || cycle.capacity_errors > 0
            || cycle.rejected > 0
            || cycle.over_limit > 0
        {
            tracing::info!(
                dispatched = cycle.dispatched,
                launched = cycle.launched,
                conflicts = cycle.conflicts,
                over_limit = cycle.over_limit,
                capacity_errors = cycle.capacity_errors,
                launch_deferred = cycle.launch_deferred,
                rejected = cycle.rejected,
                reasons_updated = cycle.reasons_updated,
                preemptions = cycle.preemptions,
                fenced = cycle.fenced,
                "scheduling cycle"
            );
        }
    }
    for failed in &report.errors {
        // State changes are found again by reconciliation (due work); the rest by the next pass.
        tracing::warn!(step = %failed.step, error = %failed.error, "retrying at the next wake-up");
    }
}

/// Forecast rounds every `every` until `shutdown`: each waiting job's start-time estimate
/// (`trainyard_app::service::estimates`), apart from the scheduling loop so that a slow round
/// delays no cycle. The first round starts `forecasts` from what its memory kept (in local mode,
/// the SQLite file) and each round that learnt something keeps it; a read that failed is tried
/// again at the next round, and nothing is written until one succeeded.
///
/// A round's CPU grows with the backlog (docs/benchmarks.md#start-time-estimates): the next
/// round waits at least three times as long as the last one took, so rounds use at most a
/// quarter of a core whatever the backlog.
pub async fn run_estimates<S: Store, E: EventSink>(
    service: Arc<Service<S, E>>,
    cycle: CycleConfig,
    mut forecasts: KeptForecaster,
    every: Duration,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let mut pause = every;
    loop {
        tokio::select! {
            biased;
            () = &mut shutdown => break,
            () = tokio::time::sleep(pause) => {}
        }
        let started = std::time::Instant::now();
        if let Err(error) = forecasts.restore().await {
            tracing::warn!(%error, "what the forecaster learnt could not be read; the next round tries again");
        }
        match service
            .estimate_start_times(forecasts.forecaster_mut(), &cycle)
            .await
        {
            Ok(report) => {
                tracing::debug!(
                    jobs = report.jobs,
                    resolved = report.resolved,
                    moved = report.moved,
                    took_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                    "start times estimated"
                );
                if let Err(error) = forecasts.keep().await {
                    tracing::warn!(%error, "what the forecaster learnt was not kept");
                }
            }
            Err(error) => tracing::warn!(%error, "estimating start times failed"),
        }
        pause = every.max(started.elapsed() * 3);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;

    use trainyard_app::ports::StoreError;

    use super::*;

    /// Marks a failed call in [`Backlog::calls`].
    const FAILED: usize = usize::MAX;

    /// A fake intake with a backlog of `pending` jobs; records what every call moved.
    #[derive(Default)]
    struct Backlog {
        pending: AtomicUsize,
        calls: Mutex<Vec<usize>>,
        fail_next: AtomicUsize,
    }

    impl Backlog {
        fn with(pending: usize) -> Arc<Self> {
            Arc::new(Self {
                pending: AtomicUsize::new(pending),
                ..Self::default()
            })
        }

        fn calls(&self) -> Vec<usize> {
            self.calls.lock().map(|c| c.clone()).unwrap_or_default()
        }

        fn record(&self, moved: usize) {
            if let Ok(mut calls) = self.calls.lock() {
                calls.push(moved);
            }
        }
    }

    impl Intake for Backlog {
        async fn accept_submitted(
            &self,
            limit: usize,
            _min_age_ms: i64,
        ) -> Result<usize, AppError> {
            if self.fail_next.load(Ordering::SeqCst) > 0 {
                self.fail_next.fetch_sub(1, Ordering::SeqCst);
                self.record(FAILED);
                return Err(AppError::Internal(StoreError::Conflict));
            }
            let pending = self.pending.load(Ordering::SeqCst);
            let moved = pending.min(limit);
            self.pending.store(pending - moved, Ordering::SeqCst);
            self.record(moved);
            Ok(moved)
        }
    }

    /// A running loop and the means to stop it.
    struct Running {
        intake: Arc<Backlog>,
        events: LocalEvents,
        stop: tokio::sync::oneshot::Sender<()>,
        task: tokio::task::JoinHandle<()>,
    }

    fn start(intake: Arc<Backlog>, config: LoopConfig) -> Running {
        let events = LocalEvents::new();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(run_with(
            intake.clone(),
            events.clone(),
            config,
            async move {
                let _ = stopped.await;
            },
        ));
        Running {
            intake,
            events,
            stop,
            task,
        }
    }

    impl Running {
        /// Polls until `done(calls)` holds; panics with the calls after five seconds.
        async fn until(&self, what: &str, done: impl Fn(&[usize]) -> bool) {
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                let calls = self.intake.calls();
                if done(&calls) {
                    return;
                }
                assert!(
                    Instant::now() < deadline,
                    "timed out waiting for {what}: {calls:?}"
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }

        async fn stop(self, within: Duration) -> Arc<Backlog> {
            let _ = self.stop.send(());
            tokio::time::timeout(within, self.task)
                .await
                .expect("loop stops on shutdown")
                .expect("loop task does not panic");
            self.intake
        }
    }

    fn config(interval_ms: u64, settle_ms: u64, batch: usize) -> LoopConfig {
        LoopConfig {
            interval: Duration::from_millis(interval_ms),
            settle: Duration::from_millis(settle_ms),
            batch,
        }
    }

    fn event(n: u32) -> Event {
        Event::JobSubmitted {
            job_id: format!("job-{n}"),
            job_queue: "research".into(),
        }
    }

    #[tokio::test]
    async fn a_backlog_larger_than_a_batch_drains_in_one_wake_up() {
        let running = start(Backlog::with(250), config(3_600_000, 10, 100));
        running.events.publish(event(1)).await;
        running
            .until("the backlog to drain", |c| c == [100, 100, 50])
            .await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        let intake = running.stop(Duration::from_secs(1)).await;
        assert_eq!(
            intake.calls(),
            vec![100, 100, 50],
            "a short pass ends the drain"
        );
    }

    #[tokio::test]
    async fn an_event_wakes_the_loop_after_the_settle_pause_not_before() {
        let running = start(Backlog::with(3), config(3_600_000, 300, 100));
        let woken_at = Instant::now();
        running.events.publish(event(1)).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            running.intake.calls(),
            Vec::<usize>::new(),
            "a just-submitted job stays SUBMITTED during the settle pause"
        );
        running.until("the event's pass", |c| c == [3]).await;
        assert!(woken_at.elapsed() >= Duration::from_millis(300));
        running.stop(Duration::from_secs(1)).await;
    }

    #[tokio::test]
    async fn without_events_the_interval_still_drives_passes() {
        let running = start(Backlog::with(0), config(50, 3_600_000, 100));
        running
            .until("a first tick", |c| c.first() == Some(&0))
            .await;
        running.intake.pending.store(7, Ordering::SeqCst);
        running
            .until("a tick to take the backlog", |c| c.contains(&7))
            .await;
        running.stop(Duration::from_secs(1)).await;
    }

    #[tokio::test]
    async fn an_error_is_logged_and_the_next_wake_up_retries() {
        let intake = Backlog::with(5);
        intake.fail_next.store(1, Ordering::SeqCst);
        let running = start(intake, config(50, 10, 100));
        running
            .until("a retry after the failure", |c| c.starts_with(&[FAILED, 5]))
            .await;
        running.stop(Duration::from_secs(1)).await;
    }

    #[tokio::test]
    async fn shutdown_interrupts_the_settle_pause() {
        let running = start(Backlog::with(1), config(3_600_000, 3_600_000, 100));
        running.events.publish(event(1)).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        let intake = running.stop(Duration::from_secs(1)).await;
        assert_eq!(
            intake.calls(),
            Vec::<usize>::new(),
            "no pass after shutdown"
        );
    }

    #[tokio::test]
    async fn the_backlog_pass_takes_everything_in_batches() {
        let intake = Backlog::with(ACCEPT_BATCH * 2 + 1);
        assert_eq!(accept_backlog(intake.as_ref()).await, ACCEPT_BATCH * 2 + 1);
        assert_eq!(intake.calls(), vec![ACCEPT_BATCH, ACCEPT_BATCH, 1]);
        assert_eq!(accept_backlog(intake.as_ref()).await, 0);
    }

    #[tokio::test]
    async fn observers_see_every_published_event_in_order() {
        let events = LocalEvents::new();
        let mut feed = events.subscribe();
        for n in 0..3 {
            events.publish(event(n)).await;
        }
        for n in 0..3 {
            assert_eq!(feed.recv().await.ok(), Some(event(n)));
        }
    }

    #[tokio::test]
    async fn publishing_without_observers_is_fine_and_leaves_one_wake_up() {
        let events = LocalEvents::new();
        events.publish(event(1)).await;
        events.publish(event(2)).await;
        tokio::time::timeout(Duration::from_millis(500), events.woken())
            .await
            .expect("a stored wake-up resolves at once");
        assert!(
            tokio::time::timeout(Duration::from_millis(20), events.woken())
                .await
                .is_err(),
            "two events leave one wake-up, not two"
        );
    }
}
