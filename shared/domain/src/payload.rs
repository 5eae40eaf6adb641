//! The SageMaker `CreateTrainingJob` request carried in `serviceRequestPayload`, parsed for what
//! scheduling needs.
//!
//! Batch passes the payload through to SageMaker; Trainyard must also read it, because capacity
//! is counted in the instances it asks for. The payload must be a JSON object with SageMaker's
//! required members (`TrainingJobName`, `RoleArn`, `OutputDataConfig`) and a `ResourceConfig`
//! that names instances: `InstanceType` + `InstanceCount`, or `InstanceGroups` (heterogeneous
//! clusters; instances are summed per type) or `InstancePreferences` (SageMaker launches the first
//! preferred type it has capacity for; Trainyard holds each preference's instances, so capacity is
//! never over-committed whichever SageMaker picks). `StoppingCondition.MaxRuntimeInSeconds` is kept
//! as the attempt's runtime bound, used later to estimate when capacity frees.
//!
//! Every member is also checked against SageMaker's own `CreateTrainingJob` input shape
//! ([`shape`]), so a payload SageMaker would refuse is refused at submit, by member, and one it
//! would take is carried to `CreateTrainingJob` unchanged.

pub mod shape;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::limits::{MAX_INSTANCE_GROUPS, TRAINING_JOB_NAME_LEN};

/// What scheduling needs from a training request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrainingRequest {
    /// `TrainingJobName` from the payload (attempt names derive from it).
    pub training_job_name: String,
    /// Instances needed, per instance type (`ml.p4d.24xlarge` → 2).
    pub instances: BTreeMap<String, u32>,
    /// `StoppingCondition.MaxRuntimeInSeconds`, if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_runtime_s: Option<u64>,
    /// `CheckpointConfig.S3Uri`, if the payload has one: where the job's checkpoints land (the
    /// scheduler lists it to learn what a preemption would lose, and every attempt resumes
    /// from it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_s3_uri: Option<String>,
    /// `ResourceConfig.InstancePreferences` as (type, count), in SageMaker's order of preference;
    /// empty when the request names its instances directly.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preferences: Vec<(String, u32)>,
}

impl TrainingRequest {
    /// A request for `count` instances of one type (handy in tests and the simulator).
    pub fn single(name: &str, instance_type: &str, count: u32) -> Self {
        Self {
            training_job_name: name.to_owned(),
            instances: BTreeMap::from([(instance_type.to_owned(), count)]),
            max_runtime_s: None,
            checkpoint_s3_uri: None,
            preferences: Vec::new(),
        }
    }

    /// All instances the job needs, across types.
    pub fn total_instances(&self) -> u64 {
        self.instances.values().map(|n| u64::from(*n)).sum()
    }
}

/// Why a payload is not an acceptable training request. Messages name the SageMaker member.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    /// Not JSON at all.
    #[error("serviceRequestPayload is not valid JSON: {0}")]
    NotJson(String),
    /// JSON, but not an object.
    #[error("serviceRequestPayload must be a JSON object (a SageMaker CreateTrainingJob request)")]
    NotObject,
    /// A required member is absent.
    #[error("serviceRequestPayload is missing {0}, which CreateTrainingJob requires")]
    Missing(&'static str),
    /// A member has the wrong type or value.
    #[error("serviceRequestPayload.{field} {problem}")]
    Invalid {
        /// Dotted path of the member.
        field: String,
        /// What is wrong with it.
        problem: String,
    },
}

fn invalid(field: impl Into<String>, problem: impl Into<String>) -> PayloadError {
    PayloadError::Invalid {
        field: field.into(),
        problem: problem.into(),
    }
}

/// The `RoleArn` of a `serviceRequestPayload`, if it has one (see [`parse_training_request`] for
/// the checks).
pub fn role_arn(payload: &str) -> Option<String> {
    let value: Value = serde_json::from_str(payload).ok()?;
    value.get("RoleArn")?.as_str().map(str::to_owned)
}

/// The largest `StoppingCondition.MaxRuntimeInSeconds` (and `InstanceCount`): both members are
/// 32-bit integers in SageMaker's API model, so no SDK can send more; anything larger is refused
/// at submit rather than carried into arithmetic.
pub const MAX_RUNTIME_S: u64 = i32::MAX as u64;

/// Parses and checks a `serviceRequestPayload`.
pub fn parse_training_request(payload: &str) -> Result<TrainingRequest, PayloadError> {
    let value: Value =
        serde_json::from_str(payload).map_err(|e| PayloadError::NotJson(e.to_string()))?;
    training_request_of(&value)
}

/// Checks a `CreateTrainingJob` request already parsed from JSON (see
/// [`parse_training_request`]).
pub fn training_request_of(value: &Value) -> Result<TrainingRequest, PayloadError> {
    let Value::Object(root) = value else {
        return Err(PayloadError::NotObject);
    };

    let name = match root.get("TrainingJobName") {
        None => return Err(PayloadError::Missing("TrainingJobName")),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(invalid("TrainingJobName", "must be a string")),
    };
    check_training_job_name(&name)?;
    match root.get("RoleArn") {
        None => return Err(PayloadError::Missing("RoleArn")),
        Some(Value::String(s)) if !s.is_empty() => {}
        Some(_) => return Err(invalid("RoleArn", "must be a non-empty string")),
    }
    match root.get("OutputDataConfig") {
        None => return Err(PayloadError::Missing("OutputDataConfig")),
        Some(Value::Object(o)) => match o.get("S3OutputPath") {
            Some(Value::String(s)) if !s.is_empty() => {}
            _ => {
                return Err(invalid(
                    "OutputDataConfig.S3OutputPath",
                    "must be a non-empty string",
                ));
            }
        },
        Some(_) => return Err(invalid("OutputDataConfig", "must be an object")),
    }

    let (instances, preferences) = match root.get("ResourceConfig") {
        None => return Err(PayloadError::Missing("ResourceConfig")),
        Some(Value::Object(rc)) => parse_instances(rc)?,
        Some(_) => return Err(invalid("ResourceConfig", "must be an object")),
    };

    let max_runtime_s = match root.get("StoppingCondition") {
        None => None,
        Some(Value::Object(sc)) => match sc.get("MaxRuntimeInSeconds") {
            None => None,
            Some(v) => match v.as_u64() {
                Some(s) if (1..=MAX_RUNTIME_S).contains(&s) => Some(s),
                _ => {
                    return Err(invalid(
                        "StoppingCondition.MaxRuntimeInSeconds",
                        "must be an integer of at least 1 and at most 2147483647 (a 32-bit integer in SageMaker's API)",
                    ));
                }
            },
        },
        Some(_) => return Err(invalid("StoppingCondition", "must be an object")),
    };
    shape::check(value).map_err(|m| invalid(m.path, m.problem))?;

    Ok(TrainingRequest {
        training_job_name: name,
        instances,
        max_runtime_s,
        checkpoint_s3_uri: root
            .get("CheckpointConfig")
            .and_then(|c| c.get("S3Uri"))
            .and_then(Value::as_str)
            .map(str::to_owned),
        preferences,
    })
}

/// SageMaker's rule: 1–63 characters, `[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}`.
fn check_training_job_name(name: &str) -> Result<(), PayloadError> {
    let field = "TrainingJobName";
    if !TRAINING_JOB_NAME_LEN.contains(&name.len()) {
        return Err(invalid(
            field,
            format!("must be 1–63 characters, got {}", name.len()),
        ));
    }
    let ok_chars = name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    let ends_ok = !name.starts_with('-') && !name.ends_with('-');
    if !ok_chars || !ends_ok {
        return Err(invalid(
            field,
            "must match [a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}: letters, digits and inner hyphens",
        ));
    }
    Ok(())
}

/// Instances per type that a job holds, and its instance preferences (empty unless it has them).
type Instances = (BTreeMap<String, u32>, Vec<(String, u32)>);

fn parse_instances(rc: &serde_json::Map<String, Value>) -> Result<Instances, PayloadError> {
    let present = |key: &str| rc.get(key).is_some_and(|v| !v.is_null());
    if present("InstancePreferences") {
        return parse_preferences(rc);
    }
    let mut instances = BTreeMap::new();
    match rc.get("InstanceGroups") {
        Some(Value::Array(groups)) if !groups.is_empty() => {
            if groups.len() > MAX_INSTANCE_GROUPS {
                return Err(invalid(
                    "ResourceConfig.InstanceGroups",
                    format!(
                        "may have at most {MAX_INSTANCE_GROUPS} groups, got {}",
                        groups.len()
                    ),
                ));
            }
            for (i, group) in groups.iter().enumerate() {
                let field = format!("ResourceConfig.InstanceGroups[{i}]");
                let Value::Object(g) = group else {
                    return Err(invalid(field, "must be an object"));
                };
                let (ty, count) = instance(&field, g.get("InstanceType"), g.get("InstanceCount"))?;
                let slot: &mut u32 = instances.entry(ty).or_insert(0);
                *slot = slot.saturating_add(count);
            }
        }
        Some(Value::Array(_)) | None => {
            let (ty, count) = instance(
                "ResourceConfig",
                rc.get("InstanceType"),
                rc.get("InstanceCount"),
            )?;
            instances.insert(ty, count);
        }
        Some(_) => return Err(invalid("ResourceConfig.InstanceGroups", "must be an array")),
    }
    Ok((instances, Vec::new()))
}

/// `InstancePreferences`: each preference's count defaults to `ResourceConfig.InstanceCount`.
/// The job holds, per type, the most any preference of that type asks for.
fn parse_preferences(rc: &serde_json::Map<String, Value>) -> Result<Instances, PayloadError> {
    let field = "ResourceConfig.InstancePreferences";
    for exclusive in ["InstanceType", "InstanceGroups", "InstancePlacementConfig"] {
        if rc.get(exclusive).is_some_and(|v| !v.is_null()) {
            return Err(invalid(
                field,
                format!(
                    "cannot be combined with ResourceConfig.{exclusive} (SageMaker picks the instance type)"
                ),
            ));
        }
    }
    let Some(Value::Array(list)) = rc.get("InstancePreferences") else {
        return Err(invalid(field, "must be an array"));
    };
    if list.is_empty() {
        return Err(invalid(field, "must list at least one instance type"));
    }
    let mut instances = BTreeMap::new();
    let mut preferences = Vec::with_capacity(list.len());
    for (i, preference) in list.iter().enumerate() {
        let at = format!("{field}[{i}]");
        let Value::Object(p) = preference else {
            return Err(invalid(at, "must be an object"));
        };
        let count = p
            .get("InstanceCount")
            .filter(|v| !v.is_null())
            .or_else(|| rc.get("InstanceCount"));
        let (ty, count) = instance(&at, p.get("InstanceType"), count)?;
        let held: &mut u32 = instances.entry(ty.clone()).or_insert(0);
        *held = (*held).max(count);
        preferences.push((ty, count));
    }
    Ok((instances, preferences))
}

/// One (`InstanceType`, `InstanceCount`) pair, checked.
fn instance(
    field: &str,
    ty: Option<&Value>,
    count: Option<&Value>,
) -> Result<(String, u32), PayloadError> {
    let ty = match ty {
        Some(Value::String(t)) if t.starts_with("ml.") && t.len() > 3 => t.clone(),
        Some(_) => {
            return Err(invalid(
                format!("{field}.InstanceType"),
                "must look like ml.<family>.<size>",
            ));
        }
        None => return Err(invalid(format!("{field}.InstanceType"), "is required")),
    };
    let count = match count.map(Value::as_u64) {
        Some(Some(n)) if (1..=MAX_RUNTIME_S).contains(&n) => u32::try_from(n).unwrap_or(u32::MAX),
        Some(_) => {
            return Err(invalid(
                format!("{field}.InstanceCount"),
                "must be an integer of at least 1 and at most 2147483647 (a 32-bit integer in SageMaker's API)",
            ));
        }
        None => return Err(invalid(format!("{field}.InstanceCount"), "is required")),
    };
    Ok((ty, count))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A valid request (the shape module's tests start from it too).
    pub(super) fn base() -> Value {
        json!({
            "TrainingJobName": "resnet-50",
            "RoleArn": "arn:aws:iam::000000000000:role/SageMakerRole",
            "AlgorithmSpecification": {"TrainingImage": "img", "TrainingInputMode": "File"},
            "OutputDataConfig": {"S3OutputPath": "s3://bucket/out"},
            "ResourceConfig": {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 2, "VolumeSizeInGB": 50},
            "StoppingCondition": {"MaxRuntimeInSeconds": 3600}
        })
    }

    fn with(mut v: Value, path: &[&str], new: Option<Value>) -> String {
        let (last, parents) = path.split_last().unwrap();
        let mut cur = &mut v;
        for p in parents {
            cur = cur.get_mut(*p).unwrap();
        }
        let obj = cur.as_object_mut().unwrap();
        match new {
            Some(n) => obj.insert((*last).to_owned(), n),
            None => obj.remove(*last),
        };
        v.to_string()
    }

    #[test]
    fn a_single_instance_type_request_is_parsed() {
        let req = parse_training_request(&base().to_string()).unwrap();
        assert_eq!(req.training_job_name, "resnet-50");
        assert_eq!(
            req.instances,
            BTreeMap::from([("ml.p4d.24xlarge".to_owned(), 2)])
        );
        assert_eq!(req.max_runtime_s, Some(3600));
        assert_eq!(req.total_instances(), 2);
        assert_eq!(req.checkpoint_s3_uri, None);
    }

    #[test]
    fn instance_groups_are_summed_per_type() {
        let groups = json!([
            {"InstanceGroupName": "a", "InstanceType": "ml.p5.48xlarge", "InstanceCount": 2},
            {"InstanceGroupName": "b", "InstanceType": "ml.c5.xlarge", "InstanceCount": 1},
            {"InstanceGroupName": "c", "InstanceType": "ml.p5.48xlarge", "InstanceCount": 3}
        ]);
        let payload = with(
            base(),
            &["ResourceConfig"],
            Some(json!({"InstanceGroups": groups})),
        );
        let req = parse_training_request(&payload).unwrap();
        assert_eq!(
            req.instances,
            BTreeMap::from([
                ("ml.c5.xlarge".to_owned(), 1),
                ("ml.p5.48xlarge".to_owned(), 5)
            ])
        );
    }

    #[test]
    fn instance_preferences_hold_each_preferred_type_and_keep_their_order() {
        let preferences = json!({
            "InstanceCount": 2,
            "InstancePreferences": [
                {"InstanceType": "ml.p5.48xlarge"},
                {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 4},
                {"InstanceType": "ml.p5.48xlarge", "InstanceCount": 1}
            ]
        });
        let payload = with(base(), &["ResourceConfig"], Some(preferences));
        let req = parse_training_request(&payload).unwrap();
        assert_eq!(
            req.instances,
            BTreeMap::from([
                ("ml.p4d.24xlarge".to_owned(), 4),
                ("ml.p5.48xlarge".to_owned(), 2)
            ])
        );
        assert_eq!(
            req.preferences,
            vec![
                ("ml.p5.48xlarge".to_owned(), 2),
                ("ml.p4d.24xlarge".to_owned(), 4),
                ("ml.p5.48xlarge".to_owned(), 1)
            ]
        );

        let both = json!({"InstanceType": "ml.c5.xlarge", "InstanceCount": 1,
                          "InstancePreferences": [{"InstanceType": "ml.p5.48xlarge"}]});
        let err = parse_training_request(&with(base(), &["ResourceConfig"], Some(both)))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("cannot be combined with ResourceConfig.InstanceType"),
            "{err}"
        );

        let no_count = json!({"InstancePreferences": [{"InstanceType": "ml.p5.48xlarge"}]});
        let err = parse_training_request(&with(base(), &["ResourceConfig"], Some(no_count)))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("InstancePreferences[0].InstanceCount is required"),
            "{err}"
        );
    }

    #[test]
    fn members_are_checked_against_sagemakers_model() {
        let payload = with(
            base(),
            &["ModelAccessConfig"],
            Some(json!({"AcceptEula": true})),
        );
        let err = parse_training_request(&payload).unwrap_err().to_string();
        assert!(
            err.starts_with(
                "serviceRequestPayload.ModelAccessConfig is not a member of CreateTrainingJob"
            ),
            "{err}"
        );
        let payload = with(
            base(),
            &["ServerlessJobConfig"],
            Some(
                json!({"BaseModelArn": "arn:aws:sagemaker:us-east-1:aws:hub-content/x", "JobType": "FineTuning"}),
            ),
        );
        parse_training_request(&payload).unwrap();
    }

    #[test]
    fn checkpoint_config_is_noticed() {
        let payload = with(
            base(),
            &["CheckpointConfig"],
            Some(json!({"S3Uri": "s3://b/ckpt"})),
        );
        assert_eq!(
            parse_training_request(&payload).unwrap().checkpoint_s3_uri,
            Some("s3://b/ckpt".to_owned())
        );
    }

    #[test]
    fn bad_payloads_name_the_problem() {
        let cases: Vec<(&str, String, &str)> = vec![
            ("not json", "{".into(), "not valid JSON"),
            ("an array", "[]".into(), "must be a JSON object"),
            (
                "no name",
                with(base(), &["TrainingJobName"], None),
                "missing TrainingJobName",
            ),
            (
                "bad name",
                with(base(), &["TrainingJobName"], Some(json!("a_b"))),
                "TrainingJobName must match",
            ),
            (
                "long name",
                with(base(), &["TrainingJobName"], Some(json!("a".repeat(64)))),
                "1–63",
            ),
            (
                "no role",
                with(base(), &["RoleArn"], None),
                "missing RoleArn",
            ),
            (
                "no output",
                with(base(), &["OutputDataConfig"], None),
                "missing OutputDataConfig",
            ),
            (
                "no s3 path",
                with(base(), &["OutputDataConfig"], Some(json!({}))),
                "S3OutputPath",
            ),
            (
                "no resources",
                with(base(), &["ResourceConfig"], None),
                "missing ResourceConfig",
            ),
            (
                "zero instances",
                with(base(), &["ResourceConfig", "InstanceCount"], Some(json!(0))),
                "InstanceCount must be an integer of at least 1",
            ),
            (
                "no type",
                with(base(), &["ResourceConfig", "InstanceType"], None),
                "InstanceType is required",
            ),
            (
                "odd type",
                with(
                    base(),
                    &["ResourceConfig", "InstanceType"],
                    Some(json!("p4d")),
                ),
                "ml.<family>",
            ),
            (
                "zero runtime",
                with(
                    base(),
                    &["StoppingCondition", "MaxRuntimeInSeconds"],
                    Some(json!(0)),
                ),
                "MaxRuntimeInSeconds",
            ),
            (
                "runtime past 32 bits (2^63 once wrapped negative)",
                with(
                    base(),
                    &["StoppingCondition", "MaxRuntimeInSeconds"],
                    Some(json!(9_223_372_036_854_775_808_u64)),
                ),
                "at most 2147483647",
            ),
            (
                "runtime one past the largest",
                with(
                    base(),
                    &["StoppingCondition", "MaxRuntimeInSeconds"],
                    Some(json!(MAX_RUNTIME_S + 1)),
                ),
                "MaxRuntimeInSeconds",
            ),
        ];
        for (case, payload, needle) in cases {
            let err = parse_training_request(&payload).unwrap_err().to_string();
            assert!(
                err.contains(needle),
                "{case}: {err:?} should contain {needle:?}"
            );
        }
    }

    #[test]
    fn the_largest_runtime_sagemaker_takes_is_accepted() {
        let payload = with(
            base(),
            &["StoppingCondition", "MaxRuntimeInSeconds"],
            Some(json!(MAX_RUNTIME_S)),
        );
        let parsed = parse_training_request(&payload).unwrap();
        assert_eq!(parsed.max_runtime_s, Some(2_147_483_647));
    }

    #[test]
    fn too_many_instance_groups_are_refused() {
        let group =
            json!({"InstanceGroupName": "g", "InstanceType": "ml.c5.xlarge", "InstanceCount": 1});
        let groups = Value::Array(vec![group; 6]);
        let payload = with(
            base(),
            &["ResourceConfig"],
            Some(json!({"InstanceGroups": groups})),
        );
        let err = parse_training_request(&payload).unwrap_err().to_string();
        assert!(err.contains("at most 5"), "{err}");
    }
}
