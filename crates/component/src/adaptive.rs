//! The `adaptive` interface: the core's gradient controller
//! ([`tollgate::adaptive::gradient`]) for one adaptive concurrency limit, with the record of
//! the permits it has admitted. Every decision and every move of the limit is the core's;
//! here we only convert parameters, permits and outcomes, and refuse a permit released twice.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use tollgate::adaptive::gradient::{self, Gradient, GradientParams, GradientState};
use tollgate::adaptive::{Outcome, Param, ParamError};
use tollgate::Nanos;

use crate::bindings::exports::tollgate::limiter::adaptive as wit;
use crate::{rule, Component};

/// The number the next adaptive limiter of this instance gets (permits carry it).
static NEXT_LIMITER: AtomicU64 = AtomicU64::new(0);

/// An `adaptive-limiter` resource.
pub struct Adaptive {
    gradient: Gradient,
    number: u64,
    inner: RefCell<Inner>,
}

/// What a call changes.
struct Inner {
    state: GradientState,
    /// The permits admitted and not released: id -> the instant of their `acquire`. At most
    /// the limit's ceiling (`max-limit`) of them, since each holds a slot.
    held: BTreeMap<u64, Nanos>,
    next_id: u64,
    /// xorshift64 state: a fresh value for each release's possible re-measurement jitter.
    random: u64,
}

impl wit::Guest for Component {
    type AdaptiveLimiter = Adaptive;
}

impl wit::GuestAdaptiveLimiter for Adaptive {
    fn create(
        params: wit::AdaptiveParams,
        now_ns: u64,
    ) -> Result<wit::AdaptiveLimiter, wit::ParamError> {
        let d = GradientParams::default();
        let gradient = Gradient::new(GradientParams {
            min_limit: params.min_limit.unwrap_or(d.min_limit),
            max_limit: params.max_limit.unwrap_or(d.max_limit),
            initial_limit: params.initial_limit.unwrap_or(d.initial_limit),
            window: params.window_ns.unwrap_or(d.window),
            min_samples: params.min_samples.unwrap_or(d.min_samples),
            percentile: params.percentile.unwrap_or(d.percentile),
            tolerance: params.tolerance.unwrap_or(d.tolerance),
            probe_interval: params.probe_interval_ns.unwrap_or(d.probe_interval),
        })
        .map_err(param_error)?;
        let seed = params.seed.unwrap_or(0);
        let state = GradientState::new(&gradient, now_ns, seed);
        Ok(wit::AdaptiveLimiter::new(Adaptive {
            gradient,
            number: NEXT_LIMITER.fetch_add(1, Ordering::Relaxed),
            inner: RefCell::new(Inner {
                state,
                held: BTreeMap::new(),
                next_id: 0,
                // xorshift64 needs a non-zero state.
                random: seed | 1,
            }),
        }))
    }

    fn acquire(&self, now_ns: u64) -> Option<wit::Permit> {
        let inner = &mut *self.inner.borrow_mut();
        if !gradient::acquire(&self.gradient, &mut inner.state, now_ns).allowed {
            return None;
        }
        let id = inner.next_id;
        inner.next_id += 1;
        inner.held.insert(id, now_ns);
        Some(wit::Permit {
            limiter: self.number,
            id,
            started_ns: now_ns,
        })
    }

    fn release(
        &self,
        permit: wit::Permit,
        now_ns: u64,
        outcome: wit::Outcome,
    ) -> Result<(), wit::ReleaseError> {
        if permit.limiter != self.number {
            return Err(wit::ReleaseError::ForeignPermit);
        }
        let inner = &mut *self.inner.borrow_mut();
        // The start as recorded: a permit edited since does not move a latency.
        let started = inner
            .held
            .remove(&permit.id)
            .ok_or(wit::ReleaseError::NotHeld)?;
        let outcome = match outcome {
            wit::Outcome::Success => Outcome::Success,
            wit::Outcome::Overload => Outcome::Overload,
            wit::Outcome::Timeout => Outcome::Timeout,
        };
        inner.random ^= inner.random << 13;
        inner.random ^= inner.random >> 7;
        inner.random ^= inner.random << 17;
        gradient::release(
            &self.gradient,
            &mut inner.state,
            now_ns,
            started,
            outcome,
            inner.random,
        );
        Ok(())
    }

    fn limit(&self) -> u64 {
        self.inner.borrow().state.limit()
    }

    fn admitting(&self) -> u64 {
        self.inner.borrow().state.admitting(&self.gradient)
    }

    fn in_flight(&self) -> u64 {
        self.inner.borrow().state.in_flight()
    }

    fn no_load_ns(&self) -> u64 {
        self.inner.borrow().state.no_load()
    }
}

/// The core's parameter error in its WIT form.
fn param_error(e: ParamError) -> wit::ParamError {
    wit::ParamError {
        param: match e.param {
            Param::MinLimit => wit::Param::MinLimit,
            Param::MaxLimit => wit::Param::MaxLimit,
            Param::InitialLimit => wit::Param::InitialLimit,
            Param::Window => wit::Param::Window,
            Param::MinSamples => wit::Param::MinSamples,
            Param::Percentile => wit::Param::Percentile,
            Param::Tolerance => wit::Param::Tolerance,
            Param::ProbeInterval => wit::Param::ProbeInterval,
            Param::Backoff => wit::Param::Backoff,
        },
        value: e.value,
        rule: rule(e.rule),
        message: e.to_string(),
    }
}
