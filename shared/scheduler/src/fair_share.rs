//! Fair-share usage with exact exponential decay, and the score that orders shares.
//!
//! # Usage
//!
//! A share's usage `U` is instance-seconds, decayed with half-life `T` = `shareDecaySeconds`
//! (600 s when 0). With decay rate `λ = ln 2 / T` and `A` instances held constantly over an
//! interval `Δt`:
//!
//! ```text
//! U(t + Δt) = U(t) · e^(−λΔt) + A · (1 − e^(−λΔt)) / λ
//! ```
//!
//! This is the exact solution of `dU/dt = A − λU`, so the result does not depend on how the
//! interval is cut into cycles (irregular Lambda ticks give the same numbers as regular ones, up
//! to floating-point rounding). At constant `A`, `λU` converges to `A`: `λU` is the share's
//! average instances over the recent window.
//!
//! # Score
//!
//! ```text
//! score = (λU + A_now) × weightFactor
//! ```
//!
//! where `A_now` counts the instances the share holds now, including those dispatched earlier in
//! the same cycle, so that one cycle does not hand everything to one share. Lower scores go
//! first; ties go to the lower share identifier. Because both terms grow with allocation and are
//! multiplied by the weight factor, a backlogged share's long-run allocation is proportional to
//! `1 / weightFactor` — Batch's rule that 0.125 gets eight times what 1.0 gets.

use serde::{Deserialize, Serialize};

/// A share's decayed usage at a point in time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct ShareUsage {
    /// Decayed instance-seconds.
    pub instance_seconds: f64,
    /// When it was last brought up to date (epoch ms).
    pub at_ms: i64,
}

/// `ln 2 / half_life`, per second.
pub fn decay_rate(half_life_s: u32) -> f64 {
    std::f64::consts::LN_2 / f64::from(half_life_s.max(1))
}

impl ShareUsage {
    /// Brings usage forward to `now_ms`, with `instances` held throughout the interval. Times
    /// before `at_ms` are treated as no time passing.
    pub fn advance(self, now_ms: i64, instances: u64, half_life_s: u32) -> Self {
        let dt_s = (now_ms - self.at_ms).max(0) as f64 / 1000.0;
        let lambda = decay_rate(half_life_s);
        let keep = (-lambda * dt_s).exp();
        let added = instances as f64 * (1.0 - keep) / lambda;
        Self {
            instance_seconds: self.instance_seconds * keep + added,
            at_ms: now_ms.max(self.at_ms),
        }
    }

    /// Average instances over the recent window (`λU`).
    pub fn average_instances(self, half_life_s: u32) -> f64 {
        decay_rate(half_life_s) * self.instance_seconds
    }
}

/// The ordering score of a share (lower goes first).
pub fn score(average_instances: f64, held_now: u64, weight_factor: f64) -> f64 {
    (average_instances + held_now as f64) * weight_factor
}

/// Instances kept free for shares that are not active yet:
/// `ceil(max × (reservation/100)^active)`; zero when the reservation is 0.
pub fn reserved_instances(
    max_instances: u64,
    compute_reservation: u32,
    active_shares: usize,
) -> u64 {
    if compute_reservation == 0 {
        return 0;
    }
    let ratio = (f64::from(compute_reservation.min(99)) / 100.0).powi(active_shares as i32);
    (max_instances as f64 * ratio).ceil() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decay_halves_usage_every_half_life() {
        let u = ShareUsage {
            instance_seconds: 1000.0,
            at_ms: 0,
        };
        let later = u.advance(600_000, 0, 600);
        assert!((later.instance_seconds - 500.0).abs() < 1e-9, "{later:?}");
        assert_eq!(later.at_ms, 600_000);
    }

    #[test]
    fn decay_is_exact_for_irregular_intervals() {
        let start = ShareUsage {
            instance_seconds: 123.0,
            at_ms: 0,
        };
        let one_step = start.advance(3_600_000, 8, 600);
        let mut stepped = start;
        for t in [
            1, 7_000, 7_001, 250_000, 900_000, 1_000_000, 3_599_999, 3_600_000,
        ] {
            stepped = stepped.advance(t, 8, 600);
        }
        let rel = (one_step.instance_seconds - stepped.instance_seconds).abs()
            / one_step.instance_seconds;
        assert!(rel < 1e-12, "{one_step:?} vs {stepped:?}");
    }

    #[test]
    fn constant_use_converges_to_its_average() {
        let u = ShareUsage::default().advance(100 * 600_000, 5, 600);
        assert!((u.average_instances(600) - 5.0).abs() < 1e-6);
    }

    #[test]
    fn time_going_backwards_changes_nothing() {
        let u = ShareUsage {
            instance_seconds: 10.0,
            at_ms: 5_000,
        };
        assert_eq!(u.advance(4_000, 3, 600), u);
    }

    #[test]
    fn compute_reservation_follows_batch_examples() {
        // Batch: 50 reserves 50% with one active share, 25% with two, 12.5% with three.
        let cases = [
            (0, 1, 0),
            (50, 1, 50),
            (50, 2, 25),
            (50, 3, 13),
            (99, 0, 100),
        ];
        for (reservation, active, expected) in cases {
            assert_eq!(
                reserved_instances(100, reservation, active),
                expected,
                "{reservation}/{active}"
            );
        }
    }
}
