//! Latency and throughput figures from raw samples: pure arithmetic, no clock and no I/O, so the
//! report is a function of the samples alone and can be tested with hand-made inputs.

use std::time::Duration;

/// One run's outcome, merged over all connections.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Tally {
    /// Requests whose response was HTTP 200.
    pub successes: u64,
    /// Requests answered with any other status.
    pub http_errors: u64,
    /// Requests that got no response (connect, write or read failed).
    pub transport_errors: u64,
    /// Latency of every answered request, in microseconds (successes and HTTP errors alike: a
    /// fast rejection is still a response the client waited for).
    pub latencies_us: Vec<u64>,
}

impl Tally {
    /// Adds another connection's tally to this one.
    pub fn merge(&mut self, other: Tally) {
        self.successes += other.successes;
        self.http_errors += other.http_errors;
        self.transport_errors += other.transport_errors;
        self.latencies_us.extend(other.latencies_us);
    }

    /// Requests sent, answered or not.
    pub fn sent(&self) -> u64 {
        self.successes + self.http_errors + self.transport_errors
    }
}

/// The figures the benchmark reports.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// Requests sent.
    pub sent: u64,
    /// HTTP 200 responses.
    pub successes: u64,
    /// Non-200 responses plus requests that got no response.
    pub errors: u64,
    /// Successes per second of measured wall time.
    pub success_rate_per_s: f64,
    /// Latency percentiles and maximum, in milliseconds (`None` when nothing was answered).
    pub latency_ms: Option<Percentiles>,
}

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Percentiles {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Slowest answered request.
    pub max: f64,
}

/// Summarises a tally measured over `elapsed` of wall time.
pub fn summarise(mut tally: Tally, elapsed: Duration) -> Summary {
    tally.latencies_us.sort_unstable();
    let secs = elapsed.as_secs_f64();
    let success_rate_per_s = if secs > 0.0 {
        tally.successes as f64 / secs
    } else {
        0.0
    };
    let latency_ms = if tally.latencies_us.is_empty() {
        None
    } else {
        let at = |q| us_to_ms(percentile(&tally.latencies_us, q));
        Some(Percentiles {
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
            max: us_to_ms(tally.latencies_us.last().copied().unwrap_or_default()),
        })
    };
    Summary {
        sent: tally.sent(),
        successes: tally.successes,
        errors: tally.http_errors + tally.transport_errors,
        success_rate_per_s,
        latency_ms,
    }
}

/// The nearest-rank percentile `q` (0 < q ≤ 1) of sorted samples: the smallest sample such that
/// at least `q` of all samples are ≤ it. Nearest-rank never interpolates, so every reported
/// figure is a latency that some request really had. Empty input gives 0.
pub fn percentile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let n = sorted.len();
    // rank is 1-based: ceil(q * n), clamped into 1..=n.
    let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
    sorted[rank - 1]
}

fn us_to_ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles_pick_real_samples() {
        let hundred: Vec<u64> = (1..=100).collect();
        let cases: &[(&str, &[u64], f64, u64)] = &[
            ("the median of 1..=100 is 50", &hundred, 0.50, 50),
            ("p90 of 1..=100 is 90", &hundred, 0.90, 90),
            ("p99 of 1..=100 is 99", &hundred, 0.99, 99),
            ("p100 is the maximum", &hundred, 1.0, 100),
            ("a single sample is every percentile", &[7], 0.5, 7),
            (
                "a single sample is every percentile, p99 too",
                &[7],
                0.99,
                7,
            ),
            ("two samples: the median is the lower one", &[3, 9], 0.5, 3),
            (
                "two samples: p90 rounds up to the higher one",
                &[3, 9],
                0.9,
                9,
            ),
            ("no samples give zero rather than panicking", &[], 0.5, 0),
        ];
        for (name, samples, q, want) in cases {
            assert_eq!(percentile(samples, *q), *want, "{name}");
        }
    }

    #[test]
    fn summary_counts_both_error_kinds_and_rates_only_successes() {
        let tally = Tally {
            successes: 300,
            http_errors: 5,
            transport_errors: 2,
            latencies_us: vec![1_500, 500, 2_000, 1_000],
        };
        let s = summarise(tally, Duration::from_secs(3));
        assert_eq!(s.sent, 307);
        assert_eq!(s.errors, 7);
        assert!((s.success_rate_per_s - 100.0).abs() < 1e-9);
        let p = s.latency_ms.expect("latencies were recorded");
        assert!((p.p50 - 1.0).abs() < 1e-9, "unsorted input is sorted first");
        assert!((p.max - 2.0).abs() < 1e-9);
    }

    #[test]
    fn an_unanswered_run_has_no_latency_figures() {
        let tally = Tally {
            transport_errors: 4,
            ..Tally::default()
        };
        let s = summarise(tally, Duration::ZERO);
        assert_eq!(s.latency_ms, None);
        assert_eq!(s.success_rate_per_s, 0.0);
        assert_eq!(s.sent, 4);
    }

    #[test]
    fn merging_adds_counts_and_keeps_every_sample() {
        let mut a = Tally {
            successes: 1,
            http_errors: 2,
            transport_errors: 3,
            latencies_us: vec![10],
        };
        a.merge(Tally {
            successes: 10,
            http_errors: 20,
            transport_errors: 30,
            latencies_us: vec![20, 30],
        });
        assert_eq!(
            (a.successes, a.http_errors, a.transport_errors),
            (11, 22, 33)
        );
        assert_eq!(a.latencies_us, vec![10, 20, 30]);
    }
}
