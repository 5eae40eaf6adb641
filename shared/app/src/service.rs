//! The use-cases behind every API operation, over the ports.
//!
//! `Service` is built once per process (or Lambda cold start) and shared behind an `Arc`. The
//! use-cases live in submodules, one per area, each adding methods to `Service`:
//!
//! - `jobs`: submit, describe, list, terminate, update priority, accept submitted jobs,
//!   queue snapshot (`JobStore` and `ConfigStore`; `SchedulingStore` for a job's place in line
//!   and the snapshot).
//! - `environments`, `queues`, `policies`, `quota_shares`: configuration CRUD with Batch's rules.
//! - `tags`: tagging any resource by ARN.
//! - `scheduling`: the cycle, SageMaker state changes, and the periodic pass for due work
//!   (`SchedulingStore`; `ConfigStore` too for the cycle).
//! - `lease`: the scheduler lease (a fencing token for single-writer hosts such as Lambda).

pub mod environments;
pub mod estimates;
pub mod jobs;
pub mod lease;
pub mod policies;
pub mod queues;
pub mod quota_shares;
pub mod scheduling;
pub mod tags;
pub mod why;

use std::sync::Arc;

use trainyard_domain::arn::ArnContext;

use trainyard_domain::job::ServiceJob;

use crate::ports::{Clock, EventSink, Ids};

/// The use-cases, over a store `S` and an event sink `E`.
pub struct Service<S, E> {
    store: S,
    events: E,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn Ids>,
    arns: ArnContext,
    /// The IAM roles a submitted job's payload may name, when the host restricts them.
    training_roles: Option<Arc<[String]>>,
    /// The last cycle's running jobs, for the next one to bring up to date.
    running: std::sync::Mutex<Option<scheduling::RunningSet>>,
}

impl<S, E: EventSink> Service<S, E> {
    /// Builds the service from its adapters.
    pub fn new(
        store: S,
        events: E,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn Ids>,
        arns: ArnContext,
    ) -> Self {
        Self {
            store,
            events,
            clock,
            ids,
            arns,
            training_roles: None,
            running: std::sync::Mutex::default(),
        }
    }

    /// The same service, refusing at submit any job whose `serviceRequestPayload.RoleArn` is not
    /// one of `roles` (a deployment's training roles, the only ones it may pass to SageMaker).
    /// Checked by the submit use-case itself, so no route or encoding of the request skips it.
    pub fn with_training_roles(mut self, roles: Vec<String>) -> Self {
        self.training_roles = Some(roles.into());
        self
    }

    /// The partition, region and account ARNs are minted in.
    pub fn arns(&self) -> &ArnContext {
        &self.arns
    }

    /// The store (for hosts that run maintenance over it).
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The event sink.
    pub fn events(&self) -> &E {
        &self.events
    }

    /// Now, from the injected clock.
    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// A fresh job id.
    pub fn new_job_id(&self) -> String {
        self.ids.job_id()
    }

    /// Publishes the job's new status (the event carries the whole job, so it is built only
    /// when the sink listens).
    async fn publish_status(&self, job: &ServiceJob) {
        if !self.events.listening() {
            return;
        }
        self.events.publish_status(job).await;
    }
}
