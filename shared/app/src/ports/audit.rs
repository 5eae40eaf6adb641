//! The audit port: an append-only record of every call that asked to change something (who,
//! what, on which resource, whether it was allowed, the policy that decided, how it ended),
//! kept for a retention period and read back newest first.

use std::future::Future;

use serde::{Deserialize, Serialize};

use super::store::StoreError;

/// The longest a record may be kept: a store need not return records older than this before a
/// query's time (the DynamoDB store reads no further back).
pub const MAX_AUDIT_RETENTION_MS: i64 = 400 * 86_400_000;

/// One call that asked to change something, as decided and as it ended. Nothing secret goes in:
/// no payloads, tags or policy text, only names and ARNs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditRecord {
    /// Unique, minted by the caller.
    pub id: String,
    /// When the call was decided (epoch ms).
    pub at_ms: i64,
    /// Who called (an IAM ARN, or `anonymous`).
    pub principal: String,
    /// The action, as policies name it (`SubmitServiceJob`, `PutAccessPolicies`, …).
    pub action: String,
    /// The resource's ARN (`*` for the service as a whole).
    pub resource: String,
    /// Whether the access policies let it go ahead.
    pub allowed: bool,
    /// Which policies decided, for people ("permitted by platform-admin", "no policy permits
    /// it", "no access policies are stored").
    pub decided_by: String,
    /// How the call ended: `OK`, or the error's code (`AccessDeniedException`,
    /// `ClientException`, …).
    pub outcome: String,
    /// What the call made (a submitted job's ARN) or why it failed (the error's message).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// After this (epoch ms) the store may forget the record, and reads leave it out.
    pub expires_at_ms: i64,
}

impl AuditRecord {
    /// Where the record sits in newest-first order.
    pub fn cursor(&self) -> AuditCursor {
        AuditCursor {
            at_ms: self.at_ms,
            id: self.id.clone(),
        }
    }
}

/// A position in newest-first order: (`at_ms`, `id`), both descending.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct AuditCursor {
    /// `at_ms` of the last record returned.
    pub at_ms: i64,
    /// `id` of the last record returned (tie-breaker).
    pub id: String,
}

/// A query over the audit trail. All set fields must match; records come newest first, those
/// expired at `now_ms` left out.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AuditQuery {
    /// Only records at or after this time (epoch ms).
    pub since_ms: i64,
    /// Only records strictly before this time (epoch ms).
    pub until_ms: i64,
    /// Only this caller's records (exact ARN).
    pub principal: Option<String>,
    /// Only this action's records (exact name).
    pub action: Option<String>,
    /// Only refused calls.
    pub denied_only: bool,
    /// Continue strictly after this position.
    pub after: Option<AuditCursor>,
    /// The time the query is made: records expired by then are left out.
    pub now_ms: i64,
    /// Page size, at least 1.
    pub limit: usize,
}

impl AuditQuery {
    /// Whether `record` matches every set field (the store's filter, written once).
    pub fn matches(&self, record: &AuditRecord) -> bool {
        record.at_ms >= self.since_ms
            && record.at_ms < self.until_ms
            && record.expires_at_ms > self.now_ms
            && self
                .principal
                .as_ref()
                .is_none_or(|p| *p == record.principal)
            && self.action.as_ref().is_none_or(|a| *a == record.action)
            && (!self.denied_only || !record.allowed)
            && self
                .after
                .as_ref()
                .is_none_or(|after| record.cursor() < *after)
    }
}

/// One page of records, newest first; `next` is set only when more may follow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditPage {
    /// The records.
    pub records: Vec<AuditRecord>,
    /// Where the next page starts.
    pub next: Option<AuditCursor>,
}

/// The audit trail. Appends are durable once acknowledged; a store forgets records once they
/// expire (at once, or lazily: reads never return them).
pub trait AuditStore: Send + Sync + 'static {
    /// Appends one record.
    fn append_audit(
        &self,
        record: &AuditRecord,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Lists records matching `query`, newest first, at most `query.limit`.
    fn list_audit(
        &self,
        query: &AuditQuery,
    ) -> impl Future<Output = Result<AuditPage, StoreError>> + Send;
}
