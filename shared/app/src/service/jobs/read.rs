//! Describing and listing jobs, and a RUNNABLE job's place in line.

use super::*;

impl<S: ConfigStore + SchedulingStore, E: EventSink> Service<S, E> {
    /// `DescribeServiceJob`: the job by id or ARN.
    pub async fn describe_job(&self, id_or_arn: &str) -> Result<ServiceJob, AppError> {
        Ok(self.load_job(id_or_arn).await?.value)
    }

    /// Where a RUNNABLE job stands: its 1-based position among the RUNNABLE jobs it is ordered
    /// with (the whole queue for FIFO queues, its share for queues with a policy), in dispatch
    /// order. `None` for jobs that are not RUNNABLE or lie beyond the first
    /// [`POSITION_SCAN_LIMIT`] (reading further would make one describe cost the backlog).
    pub async fn queue_position(&self, job: &ServiceJob) -> Result<Option<QueuePlace>, AppError> {
        if job.status != JobStatus::Runnable {
            return Ok(None);
        }
        let Some(queue) = self.store.get_resource::<JobQueue>(&job.job_queue).await? else {
            return Ok(None);
        };
        self.place_in(job, &queue.value).await
    }

    /// [`Service::queue_position`] of a RUNNABLE `job` of `queue`, read already.
    pub(crate) async fn place_in(
        &self,
        job: &ServiceJob,
        queue: &JobQueue,
    ) -> Result<Option<QueuePlace>, AppError> {
        let share = queue.scheduling_policy.as_ref().map(|_| share_key(job));
        let ahead = self
            .store
            .runnable_jobs(&job.job_queue, share_key(job), POSITION_SCAN_LIMIT)
            .await?;
        Ok(ahead
            .iter()
            .position(|v| v.value.job_id == job.job_id)
            .map(|i| QueuePlace {
                position: i as u64 + 1,
                share: share.map(str::to_owned),
            }))
    }

    /// `ListServiceJobs`: one page of jobs, newest first. `query.queue` may be a name or an ARN
    /// and must name an existing queue.
    pub async fn list_jobs(&self, mut query: JobQuery) -> Result<Page<ServiceJob>, AppError> {
        if let Some(queue) = &query.queue {
            query.queue = Some(self.load_queue(queue).await?.job_queue_name);
        }
        query.limit = query.limit.max(1);
        let page = self.store.list_jobs(&query).await?;
        Ok(Page {
            items: page.items.into_iter().map(|v| v.value).collect(),
            next: page.next,
        })
    }
}
