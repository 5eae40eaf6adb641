//! `plan_cycle` at scale: 1k / 10k / 100k / 1M pending jobs over 10 / 100 / 1,000 fair shares,
//! with running attempts holding most of a 1,000-instance pool, so most jobs end with a skip
//! reason (the expensive case).
//!
//! Run: `cargo bench -p trainyard-scheduler --bench plan_cycle`
//! (set `PLAN_CYCLE_MAX=100000` to skip the 1M case on a slow machine).

use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use trainyard_domain::environment::{CapacityLimit, NUM_INSTANCES};
use trainyard_domain::policy::FairsharePolicy;
use trainyard_scheduler::fair_share::ShareUsage;
use trainyard_scheduler::{
    Config, EnvironmentState, PendingJob, QueuePolicy, QueueState, RunningJob, ShareKey, Snapshot,
    plan_cycle,
};

const NOW: i64 = 1_800_000_000_000;
const GPU: &str = "ml.p4d.24xlarge";

fn snapshot(pending: usize, shares: usize, running: usize) -> Snapshot {
    let queue = QueueState {
        name: "research".into(),
        priority: 500,
        environment: Some("gpu".into()),
        policy: QueuePolicy::FairShare(FairsharePolicy::default()),
        aging: None,
        reserve_after_ms: None,
    };
    let env = EnvironmentState {
        name: "gpu".into(),
        enabled: true,
        limits: vec![CapacityLimit {
            max_capacity: 1000,
            capacity_unit: NUM_INSTANCES.into(),
        }],
    };
    let one = |n: u32| BTreeMap::from([(GPU.to_owned(), n)]);
    let running = (0..running)
        .map(|i| RunningJob {
            job_id: format!("run-{i:07}").into(),
            queue: "research".into(),
            share: Some(format!("team-{:04}", i % shares).into()),
            priority: 0,
            started_at_ms: NOW - 60_000,
            instances: one(1).into(),
            expected_end_ms: NOW + 1000 * (60 + (i as i64 * 7919) % 86_400),
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
            share: Some(format!("team-{:04}", i % shares).into()),
            priority: (i % 5) as u32,
            runnable_at_ms: NOW - i as i64,
            instances: one(1 + (i % 4) as u32).into(),
            max_runtime_s: Some(600 + (i as u64 * 104_729) % 86_400),
            not_before_ms: None,
            line_offset_ms: 0,
        })
        .collect();
    let usage = (0..shares)
        .map(|s| {
            let key = ShareKey {
                queue: "research".into(),
                share: format!("team-{s:04}").into(),
            };
            (
                key,
                ShareUsage {
                    instance_seconds: (s * 1000) as f64,
                    at_ms: NOW - 60_000,
                },
            )
        })
        .collect();
    Snapshot {
        environments: vec![env],
        queues: vec![queue],
        running,
        pending,
        usage,
        in_use: BTreeMap::new(),
    }
}

fn bench(c: &mut Criterion) {
    let max: usize = std::env::var("PLAN_CYCLE_MAX")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let mut group = c.benchmark_group("plan_cycle");
    group.sample_size(10);
    for pending in [1_000, 10_000, 100_000, 1_000_000] {
        if pending > max {
            continue;
        }
        for shares in [10, 100, 1_000] {
            for running in [10, 1_000] {
                let s = snapshot(pending, shares, running);
                let id = BenchmarkId::from_parameter(format!("{pending}p/{shares}s/{running}r"));
                group.bench_with_input(id, &s, |b, s| {
                    b.iter(|| plan_cycle(black_box(s), NOW, &Config::default()))
                });
            }
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
