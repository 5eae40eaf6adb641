//! The model behind a lock with its clock: what the HTTP face, the driver and the
//! [`TrainingBackend`](trainyard_app::ports::TrainingBackend) adapter share.

#[cfg(feature = "http")]
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;

use crate::model::Emulator;

/// Where "now" comes from, in epoch milliseconds: the wall clock in local mode, a value the test
/// moves in tests.
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// The model, its clock, and what the HTTP face and the driver share.
#[derive(Clone)]
pub struct SharedEmulator {
    inner: Arc<Mutex<Inner>>,
    clock: Clock,
    /// Poked after every operation that may move the next deadline earlier (create, stop), so
    /// the driver recomputes its sleep instead of oversleeping.
    changed: Arc<Notify>,
    /// Numbers `x-amzn-RequestId`, which botocore shows as `ResponseMetadata.RequestId`.
    #[cfg(feature = "http")]
    requests: Arc<AtomicU64>,
}

struct Inner {
    emulator: Emulator,
    /// The latest "now" handed to the model: time never runs backwards for it, even if the wall
    /// clock is stepped back.
    now_ms: i64,
}

impl std::fmt::Debug for SharedEmulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedEmulator").finish_non_exhaustive()
    }
}

impl SharedEmulator {
    /// Wraps `emulator`, reading "now" from `clock`.
    pub fn new(emulator: Emulator, clock: Clock) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Inner {
                emulator,
                now_ms: i64::MIN,
            })),
            clock,
            changed: Arc::new(Notify::new()),
            #[cfg(feature = "http")]
            requests: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Wraps `emulator` on the host's wall clock (local mode, `trainyard emulator`).
    pub fn with_wall_clock(emulator: Emulator) -> Self {
        Self::new(emulator, Arc::new(wall_clock_ms))
    }

    /// Advances the model to "now" and runs `f` on it with that time. The lock is held for the
    /// duration of `f`, so `f` must not block.
    pub fn with<R>(&self, f: impl FnOnce(&mut Emulator, i64) -> R) -> R {
        // A panic while the lock was held (see `dispatch`) leaves the model as the panicking
        // operation left it; serving on is better than refusing every later request.
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let now_ms = (self.clock)().max(inner.now_ms);
        inner.now_ms = now_ms;
        inner.emulator.advance(now_ms);
        f(&mut inner.emulator, now_ms)
    }

    /// Tells the driver that the next deadline may have moved.
    pub fn notify_changed(&self) {
        self.changed.notify_one();
    }

    /// Resolves after the next [`notify_changed`](Self::notify_changed) (or at once if one
    /// happened since the last wait).
    #[cfg(feature = "http")]
    pub(crate) async fn changed(&self) {
        self.changed.notified().await;
    }

    #[cfg(feature = "http")]
    pub(crate) fn next_request_id(&self) -> String {
        let n = self.requests.fetch_add(1, AtomicOrdering::Relaxed) + 1;
        format!("00000000-0000-4000-8000-{n:012x}")
    }
}

/// Milliseconds since the Unix epoch on the host's clock.
// The model takes time as an argument; this is the edge where the host supplies it.
#[allow(clippy::disallowed_methods)]
fn wall_clock_ms() -> i64 {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX)
}
