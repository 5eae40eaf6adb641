//! The example policies of `docs/examples/access-policies.cedar`, every principal against every
//! operation it might try: each cell of the table is asserted, allowed or denied.

use trainyard_access::{
    AccessRequest, Action, Context, JobResource, Policies, Principal, Resource, SubmitContext,
    authorize,
};

const EXAMPLES: &str = include_str!("../../../docs/examples/access-policies.cedar");

const PLATFORM: &str = "arn:aws:sts::111122223333:assumed-role/platform-admin/dana";
const ALICE: &str = "arn:aws:sts::111122223333:assumed-role/vision-researcher/alice";
const BOB: &str = "arn:aws:sts::111122223333:assumed-role/vision-researcher/bob";
const PRODUCTION: &str = "arn:aws:iam::111122223333:role/production-trainer";
const ONCALL: &str = "arn:aws:iam::111122223333:user/oncall";
/// A user named like the platform team's roles: the rule is for roles only.
const IMPOSTOR: &str = "arn:aws:iam::111122223333:user/platform-admin";

fn submit(queue: &str, share: &str, priority: u32) -> AccessRequest {
    AccessRequest {
        action: Action::SUBMIT_SERVICE_JOB,
        resource: Resource::Queue(queue.into()),
        context: Context::Submit(SubmitContext {
            share_identifier: share.into(),
            quota_share_name: String::new(),
            scheduling_priority: priority,
            instance_types: vec!["ml.p4d.24xlarge".into()],
            instance_count: 2,
        }),
    }
}

fn job(owner: &str) -> Resource {
    Resource::Job(JobResource {
        id: "job-1".into(),
        name: "train".into(),
        queue: "research".into(),
        owner: owner.into(),
        share_identifier: "vision".into(),
        quota_share_name: String::new(),
        scheduling_priority: 10,
    })
}

fn on(action: &str, resource: Resource) -> AccessRequest {
    AccessRequest::new(
        Action::named(action).unwrap_or_else(|| panic!("{action} is an action")),
        resource,
    )
}

fn update(owner: &str, priority: u32) -> AccessRequest {
    AccessRequest {
        action: Action::UPDATE_SERVICE_JOB,
        resource: job(owner),
        context: Context::Update {
            scheduling_priority: priority,
        },
    }
}

#[test]
fn every_principal_against_every_operation_under_the_example_policies() {
    let policies = Policies::parse(EXAMPLES).expect("the shipped examples are valid");
    let queue = |n: &str| Resource::Queue(n.into());
    let table: Vec<(&str, AccessRequest, bool)> = vec![
        // Reading is open to every authenticated caller, and to anonymous ones too.
        (ALICE, on("DescribeJobQueues", Resource::Service), true),
        (ALICE, on("DescribeServiceJob", job(BOB)), true),
        (ALICE, on("ListServiceJobs", queue("production")), true),
        (ONCALL, on("GetJobQueueSnapshot", queue("research")), true),
        (
            "anonymous",
            on("ListSchedulingPolicies", Resource::Service),
            true,
        ),
        (ALICE, on("GetAccessPolicies", Resource::Service), true),
        // Team vision submits to research and sweeps, under its share, up to priority 50.
        (ALICE, submit("research", "vision", 50), true),
        (BOB, submit("sweeps", "vision", 0), true),
        (ALICE, submit("research", "vision", 51), false),
        (ALICE, submit("production", "vision", 10), false),
        (ALICE, submit("research", "nlp", 10), false),
        (ALICE, submit("research", "", 10), false),
        (PRODUCTION, submit("research", "vision", 10), false),
        (PRODUCTION, submit("production", "production", 900), true),
        (PRODUCTION, submit("production", "vision", 900), false),
        (PLATFORM, submit("research", "vision", 10), false),
        ("anonymous", submit("research", "vision", 10), false),
        // Owners terminate and re-prioritise their own jobs; nobody else's.
        (ALICE, on("TerminateServiceJob", job(ALICE)), true),
        (ALICE, on("TerminateServiceJob", job(BOB)), false),
        (BOB, on("TerminateServiceJob", job(ALICE)), false),
        (ALICE, update(ALICE, 50), true),
        (ALICE, update(ALICE, 51), false),
        (ALICE, update(BOB, 10), false),
        (ALICE, on("TerminateServiceJob", job("")), false),
        // On-call terminates anything, and changes nothing else.
        (ONCALL, on("TerminateServiceJob", job(ALICE)), true),
        (ONCALL, update(ALICE, 10), false),
        (ONCALL, on("DeleteJobQueue", queue("research")), false),
        // Only the platform team's roles administer.
        (PLATFORM, on("CreateJobQueue", queue("nlp")), true),
        (PLATFORM, on("UpdateJobQueue", queue("research")), true),
        (PLATFORM, on("DeleteJobQueue", queue("sweeps")), true),
        (
            PLATFORM,
            on(
                "UpdateServiceEnvironment",
                Resource::Environment("gpus".into()),
            ),
            true,
        ),
        (
            PLATFORM,
            on(
                "CreateSchedulingPolicy",
                Resource::SchedulingPolicy("fair".into()),
            ),
            true,
        ),
        (
            PLATFORM,
            on(
                "UpdateQuotaShare",
                Resource::QuotaShare {
                    queue: "research".into(),
                    name: "vision".into(),
                },
            ),
            true,
        ),
        (PLATFORM, on("PutAccessPolicies", Resource::Service), true),
        (PLATFORM, on("TagResource", queue("research")), true),
        (PLATFORM, on("TerminateServiceJob", job(ALICE)), false),
        (ALICE, on("CreateJobQueue", queue("mine")), false),
        (ALICE, on("UpdateJobQueue", queue("research")), false),
        (
            ALICE,
            on(
                "DeleteServiceEnvironment",
                Resource::Environment("gpus".into()),
            ),
            false,
        ),
        (ALICE, on("PutAccessPolicies", Resource::Service), false),
        (ALICE, on("DeleteAccessPolicies", Resource::Service), false),
        (ALICE, on("TagResource", job(ALICE)), false),
        (IMPOSTOR, on("CreateJobQueue", queue("nlp")), false),
        (IMPOSTOR, on("PutAccessPolicies", Resource::Service), false),
        // The forbid beats the platform team's permit.
        (PLATFORM, on("DeleteJobQueue", queue("production")), false),
    ];
    let mut wrong = Vec::new();
    for (arn, request, expected) in &table {
        let principal = if *arn == "anonymous" {
            Principal::anonymous()
        } else {
            Principal::from_arn(arn)
        };
        let decision = authorize(&policies, &principal, request);
        assert!(
            decision.errors.is_empty(),
            "{arn} {request:?}: {decision:?}"
        );
        if decision.allowed != *expected {
            wrong.push(format!(
                "{arn} {} {:?}: expected {}, got {} ({})",
                request.action,
                request.resource,
                if *expected { "allow" } else { "deny" },
                if decision.allowed { "allow" } else { "deny" },
                decision.explain()
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn a_decision_names_the_policies_that_made_it() {
    let policies = Policies::parse(EXAMPLES).expect("valid");
    let platform = Principal::from_arn(PLATFORM);
    let allowed = authorize(
        &policies,
        &platform,
        &on("CreateJobQueue", Resource::Queue("nlp".into())),
    );
    assert_eq!(allowed.policies, ["platform-administers"]);
    assert_eq!(allowed.explain(), "permitted by platform-administers");
    let forbidden = authorize(
        &policies,
        &platform,
        &on("DeleteJobQueue", Resource::Queue("production".into())),
    );
    assert!(!forbidden.allowed);
    assert_eq!(forbidden.policies, ["production-queue-stays"]);
    let nothing = authorize(
        &policies,
        &Principal::from_arn(ALICE),
        &on("DeleteJobQueue", Resource::Queue("research".into())),
    );
    assert_eq!(nothing.explain(), "no policy permits it");
}

#[test]
fn every_action_fits_the_schema_with_some_resource_and_not_with_others() {
    let anyone = Principal::from_arn(ALICE);
    let resources = one_of_each_resource();
    for name in trainyard_access::ACTIONS {
        let action = Action::named(name).expect("listed");
        let context = context_of(action);
        let fits: Vec<bool> = resources
            .iter()
            .map(|resource| {
                let request = AccessRequest {
                    action,
                    resource: resource.clone(),
                    context: context.clone(),
                };
                trainyard_access::fits_schema(&anyone, &request).is_ok()
            })
            .collect();
        assert!(fits.iter().any(|f| *f), "{name} fits no resource");
        assert!(!fits.iter().all(|f| *f), "{name} fits every resource");
    }
    // A context of the wrong shape does not fit.
    let wrong = AccessRequest {
        action: Action::SUBMIT_SERVICE_JOB,
        resource: Resource::Queue("q".into()),
        context: Context::None,
    };
    assert!(trainyard_access::fits_schema(&anyone, &wrong).is_err());
}

/// `Action::changes_state` is the complement of the schema's `Read` group, apart from
/// `ListAuditRecords`, which reads but sits in no group: asked under a policy that permits the
/// group, each action is allowed exactly when it changes nothing.
#[test]
fn the_actions_that_change_nothing_are_the_read_group_and_list_audit_records() {
    let reads =
        Policies::parse("permit(principal, action in Trainyard::Action::\"Read\", resource);")
            .expect("valid");
    let anyone = Principal::from_arn(ALICE);
    let resources = one_of_each_resource();
    for name in trainyard_access::ACTIONS {
        let action = Action::named(name).expect("listed");
        let context = context_of(action);
        let in_read_group = resources.iter().any(|resource| {
            let request = AccessRequest {
                action,
                resource: resource.clone(),
                context: context.clone(),
            };
            trainyard_access::fits_schema(&anyone, &request).is_ok()
                && authorize(&reads, &anyone, &request).allowed
        });
        let reads_only = in_read_group || action == Action::LIST_AUDIT_RECORDS;
        assert_eq!(action.changes_state(), !reads_only, "{name}");
    }
}

/// One resource of every kind.
fn one_of_each_resource() -> [Resource; 6] {
    [
        Resource::Service,
        Resource::Queue("q".into()),
        job(ALICE),
        Resource::Environment("e".into()),
        Resource::SchedulingPolicy("p".into()),
        Resource::QuotaShare {
            queue: "q".into(),
            name: "s".into(),
        },
    ]
}

/// A context of the shape `action` takes.
fn context_of(action: Action) -> Context {
    match action {
        Action::SUBMIT_SERVICE_JOB => Context::Submit(SubmitContext::default()),
        Action::UPDATE_SERVICE_JOB => Context::Update {
            scheduling_priority: 1,
        },
        _ => Context::None,
    }
}

#[test]
fn a_team_tag_groups_principals_whatever_their_names() {
    let policies = Policies::parse(EXAMPLES).expect("the shipped examples are valid");
    let erin = || Principal::from_arn("arn:aws:sts::111122223333:assumed-role/ml-engineer/erin");
    let tagged = |team: &str| erin().with_tags([("team".to_owned(), team.to_owned())].into());
    let cases = [
        (tagged("nlp"), submit("research", "nlp", 10), true),
        (tagged("nlp"), submit("research", "vision", 10), false),
        (tagged("nlp"), submit("production", "nlp", 10), false),
        (tagged("vision"), submit("research", "nlp", 10), false),
        (erin(), submit("research", "nlp", 10), false),
        (
            erin().with_tags([("Team".to_owned(), "nlp".to_owned())].into()),
            submit("research", "nlp", 10),
            false,
        ),
    ];
    for (principal, request, allowed) in cases {
        let decision = authorize(&policies, &principal, &request);
        assert_eq!(
            decision.allowed, allowed,
            "{:?} {request:?}: {decision:?}",
            principal.tags
        );
        if allowed {
            assert_eq!(decision.policies, ["nlp-submits"]);
        }
    }
}
