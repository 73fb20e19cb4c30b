//! What a coordinator object does with one request, as plain Rust (testable on the host):
//! load the states of the request's slots, decide with the core (all or nothing), and hand
//! every changed state to the store in the same call. The Durable Object wraps this with
//! its SQLite storage and its clock.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use tollgate::stack::decide_all;
use tollgate::{millis, release, DecideError, Decision, Policy, State};

use crate::answer::Counters;
use crate::lease::{self, Lease};

/// What to do with the slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Op {
    /// Decide and charge `cost` (all or nothing).
    Check,
    /// Report without charging (a decision for cost 0), with the stored states.
    Peek,
    /// Release `cost` slots of every concurrency limit.
    Release,
    /// Forget the slots.
    Reset,
    /// Count the object's stored rows (admin; sees the alarm's sweeps). Touches no slot.
    Count,
    /// Add an isolate's counters to the object's per-policy stats and answer the totals
    /// (the stats object).
    Report,
}

/// One limit of a request: where its state lives and the policy that decides it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limit {
    /// The storage key: `<policy>|<index>|<key>` or `<policy>|t|<key>|<tenant>`.
    pub slot: String,
    /// The policy, as its compact string.
    pub policy: Policy,
}

/// A request from the isolate to a coordinator object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectRequest {
    /// The operation.
    pub op: Op,
    /// The limits, all charged or none.
    pub limits: Vec<Limit>,
    /// Cost units.
    pub cost: u64,
    /// The test clock (ms), only sent when the config enables it; otherwise the object's
    /// own clock decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub now_ms: Option<u64>,
    /// Counters to add ([`Op::Report`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub counters: BTreeMap<String, Counters>,
    /// A check: hold the concurrency slots it acquires under this lease id (see
    /// [`crate::lease`]). A release: free what this lease holds, once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<String>,
    /// How long a lease lasts (ms).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lease_ms: u64,
    /// The latest instant (ms, the isolate's clock) at which the object may still decide
    /// this call; later it is refused with [`ObjectResponse::Late`], charging nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<u64>,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl ObjectRequest {
    /// A request of `op` on `limits` for `cost`, with nothing else set.
    pub fn new(op: Op, limits: Vec<Limit>, cost: u64) -> ObjectRequest {
        ObjectRequest {
            op,
            limits,
            cost,
            now_ms: None,
            counters: BTreeMap::new(),
            lease: None,
            lease_ms: 0,
            deadline_ms: None,
        }
    }
}

/// A coordinator's answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ObjectResponse {
    /// A decision over the stack (check and peek).
    Decided {
        /// The combined decision.
        decision: Decision,
        /// Each limit's decision, in request order.
        each: Vec<Decision>,
        /// The object's clock when it decided (ms), so the isolate's deny cache uses the
        /// same instant.
        now_ms: u64,
        /// The stored states (peek only).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        states: Vec<Option<State>>,
    },
    /// Slots released.
    Released,
    /// The call reached the object after its deadline: not decided, nothing charged.
    Late {
        /// The object's clock (ms).
        now_ms: u64,
    },
    /// Per-policy totals ([`Op::Report`]).
    Stats {
        /// Counters by policy name.
        by_policy: BTreeMap<String, Counters>,
    },
    /// The object's stored rows.
    Count {
        /// Rows in storage.
        rows: u64,
    },
    /// Slots forgotten; how many were stored.
    Reset {
        /// Slots that held a state.
        found: u32,
    },
    /// The request can never be decided as asked (nothing was charged).
    Error {
        /// The core's stable code, e.g. `cost-exceeds-capacity`.
        code: String,
        /// A sentence for people.
        message: String,
    },
}

impl ObjectResponse {
    fn error(e: DecideError) -> ObjectResponse {
        ObjectResponse::Error {
            code: e.code().to_string(),
            message: e.to_string(),
        }
    }
}

/// Where an object keeps its states. `save` is called for every slot whose state changed,
/// before the object answers.
pub trait Store {
    /// The stored state of `slot`, if any.
    fn load(&mut self, slot: &str) -> Option<State>;
    /// Stores (`Some`) or deletes (`None`) the state of `slot`; `fresh_at` (ms on the
    /// object's clock) is when it will be back to fresh (None under the test clock: such
    /// states are never swept).
    fn save(&mut self, slot: &str, state: Option<&State>, fresh_at: Option<u64>);
    /// How many states are stored.
    fn count(&mut self) -> u64;
    /// Adds counters to the stored per-policy stats and returns the totals.
    fn report(&mut self, counters: &BTreeMap<String, Counters>) -> BTreeMap<String, Counters>;
    /// The leases held on a concurrency slot.
    fn load_leases(&mut self, slot: &str) -> Vec<Lease>;
    /// Stores the leases of a concurrency slot (empty: delete them).
    fn save_leases(&mut self, slot: &str, leases: &[Lease]);
}

/// When a stored state is back to fresh (ms on the object's clock), for the alarm that sweeps
/// fresh states. `None` under the test clock (never swept). A concurrency count has no clock
/// (it is fresh only once released to zero, which deletes it), so it is never swept either.
fn fresh_at(policy: &Policy, d: &Decision, now_ms: u64, test_clock: bool) -> Option<u64> {
    if test_clock || policy.algorithm() == tollgate::Algorithm::Concurrency {
        None
    } else {
        Some(now_ms.saturating_add(d.reset_after_ms()))
    }
}

/// The object's in-memory view of its slots: the store is read once per slot, then memory
/// is authoritative (the object is the only writer of its storage).
#[derive(Default)]
pub struct Table {
    cache: HashMap<String, Option<State>>,
    /// Leases of concurrency slots, read once per slot like the states.
    leases: HashMap<String, Vec<Lease>>,
}

/// Slots kept in memory before the cache is dropped (the store still has them).
pub const MAX_CACHED: usize = 100_000;

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
    }

    /// The leases of a concurrency slot, read once from the store.
    fn leases_of(&mut self, slot: &str, store: &mut impl Store) -> &mut Vec<Lease> {
        if !self.leases.contains_key(slot) {
            let held = store.load_leases(slot);
            self.leases.insert(slot.to_string(), held);
        }
        self.leases.get_mut(slot).expect("inserted above")
    }

    /// Frees the expired leases of the concurrency limits of `req` (the core releases
    /// their cost), before anything is decided on those slots.
    fn expire_leases(
        &mut self,
        req: &ObjectRequest,
        states: &mut [Option<State>],
        now_ms: u64,
        store: &mut impl Store,
    ) {
        for (i, l) in req.limits.iter().enumerate() {
            if l.policy.algorithm() != tollgate::Algorithm::Concurrency {
                continue;
            }
            let leases = self.leases_of(&l.slot, store);
            let freed = lease::expire(leases, now_ms);
            if freed == 0 {
                continue;
            }
            let kept = leases.clone();
            store.save_leases(&l.slot, &kept);
            if let Ok(next) = release(&l.policy, states[i].clone(), freed) {
                store.save(&l.slot, next.as_ref(), None);
                self.cache.insert(l.slot.clone(), next.clone());
                states[i] = next;
            }
        }
    }

    fn get(&mut self, slot: &str, store: &mut impl Store) -> Option<State> {
        if let Some(s) = self.cache.get(slot) {
            return s.clone();
        }
        if self.cache.len() >= MAX_CACHED {
            self.cache.clear();
            self.leases.clear();
        }
        let s = store.load(slot);
        self.cache.insert(slot.to_string(), s.clone());
        s
    }

    /// Handles one request at `now_ms` (the object's clock, or the request's test clock).
    pub fn handle(
        &mut self,
        req: &ObjectRequest,
        clock_ms: u64,
        store: &mut impl Store,
    ) -> ObjectResponse {
        if req.op == Op::Count {
            return ObjectResponse::Count {
                rows: store.count(),
            };
        }
        if req.op == Op::Report {
            return ObjectResponse::Stats {
                by_policy: store.report(&req.counters),
            };
        }
        if lease::late(clock_ms, req.deadline_ms) {
            return ObjectResponse::Late { now_ms: clock_ms };
        }
        let test_clock = req.now_ms.is_some();
        let now_ms = req.now_ms.unwrap_or(clock_ms);
        let now = millis(now_ms);
        let mut states: Vec<Option<State>> = req
            .limits
            .iter()
            .map(|l| {
                // A state made by another algorithm (the config changed) starts fresh.
                self.get(&l.slot, store)
                    .filter(|s| s.algorithm() == l.policy.algorithm())
            })
            .collect();
        if req.op != Op::Reset {
            self.expire_leases(req, &mut states, now_ms, store);
        }
        match req.op {
            Op::Check | Op::Peek => {
                let cost = if req.op == Op::Peek { 0 } else { req.cost };
                let before = states.clone();
                let mut pairs: Vec<(&Policy, &mut Option<State>)> = req
                    .limits
                    .iter()
                    .map(|l| &l.policy)
                    .zip(states.iter_mut())
                    .collect();
                let d = match decide_all(&mut pairs, now, cost) {
                    Ok(d) => d,
                    Err(e) => return ObjectResponse::error(e),
                };
                for (i, l) in req.limits.iter().enumerate() {
                    if states[i] != before[i] {
                        let fresh_at = fresh_at(&l.policy, &d.each[i], now_ms, test_clock);
                        store.save(&l.slot, states[i].as_ref(), fresh_at);
                        self.cache.insert(l.slot.clone(), states[i].clone());
                    }
                }
                if let (Some(id), true) = (&req.lease, d.decision.allowed && cost > 0) {
                    for l in &req.limits {
                        if l.policy.algorithm() == tollgate::Algorithm::Concurrency {
                            let leases = self.leases_of(&l.slot, store);
                            if lease::grant(leases, id, cost, now_ms, req.lease_ms) {
                                let held = leases.clone();
                                store.save_leases(&l.slot, &held);
                            }
                        }
                    }
                }
                ObjectResponse::Decided {
                    decision: d.decision,
                    each: d.each,
                    now_ms,
                    states: if req.op == Op::Peek {
                        states
                    } else {
                        Vec::new()
                    },
                }
            }
            Op::Release => {
                let mut any = false;
                for (i, l) in req.limits.iter().enumerate() {
                    if l.policy.algorithm() != tollgate::Algorithm::Concurrency {
                        continue;
                    }
                    any = true;
                    // By lease: what the lease holds, once (nothing if already freed).
                    let cost = match &req.lease {
                        None => req.cost,
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
                    match release(&l.policy, states[i].clone(), cost) {
                        Ok(next) => {
                            if next != states[i] {
                                let fresh_at =
                                    fresh_at(&l.policy, &Decision::default(), now_ms, test_clock);
                                store.save(&l.slot, next.as_ref(), fresh_at);
                                self.cache.insert(l.slot.clone(), next);
                            }
                        }
                        Err(e) => return ObjectResponse::error(e),
                    }
                }
                if any {
                    ObjectResponse::Released
                } else {
                    ObjectResponse::error(DecideError::NotConcurrency {
                        policy: req
                            .limits
                            .first()
                            .map(|l| l.policy.algorithm())
                            .unwrap_or(tollgate::Algorithm::TokenBucket),
                    })
                }
            }
            Op::Count | Op::Report => ObjectResponse::Error {
                code: "unexpected".into(),
                message: "handled above".into(),
            },
            Op::Reset => {
                let mut found = 0;
                for (i, l) in req.limits.iter().enumerate() {
                    if states[i].is_some() {
                        found += 1;
                        store.save(&l.slot, None, None);
                    }
                    self.cache.insert(l.slot.clone(), None);
                    if l.policy.algorithm() == tollgate::Algorithm::Concurrency {
                        store.save_leases(&l.slot, &[]);
                        self.leases.insert(l.slot.clone(), Vec::new());
                    }
                }
                ObjectResponse::Reset { found }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Mem {
        map: HashMap<String, (State, Option<u64>)>,
        leases: HashMap<String, Vec<Lease>>,
        loads: usize,
        saves: usize,
        stats: BTreeMap<String, Counters>,
    }

    impl Store for Mem {
        fn load(&mut self, slot: &str) -> Option<State> {
            self.loads += 1;
            self.map.get(slot).map(|(s, _)| s.clone())
        }
        fn count(&mut self) -> u64 {
            self.map.len() as u64
        }
        fn report(&mut self, c: &BTreeMap<String, Counters>) -> BTreeMap<String, Counters> {
            crate::answer::merge(&mut self.stats, c);
            self.stats.clone()
        }
        fn load_leases(&mut self, slot: &str) -> Vec<Lease> {
            self.leases.get(slot).cloned().unwrap_or_default()
        }
        fn save_leases(&mut self, slot: &str, leases: &[Lease]) {
            if leases.is_empty() {
                self.leases.remove(slot);
            } else {
                self.leases.insert(slot.into(), leases.to_vec());
            }
        }
        fn save(&mut self, slot: &str, state: Option<&State>, fresh_at: Option<u64>) {
            self.saves += 1;
            match state {
                Some(s) => {
                    self.map.insert(slot.into(), (s.clone(), fresh_at));
                }
                None => {
                    self.map.remove(slot);
                }
            }
        }
    }

    fn limit(slot: &str, p: &str) -> Limit {
        Limit {
            slot: slot.into(),
            policy: p.parse().unwrap(),
        }
    }

    fn check(t: &mut Table, m: &mut Mem, limits: &[Limit], cost: u64, now: u64) -> ObjectResponse {
        t.handle(
            &ObjectRequest::new(Op::Check, limits.to_vec(), cost),
            now,
            m,
        )
    }

    fn allowed(r: &ObjectResponse) -> bool {
        matches!(r, ObjectResponse::Decided { decision, .. } if decision.allowed)
    }

    #[test]
    fn a_denied_stack_charges_nothing() {
        let (mut t, mut m) = (Table::new(), Mem::default());
        let ls = [
            limit("a|0|k", "5/s"),
            limit("g|0|global", "fixed-window 3/min"),
        ];
        for _ in 0..3 {
            assert!(allowed(&check(&mut t, &mut m, &ls, 1, 1000)));
        }
        assert!(!allowed(&check(&mut t, &mut m, &ls, 1, 1000)));
        // The per-key bucket was charged 3, not 4, and the denial says so.
        match check(&mut t, &mut m, &ls, 1, 1000) {
            ObjectResponse::Decided { each, .. } => assert_eq!(each[0].remaining, 2),
            other => panic!("{other:?}"),
        }
        let r = t.handle(
            &ObjectRequest::new(Op::Peek, ls[..1].to_vec(), 0),
            1000,
            &mut m,
        );
        match r {
            ObjectResponse::Decided { decision, .. } => assert_eq!(decision.remaining, 2),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn state_survives_a_new_table() {
        let mut m = Mem::default();
        let ls = [limit("a|0|k", "fixed-window 2/min")];
        {
            let mut t = Table::new();
            assert!(allowed(&check(&mut t, &mut m, &ls, 1, 0)));
            assert!(allowed(&check(&mut t, &mut m, &ls, 1, 0)));
        }
        // A restarted object reads the store.
        let mut t = Table::new();
        assert!(!allowed(&check(&mut t, &mut m, &ls, 1, 10)));
        assert_eq!(m.map["a|0|k"].1, Some(60_000));
    }

    #[test]
    fn the_store_is_read_once_per_slot() {
        let (mut t, mut m) = (Table::new(), Mem::default());
        let ls = [limit("a|0|k", "100/s")];
        for i in 0..10 {
            check(&mut t, &mut m, &ls, 1, i);
        }
        assert_eq!(m.loads, 1);
    }

    #[test]
    fn errors_charge_nothing() {
        let (mut t, mut m) = (Table::new(), Mem::default());
        let ls = [limit("a|0|k", "5/s")];
        match check(&mut t, &mut m, &ls, 6, 0) {
            ObjectResponse::Error { code, .. } => assert_eq!(code, "cost-exceeds-capacity"),
            other => panic!("{other:?}"),
        }
        assert_eq!(m.saves, 0);
    }

    #[test]
    fn a_changed_algorithm_starts_fresh() {
        let (mut t, mut m) = (Table::new(), Mem::default());
        assert!(allowed(&check(
            &mut t,
            &mut m,
            &[limit("s", "fixed-window 1/min")],
            1,
            0
        )));
        assert!(allowed(&check(
            &mut t,
            &mut m,
            &[limit("s", "1/min")],
            1,
            0
        )));
    }

    #[test]
    fn release_and_reset() {
        let (mut t, mut m) = (Table::new(), Mem::default());
        let ls = [limit("c", "concurrency 1")];
        assert!(allowed(&check(&mut t, &mut m, &ls, 1, 0)));
        assert!(!allowed(&check(&mut t, &mut m, &ls, 1, 0)));
        let rel = ObjectRequest::new(Op::Release, ls.to_vec(), 1);
        assert_eq!(t.handle(&rel, 0, &mut m), ObjectResponse::Released);
        assert!(allowed(&check(&mut t, &mut m, &ls, 1, 0)));
        let reset = ObjectRequest {
            op: Op::Reset,
            ..rel.clone()
        };
        assert_eq!(
            t.handle(&reset, 0, &mut m),
            ObjectResponse::Reset { found: 1 }
        );
        assert!(m.map.is_empty());
        let bad = ObjectRequest {
            limits: vec![limit("x", "1/s")],
            ..rel
        };
        assert!(
            matches!(t.handle(&bad, 0, &mut m), ObjectResponse::Error { code, .. } if code == "not-concurrency")
        );
    }

    fn in_flight(t: &mut Table, m: &mut Mem, ls: &[Limit], now: u64) -> u64 {
        match t.handle(&ObjectRequest::new(Op::Peek, ls.to_vec(), 0), now, m) {
            ObjectResponse::Decided { decision, .. } => decision.limit - decision.remaining,
            other => panic!("{other:?}"),
        }
    }

    fn leased(op: Op, ls: &[Limit], id: &str) -> ObjectRequest {
        ObjectRequest {
            lease: Some(id.into()),
            lease_ms: 1000,
            ..ObjectRequest::new(op, ls.to_vec(), 1)
        }
    }

    #[test]
    fn a_lease_is_released_once() {
        let (mut t, mut m) = (Table::new(), Mem::default());
        let ls = [limit("c", "concurrency 2")];
        assert!(allowed(&t.handle(&leased(Op::Check, &ls, "a"), 0, &mut m)));
        assert!(allowed(&t.handle(&leased(Op::Check, &ls, "b"), 0, &mut m)));
        assert!(!allowed(&t.handle(&leased(Op::Check, &ls, "c"), 0, &mut m)));
        assert_eq!(m.leases["c"].len(), 2, "a denied call holds no lease");
        let rel = leased(Op::Release, &ls, "a");
        assert_eq!(t.handle(&rel, 10, &mut m), ObjectResponse::Released);
        assert_eq!(t.handle(&rel, 10, &mut m), ObjectResponse::Released);
        assert_eq!(
            in_flight(&mut t, &mut m, &ls, 10),
            1,
            "the second release freed nothing"
        );
        // A restarted object reads the leases back.
        let mut t = Table::new();
        assert_eq!(
            t.handle(&leased(Op::Release, &ls, "b"), 20, &mut m),
            ObjectResponse::Released
        );
        assert_eq!(in_flight(&mut t, &mut m, &ls, 20), 0);
        assert!(m.leases.is_empty() && m.map.is_empty());
    }

    #[test]
    fn a_lost_release_frees_the_slot_when_the_lease_expires() {
        let (mut t, mut m) = (Table::new(), Mem::default());
        let ls = [limit("c", "concurrency 1")];
        assert!(allowed(&t.handle(&leased(Op::Check, &ls, "a"), 0, &mut m)));
        assert!(!allowed(&t.handle(
            &leased(Op::Check, &ls, "b"),
            999,
            &mut m
        )));
        assert!(allowed(&t.handle(
            &leased(Op::Check, &ls, "b"),
            1000,
            &mut m
        )));
        // The late release of "a" frees nothing: "b" still holds the slot.
        t.handle(&leased(Op::Release, &ls, "a"), 1001, &mut m);
        assert_eq!(in_flight(&mut t, &mut m, &ls, 1001), 1);
    }

    #[test]
    fn a_late_call_is_not_decided() {
        let (mut t, mut m) = (Table::new(), Mem::default());
        let ls = [limit("a|0|k", "fixed-window 2/min")];
        let late = ObjectRequest {
            deadline_ms: Some(999),
            ..ObjectRequest::new(Op::Check, ls.to_vec(), 1)
        };
        assert_eq!(
            t.handle(&late, 1000, &mut m),
            ObjectResponse::Late { now_ms: 1000 }
        );
        assert_eq!(m.saves, 0);
        let in_time = ObjectRequest {
            deadline_ms: Some(1000),
            ..late
        };
        assert!(allowed(&t.handle(&in_time, 1000, &mut m)));
    }
}
