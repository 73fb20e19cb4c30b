//! [`PlanLimiter`]: a keyed limiter whose limits depend on the caller (its docs say how).

use alloc::borrow::ToOwned;
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::borrow::Borrow;
use core::fmt;
use core::hash::{BuildHasher, Hash};
use core::num::NonZeroUsize;
use core::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{RwLock, RwLockReadGuard};

use hashbrown::{DefaultHashBuilder, HashMap};
use spin::mutex::SpinMutex as Mutex;

use super::table::{self, Slot, Table};
use super::{acquire, lock};
use crate::carry::carry_stack;
use crate::decide::decide_at;
use crate::plans::{Override, PlanError, Plans};
use crate::stack::{decide_each, per_limit, Stack, StackDecision};
use crate::store::Limits;
use crate::{release, DecideError, Decision, Nanos, Policy, Snippet, State};

/// One stored key: the limits its states were made by, and the states (one per limit).
struct Entry {
    policies: Box<[Policy]>,
    states: Box<[Option<State>]>,
}

/// A stack's policies and one key's states, as the stack's rule reads them.
struct Limited<'a> {
    policies: &'a [Policy],
    states: &'a mut [Option<State>],
}

impl Stack for Limited<'_> {
    fn len(&self) -> usize {
        self.policies.len()
    }
    fn limit(&mut self, i: usize) -> (&Policy, &mut Option<State>) {
        (&self.policies[i], &mut self.states[i])
    }
}

/// Why a [`PlanLimiter`] could not decide: the plan named does not exist, or the request
/// cannot be decided under the key's limits (a cost above their capacity).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PlanCheckError {
    /// The plan named by the call is not one of the plans ([`PlanError::UnknownPlan`]).
    UnknownPlan {
        /// The name asked for.
        name: Snippet,
    },
    /// The request cannot be decided ([`DecideError`]); nothing was charged.
    Decide(DecideError),
}

impl PlanCheckError {
    /// A stable kebab-case code: `unknown-plan`, or the [`DecideError`]'s.
    pub const fn code(&self) -> &'static str {
        match self {
            PlanCheckError::UnknownPlan { .. } => "unknown-plan",
            PlanCheckError::Decide(e) => e.code(),
        }
    }
}

impl From<DecideError> for PlanCheckError {
    fn from(e: DecideError) -> Self {
        PlanCheckError::Decide(e)
    }
}

impl fmt::Display for PlanCheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanCheckError::UnknownPlan { name } => write!(f, "unknown plan \"{name}\""),
            PlanCheckError::Decide(e) => e.fmt(f),
        }
    }
}

impl core::error::Error for PlanCheckError {}

/// A keyed limiter whose limits depend on the caller, over named [`Plans`]. Each call names the
/// key's plan; a key may have an override (another plan, or limits of its own) set at run
/// time; a key whose limits change keeps what it has spent ([`crate::carry`]).
///
/// Each stored key keeps the limits its states were made by next to them. A decision
/// compares those with the limits the key has now (its override, or the plan named by the
/// call): when they differ the states are carried first ([`crate::carry::carry_stack`]),
/// so a change applies at the key's next decision and never resets it. The carry is stored
/// even when the request is denied: it is the key's state under its new limits.
///
/// Memory is bounded as in [`KeyedLimiter`](super::KeyedLimiter): at most `max_keys` keys
/// (fresh keys are not stored; when full, an idle key is evicted by CLOCK and starts fresh),
/// and at most `max_overrides` overrides, which are never evicted (an override is
/// configuration: setting one more is refused, [`PlanError::TooManyOverrides`]).
///
/// ```
/// use std::num::NonZeroUsize;
/// use tollgate::keyed::PlanLimiter;
/// use tollgate::plans::{Override, Plans};
/// let plans = Plans::parse(&[("free", &["fixed-window 2/min"]), ("pro", &["fixed-window 5/min"])]).unwrap();
/// let limiter = PlanLimiter::new(plans, NonZeroUsize::new(1000).unwrap(), 100);
/// assert!(limiter.check("alice", "free", 0, 2).unwrap().allowed);
/// assert!(!limiter.check("alice", "free", 0, 1).unwrap().allowed);
/// // Upgraded: the 2 spent stay spent, 3 of pro's 5 are left.
/// assert_eq!(limiter.check("alice", "pro", 0, 1).unwrap().remaining, 2);
/// // An override gives bob pro whatever plan his calls name, until it is cleared.
/// limiter.set("bob", Override::Plan("pro".into())).unwrap();
/// assert_eq!(limiter.check("bob", "free", 0, 1).unwrap().limit, 5);
/// assert!(limiter.clear("bob"));
/// assert_eq!(limiter.check("bob", "free", 0, 1).unwrap().remaining, 0); // 2 spent of free's 2
/// ```
pub struct PlanLimiter<K = alloc::string::String> {
    plans: Plans,
    shards: Box<[Mutex<Table<K, Entry>>]>,
    hasher: DefaultHashBuilder,
    overrides: RwLock<HashMap<K, (Override, Limits)>>,
    /// How many overrides are set: a limiter with none skips the overrides' lock.
    override_count: AtomicUsize,
    max_overrides: usize,
}

impl<K: Hash + Eq + Clone> PlanLimiter<K> {
    /// A limiter over `plans`, keeping at most `max_keys` limited keys and `max_overrides`
    /// overrides.
    pub fn new(plans: Plans, max_keys: NonZeroUsize, max_overrides: usize) -> Self {
        let max = max_keys.get().min(u32::MAX as usize);
        // Sharded as the keyed store is (16 shards for large limiters).
        let n = if max >= 4096 {
            max.div_ceil(table::MAX_KEYS).max(16)
        } else {
            1
        };
        let per = max.div_ceil(n);
        PlanLimiter {
            plans,
            shards: (0..n).map(|_| Mutex::new(Table::new(per))).collect(),
            hasher: DefaultHashBuilder::default(),
            overrides: RwLock::new(HashMap::new()),
            override_count: AtomicUsize::new(0),
            max_overrides,
        }
    }

    /// The plans.
    pub fn plans(&self) -> &Plans {
        &self.plans
    }

    /// Decides one request of `cost` for `key` at `now` under `plan`, or under the key's
    /// override if it has one (`plan` must still be one of the plans).
    pub fn check<Q>(
        &self,
        key: &Q,
        plan: &str,
        now: Nanos,
        cost: u64,
    ) -> Result<Decision, PlanCheckError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.decide(key, plan, now, cost, false).map(|d| d.decision)
    }

    /// [`Self::check`], with each limit's decision as well (in stack order).
    pub fn check_detailed<Q>(
        &self,
        key: &Q,
        plan: &str,
        now: Nanos,
        cost: u64,
    ) -> Result<StackDecision, PlanCheckError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.decide(key, plan, now, cost, true)
    }

    /// The key's standing under `plan` (or its override) without charging it: a decision for
    /// a cost of 0. A carry it needs is stored, as a check would.
    pub fn peek<Q>(&self, key: &Q, plan: &str, now: Nanos) -> Result<Decision, PlanCheckError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.check(key, plan, now, 0)
    }

    /// Releases `cost` slots of every concurrency limit the key's states were made by (a
    /// key not stored holds nothing: nothing to release).
    pub fn release<Q>(&self, key: &Q, cost: u64) -> Result<(), DecideError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let mut table = lock(&self.shards, hash);
        let Some(i) = table.find(hash, |k| k.borrow() == key) else {
            return Ok(());
        };
        let entry = &mut table.slot_mut(i).cell;
        for (p, s) in entry.policies.iter().zip(entry.states.iter_mut()) {
            if p.holds_slots() {
                *s = release(p, s.take(), cost)?;
            }
        }
        if entry.states.iter().all(Option::is_none) {
            drop(table.remove(&self.hasher, i));
        }
        Ok(())
    }

    /// Gives `key` its own plan or limits from its next decision on, in place of the plan
    /// its calls name, until [`Self::clear`]. Errors: an unknown plan or empty limits
    /// ([`Override::resolve`]), or `max_overrides` reached ([`PlanError::TooManyOverrides`]).
    pub fn set(&self, key: impl Into<K>, what: Override) -> Result<(), PlanError> {
        let limits = what.resolve(&self.plans)?;
        let mut overrides = self.write_overrides();
        let key = key.into();
        if !overrides.contains_key(&key) && overrides.len() >= self.max_overrides {
            return Err(PlanError::TooManyOverrides {
                max: self.max_overrides,
            });
        }
        overrides.insert(key, (what, limits));
        self.override_count
            .store(overrides.len(), Ordering::Release);
        Ok(())
    }

    /// The key's override, if it has one.
    pub fn get<Q>(&self, key: &Q) -> Option<Override>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.read_overrides()?.get(key).map(|(o, _)| o.clone())
    }

    /// Removes the key's override (its next decision uses the plan its call names, carrying
    /// what it has spent); returns whether it had one.
    pub fn clear<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut overrides = self.write_overrides();
        let had = overrides.remove(key).is_some();
        self.override_count
            .store(overrides.len(), Ordering::Release);
        had
    }

    /// How many keys are stored (limited, not fresh).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| acquire(s).len()).sum()
    }

    /// Whether no key is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many keys have an override.
    pub fn overrides(&self) -> usize {
        self.override_count.load(Ordering::Acquire)
    }

    /// The overrides for reading; `None` when there are none (no lock taken).
    fn read_overrides(&self) -> Option<RwLockReadGuard<'_, HashMap<K, (Override, Limits)>>> {
        // A panic cannot leave the map half-written (each change is one insert or remove),
        // so a poisoned lock is used as it is.
        (self.override_count.load(Ordering::Acquire) > 0)
            .then(|| self.overrides.read().unwrap_or_else(|e| e.into_inner()))
    }

    fn write_overrides(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<K, (Override, Limits)>> {
        self.overrides.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The decision: the key's limits (its override's, or `plan`'s), its states carried to
    /// them if they were made by others, then the stack's all-or-nothing rule.
    fn decide<Q>(
        &self,
        key: &Q,
        plan: &str,
        now: Nanos,
        cost: u64,
        detailed: bool,
    ) -> Result<StackDecision, PlanCheckError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let named = self
            .plans
            .get(plan)
            .map_err(|_| PlanCheckError::UnknownPlan {
                name: Snippet::new(plan),
            })?;
        // Held through the decision: a `set` or `clear` waits for it, and applies at the
        // key's next decision.
        let overrides = self.read_overrides();
        let limits = match overrides.as_ref().and_then(|o| o.get(key)) {
            Some((_, own)) => own,
            None => named,
        };
        let policies = limits.layers();
        let hash = self.hasher.hash_one(key);
        let mut table = lock(&self.shards, hash);
        let at = table.find(hash, |k| k.borrow() == key);
        let mut fresh: Vec<Option<State>> = Vec::new();
        let states: &mut [Option<State>] = match at {
            Some(i) => {
                let entry = &mut table.slot_mut(i).cell;
                if *entry.policies != *policies {
                    let carried = carry_stack(&entry.policies, &entry.states, policies, now)?;
                    *entry = Entry {
                        policies: policies.into(),
                        states: carried.into(),
                    };
                }
                &mut entry.states
            }
            None => {
                fresh = alloc::vec![None; policies.len()];
                &mut fresh
            }
        };
        let decided = match (policies, &mut *states) {
            // One limit: decided in place, as the keyed store decides a single policy (a
            // denial leaves an equivalent state), without the stack's copies: most of
            // what a plan's request cost above a keyed one (`scripts/counts.sh
            // tower-plans-10k`).
            ([policy], [state]) => decide_at(policy, state, now, cost).map(|decision| {
                let each = if detailed {
                    alloc::vec![decision]
                } else {
                    Vec::new()
                };
                StackDecision { decision, each }
            }),
            _ => {
                let mut stack = Limited {
                    policies,
                    states: &mut *states,
                };
                per_limit(policies.len(), |each| {
                    let decision = decide_each(&mut stack, now, &|_| cost, each)?;
                    let each = if detailed { each.to_vec() } else { Vec::new() };
                    Ok::<_, DecideError>(StackDecision { decision, each })
                })
            }
        };
        let empty = states.iter().all(Option::is_none);
        match at {
            Some(i) if empty => drop(table.remove(&self.hasher, i)),
            Some(i) => table.touch(i),
            None if !empty => {
                let cell = Entry {
                    policies: policies.into(),
                    states: fresh.into_boxed_slice(),
                };
                drop(table.insert(
                    &self.hasher,
                    hash,
                    Slot {
                        key: key.to_owned(),
                        cell,
                    },
                ));
            }
            None => {}
        }
        Ok(decided?)
    }
}
