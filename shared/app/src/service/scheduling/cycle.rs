//! One scheduling cycle: snapshot (step 1, in `snapshot`), plan (2), commit each dispatch (3)
//! and launch it (4, in `launch`), ask victims to stop (4b), record why the others wait (5),
//! account fair-share usage (6), and show each line's waits (7, in `waits`).

use std::collections::{BTreeMap, BTreeSet};

use futures::StreamExt;
use trainyard_domain::job::{Attempt, JobStatus, ServiceJob};
use trainyard_domain::training::attempt_name;
use trainyard_scheduler::fair_share::ShareUsage;
use trainyard_scheduler::{
    Dispatch, Plan, PreemptionReason, QueuePolicy, ShareKey, SharedStr, Skip, SkipReason, Snapshot,
    plan_cycle, quota, retry, within_limits,
};

use super::snapshot::{Loaded, merge_by_key};
use super::{CycleConfig, CycleReport, DecisionRecord};
use crate::error::AppError;
use crate::ports::{
    ConfigStore, EnvironmentUsage, EventSink, Fence, RunnableHead, SchedulingStore,
    ShareUsageRecord, StoreError, TrainingBackend, Versioned, Write, quota_share_key,
};
use crate::service::Service;

/// Whether the cycle must stand aside: it dispatches with a lease, and some environment's
/// usage, as last read, records a newer one that has not lapsed. A cycle without a lease never
/// stands aside.
fn fenced_out(loaded: &Loaded, now: i64) -> bool {
    loaded.fence.is_some_and(|mine| {
        loaded
            .usage
            .values()
            .any(|u| mine.is_fenced_by(u.value.fence, now))
    })
}

/// Checkpoint listings a cycle has in flight at once (each one S3 `ListObjectsV2` on AWS): a
/// queue of 500 running jobs is listed in about 32 round trips' time, not 500.
pub const CHECKPOINT_LISTINGS_AT_ONCE: usize = 16;

/// Observes the newest checkpoint of every running job, in a queue the plan preempts in, that
/// has a `CheckpointConfig.S3Uri`, into the snapshot, [`CHECKPOINT_LISTINGS_AT_ONCE`] listings
/// at a time; whether any was seen. A listing that fails leaves its job as publishing nothing
/// (the planner then assumes the worst for it).
async fn observe_checkpoints<B: TrainingBackend>(
    backend: &B,
    loaded: &mut Loaded,
    plan: &Plan,
) -> bool {
    let running = &loaded.snapshot.running;
    let queues: BTreeSet<&str> = plan
        .preemptions
        .iter()
        .filter_map(|p| running.iter().find(|r| r.job_id == p.victim_job_id))
        .map(|r| r.queue.as_str())
        .collect();
    let listed: Vec<(usize, SharedStr)> = running
        .iter()
        .zip(&loaded.checkpoint_uris)
        .enumerate()
        .filter(|(_, (r, _))| queues.contains(r.queue.as_str()))
        .filter_map(|(i, (_, uri))| Some((i, uri.clone()?)))
        .collect();
    let mut seen = false;
    let mut listings = futures::stream::iter(listed)
        .map(|(i, uri)| async move {
            let found = backend.latest_checkpoint(&uri).await;
            (i, uri, found)
        })
        .buffer_unordered(CHECKPOINT_LISTINGS_AT_ONCE);
    while let Some((i, uri, found)) = listings.next().await {
        match found {
            Ok(Some(checkpoint)) => {
                let job = &mut loaded.snapshot.running[i];
                job.checkpoint_ms = Some(checkpoint.at_ms);
                job.checkpoint_interval_ms = checkpoint.interval_ms;
                seen = true;
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(%uri, error = %e, "checkpoints not listed; the job counts as publishing none");
            }
        }
    }
    seen
}

/// What the usage `after` a dispatch would exceed, if anything: `"environment"` for the
/// environment's capacity limits, `"quota share"` for the limits of the job's quota share (its
/// own plus what it may borrow). A share the queue no longer has limits nothing.
///
/// A quota share's jobs may hold instances in other environments too (its queue was
/// re-pointed while they ran), so its usage is summed over every environment's document: the
/// others as the snapshot read them, which can only be more than they hold now (the share's new
/// dispatches all go to its queue's one environment, this one; elsewhere it only releases).
fn over_limit(
    snapshot: &Snapshot,
    job: &ServiceJob,
    dispatch: &Dispatch,
    after: &EnvironmentUsage,
    usage: &BTreeMap<String, Versioned<EnvironmentUsage>>,
) -> Option<&'static str> {
    let limits = snapshot
        .environments
        .iter()
        .find(|e| e.name == dispatch.environment.as_str())
        .map(|e| e.limits.as_slice())
        .unwrap_or_default();
    if !within_limits(limits, &after.instances) {
        return Some("environment");
    }
    let share_name = job.quota_share_name.as_deref()?;
    let share = snapshot
        .queues
        .iter()
        .find(|q| q.name == job.job_queue)
        .and_then(|q| match &q.policy {
            QueuePolicy::QuotaShare(shares) => shares.iter().find(|s| s.name == share_name),
            _ => None,
        })?;
    let key = quota_share_key(&job.job_queue, share_name);
    let mut in_use = after.quota_shares.get(&key)?.clone();
    let elsewhere = usage
        .iter()
        .filter(|(env, _)| env.as_str() != dispatch.environment.as_str())
        .filter_map(|(_, u)| u.value.quota_shares.get(&key));
    for counts in elsewhere {
        for (ty, n) in counts {
            *in_use.entry(ty.clone()).or_insert(0) += n;
        }
    }
    (!share.admits(&in_use)).then_some("quota share")
}

/// Whether a status reason has the code `code` (a [`SkipReason::code`], which never contains
/// ` - `): the text before ` - `, or all of it when there is none. Compared as a prefix, without
/// searching: a cycle asks this of every waiting head.
fn has_reason_code(reason: &str, code: &str) -> bool {
    reason
        .strip_prefix(code)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(" - "))
}

impl<S: ConfigStore + SchedulingStore, E: EventSink> Service<S, E> {
    /// Runs one scheduling cycle (see the module docs of `scheduling` for its steps).
    pub async fn run_cycle<B: TrainingBackend>(
        &self,
        backend: &B,
        config: &CycleConfig,
    ) -> Result<CycleReport, AppError> {
        self.run_cycle_with(backend, config, &[], None).await
    }

    /// [`Service::run_cycle`], planning `fresh` too: RUNNABLE jobs this process has just
    /// written, which an eventually consistent index may not show yet; and, when the pass holds
    /// the scheduler lease, dispatching with its `fence`.
    pub async fn run_cycle_with<B: TrainingBackend>(
        &self,
        backend: &B,
        config: &CycleConfig,
        fresh: &[RunnableHead],
        fence: Option<Fence>,
    ) -> Result<CycleReport, AppError> {
        let now = self.clock.now_ms();
        let started = std::time::Instant::now();
        let mut report = CycleReport::default();

        // 1. Snapshot.
        let mut loaded = self.load_snapshot(config, fresh).await?;
        loaded.fence = fence;

        // 2. Plan. A plan that preempts is made again with the checkpoints of its queues'
        // running jobs as observed now: what each candidate victim would lose decides which
        // ones go (listed at decision time only, so quiet cycles list nothing).
        let mut plan = plan_cycle(&loaded.snapshot, now, &config.planner);
        if !plan.preemptions.is_empty() && observe_checkpoints(backend, &mut loaded, &plan).await {
            // Its running jobs now carry this moment's checkpoints: not kept for the next cycle.
            loaded.kept.forget();
            plan = plan_cycle(&loaded.snapshot, now, &config.planner);
        }
        // A cycle with no job to plan decides nothing: no record.
        let record = config.record_decisions && !loaded.snapshot.pending.is_empty();
        let mut decision = record.then(|| {
            let id = self.ids.job_id();
            DecisionRecord::new(id, now, &loaded.snapshot, &config.planner, &plan)
        });

        // 3 and 4. Commit each dispatch, then launch it; nothing more once a newer lease
        // holder shows (in the snapshot, or in a usage document re-read after a conflict).
        for dispatch in &plan.dispatches {
            report.fenced = report.fenced || fenced_out(&loaded, now);
            if report.fenced {
                break;
            }
            self.dispatch(backend, &mut loaded, dispatch, now, config, &mut report)
                .await?;
        }
        report.fenced = report.fenced || fenced_out(&loaded, now);
        if report.fenced {
            tracing::warn!(
                token = fence.map(|f| f.token),
                "a pass holding a newer scheduler lease is dispatching; this one stands aside"
            );
        }

        // 4b. Preempt: mark each victim's attempt, then stop it. Its Stopped state change
        // requeues it (or fails it once preemptionRetriesBeforeTermination is spent) and releases
        // the capacity the preemptor waits for.
        for preemption in &plan.preemptions {
            if report.fenced {
                break;
            }
            if self
                .preempt(backend, &mut loaded, &preemption.victim_job_id, config)
                .await?
            {
                report.preemptions += 1;
                if matches!(preemption.reason, PreemptionReason::ReclaimBorrowed { .. }) {
                    report.reclaims += 1;
                    if !report.reclaimed_for.contains(&preemption.for_job_id) {
                        report.reclaimed_for.push(preemption.for_job_id.clone());
                    }
                }
                tracing::info!(victim = %preemption.victim_job_id, for_job = %preemption.for_job_id,
                    reason = ?preemption.reason, "preempting");
            }
            report.fenced = fenced_out(&loaded, now);
        }

        report.next_change_ms = plan.next_change_ms(now);
        report.borrowing_moved =
            report.dispatched > 0 && quota::dispatches_move_borrowing(&loaded.snapshot, &plan, now);

        // 5. Record why the others wait, and apply the queues' time limits to them.
        for skip in &plan.skips {
            match skip.reason {
                SkipReason::QuotaLent { .. } => report.lent_waits.push(skip.job_id.clone()),
                SkipReason::WaitingForPreemptedCapacity { .. }
                | SkipReason::WaitingForVictimCheckpoint { .. } => {
                    report.preemption_waits.push(skip.job_id.clone());
                }
                SkipReason::BorrowingAfterEntitledStart { .. } => report.borrowers_held += 1,
                _ => {}
            }
            self.record_skip(&loaded, skip, now, &mut report).await?;
        }

        // 6. Fair-share usage.
        self.account_usage(&loaded, now).await?;

        // 7. What readers are shown of why jobs wait: last, as nothing depends on it.
        self.record_waits(&loaded, &plan, now).await?;
        if let Some(decision) = &mut decision {
            decision.outcome = report.clone();
            decision.duration_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        }
        report.decision = decision.map(Box::new);
        self.keep_running(loaded);
        Ok(report)
    }

    /// Steps 3 and 4 for one dispatch: the job RUNNABLE → SCHEDULED with a new attempt and the
    /// environment's usage (with the cycle's fence, if any), in one version-checked commit;
    /// then the launch.
    async fn dispatch<B: TrainingBackend>(
        &self,
        backend: &B,
        loaded: &mut Loaded,
        dispatch: &Dispatch,
        now: i64,
        config: &CycleConfig,
        report: &mut CycleReport,
    ) -> Result<(), AppError> {
        let Some(waiting) = loaded.waiting.get(dispatch.job_id.as_str()) else {
            return Ok(());
        };
        // The job as the snapshot saw it, or a conflict: it changed since (another cycle
        // dispatched it, it was terminated), and the plan's assumption no longer holds.
        let stored = match self.store.get_job(&dispatch.job_id).await? {
            Some(stored) if stored.version == waiting.version => stored,
            _ => {
                report.conflicts += 1;
                return self.reread_usage(loaded, &dispatch.environment).await;
            }
        };
        let usage = loaded
            .usage
            .get(dispatch.environment.as_str())
            .cloned()
            .unwrap_or(Versioned {
                value: EnvironmentUsage {
                    environment: dispatch.environment.to_string(),
                    ..EnvironmentUsage::default()
                },
                version: 0,
            });
        let mut job = stored.value;
        let n = job.attempts.len() + 1;
        if job.transition(JobStatus::Scheduled, None, now).is_err() {
            return Ok(());
        }
        job.not_before = None;
        job.attempts.push(Attempt {
            stop_requested: None,
            failed_as: None,
            selected_instance_type: None,
            training_job_name: attempt_name(&job, n),
            training_job_arn: None,
            started_at: Some(now),
            stopped_at: None,
            status_reason: None,
            service_environment: Some(dispatch.environment.to_string()),
        });
        let mut new_usage = usage.value.clone();
        new_usage.add(&job);
        if loaded.fence.is_some() {
            new_usage.fence = loaded.fence;
        }
        // The plan counted capacity in use as the snapshot saw it: the environment's from its
        // usage document, the quota share's from the jobs an index (eventually consistent on
        // DynamoDB) shows holding capacity. The usage document this very commit version-checks
        // is the truth. No room there, for the environment or for the job's quota share: no
        // dispatch.
        if let Some(over) = over_limit(&loaded.snapshot, &job, dispatch, &new_usage, &loaded.usage)
        {
            report.over_limit += 1;
            tracing::warn!(job_id = %job.job_id, environment = %dispatch.environment, over,
                "not dispatched: the stored usage has no room (capacity in use was read from a \
                 lagging index)");
            return Ok(());
        }
        let writes = [
            Write::job(job.clone(), stored.version),
            Write::document(&new_usage, usage.version)?,
        ];
        match self.store.commit(&writes).await {
            Ok(()) => {}
            Err(StoreError::Conflict) => {
                report.conflicts += 1;
                return self.reread_usage(loaded, &dispatch.environment).await;
            }
            Err(e) => return Err(e.into()),
        }
        loaded.usage.insert(
            dispatch.environment.to_string(),
            Versioned {
                value: new_usage,
                version: usage.version + 1,
            },
        );
        if let Some(share) = job.share_identifier.as_deref() {
            let key = ShareKey {
                queue: job.job_queue.as_str().into(),
                share: share.into(),
            };
            *loaded.dispatched.entry(key).or_insert(0) += job.training.total_instances();
        }
        report.dispatched += 1;
        tracing::info!(job_id = %job.job_id, queue = %job.job_queue, attempt = n,
            environment = %dispatch.environment, "dispatched");
        self.publish_status(&job).await;
        self.launch(backend, &job, config, report).await
    }

    /// Step 5 for one waiting job: its skip reason, recorded when its code changes (`CAPACITY:…`,
    /// `PRIORITY:…`: the text before ` - `), and its queue's time limits applied. The figures
    /// after the code move from cycle to cycle; rewriting every waiting head whenever they do
    /// would cost a store write per head per cycle, so the text shows them as of when the job
    /// began waiting for that reason.
    async fn record_skip(
        &self,
        loaded: &Loaded,
        skip: &Skip,
        now: i64,
        report: &mut CycleReport,
    ) -> Result<(), AppError> {
        let Some(waiting) = loaded.waiting.get(skip.job_id.as_str()) else {
            return Ok(());
        };
        // During a capacity backoff Batch's CAPACITY reason says more than "backing off".
        let capacity_wait = matches!(skip.reason, SkipReason::Backoff { .. })
            && waiting
                .status_reason
                .as_deref()
                .is_some_and(retry::is_capacity_reason);
        let changed = !capacity_wait
            && !waiting
                .status_reason
                .as_deref()
                .is_some_and(|r| has_reason_code(r, skip.reason.code()));
        // Most waiting jobs keep their reason and their queue has no time limits: nothing to
        // write, so spare the read of the job.
        if !changed && !waiting.time_limits {
            return Ok(());
        }
        // Without time limits only the reason is written, in place.
        if !waiting.time_limits {
            let reason = Some(skip.reason.to_string());
            return match self
                .store
                .set_status_reason(&skip.job_id, waiting.version, reason)
                .await
            {
                Ok(_) => {
                    report.reasons_updated += 1;
                    Ok(())
                }
                // Changed since the snapshot: the next cycle sees the new state.
                Err(StoreError::Conflict) => Ok(()),
                Err(e) => Err(e.into()),
            };
        }
        // Changed since the snapshot: the next cycle sees the new state.
        let stored = match self.store.get_job(&skip.job_id).await? {
            Some(stored) if stored.version == waiting.version => stored,
            _ => return Ok(()),
        };
        let actions = loaded
            .queues
            .get(&stored.value.job_queue)
            .map_or(&[][..], |q| &q.job_state_time_limit_actions[..]);
        let mut job = stored.value.clone();
        if changed {
            job.status_reason = Some(skip.reason.to_string());
        }
        if let Some(reason) = retry::time_limit_action(actions, &job, now) {
            if job.transition(JobStatus::Failed, Some(reason), now).is_ok() {
                job.is_terminated = true;
                if self.store.update_job(&job, stored.version).await.is_ok() {
                    self.publish_status(&job).await;
                }
            }
            return Ok(());
        }
        if !changed {
            return Ok(());
        }
        match self.store.update_job(&job, stored.version).await {
            Ok(_) => report.reasons_updated += 1,
            // Changed since the snapshot: the next cycle sees the new state.
            Err(StoreError::Conflict) => {}
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }

    /// Step 6: each fair share's decayed usage advances to `now` with the instances it held.
    async fn account_usage(&self, loaded: &Loaded, now: i64) -> Result<(), AppError> {
        // The records were read with the snapshot; a concurrent cycle that wrote one since makes
        // that write conflict, which is harmless (it accounted the same interval). Every share
        // that holds instances or has a record: the two maps merged in key order. A record is
        // written only when what its share holds changed: until then it says all there is.
        for (key, held, existing) in merge_by_key(loaded.held(), loaded.share_usage.iter()) {
            let held = held.unwrap_or(0);
            let Some(half_life) = loaded.fair_queues.get(key.queue.as_str()) else {
                continue;
            };
            let (usage, version) = match existing {
                Some(r) if r.value.held == held => continue,
                Some(r) => (r.value.at(now, *half_life), r.version),
                None if held == 0 => continue,
                None => (
                    ShareUsage {
                        instance_seconds: 0.0,
                        at_ms: now,
                    },
                    0,
                ),
            };
            let record = ShareUsageRecord {
                queue: key.queue.clone(),
                share: key.share.clone(),
                usage,
                held,
            };
            match self
                .store
                .commit(&[Write::document_value(record, version)])
                .await
            {
                // A concurrent cycle accounted the same interval: nothing is lost.
                Ok(()) | Err(StoreError::Conflict) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_code_is_the_text_before_the_dash() {
        let code = "CAPACITY:SERVICE_ENVIRONMENT_FULL";
        assert!(has_reason_code(code, code));
        assert!(has_reason_code(&format!("{code} - needs 2, 1 free"), code));
        assert!(!has_reason_code(&format!("{code}X - needs 2"), code));
        assert!(!has_reason_code("CAPACITY - needs 2", code));
        assert!(!has_reason_code("", code));
    }
}
