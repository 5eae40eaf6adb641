//! `GetJobQueueSnapshot`: the front of each line and the capacity each share holds.

use super::*;

pub(super) fn position(job: &ServiceJob) -> QueuePosition {
    QueuePosition {
        job_id: job.job_id.clone(),
        earliest_time_at_position: job.runnable_at.unwrap_or(job.created_at),
    }
}

pub(super) fn add_usage(usage: &mut CapacityUsage, job: &ServiceJob) {
    for (instance_type, count) in job.held_instances().iter() {
        *usage.entry(instance_type.clone()).or_insert(0) += u64::from(*count);
    }
}

/// Usage per group, largest total first, then by name (a total order).
pub(super) fn ranked(groups: BTreeMap<String, CapacityUsage>) -> Vec<(String, CapacityUsage)> {
    let mut ranked: Vec<_> = groups.into_iter().collect();
    ranked.sort_by(|(a_name, a), (b_name, b)| {
        let total = |u: &CapacityUsage| u.values().sum::<u64>();
        total(b).cmp(&total(a)).then_with(|| a_name.cmp(b_name))
    });
    ranked
}

impl<S: ConfigStore + SchedulingStore, E: EventSink> Service<S, E> {
    /// The first `limit` RUNNABLE jobs of each share of `queue` (of the whole queue when it is
    /// FIFO), merged in dispatch order. Read from the runnable index, so the cost grows with
    /// shares × `limit`, never with the backlog; the first `limit` of the result are exactly the
    /// queue's first `limit`, and every share with a RUNNABLE job has its first one in it.
    pub(super) async fn front_runnable(
        &self,
        queue: &str,
        ordering: QueueOrdering,
        limit: usize,
    ) -> Result<Vec<ServiceJob>, AppError> {
        let mut jobs = Vec::new();
        if ordering == QueueOrdering::Fifo {
            jobs = self.store.runnable_jobs(queue, "", limit).await?;
        } else {
            for share in self.store.runnable_shares(queue).await? {
                let head = self.store.runnable_jobs(queue, &share, limit).await?;
                jobs.extend(head);
            }
        }
        let mut jobs: Vec<ServiceJob> = jobs.into_iter().map(|v| v.value).collect();
        jobs.sort_by(|a, b| runnable_rank(a).cmp(&runnable_rank(b)));
        Ok(jobs)
    }

    /// `GetJobQueueSnapshot`: the front of the queue in dispatch order and the capacity its
    /// dispatched jobs hold.
    pub async fn queue_snapshot(&self, name_or_arn: &str) -> Result<QueueSnapshot, AppError> {
        let queue = self.load_queue(name_or_arn).await?;
        let ordering = self.ordering_of(&queue).await?;
        let name = queue.job_queue_name;
        let of_status = |status| JobQuery {
            queue: Some(name.clone()),
            status: Some(status),
            ..JobQuery::default()
        };

        let runnable = self
            .front_runnable(
                &name,
                ordering,
                trainyard_domain::limits::SNAPSHOT_FRONT_OF_QUEUE,
            )
            .await?;
        let front_of_queue = runnable
            .iter()
            .take(trainyard_domain::limits::SNAPSHOT_FRONT_OF_QUEUE)
            .map(position)
            .collect();
        let front_of_quota_shares = (ordering == QueueOrdering::QuotaShare).then(|| {
            let mut front = BTreeMap::new();
            for job in &runnable {
                if let Some(share) = &job.quota_share_name {
                    front.entry(share.clone()).or_insert_with(|| position(job));
                }
            }
            front
        });

        let mut total = CapacityUsage::new();
        let mut per_share: BTreeMap<String, CapacityUsage> = BTreeMap::new();
        let mut per_quota_share: BTreeMap<String, CapacityUsage> = BTreeMap::new();
        for status in [
            JobStatus::Scheduled,
            JobStatus::Starting,
            JobStatus::Running,
        ] {
            for job in self.scan_jobs(of_status(status), SCAN_CAP).await? {
                add_usage(&mut total, &job);
                if let Some(share) = &job.share_identifier {
                    add_usage(per_share.entry(share.clone()).or_default(), &job);
                }
                if let Some(share) = &job.quota_share_name {
                    add_usage(per_quota_share.entry(share.clone()).or_default(), &job);
                }
            }
        }
        let fairshare = (ordering == QueueOrdering::FairShare).then(|| {
            let active = per_share.len() as u64;
            let mut top = ranked(per_share);
            top.truncate(TOP_SHARES);
            (active, top)
        });
        let quota_shares = (ordering == QueueOrdering::QuotaShare).then(|| ranked(per_quota_share));

        Ok(QueueSnapshot {
            job_queue: name,
            ordering,
            front_of_queue,
            front_of_quota_shares,
            total_capacity_usage: total,
            fairshare,
            quota_shares,
            at_ms: self.clock.now_ms(),
        })
    }
}
