//! A request's answer as numbers for JavaScript (its status, then the combined decision and
//! each limit's, [`crate::DECISION_LEN`] numbers each: [`http::numbers`]), and decisions
//! read back from such numbers: a module reply's, and the deny cache's.

use tollgate::stack::StackDecision;
use tollgate::store::fleet::{self, DECISION_FIELDS};
use tollgate::Decision;
use wasm_bindgen::prelude::*;

use super::FleetLimits;
use crate::{http, ALLOWED, DENIED};

/// Appends a request's answer: its status, then (when decided) the combined decision and
/// each limit's.
pub(super) fn answer(out: &mut Vec<f64>, d: &StackDecision) {
    out.push(if d.decision.allowed { ALLOWED } else { DENIED } as f64);
    out.extend(http::numbers(&d.decision));
    for e in &d.each {
        out.extend(http::numbers(e));
    }
}

/// A decision read back from six numbers of [`http::numbers`]' form (durations in whole ms), with
/// the core's rule for a module reply's fields ([`fleet::decision_from_fields`]); `None`
/// when a number is not a whole number from 0 to 2^53 or `allowed` is not 0 or 1.
fn decision_from(numbers: &[f64]) -> Option<Decision> {
    if numbers.len() != DECISION_FIELDS {
        return None;
    }
    let mut fields = [0u64; DECISION_FIELDS];
    for (field, &x) in fields.iter_mut().zip(numbers) {
        if !(x.fract() == 0.0 && (0.0..=crate::spec::MAX_SAFE_INTEGER).contains(&x)) {
            return None;
        }
        *field = x as u64;
    }
    fleet::decision_from_fields(fields)
}

/// A combined decision and each limit's, read back from `numbers` (six each, the combined
/// first); `None` unless every one reads.
pub(super) fn stack_from(numbers: &[f64]) -> Option<StackDecision> {
    if numbers.len() < 2 * DECISION_FIELDS || numbers.len() % DECISION_FIELDS != 0 {
        return None;
    }
    let mut all = numbers.chunks_exact(DECISION_FIELDS).map(decision_from);
    Some(StackDecision {
        decision: all.next()??,
        each: all.collect::<Option<Vec<Decision>>>()?,
    })
}

#[wasm_bindgen]
impl FleetLimits {
    /// Reads a `TOLLGATE.CHECK` / `PEEK` reply (the module's: six integers, then an array
    /// of six per limit), given flattened into the input numbers ([`FleetLimits::prepare`]:
    /// the combined decision's six, then each limit's six), by the core's rule for its
    /// fields. Returns how many numbers it wrote at [`FleetLimits::out_ptr`] (one request's
    /// answer, as [`FleetLimits::decide`] writes it), or 0 when the reply is not a
    /// decision.
    #[wasm_bindgen(js_name = moduleReply)]
    pub fn module_reply(&self) -> usize {
        let io = &mut *self.io.borrow_mut();
        io.out.clear();
        match stack_from(&io.numbers) {
            Some(d) => answer(&mut io.out, &d),
            None => return 0,
        }
        io.out.len()
    }
}
