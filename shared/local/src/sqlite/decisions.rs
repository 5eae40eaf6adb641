//! Decision records in SQLite: one row per scheduling cycle, numbered in the order they were
//! appended; the newest kept, at most [`DECISIONS_KEPT`] of them and [`DECISIONS_MAX_BYTES`] in
//! all (each append deletes what falls out).

use rusqlite::{OptionalExtension, params};
use trainyard_app::ports::StoreError;
use trainyard_app::service::scheduling::{DecisionLog, DecisionRecord};

use super::{SqliteStore, classify, cooperate, encode};

/// How many records the store keeps at most.
pub const DECISIONS_KEPT: i64 = 10_000;

/// How many bytes of records the store keeps at most. A record grows with the lines and the
/// capacity, not with the backlog, but at 1,000 busy shares it is about 3 MB: then fewer than
/// [`DECISIONS_KEPT`] fit.
pub const DECISIONS_MAX_BYTES: i64 = 256 * 1024 * 1024;

/// Every how many appends the byte budget is enforced.
const PRUNE_BYTES_EVERY: i64 = 16;

/// One stored record, summarised for a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecisionRow {
    /// Its number: 1 for the first cycle recorded in this data directory.
    pub seq: i64,
    /// Its id.
    pub id: String,
    /// When the cycle planned (epoch ms).
    pub at_ms: i64,
    /// Dispatches planned.
    pub dispatches: i64,
    /// Preemptions planned.
    pub preemptions: i64,
    /// Jobs planned that wait (all of them, not only the skips the record keeps).
    pub skips: i64,
}

impl SqliteStore {
    /// Appends `record`, then drops the oldest beyond [`DECISIONS_KEPT`] and `max_bytes`.
    fn append_decision_sync(
        &self,
        record: &DecisionRecord,
        max_bytes: i64,
    ) -> Result<(), StoreError> {
        let doc = encode(&record.id, record)?;
        let conn = self.lock();
        conn.execute(
            "INSERT INTO decisions (id, at_ms, dispatches, preemptions, skips, bytes, doc) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                record.id,
                record.at_ms,
                record.plan.dispatches.len() as i64,
                record.plan.preemptions.len() as i64,
                record.skips_total as i64,
                doc.len() as i64,
                doc
            ],
        )
        .map_err(classify)?;
        conn.execute(
            "DELETE FROM decisions WHERE seq <= last_insert_rowid() - ?1",
            [DECISIONS_KEPT],
        )
        .map_err(classify)?;
        // The oldest beyond the byte budget, counting from the newest: a scan of the table, so
        // every 16th append (the budget is overrun by at most 15 records meanwhile).
        if conn.last_insert_rowid() % PRUNE_BYTES_EVERY != 0 {
            return Ok(());
        }
        conn.execute(
            "DELETE FROM decisions WHERE seq <= (SELECT max(seq) FROM \
             (SELECT seq, sum(bytes) OVER (ORDER BY seq DESC) AS kept FROM decisions) \
             WHERE kept > ?1)",
            [max_bytes],
        )
        .map_err(classify)?;
        Ok(())
    }

    /// The newest `limit` records, newest first, summarised.
    pub fn decisions(&self, limit: usize) -> Result<Vec<DecisionRow>, StoreError> {
        let conn = self.lock();
        let mut statement = conn
            .prepare(
                "SELECT seq, id, at_ms, dispatches, preemptions, skips FROM decisions \
                 ORDER BY seq DESC LIMIT ?1",
            )
            .map_err(classify)?;
        let rows = statement
            .query_map([i64::try_from(limit).unwrap_or(i64::MAX)], |r| {
                Ok(DecisionRow {
                    seq: r.get(0)?,
                    id: r.get(1)?,
                    at_ms: r.get(2)?,
                    dispatches: r.get(3)?,
                    preemptions: r.get(4)?,
                    skips: r.get(5)?,
                })
            })
            .map_err(classify)?;
        rows.collect::<Result<Vec<_>, _>>().map_err(classify)
    }

    /// The record numbered `seq`, or with id `seq`, with its number.
    pub fn decision(&self, seq_or_id: &str) -> Result<Option<(i64, DecisionRecord)>, StoreError> {
        let conn = self.lock();
        // By the key or by the unique id: each an index lookup (`--all` looks up every record).
        let row = |r: &rusqlite::Row<'_>| Ok((r.get(0)?, r.get(1)?));
        let found: Option<(i64, String)> = match seq_or_id.parse::<i64>() {
            Ok(seq) => conn.query_row("SELECT seq, doc FROM decisions WHERE seq = ?1", [seq], row),
            Err(_) => conn.query_row(
                "SELECT seq, doc FROM decisions WHERE id = ?1",
                [seq_or_id],
                row,
            ),
        }
        .optional()
        .map_err(classify)?;
        found
            .map(|(seq, doc)| {
                serde_json::from_str(&doc)
                    .map(|record| (seq, record))
                    .map_err(|e| StoreError::Corrupt {
                        key: format!("decision {seq}"),
                        message: e.to_string(),
                    })
            })
            .transpose()
    }
}

impl DecisionLog for SqliteStore {
    async fn append_decision(&self, record: &DecisionRecord) -> Result<(), StoreError> {
        cooperate().await;
        self.append_decision_sync(record, DECISIONS_MAX_BYTES)
    }
}

#[cfg(test)]
mod tests {
    use trainyard_scheduler::{Config as PlannerConfig, Plan, Snapshot};

    use super::*;

    fn record(i: i64) -> DecisionRecord {
        let snapshot = Snapshot::default();
        let planner = PlannerConfig::default();
        DecisionRecord::new(
            format!("cycle-{i}"),
            i,
            &snapshot,
            &planner,
            &Plan::default(),
        )
    }

    #[tokio::test]
    async fn records_are_numbered_found_by_number_or_id_and_the_oldest_dropped() {
        let store = SqliteStore::open_in_memory().unwrap();
        let total = DECISIONS_KEPT + 3;
        for i in 1..=total {
            store.append_decision(&record(i)).await.unwrap();
        }
        let newest = store.decisions(2).unwrap();
        let seqs: Vec<i64> = newest.iter().map(|r| r.seq).collect();
        assert_eq!(seqs, [total, total - 1], "newest first");
        assert_eq!(newest[0].id, format!("cycle-{total}"));
        let kept = store.decisions(usize::MAX >> 1).unwrap();
        assert_eq!(kept.len() as i64, DECISIONS_KEPT, "the oldest dropped");
        assert_eq!(kept.last().map(|r| r.seq), Some(4));
        assert!(store.decision("3").unwrap().is_none(), "dropped");
        let (seq, found) = store.decision("cycle-10").unwrap().unwrap();
        assert_eq!((seq, found), (10, record(10)));
        let (seq, _) = store.decision("10").unwrap().unwrap();
        assert_eq!(seq, 10);
    }

    #[test]
    fn the_oldest_records_beyond_the_byte_budget_are_dropped() {
        let store = SqliteStore::open_in_memory().unwrap();
        let budget = 30_000;
        let mut big = record(1);
        // About a third of the budget each: three cannot all be kept.
        big.trigger = "x".repeat(budget / 3);
        for i in 1..=PRUNE_BYTES_EVERY {
            big.id = format!("big-{i}");
            store.append_decision_sync(&big, budget as i64).unwrap();
        }
        let kept: Vec<i64> = store
            .decisions(100)
            .unwrap()
            .iter()
            .map(|r| r.seq)
            .collect();
        let n = PRUNE_BYTES_EVERY;
        assert_eq!(kept, [n, n - 1], "the newest that fit");
    }
}
