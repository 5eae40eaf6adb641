//! Every documented range and size limit of the service-job API, in one place.
//!
//! Sources: AWS Batch API reference and user guide ("service_limits"), as collected in the
//! project's reference notes (§2.1, §4.7, §8 item 9). The API validates requests against these;
//! each message names the field and the limit.

use std::ops::RangeInclusive;

/// `serviceRequestPayload` may be at most 10 KiB.
pub const MAX_PAYLOAD_BYTES: usize = 10 * 1024;
/// A whole `SubmitServiceJob` request may be at most 30 KiB.
pub const MAX_REQUEST_BYTES: usize = 30 * 1024;
/// `schedulingPriority` of a job (higher runs first within a share).
pub const JOB_PRIORITY: RangeInclusive<i64> = 0..=9999;
/// `retryStrategy.attempts`: total times a job may be placed in RUNNABLE, the first included.
pub const RETRY_ATTEMPTS: RangeInclusive<i64> = 1..=10;
/// At most this many `evaluateOnExit` rules.
pub const MAX_EVALUATE_ON_EXIT: usize = 5;
/// `onStatusReason` glob patterns are at most this long.
pub const MAX_STATUS_REASON_PATTERN: usize = 512;
/// Job queue `priority` (the console allows 0–1000; higher is evaluated first).
pub const QUEUE_PRIORITY: RangeInclusive<i64> = 0..=1000;
/// `jobStateTimeLimitActions[].maxTimeSeconds`.
pub const STATE_TIME_LIMIT_S: RangeInclusive<i64> = 600..=86_400;
/// `fairsharePolicy.shareDecaySeconds`; 0 means the default window of
/// [`DEFAULT_SHARE_DECAY_S`].
pub const SHARE_DECAY_S: RangeInclusive<i64> = 0..=604_800;
/// The window used when `shareDecaySeconds` is 0.
pub const DEFAULT_SHARE_DECAY_S: u32 = 600;
/// `fairsharePolicy.computeReservation` (percent).
pub const COMPUTE_RESERVATION: RangeInclusive<i64> = 0..=99;
/// `shareDistribution[].weightFactor` (lower gets more).
pub const WEIGHT_FACTOR: RangeInclusive<f64> = 0.0001..=999.9999;
/// Default `weightFactor` for shares not listed in a policy.
pub const DEFAULT_WEIGHT_FACTOR: f64 = 1.0;
/// Active share identifiers per fair-share queue.
pub const MAX_ACTIVE_SHARES: usize = 500;
/// `shareIdentifier` length.
pub const MAX_SHARE_IDENTIFIER: usize = 255;
/// Quota shares per quota-management queue.
pub const MAX_QUOTA_SHARES_PER_QUEUE: usize = 20;
/// Capacity limits on a service environment or a quota share.
pub const CAPACITY_LIMITS: RangeInclusive<usize> = 1..=5;
/// Service environments per account and region.
pub const MAX_SERVICE_ENVIRONMENTS: usize = 50;
/// Job queues per account and region.
pub const MAX_JOB_QUEUES: usize = 50;
/// Service environments one job queue may use.
pub const MAX_ENVIRONMENTS_PER_QUEUE: usize = 1;
/// Tags per resource.
pub const MAX_TAGS: usize = 50;
/// Tag key length.
pub const TAG_KEY_LEN: RangeInclusive<usize> = 1..=128;
/// Tag value length.
pub const MAX_TAG_VALUE_LEN: usize = 256;
/// Resource and job names.
pub const MAX_NAME_LEN: usize = 128;
/// `clientToken` length.
pub const CLIENT_TOKEN_LEN: RangeInclusive<usize> = 1..=64;
/// `maxResults` on paginated operations; the default is the maximum.
pub const MAX_RESULTS: RangeInclusive<i64> = 1..=100;
/// Ids per `TerminateServiceJobs` call.
pub const MAX_BULK_TERMINATE: usize = 50;
/// Names or ARNs per `DescribeJobQueues` / `DescribeSchedulingPolicies` call.
pub const MAX_DESCRIBE_ITEMS: usize = 100;
/// `TrainingJobName` (SageMaker): 1–63 characters, `[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}`.
pub const TRAINING_JOB_NAME_LEN: RangeInclusive<usize> = 1..=63;
/// `ResourceConfig.InstanceGroups` (SageMaker heterogeneous clusters).
pub const MAX_INSTANCE_GROUPS: usize = 5;
/// Jobs `GetJobQueueSnapshot` lists at the front of a queue.
pub const SNAPSHOT_FRONT_OF_QUEUE: usize = 100;
