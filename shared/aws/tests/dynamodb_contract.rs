//! The store contract, run against [`DynamoStore`] on a moto server.
//!
//! Needs `AWS_ENDPOINT_URL_DYNAMODB` or `AWS_ENDPOINT_URL` (and dummy credentials and a region)
//! pointing at moto; `run_dynamodb_contract` in `scripts/lib/moto.sh` starts one (behind the AWS
//! stand, `tests/stand/aws_stand.py`, which throttles, fails and loses answers to writes it
//! applied, as DynamoDB can) and runs this file. Every case gets a fresh table with a unique
//! name, so cases never see each other's items. The clients retry as the SDK does by default,
//! only with a shorter first backoff, so that the stand's faults cost milliseconds.
#![cfg(feature = "moto-tests")]
// Test support: a broken set-up should fail loudly where it broke.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use trainyard_app::ports::{JobStore, SchedulingStore};

use aws_config::BehaviorVersion;
use aws_config::retry::RetryConfig;
use aws_sdk_dynamodb::Client;
use trainyard_app::ports::JobQuery;
use trainyard_aws::dynamodb::{DynamoStore, create_table};

const ENDPOINT_VARIABLE: &str = "AWS_ENDPOINT_URL_DYNAMODB";

/// A store on a new table named after the case.
///
/// The contract's factory is synchronous but creating a table is not, and each case runs on its
/// own single-threaded runtime, so the table is created on a helper thread with its own runtime.
/// The store's client is loaded there too but makes its first request on the case's runtime, so
/// its connections belong to that runtime.
fn fresh(case: &'static str) -> DynamoStore {
    // The SDK takes the DynamoDB-specific variable first, then the general one.
    let endpoint = [ENDPOINT_VARIABLE, "AWS_ENDPOINT_URL"]
        .iter()
        .find_map(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
        .unwrap_or_default();
    assert!(
        !endpoint.is_empty(),
        "neither {ENDPOINT_VARIABLE} nor AWS_ENDPOINT_URL is set: these tests need a moto \
         server; run them with \
         `source scripts/lib/common.sh; source scripts/lib/moto.sh; run_dynamodb_contract`"
    );
    static SEQUENCE: AtomicU64 = AtomicU64::new(0);
    let table = format!(
        "trainyard-{}-{}-{}",
        std::process::id(),
        SEQUENCE.fetch_add(1, Ordering::Relaxed),
        case.replace('_', "-")
    );
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime for the set-up");
        runtime.block_on(async move {
            let config = aws_config::defaults(BehaviorVersion::latest())
                .retry_config(
                    RetryConfig::standard().with_initial_backoff(Duration::from_millis(20)),
                )
                .load()
                .await;
            create_table(&Client::new(&config), &table)
                .await
                .unwrap_or_else(|e| panic!("creating table {table} at {endpoint}: {e:?}"));
            DynamoStore::new(Client::new(&config), table)
        })
    })
    .join()
    .expect("the set-up thread panicked")
}

trainyard_app::store_contract_tests!(fresh);

// ---------------------------------------------------------------------------------------------
// DynamoDB-specific: the places where this adapter maps the contract onto key ranges.
// ---------------------------------------------------------------------------------------------

use trainyard_app::contract::{job, query};
use trainyard_domain::job::JobStatus;

/// A time window, a cursor and a filter at once: the window and the cursor become one sort-key
/// range, and the cursor itself is excluded. Every page must hold exactly the jobs of a brute
/// force over the same rows: within one queue, and merged across queues when none is given;
/// for a status that shares its index group (SCHEDULED, STARTING and RUNNING), only that status.
#[tokio::test]
async fn window_cursor_and_filter_together_page_like_a_brute_force() {
    let store = fresh("window_cursor_and_filter");
    for queue in ["q", "r"] {
        trainyard_app::contract::ensure_queue(&store, queue).await;
    }
    let mut all = Vec::new();
    for n in 0..40_i64 {
        let id = format!("j{:02}", (n * 17) % 40);
        let status = match n % 5 {
            0 | 3 => JobStatus::Running,
            1 => JobStatus::Scheduled,
            2 => JobStatus::Starting,
            _ => JobStatus::Runnable,
        };
        let queue = if n % 7 < 4 { "q" } else { "r" };
        let j = job(&id)
            .created_at(n / 2)
            .status(status)
            .queue(queue)
            .build();
        store.insert_job(&j, None).await.unwrap();
        all.push(j);
    }
    for (queue, after, before, status) in [
        (None, Some(3), Some(15), None),
        (Some("q"), None, Some(10), Some(JobStatus::Runnable)),
        (Some("q"), Some(2), None, Some(JobStatus::Running)),
        (None, Some(2), None, Some(JobStatus::Running)),
        (None, None, None, Some(JobStatus::Starting)),
        (Some("r"), None, None, Some(JobStatus::Scheduled)),
        (Some("r"), None, None, None),
        (None, Some(12), Some(4), None),
        (None, Some(5), Some(6), None),
        (Some("nowhere"), None, None, None),
    ] {
        let mut expected: Vec<(i64, String)> = all
            .iter()
            .filter(|j| after.is_none_or(|a| j.created_at > a))
            .filter(|j| before.is_none_or(|b| j.created_at < b))
            .filter(|j| status.is_none_or(|s| j.status == s))
            .filter(|j| queue.is_none_or(|q| j.job_queue == q))
            .map(|j| (j.created_at, j.job_id.clone()))
            .collect();
        expected.sort_by(|a, b| b.cmp(a));
        let expected: Vec<String> = expected.into_iter().map(|(_, id)| id).collect();
        let mut paged = Vec::new();
        let mut cursor = None;
        for _ in 0..100 {
            let page = store
                .list_jobs(&JobQuery {
                    created_after: after,
                    created_before: before,
                    status,
                    queue: queue.map(str::to_owned),
                    after: cursor.clone(),
                    ..query(3)
                })
                .await
                .unwrap();
            paged.extend(page.items.into_iter().map(|j| j.value.job_id));
            cursor = page.next;
            if cursor.is_none() {
                break;
            }
        }
        assert_eq!(
            paged, expected,
            "{queue:?} after {after:?} before {before:?} {status:?}"
        );
    }
}

/// The skip scan of shares visits each share once, whatever its backlog, including the empty
/// share and shares that are prefixes of each other.
#[tokio::test]
async fn runnable_shares_skip_over_each_shares_backlog() {
    let store = fresh("runnable_shares_skip");
    let shares = ["", "a", "a-b", "ab", "b_", "zz"];
    for (i, share) in shares.iter().enumerate() {
        for k in 0..(i + 2) {
            let mut builder = job(&format!("{i}-{k}")).runnable_at(i64::try_from(k).unwrap());
            if !share.is_empty() {
                builder = builder.share(share);
            }
            store.insert_job(&builder.build(), None).await.unwrap();
        }
    }
    let found = store.runnable_shares("q").await.unwrap();
    let mut expected: Vec<String> = shares.iter().map(|s| (*s).to_owned()).collect();
    expected.sort();
    assert_eq!(found, expected);
    // A share that is a prefix of another does not pick up the other's jobs.
    let a = store.runnable_jobs("q", "a", 100).await.unwrap();
    let ids: Vec<String> = a.into_iter().map(|j| j.value.job_id).collect();
    assert_eq!(ids, ["1-0", "1-1", "1-2"]);
}

/// A token is refused while its TTL runs and free again once it has passed, even before
/// DynamoDB's lazy TTL deletion removes the item.
#[tokio::test]
async fn a_client_token_past_its_ttl_is_free_again() {
    use trainyard_app::contract::token;
    use trainyard_app::ports::InsertJob;
    let store = fresh("client_token_ttl");
    let at = |ms: i64, id: &str| {
        let mut record = token("tok", "hash", id);
        record.created_at = ms;
        record
    };
    const DAY_MS: i64 = 24 * 3600 * 1000;
    let first = at(1_000, "j1");
    store
        .insert_job(&job("j1").build(), Some(&first))
        .await
        .unwrap();
    let within = store
        .insert_job(&job("j2").build(), Some(&at(1_000 + DAY_MS, "j2")))
        .await
        .unwrap();
    assert_eq!(
        within,
        InsertJob::TokenExists(first),
        "a day later it still holds"
    );
    let expired = store
        .insert_job(&job("j3").build(), Some(&at(1_000 + 3 * DAY_MS, "j3")))
        .await
        .unwrap();
    assert_eq!(expired, InsertJob::Inserted, "three days later it is free");
    let again = store
        .insert_job(&job("j4").build(), Some(&at(1_000 + 3 * DAY_MS, "j4")))
        .await
        .unwrap();
    assert_eq!(
        again,
        InsertJob::TokenExists(at(1_000 + 3 * DAY_MS, "j3")),
        "the new record replaced the expired one"
    );
}

/// The scheduler lease over DynamoDB: two takers racing for a free lease, and two racing for a
/// lapsed one, each leave exactly one holder, and the stored lease is the winner's.
#[tokio::test]
async fn concurrent_lease_takers_leave_exactly_one_holder() {
    use std::sync::Arc;

    use trainyard_app::Service;
    use trainyard_app::ports::NoEvents;
    use trainyard_app::ports::{ManualClock, SequentialIds};
    use trainyard_app::service::lease::Lease;

    let clock = Arc::new(ManualClock::new(1_000_000));
    let service = Service::new(
        fresh("lease_race"),
        NoEvents,
        clock.clone(),
        Arc::new(SequentialIds::default()),
        trainyard_domain::arn::ArnContext::default(),
    );
    // (case, token the winner must hold)
    for (case, token) in [("free lease", 1), ("lapsed lease", 2)] {
        let (a, b) = tokio::join!(
            service.acquire_lease("scheduler", "a", 30_000),
            service.acquire_lease("scheduler", "b", 30_000),
        );
        let winners: Vec<Lease> = [a.unwrap(), b.unwrap()].into_iter().flatten().collect();
        assert_eq!(winners.len(), 1, "{case}: {winners:?}");
        assert_eq!(winners[0].token, token, "{case}");
        let stored = service
            .store()
            .get_document::<Lease>("scheduler")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(stored.value, winners[0], "{case}");
        clock.advance(30_000);
    }
}

/// A job is two items: the job item (rewritten on every change) and a request item written at
/// submit (payload, parsed training request, other fields set once). No use-case changes the
/// request, but if a write ever does, the job item's request fingerprint fails the plain write
/// and the store writes both items instead: the change is kept, never silently dropped, and a
/// stale version is still a conflict.
#[tokio::test]
async fn a_write_that_changes_the_request_keeps_it_through_update_and_commit() {
    use trainyard_app::ports::Write;
    let store = fresh("request_changes");
    trainyard_app::contract::ensure_queue(&store, "q").await;
    let mut j = job("j1").build();
    j.service_request_payload = r#"{"TrainingJobName":"first"}"#.into();
    store.insert_job(&j, None).await.unwrap();

    // An ordinary update (the request unchanged) and one that changes it.
    j.status = JobStatus::Runnable;
    let v2 = store.update_job(&j, 1).await.unwrap();
    j.service_request_payload = r#"{"TrainingJobName":"second"}"#.into();
    let v3 = store.update_job(&j, v2).await.unwrap();
    assert_eq!(v3, 3);
    let read = store.get_job("j1").await.unwrap().unwrap();
    assert_eq!((read.value.clone(), read.version), (j.clone(), 3));

    // A stale version with a changed request is a conflict, and changes nothing.
    let mut stale = j.clone();
    stale.service_request_payload = r#"{"TrainingJobName":"stale"}"#.into();
    assert!(matches!(
        store.update_job(&stale, 2).await,
        Err(trainyard_app::ports::StoreError::Conflict)
    ));

    // The same through a commit, which lists and batch-reads see too.
    j.service_request_payload = r#"{"TrainingJobName":"third"}"#.into();
    store
        .commit(&[Write::Job {
            job: Box::new(j.clone()),
            expected_version: 3,
        }])
        .await
        .unwrap();
    let read = store.get_job("j1").await.unwrap().unwrap();
    assert_eq!((read.value.clone(), read.version), (j.clone(), 4));
    let listed = store.list_jobs(&query(10)).await.unwrap();
    assert_eq!(listed.items.len(), 1);
    assert_eq!(listed.items[0].value, j);
    let runnable = store.runnable_jobs("q", "", 10).await.unwrap();
    assert_eq!(runnable.len(), 1);
    assert_eq!(runnable[0].value, j);
}
