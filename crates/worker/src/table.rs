//! What a coordinator object does with one request, as plain Rust (tested on the host). It
//! follows the core's store contract ([`tollgate::store`]): load the states of the request's
//! slots, decide with a [`Batch`] (all or nothing across the stack), and hand the store what
//! [`Batch::writes`] says changed, in the same call, with when each state is back to fresh.
//! Around that, the object's own bookkeeping: concurrency leases ([`crate::lease`]), call
//! deadlines, the test clock, and the slots in use by series ([`crate::in_use`]), changed
//! around every request that touches a concurrency slot. The Durable Object wraps this with
//! its SQLite storage and its clock.
//!
//! **Reservations.** A check that names a [`Check::reservation`] and is admitted keeps,
//! in memory, what it charged and when ([`tollgate::settle::Charge`]); a
//! [`ObjectRequest::Settle`] of that id settles every limit by the core's rule, all or
//! nothing, and keeps the outcome: a second settle answers it again and charges nothing.
//! The bound: at most [`MAX_OPEN`] reservations per object, open or settled (settled ones
//! are dropped first to make room), and a reservation the object forgot (over the bound,
//! or the object restarted between the check and the settle) stays charged at its
//! estimate, the core's rule for a reservation never settled; nothing is ever refunded
//! twice or charged twice.

use std::collections::HashMap;

use tollgate::carry::{carry, carry_stack};
use tollgate::plans::Override;
use tollgate::settle::{self as core_settle, Charge, Overage, Settlement};
use tollgate::store::{fresh_after, Batch, Limits, Write};
use tollgate::{millis, Algorithm, DecideError, Nanos, Policy, State, NANOS_PER_MS};

use crate::counters::PolicyTally;
use crate::in_use::{self, InUse, SeriesInUse};
use crate::lease::{self, Grant, Lease};
use crate::plan::policy_of_slot;
use crate::protocol::{Check, Limit, ObjectRequest, ObjectResponse, Owner, Release, Settle, When};

/// Where an object keeps its states. `save` is called for every slot whose state changed,
/// before the object answers.
pub trait Store {
    /// The stored state of `slot`, if any, and the policy it was written under (`None`: a
    /// state stored before states named their policy, read as written under the policy
    /// asking).
    fn load(&mut self, slot: &str) -> (Option<State>, Option<Policy>);
    /// Stores (`Some`) or deletes (`None`) the state of `slot`, written under `policy`;
    /// `fresh_at` (ms on the object's clock) is when it will be back to fresh (None for a
    /// concurrency count, and under the test clock: such states are never swept).
    fn save(&mut self, slot: &str, state: Option<&State>, policy: &Policy, fresh_at: Option<u64>);
    /// How many states are stored.
    fn count(&mut self) -> u64;
    /// Adds tallies to the stored per-policy stats, keeps a coordinator's report of slots
    /// in use if it is newer than the one kept ([`in_use::newer`]), and returns the totals:
    /// the tallies, and the slots in use of every coordinator added up ([`in_use::sum`]).
    fn report(
        &mut self,
        tallies: &[PolicyTally],
        in_use: Option<&in_use::Report>,
    ) -> (Vec<PolicyTally>, Vec<SeriesInUse>);
    /// This object's own slots in use by series (empty when none were ever held).
    fn load_in_use(&mut self) -> InUse;
    /// Stores this object's slots in use by series.
    fn save_in_use(&mut self, in_use: &InUse);
    /// The leases held on a concurrency slot.
    fn load_leases(&mut self, slot: &str) -> Vec<Lease>;
    /// Stores the leases of a concurrency slot (empty: delete them).
    fn save_leases(&mut self, slot: &str, leases: &[Lease]);
    /// The override kept for `owner` ([`crate::protocol::override_name`]), if any.
    fn load_override(&mut self, owner: &str) -> Option<Override>;
    /// Keeps (`Some`) or removes (`None`) the override of `owner`.
    fn save_override(&mut self, owner: &str, what: Option<&Override>);
    /// How many overrides are kept.
    fn count_overrides(&mut self) -> u64;
    /// The limits of plan `plan` of the policy of plans `policy`, as the config running
    /// now has them (`None`: no such plan now; the override is then not applied).
    fn plan_limits(&mut self, policy: &str, plan: &str) -> Option<Vec<Policy>>;
}

/// What [`Table::carry_group`] carried: the states, and the spare slots to delete.
type Carried = (Vec<Option<State>>, Vec<String>);

/// A call that came after its deadline, at this instant of the object's clock (ms): answered
/// [`ObjectResponse::Late`].
struct Late(u64);

/// The instant a call is decided at.
#[derive(Clone, Copy)]
struct Clock {
    /// Ms: the request's test clock, or the object's.
    now_ms: u64,
    /// Whether it is the test clock (states it makes are never swept).
    test: bool,
}

impl Clock {
    /// The clock of a call reaching the object at `clock_ms`, or the answer to a call that
    /// came after its deadline (not decided, nothing charged).
    fn of(when: &When, clock_ms: u64) -> Result<Clock, Late> {
        if lease::late(clock_ms, when.deadline_ms) {
            return Err(Late(clock_ms));
        }
        Ok(Clock {
            now_ms: when.now_ms.unwrap_or(clock_ms),
            test: when.now_ms.is_some(),
        })
    }

    fn nanos(self) -> Nanos {
        millis(self.now_ms)
    }

    /// When a state written now is back to fresh (ms), from the store contract's
    /// `fresh_after`, rounded up so that a sweep never deletes a state early.
    fn fresh_at(self, fresh_after: Option<Nanos>) -> Option<u64> {
        let after = fresh_after.filter(|_| !self.test)?;
        Some(self.now_ms.saturating_add(after.div_ceil(NANOS_PER_MS)))
    }
}

/// The object's in-memory view of its slots: the store is read once per slot, then memory
/// is authoritative (the object is the only writer of its storage).
#[derive(Default)]
pub struct Table {
    cache: HashMap<String, Option<State>>,
    /// The policy each cached state was written under, when the store said.
    under: HashMap<String, Policy>,
    /// Leases of concurrency slots, read once per slot like the states.
    leases: HashMap<String, Vec<Lease>>,
    /// Slots in use by series, read from the store at the first change.
    in_use: Option<InUse>,
    /// Open reservations by id: what the check charged, and the slots it charged.
    reservations: HashMap<String, Open>,
    /// Overrides by owner, read once each like the states.
    overrides: HashMap<String, Option<Override>>,
}

/// A reservation: what a check charged, when, to which slots, and once settled, the
/// outcome (`refunded`, `charged`, `unpaid`).
struct Open {
    charge: Charge,
    slots: Vec<String>,
    settled: Option<(u64, u64, u64)>,
}

/// The most reservations an object keeps, open or settled; a check admitted beyond it
/// (with every kept one still open) is not kept, so it stays charged at the estimate.
pub const MAX_OPEN: usize = 10_000;

/// The most keys an object keeps an override for; setting one more is refused (an override
/// is configuration: never evicted to make room). Keys are spread over a policy group's
/// shards, so a group keeps up to `shards` times this many.
pub const MAX_OVERRIDES: u64 = 10_000;

/// Slots kept in memory before the cache is dropped (the store still has them).
pub const MAX_CACHED: usize = 100_000;

fn is_concurrency(l: &Limit) -> bool {
    l.policy.holds_slots()
}

impl Table {
    /// An empty table.
    pub fn new() -> Table {
        Table::default()
    }

    /// Slots currently cached.
    pub fn cached(&self) -> usize {
        self.cache.len()
    }

    /// Forgets cached slots swept by an alarm.
    pub fn forget(&mut self, slot: &str) {
        self.cache.remove(slot);
        self.under.remove(slot);
    }

    /// Handles one request; `clock_ms` is the object's clock.
    pub fn handle<S: Store>(
        &mut self,
        req: &ObjectRequest,
        clock_ms: u64,
        store: &mut S,
    ) -> ObjectResponse {
        let answer = match req {
            ObjectRequest::Count => Ok(ObjectResponse::Count {
                rows: store.count(),
            }),
            ObjectRequest::Report { tallies, in_use } => {
                let (tallies, in_use) = store.report(tallies, in_use.as_ref());
                Ok(ObjectResponse::Stats { tallies, in_use })
            }
            ObjectRequest::Check(c) => Clock::of(&c.when, clock_ms).map(|clock| {
                let (limits, spare, overridden) =
                    self.overridden(&c.limits, &c.spare, c.owner.as_ref(), store);
                let answer =
                    self.counted(&limits, store, |t, s| t.check(c, &limits, &spare, clock, s));
                naming(answer, overridden)
            }),
            ObjectRequest::Peek(p) => Clock::of(&p.when, clock_ms).map(|clock| {
                let (limits, spare, overridden) =
                    self.overridden(&p.limits, &p.spare, p.owner.as_ref(), store);
                let answer = self.counted(&limits, store, |t, s| {
                    t.decide(&limits, &spare, 0, clock, s, true).0
                });
                naming(answer, overridden)
            }),
            ObjectRequest::SetOverride { owner, what } => Ok(self.set_override(owner, what, store)),
            ObjectRequest::GetOverride { owner } => Ok(ObjectResponse::Override {
                what: self.override_of(owner, store),
            }),
            ObjectRequest::ClearOverride { owner } => {
                let what = self.override_of(owner, store);
                if what.is_some() {
                    store.save_override(owner, None);
                    self.overrides.insert(owner.clone(), None);
                }
                Ok(ObjectResponse::Override { what })
            }
            ObjectRequest::Settle(r) => Clock::of(&r.when, clock_ms)
                .map(|clock| self.counted(&r.limits, store, |t, s| t.settle(r, clock, s))),
            ObjectRequest::Release(r) => Clock::of(&r.when, clock_ms)
                .map(|clock| self.counted(&r.limits, store, |t, s| t.release(r, clock, s))),
            ObjectRequest::Reset { limits } => {
                Ok(self.counted(limits, store, |t, s| t.reset(limits, s)))
            }
        };
        answer.unwrap_or_else(|Late(now_ms)| ObjectResponse::Late { now_ms })
    }

    /// Frees the expired leases of `limits` (concurrency slots no call may name for a
    /// while: the object's alarm sweeps them, so the slots in use come back down).
    pub fn expire<S: Store>(&mut self, limits: &[Limit], clock_ms: u64, store: &mut S) {
        let clock = Clock {
            now_ms: clock_ms,
            test: false,
        };
        self.counted(limits, store, |t, s| {
            let mut states = t.load(limits, s);
            t.expire_leases(limits, &mut states, clock, s);
        });
    }

    /// This object's slots in use by series, if read or changed in this table's life.
    pub fn in_use(&self) -> Option<&InUse> {
        self.in_use.as_ref()
    }

    /// This object's slots in use by series, read from the store if not yet in memory.
    pub fn in_use_or_load(&mut self, store: &mut impl Store) -> &mut InUse {
        self.in_use.get_or_insert_with(|| store.load_in_use())
    }

    /// What the concurrency slot of `l` holds, by route ([`in_use::holdings`]).
    fn holdings(&mut self, l: &Limit, store: &mut impl Store) -> in_use::Holdings {
        let state = self.get(&l.slot, store);
        let leases = self.leases_of(&l.slot, store);
        in_use::holdings(state.as_ref(), leases)
    }

    /// Runs `f` on a request over `limits`, and adds what it changed in their concurrency
    /// slots' holdings to the slots in use (stored with the states, in the same commit).
    fn counted<S: Store, R>(
        &mut self,
        limits: &[Limit],
        store: &mut S,
        f: impl FnOnce(&mut Table, &mut S) -> R,
    ) -> R {
        let slots: Vec<&Limit> = limits.iter().filter(|l| is_concurrency(l)).collect();
        if slots.is_empty() {
            return f(self, store);
        }
        let before: Vec<_> = slots.iter().map(|l| self.holdings(l, store)).collect();
        let answer = f(self, store);
        let mut changed = false;
        for (l, before) in slots.iter().zip(&before) {
            let after = self.holdings(l, store);
            let totals = self.in_use_or_load(store);
            changed |= totals.apply(policy_of_slot(&l.slot), before, &after);
        }
        if let (true, Some(totals)) = (changed, &self.in_use) {
            store.save_in_use(totals);
        }
        answer
    }

    /// The override of `owner`, read once from the store.
    fn override_of(&mut self, owner: &str, store: &mut impl Store) -> Option<Override> {
        if let Some(o) = self.overrides.get(owner) {
            return o.clone();
        }
        let o = store.load_override(owner);
        self.overrides.insert(owner.to_string(), o.clone());
        o
    }

    /// Keeps `what` as the override of `owner`, unless [`MAX_OVERRIDES`] other keys have
    /// one.
    fn set_override(
        &mut self,
        owner: &str,
        what: &Override,
        store: &mut impl Store,
    ) -> ObjectResponse {
        if self.override_of(owner, store).is_none() && store.count_overrides() >= MAX_OVERRIDES {
            return ObjectResponse::Error {
                code: "too-many-overrides".into(),
                message: format!(
                    "overrides: this object keeps at most {MAX_OVERRIDES} keys' overrides; clear one first"
                ),
            };
        }
        store.save_override(owner, Some(what));
        self.overrides.insert(owner.to_string(), Some(what.clone()));
        ObjectResponse::Override {
            what: Some(what.clone()),
        }
    }

    /// The limits and spare slots a check or peek decides by: `limits`, with the owner's
    /// replaced by its override's when it has one that resolves (a plan the running config
    /// still has, or limits of its own), and then the limits decided by (for the answer's
    /// names). The override's spare slots run to the most the request's plan and spare
    /// reach (an override has no more limits than the policy's longest plan: the admin API
    /// checks it).
    fn overridden(
        &mut self,
        limits: &[Limit],
        spare: &[String],
        owner: Option<&Owner>,
        store: &mut impl Store,
    ) -> (Vec<Limit>, Vec<String>, Option<Vec<Policy>>) {
        let unchanged = || (limits.to_vec(), spare.to_vec(), None);
        let Some(owner) = owner.filter(|o| o.at + o.len <= limits.len()) else {
            return unchanged();
        };
        let own = match self.override_of(&owner.name(), store) {
            None => return unchanged(),
            Some(Override::Plan(plan)) => match store.plan_limits(&owner.policy, &plan) {
                Some(l) => l,
                None => return unchanged(),
            },
            Some(Override::Limits(l)) => l,
        };
        let most = owner.len + spare.len();
        let slot = |i: usize| crate::plan::slot(&owner.policy, i, &owner.key);
        let mut out = limits[..owner.at].to_vec();
        out.extend(own.iter().enumerate().map(|(i, p)| Limit {
            slot: slot(i),
            policy: *p,
        }));
        out.extend_from_slice(&limits[owner.at + owner.len..]);
        let spare = (own.len()..most).map(slot).collect();
        let decided = out.iter().map(|l| l.policy).collect();
        (out, spare, Some(decided))
    }

    /// A check over `limits` (the request's, or with its override's, see
    /// [`Table::overridden`]): decides and charges; an admitted check takes its lease on
    /// the concurrency slots.
    fn check(
        &mut self,
        c: &Check,
        limits: &[Limit],
        spare: &[String],
        clock: Clock,
        store: &mut impl Store,
    ) -> ObjectResponse {
        let (answer, allowed) = self.decide(limits, spare, c.cost, clock, store, false);
        if let (Some(id), true) = (&c.reservation, allowed) {
            if self.reservations.len() >= MAX_OPEN {
                self.reservations.retain(|_, r| r.settled.is_none());
            }
            if self.reservations.len() < MAX_OPEN {
                let open = Open {
                    settled: None,
                    charge: Charge {
                        cost: c.cost,
                        at: clock.nanos(),
                    },
                    slots: limits.iter().map(|l| l.slot.clone()).collect(),
                };
                self.reservations.insert(id.clone(), open);
            }
        }
        if let (Some(id), true) = (&c.lease, allowed && c.cost > 0) {
            for l in limits.iter().filter(|l| is_concurrency(l)) {
                let leases = self.leases_of(&l.slot, store);
                let grant = Grant {
                    id,
                    cost: c.cost,
                    lease_ms: c.lease_ms,
                    route: c.route.as_deref(),
                    policy: l.policy,
                };
                if lease::grant(leases, grant, clock.now_ms) {
                    let held = leases.clone();
                    store.save_leases(&l.slot, &held);
                }
            }
        }
        answer
    }

    /// Decides `cost` over `limits` (after carrying states written under other policies,
    /// see [`Table::carry`], and freeing their expired leases) and writes what changed;
    /// answers the decision (with the states when `peek`) and whether it admitted.
    fn decide(
        &mut self,
        limits: &[Limit],
        spare: &[String],
        cost: u64,
        clock: Clock,
        store: &mut impl Store,
        peek: bool,
    ) -> (ObjectResponse, bool) {
        let mut loaded = self.load(limits, store);
        if let Err(e) = self.carry(limits, spare, &mut loaded, clock, store, !peek) {
            return (e.into(), false);
        }
        self.expire_leases(limits, &mut loaded, clock, store);
        let policies: Vec<_> = limits.iter().map(|l| l.policy).collect();
        let stack = match Limits::stack(&policies) {
            Ok(stack) => stack,
            Err(e) => return (bad_request(e.to_string()), false),
        };
        let mut batch = Batch::new(&stack, &stack.slots(None), loaded, clock.nanos());
        let d = match batch.decide(cost) {
            Ok(d) => d,
            Err(e) => return (e.into(), false),
        };
        self.write(limits, &batch, clock, store);
        let answer = ObjectResponse::Decided {
            decision: d.decision,
            each: d.each,
            now_ms: clock.now_ms,
            states: if peek {
                batch.states().to_vec()
            } else {
                Vec::new()
            },
            overridden: None,
        };
        (answer, d.decision.allowed)
    }

    /// Releases the concurrency limits of `r`: by lease, what the lease holds, once
    /// (nothing if it was already freed); without one, `r.cost`.
    fn release(&mut self, r: &Release, clock: Clock, store: &mut impl Store) -> ObjectResponse {
        let mut states = self.load(&r.limits, store);
        self.expire_leases(&r.limits, &mut states, clock, store);
        let mut any = false;
        for (l, state) in r.limits.iter().zip(&mut states) {
            if !is_concurrency(l) {
                continue;
            }
            any = true;
            let cost = match &r.lease {
                None => r.cost,
                Some(id) => {
                    let leases = self.leases_of(&l.slot, store);
                    match lease::take(leases, id) {
                        Some(held) => {
                            let kept = leases.clone();
                            store.save_leases(&l.slot, &kept);
                            held
                        }
                        None => continue,
                    }
                }
            };
            self.release_slot(l, state, cost, clock, store);
        }
        if any {
            ObjectResponse::Released
        } else {
            DecideError::NotConcurrency {
                policy: r
                    .limits
                    .first()
                    .map(|l| l.policy.algorithm())
                    .unwrap_or(Algorithm::TokenBucket),
            }
            .into()
        }
    }

    /// Settles the reservation `r.reservation` at `r.actual`: every limit by the core's rule
    /// ([`core_settle::settle`]), all or nothing, and keeps the outcome; a settled one
    /// answers its outcome again, charging nothing. A settle naming other slots than the
    /// check's (another key) is refused and leaves the reservation open.
    fn settle(&mut self, r: &Settle, clock: Clock, store: &mut impl Store) -> ObjectResponse {
        let Some(open) = self.reservations.get(&r.reservation) else {
            return ObjectResponse::NotReserved;
        };
        if !open.slots.iter().eq(r.limits.iter().map(|l| &l.slot)) {
            return ObjectResponse::Error {
                code: "foreign-key".into(),
                message: format!(
                    "reservation {} was made on other limits than the settle names",
                    r.reservation
                ),
            };
        }
        if let Some((refunded, charged, unpaid)) = open.settled {
            return ObjectResponse::Settled {
                refunded,
                charged,
                unpaid,
            };
        }
        let charge = open.charge;
        let overage = if r.up_to_limit {
            Overage::UpToLimit
        } else {
            Overage::Debt
        };
        let loaded = self.load(&r.limits, store);
        let mut states = loaded.clone();
        let mut each = Vec::with_capacity(r.limits.len());
        for (l, state) in r.limits.iter().zip(&mut states) {
            match core_settle::settle(&l.policy, state, charge, r.actual, clock.nanos(), overage) {
                Ok(done) => each.push(done),
                Err(e) => {
                    return ObjectResponse::Error {
                        code: e.code().into(),
                        message: e.to_string(),
                    }
                }
            }
        }
        let done = Settlement::of(&each);
        if let Some(open) = self.reservations.get_mut(&r.reservation) {
            open.settled = Some((done.refunded, done.charged, done.unpaid));
        }
        for ((l, state), before) in r.limits.iter().zip(states).zip(&loaded) {
            if &state == before {
                continue;
            }
            let fresh_at = state
                .as_ref()
                .and_then(|s| clock.fresh_at(fresh_after(&l.policy, s, clock.nanos())));
            store.save(&l.slot, state.as_ref(), &l.policy, fresh_at);
            self.under.insert(l.slot.clone(), l.policy);
            self.cache.insert(l.slot.clone(), state);
        }
        ObjectResponse::Settled {
            refunded: done.refunded,
            charged: done.charged,
            unpaid: done.unpaid,
        }
    }

    /// Forgets the slots (and the leases of concurrency slots).
    fn reset(&mut self, limits: &[Limit], store: &mut impl Store) -> ObjectResponse {
        let states = self.load(limits, store);
        let mut found = 0;
        for (l, state) in limits.iter().zip(&states) {
            if state.is_some() {
                found += 1;
                store.save(&l.slot, None, &l.policy, None);
            }
            self.cache.insert(l.slot.clone(), None);
            self.under.remove(&l.slot);
            if is_concurrency(l) {
                store.save_leases(&l.slot, &[]);
                self.leases.insert(l.slot.clone(), Vec::new());
            }
        }
        ObjectResponse::Reset { found }
    }

    /// The states of `limits`' slots, each read once from the store.
    fn load(&mut self, limits: &[Limit], store: &mut impl Store) -> Vec<Option<State>> {
        limits.iter().map(|l| self.get(&l.slot, store)).collect()
    }

    fn get(&mut self, slot: &str, store: &mut impl Store) -> Option<State> {
        if let Some(s) = self.cache.get(slot) {
            return s.clone();
        }
        if self.cache.len() >= MAX_CACHED {
            self.cache.clear();
            self.under.clear();
            self.leases.clear();
        }
        let (s, under) = store.load(slot);
        self.cache.insert(slot.to_string(), s.clone());
        if let Some(p) = under {
            self.under.insert(slot.to_string(), p);
        }
        s
    }

    /// Carries the states of `limits` written under another policy to the policy asking,
    /// by the core's rule ([`tollgate::carry`]): the counter belongs to the caller, so a
    /// key whose plan (or own limits, or a deployed policy) changed keeps what it spent.
    /// The limits of one policy entry for one key (slots `<policy>|<i>|<key>`, in order)
    /// carry as a stack ([`carry_stack`]), together with `spare`: that key's slots of the
    /// entry beyond this stack (a policy of plans whose plans have more limits than the
    /// one asking), whose states are deleted once carried. Any other slot carries alone. A
    /// state without a policy (stored before states named theirs) is read as written under
    /// the policy asking; a layer with no state carries nothing, so the nearest layer with
    /// one stands in for it (spent stays spent: never a fresh bucket). When `keep`, each
    /// carried state is written at once, so a denial that writes nothing keeps it; a peek
    /// (an admin's read) carries only to answer, and changes nothing stored.
    fn carry(
        &mut self,
        limits: &[Limit],
        spare: &[String],
        loaded: &mut [Option<State>],
        clock: Clock,
        store: &mut impl Store,
        keep: bool,
    ) -> Result<(), DecideError> {
        let mut start = 0;
        while start < limits.len() {
            let group = stack_of(&limits[start..]);
            let end = start + group.max(1);
            let spares: Vec<&String> = match stack_slot(&limits[start].slot) {
                Some((p, 0, key)) if group > 0 => spare
                    .iter()
                    .filter(|s| stack_slot(s).is_some_and(|(q, _, k)| q == p && k == key))
                    .collect(),
                _ => Vec::new(),
            };
            let group = &limits[start..end];
            let now = clock.nanos();
            let Some((carried, stale)) =
                self.carry_group(group, &spares, &loaded[start..end], now, store)?
            else {
                start = end;
                continue;
            };
            for ((l, state), new) in group.iter().zip(&mut loaded[start..end]).zip(carried) {
                if keep {
                    let fresh_at = new
                        .as_ref()
                        .and_then(|s| clock.fresh_at(fresh_after(&l.policy, s, now)));
                    store.save(&l.slot, new.as_ref(), &l.policy, fresh_at);
                    self.under.insert(l.slot.clone(), l.policy);
                    self.cache.insert(l.slot.clone(), new.clone());
                }
                *state = new;
            }
            for slot in stale.into_iter().filter(|_| keep) {
                store.save(&slot, None, &group[0].policy, None);
                self.under.remove(&slot);
                self.cache.insert(slot, None);
            }
            start = end;
        }
        Ok(())
    }

    /// [`Table::carry`] of one group of slots: the states carried to `limits`' policies and
    /// the spare slots holding a state, or `None` when nothing was written under another
    /// policy.
    fn carry_group(
        &mut self,
        limits: &[Limit],
        spares: &[&String],
        loaded: &[Option<State>],
        now: Nanos,
        store: &mut impl Store,
    ) -> Result<Option<Carried>, DecideError> {
        let mut from: Vec<Policy> = Vec::new();
        let mut states: Vec<Option<State>> = Vec::new();
        let mut changed = false;
        for (l, state) in limits.iter().zip(loaded) {
            let under = self.under.get(&l.slot).copied().unwrap_or(l.policy);
            changed |= under != l.policy;
            if state.is_some() {
                from.push(under);
                states.push(state.clone());
            }
        }
        let mut stale = Vec::new();
        for slot in spares {
            let state = self.get(slot, store);
            if state.is_some() {
                stale.push(slot.to_string());
                if let Some(p) = self.under.get(slot.as_str()) {
                    from.push(*p);
                    states.push(state);
                }
            }
        }
        if !changed && stale.is_empty() {
            return Ok(None);
        }
        let to: Vec<Policy> = limits.iter().map(|l| l.policy).collect();
        let carried = match (limits, &from[..]) {
            ([_], [one]) => vec![carry(one, states.pop().flatten(), &to[0], now)?],
            _ => carry_stack(&from, &states, &to, now)?,
        };
        Ok(Some((carried, stale)))
    }

    /// Hands the store every write of `batch` (the store contract's rule for what changed
    /// and when it is fresh again) and keeps memory in step.
    fn write(&mut self, limits: &[Limit], batch: &Batch<'_>, clock: Clock, store: &mut impl Store) {
        for (i, write) in batch.writes() {
            let (state, fresh_at) = match write {
                Write::Delete => (None, None),
                Write::Put { state, fresh_after } => (Some(state), clock.fresh_at(fresh_after)),
            };
            let slot = &limits[i].slot;
            store.save(slot, state.as_ref(), &limits[i].policy, fresh_at);
            self.under.insert(slot.clone(), limits[i].policy);
            self.cache.insert(slot.clone(), state);
        }
    }

    /// Releases `cost` of the concurrency slot of `l`, whose state is `state`, and writes
    /// the result.
    fn release_slot(
        &mut self,
        l: &Limit,
        state: &mut Option<State>,
        cost: u64,
        clock: Clock,
        store: &mut impl Store,
    ) {
        let one = Limits::single(l.policy);
        let mut batch = Batch::new(&one, &one.slots(None), vec![state.clone()], clock.nanos());
        batch.release(cost);
        self.write(std::slice::from_ref(l), &batch, clock, store);
        *state = batch.states()[0].clone();
    }

    /// The leases of a concurrency slot, read once from the store.
    fn leases_of(&mut self, slot: &str, store: &mut impl Store) -> &mut Vec<Lease> {
        if !self.leases.contains_key(slot) {
            let held = store.load_leases(slot);
            self.leases.insert(slot.to_string(), held);
        }
        self.leases.get_mut(slot).expect("inserted above")
    }

    /// Frees the expired leases of the concurrency limits among `limits` (the core releases
    /// their cost), before anything is decided on those slots.
    fn expire_leases(
        &mut self,
        limits: &[Limit],
        states: &mut [Option<State>],
        clock: Clock,
        store: &mut impl Store,
    ) {
        for (l, state) in limits.iter().zip(states) {
            if !is_concurrency(l) {
                continue;
            }
            let leases = self.leases_of(&l.slot, store);
            let freed = lease::expire(leases, clock.now_ms);
            if freed == 0 {
                continue;
            }
            let kept = leases.clone();
            store.save_leases(&l.slot, &kept);
            self.release_slot(l, state, freed, clock, store);
        }
    }
}

/// `(policy, index, key)` of a stack's slot `<policy>|<index>|<key>` (not a tenant window's,
/// `<policy>|t|...`).
fn stack_slot(slot: &str) -> Option<(&str, usize, &str)> {
    let mut parts = slot.splitn(3, '|');
    let policy = parts.next()?;
    let index = parts.next()?.parse().ok()?;
    Some((policy, index, parts.next()?))
}

/// How many limits at the start of `limits` are one stack: the slots of one policy and
/// key, numbered from 0 in order (0: the first is not a stack's slot).
fn stack_of(limits: &[Limit]) -> usize {
    let Some((p, 0, key)) = limits.first().and_then(|l| stack_slot(&l.slot)) else {
        return 0;
    };
    limits
        .iter()
        .enumerate()
        .take_while(|(i, l)| stack_slot(&l.slot) == Some((p, *i, key)))
        .count()
}

/// A decision with the limits it was decided by, when an override replaced the request's.
fn naming(answer: ObjectResponse, limits: Option<Vec<Policy>>) -> ObjectResponse {
    match answer {
        ObjectResponse::Decided {
            decision,
            each,
            now_ms,
            states,
            ..
        } => ObjectResponse::Decided {
            decision,
            each,
            now_ms,
            states,
            overridden: limits,
        },
        other => other,
    }
}

fn bad_request(message: String) -> ObjectResponse {
    ObjectResponse::Error {
        code: "bad-request".into(),
        message,
    }
}

#[cfg(test)]
mod tests;
