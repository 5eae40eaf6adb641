//! The event sink on an EventBridge bus: what the scheduling loop publishes, as `PutEvents`
//! entries with source [`SOURCE`].
//!
//! | event | detail-type | detail |
//! |---|---|---|
//! | `JobSubmitted` | [`JOB_SUBMITTED`] | `{"jobId", "jobQueue"}` (queue name) |
//! | `JobStatusChanged` | [`JOB_STATE_CHANGE`] | `DescribeServiceJob`'s shape without `tags` and `serviceRequestPayload`, plus `trainyard` |
//! | `JobStatusChanged` that gave capacity back | [`CAPACITY_RELEASED`] | `{"jobId", "jobQueue", "status"}` |
//! | `Audited` | [`AUDIT_RECORD`] | the audit record (`principal`, `action`, `resource`, `allowed`, `decidedBy`, `outcome`, …) |
//!
//! "Job Submitted" and "Capacity Released" are internal: rules on the bus send them to the
//! scheduler function, so a cycle runs one event hop after work or capacity appears. "Batch
//! Service Job State Change" is the public event, shaped like AWS Batch's (ARNs, epoch-ms times,
//! `resources: [jobArn]`) so rules written for Batch match it; Trainyard's own fields sit under
//! one `trainyard` key Batch does not use.
//!
//! Capacity counts as released when a job reaches SUCCEEDED or FAILED, or goes back to RUNNABLE
//! after an attempt (a retry, a capacity error or a preemption). A FAILED job that never ran
//! releases nothing, but a needless wake-up costs one short cycle, while a missed one would leave
//! capacity idle until the schedule fires.
//!
//! Publishing is best-effort (see [`EventSink`]): a failed call or failed entries are retried
//! once, then logged with `tracing::warn!`; the caller never fails, because the schedule runs
//! the loop anyway.

use aws_sdk_eventbridge::Client;
use aws_sdk_eventbridge::types::PutEventsRequestEntry;
use serde_json::{Value, json};
use trainyard_app::ports::{Event, EventSink};
use trainyard_domain::arn::ArnContext;
use trainyard_domain::job::{JobStatus, ServiceJob};

/// The `source` of every entry Trainyard publishes.
pub const SOURCE: &str = "trainyard";
/// Detail-type of a job stored as SUBMITTED.
pub const JOB_SUBMITTED: &str = "Job Submitted";
/// Detail-type of the public state-change event (AWS Batch's name).
pub const JOB_STATE_CHANGE: &str = "Batch Service Job State Change";
/// Detail-type of a status change that gave instances back.
pub const CAPACITY_RELEASED: &str = "Capacity Released";
/// Detail-type of a call that asked to change something, as the audit trail records it. No
/// rule of the stack's routes it; a team's own rules may (to a log group, a SIEM, an alarm on
/// refusals).
pub const AUDIT_RECORD: &str = "Trainyard Audit Record";

/// `detail-type` of a waiting job's start estimate moving a lot (`Event::StartEstimateMoved`):
/// no rule of the stack routes it; a team's own rules may (to notify the job's owner).
pub const START_ESTIMATE_MOVED: &str = "Trainyard Job Start Estimate Changed";

/// One entry to publish, before it becomes the SDK's type: plain data, so that the mapping from
/// events is a pure function with offline tests.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The entry's `detail-type`.
    pub detail_type: &'static str,
    /// The entry's `detail`.
    pub detail: Value,
    /// ARNs the event is about (`resources`).
    pub resources: Vec<String>,
}

/// The entries `event` is published as (one or two), with ARNs minted in `arns`.
pub fn entries(arns: &ArnContext, event: &Event) -> Vec<Entry> {
    match event {
        Event::JobSubmitted { job_id, job_queue } => vec![Entry {
            detail_type: JOB_SUBMITTED,
            detail: json!({ "jobId": job_id, "jobQueue": job_queue }),
            resources: vec![arns.job_arn(job_id)],
        }],
        Event::JobStatusChanged {
            job_id,
            job_queue,
            status,
            job,
        } => {
            let mut out = vec![Entry {
                detail_type: JOB_STATE_CHANGE,
                detail: state_change_detail(arns, job),
                resources: vec![arns.job_arn(job_id)],
            }];
            if releases_capacity(*status, job) {
                out.push(Entry {
                    detail_type: CAPACITY_RELEASED,
                    detail: json!({
                        "jobId": job_id,
                        "jobQueue": job_queue,
                        "status": status,
                    }),
                    resources: vec![arns.job_arn(job_id)],
                });
            }
            out
        }
        Event::StartEstimateMoved {
            job_id,
            job_queue,
            previous_p50_ms,
            p50_ms,
        } => vec![Entry {
            detail_type: START_ESTIMATE_MOVED,
            detail: json!({
                "jobId": job_id,
                "jobQueue": job_queue,
                "previousP50": previous_p50_ms,
                "p50": p50_ms,
            }),
            resources: vec![arns.job_arn(job_id)],
        }],
        Event::Audited(record) => vec![Entry {
            detail_type: AUDIT_RECORD,
            detail: json!(record),
            resources: if record.resource.starts_with("arn:") {
                vec![record.resource.clone()]
            } else {
                Vec::new()
            },
        }],
    }
}

/// Whether a change to `status` may have given instances back (see the module docs).
pub fn releases_capacity(status: JobStatus, job: &ServiceJob) -> bool {
    match status {
        JobStatus::Succeeded | JobStatus::Failed => true,
        JobStatus::Runnable => !job.attempts.is_empty(),
        _ => false,
    }
}

/// The detail of "Batch Service Job State Change": `DescribeServiceJob`'s output without the
/// members Batch leaves out of its events (`tags`, `serviceRequestPayload`), plus Trainyard's
/// own fields under `trainyard`.
pub fn state_change_detail(arns: &ArnContext, job: &ServiceJob) -> Value {
    let mut detail = describe_wire(arns, job);
    if let Value::Object(members) = &mut detail {
        members.remove("tags");
        members.remove("serviceRequestPayload");
        let mut ours = json!({
            "jobQueueName": job.job_queue,
            "attemptCount": job.attempts.len(),
        });
        if let Some(at) = job.runnable_at {
            ours["runnableAt"] = json!(at);
        }
        if let Some(at) = job.not_before {
            ours["notBefore"] = json!(at);
        }
        members.insert("trainyard".into(), ours);
    }
    detail
}

/// `job` as `DescribeServiceJob` renders it (`trainyard_domain::wire`, which the API uses too).
fn describe_wire(arns: &ArnContext, job: &ServiceJob) -> Value {
    match serde_json::to_value(trainyard_domain::wire::job_detail(arns, job)) {
        Ok(value) => value,
        // Serialising plain data does not fail; publish the identity rather than nothing.
        Err(error) => {
            tracing::warn!(job_id = %job.job_id, %error, "rendering the job for its event failed");
            json!({
                "jobId": job.job_id,
                "jobArn": arns.job_arn(&job.job_id),
                "jobName": job.job_name,
                "jobQueue": arns.queue_arn(&job.job_queue),
                "status": job.status,
            })
        }
    }
}

/// Publishes events to an EventBridge bus.
#[derive(Debug, Clone)]
pub struct EventBridgeSink {
    client: Client,
    bus: String,
    arns: ArnContext,
}

impl EventBridgeSink {
    /// A sink publishing on `bus` (name or ARN) with `client` (built once per cold start).
    /// `arns` is the partition, region and account the stack's job and queue ARNs are minted in:
    /// the same [`ArnContext`] the `Service` is built with.
    pub fn new(client: Client, bus: impl Into<String>, arns: ArnContext) -> Self {
        Self {
            client,
            bus: bus.into(),
            arns,
        }
    }

    /// The bus events go to.
    pub fn bus(&self) -> &str {
        &self.bus
    }

    fn request_entry(&self, entry: &Entry) -> PutEventsRequestEntry {
        PutEventsRequestEntry::builder()
            .event_bus_name(&self.bus)
            .source(SOURCE)
            .detail_type(entry.detail_type)
            .detail(entry.detail.to_string())
            .set_resources(Some(entry.resources.clone()))
            .build()
    }

    /// Sends `batch` once; returns the entries that did not get through, with why.
    async fn put(&self, batch: &[Entry]) -> Vec<(Entry, String)> {
        let request = batch.iter().map(|e| self.request_entry(e)).collect();
        match self
            .client
            .put_events()
            .set_entries(Some(request))
            .send()
            .await
        {
            Err(error) => {
                let why = aws_sdk_eventbridge::error::DisplayErrorContext(&error).to_string();
                batch.iter().map(|e| (e.clone(), why.clone())).collect()
            }
            Ok(out) if out.failed_entry_count() == 0 => Vec::new(),
            // Results come back in the order of the request; failed ones carry an error code.
            Ok(out) => batch
                .iter()
                .zip(out.entries())
                .filter(|(_, result)| result.error_code().is_some())
                .map(|(entry, result)| {
                    let why = format!(
                        "{}: {}",
                        result.error_code().unwrap_or_default(),
                        result.error_message().unwrap_or_default()
                    );
                    (entry.clone(), why)
                })
                .collect(),
        }
    }
}

impl EventSink for EventBridgeSink {
    fn publishes_audit(&self) -> bool {
        true
    }

    async fn publish(&self, event: Event) {
        let batch = entries(&self.arns, &event);
        let failed = self.put(&batch).await;
        if failed.is_empty() {
            return;
        }
        // One retry of what failed: enough for a blip; the schedule covers anything longer.
        let retry: Vec<Entry> = failed.into_iter().map(|(entry, _)| entry).collect();
        for (entry, why) in self.put(&retry).await {
            tracing::warn!(
                bus = %self.bus,
                detail_type = entry.detail_type,
                detail = %entry.detail,
                error = %why,
                "publishing an event failed twice; dropped (the schedule will catch up)"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use trainyard_app::contract::job;
    use trainyard_domain::job::Attempt;

    use super::*;

    fn arns() -> ArnContext {
        ArnContext {
            partition: "aws".into(),
            region: "eu-west-1".into(),
            account: "123456789012".into(),
        }
    }

    fn attempt(name: &str, reason: Option<&str>) -> Attempt {
        Attempt {
            stop_requested: None,
            failed_as: None,
            selected_instance_type: None,
            training_job_name: name.into(),
            training_job_arn: None,
            started_at: Some(2_000),
            stopped_at: reason.map(|_| 3_000),
            status_reason: reason.map(str::to_owned),
            service_environment: Some("env".into()),
        }
    }

    #[test]
    fn a_submission_is_one_internal_entry() {
        let event = Event::JobSubmitted {
            job_id: "j1".into(),
            job_queue: "q".into(),
        };
        let got = entries(&arns(), &event);
        assert_eq!(
            got,
            vec![Entry {
                detail_type: "Job Submitted",
                detail: json!({"jobId": "j1", "jobQueue": "q"}),
                resources: vec!["arn:aws:batch:eu-west-1:123456789012:service-job/j1".into()],
            }]
        );
    }

    #[test]
    fn a_start_estimate_that_moved_is_its_own_detail_type() {
        let got = entries(
            &arns(),
            &Event::StartEstimateMoved {
                job_id: "j1".into(),
                job_queue: "research".into(),
                previous_p50_ms: Some(1_000),
                p50_ms: None,
            },
        );
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].detail_type, START_ESTIMATE_MOVED);
        assert_eq!(
            got[0].detail,
            json!({"jobId": "j1", "jobQueue": "research", "previousP50": 1_000, "p50": null})
        );
        assert_eq!(got[0].resources, [arns().job_arn("j1")]);
    }

    #[test]
    fn an_audit_record_is_one_entry_about_its_resource() {
        let mut record = trainyard_app::contract::audit_record(
            "a1",
            5_000,
            "arn:aws:iam::123456789012:user/alice",
        );
        let got = entries(&arns(), &Event::Audited(Box::new(record.clone())));
        assert_eq!(
            got,
            vec![Entry {
                detail_type: "Trainyard Audit Record",
                detail: json!({
                    "id": "a1", "atMs": 5_000,
                    "principal": "arn:aws:iam::123456789012:user/alice",
                    "action": "SubmitServiceJob",
                    "resource": "arn:aws:batch:us-east-1:123456789012:job-queue/q",
                    "allowed": true, "decidedBy": "permitted by submit-own", "outcome": "OK",
                    "detail": "arn:aws:batch:us-east-1:123456789012:service-job/a1",
                    "expiresAtMs": record.expires_at_ms,
                }),
                resources: vec!["arn:aws:batch:us-east-1:123456789012:job-queue/q".into()],
            }]
        );
        // About the service as a whole: no resource to name.
        record.resource = "*".into();
        let got = entries(&arns(), &Event::Audited(Box::new(record)));
        assert!(got[0].resources.is_empty());
    }

    #[test]
    fn capacity_is_released_by_endings_and_by_returns_to_runnable_after_an_attempt() {
        let ran = vec![attempt(
            "ty-a-1",
            Some("Received status from SageMaker: Failed"),
        )];
        // (case, status, attempts, releases)
        let cases = [
            ("succeeded", JobStatus::Succeeded, ran.clone(), true),
            ("failed after running", JobStatus::Failed, ran.clone(), true),
            (
                "failed while waiting (a needless wake-up is harmless)",
                JobStatus::Failed,
                vec![],
                true,
            ),
            (
                "retry back to runnable",
                JobStatus::Runnable,
                ran.clone(),
                true,
            ),
            (
                "accepted into its queue",
                JobStatus::Runnable,
                vec![],
                false,
            ),
            ("dispatched", JobStatus::Scheduled, ran.clone(), false),
            ("starting", JobStatus::Starting, ran.clone(), false),
            ("running", JobStatus::Running, ran.clone(), false),
        ];
        for (case, status, attempts, releases) in cases {
            let mut j = job("j1").status(status).build();
            j.attempts = attempts;
            let got = entries(&arns(), &Event::status_changed(j));
            let types: Vec<&str> = got.iter().map(|e| e.detail_type).collect();
            let mut expected = vec![JOB_STATE_CHANGE];
            if releases {
                expected.push(CAPACITY_RELEASED);
            }
            assert_eq!(types, expected, "{case}");
            if releases {
                assert_eq!(
                    got[1].detail,
                    json!({"jobId": "j1", "jobQueue": j_queue(&got[0]), "status": status}),
                    "{case}"
                );
            }
        }
    }

    /// The queue name the state-change entry was built from.
    fn j_queue(entry: &Entry) -> String {
        entry.detail["trainyard"]["jobQueueName"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    #[test]
    fn the_state_change_detail_is_batch_shaped_without_tags_or_payload() {
        let mut j = job("4c7599ae-0a82-49aa-ba5a-4727fcce14a8")
            .status(JobStatus::Succeeded)
            .build();
        j.job_queue = "HappyPathJobQueue".into();
        j.service_request_payload = r#"{"TrainingJobName":"secret-name"}"#.into();
        std::sync::Arc::make_mut(&mut j.tags).insert("team".into(), "vision".into());
        j.created_at = 1_641_944_200_058;
        j.started_at = Some(1_641_944_300_058);
        j.stopped_at = Some(1_641_944_400_058);
        j.status_reason = Some("Received status from SageMaker: Training job completed".into());
        j.attempts = vec![Attempt {
            training_job_arn: Some(
                "arn:aws:sagemaker:eu-west-1:123456789012:training-job/ty-x-1".into(),
            ),
            ..attempt(
                "ty-x-1",
                Some("Received status from SageMaker: Training job completed"),
            )
        }];
        let got = entries(&arns(), &Event::status_changed(j.clone()));
        let entry = &got[0];
        let job_arn =
            "arn:aws:batch:eu-west-1:123456789012:service-job/4c7599ae-0a82-49aa-ba5a-4727fcce14a8";
        assert_eq!(entry.detail_type, "Batch Service Job State Change");
        assert_eq!(entry.resources, vec![job_arn.to_owned()]);
        let d = &entry.detail;
        assert_eq!(d["jobArn"], job_arn);
        assert_eq!(d["jobId"], j.job_id.as_str());
        assert_eq!(d["jobName"], j.job_name.as_str());
        assert_eq!(
            d["jobQueue"],
            "arn:aws:batch:eu-west-1:123456789012:job-queue/HappyPathJobQueue"
        );
        assert_eq!(d["serviceJobType"], "SAGEMAKER_TRAINING");
        assert_eq!(d["status"], "SUCCEEDED");
        assert_eq!(d["createdAt"], 1_641_944_200_058_i64);
        assert_eq!(d["startedAt"], 1_641_944_300_058_i64);
        assert_eq!(d["stoppedAt"], 1_641_944_400_058_i64);
        let training_arn = "arn:aws:sagemaker:eu-west-1:123456789012:training-job/ty-x-1";
        assert_eq!(
            d["attempts"][0]["serviceResourceId"],
            json!({"name": "TrainingJobArn", "value": training_arn})
        );
        assert_eq!(
            d["latestAttempt"]["serviceResourceId"]["value"],
            training_arn
        );
        assert_eq!(
            d["statusReason"],
            "Received status from SageMaker: Training job completed"
        );
        assert!(d.get("tags").is_none(), "{d}");
        assert!(d.get("serviceRequestPayload").is_none(), "{d}");
        assert!(!d.to_string().contains("secret-name"), "{d}");
        assert_eq!(d["trainyard"]["jobQueueName"], "HappyPathJobQueue");
        assert_eq!(d["trainyard"]["attemptCount"], 1);
    }

    #[test]
    fn request_entries_carry_the_bus_source_and_json_detail() {
        let config = aws_sdk_eventbridge::Config::builder()
            .behavior_version(aws_sdk_eventbridge::config::BehaviorVersion::latest())
            .region(aws_sdk_eventbridge::config::Region::new("eu-west-1"))
            .build();
        let sink = EventBridgeSink::new(Client::from_conf(config), "trainyard-bus", arns());
        let entry = Entry {
            detail_type: JOB_SUBMITTED,
            detail: json!({"jobId": "j1", "jobQueue": "q"}),
            resources: vec!["arn:x".into()],
        };
        let request = sink.request_entry(&entry);
        assert_eq!(request.event_bus_name(), Some("trainyard-bus"));
        assert_eq!(request.source(), Some("trainyard"));
        assert_eq!(request.detail_type(), Some("Job Submitted"));
        let detail: Value = serde_json::from_str(request.detail().unwrap()).unwrap();
        assert_eq!(detail, entry.detail);
        assert_eq!(request.resources(), ["arn:x".to_owned()]);
    }
}
