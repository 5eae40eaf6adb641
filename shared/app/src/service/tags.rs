//! Tagging any Trainyard resource by ARN: service jobs, job queues, service environments,
//! scheduling policies and quota shares (reference §2.7). Tags merge on `TagResource` (existing
//! keys not named are kept), and a resource never holds more than [`MAX_TAGS`].

use trainyard_domain::Tags;
use trainyard_domain::arn::{ArnError, ResourceKind};
use trainyard_domain::environment::ServiceEnvironment;
use trainyard_domain::limits::MAX_TAGS;
use trainyard_domain::policy::SchedulingPolicy;
use trainyard_domain::queue::{JobQueue, check_queue_tags};
use trainyard_domain::quota_share::QuotaShare;

use super::Service;
use super::environments::{not_found, written};
use crate::error::AppError;
use crate::ports::{ConfigStore, EventSink, JobStore, Resource, StoreError, quota_share_key};

/// A resource whose tags can be edited in place.
trait Tagged: Resource {
    fn tags_mut(&mut self) -> &mut Tags;

    /// Refuses tags that configure the resource wrongly (Trainyard's `trainyard:` tags).
    fn check_tags(_tags: &Tags) -> Result<(), String> {
        Ok(())
    }
}

impl Tagged for ServiceEnvironment {
    fn tags_mut(&mut self) -> &mut Tags {
        &mut self.tags
    }
}

impl Tagged for JobQueue {
    fn tags_mut(&mut self) -> &mut Tags {
        &mut self.tags
    }

    fn check_tags(tags: &Tags) -> Result<(), String> {
        check_queue_tags(tags)
    }
}

impl Tagged for SchedulingPolicy {
    fn tags_mut(&mut self) -> &mut Tags {
        &mut self.tags
    }
}

impl Tagged for QuotaShare {
    fn tags_mut(&mut self) -> &mut Tags {
        &mut self.tags
    }
}

/// What a tagging ARN points at: a job by id, or a configuration resource by store key.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    Job(String),
    Resource(ResourceKind, String),
}

/// How a tag edit changes a resource's tags; shared by all resource kinds.
#[derive(Debug, Clone)]
enum Edit<'a> {
    Add(&'a Tags),
    Remove(&'a [String]),
}

impl Edit<'_> {
    /// Applies the edit; `Ok(false)` when nothing changes (so nothing is written).
    fn apply(&self, arn: &str, tags: &mut Tags) -> Result<bool, AppError> {
        match self {
            Edit::Add(new) => {
                let mut merged = tags.clone();
                merged.extend(new.iter().map(|(k, v)| (k.clone(), v.clone())));
                if merged.len() > MAX_TAGS {
                    return Err(AppError::Invalid(format!(
                        "{arn} would have {} tags, more than the {MAX_TAGS} a resource may \
                         have; remove some with UntagResource first",
                        merged.len()
                    )));
                }
                let changed = merged != *tags;
                *tags = merged;
                Ok(changed)
            }
            Edit::Remove(keys) => {
                let before = tags.len();
                tags.retain(|k, _| !keys.contains(k));
                Ok(tags.len() != before)
            }
        }
    }
}

impl<S: JobStore + ConfigStore, E: EventSink> Service<S, E> {
    /// Works out what a tagging ARN names. Only ARNs are accepted here (as in Batch), and
    /// they must be of a kind Trainyard serves, in its partition, region and account.
    fn tag_target(&self, arn: &str) -> Result<Target, AppError> {
        let unknown = |detail: String| {
            AppError::Invalid(format!(
                "resourceArn {arn:?} is not the ARN of a Trainyard resource{detail}; tags apply \
                 to service jobs, job queues, service environments, scheduling policies and \
                 quota shares"
            ))
        };
        if !arn.starts_with("arn:") {
            return Err(unknown(": it does not start with \"arn:\"".into()));
        }
        if let Ok(id) = self.arns.resolve_quota_share(arn) {
            return Ok(Target::Resource(
                ResourceKind::QuotaShare,
                quota_share_key(&id.queue, &id.name),
            ));
        }
        let mut first_error: Option<ArnError> = None;
        for kind in [
            ResourceKind::ServiceJob,
            ResourceKind::JobQueue,
            ResourceKind::ServiceEnvironment,
            ResourceKind::SchedulingPolicy,
        ] {
            match self.arns.resolve(kind, arn) {
                Ok(name) if kind == ResourceKind::ServiceJob => return Ok(Target::Job(name)),
                Ok(name) => return Ok(Target::Resource(kind, name)),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        // The first error explains foreign accounts and malformed ARNs; the kind it names is
        // merely the first one tried, so only its detail is worth repeating.
        Err(unknown(first_error.map(|e| e.detail).unwrap_or_default()))
    }

    /// Applies `edit` to a configuration resource, retrying once if another writer got there
    /// between our read and our write.
    async fn edit_resource_tags<R: Tagged>(
        &self,
        arn: &str,
        key: &str,
        edit: &Edit<'_>,
    ) -> Result<(), AppError> {
        let mut tries = 0;
        loop {
            tries += 1;
            let mut current = self
                .store
                .get_resource::<R>(key)
                .await?
                .ok_or_else(|| not_found(R::KIND, key))?;
            if !edit.apply(arn, current.value.tags_mut())? {
                return Ok(());
            }
            R::check_tags(current.value.tags_mut()).map_err(AppError::Invalid)?;
            match self
                .store
                .update_resource(&current.value, current.version)
                .await
            {
                Err(StoreError::Conflict) if tries < 2 => continue,
                result => return written(R::KIND, key, result).map(drop),
            }
        }
    }

    /// Applies `edit` to a job's tags, retrying once on a version conflict.
    async fn edit_job_tags(
        &self,
        arn: &str,
        job_id: &str,
        edit: &Edit<'_>,
    ) -> Result<(), AppError> {
        let mut tries = 0;
        loop {
            tries += 1;
            let mut current = self
                .store
                .get_job(job_id)
                .await?
                .ok_or_else(|| not_found(ResourceKind::ServiceJob, job_id))?;
            if !edit.apply(arn, std::sync::Arc::make_mut(&mut current.value.tags))? {
                return Ok(());
            }
            match self.store.update_job(&current.value, current.version).await {
                Err(StoreError::Conflict) if tries < 2 => continue,
                result => return written(ResourceKind::ServiceJob, job_id, result).map(drop),
            }
        }
    }

    async fn edit_tags(&self, arn: &str, edit: Edit<'_>) -> Result<(), AppError> {
        let result = match self.tag_target(arn)? {
            Target::Job(id) => self.edit_job_tags(arn, &id, &edit).await,
            Target::Resource(kind, key) => match kind {
                ResourceKind::ServiceEnvironment => {
                    self.edit_resource_tags::<ServiceEnvironment>(arn, &key, &edit)
                        .await
                }
                ResourceKind::JobQueue => {
                    self.edit_resource_tags::<JobQueue>(arn, &key, &edit).await
                }
                ResourceKind::SchedulingPolicy => {
                    self.edit_resource_tags::<SchedulingPolicy>(arn, &key, &edit)
                        .await
                }
                ResourceKind::QuotaShare => {
                    self.edit_resource_tags::<QuotaShare>(arn, &key, &edit)
                        .await
                }
                ResourceKind::ServiceJob => self.edit_job_tags(arn, &key, &edit).await,
            },
        };
        result.map_err(|e| name_the_arn(arn, e))
    }

    /// `TagResource`: adds `tags` to the resource, replacing values of keys it already has.
    pub async fn tag_resource(&self, arn: &str, tags: &Tags) -> Result<(), AppError> {
        self.edit_tags(arn, Edit::Add(tags)).await
    }

    /// `UntagResource`: removes the keys; keys the resource does not have are ignored.
    pub async fn untag_resource(&self, arn: &str, keys: &[String]) -> Result<(), AppError> {
        self.edit_tags(arn, Edit::Remove(keys)).await
    }

    /// `ListTagsForResource`.
    pub async fn list_tags_for_resource(&self, arn: &str) -> Result<Tags, AppError> {
        async fn tags_of<S: ConfigStore, R: Tagged>(
            store: &S,
            key: &str,
        ) -> Result<Tags, AppError> {
            let mut found = store
                .get_resource::<R>(key)
                .await?
                .ok_or_else(|| not_found(R::KIND, key))?;
            Ok(std::mem::take(found.value.tags_mut()))
        }
        async fn job_tags<S: JobStore>(store: &S, id: &str) -> Result<Tags, AppError> {
            let job = store
                .get_job(id)
                .await?
                .ok_or_else(|| not_found(ResourceKind::ServiceJob, id))?;
            Ok(std::sync::Arc::unwrap_or_clone(job.value.tags))
        }
        let result = match self.tag_target(arn)? {
            Target::Job(id) => job_tags(&self.store, &id).await,
            Target::Resource(kind, key) => match kind {
                ResourceKind::ServiceEnvironment => {
                    tags_of::<S, ServiceEnvironment>(&self.store, &key).await
                }
                ResourceKind::JobQueue => tags_of::<S, JobQueue>(&self.store, &key).await,
                ResourceKind::SchedulingPolicy => {
                    tags_of::<S, SchedulingPolicy>(&self.store, &key).await
                }
                ResourceKind::QuotaShare => tags_of::<S, QuotaShare>(&self.store, &key).await,
                ResourceKind::ServiceJob => job_tags(&self.store, &key).await,
            },
        };
        result.map_err(|e| name_the_arn(arn, e))
    }
}

/// A missing resource is reported by the ARN the caller gave, which is what they can act on.
fn name_the_arn(arn: &str, err: AppError) -> AppError {
    match err {
        AppError::NotFound(_) => AppError::NotFound(format!(
            "resourceArn {arn:?} names no existing resource: check the ARN (it may have been \
             deleted)"
        )),
        other => other,
    }
}
