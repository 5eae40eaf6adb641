//! The SageMaker backend over the wire: `aws-sdk-sagemaker` against the emulator's HTTP face,
//! served in-process on 127.0.0.1 on a free port, on a clock the test moves by hand.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::time::Duration;

use aws_sdk_sagemaker::config::{
    BehaviorVersion, Credentials, Region, retry::RetryConfig, timeout::TimeoutConfig,
};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use trainyard_app::ports::{BackendError, TrainingBackend, TrainingStatus};
use trainyard_aws::sagemaker::SageMakerBackend;
use trainyard_emulator::http::serve;
use trainyard_emulator::model::{Config, Emulator, TimeFormat};
use trainyard_emulator::shared::SharedEmulator;

/// Where the test's clock starts (epoch milliseconds).
const T0: i64 = 1_800_000_000_000;

/// The emulator's HTTP face, the backend pointed at it, and the clock.
struct Stand {
    backend: SageMakerBackend,
    emulator: SharedEmulator,
    now: Arc<AtomicI64>,
    // Dropping the sender shuts the server down when the test ends.
    _shutdown: oneshot::Sender<()>,
}

impl Stand {
    async fn start(config: Config) -> Self {
        let now = Arc::new(AtomicI64::new(T0));
        let clock = {
            let now = Arc::clone(&now);
            Arc::new(move || now.load(Ordering::SeqCst))
        };
        let emulator = SharedEmulator::new(Emulator::new(config), clock);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (shutdown, stop) = oneshot::channel::<()>();
        tokio::spawn(serve(listener, emulator.clone(), async move {
            let _ = stop.await;
        }));
        Self {
            backend: SageMakerBackend::new(client(
                &format!("http://{addr}"),
                RetryConfig::standard(),
            )),
            emulator,
            now,
            _shutdown: shutdown,
        }
    }

    fn advance_ms(&self, ms: i64) {
        self.now.fetch_add(ms, Ordering::SeqCst);
    }

    /// What the emulator stored and describes, read from the model directly.
    fn stored(&self, name: &str) -> Value {
        self.emulator
            .with(|e, _| e.describe_training_job(name, TimeFormat::EpochSeconds))
            .unwrap()
    }
}

/// An SDK client for `endpoint` with static credentials, every call bounded in time.
fn client(endpoint: &str, retry: RetryConfig) -> aws_sdk_sagemaker::Client {
    let config = aws_sdk_sagemaker::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(Credentials::new("AKIDTEST", "secret", None, None, "test"))
        .retry_config(retry)
        .timeout_config(
            TimeoutConfig::builder()
                .operation_timeout(Duration::from_secs(10))
                .build(),
        )
        .build();
    aws_sdk_sagemaker::Client::from_conf(config)
}

fn request(name: &str, instance_type: &str, hyper: Value) -> Value {
    json!({
        "TrainingJobName": name,
        "RoleArn": "arn:aws:iam::000000000000:role/Trainer",
        "AlgorithmSpecification": {"TrainingImage": "img:latest", "TrainingInputMode": "File"},
        "HyperParameters": hyper,
        "OutputDataConfig": {"S3OutputPath": "s3://bucket/out"},
        "ResourceConfig": {"InstanceType": instance_type, "InstanceCount": 1, "VolumeSizeInGB": 10},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600}
    })
}

#[tokio::test]
async fn a_created_job_moves_through_its_lifecycle_as_the_emulator_clock_moves() {
    let stand = Stand::start(Config::default()).await;
    let arn = stand
        .backend
        .create_training_job(request(
            "life-1",
            "ml.m5.large",
            json!({"emulator_duration_s": "5"}),
        ))
        .await
        .unwrap();
    assert_eq!(
        arn,
        "arn:aws:sagemaker:us-east-1:000000000000:training-job/life-1"
    );
    let defaults = Config::default();
    // (time to move the clock by, expected status, expected secondary status)
    let steps = [
        (0, TrainingStatus::InProgress, "Starting"),
        (
            defaults.provisioning_ms,
            TrainingStatus::InProgress,
            "Downloading",
        ),
        (defaults.download_ms, TrainingStatus::InProgress, "Training"),
        (4_999, TrainingStatus::InProgress, "Training"),
        (1, TrainingStatus::InProgress, "Uploading"),
        (defaults.upload_ms, TrainingStatus::Completed, "Completed"),
    ];
    for (advance, status, secondary) in steps {
        stand.advance_ms(advance);
        let state = stand.backend.describe_training_job("life-1").await.unwrap();
        assert_eq!(state.name, "life-1");
        assert_eq!(state.arn, arn);
        assert_eq!(
            (state.status, state.secondary.as_str()),
            (status, secondary),
            "after {advance} ms more"
        );
        assert_eq!(state.failure_reason, None);
    }
}

#[tokio::test]
async fn a_failed_job_carries_its_failure_reason() {
    let stand = Stand::start(Config::default()).await;
    let hyper = json!({"emulator_duration_s": "1", "emulator_outcome": "Failed:AlgorithmError: loss is NaN"});
    stand
        .backend
        .create_training_job(request("fail-1", "ml.m5.large", hyper))
        .await
        .unwrap();
    stand.advance_ms(60_000);
    let state = stand.backend.describe_training_job("fail-1").await.unwrap();
    assert_eq!(state.status, TrainingStatus::Failed);
    assert_eq!(
        state.failure_reason.as_deref(),
        Some("AlgorithmError: loss is NaN")
    );
}

#[tokio::test]
async fn sagemaker_refusals_arrive_classified() {
    let mut config = Config::default();
    config.account_quotas.insert("ml.p3.2xlarge".into(), 1);
    let stand = Stand::start(config).await;
    let backend = &stand.backend;
    backend
        .create_training_job(request("dup-1", "ml.m5.large", json!({})))
        .await
        .unwrap();

    let duplicate = backend
        .create_training_job(request("dup-1", "ml.m5.large", json!({})))
        .await;
    assert!(
        matches!(&duplicate, Err(BackendError::AlreadyExists(m)) if m.contains("dup-1")),
        "{duplicate:?}"
    );

    backend
        .create_training_job(request("gpu-1", "ml.p3.2xlarge", json!({})))
        .await
        .unwrap();
    let over_quota = backend
        .create_training_job(request("gpu-2", "ml.p3.2xlarge", json!({})))
        .await;
    assert!(
        matches!(&over_quota, Err(BackendError::Capacity(m)) if m.contains("ml.p3.2xlarge")),
        "{over_quota:?}"
    );

    let invalid = backend
        .create_training_job(request(
            "bad-1",
            "ml.m5.large",
            json!({"emulator_outcome": "Maybe"}),
        ))
        .await;
    assert!(
        matches!(&invalid, Err(BackendError::Rejected { code, message })
            if code == "ValidationException" && message.contains("emulator_outcome")),
        "{invalid:?}"
    );

    let mut no_output = request("bad-2", "ml.m5.large", json!({}));
    no_output
        .as_object_mut()
        .unwrap()
        .remove("OutputDataConfig");
    let missing = backend.create_training_job(no_output).await;
    assert!(
        matches!(&missing, Err(BackendError::Rejected { code, message })
            if code == "ValidationException" && message.contains("OutputDataConfig")),
        "{missing:?}"
    );

    let mut unknown = request("bad-3", "ml.m5.large", json!({}));
    unknown["ResourceConfig"]["InstanceTypo"] = json!("ml.p5.48xlarge");
    let refused = backend.create_training_job(unknown).await;
    assert!(
        matches!(&refused, Err(BackendError::Rejected { code, message })
            if code == "ValidationException" && message.contains("ResourceConfig.InstanceTypo")),
        "{refused:?}"
    );
    // Refused, not created.
    assert!(matches!(
        backend.describe_training_job("bad-3").await,
        Err(BackendError::NotFound(_))
    ));

    for name in ["never-created", "gpu-2", "bad-1"] {
        assert!(
            matches!(
                backend.describe_training_job(name).await,
                Err(BackendError::NotFound(_))
            ),
            "describe {name}"
        );
        assert!(
            matches!(
                backend.stop_training_job(name).await,
                Err(BackendError::NotFound(_))
            ),
            "stop {name}"
        );
    }
}

#[tokio::test]
async fn stopping_goes_through_stopping_to_stopped_and_stopping_again_is_fine() {
    let stand = Stand::start(Config::default()).await;
    let backend = &stand.backend;
    backend
        .create_training_job(request(
            "stop-1",
            "ml.m5.large",
            json!({"emulator_duration_s": "600"}),
        ))
        .await
        .unwrap();
    stand.advance_ms(1_000);
    assert_eq!(
        backend
            .describe_training_job("stop-1")
            .await
            .unwrap()
            .secondary,
        "Training"
    );

    backend.stop_training_job("stop-1").await.unwrap();
    let stopping = backend.describe_training_job("stop-1").await.unwrap();
    assert_eq!(stopping.status, TrainingStatus::Stopping);
    backend.stop_training_job("stop-1").await.unwrap();

    stand.advance_ms(Config::default().stop_grace_ms);
    let stopped = backend.describe_training_job("stop-1").await.unwrap();
    assert_eq!(
        (stopped.status, stopped.secondary.as_str()),
        (TrainingStatus::Stopped, "Stopped")
    );
    // The emulator refuses this with a ValidationException; the port says it is not an error.
    backend.stop_training_job("stop-1").await.unwrap();
}

#[tokio::test]
async fn stopping_a_completed_job_is_not_an_error() {
    let stand = Stand::start(Config::default()).await;
    stand
        .backend
        .create_training_job(request(
            "done-1",
            "ml.m5.large",
            json!({"emulator_duration_s": "0"}),
        ))
        .await
        .unwrap();
    stand.advance_ms(10_000);
    let done = stand.backend.describe_training_job("done-1").await.unwrap();
    assert_eq!(done.status, TrainingStatus::Completed);
    stand.backend.stop_training_job("done-1").await.unwrap();
}

/// A request using most members SageMaker's `CreateTrainingJob` has (the SageMaker Python SDK's
/// usual ones and more), with values unlike the defaults.
fn everything(name: &str) -> Value {
    json!({
        "TrainingJobName": name,
        "RoleArn": "arn:aws:iam::000000000000:role/Trainer",
        "HyperParameters": {"epochs": "3", "lr": "0.01", "emulator_duration_s": "1"},
        "AlgorithmSpecification": {
            "TrainingImage": "123456789012.dkr.ecr.us-east-1.amazonaws.com/train:1",
            "TrainingInputMode": "FastFile",
            "MetricDefinitions": [{"Name": "loss", "Regex": "loss=([0-9.]+)"}],
            "EnableSageMakerMetricsTimeSeries": true,
            "ContainerEntrypoint": ["python", "train.py"],
            "ContainerArguments": ["--fast"],
            "TrainingImageConfig": {
                "TrainingRepositoryAccessMode": "Vpc",
                "TrainingRepositoryAuthConfig": {
                    "TrainingRepositoryCredentialsProviderArn": "arn:aws:lambda:us-east-1:000000000000:function:creds"
                }
            }
        },
        "InputDataConfig": [
            {
                "ChannelName": "train",
                "DataSource": {"S3DataSource": {
                    "S3DataType": "S3Prefix",
                    "S3Uri": "s3://bucket/train/",
                    "S3DataDistributionType": "ShardedByS3Key",
                    "AttributeNames": ["a"],
                    "InstanceGroupNames": ["workers"]
                }},
                "ContentType": "application/x-parquet",
                "CompressionType": "Gzip",
                "RecordWrapperType": "RecordIO",
                "InputMode": "Pipe",
                "ShuffleConfig": {"Seed": 42}
            },
            {
                "ChannelName": "fsx",
                "DataSource": {"FileSystemDataSource": {
                    "FileSystemId": "fs-0123456789abcdef0",
                    "FileSystemAccessMode": "ro",
                    "FileSystemType": "FSxLustre",
                    "DirectoryPath": "/fsx/data"
                }}
            }
        ],
        "OutputDataConfig": {"S3OutputPath": "s3://bucket/out", "KmsKeyId": "key-1", "CompressionType": "NONE"},
        "ResourceConfig": {
            "InstanceGroups": [
                {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 2, "InstanceGroupName": "workers"},
                {"InstanceType": "ml.c5.xlarge", "InstanceCount": 1, "InstanceGroupName": "loaders"}
            ],
            "VolumeSizeInGB": 200,
            "VolumeKmsKeyId": "key-2",
            "KeepAlivePeriodInSeconds": 300
        },
        "VpcConfig": {"SecurityGroupIds": ["sg-1"], "Subnets": ["subnet-1", "subnet-2"]},
        "StoppingCondition": {"MaxRuntimeInSeconds": 7200, "MaxWaitTimeInSeconds": 9000, "MaxPendingTimeInSeconds": 7200},
        "Tags": [{"Key": "team", "Value": "vision"}, {"Key": "trainyard:job", "Value": "j"}],
        "EnableNetworkIsolation": true,
        "EnableInterContainerTrafficEncryption": true,
        "EnableManagedSpotTraining": true,
        "CheckpointConfig": {"S3Uri": "s3://bucket/ckpt", "LocalPath": "/opt/ml/checkpoints"},
        "DebugHookConfig": {
            "S3OutputPath": "s3://bucket/debug",
            "LocalPath": "/opt/ml/debug",
            "HookParameters": {"save_interval": "100"},
            "CollectionConfigurations": [{"CollectionName": "losses", "CollectionParameters": {"x": "y"}}]
        },
        "DebugRuleConfigurations": [{
            "RuleConfigurationName": "vanishing",
            "RuleEvaluatorImage": "rules:1",
            "InstanceType": "ml.t3.medium",
            "VolumeSizeInGB": 30,
            "RuleParameters": {"rule_to_invoke": "VanishingGradient"}
        }],
        "TensorBoardOutputConfig": {"S3OutputPath": "s3://bucket/tb", "LocalPath": "/opt/ml/tb"},
        "ExperimentConfig": {"ExperimentName": "exp", "TrialName": "trial", "TrialComponentDisplayName": "tc", "RunName": "run"},
        "ProfilerConfig": {"S3OutputPath": "s3://bucket/prof", "ProfilingIntervalInMilliseconds": 500, "ProfilingParameters": {"DataloaderProfilingConfig": "{}"}, "DisableProfiler": false},
        "ProfilerRuleConfigurations": [{"RuleConfigurationName": "report", "RuleEvaluatorImage": "rules:1", "RuleParameters": {"rule_to_invoke": "ProfilerReport"}}],
        "Environment": {"MODE": "fast", "SEED": "7"},
        "RetryStrategy": {"MaximumRetryAttempts": 3},
        "RemoteDebugConfig": {"EnableRemoteDebug": false},
        "InfraCheckConfig": {"EnableInfraCheck": true},
        "SessionChainingConfig": {"EnableSessionTagChaining": true}
    })
}

#[tokio::test]
async fn every_member_sent_is_what_the_emulator_stores_and_describes() {
    let stand = Stand::start(Config::default()).await;
    let sent = everything("all-1");
    let arn = stand
        .backend
        .create_training_job(sent.clone())
        .await
        .unwrap();
    let stored = stand.stored("all-1");
    let sent = sent.as_object().unwrap();
    assert!(
        sent.len() >= 25,
        "the request exercises most top-level members"
    );
    for (member, value) in sent {
        if member == "Tags" {
            continue; // DescribeTrainingJob does not show tags; ListTags does.
        }
        assert_eq!(stored.get(member), Some(value), "{member}");
    }
    let tags = stand.emulator.with(|e, _| e.list_tags(&arn)).unwrap();
    assert_eq!(&tags, &sent["Tags"]);

    // And the SDK reads the description back (through the backend's own parsing).
    let state = stand.backend.describe_training_job("all-1").await.unwrap();
    assert_eq!(
        (state.name.as_str(), state.arn.as_str()),
        ("all-1", arn.as_str())
    );
    assert_eq!(state.status, TrainingStatus::InProgress);
}

/// Members the SDK's typed input does not have (`ResourceConfig.InstancePreferences` is newer
/// than this SDK) reach SageMaker as they were sent: the launch carries the JSON unchanged.
#[tokio::test]
async fn members_newer_than_the_sdk_reach_sagemaker_unchanged() {
    let stand = Stand::start(Config::default()).await;
    let mut sent = preferring("newer-1");
    sent["MlflowConfig"] = json!({
        "MlflowResourceArn": "arn:aws:sagemaker:us-east-1:000000000000:mlflow-tracking-server/t",
        "MlflowExperimentName": "exp"
    });
    sent["ModelPackageConfig"] = json!({
        "ModelPackageGroupArn": "arn:aws:sagemaker:us-east-1:000000000000:model-package-group/g"
    });
    stand
        .backend
        .create_training_job(sent.clone())
        .await
        .unwrap();
    let stored = stand.stored("newer-1");
    for member in ["MlflowConfig", "ModelPackageConfig"] {
        assert_eq!(stored[member], sent[member], "{member}");
    }
    assert_eq!(
        stored["ResourceConfig"]["InstancePreferences"],
        sent["ResourceConfig"]["InstancePreferences"]
    );
    assert_eq!(
        stored["ResourceConfig"]["SelectedInstanceType"],
        json!("ml.p5.48xlarge")
    );
}

/// `DescribeTrainingJob` names the preference SageMaker launched (`SelectedInstanceType`, which
/// the SDK's typed output lacks): reconciliation reads it from the response, so an attempt whose
/// state-change events were lost still gives back the preferences it does not use. A job without
/// preferences has none.
#[tokio::test]
async fn describe_reads_which_preference_sagemaker_launched() {
    let stand = Stand::start(Config::default()).await;
    assert_eq!(
        launched_type(&stand, preferring("first-1"))
            .await
            .as_deref(),
        Some("ml.p5.48xlarge")
    );
    let plain = request("plain-1", "ml.p5.48xlarge", json!({}));
    assert_eq!(launched_type(&stand, plain).await, None);

    // No p5 quota: SageMaker launches the second preference, and describe says so.
    let stand = Stand::start(Config {
        account_quotas: [("ml.p5.48xlarge".to_owned(), 0)].into(),
        ..Config::default()
    })
    .await;
    assert_eq!(
        launched_type(&stand, preferring("second-1"))
            .await
            .as_deref(),
        Some("ml.p4d.24xlarge")
    );
}

/// A request for 2 `ml.p5.48xlarge`, else 4 `ml.p4d.24xlarge` (`InstancePreferences`, newer
/// than the SDK's types).
fn preferring(name: &str) -> Value {
    let mut sent = request(name, "ml.p5.48xlarge", json!({}));
    sent["ResourceConfig"] = json!({
        "InstanceCount": 2,
        "VolumeSizeInGB": 100,
        "InstancePreferences": [
            {"InstanceType": "ml.p5.48xlarge"},
            {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 4}
        ]
    });
    sent
}

/// Launches `request` through the backend and returns the `SelectedInstanceType` its
/// `DescribeTrainingJob` reads.
async fn launched_type(stand: &Stand, request: Value) -> Option<String> {
    let name = request["TrainingJobName"].as_str().unwrap().to_owned();
    stand.backend.create_training_job(request).await.unwrap();
    let state = stand.backend.describe_training_job(&name).await.unwrap();
    state.selected_instance_type
}

/// A stand-in for SageMaker that answers every request with one canned error, counting the
/// requests. Serves at most `MAX_REQUESTS` connections, each bounded in time.
async fn canned_error(status: u16, code: &'static str) -> (String, Arc<AtomicUsize>) {
    const MAX_REQUESTS: usize = 10;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&count);
    tokio::spawn(async move {
        for _ in 0..MAX_REQUESTS {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            counted.fetch_add(1, Ordering::SeqCst);
            let body = format!(r#"{{"__type":"{code}","message":"canned {code}"}}"#);
            let response = format!(
                "HTTP/1.1 {status} Canned\r\nContent-Type: application/x-amz-json-1.1\r\nx-amzn-ErrorType: {code}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = tokio::time::timeout(Duration::from_secs(5), answer(&stream, &response)).await;
        }
    });
    (format!("http://{addr}"), count)
}

/// Reads one whole request (headers, then `Content-Length` bytes), then writes `response`.
async fn answer(stream: &tokio::net::TcpStream, response: &str) -> std::io::Result<()> {
    let mut request = Vec::new();
    let mut buf = [0_u8; 4096];
    loop {
        stream.readable().await?;
        match stream.try_read(&mut buf) {
            Ok(0) => break,
            Ok(n) => request.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
        let text = String::from_utf8_lossy(&request);
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if request.len() >= end + 4 + length {
                break;
            }
        }
    }
    let mut rest = response.as_bytes();
    while !rest.is_empty() {
        stream.writable().await?;
        match stream.try_write(rest) {
            Ok(n) => rest = &rest[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// What a case expects of the backend's error.
type Expect = fn(&BackendError) -> bool;

#[tokio::test]
async fn throttling_is_retried_by_the_sdk_three_times_in_all_then_unavailable() {
    // (story, HTTP status, code, attempts the SDK makes, what the backend says)
    let cases: [(&str, u16, &str, usize, Expect); 4] = [
        (
            "throttled",
            400,
            "ThrottlingException",
            3,
            |e| matches!(e, BackendError::Unavailable(m) if m.contains("ThrottlingException")),
        ),
        ("service unavailable", 503, "ServiceUnavailable", 3, |e| {
            matches!(e, BackendError::Unavailable(_))
        }),
        (
            "invalid: not retried",
            400,
            "ValidationException",
            1,
            |e| matches!(e, BackendError::Rejected { code, .. } if code == "ValidationException"),
        ),
        (
            "capacity: not retried",
            400,
            "ResourceLimitExceeded",
            1,
            |e| matches!(e, BackendError::Capacity(_)),
        ),
    ];
    for (story, status, code, attempts, expected) in cases {
        let (endpoint, count) = canned_error(status, code).await;
        // The production strategy (3 attempts), with short backoffs to keep the test quick.
        let retry = RetryConfig::standard().with_initial_backoff(Duration::from_millis(5));
        let backend = SageMakerBackend::new(client(&endpoint, retry));
        let error = backend
            .create_training_job(request("t-1", "ml.m5.large", json!({})))
            .await
            .unwrap_err();
        assert!(expected(&error), "{story}: {error:?}");
        assert_eq!(count.load(Ordering::SeqCst), attempts, "{story}");
    }
    assert_eq!(RetryConfig::standard().max_attempts(), 3);
}

#[tokio::test]
async fn listing_finds_jobs_by_name_and_status_newest_first_across_pages() {
    let stand = Stand::start(Config::default()).await;
    let backend = &stand.backend;
    let jobs = [("rec-1", "0"), ("rec-2", "600"), ("other-1", "600")];
    for (name, duration) in jobs {
        backend
            .create_training_job(request(
                name,
                "ml.m5.large",
                json!({"emulator_duration_s": duration}),
            ))
            .await
            .unwrap();
        stand.advance_ms(1_000);
    }
    stand.advance_ms(10_000); // rec-1 completes; the others train on.

    let names = |jobs: Vec<trainyard_app::ports::TrainingJobState>| {
        jobs.into_iter()
            .map(|j| (j.name, j.status))
            .collect::<Vec<_>>()
    };
    let cases = [
        (
            "by name, newest first",
            Some("rec"),
            None,
            10,
            vec![
                ("rec-2".to_owned(), TrainingStatus::InProgress),
                ("rec-1".to_owned(), TrainingStatus::Completed),
            ],
        ),
        (
            "by name and status",
            Some("rec"),
            Some(TrainingStatus::Completed),
            10,
            vec![("rec-1".to_owned(), TrainingStatus::Completed)],
        ),
        (
            "at most the limit",
            None,
            None,
            1,
            vec![("other-1".to_owned(), TrainingStatus::InProgress)],
        ),
        ("a limit of zero asks nothing", None, None, 0, vec![]),
    ];
    for (story, name_contains, status, limit, expected) in cases {
        let listed = backend
            .list_training_jobs(name_contains, status, limit)
            .await
            .unwrap();
        assert_eq!(names(listed), expected, "{story}");
    }

    // More jobs than one page holds: the paginator follows NextToken.
    for i in 0..120 {
        stand
            .emulator
            .with(|e, now| {
                e.create_training_job(
                    request(&format!("bulk-{i:03}"), "ml.m5.large", json!({})),
                    now,
                )
            })
            .unwrap();
        stand.advance_ms(1);
    }
    let bulk = backend
        .list_training_jobs(Some("bulk"), None, 1_000)
        .await
        .unwrap();
    let listed: Vec<String> = bulk.into_iter().map(|j| j.name).collect();
    let expected: Vec<String> = (0..120).rev().map(|i| format!("bulk-{i:03}")).collect();
    assert_eq!(listed, expected);
}
