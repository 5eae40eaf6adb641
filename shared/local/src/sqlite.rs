//! The embedded SQLite store (being written).

/// The SQLite-backed store (being written).
pub struct SqliteStore;
