//! Submitting a job, and accepting submitted jobs into their queues (SUBMITTED → RUNNABLE).

use super::*;

/// SHA-256 (hex) of the canonical request: the resolved queue name and every member but the
/// client token, serialised with a fixed member order (tags are a sorted map).
pub(super) fn request_hash(queue: &str, cmd: &SubmitJob) -> String {
    let mut hasher = Sha256::new();
    hasher.update(queue.as_bytes());
    hasher.update(b"\n");
    // Serialising plain structs and sorted maps cannot fail; an empty body would only make
    // distinct requests collide on the same token, never accept a different one silently.
    hasher.update(serde_json::to_vec(cmd).unwrap_or_default());
    format!("{:x}", hasher.finalize())
}

impl<S: JobStore + ConfigStore + SchedulingStore, E: EventSink> Service<S, E> {
    /// Refuses a submit that would add a share identifier to a fair-share queue that already
    /// has [`MAX_ACTIVE_SHARES`] active ones, as Batch does ("submissions of any jobs that add a
    /// new share identifier fail"). A share counts as active while it has RUNNABLE jobs or jobs
    /// holding capacity in the queue. Reads the share's first waiting job, then the queue's
    /// shares holding capacity (the usual case ends at one of them); the count only for a share
    /// that is neither.
    ///
    /// Two submits of new shares racing at the limit may both pass: the limit is Batch's guard
    /// against unbounded fan-out, and one over it changes nothing that matters.
    async fn check_active_shares(&self, queue: &str, share: &str) -> Result<(), AppError> {
        if !self.store.runnable_heads(queue, share, 1).await?.is_empty() {
            return Ok(());
        }
        let holding = self.store.holding_shares(queue).await?;
        if holding.iter().any(|h| h == share) {
            return Ok(());
        }
        let mut active: std::collections::BTreeSet<String> =
            holding.into_iter().filter(|h| !h.is_empty()).collect();
        active.extend(self.store.runnable_shares(queue).await?);
        if active.len() >= MAX_ACTIVE_SHARES && !active.contains(share) {
            return Err(AppError::Invalid(format!(
                "shareIdentifier {share} would be a new active share of job queue {queue}, which \
                 has {} already, the most it may have ({MAX_ACTIVE_SHARES}); submit under one of \
                 them, or wait until one has no waiting or running jobs",
                active.len()
            )));
        }
        Ok(())
    }

    /// Checks `shareIdentifier` / `quotaShareName` against the queue's policy.
    pub(super) async fn check_share(
        &self,
        queue: &JobQueue,
        ordering: QueueOrdering,
        cmd: &SubmitJob,
    ) -> Result<(), AppError> {
        let queue_name = &queue.job_queue_name;
        if cmd.share_identifier.is_some() && cmd.quota_share_name.is_some() {
            return Err(AppError::Invalid(
                "Specify shareIdentifier or quotaShareName, not both".into(),
            ));
        }
        match ordering {
            QueueOrdering::Fifo => {
                if cmd.share_identifier.is_some() {
                    return Err(AppError::Invalid(format!(
                        "shareIdentifier is not allowed: job queue {queue_name} has no fair-share scheduling policy"
                    )));
                }
                if cmd.quota_share_name.is_some() {
                    return Err(AppError::Invalid(format!(
                        "quotaShareName is not allowed: job queue {queue_name} has no quota-share scheduling policy"
                    )));
                }
            }
            QueueOrdering::FairShare => {
                if cmd.quota_share_name.is_some() {
                    return Err(AppError::Invalid(format!(
                        "quotaShareName is not allowed: job queue {queue_name} has a fair-share scheduling policy; use shareIdentifier"
                    )));
                }
                let Some(share) = &cmd.share_identifier else {
                    return Err(AppError::Invalid(format!(
                        "shareIdentifier is required: job queue {queue_name} has a fair-share scheduling policy"
                    )));
                };
                self.check_active_shares(queue_name, share).await?;
            }
            QueueOrdering::QuotaShare => {
                if cmd.share_identifier.is_some() {
                    return Err(AppError::Invalid(format!(
                        "shareIdentifier is not allowed: job queue {queue_name} has a quota-share scheduling policy; use quotaShareName"
                    )));
                }
                let Some(share) = &cmd.quota_share_name else {
                    return Err(AppError::Invalid(format!(
                        "quotaShareName is required: job queue {queue_name} has a quota-share scheduling policy"
                    )));
                };
                let found = self
                    .store
                    .get_resource::<QuotaShare>(&quota_share_key(queue_name, share))
                    .await?
                    .ok_or_else(|| {
                        AppError::NotFound(format!(
                            "Quota share {share} does not exist in job queue {queue_name}"
                        ))
                    })?
                    .value;
                if found.state != State::Enabled {
                    return Err(AppError::Invalid(format!(
                        "Quota share {share} in job queue {queue_name} is DISABLED and accepts no new jobs"
                    )));
                }
            }
        }
        Ok(())
    }

    /// `SubmitServiceJob`: stores the job as SUBMITTED and publishes `JobSubmitted`.
    ///
    /// Idempotent on `clientToken`: the same request with the same token returns the job the
    /// first call created; a different request with a used token is refused.
    pub async fn submit(&self, cmd: SubmitJob) -> Result<SubmittedJob, AppError> {
        self.submit_as(cmd, None).await
    }

    /// [`Service::submit`] on behalf of `owner`, the ARN of the authenticated caller, recorded
    /// on the job (and left out of the `clientToken` hash: a token names a request, not who
    /// sent it).
    pub async fn submit_as(
        &self,
        cmd: SubmitJob,
        owner: Option<String>,
    ) -> Result<SubmittedJob, AppError> {
        let queue = self.load_queue(&cmd.job_queue).await?;
        let queue_name = queue.job_queue_name.clone();
        if queue.job_queue_type != JobQueueType::SagemakerTraining {
            return Err(AppError::Invalid(format!(
                "Job queue {queue_name} is not of type SAGEMAKER_TRAINING"
            )));
        }
        if queue.state != State::Enabled {
            return Err(AppError::Invalid(format!(
                "Job queue {queue_name} is DISABLED and accepts no new jobs"
            )));
        }
        if matches!(
            queue.status,
            ResourceStatus::Deleting | ResourceStatus::Deleted
        ) {
            return Err(AppError::Invalid(format!(
                "Job queue {queue_name} is being deleted and accepts no new jobs"
            )));
        }
        let ordering = self.ordering_of(&queue).await?;
        self.check_share(&queue, ordering, &cmd).await?;
        let training = parse_training_request(&cmd.service_request_payload)
            .map_err(|e| AppError::Invalid(e.to_string()))?;
        if let Some(roles) = &self.training_roles {
            let role = role_arn(&cmd.service_request_payload).unwrap_or_default();
            if !roles.contains(&role) {
                return Err(AppError::Invalid(format!(
                    "serviceRequestPayload.RoleArn {role} is not one of the training roles this \
                     deployment may pass to SageMaker (the stack's TrainingRoleArns parameter)"
                )));
            }
        }

        let now = self.clock.now_ms();
        let job_id = self.ids.job_id();
        let token = cmd.client_token.as_ref().map(|token| ClientTokenRecord {
            token: token.clone(),
            request_hash: request_hash(&queue_name, &cmd),
            job_id: job_id.clone(),
            created_at: now,
        });
        let line_offset_ms = queue.line_rules().line_offset_ms(training.max_runtime_s);
        let job = ServiceJob {
            line_offset_ms,
            service_job_type: cmd.service_job_type,
            share_identifier: cmd.share_identifier,
            quota_share_name: cmd.quota_share_name,
            scheduling_priority: cmd.scheduling_priority,
            retry_strategy: cmd.retry_strategy,
            timeout_config: cmd.timeout_config,
            preemption_configuration: cmd.preemption_configuration,
            tags: cmd.tags.into(),
            client_token: cmd.client_token,
            owner,
            ..ServiceJob::submitted(
                job_id.clone(),
                cmd.job_name,
                queue_name.clone(),
                cmd.service_request_payload,
                training,
                now,
            )
        };

        match self.store.insert_job(&job, token.as_ref()).await? {
            InsertJob::Inserted => {}
            InsertJob::TokenExists(earlier) => {
                let same = token
                    .as_ref()
                    .is_some_and(|t| t.request_hash == earlier.request_hash);
                if !same {
                    return Err(AppError::Invalid(format!(
                        "clientToken {} was already used for a different request; use a new token for a new job",
                        earlier.token
                    )));
                }
                let job_name = match self.store.get_job(&earlier.job_id).await? {
                    Some(stored) => stored.value.job_name,
                    // Same hash means same jobName, so the request's name is the earlier one.
                    None => job.job_name,
                };
                return Ok(SubmittedJob {
                    job_arn: self.arns.job_arn(&earlier.job_id),
                    job_id: earlier.job_id,
                    job_name,
                });
            }
        }
        tracing::info!(job_id = %job.job_id, job_queue = %queue_name, "job submitted");
        self.events
            .publish(Event::JobSubmitted {
                job_id: job.job_id.clone(),
                job_queue: queue_name,
            })
            .await;
        Ok(SubmittedJob {
            job_arn: self.arns.job_arn(&job.job_id),
            job_id: job.job_id,
            job_name: job.job_name,
        })
    }

    /// Moves up to `limit` SUBMITTED jobs, oldest first, into their queues (RUNNABLE). A job
    /// whose queue no longer exists fails with a reason saying so. A job someone else changed
    /// meanwhile (a version conflict) is left alone. Returns how many jobs were moved.
    pub async fn accept_submitted(&self, limit: usize, min_age_ms: i64) -> Result<usize, AppError> {
        let accepted = self
            .accept_submitted_until(limit, min_age_ms, &[], || false)
            .await?;
        Ok(accepted.moved)
    }

    /// [`Service::accept_submitted`], the jobs `named` first (read by id, consistently: a trigger
    /// naming a job just submitted, which an eventually consistent index may not list yet), then
    /// the others, stopping before the next job once `out_of_time()` says so. Returns with the
    /// count the summary of each job it made RUNNABLE (the cycle that follows plans them even
    /// where the runnable index does not show them yet). One scan finds the other jobs, and each
    /// is read once: the scan's copy is written back under its version, so a job changed since
    /// is a conflict and waits for the next pass.
    pub async fn accept_submitted_until(
        &self,
        limit: usize,
        min_age_ms: i64,
        named: &[String],
        out_of_time: impl Fn() -> bool,
    ) -> Result<Accepted, AppError> {
        let mut accepted = Accepted::default();
        if limit == 0 {
            return Ok(accepted);
        }
        // Only jobs at least `min_age_ms` old: a client that describes its job right after
        // submitting must still see SUBMITTED (the SageMaker SDK asserts it).
        let cutoff = self.clock.now_ms().saturating_sub(min_age_ms.max(0));
        let mut queues = BTreeMap::new();
        for id in named {
            if out_of_time() || accepted.moved >= limit {
                return Ok(accepted);
            }
            if let Some(stored) = self.store.get_job(id).await?
                && stored.value.created_at <= cutoff
            {
                self.accept_one(stored, &mut queues, &mut accepted).await?;
            }
        }
        let query = JobQuery {
            status: Some(JobStatus::Submitted),
            created_before: Some(cutoff.saturating_add(1)),
            ..JobQuery::default()
        };
        let mut submitted = self.scan_versioned(query, ACCEPT_SCAN_CAP).await?;
        // Oldest first, so that a FIFO queue's runnable order matches submission order.
        submitted.sort_by(|a, b| {
            (a.value.created_at, &a.value.job_id).cmp(&(b.value.created_at, &b.value.job_id))
        });
        for stored in submitted {
            if out_of_time() || accepted.moved >= limit {
                break;
            }
            self.accept_one(stored, &mut queues, &mut accepted).await?;
        }
        Ok(accepted)
    }

    /// Moves one job out of SUBMITTED, if it still is and nobody changed it since `stored` was
    /// read. `queues` remembers which queues exist.
    async fn accept_one(
        &self,
        stored: Versioned<ServiceJob>,
        queues: &mut BTreeMap<String, bool>,
        accepted: &mut Accepted,
    ) -> Result<(), AppError> {
        let Versioned {
            value: mut job,
            version,
        } = stored;
        // An index can list a job that has moved on; its fetched copy says so.
        if job.status != JobStatus::Submitted {
            return Ok(());
        }
        let exists = match queues.get(&job.job_queue) {
            Some(exists) => *exists,
            None => {
                let exists = self
                    .store
                    .get_resource::<JobQueue>(&job.job_queue)
                    .await?
                    .is_some();
                queues.insert(job.job_queue.clone(), exists);
                exists
            }
        };
        let now = self.clock.now_ms();
        let (next, reason) = if exists {
            (JobStatus::Runnable, None)
        } else {
            (
                JobStatus::Failed,
                Some(format!(
                    "Job queue {} no longer exists; the job was never queued",
                    job.job_queue
                )),
            )
        };
        if job.transition(next, reason, now).is_err() {
            return Ok(());
        }
        let written = match self.store.update_job(&job, version).await {
            Ok(written) => written,
            Err(StoreError::Conflict) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        accepted.moved += 1;
        if job.status == JobStatus::Runnable {
            accepted.runnable.push(RunnableHead::of(&job, written));
        }
        self.publish_status(&job).await;
        Ok(())
    }
}

/// What accepting submitted jobs did.
#[derive(Debug, Default)]
pub struct Accepted {
    /// Jobs moved out of SUBMITTED (to RUNNABLE, or FAILED when their queue is gone).
    pub moved: usize,
    /// The summaries of those now RUNNABLE, as written.
    pub runnable: Vec<RunnableHead>,
}
