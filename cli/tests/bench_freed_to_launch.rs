//! Benchmark (ignored by default; prints figures, asserts nothing about speed): in local mode,
//! the time from capacity freed (a training job's terminal state applied) to the next
//! `CreateTrainingJob`. Real pieces: SQLite store, scheduling loop, emulator and its driver.
//!
//! cargo test --release -p trainyard-cli --test bench_freed_to_launch -- --ignored --nocapture

// Tests may panic on what they did not expect.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use trainyard_app::ports::{ConfigStore, JobStore};

use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use trainyard_app::Service;
use trainyard_app::ports::{
    BackendError, Event, EventSink, JobQuery, RandomIds, SystemClock, TrainingBackend,
    TrainingJobState,
};
use trainyard_app::service::jobs::SubmitJob;
use trainyard_app::service::scheduling::CycleConfig;
use trainyard_domain::arn::ArnContext;
use trainyard_domain::environment::{CapacityLimit, ServiceEnvironment, ServiceEnvironmentType};
use trainyard_domain::job::JobStatus;
use trainyard_domain::queue::{JobQueue, JobQueueType, ServiceEnvironmentOrder};
use trainyard_domain::{ResourceStatus, State};
use trainyard_emulator::backend::EmulatedSageMaker;
use trainyard_emulator::model::{Config, Emulator};
use trainyard_emulator::shared::SharedEmulator;
use trainyard_local::SqliteStore;
use trainyard_local::event_loop::{LocalEvents, LoopConfig, PassRunner, run_scheduling};
use trainyard_local::metrics::Metrics;

const JOBS: usize = 200;
const CAPACITY: u32 = 8;

type Times = Arc<Mutex<Vec<Instant>>>;

/// The backend, noting when each create is called.
#[derive(Clone)]
struct TimedBackend {
    inner: EmulatedSageMaker,
    creates: Times,
}

impl TrainingBackend for TimedBackend {
    async fn create_training_job(&self, request: Value) -> Result<String, BackendError> {
        self.creates.lock().unwrap().push(Instant::now());
        self.inner.create_training_job(request).await
    }
    async fn describe_training_job(&self, name: &str) -> Result<TrainingJobState, BackendError> {
        self.inner.describe_training_job(name).await
    }
    async fn stop_training_job(&self, name: &str) -> Result<(), BackendError> {
        self.inner.stop_training_job(name).await
    }
}

/// Local mode's event sink, noting when a terminal status (capacity freed) is published: in the
/// same call that commits it.
#[derive(Clone)]
struct TimedEvents {
    inner: LocalEvents,
    freed: Times,
}

impl EventSink for TimedEvents {
    async fn publish(&self, event: Event) {
        if let Event::JobStatusChanged {
            status: JobStatus::Succeeded | JobStatus::Failed,
            ..
        } = &event
        {
            self.freed.lock().unwrap().push(Instant::now());
        }
        self.inner.publish(event).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: prints figures; run with --ignored --nocapture"]
async fn capacity_freed_to_next_launch_latency() {
    let dir = tempfile::tempdir().unwrap();
    let events = LocalEvents::new();
    let freed: Times = Arc::default();
    let service = Arc::new(Service::new(
        SqliteStore::open(&dir.path().join("bench.db")).unwrap(),
        TimedEvents {
            inner: events.clone(),
            freed: freed.clone(),
        },
        Arc::new(SystemClock),
        Arc::new(RandomIds),
        ArnContext::default(),
    ));
    let store = service.store();
    store
        .create_resource(&ServiceEnvironment {
            service_environment_name: "local".into(),
            service_environment_type: ServiceEnvironmentType::SagemakerTraining,
            state: State::Enabled,
            status: ResourceStatus::Valid,
            capacity_limits: vec![CapacityLimit {
                max_capacity: CAPACITY,
                capacity_unit: "NUM_INSTANCES".into(),
            }],
            tags: BTreeMap::new(),
            created_at: 0,
        })
        .await
        .unwrap();
    store
        .create_resource(&JobQueue {
            job_queue_name: "bench".into(),
            state: State::Enabled,
            status: ResourceStatus::Valid,
            status_reason: None,
            priority: 1,
            scheduling_policy: None,
            service_environment_order: vec![ServiceEnvironmentOrder {
                order: 1,
                service_environment: "local".into(),
            }],
            job_state_time_limit_actions: vec![],
            job_queue_type: JobQueueType::SagemakerTraining,
            tags: BTreeMap::new(),
            created_at: 0,
        })
        .await
        .unwrap();
    for n in 0..JOBS {
        let payload = json!({
            "TrainingJobName": format!("bench-{n}"),
            "RoleArn": "arn:aws:iam::000000000000:role/R",
            "AlgorithmSpecification": {"TrainingImage": "img", "TrainingInputMode": "File"},
            "HyperParameters": {"emulator_duration_s": "0.05"},
            "OutputDataConfig": {"S3OutputPath": "s3://b/o"},
            "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 10},
            "StoppingCondition": {"MaxRuntimeInSeconds": 3600}
        });
        service
            .submit(SubmitJob {
                job_name: format!("bench-{n}"),
                job_queue: "bench".into(),
                service_job_type: Default::default(),
                service_request_payload: payload.to_string(),
                share_identifier: None,
                quota_share_name: None,
                scheduling_priority: None,
                retry_strategy: None,
                timeout_config: None,
                preemption_configuration: None,
                tags: BTreeMap::new(),
                client_token: None,
            })
            .await
            .unwrap();
    }

    let shared = SharedEmulator::with_wall_clock(Emulator::new(Config::default()));
    let creates: Times = Arc::default();
    let backend = TimedBackend {
        inner: EmulatedSageMaker::new(shared.clone(), 1.0),
        creates: creates.clone(),
    };
    let scheduler = Arc::new(PassRunner::new(
        service.clone(),
        backend,
        CycleConfig::default(),
        10_000,
    ));
    let (stop, stopping) = watch::channel(false);
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let (tx, rx) = mpsc::channel(1024);
    let driver = tokio::spawn(trainyard_emulator::driver::run(
        shared,
        tx,
        Duration::from_secs(1),
        stopped(stopping.clone()),
    ));
    let config = LoopConfig {
        settle: Duration::ZERO,
        ..LoopConfig::new(Duration::from_secs(1))
    };
    let started = Instant::now();
    let looped = tokio::spawn(run_scheduling(
        scheduler,
        events,
        rx,
        config,
        Arc::new(Metrics::new()),
        stopped(stopping),
    ));
    let deadline = started + Duration::from_secs(180);
    loop {
        let done = store
            .list_jobs(&JobQuery {
                status: Some(JobStatus::Succeeded),
                limit: JOBS + 1,
                ..JobQuery::default()
            })
            .await
            .unwrap()
            .items
            .len();
        if done == JOBS {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {done} of {JOBS} jobs finished"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let elapsed = started.elapsed();
    let _ = stop.send(true);
    let _ = driver.await;
    let _ = looped.await;

    let mut creates = creates.lock().unwrap().clone();
    let mut freed = freed.lock().unwrap().clone();
    creates.sort();
    freed.sort();
    // Each launch after the first wave was made possible by the latest capacity freed before it.
    let mut latencies: Vec<Duration> = creates
        .iter()
        .skip(CAPACITY as usize)
        .filter_map(|c| freed.iter().rev().find(|f| *f <= c).map(|f| *c - *f))
        .collect();
    latencies.sort();
    let pct = |p: f64| latencies[((latencies.len() as f64 - 1.0) * p).round() as usize];
    println!(
        "capacity freed -> next CreateTrainingJob, {} launches ({JOBS} jobs of 0.05 s on {CAPACITY} instances, SQLite, {:.1} s total):",
        latencies.len(),
        elapsed.as_secs_f64()
    );
    println!(
        "  p50 {:.2} ms   p90 {:.2} ms   p99 {:.2} ms   max {:.2} ms",
        pct(0.5).as_secs_f64() * 1e3,
        pct(0.9).as_secs_f64() * 1e3,
        pct(0.99).as_secs_f64() * 1e3,
        pct(1.0).as_secs_f64() * 1e3
    );
    assert_eq!(latencies.len(), JOBS - CAPACITY as usize);
}
