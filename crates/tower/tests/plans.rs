//! Plans in the layer, in a real axum server on a loopback port driven by a real HTTP
//! client: a request's plan chosen by its API key (a table of SHA-256 hashes) or by the
//! application's function, an unknown key counted by IP, spend kept across plan changes,
//! and overrides set at run time. The clock is set by hand, so a minute never rolls over
//! while a test counts.

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use axum::routing::any;
use axum::Router;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use tollgate::plans::Override;
use tollgate_http::client::sha256_hex;
use tollgate_tower::{Builder, ManualClock, Memory, PlanChoice, RateLimitLayer, Route};

type HttpClient = Client<HttpConnector, Full<Bytes>>;

fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build(HttpConnector::new())
}

async fn serve(layer: RateLimitLayer<Memory<ManualClock>>) -> SocketAddr {
    let app = Router::new()
        .route("/{*rest}", any(|| async { "ok" }))
        .layer(layer);
    common::serve(app, "127.0.0.1".parse().unwrap()).await
}

/// Sends `n` requests with these headers; returns how many were admitted (200) and the
/// last answer's `RateLimit-Policy` and `RateLimit` fields.
async fn admitted(
    c: &HttpClient,
    addr: SocketAddr,
    headers: &[(&str, &str)],
    n: usize,
) -> (usize, String, String) {
    let mut ok = 0;
    let (mut policy, mut limit) = (String::new(), String::new());
    for _ in 0..n {
        let mut req = Request::get(format!("http://{addr}/api/x"));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = c.request(req.body(Full::default()).unwrap()).await.unwrap();
        let field = |name: &str| {
            resp.headers()
                .get(name)
                .map(|v| v.to_str().unwrap().to_string())
                .unwrap_or_default()
        };
        policy = field("ratelimit-policy");
        limit = field("ratelimit");
        match resp.status() {
            StatusCode::OK => ok += 1,
            StatusCode::TOO_MANY_REQUESTS => {}
            other => panic!("unexpected {other}"),
        }
        resp.into_body().collect().await.unwrap();
    }
    (ok, policy, limit)
}

fn builder(clock: &ManualClock) -> Builder<Memory<ManualClock>> {
    let clock = clock.clone();
    Builder::new(move |_, limits| {
        Memory::with_clock(limits, NonZeroUsize::new(10_000).unwrap(), clock.clone())
    })
}

const PLANS: &[(&str, &[&str])] = &[
    ("anonymous", &["fixed-window 10/min"]),
    ("free", &["fixed-window 100/min"]),
    ("pro", &["fixed-window 1000/min"]),
];

#[tokio::test]
async fn a_free_key_gets_100_a_minute_a_pro_key_1000_and_an_unknown_key_counts_by_ip() {
    let clock = ManualClock::new(0);
    let keys = vec![
        (sha256_hex(b"free-key"), "free".to_string()),
        (sha256_hex(b"pro-key"), "pro".to_string()),
    ];
    let layer = builder(&clock)
        .plans(
            "api",
            PLANS,
            PlanChoice::ApiKeys {
                keys,
                default: "anonymous".into(),
            },
        )
        .route(Route::new("/api").policy("api"))
        .build()
        .unwrap();
    let (c, addr) = (client(), serve(layer).await);

    let (ok, policy, _) = admitted(&c, addr, &[("x-api-key", "free-key")], 110).await;
    assert_eq!(ok, 100);
    assert_eq!(policy, "\"free\";q=100;w=60");
    let (ok, policy, _) = admitted(&c, addr, &[("x-api-key", "pro-key")], 1_010).await;
    assert_eq!(ok, 1_000);
    assert_eq!(policy, "\"pro\";q=1000;w=60");
    // A key not in the table counts as no key: by this client's address, on the
    // anonymous plan, the same count as a request without a key.
    let (ok, policy, _) = admitted(&c, addr, &[("x-api-key", "made-up")], 6).await;
    assert_eq!(ok, 6);
    assert_eq!(policy, "\"anonymous\";q=10;w=60");
    assert_eq!(admitted(&c, addr, &[], 6).await.0, 4);
}

#[tokio::test]
async fn a_plan_change_keeps_what_the_key_has_spent_and_an_override_applies_at_once() {
    let clock = ManualClock::new(0);
    // The application's own table of users' plans, changed while the server runs.
    let users: Arc<Mutex<HashMap<String, String>>> = Arc::default();
    users.lock().unwrap().insert("u1".into(), "free".into());
    let table = Arc::clone(&users);
    let choice = PlanChoice::custom(
        move |parts| {
            let user = parts.headers.get("x-user")?.to_str().ok()?.to_string();
            let plan = table.lock().unwrap().get(&user)?.clone();
            Some((user, plan))
        },
        "anonymous",
    );
    let layer = builder(&clock)
        .plans("api", PLANS, choice)
        .route(Route::new("/api").policy("api"))
        .build()
        .unwrap();
    let limiter_layer = layer.clone();
    let (c, addr) = (client(), serve(layer).await);
    let u1 = [("x-user", "u1")];

    assert_eq!(admitted(&c, addr, &u1, 100).await.0, 100);
    // Upgraded: the 100 spent stay spent, 900 of pro's 1,000 are left.
    users.lock().unwrap().insert("u1".into(), "pro".into());
    let (ok, _, limit) = admitted(&c, addr, &u1, 1).await;
    assert_eq!((ok, limit.as_str()), (1, "\"pro\";r=899;t=60"));
    // Downgraded: 101 counted in this minute, above free's 100: denied until it ends.
    users.lock().unwrap().insert("u1".into(), "free".into());
    assert_eq!(admitted(&c, addr, &u1, 5).await.0, 0);
    // An override (stored under the key's name) gives u1 pro again from its next request,
    // and clearing it gives the plan back, the count still kept.
    let plans = limiter_layer.store("api").unwrap().plan_limiter().unwrap();
    plans
        .set("custom:u1", Override::Plan("pro".into()))
        .unwrap();
    let (ok, _, limit) = admitted(&c, addr, &u1, 1).await;
    assert_eq!((ok, limit.as_str()), (1, "\"pro\";r=898;t=60"));
    assert!(plans.clear("custom:u1"));
    assert_eq!(admitted(&c, addr, &u1, 1).await.0, 0);
    // Limits of its own, reported as `own`: 103 counted of its 200.
    let own = vec!["fixed-window 200/min".parse().unwrap()];
    plans.set("custom:u1", Override::Limits(own)).unwrap();
    let (ok, policy, limit) = admitted(&c, addr, &u1, 1).await;
    assert_eq!(
        (ok, policy.as_str(), limit.as_str()),
        (1, "\"own\";q=200;w=60", "\"own\";r=97;t=60")
    );
    assert!(plans.clear("custom:u1"));
    // The next minute: the 3 counted above free's 100 are a debt it carries (a count above
    // the limit carries into the next window, less the limit), so 97 are left.
    clock.advance(60 * tollgate::NANOS_PER_SEC);
    assert_eq!(admitted(&c, addr, &u1, 101).await.0, 97);
}

/// What the README's authentication layer puts in the request's extensions.
#[derive(Clone)]
struct Caller {
    user: String,
    plan: String,
}

/// The README's shape: an axum authentication layer in front (added after the limit, so it
/// runs first) verifies the credential, answers 401 to a bad one, and leaves the caller in
/// the request's extensions, from which `PlanChoice::custom` takes key and plan.
async fn authenticate(
    mut req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Result<axum::response::Response, StatusCode> {
    if let Some(header) = req.headers().get("authorization") {
        let caller = match header.to_str().map_err(|_| StatusCode::UNAUTHORIZED)? {
            "Bearer token-of-alice" => Caller {
                user: "alice".into(),
                plan: "pro".into(),
            },
            "Bearer token-of-bob" => Caller {
                user: "bob".into(),
                plan: "free".into(),
            },
            _ => return Err(StatusCode::UNAUTHORIZED),
        };
        req.extensions_mut().insert(caller);
    }
    Ok(next.run(req).await)
}

#[tokio::test]
async fn an_authentication_layer_in_front_chooses_the_plan_and_its_refusals_count_nothing() {
    let clock = ManualClock::new(0);
    let choice = PlanChoice::custom(
        |parts| {
            let c = parts.extensions.get::<Caller>()?;
            Some((c.user.clone(), c.plan.clone()))
        },
        "anonymous",
    );
    let layer = builder(&clock)
        .plans("api", PLANS, choice)
        .route(Route::new("/api").policy("api"))
        .build()
        .unwrap();
    let app = Router::new()
        .route("/{*rest}", any(|| async { "ok" }))
        .layer(layer)
        .layer(axum::middleware::from_fn(authenticate));
    let addr = common::serve(app, "127.0.0.1".parse().unwrap()).await;
    let c = client();

    let alice = [("authorization", "Bearer token-of-alice")];
    let (ok, policy, _) = admitted(&c, addr, &alice, 1_005).await;
    assert_eq!((ok, policy.as_str()), (1_000, "\"pro\";q=1000;w=60"));
    let bob = [("authorization", "Bearer token-of-bob")];
    let (ok, policy, _) = admitted(&c, addr, &bob, 105).await;
    assert_eq!((ok, policy.as_str()), (100, "\"free\";q=100;w=60"));
    // A forged credential is the authentication layer's 401: the limit never sees it, so
    // the anonymous bucket (this client's address) still has all of its 10.
    for _ in 0..20 {
        let req = Request::get(format!("http://{addr}/api/x"))
            .header("authorization", "Bearer forged")
            .body(Full::default())
            .unwrap();
        let resp = c.request(req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    }
    let (ok, policy, _) = admitted(&c, addr, &[], 12).await;
    assert_eq!((ok, policy.as_str()), (10, "\"anonymous\";q=10;w=60"));
}
