//! The admin API (bearer `ADMIN_SECRET`): `GET /admin/v1/stats` (JSON) and
//! `GET /admin/v1/metrics` (Prometheus text), a key's states read or reset
//! (`POST /admin/v1/keys/read`, `/admin/v1/keys/reset`), and a key's override of its plan
//! in a policy of plans set, read or cleared (`POST /admin/v1/overrides/set`, `/read`,
//! `/clear`), kept by the key's coordinator object so that its next decision uses it (at
//! most [`crate::table::MAX_OVERRIDES`] keys per object).

use serde::{Deserialize, Serialize};
use serde_json::json;
use tollgate::MillisDecision;
use tollgate_http::bounds;
use worker::{console_log, Env, Method, Request, Response};

use crate::config::Config;
use crate::http::{api_error, authorise, json_ok, json_response, over_bound, problem, read_json};
use crate::plan::{admin_key, most_limits, Plan};
use crate::protocol::{override_name, ObjectRequest, ObjectResponse, Peek, When};
use crate::{denial, report, rpc, stats};
use tollgate::plans::Override;
use tollgate::Policy;

/// The body of `/admin/v1/keys/read` and `/admin/v1/keys/reset`: a policy and the identity
/// to look up (`key` as given to `/v1/check`, or `ip` and/or `apiKey` as a request sends, or
/// `subject`: a verified JWT's, in place of the API key).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct KeyBody {
    policy: String,
    key: Option<String>,
    ip: Option<String>,
    api_key: Option<String>,
    subject: Option<String>,
    tenant: Option<String>,
}

/// The body of `/admin/v1/overrides/*`: a policy of plans, the key (as for
/// `/admin/v1/keys/read`), and for `set` either `plan` (one of the policy's) or `limits`
/// (the key's own: one policy or a stack, no longer than the policy's longest plan).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct OverrideBody {
    policy: String,
    key: Option<String>,
    ip: Option<String>,
    api_key: Option<String>,
    subject: Option<String>,
    plan: Option<String>,
    limits: Option<Vec<String>>,
}

/// The answer of `/admin/v1/keys/read`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct KeyRead<'a> {
    policy: &'a str,
    key: &'a str,
    object: &'a str,
    stored_rows: Option<u64>,
    decision: MillisDecision,
    limits: Vec<LimitRead<'a>>,
}

/// One limit of [`KeyRead`]: its name, policy, decision and stored state.
#[derive(Serialize)]
struct LimitRead<'a> {
    name: &'a str,
    policy: String,
    decision: MillisDecision,
    state: &'a Option<tollgate::State>,
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
        (Method::Post, "/admin/v1/overrides/set") => overrides(&mut req, env, cfg, "set").await,
        (Method::Post, "/admin/v1/overrides/read") => overrides(&mut req, env, cfg, "read").await,
        (Method::Post, "/admin/v1/overrides/clear") => overrides(&mut req, env, cfg, "clear").await,
        _ => api_error(
            404,
            "not-found",
            "admin routes: GET /admin/v1/stats, GET /admin/v1/metrics, POST /admin/v1/keys/read, \
             POST /admin/v1/keys/reset, POST /admin/v1/overrides/set, /read, /clear",
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
        body.subject.as_deref(),
    ) {
        Ok(key) => key,
        Err(e) => return api_error(400, "invalid-key", &e),
    };
    // A policy of plans: the API key's plan in the key table (else the default plan; the
    // key's override applies in its object). A read carries nothing it stores.
    let key_plan = body.api_key.as_deref().and_then(|k| {
        let hash = crate::keying::sha256_hex(k.as_bytes());
        cfg.settings.key_plans.get(&hash).map(String::as_str)
    });
    let plan = Plan::for_policy_in(cfg, k, &key, body.tenant.as_deref(), key_plan);
    let object = &plan.object;
    // A read also reports the object's stored rows (counted before the peek, which itself
    // drops states it finds fresh).
    let batch = if reset {
        // Also the key's slots of its policy's longer plans (their states go too).
        let spare = plan.spare.iter().map(|slot| crate::protocol::Limit {
            slot: slot.clone(),
            policy: plan.limits[0].policy,
        });
        vec![ObjectRequest::Reset {
            limits: plan.limits.iter().cloned().chain(spare).collect(),
        }]
    } else {
        let peek = Peek {
            limits: plan.limits.clone(),
            spare: plan.spare.clone(),
            owner: plan.owner.clone(),
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
            overridden,
            ..
        }) => {
            let names = match overridden {
                Some(limits) => plan.overridden_names(cfg, &limits),
                None => plan.names.clone(),
            };
            let read = KeyRead {
                policy: &entry.name,
                key: &key,
                object,
                stored_rows,
                decision: MillisDecision::from(decision),
                limits: names
                    .iter()
                    .zip(&each)
                    .zip(&states)
                    .map(|((n, d), state)| LimitRead {
                        name: &n.name,
                        policy: n.limit.to_string(),
                        decision: MillisDecision::from(*d),
                        state,
                    })
                    .collect(),
            };
            // Written by serde_json's writer, which takes a state's 128-bit numbers (a
            // GCRA's scaled TAT) whole; a `Value` holds at most 64 bits.
            match serde_json::to_string(&read) {
                Ok(body) => json_response(200, "application/json", body),
                Err(e) => api_error(500, "unexpected", &e.to_string()),
            }
        }
        Some(ObjectResponse::Error { code, message }) => api_error(422, &code, &message),
        Some(_) => api_error(500, "unexpected", "unexpected answer"),
        None => api_error(503, "coordinator-unavailable", "unavailable: empty answer"),
    }
}

/// The override `set` asks for: a plan of `plans`, or limits of the key's own; an error
/// naming the field and the reason.
fn wanted(
    body: &OverrideBody,
    entry: &crate::config::PolicyEntry,
    plans: &crate::config::PolicyPlans,
) -> Result<Override, (String, String)> {
    match (&body.plan, &body.limits) {
        (Some(plan), None) => match plans.plans.get(plan) {
            Ok(_) => Ok(Override::Plan(plan.clone())),
            Err(_) => Err((
                "plan".into(),
                format!("no plan named {plan:?} in policies.{}.plans", entry.name),
            )),
        },
        (None, Some(texts)) => {
            let most = most_limits(plans);
            if texts.is_empty() || texts.len() > most {
                return Err((
                    "limits".into(),
                    format!(
                        "1 to {most} limits (the most a plan of policy {:?} has)",
                        entry.name
                    ),
                ));
            }
            let mut limits = Vec::with_capacity(texts.len());
            for (i, t) in texts.iter().enumerate() {
                let p: Policy = t
                    .parse()
                    .map_err(|e: tollgate::PolicyError| (format!("limits[{i}]"), e.to_string()))?;
                limits.push(p);
            }
            Ok(Override::Limits(limits))
        }
        _ => Err((
            "plan".into(),
            "give plan (one of the policy's) or limits (the key's own), not both".into(),
        )),
    }
}

/// Sets, reads or clears one key's override of its plan, in the key's coordinator.
async fn overrides(
    req: &mut Request,
    env: &Env,
    cfg: &Config,
    op: &str,
) -> worker::Result<Response> {
    let body: OverrideBody = match read_json(req).await {
        Ok(b) => b,
        Err(e) => return api_error(400, "bad-request", &e),
    };
    if let Some(Err(e)) = body.key.as_deref().map(|t| bounds::check_key("key", t)) {
        return over_bound(&e);
    }
    let Some((k, entry)) = cfg.policy(&body.policy) else {
        let detail = format!("no policy named {:?}", body.policy);
        return api_error(404, "unknown-policy", &detail);
    };
    let Some(plans) = &entry.plans else {
        let detail = format!(
            "policy: {:?} has no plans (overrides are of a plan)",
            entry.name
        );
        return problem(400, "invalid-override", &detail, json!({"field": "policy"}));
    };
    let key = match admin_key(
        cfg,
        entry,
        body.key.as_deref(),
        body.ip.as_deref(),
        body.api_key.as_deref(),
        body.subject.as_deref(),
    ) {
        Ok(key) => key,
        Err(e) => return api_error(400, "invalid-key", &e),
    };
    let owner = override_name(&entry.name, &key);
    let call = match op {
        "set" => match wanted(&body, entry, plans) {
            Ok(what) => ObjectRequest::SetOverride { owner, what },
            Err((field, reason)) => {
                let detail = format!("{field}: {reason}");
                return problem(400, "invalid-override", &detail, json!({"field": field}));
            }
        },
        "read" => ObjectRequest::GetOverride { owner },
        _ => ObjectRequest::ClearOverride { owner },
    };
    let plan = Plan::for_policy(cfg, k, &key, None);
    let answer = rpc::call(env, cfg.settings.timeout_ms, &plan.object, &call).await;
    match answer {
        Ok(ObjectResponse::Override { what }) => {
            if op != "read" {
                // This isolate's remembered denials of the key no longer hold.
                denial::forget(&plan.limits);
                console_log!(
                    "tollgate: admin override {op} {} in {}",
                    entry.name,
                    plan.object
                );
            }
            json_ok(&json!({
                "policy": entry.name,
                "key": key,
                "object": plan.object,
                "override": what,
            }))
        }
        Ok(ObjectResponse::Error { code, message }) => api_error(409, &code, &message),
        Ok(_) => api_error(500, "unexpected", "unexpected answer"),
        Err(f) => api_error(503, "coordinator-unavailable", &f.to_string()),
    }
}
