//! `trainyard why`: why a job waits, from the API's `ExplainServiceJob`.

use serde_json::{Value, json};

use crate::client::Client;
use crate::commands::{WhyArgs, job_id_of, print_json, text};
use crate::{Output, table};

/// `trainyard why`.
pub fn why(args: &WhyArgs) -> anyhow::Result<()> {
    let client = Client::new(&args.client.endpoint);
    let id = job_id_of(&client, &args.job)?;
    let explained = client.call_trainyard("explainservicejob", &json!({ "jobId": id }))?;
    match args.client.output {
        Output::Json => print_json(&explained),
        Output::Table => crate::out!("{}", render(&explained)),
    }
}

/// The explanation for people: the job and its reason, then what holds it back, most
/// fundamental first, then its history.
fn render(explained: &Value) -> String {
    let time = |v: Option<&Value>| table::timestamp(v.and_then(Value::as_i64));
    let status = text(explained, "status");
    let mut out = format!(
        "Job {} ({}) is {status} in queue {}",
        text(explained, "jobId"),
        text(explained, "jobName"),
        text(explained, "jobQueue"),
    );
    if let Some(position) = explained.get("position").and_then(Value::as_u64) {
        out.push_str(&format!(", number {position} in its line"));
    }
    if let Some(rank) = explained.get("shareRank") {
        out.push_str(&format!(
            " (its share is served {} of {} with waiting jobs)",
            text(rank, "rank"),
            text(rank, "of")
        ));
    }
    out.push('\n');
    let reason = text(explained, "statusReason");
    if !reason.is_empty() {
        out.push_str(&format!("Reason: {reason}\n"));
    }
    if let Some(at) = explained.get("asOf") {
        out.push_str(&format!("As of the cycle at {} UTC\n", time(Some(at))));
    }
    if let Some(estimate) = explained.get("estimate") {
        out.push_str(&start_estimate(estimate));
    }
    let blockers = explained
        .get("blockers")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    if !blockers.is_empty() {
        out.push_str("\nWhat holds it back, most fundamental first:\n");
        for (i, b) in blockers.iter().enumerate() {
            let mut line = format!(
                "  {}. {:<10} {}: {}",
                i + 1,
                text(b, "kind"),
                text(b, "code"),
                text(b, "message")
            );
            let about = text(b, "aboutJobId");
            if !about.is_empty() {
                line.push_str(&format!(" (job {about}, first in its line)"));
            }
            if let Some(since) = b.get("since") {
                line.push_str(&format!(", since {} UTC", time(Some(since))));
            }
            out.push_str(&line);
            out.push('\n');
        }
    } else if status == "RUNNABLE" {
        out.push_str("\nNo cycle has planned it yet: it is considered in the next one.\n");
    }
    let history = explained
        .get("history")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    if !history.is_empty() {
        out.push_str("\nHistory (UTC):\n");
        for entry in history {
            let mut line = format!("  {}  {}", time(entry.get("at")), text(entry, "event"));
            let reason = text(entry, "reason");
            if !reason.is_empty() {
                line.push_str(&format!(": {reason}"));
            }
            out.push_str(&line);
            out.push('\n');
        }
    }
    out
}

/// When the job is expected to start, with the chances of starting within 1, 6 and 24 hours
/// and how well such estimates have held.
fn start_estimate(estimate: &Value) -> String {
    let when = |key: &str| match estimate.get(key).and_then(Value::as_i64) {
        Some(at) => format!("{} UTC", table::timestamp(Some(at))),
        None => "beyond the 7-day horizon".into(),
    };
    let chances: Vec<String> = estimate
        .get("within")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .zip(["1 h", "6 h", "24 h"])
        .map(|(p, h)| format!("{:.0}% within {h}", p.as_f64().unwrap_or(0.0) * 100.0))
        .collect();
    let held = match estimate.get("coverage").filter(|c| !c.is_null()) {
        Some(c) => format!(
            "calibrated: of the last {} such estimates, {:.0}% of jobs started by the p50 and {:.0}% by the p90",
            text(c, "outcomes"),
            c.get("p50").and_then(Value::as_f64).unwrap_or(0.0) * 100.0,
            c.get("p90").and_then(Value::as_f64).unwrap_or(0.0) * 100.0
        ),
        None => "uncalibrated: too few starts seen yet to say how well estimates hold".into(),
    };
    format!(
        "Expected start: p50 {}, p90 {}; {}\n  ({held})\n",
        when("p50Ms"),
        when("p90Ms"),
        chances.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_explanation_reads_blockers_in_order_then_history() {
        let explained = json!({
            "jobId": "j1", "jobName": "bert", "jobQueue": "research", "status": "RUNNABLE",
            "statusReason": "PRIORITY:JOBS_AHEAD - at least 3 jobs wait ahead of it",
            "position": 4, "shareRank": {"rank": 2, "of": 3}, "asOf": 60_000,
            "blockers": [
                {"kind": "CONTENTION", "code": "PRIORITY:JOBS_AHEAD", "message": "3 jobs wait ahead of it"},
                {"kind": "CONTENTION", "code": "CAPACITY:SERVICE_ENVIRONMENT_FULL",
                 "message": "needs 2 NUM_INSTANCES, 0 free", "aboutJobId": "j0", "since": 30_000},
            ],
            "history": [{"at": 0, "event": "submitted"}],
        });
        let text = render(&explained);
        let first = text.find("1. CONTENTION PRIORITY:JOBS_AHEAD").expect(&text);
        let second = text
            .find("2. CONTENTION CAPACITY:SERVICE_ENVIRONMENT_FULL")
            .expect(&text);
        assert!(first < second, "{text}");
        assert!(
            text.contains("number 4 in its line (its share is served 2 of 3"),
            "{text}"
        );
        assert!(
            text.contains("(job j0, first in its line), since 1970-01-01 00:00:30 UTC"),
            "{text}"
        );
        assert!(text.contains("1970-01-01 00:00:00  submitted"), "{text}");
        assert!(!text.contains("Expected start"), "no estimate, none shown");
    }

    #[test]
    fn an_estimate_reads_as_times_chances_and_how_well_estimates_held() {
        let explained = json!({
            "jobId": "j1", "jobName": "bert", "jobQueue": "research", "status": "RUNNABLE",
            "estimate": {"atMs": 0, "p50Ms": 3_600_000, "p90Ms": null, "within": [0.25, 0.5, 0.75],
                         "rawMs": [3_600_000, null],
                         "coverage": {"p50": 0.52, "p90": 0.91, "outcomes": 1000}},
        });
        let text = render(&explained);
        assert!(
            text.contains("Expected start: p50 1970-01-01 01:00:00 UTC, p90 beyond the 7-day horizon; 25% within 1 h, 50% within 6 h, 75% within 24 h"),
            "{text}"
        );
        assert!(
            text.contains("52% of jobs started by the p50 and 91% by the p90"),
            "{text}"
        );
    }
}
