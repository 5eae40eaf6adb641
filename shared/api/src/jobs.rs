//! Service-job operations and `GetJobQueueSnapshot`: wire types, request validation and the
//! mapping to the use-cases in `trainyard_app::service::jobs`.
//!
//! Requests decode into structs whose members are all optional and whose integers are `i64`, so
//! that a missing member or an out-of-range number reaches a check here with a message naming
//! the field and the limit, rather than a serde message about `u32` overflow. Unknown members are
//! ignored (newer SDKs may send members this version does not know). Responses omit absent
//! optionals, give times as epoch milliseconds and queues as ARNs.

use serde::Deserialize;
use serde_json::{Value, json};
use trainyard_access::Principal;

use crate::access::Reader;
use trainyard_app::ports::{JobQuery, NameFilter};
use trainyard_app::service::jobs::{CapacityUsage, QueuePosition, QueueSnapshot, SubmitJob};
use trainyard_app::{EventSink, Service, Store};
use trainyard_domain::Tags;
use trainyard_domain::arn::ArnContext;
use trainyard_domain::job::{
    EvaluateOnExit, JobPreemptionConfiguration, JobStatus, RetryAction, RetryStrategy, ServiceJob,
    ServiceJobType, TimeoutConfig,
};
use trainyard_domain::limits::{
    CLIENT_TOKEN_LEN, JOB_PRIORITY, MAX_BULK_TERMINATE, MAX_EVALUATE_ON_EXIT, MAX_PAYLOAD_BYTES,
    MAX_STATUS_REASON_PATTERN, RETRY_ATTEMPTS,
};

use trainyard_domain::wire::{JobSummary, capacity, job_detail, job_summary};

use crate::error::ApiError;
use crate::extract::to_value;
use crate::{extract, paging, validate};

/// Handles `op` if it belongs to this module.
pub async fn handle<S: Store, E: EventSink>(
    service: &Service<S, E>,
    caller: &Principal,
    reader: Option<&Reader>,
    op: &str,
    body: &[u8],
) -> Option<Result<Value, ApiError>> {
    let result = match op {
        "submitservicejob" => submit(service, caller, body).await,
        "describeservicejob" => describe(service, body).await,
        "listservicejobs" => list(service, reader, body).await,
        "terminateservicejob" => terminate(service, body).await,
        "terminateservicejobs" => terminate_bulk(service, body).await,
        "updateservicejob" => update(service, body).await,
        "getjobqueuesnapshot" => snapshot(service, body).await,
        _ => return None,
    };
    Some(result)
}

// ---------------------------------------------------------------------------------------------
// SubmitServiceJob

/// `SubmitServiceJob` input.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubmitRequest {
    job_name: Option<String>,
    job_queue: Option<String>,
    service_job_type: Option<String>,
    service_request_payload: Option<String>,
    share_identifier: Option<String>,
    quota_share_name: Option<String>,
    scheduling_priority: Option<i64>,
    retry_strategy: Option<RetryStrategyRequest>,
    timeout_config: Option<TimeoutRequest>,
    preemption_configuration: Option<PreemptionRequest>,
    tags: Option<Tags>,
    client_token: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RetryStrategyRequest {
    attempts: Option<i64>,
    evaluate_on_exit: Option<Vec<EvaluateOnExitRequest>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct EvaluateOnExitRequest {
    action: Option<String>,
    on_status_reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct TimeoutRequest {
    attempt_duration_seconds: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PreemptionRequest {
    preemption_retries_before_termination: Option<i64>,
}

/// Converts a checked non-negative `i64` to `u32`; the ranges checked before make this total.
fn to_u32(field: &str, value: i64) -> Result<u32, ApiError> {
    u32::try_from(value).map_err(|_| {
        ApiError::client(format!(
            "{field} must be between 0 and {}, got {value}",
            u32::MAX
        ))
    })
}

fn retry_strategy(req: RetryStrategyRequest) -> Result<RetryStrategy, ApiError> {
    let attempts = validate::required("retryStrategy.attempts", req.attempts)?;
    validate::range("retryStrategy.attempts", attempts, RETRY_ATTEMPTS)?;
    let rules = req.evaluate_on_exit.unwrap_or_default();
    if rules.len() > MAX_EVALUATE_ON_EXIT {
        return Err(ApiError::client(format!(
            "retryStrategy.evaluateOnExit may have at most {MAX_EVALUATE_ON_EXIT} entries, got {}",
            rules.len()
        )));
    }
    let mut evaluate_on_exit = Vec::with_capacity(rules.len());
    for (i, rule) in rules.into_iter().enumerate() {
        let field = format!("retryStrategy.evaluateOnExit[{i}]");
        let action = validate::required(&format!("{field}.action"), rule.action)?;
        // Batch documents RETRY and EXIT and treats them case-insensitively for container jobs.
        let action = match action.to_ascii_uppercase().as_str() {
            "RETRY" => RetryAction::Retry,
            "EXIT" => RetryAction::Exit,
            _ => {
                return Err(ApiError::client(format!(
                    "{field}.action must be RETRY or EXIT, got {action:?}"
                )));
            }
        };
        if let Some(pattern) = &rule.on_status_reason {
            let len = pattern.chars().count();
            if len > MAX_STATUS_REASON_PATTERN {
                return Err(ApiError::client(format!(
                    "{field}.onStatusReason must be at most {MAX_STATUS_REASON_PATTERN} characters long, got {len}"
                )));
            }
            if let Some(c) = pattern.chars().find(|c| c.is_control()) {
                return Err(ApiError::client(format!(
                    "{field}.onStatusReason may contain only printable characters, found {c:?}"
                )));
            }
        }
        evaluate_on_exit.push(EvaluateOnExit {
            action: Some(action),
            on_status_reason: rule.on_status_reason,
        });
    }
    Ok(RetryStrategy {
        attempts: to_u32("retryStrategy.attempts", attempts)?,
        evaluate_on_exit,
    })
}

/// Checks a `SubmitServiceJob` request's formats and ranges and builds the use-case command.
pub fn submit_command(req: SubmitRequest) -> Result<SubmitJob, ApiError> {
    let job_name = validate::required("jobName", req.job_name)?;
    validate::name("jobName", &job_name)?;
    let job_queue = validate::required("jobQueue", req.job_queue)?;
    if job_queue.is_empty() {
        return Err(ApiError::client("jobQueue must not be empty"));
    }
    let job_type = validate::required("serviceJobType", req.service_job_type)?;
    if job_type != "SAGEMAKER_TRAINING" {
        return Err(ApiError::client(format!(
            "serviceJobType must be SAGEMAKER_TRAINING, got {job_type:?}"
        )));
    }
    let payload = validate::required("serviceRequestPayload", req.service_request_payload)?;
    if payload.len() > MAX_PAYLOAD_BYTES {
        return Err(ApiError::client(format!(
            "serviceRequestPayload is {} bytes, larger than the limit of {MAX_PAYLOAD_BYTES} bytes (10 KiB)",
            payload.len()
        )));
    }
    if let Some(share) = &req.share_identifier {
        validate::share_identifier("shareIdentifier", share)?;
    }
    if let Some(share) = &req.quota_share_name {
        validate::name("quotaShareName", share)?;
    }
    let scheduling_priority = match req.scheduling_priority {
        None => None,
        Some(p) => {
            validate::range("schedulingPriority", p, JOB_PRIORITY)?;
            Some(to_u32("schedulingPriority", p)?)
        }
    };
    let retry_strategy = req.retry_strategy.map(retry_strategy).transpose()?;
    let timeout_config = match req.timeout_config {
        None => None,
        Some(t) => {
            let seconds = match t.attempt_duration_seconds {
                None => None,
                Some(s) => {
                    let field = "timeoutConfig.attemptDurationSeconds";
                    validate::range(field, s, 1..=i64::from(u32::MAX))?;
                    Some(to_u32(field, s)?)
                }
            };
            Some(TimeoutConfig {
                attempt_duration_seconds: seconds,
            })
        }
    };
    let preemption_configuration = match req.preemption_configuration {
        None => None,
        Some(p) => {
            let retries = match p.preemption_retries_before_termination {
                None => None,
                Some(n) => {
                    let field = "preemptionConfiguration.preemptionRetriesBeforeTermination";
                    validate::range(field, n, 0..=i64::from(u32::MAX))?;
                    Some(to_u32(field, n)?)
                }
            };
            Some(JobPreemptionConfiguration {
                preemption_retries_before_termination: retries,
            })
        }
    };
    let tags = req.tags.unwrap_or_default();
    validate::tags("tags", &tags)?;
    if let Some(token) = &req.client_token {
        validate::length("clientToken", token, CLIENT_TOKEN_LEN)?;
    }
    Ok(SubmitJob {
        job_name,
        job_queue,
        service_job_type: ServiceJobType::SagemakerTraining,
        service_request_payload: payload,
        share_identifier: req.share_identifier,
        quota_share_name: req.quota_share_name,
        scheduling_priority,
        retry_strategy,
        timeout_config,
        preemption_configuration,
        tags,
        client_token: req.client_token,
    })
}

async fn submit<S: Store, E: EventSink>(
    service: &Service<S, E>,
    caller: &Principal,
    body: &[u8],
) -> Result<Value, ApiError> {
    let cmd = submit_command(extract::json(body)?)?;
    let owner = (!caller.is_anonymous()).then(|| caller.arn.clone());
    let job = service.submit_as(cmd, owner).await?;
    Ok(json!({"jobArn": job.job_arn, "jobName": job.job_name, "jobId": job.job_id}))
}

/// `job` exactly as `DescribeServiceJob` renders it (without Trainyard's `trainyard` extension
/// member).
pub fn job_detail_value(arns: &ArnContext, job: &ServiceJob) -> Result<Value, ApiError> {
    to_value(&job_detail(arns, job))
}

// ---------------------------------------------------------------------------------------------
// DescribeServiceJob, TerminateServiceJob(s), UpdateServiceJob

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct JobIdRequest {
    job_id: Option<String>,
    reason: Option<String>,
    scheduling_priority: Option<i64>,
}

async fn describe<S: Store, E: EventSink>(
    service: &Service<S, E>,
    body: &[u8],
) -> Result<Value, ApiError> {
    let req: JobIdRequest = extract::json(body)?;
    let job_id = validate::required("jobId", req.job_id)?;
    let mut job = service.describe_job(&job_id).await?;
    let estimate = service
        .with_current_reasons(std::slice::from_mut(&mut job))
        .await?
        .pop()
        .flatten();
    let mut out = to_value(&job_detail(service.arns(), &job))?;
    // Trainyard's additions live under one key that Batch does not use; clients ignore it.
    let mut ext = serde_json::Map::new();
    if let Some(owner) = &job.owner {
        ext.insert("owner".into(), Value::String(owner.clone()));
    }
    if let Some(estimate) = estimate {
        ext.insert("startEstimate".into(), to_value(&estimate)?);
    }
    if let Some(place) = service.queue_position(&job).await? {
        ext.insert("queuePosition".into(), json!(place.position));
        if let Some(share) = place.share {
            ext.insert("queuePositionShare".into(), Value::String(share));
        }
    }
    if !ext.is_empty() {
        out["trainyard"] = Value::Object(ext);
    }
    Ok(out)
}

async fn terminate<S: Store, E: EventSink>(
    service: &Service<S, E>,
    body: &[u8],
) -> Result<Value, ApiError> {
    let req: JobIdRequest = extract::json(body)?;
    let job_id = validate::required("jobId", req.job_id)?;
    let reason = validate::required("reason", req.reason)?;
    service.terminate_job(&job_id, &reason).await?;
    Ok(json!({}))
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct BulkTerminateRequest {
    jobs: Option<Vec<String>>,
    reason: Option<String>,
}

/// The reason recorded when a bulk terminate names none.
const DEFAULT_BULK_REASON: &str = "Terminated by TerminateServiceJobs";

async fn terminate_bulk<S: Store, E: EventSink>(
    service: &Service<S, E>,
    body: &[u8],
) -> Result<Value, ApiError> {
    let req: BulkTerminateRequest = extract::json(body)?;
    let jobs = validate::required("jobs", req.jobs)?;
    if jobs.is_empty() || jobs.len() > MAX_BULK_TERMINATE {
        return Err(ApiError::client(format!(
            "jobs must list between 1 and {MAX_BULK_TERMINATE} job ids, got {}",
            jobs.len()
        )));
    }
    let reason = req.reason.unwrap_or_else(|| DEFAULT_BULK_REASON.to_owned());
    let outcome = service.terminate_jobs(&jobs, &reason).await;
    let errors: Vec<Value> = outcome
        .errors
        .into_iter()
        .map(|e| json!({"job": e.job, "code": e.code, "message": e.message}))
        .collect();
    Ok(json!({"successful": outcome.successful, "errors": errors}))
}

async fn update<S: Store, E: EventSink>(
    service: &Service<S, E>,
    body: &[u8],
) -> Result<Value, ApiError> {
    let req: JobIdRequest = extract::json(body)?;
    let job_id = validate::required("jobId", req.job_id)?;
    let priority = validate::required("schedulingPriority", req.scheduling_priority)?;
    validate::range("schedulingPriority", priority, JOB_PRIORITY)?;
    let priority = to_u32("schedulingPriority", priority)?;
    let job = service.update_priority(&job_id, priority).await?;
    Ok(json!({
        "jobArn": service.arns().job_arn(&job.job_id),
        "jobName": job.job_name,
        "jobId": job.job_id,
    }))
}

// ---------------------------------------------------------------------------------------------
// ListServiceJobs

/// `ListServiceJobs` input.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListRequest {
    job_queue: Option<String>,
    job_status: Option<String>,
    max_results: Option<i64>,
    next_token: Option<String>,
    filters: Option<Vec<FilterRequest>>,
}

#[derive(Debug, Default, Deserialize)]
struct FilterRequest {
    name: Option<String>,
    values: Option<Vec<String>>,
}

/// Filter names `ListServiceJobs` accepts; `JOB_STATUS` is the legacy one from the first model.
const FILTER_NAMES: &str =
    "JOB_NAME, BEFORE_CREATED_AT, AFTER_CREATED_AT, SHARE_IDENTIFIER, QUOTA_SHARE_NAME, JOB_STATUS";

fn parse_status(field: &str, value: &str) -> Result<JobStatus, ApiError> {
    JobStatus::parse(value).ok_or_else(|| {
        let all: Vec<&str> = JobStatus::ALL.iter().map(|s| s.as_str()).collect();
        ApiError::client(format!(
            "{field} must be one of {}, got {value:?}",
            all.join(", ")
        ))
    })
}

/// Builds the store query for a `ListServiceJobs` request (the queue still a name or an ARN).
///
/// Batch's rules: only one filter at a time; without a filter, `jobStatus` defaults to RUNNING;
/// `JOB_NAME` and the created-at filters match any status (ignoring `jobStatus`), while
/// `SHARE_IDENTIFIER` and `QUOTA_SHARE_NAME` combine with `jobStatus` when it is given.
pub fn list_query(req: ListRequest) -> Result<JobQuery, ApiError> {
    let limit = paging::page_size(req.max_results)?;
    let after = match req.next_token.as_deref() {
        None | Some("") => None,
        Some(token) => Some(paging::parse_job_token(token)?),
    };
    let job_status = req
        .job_status
        .as_deref()
        .map(|s| parse_status("jobStatus", s))
        .transpose()?;
    let mut query = JobQuery {
        queue: req.job_queue,
        after,
        limit,
        ..JobQuery::default()
    };
    if query.queue.as_deref() == Some("") {
        return Err(ApiError::client("jobQueue must not be empty"));
    }
    let filters = req.filters.unwrap_or_default();
    if filters.len() > 1 {
        return Err(ApiError::client(format!(
            "filters: only one filter can be used at a time, got {}",
            filters.len()
        )));
    }
    let Some(filter) = filters.into_iter().next() else {
        query.status = Some(job_status.unwrap_or(JobStatus::Running));
        return Ok(query);
    };
    let name = validate::required("filters[0].name", filter.name)?;
    let values = filter.values.unwrap_or_default();
    let [value] = values.as_slice() else {
        return Err(ApiError::client(format!(
            "filters[0].values must have exactly one value for {name}, got {}",
            values.len()
        )));
    };
    let epoch_ms = |value: &str| {
        value.trim().parse::<i64>().map_err(|_| {
            ApiError::client(format!(
                "filters[0].values: {name} takes milliseconds since the epoch as a string of digits, got {value:?}"
            ))
        })
    };
    match name.as_str() {
        "JOB_NAME" => {
            let lower = value.to_lowercase();
            query.name = Some(match lower.strip_suffix('*') {
                Some(prefix) => NameFilter::Prefix(prefix.to_owned()),
                None => NameFilter::Exact(lower),
            });
        }
        "BEFORE_CREATED_AT" => query.created_before = Some(epoch_ms(value)?),
        "AFTER_CREATED_AT" => query.created_after = Some(epoch_ms(value)?),
        "SHARE_IDENTIFIER" => {
            query.share_identifier = Some(value.clone());
            query.status = job_status;
        }
        "QUOTA_SHARE_NAME" => {
            query.quota_share_name = Some(value.clone());
            query.status = job_status;
        }
        "JOB_STATUS" => query.status = Some(parse_status("filters[0].values", value)?),
        other => {
            return Err(ApiError::client(format!(
                "filters[0].name {other:?} is not a valid filter; valid names are {FILTER_NAMES}"
            )));
        }
    }
    Ok(query)
}

/// `ExplainServiceJob` (Trainyard's own): why the job is where it is (see
/// `trainyard_app::service::why`): its status and current reason, the ranked chain of what
/// holds it back, and its history.
pub(crate) async fn explain<S: Store, E: EventSink>(
    service: &Service<S, E>,
    body: &[u8],
) -> Result<Value, ApiError> {
    let req: JobIdRequest = extract::json(body)?;
    let job_id = validate::required("jobId", req.job_id)?;
    let explanation = service.explain_job(&job_id).await?;
    let job = &explanation.job;
    let mut out = to_value(&explanation)?;
    out["jobId"] = json!(job.job_id);
    out["jobArn"] = json!(service.arns().job_arn(&job.job_id));
    out["jobName"] = json!(job.job_name);
    out["jobQueue"] = json!(job.job_queue);
    out["status"] = to_value(&job.status)?;
    if let Some(reason) = &job.status_reason {
        out["statusReason"] = json!(reason);
    }
    Ok(out)
}

/// `ListServiceJobs`. With a `reader`, only the jobs it may see are listed (a page may then
/// hold fewer than `maxResults`; `nextToken` still continues after the last job read).
async fn list<S: Store, E: EventSink>(
    service: &Service<S, E>,
    reader: Option<&Reader>,
    body: &[u8],
) -> Result<Value, ApiError> {
    let query = list_query(extract::json(body)?)?;
    let mut page = service.list_jobs(query).await?;
    if let Some(reader) = reader {
        page.items.retain(|job| reader.may_see(job));
    }
    let estimates = service.with_current_reasons(&mut page.items).await?;
    let arns = service.arns();
    let summaries: Vec<JobSummary<'_>> = page.items.iter().map(|j| job_summary(arns, j)).collect();
    let mut summaries = to_value(&summaries)?;
    // Trainyard's additions, as in DescribeServiceJob: who submitted each job, and when a
    // waiting one is expected to start.
    if let Some(items) = summaries.as_array_mut() {
        for ((item, job), estimate) in items.iter_mut().zip(&page.items).zip(estimates) {
            let mut ext = serde_json::Map::new();
            if let Some(owner) = &job.owner {
                ext.insert("owner".into(), json!(owner));
            }
            if let Some(estimate) = estimate {
                ext.insert("startEstimate".into(), to_value(&estimate)?);
            }
            if !ext.is_empty() {
                item["trainyard"] = Value::Object(ext);
            }
        }
    }
    let next = page.next.as_ref().map(paging::job_token);
    Ok(paging::list_response("jobSummaryList", summaries, next))
}

// ---------------------------------------------------------------------------------------------
// GetJobQueueSnapshot

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SnapshotRequest {
    job_queue: Option<String>,
}

fn positions(arns: &ArnContext, jobs: &[QueuePosition]) -> Vec<Value> {
    jobs.iter()
        .map(|p| {
            json!({
                "jobArn": arns.job_arn(&p.job_id),
                "earliestTimeAtPosition": p.earliest_time_at_position,
            })
        })
        .collect()
}

fn usage_list(usage: &CapacityUsage) -> Result<Value, ApiError> {
    to_value(&capacity(usage.iter().map(|(t, n)| (t, *n))))
}

fn snapshot_body(arns: &ArnContext, snap: &QueueSnapshot) -> Result<Value, ApiError> {
    let at = snap.at_ms;
    let mut out = json!({
        "frontOfQueue": {"jobs": positions(arns, &snap.front_of_queue), "lastUpdatedAt": at},
    });
    if let Some(front) = &snap.front_of_quota_shares {
        let shares: serde_json::Map<String, Value> = front
            .iter()
            .map(|(share, p)| {
                (
                    share.clone(),
                    Value::Array(positions(arns, std::slice::from_ref(p))),
                )
            })
            .collect();
        out["frontOfQuotaShares"] = json!({"quotaShares": shares, "lastUpdatedAt": at});
    }
    let mut utilization = json!({
        "totalCapacityUsage": usage_list(&snap.total_capacity_usage)?,
        "lastUpdatedAt": at,
    });
    if let Some((active, top)) = &snap.fairshare {
        let top = top
            .iter()
            .map(|(share, usage)| {
                Ok(json!({"shareIdentifier": share, "capacityUsage": usage_list(usage)?}))
            })
            .collect::<Result<Vec<_>, ApiError>>()?;
        utilization["fairshareUtilization"] =
            json!({"activeShareCount": active, "topCapacityUtilization": top});
    }
    if let Some(shares) = &snap.quota_shares {
        let top = shares
            .iter()
            .map(|(share, usage)| {
                Ok(json!({"quotaShareName": share, "capacityUsage": usage_list(usage)?}))
            })
            .collect::<Result<Vec<_>, ApiError>>()?;
        utilization["quotaShareUtilization"] = json!({"topCapacityUtilization": top});
    }
    out["queueUtilization"] = utilization;
    Ok(out)
}

async fn snapshot<S: Store, E: EventSink>(
    service: &Service<S, E>,
    body: &[u8],
) -> Result<Value, ApiError> {
    let req: SnapshotRequest = extract::json(body)?;
    let queue = validate::required("jobQueue", req.job_queue)?;
    let snap = service.queue_snapshot(&queue).await?;
    snapshot_body(service.arns(), &snap)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list_req(body: Value) -> Result<JobQuery, ApiError> {
        list_query(serde_json::from_value(body).unwrap())
    }

    #[test]
    fn list_status_rules_follow_batch() {
        // (case, request, expected status)
        let cases = [
            (
                "no filter defaults to RUNNING",
                json!({}),
                Some(JobStatus::Running),
            ),
            (
                "explicit status without filter",
                json!({"jobStatus": "RUNNABLE"}),
                Some(JobStatus::Runnable),
            ),
            (
                "JOB_NAME ignores jobStatus",
                json!({"jobStatus": "RUNNABLE", "filters": [{"name": "JOB_NAME", "values": ["x"]}]}),
                None,
            ),
            (
                "SHARE_IDENTIFIER keeps jobStatus",
                json!({"jobStatus": "RUNNABLE", "filters": [{"name": "SHARE_IDENTIFIER", "values": ["a"]}]}),
                Some(JobStatus::Runnable),
            ),
            (
                "QUOTA_SHARE_NAME without status matches any",
                json!({"filters": [{"name": "QUOTA_SHARE_NAME", "values": ["a"]}]}),
                None,
            ),
            (
                "legacy JOB_STATUS filter",
                json!({"filters": [{"name": "JOB_STATUS", "values": ["FAILED"]}]}),
                Some(JobStatus::Failed),
            ),
        ];
        for (case, body, status) in cases {
            assert_eq!(list_req(body).unwrap().status, status, "{case}");
        }
    }

    #[test]
    fn bad_list_requests_name_what_is_wrong() {
        let cases = [
            (json!({"jobStatus": "DONE"}), "jobStatus must be one of"),
            (json!({"maxResults": 0}), "maxResults"),
            (json!({"nextToken": "garbage"}), "nextToken"),
            (
                json!({"filters": [{"name": "JOB_NAME", "values": ["a"]}, {"name": "JOB_NAME", "values": ["b"]}]}),
                "only one filter",
            ),
            (
                json!({"filters": [{"name": "COLOUR", "values": ["a"]}]}),
                "JOB_NAME, BEFORE_CREATED_AT",
            ),
            (
                json!({"filters": [{"name": "AFTER_CREATED_AT", "values": ["yesterday"]}]}),
                "milliseconds",
            ),
            (
                json!({"filters": [{"name": "JOB_NAME", "values": []}]}),
                "exactly one value",
            ),
        ];
        for (body, needle) in cases {
            let err = list_req(body.clone()).unwrap_err();
            assert!(err.message.contains(needle), "{body}: {}", err.message);
        }
    }

    #[test]
    fn job_name_filter_is_lower_cased_and_star_means_prefix() {
        let q = list_req(json!({"filters": [{"name": "JOB_NAME", "values": ["Train*"]}]})).unwrap();
        assert_eq!(q.name, Some(NameFilter::Prefix("train".into())));
        let q = list_req(json!({"filters": [{"name": "JOB_NAME", "values": ["Test1"]}]})).unwrap();
        assert_eq!(q.name, Some(NameFilter::Exact("test1".into())));
    }
}
