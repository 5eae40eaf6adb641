//! The memory store's indexes over its jobs, kept in step with every write: by status, the
//! RUNNABLE lines of each queue and share, the heads' and holders' summaries, and backoff.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use trainyard_domain::job::{JobStatus, ServiceJob};
use trainyard_domain::order::{runnable_rank, share_key};
use trainyard_scheduler::SharedStr;

use crate::ports::{CapacityHolder, RunnableHead};

/// Changes to the jobs holding capacity that the store remembers, for readers that follow them
/// ([`SchedulingStore::capacity_holders_since`](crate::ports::SchedulingStore::capacity_holders_since)):
/// a cycle that dispatched a few hundred jobs is still followed.
pub(super) const HOLDER_LOG: usize = 4096;

/// A RUNNABLE job's place in its line: ([`runnable_rank`], id).
pub(super) type LineEntry = (Reverse<u32>, i64, String);

/// The RUNNABLE jobs of one share of a queue, in line, each with the summary the scheduler
/// reads of the heads every cycle (kept in the line, so that reading them looks nothing up).
pub(super) type Line = BTreeMap<LineEntry, RunnableHead>;

/// The line entry of a RUNNABLE job.
fn line_entry(job: &ServiceJob) -> LineEntry {
    let (priority, at, _) = runnable_rank(job);
    (priority, at, job.job_id.clone())
}

/// Indexes over the jobs, kept in step with them.
#[derive(Default)]
pub(super) struct Indexes {
    /// (created at, id) per status, for listings by status.
    pub(super) by_status: BTreeMap<JobStatus, BTreeSet<(i64, String)>>,
    /// RUNNABLE jobs per queue and share, with their summaries.
    pub(super) runnable: BTreeMap<String, BTreeMap<String, Line>>,
    /// Jobs holding capacity (SCHEDULED, STARTING, RUNNING), summarised for the scheduler,
    /// which reads them every cycle.
    pub(super) dispatched: BTreeMap<String, CapacityHolder>,
    /// How many of `dispatched` each queue's shares have (by [`share_key`], so "" counts the
    /// jobs without one): which shares of a queue hold capacity, without reading every holder.
    pub(super) holding: BTreeMap<String, BTreeMap<String, usize>>,
    /// RUNNABLE jobs with a `not_before`: (not before, id).
    pub(super) backoff: BTreeSet<(i64, String)>,
    /// Instances held by all dispatched jobs.
    pub(super) held_instances: u64,
    /// Changes to `dispatched` so far (an entry added or removed).
    pub(super) holder_changes: u64,
    /// The last [`HOLDER_LOG`] of them: (its number, the job's id).
    pub(super) holder_log: VecDeque<(u64, String)>,
    /// One shared string per queue and share name, which every summary of their jobs holds:
    /// the planner finds a name by its address before comparing text.
    pub(super) names: foldhash::HashSet<SharedStr>,
}

impl Indexes {
    pub(super) fn add(&mut self, job: &ServiceJob, version: u64) {
        self.by_status
            .entry(job.status)
            .or_default()
            .insert((job.created_at, job.job_id.clone()));
        if job.status == JobStatus::Runnable {
            if let Some(at) = job.not_before {
                self.backoff.insert((at, job.job_id.clone()));
            }
            let mut head = RunnableHead::of(job, version);
            head.job_queue = self.shared(&head.job_queue);
            head.share = self.shared(&head.share);
            self.runnable
                .entry(job.job_queue.clone())
                .or_default()
                .entry(share_key(job).to_owned())
                .or_default()
                .insert(line_entry(job), head);
        }
        if job.status.is_dispatched() {
            let mut holder = CapacityHolder::of(job);
            holder.job_queue = self.shared(&holder.job_queue);
            holder.share = self.shared(&holder.share);
            self.dispatched.insert(job.job_id.clone(), holder);
            self.start_holding(&job.job_queue, share_key(job));
            self.held_instances += job.held_total();
            self.holder_changed(&job.job_id);
        }
    }

    /// One more job of `queue`'s `share` holds capacity.
    fn start_holding(&mut self, queue: &str, share: &str) {
        if !self.holding.contains_key(queue) {
            self.holding.insert(queue.to_owned(), BTreeMap::new());
        }
        let Some(shares) = self.holding.get_mut(queue) else {
            return;
        };
        match shares.get_mut(share) {
            Some(count) => *count += 1,
            None => {
                shares.insert(share.to_owned(), 1);
            }
        }
    }

    /// One job of `queue`'s `share` no longer holds capacity.
    fn stop_holding(&mut self, queue: &str, share: &str) {
        let Some(shares) = self.holding.get_mut(queue) else {
            return;
        };
        if let Some(count) = shares.get_mut(share) {
            *count -= 1;
            if *count == 0 {
                shares.remove(share);
            }
        }
        if shares.is_empty() {
            self.holding.remove(queue);
        }
    }

    /// Logs a change to `job_id`'s entry in `dispatched`.
    fn holder_changed(&mut self, job_id: &str) {
        self.holder_changes += 1;
        if self.holder_log.len() == HOLDER_LOG {
            self.holder_log.pop_front();
        }
        self.holder_log
            .push_back((self.holder_changes, job_id.to_owned()));
    }

    /// The ids of the jobs whose entry in `dispatched` changed after the first `seen` changes,
    /// ordered and each once; `None` when the log no longer reaches back that far (or `seen`
    /// is ahead of it).
    pub(super) fn holders_changed_since(&self, seen: u64) -> Option<BTreeSet<&str>> {
        let oldest = self
            .holder_log
            .front()
            .map_or(self.holder_changes + 1, |(n, _)| *n);
        if seen > self.holder_changes || seen + 1 < oldest {
            return None;
        }
        // The log is numbered without gaps: the changes after `seen` are its last ones, read
        // without passing over the rest.
        let first = usize::try_from(seen + 1 - oldest).ok()?;
        let newer = self.holder_log.range(first..);
        Some(newer.map(|(_, id)| id.as_str()).collect())
    }

    /// The RUNNABLE jobs of `queue`'s `share`, in line.
    pub(super) fn line(&self, queue: &str, share: &str) -> Option<&Line> {
        self.runnable.get(queue)?.get(share)
    }

    /// The one shared string of a name.
    pub(super) fn shared(&mut self, name: &SharedStr) -> SharedStr {
        if let Some(shared) = self.names.get(name.as_str()) {
            return shared.clone();
        }
        self.names.insert(name.clone());
        name.clone()
    }

    /// The status reason of `job` (as indexed) changed, and nothing else its index entries
    /// hold: a RUNNABLE job's summary takes the new reason and version.
    pub(super) fn new_reason(&mut self, job: &ServiceJob, reason: Option<&str>, version: u64) {
        if job.status != JobStatus::Runnable {
            return;
        }
        let head = self
            .runnable
            .get_mut(&job.job_queue)
            .and_then(|shares| shares.get_mut(share_key(job)))
            .and_then(|line| line.get_mut(&line_entry(job)));
        if let Some(head) = head {
            head.status_reason = reason.map(Into::into);
            head.version = version;
        }
    }

    pub(super) fn remove(&mut self, job: &ServiceJob) {
        if let Some(set) = self.by_status.get_mut(&job.status) {
            set.remove(&(job.created_at, job.job_id.clone()));
        }
        if job.status == JobStatus::Runnable {
            if let Some(shares) = self.runnable.get_mut(&job.job_queue) {
                let share = share_key(job);
                if let Some(line) = shares.get_mut(share) {
                    line.remove(&line_entry(job));
                    if line.is_empty() {
                        shares.remove(share);
                    }
                }
                if shares.is_empty() {
                    self.runnable.remove(&job.job_queue);
                }
            }
            if let Some(at) = job.not_before {
                self.backoff.remove(&(at, job.job_id.clone()));
            }
        }
        if job.status.is_dispatched() && self.dispatched.remove(&job.job_id).is_some() {
            self.stop_holding(&job.job_queue, share_key(job));
            let held = job.held_total();
            self.held_instances = self.held_instances.saturating_sub(held);
            self.holder_changed(&job.job_id);
        }
    }
}

/// Whether `old` and `new` have the same entries in every index: both RUNNABLE (jobs holding
/// capacity are summarised, so any change re-indexes them) with the same keys and the same
/// summary but for the status reason.
pub(super) fn same_index_entries(old: &ServiceJob, new: &ServiceJob) -> bool {
    old.status == JobStatus::Runnable
        && new.status == JobStatus::Runnable
        && old.created_at == new.created_at
        && old.job_queue == new.job_queue
        && share_key(old) == share_key(new)
        && runnable_rank(old) == runnable_rank(new)
        && old.priority() == new.priority()
        && old.not_before == new.not_before
        && old.training.instances == new.training.instances
        && old.training.max_runtime_s == new.training.max_runtime_s
}
