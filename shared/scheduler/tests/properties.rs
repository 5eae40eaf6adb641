//! Seeded property tests of the planner's invariants. Each case is generated from one `u64`
//! seed, which proptest prints on failure; `generate(seed)` replays it exactly.

use std::collections::BTreeMap;
use trainyard_domain::random::SplitMix64;

use proptest::prelude::*;
use trainyard_domain::environment::{CapacityLimit, NUM_INSTANCES};
use trainyard_domain::policy::{FairsharePolicy, ShareAttributes};
use trainyard_scheduler::fair_share::ShareUsage;
use trainyard_scheduler::{
    Config, EnvironmentState, PendingJob, Plan, QueuePolicy, QueueState, RunningJob, ShareKey,
    SkipReason, Snapshot, plan_cycle,
};

const NOW: i64 = 1_000_000_000;
const GPU: &str = "ml.p4d.24xlarge";

/// A seed fully determines a case.
type Rng = SplitMix64;

fn instances(n: u32) -> BTreeMap<String, u32> {
    BTreeMap::from([(GPU.to_owned(), n)])
}

/// One environment, 1–4 queues (FIFO or fair share), running attempts within capacity, and up
/// to 40 pending jobs.
fn generate(seed: u64) -> Snapshot {
    let mut rng = Rng::new(seed);
    let limit = 1 + rng.below(16) as u32;
    let queue_count = 1 + rng.below(4);
    let queues: Vec<QueueState> = (0..queue_count)
        .map(|i| QueueState {
            name: format!("q{i}"),
            priority: rng.below(3) as u32 * 100,
            environment: Some("gpu".into()),
            policy: if rng.below(2) == 0 {
                QueuePolicy::Fifo
            } else {
                QueuePolicy::FairShare(FairsharePolicy {
                    share_decay_seconds: Some(600),
                    compute_reservation: None,
                    share_distribution: vec![ShareAttributes {
                        share_identifier: "s0".into(),
                        weight_factor: Some(0.5),
                    }],
                })
            },
            aging: None,
            reserve_after_ms: None,
        })
        .collect();
    let mut used = 0;
    let mut running = Vec::new();
    for i in 0..rng.below(6) {
        let n = 1 + rng.below(4) as u32;
        if used + n > limit {
            break;
        }
        used += n;
        let q = rng.below(queue_count);
        running.push(RunningJob {
            job_id: format!("r{i}").into(),
            queue: format!("q{q}").into(),
            share: Some(format!("s{}", rng.below(3)).into()),
            priority: 0,
            started_at_ms: NOW - 60_000,
            instances: instances(n).into(),
            expected_end_ms: NOW + 1000 * (1 + rng.below(10_000)) as i64,
            checkpoint_ms: None,
            checkpoint_interval_ms: None,
            preemptions: 0,
            resumable: false,
            stopping: false,
        });
    }
    let pending = (0..rng.below(41))
        .map(|i| PendingJob {
            job_id: format!("p{i:02}").into(),
            queue: format!("q{}", rng.below(queue_count)).into(),
            share: Some(format!("s{}", rng.below(3)).into()),
            priority: rng.below(3) as u32,
            runnable_at_ms: NOW - 1000 * rng.below(1000) as i64,
            instances: instances(1 + rng.below(6) as u32).into(),
            max_runtime_s: if rng.below(4) == 0 {
                None
            } else {
                Some(60 + rng.below(20_000))
            },
            not_before_ms: None,
            line_offset_ms: 0,
        })
        .collect();
    let mut usage = BTreeMap::new();
    for s in 0..3 {
        for q in 0..queue_count {
            let key = ShareKey {
                queue: format!("q{q}").into(),
                share: format!("s{s}").into(),
            };
            usage.insert(
                key,
                ShareUsage {
                    instance_seconds: rng.below(50_000) as f64,
                    at_ms: NOW - 1000,
                },
            );
        }
    }
    Snapshot {
        environments: vec![EnvironmentState {
            name: "gpu".into(),
            enabled: true,
            limits: vec![CapacityLimit {
                max_capacity: limit,
                capacity_unit: NUM_INSTANCES.into(),
            }],
        }],
        queues,
        running,
        pending,
        usage,
        in_use: BTreeMap::new(),
    }
}

fn limit(s: &Snapshot) -> u64 {
    u64::from(s.environments[0].limits[0].max_capacity)
}

fn total(i: &BTreeMap<String, u32>) -> u64 {
    i.values().map(|n| u64::from(*n)).sum()
}

fn used_after(s: &Snapshot, plan: &Plan) -> u64 {
    s.running.iter().map(|r| total(&r.instances)).sum::<u64>()
        + plan
            .dispatches
            .iter()
            .map(|d| total(&d.instances))
            .sum::<u64>()
}

fn runtime_ms(job: &PendingJob) -> i64 {
    job.max_runtime_s
        .unwrap_or(Config::default().default_runtime_s) as i64
        * 1000
}

/// Earliest time `need` instances are free, given (end, instances) releases and `free` now.
fn earliest_start(mut releases: Vec<(i64, u64)>, mut free: u64, need: u64) -> i64 {
    releases.sort();
    if free >= need {
        return NOW;
    }
    for (end, n) in releases {
        free += n;
        if free >= need {
            return end;
        }
    }
    i64::MAX
}

fn configs() -> [Config; 2] {
    [
        Config::default(),
        Config {
            strict_fifo: true,
            ..Config::default()
        },
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn capacity_is_never_exceeded(seed in any::<u64>()) {
        let s = generate(seed);
        for config in configs() {
            let plan = plan_cycle(&s, NOW, &config);
            prop_assert!(used_after(&s, &plan) <= limit(&s), "seed {seed}: {plan:?}");
        }
    }

    #[test]
    fn every_pending_job_gets_exactly_one_decision(seed in any::<u64>()) {
        let s = generate(seed);
        let plan = plan_cycle(&s, NOW, &Config::default());
        let mut ids: Vec<&str> = plan.dispatches.iter().map(|d| d.job_id.as_str()).chain(plan.skips.iter().map(|k| k.job_id.as_str())).collect();
        ids.sort();
        let mut expected: Vec<&str> = s.pending.iter().map(|p| p.job_id.as_str()).collect();
        expected.sort();
        prop_assert_eq!(ids, expected, "seed {}", seed);
    }

    #[test]
    fn same_input_same_plan_whatever_the_input_order(seed in any::<u64>()) {
        let s = generate(seed);
        let plan = plan_cycle(&s, NOW, &Config::default());
        prop_assert_eq!(&plan, &plan_cycle(&s, NOW, &Config::default()), "seed {}", seed);
        let mut shuffled = s.clone();
        shuffled.pending.reverse();
        shuffled.queues.reverse();
        shuffled.running.reverse();
        prop_assert_eq!(&plan, &plan_cycle(&shuffled, NOW, &Config::default()), "seed {}", seed);
    }

    #[test]
    fn a_fitting_higher_priority_job_is_never_passed_over(seed in any::<u64>()) {
        let s = generate(seed);
        for config in configs() {
            let plan = plan_cycle(&s, NOW, &config);
            let leftover = limit(&s) - used_after(&s, &plan);
            let priority = |queue: &str| s.queues.iter().find(|q| q.name == queue).map(|q| q.priority);
            let job = |id: &str| s.pending.iter().find(|p| p.job_id == id).unwrap();
            for skip in &plan.skips {
                if !matches!(skip.reason, SkipReason::InsufficientCapacity { .. }) { continue; }
                let waiting = job(&skip.job_id);
                for d in &plan.dispatches {
                    if priority(&d.queue) < priority(&waiting.queue) {
                        // Had the lower-priority job not run, would the waiting one have fit?
                        prop_assert!(total(&waiting.instances) > leftover + total(&d.instances),
                            "seed {seed}: {} (queue {}) passed over for {} (queue {})", waiting.job_id, waiting.queue, d.job_id, d.queue);
                    }
                }
            }
        }
    }

    #[test]
    fn backfill_never_delays_the_heads_reservation(seed in any::<u64>()) {
        // FIFO queues only, so the evaluation order is known: queue priority desc, queue name,
        // then runnable_at and id.
        let mut s = generate(seed);
        for q in &mut s.queues { q.policy = QueuePolicy::Fifo; }
        let plan = plan_cycle(&s, NOW, &Config::default());
        let Some(head) = plan.skips.iter().find(|k| matches!(k.reason, SkipReason::InsufficientCapacity { .. })) else { return Ok(()) };
        let priority = |queue: &str| s.queues.iter().find(|q| q.name == queue).map(|q| q.priority).unwrap();
        let eval_key = |p: &PendingJob| (std::cmp::Reverse(priority(&p.queue)), p.queue.clone(), p.runnable_at_ms, p.job_id.clone());
        let head = s.pending.iter().find(|p| p.job_id == head.job_id).unwrap();
        let need = total(&head.instances);
        let release = |p: &PendingJob| (NOW + runtime_ms(p), total(&p.instances));
        let dispatched: Vec<&PendingJob> = plan.dispatches.iter().map(|d| s.pending.iter().find(|p| p.job_id == d.job_id).unwrap()).collect();
        let running: Vec<(i64, u64)> = s.running.iter().map(|r| (r.expected_end_ms, total(&r.instances))).collect();
        // The reservation: what the head waited behind when it was evaluated.
        let mut ahead = running.clone();
        ahead.extend(dispatched.iter().filter(|p| eval_key(p) < eval_key(head)).map(|p| release(p)));
        let free_then = limit(&s) - ahead.iter().map(|r| r.1).sum::<u64>();
        let reserved = earliest_start(ahead, free_then, need);
        // After the whole plan, including everything that backfilled behind it.
        let mut all = running;
        all.extend(dispatched.iter().map(|p| release(p)));
        let free_now = limit(&s) - all.iter().map(|r| r.1).sum::<u64>();
        let start = earliest_start(all, free_now, need);
        prop_assert!(start <= reserved, "seed {seed}: head {} could start at {reserved}, now only at {start}", head.job_id);
    }
}

/// Fair share converges to the weights over a long backlogged run: two shares with weight
/// factors 0.25 and 1.0 compete for 20 instances with one-instance jobs of 10 minutes; over
/// 48 simulated hours the first must get 4/5 of the instance-time, within 5%.
#[test]
fn fair_share_converges_to_the_weights_over_a_long_backlogged_run() {
    let policy = FairsharePolicy {
        share_decay_seconds: Some(3600),
        compute_reservation: None,
        share_distribution: vec![
            ShareAttributes {
                share_identifier: "a".into(),
                weight_factor: Some(0.25),
            },
            ShareAttributes {
                share_identifier: "b".into(),
                weight_factor: Some(1.0),
            },
        ],
    };
    let queue = QueueState {
        name: "q".into(),
        priority: 1,
        environment: Some("gpu".into()),
        policy: QueuePolicy::FairShare(policy),
        aging: None,
        reserve_after_ms: None,
    };
    let env = EnvironmentState {
        name: "gpu".into(),
        enabled: true,
        limits: vec![CapacityLimit {
            max_capacity: 20,
            capacity_unit: NUM_INSTANCES.into(),
        }],
    };
    let step_ms = 60_000;
    let job_ms = 600_000;
    let mut running: Vec<RunningJob> = Vec::new();
    let mut usage: BTreeMap<ShareKey, ShareUsage> = BTreeMap::new();
    let mut served = BTreeMap::from([("a", 0u64), ("b", 0u64)]);
    let mut next_id = 0u64;
    let mut now = NOW;
    for _ in 0..(48 * 60) {
        running.retain(|r| r.expected_end_ms > now);
        // Always backlogged: 30 fresh jobs per share.
        let pending: Vec<PendingJob> = ["a", "b"]
            .iter()
            .flat_map(|share| {
                (0..30).map(move |i| PendingJob {
                    job_id: format!("{share}-{i:02}").into(),
                    queue: "q".into(),
                    share: Some((*share).into()),
                    priority: 0,
                    runnable_at_ms: NOW,
                    instances: instances(1).into(),
                    max_runtime_s: Some(job_ms as u64 / 1000),
                    not_before_ms: None,
                    line_offset_ms: 0,
                })
            })
            .collect();
        let snapshot = Snapshot {
            environments: vec![env.clone()],
            queues: vec![queue.clone()],
            running: running.clone(),
            pending,
            usage: usage.clone(),
            in_use: BTreeMap::new(),
        };
        let plan = plan_cycle(&snapshot, now, &Config::default());
        for d in plan.dispatches {
            let share = if d.job_id.starts_with('a') { "a" } else { "b" };
            next_id += 1;
            running.push(RunningJob {
                job_id: format!("run{next_id}").into(),
                queue: "q".into(),
                share: Some(share.into()),
                priority: 0,
                started_at_ms: now,
                instances: d.instances,
                expected_end_ms: now + job_ms,
                checkpoint_ms: None,
                checkpoint_interval_ms: None,
                preemptions: 0,
                resumable: false,
                stopping: false,
            });
        }
        // Account one step of usage per share (the host's job after each cycle).
        for share in ["a", "b"] {
            let held = running
                .iter()
                .filter(|r| r.share.as_deref() == Some(share))
                .count() as u64;
            *served.get_mut(share).unwrap() += held;
            let key = ShareKey {
                queue: "q".into(),
                share: share.into(),
            };
            let u = usage.get(&key).copied().unwrap_or(ShareUsage {
                instance_seconds: 0.0,
                at_ms: now,
            });
            usage.insert(key, u.advance(now + step_ms, held, 3600));
        }
        now += step_ms;
    }
    let a = served["a"] as f64;
    let b = served["b"] as f64;
    let share_a = a / (a + b);
    assert!(
        (share_a - 0.8).abs() < 0.05,
        "share a got {share_a:.3} of the instance-time, expected 0.8 ± 0.05"
    );
    assert!(
        a + b >= 0.99 * 20.0 * 48.0 * 60.0,
        "the pool stays busy: {}",
        a + b
    );
}
