//! The sans-IO model: training jobs, their lifecycle over time, and the events they emit.

use foldhash::fast::FixedState;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use trainyard_domain::random::{Fnv1a, SplitMix64};
use trainyard_domain::training::{TrainingJobState, TrainingStatus};

use serde_json::{Map, Value, json};
use trainyard_domain::payload::training_request_of;

/// Timings, quotas and fault rates. Times are milliseconds.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `Starting`: provisioning instances.
    pub provisioning_ms: i64,
    /// `Downloading`: data and image.
    pub download_ms: i64,
    /// Training time when `emulator_duration_s` is not set.
    pub default_training_ms: i64,
    /// `Uploading`: model artefacts.
    pub upload_ms: i64,
    /// `Stopping` → `Stopped` (SageMaker gives the container 120 s after SIGTERM).
    pub stop_grace_ms: i64,
    /// Account quota per instance type (instances of jobs in progress); absent = unlimited.
    pub account_quotas: BTreeMap<String, u32>,
    /// Chance that a job without an explicit outcome fails with an algorithm error.
    pub failure_rate: f64,
    /// Chance that a job without an explicit outcome fails with a capacity error.
    pub capacity_error_rate: f64,
    /// Chance that an event is delivered twice.
    pub duplicate_event_rate: f64,
    /// Events are delayed by up to this much (so they may arrive out of order).
    pub max_event_delay_ms: i64,
    /// Seeds every random choice.
    pub seed: u64,
    /// Region in ARNs.
    pub region: String,
    /// Account in ARNs.
    pub account: String,
}

impl Default for Config {
    /// Short timings, so that local mode feels immediate: a one-second job completes in under
    /// two seconds after it is created.
    fn default() -> Self {
        Self {
            provisioning_ms: 300,
            download_ms: 100,
            default_training_ms: 10_000,
            upload_ms: 100,
            stop_grace_ms: 500,
            account_quotas: BTreeMap::new(),
            failure_rate: 0.0,
            capacity_error_rate: 0.0,
            duplicate_event_rate: 0.0,
            max_event_delay_ms: 0,
            seed: 0,
            region: "us-east-1".into(),
            account: "000000000000".into(),
        }
    }
}

impl Config {
    /// SageMaker-like timings: minutes to provision, 120 s stop grace.
    pub fn realistic() -> Self {
        Self {
            provisioning_ms: 240_000,
            download_ms: 60_000,
            default_training_ms: 3_600_000,
            upload_ms: 30_000,
            stop_grace_ms: 120_000,
            ..Self::default()
        }
    }
}

/// SageMaker's errors, by their wire code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SageMakerError {
    /// The request is invalid.
    #[error("{0}")]
    ValidationException(String),
    /// A training job with this name exists.
    #[error("{0}")]
    ResourceInUse(String),
    /// The account quota for an instance type would be exceeded.
    #[error("{0}")]
    ResourceLimitExceeded(String),
    /// No such training job.
    #[error("{0}")]
    ResourceNotFound(String),
}

impl SageMakerError {
    /// The error code on the wire (`__type`).
    pub fn code(&self) -> &'static str {
        match self {
            Self::ValidationException(_) => "ValidationException",
            Self::ResourceInUse(_) => "ResourceInUse",
            Self::ResourceLimitExceeded(_) => "ResourceLimitExceeded",
            Self::ResourceNotFound(_) => "ResourceNotFound",
        }
    }
}

/// `TrainingJobStatus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    /// Running through its secondary statuses.
    InProgress,
    /// Finished successfully.
    Completed,
    /// Failed; `FailureReason` says why.
    Failed,
    /// Being stopped.
    Stopping,
    /// Stopped (by request or by `MaxRuntimeInSeconds`).
    Stopped,
}

impl Status {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InProgress => "InProgress",
            Self::Completed => "Completed",
            Self::Failed => "Failed",
            Self::Stopping => "Stopping",
            Self::Stopped => "Stopped",
        }
    }

    /// Completed, Failed or Stopped.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Stopped)
    }
}

/// `SecondaryStatus` values the emulator uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Secondary {
    /// Provisioning.
    Starting,
    /// Downloading data and image.
    Downloading,
    /// Training.
    Training,
    /// Uploading artefacts.
    Uploading,
    /// Done.
    Completed,
    /// Failed.
    Failed,
    /// Being stopped.
    Stopping,
    /// Stopped on request.
    Stopped,
    /// Stopped by `MaxRuntimeInSeconds`.
    MaxRuntimeExceeded,
}

impl Secondary {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Starting => "Starting",
            Self::Downloading => "Downloading",
            Self::Training => "Training",
            Self::Uploading => "Uploading",
            Self::Completed => "Completed",
            Self::Failed => "Failed",
            Self::Stopping => "Stopping",
            Self::Stopped => "Stopped",
            Self::MaxRuntimeExceeded => "MaxRuntimeExceeded",
        }
    }
}

/// The longest `emulator_duration_s` accepted: about 31 years, far beyond any real job, and
/// small enough that "now" plus the duration in milliseconds cannot overflow.
pub const MAX_DURATION_S: f64 = 1e9;

/// The failure reason SageMaker gives when it cannot provision instances.
pub const CAPACITY_ERROR: &str = "CapacityError: Unable to provision requested ML compute capacity. Please retry using a different ML instance type.";

#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Complete,
    Fail(String),
    Capacity,
}

#[derive(Debug, Clone, PartialEq)]
struct Transition {
    status: Secondary,
    start_ms: i64,
    end_ms: Option<i64>,
    message: &'static str,
}

#[derive(Debug, Clone, PartialEq)]
struct Job {
    name: String,
    arn: String,
    /// As created (shared with the job's events, which are snapshots of the job).
    request: Arc<Map<String, Value>>,
    instances: BTreeMap<String, u32>,
    status: Status,
    secondary: Secondary,
    failure_reason: Option<String>,
    created_ms: i64,
    training_start_ms: Option<i64>,
    end_ms: Option<i64>,
    modified_ms: i64,
    transitions: Vec<Transition>,
    /// When the current phase ends, if it ends by itself.
    next_at_ms: Option<i64>,
    training_ms: i64,
    max_runtime_ms: Option<i64>,
    outcome: Outcome,
    /// Its checkpoint writer, when the request has a `CheckpointConfig.S3Uri`.
    checkpoints: Option<Writer>,
}

/// A training job's checkpoint writer (see [`Emulator::latest_checkpoint`]): hyperparameters
/// `emulator_checkpoint_interval_s` (how often it saves while training; absent: never) and
/// `emulator_checkpoint_on_stop` (`true`: it saves when told to stop).
#[derive(Debug, Clone, PartialEq)]
struct Writer {
    uri: String,
    interval_ms: Option<i64>,
    on_stop: bool,
    /// Training progress restored from the URI's checkpoint when the job was created.
    resumed_ms: i64,
    /// Progress in the newest checkpoint this job wrote, once it stopped training.
    saved_ms: Option<i64>,
}

/// What a training job's checkpoints kept: milliseconds of training.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointProgress {
    /// Restored from its URI when it was created.
    pub resumed_ms: i64,
    /// In its newest checkpoint, once it stopped training (its `resumed_ms` if it wrote none).
    pub saved_ms: Option<i64>,
}

impl CheckpointProgress {
    /// The training its own checkpoints kept for the next attempt.
    pub fn kept_ms(&self) -> i64 {
        self.saved_ms.unwrap_or(self.resumed_ms) - self.resumed_ms
    }
}

/// The newest checkpoint under a URI: training progress it holds, when it landed, and when the
/// one before it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checkpoint {
    /// Training progress saved, milliseconds of training.
    pub progress_ms: i64,
    /// When it landed (epoch ms).
    pub at_ms: i64,
    /// When the checkpoint before it landed, if there was one.
    pub previous_at_ms: Option<i64>,
}

/// A "SageMaker Training Job State Change" event: the job as it was at the change. Its `detail`
/// (the job's `DescribeTrainingJob` document) is built when asked for: a consumer that needs only
/// the state reads it from the accessors.
#[derive(Debug, Clone, PartialEq)]
pub struct StateChange {
    /// When the change happened.
    pub time_ms: i64,
    /// When it is delivered (later than `time_ms` when delayed).
    pub deliver_at_ms: i64,
    /// The emulator's seed and the event's number, which make its id.
    seed: u32,
    seq: u64,
    job: Box<Job>,
}

impl StateChange {
    /// Unique per emitted event (duplicates share the change but not the id). Written only
    /// when asked for: a replay reads none.
    pub fn id(&self) -> String {
        format!("{:08x}-emulated-{:012}", self.seed, self.seq)
    }

    /// The event's `detail`: shaped like `DescribeTrainingJob`, times in epoch milliseconds.
    pub fn detail(&self) -> Value {
        describe(&self.job, TimeFormat::EpochMillis)
    }

    /// `TrainingJobName`.
    pub fn training_job_name(&self) -> &str {
        &self.job.name
    }

    /// `TrainingJobArn`.
    pub fn training_job_arn(&self) -> &str {
        &self.job.arn
    }

    /// `TrainingJobStatus`.
    pub fn status(&self) -> Status {
        self.job.status
    }

    /// `SecondaryStatus`.
    pub fn secondary_status(&self) -> Secondary {
        self.job.secondary
    }

    /// `FailureReason`, when failed.
    pub fn failure_reason(&self) -> Option<&str> {
        self.job.failure_reason.as_deref()
    }

    /// The state the change shows, as a `DescribeTrainingJob` of the job at that moment would
    /// give it.
    pub fn state(&self) -> TrainingJobState {
        state_of(&self.job)
    }

    /// The full EventBridge envelope.
    pub fn to_eventbridge(&self, region: &str, account: &str) -> Value {
        json!({
            "version": "0",
            "id": self.id(),
            "detail-type": "SageMaker Training Job State Change",
            "source": "aws.sagemaker",
            "account": account,
            "time": self.time_ms,
            "region": region,
            "resources": [self.job.arn],
            "detail": self.detail(),
        })
    }
}

/// How times are written: the API speaks epoch seconds, events epoch milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeFormat {
    /// Epoch seconds (awsJson1_1 timestamps).
    EpochSeconds,
    /// Epoch milliseconds.
    EpochMillis,
}

/// The emulator.
#[derive(Debug, Clone)]
pub struct Emulator {
    config: Config,
    /// Keyed by lower-cased name: SageMaker names are unique regardless of case. Hashed: a
    /// replay holds every job of its trace, and an ordered map compared long names with a common
    /// prefix at each lookup.
    jobs: ByName<Job>,
    /// (`next_at_ms`, key) of every job whose phase ends by itself: advancing time touches only
    /// the jobs with something due, so a model holding a whole trace's jobs stays fast.
    deadlines: BTreeSet<(i64, String)>,
    /// Undelivered events, in delivery order.
    events: Vec<StateChange>,
    event_seq: u64,
    rng: SplitMix64,
    /// The checkpoint bucket: the newest checkpoint a job that stopped training left under each
    /// URI. A job training now writes on top of it ([`Emulator::latest_checkpoint`]).
    bucket: ByName<Checkpoint>,
    /// The job (key) writing each URI, while it is in progress.
    writers: ByName<String>,
}

/// A map by name, hashed with a fixed seed so that a run never depends on the process.
#[allow(clippy::disallowed_types)] // Where one is iterated, the order does not show: a search for
// a unique ARN, a sum, a minimum, a list sorted after, a collection into an ordered map.
type ByName<V> = std::collections::HashMap<String, V, FixedState>;

fn validation(message: impl Into<String>) -> SageMakerError {
    SageMakerError::ValidationException(message.into())
}

impl Emulator {
    /// An emulator with no jobs.
    pub fn new(config: Config) -> Self {
        let rng = SplitMix64::new(config.seed ^ 0x5EED);
        Self {
            config,
            jobs: ByName::default(),
            deadlines: BTreeSet::new(),
            events: Vec::new(),
            event_seq: 0,
            rng,
            bucket: ByName::default(),
            writers: ByName::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    fn arn(&self, name: &str) -> String {
        // SageMaker writes training-job ARNs in lower case.
        format!(
            "arn:aws:sagemaker:{}:{}:training-job/{}",
            self.config.region,
            self.config.account,
            name.to_lowercase()
        )
    }

    /// Refuses `instances` when they would take an instance type past its account quota.
    fn within_quotas(&self, instances: &BTreeMap<String, u32>) -> Result<(), SageMakerError> {
        for (ty, wanted) in instances {
            if let Some(quota) = self.config.account_quotas.get(ty) {
                let used: u32 = self
                    .jobs
                    .values()
                    .filter(|j| matches!(j.status, Status::InProgress | Status::Stopping))
                    .filter_map(|j| j.instances.get(ty))
                    .sum();
                if used + wanted > *quota {
                    return Err(SageMakerError::ResourceLimitExceeded(format!(
                        "The account-level service limit '{ty} for training job usage' is {quota} Instances, with current utilization of {used} Instances and a request delta of {wanted} Instances. Please contact AWS support to request an increase for this limit."
                    )));
                }
            }
        }
        Ok(())
    }

    /// `ResourceConfig.InstancePreferences`: SageMaker launches the first preferred type it has
    /// capacity for (here: within its account quota), and refuses as the last one did when none.
    fn first_preference_within_quotas(
        &self,
        preferences: &[(String, u32)],
    ) -> Result<BTreeMap<String, u32>, SageMakerError> {
        let mut refusal = None;
        for (ty, count) in preferences {
            let instances = BTreeMap::from([(ty.clone(), *count)]);
            match self.within_quotas(&instances) {
                Ok(()) => return Ok(instances),
                Err(e) => refusal = Some(e),
            }
        }
        Err(refusal.unwrap_or_else(|| validation("ResourceConfig.InstancePreferences is empty")))
    }

    /// `CreateTrainingJob`: returns the `TrainingJobArn`. The job keeps `request` for
    /// `DescribeTrainingJob`.
    pub fn create_training_job(
        &mut self,
        request: Value,
        now_ms: i64,
    ) -> Result<String, SageMakerError> {
        let not_object = || validation("The request must be a JSON object");
        if !request.is_object() {
            return Err(not_object());
        }
        let parsed = training_request_of(&request)
            .map_err(|e| validation(e.to_string().replace("serviceRequestPayload", "request")))?;
        let name = parsed.training_job_name.clone();
        let key = name.to_lowercase();
        if self.jobs.contains_key(&key) {
            return Err(SageMakerError::ResourceInUse(format!(
                "Training job names must be unique within an AWS account and region, and a training job with this name already exists ({})",
                self.arn(&name)
            )));
        }
        let instances = if parsed.preferences.is_empty() {
            self.within_quotas(&parsed.instances)?;
            parsed.instances
        } else {
            self.first_preference_within_quotas(&parsed.preferences)?
        };
        let hyper = request.get("HyperParameters").and_then(Value::as_object);
        let hyper_str = |k: &str| hyper.and_then(|h| h.get(k)).and_then(Value::as_str);
        let training_ms = match hyper_str("emulator_duration_s") {
            None => self.config.default_training_ms,
            Some(s) => match s.parse::<f64>() {
                // Bounded so that every phase end stays far from i64 overflow.
                Ok(secs) if secs.is_finite() && (0.0..=MAX_DURATION_S).contains(&secs) => {
                    (secs * 1000.0) as i64
                }
                _ => {
                    return Err(validation(format!(
                        "HyperParameters.emulator_duration_s must be a number of seconds, got {s:?}"
                    )));
                }
            },
        };
        let checkpoints = match request
            .get("CheckpointConfig")
            .and_then(|c| c.get("S3Uri"))
            .and_then(Value::as_str)
        {
            None => None,
            Some(uri) => {
                let interval_ms = match hyper_str("emulator_checkpoint_interval_s") {
                    None => None,
                    Some(s) => match s.parse::<f64>() {
                        Ok(secs) if secs.is_finite() && secs > 0.0 && secs <= MAX_DURATION_S => {
                            Some(((secs * 1000.0) as i64).max(1))
                        }
                        _ => {
                            return Err(validation(format!(
                                "HyperParameters.emulator_checkpoint_interval_s must be a positive number of seconds, got {s:?}"
                            )));
                        }
                    },
                };
                let on_stop = match hyper_str("emulator_checkpoint_on_stop") {
                    None | Some("false") => false,
                    Some("true") => true,
                    Some(other) => {
                        return Err(validation(format!(
                            "HyperParameters.emulator_checkpoint_on_stop must be true or false, got {other:?}"
                        )));
                    }
                };
                Some(Writer {
                    uri: uri.to_owned(),
                    interval_ms,
                    on_stop,
                    resumed_ms: self.bucket.get(uri).map_or(0, |c| c.progress_ms),
                    saved_ms: None,
                })
            }
        };
        // A job resuming from a checkpoint trains only what is left.
        let training_ms = training_ms
            .saturating_sub(checkpoints.as_ref().map_or(0, |w| w.resumed_ms))
            .max(0);
        let outcome = match hyper_str("emulator_outcome") {
            None => {
                let mut job_rng = SplitMix64::new(self.config.seed ^ Fnv1a::of(key.as_bytes()));
                let draw = job_rng.unit();
                if draw < self.config.capacity_error_rate {
                    Outcome::Capacity
                } else if draw < self.config.capacity_error_rate + self.config.failure_rate {
                    Outcome::Fail("AlgorithmError: emulated random failure".into())
                } else {
                    Outcome::Complete
                }
            }
            Some("Completed") => Outcome::Complete,
            Some("CapacityError") => Outcome::Capacity,
            Some(other) => match other.strip_prefix("Failed:") {
                Some(reason) if !reason.trim().is_empty() => {
                    Outcome::Fail(reason.trim().to_owned())
                }
                _ => {
                    return Err(validation(format!(
                        "HyperParameters.emulator_outcome must be Completed, CapacityError or Failed:<FailureReason>, got {other:?}"
                    )));
                }
            },
        };
        let Value::Object(request) = request else {
            return Err(not_object());
        };
        let arn = self.arn(&name);
        let mut job = Job {
            name,
            arn: arn.clone(),
            request: Arc::new(request),
            instances,
            status: Status::InProgress,
            secondary: Secondary::Starting,
            failure_reason: None,
            created_ms: now_ms,
            training_start_ms: None,
            end_ms: None,
            modified_ms: now_ms,
            transitions: Vec::new(),
            next_at_ms: Some(now_ms.saturating_add(self.config.provisioning_ms)),
            training_ms,
            max_runtime_ms: parsed
                .max_runtime_s
                .map(|s| i64::try_from(s).unwrap_or(i64::MAX).saturating_mul(1000)),
            outcome,
            checkpoints,
        };
        if let Some(writer) = &job.checkpoints {
            self.writers.insert(writer.uri.clone(), key.clone());
        }
        job.transitions.push(Transition {
            status: Secondary::Starting,
            start_ms: now_ms,
            end_ms: None,
            message: "Preparing the instances for training",
        });
        self.emit(job.clone(), now_ms);
        if let Some(at) = job.next_at_ms {
            self.deadlines.insert((at, key.clone()));
        }
        self.jobs.insert(key, job);
        Ok(arn)
    }

    /// `DescribeTrainingJob`.
    pub fn describe_training_job(
        &self,
        name: &str,
        format: TimeFormat,
    ) -> Result<Value, SageMakerError> {
        self.job(name).map(|job| describe(job, format))
    }

    /// The state `DescribeTrainingJob` would show, without building its document.
    pub fn training_job_state(&self, name: &str) -> Result<TrainingJobState, SageMakerError> {
        self.job(name).map(state_of)
    }

    /// `StopTrainingJob`.
    pub fn stop_training_job(&mut self, name: &str, now_ms: i64) -> Result<(), SageMakerError> {
        self.advance(now_ms);
        let grace = self.config.stop_grace_ms;
        let key = name.to_lowercase();
        let job = self.jobs.get_mut(&key).ok_or_else(|| {
            SageMakerError::ResourceNotFound(format!(
                "Requested resource not found: training job {name}"
            ))
        })?;
        match job.status {
            Status::Stopping => Ok(()),
            Status::InProgress => {
                if let Some(saved) = stop_writing(job, now_ms, true) {
                    self.save(&key, saved);
                }
                let job = self.jobs.get_mut(&key).ok_or_else(|| {
                    SageMakerError::ResourceNotFound(format!(
                        "Requested resource not found: training job {name}"
                    ))
                })?;
                set_phase(
                    job,
                    Status::Stopping,
                    Secondary::Stopping,
                    now_ms,
                    "Stopping the training job",
                );
                let before = job.next_at_ms.replace(now_ms.saturating_add(grace));
                let snapshot = job.clone();
                self.reindex(&key, before, snapshot.next_at_ms);
                self.emit(snapshot, now_ms);
                Ok(())
            }
            done => Err(validation(format!(
                "The training job {name} is {} and cannot be stopped",
                done.as_str()
            ))),
        }
    }

    /// `ListTrainingJobs`: newest first, optionally filtered by name substring and status, at most
    /// `max_results`.
    pub fn list_training_jobs(
        &self,
        name_contains: Option<&str>,
        status: Option<&str>,
        max_results: usize,
    ) -> Vec<Value> {
        let mut jobs: Vec<&Job> = self
            .jobs
            .values()
            .filter(|j| {
                name_contains.is_none_or(|n| j.name.to_lowercase().contains(&n.to_lowercase()))
            })
            .filter(|j| status.is_none_or(|s| j.status.as_str() == s))
            .collect();
        jobs.sort_by(|a, b| (b.created_ms, &b.name).cmp(&(a.created_ms, &a.name)));
        jobs.into_iter()
            .take(max_results)
            .map(|j| {
                let mut v = json!({
                    "TrainingJobName": j.name,
                    "TrainingJobArn": j.arn,
                    "CreationTime": seconds(j.created_ms),
                    "LastModifiedTime": seconds(j.modified_ms),
                    "TrainingJobStatus": j.status.as_str(),
                    "SecondaryStatus": j.secondary.as_str(),
                });
                if let Some(end) = j.end_ms {
                    v["TrainingEndTime"] = seconds(end);
                }
                v
            })
            .collect()
    }

    /// `ListTags` for a training-job ARN: the `Tags` of its create request.
    pub fn list_tags(&self, arn: &str) -> Result<Value, SageMakerError> {
        let job = self.jobs.values().find(|j| j.arn == arn).ok_or_else(|| {
            SageMakerError::ResourceNotFound(format!("Requested resource not found: {arn}"))
        })?;
        Ok(job
            .request
            .get("Tags")
            .cloned()
            .unwrap_or_else(|| json!([])))
    }

    /// Forgets a training job as if it had never existed, as a SageMaker side that lost its
    /// state would: describing it finds nothing, and its undelivered events are dropped.
    /// Returns whether there was one.
    pub fn forget_training_job(&mut self, name: &str) -> bool {
        let key = name.to_lowercase();
        self.events
            .retain(|e| e.training_job_name().to_lowercase() != key);
        let Some(job) = self.jobs.remove(&key) else {
            return false;
        };
        self.reindex(&key, job.next_at_ms, None);
        true
    }

    /// Moves every job through the phases that end by `now_ms`, emitting events: phase ends in
    /// time order (ties by name), so events come out in the order they happened.
    pub fn advance(&mut self, now_ms: i64) {
        while let Some((at, key)) = self.deadlines.pop_first() {
            if at > now_ms {
                self.deadlines.insert((at, key));
                break;
            }
            let Some(job) = self.jobs.get_mut(&key) else {
                continue;
            };
            let saved = (job.secondary == Secondary::Training)
                .then(|| stop_writing(job, at, false))
                .flatten();
            step(job, at, &self.config);
            let snapshot = job.clone();
            if let Some(saved) = saved {
                self.save(&key, saved);
            }
            if let Some(next) = snapshot.next_at_ms {
                self.deadlines.insert((next, key));
            }
            self.emit(snapshot, at);
        }
    }

    /// The newest checkpoint under `uri` at `now_ms`: one the job writing it now (while it
    /// trains, it saves every `emulator_checkpoint_interval_s` of training), else the one left
    /// by the last job that wrote it. Saving is instant in the model: a checkpoint is complete
    /// when it lands.
    pub fn latest_checkpoint(&self, uri: &str, now_ms: i64) -> Option<Checkpoint> {
        let stored = self.bucket.get(uri).copied();
        let writing = self
            .writers
            .get(uri)
            .and_then(|key| self.jobs.get(key))
            .and_then(|job| periodic(job, now_ms));
        match (writing, stored) {
            (Some((progress_ms, at_ms, previous_at_ms)), stored) => Some(Checkpoint {
                progress_ms,
                at_ms,
                previous_at_ms: previous_at_ms.or(stored.map(|c| c.at_ms)),
            }),
            (None, stored) => stored,
        }
    }

    /// The newest checkpoint under every URI written so far, at `now_ms`, by URI: what a copy of
    /// the bucket to S3 has to show ([`Emulator::latest_checkpoint`] of each).
    pub fn latest_checkpoints(&self, now_ms: i64) -> BTreeMap<&str, Checkpoint> {
        self.bucket
            .keys()
            .chain(self.writers.keys())
            .filter_map(|uri| Some((uri.as_str(), self.latest_checkpoint(uri, now_ms)?)))
            .collect()
    }

    /// When the next periodic checkpoint after `now_ms` lands, of all jobs training now; `None`
    /// when no job will save another by itself (saves on stop come with a stop request).
    pub fn next_checkpoint_at(&self, now_ms: i64) -> Option<i64> {
        self.writers
            .values()
            .filter_map(|key| self.jobs.get(key))
            .filter_map(|job| {
                let (started, interval, _) = saving(job)?;
                let trained = now_ms.saturating_sub(started).max(0);
                let next = (trained / interval + 1).saturating_mul(interval);
                (next <= job.training_ms).then(|| started.saturating_add(next))
            })
            .min()
    }

    /// A training job's checkpoint progress; `None` for a job without a `CheckpointConfig` or
    /// not known.
    pub fn checkpoint_progress(&self, name: &str) -> Option<CheckpointProgress> {
        let writer = self.jobs.get(&name.to_lowercase())?.checkpoints.as_ref()?;
        Some(CheckpointProgress {
            resumed_ms: writer.resumed_ms,
            saved_ms: writer.saved_ms,
        })
    }

    /// The next time something happens by itself (a phase ends or an event becomes due).
    pub fn next_deadline(&self) -> Option<i64> {
        let phase = self.deadlines.first().map(|(at, _)| *at);
        let event = self.events.first().map(|e| e.deliver_at_ms);
        phase.into_iter().chain(event).min()
    }

    /// Events due by `now_ms`, in delivery order (ties by emission order).
    pub fn take_events(&mut self, now_ms: i64) -> Vec<StateChange> {
        let due = self.events.partition_point(|e| e.deliver_at_ms <= now_ms);
        let later = self.events.split_off(due);
        std::mem::replace(&mut self.events, later)
    }

    /// Moves `key`'s entry in the deadline index from `before` to `after`.
    fn reindex(&mut self, key: &str, before: Option<i64>, after: Option<i64>) {
        if before == after {
            return;
        }
        if let Some(at) = before {
            self.deadlines.remove(&(at, key.to_owned()));
        }
        if let Some(at) = after {
            self.deadlines.insert((at, key.to_owned()));
        }
    }

    fn job(&self, name: &str) -> Result<&Job, SageMakerError> {
        self.jobs.get(&name.to_lowercase()).ok_or_else(|| {
            SageMakerError::ResourceNotFound(format!(
                "Requested resource not found: training job {name}"
            ))
        })
    }

    /// Queues a state change showing `job` (a snapshot of it now) for delivery, duplicated and
    /// delayed as configured.
    fn emit(&mut self, job: Job, at_ms: i64) {
        if self.rng.unit() < self.config.duplicate_event_rate {
            self.queue_event(job.clone(), at_ms);
        }
        self.queue_event(job, at_ms);
    }

    /// Queues one copy of a state change, delayed as configured, in delivery order.
    fn queue_event(&mut self, job: Job, at_ms: i64) {
        let delay = if self.config.max_event_delay_ms > 0 {
            (self.rng.next_u64() % (self.config.max_event_delay_ms as u64 + 1)) as i64
        } else {
            0
        };
        self.event_seq += 1;
        let change = StateChange {
            time_ms: at_ms,
            deliver_at_ms: at_ms + delay,
            seed: self.config.seed as u32,
            seq: self.event_seq,
            job: Box::new(job),
        };
        let pos = self
            .events
            .partition_point(|e| e.deliver_at_ms <= change.deliver_at_ms);
        self.events.insert(pos, change);
    }
}

/// The newest periodic checkpoint of a job training at `now_ms`, if it wrote one: (progress,
/// when it landed, when the one before it landed).
fn periodic(job: &Job, now_ms: i64) -> Option<(i64, i64, Option<i64>)> {
    let (started, interval, resumed_ms) = saving(job)?;
    let trained = now_ms.saturating_sub(started).clamp(0, job.training_ms);
    let k = trained / interval;
    (k >= 1).then(|| {
        let at = started + k * interval;
        let previous = (k >= 2).then(|| at - interval);
        (resumed_ms + k * interval, at, previous)
    })
}

/// A job saving checkpoints on a cadence now (training, and not yet stopped writing): when it
/// started training, its interval and the progress it resumed from.
fn saving(job: &Job) -> Option<(i64, i64, i64)> {
    let writer = job.checkpoints.as_ref()?;
    let interval = writer.interval_ms?;
    if job.secondary != Secondary::Training || writer.saved_ms.is_some() {
        return None;
    }
    Some((job.training_start_ms?, interval, writer.resumed_ms))
}

/// Ends `job`'s writing at `at_ms` (it stops training): its URI and the checkpoint it leaves,
/// if it wrote one — its newest periodic one or, when it saves on stop and `stopping`, one
/// holding all its progress. `None` when it has no writer or already stopped writing.
fn stop_writing(job: &mut Job, at_ms: i64, stopping: bool) -> Option<(String, Option<Checkpoint>)> {
    let training = job.secondary == Secondary::Training;
    let last = periodic(job, at_ms);
    let started = job.training_start_ms;
    let trained = |started: i64| at_ms.saturating_sub(started).clamp(0, job.training_ms);
    let writer = job.checkpoints.as_mut()?;
    if writer.saved_ms.is_some() {
        return None;
    }
    let checkpoint = match started.filter(|_| training && stopping && writer.on_stop) {
        Some(started) => Some(Checkpoint {
            progress_ms: writer.resumed_ms + trained(started),
            at_ms,
            previous_at_ms: last.map(|(_, at, _)| at),
        }),
        None => last.map(|(progress_ms, at_ms, previous_at_ms)| Checkpoint {
            progress_ms,
            at_ms,
            previous_at_ms,
        }),
    };
    writer.saved_ms = Some(checkpoint.map_or(writer.resumed_ms, |c| c.progress_ms));
    Some((writer.uri.clone(), checkpoint))
}

impl Emulator {
    /// Stores what a job that stopped writing (`key`) left under `uri`, and forgets it as the
    /// URI's writer.
    fn save(&mut self, key: &str, (uri, checkpoint): (String, Option<Checkpoint>)) {
        if self.writers.get(&uri).is_some_and(|k| k == key) {
            self.writers.remove(&uri);
        }
        if let Some(checkpoint) = checkpoint {
            let previous = self.bucket.get(&uri).map(|c| c.at_ms);
            let previous_at_ms = checkpoint.previous_at_ms.or(previous);
            self.bucket.insert(
                uri,
                Checkpoint {
                    previous_at_ms,
                    ..checkpoint
                },
            );
        }
    }
}

fn set_phase(
    job: &mut Job,
    status: Status,
    secondary: Secondary,
    at_ms: i64,
    message: &'static str,
) {
    if let Some(last) = job.transitions.last_mut() {
        last.end_ms = Some(at_ms);
    }
    if status.is_terminal() {
        job.end_ms = Some(at_ms);
        job.next_at_ms = None;
    }
    job.status = status;
    job.secondary = secondary;
    job.modified_ms = at_ms;
    let end_ms = status.is_terminal().then_some(at_ms);
    job.transitions.push(Transition {
        status: secondary,
        start_ms: at_ms,
        end_ms,
        message,
    });
}

/// The state a `DescribeTrainingJob` of `job` shows.
fn state_of(job: &Job) -> TrainingJobState {
    TrainingJobState {
        name: job.name.clone(),
        arn: job.arn.clone(),
        status: match job.status {
            Status::InProgress => TrainingStatus::InProgress,
            Status::Completed => TrainingStatus::Completed,
            Status::Failed => TrainingStatus::Failed,
            Status::Stopping => TrainingStatus::Stopping,
            Status::Stopped => TrainingStatus::Stopped,
        },
        secondary: job.secondary.as_str().to_owned(),
        failure_reason: job.failure_reason.clone(),
        // As `DescribeTrainingJob` shows it: the type launched, of a request with preferences.
        selected_instance_type: job
            .request
            .get("ResourceConfig")
            .filter(|r| r.get("InstancePreferences").is_some())
            .and_then(|_| job.instances.keys().next().cloned()),
    }
}

/// Ends the current phase of `job` at `at`.
fn step(job: &mut Job, at: i64, config: &Config) {
    match job.secondary {
        Secondary::Starting => {
            if job.outcome == Outcome::Capacity {
                job.failure_reason = Some(CAPACITY_ERROR.into());
                set_phase(
                    job,
                    Status::Failed,
                    Secondary::Failed,
                    at,
                    "Training job failed",
                );
            } else {
                set_phase(
                    job,
                    Status::InProgress,
                    Secondary::Downloading,
                    at,
                    "Downloading input data",
                );
                job.next_at_ms = Some(at.saturating_add(config.download_ms));
            }
        }
        Secondary::Downloading => {
            set_phase(
                job,
                Status::InProgress,
                Secondary::Training,
                at,
                "Training image download completed. Training in progress.",
            );
            job.training_start_ms = Some(at);
            let runs_for = job
                .max_runtime_ms
                .map_or(job.training_ms, |max| job.training_ms.min(max));
            job.next_at_ms = Some(at.saturating_add(runs_for));
        }
        Secondary::Training => {
            let started = job.training_start_ms.unwrap_or(at);
            if job
                .max_runtime_ms
                .is_some_and(|max| job.training_ms > max && at - started >= max)
            {
                set_phase(
                    job,
                    Status::Stopped,
                    Secondary::MaxRuntimeExceeded,
                    at,
                    "Job stopped: MaxRuntimeInSeconds exceeded",
                );
            } else if let Outcome::Fail(reason) = &job.outcome {
                job.failure_reason = Some(reason.clone());
                set_phase(
                    job,
                    Status::Failed,
                    Secondary::Failed,
                    at,
                    "Training job failed",
                );
            } else {
                set_phase(
                    job,
                    Status::InProgress,
                    Secondary::Uploading,
                    at,
                    "Uploading generated training model",
                );
                job.next_at_ms = Some(at.saturating_add(config.upload_ms));
            }
        }
        Secondary::Uploading => {
            set_phase(
                job,
                Status::Completed,
                Secondary::Completed,
                at,
                "Training job completed",
            );
        }
        Secondary::Stopping => {
            set_phase(
                job,
                Status::Stopped,
                Secondary::Stopped,
                at,
                "Training job stopped",
            );
        }
        Secondary::Completed
        | Secondary::Failed
        | Secondary::Stopped
        | Secondary::MaxRuntimeExceeded => {
            job.next_at_ms = None;
        }
    }
}

fn seconds(ms: i64) -> Value {
    json!(ms as f64 / 1000.0)
}

fn time(ms: i64, format: TimeFormat) -> Value {
    match format {
        TimeFormat::EpochSeconds => seconds(ms),
        TimeFormat::EpochMillis => json!(ms),
    }
}

/// The `DescribeTrainingJob` response: the request's members plus status and timing.
fn describe(job: &Job, format: TimeFormat) -> Value {
    let mut out = Map::clone(&job.request);
    out.remove("Tags");
    let output_path = job
        .request
        .get("OutputDataConfig")
        .and_then(|o| o.get("S3OutputPath"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .trim_end_matches('/')
        .to_owned();
    let has_stopping_condition = out.contains_key("StoppingCondition");
    // Members SageMaker always returns, with its defaults, even when the request left them out
    // (clients such as the SageMaker SDK's `Estimator.attach` read them unconditionally).
    if let Some(Value::Object(output)) = out.get_mut("OutputDataConfig") {
        output.entry("KmsKeyId").or_insert_with(|| json!(""));
    }
    for flag in [
        "EnableNetworkIsolation",
        "EnableInterContainerTrafficEncryption",
        "EnableManagedSpotTraining",
    ] {
        out.entry(flag).or_insert(json!(false));
    }
    let prefers = |r: &Value| r.get("InstancePreferences").is_some();
    if let (true, Some(Value::Object(resources)), Some((ty, count))) = (
        job.request.get("ResourceConfig").is_some_and(prefers),
        out.get_mut("ResourceConfig"),
        job.instances.iter().next(),
    ) {
        resources.insert("SelectedInstanceType".into(), json!(ty));
        resources.insert("SelectedInstanceCount".into(), json!(count));
    }
    let mut put = |k: &str, v: Value| {
        out.insert(k.to_owned(), v);
    };
    put("TrainingJobArn", json!(job.arn));
    put("TrainingJobStatus", json!(job.status.as_str()));
    put("SecondaryStatus", json!(job.secondary.as_str()));
    put("CreationTime", time(job.created_ms, format));
    put("LastModifiedTime", time(job.modified_ms, format));
    put(
        "ModelArtifacts",
        json!({ "S3ModelArtifacts": format!("{output_path}/{}/output/model.tar.gz", job.name) }),
    );
    if !has_stopping_condition {
        put(
            "StoppingCondition",
            json!({ "MaxRuntimeInSeconds": 86_400 }),
        );
    }
    if let Some(reason) = &job.failure_reason {
        put("FailureReason", json!(reason));
    }
    if let Some(start) = job.training_start_ms {
        put("TrainingStartTime", time(start, format));
        let end = job.end_ms.unwrap_or(job.modified_ms);
        let secs = ((end - start).max(0) / 1000).max(1);
        put("TrainingTimeInSeconds", json!(secs));
        let instances: i64 = job.instances.values().map(|n| i64::from(*n)).sum();
        put("BillableTimeInSeconds", json!(secs * instances));
    }
    if let Some(end) = job.end_ms {
        put("TrainingEndTime", time(end, format));
    }
    let transitions: Vec<Value> = job
        .transitions
        .iter()
        .map(|t| {
            let mut v = json!({ "Status": t.status.as_str(), "StartTime": time(t.start_ms, format), "StatusMessage": t.message });
            if let Some(end) = t.end_ms {
                v["EndTime"] = time(end, format);
            }
            v
        })
        .collect();
    put("SecondaryStatusTransitions", Value::Array(transitions));
    Value::Object(out)
}
