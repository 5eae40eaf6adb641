//! The in-memory store: the reference implementation of [`Store`], for unit tests and the
//! simulator. One mutex over ordered maps; every method is one atomic step.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use trainyard_domain::arn::ResourceKind;
use trainyard_domain::job::ServiceJob;

use crate::ports::{
    ClientTokenRecord, Document, InsertJob, JobCursor, JobQuery, NameFilter, Page, Resource,
    RunnableOrder, Store, StoreError, Versioned, Write, share_key,
};
use trainyard_domain::job::JobStatus;

#[derive(Default)]
struct Inner {
    jobs: BTreeMap<String, Versioned<ServiceJob>>,
    tokens: BTreeMap<String, ClientTokenRecord>,
    /// (kind, key) → (version, JSON document), as a real store keeps it.
    resources: BTreeMap<(ResourceKind, String), (u64, serde_json::Value)>,
    /// (kind, key) → (version, JSON document): scheduler state.
    documents: BTreeMap<(&'static str, String), (u64, serde_json::Value)>,
}

/// A [`Store`] in process memory.
#[derive(Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
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

fn corrupt(key: String, e: serde_json::Error) -> StoreError {
    StoreError::Corrupt {
        key,
        message: e.to_string(),
    }
}

impl Store for MemoryStore {
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
        match inner.jobs.get_mut(&job.job_id) {
            Some(stored) if stored.version == expected_version => {
                stored.value = job.clone();
                stored.version += 1;
                Ok(stored.version)
            }
            _ => Err(StoreError::Conflict),
        }
    }

    async fn list_jobs(&self, query: &JobQuery) -> Result<Page<Versioned<ServiceJob>>, StoreError> {
        let inner = self.lock();
        let mut matching: Vec<&Versioned<ServiceJob>> = inner
            .jobs
            .values()
            .filter(|v| job_matches(&v.value, query))
            .filter(|v| match &query.after {
                None => true,
                Some(c) => {
                    (v.value.created_at, v.value.job_id.as_str())
                        < (c.created_at, c.job_id.as_str())
                }
            })
            .collect();
        matching.sort_by(|a, b| {
            (b.value.created_at, &b.value.job_id).cmp(&(a.value.created_at, &a.value.job_id))
        });
        let limit = query.limit.max(1);
        let more = matching.len() > limit;
        let items: Vec<_> = matching.into_iter().take(limit).cloned().collect();
        let next = match (more, items.last()) {
            (true, Some(last)) => Some(JobCursor {
                created_at: last.value.created_at,
                job_id: last.value.job_id.clone(),
            }),
            _ => None,
        };
        Ok(Page { items, next })
    }

    async fn create_resource<R: Resource>(&self, resource: &R) -> Result<(), StoreError> {
        let key = (R::KIND, resource.key());
        let doc = serde_json::to_value(resource).map_err(|e| corrupt(key.1.clone(), e))?;
        let mut inner = self.lock();
        if inner.resources.contains_key(&key) {
            return Err(StoreError::AlreadyExists);
        }
        inner.resources.insert(key, (1, doc));
        Ok(())
    }

    async fn get_resource<R: Resource>(
        &self,
        key: &str,
    ) -> Result<Option<Versioned<R>>, StoreError> {
        let inner = self.lock();
        match inner.resources.get(&(R::KIND, key.to_owned())) {
            None => Ok(None),
            Some((version, doc)) => {
                let value = R::deserialize(doc).map_err(|e| corrupt(key.to_owned(), e))?;
                Ok(Some(Versioned {
                    value,
                    version: *version,
                }))
            }
        }
    }

    async fn list_resources<R: Resource>(&self) -> Result<Vec<Versioned<R>>, StoreError> {
        let inner = self.lock();
        inner
            .resources
            .iter()
            .filter(|((kind, _), _)| *kind == R::KIND)
            .map(|((_, key), (version, doc))| {
                let value = R::deserialize(doc).map_err(|e| corrupt(key.clone(), e))?;
                Ok(Versioned {
                    value,
                    version: *version,
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
            Some((version, stored)) if *version == expected_version => {
                *version += 1;
                *stored = doc;
                Ok(*version)
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
            Some((version, _)) if *version == expected_version => {
                inner.resources.remove(&key);
                Ok(())
            }
            _ => Err(StoreError::Conflict),
        }
    }

    async fn get_document<D: Document>(
        &self,
        key: &str,
    ) -> Result<Option<Versioned<D>>, StoreError> {
        let inner = self.lock();
        match inner.documents.get(&(D::KIND, key.to_owned())) {
            None => Ok(None),
            Some((version, doc)) => {
                let value = D::deserialize(doc).map_err(|e| corrupt(key.to_owned(), e))?;
                Ok(Some(Versioned {
                    value,
                    version: *version,
                }))
            }
        }
    }

    async fn list_documents<D: Document>(&self) -> Result<Vec<Versioned<D>>, StoreError> {
        let inner = self.lock();
        inner
            .documents
            .iter()
            .filter(|((kind, _), _)| *kind == D::KIND)
            .map(|((_, key), (version, doc))| {
                let value = D::deserialize(doc).map_err(|e| corrupt(key.clone(), e))?;
                Ok(Versioned {
                    value,
                    version: *version,
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
                } => {
                    let stored = inner
                        .documents
                        .get(&(*kind, key.clone()))
                        .map_or(0, |d| d.0);
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
                    if let Some(stored) = inner.jobs.get_mut(&job.job_id) {
                        stored.value = (**job).clone();
                        stored.version += 1;
                    }
                }
                Write::Document {
                    kind,
                    key,
                    doc,
                    expected_version,
                } => {
                    inner
                        .documents
                        .insert((*kind, key.clone()), (expected_version + 1, doc.clone()));
                }
            }
        }
        Ok(())
    }

    async fn runnable_jobs(
        &self,
        queue: &str,
        share: Option<&str>,
        order: RunnableOrder,
        limit: usize,
    ) -> Result<Vec<Versioned<ServiceJob>>, StoreError> {
        let inner = self.lock();
        let mut jobs: Vec<&Versioned<ServiceJob>> = inner
            .jobs
            .values()
            .filter(|v| v.value.status == JobStatus::Runnable && v.value.job_queue == queue)
            .filter(|v| share.is_none_or(|s| share_key(&v.value) == s))
            .collect();
        jobs.sort_by_key(|v| runnable_order(order, &v.value));
        Ok(jobs.into_iter().take(limit).cloned().collect())
    }

    async fn runnable_shares(&self, queue: &str) -> Result<Vec<String>, StoreError> {
        let inner = self.lock();
        let shares: std::collections::BTreeSet<String> = inner
            .jobs
            .values()
            .filter(|v| v.value.status == JobStatus::Runnable && v.value.job_queue == queue)
            .map(|v| share_key(&v.value).to_owned())
            .collect();
        Ok(shares.into_iter().collect())
    }

    async fn dispatched_jobs(&self) -> Result<Vec<Versioned<ServiceJob>>, StoreError> {
        let inner = self.lock();
        Ok(inner
            .jobs
            .values()
            .filter(|v| v.value.status.is_dispatched())
            .cloned()
            .collect())
    }
}

/// The sort key of [`RunnableOrder`]: total, ending on the job id.
pub fn runnable_order(
    order: RunnableOrder,
    job: &ServiceJob,
) -> (std::cmp::Reverse<u32>, i64, String) {
    let priority = match order {
        RunnableOrder::Fifo => 0,
        RunnableOrder::Priority => job.priority(),
    };
    (
        std::cmp::Reverse(priority),
        job.runnable_at.unwrap_or(job.created_at),
        job.job_id.clone(),
    )
}
