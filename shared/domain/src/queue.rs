//! Job queues of type `SAGEMAKER_TRAINING`: where jobs wait, with a priority across queues that
//! share a service environment and an optional scheduling policy (none means FIFO).

use serde::{Deserialize, Serialize};

use crate::{ResourceStatus, State, Tags};

/// `jobQueueType`. Trainyard serves only `SAGEMAKER_TRAINING`; the others exist so that a request
/// naming them gets a clear refusal rather than a parse error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobQueueType {
    /// Container jobs on EKS (not served).
    Eks,
    /// Container jobs on ECS (not served).
    Ecs,
    /// Container jobs on Fargate (not served).
    EcsFargate,
    /// SageMaker training service jobs.
    #[default]
    SagemakerTraining,
}

/// `serviceEnvironmentOrder[]`, with the environment by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceEnvironmentOrder {
    /// Order of preference (ascending).
    pub order: i32,
    /// Name of the service environment.
    pub service_environment: String,
}

/// `jobStateTimeLimitActions[].action`; service queues support only TERMINATE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TimeLimitAction {
    /// For container queues; refused on service queues.
    Cancel,
    /// Terminate the job (moves it to FAILED).
    Terminate,
}

/// `jobStateTimeLimitActions[].state`; only RUNNABLE exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TimeLimitState {
    /// The job waits in RUNNABLE.
    #[default]
    Runnable,
}

/// Terminate jobs left RUNNABLE for `reason` longer than `max_time_seconds`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobStateTimeLimitAction {
    /// Status-reason prefix that triggers it, e.g. `CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY`.
    pub reason: String,
    /// Always RUNNABLE.
    pub state: TimeLimitState,
    /// 600–86,400 seconds.
    pub max_time_seconds: u32,
    /// Always TERMINATE for service queues.
    pub action: TimeLimitAction,
}

/// A job queue as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobQueue {
    /// Unique name.
    pub job_queue_name: String,
    /// ENABLED queues accept submissions.
    pub state: State,
    /// Lifecycle status.
    pub status: ResourceStatus,
    /// Explains the status, e.g. `JobQueue Healthy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_reason: Option<String>,
    /// 0–1000; higher is evaluated first among queues sharing an environment.
    pub priority: u32,
    /// Name of the scheduling policy; none means FIFO.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_policy: Option<String>,
    /// The (single) service environment this queue feeds.
    pub service_environment_order: Vec<ServiceEnvironmentOrder>,
    /// Time limits for RUNNABLE jobs.
    #[serde(default)]
    pub job_state_time_limit_actions: Vec<JobStateTimeLimitAction>,
    /// Always SAGEMAKER_TRAINING.
    pub job_queue_type: JobQueueType,
    /// Tags.
    #[serde(default)]
    pub tags: Tags,
    /// Creation time (epoch ms).
    pub created_at: i64,
}

impl JobQueue {
    /// The environment the queue dispatches to (lowest `order`), if any.
    pub fn service_environment(&self) -> Option<&str> {
        self.service_environment_order
            .iter()
            .min_by_key(|o| (o.order, o.service_environment.as_str()))
            .map(|o| o.service_environment.as_str())
    }
}

/// Tag on a job queue that turns aging on: the priority points its waiting jobs gain per hour
/// waited (1–1000). Batch evaluates higher-priority queues first, always; a queue without this
/// tag keeps exactly that behaviour.
pub const AGING_PER_HOUR_TAG: &str = "trainyard:aging-per-hour";

/// Tag on a job queue with aging: the highest priority its jobs age to (0–1000, default 1000).
/// Set it below the priority of the queues whose fresh work must always go first.
pub const AGING_MAX_PRIORITY_TAG: &str = "trainyard:aging-max-priority";

/// Tag on a job queue with aging: the hours a job waits before it starts to age (0–8760,
/// default 0). With a high rate, aging becomes a step: a job keeps its queue's priority until it
/// has waited this long, then soon goes to the ceiling.
pub const AGING_AFTER_HOURS_TAG: &str = "trainyard:aging-after-hours";

/// Aging: a waiting job of a queue of priority `p` is evaluated as if its queue had priority
/// `min(p + floor(per_hour × max(0, hours waited − after_hours)), max(max_priority, p))`, where
/// the wait counts from the job's place in line (its submission or its last requeue). A job whose priority has reached
/// `max_priority` is *overdue*: among jobs of equal evaluated priority, overdue jobs go first,
/// oldest first, whatever their queue or share.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Aging {
    /// Priority points gained per hour waited.
    pub per_hour: u32,
    /// The highest priority aging reaches.
    pub max_priority: u32,
    /// How long a job waits before it starts to age, in hours.
    pub after_hours: u32,
}

/// Milliseconds in an hour.
const HOUR_MS: u64 = 3_600_000;

impl Aging {
    /// The priority a job of a queue of priority `base` is evaluated at after waiting
    /// `waited_ms`.
    pub fn priority(&self, base: u32, waited_ms: i64) -> u32 {
        let waited = u64::try_from(waited_ms)
            .unwrap_or(0)
            .saturating_sub(u64::from(self.after_hours) * HOUR_MS);
        let gained = u64::from(self.per_hour).saturating_mul(waited) / HOUR_MS;
        let ceiling = self.max_priority.max(base);
        let aged = u64::from(base)
            .saturating_add(gained)
            .min(u64::from(ceiling));
        u32::try_from(aged).unwrap_or(ceiling)
    }

    /// Whether the job has aged all the way to `max_priority` (never, when that is not above
    /// `base`).
    pub fn overdue(&self, base: u32, waited_ms: i64) -> bool {
        self.max_priority > base && self.priority(base, waited_ms) >= self.max_priority
    }
}

impl JobQueue {
    /// The queue's aging, from its tags (see [`Aging`]); `Ok(None)` when it has none, an
    /// explanation when the tags are not valid.
    pub fn aging(&self) -> Result<Option<Aging>, String> {
        aging_of(&self.tags)
    }

    /// How the queue orders and reserves for its jobs beyond Batch's rules, from its tags (see
    /// [`LineRules`]); the defaults when the tags are absent or not valid (they are checked when
    /// set).
    pub fn line_rules(&self) -> LineRules {
        line_rules_of(&self.tags).unwrap_or_default()
    }
}

/// Tag on a job queue that puts shorter jobs first within a bound of this many hours (1–720):
/// a job submitted to it stands in its share's line as if it had become RUNNABLE
/// `min(MaxRuntimeInSeconds, hours)` later. A job can so be overtaken only by jobs that ask for
/// less time and arrive less than that bound after it.
pub const SHORTER_FIRST_HOURS_TAG: &str = "trainyard:shorter-first-hours";

/// Tag on a job queue: a job of it that does not fit holds its environment's backfill
/// reservation only once it has waited this many hours (0–8760; default 0, every blocked job may).
/// Before that, jobs behind it start whenever they fit. In a quota-managed queue, where by
/// default no job reserves (Batch's FIFO assignment of idle capacity), it lets a borrower that
/// has waited this long hold the reservation.
pub const RESERVE_AFTER_HOURS_TAG: &str = "trainyard:reserve-after-hours";

/// A queue's line rules beyond Batch's (`trainyard:shorter-first-hours`,
/// `trainyard:reserve-after-hours`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LineRules {
    /// The most a job's line offset can be, in seconds; `None`: jobs line up by time alone.
    pub shorter_first_max_s: Option<u64>,
    /// How long a blocked job waits before it may hold the backfill reservation, in seconds;
    /// `None` when the queue does not say (at once, but never in a quota-managed queue).
    pub reserve_after_s: Option<u64>,
}

/// SageMaker's `MaxRuntimeInSeconds` when a payload sets none: one day.
pub const DEFAULT_MAX_RUNTIME_S: u64 = 86_400;

impl LineRules {
    /// The line offset of a job asking for `max_runtime_s` (SageMaker's default of a day when
    /// unset), in milliseconds: 0 unless the queue puts shorter jobs first.
    pub fn line_offset_ms(&self, max_runtime_s: Option<u64>) -> i64 {
        let Some(bound) = self.shorter_first_max_s else {
            return 0;
        };
        let seconds = max_runtime_s.unwrap_or(DEFAULT_MAX_RUNTIME_S).min(bound);
        i64::try_from(seconds.saturating_mul(1000)).unwrap_or(i64::MAX)
    }
}

/// Line rules as `tags` configure them; see [`JobQueue::line_rules`].
pub fn line_rules_of(tags: &Tags) -> Result<LineRules, String> {
    let hours =
        |key: &str, range| number_tag(tags, key, range).map(|h| h.map(|h| u64::from(h) * 3_600));
    Ok(LineRules {
        shorter_first_max_s: hours(SHORTER_FIRST_HOURS_TAG, 1..=720)?,
        reserve_after_s: hours(RESERVE_AFTER_HOURS_TAG, 0..=8_760)?,
    })
}

/// Every Trainyard tag of a job queue checked: aging and line rules.
pub fn check_queue_tags(tags: &Tags) -> Result<(), String> {
    aging_of(tags)?;
    line_rules_of(tags).map(drop)
}

/// A whole-number tag within `range`; `Ok(None)` when absent.
fn number_tag(
    tags: &Tags,
    key: &str,
    range: std::ops::RangeInclusive<u32>,
) -> Result<Option<u32>, String> {
    let Some(text) = tags.get(key) else {
        return Ok(None);
    };
    match text.trim().parse::<u32>() {
        Ok(n) if range.contains(&n) => Ok(Some(n)),
        _ => Err(format!(
            "tag {key} must be a whole number from {} to {}, not {text:?}",
            range.start(),
            range.end()
        )),
    }
}

/// Aging as `tags` configure it; see [`JobQueue::aging`].
pub fn aging_of(tags: &Tags) -> Result<Option<Aging>, String> {
    let number = |key: &str, range| number_tag(tags, key, range);
    let per_hour = number(AGING_PER_HOUR_TAG, 1..=1000)?;
    let max_priority = number(AGING_MAX_PRIORITY_TAG, 0..=1000)?;
    let after_hours = number(AGING_AFTER_HOURS_TAG, 0..=8_760)?;
    match (per_hour, max_priority.or(after_hours)) {
        (Some(per_hour), _) => Ok(Some(Aging {
            per_hour,
            max_priority: max_priority.unwrap_or(1000),
            after_hours: after_hours.unwrap_or(0),
        })),
        (None, Some(_)) => {
            let tag = if max_priority.is_some() {
                AGING_MAX_PRIORITY_TAG
            } else {
                AGING_AFTER_HOURS_TAG
            };
            Err(format!(
                "tag {tag} needs {AGING_PER_HOUR_TAG} too: aging is on only when the rate is set"
            ))
        }
        (None, None) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: i64 = 3_600_000;

    fn tags(pairs: &[(&str, &str)]) -> Tags {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_job_ages_linearly_up_to_the_ceiling_and_is_overdue_there() {
        let aging = Aging {
            per_hour: 100,
            max_priority: 899,
            after_hours: 0,
        };
        assert_eq!(aging.priority(100, 0), 100);
        assert_eq!(aging.priority(100, HOUR / 2), 150);
        assert_eq!(aging.priority(100, 7 * HOUR + HOUR / 2), 850);
        assert!(!aging.overdue(100, 7 * HOUR + HOUR / 2));
        assert_eq!(aging.priority(100, 8 * HOUR), 899);
        assert!(aging.overdue(100, 8 * HOUR));
        assert_eq!(aging.priority(100, i64::MAX), 899, "no overflow");
        assert_eq!(
            aging.priority(100, -HOUR),
            100,
            "a wait from the future is none"
        );
        // A queue already above the ceiling keeps its own priority and is never overdue.
        assert_eq!(aging.priority(950, 100 * HOUR), 950);
        assert!(!aging.overdue(950, 100 * HOUR));
    }

    #[test]
    fn a_delayed_aging_keeps_the_queue_priority_until_the_delay_then_steps() {
        let step = Aging {
            per_hour: 1000,
            max_priority: 899,
            after_hours: 200,
        };
        assert_eq!(step.priority(100, 200 * HOUR), 100);
        assert!(!step.overdue(100, 200 * HOUR));
        assert_eq!(step.priority(100, 200 * HOUR + HOUR / 2), 600);
        assert_eq!(step.priority(100, 201 * HOUR), 899);
        assert!(step.overdue(100, 201 * HOUR));
        assert_eq!(step.priority(100, i64::MAX), 899, "no overflow");
    }

    #[test]
    fn line_rules_are_read_bounded_and_bad_ones_explained() {
        assert_eq!(line_rules_of(&tags(&[])), Ok(LineRules::default()));
        let rules = line_rules_of(&tags(&[
            (SHORTER_FIRST_HOURS_TAG, "24"),
            (RESERVE_AFTER_HOURS_TAG, " 150 "),
        ]))
        .unwrap();
        assert_eq!(rules.shorter_first_max_s, Some(86_400));
        assert_eq!(rules.reserve_after_s, Some(540_000));
        // Offsets: the job's own runtime up to the bound; a day when it names none.
        assert_eq!(rules.line_offset_ms(Some(3_600)), 3_600_000);
        assert_eq!(rules.line_offset_ms(Some(2_419_200)), 86_400_000);
        assert_eq!(rules.line_offset_ms(None), 86_400_000);
        assert_eq!(LineRules::default().line_offset_ms(Some(3_600)), 0);
        for (key, bad) in [
            (SHORTER_FIRST_HOURS_TAG, "0"),
            (SHORTER_FIRST_HOURS_TAG, "721"),
            (RESERVE_AFTER_HOURS_TAG, "-1"),
            (RESERVE_AFTER_HOURS_TAG, "1.5"),
        ] {
            let err = line_rules_of(&tags(&[(key, bad)])).unwrap_err();
            assert!(err.contains(key) && err.contains(bad), "{err}");
            assert_eq!(check_queue_tags(&tags(&[(key, bad)])), Err(err));
        }
    }

    #[test]
    fn aging_tags_are_read_and_bad_ones_explained() {
        assert_eq!(aging_of(&tags(&[])), Ok(None));
        assert_eq!(
            aging_of(&tags(&[(AGING_PER_HOUR_TAG, "20")])),
            Ok(Some(Aging {
                per_hour: 20,
                max_priority: 1000,
                after_hours: 0,
            }))
        );
        assert_eq!(
            aging_of(&tags(&[
                (AGING_PER_HOUR_TAG, "20"),
                (AGING_MAX_PRIORITY_TAG, "899"),
                (AGING_AFTER_HOURS_TAG, "150"),
            ])),
            Ok(Some(Aging {
                per_hour: 20,
                max_priority: 899,
                after_hours: 150,
            }))
        );
        for bad in ["0", "1001", "-1", "fast", ""] {
            let err = aging_of(&tags(&[(AGING_PER_HOUR_TAG, bad)])).unwrap_err();
            assert!(err.contains(AGING_PER_HOUR_TAG), "{err}");
        }
        for lone in [AGING_MAX_PRIORITY_TAG, AGING_AFTER_HOURS_TAG] {
            let err = aging_of(&tags(&[(lone, "500")])).unwrap_err();
            assert!(err.contains("needs") && err.contains(lone), "{err}");
        }
        let err = aging_of(&tags(&[
            (AGING_PER_HOUR_TAG, "2"),
            (AGING_AFTER_HOURS_TAG, "8761"),
        ]))
        .unwrap_err();
        assert!(err.contains(AGING_AFTER_HOURS_TAG), "{err}");
    }
}
