//! Access control at the one door every operation passes: the caller ([`Caller`], put on the
//! request by the host: the IAM principal on AWS, the verified access key's principal locally),
//! the stored access policies ([`StoredPolicies`]), and [`Gate::check`], which reads what an
//! operation would act on and asks the policies before the operation runs.
//!
//! Without stored policies every caller may do everything, as behind Batch's
//! `execute-api:Invoke`. Once a set is stored, whatever no policy permits is refused with
//! `AccessDeniedException` (HTTP 403), naming the action and the resource.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use trainyard_access::{
    AccessRequest, Action, Context, JobResource, Policies, Principal, Resource, SubmitContext,
    authorize,
};
use trainyard_app::ports::{Document, Write};
use trainyard_app::{EventSink, Service, Store};
use trainyard_domain::arn::{ArnContext, ResourceKind};
use trainyard_domain::job::ServiceJob;
use trainyard_domain::payload::parse_training_request;

use crate::error::ApiError;
use crate::throttle::Throttle;

/// Who is calling: an extension of the request, set by the host before the router runs. A
/// request without one is anonymous.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller(pub Principal);

/// What the gate decided about one question a call asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The action asked about.
    pub action: Action,
    /// The resource's ARN (`*` for the service as a whole).
    pub resource: String,
    /// Whether it may go ahead.
    pub allowed: bool,
    /// Which policies decided, for people.
    pub decided_by: String,
}

/// The gate's answer for one call.
#[derive(Debug, Default)]
pub struct Checked {
    /// Every question asked, in order, up to the first denied.
    pub verdicts: Vec<Verdict>,
    /// Whether the call asks to change something, and so goes in the audit trail.
    pub audited: bool,
    /// The refusal, when a question was denied.
    pub refusal: Option<ApiError>,
}

impl Checked {
    /// The call's refusal, if it was refused.
    pub fn refused(&self) -> Result<(), ApiError> {
        match &self.refusal {
            Some(refusal) => Err(refusal.clone()),
            None => Ok(()),
        }
    }
}

/// How a verdict reads when no access policies are stored.
const NO_POLICIES: &str = "no access policies are stored: every caller is allowed";

/// The access policies as stored: one document, replaced whole.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredPolicies {
    /// The Cedar text; `None` once deleted (every caller may do everything again).
    pub text: Option<String>,
    /// When it was written (epoch ms).
    pub updated_at: i64,
    /// Who wrote it (an ARN, or `anonymous`).
    pub updated_by: String,
}

impl Document for StoredPolicies {
    const KIND: &'static str = "access-policies";
    fn key(&self) -> String {
        STORED_KEY.to_owned()
    }
}

const STORED_KEY: &str = "default";

/// How long a process trusts the policies it read before reading them again. Another process
/// (another Lambda instance) sees a change within this; the process that made it, at once.
pub const POLICY_CACHE_MS: i64 = 5_000;

/// The policies in force as last read.
#[derive(Clone)]
struct Cached {
    read_at_ms: i64,
    version: u64,
    policies: Option<Arc<Policies>>,
}

/// The check every operation passes, with the policies cached and refusals counted; it also
/// keeps the audit trail of what it decided ([`Gate::record`]).
pub struct Gate {
    cached: Mutex<Option<Cached>>,
    denied: Mutex<BTreeMap<&'static str, u64>>,
    audit_retention_ms: i64,
    throttle: Throttle,
}

impl Default for Gate {
    fn default() -> Self {
        Self {
            cached: Mutex::default(),
            denied: Mutex::default(),
            audit_retention_ms: i64::from(DEFAULT_AUDIT_RETENTION_DAYS) * DAY_MS,
            throttle: Throttle::new(0),
        }
    }
}

/// How long audit records are kept unless a host says otherwise.
pub const DEFAULT_AUDIT_RETENTION_DAYS: u32 = 90;
const DAY_MS: i64 = 86_400_000;

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate").finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Gate {
    /// A gate whose audit records are kept `days` days (1 to 400).
    pub fn with_audit_retention_days(days: u32) -> Result<Self, String> {
        let retention_ms = i64::from(days) * DAY_MS;
        if days == 0 || retention_ms > trainyard_app::ports::MAX_AUDIT_RETENTION_MS {
            return Err(format!(
                "the audit retention must be 1 to {} days, got {days}",
                trainyard_app::ports::MAX_AUDIT_RETENTION_MS / DAY_MS
            ));
        }
        Ok(Self {
            audit_retention_ms: retention_ms,
            ..Self::default()
        })
    }

    /// This gate, limiting each caller to `per_second` requests per second (in bursts of twice
    /// that; 0: no limit, the default).
    pub fn with_rate_limit(mut self, per_second: u32) -> Self {
        self.throttle = Throttle::new(per_second);
        self
    }

    /// Takes one request of `caller` at `now_ms` from its rate limit, or refuses it with a
    /// `ThrottlingException`.
    pub fn admit(&self, caller: &Principal, now_ms: i64) -> Result<(), ApiError> {
        self.throttle.admit(&caller.arn, now_ms)
    }

    /// Requests refused by the rate limit so far.
    pub fn throttled(&self) -> u64 {
        self.throttle.refused()
    }

    /// Requests refused by the rate limit since the last call (for the Lambda function's EMF
    /// lines).
    pub fn take_throttled(&self) -> u64 {
        self.throttle.take_refused()
    }

    /// How long audit records are kept (ms).
    pub fn audit_retention_ms(&self) -> i64 {
        self.audit_retention_ms
    }

    /// Refusals so far, by action (for `/metrics`).
    pub fn denied(&self) -> BTreeMap<&'static str, u64> {
        lock(&self.denied).clone()
    }

    /// Refusals since the last call, by action, and forgets them (for metrics a host prints as
    /// it goes, such as the Lambda function's EMF lines).
    pub fn take_denied(&self) -> BTreeMap<&'static str, u64> {
        std::mem::take(&mut *lock(&self.denied))
    }

    /// The policies in force (`None`: none stored, everyone may do everything), read again
    /// when the cached copy is older than [`POLICY_CACHE_MS`].
    pub async fn policies<S: Store, E: EventSink>(
        &self,
        service: &Service<S, E>,
    ) -> Result<(u64, Option<Arc<Policies>>), ApiError> {
        let now = service.now_ms();
        if let Some(c) = lock(&self.cached).as_ref()
            && now - c.read_at_ms < POLICY_CACHE_MS
            && now >= c.read_at_ms
        {
            return Ok((c.version, c.policies.clone()));
        }
        let (version, text) = match self.stored(service).await? {
            Some((stored, version)) => (version, stored.text),
            None => (0, None),
        };
        let unchanged = lock(&self.cached)
            .as_ref()
            .filter(|c| c.version == version)
            .map(|c| c.policies.clone());
        let policies = match (unchanged, text) {
            (Some(same), _) => same,
            (None, None) => None,
            (None, Some(text)) => match Policies::parse(&text) {
                Ok(p) => Some(Arc::new(p)),
                // Stored policies were validated when written; if this build cannot read them
                // (a schema change), refuse everything rather than allow everything.
                Err(errors) => {
                    tracing::error!(%errors, "the stored access policies no longer validate");
                    return Err(ApiError::server(
                        "the stored access policies cannot be read; an administrator must replace them",
                    ));
                }
            },
        };
        *lock(&self.cached) = Some(Cached {
            read_at_ms: now,
            version,
            policies: policies.clone(),
        });
        Ok((version, policies))
    }

    fn forget(&self) {
        *lock(&self.cached) = None;
    }

    /// Decides whether the policies in force let `caller` do `operation` with `body`. Runs
    /// before the operation; reads only what it needs to name the resource (the job, for
    /// operations on a job). The answer carries the refusal, if any, and for a call that asks to
    /// change something every question asked, for the audit trail ([`Gate::record`]).
    pub async fn check<S: Store, E: EventSink>(
        &self,
        service: &Service<S, E>,
        caller: &Principal,
        operation: &str,
        body: &[u8],
    ) -> Result<Checked, ApiError> {
        let (_, policies) = self.policies(service).await?;
        let action = action_of(operation);
        if policies.is_none() && !action.is_some_and(Action::changes_state) {
            return Ok(Checked::default());
        }
        let requests = requests_for(service, operation, body, policies.is_some()).await?;
        Ok(self.decide(policies.as_deref(), caller, action, requests))
    }

    /// [`Gate::check`] for a tag operation (`TagResource`, `UntagResource`,
    /// `ListTagsForResource`) on `resource_arn`.
    pub async fn check_tags<S: Store, E: EventSink>(
        &self,
        service: &Service<S, E>,
        caller: &Principal,
        action: &str,
        resource_arn: &str,
    ) -> Result<Checked, ApiError> {
        let (_, policies) = self.policies(service).await?;
        let action = Action::named(action);
        if policies.is_none() && !action.is_some_and(Action::changes_state) {
            return Ok(Checked::default());
        }
        let requests = tag_requests(service, action, resource_arn).await?;
        Ok(self.decide(policies.as_deref(), caller, action, requests))
    }

    /// Asks each request in turn, stopping at the first the policies deny (counted and logged).
    /// Without policies every request is allowed.
    fn decide(
        &self,
        policies: Option<&Policies>,
        caller: &Principal,
        action: Option<Action>,
        requests: Vec<(AccessRequest, String)>,
    ) -> Checked {
        let mut checked = Checked {
            audited: action.is_some_and(Action::changes_state),
            ..Checked::default()
        };
        if requests.is_empty()
            && let Some(action) = action
        {
            // It names nothing that exists: the operation refuses it as such.
            checked.verdicts.push(Verdict {
                action,
                resource: "*".to_owned(),
                allowed: true,
                decided_by: "nothing to check: it names nothing that exists".to_owned(),
            });
        }
        for (request, arn) in requests {
            let Some(policies) = policies else {
                checked.verdicts.push(Verdict {
                    action: request.action,
                    resource: arn,
                    allowed: true,
                    decided_by: NO_POLICIES.to_owned(),
                });
                continue;
            };
            let decision = authorize(policies, caller, &request);
            checked.verdicts.push(Verdict {
                action: request.action,
                resource: arn.clone(),
                allowed: decision.allowed,
                decided_by: decision.explain(),
            });
            if decision.allowed {
                continue;
            }
            *lock(&self.denied).entry(request.action.name()).or_insert(0) += 1;
            tracing::info!(
                principal = %caller.arn,
                action = request.action.name(),
                resource = %arn,
                decided_by = %decision.explain(),
                errors = ?decision.errors,
                "access denied"
            );
            checked.refusal = Some(ApiError::access_denied(format!(
                "User: {} is not authorized to perform: batch:{} on resource: {arn} ({})",
                caller.arn,
                request.action,
                decision.explain()
            )));
            break;
        }
        checked
    }

    /// What `caller` may see of listed jobs: `None` when no policies are stored (everything).
    pub async fn reader<S: Store, E: EventSink>(
        &self,
        service: &Service<S, E>,
        caller: &Principal,
    ) -> Result<Option<Reader>, ApiError> {
        let (_, policies) = self.policies(service).await?;
        Ok(policies.map(|policies| Reader {
            policies,
            caller: caller.clone(),
        }))
    }

    /// The stored policies as written, with their version (`None`: none stored).
    pub async fn stored<S: Store, E: EventSink>(
        &self,
        service: &Service<S, E>,
    ) -> Result<Option<(StoredPolicies, u64)>, ApiError> {
        let stored = service
            .store()
            .get_document::<StoredPolicies>(STORED_KEY)
            .await
            .map_err(|e| ApiError::from(trainyard_app::AppError::from(e)))?;
        Ok(stored.map(|s| (s.value, s.version)))
    }

    /// `PutAccessPolicies`: validates `text` and stores it, unless it would leave `caller`
    /// unable to change the policies again. Returns how many policies the set holds.
    pub async fn put<S: Store, E: EventSink>(
        &self,
        service: &Service<S, E>,
        caller: &Principal,
        text: String,
    ) -> Result<usize, ApiError> {
        let policies = Policies::parse(&text).map_err(|errors| {
            ApiError::client(format!("The access policies are not valid: {errors}"))
        })?;
        let keeps_control = authorize(
            &policies,
            caller,
            &AccessRequest::new(Action::PUT_ACCESS_POLICIES, Resource::Service),
        );
        if !keeps_control.allowed {
            return Err(ApiError::client(format!(
                "These policies would not let you ({}) change them again ({}); add a permit for \
                 Trainyard::Action::\"PutAccessPolicies\" that covers you",
                caller.arn,
                keeps_control.explain()
            )));
        }
        let count = policies.len();
        self.store(service, caller, Some(text)).await?;
        Ok(count)
    }

    /// `DeleteAccessPolicies`: from now on every caller may do everything again.
    pub async fn delete<S: Store, E: EventSink>(
        &self,
        service: &Service<S, E>,
        caller: &Principal,
    ) -> Result<(), ApiError> {
        self.store(service, caller, None).await
    }

    async fn store<S: Store, E: EventSink>(
        &self,
        service: &Service<S, E>,
        caller: &Principal,
        text: Option<String>,
    ) -> Result<(), ApiError> {
        let expected = self
            .stored(service)
            .await?
            .map_or(0, |(_, version)| version);
        let doc = StoredPolicies {
            text,
            updated_at: service.now_ms(),
            updated_by: caller.arn.clone(),
        };
        let written = service
            .store()
            .commit(&[Write::document_value(doc, expected)])
            .await;
        self.forget();
        match written {
            Ok(()) => Ok(()),
            Err(trainyard_app::ports::StoreError::Conflict) => Err(ApiError::client(
                "The access policies changed while this request was made; read them again and retry",
            )),
            Err(e) => Err(ApiError::from(trainyard_app::AppError::from(e))),
        }
    }
}

/// Which listed jobs a caller may see: those it may describe.
#[derive(Debug, Clone)]
pub struct Reader {
    policies: Arc<Policies>,
    caller: Principal,
}

impl Reader {
    /// Whether the caller may `DescribeServiceJob` this job, and so see it listed.
    pub fn may_see(&self, job: &ServiceJob) -> bool {
        self.allows(
            Action::DESCRIBE_SERVICE_JOB,
            Resource::Job(job_resource(job)),
        )
    }

    fn allows(&self, action: Action, resource: Resource) -> bool {
        authorize(
            &self.policies,
            &self.caller,
            &AccessRequest::new(action, resource),
        )
        .allowed
    }

    /// Drops from the answer of a configuration listing (`DescribeJobQueues`,
    /// `DescribeServiceEnvironments`, `DescribeSchedulingPolicies`, `ListSchedulingPolicies`,
    /// `ListQuotaShares`) the items the caller may not describe; other answers are left as they
    /// are. An item that cannot be named is dropped. A page may then hold fewer items than
    /// `maxResults`; its `nextToken` still continues after the last item read.
    pub fn filter_listing(&self, arns: &ArnContext, operation: &str, answer: &mut Value) {
        type Naming = fn(&ArnContext, &Value) -> Option<Resource>;
        let (key, action, name): (&str, Action, Naming) = match operation {
            "describejobqueues" => ("jobQueues", Action::DESCRIBE_JOB_QUEUES, |_, item| {
                item_text(item, "jobQueueName").map(Resource::Queue)
            }),
            "describeserviceenvironments" => (
                "serviceEnvironments",
                Action::DESCRIBE_SERVICE_ENVIRONMENTS,
                |_, item| item_text(item, "serviceEnvironmentName").map(Resource::Environment),
            ),
            "describeschedulingpolicies" | "listschedulingpolicies" => (
                "schedulingPolicies",
                Action::DESCRIBE_SCHEDULING_POLICIES,
                |arns, item| {
                    item_text(item, "name")
                        .or_else(|| {
                            let arn = item_text(item, "arn")?;
                            arns.resolve(ResourceKind::SchedulingPolicy, &arn).ok()
                        })
                        .map(Resource::SchedulingPolicy)
                },
            ),
            "listquotashares" => ("quotaShares", Action::DESCRIBE_QUOTA_SHARE, |arns, item| {
                let id = arns
                    .resolve_quota_share(&item_text(item, "quotaShareArn")?)
                    .ok()?;
                Some(Resource::QuotaShare {
                    queue: id.queue,
                    name: id.name,
                })
            }),
            _ => return,
        };
        if let Some(items) = answer.get_mut(key).and_then(Value::as_array_mut) {
            items.retain(|item| name(arns, item).is_some_and(|r| self.allows(action, r)));
        }
    }
}

fn item_text(item: &Value, member: &str) -> Option<String> {
    item.get(member).and_then(Value::as_str).map(str::to_owned)
}

/// The operations whose answers [`Reader`] filters item by item.
pub const FILTERED_LISTINGS: [&str; 6] = [
    "listservicejobs",
    "describejobqueues",
    "describeserviceenvironments",
    "describeschedulingpolicies",
    "listschedulingpolicies",
    "listquotashares",
];

/// A member of a JSON body as text ("" when absent or not text).
fn text<'a>(body: &'a Value, member: &str) -> &'a str {
    body.get(member).and_then(Value::as_str).unwrap_or_default()
}

/// A member of a JSON body as a priority (0 when absent; out-of-range values are refused by the
/// operation itself, after this check, so clamping here grants nothing).
fn priority(body: &Value, member: &str) -> u32 {
    body.get(member)
        .and_then(Value::as_i64)
        .map_or(0, |p| u32::try_from(p.max(0)).unwrap_or(u32::MAX))
}

/// The name a name-or-ARN member resolves to (the raw value when it does not resolve: the
/// operation then fails on its own, and policies that name resources match nothing).
fn name_of<S: Store, E: EventSink>(
    service: &Service<S, E>,
    kind: ResourceKind,
    value: &str,
) -> String {
    service
        .arns()
        .resolve(kind, value)
        .unwrap_or_else(|_| value.to_owned())
}

fn quota_share_of<S: Store, E: EventSink>(service: &Service<S, E>, arn: &str) -> Resource {
    match service.arns().resolve_quota_share(arn) {
        Ok(id) => Resource::QuotaShare {
            queue: id.queue,
            name: id.name,
        },
        Err(_) => Resource::QuotaShare {
            queue: String::new(),
            name: arn.to_owned(),
        },
    }
}

/// The job a policy sees.
pub fn job_resource(job: &ServiceJob) -> JobResource {
    JobResource {
        id: job.job_id.clone(),
        name: job.job_name.clone(),
        queue: job.job_queue.clone(),
        owner: job.owner.clone().unwrap_or_default(),
        share_identifier: job.share_identifier.clone().unwrap_or_default(),
        quota_share_name: job.quota_share_name.clone().unwrap_or_default(),
        scheduling_priority: job.priority(),
    }
}

/// The job named by `id` (an id or an ARN), if it exists.
async fn job<S: Store, E: EventSink>(
    service: &Service<S, E>,
    id: &str,
) -> Result<Option<ServiceJob>, ApiError> {
    if id.is_empty() {
        return Ok(None);
    }
    match service.describe_job(id).await {
        Ok(job) => Ok(Some(job)),
        Err(e) if e.is_client_error() => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// What a submit asks for, from its request.
fn submit_context(body: &Value) -> SubmitContext {
    let training = parse_training_request(text(body, "serviceRequestPayload")).ok();
    SubmitContext {
        share_identifier: text(body, "shareIdentifier").to_owned(),
        quota_share_name: text(body, "quotaShareName").to_owned(),
        scheduling_priority: priority(body, "schedulingPriority"),
        instance_types: training
            .as_ref()
            .map(|t| t.instances.keys().cloned().collect())
            .unwrap_or_default(),
        instance_count: training.as_ref().map_or(0, |t| t.total_instances()),
    }
}

/// The action of an HTTP operation: its own, except that the bulk terminate is authorized as a
/// terminate of each job it names.
fn action_of(operation: &str) -> Option<Action> {
    Action::of_operation(operation).or_else(|| {
        operation
            .eq_ignore_ascii_case("TerminateServiceJobs")
            .then_some(Action::TERMINATE_SERVICE_JOB)
    })
}

/// The questions `operation` with `body` asks of the policies, each with the ARN of its
/// resource for the refusal's message. An operation on a job that does not exist asks nothing
/// (the operation says it does not exist); an unknown operation asks nothing (it is refused as
/// unknown).
pub async fn requests<S: Store, E: EventSink>(
    service: &Service<S, E>,
    operation: &str,
    body: &[u8],
) -> Result<Vec<(AccessRequest, String)>, ApiError> {
    requests_for(service, operation, body, true).await
}

/// [`requests`], with a submit's context read from its payload only `with_context` (the audit
/// trail of a deployment without policies names the resource, and asks nothing of the payload).
async fn requests_for<S: Store, E: EventSink>(
    service: &Service<S, E>,
    operation: &str,
    body: &[u8],
    with_context: bool,
) -> Result<Vec<(AccessRequest, String)>, ApiError> {
    let bulk = operation.eq_ignore_ascii_case("TerminateServiceJobs");
    let Some(action) = action_of(operation) else {
        return Ok(Vec::new());
    };
    // The operation decodes the body strictly after this; a body that is not JSON asks about
    // nothing in particular, so only a policy allowing the action on anything lets it through.
    let body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let arns = service.arns();
    let queue = |member: &str| {
        Resource::Queue(name_of(
            service,
            ResourceKind::JobQueue,
            text(&body, member),
        ))
    };
    let resource = match action.name() {
        _ if bulk => {
            let ids: Vec<&str> = body
                .get("jobs")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let mut out = Vec::with_capacity(ids.len());
            for id in ids {
                if let Some(job) = job(service, id).await? {
                    out.push((
                        AccessRequest::new(
                            Action::TERMINATE_SERVICE_JOB,
                            Resource::Job(job_resource(&job)),
                        ),
                        arns.job_arn(&job.job_id),
                    ));
                }
            }
            return Ok(out);
        }
        "SubmitServiceJob" => {
            let resource = queue("jobQueue");
            let arn = resource_arn(service, &resource);
            let context = if with_context {
                submit_context(&body)
            } else {
                SubmitContext::default()
            };
            let request = AccessRequest {
                action,
                resource,
                context: Context::Submit(context),
            };
            return Ok(vec![(request, arn)]);
        }
        "DescribeServiceJob" | "TerminateServiceJob" | "UpdateServiceJob" => {
            let Some(job) = job(service, text(&body, "jobId")).await? else {
                return Ok(Vec::new());
            };
            let context = if action == Action::UPDATE_SERVICE_JOB {
                Context::Update {
                    scheduling_priority: priority(&body, "schedulingPriority"),
                }
            } else {
                Context::None
            };
            let request = AccessRequest {
                action,
                resource: Resource::Job(job_resource(&job)),
                context,
            };
            return Ok(vec![(request, arns.job_arn(&job.job_id))]);
        }
        "ListServiceJobs" if text(&body, "jobQueue").is_empty() => Resource::Service,
        "ListServiceJobs"
        | "GetJobQueueSnapshot"
        | "ListQuotaShares"
        | "UpdateJobQueue"
        | "DeleteJobQueue" => queue("jobQueue"),
        "CreateJobQueue" => Resource::Queue(text(&body, "jobQueueName").to_owned()),
        "CreateServiceEnvironment" => {
            Resource::Environment(text(&body, "serviceEnvironmentName").to_owned())
        }
        "UpdateServiceEnvironment" | "DeleteServiceEnvironment" => Resource::Environment(name_of(
            service,
            ResourceKind::ServiceEnvironment,
            text(&body, "serviceEnvironment"),
        )),
        "CreateSchedulingPolicy" => Resource::SchedulingPolicy(text(&body, "name").to_owned()),
        "UpdateSchedulingPolicy" | "DeleteSchedulingPolicy" => Resource::SchedulingPolicy(name_of(
            service,
            ResourceKind::SchedulingPolicy,
            text(&body, "arn"),
        )),
        "CreateQuotaShare" => Resource::QuotaShare {
            queue: name_of(service, ResourceKind::JobQueue, text(&body, "jobQueue")),
            name: text(&body, "quotaShareName").to_owned(),
        },
        "DescribeQuotaShare" | "UpdateQuotaShare" | "DeleteQuotaShare" => {
            quota_share_of(service, text(&body, "quotaShareArn"))
        }
        // Listings of configuration, and the access policies themselves.
        _ => Resource::Service,
    };
    let arn = resource_arn(service, &resource);
    Ok(vec![(AccessRequest::new(action, resource), arn)])
}

/// The questions a tag operation (`TagResource`, `UntagResource`, `ListTagsForResource`) on
/// `resource_arn` asks of the policies.
pub async fn tag_requests<S: Store, E: EventSink>(
    service: &Service<S, E>,
    action: Option<Action>,
    resource_arn: &str,
) -> Result<Vec<(AccessRequest, String)>, ApiError> {
    let Some(action) = action else {
        return Ok(Vec::new());
    };
    let arns = service.arns();
    let resource = if let Ok(id) = arns.resolve(ResourceKind::ServiceJob, resource_arn) {
        match job(service, &id).await? {
            Some(job) => Resource::Job(job_resource(&job)),
            None => return Ok(Vec::new()),
        }
    } else if let Ok(name) = arns.resolve(ResourceKind::JobQueue, resource_arn) {
        Resource::Queue(name)
    } else if let Ok(name) = arns.resolve(ResourceKind::ServiceEnvironment, resource_arn) {
        Resource::Environment(name)
    } else if let Ok(name) = arns.resolve(ResourceKind::SchedulingPolicy, resource_arn) {
        Resource::SchedulingPolicy(name)
    } else {
        quota_share_of(service, resource_arn)
    };
    Ok(vec![(
        AccessRequest::new(action, resource),
        resource_arn.to_owned(),
    )])
}

/// A resource's ARN, for messages.
fn resource_arn<S: Store, E: EventSink>(service: &Service<S, E>, resource: &Resource) -> String {
    let arns = service.arns();
    match resource {
        Resource::Service => "*".to_owned(),
        Resource::Queue(n) => arns.queue_arn(n),
        Resource::Job(j) => arns.job_arn(&j.id),
        Resource::Environment(n) => arns.environment_arn(n),
        Resource::SchedulingPolicy(n) => arns.policy_arn(n),
        Resource::QuotaShare { queue, name } => {
            arns.quota_share_arn(&trainyard_domain::arn::QuotaShareId {
                queue: queue.clone(),
                name: name.clone(),
            })
        }
    }
}
