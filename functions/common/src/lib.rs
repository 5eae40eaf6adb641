//! What Trainyard's four Lambda functions share. Each function's `main.rs` is a composition
//! root: it reads the [`config`], builds the [`aws`] adapters once per cold start, and hands
//! each event to its handler here. The handlers are generic over the store, event sink and
//! training backend ports, so tests run them over the memory store and the SageMaker emulator
//! with the very events in `events/`.
//!
//! # Layout
//!
//! - [`config`]: environment variables, validated together at cold start.
//! - [`error`]: the invocation error and its `Diagnostic`.
//! - [`logging`]: JSON logs.
//! - [`metrics`]: CloudWatch EMF lines per invocation and per schedule tick.
//! - [`aws`]: DynamoDB, SageMaker and EventBridge adapters.
//! - [`setup`]: the initial service environment and queue (created by the `api` function).
//! - [`api`], [`scheduler`], [`training_events`], [`retry`]: one handler per function.
//! - [`runtime`]: running a handler under `lambda_runtime`.
//!
//! `docs/functions.md` describes each function's trigger, configuration and error handling.

pub mod api;
pub mod aws;
pub mod config;
pub mod error;
pub mod logging;
pub mod metrics;
pub mod retry;
pub mod runtime;
pub mod scheduler;
pub mod setup;
pub mod training_events;

pub use config::Config;
pub use error::FunctionError;
