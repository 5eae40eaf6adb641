//! The audit trail in SQLite: one row per record, keyed by (time, id), with the columns its
//! listing filters on. Expired rows are deleted as new ones are appended, at most once a second.

use rusqlite::params_from_iter;
use rusqlite::types::Value;
use trainyard_app::ports::{AuditPage, AuditQuery, AuditRecord, AuditStore, StoreError};

use std::sync::atomic::Ordering;

use super::{SqliteStore, classify, cooperate, encode};

/// How often (in record time) an append first deletes the expired rows.
const PRUNE_EVERY_MS: i64 = 1_000;

impl SqliteStore {
    fn append_audit_sync(&self, record: &AuditRecord) -> Result<(), StoreError> {
        let doc = encode(&record.id, record)?;
        let conn = self.lock();
        // Forget what has expired, at most once a second of record time (listings leave
        // expired rows out meanwhile).
        let pruned = self.audit_pruned_at.load(Ordering::Relaxed);
        if record.at_ms >= pruned.saturating_add(PRUNE_EVERY_MS) || record.at_ms < pruned {
            conn.prepare_cached("DELETE FROM audit WHERE expires_at_ms <= ?1")
                .and_then(|mut stmt| stmt.execute([record.at_ms]))
                .map_err(classify)?;
            self.audit_pruned_at.store(record.at_ms, Ordering::Relaxed);
        }
        conn.prepare_cached(
            "INSERT INTO audit (at_ms, id, principal, action, allowed, expires_at_ms, doc) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )
        .and_then(|mut stmt| {
            stmt.execute(rusqlite::params![
                record.at_ms,
                record.id,
                record.principal,
                record.action,
                record.allowed,
                record.expires_at_ms,
                doc
            ])
        })
        .map_err(classify)?;
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
        cooperate().await;
        self.append_audit_sync(record)
    }

    async fn list_audit(&self, query: &AuditQuery) -> Result<AuditPage, StoreError> {
        cooperate().await;
        self.list_audit_sync(query)
    }
}
