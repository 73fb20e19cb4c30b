//! Decisions: for any policy the grammar accepts and any sequence of (time, cost) steps,
//! `decide` never panics, never reports more remaining than the limit, fails only for a cost
//! above the capacity, and a denial carries no queue delay; the header helpers accept every
//! decision.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tollgate::headers::{response_headers, Named};
use tollgate::{decide, DecideError, Policy, State};

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
    let mut state: Option<State> = None;
    for step in data[7..].chunks(9) {
        if step.len() < 9 {
            break;
        }
        let now = u64::from_le_bytes(step[..8].try_into().unwrap());
        let cost = step[8] as u64 % (policy.limit() + 2);
        match decide(&policy, state.clone(), now, cost) {
            Ok((d, next)) => {
                assert!(d.remaining <= d.limit);
                let _ = response_headers(&[Named { name: "f", policy: &policy, decision: &d }], true);
                if d.allowed {
                    state = next;
                } else {
                    assert_eq!(d.delay, 0);
                }
            }
            Err(DecideError::CostExceedsCapacity { cost: c, capacity }) => assert!(c > capacity),
            Err(e) => panic!("unexpected {e}"),
        }
    }
});
