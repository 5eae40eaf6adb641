//! The audit trail on the table: each record one item in the partition of its 30-day bucket
//! (`AUDIT#{bucket}`), sorted by time and id, with the attributes a listing filters on and
//! `ttl` so that DynamoDB deletes it once it expires.
//!
//! A listing reads the buckets from the newest its window reaches down to the oldest, each
//! newest first, until a page is full. Buckets older than [`MAX_AUDIT_RETENTION_MS`] before the
//! query's time are not read (no record is kept that long), nor buckets after the one holding
//! the query's time (records are made by clocks that agree with it within far less).

use aws_sdk_dynamodb::types::AttributeValue;
use trainyard_app::ports::{
    AuditPage, AuditQuery, AuditRecord, AuditStore, MAX_AUDIT_RETENTION_MS, StoreError,
};

use super::schema::{self, Item, n, s, sortable_time};
use super::{DynamoStore, classify, item_collided, resending};

/// How much time one audit partition covers.
const BUCKET_MS: i64 = 30 * 86_400_000;
/// The record's JSON.
const DOC: &str = schema::DOC;
/// Filtered on: the caller's ARN, the action, whether it was allowed, when it expires (ms).
const PRINCIPAL: &str = "principal";
const ACTION: &str = "action";
const ALLOWED: &str = "allowed";
const EXPIRES: &str = "exp";

fn partition(bucket: i64) -> String {
    format!("AUDIT#{bucket}")
}

fn bucket(at_ms: i64) -> i64 {
    at_ms.div_euclid(BUCKET_MS)
}

fn sort_key(at_ms: i64, id: &str) -> String {
    format!("{}{}{id}", sortable_time(at_ms), schema::SEP)
}

fn item(record: &AuditRecord) -> Result<Item, StoreError> {
    let doc = serde_json::to_string(record).map_err(|e| StoreError::Corrupt {
        key: record.id.clone(),
        message: format!("cannot encode: {e}"),
    })?;
    let mut item = schema::key(
        partition(bucket(record.at_ms)),
        &sort_key(record.at_ms, &record.id),
    );
    item.insert(DOC.to_owned(), s(doc));
    item.insert(PRINCIPAL.to_owned(), s(&record.principal));
    item.insert(ACTION.to_owned(), s(&record.action));
    item.insert(ALLOWED.to_owned(), AttributeValue::Bool(record.allowed));
    item.insert(EXPIRES.to_owned(), n(record.expires_at_ms));
    // DynamoDB's TTL is in epoch seconds: the first second at or after the expiry.
    let ttl_s = record.expires_at_ms.div_euclid(1000) + i64::from(record.expires_at_ms % 1000 != 0);
    item.insert(schema::TTL.to_owned(), n(ttl_s));
    Ok(item)
}

fn record_of(item: &Item) -> Result<AuditRecord, StoreError> {
    let key = item
        .get(schema::SK)
        .and_then(|v| v.as_s().ok())
        .cloned()
        .unwrap_or_default();
    let doc = item
        .get(DOC)
        .and_then(|v| v.as_s().ok())
        .ok_or_else(|| StoreError::Corrupt {
            key: key.clone(),
            message: "an audit item without its document".to_owned(),
        })?;
    serde_json::from_str(doc).map_err(|e| StoreError::Corrupt {
        key,
        message: e.to_string(),
    })
}

impl AuditStore for DynamoStore {
    async fn append_audit(&self, record: &AuditRecord) -> Result<(), StoreError> {
        // Unconditional: ids are unique, and a retry after a lost answer writes the same item.
        // One that met a transaction in progress is sent again, as every single-item write is.
        let request = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item(record)?));
        resending(|| request.clone().send(), item_collided)
            .await
            .map_err(classify)?;
        Ok(())
    }

    async fn list_audit(&self, query: &AuditQuery) -> Result<AuditPage, StoreError> {
        let limit = query.limit.max(1);
        let since = query
            .since_ms
            .max(query.now_ms.saturating_sub(MAX_AUDIT_RETENTION_MS));
        // Inclusive bounds on the sort key: nothing sorts equal to a bare time, and the
        // cursor's own item is dropped below.
        let (newest, upper) = match &query.after {
            Some(after) if after.at_ms < query.until_ms => {
                (after.at_ms, sort_key(after.at_ms, &after.id))
            }
            _ => (
                query.until_ms.saturating_sub(1),
                sortable_time(query.until_ms),
            ),
        };
        let lower = sortable_time(since);
        // Every attribute through a name: `action` is one of DynamoDB's reserved words.
        let mut filter = vec!["#exp > :now"];
        let mut names = vec![("#exp", EXPIRES)];
        let mut values = vec![
            (":lo", s(&lower)),
            (":hi", s(&upper)),
            (":now", n(query.now_ms)),
        ];
        if let Some(principal) = &query.principal {
            filter.push("#principal = :principal");
            names.push(("#principal", PRINCIPAL));
            values.push((":principal", s(principal)));
        }
        if let Some(action) = &query.action {
            filter.push("#action = :action");
            names.push(("#action", ACTION));
            values.push((":action", s(action)));
        }
        if query.denied_only {
            filter.push("#allowed = :false");
            names.push(("#allowed", ALLOWED));
            values.push((":false", AttributeValue::Bool(false)));
        }
        let filter = filter.join(" AND ");
        let mut items: Vec<Item> = Vec::new();
        let mut current = bucket(newest).min(bucket(query.now_ms) + 1);
        while current >= bucket(since) && items.len() <= limit && newest >= since {
            let pk = partition(current);
            let wanted = limit + 1 - items.len();
            let found = self
                .query_items(
                    |start| {
                        let mut request = self
                            .client
                            .query()
                            .table_name(&self.table)
                            .key_condition_expression("pk = :pk AND sk BETWEEN :lo AND :hi")
                            .filter_expression(&filter)
                            .expression_attribute_values(":pk", s(&pk))
                            .scan_index_forward(false)
                            // Strongly consistent: a record reads back once its call has
                            // answered (audit reads are rare; the doubled read cost is small).
                            .consistent_read(true)
                            .set_exclusive_start_key(start);
                        for (name, attribute) in &names {
                            request = request.expression_attribute_names(*name, *attribute);
                        }
                        for (name, value) in &values {
                            request = request.expression_attribute_values(*name, value.clone());
                        }
                        request
                    },
                    wanted,
                    |item| item.get(schema::SK).and_then(|v| v.as_s().ok()) != Some(&upper),
                )
                .await?;
            items.extend(found);
            current -= 1;
        }
        let mut records = items.iter().map(record_of).collect::<Result<Vec<_>, _>>()?;
        let next = if records.len() > limit {
            records.truncate(limit);
            records.last().map(AuditRecord::cursor)
        } else {
            None
        };
        Ok(AuditPage { records, next })
    }
}
