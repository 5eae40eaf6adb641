//! What a request asks to do: an action (a Batch operation, or one of Trainyard's own), the
//! resource it acts on, and the context policies may test.

/// Every action, by its Cedar name (`Trainyard::Action::"NAME"`), which is the operation's name.
/// Each is one operation of the HTTP API, except that `TerminateServiceJobs` is authorized as
/// [`Action::TERMINATE_SERVICE_JOB`] on each job it names.
pub const ACTIONS: [&str; 31] = [
    "SubmitServiceJob",
    "TerminateServiceJob",
    "UpdateServiceJob",
    "TagResource",
    "UntagResource",
    "DescribeServiceJob",
    "ListServiceJobs",
    "GetJobQueueSnapshot",
    "ListQuotaShares",
    "DescribeQuotaShare",
    "DescribeJobQueues",
    "DescribeServiceEnvironments",
    "DescribeSchedulingPolicies",
    "ListSchedulingPolicies",
    "GetAccessPolicies",
    "ListTagsForResource",
    "CreateJobQueue",
    "UpdateJobQueue",
    "DeleteJobQueue",
    "CreateServiceEnvironment",
    "UpdateServiceEnvironment",
    "DeleteServiceEnvironment",
    "CreateSchedulingPolicy",
    "UpdateSchedulingPolicy",
    "DeleteSchedulingPolicy",
    "CreateQuotaShare",
    "UpdateQuotaShare",
    "DeleteQuotaShare",
    "PutAccessPolicies",
    "DeleteAccessPolicies",
    "ListAuditRecords",
];

/// The actions that change nothing: the schema's `Read` group, and `ListAuditRecords` (in no
/// group). Every other action asks to change something, and is recorded in the audit trail.
const READS: [&str; 12] = [
    "DescribeServiceJob",
    "ListServiceJobs",
    "GetJobQueueSnapshot",
    "ListQuotaShares",
    "DescribeQuotaShare",
    "DescribeJobQueues",
    "DescribeServiceEnvironments",
    "DescribeSchedulingPolicies",
    "ListSchedulingPolicies",
    "GetAccessPolicies",
    "ListTagsForResource",
    "ListAuditRecords",
];

/// The action groups, for `action in Trainyard::Action::"Read"`: never the action of a request.
/// `Read` holds every operation that changes nothing; `Administer` every change to
/// configuration and to the access policies.
pub const GROUPS: [&str; 2] = ["Read", "Administer"];

/// An action: one of [`ACTIONS`], kept as its name so that the API, the metrics and the logs
/// name actions the way policies do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Action(&'static str);

impl Action {
    /// `SubmitServiceJob`.
    pub const SUBMIT_SERVICE_JOB: Action = Action("SubmitServiceJob");
    /// `TerminateServiceJob`.
    pub const TERMINATE_SERVICE_JOB: Action = Action("TerminateServiceJob");
    /// `DescribeServiceJob`.
    pub const DESCRIBE_SERVICE_JOB: Action = Action("DescribeServiceJob");
    /// `UpdateServiceJob`.
    pub const UPDATE_SERVICE_JOB: Action = Action("UpdateServiceJob");
    /// `PutAccessPolicies`.
    pub const PUT_ACCESS_POLICIES: Action = Action("PutAccessPolicies");

    /// The action named `name` (exactly, as in [`ACTIONS`]), if there is one.
    pub fn named(name: &str) -> Option<Action> {
        ACTIONS.iter().find(|a| **a == name).map(|a| Action(a))
    }

    /// The action of an HTTP operation as the router knows it (`submitservicejob`, the path's
    /// last segment, matched without regard to case).
    pub fn of_operation(operation: &str) -> Option<Action> {
        ACTIONS
            .iter()
            .find(|a| a.eq_ignore_ascii_case(operation))
            .map(|a| Action(a))
    }

    /// `ListAuditRecords`.
    pub const LIST_AUDIT_RECORDS: Action = Action("ListAuditRecords");
    /// `DescribeJobQueues`.
    pub const DESCRIBE_JOB_QUEUES: Action = Action("DescribeJobQueues");
    /// `DescribeServiceEnvironments`.
    pub const DESCRIBE_SERVICE_ENVIRONMENTS: Action = Action("DescribeServiceEnvironments");
    /// `DescribeSchedulingPolicies`.
    pub const DESCRIBE_SCHEDULING_POLICIES: Action = Action("DescribeSchedulingPolicies");
    /// `DescribeQuotaShare`.
    pub const DESCRIBE_QUOTA_SHARE: Action = Action("DescribeQuotaShare");

    /// Its name.
    pub fn name(self) -> &'static str {
        self.0
    }

    /// Whether it asks to change something (anything but a read).
    pub fn changes_state(self) -> bool {
        !READS.contains(&self.0)
    }
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

/// A job as policies see it (`resource.owner`, `resource.queue`, …).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct JobResource {
    /// The job id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its queue's name.
    pub queue: String,
    /// The ARN of whoever submitted it; empty when unknown.
    pub owner: String,
    /// Its share identifier; empty when none.
    pub share_identifier: String,
    /// Its quota share; empty when none.
    pub quota_share_name: String,
    /// Its scheduling priority (0 when unset).
    pub scheduling_priority: u32,
}

/// What a request acts on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Resource {
    /// The whole deployment: listings and the access policies themselves.
    Service,
    /// A job queue, by name.
    Queue(String),
    /// A job.
    Job(JobResource),
    /// A service environment, by name.
    Environment(String),
    /// A scheduling policy, by name.
    SchedulingPolicy(String),
    /// A quota share of a queue.
    QuotaShare {
        /// The queue's name.
        queue: String,
        /// The share's name.
        name: String,
    },
}

/// What a submit asks for, beyond its queue.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct SubmitContext {
    /// `shareIdentifier`; empty when none.
    pub share_identifier: String,
    /// `quotaShareName`; empty when none.
    pub quota_share_name: String,
    /// `schedulingPriority` (0 when unset).
    pub scheduling_priority: u32,
    /// The instance types the payload asks for.
    pub instance_types: Vec<String>,
    /// Instances asked for, over every type.
    pub instance_count: u64,
}

/// The context of a request, by action.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum Context {
    /// Actions whose context is empty.
    #[default]
    None,
    /// `SubmitServiceJob`.
    Submit(SubmitContext),
    /// `UpdateServiceJob`: the priority asked for.
    Update {
        /// `schedulingPriority`.
        scheduling_priority: u32,
    },
}

/// One question for the policies: may the caller do `action` to `resource`, in `context`?
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AccessRequest {
    /// The action.
    pub action: Action,
    /// The resource.
    pub resource: Resource,
    /// The context.
    pub context: Context,
}

impl AccessRequest {
    /// A request with an empty context.
    pub fn new(action: Action, resource: Resource) -> Self {
        Self {
            action,
            resource,
            context: Context::None,
        }
    }
}
