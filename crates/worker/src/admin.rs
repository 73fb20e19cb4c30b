//! The admin API (bearer `ADMIN_SECRET`): `GET /admin/v1/stats` (JSON) and
//! `GET /admin/v1/metrics` (Prometheus text), and a key's states read or reset
//! (`POST /admin/v1/keys/read`, `/admin/v1/keys/reset`).

use serde::Deserialize;
use serde_json::json;
use tollgate::MillisDecision;
use tollgate_http::bounds;
use worker::{console_log, Env, Method, Request, Response};

use crate::config::Config;
use crate::http::{api_error, authorise, json_ok, over_bound, read_json};
use crate::plan::{admin_key, Plan};
use crate::protocol::{ObjectRequest, ObjectResponse, Peek, When};
use crate::{denial, report, rpc, stats};

/// The body of `/admin/v1/keys/read` and `/admin/v1/keys/reset`: a policy and the identity
/// to look up (`key` as given to `/v1/check`, or `ip` and/or `apiKey` as a request sends).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct KeyBody {
    policy: String,
    key: Option<String>,
    ip: Option<String>,
    api_key: Option<String>,
    tenant: Option<String>,
}

/// Answers one admin call.
pub async fn handle(
    mut req: Request,
    env: &Env,
    cfg: &Config,
    path: &str,
) -> worker::Result<Response> {
    if let Some(resp) = authorise(&req, env, "ADMIN_SECRET") {
        return resp;
    }
    match (req.method(), path) {
        (Method::Get, "/admin/v1/stats") => stats_answer(env, cfg).await,
        (Method::Get, "/admin/v1/metrics") => metrics_answer(env, cfg).await,
        (Method::Post, "/admin/v1/keys/read") => key(&mut req, env, cfg, false).await,
        (Method::Post, "/admin/v1/keys/reset") => key(&mut req, env, cfg, true).await,
        _ => api_error(
            404,
            "not-found",
            "admin routes: GET /admin/v1/stats, GET /admin/v1/metrics, POST /admin/v1/keys/read, \
             POST /admin/v1/keys/reset",
        ),
    }
}

/// Every isolate's totals (after reporting this one's), or this isolate's unreported
/// counts when the stats object cannot be reached.
async fn stats_answer(env: &Env, cfg: &Config) -> worker::Result<Response> {
    let deny = denial::entries();
    let body = match stats::report(env, cfg.settings.timeout_ms).await {
        Ok((totals, in_use)) => json!({
            "scope": "global",
            "policies": report::by_policy(&totals, &in_use),
            "denyCacheEntries": deny,
        }),
        Err(f) => json!({
            "scope": "isolate",
            "error": format!("stats object {f}; these are this isolate's unreported counts"),
            "policies": report::by_policy(&stats::unreported(), &[]),
            "denyCacheEntries": deny,
        }),
    };
    json_ok(&body)
}

/// Every isolate's totals (after reporting this one's) as Prometheus text (exposition
/// format 0.0.4), rendered by the core. When the stats object cannot be reached the scrape
/// fails (503): this isolate's share alone would make the counters go down.
async fn metrics_answer(env: &Env, cfg: &Config) -> worker::Result<Response> {
    match stats::report(env, cfg.settings.timeout_ms).await {
        Ok((totals, in_use)) => {
            let mut resp = Response::ok(report::prometheus(&totals, &in_use))?;
            resp.headers_mut()
                .set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")?;
            Ok(resp)
        }
        Err(f) => api_error(503, "stats-unavailable", &format!("stats object {f}")),
    }
}

/// Reads (a peek, with the object's stored rows) or resets one key's states.
async fn key(req: &mut Request, env: &Env, cfg: &Config, reset: bool) -> worker::Result<Response> {
    let body: KeyBody = match read_json(req).await {
        Ok(b) => b,
        Err(e) => return api_error(400, "bad-request", &e),
    };
    // The same bound as the check API's: a longer key or tenant was never counted.
    for (field, text) in [("key", &body.key), ("tenant", &body.tenant)] {
        if let Some(Err(e)) = text.as_deref().map(|t| bounds::check_key(field, t)) {
            return over_bound(&e);
        }
    }
    let Some((k, entry)) = cfg.policy(&body.policy) else {
        let detail = format!("no policy named {:?}", body.policy);
        return api_error(404, "unknown-policy", &detail);
    };
    let key = match admin_key(
        cfg,
        entry,
        body.key.as_deref(),
        body.ip.as_deref(),
        body.api_key.as_deref(),
    ) {
        Ok(key) => key,
        Err(e) => return api_error(400, "invalid-key", &e),
    };
    let plan = Plan::for_policy(cfg, k, &key, body.tenant.as_deref());
    let object = &plan.object;
    // A read also reports the object's stored rows (counted before the peek, which itself
    // drops states it finds fresh).
    let batch = if reset {
        vec![ObjectRequest::Reset {
            limits: plan.limits.clone(),
        }]
    } else {
        let peek = Peek {
            limits: plan.limits.clone(),
            spare: plan.spare.clone(),
            when: When::default(),
        };
        vec![ObjectRequest::Count, ObjectRequest::Peek(peek)]
    };
    let mut answers = match rpc::send_batch(env, cfg.settings.timeout_ms, object, &batch).await {
        Ok(a) => a,
        Err(f) => return api_error(503, "coordinator-unavailable", &f.to_string()),
    };
    let stored_rows = match answers.first() {
        Some(ObjectResponse::Count { rows }) if !reset => Some(*rows),
        _ => None,
    };
    match answers.pop() {
        Some(ObjectResponse::Reset { found }) => {
            denial::forget(&plan.limits);
            console_log!("tollgate: admin reset {} in {object}", body.policy);
            json_ok(&json!({"found": found, "object": object}))
        }
        Some(ObjectResponse::Decided {
            decision,
            each,
            states,
            ..
        }) => {
            let limits = plan.names.iter().zip(&each).zip(&states);
            json_ok(&json!({
                "policy": entry.name,
                "key": key,
                "object": object,
                "storedRows": stored_rows,
                "decision": MillisDecision::from(decision),
                "limits": limits.map(|((n, d), s)| json!({
                    "name": n.name,
                    "policy": n.limit.to_string(),
                    "decision": MillisDecision::from(*d),
                    "state": s,
                })).collect::<Vec<_>>(),
            }))
        }
        Some(ObjectResponse::Error { code, message }) => api_error(422, &code, &message),
        Some(_) => api_error(500, "unexpected", "unexpected answer"),
        None => api_error(503, "coordinator-unavailable", "unavailable: empty answer"),
    }
}
