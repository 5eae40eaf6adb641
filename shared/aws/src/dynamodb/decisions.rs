//! Decision summaries on the table: one item per recorded cycle in the partition of its UTC day
//! (`DECISION#YYYY-MM-DD`), sorted by time and id, naming the S3 object that holds the whole
//! record, with `ttl` so that DynamoDB deletes it once the retention has passed.

use aws_sdk_dynamodb::types::AttributeValue;
use trainyard_app::ports::StoreError;
use trainyard_domain::time::UtcTime;

use super::schema::{self, Item, n, s, sortable_time};
use super::{DynamoStore, classify, item_collided, resending};

/// One recorded cycle, as the table lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecisionSummary {
    /// The record's id.
    pub id: String,
    /// When the cycle planned (epoch ms).
    pub at_ms: i64,
    /// What started the pass.
    pub trigger: String,
    /// Dispatches planned.
    pub dispatches: u64,
    /// Preemptions planned.
    pub preemptions: u64,
    /// Jobs planned that wait (all of them, not only the skips the record keeps).
    pub skips: u64,
    /// The record's size in bytes.
    pub bytes: u64,
    /// Where the whole record is: `s3://bucket/key`.
    pub object: String,
    /// When DynamoDB may delete the summary (epoch ms).
    pub expires_at_ms: i64,
}

const ID: &str = "id";
const AT: &str = "at";
const TRIGGER: &str = "trigger";
const DISPATCHES: &str = "dispatches";
const PREEMPTIONS: &str = "preemptions";
const SKIPS: &str = "skips";
const BYTES: &str = "bytes";
const OBJECT: &str = "object";

/// The partition of the cycles recorded on the UTC day of `at_ms`.
pub fn decision_partition(at_ms: i64) -> String {
    let day = UtcTime(at_ms).to_string();
    format!("DECISION{}{}", schema::SEP, &day[..10])
}

fn item(summary: &DecisionSummary) -> Item {
    let sk = format!(
        "{}{}{}",
        sortable_time(summary.at_ms),
        schema::SEP,
        summary.id
    );
    let mut item = schema::key(decision_partition(summary.at_ms), &sk);
    item.insert(ID.to_owned(), s(&summary.id));
    item.insert(AT.to_owned(), n(summary.at_ms));
    item.insert(TRIGGER.to_owned(), s(&summary.trigger));
    item.insert(DISPATCHES.to_owned(), n(summary.dispatches));
    item.insert(PREEMPTIONS.to_owned(), n(summary.preemptions));
    item.insert(SKIPS.to_owned(), n(summary.skips));
    item.insert(BYTES.to_owned(), n(summary.bytes));
    item.insert(OBJECT.to_owned(), s(&summary.object));
    // DynamoDB's TTL is in epoch seconds: the first second at or after the expiry.
    let ttl_s =
        summary.expires_at_ms.div_euclid(1000) + i64::from(summary.expires_at_ms % 1000 != 0);
    item.insert(schema::TTL.to_owned(), n(ttl_s));
    item
}

fn summary_of(item: &Item) -> Result<DecisionSummary, StoreError> {
    let key = || {
        item.get(schema::SK)
            .and_then(|v| v.as_s().ok())
            .cloned()
            .unwrap_or_default()
    };
    let corrupt = |what: &str| StoreError::Corrupt {
        key: key(),
        message: format!("a decision summary without {what}"),
    };
    let text = |name: &str| {
        item.get(name)
            .and_then(|v| v.as_s().ok())
            .cloned()
            .ok_or_else(|| corrupt(name))
    };
    let number = |name: &str| {
        item.get(name)
            .and_then(|v| v.as_n().ok())
            .and_then(|v| v.parse::<i64>().ok())
            .ok_or_else(|| corrupt(name))
    };
    let count = |name: &str| number(name).map(|v| u64::try_from(v).unwrap_or(0));
    Ok(DecisionSummary {
        id: text(ID)?,
        at_ms: number(AT)?,
        trigger: text(TRIGGER)?,
        dispatches: count(DISPATCHES)?,
        preemptions: count(PREEMPTIONS)?,
        skips: count(SKIPS)?,
        bytes: count(BYTES)?,
        object: text(OBJECT)?,
        expires_at_ms: number(schema::TTL)?.saturating_mul(1000),
    })
}

impl DynamoStore {
    /// Puts a cycle's summary. Unconditional: ids are unique, and a retry after a lost answer
    /// writes the same item.
    pub async fn put_decision_summary(&self, summary: &DecisionSummary) -> Result<(), StoreError> {
        let request = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item(summary)));
        resending(|| request.clone().send(), item_collided)
            .await
            .map_err(classify)?;
        Ok(())
    }

    /// The summaries of the cycles recorded on the UTC day of `day_ms`, newest first, at most
    /// `limit` (strongly consistent).
    pub async fn decision_summaries(
        &self,
        day_ms: i64,
        limit: usize,
    ) -> Result<Vec<DecisionSummary>, StoreError> {
        let mut summaries = Vec::new();
        let mut start = None;
        loop {
            let page = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("pk = :pk")
                .expression_attribute_values(":pk", AttributeValue::S(decision_partition(day_ms)))
                .scan_index_forward(false)
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(classify)?;
            for item in page.items() {
                if summaries.len() == limit {
                    return Ok(summaries);
                }
                summaries.push(summary_of(item)?);
            }
            start = page.last_evaluated_key().cloned();
            if start.is_none() {
                return Ok(summaries);
            }
        }
    }
}
