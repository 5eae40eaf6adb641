//! Trainyard's application layer: the ports every host implements and the use-cases that
//! sequence I/O over them.
//!
//! # Layout
//!
//! - [`ports`]: traits for the store ([`ports::JobStore`], [`ports::ConfigStore`],
//!   [`ports::SchedulingStore`], and [`Store`] for all three), the training backend, events, the
//!   clock and identifiers (with the manual clock and sequential ids the simulator and tests run
//!   on), and the records they exchange. Hosts provide adapters: SQLite (local mode), DynamoDB
//!   (AWS), memory (tests, sim).
//! - [`memory`]: the in-memory store, the reference implementation of the store contract.
//! - `contract` (feature `contract`): the store contract suite, run against every store implementation.
//! - [`service`]: the use-cases behind every API operation and the scheduling loop, each module
//!   bound on the narrowest store port it needs (`service::scheduling` has one module a step of
//!   the cycle, and the one pass every host runs).
//! - [`error`]: the use-case error, classified for the API edge.
//! - [`testing`]: a store wrapper that interleaves joined use-cases, for race tests.

#[cfg(feature = "contract")]
pub mod contract;
pub mod error;
pub mod memory;
pub mod ports;
pub mod service;
pub mod testing;

pub use error::AppError;
pub use ports::{Clock, EventSink, Ids, Store};
pub use service::Service;
