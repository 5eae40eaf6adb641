//! The store contract suite against [`SqliteStore`]: in memory, and in a file (WAL mode, which
//! in-memory databases do not exercise).

use std::path::PathBuf;

use trainyard_local::SqliteStore;

mod in_memory {
    use super::*;

    trainyard_app::store_contract_tests!(|_case: &'static str| {
        SqliteStore::open_in_memory().expect("open in memory")
    });
}

mod in_a_file {
    use super::*;

    /// A fresh file per case under Cargo's scratch directory for integration tests, named after
    /// the case so reruns reuse (and first clear) the same few files instead of piling up.
    fn fresh_file(case: &'static str) -> SqliteStore {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("sqlite-contract");
        let path = dir.join(format!("{case}.sqlite"));
        for suffix in ["", "-wal", "-shm"] {
            let file = PathBuf::from(format!("{}{suffix}", path.display()));
            match std::fs::remove_file(&file) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => panic!("cannot clear {}: {e}", file.display()),
            }
        }
        SqliteStore::open(&path).expect("open file")
    }

    trainyard_app::store_contract_tests!(fresh_file);
}

/// Appends that arrive together are committed together, and every caller returns only once its
/// own record is stored: fifty appends made at once all read back.
#[tokio::test]
async fn audit_appends_made_together_are_all_stored() {
    use trainyard_app::ports::AuditStore;
    let store = std::sync::Arc::new(SqliteStore::open_in_memory().expect("store"));
    let records: Vec<_> = (0..50)
        .map(|i| {
            trainyard_app::contract::audit_record(
                &format!("r{i:02}"),
                1_728_864_000_000 + i,
                "arn:aws:iam::123456789012:user/alice",
            )
        })
        .collect();
    let mut appends = tokio::task::JoinSet::new();
    for record in records.clone() {
        let store = store.clone();
        appends.spawn(async move { store.append_audit(&record).await });
    }
    while let Some(done) = appends.join_next().await {
        done.expect("joined").expect("stored");
    }
    let mut query = trainyard_app::contract::audit_query(100);
    query.now_ms = 1_728_864_000_000;
    let page = store.list_audit(&query).await.expect("listed");
    assert_eq!(page.records.len(), 50);
    assert_eq!(page.records.last(), records.first());
}
