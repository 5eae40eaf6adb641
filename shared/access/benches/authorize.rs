//! What one authorization costs with 100 policies: the example set plus 92 per-team submit
//! permits for the `research` queue, each request timed on its own, percentiles printed. A
//! submit to `research` is the worst case (Cedar evaluates all 92); a submit to another queue
//! shows the resource slicing (the 92 are not handed to Cedar).
//!
//! Run: `cargo bench -p trainyard-access --bench authorize`

use std::time::Instant;

use trainyard_access::{
    AccessRequest, Action, Context, JobResource, Policies, Principal, Resource, SubmitContext,
    authorize,
};

const EXAMPLES: &str = include_str!("../../../docs/examples/access-policies.cedar");
const ROUNDS: usize = 20_000;

fn main() {
    let mut text = EXAMPLES.to_owned();
    for team in 0..92 {
        text.push_str(&format!(
            "\n@id(\"team-{team}-submits\")\npermit(principal, action == Trainyard::Action::\"SubmitServiceJob\", resource == Trainyard::Queue::\"research\")\nwhen {{ principal.name like \"team{team}-*\" && context.shareIdentifier == \"team{team}\" && context.schedulingPriority <= 50 }};\n"
        ));
    }
    let policies = Policies::parse(&text).expect("valid");
    assert_eq!(policies.len(), 100);
    let last_team = Principal::from_arn("arn:aws:sts::111122223333:assumed-role/team91-trainer/x");
    let submit = AccessRequest {
        action: Action::SUBMIT_SERVICE_JOB,
        resource: Resource::Queue("research".into()),
        context: Context::Submit(SubmitContext {
            share_identifier: "team91".into(),
            quota_share_name: String::new(),
            scheduling_priority: 10,
            instance_types: vec!["ml.p4d.24xlarge".into()],
            instance_count: 2,
        }),
    };
    let elsewhere = AccessRequest {
        resource: Resource::Queue("sweeps".into()),
        ..submit.clone()
    };
    let terminate = AccessRequest::new(
        Action::TERMINATE_SERVICE_JOB,
        Resource::Job(JobResource {
            id: "j".into(),
            queue: "research".into(),
            owner: "arn:aws:iam::111122223333:user/someone-else".into(),
            ..JobResource::default()
        }),
    );
    let one = Policies::parse("permit(principal, action, resource);").expect("valid");
    println!(
        "authorize with {} policies, {ROUNDS} calls per case",
        policies.len()
    );
    for (name, policies, request, allowed) in [
        (
            "submit, allowed by the last policy",
            &policies,
            &submit,
            true,
        ),
        (
            "submit to another queue, denied",
            &policies,
            &elsewhere,
            false,
        ),
        (
            "terminate another's job, denied",
            &policies,
            &terminate,
            false,
        ),
        (
            "submit, with 1 policy (the fixed cost)",
            &one,
            &submit,
            true,
        ),
    ] {
        let mut times_us = Vec::with_capacity(ROUNDS);
        for _ in 0..ROUNDS {
            let start = Instant::now();
            let decision = authorize(policies, &last_team, request);
            times_us.push(start.elapsed().as_secs_f64() * 1e6);
            assert_eq!(decision.allowed, allowed, "{name}");
        }
        times_us.sort_by(f64::total_cmp);
        let at = |q: f64| times_us[((times_us.len() as f64 - 1.0) * q) as usize];
        println!(
            "{name}: p50 {:.1} us, p99 {:.1} us, max {:.1} us",
            at(0.5),
            at(0.99),
            at(1.0)
        );
    }
    println!("rerun: cargo bench -p trainyard-access --bench authorize");
}
