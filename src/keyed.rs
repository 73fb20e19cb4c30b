//! A keyed in-memory limiter: one state per key, memory bounded, safe to share between
//! threads.
//!
//! * **Fresh keys are not stored.** When a decision leaves a key fresh (a full bucket,
//!   empty windows), the key is removed; memory only holds keys that are actually limited.
//! * **At most `max_keys` keys** per limit; when full, the least recently used key is
//!   evicted (exact LRU within a shard; large limiters are split into 16 shards, each with
//!   its share of `max_keys`). An evicted key starts fresh: eviction trades memory for a
//!   little leniency toward the longest-idle keys, never for over-charging.
//! * **Stacks and fair share** decide all or nothing across their limits, with the locks of
//!   every limit held together (always taken in the same order, so never deadlocking).
//!
//! ```
//! use std::num::NonZeroUsize;
//! use tollgate::keyed::KeyedLimiter;
//! let limiter = KeyedLimiter::new("2/s".parse().unwrap(), NonZeroUsize::new(1000).unwrap());
//! assert!(limiter.check("alice", 0, 1).unwrap().allowed);
//! assert!(limiter.check("alice", 0, 1).unwrap().allowed);
//! assert!(!limiter.check("alice", 0, 1).unwrap().allowed);
//! assert!(limiter.check("bob", 0, 1).unwrap().allowed);
//! assert_eq!(limiter.len(), 2);
//! // A second later both buckets are full again: peeking reports it, and the keys are gone.
//! assert_eq!(limiter.peek("alice", 1_000_000_000).unwrap().remaining, 2);
//! ```

use alloc::borrow::ToOwned;
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::borrow::Borrow;
use core::hash::{BuildHasher, Hash};
use core::num::NonZeroUsize;
use std::sync::{Mutex, MutexGuard};

use hashbrown::{DefaultHashBuilder, HashTable};

use crate::algorithms::{
    concurrency::ConcurrencyState, fixed_window::FixedWindowState, gcra::GcraState,
    leaky_bucket::LeakyBucketState, leaky_queue::LeakyQueueState, sliding_log::SlidingLogState,
    sliding_window::SlidingWindowState, token_bucket::TokenBucketState,
};
use crate::decide::decide_at;
use crate::fair_share::{skips_tenant_window, FairShare};
use crate::stack::{combine, StackDecision};
use crate::{
    admit, decide, release, DecideError, Decision, Field, Nanos, Policy, PolicyError, Rule, State,
    Verdict,
};

const NIL: u32 = u32::MAX;

/// A [`State`] as the store keeps it: the 128-bit fields split into two `u64`s (so the enum
/// is 8-byte aligned) and the sliding log boxed. 32 bytes instead of 48 per key.
#[derive(Clone)]
enum Packed {
    TokenBucket([u64; 2], Nanos),
    Gcra([u64; 2]),
    SlidingWindow(SlidingWindowState),
    FixedWindow(FixedWindowState),
    SlidingLog(Box<SlidingLogState>),
    LeakyBucket([u64; 2], Nanos),
    LeakyQueue([u64; 2]),
    Concurrency(ConcurrencyState),
}

fn split(v: u128) -> [u64; 2] {
    [(v >> 64) as u64, v as u64]
}

fn join(v: [u64; 2]) -> u128 {
    ((v[0] as u128) << 64) | v[1] as u128
}

impl From<State> for Packed {
    fn from(s: State) -> Packed {
        match s {
            State::TokenBucket(t) => Packed::TokenBucket(split(t.credit), t.last),
            State::Gcra(g) => Packed::Gcra(split(g.tat)),
            State::SlidingWindow(w) => Packed::SlidingWindow(w),
            State::FixedWindow(w) => Packed::FixedWindow(w),
            State::SlidingLog(l) => Packed::SlidingLog(Box::new(l)),
            State::LeakyBucket(b) => Packed::LeakyBucket(split(b.level), b.last),
            State::LeakyQueue(q) => Packed::LeakyQueue(split(q.last_departure)),
            State::Concurrency(c) => Packed::Concurrency(c),
        }
    }
}

impl From<Packed> for State {
    fn from(p: Packed) -> State {
        match p {
            Packed::TokenBucket(credit, last) => State::TokenBucket(TokenBucketState {
                credit: join(credit),
                last,
            }),
            Packed::Gcra(tat) => State::Gcra(GcraState { tat: join(tat) }),
            Packed::SlidingWindow(w) => State::SlidingWindow(w),
            Packed::FixedWindow(w) => State::FixedWindow(w),
            Packed::SlidingLog(l) => State::SlidingLog(*l),
            Packed::LeakyBucket(level, last) => State::LeakyBucket(LeakyBucketState {
                level: join(level),
                last,
            }),
            Packed::LeakyQueue(d) => State::LeakyQueue(LeakyQueueState {
                last_departure: join(d),
            }),
            Packed::Concurrency(c) => State::Concurrency(c),
        }
    }
}

struct Slot<K> {
    key: K,
    state: Packed,
    prev: u32,
    next: u32,
}

/// One shard: a hash table of slab indices, and the slab threaded on an LRU list.
struct Shard<K> {
    table: HashTable<u32>,
    slots: Vec<Slot<K>>,
    free: Vec<u32>,
    /// Most recently used.
    head: u32,
    /// Least recently used.
    tail: u32,
    cap: usize,
}

impl<K: Hash + Eq> Shard<K> {
    fn new(cap: usize) -> Self {
        Shard {
            table: HashTable::new(),
            slots: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
            cap,
        }
    }

    fn len(&self) -> usize {
        self.table.len()
    }

    fn find<Q>(&self, hash: u64, key: &Q) -> Option<u32>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        self.table
            .find(hash, |&i| self.slots[i as usize].key.borrow() == key)
            .copied()
    }

    fn unlink(&mut self, i: u32) {
        let (prev, next) = (self.slots[i as usize].prev, self.slots[i as usize].next);
        if prev == NIL {
            self.head = next;
        } else {
            self.slots[prev as usize].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.slots[next as usize].prev = prev;
        }
    }

    fn push_front(&mut self, i: u32) {
        self.slots[i as usize].prev = NIL;
        self.slots[i as usize].next = self.head;
        if self.head != NIL {
            self.slots[self.head as usize].prev = i;
        } else {
            self.tail = i;
        }
        self.head = i;
    }

    fn remove(&mut self, hash: u64, i: u32) {
        self.unlink(i);
        if let Ok(entry) = self.table.find_entry(hash, |&j| j == i) {
            entry.remove();
        }
        self.free.push(i);
    }

    /// Stores `state` for `key` (found at `at`, or new), making it the most recent; `None`
    /// removes the key.
    fn put<S: BuildHasher>(
        &mut self,
        hasher: &S,
        hash: u64,
        at: Option<u32>,
        key: impl FnOnce() -> K,
        state: Option<State>,
    ) {
        match (at, state) {
            (Some(i), None) => self.remove(hash, i),
            (Some(i), Some(s)) => {
                self.slots[i as usize].state = s.into();
                if self.head != i {
                    self.unlink(i);
                    self.push_front(i);
                }
            }
            (None, None) => {}
            (None, Some(s)) => {
                if self.len() >= self.cap && self.tail != NIL {
                    let lru = self.tail;
                    let h = hasher.hash_one(&self.slots[lru as usize].key);
                    self.remove(h, lru);
                }
                let slot = Slot {
                    key: key(),
                    state: s.into(),
                    prev: NIL,
                    next: NIL,
                };
                let i = match self.free.pop() {
                    Some(i) => {
                        self.slots[i as usize] = slot;
                        i
                    }
                    None => {
                        self.slots.push(slot);
                        (self.slots.len() - 1) as u32
                    }
                };
                let slots = &self.slots;
                self.table
                    .insert_unique(hash, i, |&j| hasher.hash_one(&slots[j as usize].key));
                self.push_front(i);
            }
        }
    }
}

/// The states of one limit, for every key: sharded, LRU-bounded.
struct Store<K> {
    policy: Policy,
    shards: Box<[Mutex<Shard<K>>]>,
    hasher: DefaultHashBuilder,
}

impl<K: Hash + Eq> Store<K> {
    fn new(policy: Policy, max_keys: NonZeroUsize) -> Self {
        let max = max_keys.get().min(u32::MAX as usize - 1);
        let n = if max >= 4096 { 16 } else { 1 };
        let per = max.div_ceil(n);
        Store {
            policy,
            shards: (0..n).map(|_| Mutex::new(Shard::new(per))).collect(),
            hasher: DefaultHashBuilder::default(),
        }
    }

    fn lock(&self, hash: u64) -> MutexGuard<'_, Shard<K>> {
        // 32 middle bits of the hash scaled to the shard count (a multiplication, not a
        // division). hashbrown uses the top 7 bits and the low bits within a shard; these
        // stay independent of them.
        let i = (((hash >> 24) as u32 as u64 * self.shards.len() as u64) >> 32) as usize;
        // A panic while a lock was held cannot leave a shard half-written (every write is a
        // single assignment after the decision), so a poisoned lock is safe to reuse.
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One policy, one key: runs `f` on the key's state in place under the shard's lock,
    /// without copying the state or allocating (unless the key is new and limited), then
    /// stores what `f` left (`None`: fresh, the key is dropped).
    ///
    /// For a single policy, the state a denial returns is equivalent to the one it was given
    /// (refilled, pruned or rolled over), so it is stored either way. The store's states are
    /// all made by its own policy, so no mismatch can occur; `f` leaves the state untouched
    /// on an error.
    #[inline(always)]
    fn apply<Q, R>(
        &self,
        key: &Q,
        f: impl FnOnce(&Policy, &mut Option<State>) -> Result<R, DecideError>,
    ) -> Result<R, DecideError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let mut shard = self.lock(hash);
        let at = shard.find(hash, key);
        // A placeholder that owns nothing; the slot gets its state back below.
        let empty = Packed::Concurrency(ConcurrencyState { in_flight: 0 });
        let mut state =
            at.map(|i| core::mem::replace(&mut shard.slots[i as usize].state, empty).into());
        let result = f(&self.policy, &mut state);
        shard.put(&self.hasher, hash, at, || key.to_owned(), state);
        result
    }

    fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).len())
            .sum()
    }
}

/// A locked view of one key in one store.
struct Held<'a, K> {
    store: &'a Store<K>,
    shard: MutexGuard<'a, Shard<K>>,
    hash: u64,
    at: Option<u32>,
    state: Option<State>,
}

impl<'a, K: Hash + Eq> Held<'a, K> {
    fn get<Q>(store: &'a Store<K>, key: &Q) -> Self
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = store.hasher.hash_one(key);
        let shard = store.lock(hash);
        let at = shard.find(hash, key);
        let state = at.map(|i| shard.slots[i as usize].state.clone().into());
        Held {
            store,
            shard,
            hash,
            at,
            state,
        }
    }

    fn put(mut self, key: impl FnOnce() -> K) {
        let state = self.state.take();
        self.shard
            .put(&self.store.hasher, self.hash, self.at, key, state);
    }
}

/// A keyed limiter over one policy, an all-or-nothing stack, or a fair share.
///
/// `K` is the key type (`String` by default; look-ups take any borrowed form, so
/// `check("alice", ..)` works without allocating unless the key is new and limited).
pub struct KeyedLimiter<K = alloc::string::String> {
    layers: Vec<Store<K>>,
    tenants: Option<Store<(K, Box<str>)>>,
}

impl<K: Hash + Eq + Clone> KeyedLimiter<K> {
    /// A limiter with one policy, keeping at most `max_keys` limited keys.
    pub fn new(policy: Policy, max_keys: NonZeroUsize) -> Self {
        KeyedLimiter {
            layers: alloc::vec![Store::new(policy, max_keys)],
            tenants: None,
        }
    }

    /// An all-or-nothing stack: every request must pass every policy, or none is charged.
    pub fn stack(policies: &[Policy], max_keys: NonZeroUsize) -> Result<Self, PolicyError> {
        if policies.is_empty() {
            return Err(PolicyError::new(Field::Stack, "[]", Rule::EmptyStack));
        }
        Ok(KeyedLimiter {
            layers: policies.iter().map(|p| Store::new(*p, max_keys)).collect(),
            tenants: None,
        })
    }

    /// A fair share: the shared policy per key, and the tenant policy per key and tenant.
    pub fn fair_share(fair: FairShare, max_keys: NonZeroUsize) -> Self {
        KeyedLimiter {
            layers: alloc::vec![Store::new(*fair.shared(), max_keys)],
            tenants: Some(Store::new(*fair.tenant(), max_keys)),
        }
    }

    /// The policies, in stack order (the tenant policy, if any, last).
    pub fn policies(&self) -> Vec<Policy> {
        self.layers
            .iter()
            .map(|s| s.policy)
            .chain(self.tenants.as_ref().map(|t| t.policy))
            .collect()
    }

    /// The largest cost any request can have (the smallest capacity in the stack).
    pub fn capacity(&self) -> u64 {
        self.policies().iter().map(|p| p.limit()).min().unwrap_or(0)
    }

    /// Decides one request of `cost` for `key` at `now`.
    pub fn check<Q>(&self, key: &Q, now: Nanos, cost: u64) -> Result<Decision, DecideError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        match (&*self.layers, &self.tenants) {
            ([store], None) => store.apply(key, |p, s| decide_at(p, s, now, cost)),
            _ => self
                .check_detailed(key, None, now, cost)
                .map(|d| d.decision),
        }
    }

    /// Decides one request of `cost` for `key` at `now` and answers only admitted-or-not
    /// (see [`crate::admit`]): for callers that do not report `remaining` or `reset_after`.
    #[inline(always)]
    pub fn admit<Q>(&self, key: &Q, now: Nanos, cost: u64) -> Result<Verdict, DecideError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        match (&*self.layers, &self.tenants) {
            ([store], None) => store.apply(key, |p, s| admit(p, s, now, cost)),
            _ => self
                .check_detailed(key, None, now, cost)
                .map(|d| Verdict::from(&d.decision)),
        }
    }

    /// Decides one request for `key` on behalf of `tenant` (fair-share limiters; other
    /// limiters ignore the tenant). Returns every limit's decision as well.
    pub fn check_detailed<Q>(
        &self,
        key: &Q,
        tenant: Option<&str>,
        now: Nanos,
        cost: u64,
    ) -> Result<StackDecision, DecideError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        // Lock every layer's shard for this key, in layer order.
        let mut held: Vec<Held<'_, K>> = self.layers.iter().map(|s| Held::get(s, key)).collect();
        let tenant_key = match (&self.tenants, tenant) {
            (Some(_), t) if !skips_tenant_window(t) => {
                Some((key.to_owned(), Box::<str>::from(t.unwrap_or_default())))
            }
            _ => None,
        };
        let mut tenant_held = match (&self.tenants, &tenant_key) {
            (Some(store), Some(tk)) => Some(Held::get(store, tk)),
            _ => None,
        };
        let mut each = Vec::with_capacity(held.len() + 1);
        let mut next = Vec::with_capacity(held.len() + 1);
        let inputs = held
            .iter()
            .map(|h| (&h.store.policy, &h.state))
            .chain(tenant_held.iter().map(|h| (&h.store.policy, &h.state)));
        for (policy, state) in inputs {
            let (d, s) = decide(policy, state.clone(), now, cost)?;
            each.push(d);
            next.push(s);
        }
        let allowed = each.iter().all(|d| d.allowed);
        if allowed {
            let mut next = next.into_iter();
            for h in held.iter_mut() {
                h.state = next.next().flatten();
            }
            if let Some(t) = tenant_held.as_mut() {
                t.state = next.next().flatten();
            }
        }
        // Write back (also drops keys a decision found fresh) and unlock.
        for h in held {
            h.put(|| key.to_owned());
        }
        if let (Some(t), Some(tk)) = (tenant_held, tenant_key) {
            t.put(|| tk);
        }
        Ok(StackDecision {
            decision: combine(&each, allowed),
            each,
        })
    }

    /// Reports the key's standing without charging it: the decision for a cost of 0 (always
    /// allowed; `remaining` says how much is left). Keys found fresh are dropped.
    pub fn peek<Q>(&self, key: &Q, now: Nanos) -> Result<Decision, DecideError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.check_detailed(key, None, now, 0).map(|d| d.decision)
    }

    /// Releases `cost` slots of every concurrency policy in the limiter for `key`.
    pub fn release<Q>(&self, key: &Q, cost: u64) -> Result<(), DecideError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let mut any = false;
        for store in &self.layers {
            if store.policy.algorithm() == crate::Algorithm::Concurrency {
                let mut held = Held::get(store, key);
                held.state = release(&store.policy, held.state.take(), cost)?;
                held.put(|| key.to_owned());
                any = true;
            }
        }
        if any {
            Ok(())
        } else {
            Err(DecideError::NotConcurrency {
                policy: self.layers[0].policy.algorithm(),
            })
        }
    }

    /// Forgets `key` (and its tenants' windows are left to expire); returns whether it was
    /// stored.
    pub fn reset<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut found = false;
        for store in &self.layers {
            let mut held = Held::get(store, key);
            if let Some(i) = held.at {
                let hash = held.hash;
                held.shard.remove(hash, i);
                found = true;
            }
        }
        found
    }

    /// The number of keys stored (limited, not fresh) in the first limit.
    pub fn len(&self) -> usize {
        self.layers[0].len()
    }

    /// Whether no key is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
