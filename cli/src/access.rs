//! `trainyard access` (show, set or clear the access policies), `trainyard whoami` (who the
//! server takes you for) and `trainyard audit` (the audit trail): clients of Trainyard's own
//! operations under `/trainyard/v1/`.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use serde_json::{Value, json};

use crate::client::Client;
use crate::{ClientArgs, Output};

/// `trainyard access …`.
#[derive(Debug, Args)]
pub struct AccessArgs {
    #[command(subcommand)]
    command: AccessCommand,
}

#[derive(Debug, Subcommand)]
enum AccessCommand {
    /// Print the access policies in force (Cedar), who wrote them and when.
    Show(ClientArgs),
    /// Replace the access policies with a file of Cedar policies (checked against Trainyard's
    /// schema first: an error names its line). Once any policy is stored, whatever no policy
    /// permits is refused.
    ///
    /// Example: trainyard access set docs/examples/access-policies.cedar
    Set {
        /// The Cedar file.
        file: PathBuf,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Delete the access policies: every caller may do everything again.
    Clear(ClientArgs),
}

/// `trainyard access`.
pub fn access(args: &AccessArgs) -> anyhow::Result<()> {
    match &args.command {
        AccessCommand::Show(client) => show(client),
        AccessCommand::Set { file, client } => set(file, client),
        AccessCommand::Clear(client) => {
            Client::new(&client.endpoint).call_trainyard("deleteaccesspolicies", &json!({}))?;
            crate::outln!("access policies deleted: every caller may do everything")
        }
    }
}

fn show(args: &ClientArgs) -> anyhow::Result<()> {
    let stored = Client::new(&args.endpoint).call_trainyard("getaccesspolicies", &json!({}))?;
    if args.output == Output::Json {
        return crate::outln!("{}", serde_json::to_string_pretty(&stored)?);
    }
    match stored.get("policies").and_then(Value::as_str) {
        None => crate::outln!("no access policies: every caller may do everything"),
        Some(text) => {
            let by = stored
                .get("updatedBy")
                .and_then(Value::as_str)
                .unwrap_or("?");
            let at = stored.get("updatedAt").and_then(Value::as_i64);
            crate::outln!(
                "// written by {by} at {}\n{text}",
                crate::table::timestamp(at)
            )
        }
    }
}

fn set(file: &PathBuf, args: &ClientArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("reading the policies in {}", file.display()))?;
    let answer = Client::new(&args.endpoint)
        .call_trainyard("putaccesspolicies", &json!({ "policies": text }))
        .with_context(|| format!("{} was not stored", file.display()))?;
    let count = answer.get("policies").and_then(Value::as_u64).unwrap_or(0);
    crate::outln!("stored {count} access policies from {}", file.display())
}

/// `trainyard whoami`.
pub fn whoami(args: &ClientArgs) -> anyhow::Result<()> {
    let me = Client::new(&args.endpoint).call_trainyard("whoami", &json!({}))?;
    match args.output {
        Output::Json => crate::outln!("{me}"),
        Output::Table => crate::outln!("{}", me.get("arn").and_then(Value::as_str).unwrap_or("?")),
    }
}

/// `trainyard audit`.
#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Only calls in the last DURATION (`90s`, `30m`, `12h`, `7d`); default: every record kept.
    #[arg(long, value_parser = parse_age)]
    since: Option<i64>,
    /// Only this caller's calls (its ARN, as `trainyard whoami` prints it).
    #[arg(long)]
    principal: Option<String>,
    /// Only this action's calls (`SubmitServiceJob`, `DeleteJobQueue`, ...).
    #[arg(long)]
    action: Option<String>,
    /// Only refused calls.
    #[arg(long)]
    denied: bool,
    /// At most this many records, newest first.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    limit: u32,
    #[command(flatten)]
    client: ClientArgs,
}

/// A duration such as `90s`, `30m`, `12h` or `7d`, in milliseconds.
fn parse_age(text: &str) -> Result<i64, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: i64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration such as 90s, 30m, 12h or 7d"))?;
    let unit_ms = match unit {
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(format!("{text:?}: the unit must be s, m, h or d")),
    };
    n.checked_mul(unit_ms)
        .ok_or_else(|| format!("{text:?} is too long"))
}

/// `trainyard audit`: the calls that asked to change something, newest first.
pub fn audit(args: &AuditArgs) -> anyhow::Result<()> {
    let client = Client::new(&args.client.endpoint);
    let mut filter = json!({ "deniedOnly": args.denied });
    if let Some(age) = args.since {
        let now = crate::commands::now_ms();
        filter["startTime"] = json!(now.saturating_sub(age));
    }
    if let Some(principal) = &args.principal {
        filter["principal"] = json!(principal);
    }
    if let Some(action) = &args.action {
        filter["action"] = json!(action);
    }
    let wanted = args.limit as usize;
    let mut records: Vec<Value> = Vec::new();
    loop {
        let mut body = filter.clone();
        body["maxResults"] = json!((wanted - records.len()).min(100));
        let page = client.call_trainyard("listauditrecords", &body)?;
        records.extend(
            page.get("auditRecords")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
        );
        match page.get("nextToken").and_then(Value::as_str) {
            Some(token) if records.len() < wanted => filter["nextToken"] = json!(token),
            _ => break,
        }
    }
    if args.client.output == Output::Json {
        return crate::outln!("{}", serde_json::to_string_pretty(&records)?);
    }
    if records.is_empty() {
        return crate::outln!("no audit records match");
    }
    let field = |r: &Value, k: &str| r.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    let rows: Vec<Vec<String>> = records
        .iter()
        .map(|r| {
            let allowed = r.get("allowed").and_then(Value::as_bool).unwrap_or(false);
            vec![
                crate::table::timestamp(r.get("atMs").and_then(Value::as_i64)),
                field(r, "principal"),
                field(r, "action"),
                field(r, "resource"),
                if allowed { "allowed" } else { "DENIED" }.to_owned(),
                field(r, "decidedBy"),
                field(r, "outcome"),
            ]
        })
        .collect();
    crate::out!(
        "{}",
        crate::table::render(
            &[
                "TIME",
                "PRINCIPAL",
                "ACTION",
                "RESOURCE",
                "DECISION",
                "DECIDED BY",
                "OUTCOME"
            ],
            &rows,
        )
    )
}

#[cfg(test)]
mod tests {
    use super::parse_age;

    #[test]
    fn ages_take_a_number_and_a_unit() {
        assert_eq!(parse_age("90s"), Ok(90_000));
        assert_eq!(parse_age("30m"), Ok(1_800_000));
        assert_eq!(parse_age("12h"), Ok(43_200_000));
        assert_eq!(parse_age("7d"), Ok(604_800_000));
        for bad in ["", "h", "7", "7w", "-1h", "1.5h"] {
            assert!(parse_age(bad).is_err(), "{bad}");
        }
    }
}
