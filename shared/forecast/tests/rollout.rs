//! Rollouts on small worlds whose answer can be worked out by hand.

use trainyard_domain::environment::CapacityLimit;
use trainyard_forecast::{
    Arrival, Family, Forecaster, History, Learned, Options, forecast, shadow,
};
use trainyard_scheduler::{
    Config, EnvironmentState, PendingJob, QueuePolicy, QueueState, RunningJob, SharedInstances,
    Snapshot,
};

const TYPE: &str = "ml.g5.xlarge";
const HOUR_MS: i64 = 3_600_000;

fn instances(n: u32) -> SharedInstances {
    std::collections::BTreeMap::from([(TYPE.to_owned(), n)]).into()
}

fn queue(name: &str, priority: u32) -> QueueState {
    QueueState {
        name: name.into(),
        priority,
        environment: Some("env".into()),
        policy: QueuePolicy::Fifo,
        aging: None,
        reserve_after_ms: None,
    }
}

fn running(id: &str, started_at_ms: i64, max_runtime_s: i64) -> RunningJob {
    RunningJob {
        job_id: id.into(),
        queue: "low".into(),
        share: None,
        priority: 0,
        started_at_ms,
        instances: instances(1),
        expected_end_ms: started_at_ms + max_runtime_s * 1_000,
        checkpoint_ms: None,
        checkpoint_interval_ms: None,
        preemptions: 0,
        resumable: false,
        stopping: false,
    }
}

fn pending(id: &str, queue: &str, runnable_at_ms: i64) -> PendingJob {
    PendingJob {
        job_id: id.into(),
        queue: queue.into(),
        share: None,
        priority: 0,
        runnable_at_ms,
        instances: instances(1),
        max_runtime_s: Some(24 * 3_600),
        not_before_ms: None,
        line_offset_ms: 0,
    }
}

/// Two instances, both busy since time 0 with day-long limits; three jobs wait in `low`.
fn world() -> Snapshot {
    Snapshot {
        environments: vec![EnvironmentState {
            name: "env".into(),
            enabled: true,
            limits: vec![CapacityLimit {
                max_capacity: 2,
                capacity_unit: "NUM_INSTANCES".into(),
            }],
        }],
        queues: vec![queue("high", 100), queue("low", 1)],
        running: vec![running("r1", 0, 86_400), running("r2", 0, 86_400)],
        pending: vec![
            pending("a", "low", 1),
            pending("b", "low", 2),
            pending("c", "low", 3),
        ],
        ..Snapshot::default()
    }
}

fn options(rollouts: u32) -> Options {
    Options {
        rollouts,
        seed: 9,
        ..Options::default()
    }
}

fn history_of_hour_long_jobs() -> History {
    let mut history = History::default();
    for _ in 0..16 {
        history.observe_runtime(Family::of(&"low".into(), None, 1), 3_600, None);
    }
    history
}

#[test]
fn the_shadow_schedule_runs_every_attempt_to_its_time_limit() {
    let starts = shadow(&world(), 0, &Config::default(), &options(1));
    // r1 and r2 end at 24 h; a and b start then, c when a ends at 48 h.
    assert_eq!(starts.get("a"), Some(&(24 * HOUR_MS)));
    assert_eq!(starts.get("b"), Some(&(24 * HOUR_MS)));
    assert_eq!(starts.get("c"), Some(&(48 * HOUR_MS)));
}

#[test]
fn rollouts_use_the_runtimes_seen_not_the_time_limits() {
    // Everything of the family ran an hour, and r1 and r2 are 30 minutes in.
    let now = HOUR_MS / 2;
    let samples = forecast(
        &world(),
        now,
        &Config::default(),
        &history_of_hour_long_jobs(),
        &options(8),
    );
    let a = &samples["a"];
    assert_eq!(a.starts_ms.len(), 8, "started in every rollout");
    assert!(a.starts_ms.iter().all(|s| *s == HOUR_MS), "{a:?}");
    let c = &samples["c"];
    assert!(c.starts_ms.iter().all(|s| *s == 2 * HOUR_MS), "{c:?}");
    let again = forecast(
        &world(),
        now,
        &Config::default(),
        &history_of_hour_long_jobs(),
        &options(8),
    );
    assert_eq!(samples, again, "same inputs, same samples");
}

#[test]
fn arrivals_in_a_higher_priority_queue_push_a_waiting_job_back() {
    let now = HOUR_MS / 2;
    let quiet = forecast(
        &world(),
        now,
        &Config::default(),
        &history_of_hour_long_jobs(),
        &options(16),
    );
    let mut busy = history_of_hour_long_jobs();
    // `high` received a job every 10 minutes over the last day.
    for i in 0..64 {
        busy.observe_arrival(
            ("high".into(), None),
            Arrival {
                at_ms: now - i * 600_000,
                priority: 0,
                instances: instances(1),
                max_runtime_s: Some(3_600),
                line_offset_ms: 0,
            },
        );
    }
    let overtaken = forecast(&world(), now, &Config::default(), &busy, &options(16));
    let median = |s: &trainyard_forecast::Samples| s.quantile(0.5).unwrap_or(i64::MAX);
    assert!(
        median(&overtaken["c"]) > median(&quiet["c"]),
        "c: {:?} vs {:?}",
        overtaken["c"],
        quiet["c"]
    );
}

#[test]
fn a_job_that_never_fits_has_no_start_within_the_horizon() {
    let mut world = world();
    world.pending.push(PendingJob {
        instances: instances(3),
        ..pending("wide", "low", 0)
    });
    let samples = forecast(
        &world,
        0,
        &Config::default(),
        &history_of_hour_long_jobs(),
        &options(4),
    );
    assert!(samples["wide"].starts_ms.is_empty());
    assert_eq!(samples["wide"].quantile(0.5), None);
    assert_eq!(samples["a"].starts_ms.len(), 4, "it blocks nobody");
}

/// What a forecaster learnt survives a restart as JSON: a forecaster restored from it
/// estimates exactly as the one that learnt it, where a fresh one falls back to time limits.
#[test]
fn a_forecaster_restored_from_what_another_learnt_estimates_as_it_did() {
    let now = HOUR_MS / 2;
    let mut history = history_of_hour_long_jobs();
    // An arrival of two days ago: kept, too old to count towards `high`'s rate.
    history.observe_arrival(
        ("high".into(), Some("team".into())),
        Arrival {
            at_ms: now - 48 * HOUR_MS,
            priority: 3,
            instances: instances(2),
            max_runtime_s: None,
            line_offset_ms: 60_000,
        },
    );
    let mut learnt = Forecaster::<()>::with_learned(
        options(8),
        Learned {
            history,
            ..Learned::default()
        },
    );
    let kept = serde_json::to_string(&learnt.learned()).unwrap();
    let mut restored =
        Forecaster::<()>::with_learned(options(8), serde_json::from_str(&kept).unwrap());
    assert_eq!(restored.learned(), learnt.learned());
    let planner = Config::default();
    let expected = learnt.estimate(now, &world(), &planner, true, |_| ());
    let got = restored.estimate(now, &world(), &planner, true, |_| ());
    assert_eq!(got, expected);
    assert_eq!(got["a"].p50_ms, Some(HOUR_MS), "{got:?}");
    let fresh = Forecaster::<()>::new(options(8)).estimate(now, &world(), &planner, true, |_| ());
    assert_eq!(fresh["a"].p50_ms, Some(24 * HOUR_MS), "{fresh:?}");
}

/// A host's budget bounds a round: once it is spent, no more rollouts start past the minimum,
/// and the samples say how many ran (the quantiles count from them). Without one, all run.
#[test]
fn a_spent_budget_stops_the_rollouts_at_the_minimum() {
    let bounded = Options {
        budget: Some(std::time::Duration::ZERO),
        min_rollouts: 3,
        ..options(16)
    };
    let history = history_of_hour_long_jobs();
    let samples = forecast(&world(), 0, &Config::default(), &history, &bounded);
    assert_eq!(samples["a"].rollouts, 3);
    assert_eq!(samples["a"].starts_ms.len(), 3);
    let all = forecast(&world(), 0, &Config::default(), &history, &options(16));
    assert_eq!(all["a"].rollouts, 16);
    let generous = Options {
        budget: Some(std::time::Duration::from_secs(3_600)),
        ..bounded
    };
    let samples = forecast(&world(), 0, &Config::default(), &history, &generous);
    assert_eq!(
        samples["a"].rollouts, 16,
        "a budget not spent runs them all"
    );
}

/// A job whose published p90 has passed while it still waits teaches the calibration nothing
/// until it starts: its misses are learnt with its hits, at the start (docs of
/// `trainyard_forecast::estimate`).
#[test]
fn a_waiting_job_teaches_the_calibration_only_once_it_starts() {
    let planner = Config::default();
    let mut forecaster = Forecaster::<()>::new(options(8));
    let estimates = forecaster.estimate(0, &world(), &planner, true, |_| ());
    let p90 = estimates["a"].p90_ms.expect("within the horizon");
    let untaught = forecaster.learned().calibration;
    let mut no_job = |_: &str| None;
    forecaster.learn(&world(), &mut no_job);
    assert_eq!(forecaster.learned().calibration, untaught, "a still waits");
    let mut started = world();
    started.pending.retain(|p| p.job_id.as_str() != "a");
    let mut a = running("a", p90 + 2 * HOUR_MS, 86_400);
    a.queue = "low".into();
    started.running.push(a);
    let learnt = forecaster.learn(&started, &mut no_job);
    assert_eq!(learnt.resolved.len(), 1);
    assert_ne!(
        forecaster.learned().calibration,
        untaught,
        "a started late: a miss"
    );
}

/// A job estimated while among the jobs its line shows, and then pushed beyond them (others
/// went ahead of it), still waits: its estimate stays open and is learnt when it starts, not
/// dropped as if the job had gone.
#[test]
fn a_job_pushed_beyond_the_jobs_a_line_shows_keeps_its_estimate_open() {
    use trainyard_domain::job::{JobStatus, ServiceJob};
    use trainyard_domain::payload::TrainingRequest;

    let planner = Config::default();
    let mut forecaster = Forecaster::<()>::new(options(8));
    forecaster.estimate(0, &world(), &planner, true, |_| ());
    let mut pushed_out = world();
    pushed_out.pending.retain(|p| p.job_id.as_str() != "a");
    let waiting = ServiceJob {
        status: JobStatus::Runnable,
        ..ServiceJob::submitted(
            "a".into(),
            "a".into(),
            "low".into(),
            "{}",
            TrainingRequest::single("t", TYPE, 1),
            0,
        )
    };
    let mut store = |id: &str| (id == "a").then(|| waiting.clone());
    let learnt = forecaster.learn(&pushed_out, &mut store);
    assert_eq!(
        (learnt.dropped, learnt.resolved.len()),
        (0, 0),
        "still waiting"
    );
    let mut started = world();
    started.pending.retain(|p| p.job_id.as_str() != "a");
    started.running.push(running("a", HOUR_MS, 86_400));
    let learnt = forecaster.learn(&started, &mut store);
    assert_eq!(learnt.resolved.len(), 1, "learnt at its start");
}

/// A rollout reads a line's heads in the store's order: by when each job stands in line (its
/// line offset included, as a queue that puts shorter jobs first sets it), not by when it
/// became RUNNABLE.
#[test]
fn a_rollout_reads_a_line_in_the_order_its_offsets_give() {
    let mut snapshot = world();
    // `a` became RUNNABLE first, but stands in line after `c`.
    snapshot.pending[0].line_offset_ms = 10;
    let only_heads_that_fit = Options {
        heads_extra: 0,
        ..options(1)
    };
    let starts = shadow(&snapshot, 0, &Config::default(), &only_heads_that_fit);
    assert_eq!(starts.get("b"), Some(&(24 * HOUR_MS)));
    assert_eq!(starts.get("c"), Some(&(24 * HOUR_MS)));
    assert_eq!(starts.get("a"), Some(&(48 * HOUR_MS)), "{starts:?}");
}
