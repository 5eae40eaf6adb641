//! Local mode's adapters: everything `trainyard up` needs besides the shared core.
//!
//! # Layout
//!
//! - [`sqlite`]: the embedded store (SQLite, bundled), with versioned schema migrations.
//! - [`event_loop`]: the in-process event sink and the loop that reacts to events and a ticker.

pub mod event_loop;
pub mod sqlite;

pub use sqlite::SqliteStore;
