//! What the moto tests share: a moto endpoint check, and a small world that drives one job
//! through the real use-cases (submit → accept → cycle → SageMaker states) over any store and
//! event sink, with a stand-in SageMaker that accepts every launch.

// Each test file uses part of this module.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use trainyard_app::Service;
use trainyard_app::ports::{
    BackendError, EventSink, Store, TrainingBackend, TrainingJobState, TrainingStatus,
};
use trainyard_app::ports::{ManualClock, SequentialIds};
use trainyard_app::service::jobs::SubmitJob;
use trainyard_app::service::scheduling::{
    Accept, CycleConfig, CycleReport, PassInput, PassReport, StateOutcome,
};
use trainyard_domain::arn::ArnContext;
use trainyard_domain::environment::{CapacityLimit, ServiceEnvironment, ServiceEnvironmentType};
use trainyard_domain::job::JobStatus;
use trainyard_domain::policy::{FairsharePolicy, SchedulingPolicy};
use trainyard_domain::queue::{JobQueue, JobQueueType, ServiceEnvironmentOrder};
use trainyard_domain::training::attempt_name;
use trainyard_domain::{ResourceStatus, State};

/// Some time in 2027, so that times in events look real.
pub const T0: i64 = 1_800_000_000_000;

/// Fails loudly unless the SDK will reach a local stand-in: `AWS_ENDPOINT_URL` (moto serves every
/// service on one port) or all of the given per-service variables.
pub fn require_endpoint(per_service: &[&str]) {
    let set = |k: &str| std::env::var(k).is_ok_and(|v| !v.is_empty());
    assert!(
        set("AWS_ENDPOINT_URL") || per_service.iter().all(|k| set(k)),
        "neither AWS_ENDPOINT_URL nor {per_service:?} is set: these tests need a moto server \
         (scripts/lib/moto.sh starts one)"
    );
}

/// The SDK configuration from the environment (region, test credentials, endpoints).
pub async fn sdk_config() -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .load()
        .await
}

/// SageMaker that accepts every launch; states are fed to the service by the test.
#[derive(Debug, Default, Clone)]
pub struct AcceptingSageMaker {
    /// Names launched, in order.
    pub launched: Arc<Mutex<Vec<String>>>,
}

impl TrainingBackend for AcceptingSageMaker {
    async fn create_training_job(&self, request: Value) -> Result<String, BackendError> {
        let name = request["TrainingJobName"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let arn = ArnContext::default().training_job_arn(&name);
        self.launched
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(name);
        Ok(arn)
    }

    async fn describe_training_job(&self, name: &str) -> Result<TrainingJobState, BackendError> {
        Err(BackendError::NotFound(name.to_owned()))
    }

    async fn stop_training_job(&self, _name: &str) -> Result<(), BackendError> {
        Ok(())
    }
}

/// A Trainyard with one environment and one FIFO queue, on a manual clock.
pub struct World<S: Store, E: EventSink> {
    pub service: Service<S, E>,
    pub clock: Arc<ManualClock>,
    pub sagemaker: AcceptingSageMaker,
    pub config: CycleConfig,
}

impl<S: Store, E: EventSink> World<S, E> {
    /// A world over `store` and `events`; [`World::configure`] adds the environment and queue.
    pub fn new(store: S, events: E, arns: ArnContext) -> Self {
        let clock = Arc::new(ManualClock::new(T0));
        let service = Service::new(
            store,
            events,
            clock.clone(),
            Arc::new(SequentialIds::default()),
            arns,
        );
        Self {
            service,
            clock,
            sagemaker: AcceptingSageMaker::default(),
            config: CycleConfig::default(),
        }
    }

    /// Environment `env` with `instances` instances, and FIFO queue `queue` feeding it.
    pub async fn configure(&self, env: &str, queue: &str, instances: u32) {
        self.configure_with(env, queue, instances, false).await;
    }

    /// Like [`World::configure`]; with `fair_share`, the queue has a fair-share policy (equal
    /// weights) and its jobs need a share identifier.
    pub async fn configure_with(&self, env: &str, queue: &str, instances: u32, fair_share: bool) {
        let policy_name = format!("{queue}-fair");
        if fair_share {
            let policy = SchedulingPolicy {
                name: policy_name.clone(),
                fairshare_policy: Some(FairsharePolicy::default()),
                quota_share_policy: None,
                tags: BTreeMap::new(),
                created_at: T0,
            };
            self.service.store().create_resource(&policy).await.unwrap();
        }
        let environment = ServiceEnvironment {
            service_environment_name: env.into(),
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
        self.service
            .store()
            .create_resource(&environment)
            .await
            .unwrap();
        let job_queue = JobQueue {
            job_queue_name: queue.into(),
            state: State::Enabled,
            status: ResourceStatus::Valid,
            status_reason: None,
            priority: 10,
            scheduling_policy: fair_share.then_some(policy_name),
            service_environment_order: vec![ServiceEnvironmentOrder {
                order: 1,
                service_environment: env.into(),
            }],
            job_state_time_limit_actions: vec![],
            job_queue_type: JobQueueType::SagemakerTraining,
            tags: BTreeMap::new(),
            created_at: T0,
        };
        self.service
            .store()
            .create_resource(&job_queue)
            .await
            .unwrap();
    }

    /// Submits a one-instance job named `name` to `queue`; returns its id.
    pub async fn submit(&self, name: &str, queue: &str) -> String {
        self.submit_to(name, queue, None).await
    }

    /// Submits a one-instance job named `name` to `queue`, in fair share `share`.
    pub async fn submit_to(&self, name: &str, queue: &str, share: Option<&str>) -> String {
        let payload = json!({
            "TrainingJobName": name,
            "RoleArn": "arn:aws:iam::000000000000:role/SageMakerRole",
            "AlgorithmSpecification": {"TrainingImage": "img:1", "TrainingInputMode": "File"},
            "OutputDataConfig": {"S3OutputPath": "s3://bucket/out"},
            "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 50},
            "StoppingCondition": {"MaxRuntimeInSeconds": 3600}
        });
        let cmd = SubmitJob {
            job_name: name.into(),
            job_queue: queue.into(),
            service_job_type: Default::default(),
            service_request_payload: payload.to_string(),
            share_identifier: share.map(str::to_owned),
            quota_share_name: None,
            scheduling_priority: None,
            retry_strategy: None,
            timeout_config: None,
            preemption_configuration: None,
            tags: BTreeMap::from([("team".to_owned(), "vision".to_owned())]),
            client_token: Some(format!("token-{name}")),
        };
        self.service.submit(cmd).await.unwrap().job_id
    }

    /// Accepts every SUBMITTED job into its queue (→ RUNNABLE), in a pass of its own; returns
    /// how many.
    pub async fn accept(&self) -> usize {
        let input = PassInput {
            accept: Some(Accept::all(100, 0)),
            ..PassInput::default()
        };
        let pass = self.pass(input).await;
        pass.accepted
    }

    /// One scheduling cycle, in a pass of its own.
    pub async fn cycle(&self) -> CycleReport {
        let input = PassInput {
            max_cycles: 1,
            ..PassInput::default()
        };
        let pass = self.pass(input).await;
        pass.cycles
            .into_iter()
            .next()
            .expect("the pass ran its cycle")
    }

    /// One pass; panics if a step failed.
    async fn pass(&self, input: PassInput<'_>) -> PassReport {
        let pass = self
            .service
            .pass(&self.sagemaker, &self.config, input)
            .await;
        assert!(pass.errors.is_empty(), "{:?}", pass.errors);
        pass
    }

    /// Feeds SageMaker's state of attempt `n` of job `job_id` to the service.
    pub async fn training(
        &self,
        job_id: &str,
        n: usize,
        status: TrainingStatus,
        secondary: &str,
    ) -> StateOutcome {
        let job = self.service.describe_job(job_id).await.unwrap();
        let name = attempt_name(&job, n);
        let state = TrainingJobState {
            arn: ArnContext::default().training_job_arn(&name),
            name,
            status,
            secondary: secondary.into(),
            failure_reason: None,
            selected_instance_type: None,
        };
        self.service
            .on_training_state(&state, &self.config)
            .await
            .unwrap()
    }

    /// Submit → accept → cycle → Downloading → Training → Completed, a minute apart; returns
    /// the job id.
    pub async fn run_one_job(&self, name: &str, queue: &str) -> String {
        let id = self.submit(name, queue).await;
        self.clock.advance(1_000);
        assert_eq!(self.accept().await, 1);
        self.clock.advance(1_000);
        assert_eq!(self.cycle().await.dispatched, 1);
        for (status, secondary, becomes) in [
            (
                TrainingStatus::InProgress,
                "Downloading",
                JobStatus::Starting,
            ),
            (TrainingStatus::InProgress, "Training", JobStatus::Running),
            (TrainingStatus::Completed, "Completed", JobStatus::Succeeded),
        ] {
            self.clock.advance(60_000);
            let outcome = self.training(&id, 1, status, secondary).await;
            assert_eq!(outcome, StateOutcome::Applied(becomes), "{secondary}");
        }
        id
    }
}
