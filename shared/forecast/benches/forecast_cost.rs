//! What a forecast round costs: every waiting job of a backlog of 1,000 / 10,000 jobs over 10 /
//! 1,000 fair shares, on a 1,000-instance pool that 1,000 running attempts fill, runtimes learnt
//! for every family. Prints the CPU time of one rollout and of a round of 32 (the hosts'
//! default), how many of the waiting jobs started within the 7-day horizon, and what a round
//! bounded by the hosts' 10 s budget ran (`trainyard_app`'s `ROUND_BUDGET`: at least 8
//! rollouts, then none started after 10 s).
//!
//! Run: `cargo bench -p trainyard-forecast --bench forecast_cost`
//! (`FORECAST_ROLLOUTS=N` changes the rollouts of the timed round; default 32;
//! `FORECAST_BUDGET_S=N` the budget; default 10; `FORECAST_WEIGHTED=1` lists every share in
//! the policy's `shareDistribution`, each at the default weight 1.0, so the plans are the same
//! and only looking weights up costs more).

use std::collections::BTreeMap;
use std::time::Instant;

use trainyard_domain::environment::{CapacityLimit, NUM_INSTANCES};
use trainyard_domain::policy::{FairsharePolicy, ShareAttributes};
use trainyard_forecast::{Family, History, Options, forecast};
use trainyard_scheduler::{
    Config, EnvironmentState, PendingJob, QueuePolicy, QueueState, RunningJob, Snapshot,
};

const NOW: i64 = 1_800_000_000_000;
const GPU: &str = "ml.p4d.24xlarge";

fn world(pending: usize, shares: usize, weighted: bool) -> (Snapshot, History) {
    let one = |n: u32| BTreeMap::from([(GPU.to_owned(), n)]);
    let share = |i: usize| format!("team-{:04}", i % shares);
    let running = (0..1_000)
        .map(|i| RunningJob {
            job_id: format!("run-{i:07}").into(),
            queue: "research".into(),
            share: Some(share(i).into()),
            priority: 0,
            started_at_ms: NOW - 60_000 * (i as i64 % 120),
            instances: one(1).into(),
            expected_end_ms: NOW + 86_400_000,
            checkpoint_ms: None,
            checkpoint_interval_ms: None,
            preemptions: 0,
            resumable: false,
            stopping: false,
        })
        .collect();
    let pending = (0..pending)
        .map(|i| PendingJob {
            job_id: format!("job-{i:07}").into(),
            queue: "research".into(),
            share: Some(share(i).into()),
            priority: (i % 5) as u32,
            runnable_at_ms: NOW - i as i64,
            instances: one(1 + (i % 4) as u32).into(),
            max_runtime_s: Some(86_400),
            not_before_ms: None,
            line_offset_ms: 0,
        })
        .collect();
    let snapshot = Snapshot {
        environments: vec![EnvironmentState {
            name: "gpu".into(),
            enabled: true,
            limits: vec![CapacityLimit {
                max_capacity: 1_000,
                capacity_unit: NUM_INSTANCES.into(),
            }],
        }],
        queues: vec![QueueState {
            name: "research".into(),
            priority: 500,
            environment: Some("gpu".into()),
            policy: QueuePolicy::FairShare(FairsharePolicy {
                share_distribution: (0..shares)
                    .filter(|_| weighted)
                    .map(|s| ShareAttributes {
                        share_identifier: share(s),
                        weight_factor: Some(1.0),
                    })
                    .collect(),
                ..FairsharePolicy::default()
            }),
            aging: None,
            reserve_after_ms: None,
        }],
        running,
        pending,
        ..Snapshot::default()
    };
    // Runtimes of 10 minutes to 4 hours for every family.
    let mut history = History::default();
    for s in 0..shares {
        for n in 1..=4 {
            let family = Family::of(&"research".into(), Some(&share(s).into()), n);
            for k in 0..16u64 {
                history.observe_runtime(
                    family.clone(),
                    600 + (k * 7_919 + s as u64 * 104_729) % 13_800,
                    Some(86_400),
                );
            }
        }
    }
    (snapshot, history)
}

fn main() {
    let rollouts: u32 = std::env::var("FORECAST_ROLLOUTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(32);
    println!(
        "cargo bench -p trainyard-forecast --bench forecast_cost  (rollouts per round: {rollouts})"
    );
    let budget_s: u64 = std::env::var("FORECAST_BUDGET_S")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let weighted = std::env::var("FORECAST_WEIGHTED").is_ok_and(|v| v == "1");
    println!(
        "| waiting | shares | one rollout | round of {rollouts} | started within 7 days | \
         round within {budget_s} s: rollouts, wall |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    for (pending, shares) in [(1_000, 10), (10_000, 10), (10_000, 1_000)] {
        let (snapshot, history) = world(pending, shares, weighted);
        let heads_extra = std::env::var("FORECAST_HEADS_EXTRA")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(Options::default().heads_extra);
        let options = |rollouts| Options {
            rollouts,
            seed: 1,
            heads_extra,
            ..Options::default()
        };
        let started = Instant::now();
        let one = forecast(&snapshot, NOW, &Config::default(), &history, &options(1));
        let one_s = started.elapsed().as_secs_f64();
        let started = Instant::now();
        let round = forecast(
            &snapshot,
            NOW,
            &Config::default(),
            &history,
            &options(rollouts),
        );
        let round_s = started.elapsed().as_secs_f64();
        let within = round.values().filter(|s| s.quantile(0.5).is_some()).count();
        let _ = one;
        let started = Instant::now();
        let bounded = forecast(
            &snapshot,
            NOW,
            &Config::default(),
            &history,
            &Options {
                budget: Some(std::time::Duration::from_secs(budget_s)),
                ..options(rollouts)
            },
        );
        let bounded_s = started.elapsed().as_secs_f64();
        let bounded_rollouts = bounded.values().next().map_or(0, |s| s.rollouts);
        println!(
            "| {pending} | {shares} | {:.2} s | {:.1} s | {within} of {pending} | \
             {bounded_rollouts}, {bounded_s:.1} s |",
            one_s, round_s
        );
    }
}
