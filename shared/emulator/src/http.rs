//! The emulator's HTTP face: SageMaker's awsJson1_1 protocol over the model, so that
//! `aws-sdk-sagemaker` and boto3's `sagemaker` client work against it unchanged.
//!
//! Every request is `POST /` with `X-Amz-Target: SageMaker.<Operation>` and a JSON body; the
//! answer is a JSON body with `Content-Type: application/x-amz-json-1.1`. Errors are HTTP 400
//! with `{"__type": code, "message": …}` (botocore reads `__type` and `message`/`Message`; the
//! Rust SDK also reads the `x-amzn-ErrorType` header, which we send too).
//!
//! Served operations: `CreateTrainingJob`, `DescribeTrainingJob`, `ListTrainingJobs` (filters,
//! sorting and `NextToken` paging), `ListTags`, `StopTrainingJob`. Every call first advances the
//! model to the clock's "now", so a describe shows the lifecycle even when no driver runs.
//!
//! Error codes beyond the model's: `UnknownOperationException` (unknown or missing target, or
//! not `POST`), `SerializationException` (body not a JSON object, or a member of the wrong JSON
//! type), `ValidationException` (a member out of range, as SageMaker's own validation would say).
//! A panic in the model is caught and answered with 500 `InternalFailure`, so one bad request
//! cannot take the server down.

use std::cmp::Ordering;
use std::future::Future;
use std::panic::AssertUnwindSafe;

use crate::model::{Emulator, SageMakerError, TimeFormat};
use crate::shared::SharedEmulator;
use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

/// The largest request body accepted. SageMaker's own limit is not documented; a
/// `CreateTrainingJob` with the maximum 100 hyperparameters of 2,500 characters each is about
/// 250 KiB, so 1 MiB leaves room without letting a client exhaust memory.
pub const MAX_REQUEST_BYTES: usize = 1 << 20;

/// The awsJson1_1 content type, on every response.
pub const CONTENT_TYPE: &str = "application/x-amz-json-1.1";

/// `ListTrainingJobs.MaxResults` when the caller gives none (SageMaker's default).
pub const DEFAULT_MAX_RESULTS: i64 = 10;

/// The largest `ListTrainingJobs.MaxResults` SageMaker accepts.
pub const MAX_MAX_RESULTS: i64 = 100;

/// The router: every method and path goes to one handler, which answers anything that is not
/// `POST` with a SageMaker-shaped error rather than axum's plain-text 404/405.
pub fn router(shared: SharedEmulator) -> Router {
    Router::new().fallback(handle).with_state(shared)
}

/// Serves [`router`] on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    shared: SharedEmulator,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(shared))
        .with_graceful_shutdown(shutdown)
        .await
}

/// The operations served, by `X-Amz-Target` suffix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// `CreateTrainingJob`.
    CreateTrainingJob,
    /// `DescribeTrainingJob`.
    DescribeTrainingJob,
    /// `ListTrainingJobs`.
    ListTrainingJobs,
    /// `ListTags`.
    ListTags,
    /// `StopTrainingJob`.
    StopTrainingJob,
}

impl Operation {
    /// Reads `X-Amz-Target: SageMaker.<Operation>`.
    pub fn from_target(target: &str) -> Option<Self> {
        match target.strip_prefix("SageMaker.")? {
            "CreateTrainingJob" => Some(Self::CreateTrainingJob),
            "DescribeTrainingJob" => Some(Self::DescribeTrainingJob),
            "ListTrainingJobs" => Some(Self::ListTrainingJobs),
            "ListTags" => Some(Self::ListTags),
            "StopTrainingJob" => Some(Self::StopTrainingJob),
            _ => None,
        }
    }

    /// The operation's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CreateTrainingJob => "CreateTrainingJob",
            Self::DescribeTrainingJob => "DescribeTrainingJob",
            Self::ListTrainingJobs => "ListTrainingJobs",
            Self::ListTags => "ListTags",
            Self::StopTrainingJob => "StopTrainingJob",
        }
    }

    /// Whether the operation can bring the next deadline forward.
    fn changes_deadlines(self) -> bool {
        matches!(self, Self::CreateTrainingJob | Self::StopTrainingJob)
    }
}

/// What the HTTP face answers when a request does not succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The model refused the request.
    #[error(transparent)]
    Model(#[from] SageMakerError),
    /// The target is missing or not an operation we serve, or the method is not `POST`.
    #[error("{0}")]
    UnknownOperation(String),
    /// The body is not a JSON object, or a member has the wrong JSON type.
    #[error("{0}")]
    Serialization(String),
    /// The model panicked; a bug in the emulator, not the caller's fault.
    #[error("{0}")]
    InternalFailure(String),
}

impl WireError {
    /// The wire code (`__type`).
    pub fn code(&self) -> &'static str {
        match self {
            Self::Model(e) => e.code(),
            Self::UnknownOperation(_) => "UnknownOperationException",
            Self::Serialization(_) => "SerializationException",
            Self::InternalFailure(_) => "InternalFailure",
        }
    }

    /// 400, except for our own failures.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::InternalFailure(_) => StatusCode::INTERNAL_SERVER_ERROR,
            _ => StatusCode::BAD_REQUEST,
        }
    }
}

fn validation(message: impl Into<String>) -> WireError {
    WireError::Model(SageMakerError::ValidationException(message.into()))
}

fn serialization(message: impl Into<String>) -> WireError {
    WireError::Serialization(message.into())
}

/// Decodes the target and body, runs the operation, encodes the answer or the error.
async fn handle(
    State(shared): State<SharedEmulator>,
    method: Method,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let request_id = shared.next_request_id();
    let target = headers
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let result = async {
        let op = match (method == Method::POST, Operation::from_target(&target)) {
            (true, Some(op)) => op,
            (true, None) => {
                return Err(WireError::UnknownOperation(format!(
                    "Operation {target:?} is not supported by the Trainyard SageMaker emulator"
                )));
            }
            (false, _) => {
                return Err(WireError::UnknownOperation(format!(
                    "Method {method} is not supported: SageMaker's protocol is POST / with an X-Amz-Target header"
                )));
            }
        };
        let bytes = to_bytes(body, MAX_REQUEST_BYTES).await.map_err(|_| {
            validation(format!(
                "The request body is larger than the emulator's limit of {MAX_REQUEST_BYTES} bytes"
            ))
        })?;
        let request = parse_body(&bytes)?;
        dispatch(&shared, op, &request)
    }
    .await;
    match result {
        Ok(value) => {
            tracing::debug!(x_amz_target = %target, request_id, "SageMaker request served");
            respond(StatusCode::OK, &request_id, None, &value)
        }
        Err(err) => {
            tracing::debug!(
                x_amz_target = %target,
                request_id,
                error_code = err.code(),
                error_message = %err,
                "SageMaker request refused"
            );
            // `Message` too: SageMaker's modeled errors name their member `Message`.
            let message = err.to_string();
            let body = json!({ "__type": err.code(), "message": message, "Message": message });
            respond(err.status(), &request_id, Some(err.code()), &body)
        }
    }
}

fn respond(status: StatusCode, request_id: &str, error: Option<&str>, body: &Value) -> Response {
    let mut response = (status, body.to_string()).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
    if let Ok(id) = HeaderValue::from_str(request_id) {
        headers.insert("x-amzn-requestid", id);
    }
    if let Some(code) = error.and_then(|c| HeaderValue::from_str(c).ok()) {
        headers.insert("x-amzn-errortype", code);
    }
    response
}

/// The body as a JSON object. An empty body counts as `{}`, as some clients send nothing for
/// operations without required members.
fn parse_body(bytes: &[u8]) -> Result<Map<String, Value>, WireError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(serialization("The request body must be a JSON object")),
        Err(e) => Err(serialization(format!(
            "The request body is not valid JSON: {e}"
        ))),
    }
}

/// Runs one operation against the model, catching a panic so that it becomes a 500 instead of a
/// dropped connection.
fn dispatch(
    shared: &SharedEmulator,
    op: Operation,
    request: &Map<String, Value>,
) -> Result<Value, WireError> {
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
        shared.with(|emulator, now_ms| call(emulator, now_ms, op, request))
    }))
    .unwrap_or_else(|_| {
        tracing::error!(
            operation = op.as_str(),
            "the emulator model panicked on a request"
        );
        Err(WireError::InternalFailure(
            "The emulator failed while handling the request".into(),
        ))
    });
    if result.is_ok() && op.changes_deadlines() {
        shared.notify_changed();
    }
    result
}

/// One operation on the model at `now_ms` (already advanced to it).
pub fn call(
    emulator: &mut Emulator,
    now_ms: i64,
    op: Operation,
    request: &Map<String, Value>,
) -> Result<Value, WireError> {
    match op {
        Operation::CreateTrainingJob => {
            let arn = emulator.create_training_job(Value::Object(request.clone()), now_ms)?;
            Ok(json!({ "TrainingJobArn": arn }))
        }
        Operation::DescribeTrainingJob => {
            let name = training_job_name(request)?;
            Ok(emulator.describe_training_job(name, TimeFormat::EpochSeconds)?)
        }
        Operation::StopTrainingJob => {
            let name = training_job_name(request)?;
            emulator.stop_training_job(name, now_ms)?;
            Ok(json!({}))
        }
        Operation::ListTags => {
            let arn = required_string(request, "ResourceArn")?;
            // MaxResults/NextToken are accepted but unused: a job has at most 50 tags, which
            // always fit in one page.
            optional_i64(request, "MaxResults")?;
            optional_string(request, "NextToken")?;
            Ok(json!({ "Tags": emulator.list_tags(arn)? }))
        }
        Operation::ListTrainingJobs => {
            let list = ListRequest::parse(request)?;
            let all = emulator.list_training_jobs(None, None, usize::MAX);
            Ok(list.page(all))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Members.

/// SageMaker's validation messages name members in lowerCamelCase.
fn wire_name(member: &str) -> String {
    let mut chars = member.chars();
    chars.next().map_or_else(String::new, |first| {
        first.to_ascii_lowercase().to_string() + chars.as_str()
    })
}

fn optional_string<'a>(
    request: &'a Map<String, Value>,
    member: &str,
) -> Result<Option<&'a str>, WireError> {
    match request.get(member) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(serialization(format!(
            "Expected a string for member {member}"
        ))),
    }
}

fn required_string<'a>(
    request: &'a Map<String, Value>,
    member: &str,
) -> Result<&'a str, WireError> {
    optional_string(request, member)?.ok_or_else(|| {
        validation(format!(
            "1 validation error detected: Value null at '{}' failed to satisfy constraint: Member must not be null",
            wire_name(member)
        ))
    })
}

fn optional_i64(request: &Map<String, Value>, member: &str) -> Result<Option<i64>, WireError> {
    match request.get(member) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_i64()
            .map(Some)
            .ok_or_else(|| serialization(format!("Expected an integer for member {member}"))),
    }
}

/// An awsJson1_1 timestamp: epoch seconds, possibly fractional. Returned in milliseconds.
fn optional_time_ms(request: &Map<String, Value>, member: &str) -> Result<Option<i64>, WireError> {
    match request.get(member) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .filter(|s| s.is_finite())
            .map(|s| Some(seconds_to_ms(s)))
            .ok_or_else(|| {
                serialization(format!(
                    "Expected a timestamp (epoch seconds) for member {member}"
                ))
            }),
    }
}

fn seconds_to_ms(seconds: f64) -> i64 {
    // `as` saturates, so absurd values become the ends of time rather than wrapping.
    (seconds * 1000.0).round() as i64
}

fn training_job_name(request: &Map<String, Value>) -> Result<&str, WireError> {
    let name = required_string(request, "TrainingJobName")?;
    if name.is_empty() || name.len() > 63 {
        return Err(validation(format!(
            "1 validation error detected: Value '{name}' at 'trainingJobName' failed to satisfy constraint: Member must have length between 1 and 63"
        )));
    }
    Ok(name)
}

fn one_of<'a>(
    request: &'a Map<String, Value>,
    member: &str,
    allowed: &[&str],
) -> Result<Option<&'a str>, WireError> {
    match optional_string(request, member)? {
        Some(v) if !allowed.contains(&v) => Err(validation(format!(
            "1 validation error detected: Value '{v}' at '{}' failed to satisfy constraint: Member must satisfy enum value set: [{}]",
            wire_name(member),
            allowed.join(", ")
        ))),
        other => Ok(other),
    }
}

// ---------------------------------------------------------------------------------------------
// ListTrainingJobs.

/// `ListTrainingJobs.SortBy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SortBy {
    Name,
    CreationTime,
    Status,
}

impl SortBy {
    fn as_str(self) -> &'static str {
        match self {
            Self::Name => "Name",
            Self::CreationTime => "CreationTime",
            Self::Status => "Status",
        }
    }
}

/// Where a page ends in the listing order: the sort value and the job's lower-cased name, which
/// is unique (SageMaker names are unique regardless of case), so the order is total and a page
/// continues after its cursor even when jobs are created between pages.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Position {
    key: SortKey,
    name: String,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum SortKey {
    Time(i64),
    Text(String),
}

/// A parsed `ListTrainingJobs` request.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ListRequest {
    name_contains: Option<String>,
    status: Option<String>,
    created_after_ms: Option<i64>,
    created_before_ms: Option<i64>,
    modified_after_ms: Option<i64>,
    modified_before_ms: Option<i64>,
    /// `WarmPoolStatusEquals` or `TrainingPlanArnEquals` is set: emulated jobs have neither a
    /// warm pool nor a training plan, so nothing matches.
    matches_nothing: bool,
    max_results: usize,
    sort_by: SortBy,
    descending: bool,
    after: Option<Position>,
}

const STATUSES: &[&str] = &[
    "InProgress",
    "Completed",
    "Failed",
    "Stopping",
    "Stopped",
    "Deleting",
];

impl ListRequest {
    fn parse(request: &Map<String, Value>) -> Result<Self, WireError> {
        let name_contains = optional_string(request, "NameContains")?;
        if let Some(n) = name_contains {
            let ok_chars = n.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
            if n.is_empty() || n.len() > 63 || !ok_chars {
                return Err(validation(format!(
                    "1 validation error detected: Value '{n}' at 'nameContains' failed to satisfy constraint: Member must have length between 1 and 63 and satisfy regular expression pattern: [a-zA-Z0-9\\-]+"
                )));
            }
        }
        let status = one_of(request, "StatusEquals", STATUSES)?;
        let max_results = optional_i64(request, "MaxResults")?.unwrap_or(DEFAULT_MAX_RESULTS);
        if !(1..=MAX_MAX_RESULTS).contains(&max_results) {
            return Err(validation(format!(
                "1 validation error detected: Value '{max_results}' at 'maxResults' failed to satisfy constraint: Member must have value between 1 and {MAX_MAX_RESULTS}"
            )));
        }
        let sort_by = match one_of(request, "SortBy", &["Name", "CreationTime", "Status"])? {
            Some("Name") => SortBy::Name,
            Some("Status") => SortBy::Status,
            _ => SortBy::CreationTime,
        };
        // SageMaker's default order is Ascending.
        let descending =
            one_of(request, "SortOrder", &["Ascending", "Descending"])? == Some("Descending");
        let matches_nothing = optional_string(request, "WarmPoolStatusEquals")?.is_some()
            | optional_string(request, "TrainingPlanArnEquals")?.is_some();
        let after = optional_string(request, "NextToken")?
            .map(|token| decode_token(token, sort_by, descending))
            .transpose()?;
        Ok(Self {
            name_contains: name_contains.map(str::to_lowercase),
            status: status.map(str::to_owned),
            created_after_ms: optional_time_ms(request, "CreationTimeAfter")?,
            created_before_ms: optional_time_ms(request, "CreationTimeBefore")?,
            modified_after_ms: optional_time_ms(request, "LastModifiedTimeAfter")?,
            modified_before_ms: optional_time_ms(request, "LastModifiedTimeBefore")?,
            matches_nothing,
            max_results: usize::try_from(max_results).unwrap_or(1),
            sort_by,
            descending,
            after,
        })
    }

    /// Filters, sorts and pages the model's summaries.
    ///
    /// Unlike SageMaker, which applies `StatusEquals` after taking `MaxResults` jobs, filters
    /// apply first: a page is never short while more matches remain.
    fn page(&self, summaries: Vec<Value>) -> Value {
        let mut rows: Vec<(Position, Value)> = summaries
            .into_iter()
            .filter(|s| self.matches(s))
            .map(|s| (self.position(&s), s))
            .collect();
        rows.sort_by(|a, b| self.compare(&a.0, &b.0));
        let start = self.after.as_ref().map_or(0, |cursor| {
            rows.partition_point(|(p, _)| self.compare(p, cursor) != Ordering::Greater)
        });
        let rest = rows.get(start..).unwrap_or_default();
        let page = rest.get(..self.max_results).unwrap_or(rest);
        let mut out = json!({
            "TrainingJobSummaries": page.iter().map(|(_, s)| s.clone()).collect::<Vec<_>>(),
        });
        if page.len() < rest.len()
            && let Some((last, _)) = page.last()
        {
            out["NextToken"] = json!(encode_token(last, self.sort_by, self.descending));
        }
        out
    }

    fn matches(&self, summary: &Value) -> bool {
        let text = |k: &str| summary.get(k).and_then(Value::as_str).unwrap_or_default();
        let time = |k: &str| summary.get(k).and_then(Value::as_f64).map(seconds_to_ms);
        let after =
            |t: Option<i64>, bound: Option<i64>| bound.is_none_or(|b| t.is_some_and(|t| t > b));
        let before =
            |t: Option<i64>, bound: Option<i64>| bound.is_none_or(|b| t.is_some_and(|t| t < b));
        !self.matches_nothing
            && self
                .name_contains
                .as_deref()
                .is_none_or(|n| text("TrainingJobName").to_lowercase().contains(n))
            && self
                .status
                .as_deref()
                .is_none_or(|s| text("TrainingJobStatus") == s)
            && after(time("CreationTime"), self.created_after_ms)
            && before(time("CreationTime"), self.created_before_ms)
            && after(time("LastModifiedTime"), self.modified_after_ms)
            && before(time("LastModifiedTime"), self.modified_before_ms)
    }

    fn position(&self, summary: &Value) -> Position {
        let text = |k: &str| {
            summary
                .get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let name = text("TrainingJobName").to_lowercase();
        let key = match self.sort_by {
            SortBy::Name => SortKey::Text(name.clone()),
            SortBy::Status => SortKey::Text(text("TrainingJobStatus")),
            SortBy::CreationTime => SortKey::Time(
                summary
                    .get("CreationTime")
                    .and_then(Value::as_f64)
                    .map_or(0, seconds_to_ms),
            ),
        };
        Position { key, name }
    }

    fn compare(&self, a: &Position, b: &Position) -> Ordering {
        if self.descending { b.cmp(a) } else { a.cmp(b) }
    }
}

/// `NextToken`: the last position of the page, with the sort it belongs to, hex-encoded so it is
/// opaque and safe in any JSON string.
fn encode_token(position: &Position, sort_by: SortBy, descending: bool) -> String {
    let key = match &position.key {
        SortKey::Time(ms) => format!("t{ms}"),
        SortKey::Text(s) => format!("s{s}"),
    };
    let order = if descending { "D" } else { "A" };
    let plain = format!(
        "v1\n{}\n{order}\n{key}\n{}",
        sort_by.as_str(),
        position.name
    );
    plain.bytes().map(|b| format!("{b:02x}")).collect()
}

fn decode_token(token: &str, sort_by: SortBy, descending: bool) -> Result<Position, WireError> {
    let invalid = || validation(format!("Invalid pagination token: {token:?}"));
    let bytes = token.as_bytes();
    if !bytes.len().is_multiple_of(2) {
        return Err(invalid());
    }
    let raw: Option<Vec<u8>> = bytes
        .chunks(2)
        .map(|pair| {
            std::str::from_utf8(pair)
                .ok()
                .and_then(|s| u8::from_str_radix(s, 16).ok())
        })
        .collect();
    let plain = raw
        .and_then(|raw| String::from_utf8(raw).ok())
        .ok_or_else(invalid)?;
    let parts: Vec<&str> = plain.split('\n').collect();
    let order = if descending { "D" } else { "A" };
    let [version, by, token_order, key, name] = parts.as_slice() else {
        return Err(invalid());
    };
    if *version != "v1" || *by != sort_by.as_str() || *token_order != order {
        return Err(validation(
            "The pagination token was issued for a different SortBy or SortOrder",
        ));
    }
    let key = if let Some(ms) = key.strip_prefix('t') {
        SortKey::Time(ms.parse().map_err(|_| invalid())?)
    } else if let Some(text) = key.strip_prefix('s') {
        SortKey::Text((*text).to_owned())
    } else {
        return Err(invalid());
    };
    Ok(Position {
        key,
        name: (*name).to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_round_trips_and_refuses_another_sort() {
        let position = Position {
            key: SortKey::Time(1_800_000_000_123),
            name: "job-7".into(),
        };
        let token = encode_token(&position, SortBy::CreationTime, true);
        assert_eq!(
            decode_token(&token, SortBy::CreationTime, true).ok(),
            Some(position)
        );
        assert!(decode_token(&token, SortBy::CreationTime, false).is_err());
        assert!(decode_token(&token, SortBy::Name, true).is_err());
    }

    #[test]
    fn garbage_tokens_are_validation_errors() {
        for token in ["", "z", "zz", "abc", "ffff", "76310a4e616d65"] {
            let err = decode_token(token, SortBy::Name, false).err();
            assert_eq!(
                err.as_ref().map(WireError::code),
                Some("ValidationException"),
                "{token:?}"
            );
        }
    }

    #[test]
    fn targets_need_the_sagemaker_prefix() {
        assert_eq!(
            Operation::from_target("SageMaker.ListTags"),
            Some(Operation::ListTags)
        );
        assert_eq!(Operation::from_target("ListTags"), None);
        assert_eq!(Operation::from_target("Batch.ListTags"), None);
        assert_eq!(Operation::from_target("SageMaker.DeleteTrainingJob"), None);
    }
}
