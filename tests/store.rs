//! The store contract (`tollgate::store`): batches decide as the requests would one by one,
//! writes are all or nothing, fresh states are deleted, expiry times are exact, and state
//! bytes round-trip (and never panic on garbage).

use proptest::prelude::*;
use tollgate::fair_share::FairShare;
use tollgate::stack::decide_all;
use tollgate::store::{fresh_after, Batch, Limits, Slot, StateBytesError, Write};
use tollgate::{decide, Nanos, Policy, State, NANOS_PER_MS};

const ALGORITHMS: [&str; 8] = [
    "token-bucket",
    "gcra",
    "leaky-bucket",
    "leaky-queue",
    "sliding-window",
    "fixed-window",
    "sliding-log",
    "concurrency",
];

fn policy(alg: &str, limit: u64, window_ms: u64) -> Policy {
    match alg {
        "concurrency" => format!("concurrency {limit}"),
        a => format!("{a} {limit}/{window_ms}ms"),
    }
    .parse()
    .unwrap()
}

/// Sorted random times (ms) with costs up to `max_cost`.
fn trace(max_cost: u64) -> impl Strategy<Value = Vec<(Nanos, u64)>> {
    prop::collection::vec((0u64..3_000, 1..=max_cost), 1..60).prop_map(|mut v| {
        v.sort();
        v.into_iter().map(|(t, c)| (t * NANOS_PER_MS, c)).collect()
    })
}

#[test]
fn slots_of_a_fair_share_skip_the_tenant_window_for_default() {
    let fs = FairShare::new("10/s".parse().unwrap(), "5/s".parse().unwrap()).unwrap();
    let limits = Limits::fair_share(fs);
    assert_eq!(limits.slots(None), [Slot::Layer(0)]);
    assert_eq!(limits.slots(Some("default")), [Slot::Layer(0)]);
    assert_eq!(limits.slots(Some("")), [Slot::Layer(0)]);
    assert_eq!(limits.slots(Some("acme")), [Slot::Layer(0), Slot::Tenant]);
    assert_eq!(limits.policy(Slot::Tenant).limit(), 5);
    assert_eq!(limits.capacity(), 5);
}

#[test]
fn an_empty_stack_is_a_policy_error() {
    let e = Limits::stack(&[]).unwrap_err();
    assert!(e.to_string().contains("policies"), "{e}");
}

#[test]
fn a_denied_batch_writes_nothing() {
    let limits = Limits::single("fixed-window 1/min".parse().unwrap());
    let slots = limits.slots(None);
    let mut first = Batch::new(&limits, &slots, vec![None], 0);
    assert!(first.decide(1).unwrap().decision.allowed);
    let stored = first.states().to_vec();
    let mut second = Batch::new(&limits, &slots, stored, NANOS_PER_MS);
    assert!(!second.decide(1).unwrap().decision.allowed);
    assert!(!second.changed());
    assert_eq!(second.writes().count(), 0);
}

#[test]
fn a_state_that_comes_back_fresh_is_deleted() {
    let limits = Limits::single("concurrency 2".parse().unwrap());
    let slots = limits.slots(None);
    let mut b = Batch::new(&limits, &slots, vec![None], 0);
    assert!(b.decide(1).unwrap().decision.allowed);
    let held = b.states().to_vec();
    let writes: Vec<_> = b.writes().collect();
    assert!(matches!(
        &writes[..],
        [(
            0,
            Write::Put {
                fresh_after: None,
                ..
            }
        )]
    ));
    let mut b = Batch::new(&limits, &slots, held, 0);
    assert!(b.release(1));
    assert_eq!(b.writes().collect::<Vec<_>>(), [(0, Write::Delete)]);
}

#[test]
fn a_state_of_another_algorithm_reads_as_fresh_and_is_overwritten() {
    let old = Limits::single("gcra 1/s".parse().unwrap());
    let slots = old.slots(None);
    let mut b = Batch::new(&old, &slots, vec![None], 0);
    b.decide(1).unwrap();
    let stored = b.states().to_vec();
    let new = Limits::single("fixed-window 1/s".parse().unwrap());
    let mut b = Batch::new(&new, &slots, stored, 0);
    assert!(
        b.decide(1).unwrap().decision.allowed,
        "fresh under the new policy"
    );
    let writes: Vec<_> = b.writes().collect();
    assert!(matches!(
        &writes[..],
        [(
            0,
            Write::Put {
                state: State::FixedWindow(_),
                ..
            }
        )]
    ));
}

#[test]
fn state_bytes_errors_name_the_problem() {
    assert_eq!(State::from_bytes(&[]), Err(StateBytesError::Truncated));
    assert_eq!(State::from_bytes(&[9, 2]), Err(StateBytesError::Version(9)));
    assert_eq!(
        State::from_bytes(&[1, 99]),
        Err(StateBytesError::Algorithm(99))
    );
    let e = State::from_bytes(&[1, 2, 0, 0]).unwrap_err();
    assert_eq!(e.to_string(), "corrupt gcra state: 4 bytes");
    // A sliding log whose second entry is older than its first.
    let mut log = vec![1u8, 5];
    for (at, cost) in [(10u64, 1u64), (5, 1)] {
        log.extend_from_slice(&at.to_le_bytes());
        log.extend_from_slice(&cost.to_le_bytes());
    }
    assert_eq!(State::from_bytes(&log), Err(StateBytesError::LogOrder));
}

proptest! {
    /// Several requests decided in one batch give the decisions and the final states of
    /// the same requests decided one by one (all or nothing each), for stacks of any two
    /// algorithms.
    #[test]
    fn a_batch_decides_as_the_requests_one_by_one(
        a in prop::sample::select(ALGORITHMS.to_vec()), b in prop::sample::select(ALGORITHMS.to_vec()),
        la in 1u64..8, lb in 1u64..8, wa in 1u64..800, wb in 1u64..800,
        t in trace(2), batch_len in 1usize..6,
    ) {
        let limits = Limits::stack(&[policy(a, la, wa), policy(b, lb, wb)]).unwrap();
        let slots = limits.slots(None);
        let policies = limits.policies();
        let cap = limits.capacity();
        // Reference: each request on its own.
        let (mut ra, mut rb): (Option<State>, Option<State>) = (None, None);
        // Under test: batches of `batch_len` requests at the batch's first time.
        let mut stored: Vec<Option<State>> = vec![None, None];
        for chunk in t.chunks(batch_len) {
            let now = chunk[0].0;
            let mut batch = Batch::new(&limits, &slots, stored.clone(), now);
            for &(_, c) in chunk {
                let c = c.min(cap);
                let got = batch.decide(c).unwrap();
                let want = decide_all(&mut [(&policies[0], &mut ra), (&policies[1], &mut rb)], now, c).unwrap();
                prop_assert_eq!(got, want);
            }
            prop_assert_eq!(batch.states(), &[ra.clone(), rb.clone()][..]);
            // Apply the writes as a store would.
            for (i, w) in batch.writes() {
                stored[i] = match w {
                    Write::Put { state, .. } => Some(state),
                    Write::Delete => None,
                };
            }
            prop_assert_eq!(&stored, &vec![ra.clone(), rb.clone()]);
        }
    }

    /// A written state is equivalent to fresh exactly at `fresh_after`: a key that expires
    /// then reads as no state and loses nothing.
    #[test]
    fn fresh_after_is_when_the_state_is_fresh(
        alg in prop::sample::select(ALGORITHMS[..7].to_vec()),
        limit in 1u64..10, window_ms in 1u64..1_000, t in trace(2),
    ) {
        let p = policy(alg, limit, window_ms);
        let mut state = None;
        let mut now = 0;
        for &(at, c) in &t {
            state = decide(&p, state.take(), at, c.min(limit)).unwrap().1;
            now = at;
        }
        if let Some(s) = state {
            let after = fresh_after(&p, &s, now).unwrap();
            let (_, at_expiry) = decide(&p, Some(s.clone()), now + after, 0).unwrap();
            prop_assert_eq!(at_expiry, None, "{}: not fresh after {}", p, after);
            if after > 0 {
                let (_, before_expiry) = decide(&p, Some(s), now + after - 1, 0).unwrap();
                prop_assert!(before_expiry.is_some(), "{}: fresh before {}", p, after);
            }
        }
    }

    /// Every state the algorithms produce round-trips through its bytes.
    #[test]
    fn state_bytes_round_trip(
        alg in prop::sample::select(ALGORITHMS.to_vec()),
        limit in 1u64..10, window_ms in 1u64..1_000, t in trace(2),
    ) {
        let p = policy(alg, limit, window_ms);
        let mut state = None;
        for &(at, c) in &t {
            state = decide(&p, state.take(), at, c.min(limit)).unwrap().1;
            if let Some(s) = &state {
                prop_assert_eq!(&State::from_bytes(&s.to_bytes()).unwrap(), s);
            }
        }
    }

    /// Any bytes at all are a state or an error, never a panic.
    #[test]
    fn state_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..80), alg in 1u8..=8) {
        let mut b = bytes;
        if b.len() >= 2 { b[0] = 1; b[1] = alg; }
        if let Ok(s) = State::from_bytes(&b) {
            prop_assert_eq!(s.to_bytes(), b);
        }
    }
}
