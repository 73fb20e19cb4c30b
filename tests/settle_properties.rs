//! Property tests of settle (`tollgate::settle`) on random traces: a bucket's refund leaves
//! the very state that charging the actual cost would have left, no refund gives capacity
//! the reservation did not take, and no state, however hostile, makes settle panic.

use proptest::prelude::*;
use tollgate::settle::{settle, Charge};
use tollgate::{decide, Nanos, Overage, Policy, State, NANOS_PER_MS};

/// The state a trace of `(ms, cost)` requests leaves (times sorted).
fn after(policy: &Policy, trace: &[(u64, u64)]) -> Option<State> {
    let mut state = None;
    for &(t, c) in trace {
        state = decide(policy, state, t * NANOS_PER_MS, c.min(policy.limit()))
            .unwrap()
            .1;
    }
    state
}

fn trace() -> impl Strategy<Value = Vec<(u64, u64)>> {
    prop::collection::vec((0u64..3_000, 1u64..=3), 0..40).prop_map(|mut v| {
        v.sort();
        v
    })
}

fn overage() -> impl Strategy<Value = Overage> {
    prop::sample::select(vec![Overage::Debt, Overage::UpToLimit])
}

fn edgy_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1),
        Just(u64::MAX),
        Just(u64::MAX - 1),
        any::<u64>()
    ]
}

fn edgy_u128() -> impl Strategy<Value = u128> {
    prop_oneof![
        Just(0u128),
        Just(u128::MAX),
        any::<u64>().prop_map(u128::from),
        any::<u128>()
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    /// Token bucket, GCRA, leaky bucket: reserving `estimate` at `t0` and settling `actual`
    /// (at most the estimate) at `t1` leaves the key deciding at `t1` exactly as if `actual`
    /// had been charged at `t0`.
    #[test]
    fn a_bucket_refund_leaves_the_state_of_the_actual_cost(
        alg in prop::sample::select(vec!["token-bucket", "gcra", "leaky-bucket"]),
        limit in 1u64..12, window_ms in 1u64..2_000, t in trace(),
        estimate in 1u64..12, actual_part in 0u64..=100, gap_ms in 0u64..3_000,
        wait_ms in 0u64..3_000,
    ) {
        let p: Policy = format!("{alg} {limit}/{window_ms}ms").parse().unwrap();
        let estimate = estimate.min(limit);
        let actual = estimate * actual_part / 100;
        let state0 = after(&p, &t);
        let t0 = (t.last().map_or(0, |&(ms, _)| ms) + gap_ms) * NANOS_PER_MS;
        let t1 = t0 + wait_ms * NANOS_PER_MS;
        let (reserved, mut state) = decide(&p, state0.clone(), t0, estimate).unwrap();
        prop_assume!(reserved.allowed);
        let charge = Charge { cost: estimate, at: t0 };
        let done = settle(&p, &mut state, charge, actual, t1, Overage::Debt).unwrap();
        prop_assert!(done.refunded <= estimate - actual);
        prop_assert_eq!((done.charged, done.unpaid), (0, 0));
        let (charged_actual, _) = decide(&p, state0, t0, actual).unwrap();
        prop_assert!(charged_actual.allowed);
        let (settled_view, _) = decide(&p, state, t1, 0).unwrap();
        let (_, actual_state) = decide(&p, after(&p, &t), t0, actual).unwrap();
        let (actual_view, _) = decide(&p, actual_state, t1, 0).unwrap();
        prop_assert_eq!(settled_view, actual_view);
    }

    /// Every algorithm that settles: after a refund the key never has more room than if the
    /// reservation had never been made (nothing the reservation did not take comes back).
    #[test]
    fn no_refund_gives_capacity_the_reservation_did_not_take(
        alg in prop::sample::select(vec!["token-bucket", "gcra", "leaky-bucket", "fixed-window", "sliding-window", "sliding-log"]),
        limit in 1u64..12, window_ms in 1u64..2_000, t in trace(),
        estimate in 1u64..12, actual_part in 0u64..=100, gap_ms in 0u64..3_000,
        wait_ms in 0u64..3_000,
    ) {
        let p: Policy = format!("{alg} {limit}/{window_ms}ms").parse().unwrap();
        let estimate = estimate.min(limit);
        let actual = estimate * actual_part / 100;
        let state0 = after(&p, &t);
        let t0 = (t.last().map_or(0, |&(ms, _)| ms) + gap_ms) * NANOS_PER_MS;
        let t1 = t0 + wait_ms * NANOS_PER_MS;
        let (reserved, mut state) = decide(&p, state0.clone(), t0, estimate).unwrap();
        prop_assume!(reserved.allowed);
        settle(&p, &mut state, Charge { cost: estimate, at: t0 }, actual, t1, Overage::Debt).unwrap();
        let (settled_view, _) = decide(&p, state, t1, 0).unwrap();
        let (untouched_view, _) = decide(&p, state0, t1, 0).unwrap();
        prop_assert!(settled_view.remaining <= untouched_view.remaining,
            "{p}: {} after the refund, {} without the reservation", settled_view.remaining, untouched_view.remaining);
    }

    /// No stored state, however hostile, and no actual makes settle panic; an error leaves
    /// the state untouched.
    #[test]
    fn settling_never_panics_on_hostile_states(
        alg in prop::sample::select(vec!["token-bucket", "gcra", "leaky-bucket", "sliding-window", "fixed-window", "leaky-queue", "concurrency"]),
        limit in 1u64..=tollgate::MAX_COUNT, window_ms in 1u64..=31_622_400_000,
        big in edgy_u128(), a in edgy_u64(), b in edgy_u64(), c in edgy_u64(),
        now in edgy_u64(), at in edgy_u64(), cost in edgy_u64(), actual in edgy_u64(),
        overage in overage(),
    ) {
        use tollgate::algorithms::{concurrency::ConcurrencyState, fixed_window::FixedWindowState,
            gcra::GcraState, leaky_bucket::LeakyBucketState, leaky_queue::LeakyQueueState,
            sliding_window::SlidingWindowState, token_bucket::TokenBucketState};
        let (p, state): (Policy, State) = match alg {
            "concurrency" => (format!("concurrency {limit}").parse().unwrap(),
                State::Concurrency(ConcurrencyState { in_flight: a })),
            "gcra" => (format!("gcra {limit}/{window_ms}ms").parse().unwrap(),
                State::Gcra(GcraState { tat: big })),
            "token-bucket" => (format!("token-bucket {limit}/{window_ms}ms").parse().unwrap(),
                State::TokenBucket(TokenBucketState { credit: big, last: a })),
            "leaky-bucket" => (format!("leaky-bucket {limit}/{window_ms}ms").parse().unwrap(),
                State::LeakyBucket(LeakyBucketState { level: big, last: a })),
            "leaky-queue" => (format!("leaky-queue {limit}/{window_ms}ms").parse().unwrap(),
                State::LeakyQueue(LeakyQueueState { last_departure: big })),
            "sliding-window" => (format!("sliding-window {limit}/{window_ms}ms").parse().unwrap(),
                State::SlidingWindow(SlidingWindowState { window: a, prev: b, cur: c })),
            _ => (format!("fixed-window {limit}/{window_ms}ms").parse().unwrap(),
                State::FixedWindow(FixedWindowState { window: a, count: b })),
        };
        for actual in [actual % (tollgate::MAX_COUNT + 1), 0, cost, actual] {
            let mut settled = Some(state.clone());
            let charge = Charge { cost, at };
            match settle(&p, &mut settled, charge, actual, now, overage) {
                Ok(done) => {
                    // Then the state still decides.
                    let _ = decide(&p, settled, now, 0).unwrap();
                    prop_assert!(done.refunded == 0 || done.charged + done.unpaid == 0);
                }
                Err(_) => prop_assert_eq!(settled, Some(state.clone())),
            }
        }
    }
}

/// A debt of the fixed window is paid one limit per window, never forgotten, for any
/// number of windows between the settle and the next request.
#[test]
fn a_fixed_window_debt_is_paid_one_limit_per_window() {
    let p: Policy = "fixed-window 10/s".parse().unwrap();
    let s = 1_000 * NANOS_PER_MS;
    for gap in 1..6u64 {
        let (_, mut state) = decide(&p, None, 0, 10).unwrap();
        let charge = Charge { cost: 10, at: 0 };
        settle(&p, &mut state, charge, 35, 0, Overage::Debt).unwrap();
        // 35 in window 0: 25 in window 1, 15 in 2, 5 in 3, 0 from 4.
        let want: Nanos = [25, 15, 5, 0, 0][gap as usize - 1];
        let (d, _) = decide(&p, state, gap * s, 0).unwrap();
        assert_eq!(d.remaining, 10u64.saturating_sub(want), "gap {gap}");
    }
}
