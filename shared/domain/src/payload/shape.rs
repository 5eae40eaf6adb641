//! SageMaker's `CreateTrainingJob` input shape, and the check of a payload against it.
//!
//! The shape is `create_training_job.json`, written by `scripts/sagemaker-model` from botocore's
//! copy of SageMaker's service model (the botocore version is recorded in the file, and the
//! conformance suite checks the file against the pinned botocore). A payload is checked for what
//! the model states: every member is one the shape has, of the shape's type (integers in their
//! 32- or 64-bit range), required members are present, and lengths and values are within the
//! shape's bounds. Enumerations and patterns are left to SageMaker: a value SageMaker adds (a new
//! instance type) must not be refused by an older copy of the model. JSON `null` counts as absent,
//! as in SageMaker's JSON protocol.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use serde::Deserialize;
use serde_json::{Map, Value};

/// The model file, as `scripts/sagemaker-model` writes it.
#[derive(Deserialize)]
struct Model {
    botocore: String,
    root: String,
    shapes: BTreeMap<String, Shape>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum Shape {
    Structure {
        members: BTreeMap<String, String>,
        #[serde(default)]
        required: Vec<String>,
    },
    List {
        member: String,
        #[serde(flatten)]
        bounds: Bounds,
    },
    Map {
        key: String,
        value: String,
        #[serde(flatten)]
        bounds: Bounds,
    },
    String {
        #[serde(flatten)]
        bounds: Bounds,
    },
    Integer {
        #[serde(flatten)]
        bounds: Bounds,
    },
    Long {
        #[serde(flatten)]
        bounds: Bounds,
    },
    Double {
        #[serde(flatten)]
        bounds: Bounds,
    },
    Float {
        #[serde(flatten)]
        bounds: Bounds,
    },
    Boolean,
    Timestamp,
}

/// `min` / `max`: a length for strings, lists and maps, a value for numbers.
#[derive(Deserialize, Clone, Copy)]
struct Bounds {
    min: Option<f64>,
    max: Option<f64>,
}

impl Bounds {
    fn admits(self, x: f64) -> bool {
        self.min.is_none_or(|min| x >= min) && self.max.is_none_or(|max| x <= max)
    }

    fn describe(self, what: &str) -> String {
        match (self.min, self.max) {
            (Some(min), Some(max)) => format!("{what} from {min} to {max}"),
            (Some(min), None) => format!("{what} of at least {min}"),
            (None, Some(max)) => format!("{what} of at most {max}"),
            (None, None) => what.to_owned(),
        }
    }
}

static MODEL: LazyLock<Model> = LazyLock::new(|| {
    serde_json::from_str(include_str!("create_training_job.json"))
        .expect("create_training_job.json is written by scripts/sagemaker-model")
});

/// The botocore version whose SageMaker model the payload check follows.
pub fn model_version() -> &'static str {
    &MODEL.botocore
}

/// A member that is not what the model says, with its dotted path (`ResourceConfig.InstanceCount`,
/// `InputDataConfig[0].ChannelName`) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// Dotted path of the member.
    pub path: String,
    /// What is wrong with it.
    pub problem: String,
}

/// Checks a `CreateTrainingJob` request against SageMaker's input shape; the first mismatch in
/// member order is returned.
pub fn check(request: &Value) -> Result<(), Mismatch> {
    check_value(&MODEL.root, request, &Path::Root)
}

/// Where a value sits in the request, spelled out only for a mismatch (a check that passes
/// allocates nothing).
enum Path<'a> {
    Root,
    Member(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
}

impl std::fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Path::Root => Ok(()),
            Path::Member(Path::Root, name) => f.write_str(name),
            Path::Member(parent, name) => write!(f, "{parent}.{name}"),
            Path::Index(parent, i) => write!(f, "{parent}[{i}]"),
        }
    }
}

/// Every shape the model names, by the address of the name's text in the model: a check
/// follows the model's own names (the root, members, list and map elements), so it finds each
/// shape by comparing numbers rather than names.
static NAMED: LazyLock<BTreeMap<usize, (usize, &'static Shape)>> = LazyLock::new(|| {
    let mut names: Vec<&'static String> = vec![&MODEL.root];
    for s in MODEL.shapes.values() {
        match s {
            Shape::Structure { members, .. } => names.extend(members.values()),
            Shape::List { member, .. } => names.push(member),
            Shape::Map { key, value, .. } => names.extend([key, value]),
            _ => {}
        }
    }
    names
        .into_iter()
        .filter_map(|name| Some((address(name), (name.len(), MODEL.shapes.get(name)?))))
        .collect()
});

fn address(name: &str) -> usize {
    name.as_ptr() as usize
}

fn shape(name: &str) -> &'static Shape {
    // The same address and length: the same text.
    NAMED
        .get(&address(name))
        .filter(|(len, _)| *len == name.len())
        .map(|(_, shape)| *shape)
        .or_else(|| MODEL.shapes.get(name))
        .unwrap_or_else(|| panic!("the model names shape {name} but does not define it"))
}

fn mismatch(path: &Path<'_>, problem: impl Into<String>) -> Mismatch {
    Mismatch {
        path: path.to_string(),
        problem: problem.into(),
    }
}

fn check_value(shape_name: &str, value: &Value, path: &Path<'_>) -> Result<(), Mismatch> {
    match (shape(shape_name), value) {
        (Shape::Structure { members, required }, Value::Object(map)) => {
            check_structure(shape_name, members, required, map, path)
        }
        (Shape::Structure { .. }, _) => Err(mismatch(path, "must be an object")),
        (Shape::List { member, bounds }, Value::Array(items)) => {
            check_size(*bounds, items.len(), "a length", path)?;
            items.iter().enumerate().try_for_each(|(i, item)| {
                let at = Path::Index(path, i);
                non_null(item, &at).and_then(|()| check_value(member, item, &at))
            })
        }
        (Shape::List { .. }, _) => Err(mismatch(path, "must be an array")),
        (Shape::Map { key, value, bounds }, Value::Object(map)) => {
            check_size(*bounds, map.len(), "a size", path)?;
            map.iter().try_for_each(|(k, v)| {
                let at = Path::Member(path, k);
                if let Shape::String { bounds } = shape(key) {
                    check_length(*bounds, k, &at)?;
                }
                non_null(v, &at)?;
                check_value(value, v, &at)
            })
        }
        (Shape::Map { .. }, _) => Err(mismatch(path, "must be an object")),
        (Shape::String { bounds }, Value::String(s)) => check_length(*bounds, s, path),
        (Shape::String { .. }, _) => Err(mismatch(path, "must be a string")),
        (Shape::Integer { bounds }, v) => {
            let (lowest, highest) = (i64::from(i32::MIN), i64::from(i32::MAX));
            check_integer(v, (lowest, highest), *bounds, path, "a 32-bit")
        }
        (Shape::Long { bounds }, v) => {
            check_integer(v, (i64::MIN, i64::MAX), *bounds, path, "a 64-bit")
        }
        (Shape::Double { bounds } | Shape::Float { bounds }, Value::Number(n)) => {
            match n.as_f64() {
                Some(x) if x.is_finite() && bounds.admits(x) => Ok(()),
                _ => Err(mismatch(
                    path,
                    format!("must be {}", bounds.describe("a number")),
                )),
            }
        }
        (Shape::Double { .. } | Shape::Float { .. }, _) => Err(mismatch(path, "must be a number")),
        (Shape::Boolean, Value::Bool(_)) => Ok(()),
        (Shape::Boolean, _) => Err(mismatch(path, "must be true or false")),
        (Shape::Timestamp, Value::Number(_) | Value::String(_)) => Ok(()),
        (Shape::Timestamp, _) => Err(mismatch(path, "must be a timestamp")),
    }
}

fn check_structure(
    shape_name: &str,
    members: &BTreeMap<String, String>,
    required: &[String],
    map: &Map<String, Value>,
    path: &Path<'_>,
) -> Result<(), Mismatch> {
    if let Some(missing) = required
        .iter()
        .find(|r| map.get(r.as_str()).is_none_or(Value::is_null))
    {
        return Err(mismatch(&Path::Member(path, missing), "is required"));
    }
    for (name, value) in map {
        let at = Path::Member(path, name);
        let Some(member_shape) = members.get(name) else {
            return Err(mismatch(
                &at,
                format!(
                    "is not a member of {} in SageMaker's CreateTrainingJob request (model of botocore {})",
                    shape_name.strip_suffix("Request").unwrap_or(shape_name),
                    MODEL.botocore
                ),
            ));
        };
        if !value.is_null() {
            check_value(member_shape, value, &at)?;
        }
    }
    Ok(())
}

/// `null` stands for "absent" only as a structure member; an element or map value must be a value.
fn non_null(value: &Value, path: &Path<'_>) -> Result<(), Mismatch> {
    if value.is_null() {
        Err(mismatch(path, "must not be null"))
    } else {
        Ok(())
    }
}

/// A list's length or a map's size within the shape's bounds.
fn check_size(bounds: Bounds, size: usize, what: &str, path: &Path<'_>) -> Result<(), Mismatch> {
    if bounds.admits(size as f64) {
        Ok(())
    } else {
        Err(mismatch(
            path,
            format!("must have {}, got {size}", bounds.describe(what)),
        ))
    }
}

/// A string (or a map's key) of the shape's length, counted in characters.
fn check_length(bounds: Bounds, s: &str, path: &Path<'_>) -> Result<(), Mismatch> {
    let len = s.chars().count();
    if bounds.admits(len as f64) {
        Ok(())
    } else {
        Err(mismatch(
            path,
            format!(
                "must be a string of {}, got {len}",
                bounds.describe("length")
            ),
        ))
    }
}

/// A whole number within `(lowest, highest)`, the member's integer width, and the shape's bounds.
fn check_integer(
    value: &Value,
    (lowest, highest): (i64, i64),
    bounds: Bounds,
    path: &Path<'_>,
    width: &str,
) -> Result<(), Mismatch> {
    let whole = value.as_i64().filter(|n| (lowest..=highest).contains(n));
    match whole {
        Some(n) if bounds.admits(n as f64) => Ok(()),
        _ => {
            let range = Bounds {
                min: Some(bounds.min.unwrap_or(lowest as f64).max(lowest as f64)),
                max: Some(bounds.max.unwrap_or(highest as f64).min(highest as f64)),
            };
            Err(mismatch(
                path,
                format!(
                    "must be {} ({width} integer in SageMaker's API)",
                    range.describe("an integer")
                ),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::base;
    use super::*;
    use serde_json::json;

    #[test]
    fn the_model_is_whole_and_names_its_source() {
        assert!(model_version().starts_with("1."), "{}", model_version());
        // Every shape a shape names is defined (`shape` would panic otherwise).
        for s in MODEL.shapes.values() {
            match s {
                Shape::Structure { members, .. } => members.values().for_each(|m| {
                    shape(m);
                }),
                Shape::List { member, .. } => {
                    shape(member);
                }
                Shape::Map { key, value, .. } => {
                    shape(key);
                    shape(value);
                }
                _ => {}
            }
        }
    }

    #[test]
    fn members_sagemaker_added_lately_are_accepted() {
        let mut request = base();
        request["ResourceConfig"] = json!({
            "InstancePreferences": [
                {"InstanceType": "ml.p5.48xlarge", "InstanceCount": 2},
                {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 4}
            ]
        });
        request["MlflowConfig"] = json!({"MlflowResourceArn": "arn:aws:sagemaker:us-east-1:000000000000:mlflow-tracking-server/t"});
        request["Environment"] = json!({"A": "1", "B": null});
        assert_eq!(
            check(&request).map_err(|m| format!("{m:?}")),
            Err("Mismatch { path: \"Environment.B\", problem: \"must not be null\" }".to_owned())
        );
        request["Environment"] = json!({"A": "1"});
        request["Tags"] = Value::Null;
        check(&request).unwrap();
    }

    #[test]
    fn a_mismatch_names_the_member_by_its_path() {
        let cases: Vec<(Value, &str, &str)> = vec![
            (
                json!({"Bogus": 1}),
                "Bogus",
                "is not a member of CreateTrainingJob",
            ),
            (
                json!({"ResourceConfig": {"InstanceType": "ml.c5.xlarge", "Typo": 1}}),
                "ResourceConfig.Typo",
                "is not a member of ResourceConfig",
            ),
            (
                json!({"InputDataConfig": [{"ChannelName": "train"}]}),
                "InputDataConfig[0].DataSource",
                "is required",
            ),
            (
                json!({"ResourceConfig": {"InstanceCount": 2_147_483_648_u64}}),
                "ResourceConfig.InstanceCount",
                "from 0 to 2147483647",
            ),
            (
                json!({"ResourceConfig": {"InstanceCount": "2"}}),
                "ResourceConfig.InstanceCount",
                "an integer",
            ),
            (
                json!({"StoppingCondition": {"MaxRuntimeInSeconds": 0}}),
                "StoppingCondition.MaxRuntimeInSeconds",
                "from 1 to 2147483647",
            ),
            (
                json!({"EnableManagedSpotTraining": "yes"}),
                "EnableManagedSpotTraining",
                "true or false",
            ),
            (
                json!({"HyperParameters": {"lr": 0.1}}),
                "HyperParameters.lr",
                "must be a string",
            ),
            (
                json!({"Tags": [{"Key": "k"}]}),
                "Tags[0].Value",
                "is required",
            ),
            (
                json!({"ResourceConfig": {"InstancePreferences": []}}),
                "ResourceConfig.InstancePreferences",
                "length from 1 to 5",
            ),
        ];
        for (change, path, needle) in cases {
            let mut request = base();
            for (k, v) in change.as_object().unwrap() {
                request[k] = v.clone();
            }
            let m = check(&request).expect_err(path);
            assert_eq!(m.path, path, "{m:?}");
            assert!(
                m.problem.contains(needle),
                "{path}: {:?} lacks {needle:?}",
                m.problem
            );
        }
    }

    #[test]
    fn a_missing_required_member_is_named() {
        let mut request = base();
        request.as_object_mut().unwrap().remove("RoleArn");
        assert_eq!(check(&request).unwrap_err().path, "RoleArn");
    }
}
