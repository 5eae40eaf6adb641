//! `trainyard`: run the control plane locally (`trainyard up`) and work with jobs and queues.
//!
//! Every command but `up` is a client of the same HTTP API that the AWS CLI, boto3 and the
//! SageMaker SDK use (AWS Batch's service-job API), so what works here works against a
//! deployment too.
//!
//! # Layout
//!
//! - [`up`]: local mode, the composition root: SQLite store, service, router, emulated
//!   SageMaker, scheduling loop, signals, and the demo setup created on first start.
//! - [`emulator`]: `trainyard emulator`, the SageMaker emulator's HTTP face on its own.
//! - [`routes`]: `/metrics` and `/trainyard/events` beside the Batch API.
//! - [`serve`]: the HTTP server, with a connection cap and header timeouts.
//! - [`events`]: `trainyard events`, which follows job state changes.
//! - [`client`]: a small blocking client for the Batch API, with errors people can act on.
//! - [`commands`]: `submit`, `jobs`, `describe`, `terminate`, `queues`, `environments`.
//! - [`why`]: `why`, what holds a job back.
//! - [`replay`]: `replay`, a recorded cycle planned again.
//! - [`payload`]: the SageMaker `CreateTrainingJob` request `submit` builds from flags.
//! - [`table`]: plain-text tables and timestamps for people.
//! - [`access`]: `access show|set|clear` and `whoami`, Trainyard's own operations.

/// mimalloc rather than the system allocator: the simulator's cycles allocate and free small
/// snapshots at a high rate, and malloc/free were ~40% of its profile (docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod access;
mod checkpoints;
mod client;
mod commands;
mod emulator;
mod events;
mod payload;
mod process;
mod replay;
mod routes;
mod serve;
mod sigv4;
mod simulate;
mod table;
mod up;
mod why;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// The endpoint commands talk to when neither `--endpoint` nor `TRAINYARD_ENDPOINT` is set.
const DEFAULT_ENDPOINT: &str = "http://127.0.0.1:8080";

/// Trainyard: a scheduler for SageMaker training jobs that speaks AWS Batch's service-job API.
#[derive(Debug, Parser)]
#[command(name = "trainyard", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the whole control plane locally: the Batch API on HTTP, a SQLite store, the
    /// scheduling loop and an emulated SageMaker that jobs run on.
    ///
    /// On first start it creates a demo setup (service environment `local` with 8 instances,
    /// queues `production` > `research` > `sweeps`). Stop it with Ctrl-C or SIGTERM.
    Up(Box<up::UpArgs>),
    /// Serve the SageMaker emulator alone (SageMaker's API for boto3, the AWS CLI, SDKs).
    Emulator(emulator::EmulatorArgs),
    /// Follow job state changes on a running `trainyard up`, one line each.
    Events(events::EventsArgs),
    /// Submit a training job to a queue and print its job id.
    Submit(Box<commands::SubmitArgs>),
    /// List jobs: every queue and every status unless narrowed.
    Jobs(commands::JobsArgs),
    /// Show everything about one job (by id or ARN).
    Describe(commands::DescribeArgs),
    /// Why a job waits: its reason with current figures, everything that holds it back (most
    /// fundamental first), its place in line, and its history.
    Why(commands::WhyArgs),
    /// Plan a recorded scheduling cycle again: the same decisions (a determinism check), or
    /// what other planner settings would have decided. Reads `up`'s data directory.
    Replay(replay::ReplayArgs),
    /// Terminate a job: it moves to FAILED with the given reason.
    Terminate(commands::TerminateArgs),
    /// List job queues, highest priority first, with their waiting and running jobs.
    Queues(ClientArgs),
    /// List service environments with their capacity limits and the instances in use, then each
    /// quota share's limit, use and sharing rule.
    #[command(alias = "pools")]
    Environments(ClientArgs),
    /// Show, set or clear the access policies (Cedar): who may submit where, terminate whose
    /// jobs, change which configuration. See docs/access.md.
    Access(access::AccessArgs),
    /// Print the identity the server takes you for (the ARN access policies judge).
    Whoami(ClientArgs),
    /// List the audit trail: every call that asked to change something, who made it, whether
    /// the access policies allowed it (and which), and how it ended; newest first.
    ///
    /// Example: trainyard audit --since 1h --denied
    Audit(access::AuditArgs),
    /// Replay a GPU-cluster trace through the real scheduler over virtual time and compare
    /// policies (fifo, batch-fair-share, trainyard, quota-shares, static-partition).
    Simulate(Box<simulate::SimulateArgs>),
}

/// How a command reaches the API and prints its results.
#[derive(Debug, Clone, Args)]
pub struct ClientArgs {
    /// Base URL of the Trainyard API. Without a scheme, `http://` is assumed for loopback
    /// addresses and `https://` for anything else (`127.0.0.1:8080` works).
    #[arg(long, env = "TRAINYARD_ENDPOINT", default_value = DEFAULT_ENDPOINT, value_parser = parse_endpoint)]
    endpoint: String,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Output::Table)]
    output: Output,
}

/// Output formats of the client commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Aligned columns for people.
    Table,
    /// JSON for scripts.
    Json,
}

/// Log line formats of `trainyard up`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Defaults for `up` shared with the docs.
pub mod defaults {
    /// Where `up` listens.
    pub const LISTEN: &str = "127.0.0.1:8080";
    /// Where `up` keeps its data.
    pub const DATA_DIR: &str = "./trainyard-data";
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Up(args) => up::run(*args),
        Command::Emulator(args) => emulator::run(args),
        Command::Events(args) => events::run(&args),
        Command::Submit(args) => commands::submit(&args),
        Command::Jobs(args) => commands::jobs(&args),
        Command::Describe(args) => commands::describe(&args),
        Command::Why(args) => why::why(&args),
        Command::Replay(args) => replay::run(&args),
        Command::Terminate(args) => commands::terminate(&args),
        Command::Queues(args) => commands::queues(&args),
        Command::Environments(args) => commands::environments_command(&args),
        Command::Access(args) => access::access(&args),
        Command::Whoami(args) => access::whoami(&args),
        Command::Audit(args) => access::audit(&args),
        Command::Simulate(args) => simulate::run_simulate(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The reader went away (`trainyard jobs | head -1`): it has what it wanted.
        Err(error) if closed_pipe(&error) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {}", message(&error));
            ExitCode::FAILURE
        }
    }
}

/// `error` and its causes, each once: some errors end their message with their cause's (reading
/// a trace or a scenario, parsing a scenario), which `{:#}` would print again.
fn message(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let part = cause.to_string();
        if text.ends_with(&part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    text
}

/// Whether `error` is a write to a pipe whose reader has gone.
fn closed_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Prints to stdout like `print!`, but returns the write's error (a closed pipe above all)
/// instead of panicking; use with `?`.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        write!(std::io::stdout().lock(), $($arg)*)
            .and_then(|()| std::io::stdout().lock().flush())
            .map_err(anyhow::Error::from)
    }};
}

/// Prints a line to stdout like `println!`; see [`out!`].
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)
            .and_then(|()| std::io::stdout().lock().flush())
            .map_err(anyhow::Error::from)
    }};
}

/// Parses `--endpoint`: a URL, or an address without a scheme (`http://` for loopback names
/// and addresses, `https://` otherwise, as a deployed stack serves).
fn parse_endpoint(value: &str) -> Result<String, String> {
    let value = value.trim();
    if value.is_empty() {
        return Err("the endpoint must not be empty".into());
    }
    if let Some((scheme, rest)) = value.split_once("://") {
        if !matches!(scheme, "http" | "https") || rest.is_empty() {
            return Err(format!(
                "{value:?} is not an http:// or https:// URL such as http://127.0.0.1:8080"
            ));
        }
        return Ok(value.trim_end_matches('/').to_owned());
    }
    let host = match value.strip_prefix('[') {
        Some(bracketed) => bracketed.split(']').next().unwrap_or(""),
        None => value.split([':', '/']).next().unwrap_or(""),
    };
    let loopback = host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    let scheme = if loopback { "http" } else { "https" };
    Ok(format!("{scheme}://{}", value.trim_end_matches('/')))
}

/// Parses `--listen`, accepting `localhost:PORT` as well as an IP address and port.
fn parse_listen(value: &str) -> Result<SocketAddr, String> {
    let normalized = value
        .strip_prefix("localhost:")
        .map_or_else(|| value.to_owned(), |port| format!("127.0.0.1:{port}"));
    normalized
        .parse()
        .map_err(|_| format!("{value:?} is not an address and port such as 127.0.0.1:8080"))
}

/// Parses a data directory argument (any path).
fn parse_dir(value: &str) -> Result<PathBuf, String> {
    if value.is_empty() {
        return Err("the data directory must not be empty".into());
    }
    Ok(PathBuf::from(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn listen_addresses_accept_ips_ports_and_localhost() {
        let cases = [
            ("127.0.0.1:8080", Some("127.0.0.1:8080")),
            ("127.0.0.1:0", Some("127.0.0.1:0")),
            ("localhost:9000", Some("127.0.0.1:9000")),
            ("[::1]:8080", Some("[::1]:8080")),
            ("8080", None),
            ("example.com:80", None),
        ];
        for (input, expected) in cases {
            let got = parse_listen(input).ok().map(|a| a.to_string());
            assert_eq!(got.as_deref(), expected, "{input}");
        }
    }

    #[test]
    fn endpoints_without_a_scheme_get_http_for_loopback_and_https_elsewhere() {
        let cases = [
            ("http://127.0.0.1:8080", Ok("http://127.0.0.1:8080")),
            ("http://127.0.0.1:8080/", Ok("http://127.0.0.1:8080")),
            ("127.0.0.1:8080", Ok("http://127.0.0.1:8080")),
            ("localhost:9000", Ok("http://localhost:9000")),
            ("[::1]:8080", Ok("http://[::1]:8080")),
            (
                "abc.execute-api.us-east-1.amazonaws.com",
                Ok("https://abc.execute-api.us-east-1.amazonaws.com"),
            ),
            ("ftp://example.com", Err(())),
            ("http://", Err(())),
            ("", Err(())),
        ];
        for (input, expected) in cases {
            let got = parse_endpoint(input).map_err(|_| ());
            assert_eq!(got.as_deref(), expected.as_deref(), "{input}");
        }
    }

    #[test]
    fn client_flags_parse_after_the_subcommand() {
        let cli = Cli::try_parse_from([
            "trainyard",
            "jobs",
            "--queue",
            "research",
            "--output",
            "json",
            "--endpoint",
            "http://127.0.0.1:9",
        ])
        .expect("parses");
        let Command::Jobs(args) = cli.command else {
            panic!("jobs command expected");
        };
        assert_eq!(args.client.output, Output::Json);
        assert_eq!(args.client.endpoint, "http://127.0.0.1:9");
        assert_eq!(args.queue.as_deref(), Some("research"));
    }

    #[test]
    fn submit_needs_a_payload_or_an_instance_type_but_not_both() {
        let base = ["trainyard", "submit", "--queue", "research"];
        let with = |extra: &[&str]| {
            let mut args: Vec<&str> = base.to_vec();
            args.extend_from_slice(extra);
            Cli::try_parse_from(args).is_ok()
        };
        assert!(!with(&[]), "neither");
        assert!(with(&["--payload", "job.json"]), "payload file");
        assert!(
            with(&["--instance-type", "ml.g5.xlarge", "--instance-count", "2"]),
            "flags"
        );
        assert!(
            !with(&["--payload", "job.json", "--instance-type", "ml.g5.xlarge"]),
            "both"
        );
        assert!(
            !with(&["--payload", "job.json", "--duration-s", "5"]),
            "payload with a flag that only shapes a built payload"
        );
    }

    #[test]
    fn status_and_all_are_exclusive() {
        assert!(Cli::try_parse_from(["trainyard", "jobs", "--status", "RUNNABLE"]).is_ok());
        assert!(Cli::try_parse_from(["trainyard", "jobs", "--all"]).is_ok());
        assert!(
            Cli::try_parse_from(["trainyard", "jobs", "--status", "RUNNABLE", "--all"]).is_err()
        );
    }
}
