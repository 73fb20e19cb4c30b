//! The service of [`crate::RateLimitLayer`]: route and key the request, decide, answer.

use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower_service::Service;

use crate::answer::{answer, refused, Answer};
use crate::body::{ResponseBody, Slot};
use crate::fields::{add_fields, Fields};
use crate::future::{own_answer, BoxFuture, ResponseFuture};
use crate::grpc;
use crate::plans::PlanRef;
use crate::settle;
use crate::shared::Shared;
use crate::store::Checked;
use crate::store::Store;
use crate::target::{target, Checking, Target};

/// The service of [`crate::RateLimitLayer`].
pub struct RateLimit<Svc, S> {
    inner: Svc,
    shared: Arc<Shared<S>>,
}

impl<Svc, S> RateLimit<Svc, S> {
    /// `inner`, limited by the layer's `shared` configuration.
    pub(crate) fn new(inner: Svc, shared: Arc<Shared<S>>) -> Self {
        RateLimit { inner, shared }
    }
}

impl<Svc: Clone, S> Clone for RateLimit<Svc, S> {
    fn clone(&self) -> Self {
        RateLimit {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<Svc, S, ReqB, B> Service<Request<ReqB>> for RateLimit<Svc, S>
where
    Svc: Service<Request<ReqB>, Response = Response<B>> + Clone + Send + 'static,
    Svc::Future: Send + 'static,
    S: Store,
    ReqB: Send + 'static,
    B: Send + 'static,
{
    type Response = Response<ResponseBody<B>>;
    type Error = Svc::Error;
    type Future = ResponseFuture<Svc::Future, B, Svc::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    /// Routes and keys the request, then decides: at once when the store can (in memory),
    /// calling the inner service that was driven to readiness; otherwise in the returned
    /// future, with a clone of the inner service (the one driven to readiness serves this
    /// request, the clone the next). Why not always the future: it cloned axum's router per
    /// request and moved a large state machine (PERF.md, "Measured reasons in the code").
    ///
    /// An admitted request's concurrency slots are held from the decision on: by `call`
    /// itself while it calls the inner service, then by the returned future, then by the
    /// response's body ([`ResponseBody`]); whichever is dropped holding them gives them
    /// back.
    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let shared = Arc::clone(&self.shared);
        let grpc = grpc::is_grpc(req.headers());
        let target = match target(&shared, req) {
            Target::Check(t) => t,
            Target::Pass(req) => {
                return ResponseFuture::forward(
                    self.inner.call(req),
                    Fields::default(),
                    Slot::none(),
                )
            }
            Target::Refuse(refusal) => return ResponseFuture::answered(refused(refusal), grpc),
        };
        // A route that settles reserves, and answers in a future that settles after the
        // response (its own file).
        let target = match &shared.routes[target.route].settle {
            Some(settling) => {
                match settle::call(&shared, &mut self.inner, target, settling.clone(), grpc) {
                    Ok(future) => return future,
                    Err(target) => target,
                }
            }
            None => target,
        };
        let entry = &shared.entries[target.entry];
        let now = match (&target.plan, &entry.plans) {
            (Some(p), Some(plans)) => {
                entry
                    .store
                    .check_plan_now(&target.key, p.asked(plans), target.cost)
            }
            _ => entry
                .store
                .check_now(&target.key, target.tenant.as_deref(), target.cost),
        };
        if let Some(result) = now {
            return match answer(&shared, target, result, grpc) {
                Answer::Forward(req, fields, slot) => {
                    ResponseFuture::forward(self.inner.call(req), fields, slot)
                }
                Answer::Respond(resp) => ResponseFuture::answered(resp, grpc),
            };
        }
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let waiting: BoxFuture<_> = Box::pin(async move {
            let mut target = target;
            let result = decide(&shared, &mut target).await;
            match answer(&shared, target, result, grpc) {
                Answer::Forward(req, fields, slot) => {
                    let resp = inner.call(req).await?;
                    let mut resp = resp.map(|body| ResponseBody::inner(body, slot));
                    add_fields(&mut resp, fields);
                    Ok(resp)
                }
                Answer::Respond(resp) => Ok(own_answer(resp, grpc)),
            }
        });
        ResponseFuture::waiting(waiting)
    }
}

/// The decision of a request the store must wait for (Redis): a plan's ([`Store::check_plan`];
/// an override the store learned with the decision is reported as the memory store reports
/// the one it keeps, through [`crate::plans::PlanMeta::overridden`]), else a check's.
async fn decide<S: Store, ReqB>(
    shared: &Shared<S>,
    target: &mut Checking<ReqB>,
) -> Result<Checked, S::Error> {
    let entry = &shared.entries[target.entry];
    let chosen = target.plan.as_ref().map(PlanRef::chosen);
    if let (Some(chosen), Some(plans)) = (chosen, &entry.plans) {
        let asked = &plans.each[chosen].name;
        if let Some(decided) = entry
            .store
            .check_plan(&target.key, asked, target.cost)
            .await
        {
            let answer = decided?;
            if answer.overridden.is_some() {
                target.plan = Some(plans.overridden(chosen, answer.overridden));
            }
            return Ok(answer.checked);
        }
    }
    entry
        .store
        .check(&target.key, target.tenant.as_deref(), target.cost)
        .await
}
