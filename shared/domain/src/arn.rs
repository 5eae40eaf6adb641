//! ARNs of Trainyard's resources, in AWS Batch's formats, and resolving the "name or ARN"
//! that Batch accepts wherever a resource is referenced.
//!
//! | kind | ARN |
//! | --- | --- |
//! | service job | `arn:{partition}:batch:{region}:{account}:service-job/{jobId}` |
//! | job queue | `…:job-queue/{name}` |
//! | service environment | `…:service-environment/{name}` |
//! | scheduling policy | `…:scheduling-policy/{name}` |
//! | quota share | `…:job-queue/{queue}/quota-share/{name}` |
//! | training job (SageMaker) | `arn:{partition}:sagemaker:{region}:{account}:training-job/{name}` |

use serde::{Deserialize, Serialize};

/// The partition, region and account Trainyard mints ARNs in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArnContext {
    /// `aws`, `aws-cn`, `aws-us-gov`.
    pub partition: String,
    /// For example `us-east-1`.
    pub region: String,
    /// Twelve digits; SageMaker SDK regexes expect exactly twelve.
    pub account: String,
}

impl Default for ArnContext {
    /// Local mode's identity: a placeholder account in `us-east-1`.
    fn default() -> Self {
        Self {
            partition: "aws".into(),
            region: "us-east-1".into(),
            account: "000000000000".into(),
        }
    }
}

/// The kinds of Batch resource that have ARNs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ResourceKind {
    /// A service job (`service-job/…`).
    ServiceJob,
    /// A job queue (`job-queue/…`).
    JobQueue,
    /// A service environment (`service-environment/…`).
    ServiceEnvironment,
    /// A scheduling policy (`scheduling-policy/…`).
    SchedulingPolicy,
    /// A quota share (`job-queue/{queue}/quota-share/…`).
    QuotaShare,
}

impl ResourceKind {
    /// The word used in messages ("job queue", …).
    pub fn noun(self) -> &'static str {
        match self {
            Self::ServiceJob => "service job",
            Self::JobQueue => "job queue",
            Self::ServiceEnvironment => "service environment",
            Self::SchedulingPolicy => "scheduling policy",
            Self::QuotaShare => "quota share",
        }
    }

    fn resource_type(self) -> &'static str {
        match self {
            Self::ServiceJob => "service-job",
            Self::JobQueue | Self::QuotaShare => "job-queue",
            Self::ServiceEnvironment => "service-environment",
            Self::SchedulingPolicy => "scheduling-policy",
        }
    }
}

/// A reference that is neither a name nor an ARN of the expected kind in this account.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value:?} is not a {} name or ARN{detail}", kind.noun())]
pub struct ArnError {
    /// What was expected.
    pub kind: ResourceKind,
    /// What was given.
    pub value: String,
    /// Extra explanation, starting with ": " when present.
    pub detail: String,
}

/// A quota share's identity: the queue it belongs to and its own name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct QuotaShareId {
    /// Name of the job queue.
    pub queue: String,
    /// Name of the quota share, unique within the queue.
    pub name: String,
}

impl ArnContext {
    fn prefix(&self, service: &str) -> String {
        format!(
            "arn:{}:{service}:{}:{}:",
            self.partition, self.region, self.account
        )
    }

    /// `…:service-job/{id}`.
    pub fn job_arn(&self, job_id: &str) -> String {
        format!("{}service-job/{job_id}", self.prefix("batch"))
    }
    /// `…:job-queue/{name}`.
    pub fn queue_arn(&self, name: &str) -> String {
        format!("{}job-queue/{name}", self.prefix("batch"))
    }
    /// `…:service-environment/{name}`.
    pub fn environment_arn(&self, name: &str) -> String {
        format!("{}service-environment/{name}", self.prefix("batch"))
    }
    /// `…:scheduling-policy/{name}`.
    pub fn policy_arn(&self, name: &str) -> String {
        format!("{}scheduling-policy/{name}", self.prefix("batch"))
    }
    /// `…:job-queue/{queue}/quota-share/{name}`.
    pub fn quota_share_arn(&self, id: &QuotaShareId) -> String {
        format!(
            "{}job-queue/{}/quota-share/{}",
            self.prefix("batch"),
            id.queue,
            id.name
        )
    }
    /// `arn:…:sagemaker:…:training-job/{name}`, with the name lower-cased as SageMaker writes
    /// training-job ARNs.
    pub fn training_job_arn(&self, training_job_name: &str) -> String {
        format!(
            "{}training-job/{}",
            self.prefix("sagemaker"),
            training_job_name.to_lowercase()
        )
    }

    /// The ARN of a resource of `kind` named `name` (for quota shares use
    /// [`Self::quota_share_arn`]; here `name` would be ambiguous).
    pub fn arn(&self, kind: ResourceKind, name: &str) -> String {
        match kind {
            ResourceKind::ServiceJob => self.job_arn(name),
            ResourceKind::JobQueue => self.queue_arn(name),
            ResourceKind::ServiceEnvironment => self.environment_arn(name),
            ResourceKind::SchedulingPolicy => self.policy_arn(name),
            ResourceKind::QuotaShare => format!("{}job-queue/{name}", self.prefix("batch")),
        }
    }

    /// Resolves a name or an ARN of `kind` (not a quota share) to the bare name or id.
    ///
    /// A plain value is taken as a name; an `arn:` value must be a Batch ARN of this partition,
    /// region and account, of the expected resource type.
    pub fn resolve(&self, kind: ResourceKind, value: &str) -> Result<String, ArnError> {
        let err = |detail: String| ArnError {
            kind,
            value: value.to_owned(),
            detail,
        };
        if !value.starts_with("arn:") {
            if value.is_empty() {
                return Err(err(": it is empty".into()));
            }
            return Ok(value.to_owned());
        }
        let rest = self.strip_prefix(kind, value)?;
        let Some(name) = rest.strip_prefix(&format!("{}/", kind.resource_type())) else {
            return Err(err(format!(
                ": expected a `{}/…` resource",
                kind.resource_type()
            )));
        };
        if name.is_empty() || (kind != ResourceKind::QuotaShare && name.contains('/')) {
            return Err(err(": the resource part is malformed".into()));
        }
        Ok(name.to_owned())
    }

    /// Resolves a quota share ARN (`…:job-queue/{queue}/quota-share/{name}`).
    pub fn resolve_quota_share(&self, value: &str) -> Result<QuotaShareId, ArnError> {
        let kind = ResourceKind::QuotaShare;
        let err = |detail: &str| ArnError {
            kind,
            value: value.to_owned(),
            detail: detail.into(),
        };
        let rest = self.strip_prefix(kind, value)?;
        let parts: Vec<&str> = rest.split('/').collect();
        match parts.as_slice() {
            ["job-queue", queue, "quota-share", name] if !queue.is_empty() && !name.is_empty() => {
                Ok(QuotaShareId {
                    queue: (*queue).to_owned(),
                    name: (*name).to_owned(),
                })
            }
            _ => Err(err(
                ": expected `arn:…:job-queue/{queue}/quota-share/{name}`",
            )),
        }
    }

    fn strip_prefix<'a>(&self, kind: ResourceKind, value: &'a str) -> Result<&'a str, ArnError> {
        let err = |detail: String| ArnError {
            kind,
            value: value.to_owned(),
            detail,
        };
        let fields: Vec<&str> = value.splitn(6, ':').collect();
        let [_, partition, service, region, account, rest] = fields.as_slice() else {
            return Err(err(": an ARN has six `:`-separated parts".into()));
        };
        if *service != "batch" {
            return Err(err(format!(": service is {service:?}, expected \"batch\"")));
        }
        if *partition != self.partition || *region != self.region || *account != self.account {
            return Err(err(format!(
                ": it belongs to {partition}/{region}/{account}, this Trainyard serves {}/{}/{}",
                self.partition, self.region, self.account
            )));
        }
        Ok(rest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arns_round_trip_through_resolve() {
        let ctx = ArnContext::default();
        for kind in [
            ResourceKind::ServiceJob,
            ResourceKind::JobQueue,
            ResourceKind::ServiceEnvironment,
            ResourceKind::SchedulingPolicy,
        ] {
            let arn = ctx.arn(kind, "thing-1");
            assert_eq!(ctx.resolve(kind, &arn).unwrap(), "thing-1", "{arn}");
            assert_eq!(ctx.resolve(kind, "thing-1").unwrap(), "thing-1");
        }
        let id = QuotaShareId {
            queue: "q".into(),
            name: "team-a".into(),
        };
        let arn = ctx.quota_share_arn(&id);
        assert_eq!(
            arn,
            "arn:aws:batch:us-east-1:000000000000:job-queue/q/quota-share/team-a"
        );
        assert_eq!(ctx.resolve_quota_share(&arn).unwrap(), id);
    }

    #[test]
    fn arns_of_another_kind_or_account_are_rejected() {
        let ctx = ArnContext::default();
        let queue_arn = ctx.queue_arn("q");
        let err = ctx
            .resolve(ResourceKind::ServiceEnvironment, &queue_arn)
            .unwrap_err();
        assert!(err.to_string().contains("service-environment"), "{err}");
        let foreign = "arn:aws:batch:eu-west-1:123456789012:job-queue/q";
        let err = ctx.resolve(ResourceKind::JobQueue, foreign).unwrap_err();
        assert!(err.to_string().contains("eu-west-1"), "{err}");
        assert!(
            ctx.resolve(ResourceKind::JobQueue, "arn:aws:s3:::bucket")
                .is_err()
        );
        assert!(ctx.resolve(ResourceKind::JobQueue, "").is_err());
        assert!(
            ctx.resolve(ResourceKind::JobQueue, &format!("{queue_arn}/x"))
                .is_err()
        );
        assert!(ctx.resolve_quota_share(&queue_arn).is_err());
    }
}
