//! The `local` fallback of [`FleetLimits`]: the same limits decided in this process's memory
//! (a [`KeyedLimiter`]) while Redis cannot serve.

use tollgate::keyed::KeyedLimiter;
use tollgate::store::Limits;
use tollgate::Decision;
use wasm_bindgen::prelude::*;

use super::numbers::answer;
use super::FleetLimits;
use crate::wait::keeps_within;
use crate::{cost_units, max_keys, now_ns, ALLOWED, FAILED};

/// The `local` fallback's limiter over `limits`, holding at most `max` keys (`None`: no
/// local fallback).
pub(super) fn local_limiter(
    limits: &Limits,
    max: Option<f64>,
) -> Result<Option<KeyedLimiter<Vec<u8>>>, JsValue> {
    let Some(max) = max else { return Ok(None) };
    Ok(Some(KeyedLimiter::from_limits(limits, max_keys(max)?)))
}

#[wasm_bindgen]
impl FleetLimits {
    /// The `local` fallback: decides a request of `cost` (0: a peek) for `key` (and
    /// `tenant`) in this process's memory at `now` (ms). The output of one request of
    /// [`FleetLimits::decide`], with as many limits as the request had. `max_delay` is an
    /// `OP_ACQUIRE`'s (Infinity for a check): the charge is kept only as the waiting rule
    /// says.
    #[wasm_bindgen(js_name = localCheck)]
    pub fn local_check(
        &self,
        key: &str,
        tenant: Option<String>,
        now: f64,
        cost: f64,
        max_delay: f64,
    ) -> Vec<f64> {
        let mut out = Vec::new();
        let errors = &mut *self.errors.borrow_mut();
        errors.clear();
        let Some(local) = &self.local else {
            return out;
        };
        let keep = |d: &Decision| keeps_within(d, max_delay);
        match local.check_if(
            key.as_bytes(),
            tenant.as_deref(),
            now_ns(now),
            cost_units(cost),
            keep,
        ) {
            Ok(d) => answer(&mut out, &d),
            Err(e) => {
                out.push(FAILED as f64);
                errors.push(Some(e));
            }
        }
        out
    }

    /// The `local` fallback: releases `cost` concurrency slots of `key`; [`ALLOWED`] or
    /// [`FAILED`] ([`FleetLimits::error`] at 0).
    #[wasm_bindgen(js_name = localRelease)]
    pub fn local_release(&self, key: &str, cost: f64) -> u32 {
        let errors = &mut *self.errors.borrow_mut();
        errors.clear();
        match self
            .local
            .as_ref()
            .map(|l| l.release(key.as_bytes(), cost_units(cost)))
        {
            Some(Err(e)) => {
                errors.push(Some(e));
                FAILED
            }
            _ => ALLOWED,
        }
    }

    /// The `local` fallback: forgets `key`.
    #[wasm_bindgen(js_name = localReset)]
    pub fn local_reset(&self, key: &str) -> bool {
        self.local.as_ref().is_some_and(|l| l.reset(key.as_bytes()))
    }
}
