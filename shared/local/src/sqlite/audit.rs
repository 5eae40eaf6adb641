//! The audit trail in SQLite: one row per record, keyed by (time, id), with the columns its
//! listing filters on. Appends that arrive together are committed in one transaction (group
//! commit), each caller waiting for its own; expired rows are deleted as new ones are appended,
//! at most once a second.

use rusqlite::params_from_iter;
use rusqlite::types::Value;
use trainyard_app::ports::{AuditPage, AuditQuery, AuditRecord, AuditStore, StoreError};

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use rusqlite::Connection;

use super::{SqliteStore, classify, cooperate, encode};

/// How often (in record time) an append first deletes the expired rows.
const PRUNE_EVERY_MS: i64 = 1_000;

/// An append waiting for its commit: the record, its JSON, and where the writer that commits it
/// leaves the outcome.
pub(super) type Waiting = (AuditRecord, String, Arc<Mutex<Option<Result<(), String>>>>);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl SqliteStore {
    /// Commits every waiting append in one transaction, unless the one behind `mine` was
    /// committed already by another caller's, and returns the outcome for `mine`.
    ///
    /// Group commit: appends that arrive together (each request's comes after its own change,
    /// and yields once first) share one transaction instead of paying one each. Correct because
    /// a writer takes the waiting appends and records their outcomes while it holds the
    /// connection: a caller that then finds its outcome unset still has its append waiting, and
    /// commits it itself.
    fn commit_waiting_audit(
        &self,
        mine: &Mutex<Option<Result<(), String>>>,
    ) -> Result<(), StoreError> {
        let mut conn = self.lock();
        // Its own statement: a guard in a `match` scrutinee would live through the arms.
        let committed = lock(mine).take();
        let outcome = match committed {
            Some(outcome) => outcome,
            None => {
                let batch = std::mem::take(&mut *lock(&self.audit_waiting));
                let written = self
                    .write_audit(&mut conn, &batch)
                    .map_err(|e| e.to_string());
                for (_, _, slot) in &batch {
                    *lock(slot) = Some(written.clone());
                }
                let mine = lock(mine).take();
                mine.unwrap_or(written)
            }
        };
        outcome.map_err(|message| StoreError::Unavailable {
            message,
            source: None,
        })
    }

    fn write_audit(&self, conn: &mut Connection, batch: &[Waiting]) -> Result<(), StoreError> {
        let Some(newest) = batch.iter().map(|(r, _, _)| r.at_ms).max() else {
            return Ok(());
        };
        let tx = conn.transaction().map_err(classify)?;
        // Forget what has expired, at most once a second of record time (listings leave
        // expired rows out meanwhile).
        let pruned = self.audit_pruned_at.load(Ordering::Relaxed);
        let prune = newest >= pruned.saturating_add(PRUNE_EVERY_MS) || newest < pruned;
        if prune {
            tx.prepare_cached("DELETE FROM audit WHERE expires_at_ms <= ?1")
                .and_then(|mut stmt| stmt.execute([newest]))
                .map_err(classify)?;
        }
        {
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO audit (at_ms, id, principal, action, allowed, expires_at_ms, doc) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                )
                .map_err(classify)?;
            for (record, doc, _) in batch {
                insert
                    .execute(rusqlite::params![
                        record.at_ms,
                        record.id,
                        record.principal,
                        record.action,
                        record.allowed,
                        record.expires_at_ms,
                        doc
                    ])
                    .map_err(classify)?;
            }
        }
        tx.commit().map_err(classify)?;
        if prune {
            self.audit_pruned_at.store(newest, Ordering::Relaxed);
        }
        Ok(())
    }

    fn list_audit_sync(&self, query: &AuditQuery) -> Result<AuditPage, StoreError> {
        let limit = query.limit.max(1);
        let mut sql = String::from(
            "SELECT id, doc FROM audit WHERE at_ms >= ? AND at_ms < ? AND expires_at_ms > ?",
        );
        let mut values = vec![
            Value::Integer(query.since_ms),
            Value::Integer(query.until_ms),
            Value::Integer(query.now_ms),
        ];
        if let Some(principal) = &query.principal {
            sql.push_str(" AND principal = ?");
            values.push(Value::Text(principal.clone()));
        }
        if let Some(action) = &query.action {
            sql.push_str(" AND action = ?");
            values.push(Value::Text(action.clone()));
        }
        if query.denied_only {
            sql.push_str(" AND allowed = 0");
        }
        if let Some(after) = &query.after {
            sql.push_str(" AND (at_ms, id) < (?, ?)");
            values.push(Value::Integer(after.at_ms));
            values.push(Value::Text(after.id.clone()));
        }
        sql.push_str(" ORDER BY at_ms DESC, id DESC LIMIT ?");
        values.push(Value::Integer(i64::try_from(limit + 1).unwrap_or(i64::MAX)));
        let conn = self.lock();
        let rows: Vec<(String, String)> = conn
            .prepare_cached(&sql)
            .and_then(|mut stmt| {
                stmt.query_map(params_from_iter(values.iter()), |row| {
                    Ok((row.get(0)?, row.get(1)?))
                })?
                .collect()
            })
            .map_err(classify)?;
        drop(conn);
        let more = rows.len() > limit;
        let records = rows
            .iter()
            .take(limit)
            .map(|(id, doc)| {
                serde_json::from_str::<AuditRecord>(doc).map_err(|e| StoreError::Corrupt {
                    key: id.clone(),
                    message: e.to_string(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let next = if more {
            records.last().map(AuditRecord::cursor)
        } else {
            None
        };
        Ok(AuditPage { records, next })
    }
}

impl AuditStore for SqliteStore {
    async fn append_audit(&self, record: &AuditRecord) -> Result<(), StoreError> {
        let doc = encode(&record.id, record)?;
        let mine = Arc::new(Mutex::new(None));
        lock(&self.audit_waiting).push((record.clone(), doc, mine.clone()));
        // Other requests' appends join this one while it yields.
        cooperate().await;
        self.commit_waiting_audit(&mine)
    }

    async fn list_audit(&self, query: &AuditQuery) -> Result<AuditPage, StoreError> {
        cooperate().await;
        self.list_audit_sync(query)
    }
}
