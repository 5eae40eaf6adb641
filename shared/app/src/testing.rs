//! Deterministic stand-ins for the clock and id ports, for tests and the simulator, and (with
//! the `emulator` feature) for the training backend.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use crate::ports::{Clock, Ids};

/// A clock that moves only when told to.
#[derive(Debug)]
pub struct ManualClock {
    now_ms: AtomicI64,
}

impl ManualClock {
    /// A clock reading `start_ms`.
    pub fn new(start_ms: i64) -> Self {
        Self {
            now_ms: AtomicI64::new(start_ms),
        }
    }

    /// Moves the clock forward by `ms`.
    pub fn advance(&self, ms: i64) {
        self.now_ms.fetch_add(ms, Ordering::SeqCst);
    }

    /// Sets the clock.
    pub fn set(&self, ms: i64) {
        self.now_ms.store(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.now_ms.load(Ordering::SeqCst)
    }
}

/// Ids that count up, formatted as UUIDs (`00000000-0000-4000-8000-000000000001`, …) so that
/// they sort in creation order and look like what clients expect.
#[derive(Debug, Default)]
pub struct SequentialIds {
    next: AtomicU64,
}

impl Ids for SequentialIds {
    fn job_id(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::SeqCst) + 1;
        format!("00000000-0000-4000-8000-{n:012x}")
    }
}

/// A store that lets other futures run before each of its calls, so that use-cases joined
/// together (`futures::join!`, `tokio::join!`) interleave at every store access — the way two
/// Lambda invocations or two loop tasks would — deterministically.
#[derive(Debug, Default)]
pub struct Interleaving<S> {
    inner: S,
}

impl<S> Interleaving<S> {
    /// Wraps `inner`.
    pub fn new(inner: S) -> Self {
        Self { inner }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
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

    use super::{Interleaving, YieldOnce};
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
            YieldOnce(false).await;
            self.inner.insert_job(job, token).await
        }
        async fn get_job(&self, job_id: &str) -> Result<Option<Versioned<ServiceJob>>, StoreError> {
            YieldOnce(false).await;
            self.inner.get_job(job_id).await
        }
        async fn update_job(&self, job: &ServiceJob, expected: u64) -> Result<u64, StoreError> {
            YieldOnce(false).await;
            self.inner.update_job(job, expected).await
        }
        async fn list_jobs(
            &self,
            query: &JobQuery,
        ) -> Result<Page<Versioned<ServiceJob>>, StoreError> {
            YieldOnce(false).await;
            self.inner.list_jobs(query).await
        }
    }

    impl<S: ConfigStore> ConfigStore for Interleaving<S> {
        async fn create_resource<R: Resource>(&self, resource: &R) -> Result<(), StoreError> {
            YieldOnce(false).await;
            self.inner.create_resource(resource).await
        }
        async fn get_resource<R: Resource>(
            &self,
            key: &str,
        ) -> Result<Option<Versioned<R>>, StoreError> {
            YieldOnce(false).await;
            self.inner.get_resource(key).await
        }
        async fn list_resources<R: Resource>(&self) -> Result<Vec<Versioned<R>>, StoreError> {
            YieldOnce(false).await;
            self.inner.list_resources().await
        }
        async fn update_resource<R: Resource>(
            &self,
            resource: &R,
            expected_version: u64,
        ) -> Result<u64, StoreError> {
            YieldOnce(false).await;
            self.inner.update_resource(resource, expected_version).await
        }
        async fn delete_resource<R: Resource>(
            &self,
            key: &str,
            expected_version: u64,
        ) -> Result<(), StoreError> {
            YieldOnce(false).await;
            self.inner.delete_resource::<R>(key, expected_version).await
        }
    }

    impl<S: SchedulingStore> SchedulingStore for Interleaving<S> {
        async fn get_document<D: Document>(
            &self,
            key: &str,
        ) -> Result<Option<Versioned<D>>, StoreError> {
            YieldOnce(false).await;
            self.inner.get_document(key).await
        }
        async fn list_documents<D: Document>(&self) -> Result<Vec<Versioned<D>>, StoreError> {
            YieldOnce(false).await;
            self.inner.list_documents().await
        }
        async fn commit(&self, writes: &[Write]) -> Result<(), StoreError> {
            YieldOnce(false).await;
            self.inner.commit(writes).await
        }
        async fn runnable_jobs(
            &self,
            queue: &str,
            share: &str,
            limit: usize,
        ) -> Result<Vec<Versioned<ServiceJob>>, StoreError> {
            YieldOnce(false).await;
            self.inner.runnable_jobs(queue, share, limit).await
        }
        async fn runnable_shares(&self, queue: &str) -> Result<Vec<String>, StoreError> {
            YieldOnce(false).await;
            self.inner.runnable_shares(queue).await
        }
        async fn dispatched_jobs(&self) -> Result<Vec<Versioned<ServiceJob>>, StoreError> {
            YieldOnce(false).await;
            self.inner.dispatched_jobs().await
        }
    }
}

#[cfg(feature = "emulator")]
pub use emulated::EmulatedSageMaker;

#[cfg(feature = "emulator")]
mod emulated {
    use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

    use serde_json::Value;
    use trainyard_emulator::model::{Config, Emulator, SageMakerError, TimeFormat};

    use super::ManualClock;
    use crate::ports::{BackendError, Clock, TrainingBackend, TrainingJobState};

    /// The emulator's model as a [`TrainingBackend`], on a test's [`ManualClock`]: training jobs
    /// move through their phases as the clock is advanced.
    #[derive(Clone)]
    pub struct EmulatedSageMaker {
        /// The model, for tests that look inside or steer it.
        pub emulator: Arc<Mutex<Emulator>>,
        /// The clock every call reads.
        pub clock: Arc<ManualClock>,
    }

    impl EmulatedSageMaker {
        /// A backend over a fresh model with `config`, on `clock`.
        pub fn new(config: Config, clock: Arc<ManualClock>) -> Self {
            Self {
                emulator: Arc::new(Mutex::new(Emulator::new(config))),
                clock,
            }
        }

        fn model(&self) -> MutexGuard<'_, Emulator> {
            self.emulator.lock().unwrap_or_else(PoisonError::into_inner)
        }
    }

    fn classify(e: SageMakerError) -> BackendError {
        BackendError::from_sagemaker(e.code(), e.to_string())
    }

    impl TrainingBackend for EmulatedSageMaker {
        async fn create_training_job(&self, request: Value) -> Result<String, BackendError> {
            let now = self.clock.now_ms();
            self.model()
                .create_training_job(&request, now)
                .map_err(classify)
        }

        async fn describe_training_job(
            &self,
            name: &str,
        ) -> Result<TrainingJobState, BackendError> {
            let mut emulator = self.model();
            emulator.advance(self.clock.now_ms());
            let detail = emulator
                .describe_training_job(name, TimeFormat::EpochMillis)
                .map_err(classify)?;
            TrainingJobState::from_sagemaker(&detail).ok_or_else(|| {
                BackendError::Unavailable(format!("the emulator described {name} without a state"))
            })
        }

        async fn stop_training_job(&self, name: &str) -> Result<(), BackendError> {
            let now = self.clock.now_ms();
            match self.model().stop_training_job(name, now) {
                // Already finished or stopping: nothing to do.
                Err(SageMakerError::ValidationException(_)) => Ok(()),
                other => other.map_err(classify),
            }
        }
    }
}
