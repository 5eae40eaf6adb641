//! When a waiting job will start: a forecast round, run by a host every minute or so apart from
//! the cycles, and how its estimates are shown.
//!
//! A round reads the snapshot a cycle would, but with the first
//! [`ESTIMATED_PER_LINE`] waiting jobs of every line, lets the host's
//! [`Forecaster`] learn what started and ended since the last round, estimates every waiting job
//! it read, and replaces each line's [`LineEstimates`] document and each queue's
//! [`StartEstimates`] summary (which names the lines, so that the next round deletes the
//! estimates of a line whose jobs have all gone). Readers append a job's estimate to its
//! `statusReason` (after Batch's `CATEGORY:CODE - message`, so clients, alarms and globs keep
//! working) and `trainyard why` shows it in full. A job the latest round did not read (past the
//! first [`ESTIMATED_PER_LINE`] of its line, or RUNNABLE again since) has no estimate.

use std::collections::BTreeMap;

use futures::{StreamExt, TryStreamExt};

use trainyard_domain::job::{JobStatus, ServiceJob};
use trainyard_domain::order::share_key;
use trainyard_domain::time::UtcTime;
use trainyard_forecast::{Estimate, Forecaster, Learned};

use super::scheduling::CycleConfig;
use crate::error::AppError;
use crate::ports::{
    ConfigStore, Document, Event, EventSink, ForecastMemory, LineEstimates, SchedulingStore,
    StartEstimates, StoreError, Write, quota_share_key,
};
use crate::service::Service;

/// Waiting jobs a round estimates per line (Slurm's backfill looks at 500 jobs in all): a line's
/// document holds at most this many, about 300 bytes each, within DynamoDB's 400 KB item.
pub const ESTIMATED_PER_LINE: usize = 1_000;

/// Lines whose estimates a round writes at once (each a read and a conditional write): at 1,000
/// lines, one at a time would be 2,000 round trips end to end.
const LINE_WRITES_AT_ONCE: usize = 16;

/// How long a host's round runs rollouts for, at most, once it has run the forecaster's
/// minimum (`trainyard_forecast::Options::min_rollouts`): at 10,000 waiting jobs over 1,000
/// shares a rollout takes about a second on one core, so large backlogs get fewer rollouts
/// rather than rounds that come minutes apart (docs/benchmarks.md, "Start-time estimates").
pub const ROUND_BUDGET: std::time::Duration = std::time::Duration::from_secs(10);

/// A host's forecaster: the default options, rollouts bounded by `budget` per round.
pub fn host_forecaster(budget: std::time::Duration) -> Forecaster {
    Forecaster::new(trainyard_forecast::Options {
        budget: Some(budget),
        ..trainyard_forecast::Options::default()
    })
}

/// What a forecast round did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EstimateReport {
    /// Waiting jobs estimated.
    pub jobs: usize,
    /// Estimates whose job started since the last round (the calibration learnt from them).
    pub resolved: usize,
    /// Jobs whose p50 moved a lot since the last round ([`Event::StartEstimateMoved`]).
    pub moved: usize,
    /// Per queue, in name order: its jobs estimated, and how well its estimates have covered
    /// the starts that followed (`None` before any), for the hosts' metrics.
    pub per_queue: Vec<QueueEstimates>,
}

/// One queue's share of a forecast round ([`EstimateReport::per_queue`]).
#[derive(Debug, Clone, PartialEq)]
pub struct QueueEstimates {
    /// The queue.
    pub queue: String,
    /// Its waiting jobs estimated in the round.
    pub jobs: usize,
    /// Its running coverage ([`trainyard_forecast::Calibration::queue_coverage`]).
    pub coverage: Option<trainyard_forecast::Coverage>,
}

/// Whether a p50 start moved a lot at `now_ms`: by more than max(10 minutes, 20% of the wait the
/// previous one gave), or into or out of the horizon.
pub fn moved_a_lot(previous_ms: Option<i64>, now_p50_ms: Option<i64>, now_ms: i64) -> bool {
    match (previous_ms, now_p50_ms) {
        (Some(before), Some(after)) => {
            let wait_ms = (before - now_ms).max(0);
            (after - before).abs() > (wait_ms / 5).max(600_000)
        }
        (None, None) => false,
        _ => true,
    }
}

/// The documents a round replaces: a queue's [`StartEstimates`] and its lines' [`LineEstimates`].
trait Estimates: Document {
    /// Whether it holds no estimate.
    fn is_empty(&self) -> bool;
    /// Whether an empty one is deleted rather than written (a queue's stays, for its coverage).
    const DELETED_EMPTY: bool;
}

impl Estimates for StartEstimates {
    fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }
    const DELETED_EMPTY: bool = false;
}

impl Estimates for LineEstimates {
    fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }
    const DELETED_EMPTY: bool = true;
}

/// A host's forecaster and the [`ForecastMemory`] that keeps what it learns, if any: the first
/// [`Self::restore`] starts it from what was kept, and [`Self::keep`] after a round keeps what it
/// learnt since. Until a read has succeeded it keeps nothing, so that a failed read never ends in
/// an empty state overwriting a full one. Both are cancel-safe: a host may bound them by its
/// deadline and drop them; nothing changes until the read or write has completed.
pub struct KeptForecaster {
    forecaster: Forecaster,
    memory: Option<Box<dyn ForecastMemory>>,
    /// Whether what was kept has been read (or there is nowhere to read it from).
    restored: bool,
    /// What was last read or written (nothing new, nothing written).
    kept: Option<Learned>,
}

impl KeptForecaster {
    /// `forecaster`, keeping what it learns in this process only.
    pub fn new(forecaster: Forecaster) -> Self {
        Self {
            forecaster,
            memory: None,
            restored: false,
            kept: None,
        }
    }

    /// Keeps what it learns in `memory` from now on (read at the next [`Self::restore`]).
    pub fn keep_in(&mut self, memory: impl ForecastMemory + 'static) {
        self.memory = Some(Box::new(memory));
        self.restored = false;
        self.kept = None;
    }

    /// Whether what it learns is kept anywhere.
    pub fn has_memory(&self) -> bool {
        self.memory.is_some()
    }

    /// The forecaster, for a round.
    pub fn forecaster_mut(&mut self) -> &mut Forecaster {
        &mut self.forecaster
    }

    /// The forecaster.
    pub fn forecaster(&self) -> &Forecaster {
        &self.forecaster
    }

    /// Starts from what the memory kept, the first time it succeeds; later calls do nothing.
    /// An error leaves the forecaster as it is and is tried again at the next call.
    pub async fn restore(&mut self) -> Result<(), StoreError> {
        if self.restored {
            return Ok(());
        }
        let Some(memory) = self.memory.as_ref() else {
            return Ok(());
        };
        let kept = memory.load().await?;
        if let Some(learned) = kept.clone() {
            let options = self.forecaster.options().clone();
            self.forecaster = Forecaster::with_learned(options, learned);
            tracing::info!(
                runtimes = self.forecaster.history().runtimes_observed(),
                "forecaster restored from what was kept"
            );
        }
        self.restored = true;
        self.kept = kept;
        Ok(())
    }

    /// Keeps what the forecaster learnt, when it learnt something since it was last kept or
    /// read: `Ok(true)` when it wrote. Nothing before a [`Self::restore`] has succeeded.
    pub async fn keep(&mut self) -> Result<bool, StoreError> {
        let Some(memory) = self.memory.as_ref().filter(|_| self.restored) else {
            return Ok(false);
        };
        if self
            .kept
            .as_ref()
            .is_some_and(|kept| self.forecaster.has_learned_only(kept))
        {
            return Ok(false);
        }
        let learned = self.forecaster.learned();
        memory.save(&learned).await?;
        self.kept = Some(learned);
        Ok(true)
    }
}

impl<S: ConfigStore + SchedulingStore, E: EventSink> Service<S, E> {
    /// One forecast round with `forecaster`'s state (see the module docs).
    pub async fn estimate_start_times(
        &self,
        forecaster: &mut Forecaster,
        config: &CycleConfig,
    ) -> Result<EstimateReport, AppError> {
        let snapshot = self.forecast_snapshot(config, ESTIMATED_PER_LINE).await?;
        let now = self.clock.now_ms();
        let mut departed = BTreeMap::new();
        for id in forecaster.departed(&snapshot) {
            if let Some(job) = self.store.get_job(&id).await? {
                departed.insert(id.to_string(), job.value);
            }
        }
        let learnt = forecaster.learn(&snapshot, &mut |id| departed.get(id).cloned());
        let estimates = forecaster.estimate(now, &snapshot, &config.planner, true, |_| ());
        // Each line's estimates, in the snapshot's order of queues and lines.
        let mut lines: BTreeMap<&str, BTreeMap<&str, LineEstimates>> = snapshot
            .queues
            .iter()
            .map(|q| (q.name.as_str(), BTreeMap::new()))
            .collect();
        for job in &snapshot.pending {
            let (Some(estimate), Some(queue)) = (
                estimates.get(&job.job_id),
                lines.get_mut(job.queue.as_str()),
            ) else {
                continue;
            };
            let share = job.share.as_deref().unwrap_or("");
            queue
                .entry(share)
                .or_insert_with(|| LineEstimates {
                    queue: job.queue.to_string(),
                    share: share.to_owned(),
                    jobs: BTreeMap::new(),
                })
                .jobs
                .insert(job.job_id.to_string(), estimate.clone());
        }
        let mut moved = 0;
        let mut queues = Vec::with_capacity(lines.len());
        for (queue, lines) in lines {
            let summary = StartEstimates {
                queue: queue.to_owned(),
                at_ms: now,
                estimated: lines.values().map(|l| l.jobs.len()).sum(),
                lines: lines.keys().map(|s| (*s).to_owned()).collect(),
                coverage: forecaster.calibration().queue_coverage(queue),
            };
            queues.push(QueueEstimates {
                queue: summary.queue.clone(),
                jobs: summary.estimated,
                coverage: summary.coverage,
            });
            let before = self.replace_estimates(&summary).await?;
            // Collected first: a lazy map over the lines trips the compiler's `Send` check when
            // the round runs in a spawned task.
            let writes: Vec<_> = lines
                .values()
                .map(|doc| self.replace_estimates(doc))
                .collect();
            let replaced: Vec<Option<LineEstimates>> = futures::stream::iter(writes)
                .buffered(LINE_WRITES_AT_ONCE)
                .try_collect()
                .await?;
            for (doc, before) in lines.values().zip(replaced) {
                if let Some(before) = before {
                    moved += self.announce_moves(&before, doc, now).await;
                }
            }
            // Lines whose jobs have all started or left since: their estimates go.
            let gone = before.iter().flat_map(|b| &b.lines);
            for share in gone.filter(|share| !lines.contains_key(share.as_str())) {
                let emptied = LineEstimates {
                    queue: summary.queue.clone(),
                    share: share.clone(),
                    jobs: BTreeMap::new(),
                };
                self.replace_estimates(&emptied).await?;
            }
        }
        Ok(EstimateReport {
            jobs: estimates.len(),
            resolved: learnt.resolved.len(),
            moved,
            per_queue: queues,
        })
    }

    /// Publishes [`Event::StartEstimateMoved`] for each job of `after` whose p50 moved a lot
    /// since `before`; how many.
    async fn announce_moves(
        &self,
        before: &LineEstimates,
        after: &LineEstimates,
        now: i64,
    ) -> usize {
        let mut moved = 0;
        for (job_id, estimate) in &after.jobs {
            let Some(previous) = before.jobs.get(job_id) else {
                continue;
            };
            if moved_a_lot(previous.p50_ms, estimate.p50_ms, now) {
                moved += 1;
                self.events
                    .publish(Event::StartEstimateMoved {
                        job_id: job_id.clone(),
                        job_queue: after.queue.clone(),
                        previous_p50_ms: previous.p50_ms,
                        p50_ms: estimate.p50_ms,
                    })
                    .await;
            }
        }
        moved
    }

    /// Replaces a queue's or a line's estimates with `doc`; what it replaced. An empty `doc` is
    /// not written where none or an empty one is stored, and deletes a line's.
    async fn replace_estimates<D: Estimates>(&self, doc: &D) -> Result<Option<D>, AppError> {
        let key = doc.key();
        for _ in 0..3 {
            let stored = self.store.get_document::<D>(&key).await?;
            let write = match &stored {
                Some(s) if doc.is_empty() && D::DELETED_EMPTY => {
                    Write::delete_document::<D>(key.clone(), s.version)
                }
                Some(s) if s.value.is_empty() && doc.is_empty() => return Ok(None),
                Some(s) => Write::document_value(doc.clone(), s.version),
                None if doc.is_empty() => return Ok(None),
                None => Write::document_value(doc.clone(), 0),
            };
            match self.store.commit(&[write]).await {
                Ok(()) => return Ok(stored.map(|s| s.value)),
                // Another round wrote it meanwhile: read its version and write ours over it.
                Err(StoreError::Conflict) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(None)
    }

    /// The latest estimate of `job`, if it is RUNNABLE and the latest round estimated it.
    pub async fn start_estimate(&self, job: &ServiceJob) -> Result<Option<Estimate>, AppError> {
        let mut one = self.start_estimates(std::slice::from_ref(job)).await?;
        Ok(one.pop().flatten())
    }

    /// The latest estimate of each of `jobs` (`None` for those not RUNNABLE or not estimated
    /// since they last became RUNNABLE): one read per line among them.
    pub async fn start_estimates(
        &self,
        jobs: &[ServiceJob],
    ) -> Result<Vec<Option<Estimate>>, AppError> {
        let mut lines: BTreeMap<String, Option<LineEstimates>> = BTreeMap::new();
        let mut out = Vec::with_capacity(jobs.len());
        for job in jobs {
            if job.status != JobStatus::Runnable {
                out.push(None);
                continue;
            }
            let key = quota_share_key(&job.job_queue, share_key(job));
            if !lines.contains_key(&key) {
                let doc = self.store.get_document::<LineEstimates>(&key).await?;
                lines.insert(key.clone(), doc.map(|d| d.value));
            }
            // Made while the job waited, not during an earlier wait it has since left.
            let since = job.runnable_at.unwrap_or(job.created_at);
            let estimate = lines[&key]
                .as_ref()
                .and_then(|d| d.jobs.get(&job.job_id))
                .filter(|e| e.at_ms >= since);
            out.push(estimate.cloned());
        }
        Ok(out)
    }

    /// Appends each RUNNABLE job's estimate to its `statusReason`; the estimates, in the order
    /// of `jobs`, for callers that show them in full.
    pub(crate) async fn with_start_estimates(
        &self,
        jobs: &mut [ServiceJob],
    ) -> Result<Vec<Option<Estimate>>, AppError> {
        let estimates = self.start_estimates(jobs).await?;
        for (job, estimate) in jobs.iter_mut().zip(&estimates) {
            if let (Some(estimate), Some(reason)) = (estimate, job.status_reason.as_mut()) {
                reason.push_str("; ");
                reason.push_str(&describe(estimate));
            }
        }
        Ok(estimates)
    }
}

/// An estimate in words, for a `statusReason`: `start p50 2026-12-02 14:40:00 UTC, p90
/// 2026-12-02 16:10:00 UTC (calibrated: 91% of the last 1000 starts by their p90)`.
pub fn describe(estimate: &Estimate) -> String {
    let when = |at: Option<i64>| match at {
        Some(at) => format!("{} UTC", UtcTime(at)),
        None => "beyond the horizon".to_owned(),
    };
    let calibration = match &estimate.coverage {
        Some(c) => format!(
            "calibrated: {:.0}% of the last {} starts by their p90",
            c.p90 * 100.0,
            c.outcomes
        ),
        None => "uncalibrated".to_owned(),
    };
    format!(
        "start p50 {}, p90 {} ({calibration})",
        when(estimate.p50_ms),
        when(estimate.p90_ms)
    )
}

#[cfg(test)]
mod tests {
    use super::moved_a_lot;

    #[test]
    fn a_move_is_worth_an_event_beyond_ten_minutes_or_a_fifth_of_the_wait() {
        let min = 60_000;
        // A start 10 hours away may move 2 hours; one 20 minutes away, 10 minutes.
        assert!(!moved_a_lot(Some(600 * min), Some(720 * min), 0));
        assert!(moved_a_lot(Some(600 * min), Some(721 * min), 0));
        assert!(!moved_a_lot(Some(20 * min), Some(30 * min), 0));
        assert!(moved_a_lot(Some(20 * min), Some(31 * min), 0));
        assert!(
            moved_a_lot(Some(20 * min), Some(9 * min), 0),
            "earlier counts too"
        );
        assert!(moved_a_lot(Some(20 * min), None, 0), "out of the horizon");
        assert!(moved_a_lot(None, Some(20 * min), 0), "into it");
        assert!(!moved_a_lot(None, None, 0));
    }
}
