//! The slot design, prototyped for measurement only: JavaScript maps each key to a slot
//! number (and evicts), and wasm keeps one state per slot and decides on it with the core's
//! `decide_in_place`. Exports plain functions (no wasm-bindgen): `init`, `check`, `allow`,
//! `clear`. Single-threaded (wasm), so the one limiter lives in a static.

use std::cell::RefCell;

use tollgate::{ceil_millis, decide_in_place, millis, Decision, Nanos, Policy, State};

struct Slots {
    policy: Policy,
    states: Vec<Option<State>>,
    /// limit, remaining, resetAfter, retryAfter, delay of the last `check` (ms where a time).
    out: [f64; 5],
}

thread_local! {
    static SLOTS: RefCell<Option<Slots>> = const { RefCell::new(None) };
}

/// A JS time in ms as the core's nanoseconds (whole ms, as `Date.now()` gives).
fn now_ns(now_ms: f64) -> Nanos {
    millis(now_ms as u64)
}

/// Makes the limiter over `"<rate>/s"` (a token bucket, as `bench/check.js`; `_slots`, the
/// most JS will use, is not reserved); returns the address of the answer's five numbers.
#[no_mangle]
pub extern "C" fn init(rate: f64, _slots: u32) -> u32 {
    let policy: Policy = format!("{}/s", rate as u64).parse().expect("policy");
    SLOTS.with(|s| {
        let mut s = s.borrow_mut();
        *s = Some(Slots {
            policy,
            // Grown as slots are first used (the memory per key then shows it).
            states: Vec::new(),
            out: [0.0; 5],
        });
        s.as_ref().expect("set").out.as_ptr() as u32
    })
}

#[inline(always)]
fn decide(slot: u32, now_ms: f64, cost: f64, write: bool) -> u32 {
    SLOTS.with(|s| {
        let mut s = s.borrow_mut();
        let s = s.as_mut().expect("init first");
        let i = slot as usize;
        if i >= s.states.len() {
            s.states.resize(i + 1, None);
        }
        match decide_in_place(&s.policy, &mut s.states[i], now_ns(now_ms), cost as u64) {
            Ok(d) => {
                if write {
                    put(&mut s.out, &d);
                }
                d.allowed as u32
            }
            Err(_) => 2,
        }
    })
}

fn put(out: &mut [f64; 5], d: &Decision) {
    *out = [
        d.limit as f64,
        d.remaining as f64,
        ceil_millis(d.reset_after) as f64,
        ceil_millis(d.retry_after) as f64,
        ceil_millis(d.delay) as f64,
    ];
}

/// The full decision for `slot` at `now_ms`: 1 allowed, 0 denied, 2 failed; the numbers at
/// `init`'s address.
#[no_mangle]
pub extern "C" fn check(slot: u32, now_ms: f64, cost: f64) -> u32 {
    decide(slot, now_ms, cost, true)
}

/// `check` without writing the numbers.
#[no_mangle]
pub extern "C" fn allow(slot: u32, now_ms: f64, cost: f64) -> u32 {
    decide(slot, now_ms, cost, false)
}

/// Forgets `slot`'s state (JS evicted its key).
#[no_mangle]
pub extern "C" fn clear(slot: u32) {
    SLOTS.with(|s| {
        if let Some(st) = s
            .borrow_mut()
            .as_mut()
            .and_then(|s| s.states.get_mut(slot as usize))
        {
            *st = None;
        }
    })
}
