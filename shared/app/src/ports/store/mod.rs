//! The store ports: jobs ([`JobStore`]), configuration ([`ConfigStore`]) and the scheduling
//! loop's documents, commits and indexes ([`SchedulingStore`]), with [`Store`] for all three.
//!
//! The store is asynchronous because its production adapter (DynamoDB) is; the SQLite and memory
//! adapters complete immediately. Methods return `impl Future + Send` so use-cases can run in any
//! Tokio task and in Lambda handlers without boxing.

mod shared;
mod write;

use std::future::Future;

use serde::{Serialize, de::DeserializeOwned};
use trainyard_domain::arn::ResourceKind;
use trainyard_domain::environment::ServiceEnvironment;
use trainyard_domain::job::ServiceJob;
use trainyard_domain::policy::SchedulingPolicy;
use trainyard_domain::queue::JobQueue;
use trainyard_domain::quota_share::QuotaShare;

pub use write::{DocumentValue, Write};

use super::audit::AuditStore;
use super::records::{
    CapacityHolder, CapacityRelease, ClientTokenRecord, EnvironmentUsage, HoldersRead, HoldersSeen,
    InsertJob, JobQuery, Page, RunnableHead, quota_share_key,
};

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

/// Scheduler state the store keeps beside jobs and configuration: JSON documents under
/// (kind, key), versioned like resources, and written together with jobs by [`SchedulingStore::commit`].
pub trait Document: Serialize + DeserializeOwned + Clone + Send + Sync + 'static {
    /// The kind's stable name (it is stored: never change one).
    const KIND: &'static str;
    /// The unique key within the kind.
    fn key(&self) -> String;
}

/// Jobs: the API's reads and writes of one job at a time, and listings. Every method is one
/// atomic step; an acknowledged write is durable.
pub trait JobStore: Send + Sync + 'static {
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
}

/// Configuration: service environments, job queues, scheduling policies and quota shares, kept
/// whole as versioned documents (see [`Resource`]).
pub trait ConfigStore: Send + Sync + 'static {
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
}

/// What the scheduling loop needs beyond single jobs: its documents (capacity in use, fair-share
/// usage, the lease), atomic commits of jobs and documents together, and the indexes a cycle
/// reads (the heads of each share's line, the jobs holding capacity).
pub trait SchedulingStore: JobStore {
    /// Reads a document by key.
    fn get_document<D: Document>(
        &self,
        key: &str,
    ) -> impl Future<Output = Result<Option<Versioned<D>>, StoreError>> + Send;

    /// All documents of a kind, ordered by key.
    fn list_documents<D: Document>(
        &self,
    ) -> impl Future<Output = Result<Vec<Versioned<D>>, StoreError>> + Send;

    /// The capacity in use in each environment: its [`EnvironmentUsage`] less the
    /// [`CapacityRelease`]s not yet folded into it, keyed by environment.
    ///
    /// The usage documents are read before the releases: a fold that lands between the two reads
    /// leaves its releases counted as in use (over-counted until the next read), never given back
    /// twice.
    fn capacity_in_use(
        &self,
    ) -> impl Future<
        Output = Result<
            std::collections::BTreeMap<String, Versioned<EnvironmentUsage>>,
            StoreError,
        >,
    > + Send {
        async move {
            let usage = self.list_documents::<EnvironmentUsage>().await?;
            let releases = self.list_documents::<CapacityRelease>().await?;
            Ok(EnvironmentUsage::net_of(usage, &releases))
        }
    }

    /// Applies every write or none: [`StoreError::Conflict`] if any expected version differs
    /// (a job or document changed since it was read, a document to create exists, or one to
    /// delete does not). Each written job and document gets its version plus one (documents
    /// created get 1).
    fn commit(&self, writes: &[Write]) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The first `limit` RUNNABLE jobs of `queue` whose [`share_key`](trainyard_domain::order::share_key) is `share`, in their
    /// [`runnable_rank`](trainyard_domain::order::runnable_rank) order: FIFO for a FIFO queue (`share` empty), priority first within a
    /// share of a queue with a policy. Reads an index: the cost grows with `limit`, not the
    /// backlog. One order per share is all a store keeps: the one the scheduler dispatches in.
    fn runnable_jobs(
        &self,
        queue: &str,
        share: &str,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<Versioned<ServiceJob>>, StoreError>> + Send;

    /// The distinct [`share_key`](trainyard_domain::order::share_key)s of `queue`'s RUNNABLE jobs, ordered.
    fn runnable_shares(
        &self,
        queue: &str,
    ) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send;

    /// The distinct [`share_key`](trainyard_domain::order::share_key)s of `queue`'s jobs
    /// holding capacity (SCHEDULED, STARTING or RUNNING), ordered. By default the shares of
    /// [`capacity_holders`](SchedulingStore::capacity_holders) in the queue; a store that keeps
    /// them apart (the memory store counts them beside its index) answers without reading every
    /// holder.
    fn holding_shares(
        &self,
        queue: &str,
    ) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send {
        async move {
            let holders = self.capacity_holders().await?;
            let shares: std::collections::BTreeSet<&str> = holders
                .iter()
                .filter(|h| &*h.job_queue == queue)
                .map(|h| h.share.as_str())
                .collect();
            Ok(shares.into_iter().map(str::to_owned).collect())
        }
    }

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
    /// [`dispatched_jobs`]: SchedulingStore::dispatched_jobs
    fn capacity_holders(
        &self,
    ) -> impl Future<Output = Result<Vec<CapacityHolder>, StoreError>> + Send {
        async move {
            let jobs = self.dispatched_jobs().await?;
            Ok(jobs.iter().map(|j| CapacityHolder::of(&j.value)).collect())
        }
    }

    /// [`capacity_holders`], or only what changed since `seen`, with where the answer leaves
    /// the reader. A store that can tell what changed (the memory store logs its last few
    /// thousand changes) answers [`HoldersRead::Changed`] when `seen` is one of its own and
    /// still in its log; otherwise, and by default, it answers [`HoldersRead::All`]. The
    /// default follows nothing (`None`): its reader reads everything every time, as from
    /// DynamoDB's index.
    ///
    /// [`capacity_holders`]: SchedulingStore::capacity_holders
    fn capacity_holders_since(
        &self,
        seen: Option<HoldersSeen>,
    ) -> impl Future<Output = Result<(HoldersRead, Option<HoldersSeen>), StoreError>> + Send {
        let _ = seen;
        async move { Ok((HoldersRead::All(self.capacity_holders().await?), None)) }
    }

    /// What the scheduler needs of the first `limit` RUNNABLE jobs of `queue`'s `share`:
    /// [`runnable_jobs`], summarised, in the same order. Every cycle
    /// reads the heads of every queue and share, so a store that can answer without copying
    /// whole jobs should (the memory store keeps the summaries beside its index); the default
    /// summarises [`runnable_jobs`].
    ///
    /// [`runnable_jobs`]: SchedulingStore::runnable_jobs
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

/// Durable state: every store port at once, for hosts and the API router, which use them all.
/// A use-case names the narrowest of [`JobStore`], [`ConfigStore`], [`SchedulingStore`] and
/// [`AuditStore`] it needs instead.
pub trait Store: JobStore + ConfigStore + SchedulingStore + AuditStore {}

impl<T: JobStore + ConfigStore + SchedulingStore + AuditStore> Store for T {}

/// [`SchedulingStore::set_status_reason`] by reading the job and writing it whole (the default).
async fn set_status_reason_whole<S: JobStore + ?Sized>(
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
