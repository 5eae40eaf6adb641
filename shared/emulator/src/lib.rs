//! A SageMaker training-job emulator, so that Trainyard runs and is tested end to end without
//! AWS.
//!
//! The core is a sans-IO model ([`model::Emulator`]): operations and time are inputs, responses
//! and "SageMaker Training Job State Change" events are outputs. The same model drives local mode
//! (wall clock) and the simulator (virtual clock).
//!
//! # Behaviour
//!
//! - `CreateTrainingJob` validates the request like SageMaker (the members scheduling relies on),
//!   refuses a duplicate name with `ResourceInUse`, and refuses with `ResourceLimitExceeded` when
//!   the account quota for the instance type (instances of jobs in progress) would be exceeded.
//! - A job is `InProgress` and moves through the secondary statuses `Starting` (provisioning) →
//!   `Downloading` → `Training` → `Uploading`, then `Completed`. Durations come from
//!   [`model::Config`]; training lasts `HyperParameters["emulator_duration_s"]` seconds (default
//!   [`model::Config::default_training_ms`]).
//! - `HyperParameters["emulator_outcome"]` chooses the outcome: `Completed` (default),
//!   `Failed:<FailureReason>` (fails when training ends), or `CapacityError` (fails when
//!   provisioning ends, with a `CapacityError: …` reason). Random failure and capacity-error rates
//!   apply to jobs without an explicit outcome, drawn from the seed and the job name.
//! - `StopTrainingJob` moves an in-progress job to `Stopping`, then `Stopped` after the grace
//!   period. A job that trains past `StoppingCondition.MaxRuntimeInSeconds` is `Stopped` with
//!   secondary status `MaxRuntimeExceeded`.
//! - Every status or secondary-status change emits an event whose detail is shaped like
//!   `DescribeTrainingJob`; events may be duplicated or delayed by configuration.
//!
//! # Layout
//!
//! - [`model`]: the sans-IO model.
//! - `http` (feature `http`): the model behind SageMaker's awsJson1_1 protocol, for
//!   `aws-sdk-sagemaker` and boto3.
//! - `driver` (feature `http`): a task that advances the model on the wall clock and forwards
//!   its events to a channel.
//! - `shared` (features `http` or `backend`): the model behind a lock with its clock, which the
//!   HTTP face, the driver and the backend share.
//! - `backend` (feature `backend`): the model as Trainyard's `TrainingBackend` port, the one
//!   adapter that local mode, the simulator, the fault harness and the tests use.

#[cfg(feature = "backend")]
pub mod backend;
#[cfg(feature = "http")]
pub mod driver;
#[cfg(feature = "http")]
pub mod http;
pub mod model;
#[cfg(any(feature = "http", feature = "backend"))]
pub mod shared;
