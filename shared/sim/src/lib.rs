//! Trace-driven simulation: real GPU-cluster traces replayed through Trainyard's own use-cases,
//! planner and SageMaker emulator model, over virtual time, to compare scheduling policies.
//!
//! # Layout
//!
//! - [`record`]: what a run records (one [`record::JobRecord`] per job, utilization samples) —
//!   the contract between the driver that produces it and the measures that read it.
//! - [`trace`]: trace loaders (Philly, OpenB, native JSONL) and the GPU → instance mapping.
//! - [`scenario`]: scenario files (fleet, tiers, teams, timings, faults, seed) and the seeded
//!   tier rule.
//! - [`policies`]: each compared policy as real Trainyard configuration.
//! - [`driver`]: the discrete-event replay over virtual time that produces a run record.
//! - [`eta`]: start-time estimates made during a run and scored against the starts that followed.
//! - [`faults`]: seeded fault injection with invariants at every step and a liveness phase.
//! - [`measures`]: utilization, waits, completion, slowdown, fairness and preemption cost of a
//!   run, as one [`measures::PolicySummary`] per policy.
//! - [`report`]: writes `summary.json`, CSVs, `report.md` and plots for a set of runs.
//! - [`plots`]: SVG plots (utilization over time, wait-time CDFs).

pub mod driver;
pub mod eta;
pub mod faults;
mod gate;
pub mod measures;
pub mod plots;
pub mod policies;
pub mod record;
pub mod report;
pub mod scenario;
pub mod trace;
