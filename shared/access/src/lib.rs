//! Who may do what. Trainyard's authorization model in Cedar (the policy language Amazon
//! Verified Permissions runs): principals are IAM identities, actions are the Batch operations
//! (and Trainyard's own), resources are queues, jobs, service environments, scheduling policies
//! and quota shares, and the context carries what a request asks for (share, priority, instance
//! types and counts).
//!
//! A pure library: the API layer reads the caller and the resource, asks [`authorize`], and
//! refuses what it denies. Without stored policies every caller may do everything (Batch's
//! behaviour behind `execute-api:Invoke`); once a set is stored, Cedar denies whatever no policy
//! permits, and a `forbid` beats any `permit`.
//!
//! # Layout
//!
//! - [`principal`]: the caller, read from its IAM ARN.
//! - [`request`]: actions, resources and contexts.
//! - [`policies`]: parsing and validating policy text against `schema.cedarschema`.

pub mod policies;
pub mod principal;
pub mod request;

use std::collections::{HashMap, HashSet};
use std::str::FromStr;
use std::sync::LazyLock;

use cedar_policy::{
    Authorizer, Context as CedarContext, Entities, Entity, EntityId, EntityTypeName, EntityUid,
    Request, RestrictedExpression,
};

pub use policies::{MAX_POLICY_BYTES, Policies, PolicyError, PolicyErrors, SCHEMA_TEXT};
pub use principal::Principal;
pub use request::{
    ACTIONS, AccessRequest, Action, Context, GROUPS, JobResource, Resource, SubmitContext,
};

use policies::{SCHEMA, policy_name};

/// The answer to one [`AccessRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Whether the request may go ahead.
    pub allowed: bool,
    /// The policies that decided: the permits that allowed it, or the forbids that denied it
    /// (empty when it was denied because nothing permits it).
    pub policies: Vec<String>,
    /// Policies that failed to evaluate for this request (they are skipped, as Cedar does).
    pub errors: Vec<String>,
}

impl Decision {
    /// Why it was decided so, for people: "policy X", "policies X, Y", or "no policy permits
    /// it".
    pub fn explain(&self) -> String {
        match (self.allowed, self.policies.as_slice()) {
            (false, []) => "no policy permits it".to_owned(),
            (true, []) => "every caller is allowed".to_owned(),
            (allowed, names) => {
                let verb = if allowed { "permitted" } else { "forbidden" };
                format!("{verb} by {}", names.join(", "))
            }
        }
    }
}

/// Decides `request` by `principal` under `policies`, or answers from the decisions `policies`
/// made before for the same question. Never fails: a request the engine cannot even build (a
/// bug here, not the caller's) is denied, with the reason in `errors`.
pub fn authorize(policies: &Policies, principal: &Principal, request: &AccessRequest) -> Decision {
    let question = (principal.clone(), request.clone());
    if let Some(decision) = policies.decided(&question) {
        return decision;
    }
    let decision = decide(policies, principal, request);
    policies.remember(question, decision.clone());
    decision
}

/// [`authorize`] without the remembered decisions: Cedar evaluates the policies that can apply
/// (what a question asked for the first time costs; for benchmarks and tests).
pub fn decide(policies: &Policies, principal: &Principal, request: &AccessRequest) -> Decision {
    match build(principal, request) {
        Ok((cedar_request, entities, chain)) => {
            let set = policies.for_request(request.action.name(), &chain);
            let response = Authorizer::new().is_authorized(&cedar_request, &set, &entities);
            let allowed = response.decision() == cedar_policy::Decision::Allow;
            let diagnostics = response.diagnostics();
            Decision {
                allowed,
                policies: diagnostics
                    .reason()
                    .map(|id| policy_name(&policies.set, id))
                    .collect(),
                errors: diagnostics.errors().map(ToString::to_string).collect(),
            }
        }
        Err(error) => Decision {
            allowed: false,
            policies: Vec::new(),
            errors: vec![error],
        },
    }
}

/// The schema's action entities (each action with its groups as parents), by uid, read once.
static ACTION_ENTITIES: LazyLock<HashMap<EntityUid, Entity>> = LazyLock::new(|| {
    SCHEMA
        .action_entities()
        .map(|entities| entities.iter().map(|e| (e.uid(), e.clone())).collect())
        .unwrap_or_default()
});

/// The Cedar request and the entities it refers to: the principal, the resource and its
/// parents, the action and its groups; and the resource's chain (its uid and its ancestors').
/// Neither is validated against the schema here (that costs more than the evaluation): the
/// shapes are this crate's own, and a test builds a request for every action and checks it
/// against the schema.
fn build(
    principal: &Principal,
    request: &AccessRequest,
) -> Result<(Request, Entities, Vec<EntityUid>), String> {
    let mut entities = vec![principal_entity(principal)?];
    let resource = resource_entities(&request.resource, &mut entities)?;
    let chain: Vec<EntityUid> = entities[1..].iter().map(Entity::uid).collect();
    let action = uid("Action", request.action.name())?;
    entities.extend(ACTION_ENTITIES.get(&action).cloned());
    for group in request::GROUPS {
        entities.extend(ACTION_ENTITIES.get(&uid("Action", group)?).cloned());
    }
    let cedar_request = Request::new(
        uid("Principal", &principal.arn)?,
        action,
        resource,
        context(&request.context)?,
        None,
    )
    .map_err(|e| format!("the request cannot be built: {e}"))?;
    let entities = Entities::from_entities(entities, None)
        .map_err(|e| format!("the entities cannot be built: {e}"))?;
    Ok((cedar_request, entities, chain))
}

/// The request [`authorize`] builds, checked against the schema: its context and the
/// entities' attributes have the types the schema declares. For tests.
pub fn fits_schema(principal: &Principal, request: &AccessRequest) -> Result<(), String> {
    let (built, entities, _) = build(principal, request)?;
    let entities: Vec<Entity> = entities.iter().cloned().collect();
    Entities::from_entities(entities, Some(&SCHEMA))
        .map_err(|e| format!("the entities do not fit the schema: {e}"))?;
    let (Some(p), Some(a), Some(r), Some(c)) = (
        built.principal(),
        built.action(),
        built.resource(),
        built.context(),
    ) else {
        return Err("the request is partial".into());
    };
    Request::new(p.clone(), a.clone(), r.clone(), c.clone(), Some(&SCHEMA))
        .map_err(|e| format!("the request does not fit the schema: {e}"))?;
    Ok(())
}

pub(crate) fn uid(kind: &str, id: &str) -> Result<EntityUid, String> {
    let name = EntityTypeName::from_str(&format!("Trainyard::{kind}"))
        .map_err(|e| format!("entity type {kind}: {e}"))?;
    Ok(EntityUid::from_type_name_and_id(name, EntityId::new(id)))
}

fn string(value: &str) -> RestrictedExpression {
    RestrictedExpression::new_string(value.to_owned())
}

fn long(value: u64) -> RestrictedExpression {
    RestrictedExpression::new_long(i64::try_from(value).unwrap_or(i64::MAX))
}

fn entity(
    uid: EntityUid,
    attrs: &[(&str, RestrictedExpression)],
    parents: &[&EntityUid],
) -> Result<Entity, String> {
    let attrs: HashMap<String, RestrictedExpression> = attrs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect();
    let parents: HashSet<EntityUid> = parents.iter().map(|p| (*p).clone()).collect();
    Entity::new(uid, attrs, parents).map_err(|e| e.to_string())
}

fn principal_entity(p: &Principal) -> Result<Entity, String> {
    let attrs = [
        ("arn", &p.arn),
        ("account", &p.account),
        ("kind", &p.kind),
        ("name", &p.name),
    ]
    .map(|(k, v)| (k.to_owned(), string(v)));
    let tags = p.tags.iter().map(|(k, v)| (k.clone(), string(v)));
    Entity::new_with_tags(uid("Principal", &p.arn)?, attrs, [], tags).map_err(|e| e.to_string())
}

/// Adds the entity `kind::id` with `attrs`, in `parents`, to `out`; returns its uid.
fn add(
    out: &mut Vec<Entity>,
    kind: &str,
    id: &str,
    attrs: &[(&str, RestrictedExpression)],
    parents: &[&EntityUid],
) -> Result<EntityUid, String> {
    let this = uid(kind, id)?;
    out.push(entity(this.clone(), attrs, parents)?);
    Ok(this)
}

/// Adds the resource's entity and its parents to `out`; returns the resource's uid.
fn resource_entities(resource: &Resource, out: &mut Vec<Entity>) -> Result<EntityUid, String> {
    let service = uid("Service", "trainyard")?;
    out.push(Entity::new_no_attrs(service.clone(), HashSet::new()));
    let queue = |name: &str, out: &mut Vec<Entity>| {
        add(out, "Queue", name, &[("name", string(name))], &[&service])
    };
    match resource {
        Resource::Service => Ok(service.clone()),
        Resource::Queue(name) => queue(name, out),
        Resource::Job(job) => {
            let parent = queue(&job.queue, out)?;
            let attrs = [
                ("name", string(&job.name)),
                ("queue", string(&job.queue)),
                ("owner", string(&job.owner)),
                ("shareIdentifier", string(&job.share_identifier)),
                ("quotaShareName", string(&job.quota_share_name)),
                (
                    "schedulingPriority",
                    long(u64::from(job.scheduling_priority)),
                ),
            ];
            add(out, "Job", &job.id, &attrs, &[&parent])
        }
        Resource::Environment(name) => add(
            out,
            "Environment",
            name,
            &[("name", string(name))],
            &[&service],
        ),
        Resource::SchedulingPolicy(name) => add(
            out,
            "SchedulingPolicy",
            name,
            &[("name", string(name))],
            &[&service],
        ),
        Resource::QuotaShare { queue: q, name } => {
            let parent = queue(q, out)?;
            let attrs = [("name", string(name)), ("queue", string(q))];
            add(
                out,
                "QuotaShare",
                &format!("{q}/{name}"),
                &attrs,
                &[&parent],
            )
        }
    }
}

fn context(context: &Context) -> Result<CedarContext, String> {
    let pairs: Vec<(String, RestrictedExpression)> = match context {
        Context::None => Vec::new(),
        Context::Submit(submit) => vec![
            ("shareIdentifier".into(), string(&submit.share_identifier)),
            ("quotaShareName".into(), string(&submit.quota_share_name)),
            (
                "schedulingPriority".into(),
                long(u64::from(submit.scheduling_priority)),
            ),
            (
                "instanceTypes".into(),
                RestrictedExpression::new_set(submit.instance_types.iter().map(|t| string(t))),
            ),
            ("instanceCount".into(), long(submit.instance_count)),
        ],
        Context::Update {
            scheduling_priority,
        } => vec![(
            "schedulingPriority".into(),
            long(u64::from(*scheduling_priority)),
        )],
    };
    CedarContext::from_pairs(pairs).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    /// Policies of every resource scope: any, `==`, `in`, `is`, `is … in`, on the service, a
    /// queue, a job and a quota share, permits and a forbid.
    const SCOPES: &str = r#"
@id("read-research")
permit(principal, action in Trainyard::Action::"Read", resource in Trainyard::Queue::"research");
@id("tag-one-job")
permit(principal, action == Trainyard::Action::"TagResource", resource == Trainyard::Job::"job-1");
@id("tag-research-shares")
permit(principal, action == Trainyard::Action::"TagResource", resource is Trainyard::QuotaShare in Trainyard::Queue::"research");
@id("platform-environments")
permit(principal, action in Trainyard::Action::"Administer", resource is Trainyard::Environment)
when { principal.name like "platform-*" };
@id("list-everything")
permit(principal, action == Trainyard::Action::"ListServiceJobs", resource == Trainyard::Service::"trainyard");
@id("terminate-sweeps")
permit(principal, action == Trainyard::Action::"TerminateServiceJob", resource in Trainyard::Queue::"sweeps");
@id("submit-anywhere")
permit(principal, action == Trainyard::Action::"SubmitServiceJob", resource);
@id("production-for-oncall")
forbid(principal, action in [Trainyard::Action::"TerminateServiceJob", Trainyard::Action::"SubmitServiceJob"], resource in Trainyard::Queue::"production")
unless { principal.name == "oncall" };
"#;

    fn job(id: &str, queue: &str) -> Resource {
        Resource::Job(JobResource {
            id: id.into(),
            queue: queue.into(),
            ..JobResource::default()
        })
    }

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
    fn sliced_policies_and_remembered_decisions_decide_as_the_whole_set_does() {
        let policies = Policies::parse(SCOPES).expect("valid");
        let principals = [
            "arn:aws:sts::111122223333:assumed-role/platform-admin/dana",
            "arn:aws:sts::111122223333:assumed-role/vision-researcher/alice",
            "arn:aws:iam::111122223333:user/oncall",
        ]
        .map(Principal::from_arn);
        let mut resources = vec![Resource::Service];
        for queue in ["research", "production", "sweeps"] {
            resources.push(Resource::Queue(queue.into()));
            resources.push(Resource::QuotaShare {
                queue: queue.into(),
                name: "s".into(),
            });
        }
        for (id, queue) in [
            ("job-1", "research"),
            ("job-2", "production"),
            ("job-3", "sweeps"),
        ] {
            resources.push(job(id, queue));
        }
        resources.push(Resource::Environment("e".into()));
        resources.push(Resource::SchedulingPolicy("p".into()));
        let (mut allowed, mut checked) = (0, 0);
        for _ in 0..2 {
            // Twice: the second round reads the sets built by the first.
            for principal in &principals {
                for action in ACTIONS.iter().filter_map(|name| Action::named(name)) {
                    for resource in &resources {
                        let request = AccessRequest {
                            action,
                            resource: resource.clone(),
                            context: context_of(action),
                        };
                        let sliced = authorize(&policies, principal, &request);
                        let (cedar, entities, _) = build(principal, &request).unwrap();
                        let whole =
                            Authorizer::new().is_authorized(&cedar, &policies.set, &entities);
                        let mut reasons: Vec<String> = whole
                            .diagnostics()
                            .reason()
                            .map(|id| policy_name(&policies.set, id))
                            .collect();
                        reasons.sort();
                        let mut decided = sliced.policies.clone();
                        decided.sort();
                        let case = format!("{} {} {resource:?}", principal.arn, action.name());
                        assert_eq!(
                            sliced.allowed,
                            whole.decision() == cedar_policy::Decision::Allow,
                            "{case}"
                        );
                        assert_eq!(decided, reasons, "{case}");
                        allowed += usize::from(sliced.allowed);
                        checked += 1;
                    }
                }
            }
        }
        // Both answers occur, so the comparison says something.
        assert!(allowed > 0 && allowed < checked, "{allowed} of {checked}");
    }
}
