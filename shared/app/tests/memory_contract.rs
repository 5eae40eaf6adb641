//! The store contract suite against [`MemoryStore`], the reference implementation.
//!
//! The suite lives behind the crate's `contract` feature. It is on whenever `trainyard-local`'s
//! tests are part of the build (its dev-dependency enables it) and with
//! `cargo test -p trainyard-app --features contract`.
#![cfg(feature = "contract")]

use trainyard_app::memory::MemoryStore;

trainyard_app::store_contract_tests!(|_case: &'static str| MemoryStore::new());

/// The sequential runner covers the same cases as the per-case tests.
#[tokio::test]
async fn run_all_passes_on_fresh_memory_stores() {
    let mut made = 0;
    trainyard_app::contract::run_all(|_case| {
        made += 1;
        MemoryStore::new()
    })
    .await;
    // The number of cases in the contract's one list (`contract_cases!`).
    assert_eq!(made, 36, "one fresh store per case");
}
