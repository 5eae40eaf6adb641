//! A CI regression slice of a real trace: the first jobs of Philly (read from the trace file
//! beside the repository, never copied into it) replayed under several policies on a contended
//! pool, each measure checked against bounds kept in `tests/bounds/philly_slice.json`, where
//! every bound carries the argument that derives it.
//!
//! The trace is looked for at `$TRAINYARD_TRACES/philly-pollux/philly.csv`, else at
//! `../shared/traces/` beside the workspace. A missing trace fails the test with that message:
//! a silently skipped regression check would hide exactly what it exists to catch.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use serde::Deserialize;
use trainyard_sim::driver::run;
use trainyard_sim::measures::PolicySummary;
use trainyard_sim::policies::Policy;
use trainyard_sim::scenario::Scenario;
use trainyard_sim::trace::{Format, load};

/// The bounds file: the slice it is about, then the bounds.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Bounds {
    /// What the slice is, and why the numbers below follow from it.
    #[allow(dead_code)]
    about: String,
    scenario: String,
    capacity: u32,
    jobs: usize,
    policies: Vec<String>,
    bounds: Vec<Bound>,
    relations: Vec<Relation>,
}

/// `min ≤ policy.measure ≤ max`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Bound {
    policy: String,
    measure: String,
    #[serde(default)]
    min: Option<f64>,
    #[serde(default)]
    max: Option<f64>,
    why: String,
}

/// `left.measure × factor < right.measure`: an ordering between policies.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Relation {
    left: (String, String),
    #[serde(default = "one")]
    factor: f64,
    right: (String, String),
    why: String,
}

fn one() -> f64 {
    1.0
}

fn philly() -> PathBuf {
    let root = std::env::var_os("TRAINYARD_TRACES").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces"),
        PathBuf::from,
    );
    root.join("philly-pollux/philly.csv")
}

/// A measure of a summary by its `summary.json` name (the few the bounds use).
fn measure(summary: &PolicySummary, name: &str) -> f64 {
    let get = |v: Option<f64>| v.unwrap_or(f64::NAN);
    match name {
        "utilization_backlogged" => get(summary.utilization_backlogged),
        "utilization_overall" => get(summary.utilization_overall),
        "wait_s.mean" => get(summary.wait_s.mean),
        "wait_s.p95" => get(summary.wait_s.p95),
        "max_wait_s" => get(summary.max_wait_s),
        "jain_fairness" => get(summary.jain_fairness),
        "preemptions" => summary.preemptions as f64,
        "preempted_fraction" => get(summary.preempted_fraction),
        "jobs_completed" => summary.jobs_completed as f64,
        "jobs_never_started" => summary.jobs_never_started as f64,
        other => match other.strip_prefix("wait_s_by_queue.") {
            Some(queue) => get(summary.wait_s_by_queue.get(queue).and_then(|d| d.mean)),
            None => panic!("unknown measure {other:?} in the bounds file"),
        },
    }
}

#[test]
fn the_first_philly_jobs_replay_within_their_derived_bounds() {
    let text = include_str!("bounds/philly_slice.json");
    let bounds: Bounds = serde_json::from_str(text).unwrap();
    let path = philly();
    let mut trace = load(&path, Format::Philly).unwrap_or_else(|e| {
        panic!(
            "the Philly trace is needed for this check ({e}); set TRAINYARD_TRACES to the \
             directory holding philly-pollux/"
        )
    });
    trace.jobs.truncate(bounds.jobs);
    assert_eq!(trace.jobs.len(), bounds.jobs);
    let mut scenario = Scenario::load(&bounds.scenario).unwrap();
    scenario.capacity_instances = bounds.capacity;
    let mut summaries = std::collections::BTreeMap::new();
    for name in &bounds.policies {
        let policy = Policy::parse(name).unwrap();
        let record = run(&trace, &scenario, policy, &mut |_| {}).unwrap();
        summaries.insert(name.clone(), PolicySummary::of(&record));
    }
    let mut failures = Vec::new();
    for b in &bounds.bounds {
        let value = measure(&summaries[&b.policy], &b.measure);
        let ok = b.min.is_none_or(|m| value >= m) && b.max.is_none_or(|m| value <= m);
        if !ok {
            failures.push(format!(
                "{}.{} = {value} outside [{:?}, {:?}]: {}",
                b.policy, b.measure, b.min, b.max, b.why
            ));
        }
    }
    for r in &bounds.relations {
        let left = measure(&summaries[&r.left.0], &r.left.1);
        let right = measure(&summaries[&r.right.0], &r.right.1);
        // NaN (a measure that is missing) fails the relation too.
        let holds = (left * r.factor).partial_cmp(&right) == Some(std::cmp::Ordering::Less);
        if !holds {
            failures.push(format!(
                "{}.{} = {left} × {} is not below {}.{} = {right}: {}",
                r.left.0, r.left.1, r.factor, r.right.0, r.right.1, r.why
            ));
        }
    }
    let measured: Vec<String> = summaries
        .iter()
        .map(|(p, s)| {
            format!(
                "{p}: util_backlogged {:?} overall {:?} wait mean {:?} by queue {:?} jain {:?} \
                 completed {} never started {} preemptions {}",
                s.utilization_backlogged,
                s.utilization_overall,
                s.wait_s.mean,
                s.wait_s_by_queue
                    .iter()
                    .map(|(q, d)| (q.as_str(), d.mean.map(f64::round)))
                    .collect::<Vec<_>>(),
                s.jain_fairness,
                s.jobs_completed,
                s.jobs_never_started,
                s.preemptions
            )
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{}\nmeasured:\n{}",
        failures.join("\n"),
        measured.join("\n")
    );
}

/// Two teams on the `small` scenario's 8 instances: vision submits one 1-instance job of 100 s
/// (100 instance-seconds), language twenty 1-instance jobs of 500 s (10,000). Static slices by
/// offered load: language 8 × 10,000/10,100 → 7.92, vision 0.08 → at least 1; so 7 and 1.
fn two_team_trace() -> trainyard_sim::trace::Trace {
    let mut lines =
        vec![r#"{"id":"v","submit_s":0,"duration_s":100,"instances":1,"share":"vision","queue":"research"}"#.to_owned()];
    for i in 0..20 {
        lines.push(format!(
            r#"{{"id":"l{i}","submit_s":0,"duration_s":500,"instances":1,"share":"language","queue":"research"}}"#
        ));
    }
    trainyard_sim::trace::parse(&lines.join("\n"), Format::Jsonl).unwrap()
}

#[test]
fn a_static_partition_never_lends_its_idle_slice_and_quota_shares_do() {
    let trace = two_team_trace();
    let scenario = Scenario::load("small").unwrap();
    let most_held = |policy: Policy| {
        let record = run(&trace, &scenario, policy, &mut |_| {}).unwrap();
        assert!(
            record.jobs.iter().all(|j| j.status == "SUCCEEDED"),
            "{policy:?}: every job fits its team's slice and must finish"
        );
        let held = record
            .shares
            .iter()
            .filter(|s| s.share == "language")
            .map(|s| s.held_instances)
            .max()
            .unwrap();
        (held, PolicySummary::of(&record))
    };
    let (static_held, static_summary) = most_held(Policy::StaticPartition);
    let (lent_held, lent_summary) = most_held(Policy::QuotaShares);
    // Vision's slice of 1 idles from t = 100 on; static-partition must not lend it.
    assert_eq!(static_held, 7, "static-partition held more than its slice");
    // Quota shares lend it: language runs 8 at once after vision's job ends.
    assert_eq!(lent_held, 8, "quota-shares did not lend the idle slice");
    let (s, q) = (
        static_summary.utilization_backlogged.unwrap(),
        lent_summary.utilization_backlogged.unwrap(),
    );
    assert!(s < q, "an unlent slice must cost utilization: {s} vs {q}");
}
