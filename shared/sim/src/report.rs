//! Writes a comparison of runs to a directory: `summary.json` (the machine-readable contract),
//! CSVs, a markdown report and SVG plots; and formats a summary table for the terminal.
//!
//! Output is deterministic: the same runs and context give the same bytes. Policies are keyed
//! and listed by name in sorted order, and every float in `summary.json` is rounded to
//! [`JSON_DECIMALS`] decimals so summation-order noise in the last bits never shows.
//!
//! Files written to the output directory:
//!
//! | file | content |
//! |---|---|
//! | `summary.json` | object keyed by policy → [`PolicySummary`] |
//! | `summary.csv` | one row per policy, the headline measures |
//! | `waits.csv` | wait distribution per policy and group (all, each queue, each share) |
//! | `jobs-<policy>.csv` | one row per job of that policy's run |
//! | `report.md` | the context, a table per measure with policies side by side, how to read it |
//! | `utilization-<policy>.svg` | utilization over time of that policy |
//! | `wait-cdf.svg` | wait-time CDFs of every policy |

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::measures::{Distribution, FAIRNESS_WINDOW_S, PolicySummary, SLOWDOWN_FLOOR_S, slowdown};
use crate::plots::{PlotError, utilization_svg, wait_cdf_svg};
use crate::record::RunRecord;

/// Decimals kept for floats in `summary.json`.
pub const JSON_DECIMALS: i32 = 6;

/// What produced the runs, printed at the top of the report so it can be reproduced.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReportContext {
    /// The trace file (and format).
    pub trace: String,
    /// The scenario (file or built-in name).
    pub scenario: String,
    /// The seed every run used.
    pub seed: u64,
    /// Every mapping applied to the trace (GPUs to instances, VC to share, qos to queue, tiers).
    pub mappings: Vec<String>,
    /// Every other parameter, as name and value, in the order to print them.
    pub parameters: Vec<(String, String)>,
}

/// A report could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// Two runs carry the same policy name, so their results would overwrite each other.
    #[error("two runs are named {0:?}; policy names must be unique in a report")]
    DuplicatePolicy(String),
    /// Creating the directory or writing a file failed.
    #[error("writing {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The summary could not be encoded.
    #[error("encoding summary.json: {0}")]
    Json(#[from] serde_json::Error),
    /// A plot could not be drawn.
    #[error(transparent)]
    Plot(#[from] PlotError),
}

/// Measures every run, keyed by policy name (sorted); fails on duplicate names.
pub fn summaries(runs: &[RunRecord]) -> Result<BTreeMap<String, PolicySummary>, ReportError> {
    let mut out = BTreeMap::new();
    for run in runs {
        if out
            .insert(run.policy.clone(), PolicySummary::of(run))
            .is_some()
        {
            return Err(ReportError::DuplicatePolicy(run.policy.clone()));
        }
    }
    Ok(out)
}

/// A policy that completes less than this fraction of the most any policy completed is flagged:
/// its waits and utilization then describe a different workload from the others'.
pub const COMPLETION_GAP: f64 = 0.9;

/// What a reader must know before comparing the policies' figures: jobs that can never run
/// under a policy, and policies that completed far less than the best. One line each, in policy
/// order; empty when there is nothing to say.
pub fn warnings(summaries: &BTreeMap<String, PolicySummary>) -> Vec<String> {
    let mut out = Vec::new();
    for (policy, s) in summaries {
        let total = s.wait_s.count;
        for (code, never) in &s.never_runnable {
            out.push(format!(
                "`{policy}`: {} of {total} jobs can never run ({code}), e.g. {}; they count as \
                 never started",
                never.count,
                never.examples.join(", ")
            ));
        }
    }
    let best = summaries
        .iter()
        .max_by_key(|(policy, s)| (s.jobs_completed, std::cmp::Reverse(*policy)));
    if let Some((best_policy, best)) = best {
        for (policy, s) in summaries {
            if (s.jobs_completed as f64) < COMPLETION_GAP * best.jobs_completed as f64 {
                out.push(format!(
                    "`{policy}` completed {} jobs, {:.0}% of the {} `{best_policy}` completed: \
                     its waits and utilization describe a different workload",
                    s.jobs_completed,
                    100.0 * s.jobs_completed as f64 / best.jobs_completed as f64,
                    best.jobs_completed
                ));
            }
        }
    }
    out
}

/// Which policy did best on each headline measure, one line each ("best: `a`, 1.2 h; worst:
/// `b`, 9.0 h"), ties named together. Measures no policy has are left out.
pub fn best_per_measure(summaries: &BTreeMap<String, PolicySummary>) -> Vec<String> {
    type Measure = (
        &'static str,
        bool,
        fn(&PolicySummary) -> Option<f64>,
        fn(Option<f64>) -> String,
    );
    let measures: [Measure; 8] = [
        (
            "utilization while work waits",
            true,
            |s| s.utilization_backlogged,
            percent,
        ),
        ("mean wait", false, |s| s.wait_s.mean, duration),
        ("p95 wait", false, |s| s.wait_s.p95, duration),
        ("longest wait", false, |s| s.max_wait_s, duration),
        ("Jain's fairness", true, |s| s.jain_fairness, ratio),
        (
            "preemptions per job",
            false,
            |s| s.preemptions_per_job,
            |v| v.map_or_else(|| "—".to_owned(), |v| format!("{v:.3}")),
        ),
        (
            "work lost to preemption",
            false,
            |s| s.preempted_fraction,
            percent,
        ),
        (
            "jobs completed",
            true,
            |s| Some(s.jobs_completed as f64),
            |v| v.map_or_else(|| "—".to_owned(), |v| format!("{v:.0}")),
        ),
    ];
    let mut out = Vec::new();
    for (name, higher_is_better, get, show) in measures {
        let values: Vec<(&String, f64)> = summaries
            .iter()
            .filter_map(|(p, s)| Some((p, get(s)?)))
            .collect();
        let best = values
            .iter()
            .map(|(_, v)| *v)
            .reduce(|a, b| if (b > a) == higher_is_better { b } else { a });
        let worst = values
            .iter()
            .map(|(_, v)| *v)
            .reduce(|a, b| if (b < a) == higher_is_better { b } else { a });
        let (Some(best), Some(worst)) = (best, worst) else {
            continue;
        };
        let named = |target: f64| {
            values
                .iter()
                .filter(|(_, v)| show(Some(*v)) == show(Some(target)))
                .map(|(p, _)| format!("`{p}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if show(Some(best)) == show(Some(worst)) {
            out.push(format!("**{name}**: {} for every policy", show(Some(best))));
        } else {
            out.push(format!(
                "**{name}**: best {} ({}), worst {} ({})",
                named(best),
                show(Some(best)),
                named(worst),
                show(Some(worst))
            ));
        }
    }
    out
}

/// Writes every report file for `runs` into `dir` (created if missing).
pub fn write_report(
    dir: &Path,
    runs: &[RunRecord],
    context: &ReportContext,
) -> Result<(), ReportError> {
    let summaries = summaries(runs)?;
    std::fs::create_dir_all(dir).map_err(|source| ReportError::Io {
        path: dir.to_owned(),
        source,
    })?;
    let write = |name: &str, content: &str| {
        let path = dir.join(name);
        std::fs::write(&path, content).map_err(|source| ReportError::Io { path, source })
    };
    write("summary.json", &summary_json(&summaries)?)?;
    write("summary.csv", &summary_csv(&summaries))?;
    write("waits.csv", &waits_csv(&summaries))?;
    let mut sorted: Vec<&RunRecord> = runs.iter().collect();
    sorted.sort_by(|a, b| a.policy.cmp(&b.policy));
    // Every utilization plot spans the longest run, so they can be compared side by side.
    let axis_end_s = runs.iter().map(|r| r.end_s).fold(0.0, f64::max);
    for run in &sorted {
        let stem = file_stem(&run.policy);
        write(&format!("jobs-{stem}.csv"), &jobs_csv(run))?;
        if let Some(eta) = &run.eta {
            write(
                &format!("eta-{stem}.md"),
                &crate::eta::markdown(&run.policy, eta),
            )?;
            let scores = serde_json::to_string_pretty(&crate::eta::scores(eta))?;
            write(&format!("eta-{stem}.json"), &format!("{scores}\n"))?;
            write(
                &format!("eta-predictions-{stem}.csv"),
                &predictions_csv(eta),
            )?;
        }
        write(
            &format!("utilization-{stem}.svg"),
            &utilization_svg(run, axis_end_s)?,
        )?;
    }
    let sorted_runs: Vec<RunRecord> = sorted.into_iter().cloned().collect();
    write("wait-cdf.svg", &wait_cdf_svg(&sorted_runs)?)?;
    write("report.md", &report_markdown(&summaries, context))?;
    Ok(())
}

/// `summary.json`'s text: pretty-printed, keys sorted, floats rounded, newline-terminated.
pub fn summary_json(summaries: &BTreeMap<String, PolicySummary>) -> Result<String, ReportError> {
    let mut value = serde_json::to_value(summaries)?;
    value.sort_all_objects();
    round_floats(&mut value);
    let mut text = serde_json::to_string_pretty(&value)?;
    text.push('\n');
    Ok(text)
}

fn round_floats(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Number(n) if n.is_f64() => {
            if let Some(rounded) = n.as_f64().map(round).and_then(serde_json::Number::from_f64) {
                *n = rounded;
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(round_floats),
        serde_json::Value::Object(map) => map.values_mut().for_each(round_floats),
        _ => {}
    }
}

fn round(x: f64) -> f64 {
    let scale = 10f64.powi(JSON_DECIMALS);
    let rounded = (x * scale).round() / scale;
    // Avoid "-0.0" in the output, which differs in bytes from "0.0".
    if rounded == 0.0 { 0.0 } else { rounded }
}

/// A policy name made safe for a file name: anything but letters, digits, `-` and `_` becomes
/// `_`.
pub fn file_stem(policy: &str) -> String {
    policy
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// A CSV field, quoted when it needs to be.
fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_owned()
    }
}

fn csv_number(value: Option<f64>) -> String {
    value
        .map(|v| format!("{:.3}", round(v)))
        .unwrap_or_default()
}

fn csv_line(fields: &[String]) -> String {
    let mut line = fields
        .iter()
        .map(|f| csv_field(f))
        .collect::<Vec<_>>()
        .join(",");
    line.push('\n');
    line
}

fn summary_csv(summaries: &BTreeMap<String, PolicySummary>) -> String {
    let header = [
        "policy",
        "utilization_backlogged",
        "utilization_overall",
        "wait_s_mean",
        "wait_s_p50",
        "wait_s_p95",
        "wait_s_p99",
        "max_wait_s",
        "jct_s_mean",
        "slowdown_mean",
        "slowdown_p95",
        "jain_fairness",
        "preemptions",
        "preempted_instance_s",
        "jobs_completed",
        "jobs_unfinished",
        "jobs_never_started",
    ];
    let mut out = csv_line(&header.map(String::from));
    for (policy, s) in summaries {
        out.push_str(&csv_line(&[
            policy.clone(),
            csv_number(s.utilization_backlogged),
            csv_number(s.utilization_overall),
            csv_number(s.wait_s.mean),
            csv_number(s.wait_s.p50),
            csv_number(s.wait_s.p95),
            csv_number(s.wait_s.p99),
            csv_number(s.max_wait_s),
            csv_number(s.jct_s_mean),
            csv_number(s.slowdown.mean),
            csv_number(s.slowdown.p95),
            csv_number(s.jain_fairness),
            s.preemptions.to_string(),
            csv_number(Some(s.preempted_instance_s)),
            s.jobs_completed.to_string(),
            s.jobs_unfinished.to_string(),
            s.jobs_never_started.to_string(),
        ]));
    }
    out
}

/// Every (group kind, group, distribution) of a summary: the overall waits first, then each
/// queue, then each share, each in name order.
fn wait_groups(s: &PolicySummary) -> Vec<(&'static str, &str, &Distribution)> {
    let mut groups = vec![("all", "", &s.wait_s)];
    groups.extend(
        s.wait_s_by_queue
            .iter()
            .map(|(k, d)| ("queue", k.as_str(), d)),
    );
    groups.extend(
        s.wait_s_by_share
            .iter()
            .map(|(k, d)| ("share", k.as_str(), d)),
    );
    groups
}

fn waits_csv(summaries: &BTreeMap<String, PolicySummary>) -> String {
    let header = [
        "policy",
        "group_kind",
        "group",
        "count",
        "mean",
        "p50",
        "p95",
        "p99",
        "max",
    ];
    let mut out = csv_line(&header.map(String::from));
    for (policy, s) in summaries {
        for (kind, group, d) in wait_groups(s) {
            out.push_str(&csv_line(&[
                policy.clone(),
                kind.to_owned(),
                group.to_owned(),
                d.count.to_string(),
                csv_number(d.mean),
                csv_number(d.p50),
                csv_number(d.p95),
                csv_number(d.p99),
                csv_number(d.max),
            ]));
        }
    }
    out
}

/// Every scored start-time estimate of a run, one a line: what the tables of `eta-POLICY.md`
/// are computed from, so that another scoring or calibration can be tried on them. Waits in
/// seconds from when the estimate was made; empty beyond the horizon.
fn predictions_csv(run: &crate::eta::EtaRun) -> String {
    let header = [
        "job_id",
        "made_s",
        "at_submission",
        "queue",
        "instances",
        "actual_s",
        "position_s",
        "shadow_s",
        "raw_p50_s",
        "raw_p90_s",
        "published_p50_s",
        "published_p90_s",
        "calibrated",
    ];
    let mut out = csv_line(&header.map(String::from));
    for p in &run.predictions {
        out.push_str(&csv_line(&[
            p.job_id.clone(),
            csv_number(Some(p.made_s)),
            p.at_submission.to_string(),
            p.queue.clone(),
            p.instances.to_string(),
            csv_number(Some(p.actual_s)),
            csv_number(p.position_s),
            csv_number(p.shadow_s),
            csv_number(p.raw_s[0]),
            csv_number(p.raw_s[1]),
            csv_number(p.published_s[0]),
            csv_number(p.published_s[1]),
            p.calibrated.to_string(),
        ]));
    }
    out
}

fn jobs_csv(run: &RunRecord) -> String {
    let header = [
        "trace_id",
        "queue",
        "share",
        "instances",
        "submit_s",
        "first_start_s",
        "end_s",
        "duration_s",
        "wait_s",
        "jct_s",
        "slowdown",
        "status",
        "attempts",
        "preemptions",
        "preempted_instance_s",
        "never_runs",
        "eta_p50_s",
        "eta_p90_s",
        "lent_wait_s",
    ];
    let mut out = csv_line(&header.map(String::from));
    for job in &run.jobs {
        out.push_str(&csv_line(&[
            job.trace_id.clone(),
            job.queue.clone(),
            job.share.clone().unwrap_or_default(),
            job.instances.to_string(),
            csv_number(Some(job.submit_s)),
            csv_number(job.first_start_s),
            csv_number(job.end_s),
            csv_number(Some(job.duration_s)),
            // Empty for a job that never started: the CSV keeps the raw record, the censored
            // value is only used in the aggregates.
            csv_number(job.wait_s()),
            csv_number(job.jct_s()),
            csv_number(slowdown(job)),
            job.status.clone(),
            job.attempts.to_string(),
            job.preemptions.to_string(),
            csv_number(Some(job.preempted_instance_s)),
            job.never_runs.clone().unwrap_or_default(),
            csv_number(job.eta_p50_s),
            csv_number(job.eta_p90_s),
            csv_number(job.lent_wait_s),
        ]));
    }
    out
}

/// Human formats for the markdown and terminal tables.
/// Seconds in the unit a reader takes in at a glance: `45 s`, `12.5 min`, `3.4 h`, `2.1 d`.
fn duration(value: Option<f64>) -> String {
    match value {
        None => "—".to_owned(),
        Some(v) if v < 60.0 => format!("{v:.0} s"),
        Some(v) if v < 3_600.0 => format!("{:.1} min", v / 60.0),
        Some(v) if v < 172_800.0 => format!("{:.1} h", v / 3_600.0),
        Some(v) => format!("{:.1} d", v / 86_400.0),
    }
}

fn seconds(value: Option<f64>) -> String {
    value.map_or_else(|| "—".to_owned(), |v| format!("{v:.1}"))
}

fn percent(value: Option<f64>) -> String {
    value.map_or_else(|| "—".to_owned(), |v| format!("{:.1}%", v * 100.0))
}

fn ratio(value: Option<f64>) -> String {
    value.map_or_else(|| "—".to_owned(), |v| format!("{v:.3}"))
}

/// Text made safe for a markdown table cell (a `|` would end the cell).
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

/// A markdown table: one row per measure, one column per policy.
fn markdown_table(
    out: &mut String,
    title: &str,
    policies: &[&String],
    rows: &[(String, Vec<String>)],
) {
    let _ = writeln!(out, "### {title}\n");
    let _ = writeln!(
        out,
        "| measure | {} |",
        policies
            .iter()
            .map(|p| cell(p))
            .collect::<Vec<_>>()
            .join(" | ")
    );
    let _ = writeln!(out, "|---|{}", "---:|".repeat(policies.len()));
    for (name, cells) in rows {
        let _ = writeln!(out, "| {} | {} |", cell(name), cells.join(" | "));
    }
    out.push('\n');
}

fn report_markdown(summaries: &BTreeMap<String, PolicySummary>, context: &ReportContext) -> String {
    let policies: Vec<&String> = summaries.keys().collect();
    let all: Vec<&PolicySummary> = summaries.values().collect();
    let row = |name: &str, f: &dyn Fn(&PolicySummary) -> String| {
        (name.to_owned(), all.iter().map(|s| f(s)).collect())
    };
    let mut out = String::new();
    let _ = writeln!(out, "# Simulation report\n");
    let warnings = warnings(summaries);
    if !warnings.is_empty() {
        let _ = writeln!(out, "## Warnings\n");
        for warning in &warnings {
            let _ = writeln!(out, "- {warning}");
        }
        out.push('\n');
    }
    if summaries.len() > 1 {
        let _ = writeln!(out, "## Summary\n");
        for line in best_per_measure(summaries) {
            let _ = writeln!(out, "- {line}");
        }
        out.push('\n');
    }
    let _ = writeln!(out, "## Context\n");
    let _ = writeln!(out, "- trace: `{}`", context.trace);
    let _ = writeln!(out, "- scenario: `{}`", context.scenario);
    let _ = writeln!(out, "- seed: `{}`", context.seed);
    let _ = writeln!(
        out,
        "- policies: {}",
        policies
            .iter()
            .map(|p| format!("`{p}`"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = writeln!(out, "\n### Mappings\n");
    if context.mappings.is_empty() {
        let _ = writeln!(out, "- none");
    }
    for mapping in &context.mappings {
        let _ = writeln!(out, "- {mapping}");
    }
    let _ = writeln!(out, "\n### Parameters\n");
    let _ = writeln!(out, "| parameter | value |\n|---|---|");
    for (name, value) in &context.parameters {
        let _ = writeln!(out, "| {} | `{}` |", cell(name), cell(value));
    }
    let _ = writeln!(out, "| slowdown floor | `{SLOWDOWN_FLOOR_S} s` |");
    let _ = writeln!(out, "| fairness window | `{FAIRNESS_WINDOW_S} s` |");
    let _ = writeln!(out, "\n## Results\n");

    markdown_table(
        &mut out,
        "Utilization",
        &policies,
        &[
            row("while work waits", &|s| percent(s.utilization_backlogged)),
            row("overall", &|s| percent(s.utilization_overall)),
        ],
    );
    markdown_table(
        &mut out,
        "Wait to first start, all jobs",
        &policies,
        &[
            row("mean", &|s| duration(s.wait_s.mean)),
            row("p50", &|s| duration(s.wait_s.p50)),
            row("p95", &|s| duration(s.wait_s.p95)),
            row("p99", &|s| duration(s.wait_s.p99)),
            row("longest (starvation)", &|s| duration(s.max_wait_s)),
        ],
    );
    for (kind, title) in [
        ("queue", "Wait to first start, per queue"),
        ("share", "Wait to first start, per share"),
    ] {
        let mut groups: Vec<&String> = all
            .iter()
            .flat_map(|s| {
                if kind == "queue" {
                    s.wait_s_by_queue.keys()
                } else {
                    s.wait_s_by_share.keys()
                }
            })
            .collect();
        groups.sort();
        groups.dedup();
        if groups.is_empty() {
            continue;
        }
        let mut rows = Vec::new();
        for group in groups {
            let pick = |s: &PolicySummary| {
                let map = if kind == "queue" {
                    &s.wait_s_by_queue
                } else {
                    &s.wait_s_by_share
                };
                map.get(group).copied().unwrap_or_default()
            };
            rows.push(row(&format!("{group} mean"), &|s| duration(pick(s).mean)));
            rows.push(row(&format!("{group} p50"), &|s| duration(pick(s).p50)));
            rows.push(row(&format!("{group} p95"), &|s| duration(pick(s).p95)));
            rows.push(row(&format!("{group} p99"), &|s| duration(pick(s).p99)));
            rows.push(row(&format!("{group} longest"), &|s| duration(pick(s).max)));
        }
        markdown_table(&mut out, title, &policies, &rows);
    }
    markdown_table(
        &mut out,
        "Completion",
        &policies,
        &[
            row("JCT mean", &|s| duration(s.jct_s_mean)),
            row("JCT p95", &|s| duration(s.jct_s.p95)),
            row("slowdown mean", &|s| ratio(s.slowdown.mean)),
            row("slowdown p95", &|s| ratio(s.slowdown.p95)),
            row("jobs completed", &|s| s.jobs_completed.to_string()),
            row("jobs succeeded", &|s| s.jobs_succeeded.to_string()),
            row("jobs failed", &|s| s.jobs_failed.to_string()),
            row("jobs unfinished", &|s| s.jobs_unfinished.to_string()),
            row("jobs never started", &|s| s.jobs_never_started.to_string()),
        ],
    );
    markdown_table(
        &mut out,
        "Fairness",
        &policies,
        &[
            row("Jain's index", &|s| ratio(s.jain_fairness)),
            row("windows counted", &|s| s.fairness_windows.to_string()),
        ],
    );
    markdown_table(
        &mut out,
        "Preemption",
        &policies,
        &[
            row("preemptions", &|s| s.preemptions.to_string()),
            row("of which reclaims of borrowed capacity", &|s| {
                s.reclaims.to_string()
            }),
            row("owners' wait when reclaiming, mean / p95", &|s| {
                format!(
                    "{} / {}",
                    duration(s.reclaim_wait_s.mean),
                    duration(s.reclaim_wait_s.p95)
                )
            }),
            row("owners' reclaim latency, mean / p95 / longest", &|s| {
                format!(
                    "{} / {} / {}",
                    duration(s.lent_wait_s.mean),
                    duration(s.lent_wait_s.p95),
                    duration(s.lent_wait_s.max)
                )
            }),
            row("preemptions per job", &|s| {
                s.preemptions_per_job
                    .map_or_else(|| "—".to_owned(), |v| format!("{v:.3}"))
            }),
            row("instance-hours lost", &|s| {
                format!("{:.1}", s.preempted_instance_s / 3600.0)
            }),
            row("share of busy time lost", &|s| {
                percent(s.preempted_fraction)
            }),
            row("preempted jobs' wait after first start, mean", &|s| {
                duration(s.wait_after_start_s.mean)
            }),
            row("preempted jobs' wait after first start, p95", &|s| {
                duration(s.wait_after_start_s.p95)
            }),
        ],
    );
    let _ = writeln!(out, "## Plots\n");
    let _ = writeln!(out, "![Wait-time CDF](wait-cdf.svg)\n");
    for policy in &policies {
        let _ = writeln!(
            out,
            "![Utilization of {policy}](utilization-{}.svg)\n",
            file_stem(policy)
        );
    }
    out.push_str(HOW_TO_READ);
    out
}

const HOW_TO_READ: &str = "## How to read this

- **Utilization while work waits** is the one that judges a scheduler: idle instances while jobs
  are RUNNABLE are capacity the policy (or its partitioning) wasted. Overall utilization also
  falls when there is simply no work, which no policy can fix.
- **Wait** is submission to *first* start. A preempted job waits again after that; that time is
  under Preemption as *wait after first start* (first start to end, less its run time and the
  work its preempted attempts lost), so a policy cannot hide waits behind preemption.
- **Waits per queue** show whether high-priority work jumps the line; **waits per share** show
  whether any team is starved. Compare the tails (p95, p99) as much as the means. A job that never
  started counts with the time it had waited when the run ended (a lower bound), so starving a
  job never improves these numbers; `jobs never started` says how many such bounds there are.
- **Slowdown** is completion time over the job's own run time (floored at the slowdown floor),
  so it weighs a short job's wait more than a long one's.
- **Jain's index** compares each share's allocation with its entitlement, in windows where
  shares are backlogged: 1 is proportional, 1/n is one of n shares taking everything. Shares that
  neither waited nor held more than their entitlement in a window were satisfied and do not count.
- **Preemption** cost is the work thrown away by preempted attempts: the time each held its
  instances less the training its checkpoints kept for the next attempt (all of it for a job
  that does not checkpoint), as instance-hours and as a share of all busy instance-time; a
  policy that buys short waits with preemption pays for them here. Reclaims are the preemptions
  that took back capacity another quota share borrowed; the rest are in-share, by priority.
  *Owners' wait when reclaiming* is the whole wait (submission to first start) of the jobs
  reclaims were for, time in line behind their own share included; *owners' reclaim latency*
  counts only from the first cycle that found a job within its share's limit with the capacity
  its share lent still held by borrowers (`QUOTA:CAPACITY_LENT`, or the reclaim itself) to its
  dispatch, for waits that went on without a break (a job found waiting for anything else in
  between is not counted): borrowed jobs' minimum runtime before preemption, their stop grace,
  and the cycle after they end.
- **Jobs that can never run** under a policy (the planner's `MISCONFIGURATION:` reasons, such as
  an instance type its environment does not offer) are not replayed: they count as never started
  and are named under Warnings.
- Durations are shown in s, min, h or d; `summary.json` and the CSVs keep seconds.
- `summary.json` holds every number above; the CSVs hold the waits per group and every job.
";

/// A fixed-width table of the headline measures, one row per policy in name order, for the
/// terminal.
pub fn summary_table(runs: &[RunRecord]) -> String {
    let mut rows: Vec<(String, PolicySummary)> = runs
        .iter()
        .map(|r| (r.policy.clone(), PolicySummary::of(r)))
        .collect();
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    let width = rows
        .iter()
        .map(|(p, _)| p.len())
        .max()
        .unwrap_or(0)
        .max("policy".len());
    let mut out = format!(
        "{:<width$}  {:>9}  {:>9}  {:>10}  {:>10}  {:>10}  {:>10}  {:>10}  {:>6}  {:>8}  {:>9}\n",
        "policy",
        "util_bkl",
        "util_all",
        "wait_mean",
        "wait_p95",
        "wait_p99",
        "wait_max",
        "jct_mean",
        "jain",
        "preempt",
        "completed"
    );
    for (policy, s) in rows {
        let _ = writeln!(
            out,
            "{:<width$}  {:>9}  {:>9}  {:>10}  {:>10}  {:>10}  {:>10}  {:>10}  {:>6}  {:>8}  {:>9}",
            policy,
            percent(s.utilization_backlogged),
            percent(s.utilization_overall),
            seconds(s.wait_s.mean),
            seconds(s.wait_s.p95),
            seconds(s.wait_s.p99),
            seconds(s.max_wait_s),
            seconds(s.jct_s_mean),
            ratio(s.jain_fairness),
            s.preemptions,
            s.jobs_completed,
        );
    }
    out
}
