//! Scheduling policies: create, describe, list, update and delete with Batch's rules
//! (reference §2.8). A policy is fair share or quota share, exactly one, and keeps its kind for
//! life; fair-share identifiers must not overlap; a policy in use by a queue cannot be deleted.

use std::collections::BTreeSet;

use trainyard_domain::Tags;
use trainyard_domain::arn::ResourceKind;
use trainyard_domain::limits::MAX_SHARE_IDENTIFIER;
use trainyard_domain::policy::{FairsharePolicy, QuotaSharePolicy, SchedulingPolicy};
use trainyard_domain::queue::JobQueue;

use super::Service;
use super::environments::{created, written};
use crate::error::AppError;
use crate::ports::{ConfigStore, EventSink, Versioned};

/// What `CreateSchedulingPolicy` asks for, after the API decoded and range-checked it.
#[derive(Debug, Clone, PartialEq)]
pub struct NewSchedulingPolicy {
    /// Name (already checked against Batch's naming rule).
    pub name: String,
    /// Set for a fair-share policy.
    pub fairshare_policy: Option<FairsharePolicy>,
    /// Set for a quota-share policy.
    pub quota_share_policy: Option<QuotaSharePolicy>,
    /// Tags.
    pub tags: Tags,
}

/// Checks `shareDistribution`: identifiers of at most 255 letters and digits with an optional
/// trailing `*` (a prefix), and no two entries that could match the same share: an exact
/// identifier covered by a prefix entry, two prefixes one of which extends the other, or the
/// same identifier twice. Overlaps would make a share's weight depend on entry order.
pub fn check_share_distribution(policy: &FairsharePolicy) -> Result<(), AppError> {
    for (i, entry) in policy.share_distribution.iter().enumerate() {
        let id = entry.share_identifier.as_str();
        let body = id.strip_suffix('*').unwrap_or(id);
        let len = id.chars().count();
        if body.is_empty() && !id.ends_with('*') {
            return Err(AppError::Invalid(format!(
                "fairsharePolicy.shareDistribution[{i}].shareIdentifier must not be empty"
            )));
        }
        if len > MAX_SHARE_IDENTIFIER {
            return Err(AppError::Invalid(format!(
                "fairsharePolicy.shareDistribution[{i}].shareIdentifier must be at most \
                 {MAX_SHARE_IDENTIFIER} characters, got {len}"
            )));
        }
        if let Some(c) = body.chars().find(|c| !c.is_ascii_alphanumeric()) {
            return Err(AppError::Invalid(format!(
                "fairsharePolicy.shareDistribution[{i}].shareIdentifier {id:?} may contain only \
                 letters and digits, with an optional trailing * for a prefix; found {c:?}"
            )));
        }
    }
    let entries = &policy.share_distribution;
    for (i, a) in entries.iter().enumerate() {
        for b in &entries[i + 1..] {
            if overlaps(&a.share_identifier, &b.share_identifier) {
                return Err(AppError::Invalid(format!(
                    "fairsharePolicy.shareDistribution entries {:?} and {:?} overlap: a share \
                     identifier may be matched by only one entry",
                    a.share_identifier, b.share_identifier
                )));
            }
        }
    }
    Ok(())
}

/// Whether two `shareIdentifier` entries can match the same share.
fn overlaps(a: &str, b: &str) -> bool {
    match (a.strip_suffix('*'), b.strip_suffix('*')) {
        (None, None) => a == b,
        (Some(prefix), None) => b.starts_with(prefix),
        (None, Some(prefix)) => a.starts_with(prefix),
        (Some(p), Some(q)) => p.starts_with(q) || q.starts_with(p),
    }
}

fn check_one_kind(
    fairshare: Option<&FairsharePolicy>,
    quota_share: Option<&QuotaSharePolicy>,
) -> Result<(), AppError> {
    match (fairshare, quota_share) {
        (Some(_), Some(_)) => Err(AppError::Invalid(
            "set only one of fairsharePolicy or quotaSharePolicy".into(),
        )),
        (None, None) => Err(AppError::Invalid(
            "set one of fairsharePolicy or quotaSharePolicy".into(),
        )),
        (Some(f), None) => check_share_distribution(f),
        (None, Some(_)) => Ok(()),
    }
}

impl<S: ConfigStore, E: EventSink> Service<S, E> {
    /// `CreateSchedulingPolicy`.
    pub async fn create_scheduling_policy(
        &self,
        new: NewSchedulingPolicy,
    ) -> Result<SchedulingPolicy, AppError> {
        check_one_kind(
            new.fairshare_policy.as_ref(),
            new.quota_share_policy.as_ref(),
        )?;
        let policy = SchedulingPolicy {
            name: new.name,
            fairshare_policy: new.fairshare_policy,
            quota_share_policy: new.quota_share_policy,
            tags: new.tags,
            created_at: self.clock.now_ms(),
        };
        created(self.store.create_resource(&policy).await)?;
        Ok(policy)
    }

    /// `DescribeSchedulingPolicies`: the policies named (by ARN or name), by name; unknown ones
    /// are absent.
    pub async fn describe_scheduling_policies(
        &self,
        references: &[String],
    ) -> Result<Vec<SchedulingPolicy>, AppError> {
        let wanted = references
            .iter()
            .map(|r| self.resolve_reference(ResourceKind::SchedulingPolicy, r))
            .collect::<Result<BTreeSet<_>, _>>()?;
        Ok(self
            .list_scheduling_policies()
            .await?
            .into_iter()
            .filter(|p| wanted.contains(&p.name))
            .collect())
    }

    /// `ListSchedulingPolicies`: every policy, by name.
    pub async fn list_scheduling_policies(&self) -> Result<Vec<SchedulingPolicy>, AppError> {
        Ok(self
            .store
            .list_resources::<SchedulingPolicy>()
            .await?
            .into_iter()
            .map(|v| v.value)
            .collect())
    }

    /// `UpdateSchedulingPolicy`: replaces the policy's details; the kind cannot change. An
    /// update naming neither kind changes nothing.
    pub async fn update_scheduling_policy(
        &self,
        reference: &str,
        fairshare: Option<FairsharePolicy>,
        quota_share: Option<QuotaSharePolicy>,
    ) -> Result<SchedulingPolicy, AppError> {
        let Versioned {
            value: mut policy,
            version,
        } = self.load_resource::<SchedulingPolicy>(reference).await?;
        let name = policy.name.clone();
        if fairshare.is_some() && quota_share.is_some() {
            return Err(AppError::Invalid(
                "set only one of fairsharePolicy or quotaSharePolicy".into(),
            ));
        }
        if fairshare.is_some() && policy.quota_share_policy.is_some() {
            return Err(AppError::Invalid(format!(
                "scheduling policy {name:?} is a quota-share policy and cannot become a \
                 fair-share policy; create a new policy instead"
            )));
        }
        if quota_share.is_some() && policy.fairshare_policy.is_some() {
            return Err(AppError::Invalid(format!(
                "scheduling policy {name:?} is a fair-share policy and cannot become a \
                 quota-share policy; create a new policy instead"
            )));
        }
        if let Some(f) = fairshare {
            check_share_distribution(&f)?;
            policy.fairshare_policy = Some(f);
        }
        if let Some(q) = quota_share {
            policy.quota_share_policy = Some(q);
        }
        written(
            ResourceKind::SchedulingPolicy,
            &name,
            self.store.update_resource(&policy, version).await,
        )?;
        Ok(policy)
    }

    /// `DeleteSchedulingPolicy`: refused while a job queue uses the policy.
    pub async fn delete_scheduling_policy(&self, reference: &str) -> Result<(), AppError> {
        let Versioned {
            value: policy,
            version,
        } = self.load_resource::<SchedulingPolicy>(reference).await?;
        let name = policy.name.as_str();
        let queues = self.store.list_resources::<JobQueue>().await?;
        if let Some(queue) = queues
            .iter()
            .find(|q| q.value.scheduling_policy.as_deref() == Some(name))
        {
            return Err(AppError::Conflict(format!(
                "scheduling policy {name:?} is used by job queue {:?}: delete the queue, or \
                 replace its policy with UpdateJobQueue, first",
                queue.value.job_queue_name
            )));
        }
        written(
            ResourceKind::SchedulingPolicy,
            name,
            self.store
                .delete_resource::<SchedulingPolicy>(name, version)
                .await,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trainyard_domain::policy::ShareAttributes;

    fn policy(ids: &[&str]) -> FairsharePolicy {
        FairsharePolicy {
            share_distribution: ids
                .iter()
                .map(|id| ShareAttributes {
                    share_identifier: (*id).into(),
                    weight_factor: None,
                })
                .collect(),
            ..FairsharePolicy::default()
        }
    }

    #[test]
    fn share_identifiers_are_alphanumeric_prefixes_that_never_overlap() {
        let long = "a".repeat(256);
        let cases: Vec<(&str, Vec<&str>, Option<&str>)> = vec![
            (
                "distinct ids and prefixes are fine",
                vec!["teamA", "teamB*", "other"],
                None,
            ),
            (
                "an exact id under a prefix overlaps",
                vec!["UserA*", "UserA1"],
                Some("\"UserA1\""),
            ),
            (
                "a prefix extending a prefix overlaps",
                vec!["ab*", "abc*"],
                Some("\"ab*\""),
            ),
            (
                "the same id twice overlaps",
                vec!["x", "x"],
                Some("overlap"),
            ),
            ("a lone star is a catch-all", vec!["*"], None),
            (
                "a catch-all overlaps everything",
                vec!["*", "a"],
                Some("overlap"),
            ),
            ("punctuation is refused", vec!["team-a"], Some("'-'")),
            ("a star mid-way is refused", vec!["te*am"], Some("'*'")),
            ("empty is refused", vec![""], Some("empty")),
            (
                "256 characters is too long",
                vec![long.as_str()],
                Some("at most 255"),
            ),
        ];
        for (story, ids, expected) in cases {
            let result = check_share_distribution(&policy(&ids));
            match expected {
                None => assert!(result.is_ok(), "{story}: {result:?}"),
                Some(needle) => {
                    let message = result.expect_err(story).to_string();
                    assert!(message.contains(needle), "{story}: {message}");
                }
            }
        }
    }
}
