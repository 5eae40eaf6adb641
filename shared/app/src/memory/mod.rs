//! The in-memory store: the reference implementation of [`Store`](crate::Store), for unit tests and the
//! simulator. One mutex over ordered maps; every method is one atomic step.
//!
//! Besides the jobs themselves it keeps indexes, updated in the same step as every job write, so
//! that the scheduler's reads grow with what they return rather than with every job ever
//! submitted (the simulator replays traces of 100,000 jobs): jobs by status (for listings), the
//! RUNNABLE jobs of each queue and share in both dispatch orders (with the summary the scheduler
//! reads of the heads every cycle), the dispatched jobs (with their summary too), and the
//! RUNNABLE jobs in backoff. Configuration and documents are kept as JSON, as a real store keeps
//! them, with their decoded value cached beside them so that a cycle does not decode them again.

mod indexes;
mod stored;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use trainyard_domain::arn::ResourceKind;
use trainyard_domain::job::{JobStatus, ServiceJob};

use crate::ports::{
    AuditCursor, AuditPage, AuditQuery, AuditRecord, AuditStore, CapacityHolder, ClientTokenRecord,
    ConfigStore, Document, HoldersRead, HoldersSeen, InsertJob, JobCursor, JobQuery, JobStore,
    NameFilter, Page, Resource, RunnableHead, SchedulingStore, StoreError, Versioned, Write,
};
use indexes::{Indexes, same_index_entries};
use stored::{Decoded, Json, Stored, corrupt};

#[derive(Default)]
struct Inner {
    /// Hashed: jobs are looked up by id, and listed only through the indexes or sorted.
    jobs: foldhash::HashMap<String, Versioned<ServiceJob>>,
    tokens: BTreeMap<String, ClientTokenRecord>,
    /// (kind, key) → the JSON document, as a real store keeps it.
    resources: BTreeMap<(ResourceKind, String), Stored>,
    /// kind → key → the JSON document: scheduler state (by kind first, so that a key is looked
    /// up without building an owned one).
    documents: BTreeMap<&'static str, BTreeMap<String, Stored>>,
    index: Indexes,
    /// The audit trail in time order (listed from the newest end).
    audit: BTreeMap<AuditCursor, AuditRecord>,
}

impl Inner {
    /// Replaces a stored job's value, keeping the indexes in step.
    fn replace_job(&mut self, job: &ServiceJob) -> Option<u64> {
        let stored = self.jobs.get_mut(&job.job_id)?;
        let version = stored.version + 1;
        // Most updates of a waiting job only change its status reason: its index entries stay,
        // and its summary takes the new reason and version.
        if same_index_entries(&stored.value, job) {
            self.index
                .new_reason(job, job.status_reason.as_deref(), version);
        } else {
            self.index.remove(&stored.value);
            self.index.add(job, version);
        }
        stored.value = job.clone();
        stored.version = version;
        Some(version)
    }
}

/// A [`Store`](crate::Store) in process memory.
pub struct MemoryStore {
    inner: Mutex<Inner>,
    /// Its number among the process's memory stores ([`HoldersSeen::store`]).
    number: u64,
}

impl Default for MemoryStore {
    fn default() -> Self {
        static STORES: AtomicU64 = AtomicU64::new(0);
        Self {
            inner: Mutex::default(),
            number: STORES.fetch_add(1, Ordering::Relaxed),
        }
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A poisoned lock means a panic mid-update in a test; the maps are still consistent
        // because every method validates before it mutates.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// RUNNABLE jobs, in all queues.
    pub fn runnable_count(&self) -> usize {
        self.lock()
            .index
            .by_status
            .get(&JobStatus::Runnable)
            .map_or(0, BTreeSet::len)
    }

    /// Instances held by dispatched jobs, in all environments.
    pub fn held_instances(&self) -> u64 {
        self.lock().index.held_instances
    }

    /// The earliest `not_before` later than `after_ms` of a RUNNABLE job in backoff: when a
    /// waiting job next becomes eligible.
    pub fn next_not_before_after(&self, after_ms: i64) -> Option<i64> {
        let inner = self.lock();
        let start = (after_ms.saturating_add(1), String::new());
        inner.index.backoff.range(start..).next().map(|(at, _)| *at)
    }
}

/// Whether `job` matches every set field of `query` (ignoring the cursor and limit).
pub fn job_matches(job: &ServiceJob, query: &JobQuery) -> bool {
    let name_ok = match &query.name {
        None => true,
        Some(NameFilter::Exact(n)) => job.job_name.to_lowercase() == *n,
        Some(NameFilter::Prefix(p)) => job.job_name.to_lowercase().starts_with(p.as_str()),
    };
    name_ok
        && query.queue.as_ref().is_none_or(|q| *q == job.job_queue)
        && query.status.is_none_or(|s| s == job.status)
        && query
            .share_identifier
            .as_ref()
            .is_none_or(|s| Some(s) == job.share_identifier.as_ref())
        && query
            .quota_share_name
            .as_ref()
            .is_none_or(|s| Some(s) == job.quota_share_name.as_ref())
        && query.created_before.is_none_or(|t| job.created_at < t)
        && query.created_after.is_none_or(|t| job.created_at > t)
}

impl AuditStore for MemoryStore {
    async fn append_audit(&self, record: &AuditRecord) -> Result<(), StoreError> {
        let mut inner = self.lock();
        // Forget from the oldest end what has expired by this record's time (records kept for
        // the same period expire in the order they were made).
        while let Some(entry) = inner.audit.first_entry() {
            if entry.get().expires_at_ms > record.at_ms {
                break;
            }
            entry.remove();
        }
        inner.audit.insert(record.cursor(), record.clone());
        Ok(())
    }

    async fn list_audit(&self, query: &AuditQuery) -> Result<AuditPage, StoreError> {
        let inner = self.lock();
        let mut records: Vec<AuditRecord> = inner
            .audit
            .values()
            .rev()
            .filter(|r| query.matches(r))
            .take(query.limit.max(1) + 1)
            .cloned()
            .collect();
        let next = if records.len() > query.limit.max(1) {
            records.truncate(query.limit.max(1));
            records.last().map(AuditRecord::cursor)
        } else {
            None
        };
        Ok(AuditPage { records, next })
    }
}

impl JobStore for MemoryStore {
    async fn insert_job(
        &self,
        job: &ServiceJob,
        token: Option<&ClientTokenRecord>,
    ) -> Result<InsertJob, StoreError> {
        let mut inner = self.lock();
        if let Some(token) = token
            && let Some(existing) = inner.tokens.get(&token.token)
        {
            return Ok(InsertJob::TokenExists(existing.clone()));
        }
        if inner.jobs.contains_key(&job.job_id) {
            return Err(StoreError::AlreadyExists);
        }
        if let Some(token) = token {
            inner.tokens.insert(token.token.clone(), token.clone());
        }
        inner.index.add(job, 1);
        inner.jobs.insert(
            job.job_id.clone(),
            Versioned {
                value: job.clone(),
                version: 1,
            },
        );
        Ok(InsertJob::Inserted)
    }

    async fn get_job(&self, job_id: &str) -> Result<Option<Versioned<ServiceJob>>, StoreError> {
        Ok(self.lock().jobs.get(job_id).cloned())
    }

    async fn update_job(&self, job: &ServiceJob, expected_version: u64) -> Result<u64, StoreError> {
        let mut inner = self.lock();
        match inner.jobs.get(&job.job_id) {
            Some(stored) if stored.version == expected_version => {
                inner.replace_job(job).ok_or(StoreError::Conflict)
            }
            _ => Err(StoreError::Conflict),
        }
    }

    async fn list_jobs(&self, query: &JobQuery) -> Result<Page<Versioned<ServiceJob>>, StoreError> {
        let inner = self.lock();
        let limit = query.limit.max(1);
        let before_cursor = |created_at: i64, id: &str| match &query.after {
            None => true,
            Some(c) => (created_at, id) < (c.created_at, c.job_id.as_str()),
        };
        // Newest first, then by id descending; at most one more than the page to know if
        // another page follows.
        let mut items: Vec<Versioned<ServiceJob>> = Vec::new();
        match query.status {
            // The status index holds (created at, id) in exactly the listing order.
            Some(status) => {
                let ids = inner.index.by_status.get(&status);
                for (created_at, id) in ids.into_iter().flat_map(|s| s.iter().rev()) {
                    if items.len() > limit {
                        break;
                    }
                    if !before_cursor(*created_at, id) {
                        continue;
                    }
                    if let Some(stored) = inner.jobs.get(id)
                        && job_matches(&stored.value, query)
                    {
                        items.push(stored.clone());
                    }
                }
            }
            None => {
                let mut matching: Vec<&Versioned<ServiceJob>> = inner
                    .jobs
                    .values()
                    .filter(|v| job_matches(&v.value, query))
                    .filter(|v| before_cursor(v.value.created_at, &v.value.job_id))
                    .collect();
                matching.sort_by(|a, b| {
                    (b.value.created_at, &b.value.job_id)
                        .cmp(&(a.value.created_at, &a.value.job_id))
                });
                items = matching.into_iter().take(limit + 1).cloned().collect();
            }
        }
        let more = items.len() > limit;
        items.truncate(limit);
        let next = match (more, items.last()) {
            (true, Some(last)) => Some(JobCursor {
                created_at: last.value.created_at,
                job_id: last.value.job_id.clone(),
            }),
            _ => None,
        };
        Ok(Page { items, next })
    }
}

impl ConfigStore for MemoryStore {
    async fn create_resource<R: Resource>(&self, resource: &R) -> Result<(), StoreError> {
        let key = (R::KIND, resource.key());
        let doc = serde_json::to_value(resource).map_err(|e| corrupt(key.1.clone(), e))?;
        let mut inner = self.lock();
        if inner.resources.contains_key(&key) {
            return Err(StoreError::AlreadyExists);
        }
        let decoded: Decoded = Some(Arc::new(resource.clone()));
        inner.resources.insert(
            key,
            Stored {
                version: 1,
                doc: Json::Value(doc),
                decoded,
            },
        );
        Ok(())
    }

    async fn get_resource<R: Resource>(
        &self,
        key: &str,
    ) -> Result<Option<Versioned<R>>, StoreError> {
        let mut inner = self.lock();
        match inner.resources.get_mut(&(R::KIND, key.to_owned())) {
            None => Ok(None),
            Some(stored) => Ok(Some(Versioned {
                value: stored.get::<R>(key)?,
                version: stored.version,
            })),
        }
    }

    async fn list_resources<R: Resource>(&self) -> Result<Vec<Versioned<R>>, StoreError> {
        let mut inner = self.lock();
        inner
            .resources
            .range_mut((R::KIND, String::new())..)
            .take_while(|((kind, _), _)| *kind == R::KIND)
            .map(|((_, key), stored)| {
                Ok(Versioned {
                    value: stored.get::<R>(key)?,
                    version: stored.version,
                })
            })
            .collect()
    }

    async fn update_resource<R: Resource>(
        &self,
        resource: &R,
        expected_version: u64,
    ) -> Result<u64, StoreError> {
        let key = (R::KIND, resource.key());
        let doc = serde_json::to_value(resource).map_err(|e| corrupt(key.1.clone(), e))?;
        let mut inner = self.lock();
        match inner.resources.get_mut(&key) {
            Some(stored) if stored.version == expected_version => {
                stored.version += 1;
                stored.doc = Json::Value(doc);
                stored.decoded = Some(Arc::new(resource.clone()));
                Ok(stored.version)
            }
            _ => Err(StoreError::Conflict),
        }
    }

    async fn delete_resource<R: Resource>(
        &self,
        key: &str,
        expected_version: u64,
    ) -> Result<(), StoreError> {
        let key = (R::KIND, key.to_owned());
        let mut inner = self.lock();
        match inner.resources.get(&key) {
            Some(stored) if stored.version == expected_version => {
                inner.resources.remove(&key);
                Ok(())
            }
            _ => Err(StoreError::Conflict),
        }
    }
}

impl SchedulingStore for MemoryStore {
    async fn set_status_reason(
        &self,
        job_id: &str,
        expected_version: u64,
        reason: Option<String>,
    ) -> Result<u64, StoreError> {
        let mut inner = self.lock();
        let Inner { jobs, index, .. } = &mut *inner;
        let Some(stored) = jobs
            .get_mut(job_id)
            .filter(|s| s.version == expected_version)
        else {
            return Err(StoreError::Conflict);
        };
        // Only the reason changes: no index entry moves, and a RUNNABLE job's summary takes
        // the new reason and version (as `Inner::replace_job` does for such an update).
        stored.version += 1;
        index.new_reason(&stored.value, reason.as_deref(), stored.version);
        stored.value.status_reason = reason;
        Ok(stored.version)
    }

    async fn get_document<D: Document>(
        &self,
        key: &str,
    ) -> Result<Option<Versioned<D>>, StoreError> {
        let mut inner = self.lock();
        match inner
            .documents
            .get_mut(D::KIND)
            .and_then(|docs| docs.get_mut(key))
        {
            None => Ok(None),
            Some(stored) => Ok(Some(Versioned {
                value: stored.get::<D>(key)?,
                version: stored.version,
            })),
        }
    }

    async fn list_documents<D: Document>(&self) -> Result<Vec<Versioned<D>>, StoreError> {
        let mut inner = self.lock();
        let Some(docs) = inner.documents.get_mut(D::KIND) else {
            return Ok(Vec::new());
        };
        docs.iter_mut()
            .map(|(key, stored)| {
                Ok(Versioned {
                    value: stored.get::<D>(key)?,
                    version: stored.version,
                })
            })
            .collect()
    }

    async fn commit(&self, writes: &[Write]) -> Result<(), StoreError> {
        let mut inner = self.lock();
        // Check every expectation first, then apply: all or nothing.
        for write in writes {
            let ok = match write {
                Write::Job {
                    job,
                    expected_version,
                } => inner
                    .jobs
                    .get(&job.job_id)
                    .is_some_and(|v| v.version == *expected_version),
                Write::Document {
                    kind,
                    key,
                    expected_version,
                    ..
                }
                | Write::DeleteDocument {
                    kind,
                    key,
                    expected_version,
                } => {
                    let stored = inner
                        .documents
                        .get(kind)
                        .and_then(|docs| docs.get(key))
                        .map_or(0, |d| d.version);
                    stored == *expected_version
                }
            };
            if !ok {
                return Err(StoreError::Conflict);
            }
        }
        for write in writes {
            match write {
                Write::Job { job, .. } => {
                    inner.replace_job(job);
                }
                Write::Document {
                    kind,
                    key,
                    doc,
                    expected_version,
                } => {
                    let stored = Stored {
                        version: expected_version + 1,
                        doc: Json::Later(doc.clone()),
                        decoded: Some(doc.shared()),
                    };
                    let docs = inner.documents.entry(kind).or_default();
                    match docs.get_mut(key) {
                        Some(existing) => *existing = stored,
                        None => {
                            docs.insert(key.clone(), stored);
                        }
                    }
                }
                Write::DeleteDocument { kind, key, .. } => {
                    if let Some(docs) = inner.documents.get_mut(kind) {
                        docs.remove(key);
                    }
                }
            }
        }
        Ok(())
    }

    async fn runnable_jobs(
        &self,
        queue: &str,
        share: &str,
        limit: usize,
    ) -> Result<Vec<Versioned<ServiceJob>>, StoreError> {
        let inner = self.lock();
        let Some(line) = inner.index.line(queue, share) else {
            return Ok(Vec::new());
        };
        Ok(line
            .keys()
            .take(limit)
            .filter_map(|(_, _, id)| inner.jobs.get(id).cloned())
            .collect())
    }

    async fn runnable_shares(&self, queue: &str) -> Result<Vec<String>, StoreError> {
        let inner = self.lock();
        Ok(inner
            .index
            .runnable
            .get(queue)
            .map(|shares| shares.keys().cloned().collect())
            .unwrap_or_default())
    }

    async fn holding_shares(&self, queue: &str) -> Result<Vec<String>, StoreError> {
        let inner = self.lock();
        Ok(inner
            .index
            .holding
            .get(queue)
            .map(|shares| shares.keys().cloned().collect())
            .unwrap_or_default())
    }

    async fn dispatched_jobs(&self) -> Result<Vec<Versioned<ServiceJob>>, StoreError> {
        let inner = self.lock();
        let mut jobs = Vec::with_capacity(inner.index.dispatched.len());
        jobs.extend(
            inner
                .index
                .dispatched
                .keys()
                .filter_map(|id| inner.jobs.get(id).cloned()),
        );
        Ok(jobs)
    }

    async fn capacity_holders(&self) -> Result<Vec<CapacityHolder>, StoreError> {
        Ok(self.lock().index.dispatched.values().cloned().collect())
    }

    async fn capacity_holders_since(
        &self,
        seen: Option<HoldersSeen>,
    ) -> Result<(HoldersRead, Option<HoldersSeen>), StoreError> {
        let inner = self.lock();
        let index = &inner.index;
        let now = HoldersSeen {
            store: self.number,
            changes: index.holder_changes,
        };
        let changed = seen
            .filter(|seen| seen.store == self.number)
            .and_then(|seen| index.holders_changed_since(seen.changes));
        let read = match changed {
            Some(ids) => HoldersRead::Changed(
                ids.into_iter()
                    .map(|id| (id.to_owned(), index.dispatched.get(id).cloned()))
                    .collect(),
            ),
            None => HoldersRead::All(index.dispatched.values().cloned().collect()),
        };
        Ok((read, Some(now)))
    }

    async fn runnable_heads(
        &self,
        queue: &str,
        share: &str,
        limit: usize,
    ) -> Result<Vec<RunnableHead>, StoreError> {
        let inner = self.lock();
        let Some(line) = inner.index.line(queue, share) else {
            return Ok(Vec::new());
        };
        let mut heads = Vec::with_capacity(limit.min(line.len()));
        heads.extend(line.values().take(limit).cloned());
        Ok(heads)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::job;

    async fn dispatched(store: &MemoryStore, id: &str) {
        let job = job(id).status(JobStatus::Running).build();
        store.insert_job(&job, None).await.unwrap();
    }

    /// Bumps a dispatched job's priority: its summary changes (out of the index and back in).
    async fn bump(store: &MemoryStore, id: &str) {
        let mut stored = store.get_job(id).await.unwrap().unwrap();
        let priority = stored.value.scheduling_priority.unwrap_or(0) + 1;
        stored.value.scheduling_priority = Some(priority);
        store
            .update_job(&stored.value, stored.version)
            .await
            .unwrap();
    }

    /// The log is read from the reader's place in it, not searched: once its oldest entries
    /// have been dropped, a reader is told the changes after its own and none before.
    #[tokio::test]
    async fn a_reader_is_told_exactly_the_changes_after_its_own_once_the_log_has_wrapped() {
        let store = MemoryStore::new();
        dispatched(&store, "a").await;
        for _ in 0..indexes::HOLDER_LOG {
            bump(&store, "a").await;
        }
        dispatched(&store, "b").await;
        let (_, seen) = store.capacity_holders_since(None).await.unwrap();
        dispatched(&store, "c").await;
        dispatched(&store, "d").await;
        let (read, now) = store.capacity_holders_since(seen).await.unwrap();
        let HoldersRead::Changed(changed) = read else {
            panic!("two changes are in the log: {read:?}");
        };
        let ids: Vec<&str> = changed.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, ["c", "d"]);
        let (read, _) = store.capacity_holders_since(now).await.unwrap();
        assert!(
            matches!(read, HoldersRead::Changed(ref c) if c.is_empty()),
            "{read:?}"
        );
    }

    #[tokio::test]
    async fn a_reader_is_told_what_changed_while_the_log_reaches_back() {
        let store = MemoryStore::new();
        dispatched(&store, "a").await;
        dispatched(&store, "b").await;
        let (_, seen) = store.capacity_holders_since(None).await.unwrap();
        bump(&store, "b").await;
        let (read, now) = store.capacity_holders_since(seen).await.unwrap();
        let HoldersRead::Changed(changed) = read else {
            panic!("one change is in the log: {read:?}");
        };
        let ids: Vec<&str> = changed.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, ["b"]);
        assert_eq!(changed[0].1.as_ref().map(|h| h.priority), Some(1));

        // Another store's reader, or one the log no longer reaches, is told everything.
        let other = MemoryStore::new();
        let (read, _) = other.capacity_holders_since(now).await.unwrap();
        assert!(matches!(read, HoldersRead::All(ref all) if all.is_empty()));
        for _ in 0..indexes::HOLDER_LOG / 2 {
            bump(&store, "a").await;
        }
        let (read, _) = store.capacity_holders_since(now).await.unwrap();
        assert!(
            matches!(read, HoldersRead::Changed(ref c) if c.len() == 1),
            "{} changes are still in the log",
            indexes::HOLDER_LOG
        );
        bump(&store, "a").await;
        let (read, _) = store.capacity_holders_since(now).await.unwrap();
        let HoldersRead::All(all) = read else {
            panic!("the log no longer reaches back: {read:?}");
        };
        assert_eq!(all, store.capacity_holders().await.unwrap());
    }
}
