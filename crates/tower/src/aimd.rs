//! A client's side of someone else's limit: [`AimdLimitLayer`] wraps an HTTP client (any
//! tower `Service` answering `http::Response`s: hyper-util's client, a tonic channel, a
//! reqwest-tower stack) and caps its calls in flight at a limit the core's AIMD controller
//! ([`tollgate::adaptive::aimd`]) moves: one more per limit's worth of successes, a cut
//! (to `backoff`%, 90% by default) when the upstream answers 429 or a 5xx or the call fails.
//! One cut per episode: the calls already in flight when the upstream said "too much"
//! come back with the same news.
//!
//! A call over the limit is refused at once with [`LimitFull`] (nothing sent): retry it
//! after a pause (`tollgate::backoff`) or drop it. The limit is per layer (per process),
//! as a client's view of an upstream is.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Instant;

use http::Response;
use tollgate::adaptive::aimd::{self, Aimd, AimdParams, AimdState};
use tollgate::adaptive::{Outcome, ParamError};
use tollgate::Nanos;
use tower_layer::Layer;
use tower_service::Service;

/// The error of a call refused because the limit was full (nothing was sent), or the
/// inner service's error.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A call refused at once: as many calls as the limit allows are in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitFull {
    /// The limit then.
    pub limit: u64,
}

impl std::fmt::Display for LimitFull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the upstream's limit of {} calls in flight is full",
            self.limit
        )
    }
}

impl std::error::Error for LimitFull {}

/// The controller and its state, shared by every clone of the service.
struct Shared {
    aimd: Aimd,
    state: Mutex<AimdState>,
    epoch: Instant,
}

impl Shared {
    fn now(&self) -> Nanos {
        self.epoch.elapsed().as_nanos() as Nanos
    }

    fn state(&self) -> std::sync::MutexGuard<'_, AimdState> {
        // The state is plain data, whole after any panic.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Caps a client's calls in flight at a limit AIMD moves by the upstream's answers.
#[derive(Clone)]
pub struct AimdLimitLayer {
    shared: Arc<Shared>,
}

impl AimdLimitLayer {
    /// A layer whose limit starts at `params.initial_limit`; bad parameters are the core's
    /// named [`ParamError`].
    pub fn new(params: AimdParams) -> Result<AimdLimitLayer, ParamError> {
        let aimd = Aimd::new(params)?;
        Ok(AimdLimitLayer {
            shared: Arc::new(Shared {
                state: Mutex::new(AimdState::new(&aimd)),
                aimd,
                epoch: Instant::now(),
            }),
        })
    }

    /// The limit now.
    pub fn limit(&self) -> u64 {
        self.shared.state().limit()
    }

    /// Calls in flight now.
    pub fn in_flight(&self) -> u64 {
        self.shared.state().in_flight()
    }
}

impl<S> Layer<S> for AimdLimitLayer {
    type Service = AimdLimit<S>;

    fn layer(&self, inner: S) -> AimdLimit<S> {
        AimdLimit {
            inner,
            shared: Arc::clone(&self.shared),
        }
    }
}

/// The service of [`AimdLimitLayer`].
#[derive(Clone)]
pub struct AimdLimit<S> {
    inner: S,
    shared: Arc<Shared>,
}

/// The outcome of a call for the controller: an answer counts as the adaptive layer's
/// ([`crate::adaptive::limit::outcome_of`]: a 429 or a 5xx is the upstream saying "too
/// much"); a failed call (no answer) counts as a timeout.
fn outcome<B, E>(result: &Result<Response<B>, E>) -> Outcome {
    match result {
        Ok(r) => crate::adaptive::limit::outcome_of(r.status()),
        Err(_) => Outcome::Timeout,
    }
}

/// A call admitted and not yet answered: released once, when answered or dropped (a
/// dropped call is a caller that gave up: a timeout).
struct InFlight {
    shared: Arc<Shared>,
    started: Nanos,
    done: bool,
}

impl InFlight {
    fn release(&mut self, outcome: Outcome) {
        if !std::mem::replace(&mut self.done, true) {
            let now = self.shared.now();
            let s = &self.shared;
            aimd::release(&s.aimd, &mut s.state(), now, self.started, outcome);
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.release(Outcome::Timeout);
    }
}

impl<S, Req, B> Service<Req> for AimdLimit<S>
where
    S: Service<Req, Response = Response<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = Response<B>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<B>, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let now = self.shared.now();
        let decision = {
            let s = &self.shared;
            let mut state = s.state();
            let d = aimd::acquire(&s.aimd, &mut state, now);
            (d.allowed, state.limit())
        };
        if !decision.0 {
            return Box::pin(std::future::ready(Err(
                LimitFull { limit: decision.1 }.into()
            )));
        }
        let mut in_flight = InFlight {
            shared: Arc::clone(&self.shared),
            started: now,
            done: false,
        };
        let call = self.inner.call(req);
        Box::pin(async move {
            let result = call.await;
            in_flight.release(outcome(&result));
            result.map_err(Into::into)
        })
    }
}
