//! The dispatch order: where a RUNNABLE job stands in its share's line. Every store keeps its
//! runnable index in this order and the planner dispatches in it (a test in
//! `trainyard-scheduler` checks that the two agree).

use std::cmp::Reverse;

use crate::job::ServiceJob;

/// Where a RUNNABLE job stands in its share's line, as a sort key: total (it ends on the job id),
/// smallest first. Priority counts only within a share: `schedulingPriority` descending, then
/// [`ServiceJob::line_at`] (when the job became RUNNABLE, later by its line offset in a queue that
/// puts shorter jobs first), then id. A job without a share (every job of a FIFO queue, and only
/// those: submission checks it) is ranked by time alone, which is FIFO.
pub fn runnable_rank(job: &ServiceJob) -> (Reverse<u32>, i64, &str) {
    let priority = if share_key(job).is_empty() {
        0
    } else {
        job.priority()
    };
    (Reverse(priority), job.line_at(), &job.job_id)
}

/// The share a job is counted in for ordering: its fair-share identifier or its quota share
/// (`""` when it has neither).
pub fn share_key(job: &ServiceJob) -> &str {
    job.share_identifier
        .as_deref()
        .or(job.quota_share_name.as_deref())
        .unwrap_or("")
}
