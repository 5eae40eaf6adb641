//! CloudWatch metrics from the functions, as Embedded Metric Format lines on stdout
//! (`trainyard_aws::metrics`): the transitions each invocation caused (dispatches, retries,
//! capacity errors, preemptions, latencies), printed at the end of the invocation, and on the
//! scheduler's schedule ticks the gauges (capacity in use, oldest RUNNABLE job — which the
//! stuck-queue alarm watches), the job counts, and its forecast round's estimates.

use std::sync::Arc;

use trainyard_app::ports::Store;
pub use trainyard_aws::metrics::estimate_lines;
use trainyard_aws::metrics::{Recorder, gauges, job_counts};

/// The recorder behind a function's event sink, and the `Stack` dimension.
#[derive(Debug, Clone)]
pub struct Metrics {
    recorder: Arc<Recorder>,
    stack: String,
}

impl Metrics {
    /// Metrics for `stack`, recorded into `recorder`.
    pub fn new(recorder: Arc<Recorder>, stack: String) -> Self {
        Self { recorder, stack }
    }

    /// The recorder (to wrap the event sink with).
    pub fn recorder(&self) -> &Arc<Recorder> {
        &self.recorder
    }

    /// The `Stack` dimension.
    pub fn stack(&self) -> &str {
        &self.stack
    }

    /// The lines for what was recorded since the last call (and resets).
    pub fn drain(&self, now_ms: i64) -> Vec<String> {
        self.recorder.emf_lines(&self.stack, now_ms)
    }

    /// Prints [`Metrics::drain`]'s lines, one JSON object each, for CloudWatch Logs.
    pub fn flush(&self, now_ms: i64) {
        print_lines(&self.drain(now_ms));
    }
}

/// Prints EMF lines on stdout.
pub fn print_lines(lines: &[String]) {
    for line in lines {
        println!("{line}");
    }
}

/// The schedule tick's gauges and job counts; a store failure costs the tick's metrics only
/// (logged), never the pass.
pub async fn schedule_lines<S: Store>(store: &S, stack: &str, now_ms: i64) -> Vec<String> {
    let mut lines = Vec::new();
    match gauges(store, now_ms).await {
        Ok(g) => lines.extend(g.emf_lines(stack, now_ms)),
        Err(error) => tracing::warn!(%error, "reading the gauges failed"),
    }
    match job_counts(store).await {
        Ok(c) => lines.extend(c.emf_lines(stack, now_ms)),
        Err(error) => tracing::warn!(%error, "counting jobs failed"),
    }
    lines
}
