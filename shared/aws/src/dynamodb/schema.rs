//! The table's shape: attribute names, index names, the sort-key encodings, how a job becomes an
//! item, and [`create_table`]. The layout and the reasons behind it are in
//! `docs/storage-dynamodb.md`; every name here is stored, so never change one.

use std::collections::HashMap;
use std::time::Duration;
use trainyard_domain::random::Fnv1a;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::client::Waiters;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, GlobalSecondaryIndex, KeySchemaElement,
    KeyType, Projection, ProjectionType, ScalarAttributeType, TimeToLiveSpecification,
};
use trainyard_app::ports::{CapacityHolder, ClientTokenRecord, RunnableHead, StoreError};
use trainyard_domain::arn::ResourceKind;
use trainyard_domain::job::{JobStatus, ServiceJob};
use trainyard_domain::order::share_key;

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
/// Jobs: the sort key of the job's own item (what changes) and of its request item (written once).
pub(crate) const JOB_SK: &str = "JOB";
pub(crate) const REQUEST_SK: &str = "REQUEST";
/// Jobs: a fingerprint of the request item's document, kept in the job item so that a write of
/// a job whose request changed is caught by its condition.
pub(crate) const REQUEST_HASH: &str = "rh";
/// The job's JSON fields kept in the request item: set at submit and never changed by any
/// use-case (the fingerprint makes a change safe anyway), the payload and its parsed form above
/// all. What is left, the job item, is rewritten on every change and stays near 1 KB.
pub(crate) const REQUEST_FIELDS: [&str; 8] = [
    "serviceRequestPayload",
    "training",
    "serviceJobType",
    "clientToken",
    "retryStrategy",
    "timeoutConfig",
    "preemptionConfiguration",
    "owner",
];
/// Client tokens: epoch seconds after which DynamoDB may delete the item.
pub(crate) const TTL: &str = "ttl";

/// Jobs: the plain attributes `list_jobs` filters on.
pub(crate) const JOB_ID: &str = "job_id";
pub(crate) const SHARE_IDENTIFIER: &str = "share_identifier";
pub(crate) const QUOTA_SHARE_NAME: &str = "quota_share_name";
pub(crate) const NAME_LOWER: &str = "name_lower";

// Jobs: what a `RunnableHead` needs besides the runnable indexes' keys and the attributes
// above, as attributes of the job item, so that the runnable indexes can project them and a cycle
// reads its heads from the index alone. Short names: the job item is rewritten on every change
// and billed per started KB, and must stay within one.

/// `schedulingPriority` (N; absent when unset).
pub(crate) const PRIORITY: &str = "prio";
/// `statusReason` (S; absent when none).
pub(crate) const STATUS_REASON: &str = "sr";
/// `notBefore` (N, epoch ms; absent when none).
pub(crate) const NOT_BEFORE: &str = "nb";
/// The instances per instance type the job asks for or holds (M of N):
/// `ServiceJob::held_instances`, a copy of the request item's `training.instances` but while an
/// attempt runs on one of its `InstancePreferences`. Always written, even empty.
pub(crate) const INSTANCES: &str = "ins";
/// The request's `MaxRuntimeInSeconds` (N; absent when not given). A copy, as [`INSTANCES`].
pub(crate) const MAX_RUNTIME_S: &str = "mrt";
/// While the job holds capacity: [`CapacityHolder::started_at`] (N, epoch ms), set at dispatch
/// and unchanged until the job ends, so its `by-queue-status` entry stays put meanwhile.
pub(crate) const HELD_SINCE: &str = "hs";
/// The request's `CheckpointConfig.S3Uri` (S; absent when not given). A copy, as
/// [`INSTANCES`]: a cycle that plans a preemption lists it.
pub(crate) const CHECKPOINT_S3_URI: &str = "ck";
/// How many of the job's attempts were preempted (N; absent when none): a copy of
/// `preemptionSummary.preemptedAttemptCount` for the planner's anti-thrash rule.
pub(crate) const PREEMPTIONS: &str = "pre";
/// While the job holds capacity and its attempt has been asked to stop (BOOL true; absent
/// otherwise): `CapacityHolder::stopping`, set once when the stop is asked for.
pub(crate) const STOPPING: &str = "stp";
/// `lineOffsetMs` (N; absent when 0): a RUNNABLE job's place in line is its runnable time plus
/// this, and the runnable sort key holds that sum ([`runnable_key`]).
pub(crate) const LINE_OFFSET: &str = "lo";

/// The job's JSON fields kept as attributes of the job item rather than in its `doc` (the head
/// attributes above that the job owns; the two copies of the request are written beside it):
/// (JSON field, attribute). Moved, not copied, so the item does not grow by them.
const ATTRIBUTE_FIELDS: [(&str, &str); 4] = [
    ("schedulingPriority", PRIORITY),
    ("statusReason", STATUS_REASON),
    ("notBefore", NOT_BEFORE),
    ("lineOffsetMs", LINE_OFFSET),
];

/// Runnable index: partition attribute (the queue; present only while RUNNABLE).
pub(crate) const RUNNABLE_QUEUE: &str = "rq";
/// Runnable index: sort attribute, the job's place in its share's line (see [`runnable_key`]).
pub(crate) const RUNNABLE_SK: &str = "rk";

/// Listing indexes: partitions by queue and by status group ([`status_partition`]); one sort
/// key. A listing without a queue reads every queue's partition.
pub(crate) const LIST_QUEUE: &str = "lq";
pub(crate) const LIST_QUEUE_STATUS: &str = "lqs";
/// `{created_at}#{job_id}`, newest first when read backwards.
pub(crate) const LIST_SK: &str = "lsk";

/// Index names.
pub(crate) mod index {
    /// A queue's RUNNABLE jobs by share, then in line: priority descending (within a share),
    /// runnable time, id.
    pub(crate) const RUNNABLE: &str = "runnable";
    /// Jobs of a queue by creation.
    pub(crate) const BY_QUEUE: &str = "by-queue";
    /// Jobs of a queue in a status, by creation; the jobs holding capacity (SCHEDULED, STARTING
    /// and RUNNING, of every queue) by creation.
    pub(crate) const BY_QUEUE_STATUS: &str = "by-queue-status";
}

/// What the runnable index projects: with its keys (queue, and the runnable time in the sort
/// key), everything a [`RunnableHead`] holds, the version included, so that a write based on a
/// head is still version-checked. Small (about 300 bytes an entry, one write unit), but it
/// changes with every write of a RUNNABLE job (the version does), so such a write also rewrites
/// the job's runnable entry: one write unit (`docs/storage-dynamodb.md`).
pub(crate) const HEAD_ATTRIBUTES: &[&str] = &[
    JOB_ID,
    VERSION,
    SHARE_IDENTIFIER,
    QUOTA_SHARE_NAME,
    PRIORITY,
    STATUS_REASON,
    NOT_BEFORE,
    INSTANCES,
    MAX_RUNTIME_S,
    LINE_OFFSET,
];

/// The attributes `list_jobs` filters on, projected into the `by-queue` index. None of them
/// changes after submit, so they never cause an index write by themselves.
pub(crate) const LIST_FILTERS: &[&str] = &[SHARE_IDENTIFIER, QUOTA_SHARE_NAME, NAME_LOWER];

/// What `by-queue-status` projects: the filters, the queue (its dispatched partition, every
/// queue's, is filtered on it), and the rest of a [`CapacityHolder`], so that a cycle reads the
/// jobs holding capacity from the index alone. Set at submit, or ([`HELD_SINCE`]) at dispatch:
/// none changes while a job stays in one partition, but for a new `schedulingPriority` and
/// ([`STOPPING`]) a stop asked for.
pub(crate) const STATUS_PROJECTION: &[&str] = &[
    SHARE_IDENTIFIER,
    QUOTA_SHARE_NAME,
    NAME_LOWER,
    LIST_QUEUE,
    JOB_ID,
    PRIORITY,
    INSTANCES,
    MAX_RUNTIME_S,
    HELD_SINCE,
    CHECKPOINT_S3_URI,
    PREEMPTIONS,
    STOPPING,
];

/// Every global secondary index: (name, partition attribute, sort attribute, the attributes it
/// projects besides the keys, the table's `pk`/`sk` and its own).
///
/// No index holds the job's document: an index copy is written on every change of the item it
/// copies, at the size of that copy, so whole-item copies made each job write cost a write unit
/// per KB per index. Readers of the listing indexes take the keys from the index and fetch the
/// items from the table (`BatchGetItem`); the runnable index holds the head attributes, so the
/// cycle reads them alone.
pub(crate) const INDEXES: [(&str, &str, &str, &[&str]); 3] = [
    (
        index::RUNNABLE,
        RUNNABLE_QUEUE,
        RUNNABLE_SK,
        HEAD_ATTRIBUTES,
    ),
    (index::BY_QUEUE, LIST_QUEUE, LIST_SK, LIST_FILTERS),
    (
        index::BY_QUEUE_STATUS,
        LIST_QUEUE_STATUS,
        LIST_SK,
        STATUS_PROJECTION,
    ),
];

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

/// Reads a [`sortable_time`] back.
fn parse_sortable_time(text: &str) -> Option<i64> {
    let bits: u64 = text.parse().ok()?;
    Some((bits ^ (1_u64 << 63)).cast_signed())
}

/// A RUNNABLE job's place in the runnable index, in the order of
/// [`runnable_rank`](trainyard_domain::order::runnable_rank) within its share:
/// `{share}#{invPriority}#{lineAt}#{jobId}`, or `#{lineAt}#{jobId}` for a job without a
/// share (a FIFO queue's: priority does not count there). `lineAt` is
/// [`ServiceJob::line_at`]: its runnable time plus its [`LINE_OFFSET`]. Grouped by share first, so a share's
/// line is one key prefix (`{share}#`) and [`runnable_shares`] can skip from share to share.
///
/// [`runnable_shares`]: trainyard_app::ports::Store::runnable_shares
pub(crate) fn runnable_key(job: &ServiceJob) -> String {
    let share = share_key(job);
    let time = sortable_time(job.line_at());
    let id = &job.job_id;
    if share.is_empty() {
        format!("{SEP}{time}{SEP}{id}")
    } else {
        let priority = inverted_priority(job.priority());
        format!("{share}{SEP}{priority}{SEP}{time}{SEP}{id}")
    }
}

/// The key prefix of a share's line in the runnable index.
pub(crate) fn runnable_prefix(share: &str) -> String {
    format!("{share}{SEP}")
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

/// The `lqs` value: `{queue}#{STATUS}`, except for the statuses of a job holding capacity:
/// SCHEDULED, STARTING and RUNNING share one partition, [`DISPATCHED_PARTITION`], for every
/// queue. A job's entry stays put (and costs no index write) on its way from SCHEDULED to
/// RUNNING; that partition is what [`dispatched_jobs`] reads, and a listing of one of those
/// statuses reads it (no larger than the jobs holding capacity) and keeps the jobs of its queue
/// in its status.
///
/// [`dispatched_jobs`]: trainyard_app::ports::Store::dispatched_jobs
pub(crate) fn status_partition(queue: &str, status: JobStatus) -> String {
    if status.is_dispatched() {
        DISPATCHED_PARTITION.to_owned()
    } else {
        format!("{queue}{SEP}{}", status.as_str())
    }
}

/// The `lqs` of every job holding capacity. Starts with the separator, which no queue name
/// contains, so it is no `{queue}#{STATUS}`.
pub(crate) const DISPATCHED_PARTITION: &str = "#DISPATCHED";

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

/// A job as stored: its own item (the mutable fields and every index attribute) and its request
/// item (the [`REQUEST_FIELDS`], written with the job at submit and read back with it).
pub(crate) struct JobItems {
    pub(crate) job: Item,
    pub(crate) request: Item,
}

/// A 64-bit FNV-1a fingerprint, in hex: stable across builds and platforms (unlike `Hasher`s).
fn fingerprint(text: &str) -> String {
    format!("{:016x}", Fnv1a::of(text.as_bytes()))
}

/// Splits `job` at `version` into its two items.
pub(crate) fn job_items(job: &ServiceJob, version: u64) -> Result<JobItems, StoreError> {
    let corrupt = |e: serde_json::Error| StoreError::Corrupt {
        key: job.job_id.clone(),
        message: format!("cannot encode: {e}"),
    };
    let mut value = serde_json::to_value(job).map_err(corrupt)?;
    let mut request = serde_json::Map::new();
    if let Some(fields) = value.as_object_mut() {
        for field in REQUEST_FIELDS {
            if let Some(v) = fields.remove(field) {
                request.insert(field.to_owned(), v);
            }
        }
        // `job_item_with` writes them as attributes, from the job itself.
        for (field, _) in ATTRIBUTE_FIELDS {
            fields.remove(field);
        }
    }
    let request_doc = serde_json::to_string(&request).map_err(corrupt)?;
    let job_doc = serde_json::to_string(&value).map_err(corrupt)?;
    let mut job_item = job_item_with(job, version, job_doc);
    job_item.insert(REQUEST_HASH.to_owned(), s(fingerprint(&request_doc)));
    let mut request_item = key(job_pk(&job.job_id), REQUEST_SK);
    request_item.insert(DOC.to_owned(), s(request_doc));
    Ok(JobItems {
        job: job_item,
        request: request_item,
    })
}

/// A job's own item at `version` with the document `doc`: the filter attributes and the sparse
/// index attributes its status calls for. Updates put the whole item, so an attribute the new
/// status does not call for disappears, and the job leaves that index.
fn job_item_with(job: &ServiceJob, version: u64, doc: String) -> Item {
    let mut item = key(job_pk(&job.job_id), JOB_SK);
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
    if let Some(priority) = job.scheduling_priority {
        put(PRIORITY, n(priority));
    }
    if let Some(reason) = &job.status_reason {
        put(STATUS_REASON, s(reason));
    }
    if let Some(not_before) = job.not_before {
        put(NOT_BEFORE, n(not_before));
    }
    if job.line_offset_ms != 0 {
        put(LINE_OFFSET, n(job.line_offset_ms));
    }
    put(
        INSTANCES,
        AttributeValue::M(
            job.held_instances()
                .iter()
                .map(|(instance_type, count)| (instance_type.clone(), n(count)))
                .collect(),
        ),
    );
    if let Some(max_runtime_s) = job.training.max_runtime_s {
        put(MAX_RUNTIME_S, n(max_runtime_s));
    }
    put(LIST_QUEUE, s(&job.job_queue));
    put(
        LIST_QUEUE_STATUS,
        s(status_partition(&job.job_queue, job.status)),
    );
    put(LIST_SK, s(list_sort_key(job.created_at, &job.job_id)));
    if job.status == JobStatus::Runnable {
        put(RUNNABLE_QUEUE, s(&job.job_queue));
        put(RUNNABLE_SK, s(runnable_key(job)));
    }
    if job.status.is_dispatched() {
        put(HELD_SINCE, n(CapacityHolder::started_at_of(job)));
    }
    if let Some(uri) = &job.training.checkpoint_s3_uri {
        put(CHECKPOINT_S3_URI, s(uri));
    }
    let preemptions = job.preemptions();
    if preemptions > 0 {
        put(PREEMPTIONS, n(preemptions));
    }
    if job.status.is_dispatched() && CapacityHolder::stopping_of(job) {
        put(STOPPING, AttributeValue::Bool(true));
    }
    item
}

/// Reads a job back from its own item and its request item (`None` for an item written before
/// the split, whose document holds every field). A field in both is taken from the job item; the
/// [`ATTRIBUTE_FIELDS`] from its attributes, unless its document has them (an item written
/// before they moved).
pub(crate) fn decode_job(
    job: &Item,
    request: Option<&Item>,
) -> Result<trainyard_app::ports::Versioned<ServiceJob>, StoreError> {
    let Some(request) = request else {
        return Err(StoreError::Corrupt {
            key: text("a job item", job, PK)
                .unwrap_or("(a job item without a key)")
                .to_owned(),
            message: "the job's request item is missing".to_owned(),
        });
    };
    let key = match job.get(PK) {
        Some(AttributeValue::S(pk)) => pk.clone(),
        _ => "(a job item without a key)".to_owned(),
    };
    let corrupt = |e: serde_json::Error| StoreError::Corrupt {
        key: key.clone(),
        message: e.to_string(),
    };
    let version = item_version(&key, job)?;
    let mut value: serde_json::Value =
        serde_json::from_str(text(&key, job, DOC)?).map_err(corrupt)?;
    if let Some(fields) = value.as_object_mut() {
        for (field, attribute) in ATTRIBUTE_FIELDS {
            let json = match job.get(attribute) {
                None => continue,
                Some(AttributeValue::S(text)) => serde_json::Value::String(text.clone()),
                Some(AttributeValue::N(number)) => {
                    serde_json::Value::Number(number.parse().map_err(|e: serde_json::Error| {
                        StoreError::Corrupt {
                            key: key.clone(),
                            message: format!("attribute {attribute} is not a number: {e}"),
                        }
                    })?)
                }
                Some(other) => {
                    return Err(StoreError::Corrupt {
                        key: key.clone(),
                        message: format!("attribute {attribute} has an unexpected type: {other:?}"),
                    });
                }
            };
            fields.insert(field.to_owned(), json);
        }
    }
    if let Some(fields) = value.as_object_mut() {
        let request: serde_json::Value =
            serde_json::from_str(text(&key, request, DOC)?).map_err(corrupt)?;
        if let serde_json::Value::Object(request) = request {
            for (name, v) in request {
                fields.entry(name).or_insert(v);
            }
        }
    }
    let value = serde_json::from_value(value).map_err(corrupt)?;
    Ok(trainyard_app::ports::Versioned { value, version })
}

/// An item's `version`.
pub(crate) fn item_version(key: &str, item: &Item) -> Result<u64, StoreError> {
    let version = number(key, item, VERSION)?;
    u64::try_from(version).map_err(|_| StoreError::Corrupt {
        key: key.to_owned(),
        message: format!("negative version {version}"),
    })
}

/// The [`RunnableHead`] an item of the runnable index describes.
pub(crate) fn runnable_head(item: &Item) -> Result<RunnableHead, StoreError> {
    let key = match item.get(PK) {
        Some(AttributeValue::S(pk)) => pk.clone(),
        _ => "(a runnable index entry without a key)".to_owned(),
    };
    let corrupt = |message: String| StoreError::Corrupt {
        key: key.clone(),
        message,
    };
    let Some(instances) = instances(&key, item)? else {
        return Err(corrupt(format!("no {INSTANCES}")));
    };
    let optional_text = |name: &str| match item.get(name) {
        None => Ok(None),
        Some(AttributeValue::S(value)) => Ok(Some(value.clone())),
        Some(other) => Err(corrupt(format!("{name} is not a string: {other:?}"))),
    };
    // The runnable sort key ends `{lineAt}#{jobId}` (ids and the fields before never contain
    // the separator); `lineAt` is the runnable time (which already falls back to `createdAt`)
    // plus the line offset.
    let sort_key = text(&key, item, RUNNABLE_SK)?;
    let line_at = sort_key
        .rsplit(SEP)
        .nth(1)
        .and_then(parse_sortable_time)
        .ok_or_else(|| corrupt(format!("{RUNNABLE_SK} {sort_key} has no runnable time")))?;
    let line_offset_ms = optional_number(&key, item, LINE_OFFSET)?.unwrap_or(0);
    Ok(RunnableHead {
        job_id: text(&key, item, JOB_ID)?.into(),
        job_queue: text(&key, item, RUNNABLE_QUEUE)?.into(),
        share: optional_text(SHARE_IDENTIFIER)?
            .or(optional_text(QUOTA_SHARE_NAME)?)
            .unwrap_or_default()
            .into(),
        priority: optional_number(&key, item, PRIORITY)?.unwrap_or(0),
        runnable_at: line_at.saturating_sub(line_offset_ms),
        line_offset_ms,
        instances: instances.into(),
        max_runtime_s: optional_number(&key, item, MAX_RUNTIME_S)?,
        not_before: optional_number(&key, item, NOT_BEFORE)?,
        status_reason: optional_text(STATUS_REASON)?.map(Into::into),
        version: item_version(&key, item)?,
    })
}

/// The [`CapacityHolder`] an entry of the dispatched partition of `by-queue-status` describes;
/// `None` for the entry of a job item written before the holder's attributes (no [`HELD_SINCE`]
/// or [`INSTANCES`]), which the reader must read whole.
pub(crate) fn capacity_holder(item: &Item) -> Result<CapacityHolder, StoreError> {
    let key = match item.get(PK) {
        Some(AttributeValue::S(pk)) => pk.clone(),
        _ => "(a status index entry without a key)".to_owned(),
    };
    let (Some(started_at), Some(instances)) = (
        optional_number::<i64>(&key, item, HELD_SINCE)?,
        instances(&key, item)?,
    ) else {
        return Err(StoreError::Corrupt {
            key,
            message: format!("no {HELD_SINCE} or {INSTANCES}"),
        });
    };
    let optional_text = |name: &str| match item.get(name) {
        Some(AttributeValue::S(value)) => Some(value.as_str()),
        _ => None,
    };
    Ok(CapacityHolder {
        job_id: text(&key, item, JOB_ID)?.into(),
        job_queue: text(&key, item, LIST_QUEUE)?.into(),
        share: optional_text(SHARE_IDENTIFIER)
            .or(optional_text(QUOTA_SHARE_NAME))
            .unwrap_or_default()
            .into(),
        priority: optional_number(&key, item, PRIORITY)?.unwrap_or(0),
        started_at,
        instances: instances.into(),
        max_runtime_s: optional_number(&key, item, MAX_RUNTIME_S)?,
        checkpoint_s3_uri: optional_text(CHECKPOINT_S3_URI).map(Into::into),
        preemptions: optional_number(&key, item, PREEMPTIONS)?.unwrap_or(0),
        stopping: matches!(item.get(STOPPING), Some(AttributeValue::Bool(true))),
    })
}

/// The [`INSTANCES`] map of an item, `None` when it has none.
fn instances(
    key: &str,
    item: &Item,
) -> Result<Option<std::collections::BTreeMap<String, u32>>, StoreError> {
    let corrupt = |message: String| StoreError::Corrupt {
        key: key.to_owned(),
        message,
    };
    match item.get(INSTANCES) {
        None => Ok(None),
        Some(AttributeValue::M(map)) => map
            .iter()
            .map(|(instance_type, count)| match count {
                AttributeValue::N(count) => count
                    .parse()
                    .map(|count| (instance_type.clone(), count))
                    .map_err(|_| corrupt(format!("instance count {count} of {instance_type}"))),
                other => Err(corrupt(format!(
                    "instance count of {instance_type} is not a number: {other:?}"
                ))),
            })
            .collect::<Result<_, _>>()
            .map(Some),
        Some(other) => Err(corrupt(format!("{INSTANCES} is not a map: {other:?}"))),
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
    let version = item_version(&key, item)?;
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

/// A number attribute that may be absent, parsed as `T`.
fn optional_number<T: std::str::FromStr>(
    key: &str,
    item: &Item,
    name: &str,
) -> Result<Option<T>, StoreError> {
    match item.get(name) {
        None => Ok(None),
        Some(AttributeValue::N(value)) => {
            value.parse().map(Some).map_err(|_| StoreError::Corrupt {
                key: key.to_owned(),
                message: format!("attribute {name} is out of range: {value}"),
            })
        }
        Some(_) => Err(StoreError::Corrupt {
            key: key.to_owned(),
            message: format!("attribute {name} is not a number"),
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

/// Creates `table` (on-demand capacity, every index with its projection, TTL on client tokens) and waits until it is
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
    let mut attributes = vec![PK, SK];
    for (_, hash, range, _) in INDEXES {
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
    for (name, hash, range, projected) in INDEXES {
        let projection = Projection::builder()
            .projection_type(ProjectionType::Include)
            .set_non_key_attributes(Some(projected.iter().map(|a| (*a).to_owned()).collect()));
        request = request.global_secondary_indexes(
            GlobalSecondaryIndex::builder()
                .index_name(name)
                .set_key_schema(Some(key_schema(hash, range)?))
                .projection(projection.build())
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
    fn a_job_splits_into_its_own_item_and_a_request_item_and_reads_back_whole() {
        let mut job = trainyard_app::contract::job("j1").build();
        job.service_request_payload = r#"{"TrainingJobName":"x","Hyper":"y"}"#.into();
        job.status_reason = Some("CAPACITY:SERVICE_ENVIRONMENT_FULL - waiting".to_owned());
        job.not_before = Some(-7);
        job.line_offset_ms = 86_400_000;
        job.scheduling_priority = Some(42);
        let items = job_items(&job, 3).unwrap();
        let own = text("j1", &items.job, DOC).unwrap();
        let request = text("j1", &items.request, DOC).unwrap();
        // The request fields moved (a serde rename would leave them behind silently).
        for field in ["serviceRequestPayload", "training", "serviceJobType"] {
            assert!(!own.contains(&format!("\"{field}\"")), "{field} in {own}");
            assert!(
                request.contains(&format!("\"{field}\"")),
                "{field} not in {request}"
            );
        }
        // So did the fields kept as attributes: in neither document.
        for (field, attribute) in ATTRIBUTE_FIELDS {
            assert!(!own.contains(&format!("\"{field}\"")), "{field} in {own}");
            assert!(!request.contains(&format!("\"{field}\"")), "{field}");
            assert!(items.job.contains_key(attribute), "{attribute}");
        }
        let back = decode_job(&items.job, Some(&items.request)).unwrap();
        assert_eq!((back.value, back.version), (job.clone(), 3));

        // A different request, a different fingerprint: the write condition tells them apart.
        let mut changed = job.clone();
        changed.service_request_payload = format!("{} ", changed.service_request_payload).into();
        let other = job_items(&changed, 3).unwrap();
        assert_ne!(items.job[REQUEST_HASH], other.job[REQUEST_HASH]);

        // A job item without its request item is reported, not read half.
        assert!(matches!(
            decode_job(&items.job, None),
            Err(StoreError::Corrupt { .. })
        ));
    }

    /// A runnable job's item, as the runnable index holds it: the table's keys, the index's
    /// keys and the projected attributes.
    /// Sets what the job's parsed request asks for (its one copy of the shared request).
    fn set_request(job: &mut ServiceJob, max_runtime_s: u64, instances: &[(&str, u32)]) {
        let training = std::sync::Arc::make_mut(&mut job.training);
        training.max_runtime_s = Some(max_runtime_s);
        training.instances = instances
            .iter()
            .map(|(t, c)| ((*t).to_owned(), *c))
            .collect();
    }

    fn entry(job: &ServiceJob, version: u64) -> Item {
        let item = job_items(job, version).unwrap().job;
        let attributes = INDEXES[0].3;
        assert_eq!(INDEXES[0].0, index::RUNNABLE);
        item.into_iter()
            .filter(|(name, _)| {
                [PK, SK, RUNNABLE_QUEUE, RUNNABLE_SK].contains(&name.as_str())
                    || attributes.contains(&name.as_str())
            })
            .collect()
    }

    #[test]
    fn every_runnable_index_entry_reads_back_as_the_jobs_head() {
        use trainyard_app::contract::job;
        let mut bare = job("plain").runnable_at(-3).build();
        std::sync::Arc::make_mut(&mut bare.training)
            .instances
            .clear();
        let mut detailed = job("detailed")
            .runnable_at(1_700_000_000_000)
            .line_offset(3_600_000)
            .priority(9_999)
            .quota_share("team-a")
            .build();
        detailed.status_reason = Some("PRIORITY:a higher queue - waits for #1".to_owned());
        detailed.not_before = Some(1_700_000_060_000);
        set_request(
            &mut detailed,
            86_400,
            &[("ml.p4d.24xlarge", 2), ("ml.g5=odd;name", 1)],
        );
        let mut never_runnable_at = job("created").created_at(77).share("s").build();
        never_runnable_at.runnable_at = None;
        let fifo_with_priority = job("fifo").runnable_at(5).priority(3).build();
        for job in [bare, detailed, never_runnable_at, fifo_with_priority] {
            assert_eq!(
                runnable_head(&entry(&job, 5)).unwrap(),
                RunnableHead::of(&job, 5),
                "{}",
                job.job_id
            );
        }
    }

    #[test]
    fn runnable_keys_sort_like_the_line_and_group_by_share() {
        use trainyard_app::contract::job;
        use trainyard_domain::order::runnable_rank;
        let jobs = [
            job("a").runnable_at(30).priority(1).share("s1").build(),
            job("b").runnable_at(10).share("s1").build(),
            job("c").runnable_at(20).priority(5).share("s1").build(),
            job("d").runnable_at(20).priority(5).share("s1").build(),
            job("e")
                .runnable_at(-1)
                .priority(u32::MAX)
                .share("s1")
                .build(),
            job("f").runnable_at(30).build(),
            job("g").runnable_at(20).priority(9).build(),
            job("h").runnable_at(-20).build(),
            // Line offsets: in line at 5 + 20 = 25, among the others.
            job("i").runnable_at(5).line_offset(20).share("s1").build(),
            job("j").runnable_at(5).line_offset(20).build(),
        ];
        for x in &jobs {
            for y in &jobs {
                if share_key(x) == share_key(y) {
                    assert_eq!(
                        runnable_key(x).cmp(&runnable_key(y)),
                        runnable_rank(x).cmp(&runnable_rank(y)),
                        "{} vs {}",
                        x.job_id,
                        y.job_id
                    );
                }
                assert!(runnable_key(x).starts_with(&runnable_prefix(share_key(x))));
            }
        }
        // A share's line is one prefix: a longer share starting with its name sorts apart.
        let short = job("x").share("s").build();
        let long = job("y").share("s1").build();
        assert!(!runnable_key(&long).starts_with(&runnable_prefix(share_key(&short))));
    }

    /// A job's `by-queue-status` entry: the table's keys, the index's keys and what it projects.
    fn status_entry(job: &ServiceJob, version: u64) -> Item {
        let item = job_items(job, version).unwrap().job;
        let (name, hash, range, attributes) = INDEXES[2];
        assert_eq!(name, index::BY_QUEUE_STATUS);
        item.into_iter()
            .filter(|(name, _)| {
                [PK, SK, hash, range].contains(&name.as_str())
                    || attributes.contains(&name.as_str())
            })
            .collect()
    }

    #[test]
    fn a_dispatched_entry_reads_back_as_the_holder_and_stays_put_until_the_job_ends() {
        use trainyard_app::contract::job;
        use trainyard_domain::job::Attempt;
        let mut scheduled = job("held")
            .status(JobStatus::Scheduled)
            .priority(7)
            .quota_share("team-a")
            .build();
        set_request(
            &mut scheduled,
            3_600,
            &[("ml.p4d.24xlarge", 2), ("ml.g5.xlarge", 1)],
        );
        scheduled.attempts.push(Attempt {
            stop_requested: None,
            failed_as: None,
            selected_instance_type: None,
            training_job_name: "AWSBatchheld1".into(),
            training_job_arn: None,
            started_at: Some(5_000),
            stopped_at: None,
            status_reason: None,
            service_environment: Some("env".into()),
        });
        scheduled.updated_at = 5_000;
        let first = status_entry(&scheduled, 3);
        assert_eq!(
            capacity_holder(&first).unwrap(),
            CapacityHolder::of(&scheduled)
        );
        // STARTING, then RUNNING with an ARN: new versions and documents, the same entry.
        let mut later = scheduled.clone();
        for (status, version) in [(JobStatus::Starting, 4), (JobStatus::Running, 5)] {
            later.status = status;
            later.updated_at += 60_000;
            later.attempts[0].training_job_arn = Some("arn:aws:sagemaker:x".into());
            assert_eq!(status_entry(&later, version), first, "{status:?}");
        }
        // Asked to stop (a preemption): the entry says so, and only then.
        assert!(!capacity_holder(&first).unwrap().stopping);
        later.attempts[0].stop_requested = Some(trainyard_domain::job::StopRequest::Preemption);
        let stopping = capacity_holder(&status_entry(&later, 6)).unwrap();
        assert!(stopping.stopping);
        assert_eq!(stopping, CapacityHolder::of(&later));
        // Without an attempt start (a job written by hand), the last update stands in.
        let mut bare = job("bare").status(JobStatus::Running).build();
        bare.updated_at = 42;
        let holder = capacity_holder(&status_entry(&bare, 1)).unwrap();
        assert_eq!((holder.started_at, holder.share.as_str()), (42, ""));
        // An entry without the holder's attributes is corrupt, not a holder with guessed fields.
        let mut old = status_entry(&scheduled, 3);
        old.remove(HELD_SINCE);
        assert!(matches!(
            capacity_holder(&old),
            Err(StoreError::Corrupt { .. })
        ));
    }

    #[test]
    fn an_entry_without_the_head_attributes_is_corrupt() {
        let job = trainyard_app::contract::job("old").build();
        let mut item = entry(&job, 2);
        item.remove(INSTANCES);
        assert!(matches!(
            runnable_head(&item),
            Err(StoreError::Corrupt { .. })
        ));
        // A broken entry is corrupt, not a head with a guessed field.
        let mut broken = entry(&job, 2);
        broken.insert(PRIORITY.to_owned(), s("high"));
        assert!(matches!(
            runnable_head(&broken),
            Err(StoreError::Corrupt { .. })
        ));
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
