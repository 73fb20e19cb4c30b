//! The caller of a bearer token at the edge: every rule is [`tollgate_http::jwt`]'s, the
//! keys' import and the signature check are WebCrypto's (`crypto.subtle.importKey` and
//! `verify`), and the isolate keeps the imported keys, the fetched key set and the verified
//! tokens (the bounds and the fetch policy are [`crate::jwt`]'s).

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use futures_util::future::{select, Either};
use js_sys::{Array, Function, Reflect, Uint8Array, JSON};
use serde_json::json;
use tollgate_config::{InvalidToken, JwtKeyData, JwtSettings};
use tollgate_http::jwt::{bearer, parse, Alg, Caller, JwtError, Token, VerifiedTokens};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use worker::{console_error, Delay, Env, Fetch, Request, Response, Url};

use crate::config::{Config, Route};
use crate::env::{now_ms, string_binding};
use crate::http::json_response;
use crate::jwt::{jwks_keys, JwksKey, JwksTimes, MAX_VERIFIED, MAX_VERIFIED_BYTES};
use crate::keying::Identity;

/// A key imported into WebCrypto, pinned to its algorithm.
#[derive(Clone)]
struct Imported {
    kid: Option<String>,
    alg: Alg,
    key: JsValue,
}

/// The isolate's keys and verified tokens.
struct State {
    /// The config's own keys, imported on the first token.
    inline: Option<Rc<Vec<Imported>>>,
    /// The fetched set's keys, and the document they came from (a fetch that changes them
    /// starts a new generation).
    jwks: Rc<Vec<Imported>>,
    jwks_source: Vec<JwksKey>,
    times: JwksTimes,
    generation: u64,
    verified: VerifiedTokens,
}

thread_local! {
    static STATE: RefCell<State> = RefCell::new(State {
        inline: None,
        jwks: Rc::new(Vec::new()),
        jwks_source: Vec::new(),
        times: JwksTimes::default(),
        generation: 0,
        verified: VerifiedTokens::new(MAX_VERIFIED, MAX_VERIFIED_BYTES),
    });
}

/// Reads the request's bearer token when the config has `[settings.jwt]` and the request
/// sent no API key: a verified token makes its subject the request's key and its plan
/// claim its plan ([`crate::jwt::apply`]); a refused one leaves the request anonymous (by
/// IP, the default plan) or, with `on_invalid = "reject"` (the route's
/// `on_invalid_token` when it has one), is answered here: 401 with a problem document.
pub async fn identify(
    req: &Request,
    env: &Env,
    cfg: &Config,
    route: &Route,
    id: &mut Identity,
) -> worker::Result<Option<Response>> {
    let Some(jwt) = &cfg.settings.jwt else {
        return Ok(None);
    };
    if id.api_key.is_some() {
        return Ok(None);
    }
    let Some(auth) = req.headers().get("authorization")? else {
        return Ok(None);
    };
    let Some(token) = bearer(&auth) else {
        return Ok(None);
    };
    let verified = match caller(env, cfg, jwt, token).await {
        Ok(c) => crate::jwt::apply(jwt, id, c),
        Err(e) => Err(e),
    };
    match (verified, route.on_invalid_token.unwrap_or(jwt.on_invalid)) {
        (Ok(()), _) => Ok(None),
        (Err(_), InvalidToken::Anonymous) => {
            id.api_key = None;
            id.plan = None;
            Ok(None)
        }
        (Err(e), InvalidToken::Reject) => {
            let mut resp = json_response(401, tollgate_http::problem::CONTENT_TYPE, e.problem())?;
            let h = resp.headers_mut();
            h.set("WWW-Authenticate", JwtError::WWW_AUTHENTICATE)?;
            h.set("Cache-Control", "no-store")?;
            Ok(Some(resp))
        }
    }
}

/// The caller of `token` now: from the isolate's verified tokens, else verified.
async fn caller(
    env: &Env,
    cfg: &Config,
    jwt: &JwtSettings,
    token: &str,
) -> Result<Caller, JwtError> {
    let now = now_ms();
    let (secs, leeway) = (now / 1000, jwt.rules.leeway_secs);
    let known = STATE.with(|s| {
        let s = s.borrow();
        crate::jwt::remembered(jwt, &s.verified, s.generation, token, secs)
    });
    if let Some(c) = known {
        return Ok(c);
    }
    let t = parse(token, &jwt.rules)?;
    let inline = inline_keys(env, jwt).await;
    let (mut keys, mut generation) = current(&inline);
    if let Some(url) = &jwt.jwks_url {
        let unknown = matches!(
            t.key(&keys, |k| (k.kid.as_deref(), k.alg)),
            Err(JwtError::UnknownKey)
        );
        if STATE.with(|s| s.borrow().times.due(jwt, now, unknown)) {
            refresh(url, cfg.settings.timeout_ms, now).await;
            (keys, generation) = current(&inline);
        }
    }
    let key = t.key(&keys, |k| (k.kid.as_deref(), k.alg))?;
    if !verify(key, &t).await {
        return Err(JwtError::BadSignature);
    }
    let caller = t.caller(&jwt.rules, secs)?;
    STATE.with(|s| {
        let verified = &mut s.borrow_mut().verified;
        verified.insert(token, caller.clone(), generation, secs, leeway);
    });
    Ok(caller)
}

/// The config's keys and the fetched set's, with the set's generation.
fn current(inline: &[Imported]) -> (Vec<Imported>, u64) {
    STATE.with(|s| {
        let s = s.borrow();
        let mut keys = inline.to_vec();
        keys.extend(s.jwks.iter().cloned());
        (keys, s.generation)
    })
}

/// The config's keys, imported once per isolate (a key that does not import is logged and
/// left out: its tokens find no key).
async fn inline_keys(env: &Env, jwt: &JwtSettings) -> Rc<Vec<Imported>> {
    if let Some(k) = STATE.with(|s| s.borrow().inline.clone()) {
        return k;
    }
    let mut out = Vec::new();
    for (i, k) in jwt.keys.iter().enumerate() {
        let data = match &k.data {
            JwtKeyData::Jwk(m) => KeyData::Jwk(serde_json::Value::Object(m.clone()).to_string()),
            JwtKeyData::Spki(der) => KeyData::Bytes("spki", der.clone()),
            JwtKeyData::SecretBinding(name) => match string_binding(env, name) {
                Some(secret) => KeyData::Bytes("raw", secret.into_bytes()),
                None => {
                    console_error!("tollgate: settings.jwt.keys[{i}]: no secret named {name}");
                    continue;
                }
            },
        };
        match import(k.alg, data).await {
            Ok(key) => out.push(Imported {
                kid: k.kid.clone(),
                alg: k.alg,
                key,
            }),
            Err(e) => console_error!("tollgate: settings.jwt.keys[{i}] does not import: {e}"),
        }
    }
    let keys = Rc::new(out);
    STATE.with(|s| s.borrow_mut().inline = Some(keys.clone()));
    keys
}

/// Fetches the key set (bounded by the coordinator timeout) and, when it gave one, makes
/// it the isolate's; a set that differs from the last starts a new generation (tokens
/// verified before are verified again).
async fn refresh(url: &str, timeout_ms: u64, now: u64) {
    STATE.with(|s| s.borrow_mut().times.tried_ms = Some(now));
    let text = async {
        let url = Url::parse(url).map_err(|e| e.to_string())?;
        let mut resp = Fetch::Url(url).send().await.map_err(|e| e.to_string())?;
        if resp.status_code() != 200 {
            return Err(format!("status {}", resp.status_code()));
        }
        resp.text().await.map_err(|e| e.to_string())
    };
    let timeout = Delay::from(Duration::from_millis(timeout_ms));
    let text = match select(Box::pin(text), timeout).await {
        Either::Left((r, _)) => r,
        Either::Right(_) => Err("timed out".into()),
    };
    let source = match text.and_then(|t| jwks_keys(&t)) {
        Ok(k) => k,
        Err(e) => {
            console_error!("tollgate: settings.jwt.jwks_url: {e} (keeping the last key set)");
            return;
        }
    };
    let mut keys = Vec::new();
    for (kid, alg, public) in &source {
        let data = KeyData::Jwk(serde_json::Value::Object(public.clone()).to_string());
        match import(*alg, data).await {
            Ok(key) => keys.push(Imported {
                kid: kid.clone(),
                alg: *alg,
                key,
            }),
            Err(e) => console_error!("tollgate: JWKS key {kid:?} does not import: {e}"),
        }
    }
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        s.times.fetched_ms = Some(now);
        if s.jwks_source != source {
            s.jwks = Rc::new(keys);
            s.jwks_source = source;
            s.generation += 1;
        }
    });
}

/// A key's material for `importKey`: a JWK (JSON text), or bytes in a format.
enum KeyData {
    Jwk(String),
    Bytes(&'static str, Vec<u8>),
}

/// `algorithm` arguments of `importKey` and `verify` for `alg`.
fn params(alg: Alg) -> (serde_json::Value, serde_json::Value) {
    match alg {
        Alg::Rs256 => (
            json!({ "name": "RSASSA-PKCS1-v1_5", "hash": "SHA-256" }),
            json!({ "name": "RSASSA-PKCS1-v1_5" }),
        ),
        // JWS carries ES256 signatures as r||s, 64 bytes: WebCrypto's own form.
        Alg::Es256 => (
            json!({ "name": "ECDSA", "namedCurve": "P-256" }),
            json!({ "name": "ECDSA", "hash": "SHA-256" }),
        ),
        Alg::EdDsa => (json!({ "name": "Ed25519" }), json!({ "name": "Ed25519" })),
        Alg::Hs256 => (
            json!({ "name": "HMAC", "hash": "SHA-256" }),
            json!({ "name": "HMAC" }),
        ),
    }
}

fn js(v: &serde_json::Value) -> JsValue {
    JSON::parse(&v.to_string()).unwrap_or(JsValue::UNDEFINED)
}

/// `crypto.subtle` and its method `name`.
fn subtle(name: &str) -> Result<(JsValue, Function), String> {
    let crypto = Reflect::get(&js_sys::global(), &"crypto".into()).map_err(|e| format!("{e:?}"))?;
    let subtle = Reflect::get(&crypto, &"subtle".into()).map_err(|e| format!("{e:?}"))?;
    let f = Reflect::get(&subtle, &name.into())
        .map_err(|e| format!("{e:?}"))?
        .dyn_into::<Function>()
        .map_err(|_| format!("crypto.subtle.{name} is not a function"))?;
    Ok((subtle, f))
}

/// Calls `crypto.subtle.<name>(...args)` and awaits its promise.
async fn call(name: &str, args: &Array) -> Result<JsValue, String> {
    let (subtle, f) = subtle(name)?;
    let promise = f
        .apply(&subtle, args)
        .map_err(|e| format!("{e:?}"))?
        .dyn_into::<js_sys::Promise>()
        .map_err(|_| format!("crypto.subtle.{name} answered no promise"))?;
    JsFuture::from(promise).await.map_err(|e| format!("{e:?}"))
}

/// A verification key for `alg` (not extractable).
async fn import(alg: Alg, data: KeyData) -> Result<JsValue, String> {
    let (format, material): (&str, JsValue) = match data {
        KeyData::Jwk(text) => ("jwk", JSON::parse(&text).map_err(|e| format!("{e:?}"))?),
        KeyData::Bytes(format, bytes) => (format, Uint8Array::from(bytes.as_slice()).into()),
    };
    let usages = Array::of1(&"verify".into());
    let args = Array::of5(
        &format.into(),
        &material,
        &js(&params(alg).0),
        &false.into(),
        &usages,
    );
    call("importKey", &args).await
}

/// Whether `token`'s signature verifies with `key` (a call WebCrypto refuses is a
/// signature that does not verify).
async fn verify(key: &Imported, token: &Token<'_>) -> bool {
    let args = Array::of4(
        &js(&params(key.alg).1),
        &key.key,
        &Uint8Array::from(token.signature()).into(),
        &Uint8Array::from(token.signing_input().as_bytes()).into(),
    );
    matches!(call("verify", &args).await, Ok(v) if v.as_bool() == Some(true))
}
