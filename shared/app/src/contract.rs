//! The store contract suite: the behaviours every [`Store`] implementation must show, as
//! documented on the trait in [`crate::ports`]. One suite, run against every adapter, is what
//! lets the use-cases trust any store the same way.
//!
//! # Use
//!
//! In an adapter's integration test (with `trainyard-app`'s `contract` feature and `tokio`):
//!
//! ```text
//! trainyard_app::store_contract_tests!(|_case: &'static str| MemoryStore::new());
//! ```
//!
//! The macro expands to one `#[tokio::test]` per case, each given a fresh store from the
//! factory (which receives the case's name, e.g. to name a database file). [`run_all`] runs
//! every case in sequence, for callers that want one test.
//!
//! Cases take `&S` and panic on a broken contract, with a message naming what broke.

// Test support: a broken contract should fail loudly at the line that found it, which is what
// `unwrap`/`expect` do.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use trainyard_domain::environment::{CapacityLimit, ServiceEnvironment, ServiceEnvironmentType};
use trainyard_domain::job::{JobStatus, ServiceJob};
use trainyard_domain::payload::TrainingRequest;
use trainyard_domain::policy::SchedulingPolicy;
use trainyard_domain::queue::{JobQueue, JobQueueType, ServiceEnvironmentOrder};
use trainyard_domain::quota_share::{
    QuotaShare, QuotaShareCapacityLimit, QuotaSharePreemptionConfiguration,
    ResourceSharingConfiguration, SharingStrategy,
};
use trainyard_domain::{ResourceStatus, State, Tags};

use crate::ports::{
    AuditCursor, AuditQuery, AuditRecord, CapacityHolder, CapacityRelease, ClientTokenRecord,
    Document, EnvironmentUsage, Fence, HoldersRead, InsertJob, JobCursor, JobQuery, NameFilter,
    Resource, RunnableHead, ShareUsageRecord, Store, StoreError, Versioned, Write, quota_share_key,
};

/// Defines, from one list of cases, both the exported `store_contract_tests!` and [`run_all`],
/// so the two can never disagree. `$d` is a literal `$`, passed in so that the inner macro can
/// have metavariables of its own.
macro_rules! contract_cases {
    ($d:tt; $($case:ident),* $(,)?) => {
        /// Expands to one `#[tokio::test]` per contract case. The argument is a factory
        /// `FnMut(&'static str) -> S` called once per case with the case's name.
        #[macro_export]
        macro_rules! store_contract_tests {
            ($d fresh:expr) => {
                $(
                    #[::tokio::test]
                    async fn $case() {
                        #[allow(unused_mut)]
                        let mut fresh = $d fresh;
                        let store = fresh(stringify!($case));
                        $crate::contract::$case(&store).await;
                    }
                )*
            };
        }

        /// Runs every case in sequence, each on a fresh store from `fresh`.
        pub async fn run_all<S: Store, F: FnMut(&'static str) -> S>(mut fresh: F) {
            $( $case(&fresh(stringify!($case))).await; )*
        }
    };
}

contract_cases!($;
    inserted_job_reads_back_at_version_1,
    unknown_job_reads_as_none,
    taken_job_id_is_already_exists_and_keeps_the_original,
    client_token_is_recorded_with_its_job,
    reused_client_token_returns_the_first_record_and_writes_nothing,
    insert_refused_for_a_taken_id_records_no_token,
    update_with_current_version_bumps_it,
    update_with_stale_version_conflicts_and_writes_nothing,
    update_of_unknown_job_conflicts,
    list_filters_match_every_set_field,
    list_reflects_updated_status_and_version,
    list_is_newest_first_with_job_id_breaking_ties,
    list_of_empty_store_is_one_empty_last_page,
    pages_cover_every_job_once_at_limit_100,
    pages_cover_every_job_once_at_limit_7,
    filtered_pages_cover_every_matching_job_once,
    exactly_full_last_page_has_no_next,
    resource_created_reads_back_at_version_1,
    taken_resource_key_is_already_exists,
    resources_list_by_key_and_only_their_kind,
    resource_update_checks_and_bumps_version,
    resource_delete_checks_version,
    quota_shares_are_keyed_by_queue_and_name,
    commit_applies_every_write_or_none,
    documents_are_created_at_version_1_and_checked,
    a_release_is_folded_by_deleting_it_with_the_usage_write,
    runnable_jobs_come_in_dispatch_order,
    a_line_offset_moves_a_job_back_in_its_line,
    runnable_shares_and_dispatched_jobs_follow_status,
    capacity_holders_summarise_the_dispatched_jobs,
    holders_since_bring_a_reader_up_to_date,
    runnable_heads_summarise_the_runnable_jobs,
    a_status_reason_is_set_alone_and_version_checked,
    audit_pages_cover_every_record_once_newest_first_across_days,
    audit_filters_match_every_set_field,
    expired_audit_records_are_left_out,
);

// ---------------------------------------------------------------------------------------------
// Builders
// ---------------------------------------------------------------------------------------------

/// A valid job to insert: RUNNABLE in queue `q`, created at `1_000`, named after its id. Change
/// what a case cares about with the builder's methods.
pub fn job(job_id: &str) -> JobBuilder {
    JobBuilder(ServiceJob {
        status: JobStatus::Runnable,
        runnable_at: Some(1_000),
        ..ServiceJob::submitted(
            job_id.to_owned(),
            format!("job-{job_id}"),
            "q".to_owned(),
            r#"{"TrainingJobName":"t"}"#.to_owned(),
            TrainingRequest::single("t", "ml.m5.large", 1),
            1_000,
        )
    })
}

/// Builds a [`ServiceJob`] for tests; see [`job`].
#[derive(Debug, Clone)]
pub struct JobBuilder(ServiceJob);

impl JobBuilder {
    /// Sets `jobName`.
    pub fn name(mut self, name: &str) -> Self {
        self.0.job_name = name.to_owned();
        self
    }
    /// Sets the queue.
    pub fn queue(mut self, queue: &str) -> Self {
        self.0.job_queue = queue.to_owned();
        self
    }
    /// Sets the status.
    pub fn status(mut self, status: JobStatus) -> Self {
        self.0.status = status;
        self
    }
    /// Sets the fair-share share identifier.
    pub fn share(mut self, share: &str) -> Self {
        self.0.share_identifier = Some(share.to_owned());
        self
    }
    /// Sets the quota share.
    pub fn quota_share(mut self, quota_share: &str) -> Self {
        self.0.quota_share_name = Some(quota_share.to_owned());
        self
    }
    /// Sets `schedulingPriority`.
    pub fn priority(mut self, priority: u32) -> Self {
        self.0.scheduling_priority = Some(priority);
        self
    }
    /// Sets when the job became RUNNABLE.
    pub fn runnable_at(mut self, ms: i64) -> Self {
        self.0.runnable_at = Some(ms);
        self
    }
    /// Sets how much later than its runnable time the job stands in line.
    pub fn line_offset(mut self, ms: i64) -> Self {
        self.0.line_offset_ms = ms;
        self
    }
    /// Sets the creation (and last update) time.
    pub fn created_at(mut self, ms: i64) -> Self {
        self.0.created_at = ms;
        self.0.updated_at = ms;
        self
    }
    /// Sets the client token carried on the job.
    pub fn client_token(mut self, token: &str) -> Self {
        self.0.client_token = Some(token.to_owned());
        self
    }
    /// The job.
    pub fn build(self) -> ServiceJob {
        self.0
    }
}

/// A token record for `job_id`.
pub fn token(token: &str, request_hash: &str, job_id: &str) -> ClientTokenRecord {
    ClientTokenRecord {
        token: token.to_owned(),
        request_hash: request_hash.to_owned(),
        job_id: job_id.to_owned(),
        created_at: 1_000,
    }
}

/// A valid service environment named `name` with 8 instances.
pub fn environment(name: &str) -> ServiceEnvironment {
    ServiceEnvironment {
        service_environment_name: name.to_owned(),
        service_environment_type: ServiceEnvironmentType::SagemakerTraining,
        state: State::Enabled,
        status: ResourceStatus::Valid,
        capacity_limits: vec![CapacityLimit {
            max_capacity: 8,
            capacity_unit: "NUM_INSTANCES".to_owned(),
        }],
        tags: Tags::new(),
        created_at: 1_000,
    }
}

/// A valid job queue named `name` at priority 10, feeding the environment `env`.
pub fn queue(name: &str) -> JobQueue {
    JobQueue {
        job_queue_name: name.to_owned(),
        state: State::Enabled,
        status: ResourceStatus::Valid,
        status_reason: None,
        priority: 10,
        scheduling_policy: None,
        service_environment_order: vec![ServiceEnvironmentOrder {
            order: 1,
            service_environment: "env".to_owned(),
        }],
        job_state_time_limit_actions: Vec::new(),
        job_queue_type: JobQueueType::SagemakerTraining,
        tags: Tags::new(),
        created_at: 1_000,
    }
}

/// A scheduling policy named `name` (FIFO: no fair-share or quota-share part).
pub fn policy(name: &str) -> SchedulingPolicy {
    SchedulingPolicy {
        name: name.to_owned(),
        fairshare_policy: None,
        quota_share_policy: None,
        tags: Tags::new(),
        created_at: 1_000,
    }
}

/// A quota share `name` in queue `queue` reserving 2 `ml.p4d.24xlarge`.
pub fn quota_share(queue: &str, name: &str) -> QuotaShare {
    QuotaShare {
        quota_share_name: name.to_owned(),
        job_queue: queue.to_owned(),
        capacity_limits: vec![QuotaShareCapacityLimit {
            max_capacity: 2,
            capacity_unit: "ml.p4d.24xlarge".to_owned(),
        }],
        resource_sharing_configuration: ResourceSharingConfiguration {
            strategy: SharingStrategy::Lend,
            borrow_limit: None,
        },
        preemption_configuration: QuotaSharePreemptionConfiguration::default(),
        state: State::Enabled,
        status: ResourceStatus::Valid,
        tags: Tags::new(),
        created_at: 1_000,
    }
}

/// A query with only a limit, for struct-update syntax.
pub fn query(limit: usize) -> JobQuery {
    JobQuery {
        limit,
        ..JobQuery::default()
    }
}

/// Inserts `job`, creating its queue first if the queue does not exist (a listing without a
/// queue may cover only the queues that exist: see [`Store::list_jobs`]).
async fn insert<S: Store>(store: &S, job: &ServiceJob) {
    ensure_queue(store, &job.job_queue).await;
    let outcome = store.insert_job(job, None).await.expect("insert_job");
    assert_eq!(outcome, InsertJob::Inserted, "inserting {}", job.job_id);
}

/// Reads job `id`, applies `change` and writes it back at the version read.
async fn change_job<S: Store>(store: &S, id: &str, change: fn(&mut ServiceJob)) {
    let mut stored = store.get_job(id).await.unwrap().unwrap();
    change(&mut stored.value);
    store
        .update_job(&stored.value, stored.version)
        .await
        .unwrap();
}

/// Creates the job queue `name` unless it exists.
pub async fn ensure_queue<S: Store>(store: &S, name: &str) {
    match store.create_resource(&queue(name)).await {
        Ok(()) | Err(StoreError::AlreadyExists) => {}
        Err(e) => panic!("creating job queue {name}: {e}"),
    }
}

fn ids(items: &[Versioned<ServiceJob>]) -> Vec<String> {
    items.iter().map(|v| v.value.job_id.clone()).collect()
}

/// Every page of `query`, following `next` until it is `None`. Bounded: a store whose cursor
/// never ends fails here instead of hanging.
async fn all_pages<S: Store>(store: &S, query: &JobQuery) -> Vec<Vec<Versioned<ServiceJob>>> {
    const MAX_PAGES: usize = 10_000;
    let mut pages = Vec::new();
    let mut after: Option<JobCursor> = None;
    for _ in 0..MAX_PAGES {
        let page = store
            .list_jobs(&JobQuery {
                after: after.clone(),
                ..query.clone()
            })
            .await
            .expect("list_jobs");
        assert!(
            page.items.len() <= query.limit,
            "a page of {} for limit {}",
            page.items.len(),
            query.limit
        );
        let next = page.next.clone();
        if let (Some(cursor), Some(last)) = (&next, page.items.last()) {
            assert_eq!(
                (cursor.created_at, cursor.job_id.as_str()),
                (last.value.created_at, last.value.job_id.as_str()),
                "the cursor points at the last job returned"
            );
        }
        pages.push(page.items);
        match next {
            None => return pages,
            Some(cursor) => after = Some(cursor),
        }
    }
    panic!("list_jobs kept returning `next` after {MAX_PAGES} pages");
}

// ---------------------------------------------------------------------------------------------
// Jobs
// ---------------------------------------------------------------------------------------------

/// `insert_job` then `get_job` returns the same job at version 1.
pub async fn inserted_job_reads_back_at_version_1<S: Store>(store: &S) {
    let original = job("j1")
        .name("Train-BERT")
        .share("team-a")
        .quota_share("gpu")
        .client_token("tok")
        .build();
    insert(store, &original).await;
    let stored = store.get_job("j1").await.expect("get_job");
    assert_eq!(
        stored,
        Some(Versioned {
            value: original,
            version: 1
        })
    );
}

/// `get_job` of an id never inserted is `None`, not an error.
pub async fn unknown_job_reads_as_none<S: Store>(store: &S) {
    insert(store, &job("j1").build()).await;
    assert_eq!(store.get_job("j2").await.expect("get_job"), None);
}

/// A second insert under a taken job id fails with `AlreadyExists` and changes nothing.
pub async fn taken_job_id_is_already_exists_and_keeps_the_original<S: Store>(store: &S) {
    let original = job("j1").name("first").build();
    insert(store, &original).await;
    let err = store
        .insert_job(&job("j1").name("second").build(), None)
        .await
        .expect_err("a taken id must be refused");
    assert!(matches!(err, StoreError::AlreadyExists), "got {err:?}");
    let stored = store
        .get_job("j1")
        .await
        .expect("get_job")
        .expect("present");
    assert_eq!((stored.value, stored.version), (original, 1));
}

/// A job inserted with a token is stored, and the token then names it.
pub async fn client_token_is_recorded_with_its_job<S: Store>(store: &S) {
    let record = token("tok", "hash-1", "j1");
    let outcome = store
        .insert_job(&job("j1").client_token("tok").build(), Some(&record))
        .await
        .expect("insert_job");
    assert_eq!(outcome, InsertJob::Inserted);
    assert!(store.get_job("j1").await.expect("get_job").is_some());
    // The token is visible through its only read path: a reuse reports the recorded request.
    let again = store
        .insert_job(&job("j2").build(), Some(&token("tok", "hash-1", "j2")))
        .await
        .expect("insert_job");
    assert_eq!(again, InsertJob::TokenExists(record));
}

/// Reusing a token (same or different request) returns the first record and writes no job,
/// even under a job id that is free.
pub async fn reused_client_token_returns_the_first_record_and_writes_nothing<S: Store>(store: &S) {
    let first = token("tok", "hash-1", "j1");
    store
        .insert_job(&job("j1").build(), Some(&first))
        .await
        .expect("insert_job");
    for (request_hash, job_id) in [("hash-1", "j2"), ("hash-other", "j3")] {
        let outcome = store
            .insert_job(
                &job(job_id).build(),
                Some(&token("tok", request_hash, job_id)),
            )
            .await
            .expect("insert_job");
        assert_eq!(outcome, InsertJob::TokenExists(first.clone()));
        assert_eq!(
            store.get_job(job_id).await.expect("get_job"),
            None,
            "a refused token must not write {job_id}"
        );
    }
    ensure_queue(store, "q").await;
    let everything = store.list_jobs(&query(100)).await.expect("list_jobs");
    assert_eq!(ids(&everything.items), ["j1"]);
}

/// The job and its token are one atomic step: when the job insert fails, the token is not
/// recorded, so a later insert with it succeeds.
pub async fn insert_refused_for_a_taken_id_records_no_token<S: Store>(store: &S) {
    insert(store, &job("j1").build()).await;
    let err = store
        .insert_job(&job("j1").build(), Some(&token("tok", "h", "j1")))
        .await
        .expect_err("a taken id must be refused");
    assert!(matches!(err, StoreError::AlreadyExists), "got {err:?}");
    let outcome = store
        .insert_job(&job("j2").build(), Some(&token("tok", "h", "j2")))
        .await
        .expect("insert_job");
    assert_eq!(
        outcome,
        InsertJob::Inserted,
        "the token of a failed insert must not have been kept"
    );
}

/// Updating with the stored version replaces the job and returns version + 1, every time.
pub async fn update_with_current_version_bumps_it<S: Store>(store: &S) {
    insert(store, &job("j1").status(JobStatus::Submitted).build()).await;
    let mut expected_version = 1;
    for (status, reason) in [
        (JobStatus::Runnable, "waiting"),
        (JobStatus::Scheduled, "dispatched"),
        (JobStatus::Running, "training"),
    ] {
        let mut changed = job("j1").status(status).build();
        changed.status_reason = Some(reason.to_owned());
        let version = store
            .update_job(&changed, expected_version)
            .await
            .expect("update_job");
        assert_eq!(version, expected_version + 1);
        let stored = store
            .get_job("j1")
            .await
            .expect("get_job")
            .expect("present");
        assert_eq!((stored.value, stored.version), (changed, version));
        expected_version = version;
    }
}

/// Updating with a version other than the stored one is a `Conflict` and writes nothing.
pub async fn update_with_stale_version_conflicts_and_writes_nothing<S: Store>(store: &S) {
    let original = job("j1").build();
    insert(store, &original).await;
    let first = job("j1").status(JobStatus::Scheduled).build();
    assert_eq!(store.update_job(&first, 1).await.expect("update_job"), 2);
    for stale in [0, 1, 3, u64::MAX] {
        let err = store
            .update_job(&job("j1").status(JobStatus::Failed).build(), stale)
            .await
            .expect_err("a stale version must be refused");
        assert!(
            matches!(err, StoreError::Conflict),
            "version {stale}: {err:?}"
        );
    }
    let stored = store
        .get_job("j1")
        .await
        .expect("get_job")
        .expect("present");
    assert_eq!((stored.value, stored.version), (first, 2));
}

/// Updating a job that does not exist is a `Conflict` (there is no version to match) and does
/// not create it.
pub async fn update_of_unknown_job_conflicts<S: Store>(store: &S) {
    let err = store
        .update_job(&job("ghost").build(), 1)
        .await
        .expect_err("no job to update");
    assert!(matches!(err, StoreError::Conflict), "got {err:?}");
    assert_eq!(store.get_job("ghost").await.expect("get_job"), None);
}

/// Each filter of [`JobQuery`] alone and combined, against a fixed set of jobs.
pub async fn list_filters_match_every_set_field<S: Store>(store: &S) {
    use JobStatus::{Failed, Runnable, Running};
    let jobs = [
        job("a")
            .name("Train-BERT")
            .queue("prod")
            .status(Runnable)
            .share("vision")
            .created_at(100),
        job("b")
            .name("train-gpt")
            .queue("prod")
            .status(Running)
            .share("nlp")
            .created_at(200),
        job("c")
            .name("EVAL-bert")
            .queue("research")
            .status(Runnable)
            .quota_share("gpu")
            .created_at(300),
        job("d")
            .name("train")
            .queue("research")
            .status(Failed)
            .quota_share("cpu")
            .created_at(400),
        job("e")
            .name("TRAIN-BERT")
            .queue("prod")
            .status(Runnable)
            .share("vision")
            .created_at(500),
        job("f")
            .name("train_%x")
            .queue("prod")
            .status(Runnable)
            .created_at(600),
    ];
    for j in jobs {
        insert(store, &j.build()).await;
    }
    let cases: Vec<(&str, JobQuery, Vec<&str>)> = vec![
        (
            "no filter returns everything newest first",
            query(100),
            vec!["f", "e", "d", "c", "b", "a"],
        ),
        (
            "queue",
            JobQuery {
                queue: Some("research".into()),
                ..query(100)
            },
            vec!["d", "c"],
        ),
        (
            "unknown queue matches nothing",
            JobQuery {
                queue: Some("nope".into()),
                ..query(100)
            },
            vec![],
        ),
        (
            "status",
            JobQuery {
                status: Some(Runnable),
                ..query(100)
            },
            vec!["f", "e", "c", "a"],
        ),
        (
            "queue and status",
            JobQuery {
                queue: Some("prod".into()),
                status: Some(Runnable),
                ..query(100)
            },
            vec!["f", "e", "a"],
        ),
        (
            "share identifier",
            JobQuery {
                share_identifier: Some("vision".into()),
                ..query(100)
            },
            vec!["e", "a"],
        ),
        (
            "quota share",
            JobQuery {
                quota_share_name: Some("gpu".into()),
                ..query(100)
            },
            vec!["c"],
        ),
        (
            "exact name ignores case",
            JobQuery {
                name: Some(NameFilter::Exact("train-bert".into())),
                ..query(100)
            },
            vec!["e", "a"],
        ),
        (
            "exact name is not a prefix",
            JobQuery {
                name: Some(NameFilter::Exact("train".into())),
                ..query(100)
            },
            vec!["d"],
        ),
        (
            "name prefix ignores case",
            JobQuery {
                name: Some(NameFilter::Prefix("train".into())),
                ..query(100)
            },
            vec!["f", "e", "d", "b", "a"],
        ),
        (
            "name prefix is a prefix, not a substring",
            JobQuery {
                name: Some(NameFilter::Prefix("bert".into())),
                ..query(100)
            },
            vec![],
        ),
        (
            "name prefix treats % and _ as plain characters",
            JobQuery {
                name: Some(NameFilter::Prefix("train_%".into())),
                ..query(100)
            },
            vec!["f"],
        ),
        (
            "created before is strict",
            JobQuery {
                created_before: Some(300),
                ..query(100)
            },
            vec!["b", "a"],
        ),
        (
            "created after is strict",
            JobQuery {
                created_after: Some(300),
                ..query(100)
            },
            vec!["f", "e", "d"],
        ),
        (
            "a time window",
            JobQuery {
                created_after: Some(100),
                created_before: Some(500),
                ..query(100)
            },
            vec!["d", "c", "b"],
        ),
        (
            "every filter at once",
            JobQuery {
                queue: Some("prod".into()),
                status: Some(Runnable),
                share_identifier: Some("vision".into()),
                name: Some(NameFilter::Prefix("train-b".into())),
                created_after: Some(100),
                created_before: Some(600),
                ..query(100)
            },
            vec!["e"],
        ),
        ("limit cuts the newest first", query(2), vec!["f", "e"]),
    ];
    for (case, q, expected) in cases {
        let page = store.list_jobs(&q).await.expect("list_jobs");
        assert_eq!(ids(&page.items), expected, "{case}");
    }
}

/// `list_jobs` sees an update: the new status filters, the new version is returned.
pub async fn list_reflects_updated_status_and_version<S: Store>(store: &S) {
    insert(store, &job("j1").status(JobStatus::Runnable).build()).await;
    let scheduled = job("j1")
        .status(JobStatus::Scheduled)
        .name("Renamed")
        .build();
    store.update_job(&scheduled, 1).await.expect("update_job");
    let by_old = JobQuery {
        status: Some(JobStatus::Runnable),
        ..query(10)
    };
    assert!(
        store
            .list_jobs(&by_old)
            .await
            .expect("list")
            .items
            .is_empty()
    );
    let by_new = JobQuery {
        status: Some(JobStatus::Scheduled),
        name: Some(NameFilter::Exact("renamed".into())),
        ..query(10)
    };
    let page = store.list_jobs(&by_new).await.expect("list");
    assert_eq!(
        page.items,
        vec![Versioned {
            value: scheduled,
            version: 2
        }]
    );
}

/// Newest first; jobs created in the same millisecond come in descending job id order.
pub async fn list_is_newest_first_with_job_id_breaking_ties<S: Store>(store: &S) {
    // Inserted in an order that is neither the answer nor its reverse.
    for (id, at) in [("m", 5), ("b", 5), ("z", 1), ("a", 9), ("y", 5), ("c", 9)] {
        insert(store, &job(id).created_at(at).build()).await;
    }
    let page = store.list_jobs(&query(100)).await.expect("list_jobs");
    assert_eq!(ids(&page.items), ["c", "a", "y", "m", "b", "z"]);
    assert_eq!(page.next, None);
}

/// An empty store lists as one empty page with no `next`.
pub async fn list_of_empty_store_is_one_empty_last_page<S: Store>(store: &S) {
    let page = store.list_jobs(&query(10)).await.expect("list_jobs");
    assert!(page.items.is_empty());
    assert_eq!(page.next, None);
}

/// 250 jobs with many equal creation times; following the cursor must return each exactly once,
/// in the same order as one big page.
async fn pages_cover_every_job_once<S: Store>(store: &S, limit: usize) {
    const JOBS: usize = 250;
    for n in 0..JOBS {
        // Three jobs per millisecond, ids not in time order, so page boundaries fall inside ties.
        let id = format!("job-{:03}", (n * 7919) % JOBS);
        let at = i64::try_from(n / 3).expect("small");
        insert(store, &job(&id).created_at(at).build()).await;
    }
    let whole = store.list_jobs(&query(JOBS + 1)).await.expect("list_jobs");
    assert_eq!(whole.items.len(), JOBS);
    assert_eq!(whole.next, None);
    let pages = all_pages(store, &query(limit)).await;
    assert_eq!(
        pages.len(),
        JOBS.div_ceil(limit),
        "page count at limit {limit}"
    );
    let paged: Vec<String> = pages.iter().flat_map(|p| ids(p)).collect();
    let unique: BTreeSet<&String> = paged.iter().collect();
    assert_eq!(unique.len(), paged.len(), "a job appeared twice");
    assert_eq!(
        paged,
        ids(&whole.items),
        "pages differ from the single listing"
    );
}

/// Pagination at limit 100 (the API's default page size): three pages, 100 + 100 + 50.
pub async fn pages_cover_every_job_once_at_limit_100<S: Store>(store: &S) {
    pages_cover_every_job_once(store, 100).await;
}

/// Pagination at limit 7: 36 pages, boundaries everywhere.
pub async fn pages_cover_every_job_once_at_limit_7<S: Store>(store: &S) {
    pages_cover_every_job_once(store, 7).await;
}

/// Pagination under a filter skips non-matching jobs between pages without losing any.
pub async fn filtered_pages_cover_every_matching_job_once<S: Store>(store: &S) {
    for n in 0..120_i64 {
        let queue = if n % 3 == 0 { "research" } else { "prod" };
        let status = if n % 2 == 0 {
            JobStatus::Runnable
        } else {
            JobStatus::Running
        };
        let id = format!("job-{n:03}");
        insert(
            store,
            &job(&id)
                .queue(queue)
                .status(status)
                .created_at(n / 4)
                .build(),
        )
        .await;
    }
    let q = JobQuery {
        queue: Some("prod".into()),
        status: Some(JobStatus::Runnable),
        ..query(9)
    };
    let paged: Vec<String> = all_pages(store, &q)
        .await
        .iter()
        .flat_map(|p| ids(p))
        .collect();
    let mut expected: Vec<(i64, String)> = (0..120_i64)
        .filter(|n| n % 3 != 0 && n % 2 == 0)
        .map(|n| (n / 4, format!("job-{n:03}")))
        .collect();
    expected.sort_by(|a, b| b.cmp(a));
    let expected: Vec<String> = expected.into_iter().map(|(_, id)| id).collect();
    assert_eq!(paged, expected);
}

/// When the last page is exactly full, `next` is `None`: no empty page follows.
pub async fn exactly_full_last_page_has_no_next<S: Store>(store: &S) {
    for n in 0..14_i64 {
        insert(store, &job(&format!("j{n:02}")).created_at(n).build()).await;
    }
    let pages = all_pages(store, &query(7)).await;
    let sizes: Vec<usize> = pages.iter().map(Vec::len).collect();
    assert_eq!(sizes, [7, 7]);
}

// ---------------------------------------------------------------------------------------------
// Resources
// ---------------------------------------------------------------------------------------------

/// `create_resource` then `get_resource` returns it at version 1; an unknown key is `None`.
pub async fn resource_created_reads_back_at_version_1<S: Store>(store: &S) {
    let q = queue("prod");
    store.create_resource(&q).await.expect("create");
    let stored = store.get_resource::<JobQueue>("prod").await.expect("get");
    assert_eq!(
        stored,
        Some(Versioned {
            value: q,
            version: 1
        })
    );
    let env = environment("env");
    store.create_resource(&env).await.expect("create");
    let stored = store
        .get_resource::<ServiceEnvironment>("env")
        .await
        .expect("get");
    assert_eq!(stored.map(|v| (v.value, v.version)), Some((env, 1)));
    assert_eq!(
        store.get_resource::<JobQueue>("nope").await.expect("get"),
        None
    );
}

/// Creating under a taken key is `AlreadyExists` and keeps the original.
pub async fn taken_resource_key_is_already_exists<S: Store>(store: &S) {
    let original = queue("prod");
    store.create_resource(&original).await.expect("create");
    let mut other = queue("prod");
    other.priority = 999;
    let err = store.create_resource(&other).await.expect_err("taken key");
    assert!(matches!(err, StoreError::AlreadyExists), "got {err:?}");
    let stored = store
        .get_resource::<JobQueue>("prod")
        .await
        .expect("get")
        .expect("present");
    assert_eq!((stored.value, stored.version), (original, 1));
}

/// `list_resources` returns one kind only, ordered by key, whatever the creation order; the same
/// key may exist under different kinds.
pub async fn resources_list_by_key_and_only_their_kind<S: Store>(store: &S) {
    for name in ["b", "a", "c"] {
        store
            .create_resource(&queue(name))
            .await
            .expect("create queue");
    }
    for name in ["a", "z"] {
        store
            .create_resource(&environment(name))
            .await
            .expect("create environment");
    }
    store
        .create_resource(&policy("a"))
        .await
        .expect("create policy");
    let queues: Vec<String> = store
        .list_resources::<JobQueue>()
        .await
        .expect("list")
        .into_iter()
        .map(|v| v.value.key())
        .collect();
    assert_eq!(queues, ["a", "b", "c"]);
    let environments: Vec<String> = store
        .list_resources::<ServiceEnvironment>()
        .await
        .expect("list")
        .into_iter()
        .map(|v| v.value.key())
        .collect();
    assert_eq!(environments, ["a", "z"]);
    let policies = store
        .list_resources::<SchedulingPolicy>()
        .await
        .expect("list");
    assert_eq!(policies.len(), 1);
    assert!(
        store
            .list_resources::<QuotaShare>()
            .await
            .expect("list")
            .is_empty()
    );
}

/// `update_resource` with the stored version replaces and bumps it; a stale or unknown one is a
/// `Conflict` that writes nothing.
pub async fn resource_update_checks_and_bumps_version<S: Store>(store: &S) {
    store.create_resource(&queue("prod")).await.expect("create");
    let mut changed = queue("prod");
    changed.priority = 500;
    assert_eq!(store.update_resource(&changed, 1).await.expect("update"), 2);
    changed.priority = 600;
    assert_eq!(store.update_resource(&changed, 2).await.expect("update"), 3);
    let mut stale = queue("prod");
    stale.priority = 1;
    for version in [1, 2, 4] {
        let err = store
            .update_resource(&stale, version)
            .await
            .expect_err("stale");
        assert!(
            matches!(err, StoreError::Conflict),
            "version {version}: {err:?}"
        );
    }
    let stored = store
        .get_resource::<JobQueue>("prod")
        .await
        .expect("get")
        .expect("present");
    assert_eq!((stored.value, stored.version), (changed, 3));
    let err = store
        .update_resource(&queue("ghost"), 1)
        .await
        .expect_err("unknown");
    assert!(matches!(err, StoreError::Conflict), "got {err:?}");
    assert_eq!(
        store.get_resource::<JobQueue>("ghost").await.expect("get"),
        None
    );
}

/// `delete_resource` needs the stored version; once deleted the key is free and a re-create
/// starts again at version 1. Deleting a queue leaves an environment of the same name alone.
pub async fn resource_delete_checks_version<S: Store>(store: &S) {
    store.create_resource(&queue("prod")).await.expect("create");
    store
        .create_resource(&environment("prod"))
        .await
        .expect("create");
    store
        .update_resource(&queue("prod"), 1)
        .await
        .expect("update");
    let err = store
        .delete_resource::<JobQueue>("prod", 1)
        .await
        .expect_err("stale version");
    assert!(matches!(err, StoreError::Conflict), "got {err:?}");
    assert!(
        store
            .get_resource::<JobQueue>("prod")
            .await
            .expect("get")
            .is_some()
    );
    store
        .delete_resource::<JobQueue>("prod", 2)
        .await
        .expect("delete");
    assert_eq!(
        store.get_resource::<JobQueue>("prod").await.expect("get"),
        None
    );
    let err = store
        .delete_resource::<JobQueue>("prod", 2)
        .await
        .expect_err("already gone");
    assert!(matches!(err, StoreError::Conflict), "got {err:?}");
    assert!(
        store
            .get_resource::<ServiceEnvironment>("prod")
            .await
            .expect("get")
            .is_some(),
        "another kind under the same key must survive"
    );
    store
        .create_resource(&queue("prod"))
        .await
        .expect("re-create");
    let again = store
        .get_resource::<JobQueue>("prod")
        .await
        .expect("get")
        .expect("present");
    assert_eq!(again.version, 1);
}

/// Quota shares are keyed `queue/name`: the same name in two queues is two shares.
pub async fn quota_shares_are_keyed_by_queue_and_name<S: Store>(store: &S) {
    for (q, name) in [("research", "gpu"), ("prod", "gpu"), ("prod", "cpu")] {
        store
            .create_resource(&quota_share(q, name))
            .await
            .expect("create");
    }
    let err = store
        .create_resource(&quota_share("prod", "gpu"))
        .await
        .expect_err("taken");
    assert!(matches!(err, StoreError::AlreadyExists), "got {err:?}");
    let key = quota_share_key("research", "gpu");
    assert_eq!(key, "research/gpu");
    let stored = store
        .get_resource::<QuotaShare>(&key)
        .await
        .expect("get")
        .expect("present");
    assert_eq!(
        (
            stored.value.job_queue.as_str(),
            stored.value.quota_share_name.as_str()
        ),
        ("research", "gpu")
    );
    let keys: Vec<String> = store
        .list_resources::<QuotaShare>()
        .await
        .expect("list")
        .into_iter()
        .map(|v| v.value.key())
        .collect();
    assert_eq!(keys, ["prod/cpu", "prod/gpu", "research/gpu"]);
}

// ---------------------------------------------------------------------------------------------
// Scheduler state: atomic commits, documents, the runnable index
// ---------------------------------------------------------------------------------------------

fn usage(environment: &str, instances: u64) -> EnvironmentUsage {
    EnvironmentUsage {
        environment: environment.into(),
        instances: [("ml.g5.xlarge".to_owned(), instances)].into(),
        quota_shares: [(
            quota_share_key("research", "vision"),
            [("ml.g5.xlarge".to_owned(), instances)].into(),
        )]
        .into(),
        fence: Some(Fence {
            token: 7,
            until_ms: 1_800_000_070_000,
        }),
    }
}

/// A job and a document commit together, and a stale expectation anywhere writes nothing.
pub async fn commit_applies_every_write_or_none<S: Store>(store: &S) {
    insert(store, &job("j1").build()).await;
    insert(store, &job("j2").build()).await;
    let scheduled = job("j1").status(JobStatus::Scheduled).build();
    let writes = [
        Write::job(scheduled.clone(), 1),
        Write::document(&usage("gpu", 1), 0).unwrap(),
    ];
    store.commit(&writes).await.unwrap();
    let read = store.get_job("j1").await.unwrap().unwrap();
    assert_eq!((read.value.status, read.version), (JobStatus::Scheduled, 2));
    let doc = store
        .get_document::<EnvironmentUsage>("gpu")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((doc.value.total(), doc.version), (1, 1));

    // j2 is at version 1, but the document is no longer at 0: nothing may be written.
    let stale = [
        Write::job(job("j2").status(JobStatus::Scheduled).build(), 1),
        Write::document(&usage("gpu", 2), 0).unwrap(),
    ];
    assert!(matches!(
        store.commit(&stale).await,
        Err(StoreError::Conflict)
    ));
    let j2 = store.get_job("j2").await.unwrap().unwrap();
    assert_eq!(
        (j2.value.status, j2.version),
        (JobStatus::Runnable, 1),
        "rolled back"
    );
    let doc = store
        .get_document::<EnvironmentUsage>("gpu")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((doc.value.total(), doc.version), (1, 1), "unchanged");

    // A stale job version also refuses the whole commit.
    let stale_job = [
        Write::document(&usage("gpu", 3), 1).unwrap(),
        Write::job(job("j1").status(JobStatus::Running).build(), 1),
    ];
    assert!(matches!(
        store.commit(&stale_job).await,
        Err(StoreError::Conflict)
    ));
    let doc = store
        .get_document::<EnvironmentUsage>("gpu")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        doc.value.total(),
        1,
        "the document written first was rolled back"
    );
    assert!(store.commit(&[]).await.is_ok(), "an empty commit is fine");
}

/// Documents: create only at 0, update only at the stored version, listed by key per kind.
pub async fn documents_are_created_at_version_1_and_checked<S: Store>(store: &S) {
    assert!(
        store
            .get_document::<EnvironmentUsage>("gpu")
            .await
            .unwrap()
            .is_none()
    );
    store
        .commit(&[Write::document(&usage("gpu", 4), 0).unwrap()])
        .await
        .unwrap();
    store
        .commit(&[Write::document(&usage("cpu", 1), 0).unwrap()])
        .await
        .unwrap();
    assert!(matches!(
        store
            .commit(&[Write::document(&usage("gpu", 5), 0).unwrap()])
            .await,
        Err(StoreError::Conflict)
    ));
    store
        .commit(&[Write::document(&usage("gpu", 5), 1).unwrap()])
        .await
        .unwrap();
    assert!(matches!(
        store
            .commit(&[Write::document(&usage("gpu", 6), 1).unwrap()])
            .await,
        Err(StoreError::Conflict)
    ));
    let share = ShareUsageRecord {
        queue: "q".into(),
        share: "a".into(),
        ..Default::default()
    };
    store
        .commit(&[Write::document(&share, 0).unwrap()])
        .await
        .unwrap();
    let all = store.list_documents::<EnvironmentUsage>().await.unwrap();
    let keys: Vec<(&str, u64, u64)> = all
        .iter()
        .map(|d| (d.value.environment.as_str(), d.value.total(), d.version))
        .collect();
    assert_eq!(
        keys,
        [("cpu", 1, 1), ("gpu", 5, 2)],
        "ordered by key, only this kind"
    );
    let shares = store.list_documents::<ShareUsageRecord>().await.unwrap();
    assert_eq!(shares.len(), 1);
    assert_eq!(shares[0].value.key(), "q/a");
}

/// A job's end creates its capacity release in the same commit as the job; the capacity in use
/// is the usage less the releases; a fold writes the usage and deletes the releases in one
/// commit, each delete checked against its version, all or nothing.
pub async fn a_release_is_folded_by_deleting_it_with_the_usage_write<S: Store>(store: &S) {
    let mut running = job("r").status(JobStatus::Running).build();
    running.training = TrainingRequest::single("t", "ml.g5.xlarge", 1).into();
    running.job_queue = "research".into();
    running.quota_share_name = Some("vision".into());
    store.insert_job(&running, None).await.unwrap();
    let held = usage("gpu", 4);
    store
        .commit(&[Write::document(&held, 0).unwrap()])
        .await
        .unwrap();
    let mut ended = running.clone();
    ended.status = JobStatus::Succeeded;
    let release = CapacityRelease::of("gpu", &ended, 1);
    store
        .commit(&[
            Write::job(ended.clone(), 1),
            Write::document(&release, 0).unwrap(),
        ])
        .await
        .unwrap();
    let net = store.capacity_in_use().await.unwrap();
    assert_eq!(
        net["gpu"].value.total(),
        3,
        "the release is given back at once"
    );
    assert_eq!(net["gpu"].version, 1, "with the version stored");
    assert_eq!(
        net["gpu"].value.quota_shares[&quota_share_key("research", "vision")]["ml.g5.xlarge"],
        3
    );
    // A second release of the same attempt cannot be created.
    assert!(matches!(
        store.commit(&[Write::document(&release, 0).unwrap()]).await,
        Err(StoreError::Conflict)
    ));

    let mut folded = held.clone();
    folded.remove(&release);
    let fold = |usage_version, release_version| {
        [
            Write::document(&folded, usage_version).unwrap(),
            Write::delete_document::<CapacityRelease>(release.key(), release_version),
        ]
    };
    // A stale release version: nothing is written, not even the usage.
    assert!(matches!(
        store.commit(&fold(1, 2)).await,
        Err(StoreError::Conflict)
    ));
    assert_eq!(
        store
            .get_document::<EnvironmentUsage>("gpu")
            .await
            .unwrap()
            .unwrap()
            .version,
        1
    );
    assert_eq!(
        store
            .list_documents::<CapacityRelease>()
            .await
            .unwrap()
            .len(),
        1
    );
    store.commit(&fold(1, 1)).await.unwrap();
    assert!(
        store
            .list_documents::<CapacityRelease>()
            .await
            .unwrap()
            .is_empty()
    );
    let net = store.capacity_in_use().await.unwrap();
    assert_eq!((net["gpu"].value.total(), net["gpu"].version), (3, 2));
    // Deleting what is gone is a conflict.
    assert!(matches!(
        store
            .commit(&[Write::delete_document::<CapacityRelease>(release.key(), 1)])
            .await,
        Err(StoreError::Conflict)
    ));
}

/// RUNNABLE jobs of a share of a queue, in line: by priority then runnable time within a share,
/// by runnable time alone (priority ignored) for share-less jobs (a FIFO queue's); limited.
pub async fn runnable_jobs_come_in_dispatch_order<S: Store>(store: &S) {
    let jobs = [
        job("a").runnable_at(30).priority(1).share("s1").build(),
        job("b").runnable_at(10).priority(0).share("s1").build(),
        job("c").runnable_at(20).priority(5).share("s2").build(),
        job("d").runnable_at(20).priority(5).share("s1").build(),
        job("e")
            .runnable_at(5)
            .status(JobStatus::Submitted)
            .share("s1")
            .build(),
        job("f").runnable_at(1).queue("other").share("s1").build(),
        job("g").runnable_at(10).priority(9).share("s1").build(),
        job("h")
            .runnable_at(10)
            .quota_share("s1")
            .priority(3)
            .build(),
        // A FIFO queue: no shares, and a priority that must not count.
        job("w").runnable_at(30).queue("fifo").build(),
        job("x").runnable_at(20).queue("fifo").priority(9).build(),
        job("y").runnable_at(20).queue("fifo").build(),
        job("z").runnable_at(5).queue("fifo").priority(1).build(),
    ];
    for j in &jobs {
        insert(store, j).await;
    }
    let ids =
        |v: Vec<Versioned<ServiceJob>>| v.into_iter().map(|j| j.value.job_id).collect::<Vec<_>>();
    let fifo = store.runnable_jobs("fifo", "", 10).await.unwrap();
    assert_eq!(
        ids(fifo),
        ["z", "x", "y", "w"],
        "by runnable time, then id; priority ignored"
    );
    let share = store.runnable_jobs("q", "s1", 10).await.unwrap();
    assert_eq!(
        ids(share),
        ["g", "d", "h", "a", "b"],
        "priority, then runnable time, then id; a quota share of the same name is the same share"
    );
    let share = store.runnable_jobs("q", "s1", 2).await.unwrap();
    assert_eq!(ids(share), ["g", "d"], "limited");
    assert_eq!(
        ids(store.runnable_jobs("q", "s2", 10).await.unwrap()),
        ["c"]
    );
    for (queue, share) in [("q", "nobody"), ("q", ""), ("fifo", "s1"), ("nowhere", "")] {
        assert!(
            store
                .runnable_jobs(queue, share, 10)
                .await
                .unwrap()
                .is_empty(),
            "{queue} {share:?}"
        );
    }
    assert!(store.runnable_jobs("fifo", "", 0).await.unwrap().is_empty());

    // Leaving RUNNABLE leaves the line; a priority change moves the job.
    store
        .update_job(
            &job("g").status(JobStatus::Scheduled).share("s1").build(),
            1,
        )
        .await
        .unwrap();
    store
        .update_job(&job("b").runnable_at(10).priority(7).share("s1").build(), 1)
        .await
        .unwrap();
    let share = store.runnable_jobs("q", "s1", 10).await.unwrap();
    assert_eq!(ids(share), ["b", "d", "h", "a"]);
}

/// Distinct shares with RUNNABLE jobs, the jobs holding capacity, and the distinct shares of a
/// queue's jobs holding capacity, as jobs start and end.
pub async fn runnable_shares_and_dispatched_jobs_follow_status<S: Store>(store: &S) {
    for j in [
        job("a").share("s2").build(),
        job("b").share("s1").build(),
        job("c").quota_share("qs").build(),
        job("d").build(),
        job("e").share("s3").status(JobStatus::Running).build(),
        job("f").status(JobStatus::Scheduled).build(),
        job("g").status(JobStatus::Starting).build(),
        job("h").status(JobStatus::Succeeded).build(),
        job("i").queue("other").share("x").build(),
        job("j").share("s4").status(JobStatus::Running).build(),
        job("k").share("s3").status(JobStatus::Starting).build(),
        job("l")
            .queue("other")
            .share("y")
            .status(JobStatus::Running)
            .build(),
    ] {
        insert(store, &j).await;
    }
    assert_eq!(
        store.runnable_shares("q").await.unwrap(),
        ["", "qs", "s1", "s2"]
    );
    let dispatched = store.dispatched_jobs().await.unwrap();
    let ids: Vec<&str> = dispatched.iter().map(|j| j.value.job_id.as_str()).collect();
    assert_eq!(ids, ["e", "f", "g", "j", "k", "l"]);
    assert_eq!(store.holding_shares("q").await.unwrap(), ["", "s3", "s4"]);
    assert_eq!(store.holding_shares("other").await.unwrap(), ["y"]);
    assert!(store.holding_shares("none").await.unwrap().is_empty());
    // A share holds capacity while any of its jobs does; one that starts is counted.
    change_job(store, "e", |j| j.status = JobStatus::Succeeded).await;
    change_job(store, "j", |j| j.status = JobStatus::Failed).await;
    change_job(store, "b", |j| j.status = JobStatus::Scheduled).await;
    assert_eq!(store.holding_shares("q").await.unwrap(), ["", "s1", "s3"]);
    change_job(store, "k", |j| j.status = JobStatus::Succeeded).await;
    assert_eq!(store.holding_shares("q").await.unwrap(), ["", "s1"]);
}

/// The capacity holders are the dispatched jobs, summarised, in the same order, and follow
/// every update (a changed priority, a job that ended, one newly dispatched).
pub async fn capacity_holders_summarise_the_dispatched_jobs<S: Store>(store: &S) {
    // g resumes from checkpoints and was preempted twice: the planner's anti-thrash rule and
    // checkpoint listing read both from its summary.
    let mut g = job("g")
        .quota_share("qs")
        .status(JobStatus::Starting)
        .build();
    std::sync::Arc::make_mut(&mut g.training).checkpoint_s3_uri =
        Some("s3://bucket/checkpoints/g".into());
    g.preemption_summary = Some(trainyard_domain::job::PreemptionSummary {
        preempted_attempt_count: 2,
        ..Default::default()
    });
    for j in [
        job("e").share("s3").status(JobStatus::Running).build(),
        job("f").status(JobStatus::Scheduled).build(),
        g,
        job("h").status(JobStatus::Succeeded).build(),
        job("i").build(),
    ] {
        insert(store, &j).await;
    }
    async fn expected<S: Store>(store: &S) -> Vec<CapacityHolder> {
        let dispatched = store.dispatched_jobs().await.unwrap();
        dispatched
            .iter()
            .map(|j| CapacityHolder::of(&j.value))
            .collect()
    }
    let holders = store.capacity_holders().await.unwrap();
    let ids: Vec<&str> = holders.iter().map(|h| h.job_id.as_str()).collect();
    assert_eq!(ids, ["e", "f", "g"]);
    assert_eq!(holders, expected(store).await);
    assert_eq!(holders[0].share, "s3");
    assert_eq!(holders[2].share, "qs");
    assert_eq!(
        (
            holders[2].checkpoint_s3_uri.as_deref(),
            holders[2].preemptions
        ),
        (Some("s3://bucket/checkpoints/g"), 2)
    );
    assert_eq!(
        (
            holders[0].checkpoint_s3_uri.as_deref(),
            holders[0].preemptions
        ),
        (None, 0)
    );

    let update = |id: &'static str, change: fn(&mut ServiceJob)| change_job(store, id, change);
    update("e", |j| j.scheduling_priority = Some(7)).await;
    update("f", |j| j.status = JobStatus::Succeeded).await;
    update("i", |j| j.status = JobStatus::Scheduled).await;
    let holders = store.capacity_holders().await.unwrap();
    let ids: Vec<&str> = holders.iter().map(|h| h.job_id.as_str()).collect();
    assert_eq!(ids, ["e", "g", "i"]);
    assert_eq!(holders[0].priority, 7);
    assert_eq!(holders, expected(store).await);

    // g's attempt is asked to stop (a preemption): its summary says so, for the planner to
    // choose it again before stopping another job.
    assert!(!holders[1].stopping);
    update("g", |j| {
        j.attempts.push(trainyard_domain::job::Attempt {
            training_job_name: "AWSBatchg1".into(),
            training_job_arn: None,
            started_at: Some(1_000),
            stopped_at: None,
            status_reason: None,
            service_environment: Some("env".into()),
            stop_requested: Some(trainyard_domain::job::StopRequest::Preemption),
            failed_as: None,
            selected_instance_type: None,
        });
    })
    .await;
    let holders = store.capacity_holders().await.unwrap();
    let stopping: Vec<(&str, bool)> = holders
        .iter()
        .map(|h| (h.job_id.as_str(), h.stopping))
        .collect();
    assert_eq!(stopping, [("e", false), ("g", true), ("i", false)]);
    assert_eq!(holders, expected(store).await);
}

/// A reader that follows the holders (`capacity_holders_since`) sees what a reader of them all
/// sees: every holder at first, then either every holder again or the jobs that changed, each
/// once, in id order, which bring its list up to date. What it was told it had seen never
/// comes back as changes to a list it does not have.
pub async fn holders_since_bring_a_reader_up_to_date<S: Store>(store: &S) {
    for j in [
        job("a").share("s1").status(JobStatus::Running).build(),
        job("b").status(JobStatus::Scheduled).build(),
        job("c")
            .quota_share("qs")
            .status(JobStatus::Starting)
            .build(),
        job("d").build(),
        job("e").build(),
    ] {
        insert(store, &j).await;
    }
    /// `list` brought up to date by `read`.
    fn brought(mut list: Vec<CapacityHolder>, read: HoldersRead) -> Vec<CapacityHolder> {
        match read {
            HoldersRead::All(all) => all,
            HoldersRead::Changed(changed) => {
                let ids: Vec<&str> = changed.iter().map(|(id, _)| id.as_str()).collect();
                let mut ordered = ids.clone();
                ordered.sort_unstable();
                ordered.dedup();
                assert_eq!(ids, ordered, "changes come in id order, each once");
                for (id, now) in changed {
                    list.retain(|h| *h.job_id != *id);
                    list.extend(now);
                }
                list.sort_by(|a, b| a.job_id.cmp(&b.job_id));
                list
            }
        }
    }
    let (first, mut seen) = store.capacity_holders_since(None).await.unwrap();
    let HoldersRead::All(mut list) = first else {
        panic!("a reader that has seen nothing is told everything");
    };
    assert_eq!(list, store.capacity_holders().await.unwrap());

    let update = |id: &'static str, change: fn(&mut ServiceJob)| change_job(store, id, change);
    /// A job and what to change of it.
    type Change = (&'static str, fn(&mut ServiceJob));
    let steps: [&[Change]; 4] = [
        // Nothing changes.
        &[],
        // A priority changes, a job ends, one is dispatched.
        &[
            ("a", |j| j.scheduling_priority = Some(7)),
            ("b", |j| j.status = JobStatus::Succeeded),
            ("d", |j| j.status = JobStatus::Scheduled),
        ],
        // One job changes twice, and a waiting job's change holds nothing.
        &[
            ("c", |j| j.status = JobStatus::Running),
            ("c", |j| j.scheduling_priority = Some(3)),
            ("e", |j| j.scheduling_priority = Some(2)),
        ],
        // Every holder ends.
        &[
            ("a", |j| j.status = JobStatus::Failed),
            ("c", |j| j.status = JobStatus::Succeeded),
            ("d", |j| j.status = JobStatus::Succeeded),
        ],
    ];
    for (step, changes) in steps.iter().enumerate() {
        for (id, change) in *changes {
            update(id, *change).await;
        }
        let (read, now) = store.capacity_holders_since(seen).await.unwrap();
        if seen.is_none() {
            assert!(
                matches!(read, HoldersRead::All(_)),
                "step {step}: a store that follows nothing tells everything"
            );
        }
        list = brought(list, read);
        assert_eq!(list, store.capacity_holders().await.unwrap(), "step {step}");
        seen = now;
    }
    assert!(list.is_empty());
}

/// A job's line offset (a queue that puts shorter jobs first) places it at its runnable time plus
/// the offset, in a share's line and in a FIFO queue's, while its runnable time reads back
/// unchanged, in the job and in its head; priority still comes first.
pub async fn a_line_offset_moves_a_job_back_in_its_line<S: Store>(store: &S) {
    let jobs = [
        // In line at 10 + 100 = 110: after b (50) and c (60), before d (200).
        job("a")
            .runnable_at(10)
            .line_offset(100)
            .share("s1")
            .build(),
        job("b").runnable_at(50).share("s1").build(),
        job("c").runnable_at(20).line_offset(40).share("s1").build(),
        job("d").runnable_at(200).share("s1").build(),
        // A higher priority goes first whatever its offset.
        job("e")
            .runnable_at(90)
            .line_offset(1_000)
            .priority(5)
            .share("s1")
            .build(),
        job("w")
            .runnable_at(10)
            .line_offset(100)
            .queue("fifo")
            .build(),
        job("x").runnable_at(50).queue("fifo").build(),
    ];
    for j in &jobs {
        insert(store, j).await;
    }
    let ids =
        |v: &[Versioned<ServiceJob>]| v.iter().map(|j| j.value.job_id.clone()).collect::<Vec<_>>();
    let share = store.runnable_jobs("q", "s1", 10).await.unwrap();
    assert_eq!(ids(&share), ["e", "b", "c", "a", "d"]);
    assert_eq!(
        (share[3].value.runnable_at, share[3].value.line_offset_ms),
        (Some(10), 100),
        "read back as written"
    );
    let fifo = store.runnable_jobs("fifo", "", 10).await.unwrap();
    assert_eq!(ids(&fifo), ["x", "w"]);
    for (queue, share) in [("q", "s1"), ("fifo", "")] {
        let heads = store.runnable_heads(queue, share, 10).await.unwrap();
        let expected: Vec<RunnableHead> = store
            .runnable_jobs(queue, share, 10)
            .await
            .unwrap()
            .iter()
            .map(|j| RunnableHead::of(&j.value, j.version))
            .collect();
        assert_eq!(heads, expected, "{queue}");
    }
    let heads = store.runnable_heads("q", "s1", 10).await.unwrap();
    let a = heads.iter().find(|h| h.job_id.as_str() == "a").unwrap();
    assert_eq!((a.runnable_at, a.line_offset_ms), (10, 100));
}

/// The runnable heads are [`Store::runnable_jobs`], summarised, in the same order and with the
/// same limits, and follow every update: a new status reason (with its version), a priority
/// that reorders the share, a job that leaves RUNNABLE.
pub async fn runnable_heads_summarise_the_runnable_jobs<S: Store>(store: &S) {
    for j in [
        job("a").runnable_at(30).priority(1).share("s1").build(),
        job("b").runnable_at(10).share("s1").build(),
        job("c")
            .runnable_at(20)
            .priority(5)
            .quota_share("qs")
            .build(),
        job("d").runnable_at(20).priority(5).share("s1").build(),
        job("e")
            .runnable_at(5)
            .status(JobStatus::Running)
            .share("s1")
            .build(),
        job("f").runnable_at(1).queue("other").build(),
        job("g").runnable_at(15).build(),
    ] {
        insert(store, &j).await;
    }
    // Every (share, limit) the cycle may ask for agrees with the jobs it summarises.
    async fn agrees<S: Store>(store: &S, queue: &str) {
        for share in ["", "s1", "qs", "nobody"] {
            for limit in [0, 1, 2, 10] {
                let jobs = store.runnable_jobs(queue, share, limit).await.unwrap();
                let expected: Vec<RunnableHead> = jobs
                    .iter()
                    .map(|j| RunnableHead::of(&j.value, j.version))
                    .collect();
                let heads = store.runnable_heads(queue, share, limit).await.unwrap();
                assert_eq!(heads, expected, "{queue} {share:?} {limit}");
            }
        }
    }
    agrees(store, "q").await;
    agrees(store, "other").await;
    agrees(store, "nowhere").await;
    let heads = store.runnable_heads("q", "s1", 10).await.unwrap();
    let ids: Vec<&str> = heads.iter().map(|h| h.job_id.as_str()).collect();
    assert_eq!(
        ids,
        ["d", "a", "b"],
        "priority, then runnable time; RUNNING e left out"
    );
    assert_eq!((heads[0].share.as_str(), heads[0].runnable_at), ("s1", 20));

    let update = |id: &'static str, change: fn(&mut ServiceJob)| change_job(store, id, change);
    update("a", |j| {
        j.status_reason = Some("CAPACITY:SERVICE_ENVIRONMENT_FULL - waiting".into())
    })
    .await;
    update("b", |j| j.scheduling_priority = Some(9)).await;
    update("d", |j| j.status = JobStatus::Scheduled).await;
    agrees(store, "q").await;
    let heads = store.runnable_heads("q", "s1", 10).await.unwrap();
    let ids: Vec<&str> = heads.iter().map(|h| h.job_id.as_str()).collect();
    assert_eq!(ids, ["b", "a"], "b moved up, d left");
    assert_eq!(heads[0].priority, 9);
    assert_eq!(
        (heads[1].status_reason.as_deref(), heads[1].version),
        (Some("CAPACITY:SERVICE_ENVIRONMENT_FULL - waiting"), 2),
        "a new reason and version, same place"
    );
}

pub async fn a_status_reason_is_set_alone_and_version_checked<S: Store>(store: &S) {
    let runnable = job("w").runnable_at(10).share("s1").build();
    let running = job("r").status(JobStatus::Running).share("s1").build();
    insert(store, &runnable).await;
    insert(store, &running).await;
    let holders_before = store.capacity_holders().await.unwrap();
    const WAITING: &str = "CAPACITY:SERVICE_ENVIRONMENT_FULL - needs 1 ml.g5.xlarge, 0 free";

    assert_eq!(
        store
            .set_status_reason("w", 1, Some(WAITING.into()))
            .await
            .unwrap(),
        2
    );
    let stored = store.get_job("w").await.unwrap().unwrap();
    let mut expected = runnable.clone();
    expected.status_reason = Some(WAITING.into());
    assert_eq!(
        (stored.value, stored.version),
        (expected, 2),
        "only the reason changed"
    );
    let heads = store.runnable_heads("q", "s1", 10).await.unwrap();
    assert_eq!(
        (
            heads.len(),
            heads[0].status_reason.as_deref(),
            heads[0].version
        ),
        (1, Some(WAITING), 2),
        "the head carries the new reason and version"
    );

    // A stale version, or no such job: nothing is written.
    for (id, version) in [("w", 1), ("w", 3), ("nobody", 1)] {
        let refused = store.set_status_reason(id, version, None).await;
        assert!(
            matches!(refused, Err(StoreError::Conflict)),
            "{id} at {version}: {refused:?}"
        );
    }
    assert_eq!(store.get_job("w").await.unwrap().unwrap().version, 2);

    // A job holding capacity stays among the holders as it was; a reason can be cleared.
    assert_eq!(
        store
            .set_status_reason("r", 1, Some("stopping".into()))
            .await
            .unwrap(),
        2
    );
    assert_eq!(store.set_status_reason("r", 2, None).await.unwrap(), 3);
    let stored = store.get_job("r").await.unwrap().unwrap();
    assert_eq!((stored.value.status_reason, stored.version), (None, 3));
    assert_eq!(store.capacity_holders().await.unwrap(), holders_before);
}

// ---------------------------------------------------------------------------------------------
// The audit trail
// ---------------------------------------------------------------------------------------------

const DAY_MS: i64 = 86_400_000;
/// A day well inside the epoch-ms range real records use (2024-10-14), on a 30-day boundary, so
/// that a store partitioning the trail by time (DynamoDB's, in 30-day buckets) is read across one.
const AUDIT_DAY: i64 = 20_010 * DAY_MS;

/// An allowed submit by `principal` at `at_ms`, kept for a year.
pub fn audit_record(id: &str, at_ms: i64, principal: &str) -> AuditRecord {
    AuditRecord {
        id: id.to_owned(),
        at_ms,
        principal: principal.to_owned(),
        action: "SubmitServiceJob".to_owned(),
        resource: "arn:aws:batch:us-east-1:123456789012:job-queue/q".to_owned(),
        allowed: true,
        decided_by: "permitted by submit-own".to_owned(),
        outcome: "OK".to_owned(),
        detail: Some(format!(
            "arn:aws:batch:us-east-1:123456789012:service-job/{id}"
        )),
        expires_at_ms: at_ms + 365 * DAY_MS,
    }
}

/// A query over every unexpired record, `limit` at a time.
pub fn audit_query(limit: usize) -> AuditQuery {
    AuditQuery {
        since_ms: 0,
        until_ms: i64::MAX,
        now_ms: AUDIT_DAY,
        limit,
        ..AuditQuery::default()
    }
}

async fn audit_pages<S: Store>(store: &S, mut query: AuditQuery) -> Vec<Vec<String>> {
    let mut pages = Vec::new();
    loop {
        let page = store.list_audit(&query).await.unwrap();
        assert!(
            page.records.len() <= query.limit,
            "a page holds at most its limit"
        );
        pages.push(page.records.iter().map(|r| r.id.clone()).collect());
        match page.next {
            Some(next) => query.after = Some(next),
            None => return pages,
        }
        assert!(pages.len() < 100, "paging does not end");
    }
}

pub async fn audit_pages_cover_every_record_once_newest_first_across_days<S: Store>(store: &S) {
    // Seven records over three days, two at the same millisecond (ids break the tie).
    let times = [
        ("a", AUDIT_DAY - DAY_MS + 5),
        ("b", AUDIT_DAY - 1),
        ("c", AUDIT_DAY),
        ("d", AUDIT_DAY + 7),
        ("e", AUDIT_DAY + 7),
        ("f", AUDIT_DAY + DAY_MS + 1),
        ("g", AUDIT_DAY + 2 * DAY_MS - 1),
    ];
    for (id, at) in times {
        store
            .append_audit(&audit_record(
                id,
                at,
                "arn:aws:iam::123456789012:user/alice",
            ))
            .await
            .unwrap();
    }
    let newest_first = ["g", "f", "e", "d", "c", "b", "a"];
    let first = store.list_audit(&audit_query(100)).await.unwrap();
    assert_eq!(
        first
            .records
            .iter()
            .map(|r| r.id.as_str())
            .collect::<Vec<_>>(),
        newest_first,
        "newest first, id descending within a millisecond"
    );
    assert_eq!(first.next, None, "one page holds them all");
    assert_eq!(
        first.records[0],
        audit_record(
            "g",
            AUDIT_DAY + 2 * DAY_MS - 1,
            "arn:aws:iam::123456789012:user/alice"
        ),
        "a record reads back as written"
    );
    for limit in [1, 2, 3, 7] {
        let pages = audit_pages(store, audit_query(limit)).await;
        let flat: Vec<String> = pages.concat();
        assert_eq!(
            flat, newest_first,
            "limit {limit}: every record once, in order"
        );
    }
    // A window: [since, until).
    let window = AuditQuery {
        since_ms: AUDIT_DAY,
        until_ms: AUDIT_DAY + DAY_MS + 1,
        ..audit_query(2)
    };
    assert_eq!(audit_pages(store, window).await.concat(), ["e", "d", "c"]);
}

pub async fn audit_filters_match_every_set_field<S: Store>(store: &S) {
    let alice = "arn:aws:iam::123456789012:user/alice";
    let bob = "arn:aws:iam::123456789012:user/bob";
    let mut records = vec![
        audit_record("1", AUDIT_DAY + 1, alice),
        audit_record("2", AUDIT_DAY + 2, bob),
        audit_record("3", AUDIT_DAY + 3, alice),
        audit_record("4", AUDIT_DAY + 4, bob),
    ];
    records[2].action = "DeleteJobQueue".into();
    records[2].allowed = false;
    records[2].outcome = "AccessDeniedException".into();
    records[2].detail = None;
    records[3].allowed = false;
    for r in &records {
        store.append_audit(r).await.unwrap();
    }
    let ids = |q: AuditQuery| async move { audit_pages(store, q).await.concat() };
    assert_eq!(
        ids(AuditQuery {
            principal: Some(alice.into()),
            ..audit_query(1)
        })
        .await,
        ["3", "1"]
    );
    assert_eq!(
        ids(AuditQuery {
            action: Some("SubmitServiceJob".into()),
            ..audit_query(1)
        })
        .await,
        ["4", "2", "1"]
    );
    assert_eq!(
        ids(AuditQuery {
            denied_only: true,
            ..audit_query(1)
        })
        .await,
        ["4", "3"]
    );
    assert_eq!(
        ids(AuditQuery {
            denied_only: true,
            principal: Some(bob.into()),
            action: Some("SubmitServiceJob".into()),
            ..audit_query(5)
        })
        .await,
        ["4"]
    );
    let read = store.list_audit(&audit_query(10)).await.unwrap();
    assert_eq!(
        read.records[1], records[2],
        "a refusal reads back as written"
    );
    assert_eq!(
        ids(AuditQuery {
            after: Some(AuditCursor {
                at_ms: AUDIT_DAY + 3,
                id: "3".into(),
            }),
            ..audit_query(10)
        })
        .await,
        ["2", "1"],
        "strictly after the cursor"
    );
}

pub async fn expired_audit_records_are_left_out<S: Store>(store: &S) {
    let alice = "arn:aws:iam::123456789012:user/alice";
    let mut short = audit_record("short", AUDIT_DAY - 10, alice);
    short.expires_at_ms = AUDIT_DAY;
    store.append_audit(&short).await.unwrap();
    store
        .append_audit(&audit_record("long", AUDIT_DAY - 5, alice))
        .await
        .unwrap();
    let before = AuditQuery {
        now_ms: AUDIT_DAY - 1,
        ..audit_query(10)
    };
    assert_eq!(audit_pages(store, before).await.concat(), ["long", "short"]);
    assert_eq!(
        audit_pages(store, audit_query(10)).await.concat(),
        ["long"],
        "expired at now_ms: left out"
    );
}
