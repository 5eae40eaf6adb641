//! What the "why" and the decision record cost per cycle, against the backlog: a fair-share queue
//! on a 64-instance pool that running jobs fill, S shares, B jobs waiting spread over them. The
//! first cycle over them and the next (in which nothing changed); printed: the decision record's
//! JSON size, the `line-waits` documents each cycle wrote (count and total size), wall times.
//!
//!     cargo bench -p trainyard-app --bench decision_size
//!
//! (`DECISION_SIZE_MAX=10000` skips the 100,000-job cases.)

// A benchmark may panic on what it did not expect.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use trainyard_app::Service;
use trainyard_app::memory::MemoryStore;
use trainyard_app::ports::{
    ConfigStore, Document, LineWaits, ManualClock, NoEvents, SchedulingStore, SequentialIds,
    TrainingBackend,
};
use trainyard_app::service::jobs::SubmitJob;
use trainyard_app::service::scheduling::CycleConfig;
use trainyard_domain::arn::ArnContext;
use trainyard_domain::environment::{CapacityLimit, ServiceEnvironment, ServiceEnvironmentType};
use trainyard_domain::policy::{FairsharePolicy, SchedulingPolicy};
use trainyard_domain::queue::{JobQueue, JobQueueType, ServiceEnvironmentOrder};
use trainyard_domain::{ResourceStatus, State};
use trainyard_emulator::backend::EmulatedSageMaker;
use trainyard_emulator::model::Config as EmulatorConfig;

const T0: i64 = 1_800_000_000_000;
const POOL: u32 = 64;

fn submit(queue: &str, share: &str, name: &str) -> SubmitJob {
    let payload = json!({
        "TrainingJobName": name,
        "RoleArn": "arn:aws:iam::000000000000:role/SageMakerRole",
        "AlgorithmSpecification": {"TrainingImage": "img:1", "TrainingInputMode": "File"},
        "HyperParameters": {"emulator_duration_s": "86400"},
        "OutputDataConfig": {"S3OutputPath": "s3://bucket/out"},
        "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 50},
        "StoppingCondition": {"MaxRuntimeInSeconds": 86400}
    });
    SubmitJob {
        job_name: name.into(),
        job_queue: queue.into(),
        service_job_type: Default::default(),
        service_request_payload: payload.to_string(),
        share_identifier: Some(share.into()),
        quota_share_name: None,
        scheduling_priority: Some(0),
        retry_strategy: None,
        timeout_config: None,
        preemption_configuration: None,
        tags: BTreeMap::new(),
        client_token: None,
    }
}

/// The configuration: a `POOL`-instance environment and one fair-share queue `q` on it.
async fn configure(store: &MemoryStore) {
    store
        .create_resource(&ServiceEnvironment {
            service_environment_name: "pool".into(),
            service_environment_type: ServiceEnvironmentType::SagemakerTraining,
            state: State::Enabled,
            status: ResourceStatus::Valid,
            capacity_limits: vec![CapacityLimit {
                max_capacity: POOL,
                capacity_unit: "NUM_INSTANCES".into(),
            }],
            tags: BTreeMap::new(),
            created_at: T0,
        })
        .await
        .unwrap();
    store
        .create_resource(&SchedulingPolicy {
            name: "fair".into(),
            fairshare_policy: Some(FairsharePolicy {
                share_decay_seconds: Some(3600),
                compute_reservation: None,
                share_distribution: vec![],
            }),
            quota_share_policy: None,
            tags: BTreeMap::new(),
            created_at: T0,
        })
        .await
        .unwrap();
    store
        .create_resource(&JobQueue {
            job_queue_name: "q".into(),
            state: State::Enabled,
            status: ResourceStatus::Valid,
            status_reason: None,
            priority: 1,
            scheduling_policy: Some("fair".into()),
            service_environment_order: vec![ServiceEnvironmentOrder {
                order: 1,
                service_environment: "pool".into(),
            }],
            job_state_time_limit_actions: vec![],
            job_queue_type: JobQueueType::SagemakerTraining,
            tags: BTreeMap::new(),
            created_at: T0,
        })
        .await
        .unwrap();
}

/// What one cycle cost.
struct Cycle {
    record_bytes: usize,
    lines_written: usize,
    lines_bytes: usize,
    ms: f64,
}

/// Runs one cycle and measures it: its record, and the `line-waits` it wrote.
async fn cycle<B: TrainingBackend>(
    service: &Service<MemoryStore, NoEvents>,
    backend: &B,
    config: &CycleConfig,
) -> Cycle {
    let store = service.store();
    let versions = || async {
        store
            .list_documents::<LineWaits>()
            .await
            .unwrap()
            .into_iter()
            .map(|w| (w.value.key(), (w.version, w.value)))
            .collect::<BTreeMap<String, (u64, LineWaits)>>()
    };
    let before = versions().await;
    let started = Instant::now();
    let report = service.run_cycle(backend, config).await.unwrap();
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    assert_eq!(report.dispatched, 0, "the pool is full");
    let record_bytes = serde_json::to_vec(&report.decision.unwrap()).unwrap().len();
    let written: Vec<LineWaits> = versions()
        .await
        .into_iter()
        .filter(|(key, (version, _))| before.get(key).map(|b| b.0) != Some(*version))
        .map(|(_, (_, waits))| waits)
        .collect();
    Cycle {
        record_bytes,
        lines_written: written.len(),
        lines_bytes: written
            .iter()
            .map(|w| serde_json::to_vec(w).unwrap().len())
            .sum(),
        ms,
    }
}

/// One case: the first cycle over the backlog, then the next (nothing changed).
async fn measure(shares: usize, backlog: usize) -> (Cycle, Cycle) {
    let clock = Arc::new(ManualClock::new(T0));
    let service = Service::new(
        MemoryStore::new(),
        NoEvents,
        clock.clone(),
        Arc::new(SequentialIds::default()),
        ArnContext::default(),
    );
    configure(service.store()).await;
    let backend = EmulatedSageMaker::on_clock(EmulatorConfig::default(), clock.clone());
    let config = CycleConfig {
        record_decisions: true,
        ..CycleConfig::default()
    };
    // Fill the pool, then queue the backlog behind it.
    for i in 0..POOL as usize {
        let job = submit("q", &format!("share-{}", i % shares), &format!("run-{i}"));
        service.submit(job).await.unwrap();
    }
    service.accept_submitted(usize::MAX, 0).await.unwrap();
    service.run_cycle(&backend, &config).await.unwrap();
    clock.advance(1_000);
    for i in 0..backlog {
        let job = submit("q", &format!("share-{}", i % shares), &format!("wait-{i}"));
        service.submit(job).await.unwrap();
    }
    service.accept_submitted(usize::MAX, 0).await.unwrap();
    clock.advance(1_000);
    let first = cycle(&service, &backend, &config).await;
    clock.advance(1_000);
    let next = cycle(&service, &backend, &config).await;
    (first, next)
}

fn main() {
    let max: usize = std::env::var("DECISION_SIZE_MAX")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    println!("pool {POOL} instances, all held; one fair-share queue; the first cycle over the");
    println!("backlog, then the next (nothing changed): record size, line-waits written, wall ms");
    println!(
        "{:>7} {:>8} {:>13} {:>13} {:>13} {:>9} {:>13} {:>9}",
        "shares",
        "waiting",
        "record bytes",
        "lines written",
        "lines bytes",
        "first ms",
        "next written",
        "next ms"
    );
    for shares in [10, 100, 1_000] {
        for backlog in [1_000, 10_000, 100_000] {
            if backlog > max || backlog < shares {
                continue;
            }
            let (first, next) = runtime.block_on(measure(shares, backlog));
            println!(
                "{shares:>7} {backlog:>8} {:>13} {:>13} {:>13} {:>9.1} {:>13} {:>9.1}",
                first.record_bytes,
                first.lines_written,
                first.lines_bytes,
                first.ms,
                next.lines_written,
                next.ms
            );
        }
    }
    println!("rerun: cargo bench -p trainyard-app --bench decision_size");
}
