//! Per-caller rate limits: a token bucket per principal, refilled at a steady rate up to a
//! burst, so that one caller's flood is refused (`ThrottlingException`, HTTP 429, which boto3,
//! the AWS CLI and the SDKs back off from and retry) while everyone else is served.
//!
//! The buckets live in the process: local mode has one, so its limit is exact; each Lambda
//! instance of the `api` function keeps its own, so a caller spread over N instances gets up to
//! N times the rate (API Gateway's own throttling bounds the whole API).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::ApiError;

/// The hosts' default: far above what people and SDK pollers send, far below a flood.
pub const DEFAULT_RATE_LIMIT: u32 = 200;

/// How many callers' buckets are kept before idle (full) ones are forgotten: a full bucket is
/// the same as no bucket, so forgetting one changes nothing.
const MAX_TRACKED: usize = 10_000;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at_ms: i64,
}

/// The buckets, and how they fill.
#[derive(Debug, Default)]
pub struct Throttle {
    /// Requests per second each caller may sustain; 0 means no limit.
    per_second: u32,
    buckets: Mutex<HashMap<String, Bucket>>,
    refused: AtomicU64,
    /// `refused` as last reported by [`Throttle::take_refused`].
    reported: AtomicU64,
}

impl Throttle {
    /// `per_second` requests per second per caller, in bursts of up to twice that; 0: no limit.
    pub fn new(per_second: u32) -> Self {
        Self {
            per_second,
            ..Self::default()
        }
    }

    fn burst(&self) -> f64 {
        2.0 * f64::from(self.per_second)
    }

    /// Takes one request from `caller`'s bucket at `now_ms`, or refuses it.
    pub fn admit(&self, caller: &str, now_ms: i64) -> Result<(), ApiError> {
        if self.per_second == 0 {
            return Ok(());
        }
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if buckets.len() >= MAX_TRACKED && !buckets.contains_key(caller) {
            let (rate, burst) = (f64::from(self.per_second), self.burst());
            buckets.retain(|_, b| b.tokens + rate * (now_ms - b.at_ms) as f64 / 1000.0 < burst);
        }
        let burst = self.burst();
        // Looked up by `&str` first: a known caller's request allocates nothing.
        if !buckets.contains_key(caller) {
            let full = Bucket {
                tokens: burst,
                at_ms: now_ms,
            };
            buckets.insert(caller.to_owned(), full);
        }
        let Some(bucket) = buckets.get_mut(caller) else {
            return Ok(());
        };
        let elapsed_s = (now_ms - bucket.at_ms).max(0) as f64 / 1000.0;
        bucket.tokens = (bucket.tokens + elapsed_s * f64::from(self.per_second)).min(burst);
        bucket.at_ms = bucket.at_ms.max(now_ms);
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return Ok(());
        }
        drop(buckets);
        self.refused.fetch_add(1, Ordering::Relaxed);
        Err(ApiError::throttled(format!(
            "Rate exceeded: {caller} may make {} requests per second (bursts of {burst}); \
             retry after a pause",
            self.per_second
        )))
    }

    /// Requests refused so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Requests refused since the last call (for metrics a host prints as it goes).
    pub fn take_refused(&self) -> u64 {
        let total = self.refused();
        total.saturating_sub(self.reported.swap(total, Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_gets_its_burst_then_its_rate_and_others_are_not_affected() {
        let throttle = Throttle::new(10);
        let admitted = |caller: &str, now: i64, n: usize| {
            (0..n)
                .filter(|_| throttle.admit(caller, now).is_ok())
                .count()
        };
        assert_eq!(admitted("alice", 0, 50), 20, "a burst of twice the rate");
        assert_eq!(admitted("bob", 0, 5), 5, "bob has a bucket of his own");
        assert_eq!(admitted("alice", 500, 50), 5, "half a second refills five");
        assert_eq!(
            admitted("alice", 10_000, 50),
            20,
            "never more than the burst"
        );
        assert_eq!(throttle.refused(), 30 + 45 + 30);
        assert_eq!(throttle.take_refused(), 105);
        assert_eq!(throttle.take_refused(), 0, "each refusal is reported once");
        let refused = throttle.admit("alice", 10_000).unwrap_err();
        assert_eq!(refused.error_type(), "ThrottlingException");
        assert_eq!(refused.status.as_u16(), 429);
    }

    #[test]
    fn zero_means_no_limit_and_idle_callers_are_forgotten() {
        let open = Throttle::new(0);
        assert!((0..10_000).all(|_| open.admit("anyone", 0).is_ok()));
        let throttle = Throttle::new(1);
        for i in 0..MAX_TRACKED {
            throttle.admit(&format!("caller-{i}"), 0).unwrap();
        }
        // Ten seconds later every bucket is full again: one more caller forgets them all.
        throttle.admit("late", 10_000).unwrap();
        assert_eq!(throttle.buckets.lock().unwrap().len(), 1);
    }
}
