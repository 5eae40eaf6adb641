//! The initial configuration: one service environment and one job queue feeding it, so that a
//! fresh deployment accepts jobs without an admin call first.
//!
//! **Where:** the `api` function creates it at cold start, before it serves a request. The API
//! is what users reach first (a submit to the default queue needs the queue), and the other
//! functions have nothing to do until a job exists. Many `api` instances may start at once:
//! creating is idempotent (a name already taken is fine) and a marker document records that the
//! setup was done, so a user who deletes the default queue on purpose does not see it come back
//! at the next cold start.

use serde::{Deserialize, Serialize};
use trainyard_app::ports::{Document, Store, StoreError, Write};
use trainyard_domain::environment::{
    CapacityLimit, NUM_INSTANCES, ServiceEnvironment, ServiceEnvironmentType,
};
use trainyard_domain::queue::{JobQueue, JobQueueType, ServiceEnvironmentOrder};
use trainyard_domain::{ResourceStatus, State, Tags};

use crate::config::InitialSetup;

/// Written once the initial setup exists (kind `initial-setup`, key `done`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SetupMarker {
    /// The environment that was created.
    pub environment: String,
    /// The queue that was created.
    pub queue: String,
    /// When (epoch ms).
    pub created_at: i64,
}

impl Document for SetupMarker {
    const KIND: &'static str = "initial-setup";
    fn key(&self) -> String {
        "done".into()
    }
}

/// What [`ensure_initial_setup`] found or did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetupOutcome {
    /// The marker was there: nothing to do.
    AlreadyDone,
    /// This call completed the setup (parts created by a concurrent call are kept).
    Created,
}

/// Creates the initial environment and queue unless the marker says it was done; safe to call
/// from any number of cold starts at once.
pub async fn ensure_initial_setup<S: Store>(
    store: &S,
    setup: &InitialSetup,
    now_ms: i64,
) -> Result<SetupOutcome, StoreError> {
    let marker = SetupMarker {
        environment: setup.environment.clone(),
        queue: setup.queue.clone(),
        created_at: now_ms,
    };
    if store
        .get_document::<SetupMarker>(&marker.key())
        .await?
        .is_some()
    {
        return Ok(SetupOutcome::AlreadyDone);
    }
    let (environment, queue) = initial_resources(setup, now_ms);
    ignore_existing(store.create_resource(&environment).await)?;
    ignore_existing(store.create_resource(&queue).await)?;
    match store.commit(&[Write::document(&marker, 0)?]).await {
        // A concurrent cold start wrote it first: the setup is done either way.
        Ok(()) | Err(StoreError::Conflict) => {}
        Err(e) => return Err(e),
    }
    tracing::info!(
        environment = %setup.environment,
        max_instances = setup.max_instances,
        queue = %setup.queue,
        priority = setup.queue_priority,
        "created the initial service environment and job queue"
    );
    Ok(SetupOutcome::Created)
}

fn ignore_existing(result: Result<(), StoreError>) -> Result<(), StoreError> {
    match result {
        Err(StoreError::AlreadyExists) => Ok(()),
        other => other,
    }
}

/// The environment and queue of `setup`, tagged so that they can be told from admin-made ones.
pub fn initial_resources(setup: &InitialSetup, now_ms: i64) -> (ServiceEnvironment, JobQueue) {
    let tags = Tags::from([("trainyard:initial".to_owned(), "true".to_owned())]);
    let environment = ServiceEnvironment {
        service_environment_name: setup.environment.clone(),
        service_environment_type: ServiceEnvironmentType::SagemakerTraining,
        state: State::Enabled,
        status: ResourceStatus::Valid,
        capacity_limits: vec![CapacityLimit {
            max_capacity: setup.max_instances,
            capacity_unit: NUM_INSTANCES.into(),
        }],
        tags: tags.clone(),
        created_at: now_ms,
    };
    let queue = JobQueue {
        job_queue_name: setup.queue.clone(),
        state: State::Enabled,
        status: ResourceStatus::Valid,
        status_reason: Some("JobQueue Healthy".into()),
        priority: setup.queue_priority,
        scheduling_policy: None,
        service_environment_order: vec![ServiceEnvironmentOrder {
            order: 1,
            service_environment: setup.environment.clone(),
        }],
        job_state_time_limit_actions: Vec::new(),
        job_queue_type: JobQueueType::SagemakerTraining,
        tags,
        created_at: now_ms,
    };
    (environment, queue)
}

#[cfg(test)]
mod tests {
    use trainyard_app::memory::MemoryStore;
    use trainyard_app::ports::ConfigStore;
    use trainyard_app::ports::Versioned;

    use super::*;

    fn setup() -> InitialSetup {
        InitialSetup {
            environment: "gpu".into(),
            max_instances: 8,
            queue: "prod".into(),
            queue_priority: 900,
        }
    }

    #[tokio::test]
    async fn the_setup_is_created_once_and_a_deliberate_deletion_sticks() {
        let store = MemoryStore::new();
        let first = ensure_initial_setup(&store, &setup(), 1).await.unwrap();
        assert_eq!(first, SetupOutcome::Created);
        let queue: Versioned<JobQueue> = store.get_resource("prod").await.unwrap().unwrap();
        assert_eq!(queue.value.priority, 900);
        assert_eq!(
            queue.value.service_environment_order[0].service_environment,
            "gpu"
        );
        let env: Versioned<ServiceEnvironment> = store.get_resource("gpu").await.unwrap().unwrap();
        assert_eq!(env.value.capacity_limits[0].max_capacity, 8);

        store
            .delete_resource::<JobQueue>("prod", queue.version)
            .await
            .unwrap();
        let second = ensure_initial_setup(&store, &setup(), 2).await.unwrap();
        assert_eq!(second, SetupOutcome::AlreadyDone);
        assert!(
            store
                .get_resource::<JobQueue>("prod")
                .await
                .unwrap()
                .is_none(),
            "the deleted queue stays deleted"
        );
    }

    #[tokio::test]
    async fn parts_left_by_an_interrupted_start_are_kept_and_the_rest_completed() {
        let store = MemoryStore::new();
        let (environment, _) = initial_resources(&setup(), 1);
        store.create_resource(&environment).await.unwrap();
        let outcome = ensure_initial_setup(&store, &setup(), 2).await.unwrap();
        assert_eq!(outcome, SetupOutcome::Created);
        assert!(
            store
                .get_resource::<JobQueue>("prod")
                .await
                .unwrap()
                .is_some()
        );
        let env: Versioned<ServiceEnvironment> = store.get_resource("gpu").await.unwrap().unwrap();
        assert_eq!(env.version, 1, "the existing environment was not rewritten");
    }
}
