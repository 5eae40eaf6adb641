//! Scheduling policies: fair share (Batch's `fairsharePolicy`) or quota share
//! (`quotaSharePolicy`). Exactly one is set, and the kind never changes after creation.

use serde::{Deserialize, Serialize};

use crate::Tags;
use crate::limits::{DEFAULT_SHARE_DECAY_S, DEFAULT_WEIGHT_FACTOR};

/// `shareDistribution[]`: a share identifier (or `prefix*`) and its weight factor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShareAttributes {
    /// Share identifier, or a prefix ending in `*`.
    pub share_identifier: String,
    /// Lower gets more: 0.125 gets eight times what 1.0 gets. Default 1.0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_factor: Option<f64>,
}

/// `fairsharePolicy`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct FairsharePolicy {
    /// Usage half-life window in seconds; 0 means 600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_decay_seconds: Option<u32>,
    /// Percent of capacity kept for shares not yet active: (reservation/100)^active.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_reservation: Option<u32>,
    /// Weights; unlisted shares weigh 1.0.
    #[serde(default)]
    pub share_distribution: Vec<ShareAttributes>,
}

impl FairsharePolicy {
    /// The decay window, with 0 or unset meaning Batch's 600-second default.
    pub fn share_decay_s(&self) -> u32 {
        match self.share_decay_seconds {
            None | Some(0) => DEFAULT_SHARE_DECAY_S,
            Some(s) => s,
        }
    }

    /// The weight factor of `share`: an exact entry wins, then the longest matching `prefix*`
    /// entry, then the default 1.0. To weigh many shares, [`weights`](Self::weights) once.
    pub fn weight_factor(&self, share: &str) -> f64 {
        self.weights().of(share)
    }

    /// The share distribution indexed for looking up many shares: a planner weighs every share
    /// with waiting jobs each cycle, and a list of 1,000 entries searched for each would cost a
    /// million comparisons.
    pub fn weights(&self) -> ShareWeights<'_> {
        let mut exact = std::collections::BTreeMap::new();
        let mut prefixes = Vec::new();
        for entry in &self.share_distribution {
            let id = entry.share_identifier.as_str();
            exact.entry(id).or_insert(entry.weight_factor);
            if let Some(prefix) = id.strip_suffix('*') {
                prefixes.push((prefix, entry.weight_factor));
            }
        }
        ShareWeights { exact, prefixes }
    }
}

/// A fair-share policy's weights, indexed ([`FairsharePolicy::weights`]).
#[derive(Debug)]
pub struct ShareWeights<'a> {
    /// The first entry of each identifier, as written (a `prefix*` entry too).
    exact: std::collections::BTreeMap<&'a str, Option<f64>>,
    /// The `prefix*` entries, in policy order, without their `*`.
    prefixes: Vec<(&'a str, Option<f64>)>,
}

impl ShareWeights<'_> {
    /// [`FairsharePolicy::weight_factor`] of `share`.
    pub fn of(&self, share: &str) -> f64 {
        let weight = match self.exact.get(share) {
            Some(weight) => *weight,
            // The longest prefix; of equally long ones, the last (as `max_by_key` picks).
            None => self
                .prefixes
                .iter()
                .filter(|(prefix, _)| share.starts_with(prefix))
                .max_by_key(|(prefix, _)| prefix.len())
                .and_then(|(_, weight)| *weight),
        };
        weight.unwrap_or(DEFAULT_WEIGHT_FACTOR)
    }
}

/// `quotaSharePolicy.idleResourceAssignmentStrategy`: only FIFO exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum IdleResourceAssignmentStrategy {
    /// Idle capacity goes to borrowers in submission order.
    #[default]
    Fifo,
}

/// `quotaSharePolicy`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct QuotaSharePolicy {
    /// How idle capacity goes to borrowing shares.
    pub idle_resource_assignment_strategy: IdleResourceAssignmentStrategy,
}

/// A scheduling policy as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingPolicy {
    /// Unique name.
    pub name: String,
    /// Set for fair-share policies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fairshare_policy: Option<FairsharePolicy>,
    /// Set for quota-share policies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_share_policy: Option<QuotaSharePolicy>,
    /// Tags.
    #[serde(default)]
    pub tags: Tags,
    /// Creation time (epoch ms).
    pub created_at: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn share(id: &str, w: Option<f64>) -> ShareAttributes {
        ShareAttributes {
            share_identifier: id.into(),
            weight_factor: w,
        }
    }

    fn distributed(share_distribution: Vec<ShareAttributes>) -> FairsharePolicy {
        FairsharePolicy {
            share_distribution,
            ..Default::default()
        }
    }

    #[test]
    fn weight_factor_prefers_exact_then_longest_prefix_then_default() {
        let policy = distributed(vec![
            share("team*", Some(0.5)),
            share("team-vision*", Some(0.25)),
            share("team-vision-prod", Some(0.125)),
            share("unweighted", None),
        ]);
        let cases = [
            ("team-vision-prod", 0.125),
            ("team-vision-dev", 0.25),
            ("team-nlp", 0.5),
            ("other", 1.0),
            ("unweighted", 1.0),
        ];
        for (id, expected) in cases {
            assert_eq!(policy.weight_factor(id), expected, "{id}");
        }
    }

    /// Entries Batch would refuse as overlapping still weigh as a list searched in order would:
    /// the first of two exact entries, the last of two equal prefixes, and an exact entry
    /// without a weight over a prefix that has one.
    #[test]
    fn overlapping_entries_weigh_as_the_list_reads() {
        let policy = distributed(vec![
            share("a", Some(0.5)),
            share("a", Some(0.25)),
            share("b*", Some(2.0)),
            share("b*", Some(4.0)),
            share("bc", None),
        ]);
        let weights = policy.weights();
        for (id, expected) in [
            ("a", 0.5),
            ("bx", 4.0),
            ("bc", 1.0),
            ("b*", 2.0),
            ("c", 1.0),
        ] {
            assert_eq!(weights.of(id), expected, "{id}");
            assert_eq!(policy.weight_factor(id), expected, "{id}");
        }
    }

    #[test]
    fn zero_decay_means_the_default_window() {
        let mut p = FairsharePolicy::default();
        assert_eq!(p.share_decay_s(), 600);
        p.share_decay_seconds = Some(0);
        assert_eq!(p.share_decay_s(), 600);
        p.share_decay_seconds = Some(3600);
        assert_eq!(p.share_decay_s(), 3600);
    }
}
