//! The object's table: all-or-nothing stacks, reads, writes, leases and deadlines.

use super::*;
use crate::protocol::{Owner, Peek};
use tollgate::plans::Override;

#[derive(Default)]
struct Mem {
    map: HashMap<String, (State, Option<u64>)>,
    /// The policy each state was written under.
    under: HashMap<String, Policy>,
    leases: HashMap<String, Vec<Lease>>,
    loads: usize,
    saves: usize,
    stats: crate::counters::Tallies,
    in_use: InUse,
    reports: HashMap<String, InUse>,
    overrides: HashMap<String, Override>,
}

impl Store for Mem {
    fn load(&mut self, slot: &str) -> (Option<State>, Option<Policy>) {
        self.loads += 1;
        let state = self.map.get(slot).map(|(s, _)| s.clone());
        (state, self.under.get(slot).copied())
    }
    fn count(&mut self) -> u64 {
        self.map.len() as u64
    }
    fn report(
        &mut self,
        t: &[PolicyTally],
        in_use: Option<&in_use::Report>,
    ) -> (Vec<PolicyTally>, Vec<SeriesInUse>) {
        crate::counters::merge(&mut self.stats, t);
        if let Some(r) = in_use {
            let kept = self.reports.get(&r.object).map(|k| k.version);
            if in_use::newer(r.in_use.version, kept) {
                self.reports.insert(r.object.clone(), r.in_use.clone());
            }
        }
        (
            crate::counters::to_list(&self.stats),
            in_use::sum(self.reports.values()),
        )
    }
    fn load_in_use(&mut self) -> InUse {
        self.in_use.clone()
    }
    fn save_in_use(&mut self, in_use: &InUse) {
        self.in_use = in_use.clone();
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
    fn load_override(&mut self, owner: &str) -> Option<Override> {
        self.overrides.get(owner).cloned()
    }
    fn save_override(&mut self, owner: &str, what: Option<&Override>) {
        match what {
            Some(o) => self.overrides.insert(owner.into(), o.clone()),
            None => self.overrides.remove(owner),
        };
    }
    fn count_overrides(&mut self) -> u64 {
        self.overrides.len() as u64
    }
    /// The plans of these tests: policy `api`, plans `free` (100/min) and `pro` (1,000/min).
    fn plan_limits(&mut self, policy: &str, plan: &str) -> Option<Vec<Policy>> {
        let limit = match (policy, plan) {
            ("api", "free") => "100/min",
            ("api", "pro") => "1000/min",
            _ => return None,
        };
        Some(vec![limit.parse().unwrap()])
    }
    fn save(&mut self, slot: &str, state: Option<&State>, policy: &Policy, fresh_at: Option<u64>) {
        self.saves += 1;
        match state {
            Some(s) => {
                self.map.insert(slot.into(), (s.clone(), fresh_at));
                self.under.insert(slot.into(), *policy);
            }
            None => {
                self.map.remove(slot);
                self.under.remove(slot);
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

fn check_req(limits: &[Limit], cost: u64) -> Check {
    Check {
        reservation: None,
        spare: Vec::new(),
        owner: None,
        limits: limits.to_vec(),
        cost,
        lease: None,
        lease_ms: 0,
        route: None,
        when: When::default(),
    }
}

fn peek(limits: &[Limit]) -> ObjectRequest {
    ObjectRequest::Peek(Peek {
        limits: limits.to_vec(),
        spare: Vec::new(),
        owner: None,
        when: When::default(),
    })
}

fn release(limits: &[Limit], cost: u64, lease: Option<&str>) -> ObjectRequest {
    ObjectRequest::Release(Release {
        limits: limits.to_vec(),
        cost,
        lease: lease.map(str::to_string),
        when: When::default(),
    })
}

fn check(t: &mut Table, m: &mut Mem, limits: &[Limit], cost: u64, now: u64) -> ObjectResponse {
    t.handle(&ObjectRequest::Check(check_req(limits, cost)), now, m)
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
    let r = t.handle(&peek(&ls[..1]), 1000, &mut m);
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
fn a_changed_policy_keeps_what_was_spent() {
    let (mut t, mut m) = (Table::new(), Mem::default());
    let fixed = [limit("s", "fixed-window 1/min")];
    assert!(allowed(&check(&mut t, &mut m, &fixed, 1, 0)));
    // Another algorithm: the spend of 1 carries, so the bucket of 1 is empty.
    let bucket = [limit("s", "1/min")];
    assert!(!allowed(&check(&mut t, &mut m, &bucket, 1, 0)));
    assert_eq!(m.under["s"], bucket[0].policy, "the carry is stored");
    assert!(allowed(&check(&mut t, &mut m, &bucket, 1, 60_000)));
}

#[test]
fn a_state_stored_without_its_policy_is_read_under_the_policy_asking() {
    let (mut t, mut m) = (Table::new(), Mem::default());
    let ls = [limit("s", "fixed-window 2/min")];
    assert!(allowed(&check(&mut t, &mut m, &ls, 2, 0)));
    // A row from before states named their policy, read by a restarted object.
    m.under.clear();
    let mut t = Table::new();
    let raised = [limit("s", "fixed-window 3/min")];
    assert!(allowed(&check(&mut t, &mut m, &raised, 1, 0)));
    assert!(!allowed(&check(&mut t, &mut m, &raised, 1, 0)));
}

/// Admits cost 1 over `limits` at `now` until the first denial; answers how many.
fn admit_all(t: &mut Table, m: &mut Mem, limits: &[Limit], spare: &[&str], now: u64) -> u64 {
    let mut n = 0;
    loop {
        let mut req = check_req(limits, 1);
        req.spare = spare.iter().map(|s| s.to_string()).collect();
        if !allowed(&t.handle(&ObjectRequest::Check(req), now, m)) {
            return n;
        }
        n += 1;
    }
}

#[test]
fn free_pro_free_within_a_window_admits_no_more_than_pro() {
    let (mut t, mut m) = (Table::new(), Mem::default());
    let free = [limit("api|0|key:a", "100/min")];
    let pro = [limit("api|0|key:a", "1000/min")];
    let mut admitted = admit_all(&mut t, &mut m, &free, &[], 0);
    assert_eq!(admitted, 100);
    admitted += admit_all(&mut t, &mut m, &pro, &[], 1);
    admitted += admit_all(&mut t, &mut m, &free, &[], 2);
    admitted += admit_all(&mut t, &mut m, &pro, &[], 3);
    assert_eq!(admitted, 1000, "pro's 1,000, not a fresh bucket per switch");
}

#[test]
fn a_shorter_plan_carries_the_longer_stack_and_drops_its_spare_slots() {
    let (mut t, mut m) = (Table::new(), Mem::default());
    let pro = [
        limit("api|0|key:a", "1000/min"),
        limit("api|1|key:a", "50/s"),
    ];
    let free = [limit("api|0|key:a", "100/min")];
    assert_eq!(admit_all(&mut t, &mut m, &pro, &[], 0), 50);
    assert!(m.map.contains_key("api|1|key:a"));
    // Free's 100/min takes the spend of pro's limit of the nearest window (1,000/min: 50).
    assert_eq!(admit_all(&mut t, &mut m, &free, &["api|1|key:a"], 0), 50);
    assert!(!m.map.contains_key("api|1|key:a"), "carried, then deleted");
    // Back on pro: its 50/s takes free's spend of 100, a debt: nothing more this instant.
    assert_eq!(admit_all(&mut t, &mut m, &pro, &[], 0), 0);
}

#[test]
fn release_and_reset() {
    let (mut t, mut m) = (Table::new(), Mem::default());
    let ls = [limit("c", "concurrency 1")];
    assert!(allowed(&check(&mut t, &mut m, &ls, 1, 0)));
    assert!(!allowed(&check(&mut t, &mut m, &ls, 1, 0)));
    let rel = release(&ls, 1, None);
    assert_eq!(t.handle(&rel, 0, &mut m), ObjectResponse::Released);
    assert!(allowed(&check(&mut t, &mut m, &ls, 1, 0)));
    let reset = ObjectRequest::Reset {
        limits: ls.to_vec(),
    };
    assert_eq!(
        t.handle(&reset, 0, &mut m),
        ObjectResponse::Reset { found: 1 }
    );
    assert!(m.map.is_empty());
    let bad = release(&[limit("x", "1/s")], 1, None);
    assert!(
        matches!(t.handle(&bad, 0, &mut m), ObjectResponse::Error { code, .. } if code == "not-concurrency")
    );
}

fn in_flight(t: &mut Table, m: &mut Mem, ls: &[Limit], now: u64) -> u64 {
    match t.handle(&peek(ls), now, m) {
        ObjectResponse::Decided { decision, .. } => decision.limit - decision.remaining,
        other => panic!("{other:?}"),
    }
}

fn leased_check(ls: &[Limit], id: &str) -> ObjectRequest {
    ObjectRequest::Check(Check {
        lease: Some(id.into()),
        lease_ms: 1000,
        ..check_req(ls, 1)
    })
}

fn leased_release(ls: &[Limit], id: &str) -> ObjectRequest {
    release(ls, 1, Some(id))
}

#[test]
fn a_lease_is_released_once() {
    let (mut t, mut m) = (Table::new(), Mem::default());
    let ls = [limit("c", "concurrency 2")];
    assert!(allowed(&t.handle(&leased_check(&ls, "a"), 0, &mut m)));
    assert!(allowed(&t.handle(&leased_check(&ls, "b"), 0, &mut m)));
    assert!(!allowed(&t.handle(&leased_check(&ls, "c"), 0, &mut m)));
    assert_eq!(m.leases["c"].len(), 2, "a denied call holds no lease");
    let rel = leased_release(&ls, "a");
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
        t.handle(&leased_release(&ls, "b"), 20, &mut m),
        ObjectResponse::Released
    );
    assert_eq!(in_flight(&mut t, &mut m, &ls, 20), 0);
    assert!(m.leases.is_empty() && m.map.is_empty());
}

#[test]
fn a_lost_release_frees_the_slot_when_the_lease_expires() {
    let (mut t, mut m) = (Table::new(), Mem::default());
    let ls = [limit("c", "concurrency 1")];
    assert!(allowed(&t.handle(&leased_check(&ls, "a"), 0, &mut m)));
    assert!(!allowed(&t.handle(&leased_check(&ls, "b"), 999, &mut m)));
    assert!(allowed(&t.handle(&leased_check(&ls, "b"), 1000, &mut m)));
    // The late release of "a" frees nothing: "b" still holds the slot.
    t.handle(&leased_release(&ls, "a"), 1001, &mut m);
    assert_eq!(in_flight(&mut t, &mut m, &ls, 1001), 1);
}

#[test]
fn a_late_call_is_not_decided() {
    let (mut t, mut m) = (Table::new(), Mem::default());
    let ls = [limit("a|0|k", "fixed-window 2/min")];
    let at = |deadline| {
        ObjectRequest::Check(Check {
            when: When {
                now_ms: None,
                deadline_ms: Some(deadline),
            },
            ..check_req(&ls, 1)
        })
    };
    let late = at(999);
    assert_eq!(
        t.handle(&late, 1000, &mut m),
        ObjectResponse::Late { now_ms: 1000 }
    );
    assert_eq!(m.saves, 0);
    let in_time = at(1000);
    assert!(allowed(&t.handle(&in_time, 1000, &mut m)));
}

#[test]
fn a_state_is_fresh_again_when_its_decision_says() {
    // The store contract's `fresh_after` is the admitting decision's `reset_after`: the
    // sweep time of every algorithm (rounded up to the ms), and none under the test clock.
    for p in [
        "token-bucket 5/s",
        "gcra 5/s",
        "sliding-window 5/s",
        "fixed-window 5/min",
        "sliding-log 5/s",
        "leaky-bucket 5/s",
        "leaky-queue 5/s burst 3",
    ] {
        let (mut t, mut m) = (Table::new(), Mem::default());
        let ls = [limit("s", p)];
        for now in [1000, 1100, 1333, 1333] {
            match check(&mut t, &mut m, &ls, 1, now) {
                ObjectResponse::Decided { each, .. } if each[0].allowed => {
                    assert_eq!(m.map["s"].1, Some(now + each[0].reset_after_ms()), "{p}")
                }
                other => panic!("{p}: {other:?}"),
            }
        }
        let test_clock = ObjectRequest::Check(Check {
            when: When {
                now_ms: Some(5000),
                deadline_ms: None,
            },
            ..check_req(&ls, 1)
        });
        assert!(allowed(&t.handle(&test_clock, 0, &mut m)));
        assert_eq!(m.map["s"].1, None, "{p}: test-clock states are never swept");
    }
}

/// The slots in use the store holds for `policy` on `route`.
fn gauge(m: &Mem, policy: &str, route: Option<&str>) -> Option<u64> {
    m.in_use
        .slots
        .iter()
        .find(|s| s.policy == policy && s.route.as_deref() == route)
        .map(|s| s.slots)
}

fn routed_check(ls: &[Limit], id: &str, route: &str) -> ObjectRequest {
    ObjectRequest::Check(Check {
        lease: Some(id.into()),
        lease_ms: 1000,
        route: Some(route.into()),
        ..check_req(ls, 1)
    })
}

#[test]
fn slots_in_use_follow_grants_releases_and_expiry_by_route() {
    let (mut t, mut m) = (Table::new(), Mem::default());
    let ls = [limit("conc|0|ip4:1", "concurrency 3")];
    assert!(allowed(&t.handle(&routed_check(&ls, "a", "/x"), 0, &mut m)));
    assert!(allowed(&t.handle(&routed_check(&ls, "b", "/x"), 0, &mut m)));
    assert!(allowed(&t.handle(
        &routed_check(&ls, "c", "/y"),
        500,
        &mut m
    )));
    assert!(!allowed(&t.handle(
        &routed_check(&ls, "d", "/y"),
        500,
        &mut m
    )));
    assert_eq!(gauge(&m, "conc", Some("/x")), Some(2));
    assert_eq!(
        gauge(&m, "conc", Some("/y")),
        Some(1),
        "a denial holds nothing"
    );
    let v = m.in_use.version;
    // A release frees once; the repeat changes nothing (no new version to report).
    t.handle(&leased_release(&ls, "a"), 600, &mut m);
    t.handle(&leased_release(&ls, "a"), 600, &mut m);
    assert_eq!(gauge(&m, "conc", Some("/x")), Some(1));
    assert_eq!(m.in_use.version, v + 1);
    // The alarm frees expired leases without a call naming the slot: "b" (taken at 0)
    // expired at 1000, "c" (taken at 500) not yet.
    t.expire(&ls, 1000, &mut m);
    assert_eq!(
        gauge(&m, "conc", Some("/x")),
        Some(0),
        "freed, and listed at 0"
    );
    assert_eq!(gauge(&m, "conc", Some("/y")), Some(1));
    // A restarted object (a new table over the same store) goes on from the stored totals.
    let mut t = Table::new();
    t.expire(&ls, 1500, &mut m);
    assert_eq!(gauge(&m, "conc", Some("/y")), Some(0));
    assert_eq!(in_flight(&mut t, &mut m, &ls, 1500), 0);
    // A late release of an expired lease frees nothing, twice.
    t.handle(&leased_release(&ls, "b"), 1600, &mut m);
    assert_eq!(gauge(&m, "conc", Some("/x")), Some(0));
}

#[test]
fn slots_taken_without_a_lease_count_under_no_route_and_a_reset_frees_them() {
    let (mut t, mut m) = (Table::new(), Mem::default());
    let ls = [limit("api|0|ext:k", "concurrency 5")];
    check(&mut t, &mut m, &ls, 3, 0);
    assert_eq!(gauge(&m, "api", None), Some(3));
    t.handle(&release(&ls, 1, None), 0, &mut m);
    assert_eq!(gauge(&m, "api", None), Some(2));
    // Releasing more than is held frees what is held: the gauge never goes below 0.
    t.handle(&release(&ls, 9, None), 0, &mut m);
    assert_eq!(gauge(&m, "api", None), Some(0));
    check(&mut t, &mut m, &ls, 2, 0);
    t.handle(
        &ObjectRequest::Reset {
            limits: ls.to_vec(),
        },
        0,
        &mut m,
    );
    assert_eq!(gauge(&m, "api", None), Some(0));
    // Limits without slots (a rate) change nothing.
    let v = m.in_use.version;
    check(&mut t, &mut m, &[limit("r|0|k", "5/s")], 1, 0);
    assert_eq!(m.in_use.version, v);
}

#[test]
fn the_stats_object_keeps_each_objects_latest_report() {
    let (mut t, mut m) = (Table::new(), Mem::default());
    let report = |object: &str, version: u64, slots: u64| ObjectRequest::Report {
        tallies: Vec::new(),
        in_use: Some(in_use::Report {
            object: object.into(),
            in_use: InUse {
                version,
                slots: vec![SeriesInUse {
                    policy: "p".into(),
                    route: Some("/r".into()),
                    slots,
                }],
            },
        }),
    };
    let total = |a: ObjectResponse| match a {
        ObjectResponse::Stats { in_use, .. } => in_use.first().map(|s| s.slots),
        other => panic!("{other:?}"),
    };
    assert_eq!(total(t.handle(&report("a", 1, 2), 0, &mut m)), Some(2));
    assert_eq!(total(t.handle(&report("b", 1, 1), 0, &mut m)), Some(3));
    // A retried report (the answer was lost) and a late one change nothing.
    assert_eq!(total(t.handle(&report("a", 1, 2), 0, &mut m)), Some(3));
    assert_eq!(total(t.handle(&report("a", 3, 0), 0, &mut m)), Some(1));
    assert_eq!(total(t.handle(&report("a", 2, 5), 0, &mut m)), Some(1));
}

fn reserve(ls: &[Limit], cost: u64, id: &str) -> ObjectRequest {
    ObjectRequest::Check(Check {
        reservation: Some(id.into()),
        ..check_req(ls, cost)
    })
}

fn settle(ls: &[Limit], id: &str, actual: u64) -> ObjectRequest {
    ObjectRequest::Settle(Settle {
        limits: ls.to_vec(),
        reservation: id.into(),
        actual,
        up_to_limit: false,
        when: When::default(),
    })
}

fn remaining(t: &mut Table, m: &mut Mem, ls: &[Limit], now: u64) -> Vec<u64> {
    match t.handle(&peek(ls), now, m) {
        ObjectResponse::Decided { each, .. } => each.iter().map(|d| d.remaining).collect(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_settle_gives_back_the_estimate_minus_the_actual_on_every_limit() {
    let (mut t, mut m) = (Table::new(), Mem::default());
    let ls = [
        limit("a|0|k", "fixed-window 100/min"),
        limit("g|0|global", "fixed-window 1000/min"),
    ];
    assert!(allowed(&t.handle(&reserve(&ls, 40, "r1"), 1000, &mut m)));
    assert_eq!(remaining(&mut t, &mut m, &ls, 1000), [60, 960]);
    let done = t.handle(&settle(&ls, "r1", 25), 2000, &mut m);
    assert_eq!(
        done,
        ObjectResponse::Settled {
            refunded: 15,
            charged: 0,
            unpaid: 0
        }
    );
    assert_eq!(remaining(&mut t, &mut m, &ls, 2000), [75, 975]);
    // Written through the store: a new table (a restarted object) sees it.
    assert_eq!(remaining(&mut Table::new(), &mut m, &ls, 2000), [75, 975]);
}

#[test]
fn a_second_settle_answers_the_first_and_charges_nothing() {
    let (mut t, mut m) = (Table::new(), Mem::default());
    let ls = [limit("a|0|k", "fixed-window 10/min")];
    assert!(allowed(&t.handle(&reserve(&ls, 1, "r"), 1000, &mut m)));
    let first = t.handle(&settle(&ls, "r", 0), 1000, &mut m);
    assert!(matches!(first, ObjectResponse::Settled { refunded: 1, .. }));
    // Sent again, even with another actual: the first outcome, nothing charged.
    assert_eq!(t.handle(&settle(&ls, "r", 9), 1000, &mut m), first);
    assert_eq!(remaining(&mut t, &mut m, &ls, 1000), [10]);
}

#[test]
fn an_unknown_reservation_is_not_reserved() {
    let (mut t, mut m) = (Table::new(), Mem::default());
    let ls = [limit("a|0|k", "fixed-window 10/min")];
    assert_eq!(
        t.handle(&settle(&ls, "never", 0), 1000, &mut m),
        ObjectResponse::NotReserved
    );
}

#[test]
fn up_to_limit_charges_only_what_remains() {
    let (mut t, mut m) = (Table::new(), Mem::default());
    let ls = [limit("a|0|k", "fixed-window 10/min")];
    assert!(allowed(&t.handle(&reserve(&ls, 5, "r"), 1000, &mut m)));
    let mut s = settle(&ls, "r", 12);
    if let ObjectRequest::Settle(x) = &mut s {
        x.up_to_limit = true;
    }
    // 5 reserved of 10; 7 more asked, 5 fit below the limit, 2 unpaid.
    assert_eq!(
        t.handle(&s, 1000, &mut m),
        ObjectResponse::Settled {
            refunded: 0,
            charged: 5,
            unpaid: 2
        }
    );
}

#[test]
fn an_overage_is_charged_past_the_limit() {
    let (mut t, mut m) = (Table::new(), Mem::default());
    let ls = [limit("a|0|k", "fixed-window 10/min")];
    assert!(allowed(&t.handle(&reserve(&ls, 5, "r"), 1000, &mut m)));
    let done = t.handle(&settle(&ls, "r", 12), 1000, &mut m);
    assert_eq!(
        done,
        ObjectResponse::Settled {
            refunded: 0,
            charged: 7,
            unpaid: 0
        }
    );
    assert!(!allowed(&check(&mut t, &mut m, &ls, 1, 1000)));
}

#[test]
fn a_denied_or_unreserved_check_leaves_nothing_to_settle() {
    let (mut t, mut m) = (Table::new(), Mem::default());
    let ls = [limit("a|0|k", "fixed-window 1/min")];
    assert!(allowed(&check(&mut t, &mut m, &ls, 1, 1000)));
    assert!(!allowed(&t.handle(
        &reserve(&ls, 1, "denied"),
        1000,
        &mut m
    )));
    assert_eq!(
        t.handle(&settle(&ls, "denied", 0), 1000, &mut m),
        ObjectResponse::NotReserved
    );
    assert_eq!(remaining(&mut t, &mut m, &ls, 1000), [0]);
}

#[test]
fn a_settle_on_other_limits_is_refused_and_keeps_the_reservation() {
    let (mut t, mut m) = (Table::new(), Mem::default());
    let ls = [limit("a|0|k", "fixed-window 10/min")];
    let other = [limit("a|0|j", "fixed-window 10/min")];
    assert!(allowed(&t.handle(&reserve(&ls, 4, "r"), 1000, &mut m)));
    assert!(matches!(
        t.handle(&settle(&other, "r", 0), 1000, &mut m),
        ObjectResponse::Error { code, .. } if code == "foreign-key"
    ));
    assert!(matches!(
        t.handle(&settle(&ls, "r", 0), 1000, &mut m),
        ObjectResponse::Settled { refunded: 4, .. }
    ));
}

#[test]
fn a_refused_settle_changes_no_limit() {
    let (mut t, mut m) = (Table::new(), Mem::default());
    let ls = [limit("a|0|k", "fixed-window 10/min")];
    assert!(allowed(&t.handle(&reserve(&ls, 4, "r"), 1000, &mut m)));
    let too_large = tollgate::MAX_COUNT + 1;
    assert!(matches!(
        t.handle(&settle(&ls, "r", too_large), 1000, &mut m),
        ObjectResponse::Error { code, .. } if code == "actual-too-large"
    ));
    assert_eq!(remaining(&mut t, &mut m, &ls, 1000), [6]);
}

fn owner_check(limits: &[Limit], owner: &str) -> ObjectRequest {
    let mut req = check_req(limits, 1);
    req.owner = Some(Owner {
        policy: "api".into(),
        key: owner.into(),
        at: 0,
        len: limits.len(),
    });
    ObjectRequest::Check(req)
}

#[test]
fn an_override_applies_at_the_key_s_next_decision_and_is_gone_when_cleared() {
    let (mut t, mut m) = (Table::new(), Mem::default());
    let free = [limit("api|0|key:a", "fixed-window 2/min")];
    let admit = |t: &mut Table, m: &mut Mem| {
        (0..20)
            .take_while(|_| allowed(&t.handle(&owner_check(&free, "key:a"), 0, m)))
            .count()
    };
    assert_eq!(admit(&mut t, &mut m), 2);
    let own = Override::Limits(vec!["fixed-window 5/min".parse().unwrap()]);
    let set = ObjectRequest::SetOverride {
        owner: "api|key:a".into(),
        what: own.clone(),
    };
    assert_eq!(
        t.handle(&set, 0, &mut m),
        ObjectResponse::Override {
            what: Some(own.clone())
        }
    );
    // Its own 5/min, with the 2 already spent.
    match t.handle(&owner_check(&free, "key:a"), 0, &mut m) {
        ObjectResponse::Decided {
            decision,
            overridden,
            ..
        } => {
            assert!(decision.allowed);
            assert_eq!(
                overridden,
                Some(vec!["fixed-window 5/min".parse().unwrap()])
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(admit(&mut t, &mut m), 2);
    let get = ObjectRequest::GetOverride {
        owner: "api|key:a".into(),
    };
    assert_eq!(
        t.handle(&get, 0, &mut m),
        ObjectResponse::Override {
            what: Some(own.clone())
        }
    );
    let clear = ObjectRequest::ClearOverride {
        owner: "api|key:a".into(),
    };
    assert_eq!(
        t.handle(&clear, 0, &mut m),
        ObjectResponse::Override { what: Some(own) }
    );
    assert_eq!(
        t.handle(&get, 0, &mut m),
        ObjectResponse::Override { what: None }
    );
    assert_eq!(admit(&mut t, &mut m), 0, "back on free, 5 spent");
    assert_eq!(
        admit(&mut Table::new(), &mut m),
        0,
        "cleared in the store too"
    );
}

#[test]
fn a_plan_override_takes_the_running_plan_s_limits_and_overrides_are_bounded() {
    let (mut t, mut m) = (Table::new(), Mem::default());
    let free = [limit("api|0|key:b", "100/min")];
    let set = |who: &str, plan: &str| ObjectRequest::SetOverride {
        owner: format!("api|{who}"),
        what: Override::Plan(plan.into()),
    };
    t.handle(&set("key:b", "pro"), 0, &mut m);
    let n = (0..2000)
        .take_while(|_| allowed(&t.handle(&owner_check(&free, "key:b"), 0, &mut m)))
        .count();
    assert_eq!(n, 1000, "pro's limit");
    // A plan the config no longer has: the key is decided by the plan it asks for.
    t.handle(&set("key:b", "gold"), 0, &mut m);
    assert!(!allowed(&t.handle(&owner_check(&free, "key:b"), 0, &mut m)));
    for i in 0..MAX_OVERRIDES {
        m.overrides
            .insert(format!("api|key:{i}"), Override::Plan("pro".into()));
    }
    let refused = t.handle(&set("key:new", "pro"), 0, &mut m);
    assert!(
        matches!(&refused, ObjectResponse::Error { code, .. } if code == "too-many-overrides"),
        "{refused:?}"
    );
    assert!(
        matches!(
            t.handle(&set("key:b", "free"), 0, &mut m),
            ObjectResponse::Override { .. }
        ),
        "a key that has one may change it"
    );
}

#[test]
fn a_peek_under_another_policy_carries_to_answer_and_stores_nothing() {
    let (mut t, mut m) = (Table::new(), Mem::default());
    let free = [limit("api|0|key:c", "100/min")];
    let pro = [limit("api|0|key:c", "1000/min")];
    assert!(allowed(&check(&mut t, &mut m, &free, 10, 0)));
    let stored = m.map["api|0|key:c"].clone();
    match t.handle(&peek(&pro), 0, &mut m) {
        ObjectResponse::Decided { decision, .. } => {
            assert_eq!(decision.remaining, 990, "pro, with free's 10 spent")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(m.map["api|0|key:c"], stored);
    assert_eq!(m.under["api|0|key:c"], free[0].policy);
    // And memory: the next check under free still finds free's state.
    assert!(allowed(&check(&mut t, &mut m, &free, 90, 0)));
    assert!(!allowed(&check(&mut t, &mut m, &free, 1, 0)));
}
