//! Measures on hand-made run records whose answers can be worked out by hand.

use trainyard_sim::measures::{
    Distribution, FAIRNESS_WINDOW_S, PolicySummary, SLOWDOWN_FLOOR_S, jain_fairness, jain_index,
    percentile_sorted, slowdown, utilization, utilization_series,
};
use trainyard_sim::record::{JobRecord, RunRecord, ShareInterval, UsageInterval};

const EPS: f64 = 1e-9;

fn close(actual: Option<f64>, expected: Option<f64>) -> bool {
    match (actual, expected) {
        (Some(a), Some(e)) => (a - e).abs() < EPS,
        (None, None) => true,
        _ => false,
    }
}

/// A job submitted at `submit_s` that ran for `duration_s` after waiting `wait_s`, undisturbed.
fn job(id: &str, submit_s: f64, wait_s: f64, duration_s: f64) -> JobRecord {
    JobRecord {
        trace_id: id.to_owned(),
        queue: "default".to_owned(),
        share: None,
        instances: 1,
        submit_s,
        first_start_s: Some(submit_s + wait_s),
        end_s: Some(submit_s + wait_s + duration_s),
        duration_s,
        status: "SUCCEEDED".to_owned(),
        attempts: 1,
        preemptions: 0,
        preempted_instance_s: 0.0,
        never_runs: None,
        reclaimed: false,
        eta_p50_s: None,
        eta_p90_s: None,
        lent_wait_s: None,
    }
}

fn in_queue(mut job: JobRecord, queue: &str, share: Option<&str>) -> JobRecord {
    job.queue = queue.to_owned();
    job.share = share.map(str::to_owned);
    job
}

fn never_started(id: &str, submit_s: f64) -> JobRecord {
    JobRecord {
        first_start_s: None,
        end_s: None,
        status: "RUNNABLE".to_owned(),
        ..job(id, submit_s, 0.0, 100.0)
    }
}

fn usage(start_s: f64, end_s: f64, busy: u64, capacity: u64, backlogged: bool) -> UsageInterval {
    UsageInterval {
        start_s,
        end_s,
        busy_instances: busy,
        capacity_instances: capacity,
        backlogged,
    }
}

fn share(
    name: &str,
    start_s: f64,
    end_s: f64,
    held: u64,
    backlogged: bool,
    entitlement: f64,
) -> ShareInterval {
    ShareInterval {
        start_s,
        end_s,
        share: name.to_owned(),
        held_instances: held,
        backlogged,
        entitlement,
    }
}

#[test]
fn utilization_cases() {
    struct Case {
        name: &'static str,
        usage: Vec<UsageInterval>,
        backlogged: Option<f64>,
        overall: Option<f64>,
    }
    let cases = [
        Case {
            name: "a fully busy pool with work waiting is 1.0",
            usage: vec![usage(0.0, 100.0, 10, 10, true)],
            backlogged: Some(1.0),
            overall: Some(1.0),
        },
        Case {
            name: "half the pool busy while work waits is 0.5",
            usage: vec![usage(0.0, 100.0, 5, 10, true)],
            backlogged: Some(0.5),
            overall: Some(0.5),
        },
        Case {
            name: "idle time with nothing waiting does not count against backlogged utilization",
            usage: vec![
                usage(0.0, 100.0, 10, 10, true),
                usage(100.0, 200.0, 0, 10, false),
            ],
            backlogged: Some(1.0),
            overall: Some(0.5),
        },
        Case {
            name: "backlogged intervals are weighted by their length",
            // (10*100 + 0*300) / (10*400) while backlogged.
            usage: vec![
                usage(0.0, 100.0, 10, 10, true),
                usage(100.0, 400.0, 0, 10, true),
            ],
            backlogged: Some(0.25),
            overall: Some(0.25),
        },
        Case {
            name: "a run that never had a backlog has no backlogged utilization",
            usage: vec![usage(0.0, 100.0, 3, 10, false)],
            backlogged: None,
            overall: Some(0.3),
        },
        Case {
            name: "an empty run has neither",
            usage: vec![],
            backlogged: None,
            overall: None,
        },
        Case {
            name: "capacity changing over time weights by capacity-time",
            // busy 4*100 + 8*100 = 1200 over capacity 4*100 + 16*100 = 2000.
            usage: vec![
                usage(0.0, 100.0, 4, 4, true),
                usage(100.0, 200.0, 8, 16, true),
            ],
            backlogged: Some(0.6),
            overall: Some(0.6),
        },
    ];
    for case in cases {
        assert!(
            close(utilization(&case.usage, true), case.backlogged),
            "{}: backlogged",
            case.name
        );
        assert!(
            close(utilization(&case.usage, false), case.overall),
            "{}: overall",
            case.name
        );
        let run = RunRecord {
            usage: case.usage.clone(),
            ..RunRecord::default()
        };
        let summary = PolicySummary::of(&run);
        assert!(
            close(summary.utilization_backlogged, case.backlogged),
            "{}: summary",
            case.name
        );
    }
}

#[test]
fn nearest_rank_percentiles_on_small_lists() {
    // The textbook nearest-rank example: 15, 20, 35, 40, 50.
    let sorted = [15.0, 20.0, 35.0, 40.0, 50.0];
    for (p, expected) in [
        (5.0, 15.0),
        (30.0, 20.0),
        (40.0, 20.0),
        (50.0, 35.0),
        (95.0, 50.0),
        (100.0, 50.0),
        (0.0, 15.0),
    ] {
        assert_eq!(percentile_sorted(&sorted, p), Some(expected), "p{p}");
    }
    assert_eq!(
        percentile_sorted(&[], 50.0),
        None,
        "an empty list has no percentile"
    );
    assert_eq!(
        percentile_sorted(&[7.0], 99.0),
        Some(7.0),
        "one value is every percentile"
    );

    // 1..=100: p95 is the 95th value, p99 the 99th.
    let hundred: Vec<f64> = (1..=100).rev().map(f64::from).collect();
    let d = Distribution::of(&hundred);
    assert_eq!(
        (d.count, d.p50, d.p95, d.p99, d.max),
        (100, Some(50.0), Some(95.0), Some(99.0), Some(100.0)),
        "unsorted input is sorted first"
    );
    assert!(close(d.mean, Some(50.5)));

    assert_eq!(
        Distribution::of(&[]),
        Distribution {
            count: 0,
            mean: None,
            p50: None,
            p95: None,
            p99: None,
            max: None,
        }
    );
}

#[test]
fn jain_index_of_plain_lists() {
    assert!(
        close(jain_index(&[1.0, 1.0, 1.0, 1.0]), Some(1.0)),
        "equal values are perfectly fair"
    );
    assert!(
        close(jain_index(&[1.0, 0.0, 0.0, 0.0]), Some(0.25)),
        "one of four taking everything is 1/4"
    );
    assert!(
        close(jain_index(&[1.0, 3.0]), Some(16.0 / 20.0)),
        "(1+3)^2 / (2*(1+9))"
    );
    assert_eq!(jain_index(&[]), None, "no shares");
    assert_eq!(jain_index(&[0.0, 0.0]), None, "nothing allocated");
}

#[test]
fn fairness_over_backlogged_windows() {
    let hour = FAIRNESS_WINDOW_S;
    struct Case {
        name: &'static str,
        shares: Vec<ShareInterval>,
        end_s: f64,
        expected: Option<f64>,
        windows: usize,
    }
    let cases = [
        Case {
            name: "allocation proportional to entitlement is 1.0",
            shares: vec![
                share("a", 0.0, hour, 50, true, 0.5),
                share("b", 0.0, hour, 30, true, 0.3),
                share("c", 0.0, hour, 20, true, 0.2),
            ],
            end_s: hour,
            expected: Some(1.0),
            windows: 1,
        },
        Case {
            name: "one of three backlogged shares taking everything is 1/3",
            shares: vec![
                share("a", 0.0, hour, 100, true, 1.0 / 3.0),
                share("b", 0.0, hour, 0, true, 1.0 / 3.0),
                share("c", 0.0, hour, 0, true, 1.0 / 3.0),
            ],
            end_s: hour,
            expected: Some(1.0 / 3.0),
            windows: 1,
        },
        Case {
            name: "a share over its entitlement counts even when it has nothing waiting",
            shares: vec![
                share("a", 0.0, hour, 100, false, 0.5),
                share("b", 0.0, hour, 0, true, 0.5),
            ],
            end_s: hour,
            expected: Some(0.5),
            windows: 1,
        },
        Case {
            name: "a satisfied share under its entitlement does not count",
            // c holds little but wants no more; a and b split the rest proportionally.
            shares: vec![
                share("a", 0.0, hour, 40, true, 0.4),
                share("b", 0.0, hour, 40, true, 0.4),
                share("c", 0.0, hour, 1, false, 0.2),
            ],
            end_s: hour,
            expected: Some(1.0),
            windows: 1,
        },
        Case {
            name: "a window where nobody waits and nobody exceeds its due is skipped",
            shares: vec![
                share("a", 0.0, hour, 10, false, 0.5),
                share("b", 0.0, hour, 10, false, 0.5),
            ],
            end_s: hour,
            expected: None,
            windows: 0,
        },
        Case {
            name: "windows are averaged: one fair hour and one monopolised hour",
            shares: vec![
                share("a", 0.0, hour, 50, true, 0.5),
                share("b", 0.0, hour, 50, true, 0.5),
                share("a", hour, 2.0 * hour, 100, true, 0.5),
                share("b", hour, 2.0 * hour, 0, true, 0.5),
            ],
            end_s: 2.0 * hour,
            expected: Some(0.75),
            windows: 2,
        },
        Case {
            name: "a share with zero entitlement never counts",
            shares: vec![
                share("a", 0.0, hour, 50, true, 0.5),
                share("b", 0.0, hour, 50, true, 0.5),
                share("z", 0.0, hour, 50, true, 0.0),
            ],
            end_s: hour,
            expected: Some(1.0),
            windows: 1,
        },
        Case {
            name: "an interval spanning windows counts in each, whatever the input order",
            // Hour 1: a 100, b 0 (both waiting) → 1/2. Hour 2: a 100 and b 100 → 1.
            shares: vec![
                share("b", hour, 2.0 * hour, 100, true, 0.5),
                share("a", 0.0, 2.0 * hour, 100, true, 0.5),
                share("b", 0.0, hour, 0, true, 0.5),
            ],
            end_s: 2.0 * hour,
            expected: Some(0.75),
            windows: 2,
        },
        Case {
            name: "a partial last window weighs by its length",
            // Hour 1 fair (1.0), then half an hour monopolised (0.5): (1*1 + 0.5*0.5) / 1.5.
            shares: vec![
                share("a", 0.0, 1.5 * hour, 50, true, 0.5),
                share("b", 0.0, hour, 50, true, 0.5),
                share("b", hour, 1.5 * hour, 0, true, 0.5),
            ],
            end_s: 1.5 * hour,
            expected: Some(1.25 / 1.5),
            windows: 2,
        },
        Case {
            name: "no shares at all",
            shares: vec![],
            end_s: hour,
            expected: None,
            windows: 0,
        },
    ];
    for case in cases {
        let (index, windows) = jain_fairness(&case.shares, case.end_s);
        assert!(
            close(index, case.expected),
            "{}: got {index:?}, expected {:?}",
            case.name,
            case.expected
        );
        assert_eq!(windows, case.windows, "{}: windows", case.name);
    }
}

#[test]
fn slowdown_floors_tiny_durations() {
    let one_second = job("tiny", 0.0, 60.0, 1.0);
    assert!(
        close(slowdown(&one_second), Some(61.0 / SLOWDOWN_FLOOR_S)),
        "a 1 s job counts as {SLOWDOWN_FLOOR_S} s long"
    );
    let long = job("long", 0.0, 100.0, 100.0);
    assert!(
        close(slowdown(&long), Some(2.0)),
        "a long job is JCT over its duration"
    );
    assert_eq!(
        slowdown(&never_started("never", 0.0)),
        None,
        "a job that did not end has no slowdown"
    );
}

#[test]
fn waits_completion_and_preemption_of_a_small_run() {
    let mut preempted = in_queue(job("p", 0.0, 30.0, 100.0), "low", Some("team-b"));
    preempted.preemptions = 2;
    preempted.preempted_instance_s = 120.0;
    let mut failed = in_queue(job("f", 0.0, 10.0, 50.0), "high", Some("team-a"));
    failed.status = "FAILED".to_owned();
    let run = RunRecord {
        policy: "fifo".to_owned(),
        jobs: vec![
            in_queue(job("h1", 0.0, 0.0, 100.0), "high", Some("team-a")),
            failed,
            preempted,
            in_queue(never_started("starved", 500.0), "low", Some("team-b")),
            in_queue(job("nobody", 0.0, 20.0, 10.0), "low", None),
        ],
        usage: vec![],
        shares: vec![],
        end_s: 1000.0,
        reclaims: 0,
        eta: None,
        work: Default::default(),
    };
    let s = PolicySummary::of(&run);
    // Waits: 0, 10, 30, 500 (censored at the end of the run), 20.
    assert_eq!(s.wait_s.count, 5);
    assert!(close(s.wait_s.mean, Some(112.0)));
    assert!(close(s.wait_s.p50, Some(20.0)));
    assert!(
        close(s.max_wait_s, Some(500.0)),
        "the starved job is the longest wait"
    );
    assert!(close(s.wait_s_by_queue["high"].mean, Some(5.0)));
    assert!(close(s.wait_s_by_queue["low"].p99, Some(500.0)));
    assert_eq!(s.wait_s_by_queue["low"].count, 3);
    assert_eq!(
        s.wait_s_by_share.keys().collect::<Vec<_>>(),
        ["team-a", "team-b"],
        "jobs without a share are left out"
    );
    assert!(close(s.wait_s_by_share["team-b"].mean, Some(265.0)));
    // JCTs of the four that ended: 100, 60, 130, 30.
    assert!(close(s.jct_s_mean, Some(80.0)));
    assert_eq!(
        (s.jobs_completed, s.jobs_succeeded, s.jobs_failed),
        (4, 3, 1)
    );
    assert_eq!((s.jobs_unfinished, s.jobs_never_started), (1, 1));
    assert_eq!(s.preemptions, 2);
    assert!(close(Some(s.preempted_instance_s), Some(120.0)));
}

#[test]
fn an_empty_run_has_defined_measures() {
    let s = PolicySummary::of(&RunRecord::default());
    assert_eq!(s.wait_s.count, 0);
    assert_eq!(
        (s.wait_s.mean, s.max_wait_s, s.jct_s_mean, s.jain_fairness),
        (None, None, None, None)
    );
    assert_eq!(
        (s.utilization_backlogged, s.utilization_overall),
        (None, None)
    );
    assert_eq!(
        (s.jobs_completed, s.jobs_unfinished, s.preemptions),
        (0, 0, 0)
    );
}

#[test]
fn utilization_series_splits_intervals_across_bins() {
    // Busy 10/10 and backlogged for the first 150 s, then idle 0/10: bins of 100 s read 1.0, 0.5,
    // 0.0, and a bin with no usage recorded reads None.
    let usage = vec![
        usage(0.0, 150.0, 10, 10, true),
        usage(150.0, 300.0, 0, 10, false),
    ];
    let series = utilization_series(&usage, 400.0, 4);
    let values: Vec<Option<f64>> = series.iter().map(|s| s.utilization).collect();
    for (actual, expected) in values.iter().zip([Some(1.0), Some(0.5), Some(0.0), None]) {
        assert!(close(*actual, expected), "{values:?}");
    }
    let backlogged: Vec<f64> = series.iter().map(|s| s.backlogged_fraction).collect();
    assert_eq!(
        backlogged,
        [1.0, 0.5, 0.0, 0.0],
        "share of each slice with work waiting"
    );
    assert!(
        close(Some(series[0].t_s), Some(50.0)),
        "points sit at the middle of their bin"
    );
    assert!(
        utilization_series(&usage, 0.0, 4).is_empty(),
        "an empty run has no series"
    );
}

#[test]
fn a_preempted_job_waits_again_after_its_first_start_and_its_lost_work_is_a_share_of_busy_time() {
    // Started at 30 on 2 instances; its preempted attempts held them 120 s in all; it ran its
    // 100 s and ended at 300: it waited 300 - 30 - 100 - 120 = 50 s after its first start.
    let mut preempted = job("p", 0.0, 30.0, 100.0);
    preempted.instances = 2;
    preempted.preemptions = 2;
    preempted.preempted_instance_s = 240.0;
    preempted.end_s = Some(300.0);
    let run = RunRecord {
        policy: "quota".to_owned(),
        jobs: vec![
            preempted,
            job("q", 0.0, 0.0, 100.0),
            // An owner that reclaimed lent capacity, started 90 s after its submission.
            JobRecord {
                reclaimed: true,
                ..job("owner", 10.0, 90.0, 50.0)
            },
        ],
        usage: vec![usage(0.0, 300.0, 2, 4, true)],
        shares: vec![],
        end_s: 300.0,
        reclaims: 1,
        eta: None,
        work: Default::default(),
    };
    let s = PolicySummary::of(&run);
    assert_eq!(s.reclaims, 1);
    assert_eq!(s.reclaim_wait_s.count, 1, "only the owner");
    assert!(close(s.reclaim_wait_s.mean, Some(90.0)));
    assert_eq!(s.wait_after_start_s.count, 1, "only the preempted job");
    assert!(close(s.wait_after_start_s.mean, Some(50.0)));
    assert!(close(s.preemptions_per_job, Some(2.0 / 3.0)));
    // 240 instance-seconds lost of 2 × 300 busy.
    assert!(close(s.preempted_fraction, Some(0.4)));
    let empty = PolicySummary::of(&RunRecord::default());
    assert_eq!(
        (empty.preemptions_per_job, empty.preempted_fraction),
        (None, None)
    );
}
