//! Service-environment operations: `CreateServiceEnvironment`, `DescribeServiceEnvironments`,
//! `UpdateServiceEnvironment`, `DeleteServiceEnvironment` (reference §2.5, §P2.2).
//!
//! Requests decode with `i64` integers so that an out-of-range `maxCapacity` gets a range
//! message rather than a type error. Uses [`crate::paging::page_by_name`], the pagination every
//! name-ordered configuration listing shares.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use trainyard_app::service::environments::{NewServiceEnvironment, ServiceEnvironmentUpdate};
use trainyard_app::{EventSink, Service, Store};
use trainyard_domain::arn::ArnContext;
use trainyard_domain::environment::{CapacityLimit, ServiceEnvironment};
use trainyard_domain::{ResourceStatus, State, Tags};

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
        "createserviceenvironment" => create(service, body).await,
        "describeserviceenvironments" => describe(service, body).await,
        "updateserviceenvironment" => update(service, body).await,
        "deleteserviceenvironment" => delete(service, body).await,
        _ => return None,
    })
}

/// `capacityLimits[]` as sent: both members optional in Batch's model, integers wide.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CapacityLimitIn {
    max_capacity: Option<i64>,
    capacity_unit: Option<String>,
}

/// Converts `capacityLimits`, checking each `maxCapacity` is present and in range; the unit
/// rules (kinds, repeats, count) are the use-case's.
pub(crate) fn capacity_limits(
    field: &str,
    limits: Vec<CapacityLimitIn>,
) -> Result<Vec<CapacityLimit>, ApiError> {
    limits
        .into_iter()
        .enumerate()
        .map(|(i, limit)| {
            let max_field = format!("{field}[{i}].maxCapacity");
            let max = validate::required(&max_field, limit.max_capacity)?;
            validate::range(&max_field, max, 0..=i64::from(u32::MAX))?;
            let unit =
                validate::required(&format!("{field}[{i}].capacityUnit"), limit.capacity_unit)?;
            Ok(CapacityLimit {
                max_capacity: u32::try_from(max).unwrap_or(u32::MAX),
                capacity_unit: unit,
            })
        })
        .collect()
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CreateRequest {
    service_environment_name: Option<String>,
    service_environment_type: Option<String>,
    state: Option<State>,
    capacity_limits: Option<Vec<CapacityLimitIn>>,
    tags: Option<Tags>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DescribeRequest {
    service_environments: Option<Vec<String>>,
    max_results: Option<i64>,
    next_token: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct UpdateRequest {
    service_environment: Option<String>,
    state: Option<State>,
    capacity_limits: Option<Vec<CapacityLimitIn>>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeleteRequest {
    service_environment: Option<String>,
}

/// `ServiceEnvironmentDetail`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Detail<'a> {
    service_environment_name: &'a str,
    service_environment_arn: String,
    service_environment_type: &'static str,
    state: State,
    status: ResourceStatus,
    capacity_limits: &'a [CapacityLimit],
    tags: &'a Tags,
}

fn detail<'a>(arns: &ArnContext, env: &'a ServiceEnvironment) -> Detail<'a> {
    Detail {
        service_environment_name: &env.service_environment_name,
        service_environment_arn: arns.environment_arn(&env.service_environment_name),
        service_environment_type: "SAGEMAKER_TRAINING",
        state: env.state,
        status: env.status,
        capacity_limits: &env.capacity_limits,
        tags: &env.tags,
    }
}

fn name_and_arn(service_arns: &ArnContext, env: &ServiceEnvironment) -> Value {
    json!({
        "serviceEnvironmentName": env.service_environment_name,
        "serviceEnvironmentArn": service_arns.environment_arn(&env.service_environment_name),
    })
}

async fn create<S: Store, E: EventSink>(
    service: &Service<S, E>,
    body: &[u8],
) -> Result<Value, ApiError> {
    let req: CreateRequest = extract::json(body)?;
    let name = validate::required("serviceEnvironmentName", req.service_environment_name)?;
    validate::name("serviceEnvironmentName", &name)?;
    let kind = validate::required("serviceEnvironmentType", req.service_environment_type)?;
    if kind != "SAGEMAKER_TRAINING" {
        return Err(ApiError::client(format!(
            "serviceEnvironmentType must be SAGEMAKER_TRAINING, got {kind:?}"
        )));
    }
    let limits = validate::required("capacityLimits", req.capacity_limits)?;
    let capacity_limits = capacity_limits("capacityLimits", limits)?;
    let tags = req.tags.unwrap_or_default();
    validate::tags("tags", &tags)?;
    let env = service
        .create_service_environment(NewServiceEnvironment {
            name,
            state: req.state.unwrap_or_default(),
            capacity_limits,
            tags,
        })
        .await?;
    Ok(name_and_arn(service.arns(), &env))
}

async fn describe<S: Store, E: EventSink>(
    service: &Service<S, E>,
    body: &[u8],
) -> Result<Value, ApiError> {
    let req: DescribeRequest = extract::json(body)?;
    let envs = service
        .describe_service_environments(req.service_environments.as_deref())
        .await?;
    let (page, next) = page_by_name(
        envs,
        |e| e.service_environment_name.as_str(),
        req.max_results,
        req.next_token.as_deref(),
    )?;
    let details: Vec<Detail<'_>> = page.iter().map(|e| detail(service.arns(), e)).collect();
    Ok(list_response(
        "serviceEnvironments",
        to_value(&details)?,
        next,
    ))
}

async fn update<S: Store, E: EventSink>(
    service: &Service<S, E>,
    body: &[u8],
) -> Result<Value, ApiError> {
    let req: UpdateRequest = extract::json(body)?;
    let reference = validate::required("serviceEnvironment", req.service_environment)?;
    let capacity_limits = req
        .capacity_limits
        .map(|l| capacity_limits("capacityLimits", l))
        .transpose()?;
    let env = service
        .update_service_environment(
            &reference,
            ServiceEnvironmentUpdate {
                state: req.state,
                capacity_limits,
            },
        )
        .await?;
    Ok(name_and_arn(service.arns(), &env))
}

async fn delete<S: Store, E: EventSink>(
    service: &Service<S, E>,
    body: &[u8],
) -> Result<Value, ApiError> {
    let req: DeleteRequest = extract::json(body)?;
    let reference = validate::required("serviceEnvironment", req.service_environment)?;
    service.delete_service_environment(&reference).await?;
    Ok(json!({}))
}
