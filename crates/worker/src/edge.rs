//! The fetch handler: config, routing, keying, the coordinator call with its timeout, the
//! deny cache, and the answers. Every rule lives in the plain modules; this is glue.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use futures_util::future::{select, Either};
use serde::Deserialize;
use serde_json::json;
use tollgate::fair_share::skips_tenant_window;
use tollgate::{Decision, MillisDecision};
use worker::{
    console_error, console_log, event, Context, Date, Delay, Env, Headers, Method, Request,
    Response,
};

use crate::admit::Hold;
use crate::answer::{self, DenyCache, LimitName, Stats};
use crate::config::{
    Config, ConfigError, KeyKind, Mode, OnError, PolicyEntry, Route, OBJECT_PER_KEY_VAR,
};
use crate::keying::{self, Identity};
use crate::origin;
use crate::table::{Limit, ObjectRequest, ObjectResponse, Op};

/// The Durable Object binding.
pub const BINDING: &str = "LIMITER";
/// The largest JSON body the check and admin APIs read.
const MAX_BODY: usize = 16 * 1024;

thread_local! {
    static CONFIG: RefCell<Option<Rc<Result<Config, ConfigError>>>> = const { RefCell::new(None) };
    static DENY: RefCell<DenyCache> = RefCell::new(DenyCache::default());
    static STATS: RefCell<Stats> = RefCell::new(Stats::default());
}

/// A string binding (var or secret), if set and not empty.
pub fn string_binding(env: &Env, name: &str) -> Option<String> {
    let v = env
        .secret(name)
        .map(|s| s.to_string())
        .or_else(|_| env.var(name).map(|v| v.to_string()))
        .ok()
        .or_else(|| {
            env.object_var::<serde_json::Value>(name)
                .ok()
                .map(|v| v.to_string())
        })?;
    (!v.is_empty()).then_some(v)
}

/// The validated config of this isolate: parsed once, on the first request.
pub fn config(env: &Env) -> Rc<Result<Config, ConfigError>> {
    CONFIG.with(|c| {
        let mut c = c.borrow_mut();
        if let Some(cfg) = c.as_ref() {
            return cfg.clone();
        }
        let mut parsed = match string_binding(env, "TOLLGATE_CONFIG") {
            Some(text) => Config::parse(&text),
            None => Config::parse(crate::config::BUNDLED),
        };
        // The load test's naive design, set beside the config (see `bench/run.sh`).
        if let (Ok(c), Some(names)) = (&mut parsed, string_binding(env, OBJECT_PER_KEY_VAR)) {
            if let Err(e) = c.objects_per_key(&names) {
                parsed = Err(e);
            }
        }
        if let Err(e) = &parsed {
            console_error!("tollgate: {e}");
        }
        let rc = Rc::new(parsed);
        *c = Some(rc.clone());
        rc
    })
}

fn now_ms() -> u64 {
    Date::now().as_millis()
}

fn json_response(status: u16, content_type: &str, body: String) -> worker::Result<Response> {
    let headers = Headers::new();
    headers.set("Content-Type", content_type)?;
    Ok(worker::ResponseBuilder::new()
        .with_status(status)
        .with_headers(headers)
        .fixed(body.into_bytes()))
}

/// A problem document (RFC 9457) for errors of the limiter itself.
fn problem(
    status: u16,
    kind: &str,
    detail: &str,
    extra: serde_json::Value,
) -> worker::Result<Response> {
    let mut resp = json_response(
        status,
        "application/problem+json",
        answer::problem(status, kind, detail, extra),
    )?;
    resp.headers_mut().set("Cache-Control", "no-store")?;
    Ok(resp)
}

#[event(fetch)]
async fn fetch(req: Request, env: Env, ctx: Context) -> worker::Result<Response> {
    let cfg = config(&env);
    let cfg = match cfg.as_ref() {
        Ok(c) => c,
        Err(e) => {
            // Logged once, when the config was read (see `config`).
            return problem(
                500,
                "invalid-config",
                &e.to_string(),
                json!({"field": e.field}),
            );
        }
    };
    let path = req.path();
    let resp = match path.as_str() {
        "/v1/check" => api(req, &env, cfg, Op::Check).await,
        "/v1/peek" => api(req, &env, cfg, Op::Peek).await,
        "/v1/release" => api(req, &env, cfg, Op::Release).await,
        p if p.starts_with("/admin/") => admin(req, &env, cfg, p).await,
        _ => limited(req, &env, &ctx, cfg).await,
    };
    maybe_report(&env, &ctx, cfg);
    resp
}

// ------------------------------------------------------------------ stats

/// The object that keeps the per-policy stats of every isolate.
const STATS_OBJECT: &str = "tollgate#stats";

/// Sends this isolate's counters to the stats object (adding them there) and returns the
/// totals; on failure the counters are kept for the next report.
async fn report(env: &Env, timeout_ms: u64) -> Result<BTreeMap<String, answer::Counters>, Failure> {
    let counters = STATS.with(|s| std::mem::take(&mut s.borrow_mut().by_policy));
    let req = ObjectRequest {
        counters: counters.clone(),
        ..ObjectRequest::new(Op::Report, Vec::new(), 0)
    };
    let result = send_batch(env, timeout_ms, STATS_OBJECT, std::slice::from_ref(&req)).await;
    match result.map(|mut a| a.pop()) {
        Ok(Some(ObjectResponse::Stats { by_policy })) => Ok(by_policy),
        other => {
            STATS.with(|s| answer::merge(&mut s.borrow_mut().by_policy, &counters));
            match other {
                Err(f) => Err(f),
                Ok(a) => Err(Failure::Unavailable(format!("stats object answered {a:?}"))),
            }
        }
    }
}

/// Reports in the background (after the response) every `stats_flush_ms`.
fn maybe_report(env: &Env, ctx: &Context, cfg: &Config) {
    let now = now_ms();
    let due = STATS.with(|s| {
        let mut s = s.borrow_mut();
        if s.last_flush_ms == 0 {
            s.last_flush_ms = now;
        }
        let due = !s.by_policy.is_empty()
            && now.saturating_sub(s.last_flush_ms) >= cfg.settings.stats_flush_ms;
        if due {
            s.last_flush_ms = now;
        }
        due
    });
    if due {
        let env = env.clone();
        let timeout_ms = cfg.settings.timeout_ms;
        ctx.wait_until(async move {
            if let Err(f) = report(&env, timeout_ms).await {
                console_error!("tollgate: stats report: {f}");
            }
        });
    }
}

// ------------------------------------------------------------------ coordinator calls

/// Why the coordinator could not decide.
#[derive(Debug)]
pub(crate) enum Failure {
    /// No answer within `settings.timeout_ms`.
    Timeout,
    /// The binding is missing, the call failed, or the object answered an error.
    Unavailable(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Timeout => f.write_str("timed out"),
            Failure::Unavailable(why) => write!(f, "unavailable: {why}"),
        }
    }
}

/// The object deciding `key` for policies of `group`.
fn object_name(cfg: &Config, group: usize, key: &str) -> String {
    let g = &cfg.groups[group];
    if g.object_per_key {
        format!("{}#k:{}", g.name, key)
    } else {
        format!("{}#{}", g.name, keying::shard_of(key, g.shards))
    }
}

#[wasm_bindgen::prelude::wasm_bindgen]
extern "C" {
    /// A Durable Object stub seen through Workers RPC.
    type LimiterRpc;
    #[wasm_bindgen::prelude::wasm_bindgen(method, catch)]
    fn decide(this: &LimiterRpc, body: &str) -> Result<js_sys::Promise, wasm_bindgen::JsValue>;
}

fn rpc_error(e: &wasm_bindgen::JsValue) -> String {
    use wasm_bindgen::JsCast;
    match e.dyn_ref::<js_sys::Error>() {
        Some(err) => String::from(err.message()),
        None => format!("{e:?}"),
    }
}

/// Sends a batch of requests to one object (one round trip), with the timeout.
pub(crate) async fn send_batch(
    env: &Env,
    timeout_ms: u64,
    object: &str,
    reqs: &[ObjectRequest],
) -> Result<Vec<ObjectResponse>, Failure> {
    let call = async {
        let ns = env
            .durable_object(BINDING)
            .map_err(|e| Failure::Unavailable(format!("binding {BINDING}: {e}")))?;
        let stub = ns
            .id_from_name(object)
            .and_then(|id| id.get_stub())
            .map_err(|e| Failure::Unavailable(e.to_string()))?;
        let body = serde_json::to_string(reqs).map_err(|e| Failure::Unavailable(e.to_string()))?;
        // Workers RPC (`stub.decide(json)`), served by js/entry.mjs's Limiter class.
        let rpc: LimiterRpc = stub.into_rpc();
        let promise = rpc
            .decide(&body)
            .map_err(|e| Failure::Unavailable(format!("{e:?}")))?;
        let text = wasm_bindgen_futures::JsFuture::from(promise)
            .await
            .map_err(|e| Failure::Unavailable(rpc_error(&e)))?
            .as_string()
            .ok_or_else(|| Failure::Unavailable("object answered a non-string".into()))?;
        let answers = serde_json::from_str::<Vec<ObjectResponse>>(&text)
            .map_err(|e| Failure::Unavailable(format!("object answer: {e}")))?;
        if answers.len() != reqs.len() {
            return Err(Failure::Unavailable(format!(
                "object answered {} of {} requests",
                answers.len(),
                reqs.len()
            )));
        }
        Ok(answers)
    };
    let timeout = Delay::from(Duration::from_millis(timeout_ms));
    match select(Box::pin(call), timeout).await {
        Either::Left((r, _)) => r,
        Either::Right(_) => Err(Failure::Timeout),
    }
}

/// One request to one object. (Coalescing concurrent requests of an isolate into one call
/// would share the round trip, but Workers tie I/O and promise resolution to the request
/// that started them: a request woken by another request's call is reported as hung. So
/// every request makes its own call; the object still accepts batches.)
async fn call_object(
    env: &Env,
    cfg: &Config,
    object: &str,
    req: &ObjectRequest,
) -> Result<ObjectResponse, Failure> {
    let mut answers = send_batch(
        env,
        cfg.settings.timeout_ms,
        object,
        std::slice::from_ref(req),
    )
    .await?;
    answers
        .pop()
        .ok_or_else(|| Failure::Unavailable("empty answer".into()))
}

// ------------------------------------------------------------------ the limited path

fn slot(entry: &PolicyEntry, index: usize, key: &str) -> String {
    format!("{}|{}|{}", entry.name, index, key)
}

fn tenant_slot(entry: &PolicyEntry, key: &str, tenant: &str) -> String {
    format!("{}|t|{}|{}", entry.name, key, tenant)
}

/// The slots of `names` (a route's or a policy's limits), each under its policy's key.
fn limits_for(
    cfg: &Config,
    names: &[LimitName],
    key_of: impl Fn(&PolicyEntry) -> String,
    tenant: Option<&str>,
) -> Vec<Limit> {
    let mut out = Vec::with_capacity(names.len());
    let mut index = 0;
    let mut last = usize::MAX;
    for n in names {
        if n.policy != last {
            index = 0;
            last = n.policy;
        }
        let e = &cfg.policies[n.policy];
        let key = key_of(e);
        let slot = if n.tenant {
            tenant_slot(e, &key, tenant.unwrap_or_default())
        } else {
            slot(e, index, &key)
        };
        out.push(Limit {
            slot,
            policy: n.limit,
        });
        index += 1;
    }
    out
}

fn set_all(headers: &Headers, fields: &[(&'static str, String)]) -> worker::Result<()> {
    for (k, v) in fields {
        headers.set(k, v)?;
    }
    Ok(())
}

/// `Retry-After` of a denial: the longest wait of the limits that denied (at least 1 s).
fn retry_after(each: &[Decision]) -> u64 {
    each.iter()
        .filter_map(tollgate::headers::retry_after)
        .max()
        .unwrap_or(1)
}

/// The 429: rate-limit fields, `Retry-After`, `Cache-Control: no-store`, problem body.
fn too_many(
    cfg: &Config,
    names: &[LimitName],
    each: &[Decision],
    from_cache: bool,
) -> worker::Result<Response> {
    let fields = answer::headers(names, each, cfg.settings.legacy_headers);
    let (body, headers) = render_429(&fields, names, each, from_cache)?;
    Ok(worker::ResponseBuilder::new()
        .with_status(429)
        .with_headers(headers)
        .fixed(body))
}

/// The body and every header of a 429 with these rate-limit `fields`.
fn render_429(
    fields: &[(&'static str, String)],
    names: &[LimitName],
    each: &[Decision],
    from_cache: bool,
) -> worker::Result<(Vec<u8>, Headers)> {
    let retry = retry_after(each);
    let violated = answer::violated(names, each);
    let body = answer::quota_exceeded(&violated, retry).into_bytes();
    let h = Headers::new();
    h.set("Content-Type", "application/problem+json")?;
    set_all(&h, fields)?;
    h.set("Retry-After", &retry.to_string())?;
    h.set("Cache-Control", "no-store")?;
    if from_cache {
        h.set("Tollgate-Deny-Cache", "hit")?;
    }
    Ok((body, h))
}

/// A cached denial's 429 as last rendered, reused while it would render the same (its
/// fields change about once a second, as the wait counts down): a deny-cache hit then
/// formats no body and sets no header one by one.
struct Rendered {
    fields: Vec<(&'static str, String)>,
    retry: u64,
    body: Vec<u8>,
    /// Every header of the answer. The runtime copies them into each response.
    headers: Headers,
}

/// Rendered 429s kept before all are dropped (they are rebuilt on the next hit).
const RENDERED_MAX: usize = 4096;

thread_local! {
    static RENDERED: RefCell<std::collections::HashMap<String, Rendered>> = RefCell::new(Default::default());
}

/// The 429 of a deny-cache hit: the same answer as [`too_many`] (with
/// `Tollgate-Deny-Cache: hit`), built from the last rendering of this cache entry when its
/// fields are unchanged.
fn cached_too_many(
    cfg: &Config,
    names: &[LimitName],
    each: &[Decision],
    cache_key: String,
) -> worker::Result<Response> {
    let fields = answer::headers(names, each, cfg.settings.legacy_headers);
    let retry = retry_after(each);
    let reuse = RENDERED.with(|r| {
        r.borrow()
            .get(&cache_key)
            .filter(|x| x.retry == retry && x.fields == fields)
            .map(|x| (x.body.clone(), x.headers.clone()))
    });
    let (body, headers) = match reuse {
        Some(hit) => hit,
        None => {
            let (body, headers) = render_429(&fields, names, each, true)?;
            RENDERED.with(|r| {
                let mut r = r.borrow_mut();
                if r.len() >= RENDERED_MAX {
                    r.clear();
                }
                r.insert(
                    cache_key,
                    Rendered {
                        fields,
                        retry,
                        body: body.clone(),
                        headers: headers.clone(),
                    },
                );
            });
            (body, headers)
        }
    };
    Ok(worker::ResponseBuilder::new()
        .with_status(429)
        .with_headers(headers)
        .fixed(body))
}

fn count_policies(route: &Route, cfg: &Config, f: impl Fn(&mut answer::Counters)) {
    STATS.with(|s| {
        let mut s = s.borrow_mut();
        for &k in &route.policies {
            s.count(&cfg.policies[k].name, &f);
        }
    });
}

fn count_violated(
    names: &[LimitName],
    each: &[Decision],
    cfg: &Config,
    f: impl Fn(&mut answer::Counters),
) {
    STATS.with(|s| {
        let mut s = s.borrow_mut();
        let mut seen = Vec::new();
        for (n, d) in names.iter().zip(each) {
            if !d.allowed && !seen.contains(&n.policy) {
                seen.push(n.policy);
                s.count(&cfg.policies[n.policy].name, &f);
            }
        }
    });
}

async fn limited(req: Request, env: &Env, ctx: &Context, cfg: &Config) -> worker::Result<Response> {
    let method = req.method().to_string();
    // Routed and forwarded as the origin would read it (see `route`).
    let path = match crate::route::normalize(&req.path()) {
        Ok(p) => p,
        Err(e) => return problem(400, "invalid-path", &e.to_string(), json!({})),
    };
    let Some(route) = crate::route::find(&cfg.routes, &method, &path) else {
        return origin::forward(req, env, &path, &[]).await;
    };
    if route.exempt {
        return origin::forward(req, env, &path, &[]).await;
    }
    let id = match keying::identify(&cfg.settings, |n| req.headers().get(n).ok().flatten()) {
        Ok(id) => id,
        Err(e) => {
            return problem(
                400,
                "invalid-header",
                &e.to_string(),
                json!({"header": e.header()}),
            )
        }
    };
    let with_tenant = !skips_tenant_window(id.tenant.as_deref());
    let names = answer::limit_names(cfg, route, with_tenant);
    let limits = limits_for(
        cfg,
        &names,
        |e| keying::key_for(e.key, &id),
        id.tenant.as_deref(),
    );
    let Some(group) = route.group else {
        return origin::forward(req, env, &path, &[]).await;
    };
    let enforce = route.mode == Mode::Enforce;
    let cache_key = format!("{}\n{}", route.name, join_slots(&limits));

    if enforce && cfg.settings.deny_cache {
        if let Some((_, each)) = DENY.with(|d| d.borrow_mut().get(&cache_key, now_ms())) {
            count_violated(&names, &each, cfg, |c| c.deny_cache += 1);
            return cached_too_many(cfg, &names, &each, cache_key);
        }
    }
    let first = &cfg.policies[route.policies[0]];
    let object = object_name(cfg, group, &keying::key_for(first.key, &id));

    let call = ObjectRequest {
        lease: crate::admit::lease_for(&names),
        lease_ms: cfg.settings.lease_ms,
        deadline_ms: Some(crate::lease::deadline(now_ms(), cfg.settings.timeout_ms)),
        ..ObjectRequest::new(Op::Check, limits, route.cost)
    };
    match call_object(env, cfg, &object, &call).await {
        Ok(ObjectResponse::Decided {
            decision,
            each,
            now_ms,
            ..
        }) => {
            if decision.allowed {
                count_policies(route, cfg, |c| c.admitted += 1);
                let fields = if enforce {
                    answer::headers(&names, &each, cfg.settings.legacy_headers)
                } else {
                    vec![("Tollgate-Shadow", "allowed".to_string())]
                };
                let hold = Hold::new(&decision, &object, &call, cfg.settings.timeout_ms);
                crate::admit::forward(req, env, ctx, &path, fields, hold).await
            } else if !enforce {
                count_violated(&names, &each, cfg, |c| c.shadow_denied += 1);
                let violated = answer::violated(&names, &each).join(",");
                let fields = [(
                    "Tollgate-Shadow",
                    format!("denied; policies=\"{violated}\""),
                )];
                origin::forward(req, env, &path, &fields).await
            } else {
                count_violated(&names, &each, cfg, |c| c.denied += 1);
                if cfg.settings.deny_cache {
                    DENY.with(|d| {
                        d.borrow_mut()
                            .put(cache_key, now_ms, &decision, each.clone())
                    });
                }
                too_many(cfg, &names, &each, false)
            }
        }
        Ok(ObjectResponse::Late { .. }) => {
            degrade(req, env, &path, cfg, route, "coordinator-timeout").await
        }
        Ok(other) => {
            console_error!("tollgate: route {} got {:?}", route.name, other);
            degrade(req, env, &path, cfg, route, "coordinator-error").await
        }
        Err(f) => {
            console_error!("tollgate: route {} object {object}: {f}", route.name);
            let why = match f {
                Failure::Timeout => "coordinator-timeout",
                Failure::Unavailable(_) => "coordinator-unavailable",
            };
            degrade(req, env, &path, cfg, route, why).await
        }
    }
}

fn join_slots(limits: &[Limit]) -> String {
    limits
        .iter()
        .map(|l| l.slot.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The coordinator failed: the route's `on_error` decides.
async fn degrade(
    req: Request,
    env: &Env,
    path: &str,
    cfg: &Config,
    route: &Route,
    why: &str,
) -> worker::Result<Response> {
    count_policies(route, cfg, |c| c.degraded += 1);
    match route.on_error {
        OnError::Open => {
            let fields = [("Tollgate-Degraded", format!("fail-open; reason={why}"))];
            origin::forward(req, env, path, &fields).await
        }
        OnError::Closed => {
            let mut resp = problem(
                503,
                why,
                "the rate limiter could not decide; retry later",
                json!({}),
            )?;
            let h = resp.headers_mut();
            h.set("Retry-After", &route.retry_after_s.to_string())?;
            h.set("Tollgate-Degraded", &format!("fail-closed; reason={why}"))?;
            Ok(resp)
        }
    }
}

// ------------------------------------------------------------------ the check API

fn bearer_ok(req: &Request, secret: &str) -> bool {
    let got = req
        .headers()
        .get("authorization")
        .ok()
        .flatten()
        .unwrap_or_default();
    let Some(token) = got.strip_prefix("Bearer ") else {
        return false;
    };
    // Constant time in the secret's length.
    token.len() == secret.len()
        && token
            .bytes()
            .zip(secret.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

async fn authorise(
    req: &Request,
    env: &Env,
    secret_name: &str,
) -> Option<worker::Result<Response>> {
    let Some(secret) = string_binding(env, secret_name) else {
        return Some(problem(
            403,
            "api-disabled",
            &format!("set the {secret_name} secret to enable this API"),
            json!({"error": "api-disabled"}),
        ));
    };
    if !bearer_ok(req, &secret) {
        let mut resp = problem(
            401,
            "unauthorized",
            "Authorization: Bearer <secret> is missing or wrong",
            json!({"error": "unauthorized"}),
        );
        if let Ok(r) = resp.as_mut() {
            let _ = r.headers_mut().set("WWW-Authenticate", "Bearer");
        }
        return Some(resp);
    }
    None
}

async fn read_json<T: for<'de> Deserialize<'de>>(req: &mut Request) -> Result<T, String> {
    let bytes = req.bytes().await.map_err(|e| e.to_string())?;
    if bytes.len() > MAX_BODY {
        return Err(format!("body is {} bytes; at most {MAX_BODY}", bytes.len()));
    }
    serde_json::from_slice(&bytes).map_err(|e| e.to_string())
}

fn api_error(status: u16, code: &str, detail: &str) -> worker::Result<Response> {
    problem(status, code, detail, json!({"error": code}))
}

/// The body of `/v1/check`, `/v1/peek` and `/v1/release`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckBody {
    key: String,
    policy: String,
    #[serde(default = "one")]
    cost: u64,
    tenant: Option<String>,
    now: Option<u64>,
}

fn one() -> u64 {
    1
}

fn valid_text(s: &str, max: usize) -> bool {
    !s.is_empty() && s.len() <= max && !s.chars().any(char::is_control)
}

async fn api(mut req: Request, env: &Env, cfg: &Config, op: Op) -> worker::Result<Response> {
    if req.method() != Method::Post {
        return api_error(405, "method-not-allowed", "use POST");
    }
    if let Some(resp) = authorise(&req, env, "CHECK_SECRET").await {
        return resp;
    }
    let body: CheckBody = match read_json(&mut req).await {
        Ok(b) => b,
        Err(e) => return api_error(400, "bad-request", &e),
    };
    let max = cfg.settings.max_header_bytes;
    if !valid_text(&body.key, max) {
        return api_error(
            400,
            "invalid-key",
            &format!("key must be 1-{max} bytes without control characters"),
        );
    }
    if let Some(t) = &body.tenant {
        if !valid_text(t, max) {
            return api_error(
                400,
                "invalid-tenant",
                &format!("tenant must be 1-{max} bytes without control characters"),
            );
        }
    }
    if body.now.is_some() && !cfg.settings.test_clock {
        return api_error(
            400,
            "test-clock-disabled",
            "\"now\" is accepted only when settings.test_clock is on",
        );
    }
    let Some((k, entry)) = cfg.policy(&body.policy) else {
        return api_error(
            404,
            "unknown-policy",
            &format!("no policy named {:?}", body.policy),
        );
    };
    let key = keying::external_key(&body.key);
    let tenant = if op == Op::Check && !skips_tenant_window(body.tenant.as_deref()) {
        body.tenant.clone()
    } else {
        None
    };
    let names = policy_names(cfg, k, tenant.is_some());
    let limits = limits_for(cfg, &names, |_| key.clone(), tenant.as_deref());
    let object = object_name(cfg, entry.group, &key);
    // A denial holds for this cost; a smaller one might pass sooner.
    let cache_key = format!("api\n{}\n{}", body.cost, join_slots(&limits));
    let use_cache = op == Op::Check && body.now.is_none() && cfg.settings.deny_cache;
    if use_cache {
        if let Some((decision, each)) = DENY.with(|d| d.borrow_mut().get(&cache_key, now_ms())) {
            STATS.with(|s| s.borrow_mut().count(&entry.name, |c| c.deny_cache += 1));
            return decision_response(cfg, &names, &decision, &each);
        }
    }
    let call = ObjectRequest {
        now_ms: body.now,
        deadline_ms: Some(crate::lease::deadline(now_ms(), cfg.settings.timeout_ms)),
        ..ObjectRequest::new(op, limits, body.cost)
    };
    match call_object(env, cfg, &object, &call).await {
        Ok(ObjectResponse::Decided {
            decision,
            each,
            now_ms,
            ..
        }) => {
            if op == Op::Check {
                STATS.with(|s| {
                    s.borrow_mut().count(&entry.name, |c| {
                        if decision.allowed {
                            c.admitted += 1
                        } else {
                            c.denied += 1
                        }
                    })
                });
                if use_cache {
                    DENY.with(|d| {
                        d.borrow_mut()
                            .put(cache_key, now_ms, &decision, each.clone())
                    });
                }
            }
            decision_response(cfg, &names, &decision, &each)
        }
        Ok(ObjectResponse::Released) => json_response(
            200,
            "application/json",
            json!({"released": true}).to_string(),
        ),
        Ok(ObjectResponse::Reset { found }) => {
            json_response(200, "application/json", json!({"found": found}).to_string())
        }
        Ok(ObjectResponse::Error { code, message }) => api_error(422, &code, &message),
        Ok(ObjectResponse::Late { .. }) => {
            STATS.with(|s| s.borrow_mut().count(&entry.name, |c| c.degraded += 1));
            let mut resp = api_error(503, "coordinator-unavailable", "timed out")?;
            resp.headers_mut().set("Retry-After", "1")?;
            Ok(resp)
        }
        Ok(other @ (ObjectResponse::Count { .. } | ObjectResponse::Stats { .. })) => {
            api_error(500, "unexpected", &format!("unexpected answer {other:?}"))
        }
        Err(f) => {
            console_error!("tollgate: check API object {object}: {f}");
            STATS.with(|s| s.borrow_mut().count(&entry.name, |c| c.degraded += 1));
            let mut resp = api_error(503, "coordinator-unavailable", &f.to_string())?;
            resp.headers_mut().set("Retry-After", "1")?;
            Ok(resp)
        }
    }
}

/// The limits of one policy entry (the check API), named like a route's.
fn policy_names(cfg: &Config, k: usize, with_tenant: bool) -> Vec<LimitName> {
    let route = Route {
        name: String::new(),
        methods: Vec::new(),
        path: crate::config::PathMatch::Prefix(String::new()),
        policies: vec![k],
        cost: 1,
        exempt: false,
        on_error: OnError::Closed,
        mode: Mode::Enforce,
        retry_after_s: 1,
        group: Some(cfg.policies[k].group),
    };
    answer::limit_names(cfg, &route, with_tenant)
}

fn decision_response(
    cfg: &Config,
    names: &[LimitName],
    decision: &Decision,
    each: &[Decision],
) -> worker::Result<Response> {
    let mut v = serde_json::to_value(MillisDecision::from(*decision)).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
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

// ------------------------------------------------------------------ the admin API

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

async fn admin(mut req: Request, env: &Env, cfg: &Config, path: &str) -> worker::Result<Response> {
    if let Some(resp) = authorise(&req, env, "ADMIN_SECRET").await {
        return resp;
    }
    match (req.method(), path) {
        (Method::Get, "/admin/v1/stats") => {
            let deny = DENY.with(|d| d.borrow().len());
            let body = match report(env, cfg.settings.timeout_ms).await {
                Ok(totals) => json!({
                    "scope": "global",
                    "policies": totals,
                    "denyCacheEntries": deny,
                }),
                Err(f) => json!({
                    "scope": "isolate",
                    "error": format!("stats object {f}; these are this isolate's unreported counts"),
                    "policies": STATS.with(|s| serde_json::to_value(&s.borrow().by_policy).unwrap_or_default()),
                    "denyCacheEntries": deny,
                }),
            };
            json_response(200, "application/json", body.to_string())
        }
        (Method::Post, "/admin/v1/keys/read") | (Method::Post, "/admin/v1/keys/reset") => {
            let body: KeyBody = match read_json(&mut req).await {
                Ok(b) => b,
                Err(e) => return api_error(400, "bad-request", &e),
            };
            let Some((k, entry)) = cfg.policy(&body.policy) else {
                return api_error(404, "unknown-policy", &format!("no policy named {:?}", body.policy));
            };
            let key = match admin_key(cfg, entry, &body) {
                Ok(key) => key,
                Err(e) => return api_error(400, "invalid-key", &e),
            };
            let tenant = body.tenant.clone().filter(|t| !skips_tenant_window(Some(t)));
            let names = policy_names(cfg, k, tenant.is_some());
            let limits = limits_for(cfg, &names, |_| key.clone(), tenant.as_deref());
            let object = object_name(cfg, entry.group, &key);
            let reset = path.ends_with("/reset");
            let op = if reset { Op::Reset } else { Op::Peek };
            let call = ObjectRequest::new(op, limits.clone(), 0);
            // A read also reports the object's stored rows (counted before the peek, which
            // itself drops states it finds fresh).
            let count = ObjectRequest::new(Op::Count, Vec::new(), 0);
            let batch = if reset { vec![call] } else { vec![count, call] };
            let mut answers = match send_batch(env, cfg.settings.timeout_ms, &object, &batch).await {
                Ok(a) => a,
                Err(f) => return api_error(503, "coordinator-unavailable", &f.to_string()),
            };
            let stored_rows = match answers.first() {
                Some(ObjectResponse::Count { rows }) if !reset => Some(*rows),
                _ => None,
            };
            let answer = answers.pop().ok_or_else(|| Failure::Unavailable("empty answer".into()));
            match answer {
                Ok(ObjectResponse::Reset { found }) => {
                    DENY.with(|d| {
                        let mut d = d.borrow_mut();
                        for l in &limits {
                            d.forget(&l.slot);
                        }
                    });
                    console_log!("tollgate: admin reset {} in {object}", body.policy);
                    json_response(200, "application/json", json!({"found": found, "object": object}).to_string())
                }
                Ok(ObjectResponse::Decided {
                    decision,
                    each,
                    states,
                    ..
                }) => json_response(
                    200,
                    "application/json",
                    json!({
                        "policy": entry.name,
                        "key": key,
                        "object": object,
                        "storedRows": stored_rows,
                        "decision": MillisDecision::from(decision),
                        "limits": names.iter().zip(&each).zip(&states).map(|((n, d), s)| json!({
                            "name": n.name,
                            "policy": n.limit.to_string(),
                            "decision": MillisDecision::from(*d),
                            "state": s,
                        })).collect::<Vec<_>>(),
                    })
                    .to_string(),
                ),
                Ok(ObjectResponse::Error { code, message }) => api_error(422, &code, &message),
                Ok(_) => api_error(500, "unexpected", "unexpected answer"),
                Err(f) => api_error(503, "coordinator-unavailable", &f.to_string()),
            }
        }
        _ => api_error(404, "not-found", "admin routes: GET /admin/v1/stats, POST /admin/v1/keys/read, POST /admin/v1/keys/reset"),
    }
}

fn admin_key(cfg: &Config, entry: &PolicyEntry, body: &KeyBody) -> Result<String, String> {
    if let Some(k) = &body.key {
        if body.ip.is_some() || body.api_key.is_some() {
            return Err("give either key, or ip/apiKey".into());
        }
        return Ok(keying::external_key(k));
    }
    let ip = match &body.ip {
        Some(ip) => {
            let addr: std::net::IpAddr = ip
                .parse()
                .map_err(|_| format!("{ip:?} is not an IP address"))?;
            keying::ip_group(addr, cfg.settings.ipv4_prefix, cfg.settings.ipv6_prefix)
        }
        None if matches!(entry.key, KeyKind::Ip | KeyKind::IpApiKey) => {
            return Err(format!("policy {} counts by IP: give ip", entry.name))
        }
        None => "ip:unknown".into(),
    };
    let id = Identity {
        ip,
        api_key: body
            .api_key
            .as_ref()
            .map(|k| format!("key:{}", keying::sha256_hex(k.as_bytes()))),
        tenant: None,
    };
    Ok(keying::key_for(entry.key, &id))
}
