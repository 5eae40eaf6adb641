//! The SQLite store's life on disk: reopening, schema migrations, durability settings, and how
//! failures are classified.

use std::time::Duration;
use trainyard_app::ports::{ConfigStore, JobStore};

use rusqlite::Connection;
use trainyard_app::contract::{job, queue, quota_share, token};
use trainyard_app::ports::{InsertJob, JobQuery, StoreError};
use trainyard_domain::job::JobStatus;
use trainyard_domain::queue::JobQueue;
use trainyard_domain::quota_share::QuotaShare;
use trainyard_local::SqliteStore;
use trainyard_local::sqlite::{Durability, SCHEMA_VERSION, SqliteError, user_version};

fn scratch() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

#[tokio::test]
async fn everything_written_is_there_after_reopening_the_file() {
    let dir = scratch();
    let path = dir.path().join("store.sqlite");
    let updated = job("j1").status(JobStatus::Scheduled).build();
    {
        let store = SqliteStore::open(&path).expect("open");
        let record = token("tok", "hash", "j1");
        store
            .insert_job(&job("j1").build(), Some(&record))
            .await
            .expect("insert");
        store
            .insert_job(&job("j2").created_at(2_000).build(), None)
            .await
            .expect("insert");
        assert_eq!(store.update_job(&updated, 1).await.expect("update"), 2);
        store.create_resource(&queue("prod")).await.expect("create");
        store
            .update_resource(&queue("prod"), 1)
            .await
            .expect("update");
        store
            .create_resource(&quota_share("prod", "gpu"))
            .await
            .expect("create");
    }
    let store = SqliteStore::open(&path).expect("reopen");
    let j1 = store.get_job("j1").await.expect("get").expect("j1 kept");
    assert_eq!((j1.value, j1.version), (updated, 2));
    let all = store
        .list_jobs(&JobQuery {
            limit: 10,
            ..JobQuery::default()
        })
        .await
        .expect("list");
    let ids: Vec<&str> = all.items.iter().map(|v| v.value.job_id.as_str()).collect();
    assert_eq!(ids, ["j2", "j1"]);
    // The token survived: reusing it returns the original record.
    let reuse = store
        .insert_job(&job("j3").build(), Some(&token("tok", "other", "j3")))
        .await
        .expect("insert");
    assert_eq!(reuse, InsertJob::TokenExists(token("tok", "hash", "j1")));
    let q = store
        .get_resource::<JobQueue>("prod")
        .await
        .expect("get")
        .expect("queue kept");
    assert_eq!(q.version, 2);
    assert!(
        store
            .get_resource::<QuotaShare>("prod/gpu")
            .await
            .expect("get")
            .is_some()
    );
}

#[test]
fn a_new_file_and_its_directories_are_created_at_the_latest_schema() {
    let dir = scratch();
    let path = dir.path().join("nested/deeper/store.sqlite");
    drop(SqliteStore::open(&path).expect("open"));
    let conn = Connection::open(&path).expect("raw open");
    assert_eq!(user_version(&conn).expect("user_version"), SCHEMA_VERSION);
    let journal: String = conn
        .query_row("PRAGMA journal_mode", [], |row| row.get(0))
        .expect("journal_mode");
    assert_eq!(journal, "wal", "the file is left in WAL mode");
}

#[test]
fn reopening_a_current_file_migrates_nothing() {
    let dir = scratch();
    let path = dir.path().join("store.sqlite");
    drop(SqliteStore::open(&path).expect("open"));
    drop(SqliteStore::open(&path).expect("reopen"));
    let conn = Connection::open(&path).expect("raw open");
    assert_eq!(user_version(&conn).expect("user_version"), SCHEMA_VERSION);
}

#[test]
fn a_file_from_a_newer_trainyard_is_refused_with_a_clear_error() {
    let dir = scratch();
    let path = dir.path().join("store.sqlite");
    drop(SqliteStore::open(&path).expect("open"));
    let future = SCHEMA_VERSION + 1;
    Connection::open(&path)
        .expect("raw open")
        .execute_batch(&format!("PRAGMA user_version = {future}"))
        .expect("set version");
    let err = SqliteStore::open(&path).expect_err("newer schema must be refused");
    assert!(
        matches!(err, SqliteError::SchemaTooNew { found, supported }
            if found == future && supported == SCHEMA_VERSION),
        "got {err:?}"
    );
    let message = err.to_string();
    assert!(
        message.contains(&future.to_string()) && message.contains("upgrade"),
        "{message}"
    );
    // Refusing must not have touched the file.
    let conn = Connection::open(&path).expect("raw open");
    assert_eq!(user_version(&conn).expect("user_version"), future);
}

#[test]
fn a_file_with_a_negative_schema_version_is_not_a_trainyard_store() {
    let dir = scratch();
    let path = dir.path().join("other.sqlite");
    Connection::open(&path)
        .expect("raw open")
        .execute_batch("PRAGMA user_version = -3")
        .expect("set version");
    let err = SqliteStore::open(&path).expect_err("foreign file");
    assert!(
        matches!(err, SqliteError::ForeignSchema { found: -3 }),
        "got {err:?}"
    );
}

#[test]
fn an_unopenable_path_is_an_open_error_naming_it() {
    let dir = scratch();
    // A directory where the file should be.
    let path = dir.path().join("taken");
    std::fs::create_dir(&path).expect("mkdir");
    let err = SqliteStore::open(&path).expect_err("a directory is not a database");
    assert!(err.to_string().contains("taken"), "{err}");
}

#[tokio::test]
async fn full_durability_opens_and_stores_with_synchronous_full() {
    let dir = scratch();
    let path = dir.path().join("store.sqlite");
    let store = SqliteStore::open_with(&path, Durability::Full).expect("open");
    store
        .insert_job(&job("j1").build(), None)
        .await
        .expect("insert");
    assert!(store.get_job("j1").await.expect("get").is_some());
    drop(store);
    let store = SqliteStore::open(&path).expect("reopen with the default");
    assert!(store.get_job("j1").await.expect("get").is_some());
}

#[tokio::test]
async fn an_undecodable_document_is_corrupt_naming_its_key() {
    let dir = scratch();
    let path = dir.path().join("store.sqlite");
    let store = SqliteStore::open(&path).expect("open");
    store
        .insert_job(&job("j1").build(), None)
        .await
        .expect("insert");
    store.create_resource(&queue("prod")).await.expect("create");
    let raw = Connection::open(&path).expect("raw open");
    raw.execute_batch(
        "UPDATE jobs SET doc = '{\"not\": \"a job\"}' WHERE job_id = 'j1';
         UPDATE resources SET doc = 'not json' WHERE key = 'prod';",
    )
    .expect("damage");
    let err = store.get_job("j1").await.expect_err("bad job document");
    assert!(
        matches!(&err, StoreError::Corrupt { key, .. } if key == "j1"),
        "got {err:?}"
    );
    let err = store
        .list_jobs(&JobQuery {
            limit: 5,
            ..JobQuery::default()
        })
        .await
        .expect_err("bad job document in a list");
    assert!(
        matches!(&err, StoreError::Corrupt { key, .. } if key == "j1"),
        "got {err:?}"
    );
    let err = store
        .get_resource::<JobQueue>("prod")
        .await
        .expect_err("bad resource");
    assert!(
        matches!(&err, StoreError::Corrupt { key, .. } if key == "prod"),
        "got {err:?}"
    );
}

#[tokio::test]
async fn a_write_blocked_by_another_process_lock_is_unavailable_with_its_source() {
    let dir = scratch();
    let path = dir.path().join("store.sqlite");
    let store = SqliteStore::open(&path).expect("open");
    store
        .set_busy_timeout(Duration::from_millis(50))
        .expect("busy timeout");
    let other = Connection::open(&path).expect("raw open");
    other
        .execute_batch("BEGIN IMMEDIATE")
        .expect("take the write lock");
    let err = store
        .insert_job(&job("j1").build(), None)
        .await
        .expect_err("the write lock is held");
    match &err {
        StoreError::Unavailable { source, .. } => {
            assert!(source.is_some(), "the SQLite error is kept")
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    other.execute_batch("ROLLBACK").expect("release");
    let outcome = store
        .insert_job(&job("j1").build(), None)
        .await
        .expect("insert after release");
    assert_eq!(outcome, InsertJob::Inserted);
}

/// What the start-time forecaster learnt outlives the process: `trainyard up` keeps it in the
/// store's file, and a forecaster restored from the reopened file knows what the first learnt,
/// where one over a fresh file starts from nothing.
#[tokio::test]
async fn what_the_forecaster_learnt_is_there_after_reopening_the_file() {
    use std::sync::Arc;
    use trainyard_app::service::estimates::KeptForecaster;
    use trainyard_forecast::{Family, Forecaster, History, Learned};

    let dir = scratch();
    let path = dir.path().join("store.sqlite");
    let mut history = History::default();
    let family = Family {
        queue: "prod".into(),
        share: None,
        instances: 2,
    };
    for runtime_s in [600, 900, 1_200] {
        history.observe_runtime(family.clone(), runtime_s, Some(86_400));
    }
    let learned = Learned {
        history,
        ..Learned::default()
    };
    {
        let store = Arc::new(SqliteStore::open(&path).expect("open"));
        assert_eq!(store.learned().expect("read"), None, "nothing kept yet");
        let mut forecasts = KeptForecaster::new(Forecaster::with_learned(
            Default::default(),
            learned.clone(),
        ));
        forecasts.keep_in(store.clone());
        assert!(
            !forecasts.keep().await.expect("keep"),
            "nothing before a read"
        );
        forecasts.restore().await.expect("restore");
        assert!(forecasts.keep().await.expect("keep"), "written");
        assert!(
            !forecasts.keep().await.expect("keep"),
            "nothing new: not rewritten"
        );
    }
    let store = Arc::new(SqliteStore::open(&path).expect("reopen"));
    assert_eq!(store.learned().expect("read"), Some(learned.clone()));
    let mut forecasts = KeptForecaster::new(Forecaster::new(Default::default()));
    forecasts.keep_in(store.clone());
    assert_eq!(forecasts.forecaster().history().runtimes_observed(), 0);
    forecasts.restore().await.expect("restore");
    assert_eq!(forecasts.forecaster().learned(), learned);
    assert_eq!(forecasts.forecaster().history().runtimes_observed(), 3);

    let fresh = SqliteStore::open(&dir.path().join("fresh.sqlite")).expect("open");
    assert_eq!(fresh.learned().expect("read"), None);
}
