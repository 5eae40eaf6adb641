//! An attempt as SageMaker knows it: the deterministic training-job name of each attempt, the
//! training job's status vocabulary, and how a SageMaker state maps to a Batch job status
//! (reference §4.1).

use crate::job::{JobStatus, ServiceJob};

/// The prefix of every training job Trainyard launches, so that IAM policies can scope
/// SageMaker actions to Trainyard's own jobs (`training-job/ty-*`).
pub const ATTEMPT_NAME_PREFIX: &str = "ty-";

/// The SageMaker training-job name of attempt `n` (1-based) of `job`: [`ATTEMPT_NAME_PREFIX`],
/// a readable part from the payload's `TrainingJobName`, the job id without dashes, and the
/// attempt number. At most 63 characters of `[a-zA-Z0-9-]`, as SageMaker requires, and the same
/// every time, so that a repeated launch is recognised (`ResourceInUse`) instead of running twice.
pub fn attempt_name(job: &ServiceJob, n: usize) -> String {
    let id: String = job
        .job_id
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect();
    let suffix = format!("{id}-{n}");
    let room = 63usize.saturating_sub(ATTEMPT_NAME_PREFIX.len() + suffix.len() + 1);
    let prefix: String = job
        .training
        .training_job_name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .take(room)
        .collect();
    let prefix = prefix.trim_matches('-');
    if prefix.is_empty() {
        format!("{ATTEMPT_NAME_PREFIX}{suffix}")
    } else {
        format!("{ATTEMPT_NAME_PREFIX}{prefix}-{suffix}")
    }
}

/// The job id and attempt number an [`attempt_name`] encodes, if it is one of ours. Job ids are
/// UUIDs, so the 32 hex digits before the attempt number give the id back. SageMaker reports
/// names as created, but ARNs lower-case them, so the prefix is matched without regard to case.
pub fn parse_attempt_name(name: &str) -> Option<(String, usize)> {
    let head = name.get(..ATTEMPT_NAME_PREFIX.len())?;
    if !head.eq_ignore_ascii_case(ATTEMPT_NAME_PREFIX) {
        return None;
    }
    let (rest, n) = name[ATTEMPT_NAME_PREFIX.len()..].rsplit_once('-')?;
    let n: usize = n.parse().ok()?;
    let hex = rest.get(rest.len().checked_sub(32)?..)?;
    if !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let mut id = String::with_capacity(36);
    for (i, part) in [
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..],
    ]
    .into_iter()
    .enumerate()
    {
        if i > 0 {
            id.push('-');
        }
        id.push_str(part);
    }
    Some((id, n))
}

/// A SageMaker training job's primary status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TrainingStatus {
    /// Provisioning, downloading, training or uploading.
    InProgress,
    /// Finished successfully.
    Completed,
    /// Failed; a failure reason says why.
    Failed,
    /// Being stopped.
    Stopping,
    /// Stopped (on request, or by `MaxRuntimeInSeconds`).
    Stopped,
}

impl TrainingStatus {
    /// Parses SageMaker's spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "InProgress" => Self::InProgress,
            "Completed" => Self::Completed,
            "Failed" => Self::Failed,
            "Stopping" => Self::Stopping,
            "Stopped" => Self::Stopped,
            _ => return None,
        })
    }

    /// Completed, Failed or Stopped.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Stopped)
    }
}

/// What the backend (or a state-change event) says about one training job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrainingJobState {
    /// `TrainingJobName`.
    pub name: String,
    /// `TrainingJobArn`.
    pub arn: String,
    /// `TrainingJobStatus`.
    pub status: TrainingStatus,
    /// `SecondaryStatus` (`Starting`, `Downloading`, `Training`, `Uploading`, …).
    pub secondary: String,
    /// `FailureReason`, when failed.
    pub failure_reason: Option<String>,
    /// `ResourceConfig.SelectedInstanceType`: the type SageMaker launched, of a request with
    /// `InstancePreferences`, once it has chosen.
    pub selected_instance_type: Option<String>,
}

impl TrainingJobState {
    /// Reads the members Trainyard needs from a `DescribeTrainingJob` response or the `detail`
    /// of a "SageMaker Training Job State Change" event (they share a shape). `None` when a
    /// required member is missing or unknown.
    pub fn from_sagemaker(detail: &serde_json::Value) -> Option<Self> {
        let text = |k: &str| detail.get(k).and_then(serde_json::Value::as_str);
        Some(Self {
            name: text("TrainingJobName")?.to_owned(),
            arn: text("TrainingJobArn").unwrap_or_default().to_owned(),
            status: TrainingStatus::parse(text("TrainingJobStatus")?)?,
            secondary: text("SecondaryStatus").unwrap_or_default().to_owned(),
            failure_reason: text("FailureReason").map(str::to_owned),
            selected_instance_type: detail
                .get("ResourceConfig")
                .and_then(|rc| rc.get("SelectedInstanceType"))
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned),
        })
    }
}

/// Batch status for a SageMaker state of a live attempt (reference §4.1).
pub fn batch_status(state: &TrainingJobState) -> Option<JobStatus> {
    match state.status {
        TrainingStatus::InProgress => match state.secondary.as_str() {
            "Downloading" | "DownloadingTrainingImage" => Some(JobStatus::Starting),
            "Training" | "Uploading" => Some(JobStatus::Running),
            // Starting, Pending, LaunchingMLInstances, …: still SCHEDULED.
            _ => None,
        },
        TrainingStatus::Completed => Some(JobStatus::Succeeded),
        // Stopping is not an end: capacity is held until Stopped.
        TrainingStatus::Stopping => None,
        TrainingStatus::Failed | TrainingStatus::Stopped => Some(JobStatus::Failed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::payload::TrainingRequest;

    fn job(id: &str, name: &str) -> ServiceJob {
        let mut job: ServiceJob = serde_json::from_value(serde_json::json!({
            "jobId": id, "jobName": "j", "jobQueue": "q", "serviceJobType": "SAGEMAKER_TRAINING",
            "serviceRequestPayload": "{}", "status": "RUNNABLE", "createdAt": 0, "updatedAt": 0,
            "training": {"trainingJobName": name, "instances": {"ml.g5.xlarge": 1}}
        }))
        .unwrap();
        job.training = TrainingRequest::single(name, "ml.g5.xlarge", 1).into();
        job
    }

    #[test]
    fn attempt_names_are_valid_for_sagemaker_and_round_trip() {
        let id = "0f8fad5b-d9cb-469f-a165-70867728950e";
        let cases = [
            (
                "resnet-50",
                "ty-resnet-50-0f8fad5bd9cb469fa16570867728950e-1",
            ),
            (
                "a".repeat(63).as_str(),
                &format!("ty-{}-0f8fad5bd9cb469fa16570867728950e-1", "a".repeat(25)),
            ),
            ("--", "ty-0f8fad5bd9cb469fa16570867728950e-1"),
        ]
        .map(|(a, b)| (a.to_owned(), b.to_owned()));
        for (training_name, expected) in cases {
            let name = attempt_name(&job(id, &training_name), 1);
            assert_eq!(name, expected);
            assert!(name.len() <= 63);
            assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
            assert_eq!(parse_attempt_name(&name), Some((id.to_owned(), 1)));
        }
        let name = attempt_name(&job(id, "x"), 10);
        assert_eq!(parse_attempt_name(&name), Some((id.to_owned(), 10)));
        for foreign in [
            "resnet-50",
            "AWSBatchfoo",
            "x-zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz-1",
            "-1",
            // One of ours but for the prefix: a user's own training job is never adopted.
            "resnet-50-0f8fad5bd9cb469fa16570867728950e-1",
        ] {
            assert_eq!(parse_attempt_name(foreign), None, "{foreign}");
        }
    }

    #[test]
    fn sagemaker_states_map_to_batch_statuses() {
        let state = |status, secondary: &str| TrainingJobState {
            name: "n".into(),
            arn: "a".into(),
            status,
            secondary: secondary.into(),
            failure_reason: None,
            selected_instance_type: None,
        };
        use TrainingStatus::*;
        let cases = [
            (InProgress, "Starting", None),
            (InProgress, "Pending", None),
            (InProgress, "Downloading", Some(JobStatus::Starting)),
            (InProgress, "Training", Some(JobStatus::Running)),
            (InProgress, "Uploading", Some(JobStatus::Running)),
            (Completed, "Completed", Some(JobStatus::Succeeded)),
            (Failed, "Failed", Some(JobStatus::Failed)),
            (Stopping, "Stopping", None),
            (Stopped, "Stopped", Some(JobStatus::Failed)),
        ];
        for (status, secondary, expected) in cases {
            assert_eq!(
                batch_status(&state(status, secondary)),
                expected,
                "{status:?}/{secondary}"
            );
        }
    }
}
