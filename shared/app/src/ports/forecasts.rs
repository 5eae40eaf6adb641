//! Where a host keeps what its forecaster learnt, so that start estimates stay calibrated across
//! restarts: S3 on AWS (`trainyard_aws::forecasts`), the SQLite file in local mode.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use trainyard_forecast::Learned;

use super::StoreError;

/// A future a [`ForecastMemory`] returns.
pub type MemoryFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// One place for one forecaster's [`Learned`] state; each save replaces the last whole.
pub trait ForecastMemory: Send + Sync {
    /// What was kept, or `None` before anything was.
    fn load(&self) -> MemoryFuture<'_, Option<Learned>>;
    /// Keeps `learned` in place of what was.
    fn save<'a>(&'a self, learned: &'a Learned) -> MemoryFuture<'a, ()>;
}

impl<M: ForecastMemory + ?Sized> ForecastMemory for Arc<M> {
    fn load(&self) -> MemoryFuture<'_, Option<Learned>> {
        (**self).load()
    }

    fn save<'a>(&'a self, learned: &'a Learned) -> MemoryFuture<'a, ()> {
        (**self).save(learned)
    }
}
