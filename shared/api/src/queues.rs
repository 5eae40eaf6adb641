//! Job-queue operations: `CreateJobQueue`, `DescribeJobQueues`, `UpdateJobQueue`,
//! `DeleteJobQueue` (reference §2.6, §P2.3), for `SAGEMAKER_TRAINING` queues only.
//!
//! Describe output follows the User Guide's sample exactly: `computeEnvironmentOrder: []`,
//! environments as ARNs, `tags: {}` and `jobStateTimeLimitActions: []` when there are none.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use trainyard_app::service::queues::{JobQueueUpdate, NewJobQueue};
use trainyard_app::{EventSink, Service, Store};
use trainyard_domain::arn::ArnContext;
use trainyard_domain::limits::{MAX_DESCRIBE_ITEMS, QUEUE_PRIORITY, STATE_TIME_LIMIT_S};
use trainyard_domain::queue::{
    JobQueue, JobStateTimeLimitAction, ServiceEnvironmentOrder, TimeLimitAction, TimeLimitState,
};
use trainyard_domain::{ResourceStatus, State, Tags};

use crate::error::ApiError;
use crate::extract::to_value;
use crate::paging::{list_response, page_by_name};
use crate::{extract, validate};

/// The only queue type Trainyard serves.
const SAGEMAKER_TRAINING: &str = "SAGEMAKER_TRAINING";

/// Handles `op` if it belongs to this module.
pub async fn handle<S: Store, E: EventSink>(
    service: &Service<S, E>,
    op: &str,
    body: &[u8],
) -> Option<Result<Value, ApiError>> {
    Some(match op {
        "createjobqueue" => create(service, body).await,
        "describejobqueues" => describe(service, body).await,
        "updatejobqueue" => update(service, body).await,
        "deletejobqueue" => delete(service, body).await,
        _ => return None,
    })
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct EnvironmentOrderIn {
    order: Option<i64>,
    service_environment: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct TimeLimitActionIn {
    reason: Option<String>,
    state: Option<String>,
    max_time_seconds: Option<i64>,
    action: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CreateRequest {
    job_queue_name: Option<String>,
    state: Option<State>,
    scheduling_policy_arn: Option<String>,
    priority: Option<i64>,
    /// Container queues' field; accepted only empty (the SageMaker SDK sends `[]`).
    compute_environment_order: Option<Vec<Value>>,
    service_environment_order: Option<Vec<EnvironmentOrderIn>>,
    job_queue_type: Option<String>,
    tags: Option<Tags>,
    job_state_time_limit_actions: Option<Vec<TimeLimitActionIn>>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct UpdateRequest {
    job_queue: Option<String>,
    state: Option<State>,
    scheduling_policy_arn: Option<String>,
    priority: Option<i64>,
    compute_environment_order: Option<Vec<Value>>,
    service_environment_order: Option<Vec<EnvironmentOrderIn>>,
    job_state_time_limit_actions: Option<Vec<TimeLimitActionIn>>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DescribeRequest {
    job_queues: Option<Vec<String>>,
    max_results: Option<i64>,
    next_token: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeleteRequest {
    job_queue: Option<String>,
}

fn only_service_queues(what: &str) -> ApiError {
    ApiError::client(format!(
        "{what}: Trainyard serves only SAGEMAKER_TRAINING job queues, which take \
         serviceEnvironmentOrder rather than computeEnvironmentOrder"
    ))
}

fn check_no_compute_environments(order: Option<&[Value]>) -> Result<(), ApiError> {
    match order {
        Some(entries) if !entries.is_empty() => Err(only_service_queues(
            "computeEnvironmentOrder must be empty or absent",
        )),
        _ => Ok(()),
    }
}

fn environment_order(
    entries: Vec<EnvironmentOrderIn>,
) -> Result<Vec<ServiceEnvironmentOrder>, ApiError> {
    entries
        .into_iter()
        .enumerate()
        .map(|(i, entry)| {
            let order_field = format!("serviceEnvironmentOrder[{i}].order");
            let order = validate::required(&order_field, entry.order)?;
            validate::range(&order_field, order, 0..=i64::from(i32::MAX))?;
            let env = validate::required(
                &format!("serviceEnvironmentOrder[{i}].serviceEnvironment"),
                entry.service_environment,
            )?;
            Ok(ServiceEnvironmentOrder {
                order: i32::try_from(order).unwrap_or(i32::MAX),
                service_environment: env,
            })
        })
        .collect()
}

fn time_limit_actions(
    entries: Vec<TimeLimitActionIn>,
) -> Result<Vec<JobStateTimeLimitAction>, ApiError> {
    entries
        .into_iter()
        .enumerate()
        .map(|(i, entry)| {
            let field = |member: &str| format!("jobStateTimeLimitActions[{i}].{member}");
            let reason = validate::required(&field("reason"), entry.reason)?;
            let state = validate::required(&field("state"), entry.state)?;
            if state != "RUNNABLE" {
                return Err(ApiError::client(format!(
                    "{} must be RUNNABLE (the only state an action can watch), got {state:?}",
                    field("state")
                )));
            }
            let seconds = validate::required(&field("maxTimeSeconds"), entry.max_time_seconds)?;
            validate::range(&field("maxTimeSeconds"), seconds, STATE_TIME_LIMIT_S)?;
            let action = match validate::required(&field("action"), entry.action)?.as_str() {
                "TERMINATE" => TimeLimitAction::Terminate,
                // Refused by the use-case with the explanation; decoding it keeps one message.
                "CANCEL" => TimeLimitAction::Cancel,
                other => {
                    return Err(ApiError::client(format!(
                        "{} must be TERMINATE, got {other:?}",
                        field("action")
                    )));
                }
            };
            Ok(JobStateTimeLimitAction {
                reason,
                state: TimeLimitState::Runnable,
                max_time_seconds: u32::try_from(seconds).unwrap_or(u32::MAX),
                action,
            })
        })
        .collect()
}

fn priority(value: i64) -> Result<u32, ApiError> {
    validate::range("priority", value, QUEUE_PRIORITY)?;
    Ok(u32::try_from(value).unwrap_or(0))
}

/// `ServiceEnvironmentOrder` on the wire: the environment as an ARN.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct EnvironmentOrderOut {
    order: i32,
    service_environment: String,
}

/// `JobQueueDetail`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Detail<'a> {
    job_queue_name: &'a str,
    job_queue_arn: String,
    state: State,
    #[serde(skip_serializing_if = "Option::is_none")]
    scheduling_policy_arn: Option<String>,
    status: ResourceStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    status_reason: Option<&'a str>,
    priority: u32,
    compute_environment_order: &'static [Value],
    service_environment_order: Vec<EnvironmentOrderOut>,
    job_queue_type: &'static str,
    tags: &'a Tags,
    job_state_time_limit_actions: &'a [JobStateTimeLimitAction],
}

fn detail<'a>(arns: &ArnContext, queue: &'a JobQueue) -> Detail<'a> {
    Detail {
        job_queue_name: &queue.job_queue_name,
        job_queue_arn: arns.queue_arn(&queue.job_queue_name),
        state: queue.state,
        scheduling_policy_arn: queue
            .scheduling_policy
            .as_deref()
            .map(|p| arns.policy_arn(p)),
        status: queue.status,
        status_reason: queue.status_reason.as_deref(),
        priority: queue.priority,
        compute_environment_order: &[],
        service_environment_order: queue
            .service_environment_order
            .iter()
            .map(|o| EnvironmentOrderOut {
                order: o.order,
                service_environment: arns.environment_arn(&o.service_environment),
            })
            .collect(),
        job_queue_type: SAGEMAKER_TRAINING,
        tags: &queue.tags,
        job_state_time_limit_actions: &queue.job_state_time_limit_actions,
    }
}

fn name_and_arn(arns: &ArnContext, queue: &JobQueue) -> Value {
    json!({
        "jobQueueName": queue.job_queue_name,
        "jobQueueArn": arns.queue_arn(&queue.job_queue_name),
    })
}

async fn create<S: Store, E: EventSink>(
    service: &Service<S, E>,
    body: &[u8],
) -> Result<Value, ApiError> {
    let req: CreateRequest = extract::json(body)?;
    let name = validate::required("jobQueueName", req.job_queue_name)?;
    validate::name("jobQueueName", &name)?;
    check_no_compute_environments(req.compute_environment_order.as_deref())?;
    match req.job_queue_type.as_deref() {
        Some(SAGEMAKER_TRAINING) => {}
        // Batch infers the type from the environments; serviceEnvironmentOrder means service.
        None if req.service_environment_order.is_some() => {}
        None => return Err(ApiError::client("serviceEnvironmentOrder is required")),
        Some(other) => {
            return Err(only_service_queues(&format!(
                "jobQueueType must be SAGEMAKER_TRAINING, got {other:?}"
            )));
        }
    }
    let priority = priority(validate::required("priority", req.priority)?)?;
    let order = validate::required("serviceEnvironmentOrder", req.service_environment_order)?;
    let service_environment_order = environment_order(order)?;
    let job_state_time_limit_actions =
        time_limit_actions(req.job_state_time_limit_actions.unwrap_or_default())?;
    let tags = req.tags.unwrap_or_default();
    validate::tags("tags", &tags)?;
    let queue = service
        .create_job_queue(NewJobQueue {
            name,
            state: req.state.unwrap_or_default(),
            priority,
            scheduling_policy: req.scheduling_policy_arn,
            service_environment_order,
            job_state_time_limit_actions,
            tags,
        })
        .await?;
    Ok(name_and_arn(service.arns(), &queue))
}

async fn describe<S: Store, E: EventSink>(
    service: &Service<S, E>,
    body: &[u8],
) -> Result<Value, ApiError> {
    let req: DescribeRequest = extract::json(body)?;
    if let Some(names) = &req.job_queues
        && names.len() > MAX_DESCRIBE_ITEMS
    {
        return Err(ApiError::client(format!(
            "jobQueues may name at most {MAX_DESCRIBE_ITEMS} job queues, got {}",
            names.len()
        )));
    }
    let queues = service
        .describe_job_queues(req.job_queues.as_deref())
        .await?;
    let (page, next) = page_by_name(
        queues,
        |q| q.job_queue_name.as_str(),
        req.max_results,
        req.next_token.as_deref(),
    )?;
    let details: Vec<Detail<'_>> = page.iter().map(|q| detail(service.arns(), q)).collect();
    Ok(list_response("jobQueues", to_value(&details)?, next))
}

async fn update<S: Store, E: EventSink>(
    service: &Service<S, E>,
    body: &[u8],
) -> Result<Value, ApiError> {
    let req: UpdateRequest = extract::json(body)?;
    let reference = validate::required("jobQueue", req.job_queue)?;
    check_no_compute_environments(req.compute_environment_order.as_deref())?;
    let update = JobQueueUpdate {
        state: req.state,
        priority: req.priority.map(priority).transpose()?,
        scheduling_policy: req.scheduling_policy_arn,
        service_environment_order: req
            .service_environment_order
            .map(environment_order)
            .transpose()?,
        job_state_time_limit_actions: req
            .job_state_time_limit_actions
            .map(time_limit_actions)
            .transpose()?,
    };
    let queue = service.update_job_queue(&reference, update).await?;
    Ok(name_and_arn(service.arns(), &queue))
}

async fn delete<S: Store, E: EventSink>(
    service: &Service<S, E>,
    body: &[u8],
) -> Result<Value, ApiError> {
    let req: DeleteRequest = extract::json(body)?;
    let reference = validate::required("jobQueue", req.job_queue)?;
    service.delete_job_queue(&reference).await?;
    Ok(json!({}))
}
