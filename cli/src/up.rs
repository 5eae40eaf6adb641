//! `trainyard up`: local mode's composition root.
//!
//! It opens the SQLite store in the data directory, builds the service with the in-process
//! event sink, starts an emulated SageMaker (the model, its driver), serves the Batch API over
//! HTTP (plus `/metrics` and `/trainyard/events`) and runs the scheduling loop beside it, until
//! Ctrl-C or SIGTERM. Shutdown is graceful and ordered: stop accepting connections and let
//! in-flight requests finish, stop the loop and the driver, then drop the store (closing the
//! SQLite file cleanly).
//!
//! The banner goes to stdout (tests and scripts read the address from it); logs go to stderr.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use tokio::sync::mpsc;
use tokio::sync::watch;
use trainyard_app::Service;
use trainyard_app::ports::{Clock, RandomIds, Store, StoreError, SystemClock};
use trainyard_app::service::estimates::{KeptForecaster, host_forecaster};
use trainyard_app::service::scheduling::CycleConfig;
use trainyard_domain::arn::ArnContext;
use trainyard_domain::environment::{
    CapacityLimit, NUM_INSTANCES, ServiceEnvironment, ServiceEnvironmentType,
};
use trainyard_domain::queue::{
    AGING_MAX_PRIORITY_TAG, AGING_PER_HOUR_TAG, JobQueue, JobQueueType, RESERVE_AFTER_HOURS_TAG,
    SHORTER_FIRST_HOURS_TAG, ServiceEnvironmentOrder,
};
use trainyard_domain::{ResourceStatus, State, Tags};
use trainyard_emulator::backend::EmulatedSageMaker;
use trainyard_emulator::driver;
use trainyard_emulator::model::Emulator;
use trainyard_emulator::shared::SharedEmulator;
use trainyard_local::SqliteStore;
use trainyard_local::event_loop::{self, LocalEvents, LoopConfig, PassRunner};
use trainyard_local::metrics::{self, Metrics};

use crate::emulator::{DRIVER_MAX_SLEEP, EmulatorOptions};
use crate::process::{StopSignals, init_logging, stopped};
use crate::{LogFormat, defaults, parse_dir, parse_listen};

/// SageMaker state changes the driver may queue before it waits for the loop.
const BACKEND_EVENT_BUFFER: usize = 1024;

/// The store file inside the data directory.
pub const DB_FILE: &str = "trainyard.db";

/// Locked by the running `up` (see [`lock_data_dir`]); holds its pid.
pub const LOCK_FILE: &str = "trainyard.lock";

/// Written once the demo setup exists, so that deleting the demo queues on purpose is not undone
/// by the next start.
pub const DEMO_MARKER: &str = "demo-setup.done";

/// How long in-flight requests and the loop get to finish after a stop signal before `up` exits
/// anyway. Requests take milliseconds; this only bounds a stuck client connection.
const GRACE: Duration = Duration::from_secs(10);

/// The demo setup's service environment and its capacity.
pub const DEMO_ENVIRONMENT: &str = "local";
/// Instances the demo environment may run at once.
pub const DEMO_CAPACITY: u32 = 8;
/// The demo queues and their priorities, highest first.
pub const DEMO_QUEUES: [(&str, u32); 3] = [("production", 900), ("research", 500), ("sweeps", 100)];
/// The demo sweeps queue ages (`trainyard_domain::queue::Aging`): 2 points an hour up to 899,
/// so a sweep that has waited 200 hours goes before fresh research, never before production.
pub const DEMO_SWEEPS_AGING: [(&str, &str); 2] =
    [(AGING_PER_HOUR_TAG, "2"), (AGING_MAX_PRIORITY_TAG, "899")];
/// Every demo queue puts shorter jobs first within three days (`trainyard:shorter-first-hours`),
/// and a research job that does not fit holds the backfill reservation only after 50 hours, a
/// sweep only after 400 (`trainyard:reserve-after-hours`; when its aging has made it overdue): the
/// `trainyard` policy as the simulator measures it
/// (docs/scheduling.md#shorter-jobs-first-and-late-reservations).
pub const DEMO_SHORTER_FIRST: (&str, &str) = (SHORTER_FIRST_HOURS_TAG, "72");
/// How long a demo queue's blocked job waits before it reserves: production at once.
pub const DEMO_RESERVE_AFTER: [(&str, &str); 2] = [("research", "50"), ("sweeps", "400")];

/// Arguments of `trainyard up`.
#[derive(Debug, Args)]
pub struct UpArgs {
    /// Address and port to serve the API on; port 0 picks a free one (the banner shows it).
    #[arg(long, default_value = defaults::LISTEN, value_parser = parse_listen)]
    listen: SocketAddr,
    /// Directory for the SQLite store and local state; created if missing.
    #[arg(long, default_value = defaults::DATA_DIR, value_parser = parse_dir)]
    data_dir: PathBuf,
    /// Region that ARNs are minted in.
    #[arg(long, default_value = "us-east-1")]
    region: String,
    /// Twelve-digit account id that ARNs are minted in.
    #[arg(long, default_value = "000000000000")]
    account: String,
    /// How often the loop runs when no event wakes it, in milliseconds.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    interval_ms: u64,
    /// How long a submitted job stays SUBMITTED before the loop accepts it, in milliseconds.
    /// Clients such as the SageMaker SDK check for SUBMITTED right after submitting.
    #[arg(long, default_value_t = 250)]
    settle_ms: u64,
    /// How long an attempt may go without a SageMaker event before the loop describes it, in
    /// milliseconds (events can be lost; this is how missed ones are found).
    #[arg(long, default_value_t = 10_000)]
    quiet_ms: u64,
    /// How often every waiting job's start time is estimated (docs/scheduling.md#when-a-job-will-start),
    /// in seconds; 0 estimates nothing.
    #[arg(long, default_value_t = 60)]
    estimate_every_s: u64,
    /// Wall time a forecast round runs rollouts for, at most, once it has run 8 (of 32): large
    /// backlogs get fewer rollouts instead of rounds minutes apart.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    estimate_budget_s: u64,
    /// Batch's strict head-of-line FIFO: a job that does not fit blocks the jobs behind it
    /// (the default lets smaller jobs backfill when they cannot delay it).
    #[arg(long)]
    strict_fifo: bool,
    /// Seconds a job waits before it may preempt lower-priority jobs of its own quota share
    /// (0, the default, is Batch's behaviour: at once).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=86_400))]
    min_wait_before_in_share_preemption_s: u64,
    /// Only a job of at least this scheduling priority preempts lower-priority jobs of its own
    /// quota share; one below it waits for them to end (0, the default, is Batch's behaviour:
    /// any job of higher priority).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=9_999))]
    min_priority_for_in_share_preemption: u32,
    /// Seconds a job waits before it may preempt other shares' jobs running on capacity its
    /// quota share lent (0, the default, is Batch's behaviour: at once).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=86_400))]
    min_wait_before_reclaim_s: u64,
    /// Seconds any attempt runs before it may be preempted.
    #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u64).range(0..=86_400))]
    min_runtime_before_preemption_s: u64,
    /// Seconds a resumable job (one with a CheckpointConfig) that was preempted before runs, or
    /// until it saves a checkpoint, before it may be preempted again (doubling with each
    /// further preemption, at most a day).
    #[arg(long, default_value_t = 3_600, value_parser = clap::value_parser!(u64).range(0..=86_400))]
    min_runtime_after_preemption_s: u64,
    /// Seconds of work a restart costs a preempted attempt, per instance, when victims are
    /// chosen by the work they would lose.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(0..=86_400))]
    restart_overhead_s: u64,
    /// Seconds a preemption may wait for its victims' due checkpoints (0: never waits).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=3_600))]
    checkpoint_alignment_s: u64,
    /// Accept jobs but dispatch none: they wait RUNNABLE (to inspect or build up a backlog).
    #[arg(long)]
    no_dispatch: bool,
    /// Multiplies the retry and capacity-error backoffs (10 s and 30 s at first, plus up to 5 s
    /// of jitter); below 1 makes demos and tests of retries quick.
    #[arg(long, default_value_t = 1.0, value_parser = parse_backoff_scale)]
    backoff_scale: f64,
    /// Check every request's SigV4 signature against the access keys in this file (the AWS
    /// shared credentials format: one `[name]` section per caller with `aws_access_key_id` and
    /// `aws_secret_access_key`). Without it, signatures are not read.
    #[arg(long, value_name = "FILE")]
    credentials: Option<PathBuf>,
    /// Connections served at once; one more is closed as soon as it is accepted (idle
    /// connections cannot use up the process's file descriptors).
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u64).range(1..=65_536))]
    max_connections: u64,
    /// Seconds a client has to send a request's headers; a connection that stalls, or stays
    /// idle that long between requests, is closed.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    header_timeout_s: u64,
    /// Days the audit trail (every call that asked to change something) is kept; older records
    /// are deleted as new ones come.
    #[arg(long, default_value_t = trainyard_api::access::DEFAULT_AUDIT_RETENTION_DAYS,
          value_parser = clap::value_parser!(u32).range(1..=400))]
    audit_retention_days: u32,
    /// Requests per second each caller (each access key's principal; every unsigned client
    /// together, as `anonymous`) may make, in bursts of twice that; over it a request is
    /// refused with `ThrottlingException` (HTTP 429), which AWS clients retry. 0: no limit.
    #[arg(long, default_value_t = trainyard_api::throttle::DEFAULT_RATE_LIMIT)]
    rate_limit: u32,
    #[command(flatten)]
    emulator: EmulatorOptions,
    /// Log line format (the level comes from RUST_LOG, default `info`).
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

/// Runs local mode until a stop signal.
pub fn run(args: UpArgs) -> anyhow::Result<()> {
    init_logging(args.log_format);
    let arns = arn_context(&args.region, &args.account)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the Tokio runtime")?;
    runtime.block_on(serve(args, arns))
}

/// Checks `--region` and `--account` and picks the partition the region belongs to.
fn arn_context(region: &str, account: &str) -> anyhow::Result<ArnContext> {
    let mut problems = Vec::new();
    let region_ok = !region.is_empty()
        && region
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !region_ok {
        problems.push(format!(
            "--region {region:?} must look like us-east-1 (lower-case letters, digits, hyphens)"
        ));
    }
    if account.len() != 12 || !account.chars().all(|c| c.is_ascii_digit()) {
        problems.push(format!(
            "--account {account:?} must be twelve digits (SDKs match ARNs on that)"
        ));
    }
    if !problems.is_empty() {
        bail!("{}", problems.join("\n"));
    }
    let partition = if region.starts_with("cn-") {
        "aws-cn"
    } else if region.starts_with("us-gov-") {
        "aws-us-gov"
    } else {
        "aws"
    };
    Ok(ArnContext {
        partition: partition.into(),
        region: region.into(),
        account: account.into(),
    })
}

async fn serve(args: UpArgs, arns: ArnContext) -> anyhow::Result<()> {
    // Signal handlers first, so a stop signal that arrives right after the banner is not lost.
    let mut stop_signals = StopSignals::install()?;

    let signatures = match &args.credentials {
        Some(path) => {
            let keys = crate::sigv4::read_credentials_file(path)?;
            if keys.is_empty() {
                bail!(
                    "{} has no [profile] with both aws_access_key_id and aws_secret_access_key",
                    path.display()
                );
            }
            Some(Arc::new(crate::routes::SignatureCheck::new(
                keys,
                arns.region.clone(),
                &arns.account,
            )))
        }
        None => None,
    };

    // Listen first: a port that is taken stops `up` before anything is created on disk.
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| {
            format!(
                "cannot listen on {} (is another trainyard running? --listen 127.0.0.1:0 picks a \
                 free port)",
                args.listen
            )
        })?;
    let address = listener.local_addr().context("reading the bound address")?;

    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("creating the data directory {}", args.data_dir.display()))?;
    let data_dir = args
        .data_dir
        .canonicalize()
        .unwrap_or_else(|_| args.data_dir.clone());
    // Held until the process ends (the kernel drops it after `kill -9` too).
    let _lock = lock_data_dir(&data_dir)?;
    let db_path = data_dir.join(DB_FILE);
    // Shared: the service keeps it, and so does the scheduling loop's decision log.
    let store = Arc::new(SqliteStore::open(&db_path)?);
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let created = ensure_demo_setup(&store, &data_dir, clock.now_ms()).await?;

    let events = LocalEvents::new();
    let service = Arc::new(Service::new(
        store.clone(),
        events.clone(),
        clock,
        Arc::new(RandomIds),
        arns.clone(),
    ));

    // Jobs left SUBMITTED by the previous run enter their queues before any request is taken,
    // so this pass cannot catch a job submitted a moment ago.
    let backlog = event_loop::accept_backlog(service.as_ref()).await;
    if backlog > 0 {
        tracing::info!(
            jobs = backlog,
            "accepted jobs left SUBMITTED by the previous run"
        );
    }

    // The emulated SageMaker: its model, and (below) the driver that turns time into state
    // changes.
    let shared = SharedEmulator::with_wall_clock(Emulator::new(
        args.emulator.config(&arns.region, &arns.account),
    ));

    let (stop, stopping) = watch::channel(false);
    let metrics = Arc::new(Metrics::new());
    let gate = Arc::new(
        trainyard_api::Gate::with_audit_retention_days(args.audit_retention_days)
            .map_err(anyhow::Error::msg)?
            .with_rate_limit(args.rate_limit),
    );
    let app = trainyard_api::router_with_gate(service.clone(), gate.clone())
        .merge(crate::routes::routes(
            service.clone(),
            metrics.clone(),
            gate,
            events.clone(),
            stopping.clone(),
        ))
        // SageMaker's own API (awsJson1_1: `POST /` with `X-Amz-Target: SageMaker.*`) for the
        // training jobs the loop runs, so that `describe-training-job` and `Estimator.attach`
        // find them. Batch's operations are all under `/v1/`, so the two cannot collide.
        .route_service(
            "/",
            trainyard_emulator::http::router(shared.clone()).into_service::<axum::body::Body>(),
        );
    let app = match crate::routes::allowed_hosts(address) {
        Some(hosts) => app.layer(axum::middleware::from_fn_with_state(
            Arc::new(hosts),
            crate::routes::require_host,
        )),
        None => app,
    };
    if !address.ip().is_loopback() && signatures.is_none() {
        tracing::warn!(
            %address,
            "listening beyond loopback without --credentials: anyone who can reach this \
             address may do everything, as anonymous"
        );
        eprintln!(
            "warning: {address} is reachable beyond this machine and no signature is checked; \
             start with --credentials FILE (docs/local-mode.md#signatures)"
        );
    }
    let checked_by = signatures.as_ref().map(|check| check.keys.len());
    let app = match signatures {
        Some(check) => app.layer(axum::middleware::from_fn_with_state(
            check,
            crate::routes::require_signature,
        )),
        None => app,
    };
    let mut server = tokio::spawn({
        let stopping = stopping.clone();
        async move {
            let limits = crate::serve::Limits {
                max_connections: usize::try_from(args.max_connections).unwrap_or(usize::MAX),
                header_read: Duration::from_secs(args.header_timeout_s),
            };
            crate::serve::serve(listener, app, limits, stopped(stopping)).await
        }
    });
    let loop_config = LoopConfig {
        settle: Duration::from_millis(args.settle_ms),
        ..LoopConfig::new(Duration::from_millis(args.interval_ms))
    };

    let (backend_events, backend_feed) = mpsc::channel(BACKEND_EVENT_BUFFER);
    let driver_task = tokio::spawn(driver::run(
        shared.clone(),
        backend_events,
        DRIVER_MAX_SLEEP,
        stopped(stopping.clone()),
    ));
    let observer = tokio::spawn(metrics::observe(
        metrics.clone(),
        events.subscribe(),
        stopped(stopping.clone()),
    ));
    let loop_task = if args.no_dispatch {
        tracing::info!("--no-dispatch: jobs are accepted and wait RUNNABLE");
        drop(backend_feed);
        tokio::spawn(event_loop::run_with(
            service.clone(),
            events,
            loop_config,
            stopped(stopping),
        ))
    } else {
        let mut cycle = CycleConfig::default();
        cycle.planner.strict_fifo = args.strict_fifo;
        cycle.planner.min_wait_before_in_share_preemption_s =
            args.min_wait_before_in_share_preemption_s;
        cycle.planner.min_priority_for_in_share_preemption =
            args.min_priority_for_in_share_preemption;
        cycle.planner.min_wait_before_reclaim_s = args.min_wait_before_reclaim_s;
        cycle.planner.min_runtime_before_preemption_s = args.min_runtime_before_preemption_s;
        cycle.planner.min_runtime_after_preemption_s = args.min_runtime_after_preemption_s;
        cycle.planner.restart_overhead_s = args.restart_overhead_s;
        cycle.planner.checkpoint_alignment_s = args.checkpoint_alignment_s;
        let scale = |ms: i64| ((ms as f64) * args.backoff_scale).round() as i64;
        cycle.retry.capacity_base_ms = scale(cycle.retry.capacity_base_ms);
        cycle.retry.capacity_cap_ms = scale(cycle.retry.capacity_cap_ms);
        cycle.retry.retry_base_ms = scale(cycle.retry.retry_base_ms);
        cycle.retry.retry_cap_ms = scale(cycle.retry.retry_cap_ms);
        cycle.retry.jitter_max_ms = scale(cycle.retry.jitter_max_ms);
        if args.estimate_every_s > 0 {
            let budget = Duration::from_secs(args.estimate_budget_s);
            let mut forecasts = KeptForecaster::new(host_forecaster(budget));
            forecasts.keep_in(store.clone());
            tokio::spawn(event_loop::run_estimates(
                service.clone(),
                cycle.clone(),
                forecasts,
                Duration::from_secs(args.estimate_every_s),
                stopped(stopping.clone()),
            ));
        }
        let passes = Arc::new(
            PassRunner::new(
                service.clone(),
                EmulatedSageMaker::new(shared, args.emulator.emulator_time_scale),
                cycle,
                i64::try_from(args.quiet_ms).unwrap_or(i64::MAX),
            )
            .keeping_decisions(store),
        );
        tokio::spawn(event_loop::run_scheduling(
            passes,
            events,
            backend_feed,
            loop_config,
            metrics,
            stopped(stopping),
        ))
    };
    tracing::info!(%address, db = %db_path.display(), "trainyard up");
    print_banner(address, &db_path, &arns, created, checked_by);

    let outcome = tokio::select! {
        signal = stop_signals.next() => Ok(signal),
        served = &mut server => Err(match served {
            Ok(Ok(())) => anyhow::anyhow!("the HTTP server stopped by itself"),
            Ok(Err(error)) => anyhow::Error::new(error).context("the HTTP server failed"),
            Err(error) => anyhow::Error::new(error).context("the HTTP server task failed"),
        }),
    };
    if let Ok(signal) = &outcome {
        println!("Received {signal}; stopping (in-flight requests finish first).");
        tracing::info!(signal, "stopping");
    }
    let _ = stop.send(true);
    if !server.is_finished() && tokio::time::timeout(GRACE, &mut server).await.is_err() {
        tracing::warn!(
            grace_s = GRACE.as_secs(),
            "requests still open after the grace period; closing them"
        );
        server.abort();
    }
    if tokio::time::timeout(GRACE, loop_task).await.is_err() {
        tracing::warn!("the loop did not stop within the grace period");
    }
    let _ = tokio::time::timeout(GRACE, driver_task).await;
    let _ = tokio::time::timeout(GRACE, observer).await;
    // The last reference: dropping it closes the SQLite file.
    drop(service);
    let signal = outcome?;
    println!(
        "Trainyard stopped ({signal}). Data is kept in {}.",
        data_dir.display()
    );
    Ok(())
}

/// Takes the data directory's lock, so that a second `up` on the same store (a second scheduling
/// loop over one SQLite file) exits at once. The file names the holder's pid for the message.
fn lock_data_dir(data_dir: &Path) -> anyhow::Result<std::fs::File> {
    use std::io::{Read as _, Seek as _, Write as _};
    let path = data_dir.join(LOCK_FILE);
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = match holder.trim() {
                "" => String::new(),
                pid => format!(" (pid {pid})"),
            };
            bail!(
                "another trainyard up is using the data directory {}{holder}; stop it, or give \
                 this one its own --data-dir",
                data_dir.display()
            );
        }
        Err(std::fs::TryLockError::Error(error)) => {
            return Err(error).with_context(|| format!("locking {}", path.display()));
        }
    }
    file.set_len(0)
        .and_then(|()| file.rewind())
        .and_then(|()| writeln!(file, "{}", std::process::id()))
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(file)
}

/// Parses `--backoff-scale`: a finite number between 0 and 100.
fn parse_backoff_scale(value: &str) -> Result<f64, String> {
    match value.parse::<f64>() {
        Ok(scale) if scale.is_finite() && (0.0..=100.0).contains(&scale) => Ok(scale),
        _ => Err(format!("{value:?} is not a scale between 0 and 100")),
    }
}

fn print_banner(
    address: SocketAddr,
    db_path: &Path,
    arns: &ArnContext,
    created_demo: bool,
    signature_keys: Option<usize>,
) {
    let url = format!("http://{address}");
    let mut text = format!(
        "Trainyard is running in local mode.\n\
         \n\
         Listening on {url}\n\
         Store:       {db}\n\
         ARNs in:     {partition} {region}, account {account}\n\
         SageMaker:   emulated in process (training jobs never leave this machine); its API\n\
         \x20            is served at {url} too (describe-training-job, Estimator.attach)\n\
         Metrics:     {url}/metrics   Events: trainyard events --follow\n",
        db = db_path.display(),
        partition = arns.partition,
        region = arns.region,
        account = arns.account,
    );
    if created_demo {
        text.push_str(
            "Demo setup:  created service environment `local` (8 instances) and queues \
             production (900) > research (500) > sweeps (100)\n",
        );
    }
    let credentials = match signature_keys {
        Some(n) => format!(
            "Signatures:  checked; {n} access key(s) from --credentials may call\n\
             \n\
             Point clients at it, signing with one of those keys:\n\
             \x20 export AWS_ACCESS_KEY_ID=… AWS_SECRET_ACCESS_KEY=… AWS_DEFAULT_REGION={region}\n",
            region = arns.region
        ),
        None => format!(
            "\n\
             Point clients at it (local mode does not check request signatures, but clients sign,\n\
             so they need some credentials):\n\
             \x20 export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_DEFAULT_REGION={region}\n",
            region = arns.region
        ),
    };
    text.push_str(&credentials);
    text.push_str(&format!(
        "\
         \x20 aws batch describe-job-queues --endpoint-url {url}\n\
         \x20 export AWS_ENDPOINT_URL_BATCH={url}   # boto3 and the SageMaker Python SDK\n\
         \x20 export AWS_ENDPOINT_URL_SAGEMAKER={url}   # their SageMaker calls\n\
         \x20 export TRAINYARD_ENDPOINT={url}       # trainyard submit / jobs / queues\n\
         \n\
         Stop with Ctrl-C.\n"
    ));
    print!("{text}");
    // Scripts and tests wait for the address; do not leave it in a buffer.
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
}

/// Creates the demo setup on first start; returns whether it did. Existing resources of the
/// same names are kept (a crash between creating them and writing the marker is harmless).
async fn ensure_demo_setup<S: Store>(
    store: &S,
    data_dir: &Path,
    now_ms: i64,
) -> anyhow::Result<bool> {
    let marker = data_dir.join(DEMO_MARKER);
    if marker.exists() {
        return Ok(false);
    }
    let (environment, queues) = demo_setup(now_ms);
    ignore_existing(store.create_resource(&environment).await)
        .context("creating the demo service environment")?;
    for queue in &queues {
        ignore_existing(store.create_resource(queue).await)
            .with_context(|| format!("creating the demo queue {}", queue.job_queue_name))?;
    }
    std::fs::write(
        &marker,
        "The demo setup (service environment `local`, queues production, research, sweeps) was \
         created. Delete this file to have `trainyard up` create any missing part again.\n",
    )
    .with_context(|| format!("writing {}", marker.display()))?;
    tracing::info!(
        environment = DEMO_ENVIRONMENT,
        queues = queues.len(),
        "created the demo setup"
    );
    Ok(true)
}

fn ignore_existing(result: Result<(), StoreError>) -> Result<(), StoreError> {
    match result {
        Err(StoreError::AlreadyExists) => Ok(()),
        other => other,
    }
}

/// The documented demo setup: one environment of [`DEMO_CAPACITY`] instances and
/// [`DEMO_QUEUES`], each FIFO (no scheduling policy) and feeding that environment.
pub fn demo_setup(now_ms: i64) -> (ServiceEnvironment, Vec<JobQueue>) {
    let tags = Tags::from([("trainyard:demo".to_owned(), "true".to_owned())]);
    let environment = ServiceEnvironment {
        service_environment_name: DEMO_ENVIRONMENT.into(),
        service_environment_type: ServiceEnvironmentType::SagemakerTraining,
        state: State::Enabled,
        status: ResourceStatus::Valid,
        capacity_limits: vec![CapacityLimit {
            max_capacity: DEMO_CAPACITY,
            capacity_unit: NUM_INSTANCES.into(),
        }],
        tags: tags.clone(),
        created_at: now_ms,
    };
    let queues = DEMO_QUEUES
        .iter()
        .map(|(name, priority)| JobQueue {
            job_queue_name: (*name).into(),
            state: State::Enabled,
            status: ResourceStatus::Valid,
            status_reason: Some("JobQueue Healthy".into()),
            priority: *priority,
            scheduling_policy: None,
            service_environment_order: vec![ServiceEnvironmentOrder {
                order: 1,
                service_environment: DEMO_ENVIRONMENT.into(),
            }],
            job_state_time_limit_actions: Vec::new(),
            job_queue_type: JobQueueType::SagemakerTraining,
            tags: {
                let mut tags = tags.clone();
                let mut extra = vec![DEMO_SHORTER_FIRST];
                extra.extend(
                    DEMO_RESERVE_AFTER
                        .iter()
                        .filter(|(queue, _)| queue == name)
                        .map(|(_, hours)| (RESERVE_AFTER_HOURS_TAG, *hours)),
                );
                if *name == "sweeps" {
                    extra.extend(DEMO_SWEEPS_AGING);
                }
                tags.extend(extra.into_iter().map(|(k, v)| (k.to_owned(), v.to_owned())));
                tags
            },
            created_at: now_ms,
        })
        .collect();
    (environment, queues)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use trainyard_app::memory::MemoryStore;
    use trainyard_app::ports::ConfigStore;
    use trainyard_app::ports::Versioned;

    use trainyard_domain::queue::LineRules;

    use super::*;

    #[test]
    fn region_and_account_are_checked_together_and_pick_the_partition() {
        let cases = [
            ("us-east-1", "000000000000", Ok("aws")),
            ("cn-north-1", "123456789012", Ok("aws-cn")),
            ("us-gov-west-1", "123456789012", Ok("aws-us-gov")),
            ("US-EAST-1", "12345", Err(2)),
            ("eu-west-1", "12345678901x", Err(1)),
        ];
        for (region, account, expected) in cases {
            match (arn_context(region, account), expected) {
                (Ok(ctx), Ok(partition)) => assert_eq!(ctx.partition, partition, "{region}"),
                (Err(error), Err(problems)) => {
                    assert_eq!(error.to_string().lines().count(), problems, "{error}");
                }
                (got, want) => panic!("{region}/{account}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[tokio::test]
    async fn the_demo_setup_is_created_once_and_a_deliberate_deletion_sticks() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = MemoryStore::new();
        assert!(
            ensure_demo_setup(&store, dir.path(), 1)
                .await
                .expect("first")
        );
        let queues: Vec<Versioned<JobQueue>> = store.list_resources().await.expect("list");
        let mut by_priority: Vec<(u32, String)> = queues
            .iter()
            .map(|q| (q.value.priority, q.value.job_queue_name.clone()))
            .collect();
        by_priority.sort();
        assert_eq!(
            by_priority,
            vec![
                (100, "sweeps".to_owned()),
                (500, "research".to_owned()),
                (900, "production".to_owned())
            ]
        );
        assert!(queues.iter().all(|q| q.value.scheduling_policy.is_none()
            && q.value.service_environment() == Some(DEMO_ENVIRONMENT)));
        let rules: BTreeMap<&str, LineRules> = queues
            .iter()
            .map(|q| (q.value.job_queue_name.as_str(), q.value.line_rules()))
            .collect();
        let three_days = Some(3 * 86_400);
        assert_eq!(
            rules,
            BTreeMap::from([
                (
                    "production",
                    LineRules {
                        shorter_first_max_s: three_days,
                        reserve_after_s: None
                    }
                ),
                (
                    "research",
                    LineRules {
                        shorter_first_max_s: three_days,
                        reserve_after_s: Some(50 * 3_600)
                    }
                ),
                (
                    "sweeps",
                    LineRules {
                        shorter_first_max_s: three_days,
                        reserve_after_s: Some(400 * 3_600)
                    }
                ),
            ])
        );
        let environments: Vec<Versioned<ServiceEnvironment>> =
            store.list_resources().await.expect("list");
        assert_eq!(environments.len(), 1);
        assert_eq!(
            environments[0].value.capacity_limits,
            vec![CapacityLimit {
                max_capacity: 8,
                capacity_unit: NUM_INSTANCES.into()
            }]
        );

        // Someone deletes a demo queue on purpose; a restart must not bring it back.
        let sweeps = queues
            .iter()
            .find(|q| q.value.job_queue_name == "sweeps")
            .expect("sweeps");
        store
            .delete_resource::<JobQueue>("sweeps", sweeps.version)
            .await
            .expect("delete");
        assert!(
            !ensure_demo_setup(&store, dir.path(), 2)
                .await
                .expect("second")
        );
        let queues: Vec<Versioned<JobQueue>> = store.list_resources().await.expect("list");
        assert_eq!(queues.len(), 2);
    }

    #[tokio::test]
    async fn a_half_created_setup_is_completed_without_duplicates() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = MemoryStore::new();
        let (environment, queues) = demo_setup(1);
        store.create_resource(&environment).await.expect("env");
        store.create_resource(&queues[0]).await.expect("queue");
        assert!(
            ensure_demo_setup(&store, dir.path(), 2)
                .await
                .expect("completes")
        );
        let stored: Vec<Versioned<JobQueue>> = store.list_resources().await.expect("list");
        assert_eq!(stored.len(), 3);
        assert!(dir.path().join(DEMO_MARKER).exists());
    }
}
