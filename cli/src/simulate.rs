//! `trainyard simulate`: replays a GPU-cluster trace through Trainyard's own use-cases, planner
//! and SageMaker emulator over virtual time, once per policy, and prints (or writes with
//! `--out`) how the policies compare. Prints the seed and every parameter first.
//!
//! With `--faults`, runs seeded fault injection instead (`trainyard_sim::faults`): `--seed N`
//! prints one run in full; `--seeds A..B` runs each seed and prints one line per seed, then the
//! full output of the first failing one with the command that replays it.
//!
//! Needs `trainyard-sim.workspace = true` in this crate's `Cargo.toml`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use trainyard_sim::driver::{Progress, run_with_estimates};
use trainyard_sim::eta::EtaSettings;
use trainyard_sim::policies::Policy;
use trainyard_sim::record::RunRecord;
use trainyard_sim::scenario::Scenario;
use trainyard_sim::trace::{Format, load};

/// Wall time between progress lines.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// `trainyard simulate`.
#[derive(Debug, Clone, Args)]
pub struct SimulateArgs {
    /// The trace file (not used with --faults, which generates its workload from the seed).
    #[arg(long, required_unless_present = "faults")]
    trace: Option<PathBuf>,
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
    /// Replays the jobs arriving X times as fast as the trace has them (each submission time,
    /// from the first, divided by X; applied after --limit-jobs): the same work under a heavier
    /// load.
    #[arg(long, value_name = "X")]
    arrival_rate: Option<f64>,
    /// Makes the trace's N largest shares (by offered load) the teams, folding the rest into
    /// `other` — for traces whose teams the scenario does not list.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    teams: Option<u64>,
    /// Seeded fault injection with invariants at every step (with --seed N or --seeds A..B).
    #[arg(long)]
    faults: bool,
    /// With --faults: a range of seeds, `A..B` (B excluded).
    #[arg(long, requires = "faults", conflicts_with = "seed")]
    seeds: Option<String>,
    /// Makes a start-time estimate for every waiting job at its submission and every 15
    /// virtual minutes, scores each against the start that followed, and reports the scores
    /// (eta-POLICY.md with --out) and each job's estimate at submission (eta_p50_s, eta_p90_s).
    #[arg(long, conflicts_with = "faults")]
    eta: bool,
    /// With --eta: rollouts per forecast.
    #[arg(long, requires = "eta", default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=1024))]
    eta_rollouts: u32,
    /// With --eta: how far ahead rollouts look, in days (default: the hosts' horizon); a job
    /// not started by then is "beyond the horizon".
    #[arg(long, requires = "eta", value_parser = clap::value_parser!(u64).range(1..=90))]
    eta_horizon_days: Option<u64>,
}

/// Parses `A..B` (B excluded, A < B).
fn seed_range(text: &str) -> anyhow::Result<std::ops::Range<u64>> {
    let parsed = text
        .split_once("..")
        .and_then(|(a, b)| Some((a.trim().parse::<u64>().ok()?, b.trim().parse::<u64>().ok()?)));
    match parsed {
        Some((a, b)) if a < b => Ok(a..b),
        _ => bail!("--seeds must be A..B with A < B, got {text:?}"),
    }
}

/// `--faults`: one seed in full, or a range with one line per seed.
fn run_faults(args: &SimulateArgs) -> anyhow::Result<()> {
    use trainyard_sim::faults::{Verdict, replay_command, run_seed};
    let seeds = match (&args.seeds, args.seed) {
        (Some(range), _) => seed_range(range)?,
        (None, Some(seed)) => seed..seed + 1,
        (None, None) => 0..1,
    };
    if seeds.end - seeds.start == 1 {
        let run = run_seed(seeds.start);
        print!("{}", run.output);
        if !run.passed() {
            bail!("seed {} violated an invariant", run.seed);
        }
        return Ok(());
    }
    let total = seeds.end - seeds.start;
    let mut failed = Vec::new();
    for seed in seeds {
        let run = run_seed(seed);
        match &run.verdict {
            Verdict::Passed => println!("seed {seed}: passed"),
            Verdict::Violated { invariant, detail } => {
                println!("seed {seed}: VIOLATED {invariant}: {detail}");
                println!("  replay: {}", replay_command(seed));
                failed.push(run);
            }
        }
    }
    println!("{} of {total} seeds passed", total - failed.len() as u64);
    if let Some(first) = failed.first() {
        println!("\n--- seed {} ---\n{}", first.seed, first.output);
        bail!("{} seeds violated an invariant", failed.len());
    }
    Ok(())
}

/// Runs the command.
pub fn run_simulate(args: &SimulateArgs) -> anyhow::Result<()> {
    if args.faults {
        return run_faults(args);
    }
    let Some(trace_path) = &args.trace else {
        bail!("--trace is required (unless --faults)");
    };
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
    let mut trace = load(trace_path, format)?;
    if let Some(limit) = args.limit_jobs {
        trace.jobs.truncate(limit);
    }
    if let Some(rate) = args.arrival_rate {
        trace = trace.with_arrival_rate(rate)?;
    }
    if let Some(n) = args.teams {
        scenario = scenario.with_largest_teams(&trace, usize::try_from(n)?, "other");
        scenario.validate()?;
    }
    println!("seed: {}", scenario.seed);
    println!(
        "trace: {} ({}, {} jobs, {} rows skipped)",
        trace_path.display(),
        format.name(),
        trace.jobs.len(),
        trace.skipped.len()
    );
    // What was done to the trace, in the report as well as here: a replay of part of it, or of
    // it sped up, must not read as one of the trace as recorded.
    let mut mappings = format.mappings();
    if let Some(limit) = args.limit_jobs {
        mappings.push(format!(
            "only the first {limit} jobs by submission (--limit-jobs)"
        ));
    }
    if let Some(rate) = args.arrival_rate {
        mappings.push(format!(
            "arrivals {rate} times as fast as the trace's: submission times divided by {rate} (--arrival-rate)"
        ));
    }
    for mapping in &mappings {
        println!("mapping: {mapping}");
    }
    for (k, v) in scenario.parameters() {
        println!("{k}: {v}");
    }
    let eta = args.eta.then(|| {
        let settings = EtaSettings::default();
        EtaSettings {
            options: trainyard_forecast::Options {
                rollouts: args.eta_rollouts,
                seed: scenario.seed,
                horizon_s: args
                    .eta_horizon_days
                    .map_or(settings.options.horizon_s, |days| days * 86_400),
                ..settings.options.clone()
            },
            ..settings
        }
    });
    if let Some(eta) = &eta {
        println!(
            "estimates: {} rollouts, every {} s while a job waits, horizon {} h, up to {} jobs a line",
            eta.options.rollouts,
            eta.every_s,
            eta.options.horizon_s / 3_600,
            eta.per_line
        );
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
        let record = run_with_estimates(&trace, &scenario, policy, eta.as_ref(), &mut report)
            .with_context(|| format!("policy {}", policy.name()))?;
        if let Some(run) = record.eta.as_ref().filter(|_| args.out.is_none()) {
            print!("{}", trainyard_sim::eta::markdown(policy.name(), run));
        }
        let work = record.work;
        eprintln!(
            "{}: replayed in {:.1} s ({} instants, {} cycles, {} of them dispatching)",
            policy.name(),
            started.elapsed().as_secs_f64(),
            work.passes,
            work.cycles,
            work.dispatching_cycles
        );
        runs.push(record);
    }
    let summaries = trainyard_sim::report::summaries(&runs)?;
    for warning in trainyard_sim::report::warnings(&summaries) {
        eprintln!("warning: {}", warning.replace('`', ""));
    }
    match &args.out {
        Some(dir) => {
            let context = trainyard_sim::report::ReportContext {
                trace: trace_path.display().to_string(),
                scenario: scenario.name.clone(),
                seed: scenario.seed,
                mappings,
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
