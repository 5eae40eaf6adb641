//! Test support: a store that interleaves joined use-cases at every call, and can stall them.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// What a store call waits for first: a future made afresh for each call.
pub type Pause = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// A store that lets other futures run before each of its calls, so that use-cases joined
/// together (`futures::join!`, `tokio::join!`) interleave at every store access — the way two
/// Lambda invocations or two loop tasks would — deterministically. With
/// [`Interleaving::pausing`], each call also waits for a future of the test's making first (a
/// store that stalls, against a deadline).
#[derive(Default)]
pub struct Interleaving<S> {
    inner: S,
    pause: Option<Pause>,
}

impl<S: std::fmt::Debug> std::fmt::Debug for Interleaving<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interleaving")
            .field("inner", &self.inner)
            .field("pauses", &self.pause.is_some())
            .finish()
    }
}

impl<S> Interleaving<S> {
    /// Wraps `inner`.
    pub fn new(inner: S) -> Self {
        Self { inner, pause: None }
    }

    /// Wraps `inner`, each call waiting for `pause()` before it reaches it.
    pub fn pausing(inner: S, pause: Pause) -> Self {
        Self {
            inner,
            pause: Some(pause),
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Before each call: other futures first, then the pause, if any.
    async fn before_call(&self) {
        YieldOnce(false).await;
        if let Some(pause) = &self.pause {
            pause().await;
        }
    }
}

/// Returns `Pending` once (waking itself), so the executor polls other ready futures first.
struct YieldOnce(bool);

impl std::future::Future for YieldOnce {
    type Output = ();
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        if self.0 {
            std::task::Poll::Ready(())
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    }
}

mod interleaving_store {
    use trainyard_domain::job::ServiceJob;

    use super::Interleaving;
    use crate::ports::{
        ClientTokenRecord, ConfigStore, Document, InsertJob, JobQuery, JobStore, Page, Resource,
        SchedulingStore, StoreError, Versioned, Write,
    };

    impl<S: JobStore> JobStore for Interleaving<S> {
        async fn insert_job(
            &self,
            job: &ServiceJob,
            token: Option<&ClientTokenRecord>,
        ) -> Result<InsertJob, StoreError> {
            self.before_call().await;
            self.inner.insert_job(job, token).await
        }
        async fn get_job(&self, job_id: &str) -> Result<Option<Versioned<ServiceJob>>, StoreError> {
            self.before_call().await;
            self.inner.get_job(job_id).await
        }
        async fn update_job(&self, job: &ServiceJob, expected: u64) -> Result<u64, StoreError> {
            self.before_call().await;
            self.inner.update_job(job, expected).await
        }
        async fn list_jobs(
            &self,
            query: &JobQuery,
        ) -> Result<Page<Versioned<ServiceJob>>, StoreError> {
            self.before_call().await;
            self.inner.list_jobs(query).await
        }
    }

    impl<S: ConfigStore> ConfigStore for Interleaving<S> {
        async fn create_resource<R: Resource>(&self, resource: &R) -> Result<(), StoreError> {
            self.before_call().await;
            self.inner.create_resource(resource).await
        }
        async fn get_resource<R: Resource>(
            &self,
            key: &str,
        ) -> Result<Option<Versioned<R>>, StoreError> {
            self.before_call().await;
            self.inner.get_resource(key).await
        }
        async fn list_resources<R: Resource>(&self) -> Result<Vec<Versioned<R>>, StoreError> {
            self.before_call().await;
            self.inner.list_resources().await
        }
        async fn update_resource<R: Resource>(
            &self,
            resource: &R,
            expected_version: u64,
        ) -> Result<u64, StoreError> {
            self.before_call().await;
            self.inner.update_resource(resource, expected_version).await
        }
        async fn delete_resource<R: Resource>(
            &self,
            key: &str,
            expected_version: u64,
        ) -> Result<(), StoreError> {
            self.before_call().await;
            self.inner.delete_resource::<R>(key, expected_version).await
        }
    }

    impl<S: SchedulingStore> SchedulingStore for Interleaving<S> {
        async fn get_document<D: Document>(
            &self,
            key: &str,
        ) -> Result<Option<Versioned<D>>, StoreError> {
            self.before_call().await;
            self.inner.get_document(key).await
        }
        async fn list_documents<D: Document>(&self) -> Result<Vec<Versioned<D>>, StoreError> {
            self.before_call().await;
            self.inner.list_documents().await
        }
        async fn commit(&self, writes: &[Write]) -> Result<(), StoreError> {
            self.before_call().await;
            self.inner.commit(writes).await
        }
        async fn runnable_jobs(
            &self,
            queue: &str,
            share: &str,
            limit: usize,
        ) -> Result<Vec<Versioned<ServiceJob>>, StoreError> {
            self.before_call().await;
            self.inner.runnable_jobs(queue, share, limit).await
        }
        async fn runnable_shares(&self, queue: &str) -> Result<Vec<String>, StoreError> {
            self.before_call().await;
            self.inner.runnable_shares(queue).await
        }
        async fn dispatched_jobs(&self) -> Result<Vec<Versioned<ServiceJob>>, StoreError> {
            self.before_call().await;
            self.inner.dispatched_jobs().await
        }
    }

    impl<S: crate::ports::AuditStore> crate::ports::AuditStore for Interleaving<S> {
        async fn append_audit(&self, record: &crate::ports::AuditRecord) -> Result<(), StoreError> {
            self.before_call().await;
            self.inner.append_audit(record).await
        }
        async fn list_audit(
            &self,
            query: &crate::ports::AuditQuery,
        ) -> Result<crate::ports::AuditPage, StoreError> {
            self.before_call().await;
            self.inner.list_audit(query).await
        }
    }
}
