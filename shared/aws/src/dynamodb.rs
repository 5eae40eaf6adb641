//! The DynamoDB store: the [`Store`](trainyard_app::Store) port on one table (single-table design).
//!
//! # Shape
//!
//! Jobs, client tokens, configuration resources and scheduler documents share one table, keyed
//! by `pk`/`sk` (see `schema` and `docs/storage-dynamodb.md`). Sparse global secondary indexes
//! answer the scheduler's reads (RUNNABLE jobs per queue and share in dispatch order; jobs holding
//! capacity) and `ListServiceJobs` (by queue, queue and status, status, or everything, newest
//! first), so no read scans the table. The indexes hold keys and a few small attributes, never
//! the job's document: whole-item copies would cost a write unit per KB in every index on every
//! job write (the measurements are in the docs). The runnable indexes project what a
//! [`RunnableHead`] holds, so a cycle's `runnable_heads` is one query per queue or share; other
//! readers take the keys from an index and the jobs from the table with `BatchGetItem`.
//!
//! # Consistency
//!
//! A job is two items: the job item, rewritten on every change, and its request item (payload
//! and other fields set once), written with it at submit, so that the rewritten item stays within
//! one write unit. Versions are checked with condition expressions; multi-item steps
//! (`insert_job`, `commit`) are one `TransactWriteItems`. Reads by key are strongly consistent. Index reads
//! (`list_jobs`, `runnable_jobs`, `runnable_heads`, `runnable_shares`, `dispatched_jobs`) are eventually
//! consistent, as every GSI is: the scheduler tolerates that because each dispatch is committed
//! with a version check on the job it read.
//!
//! # Errors
//!
//! Classified once, in `classify` and `classify_transaction`: a failed condition is
//! [`StoreError::Conflict`] (or [`StoreError::AlreadyExists`] for a create), which the use-cases
//! re-read and retry as a lost race. A write that met a transaction in progress on its items
//! (`TransactionConflict`, `TransactionConflictException`) applied nothing and lost no race: it
//! is sent again unchanged after a jittered, doubling pause (`resending`, `Pauses`), and
//! only a collision on every resend is a [`StoreError::Conflict`]. Throttling, 5xx, timeouts and everything else (after the SDK's own
//! retries) are [`StoreError::Unavailable`] with the SDK error kept.

mod audit;
mod decisions;
mod interceptor;
mod schema;
#[cfg(test)]
mod stand_in;
mod units;

use std::collections::HashMap;
use std::sync::Arc;
use trainyard_app::ports::{ConfigStore, JobStore, SchedulingStore};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    AttributeValue, Delete, KeysAndAttributes, Put, ReturnValuesOnConditionCheckFailure,
    TransactWriteItem,
};
use trainyard_app::ports::{
    CapacityHolder, ClientTokenRecord, Document, InsertJob, JobCursor, JobQuery, NameFilter, Page,
    Resource, RunnableHead, StoreError, Versioned, Write,
};
use trainyard_domain::arn::ResourceKind;
use trainyard_domain::job::{JobStatus, ServiceJob};

pub use decisions::{DecisionSummary, decision_partition};
pub use schema::{CreateTableError, create_table};
use schema::{Item, SEP, n, s};
pub use units::{Consumed, Units, item_size};

/// `TransactWriteItems` takes at most this many actions.
const MAX_TRANSACTION_ITEMS: usize = 100;

/// A [`Store`](trainyard_app::Store) on one DynamoDB table, created by [`create_table`].
#[derive(Debug, Clone)]
pub struct DynamoStore {
    client: Client,
    table: String,
    /// Capacity accounting, when turned on ([`DynamoStore::with_accounting`]); shared by clones.
    /// Fed by an interceptor on `client`, never by the request code: this is only read.
    accounting: Option<Arc<units::Accounting>>,
}

/// The `ExclusiveStartKey` of the next page of a query, if any.
type StartKey = Option<Item>;

impl DynamoStore {
    /// A store on `table` (which must exist, with the shape [`create_table`] gives it).
    pub fn new(client: Client, table: String) -> Self {
        Self {
            client,
            table,
            accounting: None,
        }
    }

    /// The same store, asking DynamoDB for `ConsumedCapacity` on every request and keeping the
    /// figures (reported, and estimated by AWS's rules: see [`Consumed`]) for
    /// [`DynamoStore::consumed`]. For measurements; off by default. The client is rebuilt with
    /// an interceptor that does this (`dynamodb/interceptor.rs`), so clones of the store taken
    /// before are not counted. Turned on twice, it keeps its figures and counts each call once.
    pub fn with_accounting(mut self) -> Self {
        if self.accounting.is_some() {
            return self;
        }
        let accounting = Arc::new(units::Accounting::default());
        let config = self
            .client
            .config()
            .to_builder()
            .interceptor(interceptor::AccountingInterceptor::new(Arc::clone(
                &accounting,
            )))
            .build();
        self.client = Client::from_conf(config);
        self.accounting = Some(accounting);
        self
    }

    /// The capacity consumed since accounting was turned on or last reset (zeros when off).
    pub fn consumed(&self) -> Consumed {
        self.accounting
            .as_ref()
            .map(|a| a.consumed())
            .unwrap_or_default()
    }

    /// The sizes in bytes, by DynamoDB's rules, of the two items `job` is stored as: its own
    /// item (rewritten on every change: writes are billed per started KB of it) and its request
    /// item (written once). For cost estimates.
    pub fn job_item_sizes(job: &ServiceJob) -> Result<(usize, usize), StoreError> {
        let items = schema::job_items(job, 1)?;
        Ok((item_size(&items.job), item_size(&items.request)))
    }

    /// Starts the accounting figures again from zero.
    pub fn reset_consumed(&self) {
        if let Some(accounting) = &self.accounting {
            accounting.reset();
        }
    }

    /// The table's name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// A conditional `Put` of `item`, for a transaction.
    fn put(
        &self,
        item: Item,
        condition: &str,
        values: Option<HashMap<String, AttributeValue>>,
        names: Option<HashMap<String, String>>,
    ) -> Result<TransactWriteItem, StoreError> {
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression(condition)
            .set_expression_attribute_values(values)
            .set_expression_attribute_names(names)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(|e| unavailable("cannot build a transaction item", e))?;
        Ok(TransactWriteItem::builder().put(put).build())
    }

    /// A transaction's delete of the item `pk`/`sk` at version `expected`.
    fn delete(&self, pk: String, sk: &str, expected: u64) -> Result<TransactWriteItem, StoreError> {
        let delete = Delete::builder()
            .table_name(&self.table)
            .set_key(Some(schema::key(pk, sk)))
            .condition_expression("version = :expected")
            .expression_attribute_values(":expected", n(expected))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(|e| unavailable("cannot build a transaction item", e))?;
        Ok(TransactWriteItem::builder().delete(delete).build())
    }

    /// One `TransactWriteItems`; `Err(Cancelled(reasons))` when a condition failed.
    async fn transact(&self, items: Vec<TransactWriteItem>) -> Result<(), Cancelled> {
        if items.len() > MAX_TRANSACTION_ITEMS {
            return Err(Cancelled::Failed(StoreError::Unavailable {
                message: format!(
                    "a commit of {} writes exceeds DynamoDB's {MAX_TRANSACTION_ITEMS}",
                    items.len()
                ),
                source: None,
            }));
        }
        let request = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items));
        match resending(|| request.clone().send(), collided).await {
            Ok(_) => Ok(()),
            Err(error) if collided(&error) => Err(Cancelled::Failed(StoreError::Conflict)),
            Err(error) => Err(classify_transaction(error)),
        }
    }

    /// Runs a query to the end of its pages or until `enough` items are kept, keeping those
    /// `keep` accepts. `build` makes the request for a start key.
    async fn query_items(
        &self,
        build: impl Fn(StartKey) -> aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder,
        enough: usize,
        keep: impl Fn(&Item) -> bool,
    ) -> Result<Vec<Item>, StoreError> {
        let mut kept = Vec::new();
        let mut start: StartKey = None;
        loop {
            let output = build(start.take()).send().await.map_err(classify)?;
            for item in output.items() {
                if kept.len() < enough && keep(item) {
                    kept.push(item.clone());
                }
            }
            match output.last_evaluated_key() {
                Some(last) if kept.len() < enough => start = Some(last.clone()),
                _ => return Ok(kept),
            }
        }
    }

    /// Every item of a partition of the base table, by sort key.
    async fn partition(&self, pk: String) -> Result<Vec<Item>, StoreError> {
        let client = &self.client;
        let table = &self.table;
        self.query_items(
            |start| {
                client
                    .query()
                    .table_name(table)
                    .key_condition_expression("pk = :pk")
                    .expression_attribute_values(":pk", s(&pk))
                    .consistent_read(true)
                    .set_exclusive_start_key(start)
            },
            usize::MAX,
            |_| true,
        )
        .await
    }

    /// Reads one item by key, strongly consistent.
    async fn get_item(&self, pk: String, sk: &str) -> Result<Option<Item>, StoreError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(schema::key(pk, sk)))
            .consistent_read(true)
            .send()
            .await
            .map_err(classify)?;
        Ok(output.item)
    }

    /// The jobs whose keys `index_items` (items of a keys-only or include index) carry, read
    /// from the table with `BatchGetItem` (eventually consistent, as the index read before it
    /// was), in the order of `index_items`. A job missing from the table is left out.
    async fn fetch_jobs(
        &self,
        index_items: &[Item],
    ) -> Result<Vec<Versioned<ServiceJob>>, StoreError> {
        /// `BatchGetItem` takes at most this many keys.
        const MAX_BATCH_KEYS: usize = 100;
        let mut keys: Vec<Item> = Vec::with_capacity(index_items.len());
        let mut order: Vec<String> = Vec::with_capacity(index_items.len());
        for item in index_items {
            let pk = schema::text("an index item", item, schema::PK)?;
            let sk = schema::text("an index item", item, schema::SK)?;
            // Index items are job items, whose request item shares their partition.
            if !order.iter().any(|seen| seen == pk) {
                order.push(pk.to_owned());
                keys.push(schema::key(pk.to_owned(), sk));
                keys.push(schema::key(pk.to_owned(), schema::REQUEST_SK));
            }
        }
        let mut found: HashMap<(String, String), Item> = HashMap::with_capacity(keys.len());
        for chunk in keys.chunks(MAX_BATCH_KEYS) {
            let mut pending: Vec<Item> = chunk.to_vec();
            let mut pause = Pauses::unprocessed();
            loop {
                let request = KeysAndAttributes::builder()
                    .set_keys(Some(std::mem::take(&mut pending)))
                    .consistent_read(false)
                    .build()
                    .map_err(|e| unavailable("cannot build a BatchGetItem request", e))?;
                let output = self
                    .client
                    .batch_get_item()
                    .request_items(&self.table, request)
                    .send()
                    .await
                    .map_err(classify)?;
                let items: &[Item] = output
                    .responses()
                    .and_then(|r| r.get(&self.table))
                    .map_or(&[], Vec::as_slice);
                for item in items {
                    if let (Ok(pk), Ok(sk)) = (
                        schema::text("a job item", item, schema::PK),
                        schema::text("a job item", item, schema::SK),
                    ) {
                        found.insert((pk.to_owned(), sk.to_owned()), item.clone());
                    }
                }
                if let Some(left) = output.unprocessed_keys().and_then(|u| u.get(&self.table)) {
                    pending = left.keys().to_vec();
                }
                if pending.is_empty() {
                    break;
                }
                let Some(delay) = pause.next() else {
                    return Err(StoreError::Unavailable {
                        message: format!(
                            "BatchGetItem left {} keys unprocessed after {} rounds",
                            pending.len(),
                            1 + UNPROCESSED_ROUNDS
                        ),
                        source: None,
                    });
                };
                tokio::time::sleep(delay).await;
            }
        }
        let part = |pk: &String, sk: &str| found.get(&(pk.clone(), sk.to_owned()));
        order
            .iter()
            .filter_map(|pk| {
                part(pk, schema::JOB_SK)
                    .map(|job| schema::decode_job(job, part(pk, schema::REQUEST_SK)))
            })
            .collect()
    }

    /// Puts `item` if the stored version is `expected_version` (0: it must not exist).
    ///
    /// A write whose answer is lost is applied, and the SDK's retry then finds its condition
    /// false. An update recognises its own item in what the refusal returns; a create cannot
    /// (an identical create by someone else looks the same), so it goes as a transaction of
    /// one, whose client token makes the retry succeed instead.
    async fn put_versioned(&self, item: Item, expected_version: u64) -> Result<(), StoreError> {
        if expected_version == 0 {
            let create = self.put(item, "attribute_not_exists(pk)", None, None)?;
            return match self.transact(vec![create]).await {
                Ok(()) => Ok(()),
                Err(Cancelled::Conditions(_)) => Err(StoreError::Conflict),
                Err(Cancelled::Failed(e)) => Err(e),
            };
        }
        let request = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item.clone()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .condition_expression("version = :expected")
            .expression_attribute_values(":expected", n(expected_version));
        match resending(|| request.clone().send(), item_collided).await {
            Ok(_) => Ok(()),
            Err(error) if refused_item(&error).is_some_and(|old| *old == item) => {
                // Our own write: it was applied, its answer lost, and the SDK's retry found it.
                Ok(())
            }
            Err(error) => Err(classify(error)),
        }
    }

    /// The condition of a job write: the version, and that the request item holds this request
    /// (its fingerprint in the stored job item matches). The second part fails only when a job's
    /// request changed or its item predates the split; the write then goes again with the
    /// request item (see [`DynamoStore::request_was_the_difference`]).
    fn job_condition(
        &self,
        items: &schema::JobItems,
        expected: u64,
    ) -> Result<TransactWriteItem, StoreError> {
        let fingerprint = items
            .job
            .get(schema::REQUEST_HASH)
            .cloned()
            .unwrap_or_else(|| s(""));
        self.put(
            items.job.clone(),
            "version = :expected AND rh = :rh",
            Some(HashMap::from([
                (":expected".to_owned(), n(expected)),
                (":rh".to_owned(), fingerprint),
            ])),
            None,
        )
    }

    /// Whether a job write refused with `old` as the stored item failed only on the request
    /// fingerprint: the version matched.
    fn request_was_the_difference(old: Option<&Item>, expected: u64) -> bool {
        old.and_then(|old| schema::item_version("a job item", old).ok()) == Some(expected)
    }

    /// A job write conditioned on the version alone (it goes with its request item).
    fn job_condition_version_only(
        &self,
        items: &schema::JobItems,
        expected: u64,
    ) -> Result<TransactWriteItem, StoreError> {
        self.put(
            items.job.clone(),
            "version = :expected",
            Some(HashMap::from([(":expected".to_owned(), n(expected))])),
            None,
        )
    }

    /// A `Put` without a condition, for a transaction.
    fn put_unconditional(&self, item: Item) -> Result<TransactWriteItem, StoreError> {
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(item))
            .build()
            .map_err(|e| unavailable("cannot build a transaction item", e))?;
        Ok(TransactWriteItem::builder().put(put).build())
    }

    /// The item a document write puts: `doc` at the version after `expected_version`.
    fn document_write(
        kind: &str,
        key: &str,
        doc: &trainyard_app::ports::DocumentValue,
        expected_version: u64,
    ) -> Result<Item, StoreError> {
        let Some(next) = expected_version.checked_add(1) else {
            return Err(StoreError::Conflict);
        };
        let doc = schema::encode(key, doc)?;
        Ok(schema::document_item(
            schema::document_pk(kind),
            key,
            next,
            doc,
        ))
    }

    /// The transaction of a commit: one put per write, in order, then the request items of the
    /// jobs at `with_request` (indexes into `writes`).
    fn commit_items(
        &self,
        writes: &[Write],
        with_request: &[usize],
    ) -> Result<Vec<TransactWriteItem>, StoreError> {
        let mut items = Vec::with_capacity(writes.len() + with_request.len());
        let mut requests = Vec::new();
        for (i, write) in writes.iter().enumerate() {
            match write {
                Write::Job {
                    job,
                    expected_version,
                } => {
                    let Some(next) = expected_version
                        .checked_add(1)
                        .filter(|_| *expected_version > 0)
                    else {
                        return Err(StoreError::Conflict);
                    };
                    let job_items = schema::job_items(job, next)?;
                    if with_request.contains(&i) {
                        items.push(self.job_condition_version_only(&job_items, *expected_version)?);
                        requests.push(self.put_unconditional(job_items.request)?);
                    } else {
                        items.push(self.job_condition(&job_items, *expected_version)?);
                    }
                }
                Write::Document {
                    kind,
                    key,
                    doc,
                    expected_version,
                } => {
                    let item = Self::document_write(kind, key, doc, *expected_version)?;
                    items.push(if *expected_version == 0 {
                        self.put(item, "attribute_not_exists(pk)", None, None)?
                    } else {
                        self.put(
                            item,
                            "version = :expected",
                            Some(HashMap::from([(
                                ":expected".to_owned(),
                                n(*expected_version),
                            )])),
                            None,
                        )?
                    });
                }
                Write::DeleteDocument {
                    kind,
                    key,
                    expected_version,
                } => items.push(self.delete(schema::document_pk(kind), key, *expected_version)?),
            }
        }
        items.extend(requests);
        Ok(items)
    }

    /// The names of every job queue, from the keys of the queues' partition.
    async fn queue_names(&self) -> Result<Vec<String>, StoreError> {
        let items = self
            .partition(schema::resource_pk(ResourceKind::JobQueue))
            .await?;
        items
            .iter()
            .map(|item| schema::text("a job queue item", item, schema::SK).map(str::to_owned))
            .collect()
    }

    /// Up to `wanted` jobs of `plan`'s partition that match `query`, newest first, each with its
    /// listing sort key. Jobs are kept by what the table says, not the (eventually consistent)
    /// index: a job whose status left the query's since the index was read, or that shares the
    /// dispatched partition with it, is passed over.
    async fn list_partition_jobs(
        &self,
        plan: &ListPlan,
        query: &JobQuery,
        wanted: usize,
    ) -> Result<Vec<(String, Versioned<ServiceJob>)>, StoreError> {
        let mut kept: Vec<(String, Versioned<ServiceJob>)> = Vec::new();
        let mut start: StartKey = None;
        loop {
            let missing = wanted - kept.len();
            let mut request = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(plan.index)
                .key_condition_expression(&plan.key_condition)
                .scan_index_forward(false)
                .set_exclusive_start_key(start.take());
            if plan.filter.is_empty() {
                // Every entry read is a candidate: read as many as are missing.
                request = request.limit(i32::try_from(missing).unwrap_or(i32::MAX));
            } else {
                // Filtered: let DynamoDB read up to 1 MB per call rather than many tiny calls.
                request = request.filter_expression(plan.filter.join(" AND "));
            }
            for (name, value) in &plan.names {
                request = request.expression_attribute_names(*name, *value);
            }
            for (name, value) in &plan.values {
                request = request.expression_attribute_values(*name, value.clone());
            }
            let output = request.send().await.map_err(classify)?;
            let mut entries = output.items();
            // Fetch no more jobs than are missing; the next read starts after the last one used.
            let mut resume = output.last_evaluated_key().cloned();
            if entries.len() > missing {
                entries = &entries[..missing];
                resume = entries.last().map(|e| plan.start_key(e)).transpose()?;
            }
            for job in self.fetch_jobs(entries).await? {
                if query.status.is_none_or(|status| job.value.status == status) {
                    let key = schema::list_sort_key(job.value.created_at, &job.value.job_id);
                    kept.push((key, job));
                }
            }
            match resume {
                Some(key) if kept.len() < wanted => start = Some(key),
                _ => return Ok(kept),
            }
        }
    }

    /// The first `limit` entries of `share`'s line in the runnable index, in order.
    async fn runnable_entries(
        &self,
        queue: &str,
        share: &str,
        limit: usize,
    ) -> Result<Vec<Item>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let prefix = schema::runnable_prefix(share);
        let client = &self.client;
        let table = &self.table;
        let page = i32::try_from(limit).unwrap_or(i32::MAX);
        self.query_items(
            |start| {
                client
                    .query()
                    .table_name(table)
                    .index_name(schema::index::RUNNABLE)
                    .key_condition_expression("rq = :q AND begins_with(#s, :prefix)")
                    .expression_attribute_names("#s", schema::RUNNABLE_SK)
                    .expression_attribute_values(":q", s(queue))
                    .expression_attribute_values(":prefix", s(&prefix))
                    .limit(page)
                    .set_exclusive_start_key(start)
            },
            limit,
            |_| true,
        )
        .await
    }

    /// The entries of the dispatched partition of `by-queue-status`: every queue's jobs holding
    /// capacity.
    async fn dispatched_entries(&self) -> Result<Vec<Item>, StoreError> {
        let client = &self.client;
        let table = &self.table;
        self.query_items(
            |start| {
                client
                    .query()
                    .table_name(table)
                    .index_name(schema::index::BY_QUEUE_STATUS)
                    .key_condition_expression("lqs = :d")
                    .expression_attribute_values(":d", s(schema::DISPATCHED_PARTITION))
                    .set_exclusive_start_key(start)
            },
            usize::MAX,
            |_| true,
        )
        .await
    }
}

/// How a `list_jobs` query reads one index partition: which index, its key condition, the filters
/// DynamoDB applies after reading, and the placeholders they use.
struct ListPlan {
    index: &'static str,
    /// The index's partition attribute.
    partition: &'static str,
    key_condition: String,
    filter: Vec<&'static str>,
    names: Vec<(&'static str, &'static str)>,
    values: Vec<(&'static str, AttributeValue)>,
}

impl ListPlan {
    /// Picks the index for the queue and status (no status: `by-queue`; a status: its
    /// `by-queue-status` partition, filtered on the queue when that partition is the dispatched
    /// jobs'), turns the time window and the cursor into a sort-key range, and the other fields
    /// into filters. `queue` may be `None` only with a dispatched status.
    fn new(queue: Option<&str>, query: &JobQuery) -> Self {
        let queue_name = queue.unwrap_or_default();
        let (index, partition_attr, partition) = match query.status {
            Some(status) => (
                schema::index::BY_QUEUE_STATUS,
                schema::LIST_QUEUE_STATUS,
                schema::status_partition(queue_name, status),
            ),
            None => (
                schema::index::BY_QUEUE,
                schema::LIST_QUEUE,
                queue_name.to_owned(),
            ),
        };
        let mut plan = Self {
            index,
            partition: partition_attr,
            key_condition: "#p = :p".to_owned(),
            filter: Vec::new(),
            names: vec![("#p", partition_attr)],
            values: vec![(":p", s(partition))],
        };
        // Sort keys are `{time:020}#{id}`. `{t:020}` alone sorts below every key at time t and
        // above every key before it, so it is a strict upper bound and, at t + 1, an inclusive
        // lower bound that is strict at t.
        let lower = query
            .created_after
            .map(|after| schema::sortable_time(after.saturating_add(1)));
        let mut upper = query.created_before.map(schema::sortable_time);
        if let Some(cursor) = &query.after {
            let at = schema::list_sort_key(cursor.created_at, &cursor.job_id);
            // The cursor itself is excluded by a filter: key conditions only offer `<=` with
            // `BETWEEN`.
            if upper.as_ref().is_none_or(|u| at < *u) {
                upper = Some(at.clone());
            }
            plan.filter.push("#k <> :cursor");
            plan.values.push((":cursor", s(at)));
        }
        match (lower, upper) {
            (None, None) => {}
            (Some(lower), None) => {
                plan.key_condition.push_str(" AND #k >= :lo");
                plan.values.push((":lo", s(lower)));
            }
            (None, Some(upper)) => {
                plan.key_condition.push_str(" AND #k <= :hi");
                plan.values.push((":hi", s(upper)));
            }
            (Some(lower), Some(upper)) => {
                plan.key_condition.push_str(" AND #k BETWEEN :lo AND :hi");
                // BETWEEN with lo > hi is a validation error; an empty range is what it means.
                let (lower, upper) = if lower > upper {
                    (upper.clone(), upper)
                } else {
                    (lower, upper)
                };
                plan.values.push((":lo", s(lower)));
                plan.values.push((":hi", s(upper)));
            }
        }
        // DynamoDB refuses a placeholder that no expression uses.
        if plan.key_condition.contains("#k") || plan.filter.iter().any(|f| f.contains("#k")) {
            plan.names.push(("#k", schema::LIST_SK));
        }
        if let (Some(queue), Some(status)) = (queue, query.status)
            && status.is_dispatched()
        {
            plan.filter.push("lq = :queue");
            plan.values.push((":queue", s(queue)));
        }
        if let Some(share) = &query.share_identifier {
            plan.filter.push("share_identifier = :share");
            plan.values.push((":share", s(share)));
        }
        if let Some(quota_share) = &query.quota_share_name {
            plan.filter.push("quota_share_name = :quota");
            plan.values.push((":quota", s(quota_share)));
        }
        match &query.name {
            None => {}
            Some(NameFilter::Exact(name)) => {
                plan.filter.push("name_lower = :name");
                plan.values.push((":name", s(name)));
            }
            Some(NameFilter::Prefix(prefix)) => {
                plan.filter.push("begins_with(name_lower, :name)");
                plan.values.push((":name", s(prefix)));
            }
        }
        plan
    }

    /// The key to start a read of this plan's index just after `entry` (one of its items): the
    /// index's keys and the table's.
    fn start_key(&self, entry: &Item) -> Result<Item, StoreError> {
        [self.partition, schema::LIST_SK, schema::PK, schema::SK]
            .into_iter()
            .map(|name| {
                entry
                    .get(name)
                    .cloned()
                    .map(|value| (name.to_owned(), value))
                    .ok_or_else(|| StoreError::Corrupt {
                        key: format!("{entry:?}"),
                        message: format!("a {} entry without {name}", self.index),
                    })
            })
            .collect()
    }
}

/// What a transaction's condition checks said, item by item.
struct Reason {
    /// This item's condition failed.
    failed: bool,
    /// The item as stored, when DynamoDB returned it.
    old: Option<Item>,
}

/// Why a transaction did not apply.
enum Cancelled {
    /// At least one condition failed; one reason per item, in order.
    Conditions(Vec<Reason>),
    /// Anything else, classified.
    Failed(StoreError),
}

/// The pauses before sending a request again: exponential from a base, each drawn at random
/// from its upper half (so that callers that collided once do not collide again in step), a
/// fixed number in all.
///
/// After a transaction collided with another ([`Pauses::conflict`]): a collision is not a lost
/// race (no condition failed), so the writes go again unchanged, without a re-read; only when
/// every resend collided too does the caller see a [`StoreError::Conflict`], which it handles as
/// a lost race. Each resend is a new request with a new client token: a cancelled transaction
/// applied nothing. After a `BatchGetItem` left keys unprocessed ([`Pauses::unprocessed`]):
/// DynamoDB does that when it throttles part of a batch, and asks callers to back off before
/// asking again for the rest.
struct Pauses {
    sent: u32,
    most: u32,
    base: std::time::Duration,
    random: trainyard_domain::random::SplitMix64,
}

/// Resends of a transaction that collided with another.
const CONFLICT_RESENDS: u32 = 4;
/// The first pause before a resend; each next one doubles (25, 50, 100, 200 ms at most).
const CONFLICT_PAUSE_BASE: std::time::Duration = std::time::Duration::from_millis(25);
/// Further `BatchGetItem` rounds for keys left unprocessed, paused 25 ms doubling to 1.6 s
/// (3.2 s in all at most) before the read gives up as unavailable.
const UNPROCESSED_ROUNDS: u32 = 7;

impl Pauses {
    fn conflict() -> Self {
        Self::new(CONFLICT_RESENDS, CONFLICT_PAUSE_BASE)
    }

    fn unprocessed() -> Self {
        Self::new(UNPROCESSED_ROUNDS, CONFLICT_PAUSE_BASE)
    }

    fn new(most: u32, base: std::time::Duration) -> Self {
        static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Self {
            sent: 0,
            most,
            base,
            random: trainyard_domain::random::SplitMix64::new(u64::from(nanos) ^ (call << 32)),
        }
    }

    /// The pause before the next send, or `None` once all are spent.
    fn next(&mut self) -> Option<std::time::Duration> {
        if self.sent >= self.most {
            return None;
        }
        let full = self.base * 2u32.pow(self.sent);
        self.sent += 1;
        Some(full / 2 + full.mul_f64(self.random.unit() / 2.0))
    }
}

/// Classifies a `TransactWriteItems` failure that is not a collision ([`collided`]): cancelled
/// for a condition, otherwise as [`classify`] does.
fn classify_transaction<R>(error: SdkError<TransactWriteItemsError, R>) -> Cancelled
where
    R: std::fmt::Debug + Send + Sync + 'static,
{
    if let Some(TransactWriteItemsError::TransactionCanceledException(cancelled)) =
        error.as_service_error()
    {
        let reasons: Vec<Reason> = cancelled
            .cancellation_reasons()
            .iter()
            .map(|r| Reason {
                failed: r.code() == Some("ConditionalCheckFailed"),
                old: r.item().cloned(),
            })
            .collect();
        if reasons.iter().any(|r| r.failed) {
            return Cancelled::Conditions(reasons);
        }
    }
    Cancelled::Failed(classify(error))
}

/// Sends a request, and again after each of [`Pauses::conflict`] while `collided` says
/// it failed only because a transaction held its item (nothing applied, no race lost); the last
/// answer is returned as it came.
async fn resending<T, E, R, Fut>(
    send: impl Fn() -> Fut,
    collided: impl Fn(&SdkError<E, R>) -> bool,
) -> Result<T, SdkError<E, R>>
where
    Fut: std::future::Future<Output = Result<T, SdkError<E, R>>>,
{
    let mut pause = Pauses::conflict();
    loop {
        match send().await {
            Err(error) if collided(&error) => match pause.next() {
                Some(delay) => tokio::time::sleep(delay).await,
                None => return Err(error),
            },
            answer => return answer,
        }
    }
}

/// Whether a single-item write met a transaction in progress on its item
/// (`TransactionConflictException`).
fn item_collided<E: ProvideErrorMetadata, R>(error: &SdkError<E, R>) -> bool {
    error
        .as_service_error()
        .and_then(ProvideErrorMetadata::code)
        == Some("TransactionConflictException")
}

/// Whether a transaction was cancelled only because another transaction held one of its items
/// (a `TransactionConflict` reason and no failed condition): nothing was applied, and the same
/// writes may succeed once that transaction is done.
fn collided<R>(error: &SdkError<TransactWriteItemsError, R>) -> bool {
    let Some(TransactWriteItemsError::TransactionCanceledException(cancelled)) =
        error.as_service_error()
    else {
        return false;
    };
    let codes = || cancelled.cancellation_reasons().iter().map(|r| r.code());
    codes().any(|c| c == Some(TRANSACTION_CONFLICT))
        && codes().all(|c| c != Some("ConditionalCheckFailed"))
}

/// The stored item a `PutItem` was refused over (its condition failed; the request asked for it).
fn refused_item<R>(error: &SdkError<PutItemError, R>) -> Option<&Item> {
    match error.as_service_error() {
        Some(PutItemError::ConditionalCheckFailedException(e)) => e.item(),
        _ => None,
    }
}

/// A transaction's cancellation reason when another transaction held one of its items.
const TRANSACTION_CONFLICT: &str = "TransactionConflict";

/// Classifies an SDK failure: a failed condition is a [`StoreError::Conflict`] (callers that
/// create turn it into [`StoreError::AlreadyExists`]), and so is a single-item write that met a
/// transaction in progress on its item (`TransactionConflictException`; only job and document
/// items are ever in transactions, and no create of them is a single-item write); everything
/// else is unavailable.
fn classify<E, R>(error: SdkError<E, R>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    if matches!(
        error
            .as_service_error()
            .and_then(ProvideErrorMetadata::code),
        Some("ConditionalCheckFailedException" | "TransactionConflictException")
    ) {
        return StoreError::Conflict;
    }
    let message = match error.as_service_error() {
        Some(service) => format!(
            "DynamoDB refused the call: {}: {}",
            service.code().unwrap_or("unknown error"),
            service.message().unwrap_or("no message")
        ),
        None => format!("DynamoDB call failed: {error}"),
    };
    StoreError::Unavailable {
        message,
        source: Some(Box::new(error)),
    }
}

fn unavailable(message: &str, error: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::Unavailable {
        message: format!("{message}: {error}"),
        source: Some(Box::new(error)),
    }
}

impl JobStore for DynamoStore {
    async fn insert_job(
        &self,
        job: &ServiceJob,
        token: Option<&ClientTokenRecord>,
    ) -> Result<InsertJob, StoreError> {
        let items = schema::job_items(job, 1)?;
        // The job's two items go together or not at all (a request item alone would make the
        // id look taken); with a token, the token goes with them.
        let mut writes = vec![
            self.put(items.job, "attribute_not_exists(pk)", None, None)?,
            self.put(items.request, "attribute_not_exists(pk)", None, None)?,
        ];
        const TOKEN_WRITE: usize = 2;
        if let Some(token) = token {
            // An expired token (its TTL passed, DynamoDB has not deleted it yet) is free again:
            // the new record's time is now, and `ttl` is a reserved word.
            writes.push(self.put(
                schema::token_item(token),
                "attribute_not_exists(pk) OR #ttl < :now",
                Some(HashMap::from([(
                    ":now".to_owned(),
                    n(token.created_at.div_euclid(1000)),
                )])),
                Some(HashMap::from([("#ttl".to_owned(), schema::TTL.to_owned())])),
            )?);
        }
        match self.transact(writes).await {
            Ok(()) => Ok(InsertJob::Inserted),
            Err(Cancelled::Failed(e)) => Err(e),
            Err(Cancelled::Conditions(reasons)) => {
                // The token is checked first, as the other stores do: a reused token answers with
                // its record even when the job id is taken too.
                if let (Some(token), Some(reason)) =
                    (token, reasons.get(TOKEN_WRITE).filter(|r| r.failed))
                {
                    let existing = match &reason.old {
                        Some(old) => old.clone(),
                        None => self
                            .get_item(schema::token_pk(&token.token), "TOKEN")
                            .await?
                            .ok_or(StoreError::Conflict)?,
                    };
                    return Ok(InsertJob::TokenExists(schema::token_record(
                        &token.token,
                        &existing,
                    )?));
                }
                Err(StoreError::AlreadyExists)
            }
        }
    }

    async fn get_job(&self, job_id: &str) -> Result<Option<Versioned<ServiceJob>>, StoreError> {
        // The job's partition holds its two items: one strongly consistent query reads both,
        // billed as one read of their summed size.
        let items = self.partition(schema::job_pk(job_id)).await?;
        let sk = |item: &Item, want: &str| item.get(schema::SK) == Some(&s(want));
        let request = items.iter().find(|i| sk(i, schema::REQUEST_SK));
        items
            .iter()
            .find(|i| sk(i, schema::JOB_SK))
            .map(|job| schema::decode_job(job, request))
            .transpose()
    }

    async fn update_job(&self, job: &ServiceJob, expected: u64) -> Result<u64, StoreError> {
        // Version 0 is never stored and u64::MAX cannot be bumped: neither can match.
        let next = match expected.checked_add(1) {
            Some(next) if expected > 0 => next,
            _ => return Err(StoreError::Conflict),
        };
        let items = schema::job_items(job, next)?;
        let fingerprint = items
            .job
            .get(schema::REQUEST_HASH)
            .cloned()
            .unwrap_or_else(|| s(""));
        // The common case: one plain put of the job's own item.
        let request = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(items.job.clone()))
            .condition_expression("version = :expected AND rh = :rh")
            .expression_attribute_values(":expected", n(expected))
            .expression_attribute_values(":rh", fingerprint)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        let result = resending(|| request.clone().send(), item_collided).await;
        match result {
            Ok(_) => Ok(next),
            Err(error) => {
                let refused = match error.as_service_error() {
                    Some(PutItemError::ConditionalCheckFailedException(e)) => Some(e.item()),
                    _ => None,
                };
                match refused {
                    None => Err(classify(error)),
                    // Our own write, applied with its answer lost: the SDK's retry found it.
                    Some(Some(old)) if *old == items.job => Ok(next),
                    Some(old) if Self::request_was_the_difference(old, expected) => {
                        // The request changed: both items, in one transaction.
                        let writes = vec![
                            self.job_condition_version_only(&items, expected)?,
                            self.put_unconditional(items.request)?,
                        ];
                        match self.transact(writes).await {
                            Ok(()) => Ok(next),
                            Err(Cancelled::Failed(e)) => Err(e),
                            Err(Cancelled::Conditions(_)) => Err(StoreError::Conflict),
                        }
                    }
                    Some(_) => Err(StoreError::Conflict),
                }
            }
        }
    }

    /// A page of jobs, newest first. With a queue, or a status of a job holding capacity, one
    /// listing index partition is read; otherwise every queue's, and the pages are merged. A
    /// partition is read a page of index entries at a time, each page's jobs fetched, until
    /// `limit + 1` jobs are kept (the extra one says that a next page exists) or it ends.
    async fn list_jobs(&self, query: &JobQuery) -> Result<Page<Versioned<ServiceJob>>, StoreError> {
        let limit = query.limit.max(1);
        let wanted = limit.saturating_add(1);
        // One partition when the query names a queue or a status of a job holding capacity
        // (their partition is every queue's); else one per queue.
        let plans = match (&query.queue, query.status) {
            (queue, Some(status)) if status.is_dispatched() => {
                vec![ListPlan::new(queue.as_deref(), query)]
            }
            (Some(queue), _) => vec![ListPlan::new(Some(queue), query)],
            (None, _) => self
                .queue_names()
                .await?
                .iter()
                .map(|queue| ListPlan::new(Some(queue), query))
                .collect(),
        };
        let mut found = Vec::new();
        for plan in &plans {
            found.extend(self.list_partition_jobs(plan, query, wanted).await?);
        }
        if plans.len() > 1 {
            // Newest first across queues, as within each.
            found.sort_by(|(a, _), (b, _)| b.cmp(a));
        }
        found.truncate(wanted);
        let more = found.len() > limit;
        found.truncate(limit);
        let next = match found.last() {
            Some((_, last)) if more => Some(JobCursor {
                created_at: last.value.created_at,
                job_id: last.value.job_id.clone(),
            }),
            _ => None,
        };
        Ok(Page {
            items: found.into_iter().map(|(_, job)| job).collect(),
            next,
        })
    }
}

impl ConfigStore for DynamoStore {
    async fn create_resource<R: Resource>(&self, resource: &R) -> Result<(), StoreError> {
        let key = resource.key();
        let doc = schema::encode(&key, resource)?;
        let item = schema::document_item(schema::resource_pk(R::KIND), &key, 1, doc);
        match self.put_versioned(item, 0).await {
            Err(StoreError::Conflict) => Err(StoreError::AlreadyExists),
            other => other,
        }
    }

    async fn get_resource<R: Resource>(
        &self,
        key: &str,
    ) -> Result<Option<Versioned<R>>, StoreError> {
        self.get_item(schema::resource_pk(R::KIND), key)
            .await?
            .map(|item| schema::decode(&item))
            .transpose()
    }

    async fn list_resources<R: Resource>(&self) -> Result<Vec<Versioned<R>>, StoreError> {
        let items = self.partition(schema::resource_pk(R::KIND)).await?;
        items.iter().map(schema::decode).collect()
    }

    async fn update_resource<R: Resource>(
        &self,
        resource: &R,
        expected_version: u64,
    ) -> Result<u64, StoreError> {
        let next = match expected_version.checked_add(1) {
            Some(next) if expected_version > 0 => next,
            _ => return Err(StoreError::Conflict),
        };
        let key = resource.key();
        let doc = schema::encode(&key, resource)?;
        let item = schema::document_item(schema::resource_pk(R::KIND), &key, next, doc);
        self.put_versioned(item, expected_version).await?;
        Ok(next)
    }

    async fn delete_resource<R: Resource>(
        &self,
        key: &str,
        expected_version: u64,
    ) -> Result<(), StoreError> {
        // A transaction of one, not a `DeleteItem`: its client token (the SDK's, reused when it
        // retries) makes a retry after a lost answer succeed instead of finding the item gone.
        let delete = self.delete(schema::resource_pk(R::KIND), key, expected_version)?;
        match self.transact(vec![delete]).await {
            Ok(()) => Ok(()),
            Err(Cancelled::Conditions(_)) => Err(StoreError::Conflict),
            Err(Cancelled::Failed(e)) => Err(e),
        }
    }
}

impl SchedulingStore for DynamoStore {
    async fn get_document<D: Document>(
        &self,
        key: &str,
    ) -> Result<Option<Versioned<D>>, StoreError> {
        self.get_item(schema::document_pk(D::KIND), key)
            .await?
            .map(|item| schema::decode(&item))
            .transpose()
    }

    async fn list_documents<D: Document>(&self) -> Result<Vec<Versioned<D>>, StoreError> {
        let items = self.partition(schema::document_pk(D::KIND)).await?;
        items.iter().map(schema::decode).collect()
    }

    async fn commit(&self, writes: &[Write]) -> Result<(), StoreError> {
        match writes {
            [] => return Ok(()),
            // One write needs no transaction: a conditional put is as atomic, for half the
            // units (a cycle accounts each fair share's usage this way).
            [
                Write::Job {
                    job,
                    expected_version,
                },
            ] => {
                return self.update_job(job, *expected_version).await.map(|_| ());
            }
            [
                Write::Document {
                    kind,
                    key,
                    doc,
                    expected_version,
                },
            ] => {
                let item = Self::document_write(kind, key, doc, *expected_version)?;
                return self.put_versioned(item, *expected_version).await;
            }
            _ => {}
        }
        // First with every job's request as stored; if a job's request turns out to have
        // changed, once more writing those request items too.
        let items = self.commit_items(writes, &[])?;
        let reasons = match self.transact(items).await {
            Ok(()) => return Ok(()),
            Err(Cancelled::Failed(e)) => return Err(e),
            Err(Cancelled::Conditions(reasons)) => reasons,
        };
        let mut changed_requests = Vec::new();
        for (i, (write, reason)) in writes.iter().zip(&reasons).enumerate() {
            if !reason.failed {
                continue;
            }
            match write {
                Write::Job {
                    expected_version, ..
                } if Self::request_was_the_difference(reason.old.as_ref(), *expected_version) => {
                    changed_requests.push(i);
                }
                _ => return Err(StoreError::Conflict),
            }
        }
        if changed_requests.is_empty() {
            return Err(StoreError::Conflict);
        }
        let items = self.commit_items(writes, &changed_requests)?;
        match self.transact(items).await {
            Ok(()) => Ok(()),
            Err(Cancelled::Failed(e)) => Err(e),
            Err(Cancelled::Conditions(_)) => Err(StoreError::Conflict),
        }
    }

    async fn runnable_jobs(
        &self,
        queue: &str,
        share: &str,
        limit: usize,
    ) -> Result<Vec<Versioned<ServiceJob>>, StoreError> {
        let items = self.runnable_entries(queue, share, limit).await?;
        let mut jobs = self.fetch_jobs(&items).await?;
        // Left since the index was read: no longer this queue's to run.
        jobs.retain(|job| job.value.status == JobStatus::Runnable && job.value.job_queue == queue);
        Ok(jobs)
    }

    /// The heads straight from the runnable index's entries, which project every field of a
    /// [`RunnableHead`]: one query, no `BatchGetItem`. The entries are as fresh as the index: a
    /// job that left RUNNABLE a moment ago may still show, and a write based on its head fails
    /// its version check.
    async fn runnable_heads(
        &self,
        queue: &str,
        share: &str,
        limit: usize,
    ) -> Result<Vec<RunnableHead>, StoreError> {
        let items = self.runnable_entries(queue, share, limit).await?;
        items.iter().map(schema::runnable_head).collect()
    }

    /// A skip scan of the runnable index: one query of one item per share, each starting just
    /// past the previous share's keys.
    async fn runnable_shares(&self, queue: &str) -> Result<Vec<String>, StoreError> {
        // Bounded by the number of shares; the cap only guards against a corrupt index looping.
        const MAX_SHARES: usize = 100_000;
        let mut shares = Vec::new();
        let mut after: Option<String> = None;
        for _ in 0..MAX_SHARES {
            let mut request = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(schema::index::RUNNABLE)
                .expression_attribute_values(":q", s(queue))
                .limit(1);
            request = match &after {
                None => request.key_condition_expression("rq = :q"),
                Some(after) => request
                    .key_condition_expression("rq = :q AND #s > :after")
                    .expression_attribute_names("#s", schema::RUNNABLE_SK)
                    .expression_attribute_values(":after", s(after)),
            };
            let output = request.send().await.map_err(classify)?;
            // No filter, so `Limit 1` finds an item whenever one is left in the range.
            let Some(item) = output.items().first() else {
                break;
            };
            let sort = schema::text("runnable index", item, schema::RUNNABLE_SK)?;
            // Shares never contain the separator, so the first field is the whole share (empty
            // for a FIFO queue's jobs).
            let share = sort.split(SEP).next().unwrap_or_default().to_owned();
            // Every key of this share starts `{share}#`; `$` sorts just after `#`.
            after = Some(format!("{share}$"));
            shares.push(share);
        }
        shares.sort();
        shares.dedup();
        Ok(shares)
    }

    /// The dispatched partition's jobs, fetched, by id.
    async fn dispatched_jobs(&self) -> Result<Vec<Versioned<ServiceJob>>, StoreError> {
        let items = self.dispatched_entries().await?;
        let mut jobs = self.fetch_jobs(&items).await?;
        jobs.retain(|job| job.value.status.is_dispatched());
        jobs.sort_by(|a, b| a.value.job_id.cmp(&b.value.job_id));
        Ok(jobs)
    }

    /// The holders straight from the dispatched partition's entries, which project every field
    /// of a [`CapacityHolder`]: one query, no `BatchGetItem`, by id. The entries are as fresh as
    /// the index: a job that ended a moment ago may still show (whatever the scheduler does to
    /// it re-reads it first).
    async fn capacity_holders(&self) -> Result<Vec<CapacityHolder>, StoreError> {
        let items = self.dispatched_entries().await?;
        let mut holders = items
            .iter()
            .map(schema::capacity_holder)
            .collect::<Result<Vec<_>, _>>()?;
        holders.sort_by(|a, b| a.job_id.cmp(&b.job_id));
        Ok(holders)
    }

    /// Sets the job item's `sr` (or removes it) and bumps its version, in place: one `UpdateItem`
    /// with the version as its condition, no read. The runnable entry, which projects both,
    /// follows.
    async fn set_status_reason(
        &self,
        job_id: &str,
        expected: u64,
        reason: Option<String>,
    ) -> Result<u64, StoreError> {
        let next = match expected.checked_add(1) {
            Some(next) if expected > 0 => next,
            _ => return Err(StoreError::Conflict),
        };
        let mut request = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(schema::key(schema::job_pk(job_id), schema::JOB_SK)))
            .condition_expression("#v = :expected")
            .expression_attribute_names("#v", schema::VERSION)
            .expression_attribute_names("#r", schema::STATUS_REASON)
            .expression_attribute_values(":expected", n(expected))
            .expression_attribute_values(":next", n(next));
        request = match &reason {
            Some(reason) => request
                .update_expression("SET #r = :r, #v = :next")
                .expression_attribute_values(":r", s(reason)),
            None => request.update_expression("SET #v = :next REMOVE #r"),
        };
        let request = request
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        match resending(|| request.clone().send(), item_collided).await {
            Ok(_) => Ok(next),
            Err(error) => match error.as_service_error() {
                Some(UpdateItemError::ConditionalCheckFailedException(refused)) => {
                    // Our own update, applied with its answer lost, is at `next` with `reason`.
                    let ours = refused.item().is_some_and(|old| {
                        old.get(schema::VERSION) == Some(&n(next))
                            && old.get(schema::STATUS_REASON) == reason.as_deref().map(s).as_ref()
                    });
                    if ours {
                        Ok(next)
                    } else {
                        Err(StoreError::Conflict)
                    }
                }
                _ => Err(classify(error)),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    //! What the store makes of DynamoDB's answers that moto never gives.
    #![allow(clippy::unwrap_used)]

    use axum::http::StatusCode;
    use serde_json::{Value, json};
    use trainyard_app::contract::job;
    use trainyard_app::ports::{EnvironmentUsage, JobStore, SchedulingStore, StoreError, Write};

    use super::stand_in::stand_in;
    use super::{CONFLICT_PAUSE_BASE, CONFLICT_RESENDS};

    /// `TransactWriteItems` cancelled because another transaction held one of its items.
    fn transaction_conflict() -> (StatusCode, Value) {
        (
            StatusCode::BAD_REQUEST,
            json!({
                "__type": "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
                "message": "Transaction cancelled, please refer cancellation reasons for specific reasons [None, TransactionConflict]",
                "CancellationReasons": [
                    {"Code": "None"},
                    {"Code": "TransactionConflict", "Message": "Transaction is ongoing for the item"}
                ]
            }),
        )
    }

    fn usage_commit() -> [Write; 2] {
        let usage = EnvironmentUsage {
            environment: "env".into(),
            ..EnvironmentUsage::default()
        };
        [
            Write::job(job("j").build(), 3),
            Write::document(&usage, 1).unwrap(),
        ]
    }

    /// A transaction that collided with another applied nothing: it is sent again unchanged,
    /// after a pause, and succeeds once the other is done.
    #[tokio::test]
    async fn a_transaction_that_collides_with_another_is_sent_again() {
        let ok = (StatusCode::OK, json!({}));
        let answers = vec![transaction_conflict(), transaction_conflict(), ok];
        let (store, script) = stand_in(answers).await;
        let started = std::time::Instant::now();
        let result = store.commit(&usage_commit()).await;
        assert!(result.is_ok(), "{result:?}");
        let script = script.lock().unwrap();
        assert_eq!(script.requests.len(), 3, "sent, then sent again twice");
        assert!(
            script
                .requests
                .iter()
                .all(|r| r["TransactItems"] == script.requests[0]["TransactItems"]),
            "each resend carries the same writes"
        );
        assert!(
            started.elapsed() >= (CONFLICT_PAUSE_BASE + CONFLICT_PAUSE_BASE * 2) / 2,
            "the resends waited: {:?}",
            started.elapsed()
        );
    }

    /// Colliding on every resend is a conflict, which the use-cases handle as a lost race (re-read
    /// and retry), not an outage.
    #[tokio::test]
    async fn a_transaction_that_keeps_colliding_is_a_conflict_not_an_outage() {
        let sends = 1 + CONFLICT_RESENDS as usize;
        let (store, script) = stand_in(vec![transaction_conflict(); sends]).await;
        let result = store.commit(&usage_commit()).await;
        assert!(matches!(result, Err(StoreError::Conflict)), "{result:?}");
        assert_eq!(script.lock().unwrap().requests.len(), sends);
    }

    #[tokio::test]
    async fn a_write_that_meets_a_transaction_in_progress_is_sent_again() {
        let collision = (
            StatusCode::BAD_REQUEST,
            json!({
                "__type": "com.amazonaws.dynamodb.v20120810#TransactionConflictException",
                "message": "Transaction is ongoing for the item"
            }),
        );
        let (store, script) = stand_in(vec![collision, (StatusCode::OK, json!({}))]).await;
        let result = store.update_job(&job("j").build(), 3).await;
        assert_eq!(result.ok(), Some(4));
        assert_eq!(script.lock().unwrap().requests.len(), 2);
    }

    #[tokio::test]
    async fn a_write_that_keeps_meeting_a_transaction_in_progress_is_a_conflict() {
        let answer = (
            StatusCode::BAD_REQUEST,
            json!({
                "__type": "com.amazonaws.dynamodb.v20120810#TransactionConflictException",
                "message": "Transaction is ongoing for the item"
            }),
        );
        let sends = 1 + CONFLICT_RESENDS as usize;
        let (store, script) = stand_in(vec![answer; sends]).await;
        let result = store.update_job(&job("j").build(), 3).await;
        assert!(matches!(result, Err(StoreError::Conflict)), "{result:?}");
        assert_eq!(
            script.lock().unwrap().requests.len(),
            sends,
            "sent again each time"
        );
    }
}
