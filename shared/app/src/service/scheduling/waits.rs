//! Step 7 of a cycle: each line's [`LineWaits`], so that a waiting job's reason shows the
//! figures of the latest cycle without the cycle writing the job.
//!
//! What it costs: one small [`WaitDigests`] document a queue is read with the snapshot; a line
//! whose waits changed (by digest) is read, to carry since when each job waits, and rewritten;
//! a queue with such a line has its digests rewritten. A cycle that changes nothing a reader is
//! shown writes nothing.

use std::cmp::Reverse;
use std::collections::BTreeMap;

use trainyard_scheduler::{PendingJob, Plan, Skip};

use super::snapshot::Loaded;
use crate::error::AppError;
use crate::ports::{
    ConfigStore, Document, EventSink, JobWait, LineDigest, LinePlace, LineWaits, SchedulingStore,
    StoreError, WaitDigests, Write,
};
use crate::service::Service;

/// One line's waits as a plan leaves them, read in place: only a line whose digest changed is
/// copied into a [`LineWaits`] to be written.
struct PlannedLine<'p> {
    queue: &'p str,
    share: &'p str,
    rank: u32,
    lines: u32,
    /// The first [`LineWaits::MAX_WAITS`] skips of the line's jobs, in the plan's order.
    skips: Vec<&'p Skip>,
    /// Of those, the job furthest back in line.
    furthest: Option<&'p PendingJob>,
}

/// Where `job` stands in its line ([`LinePlace`]).
fn place(job: &PendingJob) -> LinePlace {
    let (Reverse(priority), line_at_ms, _) = rank(job);
    LinePlace {
        priority,
        line_at_ms,
        job_id: job.job_id.clone(),
    }
}

/// `job`'s sort key in its line, as [`LinePlace::rank`]'s: priority counts only within a share.
fn rank(job: &PendingJob) -> (Reverse<u32>, i64, &str) {
    let priority = if job.share.is_some() { job.priority } else { 0 };
    (Reverse(priority), job.line_at_ms(), job.job_id.as_str())
}

impl PlannedLine<'_> {
    /// [`LineWaits::digest`] of [`PlannedLine::waits`], without building them.
    fn digest(&self) -> u64 {
        let waits = self.skips.iter().map(|s| (s.job_id.as_str(), &s.reason));
        LineWaits::digest_of(self.rank, self.lines, waits, self.furthest.map(rank))
    }

    /// The line's waits, each job waiting since `now` (the stored waits carry the true times).
    fn waits(&self, now: i64) -> LineWaits {
        let waits = self.skips.iter().map(|skip| JobWait {
            job_id: skip.job_id.clone(),
            reason: skip.reason.clone(),
            since_ms: now,
        });
        LineWaits {
            queue: self.queue.to_owned(),
            share: self.share.to_owned(),
            at_ms: now,
            rank: self.rank,
            lines: self.lines,
            waits: waits.collect(),
            furthest: self.furthest.map(place),
        }
    }
}

/// Each line's waits as `plan` leaves them, in the order the plan first skipped a job of the
/// line (the order lines were served), ranked within their queues. A line that named jobs
/// before but of which the plan skipped nothing (its jobs all left, or were dispatched) comes
/// with no waits, so that no reader takes stale waits for current ones.
fn planned_lines<'p>(loaded: &'p Loaded, plan: &'p Plan) -> Vec<PlannedLine<'p>> {
    let mut lines: Vec<PlannedLine<'p>> = Vec::new();
    let mut index: foldhash::HashMap<(&str, &str), usize> = foldhash::HashMap::default();
    // Consecutive skips are mostly of one line: the last one's is tried first.
    let mut last: Option<(&str, &str, usize)> = None;
    for skip in &plan.skips {
        let Some((_, job)) = loaded.waiting_job(&skip.job_id) else {
            continue;
        };
        let (queue, share) = (job.queue.as_str(), job.share.as_deref().unwrap_or_default());
        let same = |(q, s, _): &(&str, &str, usize)| *q == queue && *s == share;
        let i = match last.filter(same) {
            Some((_, _, i)) => i,
            None => *index.entry((queue, share)).or_insert_with(|| {
                lines.push(PlannedLine {
                    queue,
                    share,
                    rank: 0,
                    lines: 0,
                    skips: Vec::new(),
                    furthest: None,
                });
                lines.len() - 1
            }),
        };
        last = Some((queue, share, i));
        let line = &mut lines[i];
        if line.skips.len() < LineWaits::MAX_WAITS {
            line.skips.push(skip);
            if line.furthest.is_none_or(|f| rank(job) > rank(f)) {
                line.furthest = Some(job);
            }
        }
    }
    let mut per_queue: BTreeMap<&str, u32> = BTreeMap::new();
    for line in &mut lines {
        let rank = per_queue.entry(line.queue).or_insert(0);
        *rank += 1;
        line.rank = *rank;
    }
    for line in &mut lines {
        line.lines = per_queue[line.queue];
    }
    // Lines that named jobs and now have none waiting.
    for digests in loaded.wait_digests.values() {
        let digests = &digests.value;
        for (share, digest) in &digests.lines {
            let line = (digests.queue.as_str(), share.as_str());
            if digest.waiting && !index.contains_key(&line) {
                lines.push(PlannedLine {
                    queue: line.0,
                    share: line.1,
                    rank: 0,
                    lines: 0,
                    skips: Vec::new(),
                    furthest: None,
                });
            }
        }
    }
    lines
}

/// `line` with each job's wait counted from when `stored` first gave it a reason of this kind.
fn carry_since(line: &mut LineWaits, stored: &LineWaits) {
    let mut shift = 0;
    let waits: Vec<JobWait> = line
        .waits
        .iter()
        .enumerate()
        .map(|(i, wait)| {
            let before = stored.wait_near(&wait.job_id, i + shift);
            if let Some((j, _)) = before {
                shift = j.saturating_sub(i);
            }
            let same_kind = |w: &&JobWait| {
                std::mem::discriminant(&w.reason) == std::mem::discriminant(&wait.reason)
            };
            let since_ms = before
                .map(|(_, w)| w)
                .filter(same_kind)
                .map_or(wait.since_ms, |w| w.since_ms);
            JobWait {
                since_ms,
                ..wait.clone()
            }
        })
        .collect();
    line.waits = waits.into();
}

impl<S: ConfigStore + SchedulingStore, E: EventSink> Service<S, E> {
    /// Step 7: writes the waits of each line whose digest changed, then the digests of each
    /// queue that had such a line (see the module docs).
    pub(super) async fn record_waits(
        &self,
        loaded: &Loaded,
        plan: &Plan,
        now: i64,
    ) -> Result<(), AppError> {
        // The digests of each queue with a line rewritten: the snapshot's, with those lines'.
        let mut changed: BTreeMap<&str, WaitDigests> = BTreeMap::new();
        for line in planned_lines(loaded, plan) {
            let digest = LineDigest {
                digest: line.digest(),
                waiting: !line.skips.is_empty(),
            };
            let stored = loaded.wait_digests.get(line.queue).map(|d| &d.value);
            if stored.and_then(|d| d.lines.get(line.share)) == Some(&digest) {
                continue;
            }
            // A line the digests know is read (now, not with the snapshot: only a line that
            // changed costs a read), to carry since when its jobs wait; a new one is created.
            let known = stored.is_some_and(|d| d.lines.contains_key(line.share));
            if self.write_line(line.waits(now), known).await? {
                let queue = changed.entry(line.queue).or_insert_with(|| {
                    stored.cloned().unwrap_or_else(|| WaitDigests {
                        queue: line.queue.to_owned(),
                        ..WaitDigests::default()
                    })
                });
                queue.lines.insert(line.share.to_owned(), digest);
            }
        }
        for (queue, doc) in changed {
            let version = loaded.wait_digests.get(queue).map_or(0, |d| d.version);
            match self
                .store
                .commit(&[Write::document_value(doc, version)])
                .await
            {
                // A concurrent cycle's digests: the next cycle rewrites what they miss.
                Ok(()) | Err(StoreError::Conflict) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Writes one line's waits over the stored ones (read first when `known`, or when creating
    /// it finds one: the digests missed a write), each job's wait counted from the stored
    /// one's. False when a concurrent cycle wrote the line first.
    async fn write_line(&self, mut line: LineWaits, known: bool) -> Result<bool, AppError> {
        let mut version = 0;
        let mut read = known;
        loop {
            if read {
                let stored = self.store.get_document::<LineWaits>(&line.key()).await?;
                if let Some(stored) = &stored {
                    carry_since(&mut line, &stored.value);
                }
                version = stored.map_or(0, |s| s.version);
            }
            match self
                .store
                .commit(&[Write::document_value(line.clone(), version)])
                .await
            {
                Ok(()) => return Ok(true),
                Err(StoreError::Conflict) if !read => read = true,
                // A concurrent cycle wrote the line's waits: as current as these.
                Err(StoreError::Conflict) => return Ok(false),
                Err(e) => return Err(e.into()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use trainyard_scheduler::SkipReason;

    use super::*;

    #[test]
    fn a_planned_lines_digest_is_that_of_the_waits_it_writes() {
        let skip = |id: &str, free: u64| Skip {
            job_id: id.into(),
            reason: SkipReason::InsufficientCapacity {
                environment: "env".into(),
                unit: "NUM_INSTANCES".into(),
                needed: 4,
                free,
            },
        };
        let skips = [skip("a", 1), skip("b", 2)];
        let job = |id: &str, priority| PendingJob {
            job_id: id.into(),
            queue: "research".into(),
            share: Some("team-a".into()),
            priority,
            runnable_at_ms: 500,
            instances: BTreeMap::from([("ml.g5.xlarge".to_owned(), 4)]).into(),
            max_runtime_s: None,
            not_before_ms: None,
            line_offset_ms: 0,
        };
        let b = job("b", 0);
        fn line<'p>(skips: Vec<&'p Skip>, furthest: &'p PendingJob) -> PlannedLine<'p> {
            PlannedLine {
                queue: "research",
                share: "team-a",
                rank: 2,
                lines: 3,
                skips,
                furthest: Some(furthest),
            }
        }
        let both = line(skips.iter().collect(), &b);
        assert_eq!(both.digest(), both.waits(1_000).digest());
        let place = both.waits(1_000).furthest.expect("a place");
        assert_eq!(place.rank(), (Reverse(0), 500, "b"));
        // Where the furthest job stands is digested: its priority moved, it stands elsewhere.
        let b_first = job("b", 7);
        let reordered = line(skips.iter().collect(), &b_first);
        assert_ne!(reordered.digest(), both.digest());
        assert_eq!(reordered.digest(), reordered.waits(1_000).digest());
        let a = job("a", 0);
        let one = line(skips[..1].iter().collect(), &a);
        assert_eq!(one.digest(), one.waits(1_000).digest());
        assert_ne!(one.digest(), both.digest());
        let figures = [skip("a", 2), skip("b", 2)];
        let moved = line(figures.iter().collect(), &b);
        assert_ne!(
            moved.digest(),
            both.digest(),
            "a reason's figures are digested"
        );
    }
}
