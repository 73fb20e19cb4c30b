//! The layer on the Redis fleet store, against real redis-server processes (started on free
//! loopback ports by the Redis crate's test support): decisions made by Redis, a store
//! error answered as `on_error` declares, Redis gone answered by the store's declared
//! fallback, and policies of plans on Redis (at the end).
#![cfg(feature = "redis")]

mod common;
#[path = "../../redis/tests/support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::Extension;
use axum::routing::any;
use axum::Router;
use bytes::Bytes;
use http::StatusCode;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use redis::aio::ConnectionManager;
use support::Server;
use tokio::sync::{mpsc, watch};
use tollgate::plans::{Override, Plans};
use tollgate::store::{Limits, Slot};
use tollgate_http::client::sha256_hex;
use tollgate_redis::{Fallback, Options, RedisLimiter, RedisPlans};
use tollgate_tower::{
    Builder, Key, OnError, PlanChoice, RateLimitInfo, RateLimitLayer, RedisPlanStore, Route, Store,
};

type Layer = RateLimitLayer<RedisLimiter<ConnectionManager>>;

async fn layer(server: &Server, fallback: Fallback, on_error: OnError) -> Layer {
    let conn = support::connect(&server.url()).await;
    Builder::new(move |name, limits| {
        let options = Options::new(name, fallback.clone())
            .timeout(Duration::from_millis(200))
            .probe_every(Duration::from_millis(300));
        RedisLimiter::new(conn.clone(), limits, options)
    })
    .policy("per-ip", "fixed-window 2/hour", Key::Ip)
    .route(Route::new("/").policy("per-ip"))
    .on_error(on_error)
    .build()
    .unwrap()
}

async fn serve(layer: Layer) -> SocketAddr {
    let app = Router::new()
        .route(
            "/",
            any(
                |info: Option<Extension<RateLimitInfo>>, h: http::HeaderMap| async move {
                    format!(
                        "source={:?} degraded={:?}",
                        info.and_then(|i| i.0.source),
                        h.get("tollgate-degraded")
                    )
                },
            ),
        )
        .layer(layer);
    let addr = common::serve(app, [127, 0, 0, 1].into()).await;
    addr
}

async fn get(addr: SocketAddr) -> (StatusCode, http::HeaderMap, String) {
    let c = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let r = c
        .get(format!("http://{addr}/").parse().unwrap())
        .await
        .unwrap();
    let (status, headers) = (r.status(), r.headers().clone());
    let body = r.into_body().collect().await.unwrap().to_bytes();
    (status, headers, String::from_utf8(body.to_vec()).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decided_by_redis() {
    let server = Server::start();
    let addr = serve(layer(&server, Fallback::Closed, OnError::Open).await).await;
    for _ in 0..2 {
        let (status, h, body) = get(addr).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body, "source=Some(Redis) degraded=None");
        assert!(h.contains_key("ratelimit"));
    }
    assert_eq!(get(addr).await.0, StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_error_gets_on_error() {
    let server = Server::start();
    for on_error in [
        OnError::Open,
        OnError::Closed {
            retry_after_secs: 7,
        },
    ] {
        let layer = layer(&server, Fallback::Closed, on_error).await;
        // A value no tollgate wrote at this client's key: the store cannot decide.
        let key =
            layer
                .store("per-ip")
                .unwrap()
                .layout()
                .slot_key("ip4:127.0.0.1", None, Slot::Layer(0));
        assert_eq!(server.cli(&["SET", &key, "x"]), "OK");
        let addr = serve(layer).await;
        let (status, h, body) = get(addr).await;
        match on_error {
            OnError::Open => {
                assert_eq!(status, StatusCode::OK, "{body}");
                assert_eq!(
                    body,
                    "source=None degraded=Some(\"fail-open; reason=store-error\")"
                );
            }
            OnError::Closed { .. } => {
                assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
                assert_eq!(h.get("retry-after").unwrap(), "7");
                assert!(body.contains("store-unavailable"), "{body}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_gone_gets_the_declared_fallback() {
    let mut server = Server::start();
    let open = serve(layer(&server, Fallback::Open, OnError::Open).await).await;
    let closed = serve(layer(&server, Fallback::Closed, OnError::Open).await).await;
    server.kill();
    for _ in 0..3 {
        let (status, _, body) = get(open).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body, "source=Some(Fallback) degraded=None");
    }
    let (status, h, _) = get(closed).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        h.get("retry-after").unwrap(),
        "1",
        "the next probe, 300 ms, rounded up"
    );
}

/// A concurrency slot taken in Redis is given back to Redis when the response ends (a
/// round trip started by the body's end, so the test waits until Redis has it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrency_slot_is_given_back_to_redis() {
    let server = Server::start();
    let conn = support::connect(&server.url()).await;
    let layer = Builder::new(move |name, limits| {
        RedisLimiter::new(conn.clone(), limits, Options::new(name, Fallback::Closed))
    })
    .policy("slots", "concurrency 1", Key::Ip)
    .route(Route::new("/").policy("slots"))
    .build()
    .unwrap();
    let store = layer.store("slots").unwrap().clone();
    let (entered_tx, mut entered) = mpsc::unbounded_channel();
    let (gate, gate_rx) = watch::channel(false);
    let app = Router::new()
        .route(
            "/slow",
            any(move || {
                let (entered_tx, mut gate_rx) = (entered_tx.clone(), gate_rx.clone());
                async move {
                    entered_tx.send(()).unwrap();
                    gate_rx.wait_for(|open| *open).await.unwrap();
                    "done"
                }
            }),
        )
        .route("/", any(|| async { "ok" }))
        .layer(layer);
    let addr = common::serve(app, [127, 0, 0, 1].into()).await;
    let in_flight = |store: RedisLimiter<ConnectionManager>| async move {
        let o = store.peek("ip4:127.0.0.1", None).await.unwrap();
        1 - o.decision.remaining
    };
    let held = tokio::spawn(async move {
        let c = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
        let r = c
            .get(format!("http://{addr}/slow").parse().unwrap())
            .await
            .unwrap();
        let status = r.status();
        let _ = r.into_body().collect().await.unwrap();
        status
    });
    entered.recv().await.unwrap();
    assert_eq!(in_flight(store.clone()).await, 1, "held in Redis");
    assert_eq!(get(addr).await.0, StatusCode::TOO_MANY_REQUESTS);
    gate.send(true).unwrap();
    assert_eq!(held.await.unwrap(), StatusCode::OK);
    // Waits for the release to land (a deadline only so that a lost release fails the
    // test instead of hanging it; the pause between peeks only spares Redis).
    tokio::time::timeout(Duration::from_secs(60), async {
        while in_flight(store.clone()).await != 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .expect("the slot was never given back to Redis");
    let (status, _, body) = get(addr).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "ok"));
}

/// A check of a concurrency limit dropped while Redis answers (the request's future,
/// cancelled because its client went away) does not strand its slot: the store decides in
/// a task of its own, and gives back an admission nobody waits for. On one thread: the
/// store's task cannot run before the check is dropped (with two, a preempted test thread
/// saw the check decided at its first poll on a loaded machine, 5 runs in 10).
#[tokio::test]
async fn a_check_abandoned_while_redis_answers_does_not_strand_its_slot() {
    let server = Server::start();
    let conn = support::connect(&server.url()).await;
    let limits = Limits::single("concurrency 1".parse().unwrap());
    let options = Options::new("abandoned", Fallback::Closed);
    let store = RedisLimiter::new(conn, limits, options).unwrap();
    {
        let mut check = std::pin::pin!(Store::check(&store, "k", None, 1));
        // Polled once (the check is on its way to Redis), then dropped.
        tokio::select! {
            biased;
            _ = &mut check => panic!("decided without a round trip"),
            _ = std::future::ready(()) => {}
        }
    }
    // Waits for the check to be decided in Redis, then for its slot to come back (a
    // deadline only so that a stranded slot fails the test instead of hanging it; the
    // pauses between looks only spare Redis).
    tokio::time::timeout(Duration::from_secs(60), async {
        while store.stats().redis == 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        loop {
            let o = store.peek("k", None).await.unwrap();
            if o.decision.remaining == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .expect("the abandoned check's slot was never given back");
    assert_eq!(store.stats().redis, 1, "one check decided");
}

/// Two layers (two processes of a fleet) on one Redis, a route that reserves the call's
/// `x-max-tokens` and settles the `x-tokens-used` its handler reports.
async fn measured(server: &Server) -> (Layer, SocketAddr) {
    let conn = support::connect(&server.url()).await;
    let layer: Layer = Builder::new(move |name, limits| {
        RedisLimiter::new(conn.clone(), limits, Options::new(name, Fallback::Closed))
    })
    .policy("tokens", "fixed-window 100/hour", Key::Ip)
    .route(
        Route::new("/llm")
            .policy("tokens")
            .measured(|p| {
                p.headers
                    .get("x-max-tokens")
                    .and_then(|v| v.to_str().ok()?.parse().ok())
                    .unwrap_or(100)
            })
            .actual_header("x-tokens-used"),
    )
    .build()
    .unwrap();
    let app = Router::new().route(
        "/llm",
        any(|h: http::HeaderMap| async move {
            // The "model" used what the client asks it to report.
            let used = h.get("x-use").unwrap().to_str().unwrap().to_string();
            ([("x-tokens-used", used)], "tokens")
        }),
    );
    let addr = common::serve(app.layer(layer.clone()), [127, 0, 0, 1].into()).await;
    (layer, addr)
}

/// One call reserving `estimate` and using `used`: its status and whether the settle
/// header reached the client.
async fn call(addr: SocketAddr, estimate: u64, used: u64) -> (StatusCode, bool) {
    let c = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let req = http::Request::get(format!("http://{addr}/llm"))
        .header("x-max-tokens", estimate.to_string())
        .header("x-use", used.to_string())
        .body(Empty::new())
        .unwrap();
    let r = c.request(req).await.unwrap();
    let (status, leaked) = (r.status(), r.headers().contains_key("x-tokens-used"));
    r.into_body().collect().await.unwrap();
    (status, leaked)
}

/// What the client's key has left on Redis (a decision of cost 0 charges nothing), once it
/// reads `expected`: the settle runs as a task after the response, so it is waited for (at
/// most 5 s; no timing is asserted).
async fn remaining_reaches(layer: &Layer, expected: u64) -> u64 {
    let store = layer.store("tokens").unwrap();
    let mut left = u64::MAX;
    for _ in 0..500 {
        left = store
            .check("ip4:127.0.0.1", 0)
            .await
            .unwrap()
            .decision
            .remaining;
        if left == expected {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    left
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_measured_cost_is_reserved_and_settled_on_redis_across_two_layers() {
    let server = Server::start();
    let (a, addr_a) = measured(&server).await;
    let (_b, addr_b) = measured(&server).await;
    // Each call reserves 40 and settles 10, alternating between the two layers: seven fit
    // in the 100 (each needs 40 free; charged the estimate alone, two would).
    for i in 0..7u64 {
        let addr = if i % 2 == 0 { addr_a } else { addr_b };
        let (status, leaked) = call(addr, 40, 10).await;
        assert_eq!(status, StatusCode::OK, "call {i}");
        assert!(!leaked, "the actual-cost header is the layer's, removed");
        assert_eq!(
            remaining_reaches(&a, 90 - 10 * i).await,
            90 - 10 * i,
            "after call {i}"
        );
    }
    // 30 left: an estimate of 40 does not fit, one of 30 does.
    assert_eq!(call(addr_a, 40, 10).await.0, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(call(addr_b, 30, 30).await.0, StatusCode::OK);
    assert_eq!(remaining_reaches(&a, 0).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overage_settled_on_redis_is_charged_in_full() {
    let server = Server::start();
    let (a, addr) = measured(&server).await;
    // Reserved 30, used 80: the 50 more are charged, 20 left.
    assert_eq!(call(addr, 30, 80).await.0, StatusCode::OK);
    assert_eq!(remaining_reaches(&a, 20).await, 20);
    assert_eq!(call(addr, 30, 0).await.0, StatusCode::TOO_MANY_REQUESTS);
}

// Plans on Redis (`Builder::redis_plans`): the memory plans' tests (tests/plans.rs) on the
// fleet store, and two layers (two processes of a fleet) on one redis-server. The plans are
// per day at Redis's clock: a window rolls over only at midnight UTC, never while a test
// counts (but for a test started in its last seconds).

const PLANS: &[(&str, &[&str])] = &[
    ("anonymous", &["fixed-window 2/day"]),
    ("free", &["fixed-window 5/day"]),
    ("pro", &["fixed-window 10/day"]),
];

type PlansLayer = RateLimitLayer<RedisPlanStore<ConnectionManager>>;

/// A layer of the plans on its own connection to `server`, choosing by `choice`.
async fn plans_layer(server: &Server, fallback: Fallback, choice: PlanChoice) -> PlansLayer {
    let options = Options::new("api", fallback)
        .timeout(Duration::from_millis(200))
        .probe_every(Duration::from_millis(300));
    let conn = support::connect(&server.url()).await;
    let plans = RedisPlans::new(conn, Plans::parse(PLANS).unwrap(), options).unwrap();
    RateLimitLayer::redis_plans()
        .redis_plans("api", plans, choice)
        .route(Route::new("/api").policy("api"))
        .build()
        .unwrap()
}

async fn serve_plans(layer: PlansLayer) -> SocketAddr {
    let app = Router::new()
        .route(
            "/{*rest}",
            any(|info: Extension<RateLimitInfo>| async move { format!("{:?}", info.0.source) }),
        )
        .layer(layer);
    common::serve(app, [127, 0, 0, 1].into()).await
}

/// What `n` requests with these headers got: how many were admitted, the last answer's
/// `RateLimit-Policy` and `RateLimit` (up to its `t=`, which the clock decides), and the
/// last admitted one's body (where it was decided).
#[derive(Debug, PartialEq)]
struct Got {
    ok: usize,
    policy: String,
    limit: String,
    body: String,
}

async fn send(addr: SocketAddr, headers: &[(&str, &str)], n: usize) -> Got {
    let c = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let mut got = Got {
        ok: 0,
        policy: String::new(),
        limit: String::new(),
        body: String::new(),
    };
    for _ in 0..n {
        let mut req = http::Request::get(format!("http://{addr}/api/x"));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = c.request(req.body(Empty::new()).unwrap()).await.unwrap();
        let field = |name: &str| {
            let v = resp.headers().get(name).map(|v| v.to_str().unwrap());
            v.unwrap_or_default().to_string()
        };
        got.policy = field("ratelimit-policy");
        got.limit = field("ratelimit");
        got.limit
            .truncate(got.limit.find(";t=").unwrap_or(got.limit.len()));
        let status = resp.status();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        match status {
            StatusCode::OK => {
                got.ok += 1;
                got.body = String::from_utf8(body.to_vec()).unwrap();
            }
            StatusCode::TOO_MANY_REQUESTS => {}
            other => panic!("unexpected {other}"),
        }
    }
    got
}

fn api_keys() -> PlanChoice {
    PlanChoice::ApiKeys {
        keys: vec![
            (sha256_hex(b"free-key"), "free".to_string()),
            (sha256_hex(b"pro-key"), "pro".to_string()),
        ],
        default: "anonymous".into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plans_on_redis_give_a_free_key_5_a_pro_key_10_and_an_unknown_key_counts_by_ip() {
    let server = Server::start();
    let addr = serve_plans(plans_layer(&server, Fallback::Closed, api_keys()).await).await;

    let free = send(addr, &[("x-api-key", "free-key")], 6).await;
    assert_eq!((free.ok, free.policy.as_str()), (5, "\"free\";q=5;w=86400"));
    assert_eq!(free.body, "Some(Redis)");
    let pro = send(addr, &[("x-api-key", "pro-key")], 11).await;
    assert_eq!((pro.ok, pro.policy.as_str()), (10, "\"pro\";q=10;w=86400"));
    // A key not in the table counts as no key: by this client's address, on the
    // anonymous plan, the same count as a request without a key.
    let unknown = send(addr, &[("x-api-key", "made-up")], 1).await;
    let anonymous = "\"anonymous\";q=2;w=86400";
    assert_eq!((unknown.ok, unknown.policy.as_str()), (1, anonymous));
    assert_eq!(send(addr, &[], 2).await.ok, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_a_plan_change_keeps_spend_and_an_override_applies_until_cleared() {
    let server = Server::start();
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
    let layer = plans_layer(&server, Fallback::Closed, choice).await;
    let plans = layer.store("api").unwrap().plans().clone();
    let addr = serve_plans(layer).await;
    let u1 = [("x-user", "u1")];

    assert_eq!(send(addr, &u1, 5).await.ok, 5);
    // Upgraded: the 5 spent stay spent, 4 of pro's 10 are left after this one.
    users.lock().unwrap().insert("u1".into(), "pro".into());
    let got = send(addr, &u1, 1).await;
    assert_eq!((got.ok, got.limit.as_str()), (1, "\"pro\";r=4"));
    // Downgraded: 6 counted today, above free's 5: denied.
    users.lock().unwrap().insert("u1".into(), "free".into());
    assert_eq!(send(addr, &u1, 2).await.ok, 0);
    // An override (stored in Redis under the key's name) gives u1 pro again from its next
    // request, reported as pro; cleared, the plan again.
    plans
        .set("custom:u1", Override::Plan("pro".into()))
        .await
        .unwrap();
    let got = send(addr, &u1, 1).await;
    assert_eq!((got.ok, got.limit.as_str()), (1, "\"pro\";r=3"));
    assert!(plans.clear("custom:u1").await.unwrap());
    assert_eq!(send(addr, &u1, 1).await.ok, 0);
    // Limits of its own, reported as `own`: 8 counted of its 20.
    let own = vec!["fixed-window 20/day".parse().unwrap()];
    plans.set("custom:u1", Override::Limits(own)).await.unwrap();
    let got = send(addr, &u1, 1).await;
    assert_eq!(
        (got.ok, got.policy.as_str(), got.limit.as_str()),
        (1, "\"own\";q=20;w=86400", "\"own\";r=12")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_layers_on_one_redis_share_a_count_and_see_one_override() {
    let mut server = Server::start();
    let a = plans_layer(&server, Fallback::Open, api_keys()).await;
    let b = plans_layer(&server, Fallback::Open, api_keys()).await;
    let (plans_a, plans_b) = (
        a.store("api").unwrap().plans().clone(),
        b.store("api").unwrap().plans().clone(),
    );
    let (a, b) = (serve_plans(a).await, serve_plans(b).await);
    let free = [("x-api-key", "free-key")];

    // One count for the fleet: free's 5, whichever process a request reaches.
    let mut ok = 0;
    for addr in [a, b, a, b, a, b] {
        ok += send(addr, &free, 1).await.ok;
    }
    assert_eq!(ok, 5);
    // Set through one process, applied by the other at its next request; cleared through
    // the other, gone in the first.
    let key = format!("key:{}", sha256_hex(b"free-key"));
    let own = vec!["fixed-window 7/day".parse().unwrap()];
    plans_a.set(&key, Override::Limits(own)).await.unwrap();
    let got = send(b, &free, 1).await;
    assert_eq!((got.ok, got.limit.as_str()), (1, "\"own\";r=1"));
    assert!(plans_b.clear(&key).await.unwrap());
    let got = send(a, &free, 1).await;
    assert_eq!((got.ok, got.limit.as_str()), (0, "\"free\";r=0"));
    // Redis gone: the store's declared fallback (open) decides, as on other Redis routes.
    server.kill();
    let got = send(a, &free, 2).await;
    assert_eq!((got.ok, got.body.as_str()), (2, "Some(Fallback)"));
}
