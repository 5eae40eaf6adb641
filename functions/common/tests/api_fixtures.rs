//! The `api` function's sample events (API Gateway HTTP API, payload v2) through `lambda_http`'s
//! own decoding and the function's router, over the memory store.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::Path;

use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;
use trainyard_app::memory::MemoryStore;
use trainyard_app::ports::NoEvents;

mod common;

use common::deployment;

async fn router() -> axum::Router {
    let (service, _, _) = deployment(MemoryStore::new(), NoEvents, 4).await;
    trainyard_functions::api::router(service)
}

fn fixture_text(file: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../events/api")
        .join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"))
}

/// Sends an HTTP API v2 event through `lambda_http`'s decoding and the router.
async fn invoke(router: &axum::Router, event: &str) -> (u16, Option<String>, Value) {
    let request = lambda_http::request::from_str(event).unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status().as_u16();
    let error_type = response
        .headers()
        .get("x-amzn-ErrorType")
        .map(|v| v.to_str().unwrap().to_owned());
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, error_type, serde_json::from_slice(&bytes).unwrap())
}

#[tokio::test]
async fn api_requests_are_served_as_batch_answers_them() {
    let router = router().await;
    let job_id = "00000000-0000-4000-8000-000000000001";
    // (fixture, HTTP status, error type, what the body must contain)
    let steps: [(&str, u16, Option<&str>, Value); 4] = [
        (
            "submit.json",
            200,
            None,
            json!({"jobId": job_id, "jobName": "resnet"}),
        ),
        (
            "describe.json",
            200,
            None,
            json!({"jobId": job_id, "status": "SUBMITTED"}),
        ),
        ("list.json", 200, None, json!({})),
        (
            "bad-request.json",
            400,
            Some("ClientException"),
            json!({"__type": "ClientException"}),
        ),
    ];
    let mut checked = BTreeSet::new();
    for (file, status, error_type, expected) in steps {
        let (got_status, got_type, body) = invoke(&router, &fixture_text(file)).await;
        assert_eq!(got_status, status, "{file}: {body}");
        assert_eq!(got_type.as_deref(), error_type, "{file}");
        for (key, value) in expected.as_object().unwrap() {
            assert_eq!(&body[key], value, "{file}: {key} in {body}");
        }
        if file == "list.json" {
            let ids: Vec<&str> = body["jobSummaryList"]
                .as_array()
                .unwrap()
                .iter()
                .map(|j| j["jobId"].as_str().unwrap())
                .collect();
            assert_eq!(ids, [job_id], "{body}");
        }
        checked.insert(file.to_owned());
    }
    let present: BTreeSet<String> =
        std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../events/api"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
    assert_eq!(
        present, checked,
        "every api sample event is a checked fixture"
    );
}

/// The `submit.json` sample with its `serviceRequestPayload` changed by `edit`.
fn submit_with_payload(edit: impl FnOnce(&mut Value)) -> Value {
    let mut event: Value = serde_json::from_str(&fixture_text("submit.json")).unwrap();
    let mut request: Value = serde_json::from_str(event["body"].as_str().unwrap()).unwrap();
    let mut payload: Value =
        serde_json::from_str(request["serviceRequestPayload"].as_str().unwrap()).unwrap();
    edit(&mut payload);
    request["serviceRequestPayload"] = json!(payload.to_string());
    event["body"] = json!(request.to_string());
    event
}

/// `event` is refused as Batch refuses a bad request (400, `ClientException`) with a message
/// naming `named`, and nothing was stored: the list stays empty.
async fn assert_refused_at_submit(router: &axum::Router, event: &Value, named: &str) {
    let (status, error_type, body) = invoke(router, &event.to_string()).await;
    assert_eq!(
        (status, error_type.as_deref()),
        (400, Some("ClientException")),
        "{body}"
    );
    let message = body["message"].as_str().unwrap();
    assert!(message.contains(named), "{message}");
    let (_, _, listed) = invoke(router, &fixture_text("list.json")).await;
    assert_eq!(listed["jobSummaryList"], json!([]), "{listed}");
}

const OTHER_ROLE: &str = "arn:aws:iam::123456789012:role/Admin";

#[tokio::test]
async fn a_job_naming_a_role_outside_the_training_roles_is_refused_at_submit() {
    let router = router().await;
    let event = submit_with_payload(|payload| payload["RoleArn"] = json!(OTHER_ROLE));
    assert_refused_at_submit(&router, &event, OTHER_ROLE).await;
}

/// A payload member SageMaker's `CreateTrainingJob` does not have is refused at submit, by its
/// path, instead of failing the job at launch after it waited in its queue; members SageMaker
/// added lately are accepted.
#[tokio::test]
async fn a_payload_member_sagemaker_would_refuse_is_refused_at_submit_by_name() {
    let router = router().await;
    let event = submit_with_payload(|payload| {
        payload["ResourceConfig"]["InstanceCount"] = json!(2);
        payload["ResourceConfig"]["InstanceTypo"] = json!("ml.p5.48xlarge");
    });
    assert_refused_at_submit(
        &router,
        &event,
        "ResourceConfig.InstanceTypo is not a member",
    )
    .await;

    let event = submit_with_payload(|payload| {
        payload["ModelAccessConfig"] = json!({"AcceptEula": true});
    });
    assert_refused_at_submit(&router, &event, "ModelAccessConfig is not a member").await;

    let event = submit_with_payload(|payload| {
        let resources = payload["ResourceConfig"].as_object_mut().unwrap();
        resources.remove("InstanceType");
        resources.insert(
            "InstancePreferences".into(),
            json!([{"InstanceType": "ml.p5.48xlarge"}, {"InstanceType": "ml.p4d.24xlarge"}]),
        );
    });
    let (status, _, body) = invoke(&router, &event.to_string()).await;
    assert_eq!(status, 200, "{body}");
}

/// The operation's name percent-encoded (`submitservice%6Aob`) reaches the same route, and the
/// same check: the allow-list is the submit use-case's, not a comparison of the raw path.
#[tokio::test]
async fn an_encoded_operation_name_does_not_skip_the_role_check() {
    let router = router().await;
    let mut event = submit_with_payload(|payload| payload["RoleArn"] = json!(OTHER_ROLE));
    for key in ["rawPath", "routeKey"] {
        if let Some(path) = event[key].as_str() {
            event[key] = json!(path.replace("submitservicejob", "submitservice%6Aob"));
        }
    }
    event["requestContext"]["http"]["path"] = json!("/v1/submitservice%6Aob");
    assert_refused_at_submit(&router, &event, OTHER_ROLE).await;
}

/// The caller API Gateway's IAM authorizer verified (`requestContext.authorizer.iam.userArn`)
/// is the job's owner and the principal the access policies judge.
#[tokio::test]
async fn the_iam_caller_in_the_request_context_owns_the_job_and_is_who_policies_judge() {
    const ALICE: &str = "arn:aws:sts::123456789012:assumed-role/vision-researcher/alice";
    let (service, _, _) = deployment(MemoryStore::new(), NoEvents, 4).await;
    let gate = std::sync::Arc::new(trainyard_api::Gate::default());
    let router = trainyard_functions::api::router_with_gate(service, gate.clone());
    let submit: Value = serde_json::from_str(&fixture_text("submit.json")).unwrap();
    assert_eq!(
        submit["requestContext"]["authorizer"]["iam"]["userArn"], ALICE,
        "the sample is signed by alice"
    );
    let (status, _, _) = invoke(&router, &submit.to_string()).await;
    assert_eq!(status, 200);
    let (_, _, described) = invoke(&router, &fixture_text("describe.json")).await;
    assert_eq!(described["trainyard"]["owner"], ALICE, "{described}");

    // Policies under which alice may change the policies and nothing else.
    let mut put = submit.clone();
    put["rawPath"] = json!("/trainyard/v1/putaccesspolicies");
    put["requestContext"]["http"]["path"] = put["rawPath"].clone();
    let policies = format!(
        "permit(principal == Trainyard::Principal::\"{ALICE}\", \
         action == Trainyard::Action::\"PutAccessPolicies\", resource);"
    );
    put["body"] = json!(json!({ "policies": policies }).to_string());
    let (status, _, body) = invoke(&router, &put.to_string()).await;
    assert_eq!(status, 200, "{body}");
    let (status, error_type, body) = invoke(&router, &submit.to_string()).await;
    assert_eq!(
        (status, error_type.as_deref()),
        (403, Some("AccessDeniedException")),
        "{body}"
    );
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .starts_with(&format!("User: {ALICE} ")),
        "{body}"
    );
    // The refusal becomes one EMF line, by action, and is counted once.
    let lines = trainyard_functions::api::denied_lines(&gate, "stack-1", 0);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let line: Value = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!(
        (&line["Action"], &line["AccessDenied"], &line["Stack"]),
        (&json!("SubmitServiceJob"), &json!(1), &json!("stack-1"))
    );
    assert!(trainyard_functions::api::denied_lines(&gate, "stack-1", 0).is_empty());
    // Without the authorizer's identity the caller is anonymous, and refused too.
    let mut anonymous = submit.clone();
    anonymous["requestContext"]
        .as_object_mut()
        .unwrap()
        .remove("authorizer");
    let (status, _, body) = invoke(&router, &anonymous.to_string()).await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .starts_with("User: anonymous "),
        "{body}"
    );
}

/// A caller over the api function's rate limit is refused with `ThrottlingException` (429),
/// and the refusals become one `Throttled` EMF line by stack.
#[tokio::test]
async fn a_caller_over_its_rate_limit_is_throttled_and_counted() {
    let (service, _, _) = deployment(MemoryStore::new(), NoEvents, 4).await;
    let gate = std::sync::Arc::new(trainyard_api::Gate::default().with_rate_limit(1));
    let router = trainyard_functions::api::router_with_gate(service, gate.clone());
    let describe = fixture_text("describe.json");
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let (status, error_type, _) = invoke(&router, &describe).await;
        statuses.push((status, error_type));
    }
    let throttled = (429, Some("ThrottlingException".to_owned()));
    assert_eq!(
        &statuses[2..],
        [throttled.clone(), throttled],
        "{statuses:?}"
    );
    let lines = trainyard_functions::api::denied_lines(&gate, "stack-1", 0);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let line: Value = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!(
        (&line["Throttled"], &line["Stack"]),
        (&json!(2), &json!("stack-1"))
    );
    assert!(trainyard_functions::api::denied_lines(&gate, "stack-1", 0).is_empty());
}

#[tokio::test]
async fn a_caller_whose_iam_tags_cannot_be_read_is_refused_and_an_anonymous_one_needs_none() {
    // IAM at a loopback port nobody listens on, without retries: every read fails.
    let unreachable = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let config = aws_sdk_iam::Config::builder()
        .behavior_version(aws_sdk_iam::config::BehaviorVersion::latest())
        .region(aws_sdk_iam::config::Region::new("us-east-1"))
        .endpoint_url(unreachable)
        .credentials_provider(aws_sdk_iam::config::Credentials::for_tests())
        .retry_config(aws_sdk_iam::config::retry::RetryConfig::disabled())
        .build();
    let tags = std::sync::Arc::new(trainyard_aws::iam::PrincipalTags::new(
        aws_sdk_iam::Client::from_conf(config),
    ));
    let (service, _, _) = deployment(MemoryStore::new(), NoEvents, 4).await;
    let router = trainyard_functions::api::router_with_metrics(
        service,
        trainyard_api::Gate::default(),
        "stack-1".into(),
        tags,
    );
    // The submit sample's caller is an assumed role: its tags must be read, and cannot be.
    let submit = fixture_text("submit.json");
    let (status, error_type, body) = invoke(&router, &submit).await;
    assert_eq!(
        (status, error_type.as_deref()),
        (429, Some("ThrottlingException")),
        "{body}"
    );
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("IAM tags of role vision-researcher")),
        "{body}"
    );
    // Without the IAM authorizer's context the caller is anonymous: nothing to read.
    let mut anonymous: Value = serde_json::from_str(&submit).unwrap();
    anonymous["requestContext"]
        .as_object_mut()
        .unwrap()
        .remove("authorizer");
    let (status, _, body) = invoke(&router, &anonymous.to_string()).await;
    assert_ne!(status, 429, "{body}");
}
