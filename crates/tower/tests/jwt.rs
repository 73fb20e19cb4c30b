//! Plans chosen by a verified JWT, in a real axum server on a loopback port driven by a real
//! HTTP client: RS256, ES256, EdDSA and HS256 tokens choose their subject's key and plan;
//! refused tokens (alg none, algorithm confusion, expired, a bad signature, oversized,
//! malformed, a removed key) count as anonymous by IP, never as a fresh bucket, or are
//! answered 401 on a route that says so; a rotated key set is used at once. The layer's
//! clock is set by hand; tokens are dated by the wall clock (an hour either way).

mod common;

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::routing::any;
use axum::Router;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use serde_json::{json, Value};
use tollgate_http::jwt::Rules;
use tollgate_tower::jwt::{InvalidToken, Jwt, JwtKey, JwtKeys};
use tollgate_tower::{Builder, ManualClock, Memory, PlanChoice, RateLimitLayer, Route};

type HttpClient = Client<HttpConnector, Full<Bytes>>;

const RSA_KEY: &[u8] = include_bytes!("data/jwt/rsa.key");
const RSA_PUB: &[u8] = include_bytes!("data/jwt/rsa.pub");
const EC_KEY: &[u8] = include_bytes!("data/jwt/ec.key");
const EC_PUB: &[u8] = include_bytes!("data/jwt/ec.pub");
const ED_KEY: &[u8] = include_bytes!("data/jwt/ed.key");
const ED_PUB: &[u8] = include_bytes!("data/jwt/ed.pub");
const SECRET: &[u8] = b"a shared secret of at least 32 bytes!";

const PLANS: &[(&str, &[&str])] = &[
    ("anonymous", &["fixed-window 10/min"]),
    ("free", &["fixed-window 20/min"]),
    ("pro", &["fixed-window 30/min"]),
];

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn keys() -> Vec<JwtKey> {
    vec![
        JwtKey::rs256_pem(Some("rsa-1"), RSA_PUB).unwrap(),
        JwtKey::es256_pem(Some("ec-1"), EC_PUB).unwrap(),
        JwtKey::ed25519_pem(Some("ed-1"), ED_PUB).unwrap(),
        JwtKey::hs256(Some("hs-1"), SECRET),
    ]
}

/// A token of `sub` on `plan`, signed with `alg`'s test key under `kid`, expiring in an hour.
fn token(alg: Algorithm, kid: &str, sub: &str, plan: &str) -> String {
    token_with(
        alg,
        kid,
        json!({ "sub": sub, "plan": plan, "exp": now() + 3600 }),
    )
}

fn token_with(alg: Algorithm, kid: &str, claims: Value) -> String {
    let key = match alg {
        Algorithm::RS256 => EncodingKey::from_rsa_pem(RSA_KEY).unwrap(),
        Algorithm::ES256 => EncodingKey::from_ec_pem(EC_KEY).unwrap(),
        Algorithm::EdDSA => EncodingKey::from_ed_pem(ED_KEY).unwrap(),
        Algorithm::HS256 => EncodingKey::from_secret(SECRET),
        other => panic!("{other:?}"),
    };
    let mut header = Header::new(alg);
    header.kid = Some(kid.into());
    encode(&header, &claims, &key).unwrap()
}

/// A token of any header and claims, its signature `signature`'s bytes.
fn forged(header: Value, claims: Value, signature: &[u8]) -> String {
    let part = |v: &Value| URL_SAFE_NO_PAD.encode(v.to_string());
    format!(
        "{}.{}.{}",
        part(&header),
        part(&claims),
        URL_SAFE_NO_PAD.encode(signature)
    )
}

async fn serve(jwt: Jwt, clock: &ManualClock) -> SocketAddr {
    let clock = clock.clone();
    let layer: RateLimitLayer<Memory<ManualClock>> = Builder::new(move |_, limits| {
        Memory::with_clock(limits, NonZeroUsize::new(10_000).unwrap(), clock.clone())
    })
    .plans(
        "api",
        PLANS,
        PlanChoice::Jwt {
            jwt: Arc::new(jwt),
            default: "anonymous".into(),
        },
    )
    .route(Route::new("/api").policy("api"))
    .build()
    .unwrap();
    let app = Router::new()
        .route("/{*rest}", any(|| async { "ok" }))
        .layer(layer);
    common::serve(app, "127.0.0.1".parse().unwrap()).await
}

struct Answer {
    status: StatusCode,
    policy: String,
    remaining: String,
    authenticate: String,
    body: String,
}

async fn get(c: &HttpClient, addr: SocketAddr, token: Option<&str>) -> Answer {
    let mut req = Request::get(format!("http://{addr}/api/x"));
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let resp = c.request(req.body(Full::default()).unwrap()).await.unwrap();
    let field = |name: &str| {
        resp.headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default()
    };
    let (status, policy, authenticate) = (
        resp.status(),
        field("ratelimit-policy"),
        field("www-authenticate"),
    );
    let remaining = field("ratelimit");
    let body = String::from_utf8(
        resp.into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    )
    .unwrap();
    Answer {
        status,
        policy,
        remaining,
        authenticate,
        body,
    }
}

fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build(HttpConnector::new())
}

/// The refused tokens: each with what makes it refused.
fn refused() -> Vec<(&'static str, String)> {
    let exp = now() + 3600;
    let claims = json!({ "sub": "mallory", "plan": "pro", "exp": exp });
    vec![
        (
            "alg none",
            forged(json!({ "alg": "none" }), claims.clone(), b""),
        ),
        (
            // HS256 "signed" with the RSA public key as the secret, naming the RSA key.
            "algorithm confusion",
            {
                let mut h = Header::new(Algorithm::HS256);
                h.kid = Some("rsa-1".into());
                encode(&h, &claims, &EncodingKey::from_secret(RSA_PUB)).unwrap()
            },
        ),
        (
            "expired",
            token_with(
                Algorithm::RS256,
                "rsa-1",
                json!({ "sub": "mallory", "plan": "pro", "exp": now() - 3600 }),
            ),
        ),
        ("bad signature", {
            let good = token(Algorithm::ES256, "ec-1", "mallory", "pro");
            let (head, _) = good.rsplit_once('.').unwrap();
            format!("{head}.{}", URL_SAFE_NO_PAD.encode([7u8; 64]))
        }),
        (
            "unknown kid",
            token(Algorithm::RS256, "rsa-9", "mallory", "pro"),
        ),
        ("oversized", {
            let big = "x".repeat(9 * 1024);
            token_with(
                Algorithm::HS256,
                "hs-1",
                json!({ "sub": "mallory", "pad": big, "exp": exp }),
            )
        }),
        ("malformed", "not.a-token".to_string()),
    ]
}

#[tokio::test]
async fn each_algorithm_verifies_and_the_plan_claim_chooses_the_limit() {
    let clock = ManualClock::new(0);
    let jwt = Jwt::new(
        JwtKeys::new(keys()),
        Rules {
            plan_claim: Some("plan".into()),
            ..Rules::default()
        },
    );
    let (c, addr) = (client(), serve(jwt, &clock).await);
    for (alg, kid, sub, plan, limit) in [
        (Algorithm::RS256, "rsa-1", "alice", "pro", 30),
        (Algorithm::ES256, "ec-1", "bob", "free", 20),
        (Algorithm::EdDSA, "ed-1", "carol", "pro", 30),
        (Algorithm::HS256, "hs-1", "dave", "free", 20),
        // A plan claim naming no plan: the default plan, still by subject.
        (Algorithm::RS256, "rsa-1", "erin", "platinum", 10),
    ] {
        let t = token(alg, kid, sub, plan);
        let mut ok = 0;
        for _ in 0..limit + 3 {
            let a = get(&c, addr, Some(&t)).await;
            if a.status == StatusCode::OK {
                ok += 1;
            }
        }
        assert_eq!(ok, limit, "{alg:?} {sub}");
    }
    // The subjects counted apart from the anonymous IP, which has all of its 10 left.
    let a = get(&c, addr, None).await;
    assert_eq!(a.policy, "\"anonymous\";q=10;w=60");
    assert_eq!(a.remaining, "\"anonymous\";r=9;t=60");
}

#[tokio::test]
async fn refused_tokens_count_as_anonymous_by_ip_never_as_a_fresh_bucket() {
    let clock = ManualClock::new(0);
    let jwt = Jwt::new(
        JwtKeys::new(keys()),
        Rules {
            plan_claim: Some("plan".into()),
            ..Rules::default()
        },
    );
    let (c, addr) = (client(), serve(jwt, &clock).await);
    let tokens = refused();
    for (i, (why, t)) in tokens.iter().enumerate() {
        let a = get(&c, addr, Some(t)).await;
        assert_eq!(a.status, StatusCode::OK, "{why}");
        assert_eq!(a.policy, "\"anonymous\";q=10;w=60", "{why}");
        // One anonymous bucket for every refused token: the i-th spends its (i+1)-th.
        assert_eq!(
            a.remaining,
            format!("\"anonymous\";r={};t=60", 9 - i),
            "{why}"
        );
    }
}

#[tokio::test]
async fn a_route_that_rejects_answers_refused_tokens_401_with_a_problem() {
    let clock = ManualClock::new(0);
    let jwt = Jwt::new(JwtKeys::new(keys()), Rules::default()).on_invalid(InvalidToken::Reject);
    let (c, addr) = (client(), serve(jwt, &clock).await);
    for (why, t) in refused() {
        let a = get(&c, addr, Some(&t)).await;
        assert_eq!(a.status, StatusCode::UNAUTHORIZED, "{why}");
        assert_eq!(a.authenticate, "Bearer error=\"invalid_token\"", "{why}");
        let v: Value = serde_json::from_str(&a.body).unwrap();
        assert_eq!(v["error"], "invalid-token", "{why}");
        assert!(!a.body.contains(&t), "{why}: the token is not echoed");
    }
    // A valid token and no token are answered as usual.
    let t = token(Algorithm::EdDSA, "ed-1", "alice", "pro");
    assert_eq!(get(&c, addr, Some(&t)).await.status, StatusCode::OK);
    assert_eq!(get(&c, addr, None).await.status, StatusCode::OK);
}

#[tokio::test]
async fn a_rotated_key_set_accepts_a_new_kid_and_refuses_a_removed_one_at_once() {
    let clock = ManualClock::new(0);
    let set = JwtKeys::new(vec![JwtKey::rs256_pem(Some("rsa-1"), RSA_PUB).unwrap()]);
    let jwt = Jwt::new(Arc::clone(&set), Rules::default()).on_invalid(InvalidToken::Reject);
    let (c, addr) = (client(), serve(jwt, &clock).await);
    let old = token(Algorithm::RS256, "rsa-1", "alice", "free");
    let new = token(Algorithm::ES256, "ec-2", "alice", "free");
    assert_eq!(get(&c, addr, Some(&old)).await.status, StatusCode::OK);
    assert_eq!(
        get(&c, addr, Some(&new)).await.status,
        StatusCode::UNAUTHORIZED
    );
    // The issuer's JWKS now publishes ec-2 only (built from the key as an issuer would).
    let mut jwk =
        Jwk::from_encoding_key(&EncodingKey::from_ec_pem(EC_KEY).unwrap(), Algorithm::ES256)
            .unwrap();
    jwk.common.key_id = Some("ec-2".into());
    let jwks = json!({ "keys": [jwk] }).to_string();
    set.replace(JwtKey::from_jwks(&jwks).unwrap());
    assert_eq!(get(&c, addr, Some(&new)).await.status, StatusCode::OK);
    // The old token was verified (and cached) before: refused now all the same.
    assert_eq!(
        get(&c, addr, Some(&old)).await.status,
        StatusCode::UNAUTHORIZED
    );
}

#[test]
fn a_jwks_with_a_secret_or_another_algorithm_is_refused_naming_the_key() {
    let oct = json!({ "keys": [{ "kty": "oct", "kid": "s", "k": "c2VjcmV0" }] }).to_string();
    let e = JwtKey::from_jwks(&oct).err().unwrap();
    assert_eq!(e.key, "s");
    let mut jwk = Jwk::from_encoding_key(
        &EncodingKey::from_rsa_pem(RSA_KEY).unwrap(),
        Algorithm::RS256,
    )
    .unwrap();
    jwk.common.key_algorithm = Some(jsonwebtoken::jwk::KeyAlgorithm::RS512);
    let rs512 = json!({ "keys": [jwk] }).to_string();
    let e = JwtKey::from_jwks(&rs512).err().unwrap();
    assert_eq!(e.key, "keys[0]");
    assert!(e.reason.contains("RS512"), "{e}");
    assert!(JwtKey::from_jwks("{\"keys\": 3}").is_err());
}
