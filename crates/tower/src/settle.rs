//! Reserve, then settle after the response: a route's [`Route::count_when`] (count a
//! request only if its response counts) and [`Route::measured`] (charge the cost the
//! handler reports). The rule is the core's ([`tollgate::settle`]); the store settles
//! ([`Store::settle`]); this file only decides when, and with what actual.
//!
//! [`Route::count_when`]: crate::Route::count_when
//! [`Route::measured`]: crate::Route::measured

use std::sync::{Arc, Mutex, PoisonError};

use http::response;
use http::{Request, Response};
use tollgate::settle::Reservation;
use tower_service::Service;

use crate::answer::{answer, Answer};
use crate::body::{ResponseBody, Slot};
use crate::fields::{add_fields, Fields};
use crate::future::{own_answer, BoxFuture, ResponseFuture};
use crate::route::Settling;
use crate::shared::Shared;
use crate::store::Store;
use crate::target::Checking;

/// The actual cost of a [`crate::Route::measured`] request, reported by the handler as a
/// response extension. A handle: clones share one value, so a handler that streams its
/// body keeps a clone and adds to it as it goes (tokens generated, bytes sent); the layer
/// reads it when the body ends or is dropped. Nothing reported: the estimate stays charged.
///
/// ```
/// use tollgate_tower::ActualCost;
/// let cost = ActualCost::default();
/// let kept = cost.clone(); // put `cost` in the response's extensions, keep `kept`
/// kept.add(120);
/// kept.add(30);
/// assert_eq!(cost.get(), Some(150));
/// ```
#[derive(Clone, Debug, Default)]
pub struct ActualCost(Arc<Mutex<Option<u64>>>);

impl ActualCost {
    /// A cost already known.
    pub fn new(cost: u64) -> ActualCost {
        ActualCost(Arc::new(Mutex::new(Some(cost))))
    }

    /// Reports the cost as `cost`.
    pub fn set(&self, cost: u64) {
        *self.lock() = Some(cost);
    }

    /// Adds `cost` to what was reported (from nothing: `cost`), saturating.
    pub fn add(&self, cost: u64) {
        let mut v = self.lock();
        *v = Some(v.unwrap_or(0).saturating_add(cost));
    }

    /// What was reported, if anything.
    pub fn get(&self) -> Option<u64> {
        *self.lock()
    }

    // A reporter that panicked mid-update leaves a whole number: the value is still good.
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<u64>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Decides a request of a route that settles: reserves (the route's cost, or its
/// estimate), answers as a check would, and settles after the response. A store that
/// reserves at once (in memory) answers here; one that waits (Redis) in the returned
/// future, with a clone of the inner service, as a check does. `Err(target)`: the store
/// cannot reserve (the builder refuses such a route, so never in practice); the caller
/// checks it instead.
// (The target comes back by value only where the builder refused the route; boxing it
// would cost every settling request an allocation for a case that does not happen.)
#[allow(clippy::result_large_err)]
pub(crate) fn call<Svc, S, ReqB, B>(
    shared: &Arc<Shared<S>>,
    inner: &mut Svc,
    mut target: Checking<ReqB>,
    settling: Settling,
    grpc: bool,
) -> Result<ResponseFuture<Svc::Future, B, Svc::Error>, Checking<ReqB>>
where
    Svc: Service<Request<ReqB>, Response = Response<B>> + Clone + Send + 'static,
    Svc::Future: Send + 'static,
    S: Store,
    ReqB: Send + 'static,
    B: Send + 'static,
{
    if let Settling::Measured { estimate, .. } = &settling {
        target.cost = estimate(&target.parts);
    }
    let entry = &shared.entries[target.entry];
    let Some(reserved) = entry.store.reserve_now(&target.key, target.cost) else {
        if !entry.store.settles() {
            return Err(target);
        }
        return Ok(reserve_later(shared, inner, target, settling, grpc));
    };
    let (result, reservation) = match reserved {
        Ok(r) => (Ok(r.checked), r.reservation),
        Err(e) => (Err(e), None),
    };
    let (entry_index, key) = (target.entry, target.key.clone());
    Ok(match answer(shared, target, result, grpc) {
        Answer::Forward(req, fields, slot) => {
            let future = inner.call(req);
            let shared = Arc::clone(shared);
            let waiting: BoxFuture<_> = Box::pin(async move {
                let pending = reservation.map(|reservation| Pending {
                    shared,
                    entry: entry_index,
                    key,
                    reservation,
                });
                Ok(settled(future.await?, pending, &settling, slot, fields))
            });
            ResponseFuture::waiting(waiting)
        }
        Answer::Respond(resp) => ResponseFuture::answered(resp, grpc),
    })
}

/// [`call`] for a store that reserves in a future (Redis): the reserve, the answer and the
/// settle after the response, all in the returned future.
fn reserve_later<Svc, S, ReqB, B>(
    shared: &Arc<Shared<S>>,
    inner: &mut Svc,
    target: Checking<ReqB>,
    settling: Settling,
    grpc: bool,
) -> ResponseFuture<Svc::Future, B, Svc::Error>
where
    Svc: Service<Request<ReqB>, Response = Response<B>> + Clone + Send + 'static,
    Svc::Future: Send + 'static,
    S: Store,
    ReqB: Send + 'static,
    B: Send + 'static,
{
    let shared = Arc::clone(shared);
    let clone = inner.clone();
    let mut inner = std::mem::replace(inner, clone);
    let waiting: BoxFuture<_> = Box::pin(async move {
        let (entry_index, key) = (target.entry, target.key.clone());
        let reserved = shared.entries[entry_index]
            .store
            .reserve(&key, target.cost)
            .await;
        let (result, reservation) = match reserved {
            Some(Ok(r)) => (Ok(r.checked), r.reservation),
            Some(Err(e)) => (Err(e), None),
            // `settles()` said it reserves: a store that then does not is decided as a
            // check, its request charged as any is.
            None => (
                shared.entries[entry_index]
                    .store
                    .check(&key, None, target.cost)
                    .await,
                None,
            ),
        };
        match answer(&shared, target, result, grpc) {
            Answer::Forward(req, fields, slot) => {
                let resp = inner.call(req).await?;
                let pending = reservation.map(|reservation| Pending {
                    shared: Arc::clone(&shared),
                    entry: entry_index,
                    key,
                    reservation,
                });
                Ok(settled(resp, pending, &settling, slot, fields))
            }
            Answer::Respond(resp) => Ok(own_answer(resp, grpc)),
        }
    });
    ResponseFuture::waiting(waiting)
}

/// The inner service's response with the layer's fields, its body holding `slot` and, when
/// the request was reserved, the settle ([`after`]). Not reserved (shadow mode's denial, or
/// the store's fallback): nothing to settle.
fn settled<S: Store, B>(
    resp: Response<B>,
    pending: Option<Pending<S>>,
    settling: &Settling,
    slot: Slot,
    fields: Fields,
) -> Response<ResponseBody<B>> {
    let (mut parts, body) = resp.into_parts();
    let slot = match pending {
        Some(p) => after(p, settling, &mut parts, slot),
        None => slot,
    };
    let mut resp = Response::from_parts(parts, ResponseBody::inner(body, slot));
    add_fields(&mut resp, fields);
    resp
}

/// An admitted request's reservation, to settle on its policy's store.
struct Pending<S> {
    shared: Arc<Shared<S>>,
    entry: usize,
    key: String,
    reservation: Reservation,
}

impl<S: Store> Pending<S> {
    fn settle(self, actual: u64) {
        self.shared.entries[self.entry]
            .store
            .settle(&self.key, self.reservation, actual);
    }
}

/// What the response head decides: a response that does not count is settled at 0 now;
/// a measured cost is settled with the body (the returned slot, released when the body
/// ends or is dropped, after the `slot` it wraps).
fn after<S: Store>(
    pending: Pending<S>,
    settling: &Settling,
    parts: &mut response::Parts,
    slot: Slot,
) -> Slot {
    match settling {
        Settling::ByResponse(counts) => {
            if !counts(parts) {
                pending.settle(0);
            }
            // Counted: the reservation is dropped, charged at its cost.
            slot
        }
        Settling::Measured { header, .. } => {
            let from_header = header
                .as_ref()
                .and_then(|h| parts.headers.remove(h))
                .and_then(|v| tollgate_http::settle::parse_cost(v.to_str().ok()?))
                .map(ActualCost::new);
            let Some(actual) =
                from_header.or_else(|| parts.extensions.get::<ActualCost>().cloned())
            else {
                // Nothing reported: the estimate stays charged.
                return slot;
            };
            let mut slot = slot;
            Slot::held(move || {
                slot.release();
                if let Some(cost) = actual.get() {
                    pending.settle(cost);
                }
            })
        }
    }
}
