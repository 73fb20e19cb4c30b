//! A keyed in-memory limiter: one state per key, memory bounded, safe to share between
//! threads.
//!
//! * **Fresh keys are not stored.** When a decision leaves a key fresh (a full bucket,
//!   empty windows), the key is removed; memory only holds keys that are actually limited.
//! * **At most `max_keys` keys** per limit; when full, a key that has been idle is evicted
//!   (CLOCK, the classic approximation of least-recently-used: a key checked since the clock
//!   hand last passed it is never evicted while an idle one is stored). Large limiters are
//!   split into 16 shards, each with its share of `max_keys`. An evicted key starts fresh: eviction trades memory for a little leniency
//!   toward idle keys, never for over-charging.
//! * **Compact.** A store keeps each state without its enum tag, in two or three 64-bit
//!   words (the sliding log boxed), next to its key in a dense slab, found through an
//!   open-addressing index of one `u32` per entry (at most 7/8 full): a GCRA limiter over
//!   `u64` keys takes about 30 bytes per key at its bound. (With the `compact-store` feature,
//!   built for the npm package's `.wasm`, two-word states take three words: less code, 8
//!   more bytes per key.)
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

mod cell;
mod plans;
mod reserve;
mod table;
mod waiting;

pub use self::plans::{PlanCheckError, PlanLimiter};
#[cfg(feature = "tokio")]
pub use self::waiting::unix_now;
pub use self::waiting::{AcquireError, Wait};

use alloc::borrow::ToOwned;
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::borrow::Borrow;
use core::hash::{BuildHasher, Hash};
use core::num::NonZeroUsize;
use spin::mutex::{SpinMutex as Mutex, SpinMutexGuard as MutexGuard};

use hashbrown::DefaultHashBuilder;

use self::cell::{Cell, Width};
use self::table::{Slot, Table};
use crate::algorithms::sliding_log::SlidingLogState;
use crate::decide::decide_at;
use crate::fair_share::{skips_tenant_window, FairShare};
use crate::stack::{decide_each, per_limit, Stack, StackDecision};
use crate::{
    admit, release, DecideError, Decision, Field, Nanos, Policy, PolicyError, Rule, State, Verdict,
};

/// One shard: a table behind its lock.
type Shard<K, C> = Mutex<Table<K, C>>;

/// One limit's shards, their cells as wide as the policy's states need.
enum Shards<K> {
    #[cfg(not(feature = "compact-store"))]
    Narrow(Box<[Shard<K, [u64; 2]>]>),
    Wide(Box<[Shard<K, [u64; 3]>]>),
    Log(Box<[Shard<K, Box<SlidingLogState>>]>),
}

/// Runs `$body` with `$v` bound to the payload of `$e`, a [`Shards`] or a [`Guard`]: the same
/// code for every cell width.
macro_rules! each {
    ($e:expr, $T:ident, $v:ident => $body:expr) => {
        match $e {
            #[cfg(not(feature = "compact-store"))]
            $T::Narrow($v) => $body,
            $T::Wide($v) => $body,
            $T::Log($v) => $body,
        }
    };
}

fn shards<K: Hash, C>(n: usize, per: usize) -> Box<[Shard<K, C>]> {
    (0..n).map(|_| Mutex::new(Table::new(per))).collect()
}

/// Locks the shard of `hash`: its 32 high bits scaled to the shard count (a multiplication,
/// not a division; the table uses the low bits, and its tags bits 40..46).
#[inline(always)]
fn lock<T>(shards: &[Mutex<T>], hash: u64) -> MutexGuard<'_, T> {
    let i = (((hash >> 32) * shards.len() as u64) >> 32) as usize;
    acquire(&shards[i])
}

/// Takes a shard's lock. A lock is held for tens of nanoseconds (a look-up and a decision,
/// no allocation on the common path), so it is a spin lock: taking it is one atomic
/// compare-and-swap and releasing it a plain store, where an OS mutex pays a second atomic
/// to release: a keyed check is measurably faster with it than with `std::sync::Mutex`
/// (PERF.md, "Measured reasons in the code"). A thread that
/// finds it taken spins briefly, then yields its time slice so that a preempted holder can
/// finish. A panic while it is held cannot leave a table half-written (each write is one
/// assignment after the decision); the lock is released as the guard unwinds.
#[inline(always)]
fn acquire<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.try_lock() {
        Some(guard) => guard,
        None => contended(m),
    }
}

/// [`acquire`]'s wait, out of line: one copy per table type instead of one per lock site.
#[cold]
#[inline(never)]
fn contended<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    loop {
        for _ in 0..64 {
            if let Some(guard) = m.try_lock() {
                return guard;
            }
            core::hint::spin_loop();
        }
        std::thread::yield_now();
    }
}

/// Stores what a decision left for the key found at `at` (or new): `None` removes it, a
/// state makes it used (or stores it, evicting an idle key if the table is full).
#[inline(always)]
fn write_back<K: Hash, C: Cell, S: BuildHasher>(
    table: &mut Table<K, C>,
    hasher: &S,
    hash: u64,
    at: Option<usize>,
    key: impl FnOnce() -> K,
    state: Option<State>,
) {
    match (at, state) {
        (Some(i), Some(s)) => {
            if table.slot_mut(i).cell.put(s) {
                table.touch(i);
            } else {
                drop(table.remove(hasher, i));
            }
        }
        (Some(i), None) => drop(table.remove(hasher, i)),
        (None, Some(s)) => {
            if let Some(cell) = C::pack(s) {
                drop(table.insert(hasher, hash, Slot { key: key(), cell }));
            }
        }
        (None, None) => {}
    }
}

/// The states of one limit, for every key: sharded, bounded.
struct Store<K> {
    policy: Policy,
    shards: Shards<K>,
    hasher: DefaultHashBuilder,
}

impl<K: Hash + Eq> Store<K> {
    fn new(policy: Policy, max_keys: NonZeroUsize) -> Self {
        let max = max_keys.get().min(u32::MAX as usize);
        // 16 shards for large limiters (more if a table's bound needs it).
        let n = if max >= 4096 {
            max.div_ceil(table::MAX_KEYS).max(16)
        } else {
            1
        };
        let per = max.div_ceil(n);
        Store {
            policy,
            shards: match Width::of(policy.algorithm()) {
                #[cfg(not(feature = "compact-store"))]
                Width::Narrow => Shards::Narrow(shards(n, per)),
                Width::Wide => Shards::Wide(shards(n, per)),
                Width::Log => Shards::Log(shards(n, per)),
            },
            hasher: DefaultHashBuilder::default(),
        }
    }

    /// One policy, one key: runs `decide` on the key's state under the shard's lock, without
    /// allocating (unless the key is new and limited), then stores what it left (`None`:
    /// fresh, the key is dropped).
    ///
    /// For a single policy, the state a denial returns is equivalent to the one it was given
    /// (refilled, pruned or rolled over), so it is stored either way. The store's states are
    /// all made by its own policy, so no mismatch can occur; `decide` leaves the state
    /// untouched on an error, and it is stored back as it was.
    #[inline(always)]
    fn apply<Q, R>(
        &self,
        key: &Q,
        decide: impl FnOnce(&Policy, &mut Option<State>) -> Result<R, DecideError>,
    ) -> Result<R, DecideError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.apply_hashed(self.hasher.hash_one(key), key, decide)
    }

    /// [`Self::apply`] for a key whose hash (by this store's hasher) the caller has already
    /// computed: a reserve records it in its reservation.
    #[inline(always)]
    fn apply_hashed<Q, R>(
        &self,
        hash: u64,
        key: &Q,
        decide: impl FnOnce(&Policy, &mut Option<State>) -> Result<R, DecideError>,
    ) -> Result<R, DecideError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let policy = &self.policy;
        each!(&self.shards, Shards, shards => {
            let mut table = lock(shards, hash);
            let at = table.find(hash, |k| k.borrow() == key);
            let mut state = at.map(|i| table.slot_mut(i).cell.take(policy.algorithm()));
            let result = decide(policy, &mut state);
            write_back(&mut table, &self.hasher, hash, at, || key.to_owned(), state);
            result
        })
    }

    fn len(&self) -> usize {
        each!(&self.shards, Shards, shards => shards
            .iter()
            .map(|s| acquire(s).len())
            .sum())
    }
}

/// A locked shard, whatever its cell.
enum Guard<'a, K> {
    #[cfg(not(feature = "compact-store"))]
    Narrow(MutexGuard<'a, Table<K, [u64; 2]>>),
    Wide(MutexGuard<'a, Table<K, [u64; 3]>>),
    Log(MutexGuard<'a, Table<K, Box<SlidingLogState>>>),
}

/// A locked view of one key in one store: a copy of its state, written back by
/// [`Held::put`] (dropping a `Held` without `put` leaves the key as it was).
struct Held<'a, K> {
    store: &'a Store<K>,
    guard: Guard<'a, K>,
    hash: u64,
    at: Option<usize>,
    state: Option<State>,
}

impl<'a, K: Hash + Eq> Held<'a, K> {
    #[inline(never)]
    fn get<Q>(store: &'a Store<K>, key: &Q) -> Self
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = store.hasher.hash_one(key);
        let mut guard = match &store.shards {
            #[cfg(not(feature = "compact-store"))]
            Shards::Narrow(s) => Guard::Narrow(lock(s, hash)),
            Shards::Wide(s) => Guard::Wide(lock(s, hash)),
            Shards::Log(s) => Guard::Log(lock(s, hash)),
        };
        let algorithm = store.policy.algorithm();
        let (at, state) = each!(&mut guard, Guard, t => {
            let at = t.find(hash, |k| k.borrow() == key);
            (at, at.map(|i| t.slot_mut(i).cell.read(algorithm)))
        });
        Held {
            store,
            guard,
            hash,
            at,
            state,
        }
    }

    #[inline(never)]
    fn put(mut self, key: impl FnOnce() -> K) {
        let state = self.state.take();
        let (hasher, hash, at) = (&self.store.hasher, self.hash, self.at);
        each!(&mut self.guard, Guard, t => write_back(t, hasher, hash, at, key, state));
    }

    /// Writes the decided state back if `commit`; otherwise leaves the stored state as it
    /// was, only marking the key as used.
    #[inline(never)]
    fn finish(mut self, commit: bool, key: impl FnOnce() -> K) {
        if commit {
            self.put(key);
        } else if let Some(i) = self.at {
            each!(&mut self.guard, Guard, t => t.touch(i));
        }
    }

    /// Removes the key, if stored; returns whether it was.
    fn remove(mut self) -> bool {
        let hasher = &self.store.hasher;
        match self.at {
            Some(i) => {
                each!(&mut self.guard, Guard, t => drop(t.remove(hasher, i)));
                true
            }
            None => false,
        }
    }
}

/// One key's held entries, one per layer (in layer order) and the tenant window's, as the
/// stack's rule reads them.
struct HeldStack<'h, 'a, K> {
    layers: &'h mut [Held<'a, K>],
    tenant: Option<&'h mut Held<'a, (K, Box<str>)>>,
}

impl<K> Stack for HeldStack<'_, '_, K> {
    fn len(&self) -> usize {
        self.layers.len() + usize::from(self.tenant.is_some())
    }
    fn limit(&mut self, i: usize) -> (&Policy, &mut Option<State>) {
        match self.layers.get_mut(i) {
            Some(h) => (&h.store.policy, &mut h.state),
            None => {
                let t = self.tenant.as_mut().expect("the tenant window is held");
                (&t.store.policy, &mut t.state)
            }
        }
    }
}

/// A keyed limiter over one policy, an all-or-nothing stack, or a fair share.
///
/// `K` is the key type (`String` by default; look-ups take any borrowed form, so
/// `check("alice", ..)` works without allocating unless the key is new and limited).
pub struct KeyedLimiter<K = alloc::string::String> {
    layers: Vec<Store<K>>,
    tenants: Option<Store<(K, Box<str>)>>,
    /// What its reservations carry to be told from another's ([`crate::settle`]).
    reservations: reserve::Issuer,
    /// The lines of [`KeyedLimiter::acquire_with`]'s waiters, per key and tenant.
    #[cfg(feature = "acquire")]
    waiters: waiting::Waiters<K>,
}

impl<K: Hash + Eq + Clone> KeyedLimiter<K> {
    /// A limiter with one policy, keeping at most `max_keys` limited keys.
    pub fn new(policy: Policy, max_keys: NonZeroUsize) -> Self {
        KeyedLimiter {
            layers: alloc::vec![Store::new(policy, max_keys)],
            tenants: None,
            reservations: reserve::Issuer::new(&[policy]),
            #[cfg(feature = "acquire")]
            waiters: Default::default(),
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
            reservations: reserve::Issuer::new(policies),
            #[cfg(feature = "acquire")]
            waiters: Default::default(),
        })
    }

    /// A fair share: the shared policy per key, and the tenant policy per key and tenant.
    pub fn fair_share(fair: FairShare, max_keys: NonZeroUsize) -> Self {
        KeyedLimiter {
            layers: alloc::vec![Store::new(*fair.shared(), max_keys)],
            tenants: Some(Store::new(*fair.tenant(), max_keys)),
            reservations: reserve::Issuer::new(&[*fair.shared()]),
            #[cfg(feature = "acquire")]
            waiters: Default::default(),
        }
    }

    /// The limiter over a store's [`Limits`](crate::store::Limits) (a single policy, a stack
    /// or a fair share), keeping at most `max_keys` limited keys per limit: a fleet store's
    /// local fallback, the tower layer's memory store. It decides as the fleet stores do over
    /// the same limits (the store contract, [`crate::store`]).
    ///
    /// ```
    /// use std::num::NonZeroUsize;
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::store::Limits;
    /// let limits = Limits::stack(&["2/s".parse().unwrap(), "3/min".parse().unwrap()]).unwrap();
    /// let local: KeyedLimiter<String> =
    ///     KeyedLimiter::from_limits(&limits, NonZeroUsize::new(1000).unwrap());
    /// assert_eq!(local.policies(), limits.policies());
    /// ```
    pub fn from_limits(limits: &crate::store::Limits, max_keys: NonZeroUsize) -> Self {
        KeyedLimiter {
            layers: limits
                .layers()
                .iter()
                .map(|p| Store::new(*p, max_keys))
                .collect(),
            tenants: limits.tenant().map(|t| Store::new(*t, max_keys)),
            reservations: reserve::Issuer::new(limits.layers()),
            #[cfg(feature = "acquire")]
            waiters: Default::default(),
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

    /// Whether an admitted request holds slots until it is released: one of the stack's
    /// policies is a concurrency limit (what [`KeyedLimiter::release`] gives back; never a
    /// fair share's tenant window, as [`crate::store::Limits::holds_slots`]).
    pub fn holds_slots(&self) -> bool {
        self.layers.iter().any(|s| s.policy.holds_slots())
    }

    /// The largest cost any request can have (the smallest capacity in the stack).
    pub fn capacity(&self) -> u64 {
        self.policies().iter().map(|p| p.limit()).min().unwrap_or(0)
    }

    /// Decides one request of `cost` for `key` at `now`.
    // Out of line, as the compiler laid it out before `check_inlined` existed: a call to an
    // `#[inline(always)]` body is otherwise inlined into every caller (the npm package's
    // two `check` calls each a copy, (PERF.md, "Measured reasons in the code")).
    #[inline(never)]
    pub fn check<Q>(&self, key: &Q, now: Nanos, cost: u64) -> Result<Decision, DecideError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.check_inlined(key, now, cost)
    }

    /// [`Self::check`]'s code, inlined into its caller: `check` itself, and the recording
    /// wrapper `metrics::Metered::check`, so that the wrapper and the decision are one
    /// function. Calling `check` out of line, the wrapper kept its state in four
    /// callee-saved registers across the call and read the decision back through memory:
    /// most of the hook's instructions (`scripts/counts.sh keyed-check-metered-1` holds it;
    /// (PERF.md, "Measured reasons in the code")).
    #[inline(always)]
    pub(crate) fn check_inlined<Q>(
        &self,
        key: &Q,
        now: Nanos,
        cost: u64,
    ) -> Result<Decision, DecideError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        match (&*self.layers, &self.tenants) {
            ([store], None) => store.apply(key, |p, s| decide_at(p, s, now, cost)),
            _ => self
                .decide_if(key, None, now, cost, &|_| true, false)
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
            // The closure inlined: `admit` inlines every algorithm's decision into it, and
            // past that size the compiler kept it out of line, the state and the verdict
            // passed through memory (`scripts/counts.sh keyed-admit-*` hold it;
            // (PERF.md, "Measured reasons in the code")).
            ([store], None) => store.apply(
                key,
                #[inline(always)]
                |p, s| admit(p, s, now, cost),
            ),
            _ => self
                .decide_if(key, None, now, cost, &|_| true, false)
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
        self.decide_if(key, tenant, now, cost, &|_| true, true)
    }

    /// [`Self::check_detailed`], keeping the charge of an admitted request only if `keep`
    /// accepts the combined decision (the waiting rule's "go", see [`Self::try_acquire`]);
    /// otherwise every key is left as it was, as for a denial.
    ///
    /// Each limit's decision is made in scratch space (`stack::per_limit`) and copied out
    /// only for a caller that reads it (`detailed`); the others get an empty
    /// [`StackDecision::each`] (no `Vec` built and dropped for each decision). One function
    /// for both rather than two entry points: the second made the npm `.wasm` larger
    /// (PERF.md, "Measured reasons in the code").
    fn decide_if<Q>(
        &self,
        key: &Q,
        tenant: Option<&str>,
        now: Nanos,
        cost: u64,
        keep: &dyn Fn(&Decision) -> bool,
        detailed: bool,
    ) -> Result<StackDecision, DecideError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        per_limit(self.depth(tenant), |each| {
            let decision = self.decide_locked(key, tenant, now, cost, keep, each)?;
            let each = if detailed { each.to_vec() } else { Vec::new() };
            Ok(StackDecision { decision, each })
        })
    }

    /// How many limits decide a request from `tenant`: every layer, and the tenant window
    /// unless the request skips it.
    fn depth(&self, tenant: Option<&str>) -> usize {
        self.layers.len() + usize::from(self.tenants.is_some() && !skips_tenant_window(tenant))
    }

    /// The work of [`Self::decide_if`]: each limit's decision into `each` (one per limit,
    /// [`Self::depth`]), the combined decision returned.
    fn decide_locked<Q>(
        &self,
        key: &Q,
        tenant: Option<&str>,
        now: Nanos,
        cost: u64,
        keep: &dyn Fn(&Decision) -> bool,
        each: &mut [Decision],
    ) -> Result<Decision, DecideError>
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
        // Decide on the held copies, all or nothing (the stack's rule, `decide_all`'s, on
        // the held entries in place: an error or a denial leaves every copy as it was).
        let mut stack = HeldStack {
            layers: &mut held,
            tenant: tenant_held.as_mut(),
        };
        let decision = decide_each(&mut stack, now, &|_| cost, each)?;
        // All or nothing: the decided states are written only if every limit admitted (and
        // `keep` agreed); otherwise every key keeps its state (and counts as used). Then
        // unlock.
        let commit = decision.allowed && keep(&decision);
        for h in held {
            h.finish(commit, || key.to_owned());
        }
        if let (Some(t), Some(tk)) = (tenant_held, tenant_key) {
            t.finish(commit, || tk);
        }
        Ok(decision)
    }

    /// Reports the key's standing without charging it: the decision for a cost of 0 (always
    /// allowed; `remaining` says how much is left). Keys found fresh are dropped.
    pub fn peek<Q>(&self, key: &Q, now: Nanos) -> Result<Decision, DecideError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.decide_if(key, None, now, 0, &|_| true, false)
            .map(|d| d.decision)
    }

    /// Releases `cost` slots of every concurrency policy in the limiter for `key`.
    pub fn release<Q>(&self, key: &Q, cost: u64) -> Result<(), DecideError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let mut any = false;
        for store in &self.layers {
            if store.policy.holds_slots() {
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
            found |= Held::get(store, key).remove();
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
