//! The fetch handler: the APIs by path, and every other request through the limited path,
//! which reads top to bottom: the plan (route, identity, limits, object), the deny cache,
//! the object's decision, the answer. The rules live in the plain modules; this is glue.

use serde_json::json;
use tollgate::metrics::Source;
use tollgate::store::fallback::Behaviour;
use tollgate::store::fallback::Why;
use tollgate::Decision;
use tollgate_http::fields::{self, Degraded};
use worker::{console_error, event, Context, Env, Request, Response};

use crate::admit::{self, Hold};
use crate::config::{Config, Mode, OnError, Route};
use crate::env::{self, now_ms};
use crate::http::problem;
use crate::keying;
use crate::plan::Plan;
use crate::protocol::{Check, ObjectRequest, ObjectResponse, When};
use crate::rpc::{self, Failure};
use crate::settling::{self, Open};
use crate::{admin, answer, check_api, denial, jwt_edge, lease, origin, stats};

#[event(fetch)]
async fn fetch(req: Request, env: Env, ctx: Context) -> worker::Result<Response> {
    let cfg = env::config(&env);
    let cfg = match cfg.as_ref() {
        Ok(c) => c,
        // Logged once, when the config was read (see `env::config`).
        Err(e) => {
            return problem(
                500,
                "invalid-config",
                &e.to_string(),
                json!({"field": e.field}),
            )
        }
    };
    let path = req.path();
    let resp = match check_api::endpoint(&path) {
        Some(endpoint) => check_api::handle(req, &env, cfg, endpoint).await,
        None if path.starts_with("/admin/") => admin::handle(req, &env, cfg, &path).await,
        None => limited(req, &env, &ctx, cfg).await,
    };
    stats::maybe_report(&env, &ctx, cfg);
    resp
}

/// A request to the origin, limited by its route.
async fn limited(req: Request, env: &Env, ctx: &Context, cfg: &Config) -> worker::Result<Response> {
    // The plan. Routed and forwarded as the origin would read the path (see `route`).
    let method = req.method().to_string();
    let path = match crate::route::normalize(&req.path()) {
        Ok(p) => p,
        Err(e) => return problem(400, "invalid-path", &e.to_string(), json!({})),
    };
    let Some(route) = crate::route::find(&cfg.routes, &method, &path).filter(|r| !r.exempt) else {
        return origin::forward(req, env, &path, &[]).await;
    };
    let mut id = match keying::identify(&cfg.settings, |n| req.headers().get(n).ok().flatten()) {
        Ok(id) => id,
        Err(e) => {
            let extra = json!({"header": e.header()});
            return problem(400, "invalid-header", &e.to_string(), extra);
        }
    };
    // A bearer token's caller ([settings.jwt]): its subject and plan, or a refusal.
    if let Some(refused) = jwt_edge::identify(&req, env, cfg, route, &mut id).await? {
        return Ok(refused);
    }
    let Some(plan) = Plan::for_route(cfg, route, &id) else {
        return origin::forward(req, env, &path, &[]).await;
    };
    let enforce = route.mode == Mode::Enforce;
    let cache_key = plan.cache_key(&route.name);

    // A denial the isolate already knows.
    if enforce && cfg.settings.deny_cache {
        if let Some((_, each)) = denial::cached(&cache_key, now_ms()) {
            let limits = (&plan.names[..], &each[..]);
            stats::violated(env, cfg, Some(route), limits, false, Source::DenyCache);
            return denial::cached_too_many(cfg, &plan.names, &each, cache_key);
        }
    }

    // The object's decision.
    // A route that settles reserves its cost as an estimate (see `settling`).
    let reservation = route.settle.as_ref().map(|_| settling::reservation_id());
    let open = |limits: &[crate::protocol::Limit], id: &String| Open {
        object: plan.object.clone(),
        limits: limits.to_vec(),
        id: id.clone(),
        estimate: route.cost,
        timeout_ms: cfg.settings.timeout_ms,
    };
    let check = Check {
        reservation: reservation.clone(),
        limits: plan.limits.clone(),
        spare: plan.spare.clone(),
        owner: plan.owner.clone(),
        cost: route.cost,
        lease: admit::lease_for(&plan.names),
        lease_ms: cfg.settings.lease_ms,
        route: Some(route.name.clone()),
        when: When {
            now_ms: None,
            deadline_ms: Some(lease::deadline(now_ms(), cfg.settings.timeout_ms)),
        },
    };
    let release = check.release();
    let reserved = reservation.as_ref().map(|id| open(&check.limits, id));
    let call = ObjectRequest::Check(check);
    let decided = rpc::call(env, cfg.settings.timeout_ms, &plan.object, &call).await;

    // The answer.
    let late = matches!(decided, Ok(ObjectResponse::Late { .. }));
    let why = match decided {
        Ok(ObjectResponse::Decided {
            decision,
            each,
            now_ms,
            overridden,
            ..
        }) => {
            // The key's override may have replaced its plan's limits: name those decided.
            let names = &match overridden {
                Some(limits) => plan.overridden_names(cfg, &limits),
                None => plan.names.clone(),
            };
            if decision.allowed {
                stats::route_admitted(env, cfg, route, names, &each);
                let fields = if enforce {
                    answer::headers(names, &each, cfg.settings.legacy_headers)
                } else {
                    vec![(fields::SHADOW, answer::shadow(names, &each))]
                };
                if let (Some(rule), Some(open)) = (&route.settle, reserved) {
                    // No hold: a settling route has no concurrency limit nor leaky queue
                    // (the config refuses them).
                    let resp = origin::forward(req, env, &path, &fields).await;
                    return settling::settle_from(resp, rule, env, ctx, open);
                }
                let hold = Hold::new(&decision, &plan.object, release, cfg.settings.timeout_ms);
                return admit::forward(req, env, ctx, &path, fields, hold).await;
            }
            if !enforce {
                stats::violated(env, cfg, Some(route), (names, &each), true, Source::Store);
                let fields = [(fields::SHADOW, answer::shadow(names, &each))];
                return origin::forward(req, env, &path, &fields).await;
            }
            stats::violated(env, cfg, Some(route), (names, &each), false, Source::Store);
            return denied(cfg, names, decision, each, cache_key, now_ms);
        }
        // Refused for its deadline: nothing was charged, nothing to give back.
        Ok(ObjectResponse::Late { .. }) => ("coordinator-timeout", Why::Timeout),
        Ok(other) => {
            console_error!("tollgate: route {} got {:?}", route.name, other);
            // An answer that is not one: whether the call charged is unknown.
            ("coordinator-error", Why::Indeterminate)
        }
        Err(f) => {
            console_error!("tollgate: route {} object {}: {f}", route.name, plan.object);
            match f {
                Failure::Timeout => ("coordinator-timeout", Why::Timeout),
                Failure::Unavailable(_) => ("coordinator-unavailable", Why::Unreachable),
            }
        }
    };
    // Not decided in time, or not known to be: a reservation the object may have kept is
    // given back (a settle of one it never kept charges nothing).
    if let (Some(open), false) = (reserved, late) {
        settling::give_back(env, ctx, open);
    }
    degrade(req, env, &path, cfg, route, why).await
}

/// The 429 of an enforced denial, remembered in the deny cache.
fn denied(
    cfg: &Config,
    names: &[crate::plan::LimitName],
    decision: Decision,
    each: Vec<Decision>,
    cache_key: String,
    at_ms: u64,
) -> worker::Result<Response> {
    let resp = denial::too_many(cfg, names, &each);
    if cfg.settings.deny_cache {
        denial::remember(cache_key, at_ms, &decision, each);
    }
    resp
}

/// The coordinator failed (`why`: the problem type and the model's reason): the route's
/// `on_error` decides.
async fn degrade(
    req: Request,
    env: &Env,
    path: &str,
    cfg: &Config,
    route: &Route,
    (why, reason): (&str, Why),
) -> worker::Result<Response> {
    let behaviour = match route.on_error {
        OnError::Open => Behaviour::Open,
        OnError::Closed => Behaviour::Closed,
    };
    stats::route_degraded(env, cfg, route, behaviour, reason);
    match route.on_error {
        OnError::Open => {
            let fields = [(fields::DEGRADED, Degraded::FailOpen.value(why))];
            origin::forward(req, env, path, &fields).await
        }
        OnError::Closed => {
            let detail = "the rate limiter could not decide; retry later";
            let mut resp = problem(503, why, detail, json!({}))?;
            let h = resp.headers_mut();
            h.set("Retry-After", &route.retry_after_s.to_string())?;
            h.set(fields::DEGRADED, &Degraded::FailClosed.value(why))?;
            Ok(resp)
        }
    }
}
