//! When a waiting job will start: a forecast round, run by a host every minute or so apart from
//! the cycles, and how its estimates are shown.
//!
//! A round reads the snapshot a cycle would, but with the first
//! [`ESTIMATED_PER_LINE`] waiting jobs of every line, lets the host's
//! [`Forecaster`] learn what started and ended since the last round, estimates every waiting job
//! it read and replaces each queue's [`StartEstimates`] document. Readers append a job's estimate
//! to its `statusReason` (after Batch's `CATEGORY:CODE - message`, so clients, alarms and globs
//! keep working) and `trainyard why` shows it in full. A job the latest round did not read has
//! no estimate.

use std::collections::BTreeMap;

use trainyard_domain::job::{JobStatus, ServiceJob};
use trainyard_domain::time::UtcTime;
use trainyard_forecast::{Estimate, Forecaster, Learned};

use super::scheduling::CycleConfig;
use crate::error::AppError;
use crate::ports::{
    ConfigStore, Document, Event, EventSink, ForecastMemory, SchedulingStore, StartEstimates,
    StoreError, Write,
};
use crate::service::Service;

/// Waiting jobs a round estimates per line (Slurm's backfill looks at 500 jobs in all).
pub const ESTIMATED_PER_LINE: usize = 1_000;

/// Estimates a queue's document keeps at most: those that start soonest. About 300 bytes each,
/// so a document stays well within DynamoDB's 400 KB item; the jobs past them show no estimate.
pub const KEPT_PER_QUEUE: usize = 1_000;

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

/// Keeps the `keep` estimates that start soonest (by p50; beyond the horizon last), ties in the
/// order given (line order).
fn keep_soonest<T>(found: &mut Vec<(T, &Estimate)>, keep: usize) {
    found.sort_by_key(|(_, e)| (e.p50_ms.is_none(), e.p50_ms));
    found.truncate(keep);
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
        let mut per_queue: BTreeMap<String, StartEstimates> = snapshot
            .queues
            .iter()
            .map(|q| {
                let doc = StartEstimates {
                    queue: q.name.clone(),
                    at_ms: now,
                    jobs: BTreeMap::new(),
                    coverage: forecaster.calibration().queue_coverage(&q.name),
                };
                (q.name.clone(), doc)
            })
            .collect();
        let mut per_queue_estimates: BTreeMap<&str, Vec<(&str, &Estimate)>> = BTreeMap::new();
        for job in &snapshot.pending {
            if let Some(estimate) = estimates.get(&job.job_id) {
                per_queue_estimates
                    .entry(job.queue.as_str())
                    .or_default()
                    .push((job.job_id.as_str(), estimate));
            }
        }
        for (queue, mut found) in per_queue_estimates {
            let Some(doc) = per_queue.get_mut(queue) else {
                continue;
            };
            keep_soonest(&mut found, KEPT_PER_QUEUE);
            for (job_id, estimate) in found {
                doc.jobs.insert(job_id.to_owned(), estimate.clone());
            }
        }
        let mut moved = 0;
        let mut queues = Vec::with_capacity(per_queue.len());
        for doc in per_queue.into_values() {
            queues.push(QueueEstimates {
                queue: doc.queue.clone(),
                jobs: doc.jobs.len(),
                coverage: doc.coverage,
            });
            let before = self.replace_estimates(&doc).await?;
            for (job_id, estimate) in &doc.jobs {
                let Some(previous) = before.as_ref().and_then(|b| b.jobs.get(job_id)) else {
                    continue;
                };
                if moved_a_lot(previous.p50_ms, estimate.p50_ms, now) {
                    moved += 1;
                    self.events
                        .publish(Event::StartEstimateMoved {
                            job_id: job_id.clone(),
                            job_queue: doc.queue.clone(),
                            previous_p50_ms: previous.p50_ms,
                            p50_ms: estimate.p50_ms,
                        })
                        .await;
                }
            }
        }
        Ok(EstimateReport {
            jobs: estimates.len(),
            resolved: learnt.resolved.len(),
            moved,
            per_queue: queues,
        })
    }

    /// Replaces a queue's estimates (a queue without waiting jobs keeps an empty document only
    /// if it had one); the estimates it replaced.
    async fn replace_estimates(
        &self,
        doc: &StartEstimates,
    ) -> Result<Option<StartEstimates>, AppError> {
        let mut replaced = None;
        for _ in 0..3 {
            let stored = self
                .store
                .get_document::<StartEstimates>(&doc.key())
                .await?;
            let version = match &stored {
                Some(s) if s.value.jobs.is_empty() && doc.jobs.is_empty() => return Ok(None),
                Some(s) => s.version,
                None if doc.jobs.is_empty() => return Ok(None),
                None => 0,
            };
            replaced = stored.map(|s| s.value);
            match self
                .store
                .commit(&[Write::document_value(doc.clone(), version)])
                .await
            {
                Ok(()) => break,
                // Another round wrote it meanwhile: read its version and write ours over it.
                Err(StoreError::Conflict) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(replaced)
    }

    /// The latest estimate of `job`, if it is RUNNABLE and the latest round estimated it.
    pub async fn start_estimate(&self, job: &ServiceJob) -> Result<Option<Estimate>, AppError> {
        let mut one = self.start_estimates(std::slice::from_ref(job)).await?;
        Ok(one.pop().flatten())
    }

    /// The latest estimate of each of `jobs` (`None` for those not RUNNABLE or not estimated):
    /// one read per queue among them.
    pub async fn start_estimates(
        &self,
        jobs: &[ServiceJob],
    ) -> Result<Vec<Option<Estimate>>, AppError> {
        let mut queues: BTreeMap<&str, Option<StartEstimates>> = BTreeMap::new();
        let mut out = Vec::with_capacity(jobs.len());
        for job in jobs {
            if job.status != JobStatus::Runnable {
                out.push(None);
                continue;
            }
            if !queues.contains_key(job.job_queue.as_str()) {
                let doc = self
                    .store
                    .get_document::<StartEstimates>(&job.job_queue)
                    .await?;
                queues.insert(&job.job_queue, doc.map(|d| d.value));
            }
            let doc = queues[job.job_queue.as_str()].as_ref();
            out.push(doc.and_then(|d| d.jobs.get(&job.job_id)).cloned());
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
    use trainyard_forecast::Estimate;

    use super::{keep_soonest, moved_a_lot};

    #[test]
    fn a_queue_keeps_the_estimates_that_start_soonest() {
        let estimate = |p50_ms: Option<i64>| Estimate {
            at_ms: 0,
            p50_ms,
            p90_ms: p50_ms,
            within: [0.0; 3],
            raw_ms: [p50_ms, p50_ms],
            coverage: None,
            p90_from: trainyard_forecast::P90From::Rollouts,
            shadow_ms: None,
        };
        let all = [
            estimate(None),
            estimate(Some(30)),
            estimate(Some(10)),
            estimate(Some(30)),
            estimate(Some(20)),
        ];
        let mut found: Vec<(usize, &Estimate)> = all.iter().enumerate().collect();
        keep_soonest(&mut found, 3);
        let kept: Vec<usize> = found.iter().map(|(i, _)| *i).collect();
        assert_eq!(kept, [2, 4, 1], "10, 20, then the first of the two at 30");
        let mut found: Vec<(usize, &Estimate)> = all.iter().enumerate().collect();
        keep_soonest(&mut found, 10);
        assert_eq!(
            found.last().map(|(i, _)| *i),
            Some(0),
            "beyond the horizon last"
        );
    }

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
