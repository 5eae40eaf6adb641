//! Free capacity of one service environment, in every dimension it limits.

use std::collections::BTreeMap;

use trainyard_domain::environment::{CapacityLimit, NUM_INSTANCES};

use crate::decision::Unit;
use crate::snapshot::SharedInstances;

/// Whether a demand fits, naming the instance type that is short (`None`: the total).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fit<'a> {
    /// It fits now.
    Fits,
    /// Not now: `ty` has `free` of the `needed`.
    NotNow {
        ty: Option<&'a str>,
        needed: u64,
        free: u64,
    },
    /// Never: `ty` allows at most `max`, less than `needed` (0 when the type is not offered).
    Never {
        ty: Option<&'a str>,
        needed: u64,
        max: u64,
    },
}

/// The capacity unit a skip reason names for a [`Fit`]'s instance type: the type, or
/// `NUM_INSTANCES` for the total.
pub(crate) fn unit(ty: Option<&str>) -> Unit {
    ty.map_or(Unit::Total, |t| Unit::Type(t.into()))
}

/// Limits and use of one environment.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Pool {
    total_max: Option<u64>,
    total_used: u64,
    /// Per-instance-type limits, each with the instances of the type in use (no other type is
    /// counted); when present, types not listed are not offered at all. One map, so that a
    /// check reads each type once for its limit and its use.
    types: BTreeMap<String, Typed>,
}

/// One instance type's limit and use.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Typed {
    max: u64,
    used: u64,
}

impl Typed {
    fn free(self) -> u64 {
        self.max.saturating_sub(self.used)
    }
}

impl Pool {
    pub(crate) fn new(limits: &[CapacityLimit]) -> Self {
        let mut pool = Self {
            total_max: None,
            total_used: 0,
            types: BTreeMap::new(),
        };
        for limit in limits {
            let max = u64::from(limit.max_capacity);
            if limit.capacity_unit == NUM_INSTANCES {
                pool.total_max = Some(pool.total_max.map_or(max, |m| m.min(max)));
            } else {
                let typed = Typed { max, used: 0 };
                pool.types.insert(limit.capacity_unit.clone(), typed);
            }
        }
        if pool.total_max.is_none() && pool.types.is_empty() {
            // No limit at all offers nothing, rather than everything.
            pool.total_max = Some(0);
        }
        pool
    }

    /// Instances free in total, if the environment limits the total.
    pub(crate) fn total_free(&self) -> Option<u64> {
        self.total_max
            .map(|max| max.saturating_sub(self.total_used))
    }

    /// The total limit, if any.
    pub(crate) fn total_max(&self) -> Option<u64> {
        self.total_max
    }

    /// The environment's limit for an instance type: its per-type limit, else the total limit,
    /// else 0 (not offered).
    pub(crate) fn type_limit(&self, ty: &str) -> u64 {
        if self.types.is_empty() {
            return self.total_max.unwrap_or(0);
        }
        let max = self.types.get(ty).map_or(0, |t| t.max);
        self.total_max.map_or(max, |total| total.min(max))
    }

    /// Instances of a type that are free now (bounded by the total limit, if any).
    pub(crate) fn type_free(&self, ty: &str) -> u64 {
        let by_type = match self.types.get(ty) {
            Some(typed) => typed.free(),
            None if self.types.is_empty() => u64::MAX,
            None => 0,
        };
        by_type.min(self.total_free().unwrap_or(u64::MAX))
    }

    /// Whether a demand fits now, and if not, what is missing first. Its types are read only
    /// where some type has a limit of its own: the total decides the rest.
    pub(crate) fn check<'a>(&self, demand: &'a SharedInstances) -> Fit<'a> {
        let needed = demand.total();
        if let Some(max) = self.total_max
            && needed > max
        {
            return Fit::Never {
                ty: None,
                needed,
                max,
            };
        }
        if !self.types.is_empty() {
            for (ty, n) in demand.iter() {
                let max = self.types.get(ty).map_or(0, |t| t.max);
                if u64::from(*n) > max {
                    return Fit::Never {
                        ty: Some(ty),
                        needed: u64::from(*n),
                        max,
                    };
                }
            }
        }
        if let Some(free) = self.total_free()
            && needed > free
        {
            return Fit::NotNow {
                ty: None,
                needed,
                free,
            };
        }
        if !self.types.is_empty() {
            for (ty, n) in demand.iter() {
                if let Some(typed) = self.types.get(ty) {
                    let free = typed.free();
                    if u64::from(*n) > free {
                        return Fit::NotNow {
                            ty: Some(ty),
                            needed: u64::from(*n),
                            free,
                        };
                    }
                }
            }
        }
        Fit::Fits
    }

    /// Whether `demand` fits now.
    pub(crate) fn fits(&self, demand: &SharedInstances) -> bool {
        self.check(demand) == Fit::Fits
    }

    pub(crate) fn take(&mut self, demand: &SharedInstances) {
        self.total_used += demand.total();
        // Only limited types are counted (no other is ever checked): with a total limit
        // alone, a cycle taking every running job's instances reads none of their types.
        if !self.types.is_empty() {
            for (ty, n) in demand.iter() {
                if let Some(typed) = self.types.get_mut(ty) {
                    typed.used += u64::from(*n);
                }
            }
        }
    }

    /// Takes instance counts as a usage record keeps them.
    pub(crate) fn take_counts(&mut self, in_use: &BTreeMap<String, u64>) {
        for (ty, n) in in_use {
            self.total_used = self.total_used.saturating_add(*n);
            if let Some(typed) = self.types.get_mut(ty) {
                typed.used = typed.used.saturating_add(*n);
            }
        }
    }

    pub(crate) fn give(&mut self, demand: &SharedInstances) {
        self.total_used = self.total_used.saturating_sub(demand.total());
        if !self.types.is_empty() {
            for (ty, n) in demand.iter() {
                if let Some(typed) = self.types.get_mut(ty) {
                    typed.used = typed.used.saturating_sub(u64::from(*n));
                }
            }
        }
    }
}

/// Whether `in_use` (instances per instance type) is within `limits`, by the rules the planner
/// places jobs by (its `Pool`): all instances against the total limit, each type against its
/// own limit (and the total), and nothing of a type the limits do not offer. The dispatch
/// commit checks this on the environment's usage as stored, so that a plan whose view of
/// capacity in use lagged cannot over-commit.
pub fn within_limits(limits: &[CapacityLimit], in_use: &BTreeMap<String, u64>) -> bool {
    let pool = Pool::new(limits);
    let total: u64 = in_use.values().sum();
    pool.total_max.is_none_or(|max| total <= max)
        && in_use
            .iter()
            .all(|(ty, n)| *n == 0 || *n <= pool.type_limit(ty))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_is_within_limits_by_the_rules_jobs_are_placed_by() {
        let usage = |pairs: &[(&str, u64)]| -> BTreeMap<String, u64> {
            pairs.iter().map(|(t, n)| ((*t).to_owned(), *n)).collect()
        };
        let total = [limit(NUM_INSTANCES, 4)];
        assert!(within_limits(&total, &usage(&[("ml.a", 3), ("ml.b", 1)])));
        assert!(!within_limits(&total, &usage(&[("ml.a", 3), ("ml.b", 2)])));
        let typed = [limit("ml.a", 2), limit("ml.b", 1)];
        assert!(within_limits(&typed, &usage(&[("ml.a", 2), ("ml.b", 1)])));
        assert!(!within_limits(&typed, &usage(&[("ml.a", 3)])));
        assert!(
            !within_limits(&typed, &usage(&[("ml.c", 1)])),
            "a type no limit offers"
        );
        let both = [limit(NUM_INSTANCES, 3), limit("ml.a", 2)];
        assert!(within_limits(&both, &usage(&[("ml.a", 2)])));
        assert!(
            !within_limits(&both, &usage(&[("ml.a", 2), ("ml.c", 1)])),
            "ml.c is not offered"
        );
        assert!(
            within_limits(&[], &usage(&[])),
            "nothing in use fits anything"
        );
        assert!(
            !within_limits(&[], &usage(&[("ml.a", 1)])),
            "no limit offers nothing"
        );
        // What the planner places fits; one more instance than it would place does not.
        let mut pool = Pool::new(&typed);
        let placed = demand(&[("ml.a", 2), ("ml.b", 1)]);
        assert_eq!(pool.check(&placed), Fit::Fits);
        pool.take(&placed);
        assert!(within_limits(&typed, &usage(&[("ml.a", 2), ("ml.b", 1)])));
        assert!(!within_limits(&typed, &usage(&[("ml.a", 2), ("ml.b", 2)])));
    }

    fn limit(unit: &str, max: u32) -> CapacityLimit {
        CapacityLimit {
            max_capacity: max,
            capacity_unit: unit.into(),
        }
    }

    fn demand(pairs: &[(&str, u32)]) -> SharedInstances {
        let map: crate::snapshot::Instances =
            pairs.iter().map(|(t, n)| ((*t).to_owned(), *n)).collect();
        map.into()
    }

    #[test]
    fn total_limits_count_every_type_together() {
        let mut pool = Pool::new(&[limit(NUM_INSTANCES, 8)]);
        assert_eq!(pool.check(&demand(&[("ml.a", 5), ("ml.b", 3)])), Fit::Fits);
        pool.take(&demand(&[("ml.a", 5)]));
        let four = demand(&[("ml.b", 4)]);
        let fit = pool.check(&four);
        assert_eq!(
            fit,
            Fit::NotNow {
                ty: None,
                needed: 4,
                free: 3
            }
        );
        assert!(matches!(
            pool.check(&demand(&[("ml.b", 9)])),
            Fit::Never { max: 8, .. }
        ));
        pool.give(&demand(&[("ml.a", 5)]));
        assert_eq!(pool.check(&demand(&[("ml.b", 8)])), Fit::Fits);
    }

    #[test]
    fn type_limits_offer_only_their_types() {
        let mut pool = Pool::new(&[limit("ml.p4d.24xlarge", 4), limit("ml.g5.xlarge", 2)]);
        assert_eq!(pool.check(&demand(&[("ml.p4d.24xlarge", 4)])), Fit::Fits);
        let other_type = demand(&[("ml.p5.48xlarge", 1)]);
        let never = pool.check(&other_type);
        assert_eq!(
            never,
            Fit::Never {
                ty: Some("ml.p5.48xlarge"),
                needed: 1,
                max: 0
            }
        );
        pool.take(&demand(&[("ml.p4d.24xlarge", 3)]));
        assert_eq!(pool.check(&demand(&[("ml.g5.xlarge", 2)])), Fit::Fits);
        assert!(matches!(
            pool.check(&demand(&[("ml.p4d.24xlarge", 2)])),
            Fit::NotNow { free: 1, .. }
        ));
    }

    #[test]
    fn no_limits_offer_nothing() {
        let pool = Pool::new(&[]);
        assert!(matches!(
            pool.check(&demand(&[("ml.a", 1)])),
            Fit::Never { .. }
        ));
    }
}
