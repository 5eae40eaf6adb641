//! `trainyard access` (show, set or clear the access policies) and `trainyard whoami` (who the
//! server takes you for): clients of Trainyard's own operations under `/trainyard/v1/`.

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
