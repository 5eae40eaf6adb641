//! Trainyard's domain model: the pure core shared by every host (Lambda, local mode, simulator).
//!
//! It speaks AWS Batch's vocabulary for service jobs. Nothing here performs I/O, reads a clock or
//! draws OS randomness: times are epoch milliseconds passed in by the caller, identifiers are made
//! elsewhere, and the one generator ([`random`]) is seeded by its caller. `Cargo.toml` is the proof: serde and thiserror only.
//!
//! # Layout
//!
//! - [`arn`]: ARNs for every resource kind, and resolving "a name or an ARN" as Batch accepts.
//! - [`job`]: the service job, its attempts and its status state machine.
//! - [`payload`]: the SageMaker `CreateTrainingJob` request inside `serviceRequestPayload`, parsed
//!   for what scheduling needs (instances per type, runtime bound).
//! - [`environment`], [`queue`], [`policy`], [`quota_share`]: the configuration resources.
//! - [`limits`]: every documented range and size limit, in one place, each with its source.
//! - [`names`]: the resource-name rule Batch applies to queues, environments, policies, shares.
//! - [`random`]: the one seeded generator (SplitMix64) and stable hash (FNV-1a) every crate uses.
//! - [`order`]: the dispatch order of RUNNABLE jobs within a share ([`order::runnable_rank`]).
//! - [`training`]: attempts as SageMaker knows them: training-job names, SageMaker's status
//!   vocabulary and its mapping to Batch statuses.
//! - [`wire`]: a job as Batch's API renders it (`DescribeServiceJob`, `ListServiceJobs`), for the
//!   API and the EventBridge events alike.

pub mod arn;
pub mod environment;
pub mod job;
pub mod labels;
pub mod limits;
pub mod names;
pub mod order;
pub mod payload;
pub mod policy;
pub mod queue;
pub mod quota_share;
pub mod random;
pub mod time;
pub mod training;
pub mod wire;

/// Tags on a resource: at most 50, keys 1–128 characters, values up to 256 (see [`limits`]).
/// A `BTreeMap` so that serialised output is stable.
pub type Tags = std::collections::BTreeMap<String, String>;

/// `ENABLED` / `DISABLED`, shared by service environments, job queues and quota shares.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    Default,
)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum State {
    /// Accepts new work.
    #[default]
    Enabled,
    /// Accepts no new work; work already accepted finishes.
    Disabled,
}

/// Lifecycle status of a configuration resource (`CREATING`, `VALID`, …). Trainyard applies
/// configuration synchronously, so resources it reports are `VALID` unless being deleted.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    Default,
)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ResourceStatus {
    /// Being created.
    Creating,
    /// Being updated.
    Updating,
    /// Being deleted.
    Deleting,
    /// Deleted.
    Deleted,
    /// Ready for use.
    #[default]
    Valid,
    /// Misconfigured.
    Invalid,
}
