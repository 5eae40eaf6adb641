//! Local mode's adapters: everything `trainyard up` needs besides the shared core.
//!
//! # Layout
//!
//! - [`sqlite`]: the embedded store (SQLite, bundled), with versioned schema migrations.
//! - [`event_loop`]: the in-process event sink and the scheduling loop that reacts to events,
//!   the emulator's state changes and a ticker.
//! - [`backend`]: the SageMaker emulator as the training backend.
//! - [`metrics`]: Prometheus metrics (counters from the event feed, gauges from the store).

pub mod backend;
pub mod event_loop;
pub mod metrics;
pub mod sqlite;

pub use sqlite::SqliteStore;
