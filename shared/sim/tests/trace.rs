//! Trace loaders and scenario rules on small inline data.

#![allow(clippy::unwrap_used)]

use trainyard_sim::policies::{TeamLoad, static_slices};
use trainyard_sim::scenario::{Scenario, apportion, unit_hash};
use trainyard_sim::trace::{Format, Trace, TraceError, TraceJob, parse, parse_timestamp};

#[test]
fn philly_rows_are_sorted_shifted_and_mapped_to_vc_shares() {
    let text = "timestamp,duration,num_gpus,gpu_time,cluster\n\
        2017-10-09 07:01:55,66.0,1,66.0,11cb48\n\
        2017-10-09 06:13:03,2951.0,8,23608.0,6214e9\n\
        2017-10-09 06:13:03,0.0,2,0.0,6214e9\n";
    let trace = parse(text, Format::Philly).unwrap();
    let got: Vec<(&str, f64, f64, u32, Option<&str>)> = trace
        .jobs
        .iter()
        .map(|j| {
            (
                j.id.as_str(),
                j.submit_s,
                j.duration_s,
                j.instances,
                j.share.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("philly-3", 0.0, 2951.0, 8, Some("vc-6214e9")),
            ("philly-4", 0.0, 1.0, 2, Some("vc-6214e9")),
            ("philly-2", 2932.0, 66.0, 1, Some("vc-11cb48")),
        ]
    );
}

#[test]
fn bad_rows_are_reported_with_their_line_numbers() {
    let cases = [
        (
            Format::Philly,
            "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,66.0,1,66.0,a\n2017-13-09 07:01:55,66.0,1,66.0,a\n",
            "line 3: timestamp",
        ),
        (
            Format::Philly,
            "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,abc,1,66.0,a\n",
            "line 2: duration must be a number",
        ),
        (
            Format::Philly,
            "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,5,0,0,a\n",
            "line 2: num_gpus must be ≥ 1",
        ),
        (
            Format::Openb,
            "name,num_gpu,qos,creation_time,deletion_time,scheduled_time\np,1,XX,0,10,0\n",
            "line 2: qos",
        ),
        (
            Format::Jsonl,
            "{\"submit_s\":0,\"duration_s\":5,\"instances\":1}\n\n{\"submit_s\":0,\"duration_s\":5}\n",
            "line 3: invalid job",
        ),
        (
            Format::Jsonl,
            "{\"submit_s\":0,\"duration_s\":5,\"instances\":0}\n",
            "line 1: instances must be ≥ 1",
        ),
        (
            Format::Jsonl,
            "{\"submit_s\":0,\"duration_s\":5,\"instances\":1,\"gpus\":2}\n",
            "line 1: invalid job: unknown field",
        ),
    ];
    for (format, text, expected) in cases {
        let err = parse(text, format).unwrap_err().to_string();
        assert!(err.starts_with(expected), "{expected:?} vs {err:?}");
    }
    assert!(matches!(
        parse("timestamp,duration\n", Format::Philly),
        Err(TraceError::MissingColumn("num_gpus"))
    ));
    assert!(matches!(
        parse("# nothing\n", Format::Jsonl),
        Err(TraceError::Empty)
    ));
}

#[test]
fn openb_skips_cpu_only_tasks_and_maps_qos_to_tiers() {
    let text = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n\
        a,1000,1,1,1000,,LS,Running,100,600,150\n\
        b,1000,1,0,0,,BE,Running,110,600,110\n\
        c,1000,1,8,1000,,BE,Pending,120,320,\n\
        d,1000,1,2,1000,,Burstable,Failed,130,131,130\n\
        e,1000,1,1,1000,,Guaranteed,Failed,140,200,140\n";
    let trace = parse(text, Format::Openb).unwrap();
    let got: Vec<(&str, f64, f64, u32, Option<&str>)> = trace
        .jobs
        .iter()
        .map(|j| {
            (
                j.id.as_str(),
                j.submit_s,
                j.duration_s,
                j.instances,
                j.queue.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("a", 0.0, 450.0, 1, Some("production")),
            ("c", 20.0, 200.0, 8, Some("sweeps")),
            ("d", 30.0, 1.0, 2, Some("research")),
            ("e", 40.0, 60.0, 1, Some("production")),
        ]
    );
    assert_eq!(trace.skipped.len(), 1);
    assert_eq!(trace.skipped[0].0, 3);
}

#[test]
fn jsonl_keeps_optional_fields_and_shifts_time_to_zero() {
    let text = "# a comment\n\
        {\"id\":\"x\",\"submit_s\":1000,\"duration_s\":60,\"instances\":2,\"queue\":\"production\",\"share\":\"nlp\",\"scheduling_priority\":7,\"instance_type\":\"ml.p4d.24xlarge\"}\n\
        {\"submit_s\":900,\"duration_s\":30,\"instances\":1}\n";
    let trace = parse(text, Format::Jsonl).unwrap();
    assert_eq!(trace.jobs[0].id, "jsonl-3");
    assert_eq!(trace.jobs[0].submit_s, 0.0);
    let x = &trace.jobs[1];
    assert_eq!(
        (
            x.submit_s,
            x.queue.as_deref(),
            x.share.as_deref(),
            x.scheduling_priority,
            x.instance_type.as_deref()
        ),
        (
            100.0,
            Some("production"),
            Some("nlp"),
            Some(7),
            Some("ml.p4d.24xlarge")
        )
    );
}

#[test]
fn timestamps_count_seconds_from_1970() {
    assert_eq!(parse_timestamp("1970-01-01 00:00:00"), Some(0));
    assert_eq!(parse_timestamp("2017-09-04 10:30:41"), Some(1_504_521_041));
    assert_eq!(parse_timestamp("2000-02-29 00:00:01"), Some(951_782_401));
    for bad in ["2017-09-04", "2017-09-04 10:30", "2017-00-04 10:30:41", "x"] {
        assert_eq!(parse_timestamp(bad), None, "{bad}");
    }
}

fn job(id: String, share: &str) -> TraceJob {
    TraceJob {
        id,
        submit_s: 0.0,
        duration_s: 1.0,
        instances: 1,
        instance_type: None,
        queue: None,
        share: Some(share.into()),
        scheduling_priority: None,
    }
}

#[test]
fn the_tier_rule_gives_each_share_its_fractions_and_depends_on_the_seed() {
    let scenario = Scenario::load("fleet").unwrap();
    for share in ["vc-a", "vc-b"] {
        let mut counts = std::collections::BTreeMap::new();
        for i in 0..20_000 {
            *counts
                .entry(scenario.tier_of(&job(format!("j{i}"), share)))
                .or_insert(0) += 1;
        }
        for (tier, expected) in [("production", 0.1), ("research", 0.3), ("sweeps", 0.6)] {
            let got = f64::from(counts[tier]) / 20_000.0;
            assert!((got - expected).abs() < 0.015, "{share} {tier}: {got}");
        }
    }
    let mut with_queue = job("q".into(), "vc-a");
    with_queue.queue = Some("production".into());
    assert_eq!(scenario.tier_of(&with_queue), "production");
    assert_ne!(unit_hash(1, "a", "b"), unit_hash(2, "a", "b"));
    assert_eq!(unit_hash(1, "a", "b"), unit_hash(1, "a", "b"));
    assert_ne!(
        unit_hash(1, "ab", ""),
        unit_hash(1, "a", "b"),
        "the separator counts"
    );
}

#[test]
fn apportion_is_proportional_whole_and_gives_everyone_a_minimum() {
    let cases: [(u32, &[f64], u32, &[u32]); 5] = [
        (10, &[1.0, 1.0], 1, &[5, 5]),
        (10, &[3.0, 1.0], 1, &[8, 2]),
        (100, &[1000.0, 1.0, 0.0], 1, &[98, 1, 1]),
        (7, &[1.0, 1.0, 1.0], 0, &[3, 2, 2]),
        (2, &[1.0, 1.0, 1.0], 1, &[1, 1, 0]),
    ];
    for (total, weights, min, expected) in cases {
        let parts = apportion(total, weights, min);
        assert_eq!(parts, expected, "{total} {weights:?}");
        assert_eq!(parts.iter().sum::<u32>(), total);
    }
}

#[test]
fn scenarios_list_every_problem_at_once() {
    let text = r#"{"name":"x","capacity_instances":0,"tiers":[{"name":"a","priority":2000,"scheduling_priority":1,"fraction":0.9},{"name":"b","priority":1,"scheduling_priority":1,"fraction":0.5}],"default_queue":"c","failure_rate":2}"#;
    let err = Scenario::parse(text).unwrap_err().to_string();
    for expected in [
        "capacity_instances",
        "priority must be 0–1000",
        "sum to",
        "default_queue",
        "failure_rate",
    ] {
        assert!(err.contains(expected), "{expected}: {err}");
    }
    for (name, _) in trainyard_sim::scenario::BUILTIN {
        Scenario::load(name).unwrap();
    }
}

fn loaded(share: &str, instances: u32, duration_s: f64) -> TraceJob {
    TraceJob {
        instances,
        duration_s,
        ..job(format!("{share}-{instances}-{duration_s}"), share)
    }
}

fn team_loads(pairs: &[(&str, f64)]) -> Vec<TeamLoad> {
    pairs
        .iter()
        .map(|(name, instance_s)| TeamLoad {
            name: (*name).into(),
            instance_s: *instance_s,
        })
        .collect()
}

#[test]
fn trace_shares_outside_the_scenarios_teams_fold_into_other_team() {
    let mut scenario = Scenario::load("small").unwrap();
    let cases = [
        // (other_team, trace share, expected team)
        (Some("language"), Some("vision"), "vision"),
        (Some("language"), Some("vc-6214e9"), "language"),
        (Some("language"), None, "vision"), // default_share is a team: kept
        (None, Some("vc-6214e9"), "vc-6214e9"),
        (None, None, "vision"),
    ];
    for (other, share, expected) in cases {
        scenario.other_team = other.map(str::to_owned);
        let mut j = job("x".into(), "");
        j.share = share.map(str::to_owned);
        assert_eq!(scenario.share_of(&j), expected, "{other:?} {share:?}");
    }
    // The built-in fleet names its teams, so a Philly VC outside the five largest folds.
    let fleet = Scenario::load("fleet").unwrap();
    assert_eq!(fleet.share_of(&job("y".into(), "vc-ee9e8c")), "vc-ee9e8c");
    assert_eq!(fleet.share_of(&job("y".into(), "vc-11cb48")), "other");
}

#[test]
fn the_largest_shares_by_offered_load_become_teams_and_the_rest_fold() {
    // Offered loads: c 100×1 = 100, a 2×30 = 60, b 10, d 10 (ties by name), e 1.
    let trace = Trace {
        jobs: vec![
            loaded("a", 2, 30.0),
            loaded("b", 1, 10.0),
            loaded("c", 1, 100.0),
            loaded("d", 5, 2.0),
            loaded("e", 1, 1.0),
        ],
        skipped: vec![],
    };
    let scenario = Scenario::load("small").unwrap();
    let cases: [(usize, &[&str], Option<&str>); 3] = [
        (2, &["c", "a", "rest"], Some("rest")),
        (3, &["c", "a", "b", "rest"], Some("rest")),
        (5, &["c", "a", "b", "d", "e"], None),
    ];
    for (n, teams, other) in cases {
        let mapped = scenario.with_largest_teams(&trace, n, "rest");
        let names: Vec<&str> = mapped.teams.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, teams, "n = {n}");
        assert_eq!(mapped.other_team.as_deref(), other);
        // d ties b at 10 and loses by name, so it folds unless every share is kept.
        assert_eq!(
            mapped.share_of(&trace.jobs[3]),
            if n == 5 { "d" } else { "rest" }
        );
    }
}

#[test]
fn static_slices_follow_offered_load_and_never_go_to_teams_without_work() {
    let mut scenario = Scenario::load("small").unwrap(); // 8 instances
    type Case<'a> = (&'a [(&'a str, f64)], &'a [u32]);
    let cases: [Case; 4] = [
        // Two teams, loads 3:1 → 6 and 2.
        (&[("language", 300.0), ("vision", 100.0)], &[6, 2]),
        // A team the trace never uses gets nothing (the old rule gave it 1 and wasted it).
        (
            &[("language", 0.0), ("vc-a", 300.0), ("vision", 100.0)],
            &[0, 6, 2],
        ),
        // A tiny load still gets one instance, or its jobs could never run.
        (&[("a", 1000.0), ("b", 1.0)], &[7, 1]),
        // Equal loads, equal slices.
        (
            &[("a", 5.0), ("b", 5.0), ("c", 5.0), ("d", 5.0)],
            &[2, 2, 2, 2],
        ),
    ];
    for (loads, expected) in cases {
        let slices = static_slices(&scenario, &team_loads(loads));
        assert_eq!(slices, expected, "{loads:?}");
        assert_eq!(slices.iter().sum::<u32>(), scenario.capacity_instances);
    }
    // A fixed slice is taken first; the rest is split by load.
    scenario.teams[0].static_instances = Some(5); // vision
    let slices = static_slices(
        &scenario,
        &team_loads(&[("language", 1.0), ("vision", 1.0)]),
    );
    assert_eq!(slices, [3, 5]);
}

#[test]
fn runtime_class_tiers_put_each_job_in_the_first_class_that_holds_it() {
    let scenario = Scenario::load("sjf").unwrap();
    let cases = [
        (1.0, "le-10m"),
        (600.0, "le-10m"),
        (601.0, "le-1h"),
        (86_400.0, "le-1d"),
        (300_000.0, "longer"),
    ];
    for (duration_s, expected) in cases {
        let mut j = job(format!("d{duration_s}"), "vc-a");
        j.duration_s = duration_s;
        assert_eq!(scenario.tier_of(&j), expected, "{duration_s}");
        assert_eq!(scenario.share_of(&j), "all");
    }
    let mixed = r#"{"name":"x","capacity_instances":1,"tiers":[{"name":"a","priority":1,"scheduling_priority":1,"max_duration_s":10},{"name":"b","priority":1,"scheduling_priority":1},{"name":"c","priority":1,"scheduling_priority":1}],"default_queue":"c"}"#;
    let err = Scenario::parse(mixed).unwrap_err().to_string();
    assert!(err.contains("max_duration_s"), "{err}");
}

#[test]
fn a_faster_arrival_rate_divides_submission_times_and_keeps_the_jobs() {
    let text = "timestamp,duration,num_gpus,gpu_time,cluster\n\
        2017-10-09 06:00:00,60.0,1,60.0,a\n\
        2017-10-09 06:01:40,60.0,2,120.0,b\n\
        2017-10-09 06:05:00,60.0,4,240.0,a\n";
    let trace = parse(text, Format::Philly).unwrap();
    let faster = trace.clone().with_arrival_rate(2.5).unwrap();
    let submits: Vec<f64> = faster.jobs.iter().map(|j| j.submit_s).collect();
    assert_eq!(submits, vec![0.0, 40.0, 120.0]);
    let unchanged = |t: &Trace| {
        t.jobs
            .iter()
            .map(|j| (j.id.clone(), j.duration_s, j.instances, j.share.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(unchanged(&faster), unchanged(&trace));
    for rate in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let err = trace.clone().with_arrival_rate(rate).unwrap_err();
        assert!(matches!(err, TraceError::ArrivalRate(_)), "{rate}: {err}");
    }
}
