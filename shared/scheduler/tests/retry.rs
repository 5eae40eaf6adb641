//! Retry, capacity-error, timeout, time-limit and terminate rules, one narrative case per rule of
//! the `retry` module docs, then seeded property tests (proptest prints the failing seed).

use proptest::prelude::*;
use trainyard_domain::job::{
    Attempt, EvaluateOnExit, JobPreemptionConfiguration, JobStatus, PreemptionSummary, Requeue,
    RetryAction, RetryStrategy, ServiceJob, TimeoutConfig,
};
use trainyard_domain::payload::TrainingRequest;
use trainyard_domain::queue::{JobStateTimeLimitAction, TimeLimitAction, TimeLimitState};
use trainyard_domain::random::SplitMix64;
use trainyard_scheduler::retry::{
    AfterFailure, AttemptFailure, CAPACITY_CODE, CAPACITY_REASON, FailureKind, JitterTag,
    LOST_REASON, PREEMPTED_REASON, RetryConfig, StopCause, TIMEOUT_REASON, TerminateAction,
    attempt_deadline, attempt_status_reason, backoff_ms, capacity_delay_ms, classify,
    consumes_attempt, decide_after_failure, glob_matches, is_capacity_reason, jitter_ms,
    requeue_of, retry_delay_ms, rule_matches, sagemaker_reason, terminate_action,
    time_limit_action, time_limit_reason, timed_out, waiting_since,
};

const NOW: i64 = 1_000_000_000;
const SEC: i64 = 1000;

const INTERNAL: &str = "InternalServerError: We encountered an internal error. Please try again.";
const CAPACITY: &str = "CapacityError: Unable to provision requested ML compute capacity. Please retry using a different ML instance type.";

// ---------------------------------------------------------------------------------------------
// Builders

/// A RUNNING job with one attempt (the one that is about to end), no retry strategy.
fn job(id: &str) -> ServiceJob {
    let submitted = ServiceJob::submitted(
        id.into(),
        "train".into(),
        "q".into(),
        "{}",
        TrainingRequest::single("t", "ml.p4d.24xlarge", 2),
        NOW - 3600 * SEC,
    );
    ServiceJob {
        status: JobStatus::Running,
        attempts: vec![attempt(None)],
        runnable_at: Some(NOW - 1800 * SEC),
        scheduled_at: Some(NOW - 600 * SEC),
        started_at: Some(NOW - 500 * SEC),
        updated_at: NOW - 500 * SEC,
        ..submitted
    }
}

/// An attempt, ended with `reason` as stored (running when `None`). Its class is the one the
/// service records beside such a reason (`attempt_reasons_are_prefixed_and_read_back` ties the
/// two together).
fn attempt(reason: Option<&str>) -> Attempt {
    let class = |reason: &str| {
        if is_capacity_reason(reason) {
            Requeue::CapacityError
        } else if reason.starts_with(PREEMPTED_REASON) {
            Requeue::Preemption
        } else if reason.starts_with(LOST_REASON) {
            Requeue::Lost
        } else {
            Requeue::Retry
        }
    };
    Attempt {
        stop_requested: None,
        failed_as: reason.map(class),
        selected_instance_type: None,
        training_job_name: "AWSBatchtrain0".into(),
        training_job_arn: None,
        started_at: Some(NOW - 600 * SEC),
        stopped_at: reason.map(|_| NOW - 550 * SEC),
        status_reason: reason.map(str::to_owned),
        service_environment: None,
    }
}

/// An attempt ended by `failure`, recorded as the service records it.
fn ended_by(failure: &AttemptFailure) -> Attempt {
    Attempt {
        failed_as: Some(requeue_of(failure)),
        selected_instance_type: None,
        ..attempt(Some(&attempt_status_reason(failure)))
    }
}

fn rule(action: RetryAction, pattern: &str) -> EvaluateOnExit {
    EvaluateOnExit {
        action: Some(action),
        on_status_reason: Some(pattern.into()),
    }
}

trait JobExt {
    fn attempts(self, n: u32, rules: Vec<EvaluateOnExit>) -> Self;
    /// Puts ended attempts with these stored reasons before the current one.
    fn earlier(self, reasons: &[&str]) -> Self;
    fn timeout_s(self, s: u32) -> Self;
    fn status(self, s: JobStatus) -> Self;
    fn reason(self, r: &str) -> Self;
}

impl JobExt for ServiceJob {
    fn attempts(mut self, attempts: u32, evaluate_on_exit: Vec<EvaluateOnExit>) -> Self {
        self.retry_strategy = Some(RetryStrategy {
            attempts,
            evaluate_on_exit,
        });
        self
    }
    fn earlier(mut self, reasons: &[&str]) -> Self {
        let current = self.attempts.pop();
        self.attempts = reasons.iter().map(|r| attempt(Some(r))).collect();
        self.attempts.extend(current);
        self
    }
    fn timeout_s(mut self, s: u32) -> Self {
        self.timeout_config = Some(TimeoutConfig {
            attempt_duration_seconds: Some(s),
        });
        self
    }
    fn status(mut self, s: JobStatus) -> Self {
        self.status = s;
        self
    }
    fn reason(mut self, r: &str) -> Self {
        self.status_reason = Some(r.into());
        self
    }
}

fn failed(reason: &str) -> AttemptFailure {
    AttemptFailure::Failed {
        failure_reason: reason.into(),
    }
}

fn rejected(code: &str, message: &str) -> AttemptFailure {
    AttemptFailure::Rejected {
        code: code.into(),
        message: message.into(),
    }
}

fn stopped(cause: StopCause) -> AttemptFailure {
    AttemptFailure::Stopped(cause)
}

/// The SageMaker Python SDK's `DEFAULT_SAGEMAKER_TRAINING_RETRY_CONFIG`, with `attempts` as given.
fn sdk_rules() -> Vec<EvaluateOnExit> {
    vec![
        rule(
            RetryAction::Retry,
            "Received status from SageMaker:InternalServerError: We encountered an internal error. Please try again.",
        ),
        rule(RetryAction::Exit, "*"),
    ]
}

/// The user guide's example strategy.
fn guide_rules() -> Vec<EvaluateOnExit> {
    vec![
        rule(
            RetryAction::Retry,
            "Received status from SageMaker: InternalServerError*",
        ),
        rule(
            RetryAction::Exit,
            "Received status from SageMaker: ValidationException*",
        ),
        rule(RetryAction::Exit, "*"),
    ]
}

fn decide(job: &ServiceJob, failure: &AttemptFailure) -> AfterFailure {
    decide_after_failure(job, failure, NOW, &RetryConfig::default())
}

/// Short names for outcomes in tables.
#[derive(Debug, PartialEq)]
enum Outcome {
    Retry,
    Fail,
    CapacityRequeue,
}

fn outcome(after: &AfterFailure) -> Outcome {
    match after {
        AfterFailure::Failed { .. } => Outcome::Fail,
        AfterFailure::Requeue { status_reason, .. } if status_reason == CAPACITY_REASON => {
            Outcome::CapacityRequeue
        }
        AfterFailure::Requeue { .. } => Outcome::Retry,
    }
}

// ---------------------------------------------------------------------------------------------
// Globs

#[test]
fn glob_patterns_match_whole_reasons_with_stars_anywhere() {
    let reason = sagemaker_reason(CAPACITY);
    let cases: &[(&str, &str, &str, bool)] = &[
        ("empty matches empty", "", "", true),
        ("empty matches nothing else", "", "a", false),
        ("a lone star matches empty", "*", "", true),
        ("a lone star matches anything", "*", "anything at all", true),
        ("double stars act as one", "**", "x", true),
        ("literal equal", "abc", "abc", true),
        ("literal is anchored at the end", "abc", "abcd", false),
        ("literal is anchored at the start", "bcd", "abcd", false),
        ("trailing star is a prefix", "ab*", "abcd", true),
        ("leading star is a suffix", "*cd", "abcd", true),
        ("star in the middle", "a*d", "abcd", true),
        ("prefix and suffix may not overlap", "a*a", "a", false),
        ("several pieces in order", "a*b*a", "aba", true),
        ("pieces out of order", "a*b*c", "acb", false),
        ("case sensitive", "ABC", "abc", false),
        ("question mark is literal", "a?c", "abc", false),
        ("question mark literal matches itself", "a?c", "a?c", true),
        ("multi-byte prefix", "é*", "éa", true),
        ("multi-byte suffix", "*é", "aé", true),
        ("multi-byte mismatch", "*é", "ae", false),
        (
            "the guide's capacity pattern",
            "*CapacityError*",
            &reason,
            true,
        ),
        (
            "the guide's prefix pattern",
            "Received status from SageMaker: CapacityError*",
            &reason,
            true,
        ),
        (
            "a different code does not match",
            "Received status from SageMaker: ValidationException*",
            &reason,
            false,
        ),
    ];
    for (name, pattern, text, expected) in cases {
        assert_eq!(
            glob_matches(pattern, text),
            *expected,
            "{name}: {pattern:?} vs {text:?}"
        );
    }
}

#[test]
fn a_pathological_pattern_is_answered_without_backtracking() {
    // A backtracking matcher takes time exponential in the number of stars here.
    let text = "a".repeat(200_000);
    assert!(!glob_matches("*a*a*a*a*a*b", &text));
    assert!(glob_matches("*a*a*a*a*a*", &text));
    let with_b = format!("{text}b");
    assert!(glob_matches("*a*a*a*a*a*b", &with_b));
}

#[test]
fn the_sdk_rule_without_a_space_still_matches_the_spaced_reason() {
    let reason = sagemaker_reason(INTERNAL);
    let sdk = "Received status from SageMaker:InternalServerError: We encountered an internal error. Please try again.";
    assert!(!glob_matches(sdk, &reason), "plain glob sees the quirk");
    assert!(rule_matches(sdk, &reason), "rules forgive it");
    assert!(rule_matches(
        "Received status from SageMaker:Internal*",
        &reason
    ));
    // The forgiveness adds a space; it does not make other patterns match.
    assert!(!rule_matches(
        "Received status from SageMaker:ValidationException*",
        &reason
    ));
    assert!(!rule_matches(
        "Received status from SageMaker:  Internal*",
        &reason
    ));
}

// ---------------------------------------------------------------------------------------------
// Classification and reasons

#[test]
fn attempts_are_classified_by_how_they_ended() {
    let cases: &[(&str, AttemptFailure, FailureKind)] = &[
        (
            "a capacity failure",
            failed(CAPACITY),
            FailureKind::Capacity,
        ),
        (
            "an account quota on create",
            rejected(
                "ResourceLimitExceeded",
                "The account-level service limit ...",
            ),
            FailureKind::Capacity,
        ),
        (
            "SageMaker gave up waiting for capacity",
            stopped(StopCause::CapacityWait),
            FailureKind::Capacity,
        ),
        (
            "capacity must be the prefix",
            failed("AlgorithmError: CapacityError in user code"),
            FailureKind::Evaluated,
        ),
        (
            "an algorithm error",
            failed("AlgorithmError: exit 1"),
            FailureKind::Evaluated,
        ),
        (
            "a validation error on create",
            rejected("ValidationException", "bad role"),
            FailureKind::Evaluated,
        ),
        (
            "terminate",
            stopped(StopCause::Terminated {
                reason: "user said so".into(),
            }),
            FailureKind::Terminated,
        ),
        (
            "a timeout",
            stopped(StopCause::Timeout),
            FailureKind::TimedOut,
        ),
        (
            "a preemption",
            stopped(StopCause::Preempted),
            FailureKind::Preempted,
        ),
        (
            "a stop from outside",
            stopped(StopCause::External),
            FailureKind::Evaluated,
        ),
    ];
    for (name, failure, expected) in cases {
        assert_eq!(classify(failure), *expected, "{name}");
    }
}

#[test]
fn attempt_reasons_are_prefixed_and_read_back() {
    let cases: &[(&str, AttemptFailure, &str, bool, bool)] = &[
        // (name, failure, stored reason, is capacity, consumes an attempt)
        (
            "SageMaker's failure reason is prefixed",
            failed(INTERNAL),
            "Received status from SageMaker: InternalServerError: We encountered an internal error. Please try again.",
            false,
            true,
        ),
        (
            "a capacity failure",
            failed(CAPACITY),
            "Received status from SageMaker: CapacityError: Unable to provision requested ML compute capacity. Please retry using a different ML instance type.",
            true,
            false,
        ),
        (
            "a refusal with a message",
            rejected("ResourceLimitExceeded", "quota is 0"),
            "Received status from SageMaker: ResourceLimitExceeded: quota is 0",
            true,
            false,
        ),
        (
            "a refusal without a message",
            rejected("ValidationException", ""),
            "Received status from SageMaker: ValidationException",
            false,
            true,
        ),
        (
            "gave up waiting for capacity",
            stopped(StopCause::CapacityWait),
            CAPACITY_REASON,
            true,
            false,
        ),
        (
            "a timeout",
            stopped(StopCause::Timeout),
            TIMEOUT_REASON,
            false,
            true,
        ),
        (
            "a preemption",
            stopped(StopCause::Preempted),
            PREEMPTED_REASON,
            false,
            false,
        ),
        (
            "terminate keeps the caller's words",
            stopped(StopCause::Terminated {
                reason: "Default terminate reason".into(),
            }),
            "Default terminate reason",
            false,
            true,
        ),
    ];
    for (name, failure, reason, capacity, consumes) in cases {
        let stored = attempt_status_reason(failure);
        assert_eq!(stored, *reason, "{name}");
        assert_eq!(is_capacity_reason(&stored), *capacity, "{name}: capacity");
        assert_eq!(
            consumes_attempt(&ended_by(failure)),
            *consumes,
            "{name}: consumes"
        );
    }
    assert!(
        consumes_attempt(&attempt(None)),
        "an unexplained attempt counts"
    );
    assert!(is_capacity_reason(CAPACITY_CODE));
}

// ---------------------------------------------------------------------------------------------
// Retry strategy

#[test]
fn the_sdk_default_strategy_fails_on_the_first_error() {
    let j = job("j").attempts(1, sdk_rules());
    for failure in [failed(INTERNAL), failed("AlgorithmError: exit 1")] {
        assert_eq!(outcome(&decide(&j, &failure)), Outcome::Fail, "{failure:?}");
    }
    // Capacity is not the strategy's business, even with one attempt.
    assert_eq!(
        outcome(&decide(&j, &failed(CAPACITY))),
        Outcome::CapacityRequeue
    );
}

#[test]
fn the_sdk_rules_with_more_attempts_retry_internal_errors_and_exit_on_the_rest() {
    let j = job("j").attempts(3, sdk_rules());
    assert_eq!(outcome(&decide(&j, &failed(INTERNAL))), Outcome::Retry);
    assert_eq!(
        outcome(&decide(&j, &failed("AlgorithmError: exit 1"))),
        Outcome::Fail
    );
}

#[test]
fn the_guide_rules_decide_in_list_order() {
    let internal = sagemaker_reason(INTERNAL);
    let cases: &[(&str, ServiceJob, AttemptFailure, Outcome)] = &[
        (
            "internal error with attempts left retries",
            job("j").attempts(3, guide_rules()),
            failed(INTERNAL),
            Outcome::Retry,
        ),
        (
            "internal error on the last attempt fails",
            job("j")
                .attempts(3, guide_rules())
                .earlier(&[&internal, &internal]),
            failed(INTERNAL),
            Outcome::Fail,
        ),
        (
            "a validation refusal exits at once",
            job("j").attempts(3, guide_rules()),
            rejected("ValidationException", "bad role"),
            Outcome::Fail,
        ),
        (
            "anything else exits through the catch-all",
            job("j").attempts(3, guide_rules()),
            failed("AlgorithmError: exit 1"),
            Outcome::Fail,
        ),
        (
            "capacity errors before do not use attempts up",
            job("j").attempts(2, guide_rules()).earlier(&[
                &sagemaker_reason(CAPACITY),
                CAPACITY_REASON,
                &internal,
            ]),
            failed(INTERNAL),
            Outcome::Fail,
        ),
        (
            "only capacity errors before: attempts are intact",
            job("j")
                .attempts(2, guide_rules())
                .earlier(&[&sagemaker_reason(CAPACITY), CAPACITY_REASON]),
            failed(INTERNAL),
            Outcome::Retry,
        ),
        (
            "preemptions before do not use attempts up",
            job("j")
                .attempts(2, guide_rules())
                .earlier(&[PREEMPTED_REASON]),
            failed(INTERNAL),
            Outcome::Retry,
        ),
    ];
    for (name, j, failure, expected) in cases {
        assert_eq!(outcome(&decide(j, failure)), *expected, "{name}");
    }
}

#[test]
fn with_no_matching_rule_the_job_retries_while_attempts_remain() {
    let rules = vec![rule(RetryAction::Exit, "*ValidationException*")];
    let algorithm = sagemaker_reason("AlgorithmError: exit 1");
    let first = job("j").attempts(2, rules.clone());
    let second = job("j").attempts(2, rules).earlier(&[&algorithm]);
    assert_eq!(
        outcome(&decide(&first, &failed("AlgorithmError: exit 1"))),
        Outcome::Retry
    );
    assert_eq!(
        outcome(&decide(&second, &failed("AlgorithmError: exit 1"))),
        Outcome::Fail
    );
    // No rules at all: the same default.
    let bare = job("j").attempts(2, vec![]);
    assert_eq!(
        outcome(&decide(&bare, &failed("AlgorithmError: exit 1"))),
        Outcome::Retry
    );
}

#[test]
fn without_a_retry_strategy_a_job_has_one_attempt() {
    let j = job("j");
    assert_eq!(
        decide(&j, &failed("AlgorithmError: exit 1")),
        AfterFailure::Failed {
            status_reason: sagemaker_reason("AlgorithmError: exit 1")
        }
    );
}

#[test]
fn a_rule_without_a_pattern_matches_every_reason() {
    let rules = vec![EvaluateOnExit {
        action: Some(RetryAction::Exit),
        on_status_reason: None,
    }];
    let j = job("j").attempts(5, rules);
    assert_eq!(outcome(&decide(&j, &failed(INTERNAL))), Outcome::Fail);
}

#[test]
fn a_retry_keeps_the_reason_counts_the_attempt_and_backs_off_briefly() {
    let config = RetryConfig::default();
    let internal = sagemaker_reason(INTERNAL);
    for (earlier, n) in [(0_usize, 0_u32), (1, 1), (2, 2), (5, 5)] {
        let reasons = vec![internal.as_str(); earlier];
        let j = job("j").attempts(10, vec![]).earlier(&reasons);
        let AfterFailure::Requeue {
            not_before_ms,
            status_reason,
            counts_attempt,
        } = decide(&j, &failed(INTERNAL))
        else {
            panic!("attempt {} of 10 should retry", earlier + 1);
        };
        assert_eq!(status_reason, internal);
        assert!(counts_attempt);
        assert_eq!(not_before_ms - NOW, retry_delay_ms("j", n, &config));
        let backoff = backoff_ms(config.retry_base_ms, config.retry_cap_ms, n);
        let delay = not_before_ms - NOW;
        assert!(
            (backoff..=backoff + config.jitter_max_ms).contains(&delay),
            "retry {n}: {delay} ms"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Capacity

#[test]
fn capacity_errors_back_off_exponentially_up_to_the_cap() {
    let config = RetryConfig::default();
    let capacity = sagemaker_reason(CAPACITY);
    // n consecutive capacity failures before this one → 30 s × 2^n, capped at 15 min.
    let expected_s = [30, 60, 120, 240, 480, 900, 900, 900];
    for (n, expected) in expected_s.iter().enumerate() {
        let reasons = vec![capacity.as_str(); n];
        let j = job("j").attempts(1, vec![]).earlier(&reasons);
        let AfterFailure::Requeue {
            not_before_ms,
            status_reason,
            counts_attempt,
        } = decide(&j, &failed(CAPACITY))
        else {
            panic!("capacity must requeue");
        };
        assert_eq!(status_reason, CAPACITY_REASON);
        assert!(!counts_attempt);
        let delay = not_before_ms - NOW;
        let backoff = expected * SEC;
        assert!(
            (backoff..=backoff + config.jitter_max_ms).contains(&delay),
            "after {n} capacity errors: {delay} ms, expected {backoff} ms + jitter"
        );
    }
}

#[test]
fn only_the_latest_run_of_capacity_errors_sets_the_backoff() {
    let capacity = sagemaker_reason(CAPACITY);
    let internal = sagemaker_reason(INTERNAL);
    // Four capacity errors, a real failure, then one capacity error: the run is one long.
    let j = job("j").attempts(3, vec![]).earlier(&[
        &capacity, &capacity, &capacity, &capacity, &internal, &capacity,
    ]);
    let config = RetryConfig::default();
    assert_eq!(
        decide(&j, &failed(CAPACITY)),
        AfterFailure::Requeue {
            not_before_ms: NOW + capacity_delay_ms("j", 1, &config),
            status_reason: CAPACITY_REASON.into(),
            counts_attempt: false,
        }
    );
}

#[test]
fn jitter_is_stable_for_a_job_and_spreads_across_jobs() {
    let config = RetryConfig::default();
    let ids: Vec<String> = (0..50).map(|i| format!("job-{i:03}")).collect();
    let first: Vec<i64> = ids
        .iter()
        .map(|id| capacity_delay_ms(id, 2, &config))
        .collect();
    let again: Vec<i64> = ids
        .iter()
        .map(|id| capacity_delay_ms(id, 2, &config))
        .collect();
    assert_eq!(first, again, "same job, same n, same delay");
    let mut distinct = first.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert!(
        distinct.len() >= 40,
        "50 jobs gave only {} delays",
        distinct.len()
    );
    // The attempt number is part of the seed, and so is the kind of backoff.
    let by_n: Vec<i64> = (0..20)
        .map(|n| jitter_ms(JitterTag::Capacity, "j", n, 5_000))
        .collect();
    assert!(by_n.windows(2).any(|w| w[0] != w[1]));
    assert!((0..20).any(|n| {
        jitter_ms(JitterTag::Capacity, "j", n, 5_000) != jitter_ms(JitterTag::Retry, "j", n, 5_000)
    }));
    assert_eq!(
        jitter_ms(JitterTag::Capacity, "j", 3, 0),
        0,
        "no jitter when the bound is 0"
    );
}

// ---------------------------------------------------------------------------------------------
// Terminate, timeout, preemption

#[test]
fn a_terminated_job_never_retries() {
    let terminated = |mut j: ServiceJob| {
        j.is_terminated = true;
        j
    };
    let cases: &[(&str, ServiceJob, AttemptFailure, &str)] = &[
        (
            "the stop it asked for",
            job("j").attempts(5, vec![]),
            stopped(StopCause::Terminated {
                reason: "no longer needed".into(),
            }),
            "no longer needed",
        ),
        (
            "a capacity error that raced the terminate",
            terminated(job("j").attempts(5, vec![])),
            failed(CAPACITY),
            "Received status from SageMaker: CapacityError: Unable to provision requested ML compute capacity. Please retry using a different ML instance type.",
        ),
        (
            "a retryable error that raced the terminate",
            terminated(job("j").attempts(5, guide_rules())),
            failed(INTERNAL),
            "Received status from SageMaker: InternalServerError: We encountered an internal error. Please try again.",
        ),
    ];
    for (name, j, failure, reason) in cases {
        assert_eq!(
            decide(j, failure),
            AfterFailure::Failed {
                status_reason: (*reason).into()
            },
            "{name}"
        );
    }
}

#[test]
fn a_timed_out_attempt_fails_the_job_even_with_attempts_left() {
    let j = job("j").attempts(5, vec![]).timeout_s(3600);
    assert_eq!(
        decide(&j, &stopped(StopCause::Timeout)),
        AfterFailure::Failed {
            status_reason: TIMEOUT_REASON.into()
        }
    );
}

#[test]
fn preempted_jobs_requeue_until_their_preemption_budget_is_spent() {
    let with = |retries: Option<u32>, count: u32| {
        let mut j = job("j");
        j.preemption_configuration = Some(JobPreemptionConfiguration {
            preemption_retries_before_termination: retries,
        });
        if count > 0 {
            j.preemption_summary = Some(PreemptionSummary {
                preempted_attempt_count: count,
                recent_preempted_attempts: vec![],
            });
        }
        j
    };
    let cases: &[(&str, ServiceJob, bool)] = &[
        ("unset means unlimited", with(None, 40), true),
        ("no configuration at all", job("j"), true),
        (
            "zero fails on the first preemption",
            with(Some(0), 0),
            false,
        ),
        ("two allows a second", with(Some(2), 1), true),
        ("two refuses a third", with(Some(2), 2), false),
    ];
    for (name, j, requeued) in cases {
        let after = decide(j, &stopped(StopCause::Preempted));
        match after {
            AfterFailure::Requeue {
                not_before_ms,
                counts_attempt,
                status_reason,
            } => {
                assert!(*requeued, "{name}: requeued");
                assert_eq!(
                    not_before_ms, NOW,
                    "{name}: a preempted job waits for nothing"
                );
                assert!(!counts_attempt, "{name}");
                assert_eq!(status_reason, PREEMPTED_REASON, "{name}");
            }
            AfterFailure::Failed { status_reason } => {
                assert!(!*requeued, "{name}: failed");
                assert!(status_reason.starts_with(PREEMPTED_REASON), "{name}");
            }
        }
    }
}

#[test]
fn the_attempt_clock_starts_at_dispatch_and_stops_at_the_deadline() {
    let started = NOW - 3600 * SEC;
    let running = |timeout: Option<u32>| {
        let mut j = job("j");
        j.attempts = vec![Attempt {
            started_at: Some(started),
            ..attempt(None)
        }];
        if let Some(t) = timeout {
            j = j.timeout_s(t);
        }
        j
    };
    assert_eq!(attempt_deadline(&running(None), started), None);
    assert_eq!(
        attempt_deadline(&running(Some(60)), started),
        Some(started + 60 * SEC)
    );
    let cases: &[(&str, ServiceJob, i64, bool)] = &[
        (
            "no timeout never times out",
            running(None),
            NOW + 1_000_000 * SEC,
            false,
        ),
        ("exactly at the deadline", running(Some(3600)), NOW, true),
        (
            "one millisecond before",
            running(Some(3600)),
            NOW - 1,
            false,
        ),
        ("well past", running(Some(60)), NOW, true),
        (
            "a RUNNABLE job has no attempt to stop",
            running(Some(60)).status(JobStatus::Runnable),
            NOW,
            false,
        ),
        (
            "a finished job is not stopped again",
            running(Some(60)).status(JobStatus::Failed),
            NOW,
            false,
        ),
        (
            "a job being terminated is already being stopped",
            {
                let mut j = running(Some(60));
                j.is_terminated = true;
                j
            },
            NOW,
            false,
        ),
        (
            "SCHEDULED counts: the clock started at dispatch",
            running(Some(3600)).status(JobStatus::Scheduled),
            NOW,
            true,
        ),
    ];
    for (name, j, now, expected) in cases {
        assert_eq!(timed_out(j, *now), *expected, "{name}");
    }
}

#[test]
fn terminate_stops_dispatched_attempts_and_fails_waiting_jobs() {
    let cases: &[(JobStatus, TerminateAction)] = &[
        (JobStatus::Submitted, TerminateAction::FailNow),
        (JobStatus::Runnable, TerminateAction::FailNow),
        (
            JobStatus::Scheduled,
            TerminateAction::StopAttempt {
                training_job_name: "AWSBatchtrain0".into(),
            },
        ),
        (
            JobStatus::Running,
            TerminateAction::StopAttempt {
                training_job_name: "AWSBatchtrain0".into(),
            },
        ),
        (JobStatus::Succeeded, TerminateAction::AlreadyFinished),
        (JobStatus::Failed, TerminateAction::AlreadyFinished),
    ];
    for (status, expected) in cases {
        assert_eq!(
            terminate_action(&job("j").status(*status)),
            *expected,
            "{status}"
        );
    }
    let mut orphan = job("j");
    orphan.attempts.clear();
    assert_eq!(
        terminate_action(&orphan),
        TerminateAction::FailNow,
        "nothing to stop"
    );
}

// ---------------------------------------------------------------------------------------------
// Time limits on RUNNABLE

fn limit(reason: &str, max_s: u32) -> JobStateTimeLimitAction {
    JobStateTimeLimitAction {
        reason: reason.into(),
        state: TimeLimitState::Runnable,
        max_time_seconds: max_s,
        action: TimeLimitAction::Terminate,
    }
}

/// A RUNNABLE job that became RUNNABLE `waited_s` ago, with no attempts.
fn waiting(reason: &str, waited_s: i64) -> ServiceJob {
    let mut j = job("j").status(JobStatus::Runnable).reason(reason);
    j.attempts.clear();
    j.runnable_at = Some(NOW - waited_s * SEC);
    j
}

#[test]
fn runnable_jobs_are_terminated_after_the_time_limit_for_their_reason() {
    let misconfig = "MISCONFIGURATION:SERVICE_ENVIRONMENT_MAX_RESOURCE - too big";
    let capacity_limit = || limit(CAPACITY_CODE, 600);
    let cases: Vec<(
        &str,
        Vec<JobStateTimeLimitAction>,
        ServiceJob,
        Option<String>,
    )> = vec![
        (
            "exactly max time: terminated",
            vec![capacity_limit()],
            waiting(CAPACITY_REASON, 600),
            Some(time_limit_reason(CAPACITY_CODE)),
        ),
        (
            "one millisecond short: kept",
            vec![capacity_limit()],
            {
                let mut j = waiting(CAPACITY_REASON, 600);
                j.runnable_at = j.runnable_at.map(|t| t + 1);
                j
            },
            None,
        ),
        (
            "another reason: kept",
            vec![capacity_limit()],
            waiting(misconfig, 86_400),
            None,
        ),
        (
            "the reason is a prefix, not a glob or a substring",
            vec![limit("SERVICE_ENVIRONMENT_MAX_RESOURCE", 600)],
            waiting(misconfig, 86_400),
            None,
        ),
        (
            "no status reason: kept",
            vec![capacity_limit()],
            {
                let mut j = waiting(CAPACITY_REASON, 86_400);
                j.status_reason = None;
                j
            },
            None,
        ),
        (
            "not RUNNABLE: kept",
            vec![capacity_limit()],
            waiting(CAPACITY_REASON, 86_400).status(JobStatus::Running),
            None,
        ),
        (
            "first matching action in list order wins",
            vec![
                limit("MISCONFIGURATION", 3600),
                limit("MISCONFIGURATION:SERVICE_ENVIRONMENT", 600),
                limit("MISCONFIGURATION:SERVICE", 600),
            ],
            waiting(misconfig, 1200),
            Some(time_limit_reason("MISCONFIGURATION:SERVICE_ENVIRONMENT")),
        ),
        (
            "CANCEL is not a service-queue action",
            vec![JobStateTimeLimitAction {
                action: TimeLimitAction::Cancel,
                ..capacity_limit()
            }],
            waiting(CAPACITY_REASON, 86_400),
            None,
        ),
    ];
    for (name, actions, j, expected) in cases {
        assert_eq!(time_limit_action(&actions, &j, NOW), expected, "{name}");
    }
    assert_eq!(
        time_limit_reason(CAPACITY_CODE),
        "Terminated by JobStateTimeLimit action due to reason: CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY"
    );
}

#[test]
fn time_spent_on_capacity_failures_counts_towards_the_limit() {
    let capacity = sagemaker_reason(CAPACITY);
    let internal = sagemaker_reason(INTERNAL);
    let stuck = |earlier: Vec<Attempt>| {
        let mut j = waiting(CAPACITY_REASON, 60);
        j.created_at = NOW - 700 * SEC;
        j.attempts = earlier;
        j
    };
    let ended = |reason: &str, started_s: i64, stopped_s: i64| Attempt {
        started_at: Some(NOW - started_s * SEC),
        stopped_at: Some(NOW - stopped_s * SEC),
        ..attempt(Some(reason))
    };
    let actions = [limit(CAPACITY_CODE, 600)];
    // Only capacity failures since submission 700 s ago: the wait began at submission.
    let since_submission = stuck(vec![ended(&capacity, 650, 400), ended(&capacity, 300, 60)]);
    assert_eq!(
        time_limit_action(&actions, &since_submission, NOW),
        Some(time_limit_reason(CAPACITY_CODE))
    );
    // A real failure 500 s ago restarted the wait: 500 s < 600 s.
    let since_retry = stuck(vec![
        ended(&internal, 690, 500),
        ended(&capacity, 450, 300),
        ended(&capacity, 250, 60),
    ]);
    assert_eq!(time_limit_action(&actions, &since_retry, NOW), None);
    assert_eq!(
        time_limit_action(&actions, &since_retry, NOW + 100 * SEC),
        Some(time_limit_reason(CAPACITY_CODE))
    );
}

/// A preempted job keeps its place in line (`runnable_at` from before it ran), but its wait for
/// time limits begins when its preempted attempt stopped.
#[test]
fn a_preempted_jobs_time_limit_counts_from_its_preemption_not_its_place_in_line() {
    let actions = [limit(CAPACITY_CODE, 600)];
    let mut j = waiting(CAPACITY_REASON, 86_400);
    j.attempts = vec![Attempt {
        started_at: Some(NOW - 3_600 * SEC),
        stopped_at: Some(NOW - 599 * SEC),
        failed_as: Some(Requeue::Preemption),
        selected_instance_type: None,
        ..attempt(Some(PREEMPTED_REASON))
    }];
    assert_eq!(waiting_since(&j), NOW - 599 * SEC);
    assert_eq!(time_limit_action(&actions, &j, NOW), None);
    assert_eq!(
        time_limit_action(&actions, &j, NOW + SEC),
        Some(time_limit_reason(CAPACITY_CODE))
    );
}

// ---------------------------------------------------------------------------------------------
// Properties

/// One seed fully determines a case.
type Rng = SplitMix64;

/// A string of up to `max_len` characters of `alphabet`.
fn string(rng: &mut Rng, alphabet: &[char], max_len: u64) -> String {
    let len = rng.below(max_len + 1);
    (0..len)
        .map(|_| alphabet[rng.below(alphabet.len() as u64) as usize])
        .collect()
}

/// The obvious recursive matcher: exponential in the worst case, obviously right.
fn naive(pattern: &[char], text: &[char]) -> bool {
    match pattern.split_first() {
        None => text.is_empty(),
        Some(('*', rest)) => (0..=text.len()).any(|skip| naive(rest, &text[skip..])),
        Some((c, rest)) => text.first() == Some(c) && naive(rest, &text[1..]),
    }
}

proptest! {
    #[test]
    fn glob_agrees_with_the_naive_matcher(seed in any::<u64>()) {
        let mut rng = Rng::new(seed);
        let pattern = string(&mut rng, &['a', 'b', 'é', '*'], 8);
        let text = string(&mut rng, &['a', 'b', 'é'], 10);
        let p: Vec<char> = pattern.chars().collect();
        let t: Vec<char> = text.chars().collect();
        prop_assert_eq!(
            glob_matches(&pattern, &text),
            naive(&p, &t),
            "pattern {:?} text {:?}",
            pattern,
            text
        );
    }

    #[test]
    fn backoff_grows_with_n_and_stays_within_its_bounds(seed in any::<u64>()) {
        let mut rng = Rng::new(seed);
        let base = 1 + rng.below(60_000) as i64;
        let cap = base + rng.below(3_600_000) as i64;
        let jitter_max = rng.below(30_000) as i64;
        let config = RetryConfig {
            capacity_base_ms: base,
            capacity_cap_ms: cap,
            retry_base_ms: base,
            retry_cap_ms: cap,
            jitter_max_ms: jitter_max,
        };
        let id = format!("job-{}", rng.next_u64());
        let mut previous = 0;
        for n in 0..70 {
            let backoff = backoff_ms(base, cap, n);
            prop_assert!(backoff >= previous, "n {} backoff {} < {}", n, backoff, previous);
            prop_assert!((base..=cap).contains(&backoff), "n {} backoff {}", n, backoff);
            previous = backoff;
            for delay in [capacity_delay_ms(&id, n, &config), retry_delay_ms(&id, n, &config)] {
                prop_assert!(
                    (backoff..=backoff + jitter_max).contains(&delay),
                    "n {} delay {} backoff {} jitter ≤ {}", n, delay, backoff, jitter_max
                );
            }
        }
    }
}
