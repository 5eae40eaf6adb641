//! A shared store is a store: several services (or hosts in one process) can use one.

use std::sync::Arc;

use trainyard_domain::job::ServiceJob;

use crate::ports::audit::{AuditPage, AuditQuery, AuditRecord, AuditStore};

use super::{
    CapacityHolder, ClientTokenRecord, ConfigStore, Document, HoldersRead, HoldersSeen, InsertJob,
    JobQuery, JobStore, Page, Resource, RunnableHead, SchedulingStore, StoreError, Versioned,
    Write,
};

impl<S: JobStore> JobStore for Arc<S> {
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
    async fn list_jobs(&self, query: &JobQuery) -> Result<Page<Versioned<ServiceJob>>, StoreError> {
        (**self).list_jobs(query).await
    }
}

impl<S: ConfigStore> ConfigStore for Arc<S> {
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
}

impl<S: SchedulingStore> SchedulingStore for Arc<S> {
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
    async fn holding_shares(&self, queue: &str) -> Result<Vec<String>, StoreError> {
        (**self).holding_shares(queue).await
    }
    async fn dispatched_jobs(&self) -> Result<Vec<Versioned<ServiceJob>>, StoreError> {
        (**self).dispatched_jobs().await
    }
    async fn capacity_holders(&self) -> Result<Vec<CapacityHolder>, StoreError> {
        (**self).capacity_holders().await
    }
    async fn capacity_holders_since(
        &self,
        seen: Option<HoldersSeen>,
    ) -> Result<(HoldersRead, Option<HoldersSeen>), StoreError> {
        (**self).capacity_holders_since(seen).await
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

impl<S: AuditStore> AuditStore for Arc<S> {
    async fn append_audit(&self, record: &AuditRecord) -> Result<(), StoreError> {
        (**self).append_audit(record).await
    }
    async fn list_audit(&self, query: &AuditQuery) -> Result<AuditPage, StoreError> {
        (**self).list_audit(query).await
    }
}
