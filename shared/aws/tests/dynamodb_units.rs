//! What the DynamoDB store costs in capacity units: one job from submit to SUCCEEDED, and one
//! cycle as a function of shares, backlog and dispatches. Runs the real use-cases over
//! [`DynamoStore`] with accounting on, against moto, and prints the figures (run with
//! `--nocapture` to see them; `docs/storage-dynamodb.md` has the command and the results).
//!
//! moto's `ConsumedCapacity` is a constant per call, so the assertions are on the estimate by
//! AWS's rules (see `trainyard_aws::dynamodb::Consumed`); the reported figure is printed beside
//! it, labelled.
#![cfg(feature = "moto-tests")]
// Test support: a broken set-up should fail loudly where it broke.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use trainyard_app::ports::{CapacityRelease, ConfigStore, JobStore, SchedulingStore};

use trainyard_app::ports::{NoEvents, TrainingStatus};
use trainyard_aws::dynamodb::{Consumed, DynamoStore, create_table};
use trainyard_domain::arn::ArnContext;
use trainyard_domain::environment::ServiceEnvironment;
use trainyard_domain::job::JobStatus;

/// A store with accounting on a new table.
async fn fresh(case: &str) -> DynamoStore {
    common::require_endpoint(&["AWS_ENDPOINT_URL_DYNAMODB"]);
    static SEQUENCE: AtomicU64 = AtomicU64::new(0);
    let table = format!(
        "units-{}-{}-{case}",
        std::process::id(),
        SEQUENCE.fetch_add(1, Ordering::Relaxed)
    );
    let client = aws_sdk_dynamodb::Client::new(&common::sdk_config().await);
    create_table(&client, &table).await.unwrap();
    DynamoStore::new(client, table).with_accounting()
}

fn row(step: &str, c: &Consumed) -> String {
    format!(
        "| {step:<34} | {:>8} | {:>9.1} | {:>9.1} | {:>12.1} | {:>12.1} |",
        c.requests, c.estimated.read, c.estimated.write, c.reported.read, c.reported.write
    )
}

const HEADER: &str = "| step                               | requests | est. RCU  | est. WCU  | moto RCU     | moto WCU     |\n|---|---|---|---|---|---|";

#[tokio::test]
async fn one_job_from_submit_to_succeeded() {
    let world = common::World::new(fresh("lifecycle").await, NoEvents, ArnContext::default());
    world.configure("env", "research", 4).await;
    let store = world.service.store();
    store.reset_consumed();

    let mut lines = vec![HEADER.to_owned()];
    let mut before = store.consumed();
    let mut step = |name: &str, lines: &mut Vec<String>| {
        let now = store.consumed();
        let delta = now.since(&before);
        lines.push(row(name, &delta));
        before = now;
        delta
    };
    let id = world.submit("resnet", "research").await;
    let submit = step("submit (with clientToken)", &mut lines);
    world.clock.advance(1_000);
    assert_eq!(world.accept().await, 1);
    let accept = step("accept (SUBMITTED → RUNNABLE)", &mut lines);
    world.clock.advance(1_000);
    assert_eq!(world.cycle().await.dispatched, 1);
    let cycle = step("cycle: dispatch + launch", &mut lines);
    let mut events = Vec::new();
    for (status, secondary, becomes, name) in [
        (
            TrainingStatus::InProgress,
            "Downloading",
            JobStatus::Starting,
            "event → STARTING",
        ),
        (
            TrainingStatus::InProgress,
            "Training",
            JobStatus::Running,
            "event → RUNNING",
        ),
        (
            TrainingStatus::Completed,
            "Completed",
            JobStatus::Succeeded,
            "event → SUCCEEDED",
        ),
    ] {
        world.clock.advance(60_000);
        let outcome = world.training(&id, 1, status, secondary).await;
        assert_eq!(
            outcome,
            trainyard_app::service::scheduling::StateOutcome::Applied(becomes)
        );
        events.push(step(name, &mut lines));
    }
    // The ending wrote a release; the next cycle folds it into the environment's usage.
    world.clock.advance(1_000);
    assert_eq!(world.cycle().await.dispatched, 0);
    let fold = step("next cycle: fold the release", &mut lines);
    assert!(
        store
            .list_documents::<CapacityRelease>()
            .await
            .unwrap()
            .is_empty(),
        "the cycle folded the release"
    );
    let total = store.consumed();
    lines.push(row("total, submit → folded", &total));
    let job = store.get_job(&id).await.unwrap().unwrap().value;
    let (own, request) = DynamoStore::job_item_sizes(&job).unwrap();
    println!(
        "job item: {own} bytes when SUCCEEDED; request item: {request} bytes (payload {} bytes)",
        job.service_request_payload.len()
    );
    println!("\none job, submit → SUCCEEDED\n{}", lines.join("\n"));
    println!("estimated WCU by target: {:?}", total.writes_by_target);
    println!("estimated RCU by source: {:?}", total.reads_by_source);
    println!(
        "index entries rewritten unchanged (not billed, by AWS's wording): {} WCU",
        total.unchanged_index_entries
    );

    // The breakdowns account for every unit.
    let by_target: f64 = total.writes_by_target.values().sum();
    let by_source: f64 = total.reads_by_source.values().sum();
    assert!((by_target - total.estimated.write).abs() < 1e-9);
    assert!((by_source - total.estimated.read).abs() < 1e-9);
    // Every step writes; the job's own item is written at least once per status.
    for (name, c) in [("submit", &submit), ("accept", &accept), ("cycle", &cycle)] {
        assert!(c.estimated.write > 0.0, "{name}: {c:?}");
    }
    assert!(events.iter().all(|c| c.estimated.write > 0.0));
    assert!(fold.estimated.write > 0.0, "{fold:?}");
    // The job item, rewritten on every change, stays within one write unit (the request item,
    // written once, holds the payload).
    assert!(
        own <= 1024,
        "the job item grew to {own} bytes: every job write now costs double"
    );
    // Regression bound on the estimate (the breakdown is in docs/storage-dynamodb.md): the
    // measured 32 WCU plus one more 1 KB write per step (7). The job item growing past 1 KB
    // (its 7 writes, 2 of them transactional, then cost 9 more), an index projecting the
    // document again (each of the 10 index writes at the item's size) or a status change that
    // moves a job within the dispatched partition again (2 × 2) fails here.
    // Lower it when the table gets cheaper; raising it needs a reason.
    assert!(
        total.estimated.write <= 39.0,
        "one job costs {} WCU (estimated), more than the recorded bound of 39",
        total.estimated.write
    );
}

/// What three consecutive cycles cost: the first after the jobs were accepted (it records a
/// skip reason on each head it read), the next one, measured after the environment was given
/// `free` instances (one per job, so up to `free` dispatches), and a last one while the jobs it
/// dispatched hold their capacity. `shares` fair shares hold `backlog` RUNNABLE jobs each.
async fn cycle_cost(
    shares: usize,
    backlog: usize,
    free: u32,
) -> (Consumed, Consumed, Consumed, usize) {
    let world = common::World::new(fresh("cycle").await, NoEvents, ArnContext::default());
    world.configure_with("env", "sweeps", 0, true).await;
    let store = world.service.store();
    // One job through the API's path, then copies of it put straight into the store as
    // RUNNABLE: the same item size as submitted jobs, for a fraction of the requests.
    let template_id = world.submit_to("sweep", "sweeps", Some("team00")).await;
    assert_eq!(world.accept().await, 1);
    let template = store.get_job(&template_id).await.unwrap().unwrap().value;
    for n in 1..shares * backlog {
        let mut job = template.clone();
        job.job_id = format!("00000000-0000-4000-9000-{n:012x}");
        job.share_identifier = Some(format!("team{:02}", n % shares));
        job.created_at = template.created_at + i64::try_from(n).unwrap();
        job.runnable_at = Some(job.created_at);
        job.client_token = None;
        store.insert_job(&job, None).await.unwrap();
    }
    world.clock.advance(1_000);
    store.reset_consumed();
    assert_eq!(world.cycle().await.dispatched, 0);
    let first = store.consumed();

    let mut env = store
        .get_resource::<ServiceEnvironment>("env")
        .await
        .unwrap()
        .unwrap();
    env.value.capacity_limits[0].max_capacity = free;
    store
        .update_resource(&env.value, env.version)
        .await
        .unwrap();
    world.clock.advance(1_000);
    store.reset_consumed();
    let report = world.cycle().await;
    let next = store.consumed();
    world.clock.advance(1_000);
    store.reset_consumed();
    assert_eq!(world.cycle().await.dispatched, 0);
    (first, next, store.consumed(), report.dispatched)
}

#[tokio::test]
async fn one_cycle_reads_grow_with_shares_and_dispatches_not_with_the_backlog() {
    let mut lines = vec![
        "| shares | RUNNABLE per share | cycle | free instances | dispatched | requests | est. RCU | est. WCU | moto RCU |".to_owned(),
        "|---|---|---|---|---|---|---|---|---|".to_owned(),
    ];
    let mut figures = Vec::new();
    // (shares, backlog per share, free instances in the second cycle). Heads read per share:
    // free + 16 (the cycle's `head_extra`), so a backlog of 24 already exceeds what is read.
    // The last case dispatches 64 jobs, so its third cycle reads 64 holders of capacity.
    // `TRAINYARD_UNITS_MORE_SHARES=100,1000` adds larger fleets of shares (24 jobs each), held
    // to the same bounds (minutes on moto: docs/storage-dynamodb.md).
    let more: Vec<(usize, usize, u32)> = std::env::var("TRAINYARD_UNITS_MORE_SHARES")
        .unwrap_or_default()
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| {
            let shares = s
                .trim()
                .parse()
                .expect("TRAINYARD_UNITS_MORE_SHARES: share counts");
            (shares, 24, 0)
        })
        .collect();
    let cases = [
        (1, 24, 0),
        (4, 24, 0),
        (16, 24, 0),
        (4, 48, 0),
        (4, 24, 4),
        (4, 24, 64),
    ];
    for (shares, backlog, free) in cases.into_iter().chain(more.iter().copied()) {
        let (first, next, held, dispatched) = cycle_cost(shares, backlog, free).await;
        let mut cycles = vec![("first", &first, 0, 0), ("next", &next, free, dispatched)];
        if dispatched > 0 {
            cycles.push(("holding", &held, free, 0));
        }
        for (which, c, free, dispatched) in cycles {
            lines.push(format!(
                "| {shares} | {backlog} | {which} | {free} | {dispatched} | {} | {:.1} | {:.1} | {:.1} |",
                c.requests, c.estimated.read, c.estimated.write, c.reported.read
            ));
            println!(
                "  {shares} shares × {backlog}, {which} cycle, {free} free: RCU by source {:?}; WCU by target {:?}",
                c.reads_by_source, c.writes_by_target
            );
        }
        figures.push(((shares, backlog, free), first, next, held, dispatched));
    }
    println!("\none cycle\n{}", lines.join("\n"));
    let get = |key: (usize, usize, u32)| {
        figures
            .iter()
            .find(|(k, ..)| *k == key)
            .map(|(_, first, next, _, d)| (first.clone(), next.clone(), *d))
            .unwrap()
    };
    let held = |key: (usize, usize, u32)| {
        figures
            .iter()
            .find(|(k, ..)| *k == key)
            .map(|(_, _, _, held, _)| held.clone())
            .unwrap()
    };
    let (one_first, one, _) = get((1, 24, 0));
    let (four_first, four, _) = get((4, 24, 0));
    let (four_deep_first, four_deep, _) = get((4, 48, 0));
    let (sixteen_first, sixteen, _) = get((16, 24, 0));
    let (_, four_dispatching, dispatched) = get((4, 24, 4));
    assert_eq!(dispatched, 4);
    let (_, _, dispatched) = get((4, 24, 64));
    assert_eq!(dispatched, 64);
    // The jobs holding capacity are read from the index's entries (each projects what the
    // scheduler needs of it), not fetched: 64 holders cost about 2.5 RCU more than 4 (entries of
    // about 300 bytes, eventually consistent), where fetching them costs 1 RCU each.
    let (held_4, held_64) = (held((4, 24, 4)), held((4, 24, 64)));
    assert!(
        !held_64.reads_by_source.contains_key("BatchGetItem"),
        "{:?}",
        held_64.reads_by_source
    );
    assert!(
        held_64.estimated.read <= held_4.estimated.read + 4.0,
        "64 holders: {} RCU, 4 holders: {} RCU",
        held_64.estimated.read,
        held_4.estimated.read
    );
    // Neither cycle reads or writes more for a deeper backlog.
    assert_eq!(four.estimated, four_deep.estimated, "steady cycle");
    assert_eq!(four.requests, four_deep.requests);
    assert_eq!(
        four_first.estimated, four_deep_first.estimated,
        "first cycle"
    );
    // Reads grow with shares.
    assert!(one.estimated.read < four.estimated.read);
    assert!(four.estimated.read < sixteen.estimated.read);
    // A steady cycle reads its heads from the runnable index alone (it projects every field of
    // a head): no job is fetched. Regression bound, with the figures in
    // docs/storage-dynamodb.md: measured 9 + 1.5 RCU per share (8 of configuration and document partitions,
    // 0.5 for the dispatched partition; per share 0.5 for the skip scan's `Limit 1` query and 1
    // for its 16 heads, about 300 bytes each, eventually consistent). The bound gives each share 2: the
    // head entries may grow to 512 bytes; a `BatchGetItem` of the heads (16 RCU a share) fails.
    // The first cycle, which records a skip reason on every head, reads no more: each reason is
    // set in place (`UpdateItem` with the head's version as its condition), no job is read.
    let mut bounded = vec![
        (1, "steady", one.clone()),
        (4, "steady", four.clone()),
        (16, "steady", sixteen.clone()),
        (1, "first", one_first.clone()),
        (4, "first", four_first.clone()),
        (16, "first", sixteen_first.clone()),
    ];
    for key in &more {
        let (first, steady, _) = get(*key);
        bounded.push((key.0, "steady", steady));
        bounded.push((key.0, "first", first));
    }
    for (shares, which, cycle) in &bounded {
        let (shares, which) = (u32::try_from(*shares).unwrap_or(u32::MAX), *which);
        assert!(
            !cycle.reads_by_source.contains_key("BatchGetItem"),
            "{which} cycle over {shares} shares: {:?}",
            cycle.reads_by_source
        );
        // + 1: the queues' wait digests (one small partition, read consistently), which tell
        // the cycle which lines' waits changed (docs/scheduling.md, "Why a job waits"); + 1:
        // the capacity releases to fold (one partition, read consistently, empty here).
        let bound = 9.0 + 2.0 * f64::from(shares);
        assert!(
            cycle.estimated.read <= bound,
            "a {which} cycle over {shares} shares reads {} RCU (estimated), more than {bound}",
            cycle.estimated.read
        );
    }
    // What that costs on the write side: the runnable entry holds the version and the status
    // reason, so recording a skip reason rewrites the job item (1 WCU: an update is billed by
    // the item's size) and its runnable entry (1), 2 WCU per head where a keys-only index costs
    // 1. The first cycle over 4 shares records
    // one on each of its 64 heads.
    // Beside them, each line's waits (about 4 WCU with 8 jobs named, docs/scheduling.md "Why
    // a job waits") and the queue's digests of them.
    assert!(
        four_first.estimated.write <= 2.0 * 64.0 + 5.0 * 4.0 + 1.0,
        "first cycle: {} WCU (estimated) for 64 skip reasons: {:?}",
        four_first.estimated.write,
        four_first.writes_by_target
    );
    // Once skip reasons are recorded, an idle cycle writes nothing for its heads.
    assert!(
        four.estimated.write < four_first.estimated.write,
        "{four:?} vs {four_first:?}"
    );
    assert!(four_dispatching.estimated.write > four.estimated.write);
    // A cycle in which nothing changes writes nothing, however many jobs hold capacity: a
    // fair share's usage record is rewritten only when what the share holds changes.
    for (holding, cycle) in [(4, &held_4), (64, &held_64)] {
        assert_eq!(
            cycle.estimated.write, 0.0,
            "holding {holding}: {:?}",
            cycle.writes_by_target
        );
    }
}
