//! Drives a [`SharedEmulator`] on its clock: wakes at the model's next deadline, advances it,
//! and forwards the "SageMaker Training Job State Change" events that are due to a channel.
//!
//! The HTTP face advances the model on every request, so a describe is always current; the
//! driver is what turns the passage of time into events when nobody is asking. It sleeps until
//! [`Emulator::next_deadline`](crate::model::Emulator::next_deadline), at most `max_sleep` (a
//! safety net should a wake-up be missed), and is woken early when a create or stop moves the
//! deadline.

use std::future::Future;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::model::StateChange;
use crate::shared::SharedEmulator;

/// Why [`run`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriverExit {
    /// The shutdown future resolved.
    Shutdown,
    /// Nobody receives the events any more.
    ReceiverClosed,
}

/// Advances `shared` on its clock and sends each due event to `events`, until `shutdown`
/// resolves or the receiver is dropped.
///
/// Events are sent in the model's delivery order. A slow receiver slows the driver (the channel
/// is bounded), which only delays events: the model keeps them until they are taken.
pub async fn run(
    shared: SharedEmulator,
    events: mpsc::Sender<StateChange>,
    max_sleep: Duration,
    shutdown: impl Future<Output = ()>,
) -> DriverExit {
    let max_sleep_ms = i64::try_from(max_sleep.as_millis())
        .unwrap_or(i64::MAX)
        .max(1);
    tokio::pin!(shutdown);
    loop {
        // 1. Advance to now and take what is due, under the lock.
        let (due, wait_ms) = shared.with(|emulator, now_ms| {
            let due = emulator.take_events(now_ms);
            let wait_ms = emulator
                .next_deadline()
                .map_or(max_sleep_ms, |at| at.saturating_sub(now_ms));
            (due, wait_ms)
        });
        // 2. Deliver, outside the lock so HTTP requests are not held up by a slow receiver.
        for event in due {
            tokio::select! {
                biased;
                () = &mut shutdown => return DriverExit::Shutdown,
                sent = events.send(event) => {
                    if sent.is_err() {
                        return DriverExit::ReceiverClosed;
                    }
                }
            }
        }
        // 3. Sleep until the next deadline; at least 1 ms so a deadline the clock has not quite
        //    reached does not spin, at most `max_sleep`.
        let sleep = Duration::from_millis(wait_ms.clamp(1, max_sleep_ms).unsigned_abs());
        tokio::select! {
            biased;
            () = &mut shutdown => return DriverExit::Shutdown,
            () = events.closed() => return DriverExit::ReceiverClosed,
            () = shared.changed() => {}
            () = tokio::time::sleep(sleep) => {}
        }
    }
}
