//! Every file in `events/` as a test fixture: each function's handler is run on its events over
//! the memory store and the SageMaker emulator's model, and what it did is checked. A fixture
//! nobody checks fails the test, so a new sample event must come with its expectation.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use trainyard_app::ports::{JobStore, SchedulingStore};

use serde_json::{Value, json};
use trainyard_app::Service;
use trainyard_app::memory::MemoryStore;
use trainyard_app::ports::ManualClock;
use trainyard_app::ports::{Clock, NoEvents, TrainingBackend};
use trainyard_app::service::scheduling::CycleConfig;
use trainyard_domain::job::{JobStatus, ServiceJob};
use trainyard_domain::training::attempt_name;
use trainyard_functions::retry::RetryFunction;
use trainyard_functions::scheduler::{LEASE_TTL_MS, PassOutcome, SchedulerFunction, Trigger};
use trainyard_functions::training_events::{EventOutcome, TrainingEventsFunction};

mod common;

use common::{EmulatedSageMaker, deployment, submit};

/// A deployment's worth of Trainyard over the memory store: the initial setup, the three
/// event-driven handlers, and an emulated SageMaker.
struct World {
    service: Arc<Service<MemoryStore, NoEvents>>,
    clock: Arc<ManualClock>,
    sagemaker: EmulatedSageMaker,
    scheduler: SchedulerFunction<MemoryStore, NoEvents, EmulatedSageMaker>,
    training_events: TrainingEventsFunction<MemoryStore, NoEvents>,
    retry: RetryFunction<MemoryStore, NoEvents, EmulatedSageMaker>,
}

impl World {
    async fn new() -> Self {
        let (service, clock, sagemaker) = deployment(MemoryStore::new(), NoEvents, 4).await;
        let cycle = CycleConfig::default();
        Self {
            scheduler: SchedulerFunction::new(service.clone(), sagemaker.clone(), cycle.clone())
                .with_lease_wait(Duration::ZERO),
            training_events: TrainingEventsFunction::new(service.clone(), cycle.clone()),
            retry: RetryFunction::new(service.clone(), sagemaker.clone(), cycle, 60_000),
            service,
            clock,
            sagemaker,
        }
    }

    async fn submit(&self, name: &str) -> String {
        submit(&self.service, name).await
    }

    async fn job(&self, id: &str) -> ServiceJob {
        self.service
            .store()
            .get_job(id)
            .await
            .unwrap()
            .unwrap()
            .value
    }
}

fn events_dir(function: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../events")
        .join(function)
}

fn fixture(function: &str, file: &str) -> Value {
    let path = events_dir(function).join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path:?} is not JSON: {e}"))
}

/// Fails unless `checked` names every file in `events/<function>/`.
fn assert_all_checked(function: &str, checked: &BTreeSet<&str>) {
    let present: BTreeSet<String> = std::fs::read_dir(events_dir(function))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let checked: BTreeSet<String> = checked.iter().map(|s| (*s).to_owned()).collect();
    assert_eq!(
        present, checked,
        "every sample event of {function} is a checked fixture"
    );
}

#[tokio::test]
async fn training_events_apply_once_in_any_order_and_foreign_or_malformed_ones_are_acknowledged() {
    let w = World::new().await;
    let ids = [
        w.submit("resnet").await,
        w.submit("bert").await,
        w.submit("gpt").await,
    ];
    let pass = w
        .scheduler
        .handle(&json!({"trigger": "schedule"}), "req-1", None)
        .await
        .unwrap();
    assert_eq!((pass.accepted, pass.dispatched, pass.launched), (3, 3, 3));
    // The fixtures name the attempts the scheduler just launched.
    for (id, file) in ids.iter().zip([
        "in-progress-training.json",
        "failed-capacity-error.json",
        "out-of-order-completed.json",
    ]) {
        let name = fixture("training-events", file)["detail"]["TrainingJobName"].clone();
        assert_eq!(name, json!(attempt_name(&w.job(id).await, 1)), "{file}");
    }

    // (fixture, expected outcome, expected status of its job afterwards)
    let applied = |status| Some(status);
    let steps: [(&str, &str, Option<JobStatus>); 8] = [
        (
            "in-progress-training.json",
            "applied",
            applied(JobStatus::Running),
        ),
        (
            "in-progress-training-duplicate.json",
            "ignored",
            applied(JobStatus::Running),
        ),
        ("completed.json", "applied", applied(JobStatus::Succeeded)),
        // A capacity failure requeues without using an attempt.
        (
            "failed-capacity-error.json",
            "applied",
            applied(JobStatus::Runnable),
        ),
        // Completed arrives before Training: the late Training changes nothing.
        (
            "out-of-order-completed.json",
            "applied",
            applied(JobStatus::Succeeded),
        ),
        (
            "out-of-order-training.json",
            "ignored",
            applied(JobStatus::Succeeded),
        ),
        ("foreign-training-job.json", "foreign", None),
        ("invalid-shape.json", "malformed", None),
    ];
    let mut checked = BTreeSet::new();
    for (file, outcome, status) in steps {
        let event = fixture("training-events", file);
        let got = w.training_events.handle(&event, None).await.unwrap();
        let encoded = serde_json::to_value(&got).unwrap();
        assert_eq!(encoded["outcome"], outcome, "{file}: {encoded}");
        if let EventOutcome::Applied { status: s, .. } = got {
            assert_eq!(Some(s), status, "{file}");
        }
        if let Some(status) = status {
            let name = event["detail"]["TrainingJobName"].as_str().unwrap();
            let (id, _) = trainyard_domain::training::parse_attempt_name(name).unwrap();
            let job = w.job(&id).await;
            assert_eq!(job.status, status, "{file}");
        }
        checked.insert(file);
    }
    assert_all_checked("training-events", &checked);

    let bert = w.job(&ids[1]).await;
    assert!(
        bert.status_reason
            .as_deref()
            .is_some_and(|r| r.starts_with("CAPACITY:")),
        "{:?}",
        bert.status_reason
    );
    // Replaying everything again changes no job: duplicates are absorbed.
    let before: Vec<ServiceJob> = futures_all(&w, &ids).await;
    for file in &checked {
        w.training_events
            .handle(&fixture("training-events", file), None)
            .await
            .unwrap();
    }
    assert_eq!(futures_all(&w, &ids).await, before);
}

async fn futures_all(w: &World, ids: &[String]) -> Vec<ServiceJob> {
    let mut jobs = Vec::new();
    for id in ids {
        jobs.push(w.job(id).await);
    }
    jobs
}

#[tokio::test]
async fn scheduler_triggers_run_a_pass_under_the_lease_and_other_events_are_ignored() {
    let w = World::new().await;
    let id = w.submit("resnet").await;
    assert_eq!(
        fixture("scheduler", "job-submitted.json")["detail"]["jobId"],
        json!(id),
        "the fixture names the first job"
    );

    // (fixture, trigger, outcome, jobs accepted, jobs dispatched, lease token)
    let steps = [
        (
            "job-submitted.json",
            Some(Trigger::JobSubmitted),
            PassOutcome::Ran,
            1,
            1,
            Some(1),
        ),
        // Released at the end of each pass, so the next one starts a new term.
        (
            "capacity-released.json",
            Some(Trigger::CapacityReleased),
            PassOutcome::Ran,
            0,
            0,
            Some(2),
        ),
        (
            "schedule.json",
            Some(Trigger::Schedule),
            PassOutcome::Ran,
            0,
            0,
            Some(3),
        ),
        ("invalid.json", None, PassOutcome::Ignored, 0, 0, None),
    ];
    let mut checked = BTreeSet::new();
    for (file, trigger, outcome, accepted, dispatched, token) in steps {
        let report = w
            .scheduler
            .handle(&fixture("scheduler", file), file, None)
            .await
            .unwrap();
        assert_eq!(report.trigger, trigger, "{file}");
        assert_eq!(report.outcome, Some(outcome), "{file}");
        assert_eq!(
            (report.accepted, report.dispatched, report.lease_token),
            (accepted, dispatched, token),
            "{file}: {report:?}"
        );
        checked.insert(file);
    }
    assert_all_checked("scheduler", &checked);
    assert_eq!(w.job(&id).await.status, JobStatus::Scheduled);
}

#[tokio::test]
async fn a_held_lease_defers_the_pass_until_it_expires() {
    let w = World::new().await;
    let id = w.submit("resnet").await;
    let other = w
        .service
        .acquire_lease("scheduler", "another-invocation", LEASE_TTL_MS)
        .await
        .unwrap()
        .unwrap();
    let schedule = fixture("scheduler", "schedule.json");

    let busy = w.scheduler.handle(&schedule, "req-1", None).await.unwrap();
    assert_eq!(busy.outcome, Some(PassOutcome::LeaseBusy));
    assert_eq!(
        w.job(&id).await.status,
        JobStatus::Submitted,
        "no work without the lease"
    );

    w.clock.advance(LEASE_TTL_MS);
    let ran = w.scheduler.handle(&schedule, "req-2", None).await.unwrap();
    assert_eq!(ran.outcome, Some(PassOutcome::Ran));
    assert_eq!(
        ran.lease_token,
        Some(other.token + 1),
        "a new term fences the old holder"
    );
    assert_eq!(w.job(&id).await.status, JobStatus::Scheduled);
}

#[tokio::test]
async fn the_retry_schedule_stops_a_terminated_attempt_and_reconciles_its_end() {
    let w = World::new().await;
    let id = w.submit("resnet").await;
    w.scheduler
        .handle(&fixture("scheduler", "schedule.json"), "req-1", None)
        .await
        .unwrap();
    w.service
        .terminate_job(&id, "no longer needed")
        .await
        .unwrap();

    let tick = fixture("retry", "schedule.json");
    let first = w.retry.handle(&tick, None).await.unwrap();
    assert_eq!(first.stops_requested, 1, "{first:?}");

    // The Stopped event is lost; after the quiet period the next tick describes the attempt.
    w.clock.advance(120_000);
    let later = w.retry.handle(&tick, None).await.unwrap();
    assert_eq!(later.reconciled, 1, "{later:?}");
    let job = w.job(&id).await;
    assert_eq!(job.status, JobStatus::Failed);
    assert!(job.is_terminated);
    let name = attempt_name(&job, 1);
    let described = w.sagemaker.describe_training_job(&name).await.unwrap();
    assert_eq!(
        described.status,
        trainyard_app::ports::TrainingStatus::Stopped
    );
    assert_all_checked("retry", &BTreeSet::from(["schedule.json"]));
}

#[tokio::test]
async fn a_pass_records_its_dispatches_and_a_tick_reports_the_gauges_the_alarm_watches() {
    use trainyard_aws::metrics::{MetricsSink, Recorder};
    use trainyard_functions::metrics::{Metrics, schedule_lines};

    let metrics = Metrics::new(Arc::new(Recorder::new()), "prod".into());
    let events = MetricsSink::new(NoEvents, metrics.recorder().clone());
    let (service, clock, sagemaker) = deployment(MemoryStore::new(), events, 1).await;
    let scheduler = SchedulerFunction::new(service.clone(), sagemaker, CycleConfig::default());
    for name in ["a", "b"] {
        submit(&service, name).await;
    }
    clock.advance(5_000);
    let pass = scheduler
        .handle(&fixture("scheduler", "schedule.json"), "req", None)
        .await
        .unwrap();
    assert_eq!(pass.dispatched, 1, "one instance: one job dispatched");

    let recorded = metrics.drain(clock.now_ms()).join("\n");
    assert!(recorded.contains("\"Dispatches\""), "{recorded}");
    assert!(metrics.drain(clock.now_ms()).is_empty(), "drained once");

    clock.advance(60_000);
    let tick: Vec<Value> = schedule_lines(service.store(), "prod", clock.now_ms())
        .await
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let oldest = tick
        .iter()
        .find(|l| l.get("JobQueue").is_none() && l.get("OldestRunnableJobAgeSeconds").is_some())
        .unwrap_or_else(|| panic!("{tick:?}"));
    assert_eq!(oldest["Stack"], "prod");
    // b was submitted 65 s ago; its wait counts from then, not from the pass that accepted it
    // 5 s later.
    assert_eq!(
        oldest["OldestRunnableJobAgeSeconds"],
        json!(65.0),
        "{oldest}"
    );
    assert!(
        tick.iter().any(|l| l["InstancesInUse"] == json!(1)),
        "{tick:?}"
    );
}

#[tokio::test]
async fn two_scheduler_invocations_at_once_share_the_lease_and_never_overrun_capacity() {
    use trainyard_app::ports::EnvironmentUsage;
    use trainyard_app::testing::Interleaving;

    let (service, _clock, sagemaker) =
        deployment(Interleaving::new(MemoryStore::new()), NoEvents, 2).await;
    for name in ["a", "b", "c", "d"] {
        submit(&service, name).await;
    }
    // Two instances of the function (two processes, as after a deployment or a retry).
    let first = SchedulerFunction::new(service.clone(), sagemaker.clone(), CycleConfig::default())
        .with_lease_wait(Duration::ZERO);
    let second = SchedulerFunction::new(service.clone(), sagemaker.clone(), CycleConfig::default())
        .with_lease_wait(Duration::ZERO);
    let tick = fixture("scheduler", "schedule.json");
    let (a, b) = tokio::join!(
        first.handle(&tick, "req-a", None),
        second.handle(&tick, "req-b", None)
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    let outcomes = BTreeSet::from([a.outcome.unwrap(), b.outcome.unwrap()]);
    assert_eq!(
        outcomes,
        BTreeSet::from([PassOutcome::Ran, PassOutcome::LeaseBusy]),
        "{a:?} {b:?}"
    );
    assert_eq!(
        a.dispatched + b.dispatched,
        2,
        "two instances, two dispatches"
    );
    let usage = service
        .store()
        .list_documents::<EnvironmentUsage>()
        .await
        .unwrap();
    assert_eq!(usage.iter().map(|u| u.value.total()).sum::<u64>(), 2);
    let launched = sagemaker
        .shared()
        .with(|emulator, _| emulator.list_training_jobs(None, None, 100).len());
    assert_eq!(launched, 2, "nothing launched twice");
}

/// A decision log that takes `delay` to keep each record; what it kept.
#[derive(Clone, Default)]
struct SlowLog {
    delay: Duration,
    kept: Arc<std::sync::Mutex<Vec<String>>>,
}

impl trainyard_app::service::scheduling::DecisionLog for SlowLog {
    async fn append_decision(
        &self,
        record: &trainyard_app::service::scheduling::DecisionRecord,
    ) -> Result<(), trainyard_app::ports::StoreError> {
        tokio::time::sleep(self.delay).await;
        self.kept.lock().unwrap().push(record.id.clone());
        Ok(())
    }
}

/// Each cycle with a job to plan leaves its decision record; a log slower than the invocation
/// has time for loses the record, not the deadline (tokio's clock is paused, so the waits are
/// exact and instant).
#[tokio::test(start_paused = true)]
async fn decision_records_are_kept_and_never_cost_the_invocation_its_deadline() {
    use trainyard_functions::scheduler::STEP_MARGIN;

    let (service, _clock, sagemaker) = deployment(MemoryStore::new(), NoEvents, 2).await;
    let tick = fixture("scheduler", "schedule.json");
    submit(&service, "a").await;
    let quick = SlowLog::default();
    let handler =
        SchedulerFunction::new(service.clone(), sagemaker.clone(), CycleConfig::default())
            .with_decisions(quick.clone());
    let report = handler.handle(&tick, "req-1", None).await.unwrap();
    assert_eq!(report.dispatched, 1);
    assert_eq!(
        quick.kept.lock().unwrap().len(),
        1,
        "one record for the cycle that planned"
    );

    submit(&service, "b").await;
    let slow = SlowLog {
        delay: Duration::from_secs(600),
        ..SlowLog::default()
    };
    let handler = SchedulerFunction::new(service.clone(), sagemaker, CycleConfig::default())
        .with_decisions(slow.clone())
        .with_lease_wait(Duration::ZERO);
    let started = tokio::time::Instant::now();
    let deadline = started + STEP_MARGIN + Duration::from_secs(10);
    let report = handler
        .handle(&tick, "req-2", Some(deadline))
        .await
        .unwrap();
    assert_eq!(report.dispatched, 1, "the cycle acted");
    assert!(
        slow.kept.lock().unwrap().is_empty(),
        "the record was dropped"
    );
    assert!(
        tokio::time::Instant::now() <= deadline - STEP_MARGIN,
        "returned {:?} after the start, the deadline was {:?} away",
        tokio::time::Instant::now() - started,
        deadline - started
    );
}

/// On a schedule tick the scheduler also estimates when each waiting job will start, and the
/// estimate follows the job's reason wherever the job is read; a tick too close to its deadline
/// leaves the round to the next one.
#[tokio::test(start_paused = true)]
async fn a_schedule_tick_estimates_the_waiting_jobs_start_times_when_time_allows() {
    use trainyard_functions::scheduler::STEP_MARGIN;

    let (service, _clock, sagemaker) = deployment(MemoryStore::new(), NoEvents, 1).await;
    let tick = fixture("scheduler", "schedule.json");
    submit(&service, "runs").await;
    let waits = submit(&service, "waits").await;
    let handler = SchedulerFunction::new(service.clone(), sagemaker, CycleConfig::default())
        .with_start_estimates()
        .with_lease_wait(Duration::ZERO);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let report = handler
        .handle(&tick, "req-1", Some(deadline))
        .await
        .unwrap();
    assert_eq!(
        (report.dispatched, report.estimated),
        (1, Some(1)),
        "{report:?}"
    );
    let job = service.describe_job(&waits).await.unwrap();
    assert_eq!(job.status, JobStatus::Runnable);
    let estimate = service.start_estimate(&job).await.unwrap();
    assert!(estimate.is_some(), "the waiting job has an estimate");
    // As the API shows it: the reason, then the estimate.
    let mut shown = [job];
    service.with_current_reasons(&mut shown).await.unwrap();
    let reason = shown[0].status_reason.as_deref().unwrap_or("");
    assert!(reason.contains("; start p50"), "{reason}");

    // With less than the step margin left, no round starts.
    let deadline = tokio::time::Instant::now() + STEP_MARGIN - Duration::from_secs(1);
    let report = handler
        .handle(&tick, "req-2", Some(deadline))
        .await
        .unwrap();
    assert_eq!(report.estimated, None, "{report:?}");
}

/// A forecast memory in a test's hands: what was kept, how many times, and whether reads fail.
#[derive(Default, Clone)]
struct Memory {
    kept: Arc<std::sync::Mutex<Option<trainyard_forecast::Learned>>>,
    saves: Arc<std::sync::atomic::AtomicUsize>,
    unreadable: Arc<std::sync::atomic::AtomicBool>,
}

impl trainyard_functions::scheduler::ForecastMemory for Memory {
    fn load(
        &self,
    ) -> trainyard_functions::scheduler::MemoryFuture<'_, Option<trainyard_forecast::Learned>> {
        Box::pin(async move {
            if self.unreadable.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(trainyard_app::ports::StoreError::Unavailable {
                    message: "S3 is down".into(),
                    source: None,
                });
            }
            Ok(self.kept.lock().unwrap().clone())
        })
    }

    fn save<'a>(
        &'a self,
        learned: &'a trainyard_forecast::Learned,
    ) -> trainyard_functions::scheduler::MemoryFuture<'a, ()> {
        Box::pin(async move {
            *self.kept.lock().unwrap() = Some(learned.clone());
            self.saves.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(())
        })
    }
}

/// What the forecaster learns outlives the process: a process starts from what was kept, a
/// round keeps it when it learnt something new, a new process (a cold start) starts from it, and one that cannot read it keeps nothing
/// rather than overwrite it with an empty state.
#[tokio::test(start_paused = true)]
async fn what_the_forecaster_learnt_is_kept_across_cold_starts() {
    use std::sync::atomic::Ordering;

    let (service, _clock, sagemaker) = deployment(MemoryStore::new(), NoEvents, 1).await;
    let tick = fixture("scheduler", "schedule.json");
    submit(&service, "runs").await;
    submit(&service, "waits").await;
    // What an earlier process kept: three runtimes of some family.
    let mut earlier = trainyard_forecast::Learned::default();
    let family = trainyard_forecast::Family::of(&"elsewhere".into(), None, 1);
    for _ in 0..3 {
        earlier.history.observe_runtime(family.clone(), 3_600, None);
    }
    let memory = Memory::default();
    *memory.kept.lock().unwrap() = Some(earlier);
    let process = |memory: Memory| {
        SchedulerFunction::new(service.clone(), sagemaker.clone(), CycleConfig::default())
            .with_start_estimates()
            .with_forecast_memory(memory)
            .with_lease_wait(Duration::ZERO)
    };
    let deadline = || tokio::time::Instant::now() + Duration::from_secs(60);

    let first = process(memory.clone());
    let report = first
        .handle(&tick, "req-1", Some(deadline()))
        .await
        .unwrap();
    assert_eq!(report.estimated, Some(1), "{report:?}");
    // The round's figures per queue, which the function prints as metrics: one job estimated,
    // and no coverage yet (nothing it estimated has started).
    let lines = trainyard_functions::metrics::estimate_lines("s", 0, &report.estimates);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("\"StartEstimates\":1") && !l.contains("CoverageP90")),
        "{lines:?}"
    );
    assert_eq!(
        memory.saves.load(Ordering::SeqCst),
        1,
        "the arrivals it saw"
    );
    let kept = memory.kept.lock().unwrap().clone().unwrap();
    assert_eq!(kept.arrived.len(), 2, "both jobs' arrivals: {kept:?}");
    assert_eq!(
        kept.history.runtimes_observed(),
        3,
        "it started from what was kept"
    );
    // Nothing new: nothing written.
    first
        .handle(&tick, "req-2", Some(deadline()))
        .await
        .unwrap();
    assert_eq!(memory.saves.load(Ordering::SeqCst), 1);

    // A cold start that cannot read what was kept estimates, and keeps nothing.
    memory.unreadable.store(true, Ordering::SeqCst);
    let blind = process(memory.clone());
    let report = blind
        .handle(&tick, "req-3", Some(deadline()))
        .await
        .unwrap();
    assert_eq!(report.estimated, Some(1), "{report:?}");
    assert_eq!(
        memory.saves.load(Ordering::SeqCst),
        1,
        "nothing overwritten"
    );
    assert_eq!(memory.kept.lock().unwrap().as_ref(), Some(&kept));

    // A cold start that can starts from it: the jobs it sees are not new arrivals, so it has
    // nothing new to keep.
    memory.unreadable.store(false, Ordering::SeqCst);
    let second = process(memory.clone());
    let report = second
        .handle(&tick, "req-4", Some(deadline()))
        .await
        .unwrap();
    assert_eq!(report.estimated, Some(1), "{report:?}");
    assert_eq!(
        memory.saves.load(Ordering::SeqCst),
        1,
        "restored, not relearnt"
    );
    assert_eq!(memory.kept.lock().unwrap().as_ref(), Some(&kept));
}

/// A state change whose store stalls (or whose race is retried until then) stops
/// [`STEP_MARGIN`] before the invocation's deadline with an error, so that the event is
/// retried, instead of running the function out of time; the retry, once the store answers,
/// applies it. tokio's clock is paused, so the waits are exact and instant.
#[tokio::test(start_paused = true)]
async fn a_training_event_stops_before_the_deadline_and_its_retry_applies_it() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use trainyard_app::testing::Interleaving;
    use trainyard_functions::error::FunctionError;
    use trainyard_functions::scheduler::STEP_MARGIN;

    let stalled = Arc::new(AtomicBool::new(false));
    let pause = {
        let stalled = stalled.clone();
        Arc::new(move || {
            let wait = if stalled.load(Ordering::SeqCst) {
                Duration::from_secs(600)
            } else {
                Duration::ZERO
            };
            Box::pin(tokio::time::sleep(wait)) as std::pin::Pin<Box<dyn Future<Output = ()> + Send>>
        })
    };
    let store = Interleaving::pausing(MemoryStore::new(), pause);
    let (service, _clock, sagemaker) = deployment(store, NoEvents, 2).await;
    let id = submit(&service, "stalls").await;
    let scheduler = SchedulerFunction::new(service.clone(), sagemaker, CycleConfig::default());
    let pass = scheduler
        .handle(&json!({"trigger": "schedule"}), "req-1", None)
        .await
        .unwrap();
    assert_eq!(pass.launched, 1);
    let job = service.store().get_job(&id).await.unwrap().unwrap().value;
    let mut event = fixture("training-events", "in-progress-training.json");
    event["detail"]["TrainingJobName"] = json!(attempt_name(&job, 1));
    let handler = TrainingEventsFunction::new(service.clone(), CycleConfig::default());

    stalled.store(true, Ordering::SeqCst);
    let started = tokio::time::Instant::now();
    let deadline = started + STEP_MARGIN + Duration::from_secs(10);
    let cut = handler.handle(&event, Some(deadline)).await;
    assert!(matches!(cut, Err(FunctionError::OutOfTime)), "{cut:?}");
    assert_eq!(
        tokio::time::Instant::now(),
        deadline - STEP_MARGIN,
        "cut at the step margin"
    );
    stalled.store(false, Ordering::SeqCst);
    let unchanged = service.store().get_job(&id).await.unwrap().unwrap().value;
    assert_eq!(unchanged.status, JobStatus::Scheduled);

    let retried = handler
        .handle(
            &event,
            Some(tokio::time::Instant::now() + Duration::from_secs(30)),
        )
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(&retried).unwrap()["outcome"],
        "applied"
    );
    let applied = service.store().get_job(&id).await.unwrap().unwrap().value;
    assert_eq!(applied.status, JobStatus::Running);
}
