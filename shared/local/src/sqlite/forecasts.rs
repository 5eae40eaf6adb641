//! What the start-time forecaster learnt, kept in the store's file (one row, replaced whole) so
//! that `trainyard up` after a restart estimates from where the last run left off.

use rusqlite::OptionalExtension;
use trainyard_app::ports::{ForecastMemory, MemoryFuture, StoreError};
use trainyard_forecast::Learned;

use super::{SqliteStore, classify, cooperate, encode};

/// The row's name in errors.
const KEY: &str = "forecaster";

impl SqliteStore {
    /// What was kept, or `None` before anything was.
    pub fn learned(&self) -> Result<Option<Learned>, StoreError> {
        let doc: Option<String> = self
            .lock()
            .query_row("SELECT doc FROM forecaster WHERE id = 1", [], |r| r.get(0))
            .optional()
            .map_err(classify)?;
        doc.map(|doc| {
            serde_json::from_str(&doc).map_err(|e| StoreError::Corrupt {
                key: KEY.to_owned(),
                message: e.to_string(),
            })
        })
        .transpose()
    }

    /// Keeps `learned` in place of what was.
    pub fn keep_learned(&self, learned: &Learned) -> Result<(), StoreError> {
        let doc = encode(KEY, learned)?;
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        self.lock()
            .execute(
                "INSERT INTO forecaster (id, saved_at_ms, doc) VALUES (1, ?1, ?2) \
                 ON CONFLICT (id) DO UPDATE SET saved_at_ms = ?1, doc = ?2",
                rusqlite::params![now_ms, doc],
            )
            .map_err(classify)?;
        Ok(())
    }
}

impl ForecastMemory for SqliteStore {
    fn load(&self) -> MemoryFuture<'_, Option<Learned>> {
        Box::pin(async move {
            cooperate().await;
            self.learned()
        })
    }

    fn save<'a>(&'a self, learned: &'a Learned) -> MemoryFuture<'a, ()> {
        Box::pin(async move {
            cooperate().await;
            self.keep_learned(learned)
        })
    }
}
