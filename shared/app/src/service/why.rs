//! Why a job waits: its reason with the figures of the latest cycle, and the ranked chain of
//! everything that holds it back (`Service::explain_job`, `trainyard why`).
//!
//! A cycle writes a waiting job's reason into the job only when the reason's code changes; the
//! current figures live in its line's [`LineWaits`], one small document per line that the cycle
//! rewrites only when something in it changed. A job read through describe, list or explain
//! shows its reason from there:
//!
//! - a job the document names: its own reason, as the latest cycle gave it;
//! - a RUNNABLE job behind them (the cycle read only the line's first jobs):
//!   `PRIORITY:JOBS_AHEAD`, with how many wait ahead of it and why the first of them waits;
//! - a job that joined its line after the latest cycle planned it: its stored reason.

use std::collections::BTreeMap;

use serde::Serialize;
use trainyard_domain::environment::ServiceEnvironment;
use trainyard_domain::job::{JobStatus, ServiceJob};
use trainyard_domain::order::share_key;
use trainyard_domain::policy::SchedulingPolicy;
use trainyard_domain::queue::JobQueue;
use trainyard_domain::quota_share::QuotaShare;
use trainyard_scheduler::retry;
use trainyard_scheduler::{
    Config as PlannerConfig, QuotaShareState, SkipReason, Snapshot, WaitKind, plan_cycle,
};

use crate::error::AppError;
use crate::ports::{
    ConfigStore, Document, EventSink, JobWait, LineWaits, RunnableHead, SchedulingStore,
    StoreError, Versioned, quota_share_key,
};
use crate::service::Service;
use crate::service::scheduling::{environment_state, pending, queue_state};

/// The code of a RUNNABLE job behind the first jobs of its line, which the cycle did not read.
pub const JOBS_AHEAD_CODE: &str = "PRIORITY:JOBS_AHEAD";

/// One thing that holds a job back.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Blocker {
    /// What kind of wait; blockers are ranked by it (see [`WaitKind`]).
    pub kind: WaitKind,
    /// The reason code (`CATEGORY:CODE`).
    pub code: String,
    /// The reason in words, with current figures.
    pub message: String,
    /// The job the reason is about, when it is not the job explained (the first job of its
    /// line, for a job behind it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub about_job_id: Option<String>,
    /// The planner's reason, typed, when the blocker is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<SkipReason>,
    /// Since when (epoch ms), when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<i64>,
}

impl Blocker {
    fn of(reason: &SkipReason, about: Option<&str>, since: Option<i64>) -> Self {
        let text = reason.to_string();
        Self {
            kind: reason.kind(),
            code: reason.code().to_owned(),
            message: message_of(&text).to_owned(),
            about_job_id: about.map(str::to_owned),
            detail: Some(reason.clone()),
            since,
        }
    }
}

/// A line's place among its queue's lines with waiting jobs, as the latest cycle served them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ShareRank {
    /// 1 for the line served first.
    pub rank: u32,
    /// How many lines had waiting jobs.
    pub of: u32,
}

/// One entry of a job's history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    /// When (epoch ms).
    pub at: i64,
    /// What happened, in words.
    pub event: String,
    /// The reason given then, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Why a job is where it is.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// The job, its status reason current.
    #[serde(skip)]
    pub job: ServiceJob,
    /// When the cycle whose figures the reasons show planned (epoch ms), if one has planned the
    /// job's line since the job joined it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub as_of: Option<i64>,
    /// Its 1-based place in its line, when RUNNABLE and within the first
    /// [`POSITION_SCAN_LIMIT`](crate::service::jobs::POSITION_SCAN_LIMIT).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub position: Option<u64>,
    /// Its line's place among its queue's lines with waiting jobs, as served in the latest
    /// cycle (`rank` of `lines`), for a queue with shares.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share_rank: Option<ShareRank>,
    /// What holds it back, most fundamental first; empty when nothing does (it is not
    /// RUNNABLE, or no cycle has planned it yet).
    pub blockers: Vec<Blocker>,
    /// What happened to it so far, oldest first.
    pub history: Vec<HistoryEntry>,
    /// When it is expected to start, from the latest forecast round that read it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimate: Option<trainyard_forecast::Estimate>,
}

/// The text after a reason's code (all of it when it has no code).
fn message_of(reason: &str) -> &str {
    reason.split_once(" - ").map_or(reason, |(_, text)| text)
}

/// A share's name as people read it: `share vision`, or `the queue` for a FIFO queue's line.
fn line_name(waits: &LineWaits) -> String {
    if waits.share.is_empty() {
        format!("queue {}", waits.queue)
    } else {
        format!("share {} of queue {}", waits.share, waits.queue)
    }
}

/// Whether `waits` were planned after `job` took its place in line (its submission or last
/// requeue): else they say nothing of it.
fn planned_since_joined(waits: &LineWaits, job: &ServiceJob) -> bool {
    waits.at_ms >= job.runnable_at.unwrap_or(i64::MAX)
}

/// The reason to show for `job` given its line's latest `waits`, if they say more than the
/// job's stored reason (see the module docs).
pub fn current_reason(job: &ServiceJob, waits: &LineWaits) -> Option<String> {
    if job.status != JobStatus::Runnable {
        return None;
    }
    // Waits planned before the job joined the line name nothing of it, but tell what it waits
    // behind when it stands behind every job they name (a line's document is rewritten only
    // when what it shows changes, so a steady line's can be older than the jobs behind it).
    if !planned_since_joined(waits, job) {
        let behind = waits.behind_all_named(trainyard_domain::order::runnable_rank(job));
        return behind
            .then(|| waits.waits.first().map(|first| jobs_ahead(waits, first)))
            .flatten();
    }
    match waits.wait_of(&job.job_id) {
        // During a capacity backoff Batch's CAPACITY reason says more than "backing off" (the
        // cycle keeps it stored).
        Some((_, w))
            if matches!(w.reason, SkipReason::Backoff { .. })
                && job
                    .status_reason
                    .as_deref()
                    .is_some_and(retry::is_capacity_reason) =>
        {
            None
        }
        Some((_, w)) => Some(w.reason.to_string()),
        None => waits.waits.first().map(|first| jobs_ahead(waits, first)),
    }
}

/// The code metrics count a RUNNABLE job under when no cycle has given it a reason yet.
pub const NOT_PLANNED_YET: &str = "NOT_PLANNED_YET";

/// Every line's stored waits, by document key (`queue/share`): for a reader of many jobs.
pub async fn every_line_waits<S: SchedulingStore>(
    store: &S,
) -> Result<BTreeMap<String, LineWaits>, StoreError> {
    Ok(store
        .list_documents::<LineWaits>()
        .await?
        .into_iter()
        .map(|w| (w.value.key(), w.value))
        .collect())
}

/// The code of the reason a RUNNABLE `job` is shown (its line's from `lines`, else its stored
/// one; [`NOT_PLANNED_YET`] when it has none).
pub fn shown_reason_code(job: &ServiceJob, lines: &BTreeMap<String, LineWaits>) -> String {
    let shown = lines
        .get(&quota_share_key(&job.job_queue, share_key(job)))
        .and_then(|waits| current_reason(job, waits));
    let reason = shown.as_deref().or(job.status_reason.as_deref());
    reason
        .map_or(NOT_PLANNED_YET, |r| r.split(" - ").next().unwrap_or(r))
        .to_owned()
}

/// `PRIORITY:JOBS_AHEAD` for a job behind every job `waits` names, the first being `first`.
fn jobs_ahead(waits: &LineWaits, first: &JobWait) -> String {
    let rank = if waits.lines > 1 {
        format!(
            " (served {} of the {} lines with waiting jobs)",
            ordinal(waits.rank),
            waits.lines
        )
    } else {
        String::new()
    };
    format!(
        "{JOBS_AHEAD_CODE} - at least {} jobs wait ahead of it in {}{rank}; the first, {}, waits: {}",
        waits.waits.len(),
        line_name(waits),
        first.job_id,
        first.reason
    )
}

/// `1st`, `2nd`, `3rd`, `4th`, … `11th`, `12th`, `13th`, `21st`.
fn ordinal(n: u32) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// What happened to `job`, oldest first: its submission, each attempt and how it ended, and
/// since when it waits for its current reason.
fn history(job: &ServiceJob, current: Option<(&str, i64)>) -> Vec<HistoryEntry> {
    let entry = |at: i64, event: String, reason: Option<&str>| HistoryEntry {
        at,
        event,
        reason: reason.map(str::to_owned),
    };
    let mut out = vec![entry(job.created_at, "submitted".into(), None)];
    for (n, attempt) in job.attempts.iter().enumerate() {
        if let Some(at) = attempt.started_at {
            let mut event = format!(
                "attempt {} dispatched as training job {}",
                n + 1,
                attempt.training_job_name
            );
            if let Some(env) = &attempt.service_environment {
                event.push_str(&format!(" in {env}"));
            }
            out.push(entry(at, event, None));
        }
        if let Some(at) = attempt.stopped_at {
            let event = format!("attempt {} ended", n + 1);
            out.push(entry(at, event, attempt.status_reason.as_deref()));
        }
    }
    if let Some(at) = job.stopped_at {
        let event = format!("{}", job.status);
        out.push(entry(at, event, job.status_reason.as_deref()));
    }
    if let Some((reason, since)) = current {
        out.push(entry(since, "waiting".into(), Some(reason)));
    }
    out.sort_by_key(|e| e.at);
    out
}

impl<S: ConfigStore + SchedulingStore, E: EventSink> Service<S, E> {
    /// The stored waits of `job`'s line.
    async fn line_waits_of(&self, job: &ServiceJob) -> Result<Option<LineWaits>, AppError> {
        let key = quota_share_key(&job.job_queue, share_key(job));
        Ok(self
            .store
            .get_document::<LineWaits>(&key)
            .await?
            .map(|v| v.value))
    }

    /// Gives each RUNNABLE job among `jobs` its current reason (see the module docs), followed
    /// by its start estimate, and returns the estimates in the order of `jobs`: one read per
    /// line and one per queue among them.
    pub async fn with_current_reasons(
        &self,
        jobs: &mut [ServiceJob],
    ) -> Result<Vec<Option<trainyard_forecast::Estimate>>, AppError> {
        let mut lines: BTreeMap<String, Option<LineWaits>> = BTreeMap::new();
        for job in jobs.iter_mut().filter(|j| j.status == JobStatus::Runnable) {
            let key = quota_share_key(&job.job_queue, share_key(job));
            if !lines.contains_key(&key) {
                let waits = self.line_waits_of(job).await?;
                lines.insert(key.clone(), waits);
            }
            if let Some(reason) = lines[&key].as_ref().and_then(|w| current_reason(job, w)) {
                job.status_reason = Some(reason);
            }
        }
        self.with_start_estimates(jobs).await
    }

    /// Why the job `id_or_arn` is where it is: its current reason, the ranked chain of what
    /// holds it back, and its history.
    pub async fn explain_job(&self, id_or_arn: &str) -> Result<Explanation, AppError> {
        let mut job = self.describe_job(id_or_arn).await?;
        let mut explanation = Explanation {
            as_of: None,
            position: None,
            share_rank: None,
            blockers: Vec::new(),
            history: Vec::new(),
            estimate: None,
            job: job.clone(),
        };
        if job.status != JobStatus::Runnable {
            explanation.history = history(&job, None);
            return Ok(explanation);
        }
        let waits = self.line_waits_of(&job).await?;
        let waits = waits.filter(|w| planned_since_joined(w, &job));
        let queue = self.store.get_resource::<JobQueue>(&job.job_queue).await?;
        let queue = queue.map(|q| q.value);
        if let Some(queue) = &queue {
            explanation.position = self.place_in(&job, queue).await?.map(|p| p.position);
        }
        let mut blockers = Vec::new();
        // What would hold it back with the pool to itself.
        if let Some(reason) = self.alone(&job, queue.as_ref()).await? {
            blockers.push(Blocker::of(&reason, None, None));
        }
        let now = self.clock.now_ms();
        if let Some(until) = job.not_before.filter(|t| *t > now) {
            blockers.push(Blocker::of(
                &SkipReason::Backoff { until_ms: until },
                None,
                None,
            ));
        }
        let mut current = None;
        if let Some(waits) = &waits {
            explanation.as_of = Some(waits.at_ms);
            if waits.lines > 1 {
                explanation.share_rank = Some(ShareRank {
                    rank: waits.rank,
                    of: waits.lines,
                });
            }
            let own = waits.wait_of(&job.job_id);
            let ahead = explanation
                .position
                .map(|p| p.saturating_sub(1))
                .or(own.map(|(i, _)| i as u64));
            if let Some(ahead) = ahead.filter(|n| *n > 0) {
                blockers.push(Blocker {
                    kind: WaitKind::Contention,
                    code: JOBS_AHEAD_CODE.to_owned(),
                    message: format!("{ahead} jobs wait ahead of it in {}", line_name(waits)),
                    about_job_id: None,
                    detail: None,
                    since: None,
                });
            }
            match own {
                Some((_, w)) => {
                    current = Some((w.reason.to_string(), w.since_ms));
                    blockers.push(Blocker::of(&w.reason, None, Some(w.since_ms)));
                }
                None => {
                    if let Some(first) = waits.waits.first() {
                        let about = Some(first.job_id.as_str());
                        blockers.push(Blocker::of(&first.reason, about, Some(first.since_ms)));
                    }
                }
            }
            if let Some(reason) = current_reason(&job, waits) {
                job.status_reason = Some(reason);
            }
        }
        // One blocker per code (the pool-to-itself check and the cycle can name the same
        // thing), ranked by kind; equal kinds keep their order.
        let mut seen = std::collections::BTreeSet::new();
        blockers.retain(|b| b.about_job_id.is_some() || seen.insert(b.code.clone()));
        blockers.sort_by_key(|b| b.kind);
        explanation.blockers = blockers;
        let current = current.or_else(|| {
            job.status_reason
                .clone()
                .map(|r| (r, job.runnable_at.unwrap_or(job.created_at)))
        });
        explanation.history = history(&job, current.as_ref().map(|(r, t)| (r.as_str(), *t)));
        explanation.estimate = self
            .with_start_estimates(std::slice::from_mut(&mut job))
            .await?
            .pop()
            .flatten();
        explanation.job = job;
        Ok(explanation)
    }

    /// Why `job` would wait with the pool to itself (nothing else running or waiting, its
    /// backoff over), if it would: the configuration keeps it from ever running, or holds it
    /// (a disabled environment).
    async fn alone(
        &self,
        job: &ServiceJob,
        queue: Option<&JobQueue>,
    ) -> Result<Option<SkipReason>, AppError> {
        let Some(queue) = queue else {
            return Ok(Some(SkipReason::UnknownQueue));
        };
        let policy = match &queue.scheduling_policy {
            Some(name) => self
                .store
                .get_resource::<SchedulingPolicy>(name)
                .await?
                .map(|p| p.value),
            None => None,
        };
        let shares: Vec<QuotaShareState> = if policy
            .as_ref()
            .is_some_and(|p| p.quota_share_policy.is_some())
        {
            let mut shares: Vec<QuotaShareState> = self
                .store
                .list_resources::<QuotaShare>()
                .await?
                .iter()
                .filter(|s| s.value.job_queue == queue.job_queue_name)
                .map(|s| QuotaShareState::from(&s.value))
                .collect();
            shares.sort_by(|a, b| a.name.cmp(&b.name));
            shares
        } else {
            Vec::new()
        };
        let mut environments = Vec::new();
        if let Some(name) = queue.service_environment() {
            let env: Option<Versioned<ServiceEnvironment>> = self.store.get_resource(name).await?;
            environments.extend(env.map(|e| environment_state(e.value)));
        }
        // The job as a cycle would see it, its backoff over.
        let (mut alone, _) = pending(RunnableHead::of(job, 0), false);
        alone.not_before_ms = None;
        let snapshot = Snapshot {
            environments,
            queues: vec![queue_state(queue, policy.as_ref(), shares)],
            pending: vec![alone],
            ..Snapshot::default()
        };
        let now = self.clock.now_ms();
        let plan = plan_cycle(&snapshot, now, &PlannerConfig::default());
        Ok(plan.skips.into_iter().next().map(|s| s.reason))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinals_read_as_english() {
        let got: Vec<String> = [1, 2, 3, 4, 11, 12, 13, 21, 22, 101, 111]
            .into_iter()
            .map(ordinal)
            .collect();
        assert_eq!(
            got,
            [
                "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st",
                "111th"
            ]
        );
    }
}
