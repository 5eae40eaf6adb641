//! Trace-driven simulation: real GPU-cluster traces replayed through Trainyard's own use-cases,
//! planner and SageMaker emulator model, over virtual time, to compare scheduling policies.
//!
//! # Layout
//!
//! - [`record`]: what a run records (one [`record::JobRecord`] per job, utilization samples) —
//!   the contract between the driver that produces it and the measures that read it.

pub mod record;
