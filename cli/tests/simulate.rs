//! `trainyard simulate` as a user runs it: the real binary on a small trace written to a
//! temporary directory.

mod support;

use std::process::Command;

use support::BIN;

/// `trainyard simulate` of `trace` (JSONL) on the `small` scenario under FIFO, with `args`.
fn simulate(trace: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args([
            "simulate",
            "--format",
            "jsonl",
            "--scenario",
            "small",
            "--policies",
            "fifo",
        ])
        .args(args)
        .arg("--trace")
        .arg(trace)
        .output()
        .expect("run trainyard simulate")
}

/// A replay of part of a trace, sped up, says so on stdout and in the report it writes: its
/// figures must not read as those of the trace as recorded.
#[test]
fn a_replay_of_part_of_a_trace_sped_up_says_so_in_its_report() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let trace = tmp.path().join("trace.jsonl");
    let lines: Vec<String> = (0..6)
        .map(|i| {
            format!(
                r#"{{"id":"j{i}","submit_s":{},"duration_s":60,"instances":1,"share":"vision"}}"#,
                i * 100
            )
        })
        .collect();
    std::fs::write(&trace, lines.join("\n")).expect("trace");
    let out = tmp.path().join("report");
    let out_dir = out.to_str().expect("utf-8 path");
    let run = simulate(
        &trace,
        &[
            "--limit-jobs",
            "4",
            "--arrival-rate",
            "2.5",
            "--out",
            out_dir,
        ],
    );
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let report = std::fs::read_to_string(out.join("report.md")).expect("report.md");
    for said in [
        "only the first 4 jobs by submission (--limit-jobs)",
        "arrivals 2.5 times as fast as the trace's: submission times divided by 2.5 (--arrival-rate)",
    ] {
        assert!(
            stdout.contains(&format!("mapping: {said}")),
            "{said}\n{stdout}"
        );
        assert!(report.contains(&format!("- {said}")), "{said}\n{report}");
    }

    let refused = simulate(&trace, &["--arrival-rate", "0"]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("the arrival rate must be a positive number, got 0"),
        "{stderr}"
    );
}

/// A file that cannot be read is named with why, once: the cause is not repeated after a
/// message that already ends with it.
#[test]
fn a_missing_file_is_reported_with_its_cause_once() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let missing = tmp.path().join("no-such-trace.jsonl");
    let run = simulate(&missing, &[]);
    assert!(!run.status.success());
    let stderr = String::from_utf8_lossy(&run.stderr);
    let line = stderr
        .lines()
        .find(|l| l.starts_with("error:"))
        .expect("an error line");
    assert!(line.contains("cannot read trace"), "{stderr}");
    assert!(line.contains("no-such-trace.jsonl"), "{stderr}");
    assert_eq!(line.matches("(os error 2)").count(), 1, "{stderr}");
}
