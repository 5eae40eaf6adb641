//! The audit trail: every call that asks to change something, allowed or refused, recorded
//! after it ends (who, the action, the resource, the policy that decided, how it ended), kept
//! for the gate's retention, published as an event (EventBridge on AWS), and read back by
//! `ListAuditRecords`.
//!
//! A record that cannot be stored does not fail the call it describes (the change is made by
//! then): it is logged whole at ERROR, so that it lands in the function's or the server's logs.

use serde::Deserialize;
use serde_json::{Value, json};
use trainyard_access::Principal;
use trainyard_app::ports::{AuditCursor, AuditQuery, AuditRecord, Event};
use trainyard_app::{EventSink, Service, Store};

use crate::access::{Checked, Gate};
use crate::error::ApiError;
use crate::paging::page_size;

/// The longest message kept as a failed call's detail.
const MAX_DETAIL_CHARS: usize = 300;

impl Gate {
    /// Records a call that asked to change something, one record per question the gate asked
    /// (a bulk terminate asks one per job), with how the call ended. Does nothing for reads.
    pub async fn record<S: Store, E: EventSink>(
        &self,
        service: &Service<S, E>,
        caller: &Principal,
        checked: &Checked,
        result: &Result<Value, ApiError>,
    ) {
        if !checked.audited {
            return;
        }
        let at_ms = service.now_ms();
        let (outcome, detail) = match result {
            Ok(value) => (
                "OK".to_owned(),
                value
                    .get("jobArn")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            ),
            Err(error) => (
                error.error_type().to_owned(),
                Some(error.message.chars().take(MAX_DETAIL_CHARS).collect()),
            ),
        };
        for verdict in &checked.verdicts {
            let record = AuditRecord {
                id: service.new_job_id(),
                at_ms,
                principal: caller.arn.clone(),
                action: verdict.action.name().to_owned(),
                resource: verdict.resource.clone(),
                allowed: verdict.allowed,
                decided_by: verdict.decided_by.clone(),
                outcome: outcome.clone(),
                detail: detail.clone(),
                expires_at_ms: at_ms.saturating_add(self.audit_retention_ms()),
            };
            if let Err(error) = service.store().append_audit(&record).await {
                tracing::error!(
                    %error,
                    record = %json!(record),
                    "the audit record could not be stored"
                );
            }
            if service.events().publishes_audit() {
                service
                    .events()
                    .publish(Event::Audited(Box::new(record)))
                    .await;
            }
        }
    }
}

/// `ListAuditRecords` input.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ListRequest {
    /// Epoch ms, inclusive; default: as far back as records are kept.
    start_time: Option<i64>,
    /// Epoch ms, exclusive; default: now (and a little after, for clocks ahead of this one).
    end_time: Option<i64>,
    principal: Option<String>,
    action: Option<String>,
    #[serde(default)]
    denied_only: bool,
    max_results: Option<i64>,
    next_token: Option<String>,
}

/// `ListAuditRecords`: the trail, newest first, a page at a time.
pub async fn list<S: Store, E: EventSink>(
    service: &Service<S, E>,
    gate: &Gate,
    body: &[u8],
) -> Result<Value, ApiError> {
    let req: ListRequest = crate::extract::json(body)?;
    let now = service.now_ms();
    let after = match req.next_token.as_deref() {
        Some(token) if !token.is_empty() => Some(parse_token(token)?),
        _ => None,
    };
    if let Some(action) = &req.action
        && trainyard_access::Action::named(action).is_none()
    {
        return Err(ApiError::client(format!(
            "action must be one of the actions policies name (SubmitServiceJob, \
             DeleteJobQueue, ...), got {action:?}"
        )));
    }
    let query = AuditQuery {
        since_ms: req
            .start_time
            .unwrap_or_else(|| now.saturating_sub(gate.audit_retention_ms())),
        until_ms: req.end_time.unwrap_or_else(|| now.saturating_add(60_000)),
        principal: req.principal.filter(|p| !p.is_empty()),
        action: req.action,
        denied_only: req.denied_only,
        after,
        now_ms: now,
        limit: page_size(req.max_results)?,
    };
    if query.since_ms >= query.until_ms {
        return Err(ApiError::client(format!(
            "startTime ({}) must be before endTime ({})",
            query.since_ms, query.until_ms
        )));
    }
    let page = service
        .store()
        .list_audit(&query)
        .await
        .map_err(|e| ApiError::from(trainyard_app::AppError::from(e)))?;
    let records = crate::extract::to_value(&page.records)?;
    Ok(crate::paging::list_response(
        "auditRecords",
        records,
        page.next.as_ref().map(token),
    ))
}

fn token(cursor: &AuditCursor) -> String {
    crate::paging::job_token(&trainyard_app::ports::JobCursor {
        created_at: cursor.at_ms,
        job_id: cursor.id.clone(),
    })
}

fn parse_token(token: &str) -> Result<AuditCursor, ApiError> {
    let cursor = crate::paging::parse_job_token(token)?;
    Ok(AuditCursor {
        at_ms: cursor.created_at,
        id: cursor.job_id,
    })
}
