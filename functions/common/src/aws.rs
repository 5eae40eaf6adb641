//! The production adapters, built once per cold start: the DynamoDB store, SageMaker and the
//! EventBridge sink, over one `aws-config` load (region, credentials and the standard
//! `AWS_ENDPOINT_URL_*` endpoint variables all come from the environment).

use std::sync::Arc;

use trainyard_app::Service;
use trainyard_app::ports::{RandomIds, SystemClock};
use trainyard_aws::checkpoints::S3Checkpoints;
use trainyard_aws::decisions::S3DecisionLog;
use trainyard_aws::dynamodb::DynamoStore;
use trainyard_aws::eventbridge::EventBridgeSink;
use trainyard_aws::forecasts::S3ForecastMemory;
use trainyard_aws::metrics::{MetricsSink, Recorder};
use trainyard_aws::sagemaker::SageMakerBackend;

use crate::config::Config;
use crate::metrics::Metrics;
use crate::scheduler::SchedulerFunction;

/// Where the functions' events go: EventBridge, counted for metrics on the way.
pub type AwsEvents = MetricsSink<EventBridgeSink>;

/// The service every function runs on: events go to EventBridge and are counted for metrics.
pub type AwsService = Service<DynamoStore, AwsEvents>;

/// The scheduler function on these adapters, keeping its decision records in `L`.
pub type AwsScheduler<L> = SchedulerFunction<DynamoStore, AwsEvents, SageMakerBackend, L>;

/// The clients of one cold start.
#[derive(Debug, Clone)]
pub struct Adapters {
    /// The store on `TRAINYARD_TABLE`.
    pub store: DynamoStore,
    /// Job and internal events on `TRAINYARD_EVENT_BUS`.
    pub events: EventBridgeSink,
    /// SageMaker (only the scheduler and retry functions call it).
    pub sagemaker: SageMakerBackend,
    /// S3: checkpoints observed, decision records kept.
    s3: aws_sdk_s3::Client,
    /// The configuration the clients were built from (for clients only one function needs).
    sdk: aws_config::SdkConfig,
}

impl Adapters {
    /// Loads the AWS configuration and builds every client.
    pub async fn load(config: &Config) -> Self {
        let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
        let s3 = aws_sdk_s3::Client::from_conf(
            aws_sdk_s3::config::Builder::from(&sdk)
                .force_path_style(config.s3_force_path_style)
                .build(),
        );
        Self {
            store: DynamoStore::new(aws_sdk_dynamodb::Client::new(&sdk), config.table.clone()),
            events: EventBridgeSink::new(
                aws_sdk_eventbridge::Client::new(&sdk),
                config.event_bus.clone(),
                config.arns.clone(),
            ),
            sagemaker: SageMakerBackend::new(aws_sdk_sagemaker::Client::new(&sdk))
                .with_checkpoints(S3Checkpoints::new(
                    s3.clone(),
                    config.checkpoint_marker.clone(),
                )),
            s3,
            sdk,
        }
    }

    /// Where the scheduler keeps its decision records: `TRAINYARD_DECISIONS_BUCKET`, if set.
    pub fn decision_log(&self, config: &Config) -> Option<S3DecisionLog> {
        let bucket = config.decisions_bucket.clone()?;
        Some(S3DecisionLog::new(
            self.s3.clone(),
            bucket,
            self.store.clone(),
            config.decision_retention_days,
        ))
    }

    /// Where the scheduler keeps what its forecaster learnt across cold starts: the decisions
    /// bucket (`TRAINYARD_DECISIONS_BUCKET`), if set.
    pub fn forecast_memory(&self, config: &Config) -> Option<S3ForecastMemory> {
        let bucket = config.decisions_bucket.clone()?;
        Some(S3ForecastMemory::new(self.s3.clone(), bucket))
    }

    /// An IAM client (the api function reads callers' tags with it).
    pub fn iam(&self) -> aws_sdk_iam::Client {
        aws_sdk_iam::Client::new(&self.sdk)
    }

    /// The use-cases over these adapters, with the system clock and random job ids, and the
    /// metrics their events are counted into.
    pub fn service(&self, config: &Config) -> (Arc<AwsService>, Metrics) {
        let metrics = Metrics::new(Arc::new(Recorder::new()), config.stack.clone());
        let service = Arc::new(
            Service::new(
                self.store.clone(),
                MetricsSink::new(self.events.clone(), metrics.recorder().clone()),
                Arc::new(SystemClock),
                Arc::new(RandomIds),
                config.arns.clone(),
            )
            .with_training_roles(config.training_role_arns.clone()),
        );
        (service, metrics)
    }
}
