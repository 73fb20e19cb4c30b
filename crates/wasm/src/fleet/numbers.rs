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

/// The decision of six numbers ([`decision_from`]), written over them as [`http::numbers`]
/// gives it; `None` (the numbers left as they were) when they are not a decision.
fn read_in_place(numbers: &mut [f64]) -> Option<Decision> {
    let d = decision_from(numbers)?;
    numbers.copy_from_slice(&http::numbers(&d));
    Some(d)
}

/// Whether `len` numbers are a stack's: the combined decision's six, then each limit's six
/// (at least one limit).
fn stack_len(len: usize) -> bool {
    len >= 2 * DECISION_FIELDS && len % DECISION_FIELDS == 0
}

/// A combined decision and each limit's, read back from `numbers` (six each, the combined
/// first); `None` unless every one reads.
pub(super) fn stack_from(numbers: &[f64]) -> Option<StackDecision> {
    if !stack_len(numbers.len()) {
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
    /// Makes room for a module reply of `len` numbers ([`FleetLimits::module_reply`]) and
    /// returns the room's address (`f64`s): the reply goes from its second number on, the
    /// answer is read from its first. Nothing else resizes this room, so the address holds
    /// until a larger `len` is asked for: JavaScript keeps it and asks again only then.
    #[wasm_bindgen(js_name = moduleBuffer)]
    pub fn module_buffer(&self, len: usize) -> *const f64 {
        let module = &mut self.io.borrow_mut().module;
        let room = len.saturating_add(1);
        if module.len() < room {
            module.resize(room, 0.0);
        }
        module.as_ptr()
    }

    /// Reads a `TOLLGATE.CHECK` / `PEEK` reply (the module's: six integers, then an array
    /// of six per limit), given flattened as `len` numbers after the first of
    /// [`FleetLimits::module_buffer`] (the combined decision's six, then each limit's six),
    /// by the core's rule for its fields, in place: each six become that decision's
    /// numbers ([`http::numbers`]) and the first number its status, so that the room then
    /// holds one request's answer, as [`FleetLimits::decide`] writes it. Returns the
    /// answer's length (`1 + len`), or 0 when the reply is not a decision (the room's
    /// numbers are then of no use).
    ///
    /// In place and in one call, for the cost measured on the npm client's module path
    /// (PERF.md, "The module reply read in place"): read into a [`StackDecision`] (a `Vec`
    /// of each limit's decision), then written to the output buffer, with four calls
    /// (size, locate the input, read, locate the output) and JavaScript arrays around
    /// them, the reply cost ~6.2k instructions of ~23k a check.
    #[wasm_bindgen(js_name = moduleReply)]
    pub fn module_reply(&self, len: usize) -> usize {
        let module = &mut *self.io.borrow_mut().module;
        let Some(numbers) = module.get_mut(1..).and_then(|m| m.get_mut(..len)) else {
            return 0;
        };
        if !stack_len(len) {
            return 0;
        }
        let (combined, each) = numbers.split_at_mut(DECISION_FIELDS);
        let Some(d) = read_in_place(combined) else {
            return 0;
        };
        for chunk in each.chunks_exact_mut(DECISION_FIELDS) {
            if read_in_place(chunk).is_none() {
                return 0;
            }
        }
        module[0] = (if d.allowed { ALLOWED } else { DENIED }) as f64;
        1 + len
    }
}
