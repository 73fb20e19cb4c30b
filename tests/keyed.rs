//! The keyed limiter: bounded memory, idle keys evicted first (CLOCK), all-or-nothing across limits, and exact
//! counts under concurrent use from many threads.

use std::num::NonZeroUsize;
use std::sync::Arc;

use tollgate::fair_share::FairShare;
use tollgate::keyed::KeyedLimiter;
use tollgate::{DecideError, Policy, Verdict, NANOS_PER_SEC};

fn nz(n: usize) -> NonZeroUsize {
    NonZeroUsize::new(n).unwrap()
}

fn policy(s: &str) -> Policy {
    s.parse().unwrap()
}

#[test]
fn fresh_keys_are_not_stored() {
    let l: KeyedLimiter = KeyedLimiter::new(policy("10/s"), nz(100));
    // cost 0 asks without spending: the key stays fresh, nothing is stored
    assert!(l.check("a", 0, 0).unwrap().allowed);
    assert_eq!(l.len(), 0);
    l.check("a", 0, 1).unwrap();
    assert_eq!(l.len(), 1);
    // 100 ms later the token is back: the key is fresh again and dropped by the next look
    assert_eq!(l.peek("a", NANOS_PER_SEC / 10).unwrap().remaining, 10);
    assert_eq!(l.len(), 0);
}

#[test]
fn an_idle_key_is_evicted_before_a_used_one() {
    // Which slot a key lands in depends on each limiter's random hash seed, and so does the
    // order in which the clock hand meets the keys: 200 limiters, 200 orders.
    for _ in 0..200 {
        let l: KeyedLimiter = KeyedLimiter::new(policy("fixed-window 1/min"), nz(3));
        for k in ["a", "b", "c"] {
            assert!(l.check(k, 0, 1).unwrap().allowed);
        }
        // b and c are checked again (denied, still limited); a stays idle.
        for k in ["b", "c"] {
            assert!(!l.check(k, 0, 1).unwrap().allowed);
        }
        assert!(l.check("d", 0, 1).unwrap().allowed); // evicts a
        assert_eq!(l.len(), 3);
        // The hand cleared b's and c's bits on its way to a: check them again, so that d
        // is the only key not checked since the hand passed.
        for k in ["b", "c"] {
            assert!(!l.check(k, 0, 1).unwrap().allowed, "{k} was kept");
        }
        assert!(l.check("a", 0, 1).unwrap().allowed, "a was evicted: fresh");
        for k in ["b", "c"] {
            assert!(!l.check(k, 0, 1).unwrap().allowed, "{k} was kept");
        }
        assert!(l.check("d", 0, 1).unwrap().allowed, "d was evicted: fresh");
        assert_eq!(l.len(), 3);
    }
}

#[test]
fn memory_stays_bounded_under_many_keys() {
    let l: KeyedLimiter<u64> = KeyedLimiter::new(policy("5/min"), nz(10_000));
    for k in 0..100_000u64 {
        l.check(&k, 0, 1).unwrap();
    }
    let n = l.len();
    assert!((9_000..=10_000).contains(&n), "{n} keys stored");
}

#[test]
fn reset_forgets_a_key() {
    let l: KeyedLimiter = KeyedLimiter::new(policy("1/min"), nz(10));
    l.check("a", 0, 1).unwrap();
    assert!(!l.check("a", 0, 1).unwrap().allowed);
    assert!(l.reset("a"));
    assert!(!l.reset("a"));
    assert!(l.check("a", 0, 1).unwrap().allowed);
}

#[test]
fn a_denied_stack_charges_no_limit() {
    let l: KeyedLimiter =
        KeyedLimiter::stack(&[policy("2/s"), policy("fixed-window 3/min")], nz(10)).unwrap();
    assert!(l.check("k", 0, 1).unwrap().allowed);
    assert!(l.check("k", 0, 1).unwrap().allowed);
    let d = l.check_detailed("k", None, 0, 1).unwrap();
    assert!(!d.decision.allowed);
    assert_eq!(d.denied_by().collect::<Vec<_>>(), vec![0]);
    // one second later the bucket is full again; the window was charged twice, not three times
    assert!(l.check("k", NANOS_PER_SEC, 1).unwrap().allowed);
    assert!(
        !l.check("k", NANOS_PER_SEC, 1).unwrap().allowed,
        "window spent: 3 of 3"
    );
    assert!(KeyedLimiter::<String>::stack(&[], nz(1)).is_err());
}

#[test]
fn fair_share_isolates_tenants() {
    let fs = FairShare::new(policy("10/s"), policy("sliding-window 3/s")).unwrap();
    let l: KeyedLimiter = KeyedLimiter::fair_share(fs, nz(100));
    let admitted = |tenant: Option<&str>, n: usize| {
        (0..n)
            .filter(|_| {
                l.check_detailed("upstream", tenant, 0, 1)
                    .unwrap()
                    .decision
                    .allowed
            })
            .count()
    };
    assert_eq!(admitted(Some("acme"), 10), 3);
    assert_eq!(admitted(Some("globex"), 10), 3);
    assert_eq!(
        admitted(Some("default"), 10),
        4,
        "default skips the tenant window; 4 left in the shared bucket"
    );
    assert_eq!(admitted(None, 1), 0, "shared bucket spent");
}

#[test]
fn tenant_above_shared_is_a_policy_error() {
    let err = FairShare::new(policy("10/s"), policy("sliding-window 20/s")).unwrap_err();
    assert_eq!(err.rule, tollgate::Rule::TenantAboveShared);
    assert_eq!(err.field, tollgate::Field::TenantPolicy);
    assert!(err.to_string().contains("sliding-window 20/s"), "{err}");
}

#[test]
fn cost_above_capacity_is_an_error_and_charges_nothing() {
    let l: KeyedLimiter = KeyedLimiter::new(policy("10/s burst 5"), nz(10));
    assert_eq!(
        l.check("a", 0, 6),
        Err(DecideError::CostExceedsCapacity {
            cost: 6,
            capacity: 5
        })
    );
    assert_eq!(l.len(), 0);
    assert_eq!(l.check("a", 0, 5).unwrap().remaining, 0);
}

#[test]
fn release_applies_to_concurrency_only() {
    let l: KeyedLimiter = KeyedLimiter::new(policy("concurrency 1"), nz(10));
    assert!(l.check("a", 0, 1).unwrap().allowed);
    assert!(!l.check("a", 0, 1).unwrap().allowed);
    l.release("a", 1).unwrap();
    assert!(l.check("a", 0, 1).unwrap().allowed);
    let r: KeyedLimiter = KeyedLimiter::new(policy("1/s"), nz(10));
    assert!(matches!(
        r.release("a", 1),
        Err(DecideError::NotConcurrency { .. })
    ));
}

/// Many threads, one key, one instant: exactly `limit` admitted, never more or fewer.
#[test]
fn concurrent_checks_are_exact() {
    for policy_text in [
        "fixed-window 500/min",
        "gcra 500/min",
        "sliding-log 500/min",
    ] {
        let l: Arc<KeyedLimiter> = Arc::new(KeyedLimiter::new(policy(policy_text), nz(100_000)));
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let l = Arc::clone(&l);
                std::thread::spawn(move || {
                    (0..200)
                        .filter(|_| l.check("hot", 5 * NANOS_PER_SEC, 1).unwrap().allowed)
                        .count()
                })
            })
            .collect();
        let admitted: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(admitted, 500, "{policy_text}");
    }
}

/// Stores keep states as JSON (the edge worker does): every algorithm's state, including
/// 128-bit fields, must survive the round trip unchanged.
#[cfg(feature = "serde")]
#[test]
fn states_round_trip_through_json() {
    for text in [
        "10/s",
        "gcra 10/s",
        "leaky-bucket 10/s",
        "leaky-queue 10/s",
        "sliding-window 10/s",
        "fixed-window 10/s",
        "sliding-log 10/s",
        "concurrency 3",
    ] {
        let p = policy(text);
        let (_, state) = tollgate::decide(&p, None, 1_700_000_000_000_000_000, 2).unwrap();
        let state = state.expect("a charged key has state");
        let json = serde_json::to_string(&state).unwrap();
        let back: tollgate::State =
            serde_json::from_str(&json).unwrap_or_else(|e| panic!("{text}: {json}: {e}"));
        assert_eq!(back, state, "{text}");
    }
}

#[test]
fn admit_gives_the_short_answer_of_check() {
    // Two limiters fed the same requests, one through `check`, one through `admit`: the
    // same verdicts, the same keys stored. (Room for every key: which idle key an eviction
    // picks depends on each limiter's randomly seeded hash, so two limiters may differ.)
    for p in [
        "gcra 3/s",
        "leaky-queue 2/s burst 3",
        "sliding-window 3/s",
        "3/s burst 5",
    ] {
        let full = KeyedLimiter::new(policy(p), nz(16));
        let short = KeyedLimiter::new(policy(p), nz(16));
        for i in 0..200u64 {
            let key = format!("k{}", i % 11);
            let now = i * 37_000_000;
            let cost = 1 + i % 3;
            let d = full.check(key.as_str(), now, cost).unwrap();
            let v = short.admit(key.as_str(), now, cost).unwrap();
            assert_eq!(v, Verdict::from(&d), "{p}, request {i}");
            assert_eq!(full.len(), short.len(), "{p}, request {i}");
        }
        assert_eq!(
            short.admit("x", 0, 99),
            Err(DecideError::CostExceedsCapacity {
                cost: 99,
                capacity: policy(p).limit()
            })
        );
    }
}

#[test]
fn holds_slots_when_a_layer_is_a_concurrency_limit_and_release_gives_back_only_those() {
    let window: KeyedLimiter = KeyedLimiter::new(policy("10/s"), nz(10));
    assert!(!window.holds_slots());
    assert!(window.release("a", 1).is_err(), "nothing to release");

    let stack = KeyedLimiter::stack(&[policy("10/s"), policy("concurrency 2")], nz(10)).unwrap();
    assert!(stack.holds_slots());
    assert!(stack.check("a", 0, 2).unwrap().allowed);
    assert!(!stack.check("a", 0, 1).unwrap().allowed, "both slots held");
    stack.release("a", 1).unwrap();
    assert!(
        stack.check("a", 0, 1).unwrap().allowed,
        "the released slot is free again"
    );

    // A fair share's tenant window never holds slots: a release reaches the shared policy only.
    let fair = FairShare::new(policy("concurrency 4"), policy("concurrency 2")).unwrap();
    assert!(KeyedLimiter::<String>::fair_share(fair, nz(10)).holds_slots());
    let fair = FairShare::new(policy("100/s"), policy("concurrency 2")).unwrap();
    assert!(!KeyedLimiter::<String>::fair_share(fair, nz(10)).holds_slots());
}
