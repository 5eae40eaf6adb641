//! Deterministic stand-ins for the clock and id ports, for tests and the simulator.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use crate::ports::{Clock, Ids};

/// A clock that moves only when told to.
#[derive(Debug)]
pub struct ManualClock {
    now_ms: AtomicI64,
}

impl ManualClock {
    /// A clock reading `start_ms`.
    pub fn new(start_ms: i64) -> Self {
        Self {
            now_ms: AtomicI64::new(start_ms),
        }
    }

    /// Moves the clock forward by `ms`.
    pub fn advance(&self, ms: i64) {
        self.now_ms.fetch_add(ms, Ordering::SeqCst);
    }

    /// Sets the clock.
    pub fn set(&self, ms: i64) {
        self.now_ms.store(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.now_ms.load(Ordering::SeqCst)
    }
}

/// Ids that count up, formatted as UUIDs (`00000000-0000-4000-8000-000000000001`, …) so that
/// they sort in creation order and look like what clients expect.
#[derive(Debug, Default)]
pub struct SequentialIds {
    next: AtomicU64,
}

impl Ids for SequentialIds {
    fn job_id(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::SeqCst) + 1;
        format!("00000000-0000-4000-8000-{n:012x}")
    }
}
