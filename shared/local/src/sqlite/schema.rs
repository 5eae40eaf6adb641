//! The SQLite schema and its migrations.
//!
//! Migrations are an ordered list of SQL steps. Step `n` (1-based) moves a database from
//! `PRAGMA user_version = n - 1` to `n`, inside one transaction together with the version bump,
//! so a crash mid-migration leaves the file at the previous version, never half-migrated.
//! Steps are append-only: once released, a step is never edited; a change is a new step.

use rusqlite::{Connection, TransactionBehavior};

use super::SqliteError;

/// Every schema step, oldest first. The schema version of a file is how many have been applied.
const MIGRATIONS: &[&str] = &[
    // 1: jobs, client tokens and configuration resources.
    r"
    -- A job is its JSON document plus the columns list_jobs filters and orders on.
    CREATE TABLE jobs (
        job_id            TEXT    NOT NULL PRIMARY KEY,
        job_queue         TEXT    NOT NULL,
        status            TEXT    NOT NULL,
        share_identifier  TEXT,
        quota_share_name  TEXT,
        name_lower        TEXT    NOT NULL,
        created_at        INTEGER NOT NULL,
        version           INTEGER NOT NULL,
        doc               TEXT    NOT NULL
    );
    -- ListServiceJobs by queue and status, newest first (the common call: the SDK's
    -- TrainingQueue.list_jobs, the CLI's job list).
    CREATE INDEX jobs_by_queue_status
        ON jobs (job_queue, status, created_at DESC, job_id DESC);
    -- By queue alone, newest first (no status filter, or a name/time filter within a queue).
    CREATE INDEX jobs_by_queue
        ON jobs (job_queue, created_at DESC, job_id DESC);
    -- Every job, newest first.
    CREATE INDEX jobs_newest
        ON jobs (created_at DESC, job_id DESC);

    -- clientToken idempotency records; written in the same transaction as their job.
    CREATE TABLE client_tokens (
        token         TEXT    NOT NULL PRIMARY KEY,
        request_hash  TEXT    NOT NULL,
        job_id        TEXT    NOT NULL,
        created_at    INTEGER NOT NULL
    );

    -- Configuration (environments, queues, policies, quota shares) as opaque JSON documents.
    CREATE TABLE resources (
        kind     TEXT    NOT NULL,
        key      TEXT    NOT NULL,
        version  INTEGER NOT NULL,
        doc      TEXT    NOT NULL,
        PRIMARY KEY (kind, key)
    ) WITHOUT ROWID;
    ",
    // 2: what the scheduling cycle reads: RUNNABLE jobs in dispatch order per queue and share,
    // the jobs holding capacity, and scheduler state documents.
    r"
    ALTER TABLE jobs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN runnable_at INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN share_key TEXT NOT NULL DEFAULT '';
    UPDATE jobs SET
        priority = COALESCE(json_extract(doc, '$.schedulingPriority'), 0),
        runnable_at = COALESCE(json_extract(doc, '$.runnableAt'), created_at),
        share_key = COALESCE(share_identifier, quota_share_name, '');
    -- FIFO queues: RUNNABLE jobs by the time they became RUNNABLE. Partial: only RUNNABLE rows,
    -- so the index stays as small as the backlog and a cycle reads just the heads.
    CREATE INDEX jobs_runnable_fifo
        ON jobs (job_queue, runnable_at, job_id) WHERE status = 'RUNNABLE';
    -- Queues with a policy: per share, higher priority first, then age.
    CREATE INDEX jobs_runnable_priority
        ON jobs (job_queue, share_key, priority DESC, runnable_at, job_id)
        WHERE status = 'RUNNABLE';
    -- Jobs holding capacity (bounded by the environments' limits).
    CREATE INDEX jobs_dispatched
        ON jobs (job_id) WHERE status IN ('SCHEDULED', 'STARTING', 'RUNNING');

    -- Scheduler state (capacity in use per environment, fair-share usage) as JSON documents,
    -- written in the same transactions as the jobs they account for.
    CREATE TABLE documents (
        kind     TEXT    NOT NULL,
        key      TEXT    NOT NULL,
        version  INTEGER NOT NULL,
        doc      TEXT    NOT NULL,
        PRIMARY KEY (kind, key)
    ) WITHOUT ROWID;
    ",
    // 3: the audit trail: every call that asked to change something, newest first, with the
    // columns its listing filters on; rows past their expiry are deleted as new ones come.
    r"
    CREATE TABLE audit (
        at_ms          INTEGER NOT NULL,
        id             TEXT    NOT NULL,
        principal      TEXT    NOT NULL,
        action         TEXT    NOT NULL,
        allowed        INTEGER NOT NULL,
        expires_at_ms  INTEGER NOT NULL,
        doc            TEXT    NOT NULL,
        PRIMARY KEY (at_ms, id)
    ) WITHOUT ROWID;
    CREATE INDEX audit_expiry ON audit (expires_at_ms);
    ",
    // 4: decision records: one row per scheduling cycle, numbered, the newest kept.
    r"
    CREATE TABLE decisions (
        seq          INTEGER PRIMARY KEY,
        id           TEXT    NOT NULL UNIQUE,
        at_ms        INTEGER NOT NULL,
        dispatches   INTEGER NOT NULL,
        preemptions  INTEGER NOT NULL,
        skips        INTEGER NOT NULL,
        bytes        INTEGER NOT NULL,
        doc          TEXT    NOT NULL
    );
    ",
    // 5: a RUNNABLE job's place in line is its runnable time plus its line offset (a queue that
    // puts shorter jobs first sets one at submission): the runnable indexes order by that sum.
    r"
    ALTER TABLE jobs ADD COLUMN line_at INTEGER NOT NULL DEFAULT 0;
    UPDATE jobs SET line_at = runnable_at + COALESCE(json_extract(doc, '$.lineOffsetMs'), 0);
    DROP INDEX jobs_runnable_fifo;
    DROP INDEX jobs_runnable_priority;
    CREATE INDEX jobs_runnable_fifo
        ON jobs (job_queue, line_at, job_id) WHERE status = 'RUNNABLE';
    CREATE INDEX jobs_runnable_priority
        ON jobs (job_queue, share_key, priority DESC, line_at, job_id)
        WHERE status = 'RUNNABLE';
    ",
    // 6: what the start-time forecaster learnt (one JSON document, replaced whole), so that a
    // restart estimates from where the last run left off.
    r"
    CREATE TABLE forecaster (
        id           INTEGER PRIMARY KEY CHECK (id = 1),
        saved_at_ms  INTEGER NOT NULL,
        doc          TEXT    NOT NULL
    );
    ",
];

/// The schema version this code writes: the number of migration steps it knows.
pub const LATEST_VERSION: u32 = MIGRATIONS.len() as u32;

/// Brings `conn` to [`LATEST_VERSION`], refusing a file written by newer code.
pub(super) fn migrate(conn: &mut Connection) -> Result<(), SqliteError> {
    let found = user_version(conn)?;
    if found > LATEST_VERSION {
        return Err(SqliteError::SchemaTooNew {
            found,
            supported: LATEST_VERSION,
        });
    }
    for (index, step) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        let version = index as u32 + 1;
        let failed = |source| SqliteError::Migration { version, source };
        // IMMEDIATE: take the write lock up front so two processes opening the same fresh file
        // cannot both run step 1.
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(failed)?;
        // Re-read under the lock: another process may have migrated while we waited.
        let current = user_version(&tx)?;
        if current >= version {
            continue;
        }
        tx.execute_batch(step).map_err(failed)?;
        // PRAGMA takes no bound parameters; `version` is our own integer.
        tx.execute_batch(&format!("PRAGMA user_version = {version}"))
            .map_err(failed)?;
        tx.commit().map_err(failed)?;
    }
    Ok(())
}

/// The file's `PRAGMA user_version` (0 for a new file).
pub fn user_version(conn: &Connection) -> Result<u32, SqliteError> {
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(SqliteError::Sqlite)?;
    // user_version is a signed 32-bit header field; a negative value was not written by us.
    u32::try_from(version).map_err(|_| SqliteError::ForeignSchema { found: version })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file written by the first release (schema 1) with a RUNNABLE job in it opens under the
    /// current code: step 2 adds the scheduling columns and fills them from the stored job.
    #[test]
    fn a_schema_1_file_is_upgraded_and_its_jobs_are_backfilled() {
        let dir = std::env::temp_dir().join(format!("trainyard-schema-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("v1.sqlite");
        let _ = std::fs::remove_file(&path);
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(MIGRATIONS[0]).unwrap();
            conn.execute_batch("PRAGMA user_version = 1").unwrap();
            let doc = r#"{"schedulingPriority": 42, "runnableAt": 5000}"#;
            conn.execute(
                "INSERT INTO jobs (job_id, job_queue, status, share_identifier, quota_share_name, \
                 name_lower, created_at, version, doc) \
                 VALUES ('j1', 'q', 'RUNNABLE', 'team-a', NULL, 'j', 1000, 3, ?1)",
                [doc],
            )
            .unwrap();
        }
        let mut conn = Connection::open(&path).unwrap();
        migrate(&mut conn).unwrap();
        assert_eq!(user_version(&conn).unwrap(), LATEST_VERSION);
        let row: (i64, i64, String, i64) = conn
            .query_row(
                "SELECT priority, runnable_at, share_key, version FROM jobs WHERE job_id = 'j1'",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .unwrap();
        assert_eq!(
            row,
            (42, 5000, "team-a".to_owned(), 3),
            "backfilled, version kept"
        );
        let line_at: i64 = conn
            .query_row("SELECT line_at FROM jobs WHERE job_id = 'j1'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(
            line_at, 5000,
            "step 5: no offset, in line at its runnable time"
        );
        let heads: i64 = conn
            .query_row(
                "SELECT count(*) FROM jobs WHERE status = 'RUNNABLE' AND job_queue = 'q'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(heads, 1);
        drop(conn);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
