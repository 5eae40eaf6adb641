//! What happens to a job after one of its attempts ends badly, when an attempt has run too long,
//! and when a RUNNABLE job has waited too long: pure functions over the stored job.
//!
//! Nothing here reads a clock or draws a random number: `now_ms` is an argument and the only
//! "randomness" (backoff jitter) is a stable hash of the job id. Hosts call these functions from
//! the training-event handler and the retry/reconcile pass, and store what they return (status,
//! status reason, `not_before_ms`), so a retry is stored state rather than a sleeping task.
//!
//! # Status reasons
//!
//! - SageMaker's words are prefixed, as Batch does (reference §4.4): [`sagemaker_reason`] gives
//!   `Received status from SageMaker: <FailureReason>`. A refused `CreateTrainingJob` reads
//!   `Received status from SageMaker: <Code>: <message>` (inferred from the documented patterns
//!   `…ResourceLimitExceeded*` and `…ValidationException*`).
//! - A capacity error puts the job back with [`CAPACITY_REASON`] (reference §4.5).
//! - A queue's time limit fails the job with [`time_limit_reason`]:
//!   `Terminated by JobStateTimeLimit action due to reason: <REASON>`.
//! - A timed-out attempt ends with [`TIMEOUT_REASON`], Batch's container-job wording.
//! - A preempted attempt ends with [`PREEMPTED_REASON`] (Trainyard's wording; Batch's is not
//!   documented).
//!
//! [`attempt_status_reason`] gives the reason to store on the attempt that ended, for people and
//! Batch clients; [`requeue_of`] gives the class to store beside it (`Attempt::failed_as`), which
//! is what the functions below read back to count attempts and capacity errors in a row.
//!
//! # How an ended attempt is classified ([`classify`])
//!
//! | how it ended                                                  | [`FailureKind`] |
//! |---------------------------------------------------------------|-----------------|
//! | SageMaker `Failed`, `FailureReason` starting `CapacityError`   | `Capacity`      |
//! | `CreateTrainingJob` refused with `ResourceLimitExceeded`       | `Capacity`      |
//! | SageMaker stopped it after it waited for capacity too long     | `Capacity`      |
//! | stopped by TerminateServiceJob                                 | `Terminated`    |
//! | stopped because `attemptDurationSeconds` elapsed               | `TimedOut`      |
//! | stopped to free capacity for another job                       | `Preempted`     |
//! | any other `Failed`, refusal, or a stop from outside Trainyard  | `Evaluated`     |
//!
//! # What happens next ([`decide_after_failure`]), first matching rule wins
//!
//! 1. **A terminated job never retries**: `job.is_terminated` or a `Terminated` stop → `Failed`.
//! 2. **Capacity** → `Requeue` with [`CAPACITY_REASON`], *not* counting an attempt (reference
//!    §4.4: "These capacity-based retries don't consume your configured retry attempts"), after
//!    the capacity backoff below.
//! 3. **Preempted** → `Requeue` with [`PREEMPTED_REASON`] and no backoff (the job did nothing
//!    wrong), not counting an attempt, unless `preemptionRetriesBeforeTermination = n` is set and
//!    this is preemption number `n + 1` (counting `preemptionSummary.preemptedAttemptCount` plus
//!    this one): then `Failed` (reference §4.3: 0 fails on the first preemption).
//! 4. **Timed out** → `Failed` with [`TIMEOUT_REASON`]. Batch's container-job documentation says
//!    "If a job is terminated for exceeding the timeout duration, it isn't retried"; the
//!    service-job documentation is silent (reference §4.6), so this is inferred.
//! 5. **Evaluated** → the status reason [`attempt_status_reason`] is matched against
//!    `retryStrategy.evaluateOnExit` in list order; the first rule that matches decides. `EXIT`
//!    fails the job. `RETRY`, or no rule matching, retries if attempts remain and fails
//!    otherwise. The no-match default is Batch's documented default for *container* jobs ("If
//!    none of the listed conditions match, then the job is retried", reference §4.4); for
//!    service jobs it is inferred. A rule without `onStatusReason` matches every reason.
//!
//! ## Counting attempts
//!
//! `retryStrategy.attempts` (1–10; no strategy means 1) is the number of times the job may run,
//! the first included. Contract: when [`decide_after_failure`] is called, the **last entry of
//! `job.attempts` is the attempt that just ended** (hosts append an attempt at dispatch); its
//! stored reason is ignored and `failure` describes it instead. Attempts used = the earlier
//! attempts that *consume* an attempt ([`consumes_attempt`]: every one except capacity failures,
//! preemptions and lost training jobs, by the class hosts record in `Attempt::failed_as`, which
//! [`requeue_of`] gives) + 1 for this one. A retry is allowed while
//! attempts used < attempts.
//!
//! ## Pattern matching
//!
//! [`glob_matches`]: `*` matches any run of characters (including none) anywhere in the pattern;
//! every other character is literal and case-sensitive; the whole reason must match. The
//! SageMaker Python SDK's default rule is written `Received status from SageMaker:InternalServer…`
//! with no space after the colon (reference §3.3), while the reasons have one; so a pattern that
//! starts with `Received status from SageMaker:` followed by anything but a space is also tried
//! with the space inserted ([`rule_matches`]). Without this the SDK's RETRY rule could never
//! match.
//!
//! # Backoff
//!
//! `delay(n) = min(cap, base × 2^n)` plus a jitter in `[0, jitter_max_ms]`, where the jitter is
//! the FNV-1a 64-bit hash of (a tag, the job id, `n`) modulo `jitter_max_ms + 1`. The same job
//! and `n` always give the same jitter; different jobs spread out, so a burst of jobs that failed
//! together does not return together.
//!
//! - Capacity: `n` = the capacity failures immediately before this one (the trailing run in
//!   `job.attempts`, the current attempt excluded), so the first waits `base`. Defaults: base
//!   30 s, cap 15 min (reached at `n = 5`).
//! - Retries: `n` = the attempts used before the one that just ended, so the first retry waits
//!   `base`. Defaults: base 10 s, cap 2 min: long enough not to hammer a failing dependency,
//!   short next to a training job.
//! - Jitter bound: 5 s by default, for both.
//!
//! # Timeouts
//!
//! [`attempt_deadline`]: the attempt's clock starts when it is dispatched (SCHEDULED, the
//! attempt's `started_at`), because that is when it starts holding capacity; Batch leaves the
//! start unstated for service jobs (reference §4.6). The deadline is start +
//! `attemptDurationSeconds`; [`timed_out`] is true from the deadline on (inclusive).
//!
//! # Time limits on RUNNABLE ([`time_limit_action`])
//!
//! A RUNNABLE job whose status reason starts with an action's `reason` and that has waited at
//! least `maxTimeSeconds` (inclusive) is terminated; the first matching `TERMINATE` action in
//! list order wins (`CANCEL` is refused on service queues and ignored here). The wait starts at
//! `runnable_at`, except that it runs on through capacity failures: Batch counts the time spent
//! in SCHEDULED before a capacity failure towards `maxTimeSeconds` (reference §4.5). So when the
//! job's most recent attempts are capacity failures, the wait starts when the job became
//! RUNNABLE before the first of them: the end (`stopped_at`) of the attempt before that run, or
//! the job's submission (`created_at`) when there is none.
//!
//! # Terminate
//!
//! [`terminate_action`]: a job not yet dispatched fails at once with the caller's reason; a
//! dispatched job has its attempt stopped (`StopTrainingJob`) and fails when the stop is
//! reported (rule 1 above); a finished job is left alone. The caller sets `isTerminated` in every
//! case.

use trainyard_domain::job::{Attempt, Requeue, RetryAction, ServiceJob};
use trainyard_domain::queue::{JobStateTimeLimitAction, TimeLimitAction};
use trainyard_domain::random::Fnv1a;

/// The prefix Batch puts before SageMaker's own words in a status reason.
pub const SAGEMAKER_PREFIX: &str = "Received status from SageMaker: ";

/// The status-reason code Batch uses for a capacity error, and the `reason` a queue's time
/// limit names to catch jobs stuck on capacity.
pub const CAPACITY_CODE: &str = "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY";

/// The status reason of a job put back to RUNNABLE after a capacity error (reference §4.5).
pub const CAPACITY_REASON: &str =
    "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY - Unable to provision requested compute resources";

/// The prefix of the reason of a job failed by a queue's `jobStateTimeLimitActions`.
pub const TIME_LIMIT_PREFIX: &str = "Terminated by JobStateTimeLimit action due to reason: ";

/// The reason of an attempt stopped after `attemptDurationSeconds` (Batch's container-job words).
pub const TIMEOUT_REASON: &str = "Job attempt duration exceeded timeout";

/// The reason of an attempt stopped to free capacity for another job (Trainyard's words).
pub const PREEMPTED_REASON: &str =
    "PREEMPTED - The attempt was stopped to free capacity for another job";

/// The reason of an attempt whose training job SageMaker no longer has (Trainyard's words):
/// its launch was recorded, yet describing it finds nothing. It happens when the SageMaker side
/// lost its state (an emulator restarted without it); the job goes back to RUNNABLE without
/// using one of its attempts.
pub const LOST_REASON: &str = "LOST - SageMaker no longer has the attempt's training job; \
     requeued without using an attempt";

/// The reason of an attempt stopped by someone other than Trainyard (`StopTrainingJob` called
/// directly on the training job).
pub const EXTERNAL_STOP_REASON: &str = "Received status from SageMaker: Stopped";

/// SageMaker's `FailureReason` prefix for capacity errors.
const CAPACITY_FAILURE_PREFIX: &str = "CapacityError";

/// `CreateTrainingJob`'s error code for an account quota: treated as a capacity error.
const RESOURCE_LIMIT_EXCEEDED: &str = "ResourceLimitExceeded";

/// The SDK's spelling of the SageMaker prefix, without the trailing space (reference §3.3).
const SAGEMAKER_PREFIX_NO_SPACE: &str = "Received status from SageMaker:";

/// `Received status from SageMaker: <failure_reason>`.
pub fn sagemaker_reason(failure_reason: &str) -> String {
    format!("{SAGEMAKER_PREFIX}{failure_reason}")
}

/// `Terminated by JobStateTimeLimit action due to reason: <reason>`.
pub fn time_limit_reason(reason: &str) -> String {
    format!("{TIME_LIMIT_PREFIX}{reason}")
}

/// Whether `text` matches the glob `pattern`: `*` matches any run of characters (none
/// included), everything else is literal and case-sensitive, and the whole text must match.
///
/// Linear in `pattern.len() + text.len()`: the pattern is split at its stars; the first piece
/// must be a prefix and the last a suffix, and each middle piece is found at its leftmost
/// occurrence after the previous one. Leftmost is always safe (a later occurrence leaves less
/// room for what follows), so nothing is ever retried.
pub fn glob_matches(pattern: &str, text: &str) -> bool {
    let mut pieces = pattern.split('*');
    let first = pieces.next().unwrap_or_default();
    let Some(last) = pieces.next_back() else {
        // No star: a plain comparison.
        return pattern == text;
    };
    let Some(rest) = text.strip_prefix(first) else {
        return false;
    };
    // The suffix is taken off before the middle pieces are searched, so they cannot overlap it.
    let Some(mut middle) = rest.strip_suffix(last) else {
        return false;
    };
    for piece in pieces.filter(|p| !p.is_empty()) {
        match middle.find(piece) {
            Some(at) => middle = &middle[at + piece.len()..],
            None => return false,
        }
    }
    true
}

/// Whether an `evaluateOnExit` pattern matches a status reason: [`glob_matches`], also trying
/// the SDK's space-less `Received status from SageMaker:` prefix with the space put back.
pub fn rule_matches(pattern: &str, reason: &str) -> bool {
    if glob_matches(pattern, reason) {
        return true;
    }
    match pattern.strip_prefix(SAGEMAKER_PREFIX_NO_SPACE) {
        Some(rest) if !rest.starts_with(' ') => {
            glob_matches(&format!("{SAGEMAKER_PREFIX}{rest}"), reason)
        }
        _ => false,
    }
}

/// Why Trainyard stopped an attempt (or SageMaker stopped it for lack of capacity).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopCause {
    /// TerminateServiceJob, with the caller's reason.
    Terminated {
        /// The `reason` given to TerminateServiceJob.
        reason: String,
    },
    /// `timeoutConfig.attemptDurationSeconds` elapsed.
    Timeout,
    /// Stopped to free capacity for another job.
    Preempted,
    /// SageMaker stopped the job after it waited for capacity too long (reference §4.5, second
    /// row: `Stopped`, secondary status says it timed out pending capacity).
    CapacityWait,
    /// Stopped by someone other than Trainyard.
    External,
}

/// How an attempt ended badly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptFailure {
    /// SageMaker reported `TrainingJobStatus = Failed`.
    Failed {
        /// SageMaker's `FailureReason`, verbatim.
        failure_reason: String,
    },
    /// SageMaker reported `Stopped`.
    Stopped(StopCause),
    /// SageMaker has no training job under the attempt's name, though its launch was recorded.
    Lost,
    /// `CreateTrainingJob` was refused (`ResourceInUse` is not a failure: the attempt already
    /// exists and is adopted).
    Rejected {
        /// The error code, e.g. `ResourceLimitExceeded` or `ValidationException`.
        code: String,
        /// The error message (may be empty).
        message: String,
    },
}

/// The class of an ended attempt; see the module docs for the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// Not enough capacity: back to RUNNABLE without using an attempt.
    Capacity,
    /// Stopped by TerminateServiceJob.
    Terminated,
    /// Stopped by `attemptDurationSeconds`.
    TimedOut,
    /// Stopped to free capacity.
    Preempted,
    /// Its training job vanished: back to RUNNABLE at once, without using an attempt.
    Lost,
    /// Everything else: decided by the retry strategy.
    Evaluated,
}

/// Classifies an ended attempt (see the table in the module docs).
pub fn classify(failure: &AttemptFailure) -> FailureKind {
    match failure {
        AttemptFailure::Failed { failure_reason } => {
            if failure_reason.starts_with(CAPACITY_FAILURE_PREFIX) {
                FailureKind::Capacity
            } else {
                FailureKind::Evaluated
            }
        }
        AttemptFailure::Rejected { code, .. } => {
            if code == RESOURCE_LIMIT_EXCEEDED {
                FailureKind::Capacity
            } else {
                FailureKind::Evaluated
            }
        }
        AttemptFailure::Stopped(cause) => match cause {
            StopCause::Terminated { .. } => FailureKind::Terminated,
            StopCause::Timeout => FailureKind::TimedOut,
            StopCause::Preempted => FailureKind::Preempted,
            StopCause::CapacityWait => FailureKind::Capacity,
            StopCause::External => FailureKind::Evaluated,
        },
        AttemptFailure::Lost => FailureKind::Lost,
    }
}

/// The status reason to store on the attempt that ended this way (and the one retry rules are
/// matched against).
pub fn attempt_status_reason(failure: &AttemptFailure) -> String {
    match failure {
        AttemptFailure::Failed { failure_reason } => sagemaker_reason(failure_reason),
        AttemptFailure::Rejected { code, message } if message.is_empty() => sagemaker_reason(code),
        AttemptFailure::Rejected { code, message } => {
            sagemaker_reason(&format!("{code}: {message}"))
        }
        AttemptFailure::Stopped(cause) => match cause {
            StopCause::Terminated { reason } => reason.clone(),
            StopCause::Timeout => TIMEOUT_REASON.to_owned(),
            StopCause::Preempted => PREEMPTED_REASON.to_owned(),
            StopCause::CapacityWait => CAPACITY_REASON.to_owned(),
            StopCause::External => EXTERNAL_STOP_REASON.to_owned(),
        },
        AttemptFailure::Lost => LOST_REASON.to_owned(),
    }
}

/// Whether a stored attempt reason records a capacity failure: [`CAPACITY_CODE`]…, or a
/// SageMaker reason starting `CapacityError` or `ResourceLimitExceeded`.
pub fn is_capacity_reason(reason: &str) -> bool {
    if reason.starts_with(CAPACITY_CODE) {
        return true;
    }
    reason.strip_prefix(SAGEMAKER_PREFIX).is_some_and(|rest| {
        rest.starts_with(CAPACITY_FAILURE_PREFIX) || rest.starts_with(RESOURCE_LIMIT_EXCEEDED)
    })
}

/// Why a job goes back to RUNNABLE after an attempt that ended this way (stored on the job as
/// `requeued_by`, which metrics count): capacity failures, preemptions, and retries.
pub fn requeue_of(failure: &AttemptFailure) -> Requeue {
    match classify(failure) {
        FailureKind::Capacity => Requeue::CapacityError,
        FailureKind::Preempted => Requeue::Preemption,
        FailureKind::Lost => Requeue::Lost,
        FailureKind::Terminated | FailureKind::TimedOut | FailureKind::Evaluated => Requeue::Retry,
    }
}

/// Whether an ended attempt used up one of `retryStrategy.attempts`: every attempt does except
/// capacity failures, preemptions and lost training jobs, by the class its end was recorded in
/// ([`Attempt::failed_as`]). An attempt with none recorded counts (when unsure, do not grant
/// extra retries).
pub fn consumes_attempt(attempt: &Attempt) -> bool {
    !matches!(
        attempt.failed_as,
        Some(Requeue::CapacityError | Requeue::Preemption | Requeue::Lost)
    )
}

/// Backoff and jitter settings for [`decide_after_failure`]. All times in milliseconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryConfig {
    /// Delay after the first capacity failure in a row.
    pub capacity_base_ms: i64,
    /// Longest delay after a capacity failure, before jitter.
    pub capacity_cap_ms: i64,
    /// Delay before the first retry of a failed attempt.
    pub retry_base_ms: i64,
    /// Longest delay before a retry, before jitter.
    pub retry_cap_ms: i64,
    /// Largest jitter added to either delay.
    pub jitter_max_ms: i64,
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self {
            capacity_base_ms: 30_000,
            capacity_cap_ms: 15 * 60_000,
            retry_base_ms: 10_000,
            retry_cap_ms: 2 * 60_000,
            jitter_max_ms: 5_000,
        }
    }
}

/// `min(cap_ms, base_ms × 2^n)`, without overflow; never below `base_ms` unless `cap_ms` is.
pub fn backoff_ms(base_ms: i64, cap_ms: i64, n: u32) -> i64 {
    let factor = 1_i64.checked_shl(n).filter(|f| *f > 0).unwrap_or(i64::MAX);
    base_ms.saturating_mul(factor).min(cap_ms)
}

/// What a jitter is for; part of the hash so that the two jitters of one job differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JitterTag {
    /// Capacity-error backoff.
    Capacity,
    /// Retry backoff.
    Retry,
}

/// Deterministic jitter in `[0, max_ms]` from (tag, job id, n): FNV-1a 64 modulo `max_ms + 1`.
/// Written out rather than `DefaultHasher`, whose output may change between Rust releases.
pub fn jitter_ms(tag: JitterTag, job_id: &str, n: u32, max_ms: i64) -> i64 {
    if max_ms <= 0 {
        return 0;
    }
    let tag_byte = match tag {
        JitterTag::Capacity => b'c',
        JitterTag::Retry => b'r',
    };
    let mut hash = Fnv1a::new();
    hash.write(&[tag_byte, 0xff]);
    hash.write(job_id.as_bytes());
    // 0xff never occurs in UTF-8, so the fields cannot run into each other.
    hash.write(&[0xff]);
    hash.write(&n.to_le_bytes());
    // `max_ms` is positive, so the modulus is in 1..=i64::MAX and the remainder fits in i64.
    let modulus = max_ms as u64 + 1;
    (hash.finish() % modulus) as i64
}

/// The delay before a job may run again after its `n`-th capacity failure in a row (0-based):
/// backoff plus jitter.
pub fn capacity_delay_ms(job_id: &str, n: u32, config: &RetryConfig) -> i64 {
    backoff_ms(config.capacity_base_ms, config.capacity_cap_ms, n).saturating_add(jitter_ms(
        JitterTag::Capacity,
        job_id,
        n,
        config.jitter_max_ms,
    ))
}

/// The delay before retry number `n + 1` (0-based `n`): backoff plus jitter.
pub fn retry_delay_ms(job_id: &str, n: u32, config: &RetryConfig) -> i64 {
    backoff_ms(config.retry_base_ms, config.retry_cap_ms, n).saturating_add(jitter_ms(
        JitterTag::Retry,
        job_id,
        n,
        config.jitter_max_ms,
    ))
}

/// What to do with a job after an attempt ended badly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AfterFailure {
    /// Back to RUNNABLE; not to be dispatched before `not_before_ms`.
    Requeue {
        /// Earliest next dispatch (epoch ms).
        not_before_ms: i64,
        /// The job's status reason while it waits.
        status_reason: String,
        /// Whether the ended attempt used up one of `retryStrategy.attempts`.
        counts_attempt: bool,
    },
    /// FAILED, for good.
    Failed {
        /// The job's final status reason.
        status_reason: String,
    },
}

/// The attempts before the one that just ended (the last entry; see the module docs).
fn earlier_attempts(job: &ServiceJob) -> &[Attempt] {
    job.attempts
        .split_last()
        .map_or(&[][..], |(_, earlier)| earlier)
}

/// `retryStrategy.attempts`, 1 without a strategy, kept within 1–10 whatever is stored.
pub fn max_attempts(job: &ServiceJob) -> u32 {
    job.retry_strategy
        .as_ref()
        .map_or(1, |strategy| strategy.attempts)
        .clamp(1, 10)
}

/// Attempts used, counting the one that just ended as `current_counts` says.
fn attempts_used(job: &ServiceJob, current_counts: bool) -> u32 {
    let earlier = earlier_attempts(job)
        .iter()
        .filter(|a| consumes_attempt(a))
        .count();
    u32::try_from(earlier)
        .unwrap_or(u32::MAX)
        .saturating_add(u32::from(current_counts))
}

/// Capacity failures immediately before the attempt that just ended.
fn capacity_streak(job: &ServiceJob) -> u32 {
    let streak = earlier_attempts(job)
        .iter()
        .rev()
        .take_while(|a| a.failed_as == Some(Requeue::CapacityError))
        .count();
    u32::try_from(streak).unwrap_or(u32::MAX)
}

/// The action of the first `evaluateOnExit` rule matching `reason`, if any.
pub fn matching_rule(job: &ServiceJob, reason: &str) -> Option<RetryAction> {
    let strategy = job.retry_strategy.as_ref()?;
    strategy
        .evaluate_on_exit
        .iter()
        .filter_map(|rule| rule.action.map(|action| (rule, action)))
        .find(|(rule, _)| {
            rule.on_status_reason
                .as_deref()
                .is_none_or(|pattern| rule_matches(pattern, reason))
        })
        .map(|(_, action)| action)
}

/// Decides what happens to `job` after its latest attempt ended with `failure` at `now_ms`.
/// See the module docs for the rules, in order, and the attempt-counting contract.
pub fn decide_after_failure(
    job: &ServiceJob,
    failure: &AttemptFailure,
    now_ms: i64,
    config: &RetryConfig,
) -> AfterFailure {
    let kind = classify(failure);
    let reason = attempt_status_reason(failure);
    if job.is_terminated || kind == FailureKind::Terminated {
        return AfterFailure::Failed {
            status_reason: reason,
        };
    }
    match kind {
        FailureKind::Terminated | FailureKind::TimedOut => AfterFailure::Failed {
            status_reason: reason,
        },
        FailureKind::Capacity => AfterFailure::Requeue {
            not_before_ms: now_ms.saturating_add(capacity_delay_ms(
                &job.job_id,
                capacity_streak(job),
                config,
            )),
            status_reason: CAPACITY_REASON.to_owned(),
            counts_attempt: false,
        },
        FailureKind::Lost => AfterFailure::Requeue {
            not_before_ms: now_ms,
            status_reason: reason,
            counts_attempt: false,
        },
        FailureKind::Preempted => {
            let allowed = job
                .preemption_configuration
                .as_ref()
                .and_then(|c| c.preemption_retries_before_termination);
            let preempted = job.preemptions().saturating_add(1);
            match allowed {
                Some(allowed) if preempted > allowed => AfterFailure::Failed {
                    status_reason: format!(
                        "{PREEMPTED_REASON}; preempted {preempted} times, \
                         preemptionRetriesBeforeTermination is {allowed}"
                    ),
                },
                _ => AfterFailure::Requeue {
                    not_before_ms: now_ms,
                    status_reason: reason,
                    counts_attempt: false,
                },
            }
        }
        FailureKind::Evaluated => {
            let used = attempts_used(job, true);
            let retry = match matching_rule(job, &reason) {
                Some(RetryAction::Exit) => false,
                Some(RetryAction::Retry) | None => used < max_attempts(job),
            };
            if retry {
                let n = used.saturating_sub(1);
                AfterFailure::Requeue {
                    not_before_ms: now_ms.saturating_add(retry_delay_ms(&job.job_id, n, config)),
                    status_reason: reason,
                    counts_attempt: true,
                }
            } else {
                AfterFailure::Failed {
                    status_reason: reason,
                }
            }
        }
    }
}

/// When an attempt dispatched at `attempt_started_ms` must be stopped, if the job has an
/// `attemptDurationSeconds`.
pub fn attempt_deadline(job: &ServiceJob, attempt_started_ms: i64) -> Option<i64> {
    let seconds = job.timeout_config.as_ref()?.attempt_duration_seconds?;
    Some(attempt_started_ms.saturating_add(i64::from(seconds) * 1000))
}

/// Whether the job's current attempt has reached its deadline: the job is dispatched (SCHEDULED,
/// STARTING or RUNNING), not already being terminated, and its latest attempt started at least
/// `attemptDurationSeconds` ago.
pub fn timed_out(job: &ServiceJob, now_ms: i64) -> bool {
    if !job.status.is_dispatched() || job.is_terminated {
        return false;
    }
    job.latest_attempt()
        .and_then(|attempt| attempt.started_at)
        .and_then(|started| attempt_deadline(job, started))
        .is_some_and(|deadline| now_ms >= deadline)
}

/// When the current RUNNABLE wait began, for time limits (see the module docs): `runnable_at`,
/// or earlier when the job's latest attempts were capacity failures, or later when its latest
/// attempt was preempted (a preempted job keeps its place in line, `runnable_at`, but its wait
/// began when the attempt stopped).
pub fn waiting_since(job: &ServiceJob) -> i64 {
    let runnable_at = job.runnable_at.unwrap_or(job.created_at);
    if let Some(preempted) = job
        .attempts
        .last()
        .filter(|a| a.failed_as == Some(Requeue::Preemption))
    {
        return preempted.stopped_at.unwrap_or(runnable_at).max(runnable_at);
    }
    let streak = job
        .attempts
        .iter()
        .rev()
        .take_while(|a| a.failed_as == Some(Requeue::CapacityError))
        .count();
    if streak == 0 {
        return runnable_at;
    }
    let before_streak = job.attempts.len() - streak;
    let start = match before_streak
        .checked_sub(1)
        .and_then(|i| job.attempts.get(i))
    {
        Some(previous) => previous.stopped_at.unwrap_or(runnable_at),
        None => job.created_at,
    };
    start.min(runnable_at)
}

/// The termination reason if one of the queue's time limits applies to `job` at `now_ms`: the
/// job is RUNNABLE, its status reason starts with the action's `reason`, and it has waited at
/// least `maxTimeSeconds`. The first such `TERMINATE` action in list order wins.
pub fn time_limit_action(
    actions: &[JobStateTimeLimitAction],
    job: &ServiceJob,
    now_ms: i64,
) -> Option<String> {
    if job.status != trainyard_domain::job::JobStatus::Runnable {
        return None;
    }
    let reason = job.status_reason.as_deref()?;
    let waited_ms = now_ms.saturating_sub(waiting_since(job));
    actions
        .iter()
        .filter(|a| a.action == TimeLimitAction::Terminate)
        .find(|a| {
            reason.starts_with(&a.reason) && waited_ms >= i64::from(a.max_time_seconds) * 1000
        })
        .map(|a| time_limit_reason(&a.reason))
}

/// What TerminateServiceJob does to a job (the caller also sets `isTerminated`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TerminateAction {
    /// Not dispatched: move it to FAILED now with the caller's reason.
    FailNow,
    /// Dispatched: stop this training job; the job fails when the stop is reported.
    StopAttempt {
        /// The SageMaker training job to stop.
        training_job_name: String,
    },
    /// Already SUCCEEDED or FAILED: nothing to do.
    AlreadyFinished,
}

/// What TerminateServiceJob must do to `job` (see the module docs).
pub fn terminate_action(job: &ServiceJob) -> TerminateAction {
    if job.status.is_terminal() {
        return TerminateAction::AlreadyFinished;
    }
    if job.status.is_dispatched()
        && let Some(attempt) = job.latest_attempt()
    {
        return TerminateAction::StopAttempt {
            training_job_name: attempt.training_job_name.clone(),
        };
    }
    // Not dispatched, or dispatched with no attempt on record (nothing to stop).
    TerminateAction::FailNow
}
