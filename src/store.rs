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

use alloc::borrow::Cow;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use crate::algorithms::{
    concurrency::ConcurrencyState,
    fixed_window::FixedWindowState,
    gcra::GcraState,
    leaky_bucket::LeakyBucketState,
    leaky_queue::LeakyQueueState,
    sliding_log::{Entry, SlidingLogState},
    sliding_window::SlidingWindowState,
    token_bucket::TokenBucketState,
};
use crate::fair_share::{skips_tenant_window, FairShare};
use crate::stack::{decide_all, StackDecision};
use crate::{Algorithm, DecideError, Field, Nanos, Policy, PolicyError, Rule, State};

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
        match self {
            Slot::Layer(i) => alloc::format!("{i}"),
            Slot::Tenant => alloc::format!("t:{}", key_part(tenant.unwrap_or_default())),
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

/// A key or tenant as it appears in a store's key names: `%` and `}` percent-encoded
/// (`%25`, `%7D`), everything else as it is. A `}` would end a Redis hash tag early, and
/// could make one key's slot name equal to another's (key `a}:t:b` with tenant `c`, and
/// key `a` with tenant `b}:t:c`); encoded, every (key, tenant, slot) has its own name.
///
/// ```
/// use tollgate::store::key_part;
/// assert_eq!(key_part("203.0.113.7"), "203.0.113.7");
/// assert_eq!(key_part("a}:t:b"), "a%7D:t:b");
/// assert_eq!(key_part("100%"), "100%25");
/// ```
pub fn key_part(text: &str) -> Cow<'_, str> {
    if !text.contains(['%', '}']) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 4);
    for c in text.chars() {
        match c {
            '%' => out.push_str("%25"),
            '}' => out.push_str("%7D"),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
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
        self.layers
            .iter()
            .any(|p| p.algorithm() == Algorithm::Concurrency)
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
        let mut limits: Vec<(&Policy, &mut Option<State>)> = self
            .policies
            .iter()
            .copied()
            .zip(self.states.iter_mut())
            .collect();
        decide_all(&mut limits, self.now, cost)
    }

    /// [`Batch::decide`] with one cost per slot (`costs[i]` for slot `i`, in slot order):
    /// see [`crate::stack::decide_all_weighted`]. Errors charge nothing.
    ///
    /// # Panics
    /// If `costs` and the slots differ in length.
    pub fn decide_weighted(&mut self, costs: &[u64]) -> Result<StackDecision, DecideError> {
        let mut limits: Vec<(&Policy, &mut Option<State>)> = self
            .policies
            .iter()
            .copied()
            .zip(self.states.iter_mut())
            .collect();
        crate::stack::decide_all_weighted(&mut limits, self.now, costs)
    }

    /// Releases `cost` slots of every concurrency limit among the slots (a request that
    /// acquired them finished). Returns whether there was one.
    pub fn release(&mut self, cost: u64) -> bool {
        let mut any = false;
        for (policy, state) in self.policies.iter().zip(self.states.iter_mut()) {
            if policy.algorithm() == Algorithm::Concurrency {
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

/// Time from `now` after which `state` is equivalent to fresh if nothing more arrives: the
/// `reset_after` of a request that spends nothing. `None` for a concurrency count (no clock
/// frees a slot).
pub fn fresh_after(policy: &Policy, state: &State, now: Nanos) -> Option<Nanos> {
    if policy.algorithm() == Algorithm::Concurrency {
        return None;
    }
    crate::decide(policy, Some(state.clone()), now, 0)
        .ok()
        .map(|(d, _)| d.reset_after)
}

/// The version of the byte layout written by [`State::to_bytes`].
pub const STATE_BYTES_VERSION: u8 = 1;

/// Why stored bytes are not a state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StateBytesError {
    /// Fewer or more bytes than the layout of the state's algorithm.
    Length {
        /// The algorithm the bytes say.
        algorithm: Algorithm,
        /// How many bytes there were.
        len: usize,
    },
    /// Too short to hold the header (version and algorithm).
    Truncated,
    /// A layout version this build does not know.
    Version(u8),
    /// An algorithm code this build does not know.
    Algorithm(u8),
    /// A sliding log's entries out of time order, or one of cost zero.
    LogOrder,
}

impl fmt::Display for StateBytesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StateBytesError::Length { algorithm, len } => {
                write!(f, "corrupt {algorithm} state: {len} bytes")
            }
            StateBytesError::Truncated => f.write_str("corrupt state: shorter than its header"),
            StateBytesError::Version(v) => write!(f, "state bytes of unknown version {v}"),
            StateBytesError::Algorithm(a) => write!(f, "state bytes of unknown algorithm {a}"),
            StateBytesError::LogOrder => {
                f.write_str("corrupt sliding-log state: entries out of order or of cost zero")
            }
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for StateBytesError {}

/// The one-byte code of each algorithm in the state layout (stable: stored bytes depend on it).
const fn code(a: Algorithm) -> u8 {
    match a {
        Algorithm::TokenBucket => 1,
        Algorithm::Gcra => 2,
        Algorithm::SlidingWindow => 3,
        Algorithm::FixedWindow => 4,
        Algorithm::SlidingLog => 5,
        Algorithm::LeakyBucket => 6,
        Algorithm::LeakyQueue => 7,
        Algorithm::Concurrency => 8,
    }
}

/// Reads fixed-width little-endian integers from a byte slice of a checked length.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn u64(&mut self) -> u64 {
        let (head, rest) = self.0.split_at(8);
        self.0 = rest;
        u64::from_le_bytes(head.try_into().unwrap_or([0; 8]))
    }
    fn u128(&mut self) -> u128 {
        let (head, rest) = self.0.split_at(16);
        self.0 = rest;
        u128::from_le_bytes(head.try_into().unwrap_or([0; 16]))
    }
}

impl State {
    /// The state as bytes, for a store that keeps bytes (Redis, a file): one byte of layout
    /// version ([`STATE_BYTES_VERSION`]), one byte naming the algorithm, then the state's
    /// fields as little-endian integers in declaration order (a sliding log: each entry's
    /// `at` and `cost`). The same bytes in every runtime.
    ///
    /// ```
    /// use tollgate::algorithms::gcra::GcraState;
    /// use tollgate::State;
    /// let s = State::Gcra(GcraState { tat: 5 });
    /// let bytes = s.to_bytes();
    /// assert_eq!(bytes, [1, 2, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    /// assert_eq!(State::from_bytes(&bytes), Ok(s));
    /// ```
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(34);
        out.push(STATE_BYTES_VERSION);
        out.push(code(self.algorithm()));
        match self {
            State::TokenBucket(s) => {
                out.extend_from_slice(&s.credit.to_le_bytes());
                out.extend_from_slice(&s.last.to_le_bytes());
            }
            State::Gcra(s) => out.extend_from_slice(&s.tat.to_le_bytes()),
            State::SlidingWindow(s) => {
                out.extend_from_slice(&s.window.to_le_bytes());
                out.extend_from_slice(&s.prev.to_le_bytes());
                out.extend_from_slice(&s.cur.to_le_bytes());
            }
            State::FixedWindow(s) => {
                out.extend_from_slice(&s.window.to_le_bytes());
                out.extend_from_slice(&s.count.to_le_bytes());
            }
            State::SlidingLog(s) => {
                for e in &s.entries {
                    out.extend_from_slice(&e.at.to_le_bytes());
                    out.extend_from_slice(&e.cost.to_le_bytes());
                }
            }
            State::LeakyBucket(s) => {
                out.extend_from_slice(&s.level.to_le_bytes());
                out.extend_from_slice(&s.last.to_le_bytes());
            }
            State::LeakyQueue(s) => out.extend_from_slice(&s.last_departure.to_le_bytes()),
            State::Concurrency(s) => out.extend_from_slice(&s.in_flight.to_le_bytes()),
        }
        out
    }

    /// Reads bytes written by [`State::to_bytes`]. Bytes of the wrong length, an unknown
    /// version or algorithm, or a sliding log out of order are an error, never a guess.
    /// (Any field values are accepted: every algorithm decides safely on any state.)
    pub fn from_bytes(bytes: &[u8]) -> Result<State, StateBytesError> {
        let [version, algorithm, body @ ..] = bytes else {
            return Err(StateBytesError::Truncated);
        };
        if *version != STATE_BYTES_VERSION {
            return Err(StateBytesError::Version(*version));
        }
        let algorithm = Algorithm::ALL
            .into_iter()
            .find(|a| code(*a) == *algorithm)
            .ok_or(StateBytesError::Algorithm(*algorithm))?;
        let expected = match algorithm {
            Algorithm::TokenBucket | Algorithm::LeakyBucket => Some(24),
            Algorithm::Gcra | Algorithm::LeakyQueue => Some(16),
            Algorithm::SlidingWindow => Some(24),
            Algorithm::FixedWindow => Some(16),
            Algorithm::Concurrency => Some(8),
            Algorithm::SlidingLog => None,
        };
        let length_ok = match expected {
            Some(n) => body.len() == n,
            None => body.len() % 16 == 0,
        };
        if !length_ok {
            return Err(StateBytesError::Length {
                algorithm,
                len: bytes.len(),
            });
        }
        let mut r = Reader(body);
        Ok(match algorithm {
            Algorithm::TokenBucket => State::TokenBucket(TokenBucketState {
                credit: r.u128(),
                last: r.u64(),
            }),
            Algorithm::Gcra => State::Gcra(GcraState { tat: r.u128() }),
            Algorithm::SlidingWindow => State::SlidingWindow(SlidingWindowState {
                window: r.u64(),
                prev: r.u64(),
                cur: r.u64(),
            }),
            Algorithm::FixedWindow => State::FixedWindow(FixedWindowState {
                window: r.u64(),
                count: r.u64(),
            }),
            Algorithm::SlidingLog => {
                let mut entries = alloc::collections::VecDeque::with_capacity(body.len() / 16);
                while !r.0.is_empty() {
                    let e = Entry {
                        at: r.u64(),
                        cost: r.u64(),
                    };
                    let in_order = entries.back().is_none_or(|last: &Entry| last.at < e.at);
                    if e.cost == 0 || !in_order {
                        return Err(StateBytesError::LogOrder);
                    }
                    entries.push_back(e);
                }
                State::SlidingLog(SlidingLogState { entries })
            }
            Algorithm::LeakyBucket => State::LeakyBucket(LeakyBucketState {
                level: r.u128(),
                last: r.u64(),
            }),
            Algorithm::LeakyQueue => State::LeakyQueue(LeakyQueueState {
                last_departure: r.u128(),
            }),
            Algorithm::Concurrency => State::Concurrency(ConcurrencyState { in_flight: r.u64() }),
        })
    }
}
