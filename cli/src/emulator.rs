//! `trainyard emulator`: the SageMaker emulator's HTTP face on its own, for trying SageMaker
//! clients (boto3's `sagemaker`, the AWS CLI, `aws-sdk-sagemaker`) without an AWS account.
//!
//! The model's driver runs beside the server, so jobs move through their lifecycle even when
//! nobody describes them. The emulator's options (`--emulator-timings`, `--emulator-time-scale`)
//! are shared with `trainyard up`, which runs the same emulator in process.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, ValueEnum};
use tokio::sync::{mpsc, watch};
use trainyard_emulator::backend::scaled_config;
use trainyard_emulator::driver;
use trainyard_emulator::http;
use trainyard_emulator::model::{Config, Emulator};
use trainyard_emulator::shared::SharedEmulator;

use crate::checkpoints::{S3Copies, copy_until_stopped};
use crate::process::{StopSignals, init_logging, stopped};
use crate::{LogFormat, parse_listen};

/// The driver's longest sleep: a safety net should a wake-up be missed.
pub const DRIVER_MAX_SLEEP: Duration = Duration::from_secs(1);

/// Emulated SageMaker's timings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Timings {
    /// Sub-second phases: a one-second job completes about 1.5 s after it is created.
    Fast,
    /// SageMaker-like: minutes to provision, 120 s to stop.
    Realistic,
}

/// Options of the emulated SageMaker, shared by `up` and `emulator`.
#[derive(Debug, Clone, Args)]
pub struct EmulatorOptions {
    /// The emulated SageMaker's phase timings.
    #[arg(long, value_enum, default_value_t = Timings::Fast)]
    pub emulator_timings: Timings,
    /// Multiplies every emulated duration (phases and each job's `emulator_duration_s`).
    #[arg(long, default_value_t = 1.0, value_parser = parse_scale)]
    pub emulator_time_scale: f64,
}

impl EmulatorOptions {
    /// The model's configuration for these options, minting ARNs in `region` and `account`.
    pub fn config(&self, region: &str, account: &str) -> Config {
        let base = match self.emulator_timings {
            Timings::Fast => Config::default(),
            Timings::Realistic => Config::realistic(),
        };
        let config = Config {
            region: region.into(),
            account: account.into(),
            ..base
        };
        scaled_config(config, self.emulator_time_scale)
    }
}

/// Parses `--emulator-time-scale`: a finite number, at least 0.
fn parse_scale(value: &str) -> Result<f64, String> {
    match value.parse::<f64>() {
        Ok(scale) if scale.is_finite() && scale >= 0.0 => Ok(scale),
        _ => Err(format!(
            "{value:?} is not a time scale (a number such as 0.5 or 10, at least 0)"
        )),
    }
}

/// Arguments of `trainyard emulator`.
#[derive(Debug, Args)]
pub struct EmulatorArgs {
    /// Address and port to serve SageMaker's API on; port 0 picks a free one.
    #[arg(long, default_value = "127.0.0.1:9090", value_parser = parse_listen)]
    listen: SocketAddr,
    /// Region in training-job ARNs.
    #[arg(long, default_value = "us-east-1")]
    region: String,
    /// Account in training-job ARNs.
    #[arg(long, default_value = "000000000000")]
    account: String,
    #[command(flatten)]
    emulator: EmulatorOptions,
    /// Copy each checkpoint the training jobs save to their `CheckpointConfig.S3Uri`, as
    /// SageMaker uploads a job's checkpoint directory: to the S3-compatible endpoint in
    /// AWS_ENDPOINT_URL_S3 (plain HTTP), signed with the environment's keys.
    #[arg(long)]
    copy_checkpoints_to_s3: bool,
    /// Log line format (the level comes from RUST_LOG, default `info`).
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

/// Serves the emulator until a stop signal.
pub fn run(args: EmulatorArgs) -> anyhow::Result<()> {
    init_logging(args.log_format);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the Tokio runtime")?;
    runtime.block_on(serve(args))
}

async fn serve(args: EmulatorArgs) -> anyhow::Result<()> {
    let mut signals = StopSignals::install()?;
    let copies = args
        .copy_checkpoints_to_s3
        .then(|| S3Copies::from_environment(&args.region))
        .transpose()?;
    let shared = SharedEmulator::with_wall_clock(Emulator::new(
        args.emulator.config(&args.region, &args.account),
    ));
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let address = listener.local_addr().context("reading the bound address")?;
    let (stop, stopping) = watch::channel(false);

    // Nobody consumes the events here; the driver still has to run so the model advances, and
    // they are logged for whoever wants to watch.
    let (events, mut received) = mpsc::channel(1024);
    let driver = tokio::spawn(driver::run(
        shared.clone(),
        events,
        DRIVER_MAX_SLEEP,
        stopped(stopping.clone()),
    ));
    let logger = tokio::spawn(async move {
        while let Some(change) = received.recv().await {
            tracing::info!(
                job = change.training_job_name(),
                status = change.status().as_str(),
                secondary = change.secondary_status().as_str(),
                "training job state change"
            );
        }
    });
    let mut server = tokio::spawn(http::serve(
        listener,
        shared.clone(),
        stopped(stopping.clone()),
    ));
    // The banner's address first: scripts wait for the first URL the emulator prints.
    print_banner(address, &args.region);
    let copier = copies.map(|copies| {
        tracing::info!(?copies, "copying checkpoints to S3");
        tokio::task::spawn_blocking(move || copy_until_stopped(shared, copies, stopping))
    });

    let outcome = tokio::select! {
        signal = signals.next() => Ok(signal),
        served = &mut server => Err(match served {
            Ok(Ok(())) => anyhow::anyhow!("the emulator's server stopped by itself"),
            Ok(Err(error)) => anyhow::Error::new(error).context("the emulator's server failed"),
            Err(error) => anyhow::Error::new(error).context("the emulator's server task failed"),
        }),
    };
    let _ = stop.send(true);
    if !server.is_finished()
        && tokio::time::timeout(Duration::from_secs(10), &mut server)
            .await
            .is_err()
    {
        server.abort();
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), driver).await;
    let _ = tokio::time::timeout(Duration::from_secs(5), logger).await;
    if let Some(copier) = copier {
        let _ = tokio::time::timeout(Duration::from_secs(15), copier).await;
    }
    let signal = outcome?;
    println!("Emulator stopped ({signal}).");
    Ok(())
}

fn print_banner(address: SocketAddr, region: &str) {
    let url = format!("http://{address}");
    print!(
        "SageMaker emulator listening on {url}\n\
         \n\
         Point boto3's sagemaker client at it (any credentials; requests are not checked):\n\
         \x20 import boto3\n\
         \x20 sm = boto3.client(\"sagemaker\", endpoint_url=\"{url}\", region_name=\"{region}\",\n\
         \x20                   aws_access_key_id=\"test\", aws_secret_access_key=\"test\")\n\
         \x20 sm.list_training_jobs()\n\
         or: export AWS_ENDPOINT_URL_SAGEMAKER={url}\n\
         \n\
         Training jobs take HyperParameters emulator_duration_s (seconds of training) and\n\
         emulator_outcome (Completed, CapacityError or Failed:<reason>).\n\
         Stop with Ctrl-C.\n"
    );
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_scales_are_finite_and_not_negative() {
        let cases = [
            ("1", Some(1.0)),
            ("0.5", Some(0.5)),
            ("0", Some(0.0)),
            ("-1", None),
            ("inf", None),
            ("NaN", None),
            ("fast", None),
        ];
        for (input, expected) in cases {
            assert_eq!(parse_scale(input).ok(), expected, "{input}");
        }
    }

    #[test]
    fn options_pick_the_timings_scale_them_and_mint_arns_where_asked() {
        let options = EmulatorOptions {
            emulator_timings: Timings::Realistic,
            emulator_time_scale: 0.5,
        };
        let config = options.config("eu-west-1", "123456789012");
        assert_eq!(
            config.provisioning_ms,
            Config::realistic().provisioning_ms / 2
        );
        assert_eq!(config.region, "eu-west-1");
        assert_eq!(config.account, "123456789012");
    }
}
