//! Bounded label sets for metrics: however many shares submitters invent, a queue's metrics
//! name a fixed number of them.

use std::collections::BTreeMap;

/// Most shares of one queue a metric names per report: share identifiers are chosen by whoever
/// submits, and each distinct label value is a series kept (a custom metric billed, on
/// CloudWatch), so the busiest are named and the rest summed under [`OTHER_SHARES`].
pub const MAX_SHARES_PER_QUEUE: usize = 10;
/// The `Share` the shares beyond [`MAX_SHARES_PER_QUEUE`] are summed under (not a valid share
/// identifier, so it names no real share).
pub const OTHER_SHARES: &str = "(other)";

/// `per_share` (by queue and share) with, per queue, the [`MAX_SHARES_PER_QUEUE`] of the
/// greatest `weight` kept (ties by name) and the others merged into [`OTHER_SHARES`].
pub fn bounded_shares<T: Default>(
    per_share: BTreeMap<(String, String), T>,
    weight: impl Fn(&T) -> u64,
    merge: impl Fn(&mut T, T),
) -> BTreeMap<(String, String), T> {
    let mut by_queue: BTreeMap<String, Vec<(String, T)>> = BTreeMap::new();
    for ((queue, share), value) in per_share {
        by_queue.entry(queue).or_default().push((share, value));
    }
    let mut out = BTreeMap::new();
    for (queue, mut shares) in by_queue {
        shares.sort_by(|(a, x), (b, y)| weight(y).cmp(&weight(x)).then_with(|| a.cmp(b)));
        let rest = shares.split_off(shares.len().min(MAX_SHARES_PER_QUEUE));
        for (share, value) in shares {
            out.insert((queue.clone(), share), value);
        }
        if !rest.is_empty() {
            let other = out
                .entry((queue.clone(), OTHER_SHARES.to_owned()))
                .or_insert_with(T::default);
            for (_, value) in rest {
                merge(other, value);
            }
        }
    }
    out
}
