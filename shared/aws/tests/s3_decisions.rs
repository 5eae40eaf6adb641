//! Decision records on AWS (moto's S3 and DynamoDB): a cycle's record is stored whole in S3 and
//! summarised in the table, read back equal, and replays to the same plan; a record that cannot
//! be stored leaves no summary naming it.
#![cfg(feature = "moto-tests")]
// Test support: a broken set-up should fail loudly where it broke.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::atomic::{AtomicU64, Ordering};

use aws_sdk_s3::Client;
use trainyard_app::ports::{NoEvents, StoreError};
use trainyard_app::service::scheduling::DecisionLog;
use trainyard_aws::decisions::S3DecisionLog;
use trainyard_aws::dynamodb::{DynamoStore, create_table};
use trainyard_domain::arn::ArnContext;

async fn s3() -> Client {
    let config = common::sdk_config().await;
    // moto serves buckets by path, not by host name.
    Client::from_conf(
        aws_sdk_s3::config::Builder::from(&config)
            .force_path_style(true)
            .build(),
    )
}

async fn fresh(case: &str) -> DynamoStore {
    common::require_endpoint(&["AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_S3"]);
    static SEQUENCE: AtomicU64 = AtomicU64::new(0);
    let table = format!(
        "decisions-{}-{}-{case}",
        std::process::id(),
        SEQUENCE.fetch_add(1, Ordering::Relaxed)
    );
    let client = aws_sdk_dynamodb::Client::new(&common::sdk_config().await);
    create_table(&client, &table).await.unwrap();
    DynamoStore::new(client, table)
}

#[tokio::test]
async fn a_cycles_record_is_kept_whole_in_s3_summarised_in_the_table_and_replays() {
    let store = fresh("kept").await;
    let s3 = s3().await;
    let bucket = format!("trainyard-decisions-{}", std::process::id());
    s3.create_bucket().bucket(&bucket).send().await.unwrap();
    let mut world = common::World::new(store.clone(), NoEvents, ArnContext::default());
    world.config.record_decisions = true;
    world.configure("env", "research", 1).await;
    world.submit("first", "research").await;
    world.submit("second", "research").await;
    assert_eq!(world.accept().await, 2);
    let cycle = world.cycle().await;
    let record = cycle.decision.expect("the cycle recorded its decisions");
    assert_eq!((record.plan.dispatches.len(), record.skips_total), (1, 1));

    let log = S3DecisionLog::new(s3.clone(), &bucket, store.clone(), 14);
    log.append_decision(&record).await.unwrap();

    let summaries = store.decision_summaries(record.at_ms, 10).await.unwrap();
    assert_eq!(summaries.len(), 1, "{summaries:?}");
    let summary = &summaries[0];
    let key = S3DecisionLog::object_key(&record);
    assert!(key.starts_with("decisions/"), "{key}");
    assert_eq!(summary.object, format!("s3://{bucket}/{key}"));
    assert_eq!(summary.id, record.id);
    assert_eq!(
        (summary.dispatches, summary.preemptions, summary.skips),
        (1, 0, 1)
    );
    // Kept 14 days, to DynamoDB's TTL second.
    let expiry = record.at_ms + 14 * 86_400_000;
    assert!(
        (expiry..expiry + 1000).contains(&summary.expires_at_ms),
        "{summary:?}"
    );
    // Another day's partition holds nothing.
    let next_day = store
        .decision_summaries(record.at_ms + 86_400_000, 10)
        .await
        .unwrap();
    assert!(next_day.is_empty(), "{next_day:?}");

    let stored = log.get(&key).await.unwrap();
    assert_eq!(stored, *record, "read back as written");
    assert!(stored.intact());
    assert!(
        stored.replay(None).same,
        "the stored record replays to its plan"
    );
}

#[tokio::test]
async fn a_record_that_cannot_be_stored_leaves_no_summary() {
    let store = fresh("missing").await;
    let s3 = s3().await;
    let mut world = common::World::new(store.clone(), NoEvents, ArnContext::default());
    world.config.record_decisions = true;
    world.configure("env", "research", 1).await;
    world.submit("only", "research").await;
    assert_eq!(world.accept().await, 1);
    let record = world.cycle().await.decision.expect("a record");
    let log = S3DecisionLog::new(s3, "no-such-bucket-for-decisions", store.clone(), 14);
    let result = log.append_decision(&record).await;
    assert!(
        matches!(result, Err(StoreError::Unavailable { .. })),
        "{result:?}"
    );
    let summaries = store.decision_summaries(record.at_ms, 10).await.unwrap();
    assert!(summaries.is_empty(), "{summaries:?}");
}

/// What the scheduler's forecaster learnt outlives its process: nothing is kept at first (a
/// missing object is "nothing yet", not an error), then what was saved reads back equal, and a
/// later save replaces it.
#[tokio::test]
async fn a_forecasters_learned_state_is_kept_and_read_back() {
    use trainyard_aws::forecasts::{KEY, S3ForecastMemory};
    use trainyard_forecast::{Family, Learned};

    common::require_endpoint(&["AWS_ENDPOINT_URL_S3"]);
    let s3 = s3().await;
    let bucket = format!("trainyard-forecasts-{}", std::process::id());
    s3.create_bucket().bucket(&bucket).send().await.unwrap();
    let memory = S3ForecastMemory::new(s3.clone(), &bucket);
    assert_eq!(memory.load().await.unwrap(), None, "nothing kept yet");

    let mut learned = Learned::default();
    let family = Family::of(&"research".into(), Some(&"team-a".into()), 2);
    learned
        .history
        .observe_runtime(family.clone(), 3_600, Some(14_400));
    memory.save(&learned).await.unwrap();
    assert_eq!(memory.load().await.unwrap(), Some(learned.clone()));

    learned.history.observe_runtime(family, 600, None);
    memory.save(&learned).await.unwrap();
    let kept = memory.load().await.unwrap().unwrap();
    assert_eq!(kept.history.runtimes_observed(), 2);
    let listed = s3.list_objects_v2().bucket(&bucket).send().await.unwrap();
    let keys: Vec<&str> = listed.contents().iter().filter_map(|o| o.key()).collect();
    assert_eq!(keys, [KEY], "one object, replaced");
}
