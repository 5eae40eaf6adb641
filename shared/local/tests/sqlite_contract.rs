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
