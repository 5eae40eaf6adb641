//! The due work on AWS. Who launches an attempt whose launch did not get through, and when: only
//! the scheduler (whose role alone may create training jobs), on its schedule, once the launch
//! grace has passed; the retry function never creates one. A launch that lands after its attempt
//! has ended (the job was terminated and ended while the create was in flight) is stopped, not
//! left running with nothing tracking it. And the retry function stops before its invocation's
//! deadline, leaving the rest to the next tick.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::Notify;
use trainyard_app::Service;
use trainyard_app::memory::MemoryStore;
use trainyard_app::ports::{
    BackendError, Document, JobStore, ManualClock, NoEvents, ReconcileMark, SchedulingStore,
    TrainingBackend, TrainingJobState, TrainingStatus, Write,
};
use trainyard_app::service::scheduling::CycleConfig;
use trainyard_domain::job::{JobStatus, ServiceJob};
use trainyard_domain::training::attempt_name;
use trainyard_functions::retry::RetryFunction;
use trainyard_functions::scheduler::{LAUNCH_GRACE_MS, SchedulerFunction};

mod common;

use common::{EmulatedSageMaker, deployment, submit};

/// The emulator behind a gate on `CreateTrainingJob`: refused as unavailable while `refuse` is
/// set; held until `release` while `hold` is set (announcing `entered`); counted. Each describe
/// moves `clock` on by `describe_ms` (a slow SageMaker) and is counted.
#[derive(Clone)]
struct Gated {
    inner: EmulatedSageMaker,
    clock: Arc<ManualClock>,
    describe_ms: Arc<AtomicI64>,
    describes: Arc<AtomicUsize>,
    refuse: Arc<AtomicBool>,
    hold: Arc<AtomicBool>,
    entered: Arc<Notify>,
    release: Arc<Notify>,
    creates: Arc<AtomicUsize>,
}

impl TrainingBackend for Gated {
    async fn create_training_job(&self, request: Value) -> Result<String, BackendError> {
        self.creates.fetch_add(1, Ordering::SeqCst);
        if self.refuse.load(Ordering::SeqCst) {
            return Err(BackendError::Unavailable("throttled".into()));
        }
        if self.hold.load(Ordering::SeqCst) {
            self.entered.notify_one();
            self.release.notified().await;
        }
        self.inner.create_training_job(request).await
    }

    async fn describe_training_job(&self, name: &str) -> Result<TrainingJobState, BackendError> {
        self.describes.fetch_add(1, Ordering::SeqCst);
        let state = self.inner.describe_training_job(name).await;
        self.clock.advance(self.describe_ms.load(Ordering::SeqCst));
        state
    }

    async fn stop_training_job(&self, name: &str) -> Result<(), BackendError> {
        self.inner.stop_training_job(name).await
    }
}

struct World {
    service: Arc<Service<MemoryStore, NoEvents>>,
    clock: Arc<ManualClock>,
    sagemaker: Gated,
    scheduler: SchedulerFunction<MemoryStore, NoEvents, Gated>,
    retry: RetryFunction<MemoryStore, NoEvents, Gated>,
}

impl World {
    async fn new() -> Self {
        let (service, clock, inner) = deployment(MemoryStore::new(), NoEvents, 4).await;
        let sagemaker = Gated {
            inner,
            clock: clock.clone(),
            describe_ms: Arc::default(),
            describes: Arc::default(),
            refuse: Arc::default(),
            hold: Arc::default(),
            entered: Arc::default(),
            release: Arc::default(),
            creates: Arc::default(),
        };
        let cycle = CycleConfig::default();
        Self {
            scheduler: SchedulerFunction::new(service.clone(), sagemaker.clone(), cycle.clone())
                .with_lease_wait(Duration::ZERO),
            retry: RetryFunction::new(service.clone(), sagemaker.clone(), cycle, 60_000),
            service,
            clock,
            sagemaker,
        }
    }

    async fn job(&self, id: &str) -> ServiceJob {
        let stored = self.service.store().get_job(id).await.unwrap();
        stored.unwrap().value
    }

    fn creates(&self) -> usize {
        self.sagemaker.creates.load(Ordering::SeqCst)
    }

    /// Submits a job and dispatches it with its launch refused: an attempt without an ARN.
    async fn unlaunched(&self) -> String {
        let id = submit(&self.service, "resnet").await;
        self.sagemaker.refuse.store(true, Ordering::SeqCst);
        let pass = self.scheduler.handle(&tick(), "req-0", None).await.unwrap();
        self.sagemaker.refuse.store(false, Ordering::SeqCst);
        assert_eq!((pass.dispatched, pass.launched), (1, 0), "{pass:?}");
        let job = self.job(&id).await;
        assert!(job.latest_attempt().unwrap().training_job_arn.is_none());
        id
    }
}

fn tick() -> Value {
    json!({"trigger": "schedule"})
}

#[tokio::test]
async fn only_the_scheduler_relaunches_an_unrecorded_launch_and_only_after_the_grace() {
    let w = World::new().await;
    let id = w.unlaunched().await;
    let refused = w.creates();

    // The retry function never creates a training job, however long the attempt has waited.
    w.clock.advance(LAUNCH_GRACE_MS);
    w.retry.handle(&tick(), None).await.unwrap();
    assert_eq!(
        w.creates(),
        refused,
        "the retry function created a training job"
    );
    w.clock.advance(-LAUNCH_GRACE_MS);

    // Within the grace the launch may still be in flight elsewhere: left alone.
    w.clock.advance(LAUNCH_GRACE_MS - 1);
    let early = w.scheduler.handle(&tick(), "req-1", None).await.unwrap();
    assert_eq!(early.relaunched, 0, "{early:?}");
    // Only the schedule relaunches; an event-driven pass does not read every running job.
    w.clock.advance(1);
    let submitted = json!({"source": "trainyard", "detail-type": "Job Submitted", "detail": {}});
    let woken = w.scheduler.handle(&submitted, "req-2", None).await.unwrap();
    assert_eq!(woken.relaunched, 0, "{woken:?}");
    assert_eq!(w.creates(), refused);

    let due = w.scheduler.handle(&tick(), "req-3", None).await.unwrap();
    assert_eq!(due.relaunched, 1, "{due:?}");
    let job = w.job(&id).await;
    assert!(
        job.latest_attempt().unwrap().training_job_arn.is_some(),
        "{job:?}"
    );
}

#[tokio::test]
async fn a_launch_that_lands_after_its_attempt_ended_is_stopped() {
    let w = World::new().await;
    let id = w.unlaunched().await;
    w.clock.advance(LAUNCH_GRACE_MS);

    // The scheduler's relaunch is in flight when the job is terminated and the retry function,
    // finding no training job yet, ends the attempt.
    w.sagemaker.hold.store(true, Ordering::SeqCst);
    let schedule = tick();
    let relaunch = w.scheduler.handle(&schedule, "req-1", None);
    let meanwhile = async {
        w.sagemaker.entered.notified().await;
        w.service
            .terminate_job(&id, "no longer needed")
            .await
            .unwrap();
        w.retry.handle(&tick(), None).await.unwrap();
        assert_eq!(w.job(&id).await.status, JobStatus::Failed);
        w.sagemaker.release.notify_one();
    };
    let (relaunched, ()) = tokio::join!(relaunch, meanwhile);
    assert_eq!(relaunched.unwrap().relaunched, 1);

    let job = w.job(&id).await;
    assert_eq!(job.status, JobStatus::Failed);
    let state = w
        .sagemaker
        .describe_training_job(&attempt_name(&job, 1))
        .await
        .unwrap();
    assert!(
        matches!(
            state.status,
            TrainingStatus::Stopping | TrainingStatus::Stopped
        ),
        "the late launch of an ended attempt is left running: {state:?}"
    );
}

#[tokio::test]
async fn the_retry_function_stops_before_its_deadline_and_the_next_tick_does_the_rest() {
    let w = World::new().await;
    for name in ["a", "b", "c"] {
        submit(&w.service, name).await;
    }
    let pass = w.scheduler.handle(&tick(), "req-0", None).await.unwrap();
    assert_eq!(pass.launched, 3, "{pass:?}");
    // Every attempt has been quiet long enough to be described; each describe takes 10 s, and
    // the invocation has 20 s left, so steps may start for 15 s (its margin is 5 s).
    w.clock.advance(120_000);
    w.sagemaker.describe_ms.store(10_000, Ordering::SeqCst);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let cut = w.retry.handle(&tick(), Some(deadline)).await.unwrap();
    assert!(cut.out_of_time, "{cut:?}");
    assert_eq!(
        w.sagemaker.describes.load(Ordering::SeqCst),
        2,
        "jobs at 0 s and 10 s only"
    );

    let rest = w.retry.handle(&tick(), None).await.unwrap();
    assert!(!rest.out_of_time, "{rest:?}");
    // The two described first were reconciled (no longer quiet); the third is described now.
    assert_eq!(w.sagemaker.describes.load(Ordering::SeqCst), 3);
}

/// Reconciliation describes a quiet attempt as its silence doubles, not on every tick: three
/// jobs of 600 s, their events lost, ticked every minute for 20 minutes. The completions are
/// still found (each within twice its runtime), for far fewer describes than ticks × jobs; a new
/// instance of the function goes on from the last complete pass of any instance (kept in the
/// store), and describes every quiet attempt once only when no pass has completed.
#[tokio::test]
async fn reconciliation_describes_quiet_attempts_as_their_silence_doubles() {
    let w = World::new().await;
    let mut ids = Vec::new();
    for name in ["a", "b", "c"] {
        ids.push(submit(&w.service, name).await);
    }
    let pass = w.scheduler.handle(&tick(), "req-0", None).await.unwrap();
    assert_eq!(pass.launched, 3, "{pass:?}");
    let ticks = 20;
    let mut done_at = None;
    for minute in 1..=ticks {
        w.clock.advance(60_000);
        let report = w.retry.handle(&tick(), None).await.unwrap();
        assert!(!report.out_of_time, "{report:?}");
        let mut done = 0;
        for id in &ids {
            done += usize::from(w.job(id).await.status == JobStatus::Succeeded);
        }
        if done == ids.len() && done_at.is_none() {
            done_at = Some(minute);
        }
    }
    let describes = w.sagemaker.describes.load(Ordering::SeqCst);
    let done_at = done_at.expect("every lost completion was found");
    assert!(done_at <= 20, "found by minute {done_at} (the jobs ran 10)");
    assert!(
        describes * 2 < ticks * ids.len(),
        "{describes} describes for {ticks} ticks of {} jobs",
        ids.len()
    );
    println!("{describes} describes; every completion found by minute {done_at}");

    // A new instance of the function (a cold start) goes on from the last complete pass of any
    // instance, kept in the store: it describes what fell due since, not every quiet attempt.
    let more = ["d", "e"];
    for name in more {
        submit(&w.service, name).await;
    }
    let pass = w.scheduler.handle(&tick(), "req-1", None).await.unwrap();
    assert_eq!(pass.launched, 2, "{pass:?}");
    let described = || w.sagemaker.describes.load(Ordering::SeqCst);
    // Quiet past their first checkpoint: described (and found RUNNING).
    w.clock.advance(150_000);
    let before = described();
    w.retry.handle(&tick(), None).await.unwrap();
    assert_eq!(described() - before, more.len());
    // Their silence crosses its first checkpoint again a minute later: described again.
    w.clock.advance(60_000);
    let before = described();
    w.retry.handle(&tick(), None).await.unwrap();
    assert_eq!(described() - before, more.len());
    // Half a minute later nothing is due; a cold instance knows it from the store.
    w.clock.advance(30_000);
    let fresh = RetryFunction::new(
        w.service.clone(),
        w.sagemaker.clone(),
        CycleConfig::default(),
        60_000,
    );
    let before = described();
    fresh.handle(&tick(), None).await.unwrap();
    assert_eq!(
        described() - before,
        0,
        "nothing fell due since the last pass"
    );
    // Without a mark (no pass ever completed) it describes every quiet attempt.
    let mark = w.service.reconcile_mark().await.unwrap().unwrap();
    w.service
        .store()
        .commit(&[Write::delete_document::<ReconcileMark>(
            mark.value.key(),
            mark.version,
        )])
        .await
        .unwrap();
    let before = described();
    fresh.handle(&tick(), None).await.unwrap();
    assert_eq!(described() - before, more.len());
}
