//! The driver on small JSONL traces: every job ends, capacity is never exceeded, priority tiers
//! are served in order, and the same inputs give the same bytes.

#![allow(clippy::unwrap_used)]

use trainyard_sim::driver::{requested_runtime_s, run};
use trainyard_sim::policies::{ALL, Policy};
use trainyard_sim::record::RunRecord;
use trainyard_sim::scenario::Scenario;
use trainyard_sim::trace::{Format, Trace, parse};

fn small() -> Scenario {
    Scenario::load("small").unwrap()
}

/// 24 one-instance jobs of 100 s at t = 0 on 8 instances: sweeps listed first, then research,
/// then production, so that submission order cannot explain a priority order.
fn tiers_trace() -> Trace {
    let mut lines = Vec::new();
    for (i, tier) in ["sweeps", "research", "production"].iter().enumerate() {
        for j in 0..8 {
            let team = if j % 2 == 0 { "vision" } else { "language" };
            lines.push(format!(
                r#"{{"id":"{tier}-{j}","submit_s":0,"duration_s":100,"instances":1,"queue":"{tier}","share":"{team}"}}"#
            ));
        }
        let _ = i;
    }
    parse(&lines.join("\n"), Format::Jsonl).unwrap()
}

/// A mixed trace: bursts, multi-instance jobs, both teams, tiers from the scenario's rule.
fn mixed_trace() -> Trace {
    let mut lines = Vec::new();
    for i in 0..60u32 {
        let submit = (i / 6) * 40;
        let instances = [1, 1, 2, 1, 4, 1][(i % 6) as usize];
        let duration = 30 + (i * 37) % 400;
        let team = if i % 3 == 0 { "language" } else { "vision" };
        lines.push(format!(
            r#"{{"id":"j{i}","submit_s":{submit},"duration_s":{duration},"instances":{instances},"share":"{team}"}}"#
        ));
    }
    parse(&lines.join("\n"), Format::Jsonl).unwrap()
}

fn replay(trace: &Trace, scenario: &Scenario, policy: Policy) -> RunRecord {
    run(trace, scenario, policy, &mut |_| {}).unwrap()
}

#[test]
fn every_policy_finishes_every_job_within_capacity() {
    let trace = mixed_trace();
    let scenario = small();
    for policy in ALL {
        let record = replay(&trace, &scenario, policy);
        assert_eq!(record.policy, policy.name());
        assert_eq!(record.jobs.len(), trace.jobs.len(), "{}", policy.name());
        for job in &record.jobs {
            assert_eq!(
                job.status,
                "SUCCEEDED",
                "{} {}",
                policy.name(),
                job.trace_id
            );
            let start = job.first_start_s.unwrap();
            let end = job.end_s.unwrap();
            if job.preemptions == 0 {
                // +0, not -0 (which reports would print as "-0.0").
                assert!(
                    job.preempted_instance_s.to_bits() == 0.0f64.to_bits(),
                    "{job:?}"
                );
            }
            assert!(start >= job.submit_s, "{job:?}");
            assert!(end - start >= job.duration_s - 1e-6, "{job:?}");
        }
        assert!(!record.usage.is_empty());
        let mut last_end = record.usage[0].start_s;
        for interval in &record.usage {
            assert!(
                interval.busy_instances <= interval.capacity_instances,
                "{}: {interval:?}",
                policy.name()
            );
            assert_eq!(interval.start_s, last_end, "no gaps");
            assert!(interval.end_s > interval.start_s);
            last_end = interval.end_s;
        }
        // Work is conserved: busy instance-time is the trace's instance-time plus what
        // preemptions threw away.
        let thrown = thrown_away(&trace, &record);
        let preempted: f64 = record.jobs.iter().map(|j| j.preempted_instance_s).sum();
        assert!(
            (thrown - preempted).abs() < 1.0,
            "{}: busy beyond the work {thrown}, preempted {preempted}",
            policy.name()
        );
    }
}

#[test]
fn trainyard_serves_production_then_research_then_sweeps() {
    let record = replay(&tiers_trace(), &small(), Policy::Trainyard);
    let starts = |tier: &str| -> Vec<f64> {
        record
            .jobs
            .iter()
            .filter(|j| j.queue == tier)
            .map(|j| j.first_start_s.unwrap())
            .collect()
    };
    let max = |v: &[f64]| v.iter().copied().fold(f64::MIN, f64::max);
    let min = |v: &[f64]| v.iter().copied().fold(f64::MAX, f64::min);
    let (production, research, sweeps) =
        (starts("production"), starts("research"), starts("sweeps"));
    assert!(
        max(&production) < min(&research),
        "{production:?} {research:?}"
    );
    assert!(max(&research) < min(&sweeps), "{research:?} {sweeps:?}");
    // Eight instances, 100 s each: three waves.
    assert_eq!(max(&sweeps), 200.0);
}

/// On one instance, a research job of an hour arrives every hour for 40 hours, and one sweep
/// arrives just after the first. Without aging the sweep waits for the whole stream; with the
/// sweeps queue aging 100 points an hour (from 100), it passes fresh research (500) once it has
/// waited more than 4 hours, at the next instant the instance frees (more than 14 hours when
/// its aging starts after 10 hours waited).
#[test]
fn an_aging_sweep_is_not_starved_by_a_stream_of_research() {
    let mut lines: Vec<String> = (0..40)
        .map(|i| {
            format!(
                r#"{{"id":"r{i:02}","submit_s":{},"duration_s":3600,"instances":1,"queue":"research","share":"vision"}}"#,
                i * 3600
            )
        })
        .collect();
    lines.push(
        r#"{"id":"sweep","submit_s":10,"duration_s":60,"instances":1,"queue":"sweeps","share":"vision"}"#
            .into(),
    );
    let trace = parse(&lines.join("\n"), Format::Jsonl).unwrap();
    let mut scenario = small();
    scenario.capacity_instances = 1;
    let sweep_wait = |scenario: &Scenario| {
        let record = replay(&trace, scenario, Policy::Trainyard);
        let sweep = record.jobs.iter().find(|j| j.trace_id == "sweep").unwrap();
        sweep.first_start_s.unwrap() - sweep.submit_s
    };
    let starved = sweep_wait(&scenario);
    assert!(starved > 39.0 * 3600.0, "without aging: {starved} s");
    let sweeps = scenario
        .tiers
        .iter_mut()
        .find(|t| t.name == "sweeps")
        .unwrap();
    sweeps.aging_per_hour = Some(100);
    sweeps.aging_max_priority = Some(899);
    let aged = sweep_wait(&scenario);
    assert!(
        (4.0 * 3600.0..6.0 * 3600.0).contains(&aged),
        "with aging: {aged} s"
    );
    // Aging that starts after 10 hours waited passes research 10 hours later.
    let sweeps = scenario.tiers.iter_mut().find(|t| t.name == "sweeps");
    sweeps.unwrap().aging_after_hours = Some(10);
    let delayed = sweep_wait(&scenario);
    assert!(
        (14.0 * 3600.0..16.0 * 3600.0).contains(&delayed),
        "with aging after 10 hours: {delayed} s"
    );
}

#[test]
fn fifo_ignores_tiers_and_serves_in_submission_order() {
    let record = replay(&tiers_trace(), &small(), Policy::Fifo);
    let sweeps_first = record
        .jobs
        .iter()
        .filter(|j| j.queue == "sweeps")
        .all(|j| j.first_start_s == Some(0.0));
    assert!(sweeps_first, "the sweeps were submitted first");
}

#[test]
fn the_same_inputs_give_byte_identical_records() {
    let trace = mixed_trace();
    let mut scenario = small();
    scenario.failure_rate = 0.1;
    scenario.capacity_error_rate = 0.1;
    scenario.attempts = 3;
    for policy in [Policy::Trainyard, Policy::QuotaShares] {
        let a = serde_json::to_string(&replay(&trace, &scenario, policy)).unwrap();
        let b = serde_json::to_string(&replay(&trace, &scenario, policy)).unwrap();
        assert_eq!(a, b, "{}", policy.name());
    }
    // And a different seed changes the faults drawn.
    let a = serde_json::to_string(&replay(&trace, &scenario, Policy::Trainyard)).unwrap();
    scenario.seed += 1;
    let b = serde_json::to_string(&replay(&trace, &scenario, Policy::Trainyard)).unwrap();
    assert_ne!(a, b);
}

#[test]
fn faults_fail_some_jobs_and_capacity_errors_retry_without_an_attempt() {
    let trace = mixed_trace();
    let mut scenario = small();
    scenario.failure_rate = 0.2;
    let record = replay(&trace, &scenario, Policy::Trainyard);
    let failed = record.jobs.iter().filter(|j| j.status == "FAILED").count();
    assert!(failed > 0 && failed < trace.jobs.len(), "{failed}");
    assert!(record.jobs.iter().all(|j| j.end_s.is_some()));
}

#[test]
fn jobs_ask_for_a_coarse_runtime_above_their_duration() {
    let cases = [
        (1.0, 3_600),
        (3_598.5, 3_600),
        (3_600.0, 14_400),
        (100_000.0, 259_200),
        (4_628_226.0, 4_838_401),
    ];
    for (duration, expected) in cases {
        assert_eq!(requested_runtime_s(duration), expected, "{duration}");
        assert!(requested_runtime_s(duration) as f64 > duration);
    }
}

/// A trace whose instance type the quota policies' environment does not offer, plus two jobs
/// larger than the whole pool: the jobs that can never run are named with the planner's reason,
/// not replayed, counted as never started, and the report says so at the top.
#[test]
fn jobs_that_can_never_run_are_named_and_the_report_warns() {
    let mut lines: Vec<String> = (0..20)
        .map(|i| {
            format!(
                r#"{{"id":"p5-{i}","submit_s":{i},"duration_s":50,"instances":1,"instance_type":"ml.p5.48xlarge","share":"vision"}}"#
            )
        })
        .collect();
    for i in 0..2 {
        lines.push(format!(
            r#"{{"id":"huge-{i}","submit_s":30,"duration_s":50,"instances":100,"instance_type":"ml.p5.48xlarge","share":"vision"}}"#
        ));
    }
    let trace = parse(&lines.join("\n"), Format::Jsonl).unwrap();
    let scenario = small();
    let fifo = replay(&trace, &scenario, Policy::Fifo);
    let quota = replay(&trace, &scenario, Policy::QuotaShares);
    let never = |record: &RunRecord| -> Vec<(String, String)> {
        record
            .jobs
            .iter()
            .filter_map(|j| {
                let reason = j.never_runs.as_deref()?;
                Some((j.trace_id.clone(), reason.split(" - ").next()?.to_owned()))
            })
            .collect()
    };
    // FIFO's environment counts instances of any type: only the two huge jobs never run.
    let fifo_never = never(&fifo);
    assert_eq!(
        fifo_never,
        [
            (
                "huge-0".to_owned(),
                "MISCONFIGURATION:SERVICE_ENVIRONMENT_MAX_RESOURCE".to_owned()
            ),
            (
                "huge-1".to_owned(),
                "MISCONFIGURATION:SERVICE_ENVIRONMENT_MAX_RESOURCE".to_owned()
            )
        ]
    );
    assert_eq!(fifo.jobs.len(), 22, "every job is recorded");
    assert_eq!(fifo.jobs.iter().filter(|j| j.end_s.is_some()).count(), 20);
    // The quota policies' environment offers only the scenario's type: nothing can run.
    assert_eq!(never(&quota).len(), 22);
    assert!(quota.jobs.iter().all(|j| j.first_start_s.is_none()));
    assert_eq!(
        quota
            .jobs
            .iter()
            .map(|j| j.trace_id.as_str())
            .collect::<Vec<_>>(),
        fifo.jobs
            .iter()
            .map(|j| j.trace_id.as_str())
            .collect::<Vec<_>>(),
        "trace order is kept"
    );

    let summaries = trainyard_sim::report::summaries(&[fifo, quota]).unwrap();
    assert_eq!(summaries["quota-shares"].jobs_never_started, 22);
    let warnings = trainyard_sim::report::warnings(&summaries);
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("`fifo`: 2 of 22 jobs can never run")
                && w.contains("huge-0, huge-1")),
        "{warnings:#?}"
    );
    assert!(
        warnings
            .iter()
            .any(|w| w.starts_with("`quota-shares` completed 0 jobs, 0% of the 20 `fifo`")),
        "{warnings:#?}"
    );
}

/// Busy instance-time less the trace's work: what preemptions threw away.
fn thrown_away(trace: &Trace, record: &RunRecord) -> f64 {
    let busy: f64 = record
        .usage
        .iter()
        .map(|u| u.busy_instances as f64 * (u.end_s - u.start_s))
        .sum();
    let offered: f64 = trace
        .jobs
        .iter()
        .map(|j| f64::from(j.instances) * j.duration_s)
        .sum();
    busy - offered
}

/// Checkpointing jobs resume where their newest checkpoint left them: preemptions throw away
/// less, and the record's lost work is still exactly the busy time beyond the trace's work.
#[test]
fn checkpoints_cut_the_work_preemption_throws_away() {
    let trace = mixed_trace();
    let mut lost = Vec::new();
    for (interval_s, on_stop) in [(0.0, false), (20.0, false), (20.0, true)] {
        let scenario = Scenario {
            checkpoint_interval_s: interval_s,
            checkpoint_on_stop: on_stop,
            ..small()
        };
        let record = replay(&trace, &scenario, Policy::QuotaShares);
        assert!(record.jobs.iter().all(|j| j.status == "SUCCEEDED"));
        let preemptions: u32 = record.jobs.iter().map(|j| j.preemptions).sum();
        assert!(preemptions > 0, "{interval_s}: the trace preempts");
        let recorded: f64 = record.jobs.iter().map(|j| j.preempted_instance_s).sum();
        let thrown = thrown_away(&trace, &record);
        assert!(
            (thrown - recorded).abs() < 1.0,
            "{interval_s} {on_stop}: busy beyond the work {thrown}, recorded {recorded}"
        );
        lost.push(recorded / f64::from(preemptions));
    }
    // Per preemption: everything since the start, at most 20 s since a checkpoint plus the stop
    // grace, the stop grace alone.
    assert!(lost[1] < lost[0] / 2.0, "{lost:?}");
    assert!(lost[2] < lost[1], "{lost:?}");
    assert!(
        lost[2] <= 10.0 * 4.0 + 1e-6,
        "only the 10 s grace, on ≤ 4 instances: {lost:?}"
    );
}

/// Lent capacity comes back as soon as the rules allow, not when something else next happens:
/// language borrows vision's half of the `small` pool at t = 0; vision's two jobs at t = 10 are
/// within its share's limit and wait (`QUOTA:CAPACITY_LENT`) until the borrowed jobs have run
/// the scenario's 60 s minimum, are preempted then, and start once the 10 s stop grace is over.
/// Nothing arrives or ends at t = 60, so the replay must wake for the reclaim by itself (the
/// next periodic pass is at t = 600). The report measures the owners' wait from t = 10.
#[test]
fn an_owner_gets_its_lent_capacity_back_once_the_borrowers_may_be_preempted() {
    let mut lines = Vec::new();
    for i in 0..8 {
        lines.push(format!(
            r#"{{"id":"lang-{i}","submit_s":0,"duration_s":1000,"instances":1,"queue":"research","share":"language"}}"#
        ));
    }
    for i in 0..2 {
        lines.push(format!(
            r#"{{"id":"vis-{i}","submit_s":10,"duration_s":100,"instances":1,"queue":"research","share":"vision"}}"#
        ));
    }
    let trace = parse(&lines.join("\n"), Format::Jsonl).unwrap();
    let record = replay(&trace, &small(), Policy::QuotaShares);
    let owners: Vec<_> = record
        .jobs
        .iter()
        .filter(|j| j.trace_id.starts_with("vis-"))
        .collect();
    for job in &owners {
        assert_eq!(job.first_start_s, Some(70.0), "{job:?}");
        assert_eq!(job.lent_wait_s, Some(60.0), "{job:?}");
    }
    let borrowers_preempted: u32 = record.jobs.iter().map(|j| j.preemptions).sum();
    assert_eq!(borrowers_preempted, 2, "exactly the two lent instances");
    // Nobody else waited for lent capacity.
    let waited = record
        .jobs
        .iter()
        .filter(|j| j.lent_wait_s.is_some())
        .count();
    assert_eq!(waited, 2);
    let summary = trainyard_sim::measures::PolicySummary::of(&record);
    assert_eq!(summary.lent_wait_s.count, 2);
    assert_eq!(summary.lent_wait_s.max, Some(60.0));
}

#[test]
fn the_same_jobs_arriving_faster_wait_longer() {
    let trace = mixed_trace();
    let scenario = small();
    let mean_wait = |trace: &Trace| {
        let record = replay(trace, &scenario, Policy::Fifo);
        let waits: Vec<f64> = record
            .jobs
            .iter()
            .map(|j| j.first_start_s.unwrap() - j.submit_s)
            .collect();
        waits.iter().sum::<f64>() / waits.len() as f64
    };
    let faster = trace.clone().with_arrival_rate(4.0).unwrap();
    let (as_recorded, four_times) = (mean_wait(&trace), mean_wait(&faster));
    assert!(
        four_times > as_recorded,
        "mean wait {four_times} s at 4x the arrival rate, {as_recorded} s as recorded"
    );
}
