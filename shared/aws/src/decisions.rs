//! Decision records on AWS ([`DecisionLog`]): each cycle's whole record as one S3 object, and a
//! summary item in the table that names it, both kept for the stack's retention.
//!
//! The object is `s3://BUCKET/decisions/YYYY-MM-DD/TIME-ID.json` (the UTC day and the time the
//! cycle planned at, so keys list in time order), the record's JSON as `trainyard replay --file`
//! reads it. It is written first: a summary never names an object that is not there. The bucket's
//! lifecycle rule expires the objects and DynamoDB's TTL the summaries (the stack sets both from
//! `DecisionRetentionDays`). A record that cannot be written costs no decision: the cycle has
//! acted already, and the caller logs the failure.
//!
//! The scheduler's role needs `s3:PutObject` on `BUCKET/decisions/*` and `dynamodb:PutItem` on
//! the table.

use aws_sdk_s3::Client;
use trainyard_app::ports::StoreError;
use trainyard_app::service::scheduling::{DecisionLog, DecisionRecord};
use trainyard_domain::time::UtcTime;

use crate::dynamodb::{DecisionSummary, DynamoStore};
use crate::s3_json;

/// The key prefix of every record.
pub const PREFIX: &str = "decisions/";

/// Keeps decision records in S3 with their summaries in the table.
#[derive(Debug, Clone)]
pub struct S3DecisionLog {
    s3: Client,
    bucket: String,
    store: DynamoStore,
    retention_ms: i64,
}

impl S3DecisionLog {
    /// Records into `bucket` with `s3`, summaries into `store`'s table, each kept `retention_days`.
    pub fn new(
        s3: Client,
        bucket: impl Into<String>,
        store: DynamoStore,
        retention_days: u32,
    ) -> Self {
        Self {
            s3,
            bucket: bucket.into(),
            store,
            retention_ms: i64::from(retention_days) * 86_400_000,
        }
    }

    /// The key of `record`'s object.
    pub fn object_key(record: &DecisionRecord) -> String {
        let time = UtcTime(record.at_ms).to_string();
        // `YYYY-MM-DD HH:MM:SS` → the day, then the time without separators.
        let clock: String = time[11..].chars().filter(char::is_ascii_digit).collect();
        let ms = record.at_ms.rem_euclid(1000);
        format!("{PREFIX}{}/{clock}{ms:03}-{}.json", &time[..10], record.id)
    }

    /// Reads the record stored under `key`.
    pub async fn get(&self, key: &str) -> Result<DecisionRecord, StoreError> {
        s3_json::get(&self.s3, &self.bucket, key)
            .await?
            .ok_or_else(|| StoreError::Unavailable {
                message: format!("reading s3://{}/{key}: NoSuchKey", self.bucket),
                source: None,
            })
    }
}

impl DecisionLog for S3DecisionLog {
    async fn append_decision(&self, record: &DecisionRecord) -> Result<(), StoreError> {
        let key = Self::object_key(record);
        let bytes = s3_json::put(&self.s3, &self.bucket, &key, record).await?;
        let summary = DecisionSummary {
            id: record.id.clone(),
            at_ms: record.at_ms,
            trigger: record.trigger.clone(),
            dispatches: record.plan.dispatches.len() as u64,
            preemptions: record.plan.preemptions.len() as u64,
            skips: record.skips_total as u64,
            bytes,
            object: format!("s3://{}/{key}", self.bucket),
            expires_at_ms: record.at_ms.saturating_add(self.retention_ms),
        };
        self.store.put_decision_summary(&summary).await
    }
}
