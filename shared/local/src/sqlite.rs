//! The embedded store for local mode: one SQLite file (bundled SQLite, no system library).
//!
//! # Shape
//!
//! A job is stored as its JSON document plus the columns `list_jobs` filters and orders on
//! (queue, status, share, quota share, lower-cased name, creation time). Configuration resources
//! are JSON documents keyed by (kind, key). Client tokens have their own table and are written
//! in the same transaction as their job. The schema and its migrations live in `schema`; the
//! layout and the reasons behind it are in `docs/storage-local.md`.
//!
//! # Durability
//!
//! The journal is a write-ahead log. With the default [`Durability::Normal`]
//! (`synchronous=NORMAL`) an acknowledged commit has been written to the WAL file, so it is in
//! the operating system's page cache and survives the process being killed (`kill -9`, a panic,
//! an OOM kill). A power loss or kernel crash may lose the last few acknowledged transactions,
//! but never corrupts the file. [`Durability::Full`] (`synchronous=FULL`) syncs the WAL on every
//! commit, so acknowledged writes survive power loss too, at the cost of one `fsync` per write.
//!
//! # Concurrency
//!
//! One connection behind a mutex: SQLite serialises writers anyway, and one connection lets
//! every statement stay prepared (`prepare_cached`). Each [`Store`](trainyard_app::Store) method is one transaction
//! (or one autocommit statement). Methods run on the caller's task without `spawn_blocking`
//! (they yield once first, see `cooperate`):
//! they take microseconds, less than the hop to a blocking thread would. The work of each is a
//! synchronous method named after it with `_sync` (`get_job_sync` for `get_job`).

mod audit;
mod decisions;
mod forecasts;
mod schema;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;
use trainyard_app::ports::{ConfigStore, JobStore, SchedulingStore};

use rusqlite::types::Value;
use rusqlite::{Connection, ErrorCode, OptionalExtension, TransactionBehavior, params};
use trainyard_app::ports::{
    ClientTokenRecord, Document, InsertJob, JobCursor, JobQuery, NameFilter, Page, Resource,
    StoreError, Versioned, Write,
};
use trainyard_domain::arn::ResourceKind;
use trainyard_domain::job::ServiceJob;
use trainyard_domain::order::share_key;

pub use decisions::{DECISIONS_KEPT, DecisionRow};
pub use schema::{LATEST_VERSION as SCHEMA_VERSION, user_version};

/// How long a statement waits for another process's lock before failing with `SQLITE_BUSY`
/// (surfaced as [`StoreError::Unavailable`]). Long enough to ride out a checkpoint, short enough
/// that a wedged peer shows up as an error rather than a hang.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Prepared statements kept per connection: the fixed statements plus every shape of the
/// `list_jobs` query (seven optional filters and a cursor), with room to spare.
const STATEMENT_CACHE_CAPACITY: usize = 128;

/// How hard a commit tries to reach the disk before it is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// `synchronous=NORMAL`: acknowledged writes survive the process being killed; a power loss
    /// may lose the last few (never corrupting the file). The default for local mode.
    #[default]
    Normal,
    /// `synchronous=FULL`: acknowledged writes also survive power loss; one `fsync` per commit.
    Full,
}

impl Durability {
    fn pragma(self) -> &'static str {
        match self {
            Self::Normal => "NORMAL",
            Self::Full => "FULL",
        }
    }
}

/// Failures opening a store. Failures of an open store are [`StoreError`]s.
#[derive(Debug, thiserror::Error)]
pub enum SqliteError {
    /// The directory for the file could not be created.
    #[error("cannot create directory {path}: {source}")]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// SQLite could not open the file.
    #[error("cannot open SQLite store {path}: {source}")]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: rusqlite::Error,
    },
    /// Configuring the connection failed.
    #[error("cannot configure the SQLite connection: {0}")]
    Sqlite(#[source] rusqlite::Error),
    /// The file was written by a newer Trainyard.
    #[error(
        "the store file has schema version {found} but this Trainyard supports up to \
         {supported}; upgrade Trainyard or point it at another file"
    )]
    SchemaTooNew {
        /// The file's `user_version`.
        found: u32,
        /// [`SCHEMA_VERSION`].
        supported: u32,
    },
    /// The file has a schema version Trainyard never writes.
    #[error(
        "the file has schema version {found}, which no Trainyard writes; is it a Trainyard store?"
    )]
    ForeignSchema {
        /// The file's `user_version`.
        found: i64,
    },
    /// A migration step failed; the file stays at the previous version.
    #[error("migrating the store to schema version {version} failed: {source}")]
    Migration {
        /// The version the failed step leads to.
        version: u32,
        /// Why.
        #[source]
        source: rusqlite::Error,
    },
}

/// How often the background checkpointer copies the WAL back into the database file.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(250);

/// WAL pages after which a writer checkpoints by itself: only reached if the background
/// checkpointer falls far behind (64 MiB of 4 KiB pages), so the WAL stays bounded regardless.
const FALLBACK_AUTOCHECKPOINT_PAGES: i64 = 16_384;

/// A [`Store`](trainyard_app::Store) in one SQLite file (or in memory, for tests).
pub struct SqliteStore {
    conn: Mutex<Connection>,
    /// Checkpoints the WAL off the request path (file-backed stores only); stopped on drop.
    _checkpointer: Option<Checkpointer>,
    /// When the audit trail's expired rows were last deleted (record time, epoch ms).
    audit_pruned_at: std::sync::atomic::AtomicI64,
    /// Audit appends waiting to be committed together.
    audit_waiting: Mutex<Vec<audit::Waiting>>,
}

/// A thread with its own connection that checkpoints the WAL every [`CHECKPOINT_EVERY`].
///
/// Why: SQLite's automatic checkpoint runs inside whichever commit crosses the threshold, and a
/// checkpoint syncs the database file, so one request in a thousand would wait for an `fsync`.
/// A `PASSIVE` checkpoint from another connection copies frames while writers keep appending.
struct Checkpointer {
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Checkpointer {
    fn start(path: &Path) -> Result<Self, SqliteError> {
        let conn = Connection::open(path).map_err(|source| SqliteError::Open {
            path: path.to_path_buf(),
            source,
        })?;
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(SqliteError::Sqlite)?;
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("sqlite-checkpoint".into())
            .spawn(move || {
                // Runs until the store is dropped (the sender goes away).
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(CHECKPOINT_EVERY)
                {
                    let result: rusqlite::Result<(i64, i64, i64)> =
                        conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
                            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
                        });
                    if let Err(error) = result {
                        tracing::warn!(%error, "WAL checkpoint failed; writers will checkpoint");
                    }
                }
            })
            .map_err(|source| SqliteError::CreateDir {
                path: path.to_path_buf(),
                source,
            })?;
        Ok(Self {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens (creating it and its directory if needed) the store at `path` with the default
    /// [`Durability::Normal`], migrating its schema to [`SCHEMA_VERSION`].
    pub fn open(path: &Path) -> Result<Self, SqliteError> {
        Self::open_with(path, Durability::default())
    }

    /// Opens the store at `path` with the given durability; see [`SqliteStore::open`].
    pub fn open_with(path: &Path, durability: Durability) -> Result<Self, SqliteError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| SqliteError::CreateDir {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let conn = Connection::open(path).map_err(|source| SqliteError::Open {
            path: path.to_path_buf(),
            source,
        })?;
        let mut store = Self::configure(conn, durability)?;
        store
            .lock()
            .pragma_update(None, "wal_autocheckpoint", FALLBACK_AUTOCHECKPOINT_PAGES)
            .map_err(SqliteError::Sqlite)?;
        store._checkpointer = Some(Checkpointer::start(path)?);
        Ok(store)
    }

    /// A private, empty in-memory store (nothing is kept after drop).
    pub fn open_in_memory() -> Result<Self, SqliteError> {
        let conn = Connection::open_in_memory().map_err(SqliteError::Sqlite)?;
        Self::configure(conn, Durability::default())
    }

    fn configure(mut conn: Connection, durability: Durability) -> Result<Self, SqliteError> {
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(SqliteError::Sqlite)?;
        // journal_mode answers with the mode now in force: `wal` for files, `memory` for
        // in-memory databases (which have no WAL and need none).
        let _mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
            .map_err(SqliteError::Sqlite)?;
        conn.pragma_update(None, "synchronous", durability.pragma())
            .map_err(SqliteError::Sqlite)?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE_CAPACITY);
        schema::migrate(&mut conn)?;
        Ok(Self {
            conn: Mutex::new(conn),
            _checkpointer: None,
            audit_pruned_at: std::sync::atomic::AtomicI64::new(i64::MIN),
            audit_waiting: Mutex::new(Vec::new()),
        })
    }

    /// Changes how long a statement waits for another process's lock (default 5 s) before
    /// failing with [`StoreError::Unavailable`].
    pub fn set_busy_timeout(&self, timeout: Duration) -> Result<(), StoreError> {
        self.lock().busy_timeout(timeout).map_err(classify)
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock dropped any open transaction, which rolls it back, so
        // the connection is still usable.
        self.conn
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn insert_job_sync(
        &self,
        job: &ServiceJob,
        token: Option<&ClientTokenRecord>,
    ) -> Result<InsertJob, StoreError> {
        let doc = encode(&job.job_id, job)?;
        let mut conn = self.lock();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(classify)?;
        if let Some(token) = token {
            let existing = tx
                .prepare_cached(
                    "SELECT request_hash, job_id, created_at FROM client_tokens WHERE token = ?1",
                )
                .and_then(|mut stmt| {
                    stmt.query_row([&token.token], |row| {
                        Ok(ClientTokenRecord {
                            token: token.token.clone(),
                            request_hash: row.get(0)?,
                            job_id: row.get(1)?,
                            created_at: row.get(2)?,
                        })
                    })
                    .optional()
                })
                .map_err(classify)?;
            if let Some(existing) = existing {
                return Ok(InsertJob::TokenExists(existing));
            }
        }
        tx.prepare_cached(
            "INSERT INTO jobs (job_id, job_queue, status, share_identifier, quota_share_name, \
             name_lower, created_at, version, doc, priority, runnable_at, share_key, line_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 1, ?8, ?9, ?10, ?11, ?12)",
        )
        .and_then(|mut stmt| {
            stmt.execute(params![
                job.job_id,
                job.job_queue,
                job.status.as_str(),
                job.share_identifier,
                job.quota_share_name,
                job.job_name.to_lowercase(),
                job.created_at,
                doc,
                job.priority(),
                job.runnable_at.unwrap_or(job.created_at),
                share_key(job),
                job.line_at(),
            ])
        })
        .map_err(classify)?;
        if let Some(token) = token {
            tx.prepare_cached(
                "INSERT INTO client_tokens (token, request_hash, job_id, created_at) \
                 VALUES (?1, ?2, ?3, ?4)",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    token.token,
                    token.request_hash,
                    token.job_id,
                    token.created_at
                ])
            })
            .map_err(classify)?;
        }
        tx.commit().map_err(classify)?;
        Ok(InsertJob::Inserted)
    }

    fn get_job_sync(&self, job_id: &str) -> Result<Option<Versioned<ServiceJob>>, StoreError> {
        let conn = self.lock();
        let row = conn
            .prepare_cached("SELECT version, doc FROM jobs WHERE job_id = ?1")
            .and_then(|mut stmt| {
                stmt.query_row([job_id], |row| {
                    Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?))
                })
                .optional()
            })
            .map_err(classify)?;
        row.map(|(version, doc)| decode(job_id, version, &doc))
            .transpose()
    }

    fn update_job_sync(&self, job: &ServiceJob, expected_version: u64) -> Result<u64, StoreError> {
        let conn = self.lock();
        // One conditional statement is its own transaction: the version check and the write
        // cannot be separated.
        if !update_job_in(&conn, job, expected_version)? {
            return Err(StoreError::Conflict);
        }
        Ok(expected_version + 1)
    }

    fn commit_sync(&self, writes: &[Write]) -> Result<(), StoreError> {
        let mut conn = self.lock();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(classify)?;
        for write in writes {
            let applied = match write {
                Write::Job {
                    job,
                    expected_version,
                } => update_job_in(&tx, job, *expected_version)?,
                Write::Document {
                    kind,
                    key,
                    doc,
                    expected_version,
                } => {
                    let doc = encode(key, doc)?;
                    put_document_in(&tx, kind, key, &doc, *expected_version)?
                }
                Write::DeleteDocument {
                    kind,
                    key,
                    expected_version,
                } => delete_document_in(&tx, kind, key, *expected_version)?,
            };
            if !applied {
                // Dropping the transaction rolls back whatever was written before.
                return Err(StoreError::Conflict);
            }
        }
        tx.commit().map_err(classify)
    }

    fn get_document_sync<D: Document>(
        &self,
        key: &str,
    ) -> Result<Option<Versioned<D>>, StoreError> {
        let conn = self.lock();
        let row = conn
            .prepare_cached("SELECT version, doc FROM documents WHERE kind = ?1 AND key = ?2")
            .and_then(|mut stmt| {
                stmt.query_row(params![D::KIND, key], |row| {
                    Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?))
                })
                .optional()
            })
            .map_err(classify)?;
        row.map(|(version, doc)| decode(key, version, &doc))
            .transpose()
    }

    fn list_documents_sync<D: Document>(&self) -> Result<Vec<Versioned<D>>, StoreError> {
        let conn = self.lock();
        let rows = conn
            .prepare_cached("SELECT key, version, doc FROM documents WHERE kind = ?1 ORDER BY key")
            .and_then(|mut stmt| {
                stmt.query_map([D::KIND], |row| {
                    Ok((
                        row.get::<_, String>(0)?,
                        row.get::<_, i64>(1)?,
                        row.get::<_, String>(2)?,
                    ))
                })?
                .collect::<Result<Vec<_>, _>>()
            })
            .map_err(classify)?;
        rows.iter()
            .map(|(key, version, doc)| decode(key, *version, doc))
            .collect()
    }

    fn runnable_jobs_sync(
        &self,
        queue: &str,
        share: &str,
        limit: usize,
    ) -> Result<Vec<Versioned<ServiceJob>>, StoreError> {
        // The order of `runnable_rank`: priority counts only within a share.
        let sql = if share.is_empty() {
            "SELECT job_id, version, doc FROM jobs WHERE status = 'RUNNABLE' AND job_queue = ?1 \
             AND share_key = ?3 ORDER BY line_at, job_id LIMIT ?2"
        } else {
            "SELECT job_id, version, doc FROM jobs WHERE status = 'RUNNABLE' AND job_queue = ?1 \
             AND share_key = ?3 ORDER BY priority DESC, line_at, job_id LIMIT ?2"
        };
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.query_jobs(sql, params![queue, limit, share])
    }

    fn runnable_shares_sync(&self, queue: &str) -> Result<Vec<String>, StoreError> {
        self.share_keys(
            "SELECT DISTINCT share_key FROM jobs WHERE status = 'RUNNABLE' AND job_queue = ?1 \
             ORDER BY share_key",
            queue,
        )
    }

    fn holding_shares_sync(&self, queue: &str) -> Result<Vec<String>, StoreError> {
        self.share_keys(
            "SELECT DISTINCT share_key FROM jobs \
             WHERE status IN ('SCHEDULED', 'STARTING', 'RUNNING') AND job_queue = ?1 \
             ORDER BY share_key",
            queue,
        )
    }

    /// The share keys a query of `queue`'s jobs returns.
    fn share_keys(&self, sql: &str, queue: &str) -> Result<Vec<String>, StoreError> {
        let conn = self.lock();
        conn.prepare_cached(sql)
            .and_then(|mut stmt| {
                stmt.query_map([queue], |row| row.get::<_, String>(0))?
                    .collect::<Result<Vec<_>, _>>()
            })
            .map_err(classify)
    }

    fn dispatched_jobs_sync(&self) -> Result<Vec<Versioned<ServiceJob>>, StoreError> {
        self.query_jobs(
            "SELECT job_id, version, doc FROM jobs \
             WHERE status IN ('SCHEDULED', 'STARTING', 'RUNNING') ORDER BY job_id",
            params![],
        )
    }

    /// Runs a query returning (job_id, version, doc) rows.
    fn query_jobs(
        &self,
        sql: &str,
        params: &[&dyn rusqlite::ToSql],
    ) -> Result<Vec<Versioned<ServiceJob>>, StoreError> {
        let conn = self.lock();
        let rows = conn
            .prepare_cached(sql)
            .and_then(|mut stmt| {
                stmt.query_map(params, |row| {
                    Ok((
                        row.get::<_, String>(0)?,
                        row.get::<_, i64>(1)?,
                        row.get::<_, String>(2)?,
                    ))
                })?
                .collect::<Result<Vec<_>, _>>()
            })
            .map_err(classify)?;
        rows.iter()
            .map(|(id, version, doc)| decode(id, *version, doc))
            .collect()
    }

    fn list_jobs_sync(&self, query: &JobQuery) -> Result<Page<Versioned<ServiceJob>>, StoreError> {
        let limit = query.limit.max(1);
        let (sql, values) = list_jobs_sql(query, limit);
        let conn = self.lock();
        let rows: Vec<(String, i64, String)> = conn
            .prepare_cached(&sql)
            .and_then(|mut stmt| {
                stmt.query_map(rusqlite::params_from_iter(values.iter()), |row| {
                    Ok((row.get(0)?, row.get(1)?, row.get(2)?))
                })?
                .collect()
            })
            .map_err(classify)?;
        drop(conn);
        let more = rows.len() > limit;
        let items = rows
            .into_iter()
            .take(limit)
            .map(|(job_id, version, doc)| decode(&job_id, version, &doc))
            .collect::<Result<Vec<Versioned<ServiceJob>>, _>>()?;
        let next = match (more, items.last()) {
            (true, Some(last)) => Some(JobCursor {
                created_at: last.value.created_at,
                job_id: last.value.job_id.clone(),
            }),
            _ => None,
        };
        Ok(Page { items, next })
    }

    fn create_resource_sync<R: Resource>(&self, resource: &R) -> Result<(), StoreError> {
        let key = resource.key();
        let doc = encode(&key, resource)?;
        let conn = self.lock();
        conn.prepare_cached(
            "INSERT INTO resources (kind, key, version, doc) VALUES (?1, ?2, 1, ?3)",
        )
        .and_then(|mut stmt| stmt.execute(params![kind_name(R::KIND), key, doc]))
        .map_err(classify)?;
        Ok(())
    }

    fn get_resource_sync<R: Resource>(
        &self,
        key: &str,
    ) -> Result<Option<Versioned<R>>, StoreError> {
        let conn = self.lock();
        let row = conn
            .prepare_cached("SELECT version, doc FROM resources WHERE kind = ?1 AND key = ?2")
            .and_then(|mut stmt| {
                stmt.query_row(params![kind_name(R::KIND), key], |row| {
                    Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?))
                })
                .optional()
            })
            .map_err(classify)?;
        row.map(|(version, doc)| decode(key, version, &doc))
            .transpose()
    }

    fn list_resources_sync<R: Resource>(&self) -> Result<Vec<Versioned<R>>, StoreError> {
        let conn = self.lock();
        let rows: Vec<(String, i64, String)> = conn
            .prepare_cached("SELECT key, version, doc FROM resources WHERE kind = ?1 ORDER BY key")
            .and_then(|mut stmt| {
                stmt.query_map([kind_name(R::KIND)], |row| {
                    Ok((row.get(0)?, row.get(1)?, row.get(2)?))
                })?
                .collect()
            })
            .map_err(classify)?;
        drop(conn);
        rows.into_iter()
            .map(|(key, version, doc)| decode(&key, version, &doc))
            .collect()
    }

    fn update_resource_sync<R: Resource>(
        &self,
        resource: &R,
        expected_version: u64,
    ) -> Result<u64, StoreError> {
        let expected = i64::try_from(expected_version).map_err(|_| StoreError::Conflict)?;
        let key = resource.key();
        let doc = encode(&key, resource)?;
        let conn = self.lock();
        let changed = conn
            .prepare_cached(
                "UPDATE resources SET doc = ?3, version = version + 1 \
                 WHERE kind = ?1 AND key = ?2 AND version = ?4",
            )
            .and_then(|mut stmt| stmt.execute(params![kind_name(R::KIND), key, doc, expected]))
            .map_err(classify)?;
        if changed == 0 {
            return Err(StoreError::Conflict);
        }
        Ok(expected_version + 1)
    }

    fn delete_resource_sync<R: Resource>(
        &self,
        key: &str,
        expected_version: u64,
    ) -> Result<(), StoreError> {
        let expected = i64::try_from(expected_version).map_err(|_| StoreError::Conflict)?;
        let conn = self.lock();
        let changed = conn
            .prepare_cached("DELETE FROM resources WHERE kind = ?1 AND key = ?2 AND version = ?3")
            .and_then(|mut stmt| stmt.execute(params![kind_name(R::KIND), key, expected]))
            .map_err(classify)?;
        if changed == 0 {
            return Err(StoreError::Conflict);
        }
        Ok(())
    }
}

/// The `list_jobs` statement for `query` and its parameters, in order. Fetches `limit + 1` rows
/// so the caller knows whether another page follows.
fn list_jobs_sql(query: &JobQuery, limit: usize) -> (String, Vec<Value>) {
    let mut clauses: Vec<&str> = Vec::new();
    let mut values: Vec<Value> = Vec::new();
    let text = |s: &str| Value::Text(s.to_owned());
    if let Some(queue) = &query.queue {
        clauses.push("job_queue = ?");
        values.push(text(queue));
    }
    if let Some(status) = query.status {
        clauses.push("status = ?");
        values.push(text(status.as_str()));
    }
    if let Some(share) = &query.share_identifier {
        clauses.push("share_identifier = ?");
        values.push(text(share));
    }
    if let Some(quota_share) = &query.quota_share_name {
        clauses.push("quota_share_name = ?");
        values.push(text(quota_share));
    }
    match &query.name {
        None => {}
        Some(NameFilter::Exact(name)) => {
            clauses.push("name_lower = ?");
            values.push(text(name));
        }
        Some(NameFilter::Prefix(prefix)) => {
            // substr counts characters, as `chars().count()` does; no LIKE, so `%` and `_` in
            // a name are plain characters.
            clauses.push("substr(name_lower, 1, ?) = ?");
            values.push(Value::Integer(
                i64::try_from(prefix.chars().count()).unwrap_or(i64::MAX),
            ));
            values.push(text(prefix));
        }
    }
    if let Some(before) = query.created_before {
        clauses.push("created_at < ?");
        values.push(Value::Integer(before));
    }
    if let Some(after) = query.created_after {
        clauses.push("created_at > ?");
        values.push(Value::Integer(after));
    }
    if let Some(cursor) = &query.after {
        // Row-value comparison: strictly after the cursor in (created_at, job_id) descending
        // order, and SQLite walks the index from there.
        clauses.push("(created_at, job_id) < (?, ?)");
        values.push(Value::Integer(cursor.created_at));
        values.push(text(&cursor.job_id));
    }
    let mut sql = String::from("SELECT job_id, version, doc FROM jobs");
    if !clauses.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&clauses.join(" AND "));
    }
    sql.push_str(" ORDER BY created_at DESC, job_id DESC LIMIT ?");
    values.push(Value::Integer(
        i64::try_from(limit.saturating_add(1)).unwrap_or(i64::MAX),
    ));
    (sql, values)
}

/// Lets other tasks on this worker thread run before a store call.
///
/// Why: SQLite calls complete without ever suspending, so a task that makes many in a row (the
/// local loop accepting a batch of jobs, a cycle recording skip reasons) would otherwise hold its
/// worker thread for tens of milliseconds, and requests queued behind it would wait that long.
/// One yield per call keeps the longest stall at one statement.
async fn cooperate() {
    tokio::task::yield_now().await;
}

/// Replaces a job if its version is `expected_version`; false when it is not (or absent).
fn update_job_in(
    conn: &Connection,
    job: &ServiceJob,
    expected_version: u64,
) -> Result<bool, StoreError> {
    // A version beyond i64 was never stored, so it cannot match.
    let Ok(expected) = i64::try_from(expected_version) else {
        return Ok(false);
    };
    let doc = encode(&job.job_id, job)?;
    let changed = conn
        .prepare_cached(
            "UPDATE jobs SET job_queue = ?2, status = ?3, share_identifier = ?4, \
             quota_share_name = ?5, name_lower = ?6, created_at = ?7, doc = ?8, \
             priority = ?10, runnable_at = ?11, share_key = ?12, line_at = ?13, \
             version = version + 1 WHERE job_id = ?1 AND version = ?9",
        )
        .and_then(|mut stmt| {
            stmt.execute(params![
                job.job_id,
                job.job_queue,
                job.status.as_str(),
                job.share_identifier,
                job.quota_share_name,
                job.job_name.to_lowercase(),
                job.created_at,
                doc,
                expected,
                job.priority(),
                job.runnable_at.unwrap_or(job.created_at),
                share_key(job),
                job.line_at(),
            ])
        })
        .map_err(classify)?;
    Ok(changed == 1)
}

/// Puts a document if its version is `expected_version` (0: it must not exist).
fn put_document_in(
    conn: &Connection,
    kind: &str,
    key: &str,
    doc: &str,
    expected_version: u64,
) -> Result<bool, StoreError> {
    let Ok(expected) = i64::try_from(expected_version) else {
        return Ok(false);
    };
    let changed = if expected == 0 {
        conn.prepare_cached(
            "INSERT INTO documents (kind, key, version, doc) VALUES (?1, ?2, 1, ?3) \
             ON CONFLICT (kind, key) DO NOTHING",
        )
        .and_then(|mut stmt| stmt.execute(params![kind, key, doc]))
    } else {
        conn.prepare_cached(
            "UPDATE documents SET doc = ?3, version = version + 1 \
             WHERE kind = ?1 AND key = ?2 AND version = ?4",
        )
        .and_then(|mut stmt| stmt.execute(params![kind, key, doc, expected]))
    }
    .map_err(classify)?;
    Ok(changed == 1)
}

/// Deletes a document at `expected_version`; whether there was one.
fn delete_document_in(
    conn: &Connection,
    kind: &str,
    key: &str,
    expected_version: u64,
) -> Result<bool, StoreError> {
    let Ok(expected) = i64::try_from(expected_version) else {
        return Ok(false);
    };
    let changed = conn
        .prepare_cached("DELETE FROM documents WHERE kind = ?1 AND key = ?2 AND version = ?3")
        .and_then(|mut stmt| stmt.execute(params![kind, key, expected]))
        .map_err(classify)?;
    Ok(changed == 1)
}

/// The `kind` column's spelling of each resource kind. Stored on disk: never change one.
fn kind_name(kind: ResourceKind) -> &'static str {
    match kind {
        ResourceKind::ServiceJob => "service-job",
        ResourceKind::JobQueue => "job-queue",
        ResourceKind::ServiceEnvironment => "service-environment",
        ResourceKind::SchedulingPolicy => "scheduling-policy",
        ResourceKind::QuotaShare => "quota-share",
    }
}

/// Classifies a SQLite failure, once: a uniqueness violation is a taken key; everything else
/// (busy, locked, I/O, full disk) is the store being unavailable, with SQLite's error kept.
fn classify(error: rusqlite::Error) -> StoreError {
    match error.sqlite_error_code() {
        Some(ErrorCode::ConstraintViolation) => StoreError::AlreadyExists,
        code => StoreError::Unavailable {
            message: match code {
                Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
                    "SQLite store is locked by another writer".to_owned()
                }
                _ => format!("SQLite store failed: {error}"),
            },
            source: Some(Box::new(error)),
        },
    }
}

fn encode<T: serde::Serialize>(key: &str, value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Corrupt {
        key: key.to_owned(),
        message: format!("cannot encode: {e}"),
    })
}

fn decode<T: serde::de::DeserializeOwned>(
    key: &str,
    version: i64,
    doc: &str,
) -> Result<Versioned<T>, StoreError> {
    let corrupt = |message: String| StoreError::Corrupt {
        key: key.to_owned(),
        message,
    };
    let version =
        u64::try_from(version).map_err(|_| corrupt(format!("negative version {version}")))?;
    let value = serde_json::from_str(doc).map_err(|e| corrupt(e.to_string()))?;
    Ok(Versioned { value, version })
}

impl JobStore for SqliteStore {
    async fn insert_job(
        &self,
        job: &ServiceJob,
        token: Option<&ClientTokenRecord>,
    ) -> Result<InsertJob, StoreError> {
        cooperate().await;
        self.insert_job_sync(job, token)
    }

    async fn get_job(&self, job_id: &str) -> Result<Option<Versioned<ServiceJob>>, StoreError> {
        cooperate().await;
        self.get_job_sync(job_id)
    }

    async fn update_job(&self, job: &ServiceJob, expected_version: u64) -> Result<u64, StoreError> {
        cooperate().await;
        self.update_job_sync(job, expected_version)
    }

    async fn list_jobs(&self, query: &JobQuery) -> Result<Page<Versioned<ServiceJob>>, StoreError> {
        cooperate().await;
        self.list_jobs_sync(query)
    }
}

impl ConfigStore for SqliteStore {
    async fn create_resource<R: Resource>(&self, resource: &R) -> Result<(), StoreError> {
        cooperate().await;
        self.create_resource_sync(resource)
    }

    async fn get_resource<R: Resource>(
        &self,
        key: &str,
    ) -> Result<Option<Versioned<R>>, StoreError> {
        cooperate().await;
        self.get_resource_sync(key)
    }

    async fn list_resources<R: Resource>(&self) -> Result<Vec<Versioned<R>>, StoreError> {
        cooperate().await;
        self.list_resources_sync()
    }

    async fn update_resource<R: Resource>(
        &self,
        resource: &R,
        expected_version: u64,
    ) -> Result<u64, StoreError> {
        cooperate().await;
        self.update_resource_sync(resource, expected_version)
    }

    async fn delete_resource<R: Resource>(
        &self,
        key: &str,
        expected_version: u64,
    ) -> Result<(), StoreError> {
        cooperate().await;
        self.delete_resource_sync::<R>(key, expected_version)
    }
}

impl SchedulingStore for SqliteStore {
    async fn get_document<D: Document>(
        &self,
        key: &str,
    ) -> Result<Option<Versioned<D>>, StoreError> {
        cooperate().await;
        self.get_document_sync(key)
    }

    async fn list_documents<D: Document>(&self) -> Result<Vec<Versioned<D>>, StoreError> {
        cooperate().await;
        self.list_documents_sync()
    }

    async fn commit(&self, writes: &[Write]) -> Result<(), StoreError> {
        cooperate().await;
        self.commit_sync(writes)
    }

    async fn runnable_jobs(
        &self,
        queue: &str,
        share: &str,
        limit: usize,
    ) -> Result<Vec<Versioned<ServiceJob>>, StoreError> {
        cooperate().await;
        self.runnable_jobs_sync(queue, share, limit)
    }

    async fn runnable_shares(&self, queue: &str) -> Result<Vec<String>, StoreError> {
        cooperate().await;
        self.runnable_shares_sync(queue)
    }

    async fn holding_shares(&self, queue: &str) -> Result<Vec<String>, StoreError> {
        cooperate().await;
        self.holding_shares_sync(queue)
    }

    async fn dispatched_jobs(&self) -> Result<Vec<Versioned<ServiceJob>>, StoreError> {
        cooperate().await;
        self.dispatched_jobs_sync()
    }
}
