//! The deny cache: a process's memory of denials, so that a key known to be denied is
//! denied again without a round trip to the store until its retry time (more traffic can
//! only push that time later). Used by the Redis fleet store (Rust and npm) and the edge
//! worker's isolates, each on its own clock ([`Nanos`] from any fixed epoch).

use core::borrow::Borrow;
use core::hash::Hash;

use alloc::vec::Vec;
use hashbrown::HashMap;

use crate::stack::StackDecision;
use crate::{Decision, Nanos};

/// A remembered denial: until `until`, a request for the same key costing at least `cost`
/// is denied as well.
#[derive(Clone, Debug)]
struct Denial {
    cost: u64,
    at: Nanos,
    until: Nanos,
    decided: StackDecision,
}

/// Remembered denials by key (a store's key, or key and tenant), bounded.
///
/// ```
/// use tollgate::store::DenyCache;
/// use tollgate::stack::StackDecision;
/// use tollgate::{Decision, NANOS_PER_SEC};
///
/// let denied = Decision { allowed: false, limit: 5, retry_after: 2 * NANOS_PER_SEC, reset_after: 3 * NANOS_PER_SEC, ..Decision::default() };
/// let decided = StackDecision { decision: denied, each: vec![denied] };
/// let mut cache = DenyCache::new(1000);
/// cache.remember("k", 1, 10 * NANOS_PER_SEC, &decided, denied.retry_after);
/// // Half a second later: denied from memory, the waits counted down.
/// let hit = cache.get("k", 1, 10 * NANOS_PER_SEC + NANOS_PER_SEC / 2).unwrap();
/// assert_eq!(hit.decision.retry_after, 3 * NANOS_PER_SEC / 2);
/// // A cheaper request may fit: not answered from memory.
/// assert!(cache.get("k", 0, 10 * NANOS_PER_SEC).is_none());
/// // At the retry time the memory is gone.
/// assert!(cache.get("k", 1, 12 * NANOS_PER_SEC).is_none());
/// ```
#[derive(Clone, Debug)]
pub struct DenyCache<K> {
    map: HashMap<K, Denial>,
    max: usize,
}

impl<K: Hash + Eq> DenyCache<K> {
    /// A cache holding at most `max` denials (at least 1).
    pub fn new(max: usize) -> Self {
        DenyCache {
            map: HashMap::new(),
            max: max.max(1),
        }
    }

    /// The remembered denial of `key` that still holds at `now` for a request of `cost`,
    /// its durations counted down to `now`. A denial whose retry time has come is
    /// forgotten; a cheaper request than the one denied is not answered (it may fit).
    pub fn get<Q>(&mut self, key: &Q, cost: u64, now: Nanos) -> Option<StackDecision>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let d = self.map.get(key)?;
        if now >= d.until {
            self.map.remove(key);
            return None;
        }
        if cost < d.cost {
            return None;
        }
        let elapsed = now.saturating_sub(d.at);
        let age = |x: &Decision| Decision {
            reset_after: x.reset_after.saturating_sub(elapsed),
            retry_after: x.retry_after.saturating_sub(elapsed),
            ..*x
        };
        Some(StackDecision {
            decision: age(&d.decided.decision),
            each: d.decided.each.iter().map(age).collect(),
        })
    }

    /// Remembers `decided` for `key` and `cost`, decided at `at` (for a store's decision:
    /// when its read was sent, so the memory never outlasts the true retry time) with the
    /// retry time `retry` (the decision's, or a lower bound of it: see
    /// [`super::fleet::lower_bound`]). Only a denial with a retry time is remembered: an
    /// admission is not, nor a full concurrency limit (freed by a release, which no clock
    /// predicts). An existing memory of the key is kept when it lasts longer and was for a
    /// cost no higher. When full, the denials past their time go, then the half that ends
    /// soonest.
    pub fn remember(
        &mut self,
        key: K,
        cost: u64,
        at: Nanos,
        decided: &StackDecision,
        retry: Nanos,
    ) {
        if decided.decision.allowed || retry == 0 {
            return;
        }
        let until = at.saturating_add(retry);
        if let Some(old) = self.map.get(&key) {
            if old.until >= until && old.cost <= cost {
                return;
            }
        }
        if self.map.len() >= self.max && !self.map.contains_key(&key) {
            self.map.retain(|_, d| d.until > at);
            if self.map.len() >= self.max {
                let mut ends: Vec<Nanos> = self.map.values().map(|d| d.until).collect();
                ends.sort_unstable();
                let cut = ends[ends.len() / 2];
                self.map.retain(|_, d| d.until > cut);
            }
        }
        self.map.insert(
            key,
            Denial {
                cost,
                at,
                until,
                decided: decided.clone(),
            },
        );
    }

    /// Keeps only the denials whose key `keep` accepts (a reset forgets a key's).
    pub fn retain(&mut self, mut keep: impl FnMut(&K) -> bool) {
        self.map.retain(|k, _| keep(k));
    }

    /// Denials held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether no denial is held.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NANOS_PER_MS;

    fn denied(retry_ms: u64, reset_ms: u64) -> StackDecision {
        let d = Decision {
            allowed: false,
            limit: 10,
            remaining: 0,
            reset_after: reset_ms * NANOS_PER_MS,
            retry_after: retry_ms * NANOS_PER_MS,
            delay: 0,
        };
        StackDecision {
            decision: d,
            each: alloc::vec![d],
        }
    }

    #[test]
    fn counts_down_and_expires() {
        let mut c = DenyCache::new(10);
        let x = denied(1500, 2000);
        c.remember("k", 1, 1000 * NANOS_PER_MS, &x, x.decision.retry_after);
        let got = c.get("k", 1, 1500 * NANOS_PER_MS).unwrap();
        assert_eq!(got.decision.retry_after_ms(), 1000);
        assert_eq!(got.each[0].retry_after_ms(), 1000);
        assert_eq!(got.each[0].reset_after_ms(), 1500);
        assert!(c.get("k", 1, 2500 * NANOS_PER_MS).is_none());
        assert!(c.is_empty(), "an expired denial is dropped on sight");
    }

    #[test]
    fn only_denials_with_a_retry_time_are_remembered() {
        let mut c = DenyCache::new(10);
        let mut admitted = denied(0, 0);
        admitted.decision.allowed = true;
        c.remember("a", 1, 0, &admitted, 5);
        c.remember("c", 1, 0, &denied(0, 0), 0); // a full concurrency limit
        assert!(c.is_empty());
    }

    #[test]
    fn a_longer_or_cheaper_denial_replaces_the_memory() {
        let mut c = DenyCache::new(10);
        let (short, long) = (denied(100, 100), denied(900, 900));
        c.remember("k", 2, 0, &long, long.decision.retry_after);
        // Shorter and for more: the longer memory stays.
        c.remember("k", 3, 0, &short, short.decision.retry_after);
        assert_eq!(c.get("k", 3, 0).unwrap().decision.retry_after_ms(), 900);
        // For less: it replaces (a request of cost 1 is now known denied too).
        c.remember("k", 1, 0, &short, short.decision.retry_after);
        assert_eq!(c.get("k", 1, 0).unwrap().decision.retry_after_ms(), 100);
    }

    #[test]
    fn bounded_dropping_what_ends_soonest() {
        let mut c = DenyCache::new(4);
        for (i, k) in ["a", "b", "c", "d"].into_iter().enumerate() {
            let d = denied(100 * (i as u64 + 1), 0);
            c.remember(k, 1, 0, &d, d.decision.retry_after);
        }
        let e = denied(1000, 0);
        c.remember("e", 1, 0, &e, e.decision.retry_after);
        assert!(c.len() <= 4);
        assert!(c.get("a", 1, 0).is_none() && c.get("b", 1, 0).is_none());
        assert!(c.get("d", 1, 0).is_some() && c.get("e", 1, 0).is_some());
        c.retain(|k| *k != "e");
        assert!(c.get("e", 1, 0).is_none());
    }
}
