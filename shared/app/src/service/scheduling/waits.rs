//! Step 7 of a cycle: each line's [`LineWaits`], so that a waiting job's reason shows the
//! figures of the latest cycle without the cycle writing the job.

use std::collections::BTreeMap;

use trainyard_scheduler::{Plan, SharedStr};

use super::snapshot::Loaded;
use crate::error::AppError;
use crate::ports::{
    ConfigStore, Document, EventSink, JobWait, LineWaits, SchedulingStore, StoreError, Write,
};
use crate::service::Service;

/// Each line's waits as `plan` leaves them, in the order the plan first skipped a job of the
/// line (the order lines were served), ranked within their queues. A line the store has waits
/// for but the plan skipped nothing of (its jobs all left, or were dispatched) gets an empty
/// document, so that no reader takes stale waits for current ones.
fn line_waits(loaded: &Loaded, plan: &Plan, now: i64) -> Vec<LineWaits> {
    // Each line being built, with its stored waits (looked up once, not once a job) and how
    // far ahead in them the last job found was (the jobs before it that left the line).
    let mut lines: Vec<(LineWaits, Vec<JobWait>, Option<&LineWaits>, usize)> = Vec::new();
    let mut index: foldhash::HashMap<(&str, &str), usize> = foldhash::HashMap::default();
    // Consecutive skips are mostly of one line: the last one's is tried first.
    let mut last: Option<(&SharedStr, &SharedStr, usize)> = None;
    for skip in &plan.skips {
        let Some(waiting) = loaded.waiting.get(&skip.job_id) else {
            continue;
        };
        let same = |(queue, share, _): &(&SharedStr, &SharedStr, usize)| {
            **queue == waiting.queue && **share == waiting.share
        };
        let i = match last.filter(same) {
            Some((_, _, i)) => i,
            None => *index
                .entry((&waiting.queue, &waiting.share))
                .or_insert_with(|| {
                    let line = LineWaits {
                        queue: waiting.queue.to_string(),
                        share: waiting.share.to_string(),
                        at_ms: now,
                        ..LineWaits::default()
                    };
                    let stored = loaded.line_waits.get(&line.key()).map(|s| &s.value);
                    lines.push((line, Vec::new(), stored, 0));
                    lines.len() - 1
                }),
        };
        last = Some((&waiting.queue, &waiting.share, i));
        let (line, waits, stored, shift) = &mut lines[i];
        line.planned += 1;
        if waits.len() >= LineWaits::MAX_WAITS {
            continue;
        }
        // Waiting for the same kind of thing as before: since when it did.
        let before = stored.and_then(|s| s.wait_near(&skip.job_id, waits.len() + *shift));
        if let Some((j, _)) = before {
            *shift = j.saturating_sub(waits.len());
        }
        let since_ms = before
            .filter(|(_, w)| {
                std::mem::discriminant(&w.reason) == std::mem::discriminant(&skip.reason)
            })
            .map_or(now, |(_, w)| w.since_ms);
        waits.push(JobWait {
            job_id: skip.job_id.clone(),
            reason: skip.reason.clone(),
            since_ms,
        });
    }
    let mut lines: Vec<LineWaits> = lines
        .into_iter()
        .map(|(mut line, waits, _, _)| {
            line.waits = waits.into();
            line
        })
        .collect();
    let mut per_queue: BTreeMap<String, u32> = BTreeMap::new();
    for line in &mut lines {
        let rank = per_queue.entry(line.queue.clone()).or_insert(0);
        *rank += 1;
        line.rank = *rank;
    }
    for line in &mut lines {
        line.lines = per_queue[&line.queue];
    }
    // Lines that waited and now do not.
    for stored in loaded.line_waits.values() {
        let stored = &stored.value;
        let line = (stored.queue.as_str(), stored.share.as_str());
        if !stored.waits.is_empty() && !index.contains_key(&line) {
            lines.push(LineWaits {
                queue: stored.queue.clone(),
                share: stored.share.clone(),
                at_ms: now,
                ..LineWaits::default()
            });
        }
    }
    lines
}

impl<S: ConfigStore + SchedulingStore, E: EventSink> Service<S, E> {
    /// Step 7: writes each line's waits that changed since the stored ones (not merely their
    /// time): at most one small document per line per cycle, however long the line.
    pub(super) async fn record_waits(
        &self,
        loaded: &Loaded,
        plan: &Plan,
        now: i64,
    ) -> Result<(), AppError> {
        for line in line_waits(loaded, plan, now) {
            let stored = loaded.line_waits.get(&line.key());
            if stored.is_some_and(|s| line.same_as(&s.value)) {
                continue;
            }
            let version = stored.map_or(0, |s| s.version);
            match self
                .store
                .commit(&[Write::document_value(line, version)])
                .await
            {
                // A concurrent cycle wrote the line's waits: as current as these.
                Ok(()) | Err(StoreError::Conflict) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}
