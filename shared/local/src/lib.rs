//! Local mode's adapters: everything `trainyard up` needs besides the shared core.
//!
//! # Layout
//!
//! - [`sqlite`]: the embedded store (SQLite, bundled), with versioned schema migrations.
//! - [`event_loop`]: the in-process event sink and the scheduling loop that reacts to events,
//!   the emulator's state changes and a ticker.
//!
//! The SageMaker emulator as the training backend is `trainyard_emulator::backend`, shared with
//! the simulator and the tests.
//! - [`metrics`]: Prometheus metrics (counters from the event feed, gauges from the store).

pub mod event_loop;
pub mod metrics;
pub mod sqlite;

pub use sqlite::SqliteStore;
