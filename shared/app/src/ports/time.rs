//! Time and identifiers: the wall clock and id minting, injected so that tests and the
//! simulator run on a manual clock with sequential ids.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Wall-clock time, as epoch milliseconds. Tests use a manual clock.
pub trait Clock: Send + Sync + 'static {
    /// Now, in epoch milliseconds.
    fn now_ms(&self) -> i64;
}

/// Mints identifiers. Production uses random UUIDs; tests use a counter.
pub trait Ids: Send + Sync + 'static {
    /// A new job id (a UUID string).
    fn job_id(&self) -> String;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX)
    }
}

/// Random (v4) UUIDs.
#[derive(Debug, Default, Clone, Copy)]
pub struct RandomIds;

impl Ids for RandomIds {
    fn job_id(&self) -> String {
        uuid::Uuid::new_v4().to_string()
    }
}

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
