//! The core's waiting rule ([`tollgate::wait`]) for the `acquire` of both JS entries
//! (`js/waiting.js` owns the line of waiters and the timers).

use tollgate::wait::Step;
use tollgate::Decision;
use wasm_bindgen::prelude::*;

use crate::{ms, now_ns, ALLOWED, DENIED};

/// Status of [`wait_step`]: stop waiting, the deadline cannot be met.
pub const GIVE_UP: u32 = 3;

/// Whether a waiter's decision with `left` ms before its deadline (negative: a look) may be
/// kept: the core's waiting rule, [`tollgate::wait::keeps`].
pub(crate) fn keeps_within(decision: &Decision, left: f64) -> bool {
    left >= 0.0 && tollgate::wait::keeps(decision, Some(now_ns(left)))
}

/// The core's waiting rule ([`tollgate::wait::step`]) for a decision (`allowed`, and its
/// `retryAfter` and `delay` in ms), having waited `waited` ms of at most `maxWait`
/// (Infinity: no deadline), with `jitter` ms the caller drew. Returns `[status, ms]`:
/// [`ALLOWED`] (go, after `ms`, the queue delay), [`DENIED`] (sleep `ms`, then decide again)
/// or [`GIVE_UP`] (`ms`: the retry time the timeout reports). For `js/waiting.js`, the wait
/// of both entries' `acquire`.
#[wasm_bindgen(js_name = waitStep)]
pub fn wait_step(
    allowed: bool,
    retry_after: f64,
    delay: f64,
    waited: f64,
    max_wait: f64,
    jitter: f64,
) -> Vec<f64> {
    let decision = Decision {
        allowed,
        retry_after: now_ns(retry_after),
        delay: now_ns(delay),
        ..Decision::default()
    };
    match tollgate::wait::step(&decision, now_ns(waited), now_ns(max_wait), now_ns(jitter)) {
        Step::Go { delay } => vec![ALLOWED as f64, ms(delay)],
        Step::Wait(d) => vec![DENIED as f64, ms(d)],
        Step::GiveUp { retry_after } => vec![GIVE_UP as f64, ms(retry_after)],
    }
}
