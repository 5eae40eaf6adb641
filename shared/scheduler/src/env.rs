//! One environment's capacity while a cycle plans: what is free, when held capacity frees
//! (for the head's reservation, rule 4), and placing a job on it; and the dispatch order within
//! a share (rule 3). Shared by the fair-share and FIFO planner (`plan`) and the quota planner
//! (`quota`).

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use crate::decision::{Dispatch, Plan, SkipReason};
use crate::pool::Pool;
use crate::snapshot::{Config, PendingJob, QueueState, SharedInstances, SharedStr};

/// The blocked head of an environment and the reservation it holds (EASY backfill).
pub(crate) struct Head {
    pub(crate) job_id: SharedStr,
    pub(crate) queue: SharedStr,
    /// When enough capacity will have freed for the head.
    pub(crate) shadow_ms: i64,
    /// Capacity left over at the shadow time once the head has started.
    pub(crate) extra: Pool,
}

/// Per-environment planning state. `'a` is the snapshot's: releases borrow its instances.
pub(crate) struct EnvPlan<'a> {
    pub(crate) name: SharedStr,
    pub(crate) enabled: bool,
    pub(crate) pool: Pool,
    /// (expected end, instances) of every attempt holding capacity, incl. this cycle's.
    pub(crate) releases: Vec<(i64, &'a SharedInstances)>,
    pub(crate) head: Option<Head>,
}

impl EnvPlan<'_> {
    /// Rule 4: the earliest time `demand` fits, given the releases, and what is left then.
    pub(crate) fn reserve(&self, demand: &SharedInstances) -> (i64, Pool) {
        let mut pool = self.pool.clone();
        let mut shadow = i64::MIN;
        if !pool.fits(demand) {
            // Releases in end order (ties by instances: releases equal in both are
            // interchangeable), until the demand fits. A heap: usually a few suffice.
            let mut releases: BinaryHeap<Reverse<(i64, &SharedInstances)>> = self
                .releases
                .iter()
                .map(|(end, instances)| Reverse((*end, *instances)))
                .collect();
            while let Some(Reverse((end, instances))) = releases.pop() {
                pool.give(instances);
                shadow = end;
                if pool.fits(demand) {
                    break;
                }
            }
        }
        pool.take(demand);
        (shadow, pool)
    }

    /// Rule 4: `job` of `queue`, which does not fit, holds the reservation unless another job
    /// already does.
    pub(crate) fn hold_reservation(&mut self, job: &PendingJob, queue: &QueueState) {
        if self.head.is_some() {
            return;
        }
        let (shadow_ms, extra) = self.reserve(&job.instances);
        self.head = Some(Head {
            job_id: job.job_id.clone(),
            queue: queue.name.as_str().into(),
            shadow_ms,
            extra,
        });
    }
}

/// Rule 3: within a share, priority desc, then place in line (age, later by the job's line
/// offset), then id.
pub(crate) fn within_share(a: &&PendingJob, b: &&PendingJob) -> Ordering {
    (Reverse(a.priority), a.line_at_ms(), &a.job_id).cmp(&(
        Reverse(b.priority),
        b.line_at_ms(),
        &b.job_id,
    ))
}

/// Rule 3: FIFO order (by place in line).
pub(crate) fn fifo(a: &&PendingJob, b: &&PendingJob) -> Ordering {
    (a.line_at_ms(), &a.job_id).cmp(&(b.line_at_ms(), &b.job_id))
}

/// Dispatches a job that fits the pool, unless that would delay the environment's waiting head
/// (rule 4); then the reason.
pub(crate) fn dispatch<'a>(
    plan: &mut Plan,
    queue: &QueueState,
    job: &'a PendingJob,
    env: &mut EnvPlan<'a>,
    now_ms: i64,
    config: &Config,
) -> Result<(), SkipReason> {
    let runtime_s = job.max_runtime_s.unwrap_or(config.default_runtime_s);
    let runtime_ms = i64::try_from(runtime_s)
        .unwrap_or(i64::MAX)
        .saturating_mul(1000);
    let end_ms = now_ms.saturating_add(runtime_ms);
    // Rule 4: backfill only what does not delay the head.
    if let Some(head) = &mut env.head
        && end_ms > head.shadow_ms
    {
        if !head.extra.fits(&job.instances) {
            return Err(SkipReason::ReservedForHead {
                head_job_id: head.job_id.clone(),
                head_queue: head.queue.clone(),
                head_start_ms: head.shadow_ms.max(now_ms),
            });
        }
        head.extra.take(&job.instances);
    }
    env.pool.take(&job.instances);
    env.releases.push((end_ms, &job.instances));
    plan.dispatches.push(Dispatch {
        job_id: job.job_id.clone(),
        queue: queue.name.as_str().into(),
        environment: env.name.clone(),
        instances: job.instances.clone(),
    });
    Ok(())
}
