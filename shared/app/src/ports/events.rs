//! The events port: what happened, for the parts of the loop that react to it.

use std::future::Future;

use trainyard_domain::job::{JobStatus, ServiceJob};

use super::audit::AuditRecord;

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
    /// A call that asked to change something was decided and ended (boxed: the records are
    /// larger than the job events). Published for audit, on AWS as an EventBridge event.
    Audited(Box<AuditRecord>),
    /// A waiting job's estimated start (p50) moved by more than max(10 minutes, 20% of the wait
    /// it gave), or into or out of the horizon (`None`).
    StartEstimateMoved {
        /// The job.
        job_id: String,
        /// Its queue.
        job_queue: String,
        /// The p50 start before (epoch ms).
        previous_p50_ms: Option<i64>,
        /// The p50 start now (epoch ms).
        p50_ms: Option<i64>,
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

    /// Publishes a job's new status, as stored. The default publishes
    /// [`Event::status_changed`] with a copy of the job; a sink that reads the job in place
    /// overrides it and copies nothing.
    fn publish_status(&self, job: &ServiceJob) -> impl Future<Output = ()> + Send {
        self.publish(Event::status_changed(job.clone()))
    }

    /// Whether published events go anywhere. A sink that drops them all says no, and the
    /// use-cases then skip building them (a status change copies the whole job).
    fn listening(&self) -> bool {
        true
    }

    /// Whether [`Event::Audited`] goes anywhere. Only a sink that publishes beyond the process
    /// (EventBridge) says yes: in-process listeners drive the loop and have no use for audit
    /// records, which would only crowd their channel.
    fn publishes_audit(&self) -> bool {
        false
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
