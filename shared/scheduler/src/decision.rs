//! What one cycle decides: the dispatches, the preemptions and, for every other pending job,
//! why it waits (a [`SkipReason`], whose code and text reach the job's `statusReason`).

use serde::{Deserialize, Serialize};
use trainyard_domain::environment::NUM_INSTANCES;
use trainyard_domain::time::UtcTime;

use crate::snapshot::{SharedInstances, SharedStr};

/// Launch an attempt for a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dispatch {
    /// The job.
    pub job_id: SharedStr,
    /// Its queue.
    pub queue: SharedStr,
    /// The environment whose capacity it takes.
    pub environment: SharedStr,
    /// Instances taken.
    pub instances: SharedInstances,
}

/// Stop a running attempt to make room for a waiting job (quota-managed queues only). The host
/// stops the attempt with `retry::PREEMPTED_REASON`; the job goes back to RUNNABLE.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Preemption {
    /// The job whose attempt is stopped.
    pub victim_job_id: SharedStr,
    /// The waiting job the capacity is for.
    pub for_job_id: SharedStr,
    /// Why this victim.
    pub reason: PreemptionReason,
    /// The work the victim is estimated to lose, restart included, in instance-seconds
    /// (`cost(V)` of `trainyard_scheduler::quota`).
    #[serde(default)]
    pub lost_instance_s: u64,
    /// The victim's newest observed checkpoint that estimate counts from, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_ms: Option<i64>,
}

/// Why a job is preempted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PreemptionReason {
    /// Cross-share: the victim runs on capacity its share borrowed, and the lender reclaims it.
    ReclaimBorrowed {
        /// The reclaiming (lending) share.
        quota_share: SharedStr,
        /// The borrowing share.
        victim_quota_share: SharedStr,
    },
    /// In-share: a job of strictly higher `schedulingPriority` in the same share.
    InSharePriority {
        /// The share.
        quota_share: SharedStr,
        /// The preemptor's priority.
        priority: u32,
        /// The victim's (strictly lower) priority.
        victim_priority: u32,
    },
}

impl std::fmt::Display for PreemptionReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::ReclaimBorrowed {
                quota_share,
                victim_quota_share,
            } => write!(
                f,
                "quota share {quota_share} reclaims capacity borrowed by quota share {victim_quota_share}"
            ),
            Self::InSharePriority {
                quota_share,
                priority,
                victim_priority,
            } => write!(
                f,
                "a job of priority {priority} in quota share {quota_share} preempts priority {victim_priority}"
            ),
        }
    }
}

/// Why `QUOTA_MANAGEMENT_LIMIT_EXCEEDED`: which bound the job can never fit (Batch's three texts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum QuotaLimitCause {
    /// The share may not borrow and its own limit is too small.
    ShareLimits,
    /// The share's limit plus its `borrowLimit` is too small.
    BorrowLimits,
    /// Even borrowing everything other shares could ever lend is not enough.
    BorrowableCapacity,
}

/// The capacity unit a reason names: every instance together (`NUM_INSTANCES`), or one instance
/// type. Written, read, compared and hashed as its text (so a line's stored digest of its
/// waits reads the same as when the unit was a string). Naming either copies no text: a cycle
/// names one for every job it skips for capacity or quota.
#[derive(Clone)]
pub enum Unit {
    /// `NUM_INSTANCES`: the instances of every type together.
    Total,
    /// One instance type.
    Type(SharedStr),
}

impl Unit {
    /// The text: `NUM_INSTANCES` or the instance type.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Total => NUM_INSTANCES,
            Self::Type(ty) => ty,
        }
    }
}

impl PartialEq for Unit {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Unit {}

impl std::hash::Hash for Unit {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl std::ops::Deref for Unit {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl std::fmt::Debug for Unit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl std::fmt::Display for Unit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<SharedStr> for Unit {
    fn from(text: SharedStr) -> Self {
        if *text == *NUM_INSTANCES {
            Self::Total
        } else {
            Self::Type(text)
        }
    }
}

impl From<&str> for Unit {
    fn from(text: &str) -> Self {
        SharedStr::from(text).into()
    }
}

impl Serialize for Unit {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Unit {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        SharedStr::deserialize(deserializer).map(Self::from)
    }
}

/// Why a runnable job was not dispatched in this cycle.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SkipReason {
    /// Not enough free capacity now.
    InsufficientCapacity {
        /// Environment.
        environment: SharedStr,
        /// `NUM_INSTANCES` or an instance type.
        unit: Unit,
        /// Instances the job needs of the unit.
        needed: u64,
        /// Instances free of the unit.
        free: u64,
    },
    /// The job can never fit the environment as configured.
    ExceedsEnvironment {
        /// Environment.
        environment: SharedStr,
        /// The unit it exceeds.
        unit: Unit,
        /// Instances it needs.
        needed: u64,
        /// The limit (0 when the type is not offered).
        max: u64,
    },
    /// Capacity is held for the head job; starting this one would delay it.
    ReservedForHead {
        /// The waiting head job.
        head_job_id: SharedStr,
        /// Its queue.
        head_queue: SharedStr,
        /// When it is expected to start at the latest (epoch ms).
        head_start_ms: i64,
    },
    /// A strict FIFO queue whose head is waiting.
    BehindHead {
        /// The waiting head job.
        head_job_id: SharedStr,
    },
    /// Kept free for fair shares that are not active yet (`computeReservation`).
    ComputeReservation {
        /// Instances reserved.
        reserved: u64,
    },
    /// Retry backoff.
    Backoff {
        /// Not before (epoch ms).
        until_ms: i64,
    },
    /// The environment is disabled.
    EnvironmentDisabled {
        /// Environment.
        environment: SharedStr,
    },
    /// The queue has no (existing) service environment.
    NoEnvironment,
    /// The job's queue is not in the snapshot.
    UnknownQueue,
    /// The job names no quota share of its quota-managed queue.
    UnknownQuotaShare {
        /// The name it gave (empty when none).
        quota_share: SharedStr,
    },
    /// The job can never fit its quota share's limits plus what it may borrow.
    QuotaLimitExceeded {
        /// Quota share.
        quota_share: SharedStr,
        /// Instance type.
        unit: Unit,
        /// Instances it needs.
        needed: u64,
        /// The share's own limit.
        limit: u64,
        /// The most it could ever borrow on top.
        borrowable: u64,
        /// Which bound binds.
        cause: QuotaLimitCause,
    },
    /// The share's own limit is in use and it may not borrow (RESERVE or LEND).
    QuotaExhausted {
        /// Quota share.
        quota_share: SharedStr,
        /// Instance type.
        unit: Unit,
        /// Instances the job needs.
        needed: u64,
        /// The share's limit.
        limit: u64,
        /// Instances the share uses (including this cycle's decisions).
        in_use: u64,
    },
    /// Starting the job would borrow more than the share's `borrowLimit` allows.
    BorrowLimitReached {
        /// Quota share.
        quota_share: SharedStr,
        /// Instance type.
        unit: Unit,
        /// Instances the job needs.
        needed: u64,
        /// The share's limit.
        limit: u64,
        /// Instances the share uses.
        in_use: u64,
        /// The most it may borrow on top of its limit.
        borrow_limit: u64,
    },
    /// Free capacity exists, but it is the idle capacity of RESERVE shares, which is not lent.
    ReservedByQuotaShares {
        /// Instance type.
        unit: Unit,
        /// Instances the job needs.
        needed: u64,
        /// Instances free in the environment.
        free: u64,
        /// Of those, instances reserved by RESERVE shares.
        reserved: u64,
    },
    /// The job is within its quota share's own limit, but the environment is full because other
    /// shares borrowed the idle capacity, and none of their borrowed jobs may be preempted yet
    /// (each must first run `min_runtime_before_preemption_s`).
    QuotaLent {
        /// The job's quota share.
        quota_share: SharedStr,
        /// Instance type.
        unit: Unit,
        /// Instances the job needs.
        needed: u64,
        /// Instances free in the environment.
        free: u64,
        /// The shares holding borrowed instances of the type, with how many, by share name.
        lent_to: Vec<(SharedStr, u64)>,
        /// When lent capacity may be reclaimed for the job, if that is still ahead: once the
        /// first of those borrowed jobs may be preempted and the job has waited
        /// `Config::min_wait_before_reclaim_s`.
        reclaim_from_ms: Option<i64>,
    },
    /// Running jobs are being preempted for this one; it starts once their capacity is released.
    WaitingForPreemptedCapacity {
        /// The jobs being preempted.
        victims: Vec<SharedStr>,
    },
    /// The job would borrow, and nothing is borrowed in a cycle in which a job starts, or
    /// reclaims lent capacity, within its quota share's limit: borrowed capacity is counted on a
    /// share's jobs that started last, so borrowers start after those jobs (the next cycle).
    BorrowingAfterEntitledStart {
        /// The quota share of the job starting within its limit.
        quota_share: SharedStr,
        /// The job starting (or reclaiming) within its share's limit.
        entitled_job_id: SharedStr,
    },
    /// Running jobs will be preempted for this one once they have saved the checkpoint they are
    /// due to save (`Config::checkpoint_alignment_s`).
    WaitingForVictimCheckpoint {
        /// The jobs to be preempted.
        victims: Vec<SharedStr>,
        /// When the last of their checkpoints is due.
        due_ms: i64,
    },
}

/// The kinds of wait, in the order a job's blockers are ranked: what must change first comes
/// first (a job that can never run is not helped by capacity coming free).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum WaitKind {
    /// It can never run as the configuration stands ([`SkipReason::never_runs`]).
    NeverRuns,
    /// Held until someone acts: a disabled queue or environment.
    Held,
    /// Held until a time: a retry's backoff.
    Timed,
    /// Waiting its turn: jobs ahead of it, a quota at its limit, a full environment.
    Contention,
    /// Capacity is being freed for it: preempted jobs are stopping.
    Preemption,
}

impl SkipReason {
    /// What kind of wait this is.
    pub fn kind(&self) -> WaitKind {
        if self.never_runs() {
            return WaitKind::NeverRuns;
        }
        match self {
            Self::EnvironmentDisabled { .. } => WaitKind::Held,
            Self::Backoff { .. } => WaitKind::Timed,
            Self::WaitingForPreemptedCapacity { .. } | Self::WaitingForVictimCheckpoint { .. } => {
                WaitKind::Preemption
            }
            _ => WaitKind::Contention,
        }
    }

    /// Whether the job can never run as the configuration stands: it needs more than the
    /// environment or its quota share can ever give, or names a queue, environment or quota
    /// share that does not exist. (A disabled environment is not: enabling it is routine.)
    pub fn never_runs(&self) -> bool {
        matches!(
            self,
            Self::ExceedsEnvironment { .. }
                | Self::NoEnvironment
                | Self::UnknownQueue
                | Self::UnknownQuotaShare { .. }
                | Self::QuotaLimitExceeded { .. }
        )
    }

    /// The code that prefixes the reason's text (before ` - `): what kind of wait it is, without
    /// the figures of the moment. `jobStateTimeLimitActions` match on it, and a host can compare
    /// it with a stored reason without formatting the text.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InsufficientCapacity { .. } => "CAPACITY:SERVICE_ENVIRONMENT_FULL",
            Self::ExceedsEnvironment { .. } => "MISCONFIGURATION:SERVICE_ENVIRONMENT_MAX_RESOURCE",
            Self::ReservedForHead { .. } => "PRIORITY:RESERVED_FOR_HEAD",
            Self::BehindHead { .. } => "PRIORITY:BEHIND_HEAD_OF_QUEUE",
            Self::ComputeReservation { .. } => "FAIR_SHARE:COMPUTE_RESERVATION",
            Self::Backoff { .. } => "BACKOFF",
            Self::EnvironmentDisabled { .. } => "MISCONFIGURATION:SERVICE_ENVIRONMENT_DISABLED",
            Self::NoEnvironment => "MISCONFIGURATION:NO_SERVICE_ENVIRONMENT",
            Self::UnknownQueue => "MISCONFIGURATION:UNKNOWN_QUEUE",
            Self::UnknownQuotaShare { .. } => "MISCONFIGURATION:UNKNOWN_QUOTA_SHARE",
            Self::QuotaLimitExceeded { .. } => "MISCONFIGURATION:QUOTA_MANAGEMENT_LIMIT_EXCEEDED",
            Self::QuotaExhausted { .. } => "QUOTA:QUOTA_SHARE_EXHAUSTED",
            Self::BorrowLimitReached { .. } => "QUOTA:BORROW_LIMIT_REACHED",
            Self::ReservedByQuotaShares { .. } => "QUOTA:CAPACITY_RESERVED",
            Self::QuotaLent { .. } => "QUOTA:CAPACITY_LENT",
            Self::WaitingForPreemptedCapacity { .. } => "PREEMPTION:WAITING_FOR_PREEMPTED_CAPACITY",
            Self::WaitingForVictimCheckpoint { .. } => "PREEMPTION:WAITING_FOR_VICTIM_CHECKPOINT",
            Self::BorrowingAfterEntitledStart { .. } => "QUOTA:BORROWING_AFTER_ENTITLED_START",
        }
    }
}

impl std::fmt::Display for SkipReason {
    /// The status reason shown on the RUNNABLE job: its [`SkipReason::code`], ` - `, and what
    /// it waits for in words.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} - ", self.code())?;
        match self {
            Self::InsufficientCapacity {
                environment,
                unit,
                needed,
                free,
            } => write!(
                f,
                "needs {needed} {unit}, {free} free in service environment {environment}"
            ),
            Self::ExceedsEnvironment {
                environment,
                unit,
                needed,
                max,
            } => write!(
                f,
                "Service environment {environment} cannot meet the capacity requirement of the job: needs {needed} {unit}, the limit is {max}"
            ),
            Self::ReservedForHead {
                head_job_id,
                head_queue,
                head_start_ms,
            } => write!(
                f,
                "capacity is held for job {head_job_id} of queue {head_queue}, expected to start by {} UTC; starting this job would delay it",
                UtcTime(*head_start_ms)
            ),
            Self::BehindHead { head_job_id } => write!(
                f,
                "the queue is strict FIFO and job {head_job_id} at its head is waiting for capacity"
            ),
            Self::ComputeReservation { reserved } => write!(
                f,
                "{reserved} instances are kept free for shares that are not active yet"
            ),
            Self::Backoff { until_ms } => {
                write!(f, "waiting to retry, not before {} UTC", UtcTime(*until_ms))
            }
            Self::QuotaLent {
                quota_share,
                unit,
                needed,
                free,
                lent_to,
                reclaim_from_ms,
            } => {
                write!(
                    f,
                    "needs {needed} {unit}, {free} free; quota share {quota_share} is within its limit, and its idle capacity was lent to "
                )?;
                for (i, (share, n)) in lent_to.iter().enumerate() {
                    let sep = if i == 0 { "" } else { ", " };
                    write!(f, "{sep}{share} ({n})")?;
                }
                match reclaim_from_ms {
                    Some(at) => write!(f, "; reclaimed by preemption from {} UTC", UtcTime(*at)),
                    None => write!(f, "; reclaimed by preemption as it frees"),
                }
            }
            Self::EnvironmentDisabled { environment } => {
                write!(f, "service environment {environment} is disabled")
            }
            Self::NoEnvironment => write!(f, "the job queue has no service environment"),
            Self::UnknownQueue => write!(f, "the job queue does not exist"),
            Self::UnknownQuotaShare { quota_share } => {
                write!(f, "the job queue has no quota share named '{quota_share}'")
            }
            Self::QuotaLimitExceeded {
                quota_share,
                unit,
                needed,
                limit,
                borrowable,
                cause,
            } => {
                let text = match cause {
                    QuotaLimitCause::ShareLimits => {
                        "Job requirements exceed quota share capacity limits."
                    }
                    QuotaLimitCause::BorrowLimits => {
                        "Job requirements exceed quota share capacity limits and borrow limits."
                    }
                    QuotaLimitCause::BorrowableCapacity => {
                        "Job requires borrowing that exceeds all configured borrowable capacity."
                    }
                };
                write!(
                    f,
                    "{text} Quota share {quota_share}: needs {needed} {unit}, limit {limit}, borrowable {borrowable}"
                )
            }
            Self::QuotaExhausted {
                quota_share,
                unit,
                needed,
                limit,
                in_use,
            } => write!(
                f,
                "needs {needed} {unit}; quota share {quota_share} uses {in_use} of its limit of {limit} and does not borrow"
            ),
            Self::BorrowLimitReached {
                quota_share,
                unit,
                needed,
                limit,
                in_use,
                borrow_limit,
            } => write!(
                f,
                "needs {needed} {unit}; quota share {quota_share} uses {in_use} against a limit of {limit} and may borrow at most {borrow_limit} more"
            ),
            Self::ReservedByQuotaShares {
                unit,
                needed,
                free,
                reserved,
            } => write!(
                f,
                "needs {needed} {unit} borrowed; {free} free, of which {reserved} are reserved by RESERVE quota shares"
            ),
            Self::WaitingForPreemptedCapacity { victims } => write!(
                f,
                "preempting {}; the job starts when their capacity is released",
                victims
                    .iter()
                    .map(SharedStr::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Self::BorrowingAfterEntitledStart {
                quota_share,
                entitled_job_id,
            } => write!(
                f,
                "borrowing waits until {entitled_job_id} has started within the limit of quota share {quota_share}"
            ),
            Self::WaitingForVictimCheckpoint { victims, due_ms } => write!(
                f,
                "will preempt {} once they save the checkpoints due by {} UTC",
                victims
                    .iter()
                    .map(SharedStr::as_str)
                    .collect::<Vec<_>>()
                    .join(", "),
                UtcTime(*due_ms)
            ),
        }
    }
}

/// A pending job not dispatched, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skip {
    /// The job.
    pub job_id: SharedStr,
    /// Why.
    pub reason: SkipReason,
}

/// The decisions of one cycle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Plan {
    /// Attempts to launch, in decision order.
    pub dispatches: Vec<Dispatch>,
    /// Every other pending job, with its reason, in evaluation order.
    pub skips: Vec<Skip>,
    /// Running attempts to stop, in decision order (quota-managed queues only).
    pub preemptions: Vec<Preemption>,
}

impl Plan {
    /// The earliest time after `now_ms` at which a job's wait, as planned, ends by itself with
    /// nothing arriving or ending: a backoff's end, lent capacity becoming reclaimable
    /// (`QuotaLent::reclaim_from_ms`), a victim's due checkpoint. A host that cycles only when
    /// something happens (the simulator) cycles then too; hosts with a periodic tick are woken
    /// by it anyway. Waits that end without a time in their reason (a job's wait before it may
    /// preempt in its share, a victim's anti-thrash protection) are not included.
    pub fn next_change_ms(&self, now_ms: i64) -> Option<i64> {
        self.skips
            .iter()
            .filter_map(|skip| match &skip.reason {
                SkipReason::Backoff { until_ms } => Some(*until_ms),
                SkipReason::QuotaLent {
                    reclaim_from_ms, ..
                } => *reclaim_from_ms,
                SkipReason::WaitingForVictimCheckpoint { due_ms, .. } => Some(*due_ms),
                _ => None,
            })
            .filter(|at_ms| *at_ms > now_ms)
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skip(id: &str, reason: SkipReason) -> Skip {
        Skip {
            job_id: id.into(),
            reason,
        }
    }

    fn lent(reclaim_from_ms: Option<i64>) -> SkipReason {
        SkipReason::QuotaLent {
            quota_share: "owner".into(),
            unit: "ml.g5.xlarge".into(),
            needed: 1,
            free: 0,
            lent_to: vec![("borrower".into(), 2)],
            reclaim_from_ms,
        }
    }

    #[test]
    fn the_next_change_is_the_soonest_timed_wait_still_ahead() {
        let at = |skips: Vec<Skip>| {
            Plan {
                skips,
                ..Plan::default()
            }
            .next_change_ms(1_000)
        };
        assert_eq!(at(vec![]), None);
        let full = SkipReason::InsufficientCapacity {
            environment: "env".into(),
            unit: "NUM_INSTANCES".into(),
            needed: 1,
            free: 0,
        };
        assert_eq!(at(vec![skip("a", full)]), None, "no time in the reason");
        assert_eq!(at(vec![skip("a", lent(None))]), None, "reclaimable now");
        let checkpoint = SkipReason::WaitingForVictimCheckpoint {
            victims: vec!["v".into()],
            due_ms: 5_000,
        };
        let skips = vec![
            skip("a", lent(Some(9_000))),
            skip("b", SkipReason::Backoff { until_ms: 900 }),
            skip("c", checkpoint),
            skip("d", SkipReason::Backoff { until_ms: 7_000 }),
        ];
        assert_eq!(at(skips), Some(5_000), "past times are not ahead");
        assert_eq!(
            at(vec![skip("a", lent(Some(1_000)))]),
            None,
            "exactly now is not ahead"
        );
    }

    /// A reason's unit is shared text in memory and plain text on the wire: decision records
    /// and stored reasons read the same, whichever build wrote them.
    #[test]
    fn a_reasons_unit_is_written_and_read_as_its_text() {
        let exhausted = SkipReason::QuotaExhausted {
            quota_share: "team-a".into(),
            unit: Unit::Total,
            needed: 2,
            limit: 4,
            in_use: 3,
        };
        let json = serde_json::to_value(&exhausted).unwrap();
        assert_eq!(json["kind"], "QUOTA_EXHAUSTED");
        assert_eq!(json["unit"], "NUM_INSTANCES");
        let read: SkipReason = serde_json::from_value(json).unwrap();
        assert_eq!(read, exhausted);
        assert!(matches!(
            read,
            SkipReason::QuotaExhausted {
                unit: Unit::Total,
                ..
            }
        ));
        let written = serde_json::to_string(&lent(None)).unwrap();
        assert!(written.contains(r#""unit":"ml.g5.xlarge""#), "{written}");
        // Compared and hashed as its text, however it was made.
        let hash = |value: &dyn Fn(&mut std::hash::DefaultHasher)| {
            let mut hasher = std::hash::DefaultHasher::new();
            value(&mut hasher);
            std::hash::Hasher::finish(&hasher)
        };
        let typed = Unit::Type(NUM_INSTANCES.into());
        assert_eq!(typed, Unit::Total);
        assert_eq!(
            hash(&|h| std::hash::Hash::hash(&Unit::Total, h)),
            hash(&|h| std::hash::Hash::hash(NUM_INSTANCES, h))
        );
    }
}
