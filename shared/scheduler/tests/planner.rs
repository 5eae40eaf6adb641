//! Planner behaviour, one narrative case per rule of the crate docs.

use std::collections::BTreeMap;

use trainyard_domain::environment::{CapacityLimit, NUM_INSTANCES};
use trainyard_domain::policy::{FairsharePolicy, ShareAttributes};
use trainyard_domain::queue::Aging;
use trainyard_scheduler::fair_share::ShareUsage;
use trainyard_scheduler::{
    Config, EnvironmentState, PendingJob, Plan, QueuePolicy, QueueState, RunningJob, ShareKey,
    SkipReason, Snapshot, plan_cycle,
};

const NOW: i64 = 1_000_000_000;
const GPU: &str = "ml.p4d.24xlarge";

fn env(name: &str, limits: &[(&str, u32)]) -> EnvironmentState {
    EnvironmentState {
        name: name.into(),
        enabled: true,
        limits: limits
            .iter()
            .map(|(u, m)| CapacityLimit {
                max_capacity: *m,
                capacity_unit: (*u).into(),
            })
            .collect(),
    }
}

fn queue(name: &str, priority: u32, env: &str, policy: QueuePolicy) -> QueueState {
    QueueState {
        name: name.into(),
        priority,
        environment: Some(env.into()),
        policy,
        aging: None,
        reserve_after_ms: None,
    }
}

/// A pending job builder: `job("a", "q", 2)` needs 2 GPU instances, submitted at `NOW - 1000`.
fn job(id: &str, queue: &str, instances: u32) -> PendingJob {
    PendingJob {
        job_id: id.into(),
        queue: queue.into(),
        share: None,
        priority: 0,
        runnable_at_ms: NOW - 1000,
        instances: BTreeMap::from([(GPU.to_owned(), instances)]).into(),
        max_runtime_s: Some(3600),
        not_before_ms: None,
        line_offset_ms: 0,
    }
}

trait JobExt {
    fn at(self, t: i64) -> Self;
    fn share(self, s: &str) -> Self;
    fn priority(self, p: u32) -> Self;
    fn runtime(self, s: u64) -> Self;
    fn of(self, ty: &str) -> Self;
}

impl JobExt for PendingJob {
    fn at(mut self, t: i64) -> Self {
        self.runnable_at_ms = t;
        self
    }
    fn share(mut self, s: &str) -> Self {
        self.share = Some(s.into());
        self
    }
    fn priority(mut self, p: u32) -> Self {
        self.priority = p;
        self
    }
    fn runtime(mut self, s: u64) -> Self {
        self.max_runtime_s = Some(s);
        self
    }
    fn of(mut self, ty: &str) -> Self {
        let n = self.instances.values().sum();
        self.instances = BTreeMap::from([(ty.to_owned(), n)]).into();
        self
    }
}

fn running(id: &str, queue: &str, instances: u32, ends_in_s: i64) -> RunningJob {
    RunningJob {
        job_id: id.into(),
        queue: queue.into(),
        share: None,
        priority: 0,
        started_at_ms: NOW - 3_600_000,
        instances: BTreeMap::from([(GPU.to_owned(), instances)]).into(),
        expected_end_ms: NOW + ends_in_s * 1000,
        checkpoint_ms: None,
        checkpoint_interval_ms: None,
        preemptions: 0,
        resumable: false,
        stopping: false,
    }
}

fn dispatched(plan: &Plan) -> Vec<&str> {
    plan.dispatches.iter().map(|d| d.job_id.as_str()).collect()
}

fn reason<'a>(plan: &'a Plan, id: &str) -> &'a SkipReason {
    &plan
        .skips
        .iter()
        .find(|s| s.job_id == id)
        .unwrap_or_else(|| panic!("{id} not skipped: {plan:?}"))
        .reason
}

fn one_env(
    limit: u32,
    queues: Vec<QueueState>,
    pending: Vec<PendingJob>,
    running: Vec<RunningJob>,
) -> Snapshot {
    Snapshot {
        environments: vec![env("gpu", &[(NUM_INSTANCES, limit)])],
        queues,
        running,
        pending,
        usage: BTreeMap::new(),
        in_use: BTreeMap::new(),
    }
}

#[test]
fn fifo_dispatches_in_submission_order_until_capacity_runs_out() {
    let s = one_env(
        4,
        vec![queue("q", 1, "gpu", QueuePolicy::Fifo)],
        vec![
            job("c", "q", 2).at(3),
            job("a", "q", 2).at(1),
            job("b", "q", 1).at(2),
            job("d", "q", 1).at(4),
        ],
        vec![],
    );
    let plan = plan_cycle(&s, NOW, &Config::default());
    assert_eq!(
        dispatched(&plan),
        ["a", "b", "d"],
        "c does not fit; d backfills (it ends before c could start)"
    );
    assert!(matches!(
        reason(&plan, "c"),
        SkipReason::InsufficientCapacity {
            needed: 2,
            free: 1,
            ..
        }
    ));
}

#[test]
fn strict_fifo_stops_a_queue_at_its_waiting_head() {
    let s = one_env(
        4,
        vec![queue("q", 1, "gpu", QueuePolicy::Fifo)],
        vec![
            job("a", "q", 3).at(1),
            job("b", "q", 2).at(2),
            job("c", "q", 1).at(3),
        ],
        vec![],
    );
    let plan = plan_cycle(
        &s,
        NOW,
        &Config {
            strict_fifo: true,
            ..Config::default()
        },
    );
    assert_eq!(dispatched(&plan), ["a"]);
    assert_eq!(
        reason(&plan, "c"),
        &SkipReason::BehindHead {
            head_job_id: "b".into()
        }
    );
}

#[test]
fn higher_priority_queues_are_served_first() {
    let s = one_env(
        3,
        vec![
            queue("sweeps", 100, "gpu", QueuePolicy::Fifo),
            queue("production", 900, "gpu", QueuePolicy::Fifo),
            queue("research", 500, "gpu", QueuePolicy::Fifo),
        ],
        vec![
            job("s1", "sweeps", 1).at(1),
            job("r1", "research", 1).at(2),
            job("p1", "production", 1).at(3),
            job("p2", "production", 1).at(4),
        ],
        vec![],
    );
    let plan = plan_cycle(&s, NOW, &Config::default());
    assert_eq!(dispatched(&plan), ["p1", "p2", "r1"]);
    assert!(matches!(
        reason(&plan, "s1"),
        SkipReason::InsufficientCapacity { .. }
    ));
}

const HOUR_MS: i64 = 3_600_000;

/// A queue whose jobs age `per_hour` points an hour, up to `max`.
fn aging(mut queue: QueueState, per_hour: u32, max: u32) -> QueueState {
    queue.aging = Some(Aging {
        per_hour,
        max_priority: max,
        after_hours: 0,
    });
    queue
}

/// The three tiers of the simulator's `fleet` scenario: research and sweeps age 100 points an
/// hour up to 899, so they never pass fresh production work.
fn tiers(production: PendingJob, research: PendingJob, sweeps: PendingJob, free: u32) -> Plan {
    let s = one_env(
        free,
        vec![
            queue("production", 900, "gpu", QueuePolicy::Fifo),
            aging(queue("research", 500, "gpu", QueuePolicy::Fifo), 100, 899),
            aging(queue("sweeps", 100, "gpu", QueuePolicy::Fifo), 100, 899),
        ],
        vec![production, research, sweeps],
        vec![],
    );
    plan_cycle(&s, NOW, &Config::default())
}

#[test]
fn an_old_job_of_an_aging_queue_passes_fresh_work_of_higher_queues_but_not_the_ceiling() {
    let fresh = NOW - 60_000;
    // Waited 5 h: sweeps is at 100 + 500 = 600, above fresh research (500).
    let plan = tiers(
        job("p", "production", 1).at(fresh),
        job("r", "research", 1).at(fresh),
        job("s", "sweeps", 1).at(NOW - 5 * HOUR_MS),
        2,
    );
    assert_eq!(dispatched(&plan), ["p", "s"]);
    // Waited 3 h: 400, still below research.
    let plan = tiers(
        job("p", "production", 1).at(fresh),
        job("r", "research", 1).at(fresh),
        job("s", "sweeps", 1).at(NOW - 3 * HOUR_MS),
        2,
    );
    assert_eq!(dispatched(&plan), ["p", "r"]);
    // Waited a week: overdue at 899, still after fresh production at 900.
    let plan = tiers(
        job("p", "production", 1).at(fresh),
        job("r", "research", 1).at(fresh),
        job("s", "sweeps", 1).at(NOW - 168 * HOUR_MS),
        1,
    );
    assert_eq!(dispatched(&plan), ["p"]);
}

#[test]
fn overdue_jobs_go_oldest_first_whatever_their_queue() {
    // Both at the ceiling: the sweeps job has waited longer, so it goes first although
    // research's own priority is higher.
    let plan = tiers(
        job("p", "production", 1).at(NOW),
        job("r", "research", 1).at(NOW - 10 * HOUR_MS),
        job("s", "sweeps", 1).at(NOW - 20 * HOUR_MS),
        2,
    );
    assert_eq!(dispatched(&plan), ["p", "s"]);
}

#[test]
fn an_overdue_job_that_does_not_fit_holds_the_reservation() {
    // One instance frees in an hour; an overdue sweeps job needing 2 waits for it, and a fresh
    // research job that would outlast that hour may not take the free instance.
    let s = one_env(
        2,
        vec![
            aging(queue("research", 500, "gpu", QueuePolicy::Fifo), 100, 899),
            aging(queue("sweeps", 100, "gpu", QueuePolicy::Fifo), 100, 899),
        ],
        vec![
            job("r", "research", 1).at(NOW).runtime(7200),
            job("s", "sweeps", 2).at(NOW - 20 * HOUR_MS),
        ],
        vec![running("busy", "research", 1, 3600)],
    );
    let plan = plan_cycle(&s, NOW, &Config::default());
    assert!(dispatched(&plan).is_empty(), "{plan:?}");
    assert!(matches!(
        reason(&plan, "r"),
        SkipReason::ReservedForHead { head_job_id, .. } if head_job_id == "s"
    ));
}

#[test]
fn within_a_fair_share_queue_an_overdue_job_passes_the_share_with_less_usage() {
    let pending = vec![
        job("heavy-old", "q", 1)
            .share("heavy")
            .at(NOW - 20 * HOUR_MS),
        job("light-new", "q", 1).share("light").at(NOW),
    ];
    let usage = |s: &mut Snapshot| {
        s.usage.insert(
            ShareKey {
                queue: "q".into(),
                share: "heavy".into(),
            },
            ShareUsage {
                instance_seconds: 3_600_000.0,
                at_ms: NOW,
            },
        );
    };
    let mut plain = one_env(
        1,
        vec![queue("q", 100, "gpu", fair(&[]))],
        pending.clone(),
        vec![],
    );
    usage(&mut plain);
    let plan = plan_cycle(&plain, NOW, &Config::default());
    assert_eq!(dispatched(&plan), ["light-new"], "fair share alone");
    let mut aged = one_env(
        1,
        vec![aging(queue("q", 100, "gpu", fair(&[])), 100, 899)],
        pending,
        vec![],
    );
    usage(&mut aged);
    let plan = plan_cycle(&aged, NOW, &Config::default());
    assert_eq!(dispatched(&plan), ["heavy-old"], "overdue goes first");
}

#[test]
fn backfill_never_delays_the_waiting_head() {
    // 5 instances; 3 held until +1h. Head needs 5 (can start at +1h). A 1-instance job of 30 min
    // ends before then and may run; a 1-instance job of 2 h would push the head back.
    let s = one_env(
        5,
        vec![queue("q", 1, "gpu", QueuePolicy::Fifo)],
        vec![
            job("head", "q", 5).at(1),
            job("short", "q", 1).at(2).runtime(1800),
            job("long", "q", 1).at(3).runtime(7200),
        ],
        vec![running("r", "q", 3, 3600)],
    );
    let plan = plan_cycle(&s, NOW, &Config::default());
    assert_eq!(dispatched(&plan), ["short"]);
    assert_eq!(
        reason(&plan, "long"),
        &SkipReason::ReservedForHead {
            head_job_id: "head".into(),
            head_queue: "q".into(),
            head_start_ms: NOW + 3_600_000
        }
    );
}

#[test]
fn a_job_holds_the_reservation_only_once_it_has_waited_as_long_as_its_queue_asks() {
    // As above, in a queue whose blocked jobs reserve only after 2 h: a head that has waited an
    // hour holds nothing, so the 2 h job behind it starts; at 2 h it holds the reservation.
    let rules = |mut q: QueueState| {
        q.reserve_after_ms = Some(7_200_000);
        q
    };
    let plan = |waited_ms: i64| {
        let s = one_env(
            5,
            vec![rules(queue("q", 1, "gpu", QueuePolicy::Fifo))],
            vec![
                job("head", "q", 5).at(NOW - waited_ms),
                job("long", "q", 1).at(NOW - waited_ms + 1).runtime(7200),
            ],
            vec![running("r", "q", 3, 3600)],
        );
        plan_cycle(&s, NOW, &Config::default())
    };
    let young = plan(3_600_000);
    assert_eq!(dispatched(&young), ["long"]);
    assert!(matches!(
        reason(&young, "head"),
        SkipReason::InsufficientCapacity { .. }
    ));
    let old = plan(7_200_000);
    assert_eq!(dispatched(&old), Vec::<&str>::new());
    assert!(matches!(
        reason(&old, "long"),
        SkipReason::ReservedForHead { head_job_id, .. } if head_job_id.as_str() == "head"
    ));
}

#[test]
fn backfill_may_use_capacity_the_head_will_not_need() {
    // 8 instances, 6 held until +1h; head needs 4 → at +1h 8 are free, 4 left over. A long 2-instance
    // job fits in the leftover, so it may start now.
    let s = one_env(
        8,
        vec![queue("q", 1, "gpu", QueuePolicy::Fifo)],
        vec![
            job("head", "q", 4).at(1),
            job("long", "q", 2).at(2).runtime(86_400),
        ],
        vec![running("r", "q", 6, 3600)],
    );
    let plan = plan_cycle(&s, NOW, &Config::default());
    assert_eq!(dispatched(&plan), ["long"]);
}

#[test]
fn a_lower_priority_queue_cannot_jump_a_waiting_higher_priority_head() {
    let s = one_env(
        4,
        vec![
            queue("high", 900, "gpu", QueuePolicy::Fifo),
            queue("low", 1, "gpu", QueuePolicy::Fifo),
        ],
        vec![
            job("big", "high", 4).at(5),
            job("small", "low", 1).at(1).runtime(86_400),
        ],
        vec![running("r", "high", 2, 600)],
    );
    let plan = plan_cycle(&s, NOW, &Config::default());
    assert!(dispatched(&plan).is_empty());
    assert!(
        matches!(reason(&plan, "small"), SkipReason::ReservedForHead { head_job_id, .. } if head_job_id == "big")
    );
}

#[test]
fn a_job_that_can_never_fit_is_flagged_and_blocks_nobody() {
    let s = one_env(
        4,
        vec![queue("q", 1, "gpu", QueuePolicy::Fifo)],
        vec![job("huge", "q", 5).at(1), job("ok", "q", 4).at(2)],
        vec![],
    );
    let plan = plan_cycle(
        &s,
        NOW,
        &Config {
            strict_fifo: true,
            ..Config::default()
        },
    );
    assert_eq!(dispatched(&plan), ["ok"]);
    let text = reason(&plan, "huge").to_string();
    assert!(
        text.starts_with("MISCONFIGURATION:SERVICE_ENVIRONMENT_MAX_RESOURCE"),
        "{text}"
    );
}

#[test]
fn per_type_limits_offer_only_their_instance_types() {
    let s = Snapshot {
        environments: vec![env("qm", &[(GPU, 2), ("ml.g5.xlarge", 8)])],
        queues: vec![queue("q", 1, "qm", QueuePolicy::Fifo)],
        running: vec![],
        pending: vec![
            job("p5", "q", 1).at(1).of("ml.p5.48xlarge"),
            job("g5", "q", 8).at(2).of("ml.g5.xlarge"),
            job("p4", "q", 2).at(3),
        ],
        usage: BTreeMap::new(),
        in_use: BTreeMap::new(),
    };
    let plan = plan_cycle(&s, NOW, &Config::default());
    assert_eq!(dispatched(&plan), ["g5", "p4"]);
    assert!(matches!(
        reason(&plan, "p5"),
        SkipReason::ExceedsEnvironment { max: 0, .. }
    ));
}

#[test]
fn backoff_and_disabled_environments_are_reasons_not_errors() {
    let mut s = one_env(
        4,
        vec![
            queue("q", 1, "gpu", QueuePolicy::Fifo),
            queue("orphan", 1, "missing", QueuePolicy::Fifo),
        ],
        vec![
            PendingJob {
                not_before_ms: Some(NOW + 5000),
                line_offset_ms: 0,
                ..job("later", "q", 1).at(1)
            },
            job("now", "q", 1).at(2),
            job("o", "orphan", 1),
            job("x", "nope", 1),
        ],
        vec![],
    );
    let plan = plan_cycle(&s, NOW, &Config::default());
    assert_eq!(dispatched(&plan), ["now"]);
    assert_eq!(
        reason(&plan, "later"),
        &SkipReason::Backoff {
            until_ms: NOW + 5000
        }
    );
    assert_eq!(reason(&plan, "o"), &SkipReason::NoEnvironment);
    assert_eq!(reason(&plan, "x"), &SkipReason::UnknownQueue);
    s.environments[0].enabled = false;
    let plan = plan_cycle(&s, NOW, &Config::default());
    assert!(dispatched(&plan).is_empty());
    assert!(matches!(
        reason(&plan, "now"),
        SkipReason::EnvironmentDisabled { .. }
    ));
}

fn fair(weights: &[(&str, f64)]) -> QueuePolicy {
    QueuePolicy::FairShare(FairsharePolicy {
        share_decay_seconds: Some(3600),
        compute_reservation: None,
        share_distribution: weights
            .iter()
            .map(|(s, w)| ShareAttributes {
                share_identifier: (*s).into(),
                weight_factor: Some(*w),
            })
            .collect(),
    })
}

#[test]
fn fair_share_interleaves_shares_by_weight() {
    // Weight 0.5 (team a) gets twice what weight 1.0 (team b) gets.
    let pending: Vec<PendingJob> = (0..12)
        .map(|i| job(&format!("a{i:02}"), "q", 1).share("a").at(i))
        .chain((0..12).map(|i| job(&format!("b{i:02}"), "q", 1).share("b").at(i)))
        .collect();
    let s = one_env(
        9,
        vec![queue("q", 1, "gpu", fair(&[("a", 0.5), ("b", 1.0)]))],
        pending,
        vec![],
    );
    let plan = plan_cycle(&s, NOW, &Config::default());
    let a = plan
        .dispatches
        .iter()
        .filter(|d| d.job_id.starts_with('a'))
        .count();
    let b = plan
        .dispatches
        .iter()
        .filter(|d| d.job_id.starts_with('b'))
        .count();
    assert_eq!((a, b), (6, 3));
}

#[test]
fn fair_share_favours_the_share_that_used_less_recently() {
    let pending = vec![
        job("a1", "q", 1).share("a").at(1),
        job("b1", "q", 1).share("b").at(2),
    ];
    let mut s = one_env(1, vec![queue("q", 1, "gpu", fair(&[]))], pending, vec![]);
    s.usage.insert(
        ShareKey {
            queue: "q".into(),
            share: "a".into(),
        },
        ShareUsage {
            instance_seconds: 36_000.0,
            at_ms: NOW,
        },
    );
    let plan = plan_cycle(&s, NOW, &Config::default());
    assert_eq!(dispatched(&plan), ["b1"]);
}

#[test]
fn within_a_share_higher_scheduling_priority_goes_first() {
    let pending = vec![
        job("old", "q", 1).share("a").at(1),
        job("urgent", "q", 1).share("a").at(2).priority(50),
    ];
    let s = one_env(1, vec![queue("q", 1, "gpu", fair(&[]))], pending, vec![]);
    assert_eq!(
        dispatched(&plan_cycle(&s, NOW, &Config::default())),
        ["urgent"]
    );
}

#[test]
fn within_a_share_a_line_offset_lets_shorter_jobs_arriving_later_go_first() {
    // A queue that puts shorter jobs first gave the long job an offset of 10 s: it stands in line
    // at 11, after the short job that arrived at 5, before the one that arrived at 20.
    let mut long = job("long", "q", 1).share("a").at(1);
    long.line_offset_ms = 10;
    let pending = vec![
        long,
        job("short", "q", 1).share("a").at(5),
        job("later", "q", 1).share("a").at(20),
    ];
    let s = one_env(2, vec![queue("q", 1, "gpu", fair(&[]))], pending, vec![]);
    assert_eq!(
        dispatched(&plan_cycle(&s, NOW, &Config::default())),
        ["short", "long"]
    );
}

#[test]
fn compute_reservation_keeps_room_for_inactive_shares() {
    // 50% with one active share: of 10 instances, 5 stay free.
    let QueuePolicy::FairShare(mut policy) = fair(&[]) else {
        unreachable!()
    };
    policy.compute_reservation = Some(50);
    let pending: Vec<PendingJob> = (0..10)
        .map(|i| job(&format!("a{i}"), "q", 1).share("a").at(i))
        .collect();
    let s = one_env(
        10,
        vec![queue("q", 1, "gpu", QueuePolicy::FairShare(policy))],
        pending,
        vec![],
    );
    let plan = plan_cycle(&s, NOW, &Config::default());
    assert_eq!(plan.dispatches.len(), 5);
    assert_eq!(
        reason(&plan, "a9"),
        &SkipReason::ComputeReservation { reserved: 5 }
    );
}

#[test]
fn every_pending_job_is_either_dispatched_or_skipped_once() {
    let pending: Vec<PendingJob> = (0..50)
        .map(|i| job(&format!("j{i:02}"), "q", 1 + (i % 3) as u32).at(i))
        .collect();
    let s = one_env(
        7,
        vec![queue("q", 1, "gpu", QueuePolicy::Fifo)],
        pending,
        vec![running("r", "q", 2, 100)],
    );
    let plan = plan_cycle(&s, NOW, &Config::default());
    let mut seen: Vec<&str> = plan
        .dispatches
        .iter()
        .map(|d| d.job_id.as_str())
        .chain(plan.skips.iter().map(|s| s.job_id.as_str()))
        .collect();
    seen.sort();
    let mut expected: Vec<String> = (0..50).map(|i| format!("j{i:02}")).collect();
    expected.sort();
    assert_eq!(seen, expected);
}
