//! One shard of the memory store: its keys' states, bounded in bytes.
//!
//! Each entry is accounted as its key's bytes plus [`ENTRY_OVERHEAD`] (plus a sliding log's
//! entries, which live on the heap). When a write takes the shard past its budget, entries
//! are evicted in [`Rank`] order until it fits again:
//!
//! 1. **Expired first**: a state past its fresh time is equivalent to none, so dropping it
//!    forgets nothing (not counted as an eviction).
//! 2. **Closest to fresh next**: the earliest time at which the state would be fresh anyway
//!    (the core's [`tollgate::store::fresh_after`], handed over in
//!    [`tollgate::store::Write::Put`], from the write's `now`). An evicted key restarts
//!    fresh, so this victim gives back the least: its state was about to be forgotten by
//!    the clock.
//! 3. **Least spent next**, among states fresh at the same time (every key of a fixed
//!    window of one unit): the one whose last decision left the most of its limit
//!    (`limit - remaining` smallest). A key that denies (nothing left) goes after every key
//!    of that time with room left.
//! 4. **Oldest write last** breaks the remaining ties (a key written recently is in use).
//!
//! A concurrency count never becomes fresh by itself (only releases free it): it ranks
//! after every timed state.
//!
//! The rank of a state is fixed when it is written (its fresh *time*, not its distance to
//! it, so it does not move as the clock runs): an ordered index finds the victim in
//! O(log n), and every read and write is O(log n) (the keys are in a B-tree too: see
//! [`ENTRY_OVERHEAD`]).

use std::collections::BTreeMap;
use std::mem::size_of;
use std::sync::Arc;

use tollgate::algorithms::sliding_log;
use tollgate::{Nanos, State};

/// The bytes an entry costs beyond its key's, as accounted against the bound: its slot in
/// the map by key (the key's pointer, the state and its rank) and in the index by rank (the
/// rank and the key's pointer), both B-trees with nodes partly filled, and the key's
/// allocation (its counts and the allocator's rounding). Fitted to the resident memory
/// `examples/memory.rs` measures (see the README's sizing section).
///
/// Why B-trees and not a hash map for the keys: a hash map's table is a power of two that
/// doubles at once (and, with deletions, before it is full), so its bytes per key swing by
/// two; a B-tree's grow and shrink with its keys, and the estimate holds at any size.
pub const ENTRY_OVERHEAD: usize = 300;

/// Expired entries dropped per write at most, besides those an eviction takes: keeps a
/// write's work bounded while the clock empties the shard.
const EXPIRED_PER_WRITE: usize = 4;

/// Where an entry stands in the eviction order (smallest first; see the module).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Rank {
    /// When the state becomes fresh (`Nanos::MAX`: never by itself).
    fresh_at: Nanos,
    /// How much of its limit the state's last decision had spent.
    spent: u64,
    /// The write's sequence number in the shard (unique: no two ranks are equal).
    seq: u64,
}

struct Entry {
    state: State,
    rank: Rank,
}

/// One shard: the states by key, and the same keys in eviction order.
pub(super) struct Shard {
    map: BTreeMap<Arc<str>, Entry>,
    order: BTreeMap<Rank, Arc<str>>,
    bytes: usize,
    budget: usize,
    seq: u64,
}

/// What an entry costs against the bound.
fn cost(key: &str, state: &State) -> usize {
    let log = match state {
        State::SlidingLog(l) => l.entries.capacity() * size_of::<sliding_log::Entry>(),
        _ => 0,
    };
    key.len() + ENTRY_OVERHEAD + log
}

impl Shard {
    /// An empty shard that holds at most `budget` accounted bytes.
    pub(super) fn new(budget: usize) -> Shard {
        Shard {
            map: BTreeMap::new(),
            order: BTreeMap::new(),
            bytes: 0,
            budget,
            seq: 0,
        }
    }

    /// The keys held (some may have expired and not yet been dropped).
    pub(super) fn len(&self) -> usize {
        self.map.len()
    }

    /// The accounted bytes held.
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    /// The state of `key` at `now`, unless none is held or it has expired.
    pub(super) fn get(&self, key: &str, now: Nanos) -> Option<&State> {
        self.map
            .get(key)
            .filter(|e| e.rank.fresh_at > now)
            .map(|e| &e.state)
    }

    /// Forgets `key` (its state came back fresh).
    pub(super) fn delete(&mut self, key: &str) {
        if let Some((k, e)) = self.map.remove_entry(key) {
            self.order.remove(&e.rank);
            self.bytes -= cost(&k, &e.state);
        }
    }

    /// Stores `state` for `key`, fresh at `fresh_at` (`None`: never by itself), after a
    /// decision that had spent `spent` of its limit; then drops expired entries and evicts
    /// (in rank order, possibly this very entry when it ranks first) until the shard fits
    /// its budget. An entry larger than the whole budget is not kept (counted as evicted).
    /// Returns how many unexpired entries were evicted.
    pub(super) fn put(
        &mut self,
        key: &str,
        state: State,
        fresh_at: Option<Nanos>,
        spent: u64,
        now: Nanos,
    ) -> u64 {
        self.seq += 1;
        let rank = Rank {
            fresh_at: fresh_at.unwrap_or(Nanos::MAX),
            spent,
            seq: self.seq,
        };
        let added = cost(key, &state);
        if added > self.budget && !self.map.contains_key(key) {
            // Could never fit: not kept (as if evicted at once), and nothing else goes.
            return 1;
        }
        match self.map.get_mut(key) {
            Some(e) => {
                let k = self.order.remove(&e.rank).unwrap_or_else(|| Arc::from(key));
                self.bytes = self.bytes - cost(key, &e.state) + added;
                *e = Entry { state, rank };
                self.order.insert(rank, k);
            }
            None => {
                let k: Arc<str> = Arc::from(key);
                self.map.insert(k.clone(), Entry { state, rank });
                self.order.insert(rank, k);
                self.bytes += added;
            }
        }
        let mut evicted = 0;
        let mut expired = 0;
        while let Some(first) = self.order.first_key_value().map(|(r, _)| *r) {
            let over = self.bytes > self.budget;
            let stale = first.fresh_at <= now && expired < EXPIRED_PER_WRITE;
            if !over && !stale {
                break;
            }
            if first.fresh_at <= now {
                expired += 1;
            } else {
                evicted += 1;
            }
            self.remove_first();
        }
        evicted
    }

    fn remove_first(&mut self) {
        if let Some((_, k)) = self.order.pop_first() {
            if let Some(e) = self.map.remove(&k) {
                self.bytes -= cost(&k, &e.state);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::algorithms::fixed_window::FixedWindowState;

    fn window(count: u64) -> State {
        State::FixedWindow(FixedWindowState { window: 0, count })
    }

    /// A shard with room for exactly `n` entries of 2-byte keys.
    fn room_for(n: usize) -> Shard {
        Shard::new(n * (2 + ENTRY_OVERHEAD))
    }

    #[test]
    fn a_denying_key_outlives_fresher_keys_of_the_same_window() {
        let mut s = room_for(3);
        s.put("dd", window(50), Some(100), 50, 0);
        for k in ["a0", "a1", "a2", "a3", "a4", "a5"] {
            s.put(k, window(1), Some(100), 1, 1);
            assert!(s.get("dd", 1).is_some(), "the denying key evicted for {k}");
            assert!(s.bytes() <= 3 * (2 + ENTRY_OVERHEAD));
        }
        // The two newest of the spent-once keys remain, the oldest went first.
        assert!(s.get("a5", 1).is_some() && s.get("a4", 1).is_some());
        assert!(s.get("a3", 1).is_none());
    }

    #[test]
    fn the_state_closest_to_fresh_goes_first() {
        let mut s = room_for(2);
        s.put("la", window(1), Some(300), 1, 0);
        s.put("so", window(9), Some(200), 9, 0);
        s.put("nw", window(1), Some(250), 1, 0);
        assert!(
            s.get("so", 0).is_none(),
            "fresh at 200 goes before 250 and 300"
        );
        assert!(s.get("la", 0).is_some() && s.get("nw", 0).is_some());
    }

    #[test]
    fn expired_states_go_first_and_are_not_evictions() {
        let mut s = room_for(2);
        s.put("dd", window(50), Some(1_000), 50, 0);
        s.put("ex", window(1), Some(10), 1, 0);
        // At 20 "ex" has expired: making room for "nw" drops it, evicting nothing.
        assert_eq!(s.put("nw", window(1), Some(1_000), 1, 20), 0);
        assert!(s.get("dd", 20).is_some() && s.get("nw", 20).is_some());
        assert_eq!(s.len(), 2);
        // A full shard of live keys evicts: the least spent of them ("nw").
        assert_eq!(s.put("n2", window(1), Some(1_000), 1, 20), 1);
        assert!(s.get("nw", 20).is_none() && s.get("dd", 20).is_some());
    }

    #[test]
    fn a_concurrency_count_ranks_after_every_timed_state() {
        let mut s = room_for(2);
        s.put("cc", window(1), None, 1, 0);
        s.put("dd", window(50), Some(1_000), 50, 0);
        s.put("nw", window(50), Some(2_000), 50, 0);
        assert!(s.get("cc", 0).is_some() && s.get("dd", 0).is_none());
    }

    #[test]
    fn rewrites_and_deletes_keep_the_accounting_exact() {
        let mut s = room_for(4);
        for i in 0..1_000u64 {
            let key = format!("{:02}", i % 7);
            if i % 3 == 0 {
                s.delete(&key);
            } else {
                s.put(&key, window(i), Some(i + 50), i % 5, i);
            }
            let held: usize = s.map.keys().map(|k| k.len() + ENTRY_OVERHEAD).sum();
            assert_eq!(s.bytes(), held, "step {i}");
            assert_eq!(s.order.len(), s.map.len(), "step {i}");
            assert!(s.bytes() <= 4 * (2 + ENTRY_OVERHEAD), "step {i}");
        }
    }

    #[test]
    fn an_entry_larger_than_the_budget_is_not_kept() {
        let mut s = room_for(2);
        s.put("dd", window(5), Some(100), 5, 0);
        let big = "x".repeat(3 * ENTRY_OVERHEAD);
        // Not kept, and nothing goes for it: the bound holds.
        assert_eq!(s.put(&big, window(1), Some(100), 1, 0), 1);
        assert_eq!(s.put(&big, window(9), Some(100), 9, 0), 1);
        assert!(s.get(&big, 0).is_none() && s.get("dd", 0).is_some());
        assert!(s.bytes() <= 2 * (2 + ENTRY_OVERHEAD));
    }
}
