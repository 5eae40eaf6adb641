//! Opt-in accounting of the capacity units the store consumes, for the cost figures in
//! `docs/storage-dynamodb.md`.
//!
//! The store's request code knows nothing of it: the calls are observed by an SDK interceptor
//! on the store's client (`interceptor.rs`), attached only while accounting is on, which asks
//! for the capacity and hands each successful call's items and output to [`Accounting`].
//!
//! Two figures are kept side by side:
//!
//! - **reported**: the sum of `ConsumedCapacity` that DynamoDB returned (every request asks for
//!   it with `ReturnConsumedCapacity=INDEXES` while accounting is on). Against real DynamoDB this
//!   is the bill. moto does not do AWS's arithmetic (it answers 1.0 for any `PutItem`, 0.5 for any
//!   `GetItem` and nothing for `TransactWriteItems`), so on moto it only counts calls.
//! - **estimated**: AWS's published rules applied to the items this store sends and receives:
//!   a write costs 1 WCU per started KB of the item (the larger of its old and new image), twice
//!   that inside `TransactWriteItems`; each global secondary index whose entry for the item
//!   appears, disappears or changes costs one index write of the entry's size (its projected
//!   attributes: the table's keys, the index's keys and the included attributes, plus 100 bytes
//!   of per-entry overhead), two when its index key changes (a delete and a put); an entry that
//!   stays exactly as it was costs nothing (DynamoDB writes an index only when the table write
//!   "affects" it). Reads cost 1 RCU per started 4 KB per call (`Query` sums the items it
//!   returns; `BatchGetItem` rounds each item up on its own), at least 1, and half of that when
//!   eventually consistent (every index read is).
//!
//! Because "an unchanged entry costs nothing" is read from AWS's wording rather than measured,
//! the units such entries would cost if billed are kept apart, in
//! [`Consumed::unchanged_index_entries`], so the doubt has a size.
//!
//! The old image of an item is what this store last wrote or read of it (an `UpdateItem`'s
//! write is the new image DynamoDB returns, asked for while accounting); an item it has never
//! seen is taken as new (so a first write by this process of an existing item under-counts
//! index deletes). Writes whose condition failed are not counted (AWS bills them too). Index
//! writes made by a transaction are counted at the standard rate, not doubled: the doubling in
//! AWS's documentation is stated for the items of the transaction.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};

use aws_sdk_dynamodb::types::{AttributeValue, ConsumedCapacity};

use super::schema::{INDEXES, Item, PK, SK};

/// Read and write capacity units.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Units {
    /// Read capacity units.
    pub read: f64,
    /// Write capacity units.
    pub write: f64,
}

impl std::ops::AddAssign for Units {
    fn add_assign(&mut self, other: Self) {
        self.read += other.read;
        self.write += other.write;
    }
}

impl std::ops::Sub for Units {
    type Output = Units;
    fn sub(self, other: Self) -> Units {
        Units {
            read: self.read - other.read,
            write: self.write - other.write,
        }
    }
}

/// What the store consumed since accounting started (or was last reset).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Consumed {
    /// Requests sent (including each page of a query).
    pub requests: u64,
    /// The sum of the `ConsumedCapacity` DynamoDB returned (see the module docs for moto).
    pub reported: Units,
    /// AWS's rules applied to the item sizes (see the module docs).
    pub estimated: Units,
    /// Estimated write units by where they land: `table`, or an index name.
    pub writes_by_target: BTreeMap<String, f64>,
    /// Estimated read units by what read them: `GetItem`, `Query table`, `Query {index}`,
    /// `BatchGetItem`.
    pub reads_by_source: BTreeMap<String, f64>,
    /// Write units not charged because an index entry stayed exactly as it was: what they would
    /// add if DynamoDB billed such rewrites after all (not included in `estimated`).
    pub unchanged_index_entries: f64,
}

impl Consumed {
    /// What was consumed since `earlier` (a copy taken before).
    pub fn since(&self, earlier: &Consumed) -> Consumed {
        let diff = |now: &BTreeMap<String, f64>, then: &BTreeMap<String, f64>| {
            now.iter()
                .map(|(k, v)| (k.clone(), v - then.get(k).copied().unwrap_or(0.0)))
                .filter(|(_, v)| *v != 0.0)
                .collect()
        };
        Consumed {
            requests: self.requests - earlier.requests,
            reported: self.reported - earlier.reported,
            estimated: self.estimated - earlier.estimated,
            writes_by_target: diff(&self.writes_by_target, &earlier.writes_by_target),
            reads_by_source: diff(&self.reads_by_source, &earlier.reads_by_source),
            unchanged_index_entries: self.unchanged_index_entries - earlier.unchanged_index_entries,
        }
    }
}

/// An item's entry in one index: its index key, what else it projects, and its size.
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    key: (String, String),
    /// The projected attributes other than the index key, in a comparable form.
    projected: BTreeMap<String, String>,
    size: usize,
}

/// DynamoDB's per-entry overhead in an index (documented for storage; counted for writes too,
/// which only matters near a KB boundary).
const INDEX_ENTRY_OVERHEAD: usize = 100;

/// What is known of an item's last image: its size and its entry in each index (`None`: absent).
#[derive(Debug, Clone, PartialEq)]
struct Image {
    size: usize,
    entries: Vec<Option<Entry>>,
}

impl Image {
    fn of(item: &Item) -> Self {
        let text = |name: &str| match item.get(name) {
            Some(AttributeValue::S(v)) => Some(v.clone()),
            Some(AttributeValue::N(v)) => Some(v.clone()),
            _ => None,
        };
        let entry = |hash: &str, range: &str, projected: &[&str]| -> Option<Entry> {
            let key = (text(hash)?, text(range)?);
            let mut names: Vec<&str> = vec![PK, SK];
            names.extend(projected.iter().copied());
            let mut size = INDEX_ENTRY_OVERHEAD + hash.len() + key.0.len() + range.len();
            size += key.1.len();
            let mut kept = BTreeMap::new();
            for name in names {
                if let Some(value) = item.get(name) {
                    size += name.len() + value_size(value);
                    kept.insert(name.to_owned(), format!("{value:?}"));
                }
            }
            Some(Entry {
                key,
                projected: kept,
                size,
            })
        };
        Self {
            size: item_size(item),
            entries: INDEXES
                .iter()
                .map(|(_, hash, range, projected)| entry(hash, range, projected))
                .collect(),
        }
    }
}

#[derive(Debug, Default)]
struct State {
    consumed: Consumed,
    images: HashMap<(String, String), Image>,
}

impl State {
    /// Charges the delete of the item at `key`: its table units times `factor`, and one write
    /// per index entry it had.
    fn delete(&mut self, key: &Item, factor: f64) {
        let old = primary_key(key).and_then(|k| self.images.remove(&k));
        let table = factor * blocks(old.as_ref().map_or(0, |o| o.size), KB);
        let mut units = table;
        *self
            .consumed
            .writes_by_target
            .entry("table".to_owned())
            .or_insert(0.0) += table;
        if let Some(old) = &old {
            for (i, (index, _, _, _)) in INDEXES.iter().enumerate() {
                if let Some(entry) = &old.entries[i] {
                    let u = blocks(entry.size, KB);
                    units += u;
                    *self
                        .consumed
                        .writes_by_target
                        .entry((*index).to_owned())
                        .or_insert(0.0) += u;
                }
            }
        }
        self.consumed.estimated.write += units;
    }
}

/// The accounting of one store (shared by its clones).
#[derive(Debug, Default)]
pub(crate) struct Accounting {
    state: Mutex<State>,
}

const KB: usize = 1024;
const READ_UNIT: usize = 4 * KB;

/// Units for `bytes` in blocks of `block` (at least one block).
fn blocks(bytes: usize, block: usize) -> f64 {
    bytes.div_ceil(block).max(1) as f64
}

fn primary_key(item: &Item) -> Option<(String, String)> {
    match (item.get(PK), item.get(SK)) {
        (Some(AttributeValue::S(pk)), Some(AttributeValue::S(sk))) => {
            Some((pk.clone(), sk.clone()))
        }
        _ => None,
    }
}

/// The reported units of one `ConsumedCapacity`.
fn reported(capacity: &ConsumedCapacity) -> f64 {
    capacity.capacity_units().unwrap_or(0.0)
}

impl Accounting {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic mid-update leaves figures that are at worst one request short.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A copy of the figures.
    pub(crate) fn consumed(&self) -> Consumed {
        self.lock().consumed.clone()
    }

    /// Starts the figures again from zero (what is known of items is kept).
    pub(crate) fn reset(&self) {
        self.lock().consumed = Consumed::default();
    }

    /// One write request that put `items` (one for `PutItem`, several for a transaction).
    pub(crate) fn wrote(
        &self,
        items: &[&Item],
        transactional: bool,
        capacity: &[ConsumedCapacity],
    ) {
        let mut state = self.lock();
        let state = &mut *state;
        state.consumed.requests += 1;
        state.consumed.reported.write += capacity.iter().map(reported).sum::<f64>();
        for item in items {
            let new = Image::of(item);
            let key = primary_key(item);
            let old = key.as_ref().and_then(|k| state.images.get(k)).cloned();
            let table_size = old.as_ref().map_or(new.size, |o| o.size.max(new.size));
            let factor = if transactional { 2.0 } else { 1.0 };
            let mut charge = |target: &str, units: f64| {
                state.consumed.estimated.write += units;
                *state
                    .consumed
                    .writes_by_target
                    .entry(target.to_owned())
                    .or_insert(0.0) += units;
            };
            charge("table", factor * blocks(table_size, KB));
            let mut unchanged = 0.0;
            for (i, (index, _, _, _)) in INDEXES.iter().enumerate() {
                let before = old.as_ref().and_then(|o| o.entries[i].as_ref());
                let after = new.entries[i].as_ref();
                let units = match (before, after) {
                    (None, None) => 0.0,
                    (None, Some(a)) => blocks(a.size, KB),
                    (Some(b), None) => blocks(b.size, KB),
                    (Some(b), Some(a)) if b == a => {
                        unchanged += blocks(a.size, KB);
                        0.0
                    }
                    (Some(b), Some(a)) if b.key == a.key => blocks(a.size.max(b.size), KB),
                    (Some(b), Some(a)) => blocks(b.size, KB) + blocks(a.size, KB),
                };
                if units > 0.0 {
                    charge(index, units);
                }
            }
            state.consumed.unchanged_index_entries += unchanged;
            if let Some(key) = key {
                state.images.insert(key, new);
            }
        }
    }

    /// One `DeleteItem` of the item at `key`.
    pub(crate) fn deleted(&self, key: &Item, capacity: Option<&ConsumedCapacity>) {
        let mut state = self.lock();
        state.consumed.requests += 1;
        state.consumed.reported.write += capacity.map_or(0.0, reported);
        state.delete(key, 1.0);
    }

    /// The deletes of a `TransactWriteItems` whose puts [`Accounting::wrote`] counted (with the
    /// request and its reported units): each at twice a `DeleteItem`'s table units.
    pub(crate) fn deleted_in_transaction(&self, keys: &[Item]) {
        let mut state = self.lock();
        for key in keys {
            state.delete(key, 2.0);
        }
    }

    /// One read request (`GetItem`, or one page of a `Query` of `index`) that returned `items`.
    /// `whole`: the items are whole table items (not index projections), so they are what is
    /// known of those items from now on.
    pub(crate) fn read(
        &self,
        source: &str,
        items: &[Item],
        consistent: bool,
        whole: bool,
        capacity: Option<&ConsumedCapacity>,
    ) {
        let bytes: usize = items.iter().map(item_size).sum();
        let units = blocks(bytes, READ_UNIT) * if consistent { 1.0 } else { 0.5 };
        self.charge_read(source, items, units, whole, capacity.into_iter());
    }

    /// One `BatchGetItem` request that returned `items`: each item is rounded up on its own.
    pub(crate) fn read_batch(
        &self,
        items: &[Item],
        consistent: bool,
        capacity: &[ConsumedCapacity],
    ) {
        let units: f64 = items
            .iter()
            .map(|item| blocks(item_size(item), READ_UNIT))
            .sum::<f64>()
            * if consistent { 1.0 } else { 0.5 };
        self.charge_read("BatchGetItem", items, units, true, capacity.iter());
    }

    fn charge_read<'a>(
        &self,
        source: &str,
        items: &[Item],
        units: f64,
        whole: bool,
        capacity: impl Iterator<Item = &'a ConsumedCapacity>,
    ) {
        let mut state = self.lock();
        state.consumed.requests += 1;
        state.consumed.reported.read += capacity.map(reported).sum::<f64>();
        state.consumed.estimated.read += units;
        *state
            .consumed
            .reads_by_source
            .entry(source.to_owned())
            .or_insert(0.0) += units;
        if !whole {
            return;
        }
        for item in items {
            if let Some(key) = primary_key(item) {
                state.images.insert(key, Image::of(item));
            }
        }
    }
}

/// An item's size in bytes by DynamoDB's rules: attribute names plus values.
pub fn item_size(item: &Item) -> usize {
    item.iter().map(|(k, v)| k.len() + value_size(v)).sum()
}

/// A value's size: strings and binaries by length, numbers by significant digits (one byte per
/// two, plus one), null and booleans one byte, lists and maps 3 bytes plus one per element and
/// their contents.
fn value_size(value: &AttributeValue) -> usize {
    match value {
        AttributeValue::S(s) => s.len(),
        AttributeValue::N(n) => number_size(n),
        AttributeValue::B(b) => b.as_ref().len(),
        AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
        AttributeValue::Ss(v) => v.iter().map(String::len).sum(),
        AttributeValue::Ns(v) => v.iter().map(|n| number_size(n)).sum(),
        AttributeValue::Bs(v) => v.iter().map(|b| b.as_ref().len()).sum(),
        AttributeValue::L(v) => 3 + v.iter().map(|e| 1 + value_size(e)).sum::<usize>(),
        AttributeValue::M(m) => {
            3 + m
                .iter()
                .map(|(k, e)| 1 + k.len() + value_size(e))
                .sum::<usize>()
        }
        // A type newer than this SDK: count nothing rather than guess.
        _ => 0,
    }
}

fn number_size(n: &str) -> usize {
    let digits: String = n.chars().filter(char::is_ascii_digit).collect();
    let significant = digits.trim_start_matches('0').trim_end_matches('0');
    significant.len().div_ceil(2) + 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dynamodb::schema::{n, s};

    fn item(pairs: &[(&str, AttributeValue)]) -> Item {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    }

    #[test]
    fn sizes_follow_dynamodb_rules() {
        // (case, item, bytes)
        let cases = [
            (
                "a string counts name and bytes",
                item(&[("ab", s("xyz"))]),
                5,
            ),
            ("utf-8 bytes, not characters", item(&[("a", s("é"))]), 3),
            (
                "a number by significant digits",
                item(&[("n", n(12_345))]),
                1 + 4,
            ),
            (
                "trailing zeros are not significant",
                item(&[("n", n(1_000_000))]),
                1 + 2,
            ),
            (
                "a map: 3 bytes, one per element, and its contents",
                item(&[(
                    "m",
                    AttributeValue::M(HashMap::from([("k".to_owned(), s("v"))])),
                )]),
                1 + 3 + 1 + 1 + 1,
            ),
            ("a boolean", item(&[("b", AttributeValue::Bool(true))]), 2),
        ];
        for (case, item, bytes) in cases {
            assert_eq!(item_size(&item), bytes, "{case}");
        }
    }

    /// A job item whose `by-queue-status` partition is `q#{group}` (`#DISPATCHED` for SCHEDULED
    /// to RUNNING).
    fn job_like(group: &str, runnable: bool, padding: usize) -> Item {
        let mut pairs = vec![
            (PK, s("JOB#1")),
            (SK, s("JOB")),
            ("doc", s("x".repeat(padding))),
            ("lq", s("q")),
            (
                "lqs",
                s(if group == "DISPATCHED" {
                    "#DISPATCHED".to_owned()
                } else {
                    format!("q#{group}")
                }),
            ),
            ("lsk", s("0001#1")),
            ("job_id", s("1")),
        ];
        if runnable {
            pairs.extend([("rq", s("q")), ("rk", s("#t#1"))]);
        }
        item(&pairs)
    }

    #[test]
    fn writes_charge_the_table_and_every_index_entry_that_appears_moves_or_leaves() {
        let accounting = Accounting::default();
        // Insert as SUBMITTED: table + an entry in each of the 2 listing indexes, one KB each.
        accounting.wrote(&[&job_like("SUBMITTED", false, 500)], false, &[]);
        let c = accounting.consumed();
        assert_eq!(c.estimated.write, 3.0, "{c:?}");
        assert_eq!(c.unchanged_index_entries, 0.0);

        // To RUNNABLE, in a transaction: table twice; the `by-queue` entry (keys and filter
        // attributes unchanged) costs nothing; `lqs` changes key (2); the runnable index entered.
        accounting.reset();
        accounting.wrote(&[&job_like("RUNNABLE", true, 500)], true, &[]);
        let c = accounting.consumed();
        assert_eq!(c.writes_by_target["table"], 2.0);
        assert!(!c.writes_by_target.contains_key("by-queue"), "{c:?}");
        assert_eq!(c.writes_by_target["by-queue-status"], 2.0);
        assert_eq!(c.writes_by_target["runnable"], 1.0);
        assert_eq!(c.estimated.write, 2.0 + 2.0 + 1.0, "{c:?}");
        assert_eq!(c.unchanged_index_entries, 1.0, "by-queue");

        // A bigger item (2.5 KB) leaving the runnable index for the dispatched group: the table
        // pays by the item's size, the indexes by their entries' (small: no document).
        accounting.reset();
        accounting.wrote(&[&job_like("DISPATCHED", false, 2_500)], false, &[]);
        let c = accounting.consumed();
        assert_eq!(c.writes_by_target["table"], 3.0);
        assert_eq!(c.writes_by_target["runnable"], 1.0);
        assert_eq!(c.writes_by_target["by-queue-status"], 1.0 + 1.0);
        assert!(!c.writes_by_target.contains_key("by-queue"), "{c:?}");

        // Within the group (SCHEDULED → STARTING → RUNNING) no index entry changes.
        accounting.reset();
        accounting.wrote(&[&job_like("DISPATCHED", false, 2_400)], false, &[]);
        let c = accounting.consumed();
        assert_eq!(c.estimated.write, 3.0, "the table alone: {c:?}");
        assert_eq!(c.unchanged_index_entries, 2.0, "by-queue, by-queue-status");

        // A change of an included attribute rewrites the entry in place: one write.
        accounting.reset();
        let mut renamed = job_like("DISPATCHED", false, 2_400);
        renamed.insert("name_lower".to_owned(), s("other"));
        accounting.wrote(&[&renamed], false, &[]);
        let c = accounting.consumed();
        assert_eq!(c.writes_by_target["by-queue"], 1.0, "{c:?}");
        assert_eq!(c.writes_by_target["by-queue-status"], 1.0, "{c:?}");
    }

    #[test]
    fn reads_round_up_per_call_and_halve_when_eventually_consistent() {
        let accounting = Accounting::default();
        let small = job_like("RUNNING", false, 100);
        accounting.read("GetItem", std::slice::from_ref(&small), true, true, None);
        accounting.read("Query by-queue", &[], false, false, None);
        let big: Vec<Item> = (0..3).map(|_| job_like("RUNNING", false, 3_000)).collect();
        accounting.read("Query by-queue", &big, false, false, None);
        let c = accounting.consumed();
        assert_eq!(c.reads_by_source["GetItem"], 1.0);
        // An empty query still costs the minimum; 3 × ~3.1 KB is 3 blocks of 4 KB, halved.
        assert_eq!(c.reads_by_source["Query by-queue"], 0.5 + 1.5);
        assert_eq!(c.requests, 3);

        // A batch rounds each item up on its own: three small items are three units, halved.
        accounting.reset();
        let smalls: Vec<Item> = (0..3).map(|_| job_like("RUNNING", false, 100)).collect();
        accounting.read_batch(&smalls, false, &[]);
        let c = accounting.consumed();
        assert_eq!(c.reads_by_source["BatchGetItem"], 1.5);
    }

    #[test]
    fn reported_capacity_is_summed_as_returned() {
        let accounting = Accounting::default();
        let capacity = ConsumedCapacity::builder().capacity_units(1.0).build();
        accounting.wrote(
            &[&job_like("SUBMITTED", false, 10)],
            false,
            std::slice::from_ref(&capacity),
        );
        accounting.read("GetItem", &[], true, true, Some(&capacity));
        let c = accounting.consumed();
        assert_eq!(
            c.reported,
            Units {
                read: 1.0,
                write: 1.0
            }
        );
        let later = accounting.consumed();
        assert_eq!(later.since(&c).requests, 0);
    }
}
