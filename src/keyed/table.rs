//! The keyed limiter's storage: a hash table that evicts by CLOCK, the classic approximation
//! of least-recently-used.
//!
//! Why not an exact LRU list: two links per key are 8 more bytes than the key and its state,
//! and a list walk is a third cache miss per check at a million keys. CLOCK keeps one bit
//! per key, in the index entry the look-up reads anyway:
//!
//! * a check sets the key's *used* bit (a new key starts without it, so a key seen once is
//!   the first to go);
//! * when the table is full, a hand sweeps the index: a used key loses its bit and is
//!   passed over (its second chance), the first key without it is evicted.
//!
//! So a key checked since the hand last passed it is never evicted while an idle one is
//! stored, which is the guarantee a rate limiter needs from its bound: an eviction only
//! forgets a key that has been quiet, and a forgotten key starts fresh (lenient, never
//! over-charged).
//!
//! Layout (safe Rust, no `unsafe`): the keys and their states live densely in a slab; the
//! index is an open-addressing array (linear probing, at most 7/8 full) of one `u32` per
//! entry: full and used bits, six bits of the key's hash (so a probe compares keys only when
//! they match) and the slab position. A look-up is two cache misses at most: the index
//! entry, then the slot. The index grows by doubling up to the size `max_keys` needs and no
//! further. Per key: the slot (key + state) plus 4 bytes times at most 8/7.
//!
//! Deletion shifts the probe run back over the hole (no tombstones) and moves the slab's last
//! slot into the freed one, so a long-running table never degrades.

use alloc::boxed::Box;
use alloc::vec;
use alloc::vec::Vec;
use core::hash::{BuildHasher, Hash};
use core::mem;

/// An empty index entry.
const EMPTY: u32 = 0;
/// The entry holds a key.
const FULL: u32 = 1 << 31;
/// The key was checked since the clock hand last passed it.
const USED: u32 = 1 << 30;
/// Six bits of the key's hash.
const TAG: u32 = 0x3f << 24;
/// The slab position.
const POS: u32 = (1 << 24) - 1;

/// The most keys one table holds (the slab position's 24 bits); the store shards above it.
pub(super) const MAX_KEYS: usize = POS as usize;

/// The full bit and tag of a key's entry. The tag takes hash bits 40..46: the home uses the
/// low 32 bits and the shard the high ones.
#[inline(always)]
fn tag(hash: u64) -> u32 {
    FULL | ((hash >> 16) as u32 & TAG)
}

/// The most keys an index of `slots` entries holds before it grows (7/8 load).
const fn max_len(slots: usize) -> usize {
    slots / 8 * 7 + slots % 8 * 7 / 8
}

/// The fewest index entries that hold `keys` keys (never fewer than 8).
fn slots_for(keys: usize) -> usize {
    let mut n = keys.saturating_add(keys / 7).max(8);
    while max_len(n) < keys {
        n += 1;
    }
    n
}

/// One stored key and its state.
pub(super) struct Slot<K, C> {
    /// The key.
    pub key: K,
    /// Its state, packed for the store's policy.
    pub cell: C,
}

/// A bounded hash table from keys to cells with CLOCK eviction. Not synchronised: the
/// store wraps each shard's table in a lock.
pub(super) struct Table<K, C> {
    index: Box<[u32]>,
    slab: Vec<Slot<K, C>>,
    max_keys: usize,
    max_slots: usize,
    hand: usize,
}

impl<K: Hash, C> Table<K, C> {
    /// An empty table (no allocation) that will hold at most `max_keys` keys (at least 1,
    /// at most [`MAX_KEYS`]).
    pub fn new(max_keys: usize) -> Self {
        let max_keys = max_keys.clamp(1, MAX_KEYS);
        Table {
            index: Box::new([]),
            slab: Vec::new(),
            max_keys,
            max_slots: slots_for(max_keys),
            hand: 0,
        }
    }

    /// The number of keys stored.
    pub fn len(&self) -> usize {
        self.slab.len()
    }

    /// Where the probe for `hash` starts: the hash mixed (one multiplication by 2^64 / the
    /// golden ratio, keeping the high half), scaled to the index (a multiplication, so any
    /// index size works).
    ///
    /// Why the mix: the store's hasher is seeded from addresses, and with the hash's low 32
    /// bits taken as they are, some seeds clustered the probes of small integer keys: the
    /// count of a check at 10k keys varied by over a quarter from seed to seed unmixed, and not
    /// mixed (PERF.md, "Measured reasons in the code").
    #[inline(always)]
    fn home(&self, hash: u64) -> usize {
        let mixed = hash.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
        ((mixed * self.index.len() as u64) >> 32) as usize
    }

    #[inline(always)]
    fn next(&self, i: usize) -> usize {
        if i + 1 == self.index.len() {
            0
        } else {
            i + 1
        }
    }

    /// The index entry of the key for which `eq` is true, if stored.
    #[inline(always)]
    pub fn find(&self, hash: u64, eq: impl Fn(&K) -> bool) -> Option<usize> {
        if self.index.is_empty() {
            return None;
        }
        let t = tag(hash);
        let mut i = self.home(hash);
        // Terminates: the index is never full (at most 7/8 of it holds keys).
        loop {
            let e = self.index[i];
            if e == EMPTY {
                return None;
            }
            if e & (FULL | TAG) == t && eq(&self.slab[(e & POS) as usize].key) {
                return Some(i);
            }
            i = self.next(i);
        }
    }

    /// The slot of the entry at `i`, which [`Table::find`] returned since the last change.
    #[inline(always)]
    pub fn slot_mut(&mut self, i: usize) -> &mut Slot<K, C> {
        &mut self.slab[(self.index[i] & POS) as usize]
    }

    /// Marks the key at `i` as used (it survives the clock hand's next pass).
    #[inline(always)]
    pub fn touch(&mut self, i: usize) {
        let e = self.index[i];
        if e & USED == 0 {
            self.index[i] = e | USED;
        }
    }

    /// Stores a key that is not in the table, evicting an idle key first (and returning it)
    /// if the table holds `max_keys` already.
    pub fn insert<S: BuildHasher>(
        &mut self,
        hasher: &S,
        hash: u64,
        slot: Slot<K, C>,
    ) -> Option<Slot<K, C>> {
        let mut evicted = None;
        if self.len() >= self.max_keys {
            evicted = Some(self.evict(hasher));
        } else if self.len() >= max_len(self.index.len()) {
            self.grow(hasher);
        }
        let i = self.vacant(hash);
        self.index[i] = tag(hash) | self.slab.len() as u32;
        if self.slab.len() == self.slab.capacity() {
            // Grow the slab like the index, but never past the bound.
            let more = self.slab.len().max(4).min(self.max_keys - self.slab.len());
            self.slab.reserve_exact(more);
        }
        self.slab.push(slot);
        evicted
    }

    /// The first empty entry of `hash`'s probe.
    fn vacant(&self, hash: u64) -> usize {
        let mut i = self.home(hash);
        while self.index[i] != EMPTY {
            i = self.next(i);
        }
        i
    }

    /// Doubles the index (up to the size `max_keys` needs), keeping every key and its bit.
    fn grow<S: BuildHasher>(&mut self, hasher: &S) {
        let slots = (self.index.len() * 2).clamp(8, self.max_slots);
        let old = mem::replace(&mut self.index, vec![EMPTY; slots].into_boxed_slice());
        for e in old.iter().copied().filter(|&e| e != EMPTY) {
            let h = hasher.hash_one(&self.slab[(e & POS) as usize].key);
            let i = self.vacant(h);
            self.index[i] = e;
        }
        self.hand = 0;
    }

    /// Evicts one idle key by CLOCK and returns it.
    fn evict<S: BuildHasher>(&mut self, hasher: &S) -> Slot<K, C> {
        // Terminates: called with at least one key stored, and one lap clears every bit.
        loop {
            let i = self.hand;
            let e = self.index[i];
            if e & USED != 0 {
                self.index[i] = e & !USED;
            } else if e != EMPTY {
                // The hand stays here: the entry shifted into the hole is looked at next.
                return self.remove(hasher, i);
            }
            self.hand = self.next(i);
        }
    }

    /// The index entry pointing at slab position `pos`.
    fn entry_of<S: BuildHasher>(&self, hasher: &S, pos: usize) -> usize {
        let mut i = self.home(hasher.hash_one(&self.slab[pos].key));
        while (self.index[i] & POS) as usize != pos || self.index[i] == EMPTY {
            i = self.next(i);
        }
        i
    }

    /// Removes the key of the entry at `i` (from [`Table::find`]) and returns it, shifting
    /// the rest of its probe run back so that every key stays reachable.
    pub fn remove<S: BuildHasher>(&mut self, hasher: &S, mut i: usize) -> Slot<K, C> {
        let pos = (self.index[i] & POS) as usize;
        // The slab's last slot moves into `pos`: repoint its entry first.
        let last = self.slab.len() - 1;
        if pos != last {
            let j = self.entry_of(hasher, last);
            self.index[j] = (self.index[j] & !POS) | pos as u32;
        }
        let out = self.slab.swap_remove(pos);
        self.index[i] = EMPTY;
        let n = self.index.len();
        let mut j = self.next(i);
        while self.index[j] != EMPTY {
            let e = self.index[j];
            let home = self.home(hasher.hash_one(&self.slab[(e & POS) as usize].key));
            // The entry at j may fill the hole at i if its probe started at or before i,
            // that is, if i lies on the way from its home to j.
            if (j + n - home) % n >= (j + n - i) % n {
                self.index[i] = e;
                self.index[j] = EMPTY;
                i = j;
            }
            j = self.next(j);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hashbrown::DefaultHashBuilder;

    type T = Table<u64, u64>;

    /// A deterministic pseudo-random key below `n` (a 64-bit LCG's high bits).
    fn next_key(x: &mut u64, n: u64) -> u64 {
        *x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (*x >> 33) % n
    }

    fn put(t: &mut T, s: &DefaultHashBuilder, k: u64) {
        let h = s.hash_one(k);
        match t.find(h, |&x| x == k) {
            Some(i) => t.touch(i),
            None => drop(t.insert(
                s,
                h,
                Slot {
                    key: k,
                    cell: k * 10,
                },
            )),
        }
    }

    fn get(t: &mut T, s: &DefaultHashBuilder, k: u64) -> Option<u64> {
        let h = s.hash_one(k);
        t.find(h, |&x| x == k).map(|i| t.slot_mut(i).cell)
    }

    #[test]
    fn sizes_hold_their_keys() {
        for keys in [1, 2, 7, 8, 9, 100, 62_500, 1 << 20] {
            let n = slots_for(keys);
            assert!(
                max_len(n) >= keys && max_len(n) < n,
                "{keys} keys in {n} slots"
            );
            assert!(max_len(n - 1) < keys || n == 8);
        }
    }

    #[test]
    fn growth_removals_and_evictions_keep_the_table_equal_to_a_model() {
        let s = DefaultHashBuilder::default();
        let mut t = T::new(500);
        let mut model = std::collections::BTreeMap::new();
        let mut x = 7u64;
        for step in 0..60_000u64 {
            let k = next_key(&mut x, 2_000);
            let h = s.hash_one(k);
            match (t.find(h, |&y| y == k), step % 5) {
                (Some(i), 0) => {
                    assert_eq!(t.remove(&s, i).key, k);
                    model.remove(&k);
                }
                (Some(i), _) => {
                    t.slot_mut(i).cell = step;
                    t.touch(i);
                    model.insert(k, step);
                }
                (None, _) => {
                    assert!(!model.contains_key(&k), "key {k} lost");
                    if let Some(gone) = t.insert(&s, h, Slot { key: k, cell: step }) {
                        assert_eq!(model.remove(&gone.key), Some(gone.cell));
                    }
                    model.insert(k, step);
                }
            }
            assert!(t.len() <= 500);
            assert_eq!(t.len(), model.len());
        }
        for (&k, &v) in &model {
            assert_eq!(get(&mut t, &s, k), Some(v), "key {k}");
        }
    }

    #[test]
    fn the_bound_evicts_an_unused_key_first() {
        let s = DefaultHashBuilder::default();
        let mut t = T::new(100);
        for k in 0..100 {
            put(&mut t, &s, k);
        }
        // Use every key but 37 again: 37 is the only one without a second chance.
        for k in (0..100).filter(|&k| k != 37) {
            put(&mut t, &s, k);
        }
        put(&mut t, &s, 1000);
        assert_eq!(t.len(), 100);
        assert_eq!(get(&mut t, &s, 37), None);
        assert!((0..100)
            .filter(|&k| k != 37)
            .all(|k| get(&mut t, &s, k).is_some()));
        assert_eq!(get(&mut t, &s, 1000), Some(10_000));
    }

    #[test]
    fn memory_is_bounded_by_max_keys() {
        let s = DefaultHashBuilder::default();
        let mut t = T::new(1000);
        for k in 0..100_000 {
            put(&mut t, &s, k);
            assert!(t.len() <= 1000);
        }
        assert_eq!(t.len(), 1000);
        // Evictions kept the index consistent: exactly the stored keys are found.
        let found = (0..100_000)
            .filter(|&k| get(&mut t, &s, k).is_some())
            .count();
        assert_eq!(found, 1000);
        assert_eq!(t.index.len(), slots_for(1000));
        assert!(t.slab.capacity() <= 1000);
    }
}
