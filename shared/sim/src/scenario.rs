//! Scenario files: the fleet, the priority tiers, the teams and their weights or quotas, the
//! emulator's timings and fault rates, and the seed. JSON, read once and validated with one error
//! listing every problem (see `docs/simulator.md` for the format).
//!
//! Traces without a priority get a tier per job from a seeded rule: a 64-bit FNV-1a hash of
//! (seed, share, job id) with SplitMix64's finaliser, written out here so that it never changes with the standard library,
//! mapped to `[0, 1)` and looked up in the tiers' cumulative `fraction`s. Within each share the
//! tiers' proportions are therefore the fractions, in expectation. When tiers carry
//! `max_duration_s` (runtime classes, the `sjf` scenario), the rule is by the job's duration
//! instead.
//!
//! Teams: without `other_team`, every share the trace gives is a team of its own. With it, the
//! scenario's `teams` are the teams and every other trace share folds into `other_team` — so the
//! slices of `static-partition` and the entitlements of fairness are about the teams the
//! scenario names, not about shares that never appear in the trace (the bug this replaced: the
//! `small` scenario's `vision` and `language` got static slices that Philly jobs, all in
//! `vc-<cluster>` shares, could never use). [`Scenario::with_largest_teams`] builds such a
//! mapping from a trace: its `n` largest shares by offered load, the rest folded.

use std::collections::BTreeMap;
use trainyard_domain::random::{Fnv1a, mix64, unit_of};

use serde::{Deserialize, Serialize};

use crate::trace::{DEFAULT_INSTANCE_TYPE, Trace, TraceJob};

/// The built-in scenarios, by name.
pub const BUILTIN: [(&str, &str); 3] = [
    ("fleet", include_str!("../scenarios/fleet.json")),
    ("small", include_str!("../scenarios/small.json")),
    ("sjf", include_str!("../scenarios/sjf.json")),
];

/// One priority tier: a queue in the `trainyard` policy, a `schedulingPriority` elsewhere.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tier {
    /// Queue name (`production`, `research`, `sweeps`).
    pub name: String,
    /// Queue priority (0–1000, higher first).
    pub priority: u32,
    /// `schedulingPriority` of its jobs in single-queue policies (0–9999, higher first).
    pub scheduling_priority: u32,
    /// Share of each team's jobs given this tier when the trace has none (0–1).
    #[serde(default)]
    pub fraction: f64,
    /// Runtime class: when any tier sets this, the tier rule is by run time instead of by
    /// `fraction` — a job goes to the first tier (in list order) whose bound is at least its
    /// trace duration, else to `default_queue`. Shortest-job-first as configuration.
    #[serde(default)]
    pub max_duration_s: Option<f64>,
    /// Aging of the tier's queue under the `trainyard` policy: priority points its jobs gain per
    /// hour waited (the queue tag `trainyard:aging-per-hour`; unset, none).
    #[serde(default)]
    pub aging_per_hour: Option<u32>,
    /// The highest priority the tier's jobs age to (`trainyard:aging-max-priority`; default
    /// 1000).
    #[serde(default)]
    pub aging_max_priority: Option<u32>,
    /// Hours the tier's jobs wait before they start to age (`trainyard:aging-after-hours`;
    /// default 0).
    #[serde(default)]
    pub aging_after_hours: Option<u32>,
    /// Under the `trainyard` policy, the tier's queue puts shorter jobs first within this many
    /// hours (`trainyard:shorter-first-hours`; unset, by time alone).
    #[serde(default)]
    pub shorter_first_hours: Option<u32>,
    /// Under the `trainyard` policy, a job of the tier's queue that does not fit holds the
    /// backfill reservation only after waiting this many hours (`trainyard:reserve-after-hours`;
    /// unset, at once).
    #[serde(default)]
    pub reserve_after_hours: Option<u32>,
}

impl Tier {
    /// The tags that give the tier's queue its aging and line rules under the `trainyard` policy.
    pub fn queue_tags(&self) -> trainyard_domain::Tags {
        use trainyard_domain::queue::{
            AGING_AFTER_HOURS_TAG, AGING_MAX_PRIORITY_TAG, AGING_PER_HOUR_TAG,
            RESERVE_AFTER_HOURS_TAG, SHORTER_FIRST_HOURS_TAG,
        };
        [
            (AGING_PER_HOUR_TAG, self.aging_per_hour),
            (AGING_MAX_PRIORITY_TAG, self.aging_max_priority),
            (AGING_AFTER_HOURS_TAG, self.aging_after_hours),
            (SHORTER_FIRST_HOURS_TAG, self.shorter_first_hours),
            (RESERVE_AFTER_HOURS_TAG, self.reserve_after_hours),
        ]
        .into_iter()
        .filter_map(|(tag, value)| Some((tag.to_owned(), value?.to_string())))
        .collect()
    }
}

/// A team (share) the scenario says something about; teams only in the trace get weight 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Team {
    /// Share identifier.
    pub name: String,
    /// Entitlement weight (higher gets more; Batch's `weightFactor` is its inverse).
    #[serde(default = "one")]
    pub weight: f64,
    /// Fixed slice in instances for `static-partition` (default: by offered load).
    #[serde(default)]
    pub static_instances: Option<u32>,
}

fn one() -> f64 {
    1.0
}

/// A scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Name, for reports.
    pub name: String,
    /// What it models.
    #[serde(default)]
    pub description: String,
    /// The service environment's name.
    #[serde(default = "default_environment")]
    pub environment: String,
    /// Its capacity, in instances.
    pub capacity_instances: u32,
    /// The instance type of jobs whose trace names none.
    #[serde(default = "default_instance_type")]
    pub instance_type: String,
    /// Priority tiers, highest first.
    pub tiers: Vec<Tier>,
    /// Teams with a weight or slice.
    #[serde(default)]
    pub teams: Vec<Team>,
    /// Queue (tier) of jobs the trace and the tier rule leave without one.
    pub default_queue: String,
    /// Share of jobs the trace gives none.
    #[serde(default = "default_share")]
    pub default_share: String,
    /// Where trace shares that are not among `teams` go. Unset, every trace share is a team of
    /// its own (weight 1); set, the scenario's `teams` are the only teams and the rest of the
    /// trace folds into this one (which should be listed in `teams` to get a weight).
    #[serde(default)]
    pub other_team: Option<String>,
    /// Fair-share decay window, seconds.
    #[serde(default = "default_decay")]
    pub share_decay_s: u32,
    /// Emulated provisioning (`Starting`), seconds; instances are held throughout.
    #[serde(default)]
    pub provisioning_s: f64,
    /// Emulated `Downloading`, seconds.
    #[serde(default)]
    pub download_s: f64,
    /// Emulated `Uploading`, seconds.
    #[serde(default)]
    pub upload_s: f64,
    /// Grace between a stop and `Stopped`, seconds (SageMaker: 120).
    #[serde(default = "default_grace")]
    pub stop_grace_s: f64,
    /// Chance an attempt fails with an algorithm error.
    #[serde(default)]
    pub failure_rate: f64,
    /// Chance an attempt fails with a capacity error (requeued without using an attempt).
    #[serde(default)]
    pub capacity_error_rate: f64,
    /// Attempts per job (Batch `retryStrategy.attempts`, 1–10).
    #[serde(default = "default_attempts")]
    pub attempts: u32,
    /// Seed of every random choice (tier rule, emulator outcomes).
    #[serde(default)]
    pub seed: u64,
    /// An attempt younger than this is never preempted, seconds.
    #[serde(default = "default_min_runtime")]
    pub min_runtime_before_preemption_s: u64,
    /// A job preempts lower-priority jobs of its own quota share only after waiting this long,
    /// seconds (`Config::min_wait_before_in_share_preemption_s`).
    #[serde(default)]
    pub min_wait_before_in_share_preemption_s: u64,
    /// Only a job of at least this scheduling priority preempts jobs of its own quota share
    /// (`Config::min_priority_for_in_share_preemption`; 0: any of higher priority).
    #[serde(default)]
    pub min_priority_for_in_share_preemption: u32,
    /// A job reclaims capacity its quota share lent only after waiting this long, seconds
    /// (`Config::min_wait_before_reclaim_s`).
    #[serde(default)]
    pub min_wait_before_reclaim_s: u64,
    /// Under `quota-shares`, a borrower that does not fit holds the backfill reservation once it
    /// has waited this many hours (the quota-managed queue's `trainyard:reserve-after-hours`;
    /// unset, no borrower reserves, as in Batch).
    #[serde(default)]
    pub quota_reserve_after_hours: Option<u32>,
    /// Anti-thrash: an attempt of a job preempted before is protected this long (doubling with
    /// each further preemption), seconds (`Config::min_runtime_after_preemption_s`).
    #[serde(default = "default_after_preemption")]
    pub min_runtime_after_preemption_s: u64,
    /// What a restart costs a victim, per instance, seconds (`Config::restart_overhead_s`).
    #[serde(default = "default_restart")]
    pub restart_overhead_s: u64,
    /// How long a preemption may wait for its victims' due checkpoints, seconds
    /// (`Config::checkpoint_alignment_s`; default 0, never).
    #[serde(default)]
    pub checkpoint_alignment_s: u64,
    /// Period of the due-work pass (timeouts, relaunches, reconciliation), seconds.
    #[serde(default = "default_due")]
    pub due_work_interval_s: u64,
    /// A dispatched job not heard from for this long is described, seconds.
    #[serde(default = "default_quiet")]
    pub reconcile_quiet_s: u64,
    /// Checkpointing jobs save a checkpoint every this many seconds of training (their payload
    /// has a `CheckpointConfig`, and the emulator writes it), and a preempted job resumes from
    /// its newest; 0: no job checkpoints.
    #[serde(default)]
    pub checkpoint_interval_s: f64,
    /// The share of jobs that checkpoint (drawn per job from the seed); the others publish
    /// nothing, and a preemption loses all their work.
    #[serde(default = "default_fraction")]
    pub checkpoint_fraction: f64,
    /// Checkpointing jobs also save when told to stop (within the stop grace).
    #[serde(default)]
    pub checkpoint_on_stop: bool,
}

impl Scenario {
    /// The checkpoint interval of `job`'s writer, seconds, if it checkpoints.
    pub fn checkpoint_interval_of(&self, job: &TraceJob) -> Option<f64> {
        let draw = unit_hash(self.seed, "checkpoint", &job.id);
        (self.checkpoint_interval_s > 0.0 && draw < self.checkpoint_fraction)
            .then_some(self.checkpoint_interval_s)
    }
}

fn default_environment() -> String {
    "fleet".into()
}
fn default_instance_type() -> String {
    DEFAULT_INSTANCE_TYPE.into()
}
fn default_share() -> String {
    "default".into()
}
fn default_decay() -> u32 {
    3_600
}
fn default_grace() -> f64 {
    120.0
}
fn default_attempts() -> u32 {
    1
}
fn default_min_runtime() -> u64 {
    600
}
fn default_due() -> u64 {
    3_600
}
fn default_quiet() -> u64 {
    86_400
}
fn default_after_preemption() -> u64 {
    trainyard_scheduler::Config::default().min_runtime_after_preemption_s
}
fn default_restart() -> u64 {
    trainyard_scheduler::Config::default().restart_overhead_s
}
fn default_fraction() -> f64 {
    1.0
}

/// A scenario that could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("cannot read scenario {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Not valid JSON for a scenario.
    #[error("scenario is not valid: {0}")]
    Json(#[from] serde_json::Error),
    /// Valid JSON, invalid values (every problem listed).
    #[error("scenario is not valid: {}", .0.join("; "))]
    Invalid(Vec<String>),
}

impl Scenario {
    /// A built-in scenario by name, or a scenario file by path.
    pub fn load(name_or_path: &str) -> Result<Self, ScenarioError> {
        if let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == name_or_path) {
            return Self::parse(text);
        }
        let text = std::fs::read_to_string(name_or_path).map_err(|source| ScenarioError::Io {
            path: name_or_path.to_owned(),
            source,
        })?;
        Self::parse(&text)
    }

    /// Parses and validates a scenario's JSON.
    pub fn parse(text: &str) -> Result<Self, ScenarioError> {
        let scenario: Self = serde_json::from_str(text)?;
        scenario.validate()?;
        Ok(scenario)
    }

    /// Every problem with the values, at once.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        let mut problems = Vec::new();
        if self.capacity_instances == 0 {
            problems.push("capacity_instances must be ≥ 1".to_owned());
        }
        if self.tiers.is_empty() {
            problems.push("tiers must list at least one tier".to_owned());
        }
        let mut fractions = 0.0;
        for tier in &self.tiers {
            if tier.priority > 1_000 {
                problems.push(format!("tier {}: priority must be 0–1000", tier.name));
            }
            if tier.scheduling_priority > 9_999 {
                problems.push(format!(
                    "tier {}: scheduling_priority must be 0–9999",
                    tier.name
                ));
            }
            if let Err(problem) = trainyard_domain::queue::check_queue_tags(&tier.queue_tags()) {
                problems.push(format!("tier {}: {problem}", tier.name));
            }
            if !(0.0..=1.0).contains(&tier.fraction) {
                problems.push(format!("tier {}: fraction must be 0–1", tier.name));
            }
            fractions += tier.fraction;
        }
        if fractions > 1.0 + 1e-9 {
            problems.push(format!("tier fractions sum to {fractions}, more than 1"));
        }
        if !self.tiers.iter().any(|t| t.name == self.default_queue) {
            problems.push(format!(
                "default_queue {:?} is not one of the tiers",
                self.default_queue
            ));
        }
        let by_runtime = self
            .tiers
            .iter()
            .filter(|t| t.max_duration_s.is_some())
            .count();
        if by_runtime > 0 && by_runtime + 1 < self.tiers.len() {
            problems.push(
                "max_duration_s must be set on every tier, or every tier but the default".into(),
            );
        }
        for tier in &self.tiers {
            if tier
                .max_duration_s
                .is_some_and(|d| !(d.is_finite() && d >= 0.0))
            {
                problems.push(format!("tier {}: max_duration_s must be ≥ 0", tier.name));
            }
        }
        for team in &self.teams {
            if !(team.weight.is_finite() && team.weight > 0.0) {
                problems.push(format!("team {}: weight must be > 0", team.name));
            }
        }
        for (name, rate) in [
            ("failure_rate", self.failure_rate),
            ("capacity_error_rate", self.capacity_error_rate),
            ("checkpoint_fraction", self.checkpoint_fraction),
        ] {
            if !(0.0..=1.0).contains(&rate) {
                problems.push(format!("{name} must be 0–1"));
            }
        }
        if self.failure_rate + self.capacity_error_rate > 1.0 {
            problems.push("failure_rate + capacity_error_rate must be ≤ 1".into());
        }
        if self.capacity_error_rate >= 1.0 {
            problems.push("capacity_error_rate must be < 1, or no job ever runs".into());
        }
        for (name, s) in [
            ("provisioning_s", self.provisioning_s),
            ("download_s", self.download_s),
            ("upload_s", self.upload_s),
            ("stop_grace_s", self.stop_grace_s),
            ("checkpoint_interval_s", self.checkpoint_interval_s),
        ] {
            if !(s.is_finite() && s >= 0.0) {
                problems.push(format!("{name} must be ≥ 0"));
            }
        }
        if !(1..=10).contains(&self.attempts) {
            problems.push("attempts must be 1–10".into());
        }
        if self.due_work_interval_s == 0 {
            problems.push("due_work_interval_s must be ≥ 1".into());
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ScenarioError::Invalid(problems))
        }
    }

    /// The weight of a team (1 unless the scenario says otherwise).
    pub fn weight(&self, team: &str) -> f64 {
        self.teams
            .iter()
            .find(|t| t.name == team)
            .map_or(1.0, |t| t.weight)
    }

    /// The tier of a job: the trace's queue, else the seeded rule, else the default queue.
    pub fn tier_of(&self, job: &TraceJob) -> String {
        if let Some(queue) = &job.queue {
            return queue.clone();
        }
        if self.tiers.iter().any(|t| t.max_duration_s.is_some()) {
            return self
                .tiers
                .iter()
                .find(|t| t.max_duration_s.is_some_and(|d| job.duration_s <= d))
                .map_or_else(|| self.default_queue.clone(), |t| t.name.clone());
        }
        let share = self.share_of(job);
        let u = unit_hash(self.seed, &share, &job.id);
        let mut cumulative = 0.0;
        for tier in &self.tiers {
            cumulative += tier.fraction;
            if u < cumulative {
                return tier.name.clone();
            }
        }
        self.default_queue.clone()
    }

    /// The share (team) of a job: the trace's share (else `default_share`), folded into
    /// `other_team` when that is set and the share is not one of `teams`.
    pub fn share_of(&self, job: &TraceJob) -> String {
        let share = job.share.as_deref().unwrap_or(&self.default_share);
        match &self.other_team {
            Some(other) if !self.teams.iter().any(|t| t.name == share) => other.clone(),
            _ => share.to_owned(),
        }
    }

    /// This scenario with its teams replaced by the trace's `n` largest shares by offered load
    /// (instances × duration; ties by name) plus `other`, into which every other share folds.
    /// Teams the scenario already describes keep their weight and slice; new ones get weight 1.
    /// A trace with at most `n` shares keeps them all and gets no `other` team.
    pub fn with_largest_teams(&self, trace: &Trace, n: usize, other: &str) -> Self {
        let mut ranked: Vec<(String, f64)> = offered_loads(trace, &self.default_share)
            .into_iter()
            .collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let folds = ranked.len() > n;
        let mut names: Vec<String> = ranked.into_iter().take(n).map(|(name, _)| name).collect();
        if folds {
            names.push(other.to_owned());
        }
        let mut out = self.clone();
        out.teams = names
            .into_iter()
            .map(|name| {
                self.teams
                    .iter()
                    .find(|t| t.name == name)
                    .cloned()
                    .unwrap_or(Team {
                        name,
                        weight: 1.0,
                        static_instances: None,
                    })
            })
            .collect();
        out.other_team = folds.then(|| other.to_owned());
        out
    }

    /// Every parameter, in order, for the run's header and report.
    pub fn parameters(&self) -> Vec<(String, String)> {
        let mut out = vec![
            ("scenario".into(), self.name.clone()),
            ("environment".into(), self.environment.clone()),
            (
                "capacity_instances".into(),
                self.capacity_instances.to_string(),
            ),
            ("instance_type".into(), self.instance_type.clone()),
        ];
        for tier in &self.tiers {
            out.push((
                format!("tier.{}", tier.name),
                format!(
                    "priority={} scheduling_priority={} fraction={}{}{}{}{}",
                    tier.priority,
                    tier.scheduling_priority,
                    tier.fraction,
                    tier.max_duration_s
                        .map_or_else(String::new, |d| format!(" max_duration_s={d}")),
                    tier.aging_per_hour.map_or_else(String::new, |rate| format!(
                        " aging={rate}/h up to {}{}",
                        tier.aging_max_priority.unwrap_or(1000),
                        tier.aging_after_hours
                            .map_or_else(String::new, |h| format!(" after {h}h"))
                    )),
                    tier.shorter_first_hours
                        .map_or_else(String::new, |h| format!(" shorter_first={h}h")),
                    tier.reserve_after_hours
                        .map_or_else(String::new, |h| format!(" reserve_after={h}h")),
                ),
            ));
        }
        let teams: BTreeMap<&str, String> = self
            .teams
            .iter()
            .map(|t| {
                (
                    t.name.as_str(),
                    format!(
                        "weight={} static_instances={}",
                        t.weight,
                        t.static_instances
                            .map_or_else(|| "by-load".into(), |n| n.to_string())
                    ),
                )
            })
            .collect();
        for (name, value) in teams {
            out.push((format!("team.{name}"), value));
        }
        for (k, v) in [
            ("default_queue", self.default_queue.clone()),
            ("default_share", self.default_share.clone()),
            (
                "other_team",
                self.other_team.clone().unwrap_or_else(|| "(none)".into()),
            ),
            ("share_decay_s", self.share_decay_s.to_string()),
            ("provisioning_s", self.provisioning_s.to_string()),
            ("download_s", self.download_s.to_string()),
            ("upload_s", self.upload_s.to_string()),
            ("stop_grace_s", self.stop_grace_s.to_string()),
            ("failure_rate", self.failure_rate.to_string()),
            ("capacity_error_rate", self.capacity_error_rate.to_string()),
            ("attempts", self.attempts.to_string()),
            ("seed", self.seed.to_string()),
            (
                "min_runtime_before_preemption_s",
                self.min_runtime_before_preemption_s.to_string(),
            ),
            (
                "min_wait_before_in_share_preemption_s",
                self.min_wait_before_in_share_preemption_s.to_string(),
            ),
            (
                "min_priority_for_in_share_preemption",
                self.min_priority_for_in_share_preemption.to_string(),
            ),
            (
                "min_wait_before_reclaim_s",
                self.min_wait_before_reclaim_s.to_string(),
            ),
            (
                "quota_reserve_after_hours",
                self.quota_reserve_after_hours
                    .map_or_else(|| "-".to_owned(), |h| h.to_string()),
            ),
            (
                "min_runtime_after_preemption_s",
                self.min_runtime_after_preemption_s.to_string(),
            ),
            ("restart_overhead_s", self.restart_overhead_s.to_string()),
            (
                "checkpoint_alignment_s",
                self.checkpoint_alignment_s.to_string(),
            ),
            ("due_work_interval_s", self.due_work_interval_s.to_string()),
            ("reconcile_quiet_s", self.reconcile_quiet_s.to_string()),
            (
                "checkpoint_interval_s",
                self.checkpoint_interval_s.to_string(),
            ),
            ("checkpoint_fraction", self.checkpoint_fraction.to_string()),
            ("checkpoint_on_stop", self.checkpoint_on_stop.to_string()),
        ] {
            out.push((k.into(), v));
        }
        out
    }
}

/// Each trace share's offered load (instances × duration, summed), before any folding; jobs
/// without a share count under `default_share`.
pub fn offered_loads(trace: &Trace, default_share: &str) -> BTreeMap<String, f64> {
    let mut loads = BTreeMap::new();
    for job in &trace.jobs {
        let share = job.share.as_deref().unwrap_or(default_share);
        *loads.entry(share.to_owned()).or_insert(0.0) += f64::from(job.instances) * job.duration_s;
    }
    loads
}

/// 64-bit FNV-1a over the seed (little-endian), the share, a 0 byte, and the job id, mixed by
/// SplitMix64's finaliser and mapped to `[0, 1)` by its top 53 bits.
pub fn unit_hash(seed: u64, share: &str, id: &str) -> f64 {
    let mut hash = Fnv1a::new();
    hash.write(&seed.to_le_bytes());
    hash.write(share.as_bytes());
    hash.write(&[0]);
    hash.write(id.as_bytes());
    // SplitMix64's finaliser: FNV-1a alone leaves the top bits of similar short keys
    // correlated (measured: 7% instead of 10% in the first tier).
    unit_of(mix64(hash.finish()))
}

/// Splits `total` into whole parts proportional to `weights` (largest remainder, ties by
/// position), then raises parts below `min` to it, as far as `total` allows, taking from the
/// largest parts (ties by position).
pub fn apportion(total: u32, weights: &[f64], min: u32) -> Vec<u32> {
    let n = weights.len();
    if n == 0 {
        return Vec::new();
    }
    let valid = |w: f64| w.is_finite() && w > 0.0;
    let sum: f64 = weights.iter().copied().filter(|w| valid(*w)).sum();
    let ideal: Vec<f64> = weights
        .iter()
        .map(|w| {
            if sum > 0.0 {
                if valid(*w) {
                    f64::from(total) * w / sum
                } else {
                    0.0
                }
            } else {
                f64::from(total) / n as f64
            }
        })
        .collect();
    let mut parts: Vec<u32> = ideal.iter().map(|x| x.floor() as u32).collect();
    let given: u32 = parts.iter().sum();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|a, b| {
        let ra = ideal[*a] - ideal[*a].floor();
        let rb = ideal[*b] - ideal[*b].floor();
        rb.total_cmp(&ra).then(a.cmp(b))
    });
    for i in order.into_iter().take(total.saturating_sub(given) as usize) {
        parts[i] += 1;
    }
    for i in 0..n {
        while parts[i] < min {
            // The largest part that can spare one.
            let donor = (0..n)
                .filter(|j| *j != i && parts[*j] > min)
                .max_by(|a, b| parts[*a].cmp(&parts[*b]).then(b.cmp(a)));
            match donor {
                Some(j) => {
                    parts[j] -= 1;
                    parts[i] += 1;
                }
                None => break,
            }
        }
    }
    parts
}
