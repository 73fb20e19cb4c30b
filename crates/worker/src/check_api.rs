//! The check API (`POST /v1/check`, `/v1/peek`, `/v1/release`, `/v1/reserve`,
//! `/v1/settle`, bearer `CHECK_SECRET`): other services use the edge as their limiter, by a
//! key of their choosing. A reserve is a check whose charge the key's object keeps under
//! the `reservation` id it answers; a settle of that id with the `actual` cost gives back
//! or charges the difference (the core's rule, `tollgate::settle`), once. For a policy of
//! plans, `plan` names the caller's plan (default: the policy's default plan); the key's
//! override, if its object keeps one, applies instead.

use serde::Deserialize;
use serde_json::json;
use tollgate::metrics::Source;
use tollgate::store::fallback::Behaviour;
use tollgate::store::fallback::Why;
use tollgate::{Decision, MillisDecision};
use tollgate_http::bounds;
use worker::{console_error, Env, Method, Request, Response};

use crate::config::Config;
use crate::env::now_ms;
use crate::http::{
    api_error, authorise, json_ok, json_response, over_bound, problem, read_json, set_all,
    unavailable,
};
use crate::plan::{LimitName, Plan};
use crate::protocol::{Check, ObjectRequest, ObjectResponse, Peek, Release, When};
use crate::rpc::Failure;
use crate::{answer, denial, keying, lease, rpc, stats};

/// Which call of the API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `/v1/check`: decide and charge.
    Check,
    /// `/v1/peek`: decide for cost 0.
    Peek,
    /// `/v1/release`: release concurrency slots.
    Release,
    /// `/v1/reserve`: a check that keeps its charge as a reservation.
    Reserve,
    /// `/v1/settle`: settle a reservation with the real cost.
    Settle,
}

/// The endpoint at `path`, if it is one of the API's.
pub fn endpoint(path: &str) -> Option<Endpoint> {
    match path {
        "/v1/check" => Some(Endpoint::Check),
        "/v1/peek" => Some(Endpoint::Peek),
        "/v1/release" => Some(Endpoint::Release),
        "/v1/reserve" => Some(Endpoint::Reserve),
        "/v1/settle" => Some(Endpoint::Settle),
        _ => None,
    }
}

/// The body of every call (`reservation`, `actual` and `overage` are a settle's).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckBody {
    key: String,
    policy: String,
    #[serde(default = "one")]
    cost: u64,
    tenant: Option<String>,
    plan: Option<String>,
    now: Option<u64>,
    reservation: Option<String>,
    actual: Option<u64>,
    overage: Option<String>,
}

fn one() -> u64 {
    1
}

/// Whether a key or tenant has text to count by: not empty, no control characters. Its
/// length is the core's bound ([`tollgate_http::bounds::check_key`]).
fn valid_text(s: &str) -> bool {
    !s.is_empty() && !s.chars().any(char::is_control)
}

/// Answers one call of the API.
pub async fn handle(
    mut req: Request,
    env: &Env,
    cfg: &Config,
    endpoint: Endpoint,
) -> worker::Result<Response> {
    if req.method() != Method::Post {
        return api_error(405, "method-not-allowed", "use POST");
    }
    if let Some(resp) = authorise(&req, env, "CHECK_SECRET") {
        return resp;
    }
    let body: CheckBody = match read_json(&mut req).await {
        Ok(b) => b,
        Err(e) => return api_error(400, "bad-request", &e),
    };
    // The key is hashed before it names anything (`ext:<sha-256>`), the tenant is stored as
    // given in its window's slot: both are held to the core's bound, one rule for every
    // front end.
    if let Err(e) = bounds::check_key("key", &body.key) {
        return over_bound(&e);
    }
    if let Some(Err(e)) = body
        .tenant
        .as_deref()
        .map(|t| bounds::check_key("tenant", t))
    {
        return over_bound(&e);
    }
    if !valid_text(&body.key) {
        let detail = "key must not be empty or hold control characters";
        return api_error(400, "invalid-key", detail);
    }
    if body.tenant.as_deref().is_some_and(|t| !valid_text(t)) {
        let detail = "tenant must not be empty or hold control characters";
        return api_error(400, "invalid-tenant", detail);
    }
    if body.now.is_some() && !cfg.settings.test_clock {
        let detail = "\"now\" is accepted only when settings.test_clock is on";
        return api_error(400, "test-clock-disabled", detail);
    }
    let Some((k, entry)) = cfg.policy(&body.policy) else {
        let detail = format!("no policy named {:?}", body.policy);
        return api_error(404, "unknown-policy", &detail);
    };

    if let Some(name) = &body.plan {
        let known = entry.plans.as_ref().map(|p| p.plans.get(name).is_ok());
        if known != Some(true) {
            let detail = match known {
                None => format!("plan: policy {:?} has no plans", entry.name),
                Some(_) => format!(
                    "plan: no plan named {name:?} in policies.{}.plans",
                    entry.name
                ),
            };
            return problem(400, "invalid-plan", &detail, json!({"field": "plan"}));
        }
    }

    // The plan: only a check counts in a tenant's window.
    let key = keying::external_key(&body.key);
    let checking = matches!(endpoint, Endpoint::Check | Endpoint::Reserve);
    let tenant = body
        .tenant
        .as_deref()
        .filter(|_| checking || endpoint == Endpoint::Settle);
    let plan = Plan::for_policy_in(cfg, k, &key, tenant, body.plan.as_deref());
    // A denial holds for its cost and plan (a smaller cost, another plan, might pass).
    let kind = format!("api\n{}\n{}", body.cost, body.plan.as_deref().unwrap_or(""));
    let cache_key = plan.cache_key(&kind);
    let use_cache = endpoint == Endpoint::Check && body.now.is_none() && cfg.settings.deny_cache;
    if endpoint == Endpoint::Reserve {
        for l in &plan.limits {
            if let Err(e) = tollgate::settle::check_reservable(&l.policy) {
                return api_error(422, e.code(), &e.to_string());
            }
        }
    }
    let reservation = (endpoint == Endpoint::Reserve).then(crate::settling::reservation_id);
    if use_cache {
        if let Some((decision, each)) = denial::cached(&cache_key, now_ms()) {
            stats::decided(env, &entry.name, None, &decision, false, Source::DenyCache);
            return decision_response(cfg, &plan.names, &decision, &each, None);
        }
    }

    // The object's answer.
    let when = When {
        now_ms: body.now,
        deadline_ms: Some(lease::deadline(now_ms(), cfg.settings.timeout_ms)),
    };
    let limits = plan.limits.clone();
    let call = match endpoint {
        Endpoint::Check | Endpoint::Reserve => ObjectRequest::Check(Check {
            reservation: reservation.clone(),
            spare: plan.spare.clone(),
            owner: plan.owner.clone(),
            limits,
            cost: body.cost,
            lease: None,
            lease_ms: 0,
            route: None,
            when,
        }),
        Endpoint::Peek => ObjectRequest::Peek(Peek {
            limits,
            spare: plan.spare.clone(),
            owner: plan.owner.clone(),
            when,
        }),
        Endpoint::Release => ObjectRequest::Release(Release {
            limits,
            cost: body.cost,
            lease: None,
            when,
        }),
        Endpoint::Settle => match settle_request(&body, limits, when) {
            Ok(r) => r,
            Err(resp) => return resp,
        },
    };
    match rpc::call(env, cfg.settings.timeout_ms, &plan.object, &call).await {
        Ok(ObjectResponse::Decided {
            decision,
            each,
            now_ms,
            overridden,
            ..
        }) => {
            let names = match overridden {
                Some(limits) => plan.overridden_names(cfg, &limits),
                None => plan.names.clone(),
            };
            if checking {
                stats::decided(env, &entry.name, None, &decision, false, Source::Store);
                if use_cache {
                    denial::remember(cache_key, now_ms, &decision, each.clone());
                }
            }
            let reserved = reservation.as_deref().filter(|_| decision.allowed);
            decision_response(cfg, &names, &decision, &each, reserved)
        }
        Ok(ObjectResponse::Settled {
            refunded,
            charged,
            unpaid,
        }) => json_ok(&json!({"refunded": refunded, "charged": charged, "unpaid": unpaid})),
        Ok(ObjectResponse::NotReserved) => api_error(
            404,
            "unknown-reservation",
            "no reservation of this id in this key's coordinator (never admitted, or \
             forgotten: it then stays charged at its estimate)",
        ),
        Ok(ObjectResponse::Released) => json_ok(&json!({"released": true})),
        Ok(ObjectResponse::Reset { found }) => json_ok(&json!({"found": found})),
        Ok(ObjectResponse::Error { code, message }) => api_error(422, &code, &message),
        Ok(ObjectResponse::Late { .. }) => {
            degraded(env, &entry.name, Why::Timeout);
            unavailable("timed out")
        }
        Ok(
            other @ (ObjectResponse::Count { .. }
            | ObjectResponse::Stats { .. }
            | ObjectResponse::Override { .. }),
        ) => api_error(500, "unexpected", &format!("unexpected answer {other:?}")),
        Err(f) => {
            console_error!("tollgate: check API object {}: {f}", plan.object);
            let why = match f {
                Failure::Timeout => Why::Timeout,
                Failure::Unavailable(_) => Why::Unreachable,
            };
            degraded(env, &entry.name, why);
            unavailable(&f.to_string())
        }
    }
}

/// The settle of `body` on `limits`: `reservation` and `actual` required, `overage`
/// `"debt"` (the default) or `"up-to-limit"`; otherwise the 400 naming the field.
fn settle_request(
    body: &CheckBody,
    limits: Vec<crate::protocol::Limit>,
    when: When,
) -> Result<ObjectRequest, worker::Result<Response>> {
    let Some(reservation) = body.reservation.clone() else {
        return Err(api_error(400, "bad-request", "reservation: required"));
    };
    let Some(actual) = body.actual else {
        return Err(api_error(400, "bad-request", "actual: required"));
    };
    let up_to_limit = match body.overage.as_deref() {
        None | Some("debt") => false,
        Some("up-to-limit") => true,
        Some(other) => {
            let detail = format!("overage: {other:?} is not \"debt\" or \"up-to-limit\"");
            return Err(api_error(400, "bad-request", &detail));
        }
    };
    Ok(ObjectRequest::Settle(crate::protocol::Settle {
        limits,
        reservation,
        actual,
        up_to_limit,
        when,
    }))
}

/// Counts a check the coordinator could not decide (`why`): the API answers 503 and admits
/// nothing, so it counts as a denial by the fallback after a fail-closed failure.
fn degraded(env: &Env, policy: &str, why: Why) {
    stats::failed(policy, None, Behaviour::Closed, why);
    let denied = crate::counters::fallback_decision(false);
    stats::decided(env, policy, None, &denied, false, Source::Fallback);
}

/// The core's decision in milliseconds, each limit's (named), and the `RateLimit` fields.
fn decision_response(
    cfg: &Config,
    names: &[LimitName],
    decision: &Decision,
    each: &[Decision],
    reservation: Option<&str>,
) -> worker::Result<Response> {
    let mut v = serde_json::to_value(MillisDecision::from(*decision)).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        if let Some(id) = reservation {
            o.insert("reservation".into(), id.into());
        }
        let per: Vec<serde_json::Value> = names
            .iter()
            .zip(each)
            .map(|(n, d)| {
                let mut x = serde_json::to_value(MillisDecision::from(*d)).unwrap_or_default();
                if let Some(xo) = x.as_object_mut() {
                    xo.insert("name".into(), n.name.clone().into());
                }
                x
            })
            .collect();
        o.insert("policies".into(), per.into());
    }
    let mut resp = json_response(200, "application/json", v.to_string())?;
    set_all(
        resp.headers_mut(),
        &answer::headers(names, each, cfg.settings.legacy_headers),
    )?;
    Ok(resp)
}
