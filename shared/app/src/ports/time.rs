//! Time and identifiers: the wall clock and id minting, injected so that tests and the
//! simulator run on a manual clock with sequential ids.

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
