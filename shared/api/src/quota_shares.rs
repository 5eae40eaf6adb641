//! Quota-share operations: `CreateQuotaShare`, `DescribeQuotaShare`, `ListQuotaShares`,
//! `UpdateQuotaShare`, `DeleteQuotaShare` (reference §2.9, §P2.5). Shares are addressed by
//! ARN (`…:job-queue/{queue}/quota-share/{name}`) and listed per job queue.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use trainyard_app::service::quota_shares::{NewQuotaShare, QuotaShareUpdate};
use trainyard_app::{EventSink, Service, Store};
use trainyard_domain::arn::{ArnContext, QuotaShareId};
use trainyard_domain::quota_share::{
    InSharePreemption, QuotaShare, QuotaShareCapacityLimit, QuotaSharePreemptionConfiguration,
    ResourceSharingConfiguration, SharingStrategy,
};
use trainyard_domain::{ResourceStatus, State, Tags};

use crate::environments::{self, CapacityLimitIn};
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
        "createquotashare" => create(service, body).await,
        "describequotashare" => describe(service, body).await,
        "listquotashares" => list(service, body).await,
        "updatequotashare" => update(service, body).await,
        "deletequotashare" => delete(service, body).await,
        _ => return None,
    })
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SharingIn {
    strategy: Option<String>,
    borrow_limit: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PreemptionIn {
    in_share_preemption: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CreateRequest {
    quota_share_name: Option<String>,
    job_queue: Option<String>,
    capacity_limits: Option<Vec<CapacityLimitIn>>,
    resource_sharing_configuration: Option<SharingIn>,
    preemption_configuration: Option<PreemptionIn>,
    state: Option<State>,
    tags: Option<Tags>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct UpdateRequest {
    quota_share_arn: Option<String>,
    capacity_limits: Option<Vec<CapacityLimitIn>>,
    resource_sharing_configuration: Option<SharingIn>,
    preemption_configuration: Option<PreemptionIn>,
    state: Option<State>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ArnRequest {
    quota_share_arn: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListRequest {
    job_queue: Option<String>,
    max_results: Option<i64>,
    next_token: Option<String>,
}

/// `capacityLimits`, checked as the service environment's are (same wire shape and rules).
fn capacity_limits(limits: Vec<CapacityLimitIn>) -> Result<Vec<QuotaShareCapacityLimit>, ApiError> {
    Ok(environments::capacity_limits("capacityLimits", limits)?
        .into_iter()
        .map(|l| QuotaShareCapacityLimit {
            max_capacity: l.max_capacity,
            capacity_unit: l.capacity_unit,
        })
        .collect())
}

fn sharing(input: SharingIn) -> Result<ResourceSharingConfiguration, ApiError> {
    let field = "resourceSharingConfiguration.strategy";
    let strategy = match validate::required(field, input.strategy)?.as_str() {
        "RESERVE" => SharingStrategy::Reserve,
        "LEND" => SharingStrategy::Lend,
        "LEND_AND_BORROW" => SharingStrategy::LendAndBorrow,
        other => {
            return Err(ApiError::client(format!(
                "{field} must be RESERVE, LEND or LEND_AND_BORROW, got {other:?}"
            )));
        }
    };
    let borrow_limit = match input.borrow_limit {
        None => None,
        Some(b) => match i32::try_from(b) {
            Ok(b) if b >= -1 => Some(b),
            _ => {
                return Err(ApiError::client(format!(
                    "resourceSharingConfiguration.borrowLimit must be -1 (unlimited) or a \
                     percentage between 0 and {}, got {b}",
                    i32::MAX
                )));
            }
        },
    };
    Ok(ResourceSharingConfiguration {
        strategy,
        borrow_limit,
    })
}

fn preemption(input: PreemptionIn) -> Result<QuotaSharePreemptionConfiguration, ApiError> {
    let field = "preemptionConfiguration.inSharePreemption";
    let in_share_preemption = match validate::required(field, input.in_share_preemption)?.as_str() {
        "ENABLED" => InSharePreemption::Enabled,
        "DISABLED" => InSharePreemption::Disabled,
        other => {
            return Err(ApiError::client(format!(
                "{field} must be ENABLED or DISABLED, got {other:?}"
            )));
        }
    };
    Ok(QuotaSharePreemptionConfiguration {
        in_share_preemption,
    })
}

/// `QuotaShareDetail` / `DescribeQuotaShareResponse`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Detail<'a> {
    quota_share_name: &'a str,
    quota_share_arn: String,
    job_queue_arn: String,
    capacity_limits: &'a [QuotaShareCapacityLimit],
    resource_sharing_configuration: &'a ResourceSharingConfiguration,
    preemption_configuration: &'a QuotaSharePreemptionConfiguration,
    state: State,
    status: ResourceStatus,
    tags: &'a Tags,
}

fn share_arn(arns: &ArnContext, share: &QuotaShare) -> String {
    arns.quota_share_arn(&QuotaShareId {
        queue: share.job_queue.clone(),
        name: share.quota_share_name.clone(),
    })
}

fn detail<'a>(arns: &ArnContext, share: &'a QuotaShare) -> Detail<'a> {
    Detail {
        quota_share_name: &share.quota_share_name,
        quota_share_arn: share_arn(arns, share),
        job_queue_arn: arns.queue_arn(&share.job_queue),
        capacity_limits: &share.capacity_limits,
        resource_sharing_configuration: &share.resource_sharing_configuration,
        preemption_configuration: &share.preemption_configuration,
        state: share.state,
        status: share.status,
        tags: &share.tags,
    }
}

fn name_and_arn(arns: &ArnContext, share: &QuotaShare) -> Value {
    json!({ "quotaShareName": share.quota_share_name, "quotaShareArn": share_arn(arns, share) })
}

async fn create<S: Store, E: EventSink>(
    service: &Service<S, E>,
    body: &[u8],
) -> Result<Value, ApiError> {
    let req: CreateRequest = extract::json(body)?;
    let name = validate::required("quotaShareName", req.quota_share_name)?;
    validate::name("quotaShareName", &name)?;
    let job_queue = validate::required("jobQueue", req.job_queue)?;
    let limits = capacity_limits(validate::required("capacityLimits", req.capacity_limits)?)?;
    let sharing = sharing(validate::required(
        "resourceSharingConfiguration",
        req.resource_sharing_configuration,
    )?)?;
    let preemption = preemption(validate::required(
        "preemptionConfiguration",
        req.preemption_configuration,
    )?)?;
    let tags = req.tags.unwrap_or_default();
    validate::tags("tags", &tags)?;
    let share = service
        .create_quota_share(NewQuotaShare {
            name,
            job_queue,
            capacity_limits: limits,
            resource_sharing_configuration: sharing,
            preemption_configuration: preemption,
            state: req.state.unwrap_or_default(),
            tags,
        })
        .await?;
    Ok(name_and_arn(service.arns(), &share))
}

async fn describe<S: Store, E: EventSink>(
    service: &Service<S, E>,
    body: &[u8],
) -> Result<Value, ApiError> {
    let req: ArnRequest = extract::json(body)?;
    let arn = validate::required("quotaShareArn", req.quota_share_arn)?;
    let share = service.describe_quota_share(&arn).await?;
    to_value(&detail(service.arns(), &share))
}

async fn list<S: Store, E: EventSink>(
    service: &Service<S, E>,
    body: &[u8],
) -> Result<Value, ApiError> {
    let req: ListRequest = extract::json(body)?;
    let job_queue = validate::required("jobQueue", req.job_queue)?;
    let shares = service.list_quota_shares(&job_queue).await?;
    let (page, next) = page_by_name(
        shares,
        |s| s.quota_share_name.as_str(),
        req.max_results,
        req.next_token.as_deref(),
    )?;
    let details: Vec<Detail<'_>> = page.iter().map(|s| detail(service.arns(), s)).collect();
    Ok(list_response("quotaShares", to_value(&details)?, next))
}

async fn update<S: Store, E: EventSink>(
    service: &Service<S, E>,
    body: &[u8],
) -> Result<Value, ApiError> {
    let req: UpdateRequest = extract::json(body)?;
    let arn = validate::required("quotaShareArn", req.quota_share_arn)?;
    let update = QuotaShareUpdate {
        capacity_limits: req.capacity_limits.map(capacity_limits).transpose()?,
        resource_sharing_configuration: req
            .resource_sharing_configuration
            .map(sharing)
            .transpose()?,
        preemption_configuration: req.preemption_configuration.map(preemption).transpose()?,
        state: req.state,
    };
    let share = service.update_quota_share(&arn, update).await?;
    Ok(name_and_arn(service.arns(), &share))
}

async fn delete<S: Store, E: EventSink>(
    service: &Service<S, E>,
    body: &[u8],
) -> Result<Value, ApiError> {
    let req: ArnRequest = extract::json(body)?;
    let arn = validate::required("quotaShareArn", req.quota_share_arn)?;
    service.delete_quota_share(&arn).await?;
    Ok(json!({}))
}
