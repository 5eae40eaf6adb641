//! Quota shares: reservation, lending, borrowing and preemption, one narrative case per rule of
//! `trainyard_scheduler::quota`.

use std::collections::BTreeMap;

use trainyard_domain::environment::CapacityLimit;
use trainyard_domain::quota_share::SharingStrategy::{self, Lend, LendAndBorrow, Reserve};
use trainyard_scheduler::{
    Config, EnvironmentState, PendingJob, Plan, PreemptionReason, QueuePolicy, QueueState,
    QuotaLimitCause, QuotaShareState, RunningJob, Skip, SkipReason, Snapshot, plan_cycle, quota,
    waited_since_ms,
};

const NOW: i64 = 1_000_000_000;
const GPU: &str = "ml.p4d.24xlarge";
const HOUR_MS: i64 = 3_600_000;

fn share(name: &str, limit: u32, strategy: SharingStrategy) -> QuotaShareState {
    QuotaShareState {
        name: name.into(),
        limits: BTreeMap::from([(GPU.to_owned(), limit)]),
        strategy,
        borrow_limit_percent: -1,
        in_share_preemption: false,
        enabled: true,
    }
}

trait ShareExt {
    fn borrow(self, percent: i32) -> Self;
    fn in_share(self) -> Self;
}

impl ShareExt for QuotaShareState {
    fn borrow(mut self, percent: i32) -> Self {
        self.borrow_limit_percent = percent;
        self
    }
    fn in_share(mut self) -> Self {
        self.in_share_preemption = true;
        self
    }
}

/// `job("a1", "a", 2)`: a pending job of quota share `a` needing 2 GPU instances.
fn job(id: &str, share: &str, n: u32) -> PendingJob {
    PendingJob {
        job_id: id.into(),
        queue: "q".into(),
        share: Some(share.into()),
        priority: 0,
        runnable_at_ms: NOW - 1000,
        instances: BTreeMap::from([(GPU.to_owned(), n)]).into(),
        max_runtime_s: Some(3600),
        not_before_ms: None,
        line_offset_ms: 0,
    }
}

/// `run("b1", "b", 1, 2)`: a running job of share `b`, 1 instance, started 2 hours ago.
fn run(id: &str, share: &str, n: u32, started_hours_ago: i64) -> RunningJob {
    RunningJob {
        job_id: id.into(),
        queue: "q".into(),
        share: Some(share.into()),
        priority: 0,
        started_at_ms: NOW - started_hours_ago * HOUR_MS,
        instances: BTreeMap::from([(GPU.to_owned(), n)]).into(),
        expected_end_ms: NOW + 10 * HOUR_MS,
        checkpoint_ms: None,
        checkpoint_interval_ms: None,
        preemptions: 0,
        resumable: false,
        stopping: false,
    }
}

fn prio<T: Prioritised>(mut x: T, p: u32) -> T {
    x.set_priority(p);
    x
}

trait Prioritised {
    fn set_priority(&mut self, p: u32);
}
impl Prioritised for PendingJob {
    fn set_priority(&mut self, p: u32) {
        self.priority = p;
    }
}
impl Prioritised for RunningJob {
    fn set_priority(&mut self, p: u32) {
        self.priority = p;
    }
}

fn snapshot(
    capacity: u32,
    shares: Vec<QuotaShareState>,
    running: Vec<RunningJob>,
    pending: Vec<PendingJob>,
) -> Snapshot {
    Snapshot {
        environments: vec![EnvironmentState {
            name: "qm".into(),
            enabled: true,
            limits: vec![CapacityLimit {
                max_capacity: capacity,
                capacity_unit: GPU.into(),
            }],
        }],
        queues: vec![QueueState {
            name: "q".into(),
            priority: 1,
            environment: Some("qm".into()),
            policy: QueuePolicy::QuotaShare(shares),
            aging: None,
            reserve_after_ms: None,
        }],
        running,
        pending,
        usage: BTreeMap::new(),
        in_use: BTreeMap::new(),
    }
}

fn many(prefix: &str, share: &str, count: usize) -> Vec<PendingJob> {
    (0..count)
        .map(|i| {
            let mut j = job(&format!("{prefix}{i}"), share, 1);
            j.runnable_at_ms = NOW - 1000 + i as i64;
            j
        })
        .collect()
}

fn dispatched(plan: &Plan) -> Vec<&str> {
    plan.dispatches.iter().map(|d| d.job_id.as_str()).collect()
}

fn preempted(plan: &Plan) -> Vec<(&str, &str)> {
    plan.preemptions
        .iter()
        .map(|p| (p.victim_job_id.as_str(), p.for_job_id.as_str()))
        .collect()
}

fn reason<'a>(plan: &'a Plan, id: &str) -> &'a SkipReason {
    &plan
        .skips
        .iter()
        .find(|s| s.job_id == id)
        .unwrap_or_else(|| panic!("{id} not skipped: {plan:?}"))
        .reason
}

/// A check of a skip reason.
type Check = fn(&SkipReason) -> bool;

/// One case: a snapshot, and what the plan must be.
struct Case {
    name: &'static str,
    snapshot: Snapshot,
    min_runtime_s: u64,
    dispatched: &'static [&'static str],
    /// (victim, for whom)
    preempted: &'static [(&'static str, &'static str)],
    /// (job, a check of its skip reason)
    skipped: Vec<(&'static str, Check)>,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "reserve keeps its idle capacity from borrowers",
            snapshot: snapshot(
                8,
                vec![share("a", 4, Reserve), share("b", 4, LendAndBorrow)],
                vec![],
                many("b", "b", 6),
            ),
            min_runtime_s: 600,
            dispatched: &["b0", "b1", "b2", "b3"],
            preempted: &[],
            skipped: vec![("b4", |r| {
                matches!(
                    r,
                    SkipReason::ReservedByQuotaShares {
                        needed: 1,
                        free: 4,
                        reserved: 4,
                        ..
                    }
                )
            })],
        },
        Case {
            name: "lend lets others borrow its idle capacity",
            snapshot: snapshot(
                8,
                vec![share("a", 4, Lend), share("b", 4, LendAndBorrow)],
                (0..4).map(|i| run(&format!("r{i}"), "b", 1, 1)).collect(),
                many("b", "b", 2),
            ),
            min_runtime_s: 600,
            dispatched: &["b0", "b1"],
            preempted: &[],
            skipped: vec![],
        },
        Case {
            name: "borrowers start only after the entitled jobs of the cycle have started",
            snapshot: snapshot(
                8,
                vec![share("a", 4, Lend), share("b", 4, LendAndBorrow)],
                vec![],
                many("b", "b", 6),
            ),
            min_runtime_s: 600,
            dispatched: &["b0", "b1", "b2", "b3"],
            preempted: &[],
            skipped: vec![("b4", |r| {
                matches!(r, SkipReason::BorrowingAfterEntitledStart { entitled_job_id, .. } if entitled_job_id.as_str() == "b0")
                    && r.to_string()
                        == "QUOTA:BORROWING_AFTER_ENTITLED_START - borrowing waits until b0 has started within the limit of quota share b"
            })],
        },
        Case {
            name: "a lend-only share cannot borrow beyond its limit",
            snapshot: snapshot(
                8,
                vec![share("a", 4, Lend), share("b", 4, Lend)],
                vec![],
                many("b", "b", 5),
            ),
            min_runtime_s: 600,
            dispatched: &["b0", "b1", "b2", "b3"],
            preempted: &[],
            skipped: vec![("b4", |r| {
                matches!(
                    r,
                    SkipReason::QuotaExhausted {
                        needed: 1,
                        limit: 4,
                        in_use: 4,
                        ..
                    }
                )
            })],
        },
        Case {
            name: "the borrow limit caps borrowing at a percentage of the share's own limit",
            snapshot: snapshot(
                12,
                vec![share("a", 8, Lend), share("b", 4, LendAndBorrow).borrow(50)],
                (0..4).map(|i| run(&format!("r{i}"), "b", 1, 1)).collect(),
                many("b", "b", 4),
            ),
            min_runtime_s: 600,
            dispatched: &["b0", "b1"],
            preempted: &[],
            skipped: vec![("b2", |r| {
                matches!(
                    r,
                    SkipReason::BorrowLimitReached {
                        in_use: 6,
                        limit: 4,
                        borrow_limit: 2,
                        ..
                    }
                )
            })],
        },
        Case {
            name: "a lender's own jobs get its idle capacity before borrowers, whatever their age",
            snapshot: snapshot(
                4,
                vec![share("a", 2, Lend), share("b", 2, LendAndBorrow)],
                vec![],
                vec![
                    job("b0", "b", 1),
                    job("b1", "b", 1),
                    job("b2", "b", 1),
                    PendingJob {
                        runnable_at_ms: NOW,
                        ..job("a0", "a", 2)
                    },
                ],
            ),
            min_runtime_s: 600,
            dispatched: &["b0", "b1", "a0"],
            preempted: &[],
            skipped: vec![("b2", |r| {
                matches!(r, SkipReason::InsufficientCapacity { free: 0, .. })
            })],
        },
        Case {
            name: "a lender reclaims by preempting the most recently started borrowed jobs",
            snapshot: snapshot(
                8,
                vec![share("a", 4, Lend), share("b", 4, LendAndBorrow)],
                (1..=8)
                    .map(|i| run(&format!("r{i}"), "b", 1, 20 - i64::from(i)))
                    .collect(),
                vec![job("a1", "a", 2), job("b9", "b", 1)],
            ),
            min_runtime_s: 600,
            dispatched: &[],
            preempted: &[("r8", "a1"), ("r7", "a1")],
            skipped: vec![
                (
                    "a1",
                    |r| matches!(r, SkipReason::WaitingForPreemptedCapacity { victims } if victims == &["r8", "r7"]),
                ),
                // The freed capacity is claimed by a1: b9 does not get it.
                ("b9", |r| {
                    matches!(r, SkipReason::InsufficientCapacity { .. })
                }),
            ],
        },
        Case {
            name: "no preemption when free capacity suffices",
            snapshot: snapshot(
                8,
                vec![share("a", 4, Lend), share("b", 4, LendAndBorrow)],
                (1..=6).map(|i| run(&format!("r{i}"), "b", 1, 5)).collect(),
                vec![job("a1", "a", 2)],
            ),
            min_runtime_s: 600,
            dispatched: &["a1"],
            preempted: &[],
            skipped: vec![],
        },
        Case {
            name: "the minimum runtime protects young borrowed jobs, and the lender is told who borrowed and when it can reclaim",
            snapshot: snapshot(
                8,
                vec![share("a", 4, Lend), share("b", 4, LendAndBorrow)],
                (1..=8).map(|i| run(&format!("r{i}"), "b", 1, 0)).collect(),
                vec![job("a1", "a", 2)],
            ),
            min_runtime_s: 600,
            dispatched: &[],
            preempted: &[],
            skipped: vec![("a1", |r| {
                matches!(r, SkipReason::QuotaLent { quota_share, needed: 2, free: 0, lent_to, reclaim_from_ms: Some(at), .. }
                    if quota_share == "a" && lent_to.len() == 1 && &*lent_to[0].0 == "b" && lent_to[0].1 == 4 && *at == NOW + 600_000)
                    && r.to_string()
                        == "QUOTA:CAPACITY_LENT - needs 2 ml.p4d.24xlarge, 0 free; quota share a is within its limit, and its idle capacity was lent to b (4); reclaimed by preemption from 1970-01-12 13:56:40 UTC"
            })],
        },
        Case {
            name: "in-share preemption stops the lowest-priority, most recent jobs of the share",
            snapshot: snapshot(
                4,
                vec![share("a", 4, Lend).in_share()],
                vec![
                    prio(run("old-low", "a", 1, 9), 1),
                    prio(run("new-low", "a", 1, 2), 1),
                    prio(run("mid", "a", 1, 1), 5),
                    prio(run("equal", "a", 1, 1), 9),
                ],
                vec![prio(job("urgent", "a", 2), 9)],
            ),
            min_runtime_s: 600,
            dispatched: &[],
            preempted: &[("new-low", "urgent"), ("old-low", "urgent")],
            skipped: vec![("urgent", |r| {
                matches!(r, SkipReason::WaitingForPreemptedCapacity { .. })
            })],
        },
        Case {
            name: "without in-share preemption a higher-priority job waits",
            snapshot: snapshot(
                4,
                vec![share("a", 4, Lend)],
                vec![prio(run("l1", "a", 2, 9), 1), prio(run("l2", "a", 2, 9), 1)],
                vec![prio(job("urgent", "a", 2), 9)],
            ),
            min_runtime_s: 600,
            dispatched: &[],
            preempted: &[],
            skipped: vec![("urgent", |r| matches!(r, SkipReason::QuotaExhausted { .. }))],
        },
        Case {
            // `a` is over its limit (3 of 2): its lowest-priority job `y` is the one counted
            // as borrowed, and `h` (entitled at its priority) needs only the environment's room,
            // one instance, not `a` back within its limit.
            name: "victims: borrowed first, then lowest priority, and only as many as needed",
            snapshot: snapshot(
                3,
                vec![share("a", 2, LendAndBorrow).in_share(), share("b", 1, Lend)],
                vec![
                    prio(run("x", "a", 1, 9), 3),
                    prio(run("y", "a", 1, 5), 1),
                    prio(run("z", "a", 1, 2), 2),
                ],
                vec![prio(job("h", "a", 1), 9)],
            ),
            min_runtime_s: 600,
            dispatched: &[],
            preempted: &[("y", "h")],
            skipped: vec![],
        },
        Case {
            name: "equal priority is never preempted in-share",
            snapshot: snapshot(
                2,
                vec![share("a", 2, Lend).in_share()],
                vec![prio(run("r", "a", 2, 9), 5)],
                vec![prio(job("p", "a", 2), 5)],
            ),
            min_runtime_s: 0,
            dispatched: &[],
            preempted: &[],
            skipped: vec![("p", |r| matches!(r, SkipReason::QuotaExhausted { .. }))],
        },
        Case {
            name: "jobs that can never fit their share are misconfigured and block nobody",
            snapshot: snapshot(
                16,
                vec![
                    share("r", 2, Reserve),
                    share("c", 2, LendAndBorrow).borrow(50),
                    share("u", 2, LendAndBorrow),
                    share("l", 4, Lend),
                ],
                vec![],
                vec![
                    job("r3", "r", 3),
                    job("c4", "c", 4),
                    job("u9", "u", 15),
                    job("ok", "u", 3),
                    job("lost", "nope", 1),
                ],
            ),
            min_runtime_s: 600,
            dispatched: &["ok"],
            preempted: &[],
            skipped: vec![
                ("r3", |r| {
                    matches!(
                        r,
                        SkipReason::QuotaLimitExceeded {
                            cause: QuotaLimitCause::ShareLimits,
                            limit: 2,
                            borrowable: 0,
                            ..
                        }
                    )
                }),
                ("c4", |r| {
                    matches!(
                        r,
                        SkipReason::QuotaLimitExceeded {
                            cause: QuotaLimitCause::BorrowLimits,
                            borrowable: 1,
                            ..
                        }
                    )
                }),
                // Lendable to u: c's 2 + l's 4 + 6 unassigned = 12, so at most 14.
                ("u9", |r| {
                    matches!(
                        r,
                        SkipReason::QuotaLimitExceeded {
                            cause: QuotaLimitCause::BorrowableCapacity,
                            borrowable: 12,
                            ..
                        }
                    )
                }),
                ("lost", |r| {
                    matches!(r, SkipReason::UnknownQuotaShare { .. })
                }),
            ],
        },
    ]
}

#[test]
fn quota_share_cases() {
    for case in cases() {
        let config = Config {
            min_runtime_before_preemption_s: case.min_runtime_s,
            ..Config::default()
        };
        let plan = plan_cycle(&case.snapshot, NOW, &config);
        assert_eq!(
            dispatched(&plan),
            case.dispatched,
            "{}: {plan:#?}",
            case.name
        );
        assert_eq!(preempted(&plan), case.preempted, "{}: {plan:#?}", case.name);
        for (id, check) in &case.skipped {
            let r = reason(&plan, id);
            assert!(check(r), "{}: {id}: {r:?}", case.name);
        }
        let decided = plan.dispatches.len() + plan.skips.len();
        assert_eq!(decided, case.snapshot.pending.len(), "{}", case.name);
    }
}

#[test]
fn the_misconfiguration_texts_are_batchs() {
    let s = snapshot(
        8,
        vec![share("r", 2, Reserve)],
        vec![],
        vec![job("r3", "r", 3)],
    );
    let text = reason(&plan_cycle(&s, NOW, &Config::default()), "r3").to_string();
    assert!(
        text.starts_with(
            "MISCONFIGURATION:QUOTA_MANAGEMENT_LIMIT_EXCEEDED - Job requirements exceed quota share capacity limits."
        ),
        "{text}"
    );
}

#[test]
fn preemption_reasons_say_which_rule_applied() {
    let s = snapshot(
        4,
        vec![share("a", 2, Lend).in_share(), share("b", 2, LendAndBorrow)],
        vec![
            prio(run("a-low", "a", 2, 5), 0),
            run("b-borrowed", "b", 2, 5),
        ],
        vec![prio(job("a-high", "a", 2), 7), job("a-more", "a", 2)],
    );
    let plan = plan_cycle(&s, NOW, &Config::default());
    assert_eq!(
        plan.preemptions
            .iter()
            .map(|p| p.reason.clone())
            .collect::<Vec<_>>(),
        [PreemptionReason::InSharePriority {
            quota_share: "a".into(),
            priority: 7,
            victim_priority: 0
        }],
        "{plan:#?}"
    );
    // a-high claimed a's whole limit, so a-more cannot reclaim b's borrowed capacity as well.
    assert!(matches!(
        reason(&plan, "a-more"),
        SkipReason::QuotaExhausted { .. }
    ));
}

/// Share `a` (2 instances, in-share preemption on) full with a priority-0 job, and job `id` of
/// `priority` needing both instances, waiting `waited_s`.
fn share_full_of_low_priority(id: &str, priority: u32, waited_s: i64) -> Snapshot {
    let mut waiting = prio(job(id, "a", 2), priority);
    waiting.runnable_at_ms = NOW - waited_s * 1000;
    snapshot(
        2,
        vec![share("a", 2, Lend).in_share()],
        vec![prio(run("a-low", "a", 2, 5), 0)],
        vec![waiting],
    )
}

/// Share `a` lent 2 instances to `b`, which runs a job on them; `a1` needs them back.
fn lent_to_b() -> Snapshot {
    snapshot(
        4,
        vec![share("a", 2, Lend), share("b", 2, LendAndBorrow)],
        vec![run("b-own", "b", 2, 5), run("b-borrowed", "b", 2, 1)],
        vec![job("a1", "a", 2)],
    )
}

/// With `min_wait_before_in_share_preemption_s`, a job preempts its own share's lower-priority
/// jobs only once it has waited that long; reclaiming borrowed capacity is not deferred.
#[test]
fn in_share_preemption_waits_for_the_minimum_wait_and_reclaim_does_not() {
    let config = Config {
        min_wait_before_in_share_preemption_s: 900,
        ..Config::default()
    };
    let in_share = |waited_s: i64| share_full_of_low_priority("a-high", 7, waited_s);
    let early = plan_cycle(&in_share(899), NOW, &config);
    assert!(early.preemptions.is_empty(), "{early:#?}");
    assert!(matches!(
        reason(&early, "a-high"),
        SkipReason::QuotaExhausted { .. }
    ));
    let late = plan_cycle(&in_share(900), NOW, &config);
    assert_eq!(preempted(&late), [("a-low", "a-high")]);

    // The owner of lent capacity reclaims it at once.
    let plan = plan_cycle(&lent_to_b(), NOW, &config);
    assert_eq!(preempted(&plan), [("b-borrowed", "a1")], "{plan:#?}");
}

/// With `min_priority_for_in_share_preemption`, a job below that priority waits for its share's
/// lower-priority jobs to end instead of preempting them, however long it has waited; one at
/// or above it preempts as before; reclaims are not affected.
#[test]
fn only_a_job_of_the_minimum_priority_preempts_in_its_share() {
    let config = Config {
        min_priority_for_in_share_preemption: 5,
        ..Config::default()
    };
    let in_share = |priority: u32| share_full_of_low_priority("a-waits", priority, 36_000);
    let below = plan_cycle(&in_share(4), NOW, &config);
    assert!(below.preemptions.is_empty(), "{below:#?}");
    assert!(matches!(
        reason(&below, "a-waits"),
        SkipReason::QuotaExhausted { .. }
    ));
    let at = plan_cycle(&in_share(5), NOW, &config);
    assert_eq!(preempted(&at), [("a-low", "a-waits")]);
    let batch = plan_cycle(&in_share(4), NOW, &Config::default());
    assert_eq!(
        preempted(&batch),
        [("a-low", "a-waits")],
        "Batch: any higher priority"
    );

    // A job below the minimum still reclaims lent capacity.
    let plan = plan_cycle(&lent_to_b(), NOW, &config);
    assert_eq!(preempted(&plan), [("b-borrowed", "a1")], "{plan:#?}");
}

/// With `min_wait_before_reclaim_s`, the owner of lent capacity reclaims it only once it has
/// waited that long, and meanwhile is told when it will; capacity that frees first is its own,
/// at no loss.
#[test]
fn a_reclaim_waits_for_the_minimum_wait() {
    let config = Config {
        min_wait_before_reclaim_s: 300,
        ..Config::default()
    };
    let reclaim = |waited_s: i64, borrowed_running: bool| {
        let mut owner = job("a1", "a", 2);
        owner.runnable_at_ms = NOW - waited_s * 1000;
        let mut running = vec![run("b-own", "b", 2, 5)];
        if borrowed_running {
            running.push(run("b-borrowed", "b", 2, 1));
        }
        snapshot(
            4,
            vec![share("a", 2, Lend), share("b", 2, LendAndBorrow)],
            running,
            vec![owner],
        )
    };
    let early = plan_cycle(&reclaim(299, true), NOW, &config);
    assert!(early.preemptions.is_empty(), "{early:#?}");
    match reason(&early, "a1") {
        SkipReason::QuotaLent {
            lent_to,
            reclaim_from_ms,
            ..
        } => {
            assert_eq!(lent_to, &[("b".into(), 2)]);
            assert_eq!(*reclaim_from_ms, Some(NOW + 1000));
        }
        other => panic!("{other:?}"),
    }
    let due = plan_cycle(&reclaim(300, true), NOW, &config);
    assert_eq!(preempted(&due), [("b-borrowed", "a1")], "{due:#?}");
    // The borrower ended while the owner waited: it starts, nobody is preempted.
    let ended = plan_cycle(&reclaim(299, false), NOW, &config);
    assert_eq!(dispatched(&ended), ["a1"]);
    assert!(ended.preemptions.is_empty());
}

/// Two owners reclaim in one cycle: the borrowed jobs are counted again after the first
/// preemption, among the jobs left, so the second owner reclaims the next borrower, not the
/// first one's victim, and does not go without.
#[test]
fn owners_reclaiming_in_one_cycle_each_take_their_own_borrower() {
    let running = (1..=4)
        .map(|i| run(&format!("b{i}"), "b", 1, 10 - i))
        .collect();
    let snap = snapshot(
        4,
        vec![share("a", 2, Lend), share("b", 2, LendAndBorrow)],
        running,
        many("a", "a", 2),
    );
    let plan = plan_cycle(&snap, NOW, &Config::default());
    // The newest borrowers first.
    assert_eq!(preempted(&plan), [("b4", "a0"), ("b3", "a1")], "{plan:#?}");
}

/// A share's limit serves its highest-priority jobs first. Share `a` (limit 3) runs five sweeps
/// (priority 1), two of them on capacity `b` lent; its production job (priority 9, 2 instances)
/// is entitled at its priority and needs only the environment's room: one sweep is preempted,
/// not four to bring `a` back within its limit (the four would only borrow again). Started,
/// the production job is not what `a` borrows: its lowest-priority jobs are, and `b`
/// reclaims those.
#[test]
fn a_share_over_its_limit_makes_room_for_its_higher_priority_job_by_priority() {
    let shares = vec![share("a", 3, LendAndBorrow).in_share(), share("b", 3, Lend)];
    let sweeps: Vec<RunningJob> = (1..=5)
        .map(|i| prio(run(&format!("a-sweep{i}"), "a", 1, 7 - i64::from(i)), 1))
        .collect();
    let s = snapshot(
        6,
        shares.clone(),
        sweeps.clone(),
        vec![prio(job("a-prod", "a", 2), 9)],
    );
    let plan = plan_cycle(&s, NOW, &Config::default());
    assert_eq!(preempted(&plan), [("a-sweep5", "a-prod")], "{plan:#?}");

    // The sweep stopped: the production job starts first, though `a` stays over its limit.
    let later = NOW + HOUR_MS;
    let mut left: Vec<RunningJob> = sweeps[..4].to_vec();
    let requeued = PendingJob {
        runnable_at_ms: later,
        ..prio(job("a-sweep5", "a", 1), 1)
    };
    let s = snapshot(
        6,
        shares.clone(),
        left.clone(),
        vec![prio(job("a-prod", "a", 2), 9), requeued],
    );
    let plan = plan_cycle(&s, later, &Config::default());
    assert_eq!(dispatched(&plan), ["a-prod"], "{plan:#?}");

    // `b` needs its capacity back: it reclaims `a`'s newest sweeps, not the production job
    // that started after them.
    let then = later + HOUR_MS;
    left.push(RunningJob {
        started_at_ms: later,
        ..prio(run("a-prod", "a", 2, 0), 9)
    });
    let s = snapshot(6, shares, left, vec![job("b1", "b", 2)]);
    let plan = plan_cycle(&s, then, &Config::default());
    assert_eq!(
        preempted(&plan),
        [("a-sweep4", "b1"), ("a-sweep3", "b1")],
        "{plan:#?}"
    );
}

/// With `trainyard:reserve-after-hours` on a quota-managed queue, the first borrower that does
/// not fit and has waited that long holds the environment's reservation: a later borrower that
/// would delay it waits (`PRIORITY:RESERVED_FOR_HEAD`), and one that ends before it backfills.
/// Without the tag (Batch) nothing is reserved.
#[test]
fn a_long_waiting_borrower_holds_the_reservation_when_the_queue_says() {
    let world = |reserve_after_ms: Option<i64>, small_runtime_s: u64| {
        let mut big = job("b-big", "b", 3);
        big.runnable_at_ms = NOW - 10 * HOUR_MS;
        let mut small = job("b-small", "b", 1);
        small.max_runtime_s = Some(small_runtime_s);
        let mut a_own = run("a-own", "a", 1, 1);
        a_own.expected_end_ms = NOW + 100 * HOUR_MS;
        let mut s = snapshot(
            4,
            vec![share("a", 2, Lend), share("b", 2, LendAndBorrow)],
            vec![run("b-own", "b", 2, 1), a_own],
            vec![big, small],
        );
        s.queues[0].reserve_after_ms = reserve_after_ms;
        s
    };
    let day = 24 * 3_600;
    let batch = plan_cycle(&world(None, day), NOW, &Config::default());
    assert_eq!(dispatched(&batch), ["b-small"], "{batch:#?}");

    let reserved = plan_cycle(&world(Some(HOUR_MS), day), NOW, &Config::default());
    assert!(dispatched(&reserved).is_empty(), "{reserved:#?}");
    assert!(matches!(
        reason(&reserved, "b-small"),
        SkipReason::ReservedForHead { head_job_id, .. } if head_job_id.as_str() == "b-big"
    ));
    // One that ends before the big borrower can start (when `b-own` ends) backfills.
    let backfilled = plan_cycle(&world(Some(HOUR_MS), 3_600), NOW, &Config::default());
    assert_eq!(dispatched(&backfilled), ["b-small"], "{backfilled:#?}");
    // Not waited long enough yet: nothing is reserved.
    let early = plan_cycle(&world(Some(20 * HOUR_MS), day), NOW, &Config::default());
    assert_eq!(dispatched(&early), ["b-small"], "{early:#?}");
}

/// Two cycles: the lender reclaims, the victims are re-queued, the preemptor starts, and the
/// victims cannot preempt it back (it runs within its share's limit).
#[test]
fn a_reclaimed_job_starts_next_cycle_and_its_victims_cannot_preempt_it_back() {
    let shares = vec![share("a", 4, Lend), share("b", 4, LendAndBorrow)];
    let running: Vec<RunningJob> = (1..=8)
        .map(|i| run(&format!("r{i}"), "b", 1, 20 - i64::from(i)))
        .collect();
    let s = snapshot(8, shares.clone(), running.clone(), vec![job("a1", "a", 2)]);
    let plan = plan_cycle(&s, NOW, &Config::default());
    assert_eq!(preempted(&plan), [("r8", "a1"), ("r7", "a1")]);

    // The host stops the victims; they come back RUNNABLE.
    let later = NOW + HOUR_MS;
    let kept: Vec<RunningJob> = running
        .into_iter()
        .filter(|r| &*r.job_id != "r7" && &*r.job_id != "r8")
        .collect();
    let requeued = vec![
        PendingJob {
            runnable_at_ms: later,
            ..job("r7", "b", 1)
        },
        PendingJob {
            runnable_at_ms: later,
            ..job("r8", "b", 1)
        },
        job("a1", "a", 2),
    ];
    let s = snapshot(8, shares, kept, requeued);
    let plan = plan_cycle(&s, later, &Config::default());
    assert_eq!(dispatched(&plan), ["a1"]);
    assert!(plan.preemptions.is_empty(), "{plan:#?}");
}

/// `run(..)` with its newest observed checkpoint `minutes_ago`.
fn checkpointed(mut r: RunningJob, minutes_ago: i64) -> RunningJob {
    r.checkpoint_ms = Some(NOW - minutes_ago * 60_000);
    r
}

/// Among the victims the rules allow, the one that loses least goes: the work since its newest
/// checkpoint (a checkpoint from before its attempt started does not count), not its start.
#[test]
fn the_victim_is_the_job_that_loses_least_since_its_checkpoint() {
    let shares = vec![share("a", 2, Lend), share("b", 2, LendAndBorrow)];
    // b borrows 2 instances: b-new (started 1 h ago, never checkpointed) and b-old (started 5 h
    // ago, checkpointed 5 minutes ago) are both borrowed, b-own is within b's limit.
    let borrowed = |old: RunningJob| {
        snapshot(
            4,
            shares.clone(),
            vec![run("b-own", "b", 2, 9), run("b-new", "b", 1, 1), old],
            vec![job("a1", "a", 1)],
        )
    };
    let plan = plan_cycle(
        &borrowed(checkpointed(run("b-old", "b", 1, 5), 5)),
        NOW,
        &Config::default(),
    );
    assert_eq!(preempted(&plan), [("b-old", "a1")], "{plan:#?}");
    let victim = &plan.preemptions[0];
    // 5 minutes of work plus the restart (300 s), on one instance.
    assert_eq!(victim.lost_instance_s, 300 + 300);
    assert_eq!(victim.checkpoint_ms, Some(NOW - 5 * 60_000));

    // Without that checkpoint, b-old would lose 5 hours and b-new 1: b-new goes. A checkpoint
    // older than the attempt (left by an earlier attempt) counts for nothing.
    for old in [
        run("b-old", "b", 1, 5),
        checkpointed(run("b-old", "b", 1, 5), 6 * 60),
    ] {
        let plan = plan_cycle(&borrowed(old), NOW, &Config::default());
        assert_eq!(preempted(&plan), [("b-new", "a1")], "{plan:#?}");
        assert_eq!(plan.preemptions[0].lost_instance_s, 3600 + 300);
        assert_eq!(plan.preemptions[0].checkpoint_ms, None);
    }
}

/// A job already asked to stop is chosen again before any other candidate, however the losses
/// have moved since: stopping it again costs nothing, and its instances are on their way back.
/// Its share's borrowing is counted on it first. Otherwise a job waiting for its victim to stop
/// would stop another as soon as that one became cheaper (one that has just saved a checkpoint).
#[test]
fn a_victim_already_stopping_is_chosen_again_before_any_other() {
    let shares = vec![share("a", 2, Lend), share("b", 2, LendAndBorrow)];
    let stopping = |mut r: RunningJob| {
        r.stopping = true;
        r
    };
    let world = |running: Vec<RunningJob>| {
        let world = snapshot(4, shares.clone(), running, vec![job("a1", "a", 1)]);
        plan_cycle(&world, NOW, &Config::default())
    };
    // b-new was chosen by an earlier cycle and is stopping; b-old has saved a checkpoint since,
    // and would lose less.
    let plan = world(vec![
        run("b-own", "b", 2, 9),
        stopping(run("b-new", "b", 1, 1)),
        checkpointed(run("b-old", "b", 1, 5), 5),
    ]);
    assert_eq!(preempted(&plan), [("b-new", "a1")], "{plan:#?}");
    // b's oldest job is the one stopping: b borrows 2 and it holds 2, so it alone is counted
    // as borrowed, and the jobs that still run are within b's limit.
    let plan = world(vec![
        stopping(run("b-own", "b", 2, 9)),
        run("b-new", "b", 1, 1),
        checkpointed(run("b-old", "b", 1, 5), 5),
    ]);
    assert_eq!(preempted(&plan), [("b-own", "a1")], "{plan:#?}");
    assert!(
        matches!(
            &plan.skips[..],
            [Skip { reason: SkipReason::WaitingForPreemptedCapacity { victims }, .. }]
                if victims.iter().map(|v| v.as_str()).eq(["b-own"])
        ),
        "{plan:#?}"
    );
    // Stopping and young (preempted moments after it started, or timed out early): still
    // chosen first, as it loses nothing more.
    let plan = world(vec![
        run("b-own", "b", 2, 9),
        stopping(run("b-new", "b", 1, 0)),
        checkpointed(run("b-old", "b", 1, 5), 5),
    ]);
    assert_eq!(preempted(&plan), [("b-new", "a1")], "{plan:#?}");
}

/// With `checkpoint_alignment_s`, a preemption waits for its victim's due checkpoint when that is
/// within the window and sooner than the work it saves; the capacity stays claimed meanwhile.
/// A victim that has just saved, or whose checkpoint is overdue or unknown, goes at once.
#[test]
fn a_preemption_waits_for_a_victims_checkpoint_due_within_the_window() {
    let shares = vec![share("a", 2, Lend), share("b", 2, LendAndBorrow)];
    // b-old (borrowed, started 5 h ago) checkpoints every 30 minutes.
    let with_victim = |saved_minutes_ago: Option<i64>| {
        let mut old = run("b-old", "b", 1, 5);
        if let Some(m) = saved_minutes_ago {
            old = checkpointed(old, m);
            old.checkpoint_interval_ms = Some(30 * 60_000);
        }
        snapshot(
            3,
            shares.clone(),
            vec![run("b-own", "b", 2, 9), old],
            vec![job("a1", "a", 1), job("a2", "a", 1)],
        )
    };
    let window = Config {
        checkpoint_alignment_s: 600,
        ..Config::default()
    };
    // Saved 25 minutes ago: due in 5, within 10, sooner than the 25 it would lose. a1 waits
    // (claiming the capacity, so a2 does not take another victim for it).
    let plan = plan_cycle(&with_victim(Some(25)), NOW, &window);
    assert!(plan.preemptions.is_empty(), "{plan:#?}");
    assert_eq!(
        reason(&plan, "a1"),
        &SkipReason::WaitingForVictimCheckpoint {
            victims: vec!["b-old".into()],
            due_ms: NOW + 5 * 60_000
        }
    );
    assert!(
        reason(&plan, "a1")
            .to_string()
            .starts_with("PREEMPTION:WAITING_FOR_VICTIM_CHECKPOINT - will preempt b-old once")
    );
    // Without the window, or with the checkpoint 15 minutes away (outside it), or just saved
    // (due in 29, later than the 1 it would lose), or overdue (saved 40 minutes ago), or never
    // observed: preempted now.
    for (saved, config) in [
        (Some(25), Config::default()),
        (Some(15), window.clone()),
        (Some(1), window.clone()),
        (Some(40), window.clone()),
        (None, window.clone()),
    ] {
        let plan = plan_cycle(&with_victim(saved), NOW, &config);
        assert_eq!(preempted(&plan), [("b-old", "a1")], "{saved:?} {plan:#?}");
    }
}

/// A job that publishes no checkpoint is assumed to checkpoint at its queue's median observed
/// interval, so hiding checkpoints buys no protection; with no interval observed, all its work
/// since it started counts.
#[test]
fn a_job_that_publishes_nothing_is_assumed_to_checkpoint_at_the_queue_median() {
    let shares = vec![share("a", 2, Lend), share("b", 2, LendAndBorrow)];
    // b-quiet (5 h, publishes nothing) and b-saver (checkpointed 40 minutes ago) are borrowed.
    let with_interval = |minutes: Option<i64>| {
        let mut saver = checkpointed(run("b-saver", "b", 1, 5), 40);
        saver.checkpoint_interval_ms = minutes.map(|m| m * 60_000);
        snapshot(
            4,
            shares.clone(),
            vec![run("b-own", "b", 2, 9), run("b-quiet", "b", 1, 5), saver],
            vec![job("a1", "a", 1)],
        )
    };
    // Median interval 30 minutes: b-quiet counts 30 minutes lost, less than b-saver's 40.
    let plan = plan_cycle(&with_interval(Some(30)), NOW, &Config::default());
    assert_eq!(preempted(&plan), [("b-quiet", "a1")], "{plan:#?}");
    assert_eq!(plan.preemptions[0].lost_instance_s, 1800 + 300);
    // No interval observed: b-quiet counts its 5 hours, b-saver goes.
    let plan = plan_cycle(&with_interval(None), NOW, &Config::default());
    assert_eq!(preempted(&plan), [("b-saver", "a1")], "{plan:#?}");
}

/// Anti-thrash: a resumable job preempted before is not preempted again by its own share until
/// it has run `min_runtime_after_preemption_s` or saved a checkpoint since it started; from its
/// second preemption on, only after a protection that doubles with each one, checkpoint or not.
/// Reclaiming lent capacity is never held up by it.
#[test]
fn a_preempted_job_is_protected_until_it_has_run_a_while_or_saved_a_checkpoint() {
    let config = Config::default(); // 600 s, then 3,600 s after a preemption
    // Share a (in-share preemption on) is full with the running job; a higher-priority job of
    // a waits.
    let in_share = |victim: RunningJob| {
        snapshot(
            1,
            vec![share("a", 1, Lend).in_share()],
            vec![victim],
            vec![prio(job("a1", "a", 1), 7)],
        )
    };
    let resumed = |minutes: i64, preemptions: u32| RunningJob {
        started_at_ms: NOW - minutes * 60_000,
        preemptions,
        resumable: true,
        ..run("a-again", "a", 1, 0)
    };
    let victims = |r: RunningJob| {
        let plan = plan_cycle(&in_share(r), NOW, &config);
        preempted(&plan)
            .into_iter()
            .map(|(v, _)| v.to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        victims(resumed(30, 0)),
        ["a-again"],
        "never preempted: 600 s"
    );
    assert!(victims(resumed(30, 1)).is_empty(), "preempted once, 30 min");
    assert_eq!(victims(resumed(60, 1)), ["a-again"], "preempted once, 1 h");
    let saved = RunningJob {
        checkpoint_ms: Some(NOW - 60_000),
        ..resumed(30, 1)
    };
    assert_eq!(
        victims(saved.clone()),
        ["a-again"],
        "saved since it resumed"
    );
    let stale = RunningJob {
        checkpoint_ms: Some(NOW - 31 * 60_000),
        ..resumed(30, 1)
    };
    assert!(
        victims(stale).is_empty(),
        "its checkpoint predates the attempt"
    );
    // Preempted twice: 2 h, whatever it saved; three times: 4 h.
    let twice = RunningJob {
        preemptions: 2,
        ..saved
    };
    assert!(victims(twice.clone()).is_empty());
    assert!(
        victims(RunningJob {
            started_at_ms: NOW - 119 * 60_000,
            ..twice.clone()
        })
        .is_empty()
    );
    assert_eq!(
        victims(RunningJob {
            started_at_ms: NOW - 120 * 60_000,
            ..twice
        }),
        ["a-again"]
    );
    assert!(victims(resumed(239, 3)).is_empty());
    assert_eq!(victims(resumed(240, 3)), ["a-again"]);
    // A job that starts over after a preemption is not protected: it has little to lose.
    let restarted = RunningJob {
        resumable: false,
        ..resumed(30, 3)
    };
    assert_eq!(victims(restarted), ["a-again"]);

    // The same job running on capacity b borrowed from a is reclaimed at once.
    let borrowed = RunningJob {
        share: Some("b".into()),
        ..resumed(30, 3)
    };
    let reclaim = snapshot(
        2,
        vec![share("a", 1, Lend), share("b", 1, LendAndBorrow)],
        vec![run("b-own", "b", 1, 9), borrowed],
        vec![job("a1", "a", 1)],
    );
    let plan = plan_cycle(&reclaim, NOW, &config);
    assert_eq!(preempted(&plan), [("a-again", "a1")], "{plan:#?}");
    // Until its minimum runtime, the lender is told when it can reclaim.
    let young = snapshot(
        2,
        vec![share("a", 1, Lend), share("b", 1, LendAndBorrow)],
        vec![
            run("b-own", "b", 1, 9),
            RunningJob {
                started_at_ms: NOW - 5 * 60_000,
                ..run("b-young", "b", 1, 0)
            },
        ],
        vec![job("a1", "a", 1)],
    );
    let plan = plan_cycle(&young, NOW, &config);
    match reason(&plan, "a1") {
        SkipReason::QuotaLent {
            reclaim_from_ms, ..
        } => assert_eq!(*reclaim_from_ms, Some(NOW + 5 * 60_000)),
        other => panic!("{other:?}"),
    }
}

/// The in-share wait counts from when a job last became runnable (`not_before_ms`, which a
/// requeue sets), not from its place in line, which a preempted job keeps: a job reclaimed from
/// a borrowing share does not turn around and preempt its own share's jobs at once.
#[test]
fn a_requeued_job_waits_again_before_it_preempts_in_its_share() {
    let config = Config {
        min_wait_before_in_share_preemption_s: 900,
        ..Config::default()
    };
    let requeued = |requeued_s_ago: i64| {
        let mut high = prio(job("a-high", "a", 2), 7);
        high.runnable_at_ms = NOW - 10 * HOUR_MS;
        high.not_before_ms = Some(NOW - requeued_s_ago * 1000);
        snapshot(
            2,
            vec![share("a", 2, Lend).in_share()],
            vec![prio(run("a-low", "a", 2, 5), 0)],
            vec![high],
        )
    };
    let plan = plan_cycle(&requeued(60), NOW, &config);
    assert!(plan.preemptions.is_empty(), "{plan:#?}");
    let plan = plan_cycle(&requeued(900), NOW, &config);
    assert_eq!(preempted(&plan), [("a-low", "a-high")]);
}

/// A borrowed job holding two instance types is one candidate, not one per type: reclaiming
/// four of one type takes both borrowed jobs, each once, rather than counting the cheaper one
/// (the more recently started) twice.
#[test]
fn a_job_borrowed_in_two_types_is_one_victim() {
    const OTHER: &str = "ml.g5.48xlarge";
    let mut both = run("b-both", "b", 2, 1);
    both.instances = BTreeMap::from([(GPU.to_owned(), 2), (OTHER.to_owned(), 2)]).into();
    let mut snap = snapshot(
        4,
        vec![share("a", 4, Lend), share("b", 0, LendAndBorrow)],
        vec![both, run("b-other", "b", 2, 5)],
        vec![job("a1", "a", 4)],
    );
    snap.environments[0].limits.push(CapacityLimit {
        max_capacity: 2,
        capacity_unit: OTHER.into(),
    });
    let plan = plan_cycle(&snap, NOW, &Config::default());
    let mut victims = preempted(&plan);
    victims.sort_unstable();
    assert_eq!(victims, [("b-both", "a1"), ("b-other", "a1")], "{plan:#?}");
}

/// A share is full when it holds its limit plus all it may borrow of every type it limits and
/// may not preempt in itself: then none of its jobs can act, and a cycle reads only its first.
#[test]
fn a_share_is_full_only_when_none_of_its_jobs_could_act() {
    let holding = |n: u64| move |ty: &str| if ty == GPU { n } else { 0 };
    let reserve = share("a", 4, Reserve);
    assert!(reserve.full(holding(4)));
    assert!(
        !reserve.full(holding(3)),
        "one instance left to start a job in"
    );
    assert!(
        !reserve.clone().in_share().full(holding(4)),
        "it may preempt in itself"
    );
    assert!(
        share("a", 4, Lend).full(holding(4)),
        "lending is no borrowing"
    );
    // Borrowing: full at its limit plus its cap, never with no cap.
    let capped = share("a", 4, LendAndBorrow).borrow(50);
    assert!(!capped.full(holding(5)));
    assert!(capped.full(holding(6)));
    assert!(!share("a", 4, LendAndBorrow).full(holding(1_000)));
    // Every type it limits counts; a type it does not limit it can never start.
    let mut two = reserve.clone();
    two.limits.insert("ml.g5.xlarge".into(), 2);
    assert!(!two.full(holding(4)), "2 ml.g5.xlarge left");
    assert!(two.full(|ty| if ty == GPU { 4 } else { 2 }));
}

#[test]
fn a_wait_before_preempting_counts_from_the_later_of_its_place_in_line_and_its_backoff() {
    assert_eq!(waited_since_ms(1_000, None), 1_000);
    assert_eq!(waited_since_ms(1_000, Some(5_000)), 5_000);
    // A backoff that ended before the job became runnable again does not move its wait back.
    assert_eq!(waited_since_ms(1_000, Some(500)), 1_000);
}

#[test]
fn starts_that_make_older_jobs_count_as_borrowed_are_told_to_the_host() {
    // Share a holds its limit of 2 with two jobs of priority 100; b lends its idle 2. A job of
    // a borrows b's capacity: when it outranks a's jobs, a's newest of them now counts as
    // borrowed (a next cycle may reclaim it); when it does not, it counts itself.
    let world = |priority: u32| {
        snapshot(
            4,
            vec![share("a", 2, LendAndBorrow), share("b", 2, Lend)],
            vec![
                prio(run("a1", "a", 1, 2), 100),
                prio(run("a2", "a", 1, 1), 100),
            ],
            vec![prio(job("x", "a", 1), priority)],
        )
    };
    for (priority, moved) in [(200, true), (100, false), (50, false)] {
        let snapshot = world(priority);
        let plan = plan_cycle(&snapshot, NOW, &Config::default());
        assert_eq!(dispatched(&plan), ["x"], "x borrows at priority {priority}");
        assert_eq!(
            quota::dispatches_move_borrowing(&snapshot, &plan, NOW),
            moved,
            "x at priority {priority}"
        );
    }
}

#[test]
fn whether_starts_move_the_borrowed_jobs_agrees_with_counting_them_again() {
    // Random worlds of three shares: the answer is the borrowed jobs counted with the started
    // jobs running, against those counted without them.
    let mut seed: u64 = 0x5eed;
    let mut draw = |n: u64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % n
    };
    let (mut moved, mut still) = (0, 0);
    for world in 0..2_000 {
        let names = ["a", "b", "c"];
        let shares: Vec<QuotaShareState> = names
            .iter()
            .map(|n| share(n, 1 + draw(4) as u32, LendAndBorrow))
            .collect();
        let running: Vec<RunningJob> = (0..draw(10))
            .map(|i| {
                let share = names[draw(3) as usize];
                let mut r = prio(
                    run(&format!("r{i}"), share, 1 + draw(3) as u32, 0),
                    draw(3) as u32,
                );
                r.started_at_ms = NOW - 1 - draw(5) as i64 * HOUR_MS;
                r.stopping = draw(6) == 0;
                r
            })
            .collect();
        let pending: Vec<PendingJob> = (0..1 + draw(5))
            .map(|i| {
                let share = names[draw(3) as usize];
                prio(
                    job(&format!("p{i}"), share, 1 + draw(2) as u32),
                    draw(3) as u32,
                )
            })
            .collect();
        let snapshot = snapshot(24, shares.clone(), running.clone(), pending.clone());
        let plan = plan_cycle(&snapshot, NOW, &Config::default());
        if plan.dispatches.is_empty() || !plan.preemptions.is_empty() {
            continue;
        }
        let started: Vec<RunningJob> = plan
            .dispatches
            .iter()
            .map(|d| {
                let job = pending.iter().find(|p| p.job_id == d.job_id).unwrap();
                RunningJob {
                    priority: job.priority,
                    started_at_ms: NOW,
                    instances: job.instances.clone(),
                    ..run(job.job_id.as_str(), job.share.as_deref().unwrap(), 0, 0)
                }
            })
            .collect();
        let before = quota::borrowed_jobs(&shares, &running);
        let mut after = quota::borrowed_jobs(&shares, running.iter().chain(&started));
        for job in &started {
            after.remove(job.job_id.as_str());
        }
        let expected = before != after;
        assert_eq!(
            quota::dispatches_move_borrowing(&snapshot, &plan, NOW),
            expected,
            "world {world}: {running:?} started {started:?}"
        );
        if expected {
            moved += 1;
        } else {
            still += 1;
        }
    }
    assert!(moved >= 20 && still >= 20, "{moved} moved, {still} did not");
}
