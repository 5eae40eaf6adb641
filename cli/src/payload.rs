//! The SageMaker `CreateTrainingJob` request that `trainyard submit` builds when no payload
//! file is given.
//!
//! It carries every member SageMaker requires (`TrainingJobName`, `RoleArn`,
//! `AlgorithmSpecification`, `OutputDataConfig`, `ResourceConfig`, `StoppingCondition`) with
//! local placeholders, so the same request would be accepted by the real service once the role,
//! image and bucket are real.

use serde_json::{Map, Value, json};

/// The role used when `--role-arn` is not given: a placeholder in local mode's account.
pub const DEFAULT_ROLE_ARN: &str = "arn:aws:iam::000000000000:role/TrainyardLocalTraining";

/// The image used when `--image` is not given. The emulator does not pull images.
pub const DEFAULT_IMAGE: &str = "trainyard-local/emulator:latest";

/// Where outputs would go.
pub const DEFAULT_OUTPUT_PATH: &str = "s3://trainyard-local/output";

/// SageMaker's default maximum runtime (one day), used when no duration is given.
pub const DEFAULT_MAX_RUNTIME_S: u64 = 86_400;

/// What a built training request is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrainingSpec {
    /// Becomes `TrainingJobName` after [`training_job_name`].
    pub name: String,
    /// `ResourceConfig.InstanceType`, such as `ml.g5.xlarge`.
    pub instance_type: String,
    /// `ResourceConfig.InstanceCount`.
    pub instance_count: u32,
    /// `RoleArn`.
    pub role_arn: String,
    /// `AlgorithmSpecification.TrainingImage`.
    pub image: String,
    /// How long the emulator should run the job, in seconds.
    pub duration_s: Option<u64>,
}

/// Builds the `CreateTrainingJob` request as a JSON string (Batch's `serviceRequestPayload`).
pub fn build(spec: &TrainingSpec) -> String {
    let mut hyper_parameters = Map::new();
    let mut max_runtime_s = DEFAULT_MAX_RUNTIME_S;
    if let Some(duration_s) = spec.duration_s {
        // SageMaker hyperparameters are strings; the emulator reads this one as its runtime.
        hyper_parameters.insert(
            "emulator_duration_s".into(),
            Value::String(duration_s.to_string()),
        );
        // Leave the job room to finish: the stopping condition is a bound, not a target.
        max_runtime_s = max_runtime_s.max(duration_s.saturating_mul(2));
    }
    json!({
        "TrainingJobName": training_job_name(&spec.name),
        "RoleArn": spec.role_arn,
        "AlgorithmSpecification": {
            "TrainingImage": spec.image,
            "TrainingInputMode": "File",
        },
        "HyperParameters": hyper_parameters,
        "OutputDataConfig": { "S3OutputPath": DEFAULT_OUTPUT_PATH },
        "ResourceConfig": {
            "InstanceType": spec.instance_type,
            "InstanceCount": spec.instance_count,
            "VolumeSizeInGB": 30,
        },
        "StoppingCondition": { "MaxRuntimeInSeconds": max_runtime_s },
    })
    .to_string()
}

/// Turns a Batch job name (letters, digits, `-`, `_`, up to 128) into a SageMaker training-job
/// name (`[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}`): other characters become `-`, ends are trimmed of
/// hyphens, and the result is cut to 63 characters.
pub fn training_job_name(job_name: &str) -> String {
    let mapped: String = job_name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let trimmed = mapped.trim_matches('-');
    let cut: String = trimmed.chars().take(63).collect();
    let cut = cut.trim_end_matches('-');
    if cut.is_empty() {
        "trainyard-job".into()
    } else {
        cut.to_owned()
    }
}

/// Reads `TrainingJobName` from a payload, to name a job submitted without `--name`.
pub fn payload_training_job_name(payload: &str) -> Option<String> {
    let value: Value = serde_json::from_str(payload).ok()?;
    value
        .get("TrainingJobName")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use trainyard_domain::payload::parse_training_request;

    use super::*;

    fn spec() -> TrainingSpec {
        TrainingSpec {
            name: "resnet_sweep_7".into(),
            instance_type: "ml.g5.xlarge".into(),
            instance_count: 2,
            role_arn: DEFAULT_ROLE_ARN.into(),
            image: DEFAULT_IMAGE.into(),
            duration_s: Some(30),
        }
    }

    #[test]
    fn a_built_payload_is_a_training_request_trainyard_accepts() {
        let payload = build(&spec());
        let request = parse_training_request(&payload).expect("valid CreateTrainingJob request");
        assert_eq!(request.training_job_name, "resnet-sweep-7");
        assert_eq!(request.instances.get("ml.g5.xlarge"), Some(&2));
        assert_eq!(request.max_runtime_s, Some(DEFAULT_MAX_RUNTIME_S));
    }

    #[test]
    fn the_duration_goes_to_the_emulator_as_a_string_hyperparameter() {
        let long = TrainingSpec {
            duration_s: Some(100_000),
            ..spec()
        };
        let value: Value = serde_json::from_str(&build(&long)).expect("json");
        assert_eq!(
            value["HyperParameters"]["emulator_duration_s"],
            json!("100000")
        );
        assert_eq!(
            value["StoppingCondition"]["MaxRuntimeInSeconds"],
            json!(200_000),
            "a long job gets room to finish"
        );
        let none = TrainingSpec {
            duration_s: None,
            ..spec()
        };
        let value: Value = serde_json::from_str(&build(&none)).expect("json");
        assert_eq!(value["HyperParameters"], json!({}));
    }

    #[test]
    fn job_names_become_valid_training_job_names() {
        let cases = [
            ("plain", "bert-base", "bert-base"),
            ("underscores", "a_b_c", "a-b-c"),
            ("leading and trailing", "_x_", "x"),
            ("nothing usable", "___", "trainyard-job"),
            ("too long", &"a".repeat(100), &"a".repeat(63)),
            (
                "cut lands on a hyphen",
                &format!("{}_b", "a".repeat(62)),
                &"a".repeat(62),
            ),
        ];
        for (name, input, expected) in cases {
            assert_eq!(training_job_name(input), expected, "{name}");
        }
    }

    #[test]
    fn the_payload_name_is_read_back_when_present() {
        assert_eq!(
            payload_training_job_name(r#"{"TrainingJobName":"x1"}"#).as_deref(),
            Some("x1")
        );
        assert_eq!(payload_training_job_name("{}"), None);
        assert_eq!(payload_training_job_name("not json"), None);
    }
}
