//! Scheduling-policy operations: `CreateSchedulingPolicy`, `DescribeSchedulingPolicies`,
//! `ListSchedulingPolicies`, `UpdateSchedulingPolicy`, `DeleteSchedulingPolicy` (reference
//! §2.8, §P2.4). Ranges are checked here on the wide wire types; identifier and overlap rules
//! are the use-case's.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use trainyard_app::service::policies::NewSchedulingPolicy;
use trainyard_app::{EventSink, Service, Store};
use trainyard_domain::Tags;
use trainyard_domain::arn::ArnContext;
use trainyard_domain::limits::{
    COMPUTE_RESERVATION, MAX_DESCRIBE_ITEMS, SHARE_DECAY_S, WEIGHT_FACTOR,
};
use trainyard_domain::policy::{
    FairsharePolicy, IdleResourceAssignmentStrategy, QuotaSharePolicy, SchedulingPolicy,
    ShareAttributes,
};

use crate::error::ApiError;
use crate::extract::to_value;
use crate::paging::{list_response, page_by_name};
use crate::{extract, validate};

/// Handles `op` if it belongs to this module.
pub async fn handle<S: Store, E: EventSink>(
    service: &Service<S, E>,
    op: &str,
    body: &[u8],
) -> Option<Result<Value, ApiError>> {
    Some(match op {
        "createschedulingpolicy" => create(service, body).await,
        "describeschedulingpolicies" => describe(service, body).await,
        "listschedulingpolicies" => list(service, body).await,
        "updateschedulingpolicy" => update(service, body).await,
        "deleteschedulingpolicy" => delete(service, body).await,
        _ => return None,
    })
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ShareIn {
    share_identifier: Option<String>,
    weight_factor: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct FairshareIn {
    share_decay_seconds: Option<i64>,
    compute_reservation: Option<i64>,
    share_distribution: Option<Vec<ShareIn>>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct QuotaShareIn {
    idle_resource_assignment_strategy: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CreateRequest {
    name: Option<String>,
    fairshare_policy: Option<FairshareIn>,
    quota_share_policy: Option<QuotaShareIn>,
    tags: Option<Tags>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct UpdateRequest {
    arn: Option<String>,
    fairshare_policy: Option<FairshareIn>,
    quota_share_policy: Option<QuotaShareIn>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DescribeRequest {
    arns: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListRequest {
    max_results: Option<i64>,
    next_token: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeleteRequest {
    arn: Option<String>,
}

fn fairshare(input: FairshareIn) -> Result<FairsharePolicy, ApiError> {
    let mut policy = FairsharePolicy::default();
    if let Some(s) = input.share_decay_seconds {
        validate::range("fairsharePolicy.shareDecaySeconds", s, SHARE_DECAY_S)?;
        policy.share_decay_seconds = u32::try_from(s).ok();
    }
    if let Some(r) = input.compute_reservation {
        validate::range("fairsharePolicy.computeReservation", r, COMPUTE_RESERVATION)?;
        policy.compute_reservation = u32::try_from(r).ok();
    }
    for (i, share) in input
        .share_distribution
        .unwrap_or_default()
        .into_iter()
        .enumerate()
    {
        let field = format!("fairsharePolicy.shareDistribution[{i}]");
        let id = validate::required(&format!("{field}.shareIdentifier"), share.share_identifier)?;
        if let Some(w) = share.weight_factor
            && !WEIGHT_FACTOR.contains(&w)
        {
            return Err(ApiError::client(format!(
                "{field}.weightFactor must be between {} and {}, got {w}",
                WEIGHT_FACTOR.start(),
                WEIGHT_FACTOR.end()
            )));
        }
        policy.share_distribution.push(ShareAttributes {
            share_identifier: id,
            weight_factor: share.weight_factor,
        });
    }
    Ok(policy)
}

fn quota_share(input: QuotaShareIn) -> Result<QuotaSharePolicy, ApiError> {
    let field = "quotaSharePolicy.idleResourceAssignmentStrategy";
    match validate::required(field, input.idle_resource_assignment_strategy)?.as_str() {
        "FIFO" => Ok(QuotaSharePolicy {
            idle_resource_assignment_strategy: IdleResourceAssignmentStrategy::Fifo,
        }),
        other => Err(ApiError::client(format!(
            "{field} must be FIFO (the only strategy), got {other:?}"
        ))),
    }
}

/// `SchedulingPolicyDetail`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Detail<'a> {
    name: &'a str,
    arn: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    fairshare_policy: Option<&'a FairsharePolicy>,
    #[serde(skip_serializing_if = "Option::is_none")]
    quota_share_policy: Option<&'a QuotaSharePolicy>,
    tags: &'a Tags,
}

fn detail<'a>(arns: &ArnContext, policy: &'a SchedulingPolicy) -> Detail<'a> {
    Detail {
        name: &policy.name,
        arn: arns.policy_arn(&policy.name),
        fairshare_policy: policy.fairshare_policy.as_ref(),
        quota_share_policy: policy.quota_share_policy.as_ref(),
        tags: &policy.tags,
    }
}

async fn create<S: Store, E: EventSink>(
    service: &Service<S, E>,
    body: &[u8],
) -> Result<Value, ApiError> {
    let req: CreateRequest = extract::json(body)?;
    let name = validate::required("name", req.name)?;
    validate::name("name", &name)?;
    let tags = req.tags.unwrap_or_default();
    validate::tags("tags", &tags)?;
    let policy = service
        .create_scheduling_policy(NewSchedulingPolicy {
            name,
            fairshare_policy: req.fairshare_policy.map(fairshare).transpose()?,
            quota_share_policy: req.quota_share_policy.map(quota_share).transpose()?,
            tags,
        })
        .await?;
    Ok(json!({ "name": policy.name, "arn": service.arns().policy_arn(&policy.name) }))
}

async fn describe<S: Store, E: EventSink>(
    service: &Service<S, E>,
    body: &[u8],
) -> Result<Value, ApiError> {
    let req: DescribeRequest = extract::json(body)?;
    let arns = validate::required("arns", req.arns)?;
    if arns.len() > MAX_DESCRIBE_ITEMS {
        return Err(ApiError::client(format!(
            "arns may name at most {MAX_DESCRIBE_ITEMS} scheduling policies, got {}",
            arns.len()
        )));
    }
    let policies = service.describe_scheduling_policies(&arns).await?;
    let details: Vec<Detail<'_>> = policies.iter().map(|p| detail(service.arns(), p)).collect();
    Ok(json!({ "schedulingPolicies": to_value(&details)? }))
}

async fn list<S: Store, E: EventSink>(
    service: &Service<S, E>,
    body: &[u8],
) -> Result<Value, ApiError> {
    let req: ListRequest = extract::json(body)?;
    let policies = service.list_scheduling_policies().await?;
    let (page, next) = page_by_name(
        policies,
        |p| p.name.as_str(),
        req.max_results,
        req.next_token.as_deref(),
    )?;
    let listing: Vec<Value> = page
        .iter()
        .map(|p| json!({ "arn": service.arns().policy_arn(&p.name) }))
        .collect();
    Ok(list_response(
        "schedulingPolicies",
        Value::Array(listing),
        next,
    ))
}

async fn update<S: Store, E: EventSink>(
    service: &Service<S, E>,
    body: &[u8],
) -> Result<Value, ApiError> {
    let req: UpdateRequest = extract::json(body)?;
    let arn = validate::required("arn", req.arn)?;
    service
        .update_scheduling_policy(
            &arn,
            req.fairshare_policy.map(fairshare).transpose()?,
            req.quota_share_policy.map(quota_share).transpose()?,
        )
        .await?;
    Ok(json!({}))
}

async fn delete<S: Store, E: EventSink>(
    service: &Service<S, E>,
    body: &[u8],
) -> Result<Value, ApiError> {
    let req: DeleteRequest = extract::json(body)?;
    let arn = validate::required("arn", req.arn)?;
    service.delete_scheduling_policy(&arn).await?;
    Ok(json!({}))
}
