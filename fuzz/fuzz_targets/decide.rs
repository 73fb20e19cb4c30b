//! Decisions: for any policy the grammar accepts, any starting state (fresh, or every field
//! at any value: a store may hand back a corrupted state) and any sequence of (time, cost)
//! steps, `decide` never panics, never reports more remaining than the limit, fails only for
//! a cost above the capacity, a denial carries no queue delay, and `admit` and
//! `decide_in_place` give the same answer and next state in place; the header helpers accept
//! every decision.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tollgate::headers::{response_headers, Named};
use tollgate::algorithms::{
    concurrency::ConcurrencyState, fixed_window::FixedWindowState, gcra::GcraState,
    leaky_bucket::LeakyBucketState, leaky_queue::LeakyQueueState,
    sliding_window::SlidingWindowState, token_bucket::TokenBucketState,
};
use tollgate::{admit, decide, decide_in_place, DecideError, Policy, State, Verdict};

/// A state of `policy`'s algorithm with every field taken from `b` (32 bytes), or `None`
/// for the sliding log (its list is built by decisions only).
fn hostile(policy: &Policy, b: &[u8]) -> Option<State> {
    let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
    let u128_at = |i: usize| u128::from_le_bytes(b[i..i + 16].try_into().unwrap());
    Some(match policy.algorithm().name() {
        "token-bucket" => State::TokenBucket(TokenBucketState { credit: u128_at(0), last: u64_at(16) }),
        "gcra" => State::Gcra(GcraState { tat: u128_at(0) }),
        "leaky-bucket" => State::LeakyBucket(LeakyBucketState { level: u128_at(0), last: u64_at(16) }),
        "leaky-queue" => State::LeakyQueue(LeakyQueueState { last_departure: u128_at(0) }),
        "sliding-window" => State::SlidingWindow(SlidingWindowState { window: u64_at(0), prev: u64_at(8), cur: u64_at(16) }),
        "fixed-window" => State::FixedWindow(FixedWindowState { window: u64_at(0), count: u64_at(8) }),
        "concurrency" => State::Concurrency(ConcurrencyState { in_flight: u64_at(0) }),
        _ => return None,
    })
}

const ALGS: [&str; 8] = [
    "token-bucket", "gcra", "sliding-window", "fixed-window", "sliding-log", "leaky-bucket",
    "leaky-queue", "concurrency",
];

fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    let alg = ALGS[data[0] as usize % ALGS.len()];
    let limit = 1 + u16::from_le_bytes([data[1], data[2]]) as u64;
    let window_ms = 1 + u32::from_le_bytes([data[3], data[4], data[5], 0]) as u64;
    let burst = 1 + data[6] as u64;
    let text = match alg {
        "concurrency" => format!("concurrency {limit}"),
        a if a.contains("window") || a.contains("log") => format!("{a} {limit}/{window_ms}ms"),
        a => format!("{a} {limit}/{window_ms}ms burst {burst}"),
    };
    let Ok(policy) = text.parse::<Policy>() else { return };
    let mut steps = &data[7..];
    // An odd first byte: start from a hostile state made of the next 32 bytes.
    let mut state: Option<State> = None;
    if steps.len() > 32 && steps[0] % 2 == 1 {
        state = hostile(&policy, &steps[1..33]);
        steps = &steps[33..];
    }
    for step in steps.chunks(9) {
        if step.len() < 9 {
            break;
        }
        let now = u64::from_le_bytes(step[..8].try_into().unwrap());
        let cost = step[8] as u64 % (policy.limit() + 2);
        let mut in_place = state.clone();
        let verdict = admit(&policy, &mut in_place, now, cost);
        let mut full_in_place = state.clone();
        let full = decide_in_place(&policy, &mut full_in_place, now, cost);
        match decide(&policy, state.clone(), now, cost) {
            Ok((d, next)) => {
                assert!(d.remaining <= d.limit);
                assert_eq!(verdict, Ok(Verdict::from(&d)));
                assert_eq!(in_place, next);
                assert_eq!(full, Ok(d));
                assert_eq!(full_in_place, next);
                let _ = response_headers(&[Named { name: "f", policy: &policy, decision: &d }], true);
                if d.allowed {
                    state = next;
                } else {
                    assert_eq!(d.delay, 0);
                }
            }
            Err(e @ DecideError::CostExceedsCapacity { cost: c, capacity }) => {
                assert!(c > capacity);
                assert_eq!(verdict, Err(e));
                assert_eq!(in_place, state);
                assert_eq!(full, Err(e));
                assert_eq!(full_in_place, state);
            }
            Err(e) => panic!("unexpected {e}"),
        }
    }
});
