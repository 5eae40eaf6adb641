//! What the functions' tests share: a service after the API's initial setup, an emulated
//! SageMaker on the test's clock, and a job to submit. (Each test file uses part of it.)

#![allow(dead_code, clippy::unwrap_used)]

use std::sync::Arc;

use serde_json::json;
use trainyard_app::Service;
use trainyard_app::ports::{EventSink, Store};
use trainyard_app::ports::{ManualClock, SequentialIds};
use trainyard_app::service::jobs::SubmitJob;
use trainyard_domain::arn::ArnContext;
pub use trainyard_emulator::backend::EmulatedSageMaker;
use trainyard_emulator::model::Config as EmulatorConfig;
use trainyard_functions::config::InitialSetup;
use trainyard_functions::setup::ensure_initial_setup;

pub const T0: i64 = 1_795_996_800_000;
pub const ROLE: &str = "arn:aws:iam::123456789012:role/SageMakerRole";

/// A service over `store`, checked at submit as the deployed functions are (training roles, and
/// payloads the SageMaker adapter can carry), after the API's initial setup (queue and environment `default` with
/// `max_instances`), and an emulated SageMaker on the same clock.
pub async fn deployment<S: Store, E: EventSink>(
    store: S,
    events: E,
    max_instances: u32,
) -> (Arc<Service<S, E>>, Arc<ManualClock>, EmulatedSageMaker) {
    let clock = Arc::new(ManualClock::new(T0));
    let service = Arc::new(
        Service::new(
            store,
            events,
            clock.clone(),
            Arc::new(SequentialIds::default()),
            ArnContext {
                partition: "aws".into(),
                region: "us-east-1".into(),
                account: "123456789012".into(),
            },
        )
        .with_training_roles(vec![ROLE.to_owned()]),
    );
    let setup = InitialSetup {
        environment: "default".into(),
        max_instances,
        queue: "default".into(),
        queue_priority: 1,
    };
    ensure_initial_setup(service.store(), &setup, T0)
        .await
        .unwrap();
    let sagemaker = EmulatedSageMaker::on_clock(EmulatorConfig::default(), clock.clone());
    (service, clock, sagemaker)
}

/// Submits a one-instance training job named `name` to queue `default`; returns its id.
pub async fn submit<S: Store, E: EventSink>(service: &Service<S, E>, name: &str) -> String {
    let payload = json!({
        "TrainingJobName": name,
        "RoleArn": ROLE,
        "AlgorithmSpecification": {"TrainingImage": "img:1", "TrainingInputMode": "File"},
        "HyperParameters": {"emulator_duration_s": "600"},
        "OutputDataConfig": {"S3OutputPath": "s3://bucket/out"},
        "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 50},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600}
    });
    let cmd = SubmitJob {
        job_name: name.into(),
        job_queue: "default".into(),
        service_job_type: Default::default(),
        service_request_payload: payload.to_string(),
        share_identifier: None,
        quota_share_name: None,
        scheduling_priority: None,
        retry_strategy: None,
        timeout_config: None,
        preemption_configuration: None,
        tags: Default::default(),
        client_token: None,
    };
    service.submit(cmd).await.unwrap().job_id
}
