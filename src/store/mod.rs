//! The store contract: how any store of states (the in-memory keyed limiter, a Durable
//! Object's storage, Redis) runs a request with the core, so that every store makes the
//! same decisions.
//!
//! A store keeps one state per **slot**: one slot per limit of a stack, plus one per tenant
//! for a fair share ([`Limits::slots`]). For each request it does four steps, and only the
//! middle one decides:
//!
//! 1. **Load** the states of the request's slots, and read the store's clock (the clock of
//!    whatever holds the states: the object's, Redis `TIME` on the node that holds the
//!    keys; never a client's).
//! 2. **Decide** with [`Batch`]: one or more requests for the same slots, in order, each
//!    all or nothing across its limits ([`crate::stack`]).
//! 3. **Write back all or nothing** the slots whose state changed ([`Batch::writes`]):
//!    every write of a batch is committed together (one transaction, one compare-and-set),
//!    or none is. A denial changes no state, so it writes nothing.
//! 4. **Delete what came back fresh**: a [`Write::Delete`] means the slot is equivalent to
//!    no state at all; a [`Write::Put`] carries the time after which it will be
//!    ([`Write::Put::fresh_after`]), so a store may let the key expire then, and an expired key is
//!    exactly a fresh one.
//!
//! The stores that follow it: the in-memory [`crate::keyed::KeyedLimiter`] (a slot is a
//! key's entry in a limit's table; loading takes the entry's shard lock, the lock is held
//! through the decision, and the write-back is all or nothing across the stack), the edge
//! worker's Durable Object (its SQLite storage, serialised by the object), and the Redis
//! fleet store `tollgate-redis` (versioned values, a compare-and-set commit) and its module.
//!
//! States cross process and language boundaries as [`State::to_bytes`] /
//! [`State::from_bytes`]: a small versioned binary layout, the same in every runtime, so
//! that a Rust process and a JavaScript process can share one limit in one store.
//!
//! ```
//! use tollgate::store::{Batch, Limits, Write};
//! use tollgate::NANOS_PER_SEC;
//!
//! let limits = Limits::stack(&["2/s".parse().unwrap(), "fixed-window 3/min".parse().unwrap()])
//!     .unwrap();
//! let slots = limits.slots(None);
//! assert_eq!(slots.len(), 2);
//!
//! // 1. The store loads the slots' states (nothing stored yet) and reads its clock.
//! let loaded = vec![None; slots.len()];
//! let now = 1_000 * NANOS_PER_SEC;
//! // 2. Three requests arrived together for this key: decided in order.
//! let mut batch = Batch::new(&limits, &slots, loaded, now);
//! let admitted: Vec<bool> = (0..3).map(|_| batch.decide(1).unwrap().decision.allowed).collect();
//! assert_eq!(admitted, [true, true, false]); // the bucket holds 2
//! // 3. What to write back, all or nothing: both slots changed.
//! let writes: Vec<_> = batch.writes().collect();
//! assert_eq!(writes.len(), 2);
//! // 4. The bucket is full again one second later; the window empties at the next minute.
//! let Write::Put { fresh_after, .. } = &writes[0].1 else { panic!() };
//! assert_eq!(*fresh_after, Some(NANOS_PER_SEC));
//! let Write::Put { fresh_after, .. } = &writes[1].1 else { panic!() };
//! assert_eq!(*fresh_after, Some(20 * NANOS_PER_SEC)); // 1000 s is 40 s into its minute
//! ```

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write as _;

use crate::fair_share::{skips_tenant_window, FairShare};
use crate::settle::{Charge, Overage, Settlement};
use crate::stack::StackDecision;
use crate::{
    DecideError, Decision, Field, Nanos, Policy, PolicyError, ReservationError, Rule, State,
};

pub mod bounds;
mod bytes;
#[cfg(feature = "fleet")]
mod deny;
pub mod fallback;
#[cfg(feature = "fleet")]
pub mod fleet;
mod keys;
pub mod request;

pub use bytes::{StateBytesError, STATE_BYTES_VERSION};
#[cfg(feature = "fleet")]
pub use deny::DenyCache;
pub use keys::{key_part, override_name, settled_name, slot_name, KeyLayout, LayoutError};

/// What a limiter decides over: a single policy, an all-or-nothing stack, or a fair share
/// (a shared policy and a per-tenant policy on top).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Limits {
    layers: Vec<Policy>,
    tenant: Option<Policy>,
}

/// One slot of a request: where one limit's state lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Slot {
    /// The limit at this index of the stack (0 for a single policy or a fair share's
    /// shared policy), per key.
    Layer(usize),
    /// The fair share's tenant window, per key and tenant.
    Tenant,
}

impl Slot {
    /// The slot's part of a store's key name: `<i>` for a stack's limit, `t:<tenant>` for
    /// the tenant window (the tenant through [`key_part`]). Every store that names keys
    /// (Redis, the Redis module, the npm entry) appends this to the key's own name.
    ///
    /// ```
    /// use tollgate::store::Slot;
    /// assert_eq!(Slot::Layer(1).suffix(None), "1");
    /// assert_eq!(Slot::Tenant.suffix(Some("acme")), "t:acme");
    /// assert_eq!(Slot::Tenant.suffix(Some("a}b")), "t:a%7Db");
    /// ```
    pub fn suffix(&self, tenant: Option<&str>) -> String {
        let mut suffix = String::new();
        self.push_suffix(tenant, &mut suffix);
        suffix
    }

    /// The slot's suffix in a key name: `:` and [`Slot::suffix`] (see [`KeyLayout`]).
    pub fn key_suffix(&self, tenant: Option<&str>) -> String {
        let mut suffix = String::with_capacity(8);
        suffix.push(':');
        self.push_suffix(tenant, &mut suffix);
        suffix
    }

    /// Appends [`Slot::suffix`] to `name`.
    ///
    /// (Appended in place rather than built by `format!`: the Redis module names a
    /// command's keys on every call, and `key_suffix` as a `format!` of `suffix`'s
    /// `format!` was a fifth of the command's instructions: `scripts/counts.sh
    /// module-check-1` holds it; (PERF.md, "Measured reasons in the code").)
    pub(crate) fn push_suffix(&self, tenant: Option<&str>, name: &mut String) {
        match self {
            Slot::Layer(i) => {
                // Writing to a String cannot fail.
                let _ = write!(name, "{i}");
            }
            Slot::Tenant => {
                name.push_str("t:");
                name.push_str(&key_part(tenant.unwrap_or_default()));
            }
        }
    }

    /// The smallest capacity among `slots`: the largest cost a request over them can have.
    pub fn capacity(limits: &Limits, slots: &[Slot]) -> u64 {
        slots
            .iter()
            .map(|s| limits.policy(*s).limit())
            .min()
            .unwrap_or(0)
    }
}

impl Limits {
    /// One policy.
    pub fn single(policy: Policy) -> Limits {
        Limits {
            layers: alloc::vec![policy],
            tenant: None,
        }
    }

    /// An all-or-nothing stack (at least one policy).
    pub fn stack(policies: &[Policy]) -> Result<Limits, PolicyError> {
        if policies.is_empty() {
            return Err(PolicyError::new(Field::Stack, "[]", Rule::EmptyStack));
        }
        Ok(Limits {
            layers: policies.to_vec(),
            tenant: None,
        })
    }

    /// A fair share: the shared policy per key, the tenant policy per key and tenant.
    pub fn fair_share(fair: FairShare) -> Limits {
        Limits {
            layers: alloc::vec![*fair.shared()],
            tenant: Some(*fair.tenant()),
        }
    }

    /// The stack's policies, in order (a fair share: its shared policy).
    pub fn layers(&self) -> &[Policy] {
        &self.layers
    }

    /// The fair share's per-tenant policy, if any.
    pub fn tenant(&self) -> Option<&Policy> {
        self.tenant.as_ref()
    }

    /// Every policy, the tenant policy (if any) last: the order of
    /// [`StackDecision::each`] for a request that does not skip the tenant window.
    pub fn policies(&self) -> Vec<Policy> {
        self.layers.iter().copied().chain(self.tenant).collect()
    }

    /// Whether an admitted request holds slots until it is released: one of the stack's
    /// policies is a concurrency limit. (A release reaches the stack's policies only, never
    /// a fair share's tenant window.)
    pub fn holds_slots(&self) -> bool {
        self.layers.iter().any(Policy::holds_slots)
    }

    /// The largest cost any request can have (the smallest capacity).
    pub fn capacity(&self) -> u64 {
        self.policies().iter().map(|p| p.limit()).min().unwrap_or(0)
    }

    /// The slots a request from `tenant` touches, in decision order: every layer, then the
    /// tenant window unless the request skips it
    /// ([`skips_tenant_window`]: no tenant, an empty one, or `default`).
    pub fn slots(&self, tenant: Option<&str>) -> Vec<Slot> {
        let mut slots: Vec<Slot> = (0..self.layers.len()).map(Slot::Layer).collect();
        if self.tenant.is_some() && !skips_tenant_window(tenant) {
            slots.push(Slot::Tenant);
        }
        slots
    }

    /// The policy that decides `slot`.
    ///
    /// # Panics
    /// If the slot is not one of this limiter's ([`Limits::slots`] only returns its own).
    pub fn policy(&self, slot: Slot) -> &Policy {
        match slot {
            Slot::Layer(i) => &self.layers[i],
            Slot::Tenant => self.tenant.as_ref().expect("a tenant slot of a fair share"),
        }
    }
}

/// One request of a round, as every store that merges requests runs it over a [`Batch`]
/// ([`Batch::apply`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Decide a request of `cost`, and charge it when admitted.
    Check(u64),
    /// A waiting caller's request: decided like [`Op::Check`], its charge kept only as the
    /// core's waiting rule says ([`crate::wait::keeps`]: an admission whose queue delay fits
    /// in `left`, the time the caller had before its deadline when it asked; `None`, a
    /// passed deadline or a look, keeps nothing).
    Acquire {
        /// The request's cost.
        cost: u64,
        /// The time left before the caller's deadline, if any is.
        left: Option<Nanos>,
    },
    /// Report what a request of this cost would get (0: the key's standing), charging
    /// nothing.
    Peek(u64),
    /// Give back `cost` slots of every concurrency limit.
    Release(u64),
}

/// What a store writes for one slot after a [`Batch`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Write {
    /// Store this state.
    Put {
        /// The state.
        state: State,
        /// Time from the batch's `now` after which the state is equivalent to fresh, if
        /// nothing more arrives: the key may expire then. `None` for a concurrency count,
        /// which no clock frees (only releases do).
        fresh_after: Option<Nanos>,
    },
    /// The slot is fresh: delete it.
    Delete,
}

/// One read-decide-write of a store: the loaded states of one request's slots, decided on
/// by one or more requests in order.
///
/// Stores that merge concurrent requests for one key (to commit them in one write) decide
/// them one after the other here, each all or nothing, then write [`Batch::writes`] once.
#[derive(Clone, Debug)]
pub struct Batch<'a> {
    policies: Vec<&'a Policy>,
    loaded: Vec<Option<State>>,
    states: Vec<Option<State>>,
    now: Nanos,
}

impl<'a> Batch<'a> {
    /// A batch over `slots` of `limits`, whose stored states are `loaded` (in the same
    /// order; `None` where nothing is stored), at the store's clock `now`.
    ///
    /// A loaded state made by another algorithm than its slot's policy (the configuration
    /// changed) is read as fresh, and overwritten by the first write.
    ///
    /// # Panics
    /// If `loaded` and `slots` differ in length, or a slot is not one of `limits`'.
    pub fn new(limits: &'a Limits, slots: &[Slot], loaded: Vec<Option<State>>, now: Nanos) -> Self {
        assert_eq!(slots.len(), loaded.len(), "one loaded state per slot");
        let policies: Vec<&Policy> = slots.iter().map(|s| limits.policy(*s)).collect();
        let states = loaded
            .iter()
            .zip(&policies)
            .map(|(s, p)| s.clone().filter(|s| s.algorithm() == p.algorithm()))
            .collect();
        Batch {
            policies,
            loaded,
            states,
            now,
        }
    }

    /// The store's clock for this batch.
    pub fn now(&self) -> Nanos {
        self.now
    }

    /// Decides one request of `cost`, all or nothing across the slots; an admitted request
    /// is charged to the batch's states. Errors charge nothing.
    pub fn decide(&mut self, cost: u64) -> Result<StackDecision, DecideError> {
        self.decide_weighted(|_| cost)
    }

    /// [`Batch::decide`] with one cost per slot (`cost_of(i)` for slot `i`, in slot order):
    /// see [`crate::stack::decide_all_weighted`]. Errors charge nothing.
    pub fn decide_weighted(
        &mut self,
        cost_of: impl Fn(usize) -> u64,
    ) -> Result<StackDecision, DecideError> {
        // The rule of `decide_all_weighted`, on the batch's states in place (no `Vec` of
        // pairs gathered for each decision: see `stack::Stack`).
        let mut each = alloc::vec![Decision::default(); self.states.len()];
        let now = self.now;
        let decision = crate::stack::decide_each(self, now, &cost_of, &mut each)?;
        Ok(StackDecision { decision, each })
    }

    /// Runs one request of a round: its decision (`None` for a release), charged to the
    /// batch when it says so (see [`Op`]). An error charges nothing: a cost above a
    /// capacity, or a release without a concurrency limit.
    ///
    /// ```
    /// use tollgate::store::{Batch, Limits, Op};
    /// let limits = Limits::single("leaky-queue 1/s burst 3".parse().unwrap());
    /// let slots = limits.slots(None);
    /// let mut batch = Batch::new(&limits, &slots, vec![None], 0);
    /// assert!(batch.apply(Op::Check(1)).unwrap().unwrap().decision.allowed);
    /// // Admitted after a queue delay of seconds, which this waiter cannot afford: not kept.
    /// let d = batch.apply(Op::Acquire { cost: 1, left: Some(10) }).unwrap().unwrap();
    /// assert!(d.decision.allowed && d.decision.delay > 10);
    /// // The queue still holds the first request only.
    /// assert_eq!(batch.apply(Op::Peek(0)).unwrap().unwrap().decision.remaining, 2);
    /// assert!(batch.apply(Op::Release(1)).is_err()); // not a concurrency limit
    /// ```
    pub fn apply(&mut self, op: Op) -> Result<Option<StackDecision>, DecideError> {
        match op {
            Op::Check(cost) => self.decide(cost).map(Some),
            Op::Acquire { cost, left } => {
                // Decided on a copy, kept only as the waiting rule says.
                let mut trial = self.clone();
                let d = trial.decide(cost)?;
                if crate::wait::keeps(&d.decision, left) {
                    *self = trial;
                }
                Ok(Some(d))
            }
            // A peek reports without charging: decided on a copy.
            Op::Peek(cost) => self.clone().decide(cost).map(Some),
            Op::Release(cost) => match self.release(cost) {
                true => Ok(None),
                false => Err(DecideError::NotConcurrency {
                    policy: self.policies[0].algorithm(),
                }),
            },
        }
    }

    /// Settles a reservation that charged `charge` to every slot, with the `actual` cost, at
    /// the batch's clock: each slot by its algorithm's rule ([`crate::settle::settle`]), all
    /// or nothing (an error leaves the batch as it was). A fleet store then writes
    /// [`Batch::writes`] as it does after a decision.
    ///
    /// Errors: those of [`crate::settle::settle`] (an actual above the bound, a
    /// concurrency limit, which releases instead).
    ///
    /// ```
    /// use tollgate::settle::Charge;
    /// use tollgate::store::{Batch, Limits};
    /// use tollgate::Overage;
    /// let limits = Limits::single("fixed-window 100/min".parse().unwrap());
    /// let slots = limits.slots(None);
    /// let mut batch = Batch::new(&limits, &slots, vec![None], 0);
    /// assert_eq!(batch.decide(40).unwrap().decision.remaining, 60);
    /// let done = batch.settle(Charge { cost: 40, at: 0 }, 25, Overage::Debt).unwrap();
    /// assert_eq!(done.refunded, 15);
    /// assert_eq!(batch.decide(0).unwrap().decision.remaining, 75);
    /// ```
    pub fn settle(
        &mut self,
        charge: Charge,
        actual: u64,
        overage: Overage,
    ) -> Result<Settlement, ReservationError> {
        // Settled on a copy of the states, kept only when every slot settled.
        let mut states = self.states.clone();
        let mut each = Vec::with_capacity(states.len());
        for (policy, state) in self.policies.iter().zip(states.iter_mut()) {
            each.push(crate::settle::settle(
                policy, state, charge, actual, self.now, overage,
            )?);
        }
        self.states = states;
        Ok(Settlement::of(&each))
    }

    /// Releases `cost` slots of every concurrency limit among the slots (a request that
    /// acquired them finished). Returns whether there was one.
    pub fn release(&mut self, cost: u64) -> bool {
        let mut any = false;
        for (policy, state) in self.policies.iter().zip(self.states.iter_mut()) {
            if policy.holds_slots() {
                // Cannot fail: a concurrency policy, and a state of its own algorithm.
                if let Ok(next) = crate::release(policy, state.take(), cost) {
                    *state = next;
                }
                any = true;
            }
        }
        any
    }

    /// The current states, in slot order (`None`: fresh).
    pub fn states(&self) -> &[Option<State>] {
        &self.states
    }

    /// Whether any slot's state differs from what was loaded (there is something to write).
    pub fn changed(&self) -> bool {
        self.writes().next().is_some()
    }

    /// What to write back, all or nothing: `(index of the slot, write)` for every slot
    /// whose state changed since it was loaded. A batch whose requests were all denied
    /// writes nothing.
    pub fn writes(&self) -> impl Iterator<Item = (usize, Write)> + '_ {
        self.states
            .iter()
            .zip(&self.loaded)
            .enumerate()
            .filter(|(_, (now, before))| now != before)
            .map(|(i, (state, _))| {
                let write = match state {
                    None => Write::Delete,
                    Some(s) => Write::Put {
                        state: s.clone(),
                        fresh_after: fresh_after(self.policies[i], s, self.now),
                    },
                };
                (i, write)
            })
    }
}

impl crate::stack::Stack for Batch<'_> {
    fn len(&self) -> usize {
        self.policies.len()
    }
    fn limit(&mut self, i: usize) -> (&Policy, &mut Option<State>) {
        (self.policies[i], &mut self.states[i])
    }
}

/// Time from `now` after which `state` is equivalent to fresh if nothing more arrives: the
/// `reset_after` of a request that spends nothing. `None` for a concurrency count (no clock
/// frees a slot).
pub fn fresh_after(policy: &Policy, state: &State, now: Nanos) -> Option<Nanos> {
    if policy.holds_slots() {
        return None;
    }
    crate::decide(policy, Some(state.clone()), now, 0)
        .ok()
        .map(|(d, _)| d.reset_after)
}
