//! The functions' configuration: read from the environment once per cold start and validated
//! whole, so that a misconfigured deployment fails with one error listing every problem instead
//! of one problem per redeploy.
//!
//! Every function reads the same variables (the SAM template sets them on all four through
//! `Globals`); each uses the part it needs. [`Config::from_lookup`] takes the lookup as a
//! function, so tests feed it a table instead of the process environment.

use trainyard_app::service::scheduling::CycleConfig;
use trainyard_domain::arn::ArnContext;

/// `TRAINYARD_TABLE`: the DynamoDB table (required).
pub const TABLE: &str = "TRAINYARD_TABLE";
/// `TRAINYARD_EVENT_BUS`: the EventBridge bus job events go to (required).
pub const EVENT_BUS: &str = "TRAINYARD_EVENT_BUS";
/// `TRAINYARD_TRAINING_ROLE_ARNS`: comma-separated IAM role ARNs jobs may name (required).
pub const TRAINING_ROLE_ARNS: &str = "TRAINYARD_TRAINING_ROLE_ARNS";
/// `TRAINYARD_ACCOUNT_ID`: the account ARNs are minted in (default: the training roles').
pub const ACCOUNT_ID: &str = "TRAINYARD_ACCOUNT_ID";
/// `AWS_REGION`: set by Lambda itself; the region ARNs are minted in.
pub const REGION: &str = "AWS_REGION";
/// `TRAINYARD_INITIAL_ENVIRONMENT`: the service environment created on first start.
pub const INITIAL_ENVIRONMENT: &str = "TRAINYARD_INITIAL_ENVIRONMENT";
/// `TRAINYARD_INITIAL_MAX_INSTANCES`: its capacity limit (NUM_INSTANCES).
pub const INITIAL_MAX_INSTANCES: &str = "TRAINYARD_INITIAL_MAX_INSTANCES";
/// `TRAINYARD_INITIAL_QUEUE`: the job queue created on first start.
pub const INITIAL_QUEUE: &str = "TRAINYARD_INITIAL_QUEUE";
/// `TRAINYARD_INITIAL_QUEUE_PRIORITY`: its priority.
pub const INITIAL_QUEUE_PRIORITY: &str = "TRAINYARD_INITIAL_QUEUE_PRIORITY";
/// `TRAINYARD_BACKOFF_SCALE`: multiplies the retry and capacity-error backoffs (default 1).
pub const BACKOFF_SCALE: &str = "TRAINYARD_BACKOFF_SCALE";
/// `TRAINYARD_RECONCILE_QUIET_SECONDS`: how long an attempt may go without an event before the
/// retry function describes it (default 300).
pub const RECONCILE_QUIET_SECONDS: &str = "TRAINYARD_RECONCILE_QUIET_SECONDS";
/// `TRAINYARD_AUDIT_RETENTION_DAYS`: how long the api function's audit records are kept (1 to
/// 400 days; default 90).
pub const AUDIT_RETENTION_DAYS: &str = "TRAINYARD_AUDIT_RETENTION_DAYS";
/// `TRAINYARD_RATE_LIMIT`: requests per second each caller may make to one instance of the api
/// function, in bursts of twice that (0: no limit; default 200).
pub const RATE_LIMIT: &str = "TRAINYARD_RATE_LIMIT";
/// `TRAINYARD_STRICT_FIFO`: Batch's strict head-of-line FIFO instead of backfill (default false).
pub const STRICT_FIFO: &str = "TRAINYARD_STRICT_FIFO";
/// `TRAINYARD_MIN_WAIT_BEFORE_IN_SHARE_PREEMPTION_SECONDS`: how long a job waits before it may
/// preempt lower-priority jobs of its own quota share (0 to 86,400; default 0, Batch's
/// behaviour).
pub const MIN_WAIT_BEFORE_IN_SHARE_PREEMPTION: &str =
    "TRAINYARD_MIN_WAIT_BEFORE_IN_SHARE_PREEMPTION_SECONDS";
/// `TRAINYARD_MIN_PRIORITY_FOR_IN_SHARE_PREEMPTION`: only a job of at least this scheduling
/// priority preempts jobs of its own quota share (0 to 9,999; default 0, Batch's behaviour).
pub const MIN_PRIORITY_FOR_IN_SHARE_PREEMPTION: &str =
    "TRAINYARD_MIN_PRIORITY_FOR_IN_SHARE_PREEMPTION";
/// `TRAINYARD_MIN_WAIT_BEFORE_RECLAIM_SECONDS`: how long a job waits before it may preempt
/// other shares' jobs running on capacity its quota share lent (0 to 86,400; default 0, Batch's
/// behaviour).
pub const MIN_WAIT_BEFORE_RECLAIM: &str = "TRAINYARD_MIN_WAIT_BEFORE_RECLAIM_SECONDS";
/// `TRAINYARD_MIN_RUNTIME_BEFORE_PREEMPTION_SECONDS`: how long any attempt runs before it may
/// be preempted (0 to 86,400; default 600).
pub const MIN_RUNTIME_BEFORE_PREEMPTION: &str = "TRAINYARD_MIN_RUNTIME_BEFORE_PREEMPTION_SECONDS";
/// `TRAINYARD_MIN_RUNTIME_AFTER_PREEMPTION_SECONDS`: anti-thrash protection of a resumable job
/// preempted before (0 to 86,400; default 3,600).
pub const MIN_RUNTIME_AFTER_PREEMPTION: &str = "TRAINYARD_MIN_RUNTIME_AFTER_PREEMPTION_SECONDS";
/// `TRAINYARD_RESTART_OVERHEAD_SECONDS`: what restarting a preempted attempt costs, per instance,
/// when victims are chosen (0 to 86,400; default 300).
pub const RESTART_OVERHEAD: &str = "TRAINYARD_RESTART_OVERHEAD_SECONDS";
/// `TRAINYARD_CHECKPOINT_ALIGNMENT_SECONDS`: how long a preemption may wait for its victims'
/// due checkpoints (0 to 3,600; default 0, never).
pub const CHECKPOINT_ALIGNMENT: &str = "TRAINYARD_CHECKPOINT_ALIGNMENT_SECONDS";
/// `TRAINYARD_CHECKPOINT_MARKER`: the object name that marks a checkpoint under a job's
/// `CheckpointConfig.S3Uri` as complete (default `_SUCCESS`; 1–255 characters, no `/`).
pub const CHECKPOINT_MARKER: &str = "TRAINYARD_CHECKPOINT_MARKER";
/// `TRAINYARD_S3_FORCE_PATH_STYLE`: address S3 as `endpoint/bucket/key` rather than
/// `bucket.endpoint/key` (default false; S3-compatible endpoints such as moto need it).
pub const S3_FORCE_PATH_STYLE: &str = "TRAINYARD_S3_FORCE_PATH_STYLE";
/// `TRAINYARD_DECISIONS_BUCKET`: the S3 bucket the scheduler keeps each cycle's decision record
/// in (`trainyard_aws::decisions`; unset: no records are kept).
pub const DECISIONS_BUCKET: &str = "TRAINYARD_DECISIONS_BUCKET";
/// `TRAINYARD_DECISION_RETENTION_DAYS`: how long decision summaries stay in the table (1 to 400,
/// default 14; the bucket's lifecycle rule expires the records themselves).
pub const DECISION_RETENTION_DAYS: &str = "TRAINYARD_DECISION_RETENTION_DAYS";

/// `TRAINYARD_STACK_NAME`: the `Stack` dimension of metrics (default: the function name less
/// its `-<function>` suffix, as the template names functions `<stack>-<function>`).
pub const STACK_NAME: &str = "TRAINYARD_STACK_NAME";
/// `AWS_LAMBDA_FUNCTION_NAME`: set by Lambda.
pub const FUNCTION_NAME: &str = "AWS_LAMBDA_FUNCTION_NAME";
/// The functions' names, as suffixes of the deployed function names.
pub const FUNCTIONS: [&str; 4] = ["api", "scheduler", "training-events", "retry"];

/// The template's defaults for the initial setup (infra/template.yaml `Parameters`).
pub const DEFAULT_INITIAL_ENVIRONMENT: &str = "default";
/// Default of [`INITIAL_MAX_INSTANCES`].
pub const DEFAULT_INITIAL_MAX_INSTANCES: u32 = 4;
/// Default of [`INITIAL_QUEUE`].
pub const DEFAULT_INITIAL_QUEUE: &str = "default";
/// Default of [`INITIAL_QUEUE_PRIORITY`].
pub const DEFAULT_INITIAL_QUEUE_PRIORITY: u32 = 1;
/// Default of [`RECONCILE_QUIET_SECONDS`]: five minutes of silence is unusual for a live
/// attempt (SageMaker emits a change at every phase), and describing costs one call per attempt.
pub const DEFAULT_RECONCILE_QUIET_SECONDS: u32 = 300;

/// Batch's limits on the initial setup (the template's `MaxValue`s say the same).
const MAX_INSTANCES_LIMIT: u32 = 10_000;
const MAX_QUEUE_PRIORITY: u32 = 1_000;
/// The longest audit retention (`trainyard_app::ports::MAX_AUDIT_RETENTION_MS`, in days), and
/// of decision summaries.
const MAX_AUDIT_RETENTION_DAYS: u32 = 400;
/// How long decision summaries are kept unless configured.
const DEFAULT_DECISION_RETENTION_DAYS: u32 = 14;

/// The service environment and queue created the first time the API function starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitialSetup {
    /// Service environment name.
    pub environment: String,
    /// Its capacity limit, in instances.
    pub max_instances: u32,
    /// Job queue name.
    pub queue: String,
    /// The queue's priority (0–1000, higher first).
    pub queue_priority: u32,
}

/// Everything the functions read from their environment, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The DynamoDB table.
    pub table: String,
    /// The EventBridge bus for job events.
    pub event_bus: String,
    /// IAM roles submitted jobs may pass to SageMaker.
    pub training_role_arns: Vec<String>,
    /// Partition, region and account of minted ARNs.
    pub arns: ArnContext,
    /// Created on first start.
    pub initial: InitialSetup,
    /// Backoff multiplier (1 in production; tests shorten the waits with it).
    pub backoff_scale: f64,
    /// Silence (ms) after which the retry function describes an attempt.
    pub reconcile_quiet_ms: i64,
    /// Strict FIFO instead of backfill.
    pub strict_fifo: bool,
    /// The planner's `min_wait_before_in_share_preemption_s`.
    pub min_wait_before_in_share_preemption_s: u64,
    /// The planner's `min_priority_for_in_share_preemption`.
    pub min_priority_for_in_share_preemption: u32,
    /// The planner's `min_wait_before_reclaim_s`.
    pub min_wait_before_reclaim_s: u64,
    /// The planner's `min_runtime_before_preemption_s`.
    pub min_runtime_before_preemption_s: u64,
    /// The planner's `min_runtime_after_preemption_s`.
    pub min_runtime_after_preemption_s: u64,
    /// The planner's `restart_overhead_s`.
    pub restart_overhead_s: u64,
    /// The planner's `checkpoint_alignment_s`.
    pub checkpoint_alignment_s: u64,
    /// Days audit records are kept.
    pub audit_retention_days: u32,
    /// Requests per second per caller per instance (0: no limit).
    pub rate_limit: u32,
    /// The object name that marks a checkpoint complete.
    pub checkpoint_marker: String,
    /// Path-style S3 addressing.
    pub s3_force_path_style: bool,
    /// Where the scheduler keeps decision records, if anywhere.
    pub decisions_bucket: Option<String>,
    /// Days decision summaries are kept.
    pub decision_retention_days: u32,
    /// The `Stack` dimension of metrics.
    pub stack: String,
}

/// Every problem found in the configuration, one per line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid configuration ({} problem(s)):\n  {}", .problems.len(), .problems.join("\n  "))]
pub struct ConfigError {
    /// What is wrong, each naming its variable.
    pub problems: Vec<String>,
}

impl Config {
    /// Reads the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads the variables through `lookup` (empty values count as unset) and validates them
    /// all, collecting every problem before failing.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let get = |name: &str| {
            lookup(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let mut problems = Vec::new();
        let mut required = |name: &str| {
            let value = get(name);
            if value.is_none() {
                problems.push(format!("{name} is not set"));
            }
            value.unwrap_or_default()
        };
        let table = required(TABLE);
        let event_bus = required(EVENT_BUS);
        let region = required(REGION);
        let roles_raw = required(TRAINING_ROLE_ARNS);

        let training_role_arns: Vec<String> = roles_raw
            .split(',')
            .map(str::trim)
            .filter(|r| !r.is_empty())
            .map(str::to_owned)
            .collect();
        for role in &training_role_arns {
            if parse_role_arn(role).is_none() {
                problems.push(format!(
                    "{TRAINING_ROLE_ARNS}: {role:?} is not an IAM role ARN \
                     (arn:<partition>:iam::<12 digits>:role/<name>)"
                ));
            }
        }
        if !roles_raw.is_empty() && training_role_arns.is_empty() {
            problems.push(format!("{TRAINING_ROLE_ARNS} names no role"));
        }

        if !region.is_empty() && !is_region(&region) {
            problems.push(format!(
                "{REGION} {region:?} must look like us-east-1 (lower-case letters, digits, hyphens)"
            ));
        }
        let account = match get(ACCOUNT_ID) {
            Some(account) => {
                if !is_account(&account) {
                    problems.push(format!("{ACCOUNT_ID} {account:?} must be twelve digits"));
                }
                account
            }
            // ARNs need the account; the roles jobs run under are in it.
            None => training_role_arns
                .iter()
                .find_map(|r| parse_role_arn(r).map(|(_, account)| account.to_owned()))
                .unwrap_or_default(),
        };

        let mut number = |name: &str, default: u32, max: u32| match get(name) {
            None => default,
            Some(text) => match text.parse::<u32>() {
                Ok(n) if n <= max => n,
                _ => {
                    problems.push(format!(
                        "{name} {text:?} must be a whole number from 0 to {max}"
                    ));
                    default
                }
            },
        };
        let max_instances = number(
            INITIAL_MAX_INSTANCES,
            DEFAULT_INITIAL_MAX_INSTANCES,
            MAX_INSTANCES_LIMIT,
        );
        let queue_priority = number(
            INITIAL_QUEUE_PRIORITY,
            DEFAULT_INITIAL_QUEUE_PRIORITY,
            MAX_QUEUE_PRIORITY,
        );
        let quiet_s = number(
            RECONCILE_QUIET_SECONDS,
            DEFAULT_RECONCILE_QUIET_SECONDS,
            u32::MAX,
        );
        let audit_retention_days = number(
            AUDIT_RETENTION_DAYS,
            trainyard_api::access::DEFAULT_AUDIT_RETENTION_DAYS,
            MAX_AUDIT_RETENTION_DAYS,
        );
        let rate_limit = number(
            RATE_LIMIT,
            trainyard_api::throttle::DEFAULT_RATE_LIMIT,
            1_000_000,
        );
        let in_share_wait_s = number(MIN_WAIT_BEFORE_IN_SHARE_PREEMPTION, 0, 86_400);
        let in_share_min_priority = number(MIN_PRIORITY_FOR_IN_SHARE_PREEMPTION, 0, 9_999);
        let reclaim_wait_s = number(MIN_WAIT_BEFORE_RECLAIM, 0, 86_400);
        let planner = CycleConfig::default().planner;
        let default_s = |s: u64| u32::try_from(s).unwrap_or(u32::MAX);
        let before_preemption_s = number(
            MIN_RUNTIME_BEFORE_PREEMPTION,
            default_s(planner.min_runtime_before_preemption_s),
            86_400,
        );
        let after_preemption_s = number(
            MIN_RUNTIME_AFTER_PREEMPTION,
            default_s(planner.min_runtime_after_preemption_s),
            86_400,
        );
        let restart_overhead_s = number(
            RESTART_OVERHEAD,
            default_s(planner.restart_overhead_s),
            86_400,
        );
        let checkpoint_alignment_s = number(
            CHECKPOINT_ALIGNMENT,
            default_s(planner.checkpoint_alignment_s),
            3_600,
        );
        let decision_retention_days = number(
            DECISION_RETENTION_DAYS,
            DEFAULT_DECISION_RETENTION_DAYS,
            MAX_AUDIT_RETENTION_DAYS,
        );
        for (var, days) in [
            (AUDIT_RETENTION_DAYS, audit_retention_days),
            (DECISION_RETENTION_DAYS, decision_retention_days),
        ] {
            if days == 0 {
                problems.push(format!("{var} must be at least 1"));
            }
        }
        let decisions_bucket = get(DECISIONS_BUCKET).filter(|b| !b.is_empty());

        let mut name = |var: &str, default: &str| {
            let value = get(var).unwrap_or_else(|| default.to_owned());
            if !is_resource_name(&value) {
                problems.push(format!(
                    "{var} {value:?} must be 1-128 letters, digits, hyphens or underscores, \
                     starting with a letter or digit"
                ));
            }
            value
        };
        let environment = name(INITIAL_ENVIRONMENT, DEFAULT_INITIAL_ENVIRONMENT);
        let queue = name(INITIAL_QUEUE, DEFAULT_INITIAL_QUEUE);

        let backoff_scale = match get(BACKOFF_SCALE) {
            None => 1.0,
            Some(text) => match text.parse::<f64>() {
                Ok(scale) if scale.is_finite() && (0.0..=100.0).contains(&scale) => scale,
                _ => {
                    problems.push(format!(
                        "{BACKOFF_SCALE} {text:?} must be a number from 0 to 100"
                    ));
                    1.0
                }
            },
        };
        let mut flag = |name: &str| match get(name).as_deref() {
            None | Some("false") | Some("0") => false,
            Some("true") | Some("1") => true,
            Some(other) => {
                problems.push(format!("{name} {other:?} must be true or false"));
                false
            }
        };
        let strict_fifo = flag(STRICT_FIFO);
        let s3_force_path_style = flag(S3_FORCE_PATH_STYLE);
        let checkpoint_marker = get(CHECKPOINT_MARKER)
            .unwrap_or_else(|| trainyard_aws::checkpoints::DEFAULT_MARKER.to_owned());
        if checkpoint_marker.len() > 255 || checkpoint_marker.contains('/') {
            problems.push(format!(
                "{CHECKPOINT_MARKER} {checkpoint_marker:?} must be an object name of 1-255 \
                 characters without '/'"
            ));
        }

        let stack = get(STACK_NAME).unwrap_or_else(|| match get(FUNCTION_NAME) {
            Some(function) => FUNCTIONS
                .iter()
                .find_map(|f| function.strip_suffix(&format!("-{f}")))
                .unwrap_or(&function)
                .to_owned(),
            None => "trainyard".to_owned(),
        });

        if !problems.is_empty() {
            return Err(ConfigError { problems });
        }
        Ok(Self {
            table,
            event_bus,
            training_role_arns,
            arns: ArnContext {
                partition: partition_of(&region).into(),
                region,
                account,
            },
            initial: InitialSetup {
                environment,
                max_instances,
                queue,
                queue_priority,
            },
            backoff_scale,
            reconcile_quiet_ms: i64::from(quiet_s) * 1000,
            audit_retention_days,
            rate_limit,
            strict_fifo,
            min_wait_before_in_share_preemption_s: u64::from(in_share_wait_s),
            min_priority_for_in_share_preemption: in_share_min_priority,
            min_wait_before_reclaim_s: u64::from(reclaim_wait_s),
            min_runtime_before_preemption_s: u64::from(before_preemption_s),
            min_runtime_after_preemption_s: u64::from(after_preemption_s),
            restart_overhead_s: u64::from(restart_overhead_s),
            checkpoint_alignment_s: u64::from(checkpoint_alignment_s),
            checkpoint_marker,
            s3_force_path_style,
            decisions_bucket,
            decision_retention_days,
            stack,
        })
    }

    /// The scheduling loop's settings: the defaults, with strict FIFO and scaled backoffs.
    pub fn cycle(&self) -> CycleConfig {
        let mut cycle = CycleConfig::default();
        cycle.planner.strict_fifo = self.strict_fifo;
        cycle.planner.min_wait_before_in_share_preemption_s =
            self.min_wait_before_in_share_preemption_s;
        cycle.planner.min_priority_for_in_share_preemption =
            self.min_priority_for_in_share_preemption;
        cycle.planner.min_wait_before_reclaim_s = self.min_wait_before_reclaim_s;
        cycle.planner.min_runtime_before_preemption_s = self.min_runtime_before_preemption_s;
        cycle.planner.min_runtime_after_preemption_s = self.min_runtime_after_preemption_s;
        cycle.planner.restart_overhead_s = self.restart_overhead_s;
        cycle.planner.checkpoint_alignment_s = self.checkpoint_alignment_s;
        let scale = |ms: i64| ((ms as f64) * self.backoff_scale).round() as i64;
        let retry = &mut cycle.retry;
        retry.capacity_base_ms = scale(retry.capacity_base_ms);
        retry.capacity_cap_ms = scale(retry.capacity_cap_ms);
        retry.retry_base_ms = scale(retry.retry_base_ms);
        retry.retry_cap_ms = scale(retry.retry_cap_ms);
        retry.jitter_max_ms = scale(retry.jitter_max_ms);
        cycle
    }

    /// Whether jobs may name `role_arn` (exact match, as IAM compares ARNs).
    pub fn allows_role(&self, role_arn: &str) -> bool {
        self.training_role_arns.iter().any(|r| r == role_arn)
    }
}

/// (partition, account) of `arn:<partition>:iam::<account>:role/<path/name>`.
fn parse_role_arn(arn: &str) -> Option<(&str, &str)> {
    let mut parts = arn.splitn(6, ':');
    let (prefix, partition, service, region, account, resource) = (
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
    );
    let role_name = resource.strip_prefix("role/")?;
    let ok = prefix == "arn"
        && partition.starts_with("aws")
        && service == "iam"
        && region.is_empty()
        && is_account(account)
        && !role_name.is_empty()
        && !role_name.ends_with('/');
    ok.then_some((partition, account))
}

fn is_account(s: &str) -> bool {
    s.len() == 12 && s.chars().all(|c| c.is_ascii_digit())
}

fn is_region(s: &str) -> bool {
    s.chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

fn is_resource_name(s: &str) -> bool {
    let first_ok = s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric());
    first_ok
        && s.len() <= 128
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// The partition a region belongs to.
fn partition_of(region: &str) -> &'static str {
    if region.starts_with("cn-") {
        "aws-cn"
    } else if region.starts_with("us-gov-") {
        "aws-us-gov"
    } else {
        "aws"
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    const ROLE: &str = "arn:aws:iam::123456789012:role/SageMakerRole";

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        let mut base: BTreeMap<String, String> = [
            (TABLE, "trainyard"),
            (EVENT_BUS, "trainyard-bus"),
            (REGION, "eu-west-1"),
            (TRAINING_ROLE_ARNS, ROLE),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        for (k, v) in pairs {
            base.insert((*k).to_owned(), (*v).to_owned());
        }
        base
    }

    fn parse(vars: &BTreeMap<String, String>) -> Result<Config, ConfigError> {
        Config::from_lookup(|name| vars.get(name).cloned())
    }

    #[test]
    fn the_template_environment_parses_with_its_defaults() {
        let config = parse(&env(&[])).unwrap();
        assert_eq!(config.table, "trainyard");
        assert_eq!(config.event_bus, "trainyard-bus");
        assert_eq!(config.training_role_arns, vec![ROLE.to_owned()]);
        assert_eq!(
            config.arns,
            ArnContext {
                partition: "aws".into(),
                region: "eu-west-1".into(),
                account: "123456789012".into(),
            },
            "the account comes from the training roles when not given"
        );
        assert_eq!(
            config.initial,
            InitialSetup {
                environment: "default".into(),
                max_instances: 4,
                queue: "default".into(),
                queue_priority: 1,
            }
        );
        assert_eq!(config.reconcile_quiet_ms, 300_000);
        assert_eq!(config.audit_retention_days, 90);
        assert_eq!(config.rate_limit, 200);
        assert!(!config.strict_fifo);
        assert_eq!(config.checkpoint_marker, "_SUCCESS");
        assert!(!config.s3_force_path_style);
        assert_eq!(config.decisions_bucket, None);
        assert_eq!(config.decision_retention_days, 14);
        assert_eq!(config.stack, "trainyard");
        assert_eq!(config.cycle(), CycleConfig::default());
        assert!(config.allows_role(ROLE));
        assert!(!config.allows_role("arn:aws:iam::123456789012:role/Other"));
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        // (case, overrides, variables the error must name)
        type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a [&'a str]);
        let cases: [Case; 6] = [
            (
                "missing table and bus",
                &[(TABLE, ""), (EVENT_BUS, " ")],
                &[TABLE, EVENT_BUS],
            ),
            (
                "a bad role among good ones, and a non-numeric capacity",
                &[
                    (TRAINING_ROLE_ARNS, &format!("{ROLE}, arn:aws:s3:::bucket")),
                    (INITIAL_MAX_INSTANCES, "four"),
                ],
                &[TRAINING_ROLE_ARNS, INITIAL_MAX_INSTANCES],
            ),
            (
                "out-of-range numbers",
                &[
                    (INITIAL_MAX_INSTANCES, "10001"),
                    (INITIAL_QUEUE_PRIORITY, "-1"),
                    (AUDIT_RETENTION_DAYS, "401"),
                    (MIN_WAIT_BEFORE_IN_SHARE_PREEMPTION, "86401"),
                    (MIN_PRIORITY_FOR_IN_SHARE_PREEMPTION, "10000"),
                    (MIN_WAIT_BEFORE_RECLAIM, "86401"),
                    (MIN_RUNTIME_BEFORE_PREEMPTION, "86401"),
                    (MIN_RUNTIME_AFTER_PREEMPTION, "86401"),
                    (RESTART_OVERHEAD, "-5"),
                    (CHECKPOINT_ALIGNMENT, "3601"),
                    (DECISION_RETENTION_DAYS, "0"),
                ],
                &[
                    INITIAL_MAX_INSTANCES,
                    INITIAL_QUEUE_PRIORITY,
                    AUDIT_RETENTION_DAYS,
                    MIN_WAIT_BEFORE_IN_SHARE_PREEMPTION,
                    MIN_PRIORITY_FOR_IN_SHARE_PREEMPTION,
                    MIN_WAIT_BEFORE_RECLAIM,
                    MIN_RUNTIME_BEFORE_PREEMPTION,
                    MIN_RUNTIME_AFTER_PREEMPTION,
                    RESTART_OVERHEAD,
                    CHECKPOINT_ALIGNMENT,
                    DECISION_RETENTION_DAYS,
                ],
            ),
            (
                "bad names and flags",
                &[
                    (INITIAL_QUEUE, "-queue"),
                    (INITIAL_ENVIRONMENT, "a b"),
                    (STRICT_FIFO, "yes"),
                    (S3_FORCE_PATH_STYLE, "maybe"),
                    (CHECKPOINT_MARKER, "ck/_SUCCESS"),
                    (BACKOFF_SCALE, "NaN"),
                    (AUDIT_RETENTION_DAYS, "0"),
                ],
                &[
                    INITIAL_QUEUE,
                    INITIAL_ENVIRONMENT,
                    STRICT_FIFO,
                    S3_FORCE_PATH_STYLE,
                    CHECKPOINT_MARKER,
                    BACKOFF_SCALE,
                    AUDIT_RETENTION_DAYS,
                ],
            ),
            (
                "a region and an account that cannot be in an ARN",
                &[(REGION, "EU-WEST-1"), (ACCOUNT_ID, "12345")],
                &[REGION, ACCOUNT_ID],
            ),
            (
                "no role at all",
                &[(TRAINING_ROLE_ARNS, ",")],
                &[TRAINING_ROLE_ARNS],
            ),
        ];
        for (case, overrides, names) in cases {
            let err = parse(&env(overrides)).expect_err(case);
            assert_eq!(err.problems.len(), names.len(), "{case}: {err}");
            for name in names {
                assert!(err.to_string().contains(name), "{case}: {err} names {name}");
            }
        }
    }

    #[test]
    fn the_stack_dimension_comes_from_the_deployed_function_name() {
        let cases = [
            ("prod-trainyard-training-events", None, "prod-trainyard"),
            ("prod-api", None, "prod"),
            ("handmade", None, "handmade"),
            ("prod-api", Some("explicit"), "explicit"),
        ];
        for (function, stack, expected) in cases {
            let mut vars = env(&[(FUNCTION_NAME, function)]);
            if let Some(stack) = stack {
                vars.insert(STACK_NAME.into(), stack.into());
            }
            assert_eq!(parse(&vars).unwrap().stack, expected, "{function}");
        }
    }

    #[test]
    fn settings_override_the_defaults() {
        let config = parse(&env(&[
            (ACCOUNT_ID, "000000000000"),
            (REGION, "cn-north-1"),
            (INITIAL_ENVIRONMENT, "gpu"),
            (INITIAL_MAX_INSTANCES, "16"),
            (INITIAL_QUEUE, "prod_q"),
            (INITIAL_QUEUE_PRIORITY, "900"),
            (BACKOFF_SCALE, "0.01"),
            (RECONCILE_QUIET_SECONDS, "5"),
            (STRICT_FIFO, "true"),
            (MIN_WAIT_BEFORE_IN_SHARE_PREEMPTION, "900"),
            (MIN_PRIORITY_FOR_IN_SHARE_PREEMPTION, "300"),
            (MIN_WAIT_BEFORE_RECLAIM, "300"),
            (MIN_RUNTIME_BEFORE_PREEMPTION, "30"),
            (MIN_RUNTIME_AFTER_PREEMPTION, "7200"),
            (RESTART_OVERHEAD, "60"),
            (CHECKPOINT_ALIGNMENT, "600"),
            (CHECKPOINT_MARKER, "DONE"),
            (S3_FORCE_PATH_STYLE, "1"),
            (DECISIONS_BUCKET, "records"),
            (DECISION_RETENTION_DAYS, "30"),
        ]))
        .unwrap();
        assert_eq!(config.decisions_bucket.as_deref(), Some("records"));
        assert_eq!(config.decision_retention_days, 30);
        assert_eq!(config.checkpoint_marker, "DONE");
        assert!(config.s3_force_path_style);
        assert_eq!(config.arns.account, "000000000000");
        assert_eq!(config.arns.partition, "aws-cn");
        assert_eq!(config.initial.max_instances, 16);
        assert_eq!(config.initial.queue_priority, 900);
        assert_eq!(config.reconcile_quiet_ms, 5_000);
        let cycle = config.cycle();
        assert!(cycle.planner.strict_fifo);
        assert_eq!(cycle.planner.min_wait_before_in_share_preemption_s, 900);
        assert_eq!(cycle.planner.min_priority_for_in_share_preemption, 300);
        assert_eq!(cycle.planner.min_wait_before_reclaim_s, 300);
        assert_eq!(cycle.planner.min_runtime_before_preemption_s, 30);
        assert_eq!(cycle.planner.min_runtime_after_preemption_s, 7_200);
        assert_eq!(cycle.planner.restart_overhead_s, 60);
        assert_eq!(cycle.planner.checkpoint_alignment_s, 600);
        assert_eq!(cycle.retry.retry_base_ms, 100, "10 s scaled by 0.01");
    }
}
