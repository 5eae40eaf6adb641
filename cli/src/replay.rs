//! `trainyard replay`: plans a recorded scheduling cycle again, from the records `trainyard up`
//! keeps in its data directory, and shows that the decisions are the same, or what other planner
//! settings would have changed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Args;
use serde_json::json;
use trainyard_app::service::scheduling::{DecisionRecord, Replay};
use trainyard_domain::time::UtcTime;
use trainyard_local::SqliteStore;
use trainyard_local::sqlite::DECISIONS_KEPT;
use trainyard_scheduler::{Config as PlannerConfig, Plan};

use crate::{Output, defaults, table};

/// Arguments of `trainyard replay`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    trainyard replay                          the newest cycles recorded\n  \
    trainyard replay 42                       plan cycle 42 again: the same decisions?\n  \
    trainyard replay 42 --config fifo.json    what strict FIFO would have decided instead\n  \
    trainyard replay --all                    every recorded cycle (exits 1 if any differs)\n  \
    trainyard replay --file record.json       a record kept by the AWS stack (in its S3 bucket)\n\n\
    A --config file holds planner settings as JSON; those left out keep the recorded ones:\n  \
    {\"strict_fifo\": true, \"min_wait_before_in_share_preemption_s\": 900}")]
pub struct ReplayArgs {
    /// The cycle: its number (as listed) or its id. Without one, lists the newest cycles.
    pub cycle: Option<String>,
    /// Replay every recorded cycle (the newest 10,000 are kept).
    #[arg(long, conflicts_with = "cycle")]
    pub all: bool,
    /// Replay the record in this file instead: one the AWS stack kept
    /// (`aws s3 cp s3://BUCKET/decisions/DAY/TIME-ID.json .`; docs/functions.md).
    #[arg(long, value_name = "RECORD", conflicts_with_all = ["cycle", "all"])]
    pub file: Option<PathBuf>,
    /// Planner settings to replay under instead of the recorded ones (JSON).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The data directory of `trainyard up` (it may be running).
    #[arg(long, default_value = defaults::DATA_DIR)]
    pub data_dir: PathBuf,
    /// How many cycles a listing shows.
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

/// `trainyard replay`.
pub fn run(args: &ReplayArgs) -> anyhow::Result<()> {
    let overrides = args.config.as_deref().map(read_overrides).transpose()?;
    if let Some(file) = &args.file {
        let record = read_record(file)?;
        let label = format!("The cycle in {}", file.display());
        let cycle = json!(file.display().to_string());
        return replay_one((&label, cycle), &record, overrides.as_ref(), args);
    }
    let store = open(&args.data_dir)?;
    if args.all {
        return replay_all(&store, overrides.as_ref());
    }
    let Some(cycle) = &args.cycle else {
        return list(&store, args.limit, args.output);
    };
    let Some((seq, record)) = store.decision(cycle)? else {
        bail!(
            "no cycle {cycle} is recorded in {} (`trainyard replay` lists them)",
            args.data_dir.display()
        );
    };
    replay_one(
        (&format!("Cycle {seq}"), json!(seq)),
        &record,
        overrides.as_ref(),
        args,
    )
}

/// Plans `record` again (under `overrides`, if any) and shows how that compares; fails when,
/// under the recorded settings, it differs. `label` names the cycle in the table, `cycle` in
/// JSON (its number, or the file it came from).
fn replay_one(
    (label, cycle): (&str, serde_json::Value),
    record: &DecisionRecord,
    overrides: Option<&serde_json::Map<String, serde_json::Value>>,
    args: &ReplayArgs,
) -> anyhow::Result<()> {
    let planner = overrides
        .map(|o| with_overrides(&record.planner, o))
        .transpose()?;
    let replay = record.replay(planner.as_ref());
    match args.output {
        Output::Json => crate::outln!(
            "{}",
            json!({
                "cycle": cycle, "id": record.id, "atMs": record.at_ms, "intact": record.intact(),
                "same": replay.same, "recorded": record.plan, "replayed": replay.plan,
            })
        )?,
        Output::Table => crate::out!(
            "{}",
            describe(label, record, &replay, args.config.as_deref())
        )?,
    }
    if args.config.is_none() && !(replay.same && record.intact()) {
        bail!("{label} did not replay to its recorded decisions");
    }
    Ok(())
}

/// A decision record from a JSON file.
fn read_record(path: &Path) -> anyhow::Result<DecisionRecord> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text)
        .with_context(|| format!("{}: not a Trainyard decision record", path.display()))
}

/// Opens the store of `data_dir` (which must exist: replay creates nothing).
fn open(data_dir: &Path) -> anyhow::Result<SqliteStore> {
    let path = data_dir.join(crate::up::DB_FILE);
    if !path.exists() {
        bail!(
            "no Trainyard data in {} (run `trainyard up` there first, or pass --data-dir)",
            data_dir.display()
        );
    }
    SqliteStore::open(&path).with_context(|| format!("opening {}", path.display()))
}

/// The JSON object of a `--config` file.
fn read_overrides(path: &Path) -> anyhow::Result<serde_json::Map<String, serde_json::Value>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    match serde_json::from_str(&text) {
        Ok(serde_json::Value::Object(map)) => Ok(map),
        Ok(_) => bail!("{}: planner settings are a JSON object", path.display()),
        Err(e) => bail!("{}: not JSON: {e}", path.display()),
    }
}

/// `recorded` with the settings `overrides` names replaced.
fn with_overrides(
    recorded: &PlannerConfig,
    overrides: &serde_json::Map<String, serde_json::Value>,
) -> anyhow::Result<PlannerConfig> {
    let mut merged = match serde_json::to_value(recorded)? {
        serde_json::Value::Object(map) => map,
        _ => serde_json::Map::new(),
    };
    merged.extend(overrides.clone());
    serde_json::from_value(serde_json::Value::Object(merged))
        .context("the planner settings in --config (known: strict_fifo, default_runtime_s, min_runtime_before_preemption_s, min_wait_before_in_share_preemption_s, min_priority_for_in_share_preemption, min_wait_before_reclaim_s, min_runtime_after_preemption_s, restart_overhead_s, checkpoint_alignment_s)")
}

fn list(store: &SqliteStore, limit: usize, output: Output) -> anyhow::Result<()> {
    let rows = store.decisions(limit)?;
    if output == Output::Json {
        let rows: Vec<_> = rows
            .iter()
            .map(|r| json!({"cycle": r.seq, "id": r.id, "atMs": r.at_ms, "dispatches": r.dispatches, "preemptions": r.preemptions, "waiting": r.skips}))
            .collect();
        return crate::outln!("{}", serde_json::Value::Array(rows));
    }
    if rows.is_empty() {
        return crate::outln!("No cycles recorded yet: `trainyard up` records each cycle it runs.");
    }
    let header = [
        "CYCLE",
        "AT (UTC)",
        "DISPATCHES",
        "PREEMPTIONS",
        "WAITING",
        "ID",
    ];
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.seq.to_string(),
                table::timestamp(Some(r.at_ms)),
                r.dispatches.to_string(),
                r.preemptions.to_string(),
                r.skips.to_string(),
                r.id.clone(),
            ]
        })
        .collect();
    crate::out!("{}", table::render(&header, &body))
}

/// Replays every stored cycle under the recorded settings (or `overrides`); fails if any
/// differs from its record.
fn replay_all(
    store: &SqliteStore,
    overrides: Option<&serde_json::Map<String, serde_json::Value>>,
) -> anyhow::Result<()> {
    let rows = store.decisions(usize::try_from(DECISIONS_KEPT).unwrap_or(usize::MAX))?;
    let mut differ = Vec::new();
    for row in rows.iter().rev() {
        let Some((seq, record)) = store.decision(&row.seq.to_string())? else {
            continue; // dropped by retention since the listing
        };
        let planner = overrides
            .map(|o| with_overrides(&record.planner, o))
            .transpose()?;
        if !(record.replay(planner.as_ref()).same && record.intact()) {
            differ.push(seq);
        }
    }
    if differ.is_empty() {
        return crate::outln!(
            "{} cycles replayed: every one to its recorded decisions",
            rows.len()
        );
    }
    let list: Vec<String> = differ.iter().map(i64::to_string).collect();
    crate::outln!(
        "{} cycles replayed; {} differ from their records: {}",
        rows.len(),
        differ.len(),
        list.join(", ")
    )?;
    if overrides.is_some() {
        return Ok(());
    }
    bail!(
        "{} recorded cycles did not replay to their decisions",
        differ.len()
    )
}

/// One replayed cycle for people: what it planned over, what it decided and how that ended,
/// then the replay's verdict and, when it differs, how.
fn describe(
    label: &str,
    record: &DecisionRecord,
    replay: &Replay,
    config: Option<&Path>,
) -> String {
    let snapshot = &record.snapshot;
    let mut out = format!(
        "{label} ({}) planned at {} UTC, in a {}\n",
        record.id,
        UtcTime(record.at_ms),
        record.trigger
    );
    out.push_str(&format!(
        "Snapshot sha256:{}{}: {} environments, {} queues, {} jobs holding capacity, {} waiting jobs planned\n",
        &record.snapshot_digest[..record.snapshot_digest.len().min(16)],
        if record.intact() { "" } else { " (DOES NOT MATCH ITS DIGEST)" },
        snapshot.environments.len(),
        snapshot.queues.len(),
        snapshot.running.len(),
        snapshot.pending.len(),
    ));
    out.push_str(&format!(
        "Decided: {} dispatches, {} preemptions, {} waiting ({} kept in the record)\n",
        record.plan.dispatches.len(),
        record.plan.preemptions.len(),
        record.skips_total,
        record.plan.skips.len(),
    ));
    let o = &record.outcome;
    out.push_str(&format!(
        "Outcome: {} dispatched, {} launched, {} conflicts, {} refused for capacity in use, {} preempted, in {} ms\n",
        o.dispatched,
        o.launched,
        o.conflicts,
        o.over_limit,
        o.preemptions,
        record.duration_us / 1000
    ));
    for d in &record.plan.dispatches {
        out.push_str(&format!(
            "  dispatch  {} ({}) to {}\n",
            d.job_id, d.queue, d.environment
        ));
    }
    for p in &record.plan.preemptions {
        out.push_str(&format!(
            "  preempt   {} for {}: {}\n",
            p.victim_job_id, p.for_job_id, p.reason
        ));
    }
    for s in &record.plan.skips {
        out.push_str(&format!("  wait      {}: {}\n", s.job_id, s.reason));
    }
    let under = config.map_or("the recorded settings".to_owned(), |p| {
        p.display().to_string()
    });
    if replay.same {
        out.push_str(&format!("\nReplayed under {under}: the same decisions.\n"));
    } else {
        out.push_str(&format!("\nReplayed under {under}: different decisions.\n"));
        out.push_str(&diff(&record.plan, &replay.plan));
    }
    out
}

/// How `replayed` differs from `recorded`: `-` what only the record has, `+` what only the
/// replay has, `~` a job that waits in both for different reasons.
fn diff(recorded: &Plan, replayed: &Plan) -> String {
    let mut out = String::new();
    let dispatches = |p: &Plan| -> Vec<String> {
        p.dispatches
            .iter()
            .map(|d| format!("dispatch {} ({}) to {}", d.job_id, d.queue, d.environment))
            .collect()
    };
    let preemptions = |p: &Plan| -> Vec<String> {
        p.preemptions
            .iter()
            .map(|x| format!("preempt {} for {}", x.victim_job_id, x.for_job_id))
            .collect()
    };
    for lines in [
        (dispatches(recorded), dispatches(replayed)),
        (preemptions(recorded), preemptions(replayed)),
    ] {
        let (before, after) = lines;
        for line in before.iter().filter(|l| !after.contains(l)) {
            out.push_str(&format!("  - {line}\n"));
        }
        for line in after.iter().filter(|l| !before.contains(l)) {
            out.push_str(&format!("  + {line}\n"));
        }
    }
    let reasons = |p: &Plan| -> BTreeMap<String, String> {
        p.skips
            .iter()
            .map(|s| (s.job_id.to_string(), s.reason.to_string()))
            .collect()
    };
    let (before, after) = (reasons(recorded), reasons(replayed));
    for (job, reason) in &before {
        match after.get(job) {
            Some(now) if now != reason => {
                out.push_str(&format!("  ~ {job} waits: {reason}\n      now: {now}\n"));
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use clap::Parser;
    use trainyard_scheduler::{Dispatch, Snapshot, plan_cycle};

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ReplayArgs,
    }

    fn args(line: &[&str]) -> ReplayArgs {
        Cli::parse_from(std::iter::once("replay").chain(line.iter().copied())).args
    }

    /// A record as the AWS stack keeps it, in a file of its own.
    fn write(dir: &Path, name: &str, record: &DecisionRecord) -> String {
        let path = dir.join(name);
        std::fs::write(&path, serde_json::to_vec(record).unwrap()).unwrap();
        path.display().to_string()
    }

    #[test]
    fn a_record_in_a_file_replays_and_one_altered_since_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let snapshot = Snapshot::default();
        let planner = PlannerConfig::default();
        let plan = plan_cycle(&snapshot, 1_000, &planner);
        let record = DecisionRecord::new("c-1".into(), 1_000, &snapshot, &planner, &plan);
        let kept = write(dir.path(), "kept.json", &record);
        assert!(run(&args(&["--file", &kept])).is_ok());

        let mut other_plan = record.clone();
        other_plan.plan.dispatches.push(Dispatch {
            job_id: "j".into(),
            queue: "q".into(),
            environment: "e".into(),
            instances: Default::default(),
        });
        let altered = write(dir.path(), "altered.json", &other_plan);
        let error = run(&args(&["--file", &altered])).unwrap_err();
        assert!(error.to_string().contains("did not replay"), "{error}");

        let not_a_record = dir.path().join("other.json");
        std::fs::write(&not_a_record, b"{\"hello\": 1}").unwrap();
        let error = run(&args(&["--file", &not_a_record.display().to_string()])).unwrap_err();
        assert!(
            format!("{error:#}").contains("not a Trainyard decision record"),
            "{error:#}"
        );
        // A file and a stored cycle at once is a usage error.
        assert!(Cli::try_parse_from(["replay", "7", "--file", &kept]).is_err());
    }
}
