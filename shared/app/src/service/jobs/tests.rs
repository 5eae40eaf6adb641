//! Tests of the job use-cases.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::snapshot::ranked;
use super::submit::request_hash;
use super::*;
use crate::memory::MemoryStore;
use crate::ports::{Document, NoEvents, Resource, Write};
use crate::ports::{ManualClock, SequentialIds};
use trainyard_domain::arn::ArnContext;
use trainyard_domain::payload::TrainingRequest;

/// The memory store, except that the next `conflicts` job updates fail as if another writer
/// got there first.
#[derive(Default)]
struct RacingStore {
    inner: MemoryStore,
    conflicts: AtomicUsize,
}

impl JobStore for RacingStore {
    fn insert_job(
        &self,
        job: &ServiceJob,
        token: Option<&ClientTokenRecord>,
    ) -> impl Future<Output = Result<InsertJob, StoreError>> + Send {
        self.inner.insert_job(job, token)
    }

    fn get_job(
        &self,
        job_id: &str,
    ) -> impl Future<Output = Result<Option<Versioned<ServiceJob>>, StoreError>> + Send {
        self.inner.get_job(job_id)
    }

    async fn update_job(&self, job: &ServiceJob, expected: u64) -> Result<u64, StoreError> {
        let injected = self
            .conflicts
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if injected.is_ok() {
            return Err(StoreError::Conflict);
        }
        self.inner.update_job(job, expected).await
    }

    fn list_jobs(
        &self,
        query: &JobQuery,
    ) -> impl Future<Output = Result<Page<Versioned<ServiceJob>>, StoreError>> + Send {
        self.inner.list_jobs(query)
    }
}

impl ConfigStore for RacingStore {
    fn create_resource<R: Resource>(
        &self,
        resource: &R,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.inner.create_resource(resource)
    }

    fn get_resource<R: Resource>(
        &self,
        key: &str,
    ) -> impl Future<Output = Result<Option<Versioned<R>>, StoreError>> + Send {
        self.inner.get_resource(key)
    }

    fn list_resources<R: Resource>(
        &self,
    ) -> impl Future<Output = Result<Vec<Versioned<R>>, StoreError>> + Send {
        self.inner.list_resources()
    }

    fn update_resource<R: Resource>(
        &self,
        resource: &R,
        expected_version: u64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send {
        self.inner.update_resource(resource, expected_version)
    }

    fn delete_resource<R: Resource>(
        &self,
        key: &str,
        expected_version: u64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.inner.delete_resource::<R>(key, expected_version)
    }
}

impl crate::ports::AuditStore for RacingStore {
    fn append_audit(
        &self,
        record: &crate::ports::AuditRecord,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.inner.append_audit(record)
    }
    fn list_audit(
        &self,
        query: &crate::ports::AuditQuery,
    ) -> impl Future<Output = Result<crate::ports::AuditPage, StoreError>> + Send {
        self.inner.list_audit(query)
    }
}

impl SchedulingStore for RacingStore {
    fn get_document<D: Document>(
        &self,
        key: &str,
    ) -> impl Future<Output = Result<Option<Versioned<D>>, StoreError>> + Send {
        self.inner.get_document(key)
    }

    fn list_documents<D: Document>(
        &self,
    ) -> impl Future<Output = Result<Vec<Versioned<D>>, StoreError>> + Send {
        self.inner.list_documents()
    }

    fn commit(&self, writes: &[Write]) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.inner.commit(writes)
    }

    fn runnable_jobs(
        &self,
        queue: &str,
        share: &str,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<Versioned<ServiceJob>>, StoreError>> + Send {
        self.inner.runnable_jobs(queue, share, limit)
    }

    fn runnable_shares(
        &self,
        queue: &str,
    ) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send {
        self.inner.runnable_shares(queue)
    }

    fn dispatched_jobs(
        &self,
    ) -> impl Future<Output = Result<Vec<Versioned<ServiceJob>>, StoreError>> + Send {
        self.inner.dispatched_jobs()
    }
}

async fn racing_service(status: JobStatus, conflicts: usize) -> Service<RacingStore, NoEvents> {
    let service = Service::new(
        RacingStore::default(),
        NoEvents,
        Arc::new(ManualClock::new(1_000)),
        Arc::new(SequentialIds::default()),
        ArnContext::default(),
    );
    let mut stored = job("j", None, 10, None);
    stored.status = status;
    service.store.insert_job(&stored, None).await.unwrap();
    service.store.conflicts.store(conflicts, Ordering::SeqCst);
    service
}

#[tokio::test]
async fn terminate_and_update_retry_lost_races_and_then_give_up() {
    // (case, conflicts injected, succeeds)
    let cases = [
        ("no race", 0, true),
        ("one lost race is retried", 1, true),
        ("four lost races in a row are retried", 4, true),
        ("five lost races give up", 5, false),
    ];
    for (case, conflicts, succeeds) in cases {
        let service = racing_service(JobStatus::Runnable, conflicts).await;
        let result = service.terminate_job("j", "stop").await;
        assert_eq!(result.is_ok(), succeeds, "{case}: {result:?}");
        if let Err(e) = result {
            assert!(
                !e.is_client_error(),
                "{case}: a lost race is the server's problem"
            );
        }
        let job = service.describe_job("j").await.unwrap();
        assert_eq!(job.status == JobStatus::Failed, succeeds, "{case}");
        assert_eq!(job.is_terminated, succeeds, "{case}");

        let service = racing_service(JobStatus::Runnable, conflicts).await;
        let result = service.update_priority("j", 7).await;
        assert_eq!(result.is_ok(), succeeds, "{case}: {result:?}");
        let job = service.describe_job("j").await.unwrap();
        assert_eq!(job.scheduling_priority == Some(7), succeeds, "{case}");
    }
}

#[tokio::test]
async fn accepting_skips_a_job_someone_else_just_changed() {
    let service = racing_service(JobStatus::Submitted, 1).await;
    // The job's queue "q" does not exist either way; what matters is the conflict.
    assert_eq!(service.accept_submitted(10, 0).await.unwrap(), 0);
    assert_eq!(
        service.describe_job("j").await.unwrap().status,
        JobStatus::Submitted
    );
    assert_eq!(service.accept_submitted(10, 0).await.unwrap(), 1);
    let job = service.describe_job("j").await.unwrap();
    assert_eq!(job.status, JobStatus::Failed);
    assert!(job.status_reason.unwrap().contains("no longer exists"));
}

fn job(id: &str, priority: Option<u32>, created_at: i64, runnable_at: Option<i64>) -> ServiceJob {
    ServiceJob {
        scheduling_priority: priority,
        status: JobStatus::Runnable,
        runnable_at,
        ..ServiceJob::submitted(
            id.into(),
            id.into(),
            "q".into(),
            "{}",
            TrainingRequest::single("t", "ml.g5.xlarge", 1),
            created_at,
        )
    }
}

/// The jobs' ids in line, submitted to a queue of `ordering` (so with a share, or not).
fn order(ordering: QueueOrdering, mut jobs: Vec<ServiceJob>) -> Vec<String> {
    for job in &mut jobs {
        match ordering {
            QueueOrdering::Fifo => {}
            QueueOrdering::FairShare => job.share_identifier = Some("s".into()),
            QueueOrdering::QuotaShare => job.quota_share_name = Some("s".into()),
        }
    }
    jobs.sort_by(|a, b| runnable_rank(a).cmp(&runnable_rank(b)));
    jobs.into_iter().map(|j| j.job_id).collect()
}

#[test]
fn fifo_ignores_priority_and_breaks_ties_on_the_id() {
    let jobs = vec![
        job("c", Some(9), 30, Some(30)),
        job("b", None, 10, Some(20)),
        job("a", None, 10, Some(20)),
        job("d", None, 5, None),
    ];
    assert_eq!(order(QueueOrdering::Fifo, jobs), ["d", "a", "b", "c"]);
}

#[test]
fn jobs_accepted_in_one_batch_keep_their_submission_order() {
    // Ids that sort against submission order, all accepted at the same instant.
    let jobs: Vec<ServiceJob> = ["z", "y", "x"]
        .into_iter()
        .zip([10, 20, 30])
        .map(|(id, created_at)| {
            let mut j = job(id, None, created_at, None);
            j.status = JobStatus::Submitted;
            j.transition(JobStatus::Runnable, None, 500).unwrap();
            j
        })
        .collect();
    assert_eq!(order(QueueOrdering::Fifo, jobs), ["z", "y", "x"]);
}

#[test]
fn policy_queues_put_higher_priority_first_then_age() {
    let jobs = vec![
        job("old-low", Some(1), 10, Some(10)),
        job("new-high", Some(50), 40, Some(40)),
        job("old-high", Some(50), 20, Some(20)),
        job("unset", None, 0, Some(0)),
    ];
    for ordering in [QueueOrdering::FairShare, QueueOrdering::QuotaShare] {
        assert_eq!(
            order(ordering, jobs.clone()),
            ["old-high", "new-high", "old-low", "unset"]
        );
    }
}

#[tokio::test]
async fn the_front_read_from_each_shares_head_equals_sorting_the_whole_backlog() {
    let service = Service::new(
        MemoryStore::default(),
        NoEvents,
        Arc::new(ManualClock::new(1_000)),
        Arc::new(SequentialIds::default()),
        ArnContext::default(),
    );
    // 600 RUNNABLE jobs in a fair-share queue over 4 shares, and the same 600 without shares
    // in a FIFO queue, with repeated priorities and times so that ties are broken by the id;
    // more than `limit` in every share.
    let mut shared = Vec::new();
    let mut fifo = Vec::new();
    for i in 0..600_i64 {
        let mut j = job(
            &format!("job-{:03}", (i * 37) % 600),
            Some(u32::try_from(i % 3).unwrap()),
            i / 7,
            Some(i / 5),
        );
        let mut plain = j.clone();
        plain.job_queue = "fifo".into();
        plain.job_id = format!("fifo-{}", j.job_id);
        j.share_identifier = Some(["a", "b", "c", "d"][(i % 4) as usize].to_owned());
        for j in [&j, &plain] {
            service.store.insert_job(j, None).await.unwrap();
        }
        shared.push(j);
        fifo.push(plain);
    }
    for (queue, ordering, limit, all) in [
        ("q", QueueOrdering::FairShare, 100, &shared),
        ("q", QueueOrdering::FairShare, 7, &shared),
        ("fifo", QueueOrdering::Fifo, 100, &fifo),
    ] {
        let front = service
            .front_runnable(queue, ordering, limit)
            .await
            .unwrap();
        let got: Vec<String> = front.iter().take(limit).map(|j| j.job_id.clone()).collect();
        let mut want = order(ordering, all.clone());
        want.truncate(limit);
        assert_eq!(got, want, "{ordering:?}, limit {limit}");
        if ordering == QueueOrdering::FairShare {
            // Every share's first job is in what was read.
            let shares: std::collections::BTreeSet<Option<String>> =
                front.iter().map(|j| j.share_identifier.clone()).collect();
            assert_eq!(shares.len(), 4, "{ordering:?}, limit {limit}");
        }
    }
}

#[test]
fn ranking_is_by_total_instances_then_name() {
    let usage = |n: u64| CapacityUsage::from([("ml.g5.xlarge".to_owned(), n)]);
    let groups = BTreeMap::from([
        ("b".to_owned(), usage(2)),
        ("a".to_owned(), usage(2)),
        ("c".to_owned(), usage(5)),
    ]);
    let names: Vec<String> = ranked(groups).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["c", "a", "b"]);
}

#[test]
fn the_request_hash_ignores_the_token_but_not_the_request() {
    let cmd = SubmitJob {
        job_name: "j".into(),
        job_queue: "q".into(),
        service_job_type: ServiceJobType::SagemakerTraining,
        service_request_payload: "{}".into(),
        share_identifier: None,
        quota_share_name: None,
        scheduling_priority: None,
        retry_strategy: None,
        timeout_config: None,
        preemption_configuration: None,
        tags: Tags::new(),
        client_token: Some("t1".into()),
    };
    let other_token = SubmitJob {
        client_token: Some("t2".into()),
        job_queue: "arn-or-name".into(),
        ..cmd.clone()
    };
    assert_eq!(request_hash("q", &cmd), request_hash("q", &other_token));
    let other_priority = SubmitJob {
        scheduling_priority: Some(1),
        ..cmd.clone()
    };
    assert_ne!(request_hash("q", &cmd), request_hash("q", &other_priority));
    assert_ne!(request_hash("q", &cmd), request_hash("other", &cmd));
    assert_eq!(request_hash("q", &cmd).len(), 64);
}
