//! `trainyard simulate`: replays a GPU-cluster trace through Trainyard's own use-cases, planner
//! and SageMaker emulator over virtual time, once per policy, and prints (or writes with
//! `--out`) how the policies compare. Prints the seed and every parameter first.
//!
//! Needs `trainyard-sim.workspace = true` in this crate's `Cargo.toml`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use trainyard_sim::driver::{Progress, run};
use trainyard_sim::policies::Policy;
use trainyard_sim::record::RunRecord;
use trainyard_sim::scenario::Scenario;
use trainyard_sim::trace::{Format, load};

/// Wall time between progress lines.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// `trainyard simulate`.
#[derive(Debug, Clone, Args)]
pub struct SimulateArgs {
    /// The trace file.
    #[arg(long)]
    trace: PathBuf,
    /// Its format: philly, openb or jsonl.
    #[arg(long, default_value = "philly")]
    format: String,
    /// A built-in scenario (fleet, small) or a scenario file.
    #[arg(long, default_value = "fleet")]
    scenario: String,
    /// Overrides the scenario's capacity, in instances.
    #[arg(long)]
    capacity: Option<u32>,
    /// Policies to compare, comma-separated.
    #[arg(
        long,
        default_value = "fifo,batch-fair-share,trainyard,quota-shares,static-partition"
    )]
    policies: String,
    /// Writes the report (markdown, CSVs, plots, summary.json) here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Overrides the scenario's seed.
    #[arg(long)]
    seed: Option<u64>,
    /// Replays only the first N jobs.
    #[arg(long)]
    limit_jobs: Option<usize>,
}

/// Runs the command.
pub fn run_simulate(args: &SimulateArgs) -> anyhow::Result<()> {
    let Some(format) = Format::parse(&args.format) else {
        bail!(
            "--format must be philly, openb or jsonl, got {:?}",
            args.format
        );
    };
    let mut policies = Vec::new();
    for name in args.policies.split(',').filter(|n| !n.trim().is_empty()) {
        match Policy::parse(name) {
            Some(p) => policies.push(p),
            None => bail!(
                "unknown policy {name:?} (fifo, batch-fair-share, trainyard, quota-shares, static-partition)"
            ),
        }
    }
    let mut scenario = Scenario::load(&args.scenario)?;
    if let Some(capacity) = args.capacity {
        scenario.capacity_instances = capacity;
    }
    if let Some(seed) = args.seed {
        scenario.seed = seed;
    }
    scenario.validate()?;
    let mut trace = load(&args.trace, format)?;
    if let Some(limit) = args.limit_jobs {
        trace.jobs.truncate(limit);
    }
    println!("seed: {}", scenario.seed);
    println!(
        "trace: {} ({}, {} jobs, {} rows skipped)",
        args.trace.display(),
        format.name(),
        trace.jobs.len(),
        trace.skipped.len()
    );
    for mapping in format.mappings() {
        println!("mapping: {mapping}");
    }
    for (k, v) in scenario.parameters() {
        println!("{k}: {v}");
    }
    let mut runs = Vec::new();
    for policy in policies {
        let started = Instant::now();
        let mut last = Instant::now();
        let mut report = |p: &Progress| {
            if last.elapsed() >= PROGRESS_EVERY {
                last = Instant::now();
                let pct = if p.last_submit_s > 0.0 {
                    100.0 * p.now_s / p.last_submit_s
                } else {
                    100.0
                };
                eprintln!(
                    "{}: {pct:.0}% of trace time, {} of {} jobs done",
                    p.policy, p.jobs_done, p.jobs_total
                );
            }
        };
        let record = run(&trace, &scenario, policy, &mut report)
            .with_context(|| format!("policy {}", policy.name()))?;
        eprintln!(
            "{}: replayed in {:.1} s",
            policy.name(),
            started.elapsed().as_secs_f64()
        );
        runs.push(record);
    }
    match &args.out {
        Some(dir) => {
            let context = trainyard_sim::report::ReportContext {
                trace: args.trace.display().to_string(),
                scenario: scenario.name.clone(),
                seed: scenario.seed,
                mappings: format.mappings(),
                parameters: scenario.parameters(),
            };
            trainyard_sim::report::write_report(dir, &runs, &context)?;
            println!("report written to {}", dir.display());
        }
        None => print!("{}", table(&runs)),
    }
    Ok(())
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// One line per policy: jobs done, mean and p95 wait, utilization overall.
fn table(runs: &[RunRecord]) -> String {
    let mut out = format!(
        "{:<18} {:>10} {:>12} {:>12} {:>12}\n",
        "policy", "jobs done", "wait mean s", "wait p95 s", "utilization"
    );
    for run in runs {
        let done = run.jobs.iter().filter(|j| j.end_s.is_some()).count();
        let mut waits: Vec<f64> = run.jobs.iter().filter_map(|j| j.wait_s()).collect();
        waits.sort_by(f64::total_cmp);
        let mean = if waits.is_empty() {
            0.0
        } else {
            waits.iter().sum::<f64>() / waits.len() as f64
        };
        let (busy, cap) = run.usage.iter().fold((0.0, 0.0), |(b, c), u| {
            let d = u.end_s - u.start_s;
            (
                b + u.busy_instances as f64 * d,
                c + u.capacity_instances as f64 * d,
            )
        });
        let util = if cap > 0.0 { busy / cap } else { 0.0 };
        out.push_str(&format!(
            "{:<18} {:>10} {:>12.0} {:>12.0} {:>11.1}%\n",
            run.policy,
            done,
            mean,
            percentile(&waits, 0.95),
            util * 100.0
        ));
    }
    out
}
