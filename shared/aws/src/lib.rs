//! Trainyard's AWS adapters: the ports of `trainyard-app` implemented over AWS services.
//!
//! Endpoints come from the standard `AWS_ENDPOINT_URL_*` variables (through `aws-config`), so
//! tests point the same code at moto and at the project's SageMaker emulator; there are no
//! test-only branches.
//!
//! # Layout
//!
//! - [`dynamodb`]: the store, on one DynamoDB table.
//! - [`decisions`]: each cycle's decision record, in S3 with a summary in the table.
//! - [`forecasts`]: what the scheduler's forecaster learnt, in S3 across cold starts.
//! - [`sagemaker`]: the training backend, on SageMaker's API.
//! - [`eventbridge`]: the event sink, on an EventBridge bus.
//! - [`metrics`]: CloudWatch metrics as Embedded Metric Format log lines.
//! - [`iam`]: callers' IAM tags, for the access policies.

pub mod checkpoints;
pub mod decisions;
pub mod dynamodb;
pub mod eventbridge;
pub mod forecasts;
pub mod iam;
pub mod metrics;
mod s3_json;
pub mod sagemaker;
