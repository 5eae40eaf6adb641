//! What one authorization costs with 100 policies: the example set (9) plus 91 per-team
//! submit permits for the `research` queue, each request timed on its own, percentiles printed. A
//! submit to `research` is the worst case (Cedar evaluates all 91); a submit to another queue
//! shows the resource slicing (the 91 are not handed to Cedar). Every case but the last is
//! decided afresh each time (`decide`, what a question costs the first time it is asked); the
//! last asks `authorize` the same question again, answered from the remembered decisions.
//!
//! Run: `cargo bench -p trainyard-access --bench authorize`

use std::time::Instant;

use trainyard_access::{
    AccessRequest, Action, Context, JobResource, Policies, Principal, Resource, SubmitContext,
    authorize, decide,
};

const EXAMPLES: &str = include_str!("../../../docs/examples/access-policies.cedar");
const ROUNDS: usize = 20_000;

fn main() {
    let mut text = EXAMPLES.to_owned();
    for team in 0..91 {
        text.push_str(&format!(
            "\n@id(\"team-{team}-submits\")\npermit(principal, action == Trainyard::Action::\"SubmitServiceJob\", resource == Trainyard::Queue::\"research\")\nwhen {{ principal.name like \"team{team}-*\" && context.shareIdentifier == \"team{team}\" && context.schedulingPriority <= 50 }};\n"
        ));
    }
    let policies = Policies::parse(&text).expect("valid");
    assert_eq!(policies.len(), 100);
    let last_team = Principal::from_arn("arn:aws:sts::111122223333:assumed-role/team90-trainer/x");
    let submit = AccessRequest {
        action: Action::SUBMIT_SERVICE_JOB,
        resource: Resource::Queue("research".into()),
        context: Context::Submit(SubmitContext {
            share_identifier: "team90".into(),
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
    type Decider = fn(&Policies, &Principal, &AccessRequest) -> trainyard_access::Decision;
    let cases: [(&str, &Policies, &AccessRequest, bool, Decider); 5] = [
        (
            "submit, allowed by the last policy",
            &policies,
            &submit,
            true,
            decide,
        ),
        (
            "submit to another queue, denied",
            &policies,
            &elsewhere,
            false,
            decide,
        ),
        (
            "terminate another's job, denied",
            &policies,
            &terminate,
            false,
            decide,
        ),
        (
            "submit, with 1 policy (the fixed cost)",
            &one,
            &submit,
            true,
            decide,
        ),
        (
            "submit allowed by the last policy, asked again (remembered)",
            &policies,
            &submit,
            true,
            authorize,
        ),
    ];
    for (name, policies, request, allowed, decider) in cases {
        let mut times_us = Vec::with_capacity(ROUNDS);
        for _ in 0..ROUNDS {
            let start = Instant::now();
            let decision = decider(policies, &last_team, request);
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
