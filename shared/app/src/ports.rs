//! Ports: what the use-cases need from the outside world, as narrow traits.
//!
//! The store is asynchronous because its production adapter (DynamoDB) is; the SQLite and memory
//! adapters complete immediately. Methods return `impl Future + Send` so use-cases can run in any
//! Tokio task and in Lambda handlers without boxing.

use std::cmp::Reverse;
use std::future::Future;

use serde::{Serialize, de::DeserializeOwned};
use trainyard_domain::arn::ResourceKind;
use trainyard_domain::environment::ServiceEnvironment;
use trainyard_domain::job::{JobStatus, ServiceJob};
use trainyard_domain::policy::SchedulingPolicy;
use trainyard_domain::queue::JobQueue;
use trainyard_domain::quota_share::QuotaShare;

/// A stored value and its version, for optimistic concurrency: an update names the version it
/// read and fails with [`StoreError::Conflict`] if another writer got there first.
#[derive(Debug, Clone, PartialEq)]
pub struct Versioned<T> {
    /// The value.
    pub value: T,
    /// Starts at 1 on insert and grows by one on every update.
    pub version: u64,
}

/// Store failures, classified once by the adapter.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A create found the key taken.
    #[error("already exists")]
    AlreadyExists,
    /// An update or delete found a different version (or no record) than it expected.
    #[error("conflicting concurrent update")]
    Conflict,
    /// The backing store failed; retrying may help.
    #[error("store unavailable: {message}")]
    Unavailable {
        /// What failed.
        message: String,
        /// The adapter's error.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// A stored record could not be decoded.
    #[error("corrupt record {key}: {message}")]
    Corrupt {
        /// Which record.
        key: String,
        /// Why.
        message: String,
    },
}

/// A configuration resource kept by the store as an opaque JSON document under (kind, key).
///
/// Configuration is small (Batch allows 50 environments, 50 queues, 20 quota shares per queue),
/// so the store keeps it whole rather than column by column.
pub trait Resource: Serialize + DeserializeOwned + Clone + Send + Sync + 'static {
    /// Which kind of resource.
    const KIND: ResourceKind;
    /// The unique key within the kind (a name; `queue/name` for quota shares).
    fn key(&self) -> String;
}

impl Resource for ServiceEnvironment {
    const KIND: ResourceKind = ResourceKind::ServiceEnvironment;
    fn key(&self) -> String {
        self.service_environment_name.clone()
    }
}

impl Resource for JobQueue {
    const KIND: ResourceKind = ResourceKind::JobQueue;
    fn key(&self) -> String {
        self.job_queue_name.clone()
    }
}

impl Resource for SchedulingPolicy {
    const KIND: ResourceKind = ResourceKind::SchedulingPolicy;
    fn key(&self) -> String {
        self.name.clone()
    }
}

impl Resource for QuotaShare {
    const KIND: ResourceKind = ResourceKind::QuotaShare;
    fn key(&self) -> String {
        quota_share_key(&self.job_queue, &self.quota_share_name)
    }
}

/// The store key of a quota share: `{queue}/{name}`.
pub fn quota_share_key(queue: &str, name: &str) -> String {
    // Not `format!`: a cycle builds one key per fair share.
    let mut key = String::with_capacity(queue.len() + 1 + name.len());
    key.push_str(queue);
    key.push('/');
    key.push_str(name);
    key
}

/// A `clientToken` remembered with the request it came with, so a retry of the same request
/// returns the same job and a different request reusing the token is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientTokenRecord {
    /// The token.
    pub token: String,
    /// SHA-256 (hex) of the canonical request, without the token.
    pub request_hash: String,
    /// The job the token created.
    pub job_id: String,
    /// When it was recorded (epoch ms); tokens may be forgotten after a day.
    pub created_at: i64,
}

/// Result of inserting a job with a client token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InsertJob {
    /// The job was stored (with its token, if any) atomically.
    Inserted,
    /// The token was already recorded; nothing was written. Carries the earlier record.
    TokenExists(ClientTokenRecord),
}

/// The case-insensitive `JOB_NAME` filter: exact, or a prefix when the value ends with `*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameFilter {
    /// Case-insensitive equality (the value is stored lower-cased).
    Exact(String),
    /// Case-insensitive prefix (lower-cased, without the `*`).
    Prefix(String),
}

/// Where a page of jobs continues: strictly after this (created_at, job_id) in newest-first order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobCursor {
    /// `createdAt` of the last job returned.
    pub created_at: i64,
    /// `jobId` of the last job returned (tie-breaker).
    pub job_id: String,
}

/// A query over jobs. All set fields must match. Results are newest first: `created_at`
/// descending, then `job_id` descending.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JobQuery {
    /// Queue name.
    pub queue: Option<String>,
    /// Status.
    pub status: Option<JobStatus>,
    /// Fair-share share identifier.
    pub share_identifier: Option<String>,
    /// Quota share name.
    pub quota_share_name: Option<String>,
    /// Job name filter.
    pub name: Option<NameFilter>,
    /// Only jobs created strictly before this time (epoch ms).
    pub created_before: Option<i64>,
    /// Only jobs created strictly after this time (epoch ms).
    pub created_after: Option<i64>,
    /// Continue after this position.
    pub after: Option<JobCursor>,
    /// Page size, at least 1.
    pub limit: usize,
}

/// One page of results; `next` is set only when more may follow.
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T> {
    /// The items.
    pub items: Vec<T>,
    /// Where the next page starts.
    pub next: Option<JobCursor>,
}

/// Scheduler state the store keeps beside jobs and configuration: JSON documents under
/// (kind, key), versioned like resources, and written together with jobs by [`Store::commit`].
pub trait Document: Serialize + DeserializeOwned + Clone + Send + Sync + 'static {
    /// The kind's stable name (it is stored: never change one).
    const KIND: &'static str;
    /// The unique key within the kind.
    fn key(&self) -> String;
}

/// Instances a service environment has handed out, per instance type.
///
/// Every dispatch and every release changes it in the same atomic commit as the job, with a
/// version check, so two cycles planning at once can never both hand out the last instance: the
/// second commit fails and its job waits for the next cycle.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvironmentUsage {
    /// The service environment.
    pub environment: String,
    /// Instances in use per instance type (types at zero are removed).
    pub instances: std::collections::BTreeMap<String, u64>,
}

impl EnvironmentUsage {
    /// All instances in use.
    pub fn total(&self) -> u64 {
        self.instances.values().sum()
    }

    /// Takes `instances` (a job being dispatched).
    pub fn add(&mut self, instances: &std::collections::BTreeMap<String, u32>) {
        for (ty, n) in instances {
            *self.instances.entry(ty.clone()).or_insert(0) += u64::from(*n);
        }
    }

    /// Gives back `instances` (an attempt that ended), never below zero.
    pub fn remove(&mut self, instances: &std::collections::BTreeMap<String, u32>) {
        for (ty, n) in instances {
            if let Some(used) = self.instances.get_mut(ty) {
                *used = used.saturating_sub(u64::from(*n));
                if *used == 0 {
                    self.instances.remove(ty);
                }
            }
        }
    }
}

impl Document for EnvironmentUsage {
    const KIND: &'static str = "environment-usage";
    fn key(&self) -> String {
        self.environment.clone()
    }
}

/// The decayed usage of one fair share (see `trainyard_scheduler::fair_share`).
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShareUsageRecord {
    /// Queue name.
    pub queue: String,
    /// Share identifier.
    pub share: String,
    /// Decayed instance-seconds and when they were last brought up to date.
    pub usage: trainyard_scheduler::fair_share::ShareUsage,
}

impl Document for ShareUsageRecord {
    const KIND: &'static str = "share-usage";
    fn key(&self) -> String {
        quota_share_key(&self.queue, &self.share)
    }
}

/// One write of an atomic [`Store::commit`].
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// Replace a job whose stored version is `expected_version`.
    Job {
        /// The new job (boxed: a job is far larger than a document write).
        job: Box<ServiceJob>,
        /// The version read.
        expected_version: u64,
    },
    /// Put a document whose stored version is `expected_version` (0: it must not exist yet).
    Document {
        /// [`Document::KIND`].
        kind: &'static str,
        /// [`Document::key`].
        key: String,
        /// The document.
        doc: DocumentValue,
        /// The version read, or 0 to create.
        expected_version: u64,
    },
}

impl Write {
    /// Replaces `job` if it is still at `expected_version`.
    pub fn job(job: ServiceJob, expected_version: u64) -> Self {
        Self::Job {
            job: Box::new(job),
            expected_version,
        }
    }

    /// Puts `doc` if it is still at `expected_version` (0: create).
    ///
    /// The document is kept as its typed value and encoded by the stores that keep JSON when
    /// they write it (a value that cannot be encoded is refused there, as `Corrupt`); the
    /// memory store keeps the value itself. Never fails today; the `Result` leaves room for
    /// checks at construction.
    pub fn document<D: Document>(doc: &D, expected_version: u64) -> Result<Self, StoreError> {
        Ok(Self::document_value(doc.clone(), expected_version))
    }

    /// [`Write::document`] of a document the caller no longer needs (nothing is copied).
    pub fn document_value<D: Document>(doc: D, expected_version: u64) -> Self {
        Self::Document {
            kind: D::KIND,
            key: doc.key(),
            doc: DocumentValue(std::sync::Arc::new(doc)),
            expected_version,
        }
    }
}

/// The document of a [`Write::Document`]: a typed value, shared, serialized on demand.
///
/// A scheduling cycle writes one document per fair share; keeping the value rather than its JSON
/// spares the memory store (the simulator's) an encode and a decode per write.
#[derive(Clone)]
pub struct DocumentValue(std::sync::Arc<dyn ErasedDocument>);

/// A [`Document`] with its type erased.
trait ErasedDocument: Send + Sync {
    fn to_json(&self) -> Result<serde_json::Value, serde_json::Error>;
    fn shared(self: std::sync::Arc<Self>) -> std::sync::Arc<dyn std::any::Any + Send + Sync>;
}

impl<D: Document> ErasedDocument for D {
    fn to_json(&self) -> Result<serde_json::Value, serde_json::Error> {
        serde_json::to_value(self)
    }

    fn shared(self: std::sync::Arc<Self>) -> std::sync::Arc<dyn std::any::Any + Send + Sync> {
        self
    }
}

impl DocumentValue {
    /// The document as JSON.
    pub fn to_json(&self) -> Result<serde_json::Value, serde_json::Error> {
        self.0.to_json()
    }

    /// The typed value, for a store that keeps values (downcast it to the document's type).
    pub fn shared(&self) -> std::sync::Arc<dyn std::any::Any + Send + Sync> {
        self.0.clone().shared()
    }
}

impl Serialize for DocumentValue {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_json()
            .map_err(serde::ser::Error::custom)?
            .serialize(serializer)
    }
}

impl std::fmt::Debug for DocumentValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.to_json() {
            Ok(json) => write!(f, "{json}"),
            Err(e) => write!(f, "(a document that cannot be encoded: {e})"),
        }
    }
}

/// Two documents are equal when their JSON is.
impl PartialEq for DocumentValue {
    fn eq(&self, other: &Self) -> bool {
        match (self.to_json(), other.to_json()) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        }
    }
}

/// Where a RUNNABLE job stands in its share's line, as a sort key: total (it ends on the job id),
/// smallest first. Priority counts only within a share: `schedulingPriority` descending, then
/// when the job became RUNNABLE, then id. A job without a share (every job of a FIFO queue, and
/// only those: submission checks it) is ranked by time alone, which is FIFO.
pub fn runnable_rank(job: &ServiceJob) -> (Reverse<u32>, i64, &str) {
    let priority = if share_key(job).is_empty() {
        0
    } else {
        job.priority()
    };
    (
        Reverse(priority),
        job.runnable_at.unwrap_or(job.created_at),
        &job.job_id,
    )
}

/// The share a job is counted in for ordering: its fair-share identifier or its quota share
/// (`""` when it has neither).
pub fn share_key(job: &ServiceJob) -> &str {
    job.share_identifier
        .as_deref()
        .or(job.quota_share_name.as_deref())
        .unwrap_or("")
}

/// Durable state. Every method is one atomic step; an acknowledged write is durable.
pub trait Store: Send + Sync + 'static {
    /// Inserts a new job (version 1). With a token, records it in the same atomic step, unless
    /// the token already exists, in which case nothing is written.
    fn insert_job(
        &self,
        job: &ServiceJob,
        token: Option<&ClientTokenRecord>,
    ) -> impl Future<Output = Result<InsertJob, StoreError>> + Send;

    /// Reads a job by id.
    fn get_job(
        &self,
        job_id: &str,
    ) -> impl Future<Output = Result<Option<Versioned<ServiceJob>>, StoreError>> + Send;

    /// Replaces a job if its stored version is `expected_version`; returns the new version.
    fn update_job(
        &self,
        job: &ServiceJob,
        expected_version: u64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Lists jobs matching `query`, newest first, at most `query.limit`. Without a queue, a store
    /// may cover only the job queues that exist (the DynamoDB store reads each queue's index
    /// partition): the jobs of a deleted queue, all terminated when it was deleted, may be left
    /// out.
    fn list_jobs(
        &self,
        query: &JobQuery,
    ) -> impl Future<Output = Result<Page<Versioned<ServiceJob>>, StoreError>> + Send;

    /// Creates a resource (version 1); [`StoreError::AlreadyExists`] if the key is taken.
    fn create_resource<R: Resource>(
        &self,
        resource: &R,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Reads a resource by key.
    fn get_resource<R: Resource>(
        &self,
        key: &str,
    ) -> impl Future<Output = Result<Option<Versioned<R>>, StoreError>> + Send;

    /// All resources of a kind, ordered by key.
    fn list_resources<R: Resource>(
        &self,
    ) -> impl Future<Output = Result<Vec<Versioned<R>>, StoreError>> + Send;

    /// Replaces a resource if its stored version is `expected_version`; returns the new version.
    fn update_resource<R: Resource>(
        &self,
        resource: &R,
        expected_version: u64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Deletes a resource if its stored version is `expected_version`.
    fn delete_resource<R: Resource>(
        &self,
        key: &str,
        expected_version: u64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Reads a document by key.
    fn get_document<D: Document>(
        &self,
        key: &str,
    ) -> impl Future<Output = Result<Option<Versioned<D>>, StoreError>> + Send;

    /// All documents of a kind, ordered by key.
    fn list_documents<D: Document>(
        &self,
    ) -> impl Future<Output = Result<Vec<Versioned<D>>, StoreError>> + Send;

    /// Applies every write or none: [`StoreError::Conflict`] if any expected version differs
    /// (a job or document changed since it was read, or a document to create exists). Each
    /// written job and document gets its version plus one (documents created get 1).
    fn commit(&self, writes: &[Write]) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The first `limit` RUNNABLE jobs of `queue` whose [`share_key`] is `share`, in their
    /// [`runnable_rank`] order: FIFO for a FIFO queue (`share` empty), priority first within a
    /// share of a queue with a policy. Reads an index: the cost grows with `limit`, not the
    /// backlog. One order per share is all a store keeps: the one the scheduler dispatches in.
    fn runnable_jobs(
        &self,
        queue: &str,
        share: &str,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<Versioned<ServiceJob>>, StoreError>> + Send;

    /// The distinct [`share_key`]s of `queue`'s RUNNABLE jobs, ordered.
    fn runnable_shares(
        &self,
        queue: &str,
    ) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send;

    /// Every job holding capacity (SCHEDULED, STARTING or RUNNING), ordered by job id. Bounded
    /// by the capacity of the environments.
    fn dispatched_jobs(
        &self,
    ) -> impl Future<Output = Result<Vec<Versioned<ServiceJob>>, StoreError>> + Send;

    /// What the scheduler needs of every job holding capacity: [`dispatched_jobs`], summarised,
    /// in the same order. Every cycle reads it, so a store that can answer without copying whole
    /// jobs should (the memory store keeps the summaries beside its index); the default
    /// summarises [`dispatched_jobs`].
    ///
    /// [`dispatched_jobs`]: Store::dispatched_jobs
    fn capacity_holders(
        &self,
    ) -> impl Future<Output = Result<Vec<CapacityHolder>, StoreError>> + Send {
        async move {
            let jobs = self.dispatched_jobs().await?;
            Ok(jobs.iter().map(|j| CapacityHolder::of(&j.value)).collect())
        }
    }

    /// What the scheduler needs of the first `limit` RUNNABLE jobs of `queue`'s `share`:
    /// [`runnable_jobs`], summarised, in the same order. Every cycle
    /// reads the heads of every queue and share, so a store that can answer without copying
    /// whole jobs should (the memory store keeps the summaries beside its index); the default
    /// summarises [`runnable_jobs`].
    ///
    /// [`runnable_jobs`]: Store::runnable_jobs
    fn runnable_heads(
        &self,
        queue: &str,
        share: &str,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<RunnableHead>, StoreError>> + Send {
        async move {
            let jobs = self.runnable_jobs(queue, share, limit).await?;
            Ok(jobs
                .iter()
                .map(|j| RunnableHead::of(&j.value, j.version))
                .collect())
        }
    }

    /// Replaces a job's status reason, and nothing else, if its stored version is
    /// `expected_version`; returns the new version. A cycle records why each waiting job waits
    /// this way (hundreds of thousands of times in a simulated trace), so a store that can
    /// change one field in place should; the default reads the job and writes it whole.
    fn set_status_reason(
        &self,
        job_id: &str,
        expected_version: u64,
        reason: Option<String>,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send {
        set_status_reason_whole(self, job_id, expected_version, reason)
    }
}

/// [`Store::set_status_reason`] by reading the job and writing it whole: the default, and what a
/// store that sets the reason in place falls back to when it cannot.
pub async fn set_status_reason_whole<S: Store + ?Sized>(
    store: &S,
    job_id: &str,
    expected_version: u64,
    reason: Option<String>,
) -> Result<u64, StoreError> {
    let Some(stored) = store.get_job(job_id).await? else {
        return Err(StoreError::Conflict);
    };
    if stored.version != expected_version {
        return Err(StoreError::Conflict);
    }
    let mut job = stored.value;
    job.status_reason = reason;
    store.update_job(&job, expected_version).await
}

/// A RUNNABLE job, as the scheduler sees it (see [`Store::runnable_heads`]): what the planner
/// orders and fits, plus the status reason and version a cycle needs to record why it waits.
///
/// Its text and instances are shared ([`SharedStr`], `Arc`) like [`CapacityHolder`]'s: a store
/// that keeps the summaries hands every cycle the same ones, and the planner's [`PendingJob`]
/// takes them as they are.
///
/// [`PendingJob`]: trainyard_scheduler::PendingJob
/// [`SharedStr`]: trainyard_scheduler::SharedStr
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnableHead {
    /// Job id.
    pub job_id: trainyard_scheduler::SharedStr,
    /// Queue name.
    pub job_queue: trainyard_scheduler::SharedStr,
    /// Its fair share or quota share ([`share_key`]; empty when none).
    pub share: trainyard_scheduler::SharedStr,
    /// `schedulingPriority` (0 when unset).
    pub priority: u32,
    /// Its place in line: its submission, or its last requeue (its creation if never recorded).
    pub runnable_at: i64,
    /// Instances it needs, per instance type.
    pub instances: std::sync::Arc<std::collections::BTreeMap<String, u32>>,
    /// `MaxRuntimeInSeconds` of the request, if given.
    pub max_runtime_s: Option<u64>,
    /// Not to be dispatched before this time (retry backoff).
    pub not_before: Option<i64>,
    /// The status reason stored on the job (the last skip reason recorded).
    pub status_reason: Option<trainyard_scheduler::SharedStr>,
    /// The job's stored version: a write based on this summary expects it.
    pub version: u64,
}

impl RunnableHead {
    /// The summary of a RUNNABLE job stored at `version`.
    pub fn of(job: &ServiceJob, version: u64) -> Self {
        Self {
            job_id: job.job_id.as_str().into(),
            job_queue: job.job_queue.as_str().into(),
            share: share_key(job).into(),
            priority: job.priority(),
            runnable_at: job.runnable_at.unwrap_or(job.created_at),
            instances: std::sync::Arc::new(job.training.instances.clone()),
            max_runtime_s: job.training.max_runtime_s,
            not_before: job.not_before,
            status_reason: job.status_reason.as_deref().map(Into::into),
            version,
        }
    }
}

/// A job holding capacity, as the scheduler sees it (see [`Store::capacity_holders`]).
#[derive(Debug, Clone, PartialEq, Eq)]
///
/// Ids and instances are shared ([`SharedStr`], `Arc`): a store that keeps the summaries (the memory store does)
/// hands every cycle the same ones, and the planner's [`RunningJob`] takes them as they are.
///
/// [`RunningJob`]: trainyard_scheduler::RunningJob
/// [`SharedStr`]: trainyard_scheduler::SharedStr
pub struct CapacityHolder {
    /// Job id.
    pub job_id: trainyard_scheduler::SharedStr,
    /// Queue name.
    pub job_queue: trainyard_scheduler::SharedStr,
    /// Its fair share or quota share ([`share_key`]; empty when none).
    pub share: trainyard_scheduler::SharedStr,
    /// `schedulingPriority` (0 when unset).
    pub priority: u32,
    /// When its latest attempt started (the job's last update if the attempt has no start).
    pub started_at: i64,
    /// Instances held, per instance type.
    pub instances: std::sync::Arc<std::collections::BTreeMap<String, u32>>,
    /// `MaxRuntimeInSeconds` of the request, if given.
    pub max_runtime_s: Option<u64>,
}

impl CapacityHolder {
    /// The summary of a dispatched job.
    pub fn of(job: &ServiceJob) -> Self {
        Self {
            job_id: job.job_id.as_str().into(),
            job_queue: job.job_queue.as_str().into(),
            share: share_key(job).into(),
            priority: job.priority(),
            started_at: Self::started_at_of(job),
            instances: std::sync::Arc::new(job.training.instances.clone()),
            max_runtime_s: job.training.max_runtime_s,
        }
    }

    /// [`started_at`](Self::started_at) of a dispatched job: when its latest attempt started,
    /// else its last update.
    pub fn started_at_of(job: &ServiceJob) -> i64 {
        job.latest_attempt()
            .and_then(|a| a.started_at)
            .unwrap_or(job.updated_at)
    }

    /// All instances held.
    pub fn total_instances(&self) -> u64 {
        self.instances.values().map(|n| u64::from(*n)).sum()
    }
}

/// A SageMaker training job's primary status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TrainingStatus {
    /// Provisioning, downloading, training or uploading.
    InProgress,
    /// Finished successfully.
    Completed,
    /// Failed; a failure reason says why.
    Failed,
    /// Being stopped.
    Stopping,
    /// Stopped (on request, or by `MaxRuntimeInSeconds`).
    Stopped,
}

impl TrainingStatus {
    /// Parses SageMaker's spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "InProgress" => Self::InProgress,
            "Completed" => Self::Completed,
            "Failed" => Self::Failed,
            "Stopping" => Self::Stopping,
            "Stopped" => Self::Stopped,
            _ => return None,
        })
    }

    /// Completed, Failed or Stopped.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Stopped)
    }
}

/// What the backend (or a state-change event) says about one training job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrainingJobState {
    /// `TrainingJobName`.
    pub name: String,
    /// `TrainingJobArn`.
    pub arn: String,
    /// `TrainingJobStatus`.
    pub status: TrainingStatus,
    /// `SecondaryStatus` (`Starting`, `Downloading`, `Training`, `Uploading`, …).
    pub secondary: String,
    /// `FailureReason`, when failed.
    pub failure_reason: Option<String>,
}

impl TrainingJobState {
    /// Reads the members Trainyard needs from a `DescribeTrainingJob` response or the `detail`
    /// of a "SageMaker Training Job State Change" event (they share a shape). `None` when a
    /// required member is missing or unknown.
    pub fn from_sagemaker(detail: &serde_json::Value) -> Option<Self> {
        let text = |k: &str| detail.get(k).and_then(serde_json::Value::as_str);
        Some(Self {
            name: text("TrainingJobName")?.to_owned(),
            arn: text("TrainingJobArn").unwrap_or_default().to_owned(),
            status: TrainingStatus::parse(text("TrainingJobStatus")?)?,
            secondary: text("SecondaryStatus").unwrap_or_default().to_owned(),
            failure_reason: text("FailureReason").map(str::to_owned),
        })
    }
}

/// Why the training backend refused or failed a call, classified once by the adapter.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// `ResourceInUse`: a training job with this name exists (an earlier launch got through).
    #[error("already exists: {0}")]
    AlreadyExists(String),
    /// `ResourceLimitExceeded`: no account quota for the instances now; retry later.
    #[error("ResourceLimitExceeded: {0}")]
    Capacity(String),
    /// The request is invalid (`ValidationException` and the like); retrying will not help.
    #[error("{code}: {message}")]
    Rejected {
        /// SageMaker's error code.
        code: String,
        /// Its message.
        message: String,
    },
    /// No such training job.
    #[error("not found: {0}")]
    NotFound(String),
    /// Throttled or unavailable; retry with backoff.
    #[error("unavailable: {0}")]
    Unavailable(String),
}

impl BackendError {
    /// A SageMaker error answer by its code: `ResourceInUse`, `ResourceLimitExceeded` and
    /// `ResourceNotFound` have their own kinds, any other code is a rejection. (Throttling and
    /// failures without an answer are the cloud adapter's to tell apart; the emulator has none.)
    pub fn from_sagemaker(code: &str, message: String) -> Self {
        match code {
            "ResourceInUse" => Self::AlreadyExists(message),
            "ResourceLimitExceeded" => Self::Capacity(message),
            "ResourceNotFound" => Self::NotFound(message),
            _ => Self::Rejected {
                code: code.to_owned(),
                message,
            },
        }
    }
}

/// SageMaker, as the use-cases need it. Production: `aws-sdk-sagemaker`; local mode and the
/// simulator: the emulator.
pub trait TrainingBackend: Send + Sync + 'static {
    /// `CreateTrainingJob` with `request` (whose `TrainingJobName` is the attempt's name);
    /// returns the training job's ARN.
    fn create_training_job(
        &self,
        request: serde_json::Value,
    ) -> impl Future<Output = Result<String, BackendError>> + Send;

    /// `DescribeTrainingJob`.
    fn describe_training_job(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<TrainingJobState, BackendError>> + Send;

    /// `StopTrainingJob`. Stopping a job that is already stopping or finished is not an error.
    fn stop_training_job(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;
}

/// Wall-clock time, as epoch milliseconds. Tests use a manual clock.
pub trait Clock: Send + Sync + 'static {
    /// Now, in epoch milliseconds.
    fn now_ms(&self) -> i64;
}

/// Mints identifiers. Production uses random UUIDs; tests use a counter.
pub trait Ids: Send + Sync + 'static {
    /// A new job id (a UUID string).
    fn job_id(&self) -> String;
}

/// Something happened that other parts of the loop react to. Internal events drive the
/// scheduler; they are not Batch's public events.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A job was stored as SUBMITTED.
    JobSubmitted {
        /// The job.
        job_id: String,
        /// Its queue.
        job_queue: String,
    },
    /// A job changed status.
    JobStatusChanged {
        /// The job.
        job_id: String,
        /// Its queue.
        job_queue: String,
        /// New status.
        status: JobStatus,
        /// The job as stored with its new status (boxed: far larger than the other events),
        /// for sinks that publish it, such as EventBridge's "Batch Service Job State Change".
        job: Box<ServiceJob>,
    },
}

impl Event {
    /// `job` changed status: its id, queue and status are taken from it.
    pub fn status_changed(job: ServiceJob) -> Self {
        Self::JobStatusChanged {
            job_id: job.job_id.clone(),
            job_queue: job.job_queue.clone(),
            status: job.status,
            job: Box::new(job),
        }
    }
}

/// Where events go: an in-process channel locally, EventBridge in AWS. Publishing is
/// best-effort; the loop also runs on a schedule, so a lost event delays but never loses work.
pub trait EventSink: Send + Sync + 'static {
    /// Publishes one event.
    fn publish(&self, event: Event) -> impl Future<Output = ()> + Send;

    /// Whether published events go anywhere. A sink that drops them all says no, and the
    /// use-cases then skip building them (a status change copies the whole job).
    fn listening(&self) -> bool {
        true
    }
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX)
    }
}

/// Random (v4) UUIDs.
#[derive(Debug, Default, Clone, Copy)]
pub struct RandomIds;

impl Ids for RandomIds {
    fn job_id(&self) -> String {
        uuid::Uuid::new_v4().to_string()
    }
}

/// An event sink that drops everything (for tests and tools that need no loop).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoEvents;

impl EventSink for NoEvents {
    async fn publish(&self, _event: Event) {}

    fn listening(&self) -> bool {
        false
    }
}

/// A shared store is a store: several services (or hosts in one process) can use one.
mod shared_store {
    use std::sync::Arc;

    use trainyard_domain::job::ServiceJob;

    use super::{
        CapacityHolder, ClientTokenRecord, Document, InsertJob, JobQuery, Page, Resource,
        RunnableHead, Store, StoreError, Versioned, Write,
    };

    impl<S: Store> Store for Arc<S> {
        async fn insert_job(
            &self,
            job: &ServiceJob,
            token: Option<&ClientTokenRecord>,
        ) -> Result<InsertJob, StoreError> {
            (**self).insert_job(job, token).await
        }
        async fn get_job(&self, job_id: &str) -> Result<Option<Versioned<ServiceJob>>, StoreError> {
            (**self).get_job(job_id).await
        }
        async fn update_job(&self, job: &ServiceJob, expected: u64) -> Result<u64, StoreError> {
            (**self).update_job(job, expected).await
        }
        async fn list_jobs(
            &self,
            query: &JobQuery,
        ) -> Result<Page<Versioned<ServiceJob>>, StoreError> {
            (**self).list_jobs(query).await
        }
        async fn create_resource<R: Resource>(&self, resource: &R) -> Result<(), StoreError> {
            (**self).create_resource(resource).await
        }
        async fn get_resource<R: Resource>(
            &self,
            key: &str,
        ) -> Result<Option<Versioned<R>>, StoreError> {
            (**self).get_resource(key).await
        }
        async fn list_resources<R: Resource>(&self) -> Result<Vec<Versioned<R>>, StoreError> {
            (**self).list_resources().await
        }
        async fn update_resource<R: Resource>(
            &self,
            resource: &R,
            expected_version: u64,
        ) -> Result<u64, StoreError> {
            (**self).update_resource(resource, expected_version).await
        }
        async fn delete_resource<R: Resource>(
            &self,
            key: &str,
            expected_version: u64,
        ) -> Result<(), StoreError> {
            (**self).delete_resource::<R>(key, expected_version).await
        }
        async fn get_document<D: Document>(
            &self,
            key: &str,
        ) -> Result<Option<Versioned<D>>, StoreError> {
            (**self).get_document(key).await
        }
        async fn list_documents<D: Document>(&self) -> Result<Vec<Versioned<D>>, StoreError> {
            (**self).list_documents().await
        }
        async fn commit(&self, writes: &[Write]) -> Result<(), StoreError> {
            (**self).commit(writes).await
        }
        async fn runnable_jobs(
            &self,
            queue: &str,
            share: &str,
            limit: usize,
        ) -> Result<Vec<Versioned<ServiceJob>>, StoreError> {
            (**self).runnable_jobs(queue, share, limit).await
        }
        async fn runnable_shares(&self, queue: &str) -> Result<Vec<String>, StoreError> {
            (**self).runnable_shares(queue).await
        }
        async fn dispatched_jobs(&self) -> Result<Vec<Versioned<ServiceJob>>, StoreError> {
            (**self).dispatched_jobs().await
        }
        async fn capacity_holders(&self) -> Result<Vec<CapacityHolder>, StoreError> {
            (**self).capacity_holders().await
        }
        async fn runnable_heads(
            &self,
            queue: &str,
            share: &str,
            limit: usize,
        ) -> Result<Vec<RunnableHead>, StoreError> {
            (**self).runnable_heads(queue, share, limit).await
        }
        async fn set_status_reason(
            &self,
            job_id: &str,
            expected_version: u64,
            reason: Option<String>,
        ) -> Result<u64, StoreError> {
            (**self)
                .set_status_reason(job_id, expected_version, reason)
                .await
        }
    }
}
