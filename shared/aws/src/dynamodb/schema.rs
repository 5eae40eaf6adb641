//! The table's shape: attribute names, index names, the sort-key encodings, how a job becomes an
//! item, and [`create_table`]. The layout and the reasons behind it are in
//! `docs/storage-dynamodb.md`; every name here is stored, so never change one.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::client::Waiters;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, GlobalSecondaryIndex, KeySchemaElement,
    KeyType, Projection, ProjectionType, ScalarAttributeType, TimeToLiveSpecification,
};
use trainyard_app::ports::{ClientTokenRecord, StoreError, share_key};
use trainyard_domain::arn::ResourceKind;
use trainyard_domain::job::{JobStatus, ServiceJob};

/// An item, as the SDK passes it.
pub(crate) type Item = HashMap<String, AttributeValue>;

/// Partition key of every item (`JOB#{id}`, `TOKEN#{token}`, `RES#{kind}`, `DOC#{kind}`).
pub(crate) const PK: &str = "pk";
/// Sort key of every item (`JOB`, `TOKEN`, or the resource or document key).
pub(crate) const SK: &str = "sk";
/// The item's version (number).
pub(crate) const VERSION: &str = "version";
/// The JSON document (string).
pub(crate) const DOC: &str = "doc";
/// Client tokens: epoch seconds after which DynamoDB may delete the item.
pub(crate) const TTL: &str = "ttl";

/// Jobs: the plain attributes `list_jobs` filters on.
pub(crate) const JOB_ID: &str = "job_id";
pub(crate) const SHARE_IDENTIFIER: &str = "share_identifier";
pub(crate) const QUOTA_SHARE_NAME: &str = "quota_share_name";
pub(crate) const NAME_LOWER: &str = "name_lower";

/// Runnable indexes: partition attribute (the queue; present only while RUNNABLE).
pub(crate) const RUNNABLE_QUEUE: &str = "rq";
const RUNNABLE_FIFO_SK: &str = "rfifo";
const RUNNABLE_PRIORITY_SK: &str = "rprio";
pub(crate) const RUNNABLE_SHARE_FIFO_SK: &str = "rsfifo";
const RUNNABLE_SHARE_PRIORITY_SK: &str = "rsprio";

/// Listing indexes: partitions by queue, queue#status, status and everything; one sort key.
pub(crate) const LIST_QUEUE: &str = "lq";
pub(crate) const LIST_QUEUE_STATUS: &str = "lqs";
pub(crate) const LIST_STATUS: &str = "ls";
pub(crate) const LIST_ALL: &str = "la";
/// `{created_at}#{job_id}`, newest first when read backwards.
pub(crate) const LIST_SK: &str = "lsk";
/// The single partition value of the `by-created` index.
pub(crate) const LIST_ALL_VALUE: &str = "JOBS";

/// Dispatched index: partition attribute, present only while SCHEDULED, STARTING or RUNNING.
pub(crate) const DISPATCHED: &str = "dp";
/// The single partition value of the `dispatched` index.
pub(crate) const DISPATCHED_VALUE: &str = "DISPATCHED";

/// Index names.
pub(crate) mod index {
    /// A queue's RUNNABLE jobs by runnable time, then id.
    pub(crate) const RUNNABLE_FIFO: &str = "runnable-fifo";
    /// A queue's RUNNABLE jobs by priority descending, runnable time, id.
    pub(crate) const RUNNABLE_PRIORITY: &str = "runnable-priority";
    /// A queue's RUNNABLE jobs by share, then runnable time, id.
    pub(crate) const RUNNABLE_SHARE_FIFO: &str = "runnable-share-fifo";
    /// A queue's RUNNABLE jobs by share, then priority descending, runnable time, id.
    pub(crate) const RUNNABLE_SHARE_PRIORITY: &str = "runnable-share-priority";
    /// Jobs of a queue by creation.
    pub(crate) const BY_QUEUE: &str = "by-queue";
    /// Jobs of a queue in a status by creation.
    pub(crate) const BY_QUEUE_STATUS: &str = "by-queue-status";
    /// Jobs in a status by creation.
    pub(crate) const BY_STATUS: &str = "by-status";
    /// Every job by creation.
    pub(crate) const BY_CREATED: &str = "by-created";
    /// Jobs holding capacity, by id.
    pub(crate) const DISPATCHED: &str = "dispatched";
}

/// How long a client token is kept before DynamoDB may expire it: the contract allows forgetting
/// after a day; a second day covers TTL deletion being lazy in the other direction (never early).
const TOKEN_TTL_S: i64 = 2 * 24 * 3600;

/// Separates the fields of composite sort keys. It sorts below every character allowed in queue,
/// share and job names (letters, digits, `-`, `_`, `*`), so `{share}#…` groups by share.
pub(crate) const SEP: char = '#';

/// A time as 20 digits that sort like the number (the sign bit flipped, so negatives work).
pub(crate) fn sortable_time(ms: i64) -> String {
    format!("{:020}", ms.cast_unsigned() ^ (1_u64 << 63))
}

/// A priority as 10 digits that sort highest first.
fn inverted_priority(priority: u32) -> String {
    format!("{:010}", u32::MAX - priority)
}

/// The `lsk` of a job, also the key of a [`JobCursor`](trainyard_app::ports::JobCursor).
pub(crate) fn list_sort_key(created_at: i64, job_id: &str) -> String {
    format!("{}{SEP}{job_id}", sortable_time(created_at))
}

/// The partition key of a job.
pub(crate) fn job_pk(job_id: &str) -> String {
    format!("JOB{SEP}{job_id}")
}

/// The partition key of a client token.
pub(crate) fn token_pk(token: &str) -> String {
    format!("TOKEN{SEP}{token}")
}

/// The partition key of a resource kind.
pub(crate) fn resource_pk(kind: ResourceKind) -> String {
    let name = match kind {
        ResourceKind::ServiceJob => "service-job",
        ResourceKind::JobQueue => "job-queue",
        ResourceKind::ServiceEnvironment => "service-environment",
        ResourceKind::SchedulingPolicy => "scheduling-policy",
        ResourceKind::QuotaShare => "quota-share",
    };
    format!("RES{SEP}{name}")
}

/// The partition key of a document kind.
pub(crate) fn document_pk(kind: &str) -> String {
    format!("DOC{SEP}{kind}")
}

/// The `lqs` value: queue and status.
pub(crate) fn queue_status(queue: &str, status: JobStatus) -> String {
    format!("{queue}{SEP}{}", status.as_str())
}

pub(crate) fn s(value: impl Into<String>) -> AttributeValue {
    AttributeValue::S(value.into())
}

pub(crate) fn n(value: impl ToString) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

/// The primary key of an item.
pub(crate) fn key(pk: String, sk: &str) -> Item {
    HashMap::from([(PK.to_owned(), s(pk)), (SK.to_owned(), s(sk))])
}

/// A whole job item at `version`: the document, the filter attributes and the sparse index
/// attributes its status calls for. Updates put the whole item, so an attribute the new status
/// does not call for disappears, and the job leaves that index.
pub(crate) fn job_item(job: &ServiceJob, version: u64) -> Result<Item, StoreError> {
    let doc = encode(&job.job_id, job)?;
    let mut item = key(job_pk(&job.job_id), "JOB");
    let mut put = |name: &str, value: AttributeValue| {
        item.insert(name.to_owned(), value);
    };
    put(VERSION, n(version));
    put(DOC, s(doc));
    put(JOB_ID, s(&job.job_id));
    put(NAME_LOWER, s(job.job_name.to_lowercase()));
    if let Some(share) = &job.share_identifier {
        put(SHARE_IDENTIFIER, s(share));
    }
    if let Some(quota_share) = &job.quota_share_name {
        put(QUOTA_SHARE_NAME, s(quota_share));
    }
    put(LIST_QUEUE, s(&job.job_queue));
    put(
        LIST_QUEUE_STATUS,
        s(queue_status(&job.job_queue, job.status)),
    );
    put(LIST_STATUS, s(job.status.as_str()));
    put(LIST_ALL, s(LIST_ALL_VALUE));
    put(LIST_SK, s(list_sort_key(job.created_at, &job.job_id)));
    if job.status == JobStatus::Runnable {
        let share = share_key(job);
        let time = sortable_time(job.runnable_at.unwrap_or(job.created_at));
        let priority = inverted_priority(job.priority());
        let id = &job.job_id;
        put(RUNNABLE_QUEUE, s(&job.job_queue));
        put(RUNNABLE_FIFO_SK, s(format!("{time}{SEP}{id}")));
        put(
            RUNNABLE_PRIORITY_SK,
            s(format!("{priority}{SEP}{time}{SEP}{id}")),
        );
        put(
            RUNNABLE_SHARE_FIFO_SK,
            s(format!("{share}{SEP}{time}{SEP}{id}")),
        );
        put(
            RUNNABLE_SHARE_PRIORITY_SK,
            s(format!("{share}{SEP}{priority}{SEP}{time}{SEP}{id}")),
        );
    }
    if matches!(
        job.status,
        JobStatus::Scheduled | JobStatus::Starting | JobStatus::Running
    ) {
        put(DISPATCHED, s(DISPATCHED_VALUE));
    }
    Ok(item)
}

/// The runnable index and sort attribute for an order, with or without a share.
pub(crate) fn runnable_index(
    order: trainyard_app::ports::RunnableOrder,
    by_share: bool,
) -> (&'static str, &'static str) {
    use trainyard_app::ports::RunnableOrder::{Fifo, Priority};
    match (order, by_share) {
        (Fifo, false) => (index::RUNNABLE_FIFO, RUNNABLE_FIFO_SK),
        (Priority, false) => (index::RUNNABLE_PRIORITY, RUNNABLE_PRIORITY_SK),
        (Fifo, true) => (index::RUNNABLE_SHARE_FIFO, RUNNABLE_SHARE_FIFO_SK),
        (Priority, true) => (index::RUNNABLE_SHARE_PRIORITY, RUNNABLE_SHARE_PRIORITY_SK),
    }
}

/// A client-token item.
pub(crate) fn token_item(token: &ClientTokenRecord) -> Item {
    let mut item = key(token_pk(&token.token), "TOKEN");
    item.insert("request_hash".to_owned(), s(&token.request_hash));
    item.insert(JOB_ID.to_owned(), s(&token.job_id));
    item.insert("created_at".to_owned(), n(token.created_at));
    item.insert(
        TTL.to_owned(),
        n(token
            .created_at
            .div_euclid(1000)
            .saturating_add(TOKEN_TTL_S)),
    );
    item
}

/// Reads a client-token item back.
pub(crate) fn token_record(token: &str, item: &Item) -> Result<ClientTokenRecord, StoreError> {
    let key = token_pk(token);
    Ok(ClientTokenRecord {
        token: token.to_owned(),
        request_hash: text(&key, item, "request_hash")?.to_owned(),
        job_id: text(&key, item, JOB_ID)?.to_owned(),
        created_at: number(&key, item, "created_at")?,
    })
}

/// A resource or document item: key, version, JSON.
pub(crate) fn document_item(pk: String, sk: &str, version: u64, doc: String) -> Item {
    let mut item = key(pk, sk);
    item.insert(VERSION.to_owned(), n(version));
    item.insert(DOC.to_owned(), s(doc));
    item
}

pub(crate) fn encode<T: serde::Serialize>(key: &str, value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Corrupt {
        key: key.to_owned(),
        message: format!("cannot encode: {e}"),
    })
}

/// Decodes an item's `doc` and `version`.
pub(crate) fn decode<T: serde::de::DeserializeOwned>(
    item: &Item,
) -> Result<trainyard_app::ports::Versioned<T>, StoreError> {
    let key = match (item.get(PK), item.get(SK)) {
        (Some(AttributeValue::S(pk)), Some(AttributeValue::S(sk))) => format!("{pk}/{sk}"),
        _ => "(an item without a key)".to_owned(),
    };
    let version = number(&key, item, VERSION)?;
    let version = u64::try_from(version).map_err(|_| StoreError::Corrupt {
        key: key.clone(),
        message: format!("negative version {version}"),
    })?;
    let value = serde_json::from_str(text(&key, item, DOC)?).map_err(|e| StoreError::Corrupt {
        key: key.clone(),
        message: e.to_string(),
    })?;
    Ok(trainyard_app::ports::Versioned { value, version })
}

pub(crate) fn text<'a>(key: &str, item: &'a Item, name: &str) -> Result<&'a str, StoreError> {
    match item.get(name) {
        Some(AttributeValue::S(value)) => Ok(value),
        _ => Err(StoreError::Corrupt {
            key: key.to_owned(),
            message: format!("no string attribute {name}"),
        }),
    }
}

fn number(key: &str, item: &Item, name: &str) -> Result<i64, StoreError> {
    match item.get(name) {
        Some(AttributeValue::N(value)) => value.parse().map_err(|_| StoreError::Corrupt {
            key: key.to_owned(),
            message: format!("attribute {name} is not an integer: {value}"),
        }),
        _ => Err(StoreError::Corrupt {
            key: key.to_owned(),
            message: format!("no number attribute {name}"),
        }),
    }
}

/// Failures creating the table.
#[derive(Debug, thiserror::Error)]
pub enum CreateTableError {
    /// A request could not be built (a bug in this module).
    #[error("cannot build the CreateTable request: {0}")]
    Build(#[source] aws_sdk_dynamodb::error::BuildError),
    /// DynamoDB refused or failed a call.
    #[error("{operation} failed: {source}")]
    Call {
        /// `CreateTable`, `DescribeTable` or `UpdateTimeToLive`.
        operation: &'static str,
        /// The SDK's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// How long [`create_table`] waits for the table to become ACTIVE.
const TABLE_ACTIVE_TIMEOUT: Duration = Duration::from_secs(300);

/// Creates `table` (on-demand capacity, every index, TTL on client tokens) and waits until it is
/// ACTIVE. Used by tests and, later, by the infrastructure.
pub async fn create_table(client: &Client, table: &str) -> Result<(), CreateTableError> {
    let string_attr = |name: &str| {
        AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(ScalarAttributeType::S)
            .build()
            .map_err(CreateTableError::Build)
    };
    let key_schema = |hash: &str, range: &str| -> Result<Vec<KeySchemaElement>, CreateTableError> {
        let element = |name: &str, key_type: KeyType| {
            KeySchemaElement::builder()
                .attribute_name(name)
                .key_type(key_type)
                .build()
                .map_err(CreateTableError::Build)
        };
        Ok(vec![
            element(hash, KeyType::Hash)?,
            element(range, KeyType::Range)?,
        ])
    };
    let indexes = [
        (index::RUNNABLE_FIFO, RUNNABLE_QUEUE, RUNNABLE_FIFO_SK),
        (
            index::RUNNABLE_PRIORITY,
            RUNNABLE_QUEUE,
            RUNNABLE_PRIORITY_SK,
        ),
        (
            index::RUNNABLE_SHARE_FIFO,
            RUNNABLE_QUEUE,
            RUNNABLE_SHARE_FIFO_SK,
        ),
        (
            index::RUNNABLE_SHARE_PRIORITY,
            RUNNABLE_QUEUE,
            RUNNABLE_SHARE_PRIORITY_SK,
        ),
        (index::BY_QUEUE, LIST_QUEUE, LIST_SK),
        (index::BY_QUEUE_STATUS, LIST_QUEUE_STATUS, LIST_SK),
        (index::BY_STATUS, LIST_STATUS, LIST_SK),
        (index::BY_CREATED, LIST_ALL, LIST_SK),
        (index::DISPATCHED, DISPATCHED, JOB_ID),
    ];
    let mut attributes = vec![PK, SK];
    for (_, hash, range) in indexes {
        for name in [hash, range] {
            if !attributes.contains(&name) {
                attributes.push(name);
            }
        }
    }
    let mut request = client
        .create_table()
        .table_name(table)
        .billing_mode(BillingMode::PayPerRequest)
        .set_key_schema(Some(key_schema(PK, SK)?));
    for name in attributes {
        request = request.attribute_definitions(string_attr(name)?);
    }
    for (name, hash, range) in indexes {
        request = request.global_secondary_indexes(
            GlobalSecondaryIndex::builder()
                .index_name(name)
                .set_key_schema(Some(key_schema(hash, range)?))
                .projection(
                    Projection::builder()
                        .projection_type(ProjectionType::All)
                        .build(),
                )
                .build()
                .map_err(CreateTableError::Build)?,
        );
    }
    let call = |operation: &'static str| {
        move |e: Box<dyn std::error::Error + Send + Sync>| CreateTableError::Call {
            operation,
            source: e,
        }
    };
    request
        .send()
        .await
        .map_err(|e| call("CreateTable")(Box::new(e)))?;
    client
        .wait_until_table_exists()
        .table_name(table)
        .wait(TABLE_ACTIVE_TIMEOUT)
        .await
        .map_err(|e| call("DescribeTable")(Box::new(e)))?;
    client
        .update_time_to_live()
        .table_name(table)
        .time_to_live_specification(
            TimeToLiveSpecification::builder()
                .attribute_name(TTL)
                .enabled(true)
                .build()
                .map_err(CreateTableError::Build)?,
        )
        .send()
        .await
        .map_err(|e| call("UpdateTimeToLive")(Box::new(e)))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sortable_times_sort_like_the_numbers() {
        let times = [i64::MIN, -5, -1, 0, 1, 999, 1_700_000_000_000, i64::MAX];
        for pair in times.windows(2) {
            assert!(
                sortable_time(pair[0]) < sortable_time(pair[1]),
                "{} vs {}",
                pair[0],
                pair[1]
            );
            assert_eq!(sortable_time(pair[0]).len(), 20);
        }
    }

    #[test]
    fn inverted_priorities_sort_highest_first() {
        let priorities = [u32::MAX, 9_999, 10, 9, 1, 0];
        for pair in priorities.windows(2) {
            assert!(inverted_priority(pair[0]) < inverted_priority(pair[1]));
        }
    }

    #[test]
    fn list_keys_order_by_time_then_id_and_the_separator_sorts_first() {
        assert!(list_sort_key(5, "b") < list_sort_key(5, "c"));
        assert!(list_sort_key(5, "zzz") < list_sort_key(6, "a"));
        // `{share}#…` must group a share before any longer share sharing its prefix.
        let grouped = format!("a{SEP}9");
        for longer_share in ["a-", "a_", "aA", "a0", "a*"] {
            assert!(grouped.as_str() < longer_share, "{longer_share}");
        }
    }
}
