//! The layer on the Redis fleet store, against real redis-server processes (started on free
//! loopback ports by the Redis crate's test support): decisions made by Redis, a store
//! error answered as `on_error` declares, and Redis gone answered by the store's declared
//! fallback.
#![cfg(feature = "redis")]

mod common;
#[path = "../../redis/tests/support/mod.rs"]
mod support;

use std::net::SocketAddr;
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
use tollgate::store::{Limits, Slot};
use tollgate_redis::{Fallback, Options, RedisLimiter};
use tollgate_tower::{Builder, Key, OnError, RateLimitInfo, RateLimitLayer, Route, Store};

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
