//! The report files: the `summary.json` contract, determinism, CSVs, markdown and plots.

use std::collections::BTreeSet;

use trainyard_sim::plots::{utilization_svg, wait_cdf, wait_cdf_svg};
use trainyard_sim::record::{JobRecord, RunRecord, ShareInterval, UsageInterval};
use trainyard_sim::report::{ReportContext, ReportError, summary_table, write_report};

/// The keys issue 5 requires of every policy's summary.
const REQUIRED: [&str; 10] = [
    "utilization_backlogged",
    "utilization_overall",
    "wait_s",
    "wait_s_by_queue",
    "wait_s_by_share",
    "jct_s_mean",
    "jain_fairness",
    "max_wait_s",
    "preemptions",
    "jobs_completed",
];

/// The keys added beyond the required ones (documented on `PolicySummary`).
const EXTRA: [&str; 15] = [
    "jct_s",
    "slowdown",
    "fairness_windows",
    "preempted_instance_s",
    "jobs_succeeded",
    "jobs_failed",
    "jobs_unfinished",
    "jobs_never_started",
    "never_runnable",
    "preemptions_per_job",
    "preempted_fraction",
    "wait_after_start_s",
    "reclaims",
    "reclaim_wait_s",
    "lent_wait_s",
];

fn job(
    id: &str,
    queue: &str,
    share: &str,
    submit_s: f64,
    wait_s: f64,
    duration_s: f64,
) -> JobRecord {
    JobRecord {
        trace_id: id.to_owned(),
        queue: queue.to_owned(),
        share: Some(share.to_owned()),
        instances: 2,
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

/// A small run whose waits are scaled by `slowness`, so two policies differ.
fn run(policy: &str, slowness: f64) -> RunRecord {
    let jobs: Vec<JobRecord> = (0..40)
        .map(|i| {
            let (queue, share) = if i % 3 == 0 {
                ("high", "team-a")
            } else {
                ("low", "team-b,c")
            };
            let i = f64::from(i);
            job(
                &format!("job-{i}"),
                queue,
                share,
                i * 60.0,
                slowness * (i % 7.0) * 13.7,
                100.0 + i,
            )
        })
        .collect();
    let end_s = 7200.0;
    RunRecord {
        policy: policy.to_owned(),
        jobs,
        usage: vec![
            UsageInterval {
                start_s: 0.0,
                end_s: 3000.0,
                busy_instances: 8,
                capacity_instances: 10,
                backlogged: true,
            },
            UsageInterval {
                start_s: 3000.0,
                end_s,
                busy_instances: 2,
                capacity_instances: 10,
                backlogged: false,
            },
        ],
        shares: vec![
            ShareInterval {
                start_s: 0.0,
                end_s,
                share: "team-a".to_owned(),
                held_instances: 3,
                backlogged: true,
                entitlement: 0.5,
            },
            ShareInterval {
                start_s: 0.0,
                end_s,
                share: "team-b,c".to_owned(),
                held_instances: 5,
                backlogged: true,
                entitlement: 0.5,
            },
        ],
        end_s,
        reclaims: 0,
        eta: None,
        work: Default::default(),
    }
}

fn context() -> ReportContext {
    ReportContext {
        trace: "philly.csv (philly)".to_owned(),
        scenario: "built-in: shared-fleet".to_owned(),
        seed: 4242,
        mappings: vec![
            "8 GPUs → 1 ml.p4d.24xlarge".to_owned(),
            "VC → share".to_owned(),
        ],
        parameters: vec![("capacity_instances".to_owned(), "80".to_owned())],
    }
}

fn read(path: &std::path::Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn summary_json_has_the_required_keys_for_every_policy() {
    let dir = tempfile::tempdir().unwrap();
    write_report(
        dir.path(),
        &[run("trainyard", 0.5), run("fifo", 1.0)],
        &context(),
    )
    .unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&read(&dir.path().join("summary.json"))).unwrap();
    let policies: Vec<&String> = json.as_object().unwrap().keys().collect();
    assert_eq!(policies, ["fifo", "trainyard"], "one entry per policy");

    let expected: BTreeSet<&str> = REQUIRED.iter().chain(EXTRA.iter()).copied().collect();
    for (policy, summary) in json.as_object().unwrap() {
        let keys: BTreeSet<&str> = summary
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        for key in REQUIRED {
            assert!(keys.contains(key), "{policy}: missing {key}");
        }
        assert_eq!(keys, expected, "{policy}: exactly the documented keys");
        let waits = std::iter::once(&summary["wait_s"])
            .chain(summary["wait_s_by_queue"].as_object().unwrap().values())
            .chain(summary["wait_s_by_share"].as_object().unwrap().values());
        for wait in waits {
            for stat in ["mean", "p50", "p95", "p99"] {
                assert!(
                    wait[stat].is_f64() || wait[stat].is_u64(),
                    "{policy}: wait {stat} is a number: {wait}"
                );
            }
        }
        let u = summary["utilization_backlogged"].as_f64().unwrap();
        assert!(
            (u - 0.8).abs() < 1e-9,
            "{policy}: 8 of 10 busy while backlogged, got {u}"
        );
        assert!(summary["wait_s_by_queue"]["high"].is_object());
        assert!(summary["wait_s_by_share"]["team-b,c"].is_object());
    }
    let fifo_p95 = json["fifo"]["wait_s"]["p95"].as_f64().unwrap();
    let trainyard_p95 = json["trainyard"]["wait_s"]["p95"].as_f64().unwrap();
    assert!(
        fifo_p95 > trainyard_p95,
        "the slower run shows longer waits"
    );
}

#[test]
fn the_same_runs_give_the_same_bytes() {
    let runs = [
        run("fifo", 1.0),
        run("batch-fair-share", 0.7),
        run("trainyard", 0.3),
    ];
    let first = tempfile::tempdir().unwrap();
    let second = tempfile::tempdir().unwrap();
    write_report(first.path(), &runs, &context()).unwrap();
    // Same runs in another order: the output is keyed by policy, not by input order.
    let reversed: Vec<RunRecord> = runs.iter().rev().cloned().collect();
    write_report(second.path(), &reversed, &context()).unwrap();
    let mut names: Vec<String> = std::fs::read_dir(first.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(names.len() >= 10, "{names:?}");
    for name in names {
        assert_eq!(
            std::fs::read(first.path().join(&name)).unwrap(),
            std::fs::read(second.path().join(&name)).unwrap(),
            "{name} differs between identical inputs"
        );
    }
}

#[test]
fn every_report_file_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let runs = [run("fifo", 1.0), run("quota-shares", 0.4)];
    write_report(&dir.path().join("nested/out"), &runs, &context()).unwrap();
    let out = dir.path().join("nested/out");
    for name in [
        "summary.json",
        "summary.csv",
        "waits.csv",
        "jobs-fifo.csv",
        "jobs-quota-shares.csv",
        "report.md",
        "utilization-fifo.svg",
        "utilization-quota-shares.svg",
        "wait-cdf.svg",
    ] {
        assert!(out.join(name).is_file(), "{name} missing");
    }
    for name in ["utilization-fifo.svg", "wait-cdf.svg"] {
        let svg = read(&out.join(name));
        assert!(svg.len() > 500, "{name} is too small to hold a chart");
        assert!(
            svg.trim_start().starts_with("<svg") || svg.trim_start().starts_with("<?xml"),
            "{name} is not XML"
        );
        assert!(
            svg.trim_end().ends_with("</svg>"),
            "{name} is not a complete SVG"
        );
        assert!(
            svg.contains("<polyline") || svg.contains("<path"),
            "{name} draws no line"
        );
    }
    assert!(
        read(&out.join("wait-cdf.svg")).contains("quota-shares"),
        "the CDF legend names each policy"
    );

    let jobs = read(&out.join("jobs-fifo.csv"));
    assert_eq!(jobs.lines().count(), 41, "a header and one row per job");
    assert!(
        jobs.contains("\"team-b,c\""),
        "a field with a comma is quoted"
    );
    let waits = read(&out.join("waits.csv"));
    assert!(
        waits
            .lines()
            .any(|l| l.starts_with("quota-shares,queue,high,")),
        "{waits}"
    );
    let summary = read(&out.join("summary.csv"));
    assert_eq!(
        summary.lines().count(),
        3,
        "a header and one row per policy"
    );

    let md = read(&out.join("report.md"));
    for needle in [
        "philly.csv (philly)",
        "built-in: shared-fleet",
        "4242",
        "8 GPUs → 1 ml.p4d.24xlarge",
        "VC → share",
        "capacity_instances",
        "| measure | fifo | quota-shares |",
        "Jain's index",
        "## How to read this",
        "team-b,c p95",
        "wait after first start",
    ] {
        assert!(md.contains(needle), "report.md lacks {needle:?}");
    }
    // The summary comes first and names the better policy; waits are in readable units.
    let summary_at = md.find("## Summary").expect("a summary");
    assert!(summary_at < md.find("## Context").unwrap());
    assert!(
        md.contains("**mean wait**: best `quota-shares` ("),
        "{}",
        &md[summary_at..]
    );
    assert!(!md.contains("(s)"), "waits carry their unit in each cell");
    assert!(
        md.contains("**work lost to preemption**: 0.0% for every policy"),
        "nothing preempted is 0, not -0: {md}"
    );
    assert!(md.contains(" min |") || md.contains(" s |"));
}

#[test]
fn the_summary_names_ties_and_leaves_out_what_no_policy_has() {
    let summaries =
        trainyard_sim::report::summaries(&[run("a", 1.0), run("b", 1.0), run("c", 2.0)]).unwrap();
    let lines = trainyard_sim::report::best_per_measure(&summaries);
    let mean = lines.iter().find(|l| l.contains("**mean wait**")).unwrap();
    assert!(mean.starts_with("**mean wait**: best `a`, `b` ("), "{mean}");
    assert!(mean.contains("worst `c` ("), "{mean}");
    let completed = lines.iter().find(|l| l.contains("jobs completed")).unwrap();
    assert_eq!(completed, "**jobs completed**: 40 for every policy");
}

#[test]
fn plotting_empty_runs_does_not_panic() {
    let empty = RunRecord {
        policy: "fifo".to_owned(),
        ..RunRecord::default()
    };
    assert!(utilization_svg(&empty, 0.0).unwrap().contains("</svg>"));
    assert!(wait_cdf_svg(&[]).unwrap().contains("</svg>"));
    assert!(
        wait_cdf_svg(std::slice::from_ref(&empty))
            .unwrap()
            .contains("</svg>")
    );
    let dir = tempfile::tempdir().unwrap();
    write_report(dir.path(), &[empty], &ReportContext::default()).unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&read(&dir.path().join("summary.json"))).unwrap();
    assert!(
        json["fifo"]["wait_s"]["p50"].is_null(),
        "an empty run's percentiles are null"
    );
    assert!(json["fifo"]["utilization_overall"].is_null());
}

#[test]
fn wait_cdf_is_bounded_and_ends_at_one() {
    let big = RunRecord {
        policy: "fifo".to_owned(),
        jobs: (0..5000)
            .map(|i| job(&i.to_string(), "q", "s", 0.0, f64::from(i), 10.0))
            .collect(),
        end_s: 10_000.0,
        ..RunRecord::default()
    };
    let cdf = wait_cdf(&big);
    assert!(
        cdf.len() <= trainyard_sim::plots::CDF_POINTS + 1,
        "{} points",
        cdf.len()
    );
    assert_eq!(
        cdf.last().copied(),
        Some((4999.0, 1.0)),
        "the last point is the longest wait at fraction 1"
    );
    assert!(
        cdf.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 < w[1].1),
        "the CDF rises"
    );
}

#[test]
fn duplicate_policy_names_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let err = write_report(
        dir.path(),
        &[run("fifo", 1.0), run("fifo", 0.5)],
        &context(),
    )
    .unwrap_err();
    assert!(
        matches!(err, ReportError::DuplicatePolicy(ref name) if name == "fifo"),
        "{err}"
    );
}

#[test]
fn summary_table_lists_every_policy_in_name_order() {
    let table = summary_table(&[run("trainyard", 0.5), run("fifo", 1.0)]);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    assert!(lines[0].starts_with("policy"));
    assert!(
        lines[1].starts_with("fifo") && lines[2].starts_with("trainyard"),
        "{table}"
    );
    assert!(
        lines[1].contains("80.0%"),
        "backlogged utilization is shown: {table}"
    );
}
