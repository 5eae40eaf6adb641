//! Start-time estimates made during a run: every job that waited gets an estimate at its
//! submission and more while it waits, each scored against the start that followed, with only
//! what was known when it was made; and the scores are what their definitions say.

#![allow(clippy::unwrap_used)]

use trainyard_forecast::Options;
use trainyard_sim::driver::{run, run_with_estimates};
use trainyard_sim::eta::{
    BeyondHorizon, EtaRun, EtaSettings, Prediction, beyond_horizon, coverage_spread, markdown,
    scores,
};
use trainyard_sim::policies::Policy;
use trainyard_sim::scenario::Scenario;
use trainyard_sim::trace::{Format, Trace, parse};

/// Waves of one-instance jobs on the small scenario's 8 instances: 20 jobs every 10 minutes
/// for 3 hours, each running 5-25 minutes, so that jobs queue for a while in every wave.
fn waves() -> Trace {
    let mut lines = Vec::new();
    for wave in 0..18u32 {
        for j in 0..20u32 {
            let duration = 300 + ((wave * 7 + j * 13) % 5) * 300;
            lines.push(format!(
                r#"{{"id":"w{wave}-{j}","submit_s":{},"duration_s":{duration},"instances":1,"queue":"research","share":"vision"}}"#,
                wave * 600
            ));
        }
    }
    parse(&lines.join("\n"), Format::Jsonl).unwrap()
}

fn settings() -> EtaSettings {
    EtaSettings {
        options: Options {
            rollouts: 8,
            seed: 3,
            ..Options::default()
        },
        ..EtaSettings::default()
    }
}

#[test]
fn every_job_that_waited_is_estimated_at_submission_and_scored_when_it_starts() {
    let trace = waves();
    let scenario = Scenario::load("small").unwrap();
    let with = run_with_estimates(
        &trace,
        &scenario,
        Policy::Trainyard,
        Some(&settings()),
        &mut |_| {},
    )
    .unwrap();
    let without = run(&trace, &scenario, Policy::Trainyard, &mut |_| {}).unwrap();
    // Estimating observes and never changes the run.
    let strip = |jobs: &[trainyard_sim::record::JobRecord]| {
        jobs.iter()
            .map(|j| (j.trace_id.clone(), j.first_start_s, j.end_s))
            .collect::<Vec<_>>()
    };
    assert_eq!(strip(&with.jobs), strip(&without.jobs));

    let eta = with.eta.as_ref().unwrap();
    assert_eq!(eta.unresolved, 0, "every job started");
    let waited = with
        .jobs
        .iter()
        .filter(|j| j.wait_s().unwrap() > 60.0)
        .count();
    assert!(waited > 100, "the trace must make jobs wait: {waited}");
    let at_submission = eta.predictions.iter().filter(|p| p.at_submission).count();
    assert!(
        at_submission >= waited,
        "{at_submission} estimates at submission, {waited} waited"
    );
    assert!(
        eta.predictions.len() > at_submission,
        "and more while they wait"
    );
    for job in with.jobs.iter().filter(|j| j.wait_s().unwrap() > 60.0) {
        assert!(
            job.eta_p50_s.is_some() && job.eta_p90_s >= job.eta_p50_s,
            "{job:?}"
        );
    }
    for p in &eta.predictions {
        assert!(p.actual_s >= 0.0, "{p:?}");
        assert!(p.raw_s[1] >= p.raw_s[0], "{p:?}");
    }
    // Runtimes are learnt as jobs end: the rollouts beat the time limits (a day and more
    // here, for jobs of at most 25 minutes) on the median by far.
    let all = scores(eta);
    let get = |method: &str| {
        all.iter()
            .find(|s| s.stratum == "all" && s.method == method)
            .unwrap()
    };
    assert!(
        get("rollouts").pinball_p50_h < get("shadow").pinball_p50_h / 2.0,
        "{:?} vs {:?}",
        get("rollouts"),
        get("shadow")
    );

    // Every scored estimate is written out, one a line, to be scored again without replaying.
    let dir = tempfile::tempdir().unwrap();
    let context = trainyard_sim::report::ReportContext::default();
    trainyard_sim::report::write_report(dir.path(), std::slice::from_ref(&with), &context).unwrap();
    let csv = std::fs::read_to_string(dir.path().join("eta-predictions-trainyard.csv")).unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let column = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), eta.predictions.len());
    for (row, p) in rows.iter().zip(&eta.predictions) {
        assert_eq!(row[column("job_id")], p.job_id);
        let actual: f64 = row[column("actual_s")].parse().unwrap();
        assert!((actual - p.actual_s).abs() < 0.001, "{row:?} {p:?}");
        let p90 = row[column("published_p90_s")];
        assert_eq!(p90.is_empty(), p.published_s[1].is_none(), "{row:?}");
    }
}

fn prediction(actual_s: f64, p50_s: f64, p90_s: f64) -> Prediction {
    Prediction {
        job_id: "j".into(),
        made_s: 0.0,
        at_submission: true,
        queue: "q".into(),
        instances: 1,
        actual_s,
        position_s: None,
        shadow_s: Some(p90_s),
        raw_s: [Some(p50_s), Some(p90_s)],
        published_s: [Some(p50_s), None],
        calibrated: false,
    }
}

#[test]
fn scores_follow_their_definitions() {
    let run = EtaRun {
        predictions: vec![
            prediction(3_600.0, 3_600.0, 7_200.0),
            prediction(7_200.0, 3_600.0, 3_600.0),
        ],
        unresolved: 0,
        forecasts: 1,
        rollouts: 1,
        horizon_s: 36_000,
    };
    let all = scores(&run);
    let get = |method: &str| {
        all.iter()
            .find(|s| s.stratum == "all" && s.method == method)
            .unwrap()
    };
    let rollouts = get("rollouts");
    assert_eq!(rollouts.n, 2);
    assert_eq!(rollouts.p50_coverage, 0.5);
    assert_eq!(rollouts.p90_coverage, 0.5);
    // p50: 0 and 0.5 × 1 h; p90: 0.1 × 1 h (over) and 0.9 × 1 h (under).
    assert!((rollouts.pinball_p50_h - 0.25).abs() < 1e-9);
    assert!((rollouts.pinball_p90_h - 0.5).abs() < 1e-9);
    assert_eq!(rollouts.hit_rate, 0.5, "within max(10 min, 20%) once");
    // A published p90 beyond the horizon covers every start and costs the horizon.
    let published = get("trainyard");
    assert_eq!(published.p90_coverage, 1.0);
    assert!((published.pinball_p90_h - 0.1 * ((10.0 - 1.0) + (10.0 - 2.0)) / 2.0).abs() < 1e-9);
    assert!(
        get("position").p90_coverage == 1.0,
        "no estimate: the horizon"
    );
}

fn made_on_day(day: u32, covered: bool) -> Prediction {
    Prediction {
        made_s: f64::from(day) * 86_400.0 + 3_600.0,
        published_s: [Some(1_800.0), Some(3_600.0)],
        ..prediction(if covered { 1_800.0 } else { 7_200.0 }, 1_800.0, 3_600.0)
    }
}

fn run_of(predictions: Vec<Prediction>) -> EtaRun {
    EtaRun {
        predictions,
        unresolved: 0,
        forecasts: 1,
        rollouts: 1,
        horizon_s: 604_800,
    }
}

#[test]
fn coverage_is_only_as_certain_as_the_days_that_measured_it() {
    // Ten days with 90% covered on each: resampling days changes nothing.
    let even = run_of(
        (0..10)
            .flat_map(|day| (0..10).map(move |i| made_on_day(day, i < 9)))
            .collect(),
    );
    let spread = coverage_spread(&even).unwrap();
    assert_eq!(spread.days, 10);
    assert!((spread.low - 0.9).abs() < 1e-9 && (spread.high - 0.9).abs() < 1e-9);

    // The same 90% overall, made of one bad day among good ones: one replay of ten days could
    // as well have read 0.8 or 1.0.
    let episodic = run_of(
        (0..10)
            .flat_map(|day| (0..10).map(move |i| made_on_day(day, day != 3 || i == 0)))
            .collect(),
    );
    let all = scores(&episodic);
    let published = all
        .iter()
        .find(|s| s.stratum == "all" && s.method == "trainyard")
        .unwrap();
    assert!((published.p90_coverage - 0.91).abs() < 1e-9);
    let spread = coverage_spread(&episodic).unwrap();
    assert!(spread.low <= 0.82 && spread.high == 1.0, "{spread:?}");
    assert!(markdown("trainyard", &episodic).contains("over the 10 days"));
    assert_eq!(coverage_spread(&run_of(Vec::new())), None);
}

#[test]
fn a_p90_beyond_the_horizon_whose_job_started_beyond_it_is_counted_apart() {
    let horizon_s = 604_800.0;
    let beyond = |actual_s: f64| Prediction {
        published_s: [None, None],
        ..prediction(actual_s, 1_800.0, 3_600.0)
    };
    let run = run_of(vec![
        beyond(horizon_s + 86_400.0),
        beyond(3_600.0),
        made_on_day(0, true),
    ]);
    assert_eq!(
        beyond_horizon(&run),
        BeyondHorizon {
            published: 2,
            started_beyond: 1
        }
    );
    let published = scores(&run)
        .into_iter()
        .find(|s| s.stratum == "all" && s.method == "trainyard")
        .unwrap();
    assert!(
        (published.p90_coverage - 2.0 / 3.0).abs() < 1e-9,
        "the one that started beyond stays a miss in the coverage"
    );
    assert!(
        markdown("trainyard", &run).contains(
            "published p90 beyond the 168 h horizon: 2 estimates, of which 1 (33.3% of all \
             estimates) started beyond it too"
        ),
        "{}",
        markdown("trainyard", &run)
    );
    assert!(
        !markdown("trainyard", &run_of(vec![made_on_day(0, true)])).contains("beyond the 168 h")
    );
}
