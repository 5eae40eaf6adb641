//! The scheduling loop end to end over virtual time: the real use-cases and planner, the memory
//! store, and the SageMaker emulator's model as the training backend.

// Tests may panic on what they did not expect.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use trainyard_app::ports::{ConfigStore, JobStore, SchedulingStore};

use serde_json::{Value, json};
use trainyard_app::Service;
use trainyard_app::memory::MemoryStore;
use trainyard_app::ports::{
    BackendError, CapacityRelease, Clock, EnvironmentUsage, Fence, LineEstimates, LineWaits,
    NoEvents, ObservedCheckpoint, ShareUsageRecord, StartEstimates, TrainingBackend,
    TrainingJobState, Versioned, Write, quota_share_key,
};
use trainyard_app::ports::{ManualClock, SequentialIds};
use trainyard_app::service::jobs::SubmitJob;
use trainyard_app::service::queues::JobQueueUpdate;
use trainyard_app::service::scheduling::{
    Accept, CycleConfig, CycleReport, DecisionRecord, DueWork, PassInput, PassReport, StateOutcome,
};
use trainyard_app::testing::Interleaving;
use trainyard_domain::arn::ArnContext;
use trainyard_domain::environment::{CapacityLimit, ServiceEnvironment, ServiceEnvironmentType};
use trainyard_domain::job::{
    EvaluateOnExit, JobStatus, Requeue, RetryAction, RetryStrategy, StopRequest, TimeoutConfig,
};
use trainyard_domain::policy::{FairsharePolicy, QuotaSharePolicy, SchedulingPolicy};
use trainyard_domain::queue::{JobQueue, JobQueueType, ServiceEnvironmentOrder};
use trainyard_domain::quota_share::{
    QuotaShare, QuotaShareCapacityLimit, QuotaSharePreemptionConfiguration,
    ResourceSharingConfiguration, SharingStrategy,
};
use trainyard_domain::{ResourceStatus, State};
use trainyard_emulator::backend::EmulatedSageMaker;
use trainyard_emulator::model::Config as EmulatorConfig;
use trainyard_scheduler::WaitKind;
use trainyard_scheduler::retry::RetryConfig;

const T0: i64 = 1_800_000_000_000;

/// A Trainyard over the memory store and an emulated SageMaker, driven step by step.
struct World {
    service: Service<Arc<MemoryStore>, NoEvents>,
    clock: Arc<ManualClock>,
    sagemaker: EmulatedSageMaker,
    config: CycleConfig,
    /// Whether SageMaker's events reach Trainyard (off: only reconciliation finds changes).
    deliver_events: bool,
    /// Whether the events delivered leave out which instance type SageMaker launched.
    events_without_selected_type: bool,
    /// Every dispatch order seen, for assertions on priority.
    dispatched: Vec<String>,
    /// Preemptions the cycles reported, summed.
    preemptions_reported: usize,
    /// Each cycle's decision record, when `config.record_decisions` is set.
    decisions: Vec<DecisionRecord>,
}

impl World {
    fn new(emulator: EmulatorConfig) -> Self {
        let clock = Arc::new(ManualClock::new(T0));
        let service = Service::new(
            Arc::new(MemoryStore::new()),
            NoEvents,
            clock.clone(),
            Arc::new(SequentialIds::default()),
            ArnContext::default(),
        );
        let sagemaker = EmulatedSageMaker::on_clock(emulator, clock.clone());
        let config = CycleConfig {
            // Short backoffs keep the virtual runs short; the rules are the same.
            retry: RetryConfig {
                capacity_base_ms: 2_000,
                capacity_cap_ms: 8_000,
                retry_base_ms: 1_000,
                retry_cap_ms: 4_000,
                jitter_max_ms: 500,
            },
            ..CycleConfig::default()
        };
        Self {
            service,
            clock,
            sagemaker,
            config,
            deliver_events: true,
            events_without_selected_type: false,
            dispatched: Vec::new(),
            preemptions_reported: 0,
            decisions: Vec::new(),
        }
    }

    async fn environment(&self, name: &str, instances: u32) {
        let env = ServiceEnvironment {
            service_environment_name: name.into(),
            service_environment_type: ServiceEnvironmentType::SagemakerTraining,
            state: State::Enabled,
            status: ResourceStatus::Valid,
            capacity_limits: vec![CapacityLimit {
                max_capacity: instances,
                capacity_unit: "NUM_INSTANCES".into(),
            }],
            tags: BTreeMap::new(),
            created_at: T0,
        };
        self.service.store().create_resource(&env).await.unwrap();
    }

    /// A quota-managed queue `queue` on its own environment of `instances` `ml.g5.xlarge`, with
    /// quota shares of 2 instances each (unlimited borrowing for LEND_AND_BORROW).
    async fn quota_queue(&self, queue: &str, instances: u32, shares: &[(&str, SharingStrategy)]) {
        let store = self.service.store();
        let env = ServiceEnvironment {
            service_environment_name: format!("{queue}-env"),
            service_environment_type: ServiceEnvironmentType::SagemakerTraining,
            state: State::Enabled,
            status: ResourceStatus::Valid,
            capacity_limits: vec![CapacityLimit {
                max_capacity: instances,
                capacity_unit: "ml.g5.xlarge".into(),
            }],
            tags: BTreeMap::new(),
            created_at: T0,
        };
        store.create_resource(&env).await.unwrap();
        let policy = SchedulingPolicy {
            name: format!("{queue}-quota"),
            fairshare_policy: None,
            quota_share_policy: Some(QuotaSharePolicy::default()),
            tags: BTreeMap::new(),
            created_at: T0,
        };
        store.create_resource(&policy).await.unwrap();
        let queue_def = JobQueue {
            job_queue_name: queue.into(),
            state: State::Enabled,
            status: ResourceStatus::Valid,
            status_reason: None,
            priority: 1,
            scheduling_policy: Some(policy.name.clone()),
            service_environment_order: vec![ServiceEnvironmentOrder {
                order: 1,
                service_environment: env.service_environment_name.clone(),
            }],
            job_state_time_limit_actions: vec![],
            job_queue_type: JobQueueType::SagemakerTraining,
            tags: BTreeMap::new(),
            created_at: T0,
        };
        store.create_resource(&queue_def).await.unwrap();
        for (name, strategy) in shares {
            let share = QuotaShare {
                quota_share_name: (*name).into(),
                job_queue: queue.into(),
                capacity_limits: vec![QuotaShareCapacityLimit {
                    max_capacity: 2,
                    capacity_unit: "ml.g5.xlarge".into(),
                }],
                resource_sharing_configuration: ResourceSharingConfiguration {
                    strategy: *strategy,
                    borrow_limit: None,
                },
                preemption_configuration: QuotaSharePreemptionConfiguration::default(),
                state: State::Enabled,
                status: ResourceStatus::Valid,
                tags: BTreeMap::new(),
                created_at: T0,
            };
            store.create_resource(&share).await.unwrap();
        }
    }

    /// The quota-managed queue `teams` on 4 instances: share `owner` (LEND) and share
    /// `borrower` (LEND_AND_BORROW), 2 instances each.
    async fn lender_and_borrower(&self) {
        let shares = [
            ("owner", SharingStrategy::Lend),
            ("borrower", SharingStrategy::LendAndBorrow),
        ];
        self.quota_queue("teams", 4, &shares).await;
    }

    /// Submits four jobs `b0`..`b3` of `seconds` to the `borrower` share of
    /// [`World::lender_and_borrower`], each with a `CheckpointConfig.S3Uri` of its own and the
    /// hyper-parameters `hyper(i, ..)` adds; their ids.
    async fn checkpointing_borrowers(
        &self,
        seconds: u32,
        hyper: impl Fn(usize, &mut Value),
    ) -> Vec<String> {
        let mut ids = Vec::new();
        for i in 0..4 {
            let mut hypers = quick(seconds);
            hyper(i, &mut hypers);
            let id = self
                .submit_with(&format!("b{i}"), "teams", 1, hypers, |cmd| {
                    quota("borrower")(cmd);
                    let mut payload: Value =
                        serde_json::from_str(&cmd.service_request_payload).unwrap();
                    payload["CheckpointConfig"] = json!({"S3Uri": format!("s3://ckpt/b{i}")});
                    cmd.service_request_payload = payload.to_string();
                })
                .await;
            ids.push(id);
        }
        ids
    }

    /// The environment's usage document, net of the releases not folded into it yet (with
    /// the version stored).
    async fn usage(&self, environment: &str) -> Versioned<EnvironmentUsage> {
        let mut net = self.service.store().capacity_in_use().await.unwrap();
        net.remove(environment).expect("a usage document")
    }

    /// Stores a usage document over the one at `version` (0: none yet).
    async fn put_usage(&self, usage: &EnvironmentUsage, version: u64) {
        let write = Write::document(usage, version).unwrap();
        self.service.store().commit(&[write]).await.unwrap();
    }

    /// One pass that accepts and cycles once, which must not fail; what its cycle did.
    async fn accept_and_cycle(&self) -> CycleReport {
        let pass = self
            .service
            .pass(&self.sagemaker, &self.config, accept_and_cycle())
            .await;
        assert!(pass.errors.is_empty(), "{:?}", pass.errors);
        pass.cycle_totals()
    }

    /// A fair-share queue `name` on `env`, with its policy (usage halves every 10 minutes).
    async fn fair_share_queue(&self, name: &str, env: &str) {
        let policy = SchedulingPolicy {
            name: format!("{name}-fair"),
            fairshare_policy: Some(FairsharePolicy {
                share_decay_seconds: Some(600),
                compute_reservation: None,
                share_distribution: vec![],
            }),
            quota_share_policy: None,
            tags: BTreeMap::new(),
            created_at: T0,
        };
        self.service.store().create_resource(&policy).await.unwrap();
        self.queue_with_policy(name, 1, env, Some(&policy.name))
            .await;
    }

    async fn queue(&self, name: &str, priority: u32, env: &str) {
        self.queue_with_policy(name, priority, env, None).await;
    }

    async fn queue_with_policy(&self, name: &str, priority: u32, env: &str, policy: Option<&str>) {
        self.queue_tagged(name, priority, env, policy, BTreeMap::new())
            .await;
    }

    async fn queue_tagged(
        &self,
        name: &str,
        priority: u32,
        env: &str,
        policy: Option<&str>,
        tags: BTreeMap<String, String>,
    ) {
        let queue = JobQueue {
            job_queue_name: name.into(),
            state: State::Enabled,
            status: ResourceStatus::Valid,
            status_reason: None,
            priority,
            scheduling_policy: policy.map(str::to_owned),
            service_environment_order: vec![ServiceEnvironmentOrder {
                order: 1,
                service_environment: env.into(),
            }],
            job_state_time_limit_actions: vec![],
            job_queue_type: JobQueueType::SagemakerTraining,
            tags,
            created_at: T0,
        };
        self.service.store().create_resource(&queue).await.unwrap();
    }

    /// Submits a job and returns its id. `hyper` goes into the payload's HyperParameters.
    async fn submit(&self, name: &str, queue: &str, instances: u32, hyper: Value) -> String {
        self.submit_with(name, queue, instances, hyper, |_| {})
            .await
    }

    async fn submit_with(
        &self,
        name: &str,
        queue: &str,
        instances: u32,
        hyper: Value,
        edit: impl FnOnce(&mut SubmitJob),
    ) -> String {
        let mut cmd = submit_command(name, queue, instances, hyper);
        edit(&mut cmd);
        self.service.submit(cmd).await.unwrap().job_id
    }

    /// One loop iteration at the current time, as `Service::pass` runs it: accept, deliver
    /// events, run due work, cycle. The cycle is a pass of its own, so that the jobs it
    /// dispatches can be told from those dispatched before it.
    async fn tick(&mut self) {
        let now = self.clock.now_ms();
        // Advanced to now first, as every call on the shared model is.
        let events = self
            .sagemaker
            .shared()
            .with(|emulator, _| emulator.take_events(now));
        let changes: Vec<TrainingJobState> = if self.deliver_events {
            events
                .iter()
                .map(|event| TrainingJobState::from_sagemaker(&event.detail()).unwrap())
                .map(|mut state| {
                    if self.events_without_selected_type {
                        state.selected_instance_type = None;
                    }
                    state
                })
                .collect()
        } else {
            Vec::new()
        };
        let input = PassInput {
            accept: Some(Accept::all(1_000, 0)),
            changes: &changes,
            due_work: Some(DueWork::all(5_000)),
            ..PassInput::default()
        };
        let pass = self
            .service
            .pass(&self.sagemaker, &self.config, input)
            .await;
        assert!(pass.errors.is_empty(), "{:?}", pass.errors);
        let before: Vec<String> = self.dispatched_ids().await;
        let input = PassInput {
            max_cycles: 1,
            ..PassInput::default()
        };
        let pass = self
            .service
            .pass(&self.sagemaker, &self.config, input)
            .await;
        assert!(pass.errors.is_empty(), "{:?}", pass.errors);
        self.preemptions_reported += pass.cycle_totals().preemptions;
        let records = pass.cycles.into_iter().filter_map(|c| c.decision);
        self.decisions.extend(records.map(|d| *d));
        for id in self.dispatched_ids().await {
            if !before.contains(&id) {
                self.dispatched.push(id);
            }
        }
        self.check_capacity().await;
    }

    async fn dispatched_ids(&self) -> Vec<String> {
        let store = self.service.store();
        store
            .dispatched_jobs()
            .await
            .unwrap()
            .into_iter()
            .map(|j| j.value.job_id)
            .collect()
    }

    /// Invariant: the usage document equals what dispatched jobs hold, within the limit.
    async fn check_capacity(&self) {
        let store = self.service.store();
        let held: u64 = store
            .dispatched_jobs()
            .await
            .unwrap()
            .iter()
            .map(|j| j.value.held_total())
            .sum();
        let usage: u64 = store
            .capacity_in_use()
            .await
            .unwrap()
            .values()
            .map(|u| u.value.total())
            .sum();
        assert_eq!(
            held, usage,
            "usage documents, net of releases, match the dispatched jobs"
        );
        let limit: u64 = store
            .list_resources::<ServiceEnvironment>()
            .await
            .unwrap()
            .iter()
            .flat_map(|e| {
                e.value
                    .capacity_limits
                    .iter()
                    .map(|l| u64::from(l.max_capacity))
            })
            .sum();
        assert!(held <= limit, "capacity overrun: {held} > {limit}");
    }

    /// Ticks every `step_ms` until every job is finished or `max_ms` of virtual time passed.
    async fn run_until_done(&mut self, step_ms: i64, max_ms: i64) {
        let end = self.clock.now_ms() + max_ms;
        while self.clock.now_ms() < end {
            self.tick().await;
            if self.unfinished().await == 0 {
                return;
            }
            self.clock.advance(step_ms);
        }
    }

    async fn unfinished(&self) -> usize {
        let query = trainyard_app::ports::JobQuery {
            limit: 10_000,
            ..Default::default()
        };
        let page = self.service.store().list_jobs(&query).await.unwrap();
        page.items
            .iter()
            .filter(|j| !j.value.status.is_terminal())
            .count()
    }

    async fn job(&self, id: &str) -> trainyard_domain::job::ServiceJob {
        self.service
            .store()
            .get_job(id)
            .await
            .unwrap()
            .unwrap()
            .value
    }
}

/// A submit of a job `name` of `instances` `ml.g5.xlarge` to `queue`; `hyper` goes into the
/// payload's HyperParameters.
fn submit_command(name: &str, queue: &str, instances: u32, hyper: Value) -> SubmitJob {
    let payload = json!({
        "TrainingJobName": name,
        "RoleArn": "arn:aws:iam::000000000000:role/SageMakerRole",
        "AlgorithmSpecification": {"TrainingImage": "img:1", "TrainingInputMode": "File"},
        "HyperParameters": hyper,
        "OutputDataConfig": {"S3OutputPath": "s3://bucket/out"},
        "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": instances, "VolumeSizeInGB": 50},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600}
    });
    SubmitJob {
        job_name: name.into(),
        job_queue: queue.into(),
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
    }
}

fn quick(seconds: u32) -> Value {
    json!({"emulator_duration_s": seconds.to_string()})
}

#[tokio::test]
async fn jobs_run_to_success_in_queue_priority_order_as_capacity_frees() {
    let mut w = World::new(EmulatorConfig::default());
    w.config.record_decisions = true;
    w.environment("local", 2).await;
    for (queue, priority) in [("production", 900), ("research", 500), ("sweeps", 100)] {
        w.queue(queue, priority, "local").await;
    }
    let mut ids = BTreeMap::new();
    // Submitted lowest priority first, so order of submission cannot explain the result.
    for queue in ["sweeps", "research", "production"] {
        for i in 0..4 {
            let id = w.submit(&format!("{queue}-{i}"), queue, 1, quick(2)).await;
            ids.insert(id, queue);
        }
    }
    w.run_until_done(250, 120_000).await;
    for id in ids.keys() {
        let job = w.job(id).await;
        assert_eq!(
            job.status,
            JobStatus::Succeeded,
            "{id}: {:?}",
            job.status_reason
        );
        let attempt = job.latest_attempt().unwrap();
        assert!(
            attempt
                .training_job_arn
                .as_deref()
                .unwrap()
                .contains(":training-job/")
        );
        assert!(job.scheduled_at.is_some() && job.started_at.is_some() && job.stopped_at.is_some());
    }
    let order: Vec<&str> = w.dispatched.iter().map(|id| ids[id]).collect();
    let mut sorted = order.clone();
    sorted.sort_by_key(|q| match *q {
        "production" => 0,
        "research" => 1,
        _ => 2,
    });
    assert_eq!(order, sorted, "dispatched by queue priority");
    assert_every_cycle_replays(&w.decisions);
}

/// A one-instance job of queue `q`, running 600 s, that prefers `ml.p5.48xlarge` and then
/// `ml.g5.xlarge` (`ResourceConfig.InstancePreferences`).
async fn submit_preferring(w: &World) -> String {
    w.submit_with("prefers", "q", 1, quick(600), |cmd| {
        let mut payload: Value = serde_json::from_str(&cmd.service_request_payload).unwrap();
        payload["ResourceConfig"] = json!({
            "InstancePreferences": [
                {"InstanceType": "ml.p5.48xlarge", "InstanceCount": 1},
                {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1}
            ],
            "VolumeSizeInGB": 50
        });
        cmd.service_request_payload = payload.to_string();
    })
    .await
}

/// A job with `InstancePreferences` holds every preferred type from its dispatch (SageMaker may
/// launch any of them), and gives back the others once a state change names the type SageMaker
/// launched: a job waiting for one of those starts while the first still runs. Capacity in use
/// matches what the dispatched jobs hold at every tick.
#[tokio::test]
async fn a_job_with_instance_preferences_gives_back_the_types_not_launched() {
    let mut w = World::new(EmulatorConfig::default());
    w.environment("local", 2).await;
    w.queue("q", 1, "local").await;
    let preferring = submit_preferring(&w).await;
    w.tick().await;
    let held = w.job(&preferring).await;
    assert_eq!(held.held_total(), 2, "both preferences held at dispatch");
    let waiting = w.submit("waits", "q", 1, quick(60)).await;
    for _ in 0..20 {
        w.clock.advance(1_000);
        w.tick().await;
    }
    let first = w.job(&preferring).await;
    assert_eq!(first.status, JobStatus::Running);
    let attempt = first.latest_attempt().unwrap();
    assert_eq!(
        attempt.selected_instance_type.as_deref(),
        Some("ml.p5.48xlarge")
    );
    assert_eq!(
        first.held_instances().into_owned(),
        BTreeMap::from([("ml.p5.48xlarge".to_owned(), 1)])
    );
    let second = w.job(&waiting).await;
    assert!(
        second.status.is_dispatched() || second.status == JobStatus::Succeeded,
        "the instance given back ran the waiting job: {:?} {:?}",
        second.status,
        second.status_reason
    );
    let usage = w.usage("local").await;
    assert_eq!(
        usage.value.instances,
        BTreeMap::from([
            ("ml.g5.xlarge".to_owned(), 1),
            ("ml.p5.48xlarge".to_owned(), 1)
        ]),
        "one of each in use: the launched preference, and the job that took the other"
    );
}

/// When no event named the type SageMaker launched, reconciliation's describe does: the
/// attempt, already RUNNING, gives back the preference it does not use, and the job waiting for
/// that type starts.
#[tokio::test]
async fn reconciliation_gives_back_the_preferences_no_event_named() {
    let mut w = World::new(EmulatorConfig::default());
    w.events_without_selected_type = true;
    w.environment("local", 2).await;
    w.queue("q", 1, "local").await;
    let preferring = submit_preferring(&w).await;
    let waiting = w.submit("waits", "q", 1, quick(60)).await;
    let mut running = w.job(&preferring).await;
    for _ in 0..20 {
        w.clock.advance(500);
        w.tick().await;
        running = w.job(&preferring).await;
        if running.status == JobStatus::Running {
            break;
        }
    }
    assert_eq!(running.status, JobStatus::Running);
    assert_eq!(
        running.held_total(),
        2,
        "no event named the type: both held"
    );
    // Quiet for longer than the reconciliation's first checkpoint (5 s): described.
    for _ in 0..20 {
        w.clock.advance(1_000);
        w.tick().await;
    }
    let narrowed = w.job(&preferring).await;
    assert_eq!(
        narrowed
            .latest_attempt()
            .unwrap()
            .selected_instance_type
            .as_deref(),
        Some("ml.p5.48xlarge")
    );
    assert_eq!(narrowed.held_total(), 1);
    let second = w.job(&waiting).await;
    assert!(
        second.status.is_dispatched() || second.status == JobStatus::Succeeded,
        "the instance given back ran the waiting job: {:?} {:?}",
        second.status,
        second.status_reason
    );
}

#[tokio::test]
async fn a_queue_that_puts_shorter_jobs_first_starts_a_short_job_before_an_older_long_one() {
    let mut w = World::new(EmulatorConfig::default());
    w.environment("local", 1).await;
    let tags = BTreeMap::from([(
        trainyard_domain::queue::SHORTER_FIRST_HOURS_TAG.to_owned(),
        "24".to_owned(),
    )]);
    w.queue_tagged("q", 1, "local", None, tags).await;
    w.queue("plain", 1, "local").await;
    let runtime = |seconds: u32| {
        move |cmd: &mut SubmitJob| {
            cmd.service_request_payload = cmd.service_request_payload.replace(
                "\"MaxRuntimeInSeconds\":3600",
                &format!("\"MaxRuntimeInSeconds\":{seconds}"),
            );
        }
    };
    // Holds the only instance while the other two arrive.
    let first = w.submit_with("first", "q", 1, quick(2), runtime(60)).await;
    w.tick().await;
    let long = w
        .submit_with("long", "q", 1, quick(2), runtime(172_800))
        .await;
    w.clock.advance(1_000);
    let short = w
        .submit_with("short", "q", 1, quick(2), runtime(1_800))
        .await;
    // The offset is the job's own runtime, at most a day; a queue without the tag sets none.
    assert_eq!(w.job(&long).await.line_offset_ms, 86_400_000);
    assert_eq!(w.job(&short).await.line_offset_ms, 1_800_000);
    let plain = w
        .submit_with("plain", "plain", 1, quick(2), runtime(1_800))
        .await;
    assert_eq!(w.job(&plain).await.line_offset_ms, 0);
    w.run_until_done(250, 120_000).await;
    let order: Vec<&str> = w
        .dispatched
        .iter()
        .filter_map(|id| {
            [(&first, "first"), (&short, "short"), (&long, "long")]
                .into_iter()
                .find(|(j, _)| *j == id)
                .map(|(_, n)| n)
        })
        .collect();
    assert_eq!(order, ["first", "short", "long"]);
}

#[tokio::test]
async fn a_capacity_error_requeues_without_using_an_attempt() {
    let mut w = World::new(EmulatorConfig::default());
    w.environment("local", 4).await;
    w.queue("q", 1, "local").await;
    let id = w
        .submit(
            "scarce",
            "q",
            1,
            json!({"emulator_outcome": "CapacityError"}),
        )
        .await;
    // Run a few capacity failures, then check the job waits RUNNABLE with Batch's reason.
    for _ in 0..80 {
        w.tick().await;
        w.clock.advance(250);
    }
    let job = w.job(&id).await;
    assert!(
        job.attempts.len() >= 2,
        "retried on capacity errors: {}",
        job.attempts.len()
    );
    assert!(
        job.status == JobStatus::Runnable || job.status.is_dispatched(),
        "{:?}",
        job.status
    );
    for attempt in &job.attempts[..job.attempts.len() - 1] {
        assert!(
            attempt
                .status_reason
                .as_deref()
                .unwrap()
                .contains("CapacityError"),
            "{attempt:?}"
        );
    }
    let retry = RetryStrategy {
        attempts: 1,
        evaluate_on_exit: vec![],
    };
    assert_eq!(job.retry_strategy, None);
    let _ = retry;
}

#[tokio::test]
async fn account_quota_refusals_requeue_with_the_capacity_reason() {
    let quota = EmulatorConfig {
        account_quotas: [("ml.g5.xlarge".to_owned(), 1)].into(),
        ..EmulatorConfig::default()
    };
    let mut w = World::new(quota);
    w.environment("local", 4).await;
    w.queue("q", 1, "local").await;
    let a = w.submit("a", "q", 1, quick(5)).await;
    let b = w.submit("b", "q", 1, quick(5)).await;
    w.tick().await;
    let waiting = w.job(&b).await;
    assert_eq!(waiting.status, JobStatus::Runnable);
    assert!(
        waiting
            .status_reason
            .as_deref()
            .unwrap()
            .starts_with("CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY")
    );
    assert!(waiting.not_before.is_some(), "backs off");
    w.run_until_done(250, 120_000).await;
    assert_eq!(w.job(&a).await.status, JobStatus::Succeeded);
    assert_eq!(w.job(&b).await.status, JobStatus::Succeeded);
}

#[tokio::test]
async fn evaluate_on_exit_retries_or_exits() {
    let mut w = World::new(EmulatorConfig::default());
    w.environment("local", 4).await;
    w.queue("q", 1, "local").await;
    let failing = json!({"emulator_duration_s": "1", "emulator_outcome": "Failed:AlgorithmError: loss is NaN"});
    let strategy = |action| RetryStrategy {
        attempts: 3,
        evaluate_on_exit: vec![EvaluateOnExit {
            action: Some(action),
            on_status_reason: Some("Received status from SageMaker: AlgorithmError*".into()),
        }],
    };
    let retried = w
        .submit_with("retried", "q", 1, failing.clone(), |c| {
            c.retry_strategy = Some(strategy(RetryAction::Retry))
        })
        .await;
    let exited = w
        .submit_with("exited", "q", 1, failing, |c| {
            c.retry_strategy = Some(strategy(RetryAction::Exit))
        })
        .await;
    w.run_until_done(250, 120_000).await;
    let retried = w.job(&retried).await;
    assert_eq!(
        (retried.status, retried.attempts.len()),
        (JobStatus::Failed, 3)
    );
    assert_eq!(
        retried.status_reason.as_deref(),
        Some("Received status from SageMaker: AlgorithmError: loss is NaN")
    );
    let exited = w.job(&exited).await;
    assert_eq!(
        (exited.status, exited.attempts.len()),
        (JobStatus::Failed, 1)
    );
}

#[tokio::test]
async fn an_attempt_past_its_timeout_is_stopped_and_fails() {
    let mut w = World::new(EmulatorConfig::default());
    w.environment("local", 1).await;
    w.queue("q", 1, "local").await;
    let id = w
        .submit_with("slow", "q", 1, quick(60), |c| {
            c.timeout_config = Some(TimeoutConfig {
                attempt_duration_seconds: Some(3),
            })
        })
        .await;
    w.run_until_done(250, 30_000).await;
    let job = w.job(&id).await;
    assert_eq!(job.status, JobStatus::Failed);
    assert_eq!(
        job.status_reason.as_deref(),
        Some(trainyard_scheduler::retry::TIMEOUT_REASON)
    );
    assert!(
        job.stopped_at.unwrap() - T0 < 10_000,
        "stopped soon after 3 s, not after 60 s"
    );
}

#[tokio::test]
async fn terminate_while_running_stops_the_attempt_and_frees_capacity() {
    let mut w = World::new(EmulatorConfig::default());
    w.environment("local", 1).await;
    w.queue("q", 1, "local").await;
    let running = w.submit("long", "q", 1, quick(600)).await;
    let next = w.submit("next", "q", 1, quick(1)).await;
    for _ in 0..8 {
        w.tick().await;
        w.clock.advance(250);
    }
    assert_eq!(w.job(&running).await.status, JobStatus::Running);
    w.service
        .terminate_job(&running, "wrong dataset")
        .await
        .unwrap();
    let marked = w.job(&running).await;
    assert!(
        marked.is_terminated && marked.status == JobStatus::Running,
        "still holds capacity until stopped"
    );
    w.run_until_done(250, 30_000).await;
    let job = w.job(&running).await;
    assert_eq!(
        (job.status, job.status_reason.as_deref()),
        (JobStatus::Failed, Some("wrong dataset"))
    );
    assert_eq!(
        w.job(&next).await.status,
        JobStatus::Succeeded,
        "the freed instance ran the next job"
    );
}

#[tokio::test]
async fn duplicated_and_reordered_events_change_nothing() {
    let config = EmulatorConfig {
        duplicate_event_rate: 0.7,
        max_event_delay_ms: 1_500,
        seed: 7,
        ..EmulatorConfig::default()
    };
    let mut w = World::new(config);
    w.environment("local", 3).await;
    w.queue("q", 1, "local").await;
    let ids: Vec<String> = futures_lite_join(&w, 9).await;
    w.run_until_done(100, 120_000).await;
    for id in &ids {
        let job = w.job(id).await;
        assert_eq!(
            (job.status, job.attempts.len()),
            (JobStatus::Succeeded, 1),
            "{id}"
        );
    }
    // A late duplicate of an old event for a finished job is ignored.
    let job = w.job(&ids[0]).await;
    let state = TrainingJobState {
        name: job.attempts[0].training_job_name.clone(),
        arn: String::new(),
        status: trainyard_app::ports::TrainingStatus::InProgress,
        secondary: "Training".into(),
        failure_reason: None,
        selected_instance_type: None,
    };
    assert_eq!(
        w.service
            .on_training_state(&state, &w.config)
            .await
            .unwrap(),
        StateOutcome::Ignored
    );
    assert_eq!(w.job(&ids[0]).await.status, JobStatus::Succeeded);
}

async fn futures_lite_join(w: &World, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(w.submit(&format!("job-{i}"), "q", 1, quick(1)).await);
    }
    ids
}

#[tokio::test]
async fn missed_events_are_found_by_reconciliation() {
    let mut w = World::new(EmulatorConfig::default());
    w.deliver_events = false;
    w.environment("local", 2).await;
    w.queue("q", 1, "local").await;
    let ids = futures_lite_join(&w, 4).await;
    w.run_until_done(500, 120_000).await;
    for id in &ids {
        assert_eq!(w.job(id).await.status, JobStatus::Succeeded, "{id}");
    }
}

/// A running attempt whose training job SageMaker no longer has (an emulator restarted without
/// its state) does not stay RUNNING for ever: reconciliation ends it, frees its capacity and
/// requeues the job without using one of its attempts (`retryStrategy` is 1 attempt here), and
/// the job runs again to success.
#[tokio::test]
async fn an_attempt_whose_training_job_vanished_is_requeued_without_using_an_attempt() {
    let mut w = World::new(EmulatorConfig::default());
    w.environment("local", 1).await;
    w.queue("q", 1, "local").await;
    let id = w.submit("gone", "q", 1, quick(30)).await;
    for _ in 0..8 {
        w.tick().await;
        w.clock.advance(1_000);
    }
    let running = w.job(&id).await;
    assert_eq!(running.status, JobStatus::Running, "{running:?}");
    let name = running.latest_attempt().unwrap().training_job_name.clone();
    assert!(
        w.sagemaker
            .shared()
            .with(|emulator, _| emulator.forget_training_job(&name))
    );
    w.run_until_done(1_000, 120_000).await;
    let job = w.job(&id).await;
    assert_eq!(job.status, JobStatus::Succeeded, "{job:?}");
    assert_eq!(job.attempts.len(), 2, "the lost attempt, then one that ran");
    assert_eq!(job.requeued_by, Some(Requeue::Lost));
    let lost = job.attempts[0].status_reason.as_deref().unwrap_or_default();
    assert!(lost.starts_with("LOST - "), "{lost}");
}

/// Batch's limit of 500 active shares per fair-share queue counts the shares whose jobs hold
/// capacity as well as those with jobs waiting: at the limit a new share is refused, and a share
/// whose only job runs may still submit.
#[tokio::test]
async fn a_share_whose_only_job_runs_counts_toward_the_active_share_limit() {
    let w = World::new(EmulatorConfig::default());
    w.environment("gpus", 2).await;
    w.fair_share_queue("research", "gpus").await;
    let world = &w;
    let submit = move |share: String| async move {
        let edit = |cmd: &mut SubmitJob| cmd.share_identifier = Some(share.clone());
        world
            .submit_with(&share, "research", 1, quick(600), edit)
            .await
    };
    submit("team0".into()).await;
    submit("team1".into()).await;
    assert_eq!(w.accept_and_cycle().await.dispatched, 2);
    for i in 2..500 {
        submit(format!("team{i}")).await;
    }
    w.accept_and_cycle().await;
    let store = w.service.store();
    assert_eq!(
        store.holding_shares("research").await.unwrap(),
        ["team0", "team1"]
    );
    assert_eq!(store.runnable_shares("research").await.unwrap().len(), 498);

    let cmd = |share: &str| SubmitJob {
        share_identifier: Some(share.into()),
        ..submit_command("late", "research", 1, quick(600))
    };
    let refused = w.service.submit(cmd("team500")).await.unwrap_err();
    assert!(refused.to_string().contains("has 500 already"), "{refused}");
    w.service.submit(cmd("team0")).await.unwrap();
}

#[tokio::test]
async fn a_cycle_reports_the_borrowers_it_held_back_for_its_entitled_starts() {
    let w = World::new(EmulatorConfig::default());
    w.lender_and_borrower().await;
    // The owner's job and the borrower's first two start within their limits; the borrower's
    // third would borrow the owner's idle instance, and waits a cycle for them.
    w.submit_with("o0", "teams", 1, quick(60), quota("owner"))
        .await;
    for i in 0..3 {
        w.submit_with(&format!("b{i}"), "teams", 1, quick(60), quota("borrower"))
            .await;
    }
    let first = w.accept_and_cycle().await;
    assert_eq!(
        (first.dispatched, first.borrowers_held),
        (3, 1),
        "{first:?}"
    );
    let second = w.accept_and_cycle().await;
    assert_eq!(
        (second.dispatched, second.borrowers_held),
        (1, 0),
        "{second:?}"
    );
}

#[tokio::test]
async fn a_lender_reclaims_borrowed_capacity_by_preemption_and_the_victims_finish_later() {
    let mut w = World::new(EmulatorConfig::default());
    w.config.planner.min_runtime_before_preemption_s = 2;
    w.config.record_decisions = true;
    w.lender_and_borrower().await;

    // The borrower fills the whole pool: two on its own quota, two borrowed from the owner.
    let mut borrowed = Vec::new();
    for i in 0..4 {
        borrowed.push(
            w.submit_with(&format!("b{i}"), "teams", 1, quick(20), quota("borrower"))
                .await,
        );
    }
    for _ in 0..20 {
        w.tick().await;
        w.clock.advance(250);
    }
    let running = w.dispatched_ids().await;
    assert_eq!(running.len(), 4, "idle capacity was lent");

    // The owner wants its two instances back.
    let mut owned = Vec::new();
    for i in 0..2 {
        owned.push(
            w.submit_with(&format!("o{i}"), "teams", 1, quick(1), quota("owner"))
                .await,
        );
    }
    w.run_until_done(250, 300_000).await;
    for id in borrowed.iter().chain(&owned) {
        assert_eq!(w.job(id).await.status, JobStatus::Succeeded, "{id}");
    }
    let mut preempted = 0;
    for id in &borrowed {
        let job = w.job(id).await;
        if let Some(summary) = &job.preemption_summary {
            preempted += summary.preempted_attempt_count;
            assert_eq!(job.attempts.len(), 2, "preempted once, then ran again");
            assert_eq!(job.requeued_by, Some(Requeue::Preemption), "{id}");
            assert_eq!(
                job.attempts[0].stop_requested,
                Some(StopRequest::Preemption),
                "{id}"
            );
        }
    }
    assert_eq!(
        preempted, 2,
        "exactly the two borrowed instances were reclaimed"
    );
    // Cycles during the victims' stop grace plan the same preemptions again; only the first
    // stop request of each counts.
    assert_eq!(w.preemptions_reported, 2, "each preemption reported once");
    let owners_started: Vec<i64> = futures_started(&w, &owned).await;
    let borrowers_done: Vec<i64> = futures_stopped(&w, &borrowed).await;
    assert!(
        owners_started
            .iter()
            .all(|s| borrowers_done.iter().filter(|d| *d > s).count() >= 2),
        "the owner started before the borrower's preempted jobs finished"
    );
    let usage = w.usage("teams-env").await.value;
    assert_eq!(
        (usage.total(), usage.quota_shares.len()),
        (0, 0),
        "every dispatch's instances, the shares' included, were given back: {usage:?}"
    );
    let preempting = assert_every_cycle_replays(&w.decisions);
    assert!(preempting > 0, "the preempting cycles were recorded");
}

/// A cycle that preempts lists the candidates' checkpoints (the emulator's bucket stands in for
/// S3) and stops the borrowed job that loses least; that job keeps its place in line, and its
/// next attempt resumes from its checkpoint under the same `CheckpointConfig.S3Uri`.
#[tokio::test]
async fn the_victim_is_the_borrowed_job_with_the_newest_checkpoint_and_it_resumes_from_it() {
    let mut w = World::new(EmulatorConfig::default()); // training starts 400 ms after launch
    w.config.planner.min_runtime_before_preemption_s = 2;
    w.config.record_decisions = true;
    w.lender_and_borrower().await;
    // Four borrower jobs start, two within the share's limit and then two borrowed (b2, b3). Only b3 checkpoints (every 4 s of training); b2 publishes nothing.
    let ids = w
        .checkpointing_borrowers(30, |i, hyper| {
            if i == 3 {
                hyper["emulator_checkpoint_interval_s"] = json!("4");
            }
        })
        .await;
    // The owner's share is within its limit first; it borrows from the next cycle on.
    w.tick().await;
    assert_eq!(w.dispatched_ids().await.len(), 2, "within the limit first");
    w.tick().await;
    assert_eq!(w.dispatched_ids().await.len(), 4, "idle capacity was lent");
    let place = w.job(&ids[3]).await.runnable_at;
    // 6 s later, b3 saved at 4.4 s and would lose 1.6 s; b2 would lose 6 s.
    for _ in 0..24 {
        w.clock.advance(250);
        w.tick().await;
    }
    let owner = w
        .submit_with("o0", "teams", 1, quick(1), quota("owner"))
        .await;
    w.run_until_done(250, 300_000).await;
    let (b2, b3) = (w.job(&ids[2]).await, w.job(&ids[3]).await);
    assert_eq!(w.job(&owner).await.status, JobStatus::Succeeded);
    assert!(b2.preemption_summary.is_none(), "{b2:?}");
    assert_eq!(b3.requeued_by, Some(Requeue::Preemption), "{b3:?}");
    assert_eq!(b3.attempts.len(), 2);
    assert_eq!(b3.status, JobStatus::Succeeded);
    assert_eq!(
        b3.runnable_at, place,
        "a preempted job keeps its place in line"
    );
    // The second attempt resumed from the first one's checkpoint (4 s of training).
    let second = b3.attempts[1].training_job_name.clone();
    let progress = w
        .sagemaker
        .shared()
        .with(|emulator, _| emulator.checkpoint_progress(&second));
    assert_eq!(progress.map(|p| p.resumed_ms), Some(4_000));
    // It was launched under the same checkpoint URI, told it is attempt 2 after a preemption.
    let described = w.sagemaker.shared().with(|emulator, _| {
        emulator
            .describe_training_job(&second, trainyard_emulator::model::TimeFormat::EpochSeconds)
            .unwrap()
    });
    assert_eq!(described["CheckpointConfig"]["S3Uri"], "s3://ckpt/b3");
    let environment = &described["Environment"];
    assert_eq!(environment["TRAINYARD_ATTEMPT"], "2", "{described}");
    assert_eq!(environment["TRAINYARD_PREEMPTIONS"], "1");
    assert_eq!(environment["TRAINYARD_JOB_ID"], ids[3].as_str());
    // The preempting cycle recorded what it saw and what the victim lost.
    let preempting: Vec<_> = w
        .decisions
        .iter()
        .flat_map(|d| &d.plan.preemptions)
        .collect();
    let first = preempting.first().expect("a preempting cycle was recorded");
    assert_eq!(first.victim_job_id.as_str(), ids[3]);
    assert!(first.checkpoint_ms.is_some(), "{first:?}");
    assert!(first.lost_instance_s < 300 + 6, "{first:?}");
    assert_every_cycle_replays(&w.decisions);
}

/// A victim stays the victim while it stops: the cycles during its stop grace choose it again
/// (it loses nothing more) rather than another borrowed job that has since become cheaper, so
/// one owner's wait stops one job.
#[tokio::test]
async fn the_cycles_during_a_victims_stop_choose_it_again_rather_than_a_newly_cheaper_job() {
    let mut w = World::new(EmulatorConfig {
        stop_grace_ms: 5_000,
        ..EmulatorConfig::default()
    }); // training starts 400 ms after launch
    w.config.planner.min_runtime_before_preemption_s = 2;
    w.config.record_decisions = true;
    w.lender_and_borrower().await;
    // Four borrower jobs start, two within the share's limit and then two borrowed: b2 saves
    // every 4 s of training, b3 every 6 s.
    let ids = w
        .checkpointing_borrowers(60, |i, hyper| {
            if i >= 2 {
                let every = if i == 2 { "4" } else { "6" };
                hyper["emulator_checkpoint_interval_s"] = json!(every);
                hyper["emulator_checkpoint_on_stop"] = json!("false");
            }
        })
        .await;
    w.tick().await;
    w.tick().await;
    assert_eq!(w.dispatched_ids().await.len(), 4, "idle capacity was lent");
    // 6.9 s later (6.5 s of training): b3 saved 0.5 s ago, b2 2.5 s ago, so b3 goes. 1.5 s on,
    // while b3 stops, b2 saves and would lose less than b3 now does.
    for _ in 0..(6_900 / 250) {
        w.clock.advance(250);
        w.tick().await;
    }
    let owner = w
        .submit_with("o0", "teams", 1, quick(1), quota("owner"))
        .await;
    w.run_until_done(250, 300_000).await;
    assert_eq!(w.job(&owner).await.status, JobStatus::Succeeded);
    let (b2, b3) = (w.job(&ids[2]).await, w.job(&ids[3]).await);
    assert_eq!(b3.requeued_by, Some(Requeue::Preemption), "{b3:?}");
    assert!(
        b2.preemption_summary.is_none(),
        "b2 was not stopped too: {b2:?}"
    );
    // The cycles during b3's stop chose it again: b2 was the cheaper candidate in some.
    let chosen: Vec<&str> = w
        .decisions
        .iter()
        .flat_map(|d| &d.plan.preemptions)
        .map(|p| p.victim_job_id.as_str())
        .collect();
    assert!(chosen.len() > 1, "{chosen:?}");
    assert!(chosen.iter().all(|v| *v == ids[3]), "{chosen:?}");
    let b2_cheaper = w.decisions.iter().any(|d| {
        let running = |id: &str| d.snapshot.running.iter().find(|r| r.job_id.as_str() == id);
        let (Some(b2), Some(b3)) = (running(&ids[2]), running(&ids[3])) else {
            return false;
        };
        b3.stopping && b2.checkpoint_ms > b3.checkpoint_ms
    });
    assert!(
        b2_cheaper,
        "some cycle saw b2 save after b3 was asked to stop"
    );
}

/// Checks that every decision record, read back from its JSON, plans again to its decisions
/// and matches its digest; returns how many of them preempt. Also that the check can fail: a
/// record whose plan or snapshot was altered does not pass it.
fn assert_every_cycle_replays(decisions: &[DecisionRecord]) -> usize {
    assert!(!decisions.is_empty(), "cycles were recorded");
    for record in decisions {
        let json = serde_json::to_string(record).unwrap();
        let read: DecisionRecord = serde_json::from_str(&json).unwrap();
        assert_eq!(&read, record, "a record reads back as written");
        assert!(
            read.intact(),
            "cycle {}: snapshot matches its digest",
            read.id
        );
        let replay = read.replay(None);
        assert!(
            replay.same,
            "cycle {} replays: {:?} vs {:?}",
            read.id, replay.plan, read.plan
        );
    }
    let deciding = decisions
        .iter()
        .find(|d| !d.plan.dispatches.is_empty())
        .expect("some cycle dispatched");
    let mut altered = deciding.clone();
    altered.plan.dispatches.pop();
    assert!(
        !altered.replay(None).same,
        "a plan that is not the planner's is told apart"
    );
    altered.snapshot.pending.pop();
    assert!(!altered.intact(), "an altered snapshot is told apart");
    decisions
        .iter()
        .filter(|d| !d.plan.preemptions.is_empty())
        .count()
}

async fn futures_started(w: &World, ids: &[String]) -> Vec<i64> {
    let mut out = Vec::new();
    for id in ids {
        out.push(w.job(id).await.scheduled_at.unwrap());
    }
    out
}

async fn futures_stopped(w: &World, ids: &[String]) -> Vec<i64> {
    let mut out = Vec::new();
    for id in ids {
        out.push(w.job(id).await.stopped_at.unwrap());
    }
    out
}

/// A backend that counts CreateTrainingJob calls per name and refuses a second one the way
/// SageMaker does.
#[derive(Default)]
struct CountingSageMaker {
    created: Mutex<BTreeMap<String, usize>>,
}

impl TrainingBackend for CountingSageMaker {
    async fn create_training_job(&self, request: Value) -> Result<String, BackendError> {
        let name = request["TrainingJobName"].as_str().unwrap().to_owned();
        let mut created = self.created.lock().unwrap();
        let count = created.entry(name.clone()).or_insert(0);
        *count += 1;
        if *count > 1 {
            return Err(BackendError::AlreadyExists(name));
        }
        Ok(format!(
            "arn:aws:sagemaker:us-east-1:000000000000:training-job/{name}"
        ))
    }
    async fn describe_training_job(&self, name: &str) -> Result<TrainingJobState, BackendError> {
        Ok(TrainingJobState {
            name: name.into(),
            arn: format!("arn:aws:sagemaker:us-east-1:000000000000:training-job/{name}"),
            status: trainyard_app::ports::TrainingStatus::InProgress,
            secondary: "Starting".into(),
            failure_reason: None,
            selected_instance_type: None,
        })
    }
    async fn stop_training_job(&self, _name: &str) -> Result<(), BackendError> {
        Ok(())
    }
}

type Interleaved = Arc<Interleaving<MemoryStore>>;

/// A service over `store` on the shared clock and ids.
fn interleaved_service(
    store: &Interleaved,
    clock: &Arc<ManualClock>,
    ids: &Arc<SequentialIds>,
) -> Service<Interleaved, NoEvents> {
    Service::new(
        store.clone(),
        NoEvents,
        clock.clone(),
        ids.clone(),
        ArnContext::default(),
    )
}

/// A store that interleaves joined use-cases, holding an environment `local` of `capacity`
/// instances, a FIFO queue `q` on it, and `jobs` one-instance jobs RUNNABLE there.
async fn interleaved_backlog(
    capacity: u32,
    jobs: usize,
) -> (Interleaved, Arc<ManualClock>, Arc<SequentialIds>) {
    let clock = Arc::new(ManualClock::new(T0));
    let store = Arc::new(Interleaving::new(MemoryStore::new()));
    let ids = Arc::new(SequentialIds::default());
    let service = interleaved_service(&store, &clock, &ids);
    let world = World::new(EmulatorConfig::default());
    let env = ServiceEnvironment {
        service_environment_name: "local".into(),
        service_environment_type: ServiceEnvironmentType::SagemakerTraining,
        state: State::Enabled,
        status: ResourceStatus::Valid,
        capacity_limits: vec![CapacityLimit {
            max_capacity: capacity,
            capacity_unit: "NUM_INSTANCES".into(),
        }],
        tags: BTreeMap::new(),
        created_at: T0,
    };
    store.create_resource(&env).await.unwrap();
    world.queue("q", 1, "local").await;
    let queue = world
        .service
        .store()
        .get_resource::<JobQueue>("q")
        .await
        .unwrap()
        .unwrap()
        .value;
    store.create_resource(&queue).await.unwrap();
    for i in 0..jobs {
        let name = format!("j{i}");
        let cmd = SubmitJob {
            service_request_payload: json!({
                "TrainingJobName": name,
                "RoleArn": "arn:aws:iam::000000000000:role/R",
                "OutputDataConfig": {"S3OutputPath": "s3://b/o"},
                "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1}
            })
            .to_string(),
            ..submit_command(&name, "q", 1, json!({}))
        };
        service.submit(cmd).await.unwrap();
    }
    service.accept_submitted(100, 0).await.unwrap();
    (store, clock, ids)
}

#[tokio::test]
async fn two_cycles_at_once_never_overrun_capacity_or_launch_twice() {
    // The second cycle starts `lag` store calls after the first, so that across the lags its
    // snapshot straddles the first cycle's commits in every possible way.
    let mut raced = 0;
    for (capacity, lag) in [1u32, 3]
        .into_iter()
        .flat_map(|c| (0..24).map(move |l| (c, l)))
    {
        // The environment and queue, and ten one-instance jobs waiting.
        let (store, clock, ids) = interleaved_backlog(capacity, 10).await;
        let a = interleaved_service(&store, &clock, &ids);
        let b = interleaved_service(&store, &clock, &ids);

        let backend = CountingSageMaker::default();
        let config = CycleConfig::default();
        let late_b = async {
            for _ in 0..lag {
                tokio::task::yield_now().await;
            }
            b.run_cycle(&backend, &config).await
        };
        let (ra, rb) = tokio::join!(a.run_cycle(&backend, &config), late_b);
        let (ra, rb) = (ra.unwrap(), rb.unwrap());
        raced += ra.conflicts + rb.conflicts;

        let dispatched = store.dispatched_jobs().await.unwrap();
        assert!(
            dispatched.len() <= capacity as usize,
            "lag {lag}: capacity overrun"
        );
        let usage = store
            .get_document::<EnvironmentUsage>("local")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(usage.value.total(), dispatched.len() as u64, "lag {lag}");
        assert_eq!(ra.dispatched + rb.dispatched, dispatched.len(), "lag {lag}");
        let created = backend.created.lock().unwrap();
        assert_eq!(created.len(), dispatched.len(), "lag {lag}");
        assert!(
            created.values().all(|n| *n == 1),
            "lag {lag}: launched twice: {created:?}"
        );
    }
    assert!(raced > 0, "the cycles really raced");
}

/// A burst of job endings, all at once: each ending writes its own release beside its job, so
/// none waits for or conflicts with another (on one versioned usage document, more endings at
/// once than a use-case's retries failed), the capacity is free for whoever reads it at once,
/// and the next cycle folds every release into the usage document.
#[tokio::test]
async fn a_burst_of_job_endings_never_conflicts_and_the_next_cycle_folds_it() {
    const JOBS: usize = 16;
    let (store, clock, ids) = interleaved_backlog(JOBS as u32, JOBS).await;
    let service = interleaved_service(&store, &clock, &ids);
    let backend = CountingSageMaker::default();
    let config = CycleConfig::default();
    assert_eq!(
        service
            .run_cycle(&backend, &config)
            .await
            .unwrap()
            .dispatched,
        JOBS
    );
    let names: Vec<String> = store
        .dispatched_jobs()
        .await
        .unwrap()
        .iter()
        .map(|j| j.value.attempts[0].training_job_name.clone())
        .collect();
    assert_eq!(names.len(), JOBS);

    clock.advance(60_000);
    let endings = names.iter().map(|name| {
        let state = TrainingJobState {
            name: name.clone(),
            arn: String::new(),
            status: trainyard_app::ports::TrainingStatus::Completed,
            secondary: "Completed".into(),
            failure_reason: None,
            selected_instance_type: None,
        };
        let service = &service;
        let config = &config;
        async move { service.on_training_state(&state, config).await }
    });
    let outcomes = futures::future::join_all(endings).await;
    for outcome in outcomes {
        assert_eq!(
            outcome.unwrap(),
            StateOutcome::Applied(JobStatus::Succeeded)
        );
    }
    assert!(store.dispatched_jobs().await.unwrap().is_empty());
    let net = store.capacity_in_use().await.unwrap();
    assert_eq!(
        net["local"].value.total(),
        0,
        "free as soon as the jobs ended"
    );
    let releases = store.list_documents::<CapacityRelease>().await.unwrap();
    assert_eq!(
        releases.len(),
        JOBS,
        "one release per ending, not yet folded"
    );

    service.run_cycle(&backend, &config).await.unwrap();
    let usage = store
        .get_document::<EnvironmentUsage>("local")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(usage.value.total(), 0, "folded into the usage document");
    let releases = store.list_documents::<CapacityRelease>().await.unwrap();
    assert!(releases.is_empty(), "and deleted: {releases:?}");
}

#[tokio::test]
async fn a_pass_accepts_then_cycles_again_while_cycles_dispatch() {
    let w = World::new(EmulatorConfig::default());
    w.environment("local", 4).await;
    w.queue("research", 500, "local").await;
    for i in 0..3 {
        w.submit(&format!("r-{i}"), "research", 1, quick(60)).await;
    }
    let input = PassInput {
        accept: Some(Accept::all(2, 0)),
        max_cycles: 5,
        ..PassInput::default()
    };
    let pass = w.service.pass(&w.sagemaker, &w.config, input).await;
    assert!(pass.errors.is_empty(), "{:?}", pass.errors);
    assert_eq!(pass.accepted, 3, "batches of 2 until one came back short");
    let dispatched: Vec<usize> = pass.cycles.iter().map(|c| c.dispatched).collect();
    assert_eq!(
        dispatched,
        vec![3, 0],
        "a cycle that dispatched is followed by one more; one that dispatched nothing ends the pass"
    );
    assert!(!pass.out_of_time);
}

#[tokio::test]
async fn a_pass_asks_its_gate_before_each_cycle() {
    let w = World::new(EmulatorConfig::default());
    w.environment("local", 4).await;
    w.queue("research", 500, "local").await;
    for i in 0..3 {
        w.submit(&format!("r-{i}"), "research", 1, quick(60)).await;
    }
    let asked = Mutex::new(Vec::new());
    let gate = |so_far: &PassReport| {
        asked.lock().unwrap().push(so_far.cycles.len());
        so_far.cycles.is_empty()
    };
    let input = PassInput {
        accept: Some(Accept::all(10, 0)),
        max_cycles: 5,
        cycle_gate: Some(&gate),
        ..PassInput::default()
    };
    let pass = w.service.pass(&w.sagemaker, &w.config, input).await;
    assert!(pass.errors.is_empty(), "{:?}", pass.errors);
    let dispatched: Vec<usize> = pass.cycles.iter().map(|c| c.dispatched).collect();
    assert_eq!(dispatched, vec![3], "the gate refused the second cycle");
    assert_eq!(
        *asked.lock().unwrap(),
        vec![0, 1],
        "asked before the first and the second"
    );
}

#[tokio::test]
async fn a_pass_starts_no_step_at_or_after_its_deadline() {
    let w = World::new(EmulatorConfig::default());
    w.environment("local", 4).await;
    w.queue("research", 500, "local").await;
    w.submit("r-0", "research", 1, quick(60)).await;
    let input = PassInput {
        accept: Some(Accept::all(10, 0)),
        due_work: Some(DueWork::all(0)),
        max_cycles: 1,
        deadline_ms: Some(w.clock.now_ms()),
        ..PassInput::default()
    };
    let pass = w.service.pass(&w.sagemaker, &w.config, input).await;
    assert_eq!(pass.accepted, 0);
    assert!(pass.due.is_none() && pass.cycles.is_empty(), "{pass:?}");
    assert!(pass.out_of_time);
}

#[tokio::test]
async fn a_requeue_and_a_stop_request_are_recorded_as_types() {
    let mut w = World::new(EmulatorConfig::default());
    w.environment("local", 4).await;
    w.queue("q", 1, "local").await;
    let scarce = w
        .submit(
            "scarce",
            "q",
            1,
            json!({"emulator_outcome": "CapacityError"}),
        )
        .await;
    let failing = json!({"emulator_duration_s": "1", "emulator_outcome": "Failed:AlgorithmError: loss is NaN"});
    let retried = w
        .submit_with("retried", "q", 1, failing, |c| {
            c.retry_strategy = Some(RetryStrategy {
                attempts: 2,
                evaluate_on_exit: vec![],
            })
        })
        .await;
    let slow = w
        .submit_with("slow", "q", 1, quick(60), |c| {
            c.timeout_config = Some(TimeoutConfig {
                attempt_duration_seconds: Some(3),
            })
        })
        .await;
    for _ in 0..80 {
        w.tick().await;
        w.clock.advance(250);
    }
    let scarce = w.job(&scarce).await;
    assert!(scarce.attempts.len() >= 2, "{scarce:?}");
    assert_eq!(scarce.requeued_by, Some(Requeue::CapacityError));
    let retried = w.job(&retried).await;
    assert_eq!(retried.attempts.len(), 2, "{retried:?}");
    assert_eq!(retried.requeued_by, Some(Requeue::Retry));
    let slow = w.job(&slow).await;
    assert_eq!(slow.status, JobStatus::Failed);
    assert_eq!(slow.requeued_by, None, "never went back to RUNNABLE");
    assert_eq!(slow.attempts[0].stop_requested, Some(StopRequest::Timeout));
}

/// The usage document says the environment is full, but no job holding capacity shows in the
/// index yet (an eventually consistent index right after the dispatches that filled it): the
/// plan charges the document, not the index, so it plans nothing (and the dispatch commit,
/// which checks the document's totals, would refuse what it did plan).
#[tokio::test]
async fn a_plan_from_a_lagging_index_cannot_over_commit_the_environment() {
    let w = World::new(EmulatorConfig::default());
    w.environment("local", 2).await;
    w.queue("q", 1, "local").await;
    let full = EnvironmentUsage {
        environment: "local".into(),
        instances: [("ml.g5.xlarge".to_owned(), 2)].into(),
        ..EnvironmentUsage::default()
    };
    w.put_usage(&full, 0).await;
    for i in 0..2 {
        w.submit(&format!("late-{i}"), "q", 1, quick(60)).await;
    }
    let cycle = w.accept_and_cycle().await;
    assert_eq!(
        (cycle.dispatched, cycle.over_limit),
        (0, 0),
        "the plan saw the environment full"
    );
    let usage = w.usage("local").await;
    assert_eq!(
        usage.value.total(),
        2,
        "nothing was added to a full environment"
    );

    // Once the capacity is really given back, the jobs start.
    let empty = EnvironmentUsage {
        environment: "local".into(),
        ..EnvironmentUsage::default()
    };
    w.put_usage(&empty, usage.version).await;
    w.clock.advance(1_000);
    assert_eq!(w.accept_and_cycle().await.dispatched, 2);
}

/// A quota share's usage document says it holds its whole limit, but the index shows none of
/// its jobs holding capacity (an eventually consistent index right after the dispatches): the
/// plan admits more of the share's jobs, and the dispatch commit, checking the share's stored
/// usage, refuses them while the environment itself still has room.
#[tokio::test]
async fn a_plan_from_a_lagging_index_cannot_over_commit_a_quota_share() {
    let w = World::new(EmulatorConfig::default());
    w.quota_queue("teams", 8, &[("owner", SharingStrategy::Reserve)])
        .await;
    let mut full = EnvironmentUsage {
        environment: "teams-env".into(),
        instances: [("ml.g5.xlarge".to_owned(), 2)].into(),
        ..EnvironmentUsage::default()
    };
    full.quota_shares.insert(
        quota_share_key("teams", "owner"),
        [("ml.g5.xlarge".to_owned(), 2)].into(),
    );
    w.put_usage(&full, 0).await;
    for i in 0..2 {
        w.submit_with(&format!("late-{i}"), "teams", 1, quick(60), |c| {
            c.quota_share_name = Some("owner".into())
        })
        .await;
    }
    let cycle = w.accept_and_cycle().await;
    assert_eq!(
        (cycle.dispatched, cycle.over_limit),
        (0, 2),
        "the plan admitted both; the commit refused both"
    );
    let usage = w.usage("teams-env").await;
    assert_eq!(usage.value, full, "nothing was added to a full share");
}

/// A fair share's usage record is written when what the share holds changes, not every cycle:
/// a share that runs two jobs at once and then goes idle costs two writes over 40 cycles. The
/// usage it then records is the exact integral of what it held, as rewriting it every cycle
/// would have given.
#[tokio::test]
async fn a_fair_share_record_is_written_only_when_what_its_share_holds_changes() {
    let mut w = World::new(EmulatorConfig::default());
    w.environment("local", 4).await;
    w.fair_share_queue("fs", "local").await;
    for i in 0..2 {
        w.submit_with(&format!("a-{i}"), "fs", 1, quick(60), |c| {
            c.share_identifier = Some("a".into())
        })
        .await;
    }
    let mut seen: Vec<(u64, u64)> = Vec::new();
    let mut records = Vec::new();
    for _ in 0..40 {
        w.tick().await;
        w.clock.advance(5_000);
        let stored = w
            .service
            .store()
            .list_documents::<ShareUsageRecord>()
            .await
            .unwrap();
        if let [record] = stored.as_slice()
            && seen.last() != Some(&(record.version, record.value.held))
        {
            seen.push((record.version, record.value.held));
            records.push(record.value.clone());
        }
    }
    assert_eq!(
        seen,
        [(1, 2), (2, 0)],
        "written when the share took 2 instances and when it gave them back"
    );
    let (start, end) = (records[0].usage.at_ms, records[1].usage.at_ms);
    let lambda = std::f64::consts::LN_2 / 600.0;
    let held_s = (end - start) as f64 / 1000.0;
    let expected = 2.0 * (1.0 - (-lambda * held_s).exp()) / lambda;
    let recorded = records[1].usage.instance_seconds;
    assert!(
        (recorded - expected).abs() < 1e-9 * expected,
        "{recorded} instance-seconds recorded, {expected} held"
    );
}

/// A share's record counts what its running jobs held when the cycle began together with what
/// the cycle dispatched to it: a second job of a share that already runs one brings it to 2.
#[tokio::test]
async fn a_fair_share_record_adds_a_cycles_dispatches_to_what_its_share_held() {
    let mut w = World::new(EmulatorConfig::default());
    w.environment("local", 4).await;
    w.fair_share_queue("fs", "local").await;
    let share_a = |c: &mut SubmitJob| c.share_identifier = Some("a".into());
    let mut held = Vec::new();
    for i in 0..2 {
        w.submit_with(&format!("a-{i}"), "fs", 1, quick(3600), share_a)
            .await;
        w.tick().await;
        w.clock.advance(5_000);
        let stored = w.service.store().list_documents::<ShareUsageRecord>();
        let stored = stored.await.unwrap();
        held.extend(stored.iter().map(|r| (r.version, r.value.held)));
    }
    assert_eq!(held, [(1, 1), (2, 2)], "1 held, then 1 + 1 dispatched");
}

/// Two passes that each believe they hold the scheduler lease (the first paused past its lease
/// while the second took it): once the newer holder has dispatched, the stale one dispatches
/// nothing; once the newer lease has lapsed, any pass dispatches again.
#[tokio::test]
async fn a_pass_holding_a_stale_lease_stands_aside_for_the_newer_holder() {
    let w = World::new(EmulatorConfig::default());
    w.environment("local", 4).await;
    w.queue("q", 1, "local").await;
    let now = w.clock.now_ms();
    let newer = Fence {
        token: 2,
        until_ms: now + 70_000,
    };
    let stale = Fence {
        token: 1,
        until_ms: now + 1_000,
    };
    let pass_with = |fence| PassInput {
        fence: Some(fence),
        ..accept_and_cycle()
    };
    w.submit("first", "q", 1, quick(600)).await;
    let first = w
        .service
        .pass(&w.sagemaker, &w.config, pass_with(newer))
        .await;
    assert_eq!(first.cycle_totals().dispatched, 1);

    w.submit("second", "q", 1, quick(600)).await;
    let fenced = w
        .service
        .pass(&w.sagemaker, &w.config, pass_with(stale))
        .await;
    assert!(fenced.errors.is_empty(), "{:?}", fenced.errors);
    let totals = fenced.cycle_totals();
    assert_eq!((totals.dispatched, totals.fenced), (0, true), "{totals:?}");

    w.clock.advance(70_000);
    let after = w
        .service
        .pass(&w.sagemaker, &w.config, pass_with(stale))
        .await;
    let totals = after.cycle_totals();
    assert_eq!((totals.dispatched, totals.fenced), (1, false), "{totals:?}");
}

/// SageMaker as the emulator plays it, with checkpoint listings that take a while (they yield
/// a few times, as a network call would) and a count of how many were in flight at once.
struct SlowListings {
    inner: EmulatedSageMaker,
    in_flight: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
    listed: std::sync::atomic::AtomicUsize,
}

impl TrainingBackend for SlowListings {
    async fn create_training_job(&self, request: Value) -> Result<String, BackendError> {
        self.inner.create_training_job(request).await
    }
    async fn describe_training_job(&self, name: &str) -> Result<TrainingJobState, BackendError> {
        self.inner.describe_training_job(name).await
    }
    async fn stop_training_job(&self, name: &str) -> Result<(), BackendError> {
        self.inner.stop_training_job(name).await
    }
    async fn latest_checkpoint(
        &self,
        s3_uri: &str,
    ) -> Result<Option<ObservedCheckpoint>, BackendError> {
        use std::sync::atomic::Ordering::SeqCst;
        let now = self.in_flight.fetch_add(1, SeqCst) + 1;
        self.most.fetch_max(now, SeqCst);
        self.listed.fetch_add(1, SeqCst);
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
        let found = self.inner.latest_checkpoint(s3_uri).await;
        self.in_flight.fetch_sub(1, SeqCst);
        found
    }
}

/// A preempting cycle lists its candidates' checkpoints a bounded number at a time, not one
/// after another: 20 borrowed jobs with checkpoint URIs, listed at most 16 at once.
#[tokio::test]
async fn a_preempting_cycle_lists_checkpoints_side_by_side() {
    use std::sync::atomic::Ordering::SeqCst;
    let mut w = World::new(EmulatorConfig::default());
    w.config.planner.min_runtime_before_preemption_s = 0;
    let shares = [
        ("owner", SharingStrategy::Lend),
        ("borrower", SharingStrategy::LendAndBorrow),
    ];
    w.quota_queue("teams", 24, &shares).await;
    for i in 0..24 {
        w.submit_with(&format!("b{i}"), "teams", 1, quick(600), |cmd| {
            quota("borrower")(cmd);
            let mut payload: Value = serde_json::from_str(&cmd.service_request_payload).unwrap();
            payload["CheckpointConfig"] = json!({"S3Uri": format!("s3://ckpt/b{i}")});
            cmd.service_request_payload = payload.to_string();
        })
        .await;
    }
    for _ in 0..5 {
        w.tick().await;
        w.clock.advance(250);
    }
    assert_eq!(w.dispatched_ids().await.len(), 24);
    w.submit_with("o0", "teams", 1, quick(600), quota("owner"))
        .await;
    let backend = SlowListings {
        inner: w.sagemaker.clone(),
        in_flight: Default::default(),
        most: Default::default(),
        listed: Default::default(),
    };
    let pass = w
        .service
        .pass(&backend, &w.config, accept_and_cycle())
        .await;
    assert!(pass.errors.is_empty(), "{:?}", pass.errors);
    assert_eq!(pass.cycle_totals().preemptions, 1, "the owner reclaims one");
    assert_eq!(
        backend.listed.load(SeqCst),
        24,
        "every running job of the queue"
    );
    assert_eq!(
        backend.most.load(SeqCst),
        trainyard_app::service::scheduling::CHECKPOINT_LISTINGS_AT_ONCE,
        "listed side by side, at most the bound at once"
    );
}

/// SageMaker as the emulator plays it, except that the first launch lets a newer holder of the
/// scheduler lease commit to `environment`'s usage document first (its fence recorded there), as
/// a pass started after this one's snapshot would.
struct NewerHolderDispatchesDuringLaunch {
    inner: EmulatedSageMaker,
    store: Arc<MemoryStore>,
    environment: String,
    newer: Fence,
    done: Mutex<bool>,
}

impl TrainingBackend for NewerHolderDispatchesDuringLaunch {
    async fn create_training_job(&self, request: Value) -> Result<String, BackendError> {
        let first = !std::mem::replace(&mut *self.done.lock().unwrap(), true);
        if first {
            let usage: Versioned<EnvironmentUsage> = self
                .store
                .get_document(&self.environment)
                .await
                .unwrap()
                .unwrap();
            let mut fenced = usage.value.clone();
            fenced.fence = Some(self.newer);
            let write = Write::document(&fenced, usage.version).unwrap();
            self.store.commit(&[write]).await.unwrap();
        }
        self.inner.create_training_job(request).await
    }
    async fn describe_training_job(&self, name: &str) -> Result<TrainingJobState, BackendError> {
        self.inner.describe_training_job(name).await
    }
    async fn stop_training_job(&self, name: &str) -> Result<(), BackendError> {
        self.inner.stop_training_job(name).await
    }
}

/// A pass whose lease a newer holder overtook after its snapshot (the newer pass committed to
/// the environment while this one was launching) stops nobody: the victim's mark is committed
/// with the environment's usage document, whose version the newer commit moved. Without the
/// fence in that commit the stale pass would stop a job on a plan the newer pass does not share.
#[tokio::test]
async fn a_pass_overtaken_by_a_newer_lease_holder_preempts_nobody() {
    let mut w = World::new(EmulatorConfig::default());
    w.config.planner.min_runtime_before_preemption_s = 0;
    w.lender_and_borrower().await;
    // The borrower holds three instances (one borrowed from the owner); one is free.
    for i in 0..3 {
        w.submit_with(&format!("b{i}"), "teams", 1, quick(600), quota("borrower"))
            .await;
    }
    for _ in 0..5 {
        w.tick().await;
        w.clock.advance(250);
    }
    assert_eq!(w.dispatched_ids().await.len(), 3);
    // The owner's two jobs: one takes the free instance, the other reclaims the borrowed one.
    for i in 0..2 {
        w.submit_with(&format!("o{i}"), "teams", 1, quick(600), quota("owner"))
            .await;
    }
    let now = w.clock.now_ms();
    let stale = Fence {
        token: 1,
        until_ms: now + 70_000,
    };
    let backend = NewerHolderDispatchesDuringLaunch {
        inner: w.sagemaker.clone(),
        store: w.service.store().clone(),
        environment: "teams-env".into(),
        newer: Fence {
            token: 2,
            until_ms: now + 70_000,
        },
        done: Mutex::new(false),
    };
    let input = PassInput {
        fence: Some(stale),
        ..accept_and_cycle()
    };
    let pass = w.service.pass(&backend, &w.config, input).await;
    assert!(pass.errors.is_empty(), "{:?}", pass.errors);
    let totals = pass.cycle_totals();
    assert_eq!(
        (totals.dispatched, totals.preemptions, totals.fenced),
        (1, 0, true),
        "{totals:?}"
    );
    for id in w.dispatched_ids().await {
        let job = w.job(&id).await;
        assert_eq!(job.attempts.last().unwrap().stop_requested, None, "{id}");
    }
}

/// A submit edit putting the job in quota share `share`.
fn quota(share: &'static str) -> impl FnOnce(&mut SubmitJob) {
    move |c: &mut SubmitJob| c.quota_share_name = Some(share.into())
}

fn accept_and_cycle() -> PassInput<'static> {
    PassInput {
        accept: Some(Accept::all(100, 0)),
        max_cycles: 1,
        ..PassInput::default()
    }
}

/// Re-pointing a queue to another environment while its jobs run: the planner charges running
/// jobs to their queue's current environment, so it sees the first environment empty; the
/// dispatch commit, checking the environment's stored usage, still keeps it within its limit.
#[tokio::test]
async fn re_pointing_a_queue_under_running_jobs_cannot_over_commit_their_environment() {
    let mut w = World::new(EmulatorConfig::default());
    w.environment("a", 4).await;
    w.environment("b", 4).await;
    w.queue("moving", 500, "a").await;
    w.queue("staying", 100, "a").await;
    for i in 0..4 {
        w.submit(&format!("m-{i}"), "moving", 1, quick(600)).await;
    }
    for _ in 0..10 {
        w.tick().await;
        w.clock.advance(1_000);
    }
    assert_eq!(w.dispatched.len(), 4, "the moving queue holds all of a");
    let order = vec![ServiceEnvironmentOrder {
        order: 1,
        service_environment: "b".into(),
    }];
    w.service
        .update_job_queue(
            "moving",
            JobQueueUpdate {
                service_environment_order: Some(order),
                ..JobQueueUpdate::default()
            },
        )
        .await
        .unwrap();
    for i in 0..4 {
        w.submit(&format!("s-{i}"), "staying", 1, quick(600)).await;
    }
    for _ in 0..10 {
        w.tick().await;
        w.clock.advance(1_000);
        let on_a: u64 = w
            .service
            .store()
            .dispatched_jobs()
            .await
            .unwrap()
            .iter()
            .filter(|j| {
                j.value
                    .latest_attempt()
                    .and_then(|a| a.service_environment.as_deref())
                    == Some("a")
            })
            .map(|j| j.value.training.total_instances())
            .sum();
        assert!(
            on_a <= 4,
            "{on_a} instances held on a 4-instance environment"
        );
    }
}

/// Every RUNNABLE job, listed: its id, stored version and the reason a reader is shown.
async fn shown_reasons(w: &World) -> Vec<(String, u64, Option<String>)> {
    let query = trainyard_app::ports::JobQuery {
        limit: 10_000,
        ..Default::default()
    };
    let page = w.service.store().list_jobs(&query).await.unwrap();
    let runnable: Vec<_> = page
        .items
        .into_iter()
        .filter(|j| j.value.status == JobStatus::Runnable)
        .collect();
    let mut jobs: Vec<_> = runnable.iter().map(|j| j.value.clone()).collect();
    w.service.with_current_reasons(&mut jobs).await.unwrap();
    runnable
        .iter()
        .zip(jobs)
        .map(|(stored, shown)| (shown.job_id, stored.version, shown.status_reason))
        .collect()
}

#[tokio::test]
async fn every_waiting_job_shows_a_reason_with_the_latest_figures_without_being_rewritten() {
    let mut w = World::new(EmulatorConfig::default());
    w.environment("local", 6).await;
    w.queue("research", 500, "local").await;
    // 4 of 6 instances held: one job of 1 ends after 10 s, two hold on for an hour.
    let short = w.submit("short", "research", 1, quick(10)).await;
    w.submit("long-a", "research", 1, quick(3600)).await;
    w.submit("long-b", "research", 2, quick(3600)).await;
    w.tick().await;
    // 30 jobs that need 4 each: more than the cycle reads (free instances + 16).
    let mut waiting = Vec::new();
    for i in 0..30 {
        waiting.push(
            w.submit(&format!("wide-{i}"), "research", 4, quick(60))
                .await,
        );
    }
    w.clock.advance(1_000);
    w.tick().await;
    let shown = shown_reasons(&w).await;
    assert_eq!(shown.len(), 30);
    assert!(
        shown.iter().all(|(_, _, r)| r.is_some()),
        "every waiting job has a reason: {shown:?}"
    );
    let head = &waiting[0];
    let reason_of = |shown: &[(String, u64, Option<String>)], id: &str| {
        let found = shown.iter().find(|(j, _, _)| j == id).unwrap();
        (found.1, found.2.clone().unwrap())
    };
    let (version, reason) = reason_of(&shown, head);
    assert!(
        reason.starts_with("CAPACITY:SERVICE_ENVIRONMENT_FULL - needs 4 NUM_INSTANCES, 2 free"),
        "{reason}"
    );
    // The last ones were never read by a cycle (it reads as many as are free, plus
    // `head_extra`), and a line's document names its first few: they wait behind those.
    let (_, last) = reason_of(&shown, &waiting[29]);
    let named = LineWaits::MAX_WAITS;
    assert!(
        last.starts_with(&format!(
            "PRIORITY:JOBS_AHEAD - at least {named} jobs wait ahead of it in queue research; the first"
        )),
        "{last}"
    );
    assert!(last.contains(head.as_str()), "{last}");

    // The short job ends: 3 free now. The head still cannot start, for the same reason.
    w.clock.advance(12_000);
    w.tick().await;
    w.clock.advance(1_000);
    w.tick().await;
    assert_eq!(w.job(&short).await.status, JobStatus::Succeeded);
    let shown = shown_reasons(&w).await;
    let (version_after, reason_after) = reason_of(&shown, head);
    assert!(
        reason_after
            .starts_with("CAPACITY:SERVICE_ENVIRONMENT_FULL - needs 4 NUM_INSTANCES, 3 free"),
        "the figures are the latest cycle's: {reason_after}"
    );
    assert_eq!(version_after, version, "without rewriting the job");
    let stored = w.job(head).await.status_reason.unwrap();
    assert!(
        stored.contains("2 free"),
        "the job keeps its first text: {stored}"
    );

    // A job that joins the line after its document was written, behind every job it names,
    // shows what it waits behind: the cycle that accepts it does not read it (31st in line)
    // and leaves the document as it was.
    w.clock.advance(1_000);
    let late = w.submit("wide-late", "research", 4, quick(60)).await;
    w.tick().await;
    let shown = shown_reasons(&w).await;
    let late_reason = shown
        .iter()
        .find(|(j, _, _)| *j == late)
        .map(|(_, _, r)| r.clone())
        .expect("the late job is RUNNABLE");
    assert!(
        late_reason
            .as_deref()
            .is_some_and(|r| r.starts_with(&format!(
                "PRIORITY:JOBS_AHEAD - at least {named} jobs wait ahead of it in queue research"
            ))),
        "{late_reason:?}"
    );
    assert_eq!(w.job(&late).await.status_reason, None, "never planned");
    let (version_now, _) = reason_of(&shown_reasons(&w).await, head);
    assert_eq!(version_now, version, "the head was not rewritten either");

    // The whole explanation: where it stands, and what holds it back.
    let explained = w.service.explain_job(&waiting[5]).await.unwrap();
    assert_eq!(explained.position, Some(6));
    let codes: Vec<&str> = explained.blockers.iter().map(|b| b.code.as_str()).collect();
    assert_eq!(
        codes,
        ["PRIORITY:JOBS_AHEAD", "CAPACITY:SERVICE_ENVIRONMENT_FULL"],
        "{:?}",
        explained.blockers
    );
    assert_eq!(
        explained.blockers[0].message,
        "5 jobs wait ahead of it in queue research"
    );
    let events: Vec<&str> = explained.history.iter().map(|h| h.event.as_str()).collect();
    assert_eq!(events, ["submitted", "waiting"]);
}

#[tokio::test]
async fn why_ranks_what_no_waiting_fixes_before_the_jobs_ahead() {
    let mut w = World::new(EmulatorConfig::default());
    w.environment("local", 4).await;
    w.queue("research", 500, "local").await;
    w.submit("holder", "research", 4, quick(3600)).await;
    w.tick().await;
    let mut ids = Vec::new();
    for i in 0..25 {
        ids.push(
            w.submit(&format!("waiting-{i}"), "research", 2, quick(60))
                .await,
        );
    }
    // Last in line, and too wide for the environment: waiting cannot help it.
    let wide = w.submit("too-wide", "research", 8, quick(60)).await;
    w.clock.advance(1_000);
    w.tick().await;
    let explained = w.service.explain_job(&wide).await.unwrap();
    let ranked: Vec<(WaitKind, &str)> = explained
        .blockers
        .iter()
        .map(|b| (b.kind, b.code.as_str()))
        .collect();
    assert_eq!(
        ranked,
        [
            (
                WaitKind::NeverRuns,
                "MISCONFIGURATION:SERVICE_ENVIRONMENT_MAX_RESOURCE"
            ),
            (WaitKind::Contention, "PRIORITY:JOBS_AHEAD"),
            (WaitKind::Contention, "CAPACITY:SERVICE_ENVIRONMENT_FULL"),
        ],
        "{:?}",
        explained.blockers
    );
    assert_eq!(
        explained.blockers[2].about_job_id.as_deref(),
        Some(ids[0].as_str())
    );

    // A disabled environment holds every job until someone enables it.
    let store = w.service.store();
    let env = store
        .get_resource::<ServiceEnvironment>("local")
        .await
        .unwrap()
        .unwrap();
    let mut disabled = env.value.clone();
    disabled.state = State::Disabled;
    store.update_resource(&disabled, env.version).await.unwrap();
    w.clock.advance(1_000);
    w.tick().await;
    let explained = w.service.explain_job(&ids[3]).await.unwrap();
    assert_eq!(
        explained.blockers[0].kind,
        WaitKind::Held,
        "{:?}",
        explained.blockers
    );
    assert_eq!(
        explained.blockers[0].code,
        "MISCONFIGURATION:SERVICE_ENVIRONMENT_DISABLED"
    );
}

/// Start-time estimates: before any attempt has ended they assume every attempt runs to its
/// `MaxRuntimeInSeconds` (an hour here) and say they are uncalibrated; once attempts end, the
/// runtimes seen replace the limit. Readers see the estimate after the reason's code.
#[tokio::test]
async fn waiting_jobs_get_start_estimates_that_learn_runtimes_as_attempts_end() {
    let mut w = World::new(EmulatorConfig::default());
    w.environment("local", 4).await;
    w.queue("research", 500, "local").await;
    let mut ids = Vec::new();
    for i in 0..16 {
        ids.push(
            w.submit(&format!("job-{i}"), "research", 1, quick(30))
                .await,
        );
    }
    w.tick().await;
    let mut forecaster = trainyard_forecast::Forecaster::new(Default::default());
    let report = w
        .service
        .estimate_start_times(&mut forecaster, &w.config)
        .await
        .unwrap();
    assert_eq!(report.jobs, 12, "every waiting job");
    let now = w.clock.now_ms();
    let last = w.job(&ids[15]).await;
    let first_estimate = w.service.start_estimate(&last).await.unwrap().unwrap();
    assert!(
        first_estimate.coverage.is_none(),
        "nothing seen yet: uncalibrated"
    );
    let p50 = first_estimate.p50_ms.unwrap();
    // Three waves of four one-hour attempts ahead of it, by their limits (rollouts resolve a
    // start to 5% of the time looked ahead).
    assert!(
        (now + 3 * 3_600_000 - 60_000..=now + 3 * 3_780_000 + 60_000).contains(&p50),
        "{} s from now",
        (p50 - now) / 1_000
    );
    let mut shown = vec![last.clone()];
    w.service.with_current_reasons(&mut shown).await.unwrap();
    let reason = shown[0].status_reason.clone().unwrap();
    assert!(
        reason.starts_with("PRIORITY:JOBS_AHEAD - ")
            && reason.contains("; start p50 ")
            && reason.ends_with("(uncalibrated)"),
        "{reason}"
    );
    let explained = w.service.explain_job(&ids[15]).await.unwrap();
    assert_eq!(explained.estimate.as_ref(), Some(&first_estimate));

    // Two waves of 30-second attempts run; a round every 10 s learns their runtimes.
    let mut steps = 0;
    let mut moved = 0;
    loop {
        w.tick().await;
        w.clock.advance(1_000);
        steps += 1;
        if steps % 10 == 0 {
            let report = w
                .service
                .estimate_start_times(&mut forecaster, &w.config)
                .await
                .unwrap();
            moved += report.moved;
        }
        let mut done = 0;
        for id in &ids {
            done += usize::from(w.job(id).await.status == JobStatus::Succeeded);
        }
        if done >= 8 || steps > 600 {
            break;
        }
    }
    w.service
        .estimate_start_times(&mut forecaster, &w.config)
        .await
        .unwrap();
    assert!(forecaster.history().runtimes_observed() >= 8);
    let now = w.clock.now_ms();
    let last = w.job(&ids[15]).await;
    assert_eq!(last.status, JobStatus::Runnable);
    let learnt = w.service.start_estimate(&last).await.unwrap().unwrap();
    let p50 = learnt.p50_ms.unwrap();
    assert!(
        p50 - now < 600_000,
        "runtimes of about 30 s, not an hour: {} s from now",
        (p50 - now) / 1_000
    );
    assert!(learnt.p90_ms >= learnt.p50_ms);
    assert!(moved > 0, "hours to minutes is a move worth an event");
}

/// Every waiting job a round reads gets an estimate however many wait in its queue, since each
/// line keeps its own document (a queue's one document used to keep the 1,000 that started
/// soonest). A line whose jobs have all gone loses its document at the next round, and a job
/// that has become RUNNABLE since the round shows none from an earlier wait.
#[tokio::test]
async fn every_waiting_job_of_a_long_queue_has_an_estimate_and_gone_lines_lose_theirs() {
    let mut w = World::new(EmulatorConfig::default());
    w.environment("local", 1).await;
    w.fair_share_queue("fs", "local").await;
    let mut ids: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for share in ["a", "b", "c"] {
        for i in 0..400 {
            let id = w
                .submit_with(&format!("{share}-{i}"), "fs", 1, quick(60), |c| {
                    c.share_identifier = Some(share.into())
                })
                .await;
            ids.entry(share).or_default().push(id);
        }
    }
    w.tick().await;
    let mut forecaster = trainyard_forecast::Forecaster::new(trainyard_forecast::Options {
        rollouts: 2,
        min_rollouts: 2,
        ..Default::default()
    });
    let report = w
        .service
        .estimate_start_times(&mut forecaster, &w.config)
        .await
        .unwrap();
    let mut waiting = Vec::new();
    for id in ids.values().flatten() {
        let job = w.job(id).await;
        if job.status == JobStatus::Runnable {
            waiting.push(job);
        }
    }
    assert_eq!(waiting.len(), 1_199, "one of 1,200 runs");
    assert_eq!(report.jobs, waiting.len());
    let estimates = w.service.start_estimates(&waiting).await.unwrap();
    let missing = estimates.iter().filter(|e| e.is_none()).count();
    assert_eq!(
        missing,
        0,
        "{missing} of {} without an estimate",
        waiting.len()
    );
    let store = w.service.store().clone();
    let stored_summary = || async {
        let summary = store.get_document::<StartEstimates>("fs").await.unwrap();
        summary.unwrap().value
    };
    let summary = stored_summary().await;
    assert_eq!(summary.lines, ["a", "b", "c"]);
    assert_eq!(summary.estimated, waiting.len());

    // Made before the job became RUNNABLE again: from an earlier wait, not shown.
    let mut again = waiting[0].clone();
    again.runnable_at = Some(w.clock.now_ms() + 1);
    assert_eq!(w.service.start_estimates(&[again]).await.unwrap(), [None]);

    // Share c's jobs leave; the next round deletes its line's estimates.
    for id in &ids["c"] {
        w.service.terminate_job(id, "not needed").await.unwrap();
    }
    w.clock.advance(60_000);
    w.tick().await;
    w.service
        .estimate_start_times(&mut forecaster, &w.config)
        .await
        .unwrap();
    let summary = stored_summary().await;
    assert_eq!(summary.lines, ["a", "b"]);
    let gone = store
        .get_document::<LineEstimates>(&quota_share_key("fs", "c"))
        .await
        .unwrap();
    assert!(gone.is_none(), "{gone:?}");
}

/// A cycle reads only the first jobs of a quota share that is full (it holds its limit, may
/// borrow nothing more and may not preempt in itself: none of its jobs could act), those its
/// line's document names, where it reads as many as are free plus `head_extra` of another. The
/// jobs it read carry the reason it planned; those further back were not planned.
#[tokio::test]
async fn a_cycle_reads_only_the_first_jobs_of_a_full_quota_share() {
    let mut w = World::new(EmulatorConfig::default());
    let shares = [
        ("full", SharingStrategy::Reserve),
        ("open", SharingStrategy::Reserve),
    ];
    // Each share's limit is 2 of the 8 instances.
    w.quota_queue("teams", 8, &shares).await;
    for (name, share) in [("f0", "full"), ("f1", "full"), ("o0", "open")] {
        w.submit_with(name, "teams", 1, quick(3600), quota(share))
            .await;
    }
    w.tick().await;
    assert_eq!(w.dispatched_ids().await.len(), 3);
    // Behind them, jobs that cannot start: `full` has no room, `open` has 1 and they need 2.
    let mut full = Vec::new();
    let mut open = Vec::new();
    for i in 0..30 {
        full.push(
            w.submit_with(&format!("wf{i}"), "teams", 1, quick(60), quota("full"))
                .await,
        );
        open.push(
            w.submit_with(&format!("wo{i}"), "teams", 2, quick(60), quota("open"))
                .await,
        );
    }
    w.clock.advance(1_000);
    w.tick().await;
    let planned = |id: &String| {
        let w = &w;
        let id = id.clone();
        async move { w.job(&id).await.status_reason.is_some() }
    };
    let extra = w.config.head_extra;
    let named = LineWaits::MAX_WAITS;
    assert!(named < extra);
    assert!(planned(&full[named - 1]).await);
    assert!(
        !planned(&full[named]).await,
        "behind the first {named} of a full share"
    );
    // 5 instances free: `open` has its first 5 + 16 read.
    assert!(planned(&open[5 + extra - 1]).await);
    assert!(!planned(&open[5 + extra]).await);
}
