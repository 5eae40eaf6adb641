//! Helpers for in-process router tests: a service over the memory store with a manual clock,
//! and a `call` that sends one request through the real router.

#![allow(dead_code)]
// Test support may panic on what it did not expect.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;
use trainyard_access::Principal;
use trainyard_api::Caller;
use trainyard_app::Service;
use trainyard_app::memory::MemoryStore;
use trainyard_app::ports::NoEvents;
use trainyard_app::ports::{ManualClock, SequentialIds};
use trainyard_domain::arn::ArnContext;

/// 2026-01-01T00:00:00Z.
pub const T0_MS: i64 = 1_767_225_600_000;

/// A router over a fresh memory store, with its clock and service for direct inspection.
pub struct Harness {
    pub router: Router,
    pub clock: Arc<ManualClock>,
    pub service: Arc<Service<MemoryStore, NoEvents>>,
}

pub fn harness() -> Harness {
    harness_with_gate(trainyard_api::Gate::default())
}

/// [`harness`] with the router's access gate configured (a rate limit, say).
pub fn harness_with_gate(gate: trainyard_api::Gate) -> Harness {
    let clock = Arc::new(ManualClock::new(T0_MS));
    let service = Arc::new(Service::new(
        MemoryStore::new(),
        NoEvents,
        clock.clone(),
        Arc::new(SequentialIds::default()),
        ArnContext::default(),
    ));
    Harness {
        router: trainyard_api::router_with_gate(service.clone(), Arc::new(gate)),
        clock,
        service,
    }
}

impl Harness {
    /// `POST /v1/{op}` with a JSON body; returns status and parsed body (`Null` if empty).
    pub async fn call(&self, op: &str, body: Value) -> (StatusCode, Value) {
        self.raw("POST", &format!("/v1/{op}"), body.to_string().into_bytes())
            .await
    }

    /// Any method, path and raw body.
    pub async fn raw(&self, method: &str, path: &str, body: Vec<u8>) -> (StatusCode, Value) {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", "application/json")
            .body(Body::from(body))
            .unwrap();
        let response = self.router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        if !status.is_success() {
            let error_type = response.headers().get("x-amzn-ErrorType").cloned();
            assert!(
                error_type.is_some(),
                "error responses carry x-amzn-ErrorType"
            );
        }
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap()
        };
        (status, value)
    }

    /// `method path` with a raw body as `caller` (an ARN; `None`: anonymous), as a host puts
    /// the verified caller on the request: status, the `x-amzn-ErrorType` and the parsed body.
    pub async fn send_as(
        &self,
        caller: Option<&str>,
        method: &str,
        path: &str,
        body: String,
    ) -> (StatusCode, Option<String>, Value) {
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", "application/json")
            .body(Body::from(body))
            .unwrap();
        if let Some(arn) = caller {
            request
                .extensions_mut()
                .insert(Caller(Principal::from_arn(arn)));
        }
        let response = self.router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let error_type = response
            .headers()
            .get("x-amzn-ErrorType")
            .map(|v| v.to_str().unwrap().to_owned());
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap()
        };
        (status, error_type, value)
    }

    /// Calls `op` and asserts success.
    pub async fn ok(&self, op: &str, body: Value) -> Value {
        let (status, value) = self.call(op, body.clone()).await;
        assert_eq!(status, StatusCode::OK, "{op} {body} -> {value}");
        value
    }

    /// Calls `op`, asserts a ClientException, returns its message.
    pub async fn client_error(&self, op: &str, body: Value) -> String {
        let (status, value) = self.call(op, body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{op} {body} -> {value}");
        assert_eq!(value["__type"], "ClientException");
        value["message"].as_str().unwrap().to_owned()
    }

    /// One service environment (`NUM_INSTANCES` = `instances`) and one FIFO queue on it.
    pub async fn fifo_queue(&self, env: &str, queue: &str, priority: i64, instances: i64) {
        self.ok(
            "createserviceenvironment",
            json!({"serviceEnvironmentName": env, "serviceEnvironmentType": "SAGEMAKER_TRAINING",
                   "capacityLimits": [{"maxCapacity": instances, "capacityUnit": "NUM_INSTANCES"}]}),
        )
        .await;
        self.ok(
            "createjobqueue",
            json!({"jobQueueName": queue, "priority": priority, "jobQueueType": "SAGEMAKER_TRAINING",
                   "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": env}]}),
        )
        .await;
    }
}

impl Harness {
    /// A fair-share scheduling policy `fair` (share `vision`), and `queues` (name, priority)
    /// under it on the existing environment `env`.
    pub async fn fair_share_queues(&self, env: &str, queues: &[(&str, i64)]) {
        self.ok(
            "createschedulingpolicy",
            json!({"name": "fair", "fairsharePolicy": {"shareDistribution": [{"shareIdentifier": "vision"}]}}),
        )
        .await;
        for (queue, priority) in queues {
            self.ok(
                "createjobqueue",
                json!({"jobQueueName": queue, "priority": priority, "jobQueueType": "SAGEMAKER_TRAINING",
                       "schedulingPolicyArn": "arn:aws:batch:us-east-1:000000000000:scheduling-policy/fair",
                       "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": env}]}),
            )
            .await;
        }
    }
}

/// A valid SageMaker CreateTrainingJob request.
pub fn training_payload(name: &str, instance_type: &str, count: u32) -> String {
    json!({
        "TrainingJobName": name,
        "RoleArn": "arn:aws:iam::000000000000:role/SageMakerRole",
        "AlgorithmSpecification": {"TrainingImage": "123.dkr.ecr.us-east-1.amazonaws.com/img:1", "TrainingInputMode": "File"},
        "OutputDataConfig": {"S3OutputPath": "s3://bucket/out"},
        "ResourceConfig": {"InstanceType": instance_type, "InstanceCount": count, "VolumeSizeInGB": 50},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600}
    })
    .to_string()
}

/// A valid SubmitServiceJob body.
pub fn submit_body(job_name: &str, queue: &str) -> Value {
    json!({
        "jobName": job_name,
        "jobQueue": queue,
        "serviceJobType": "SAGEMAKER_TRAINING",
        "serviceRequestPayload": training_payload(job_name, "ml.g5.xlarge", 1),
    })
}
