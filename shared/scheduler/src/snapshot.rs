//! What the planner sees: environments, queues, running attempts, pending jobs and share usage.
//! Hosts build it from their store; the simulator builds it from virtual time.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use trainyard_domain::State;
use trainyard_domain::environment::CapacityLimit;
use trainyard_domain::policy::FairsharePolicy;
use trainyard_domain::queue::Aging;
use trainyard_domain::quota_share::{InSharePreemption, QuotaShare, SharingStrategy};

use crate::fair_share::ShareUsage;

/// Instances per instance type, e.g. `{"ml.p4d.24xlarge": 2}`.
pub type Instances = BTreeMap<String, u32>;

/// All the instances of `instances`, every type together.
pub fn total_instances(instances: &Instances) -> u64 {
    instances.values().map(|n| u64::from(*n)).sum()
}

/// An immutable string shared by its clones: cloning copies a pointer, not the text. Running
/// jobs name their job, queue and share with it, because every cycle passes every running job.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct SharedStr(Arc<str>);

/// The text's order. Clones of one name, the common case in maps keyed by queue and share,
/// compare equal without reading the text.
impl Ord for SharedStr {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        if Arc::ptr_eq(&self.0, &other.0) {
            return std::cmp::Ordering::Equal;
        }
        self.0.cmp(&other.0)
    }
}

impl PartialOrd for SharedStr {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl SharedStr {
    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for SharedStr {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for SharedStr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

impl std::fmt::Display for SharedStr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Maps keyed by shared names are looked up by `&str` (the order is the text's).
impl std::borrow::Borrow<str> for SharedStr {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl serde::Serialize for SharedStr {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for SharedStr {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Self::from)
    }
}

impl From<&str> for SharedStr {
    fn from(s: &str) -> Self {
        Self(s.into())
    }
}

impl From<String> for SharedStr {
    fn from(s: String) -> Self {
        Self(s.into())
    }
}

impl PartialEq<str> for SharedStr {
    fn eq(&self, other: &str) -> bool {
        *self.0 == *other
    }
}

impl PartialEq<&str> for SharedStr {
    fn eq(&self, other: &&str) -> bool {
        *self.0 == **other
    }
}

/// Instances per instance type, shared by its clones like [`SharedStr`], with their total kept
/// beside them. Every cycle sums each running job's and each head's instances; reading the total
/// touches only the shared allocation's first line, where summing the map would also read its
/// nodes. Serialized as the map alone.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct SharedInstances(Arc<Counted>);

/// A map of instances and its total.
#[derive(PartialEq, Eq, Default)]
struct Counted {
    total: u64,
    map: Instances,
}

impl SharedInstances {
    /// All the instances, every type together ([`total_instances`] of the map).
    pub fn total(&self) -> u64 {
        self.0.total
    }
}

impl std::ops::Deref for SharedInstances {
    type Target = Instances;

    fn deref(&self) -> &Instances {
        &self.0.map
    }
}

impl From<Instances> for SharedInstances {
    fn from(map: Instances) -> Self {
        let total = total_instances(&map);
        Self(Arc::new(Counted { total, map }))
    }
}

/// The map's order.
impl Ord for SharedInstances {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.map.cmp(&other.0.map)
    }
}

impl PartialOrd for SharedInstances {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl std::fmt::Debug for SharedInstances {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.0.map, f)
    }
}

impl serde::Serialize for SharedInstances {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.map.serialize(serializer)
    }
}

impl<'de> serde::Deserialize<'de> for SharedInstances {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Instances::deserialize(deserializer).map(Self::from)
    }
}

/// A service environment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnvironmentState {
    /// Name.
    pub name: String,
    /// Disabled environments dispatch nothing.
    pub enabled: bool,
    /// Capacity limits (`NUM_INSTANCES` or per instance type).
    pub limits: Vec<CapacityLimit>,
}

/// How a queue orders its jobs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum QueuePolicy {
    /// First in, first out.
    Fifo,
    /// Batch fair share.
    FairShare(FairsharePolicy),
    /// Quota management: the queue's quota shares (see [`crate::quota`]).
    QuotaShare(Vec<QuotaShareState>),
}

/// A quota share of a quota-managed queue, as the planner sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuotaShareState {
    /// Name, unique within its queue (jobs name it in `quotaShareName`). Shared: every skip of
    /// one of its jobs names it.
    pub name: SharedStr,
    /// Instances per instance type the share may use without borrowing; a type not listed is a
    /// limit of 0.
    pub limits: Instances,
    /// RESERVE, LEND or LEND_AND_BORROW.
    pub strategy: SharingStrategy,
    /// Percent of its own limit, per instance type, it may borrow on top (LEND_AND_BORROW only);
    /// negative (Batch's -1) is unlimited.
    pub borrow_limit_percent: i32,
    /// Whether a higher-priority job may preempt lower-priority jobs of the same share.
    pub in_share_preemption: bool,
    /// ENABLED. A disabled share accepts no submissions (the API enforces that); the jobs it
    /// already has are still planned, as Batch lets a disabled queue drain.
    pub enabled: bool,
}

impl From<&QuotaShare> for QuotaShareState {
    /// The planner's view of a stored quota share.
    fn from(share: &QuotaShare) -> Self {
        let sharing = &share.resource_sharing_configuration;
        Self {
            name: share.quota_share_name.as_str().into(),
            limits: share
                .capacity_limits
                .iter()
                .map(|l| (l.capacity_unit.clone(), l.max_capacity))
                .collect(),
            strategy: sharing.strategy,
            borrow_limit_percent: sharing.borrow_limit.unwrap_or(-1),
            in_share_preemption: share.preemption_configuration.in_share_preemption
                == InSharePreemption::Enabled,
            enabled: share.state == State::Enabled,
        }
    }
}

impl QuotaShareState {
    /// The share's own limit for an instance type.
    pub fn limit(&self, instance_type: &str) -> u64 {
        self.limits.get(instance_type).copied().map_or(0, u64::from)
    }

    /// Whether its idle capacity may be borrowed by other shares.
    pub fn lends(&self) -> bool {
        self.strategy != SharingStrategy::Reserve
    }

    /// The most it may borrow of an instance type on top of its limit (`None`: unlimited):
    /// `floor(limit × borrowLimit / 100)` for LEND_AND_BORROW, 0 otherwise.
    pub fn borrow_cap(&self, instance_type: &str) -> Option<u64> {
        self.cap_over(self.limit(instance_type))
    }

    /// [`borrow_cap`](Self::borrow_cap) of a type whose own limit is `limit`.
    pub fn cap_over(&self, limit: u64) -> Option<u64> {
        if self.strategy != SharingStrategy::LendAndBorrow {
            return Some(0);
        }
        let percent = u64::try_from(self.borrow_limit_percent).ok()?;
        Some(limit.saturating_mul(percent) / 100)
    }

    /// Whether no waiting job of the share can start, preempt or reclaim while its running jobs
    /// hold `held(type)` instances: it may not preempt in itself, and of every type it holds
    /// all it may, its limit plus what it may borrow on top. Over its limit, it has lent
    /// nothing to reclaim, and its use only grows within a cycle (victims are counted out of
    /// their shares only when they stop), so this holds for the whole cycle.
    pub fn full(&self, held: impl Fn(&str) -> u64) -> bool {
        let bound = |ty: &str| Some(self.limit(ty).saturating_add(self.borrow_cap(ty)?));
        self.may_fill()
            && self
                .limits
                .keys()
                .all(|ty| bound(ty).is_some_and(|b| held(ty) >= b))
    }

    /// Whether the share can ever be [`full`](Self::full): it may not preempt in itself, and
    /// what it may borrow is capped.
    pub fn may_fill(&self) -> bool {
        !self.in_share_preemption && self.borrow_cap("").is_some()
    }

    /// Whether `in_use` (the share's instances per instance type) stays within what the share
    /// may ever hold: its own limit plus its borrow cap, for every type. The dispatch commit
    /// checks this on the share's usage as stored, so that a plan whose view of the share's
    /// running jobs lagged cannot over-commit it.
    pub fn admits(&self, in_use: &BTreeMap<String, u64>) -> bool {
        in_use.iter().all(|(ty, n)| {
            *n == 0
                || self
                    .borrow_cap(ty)
                    .is_none_or(|cap| *n <= self.limit(ty).saturating_add(cap))
        })
    }
}

/// A job queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueState {
    /// Name.
    pub name: String,
    /// 0–1000, higher first.
    pub priority: u32,
    /// The environment it dispatches to.
    pub environment: Option<String>,
    /// Ordering policy.
    pub policy: QueuePolicy,
    /// Aging, from the queue's tags: how its jobs' priority grows while they wait.
    pub aging: Option<Aging>,
    /// How long a job of it that does not fit waits before it may hold its environment's
    /// backfill reservation (`trainyard:reserve-after-hours`; `None`: at once, EASY backfill,
    /// but never for a quota-managed queue's borrowers).
    #[serde(default)]
    pub reserve_after_ms: Option<i64>,
}

/// A job with an attempt in SCHEDULED, STARTING or RUNNING: it holds capacity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
///
/// Its ids and instances are shared ([`SharedStr`], [`SharedInstances`]), not owned: every cycle passes every running job,
/// and a host that keeps these summaries between cycles hands them over without copying.
pub struct RunningJob {
    /// Job id.
    pub job_id: SharedStr,
    /// Queue name.
    pub queue: SharedStr,
    /// Fair-share share or quota share, if any.
    pub share: Option<SharedStr>,
    /// `schedulingPriority` (0 when unset): in-share preemption only takes lower ones.
    pub priority: u32,
    /// When the attempt started (dispatch time): the minimum runtime before preemption counts
    /// from here, and borrowed capacity is attributed to the lowest-priority jobs, the most
    /// recently started first.
    pub started_at_ms: i64,
    /// Instances held.
    pub instances: SharedInstances,
    /// When the attempt will have ended at the latest (dispatch + max runtime).
    pub expected_end_ms: i64,
    /// Its newest complete checkpoint as observed (not as reported by the job), if any: work
    /// before it survives a preemption. Hosts that observe no checkpoints leave it unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_ms: Option<i64>,
    /// The interval between its two newest observed checkpoints, if it has two: a job that
    /// publishes nothing is assumed to checkpoint at its queue's median of these.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_interval_ms: Option<i64>,
    /// How many times the job was preempted before this attempt (`preemptionSummary`): a job
    /// that resumes and was preempted before is protected longer
    /// ([`Config::min_runtime_after_preemption_s`]).
    #[serde(default)]
    pub preemptions: u32,
    /// Whether its attempts resume from checkpoints (the payload has a `CheckpointConfig`); one
    /// that does not starts over after a preemption, and is not protected by having been
    /// preempted before.
    #[serde(default)]
    pub resumable: bool,
    /// Whether its attempt has been asked to stop (a preemption, a timeout or a terminate): its
    /// instances are on their way back. Choosing it as a victim again loses nothing more, so
    /// the quota planner takes it before any other candidate, and counts it first among its
    /// share's borrowed jobs.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stopping: bool,
}

impl RunningJob {
    /// Its newest observed checkpoint, if this attempt saved it (one older than the attempt's
    /// start was left by an earlier attempt, and is what this one resumed from).
    pub fn checkpoint_since_start(&self) -> Option<i64> {
        self.checkpoint_ms.filter(|c| *c > self.started_at_ms)
    }
}

/// A RUNNABLE job. Like [`RunningJob`], its text and instances are shared with the host's
/// summary, so building a snapshot copies no strings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingJob {
    /// Job id (the final tie-breaker everywhere).
    pub job_id: SharedStr,
    /// Queue name.
    pub queue: SharedStr,
    /// Fair-share share (or quota share), if any.
    pub share: Option<SharedStr>,
    /// `schedulingPriority` (0 when unset).
    pub priority: u32,
    /// Its place in line (its submission, or its last requeue).
    pub runnable_at_ms: i64,
    /// Instances it needs.
    pub instances: SharedInstances,
    /// `MaxRuntimeInSeconds`, if the payload sets it.
    pub max_runtime_s: Option<u64>,
    /// Not to be dispatched before this time (retry backoff).
    pub not_before_ms: Option<i64>,
    /// How much later than `runnable_at_ms` it stands in its share's line (a queue that puts
    /// shorter jobs first sets it at submission; see [`PendingJob::line_at_ms`]).
    #[serde(default)]
    pub line_offset_ms: i64,
}

impl PendingJob {
    /// Where it stands in its share's line, as a time (`trainyard_domain::order`).
    pub fn line_at_ms(&self) -> i64 {
        self.runnable_at_ms.saturating_add(self.line_offset_ms)
    }

    /// Since when it has waited, as the waits before preempting count it
    /// ([`waited_since_ms`]).
    pub fn waited_since_ms(&self) -> i64 {
        waited_since_ms(self.runnable_at_ms, self.not_before_ms)
    }
}

/// Since when a RUNNABLE job has waited, as the waits before preempting
/// (`Config::min_wait_before_reclaim_s`, `Config::min_wait_before_in_share_preemption_s`) count
/// it: from when it last became runnable, or from the end of its retry backoff if that is
/// later. A preempted job keeps its place in line (`runnable_at_ms`), not its wait.
pub fn waited_since_ms(runnable_at_ms: i64, not_before_ms: Option<i64>) -> i64 {
    not_before_ms.map_or(runnable_at_ms, |t| t.max(runnable_at_ms))
}

/// A share within a queue. Shared names: a cycle keys every share's usage by it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ShareKey {
    /// Queue name.
    pub queue: SharedStr,
    /// Share identifier.
    pub share: SharedStr,
}

/// Everything one cycle plans over.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Snapshot {
    /// Service environments.
    pub environments: Vec<EnvironmentState>,
    /// Job queues.
    pub queues: Vec<QueueState>,
    /// Jobs holding capacity.
    pub running: Vec<RunningJob>,
    /// RUNNABLE jobs (the hosts pass the heads of each queue and share).
    pub pending: Vec<PendingJob>,
    /// Decayed usage per fair share, as of its own `at_ms`.
    #[serde(with = "pairs")]
    pub usage: BTreeMap<ShareKey, ShareUsage>,
    /// Instances in use per environment (and instance type) as the host's usage records keep
    /// them: charged where each attempt was dispatched, updated with every dispatch and release,
    /// and read consistently. An environment listed here is charged this, not the sum of
    /// [`Snapshot::running`], which a host may read from a lagging index and which charges a
    /// job to its queue's current environment.
    pub in_use: BTreeMap<String, BTreeMap<String, u64>>,
}

/// A map whose keys are not text, as a list of pairs (JSON keys must be text): for
/// `#[serde(with = "trainyard_scheduler::snapshot::pairs")]`.
pub mod pairs {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    /// The map as a sequence of `(key, value)` pairs.
    pub fn serialize<K: Serialize, V: Serialize, S: Serializer>(
        map: &BTreeMap<K, V>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(map.iter())
    }

    /// The map from a sequence of `(key, value)` pairs.
    pub fn deserialize<'de, K, V, D>(deserializer: D) -> Result<BTreeMap<K, V>, D::Error>
    where
        K: Deserialize<'de> + Ord,
        V: Deserialize<'de>,
        D: Deserializer<'de>,
    {
        Vec::<(K, V)>::deserialize(deserializer).map(|pairs| pairs.into_iter().collect())
    }
}

/// Planner settings. As JSON (a decision record's, `trainyard replay --config`), fields left
/// out take their defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Batch's strict head-of-line FIFO instead of EASY backfill.
    pub strict_fifo: bool,
    /// Runtime assumed for attempts whose payload sets no `MaxRuntimeInSeconds` (SageMaker's
    /// default is one day).
    pub default_runtime_s: u64,
    /// A running attempt younger than this is never preempted, so that every attempt gets to
    /// make some progress (and to write a checkpoint) before it can be stopped. Default 600 s:
    /// long enough for SageMaker to provision and start training, short enough that a reclaiming
    /// share waits minutes, not hours.
    pub min_runtime_before_preemption_s: u64,
    /// A waiting job preempts lower-priority jobs of its own quota share only once it has waited
    /// this long since it last became runnable (a preempted job keeps its place in line, not
    /// its wait): until then its share's jobs that end free capacity for it, which costs no
    /// work. Reclaiming lent capacity has a wait of its own, `min_wait_before_reclaim_s`.
    pub min_wait_before_in_share_preemption_s: u64,
    /// Only a waiting job whose priority is at least this preempts jobs of its own quota share
    /// (after `min_wait_before_in_share_preemption_s`); one below it waits for them to end.
    /// Reclaims of lent capacity are not affected. Default 0: any job of higher priority, as
    /// Batch does.
    pub min_priority_for_in_share_preemption: u32,
    /// A waiting job preempts other shares' jobs running on capacity its quota share lent
    /// (a reclaim) only once it has waited this long since it last became runnable: until then
    /// borrowers and its share's own jobs that end give capacity back without losing work.
    /// Default 0: reclaimed at once, as Batch does.
    pub min_wait_before_reclaim_s: u64,
    /// Anti-thrash: an attempt of a resumable job that was preempted before is preempted again
    /// only once it has run this long, or has saved a checkpoint since it started (whichever
    /// comes first; never before `min_runtime_before_preemption_s`); from its second
    /// preemption on, this doubles with each one (at most a day), checkpoint or not. Default
    /// 3,600 s.
    pub min_runtime_after_preemption_s: u64,
    /// What restarting a preempted attempt costs, per instance, in seconds of lost work
    /// (provisioning, download, loading the checkpoint): added to every victim's cost. Default
    /// 300 s.
    pub restart_overhead_s: u64,
    /// A preemption whose victims will each have saved their next checkpoint within this many
    /// seconds waits for those checkpoints (so that they lose only what they did since): a
    /// victim's next checkpoint is predicted from its newest observed one and its observed
    /// interval (or the queue's median interval). Victims without an observed checkpoint since
    /// their start, or whose next one is overdue, are not waited for. Default 0: off.
    pub checkpoint_alignment_s: u64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            strict_fifo: false,
            default_runtime_s: 86_400,
            min_runtime_before_preemption_s: 600,
            min_wait_before_in_share_preemption_s: 0,
            min_priority_for_in_share_preemption: 0,
            min_wait_before_reclaim_s: 0,
            min_runtime_after_preemption_s: 3_600,
            restart_overhead_s: 300,
            checkpoint_alignment_s: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Instances, QuotaShareState, RunningJob, SharedInstances, SharedStr};
    use trainyard_domain::quota_share::SharingStrategy;

    #[test]
    fn shared_instances_keep_their_maps_total_however_made_and_read() {
        let map = Instances::from([("ml.a".to_owned(), 2), ("ml.b".to_owned(), 3)]);
        let made = SharedInstances::from(map.clone());
        assert_eq!(made.total(), 5);
        assert_eq!(*made, map);
        // A recorded snapshot is the map alone; read back, the total is the map's again (a
        // replay plans with it).
        let json = serde_json::to_string(&made).unwrap();
        assert_eq!(json, r#"{"ml.a":2,"ml.b":3}"#);
        let read: SharedInstances = serde_json::from_str(&json).unwrap();
        assert_eq!((read.total(), &read), (5, &made));
        let job: RunningJob = serde_json::from_value(serde_json::json!({
            "job_id": "j", "queue": "q", "share": null, "priority": 0, "started_at_ms": 0,
            "instances": {"ml.p4d.24xlarge": 4}, "expected_end_ms": 1
        }))
        .unwrap();
        assert_eq!(job.instances.total(), 4);
        assert_eq!(SharedInstances::default().total(), 0);
    }

    #[test]
    fn shared_names_order_as_their_text_whether_clones_or_copies() {
        let names = ["a", "a-b", "b", "vc-1", "vc-10", "vc-2"];
        let shared: Vec<SharedStr> = names.iter().map(|n| SharedStr::from(*n)).collect();
        for (i, x) in shared.iter().enumerate() {
            for (j, y) in shared.iter().enumerate() {
                let copy = SharedStr::from(names[j]);
                assert_eq!(x.cmp(y), names[i].cmp(names[j]), "{x} against {y}");
                assert_eq!(x.cmp(&copy), names[i].cmp(names[j]), "{x} against a copy");
                assert_eq!(x.clone().cmp(y), names[i].cmp(names[j]), "a clone of {x}");
            }
        }
    }

    #[test]
    fn a_share_admits_its_limit_plus_its_borrow_cap_and_no_more() {
        let share = |strategy, borrow_limit_percent| QuotaShareState {
            name: "s".into(),
            limits: [("ml.a".to_owned(), 4)].into(),
            strategy,
            borrow_limit_percent,
            in_share_preemption: false,
            enabled: true,
        };
        let used = |pairs: &[(&str, u64)]| {
            pairs
                .iter()
                .map(|(t, n)| ((*t).to_owned(), *n))
                .collect::<std::collections::BTreeMap<_, _>>()
        };
        for strategy in [SharingStrategy::Reserve, SharingStrategy::Lend] {
            let s = share(strategy, -1);
            assert!(s.admits(&used(&[("ml.a", 4)])), "{strategy:?}");
            assert!(!s.admits(&used(&[("ml.a", 5)])), "{strategy:?}");
            assert!(
                !s.admits(&used(&[("ml.b", 1)])),
                "{strategy:?}: an unlisted type"
            );
        }
        let half = share(SharingStrategy::LendAndBorrow, 50);
        assert!(half.admits(&used(&[("ml.a", 6)])));
        assert!(!half.admits(&used(&[("ml.a", 7)])));
        let unlimited = share(SharingStrategy::LendAndBorrow, -1);
        assert!(unlimited.admits(&used(&[("ml.a", 1_000), ("ml.b", 3)])));
        assert!(half.admits(&used(&[])), "nothing in use");
    }

    /// The planner orders running jobs by id and compares queue names, so a shared name must
    /// compare, order and print exactly as its text does.
    #[test]
    fn a_shared_name_behaves_as_its_text() {
        let cases = [("a", "b"), ("job-10", "job-9"), ("", "x"), ("same", "same")];
        for (a, b) in cases {
            let (sa, sb) = (SharedStr::from(a), SharedStr::from(b.to_owned()));
            assert_eq!(sa.cmp(&sb), a.cmp(b), "{a} vs {b}");
            assert_eq!(sa == sb, a == b, "{a} vs {b}");
            assert!(sa == a && sa == *a && sa.as_str() == a && &*sa == a);
            assert_eq!(format!("{sa} {sa:?}"), format!("{a} {a:?}"));
        }
        let shared = SharedStr::from("q");
        assert!(std::ptr::eq(shared.as_str(), shared.clone().as_str()));
    }
}
