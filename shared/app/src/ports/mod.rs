//! Ports: what the use-cases need from the outside world, as narrow traits, and the records
//! they exchange.
//!
//! - [`store`]: [`JobStore`], [`ConfigStore`] and [`SchedulingStore`] (with [`Store`] for all
//!   three), versioned values, documents and atomic writes.
//! - [`records`]: what the store ports take and return (queries, pages, usage documents, the
//!   summaries a cycle reads).
//! - [`audit`]: [`AuditStore`], the audit trail of calls that asked to change something.
//! - [`backend`]: the training backend (SageMaker, or the emulator).
//! - [`events`]: the event sink.
//! - [`forecasts`]: where what the forecaster learnt is kept across restarts.
//! - [`time`]: the clock and id minting.

pub mod audit;
pub mod backend;
pub mod events;
pub mod forecasts;
pub mod records;
pub mod store;
pub mod time;

pub use audit::{
    AuditCursor, AuditPage, AuditQuery, AuditRecord, AuditStore, MAX_AUDIT_RETENTION_MS,
};
pub use backend::{
    BackendError, ObservedCheckpoint, TrainingBackend, TrainingJobState, TrainingStatus, described,
};
pub use events::{Event, EventSink, NoEvents};
pub use forecasts::{ForecastMemory, MemoryFuture};
pub use records::{
    CapacityHolder, CapacityRelease, ClientTokenRecord, EnvironmentUsage, Fence, HoldersRead,
    HoldersSeen, InsertJob, JobCursor, JobQuery, JobWait, LineDigest, LineEstimates, LinePlace,
    LineWaits, NameFilter, Page, ReconcileMark, RunnableHead, ShareUsageRecord, StartEstimates,
    WaitDigests, quota_share_key,
};
pub use store::{
    ConfigStore, Document, DocumentValue, JobStore, Resource, SchedulingStore, Store, StoreError,
    Versioned, Write,
};
pub use time::{Clock, Ids, ManualClock, RandomIds, SequentialIds, SystemClock};
