//! HEAD on a GET route (issue 26, defect 4): HTTP defines HEAD as GET without a body (RFC
//! 9110, section 9.3.2) and axum serves it with the GET handler, so a route limited to GET
//! limits HEAD too, from the same budget. Before the fix, HEAD matched no GET-only route and
//! went through unlimited, running the GET handler each time.
//!
//! A real axum server on a loopback port, `get(handler)` as an application writes it,
//! driven by a real HTTP client.

mod common;

use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::Full;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use tollgate_tower::{Key, RateLimitLayer, Route};

/// Serves `GET /read` (which axum also runs for HEAD) behind a layer limiting it, for GET
/// only, to `fixed-window 2/min` per IP; the address and the handler's run count.
async fn serve() -> (SocketAddr, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    let layer = RateLimitLayer::memory(NonZeroUsize::new(1000).unwrap())
        .policy("read", "fixed-window 2/min", Key::Ip)
        .route(Route::new("/read").methods(["GET"]).policy("read"))
        .build()
        .unwrap();
    let app = Router::new()
        .route(
            "/read",
            get(move || {
                counted.fetch_add(1, Ordering::SeqCst);
                async { "the resource" }
            }),
        )
        .layer(layer);
    let addr = common::serve(app, "127.0.0.1".parse::<IpAddr>().unwrap()).await;
    (addr, runs)
}

async fn send(
    c: &Client<HttpConnector, Full<Bytes>>,
    addr: SocketAddr,
    method: Method,
) -> (StatusCode, Option<String>) {
    let req = Request::builder()
        .method(method)
        .uri(format!("http://{addr}/read"))
        .body(Full::default())
        .unwrap();
    let resp = c.request(req).await.unwrap();
    let limited = resp
        .headers()
        .get("ratelimit")
        .map(|v| v.to_str().unwrap().to_string());
    (resp.status(), limited)
}

fn client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build(HttpConnector::new())
}

#[tokio::test]
async fn head_is_denied_once_get_has_spent_the_budget() {
    let (addr, runs) = serve().await;
    let c = client();
    assert_eq!(send(&c, addr, Method::GET).await.0, StatusCode::OK);
    assert_eq!(send(&c, addr, Method::GET).await.0, StatusCode::OK);
    for _ in 0..3 {
        let (status, _) = send(&c, addr, Method::HEAD).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "HEAD after 2 GETs");
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        2,
        "the GET handler ran for no denied HEAD"
    );
}

#[tokio::test]
async fn head_counts_toward_the_get_budget() {
    let (addr, runs) = serve().await;
    let c = client();
    let (status, limited) = send(&c, addr, Method::HEAD).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        limited.as_deref().is_some_and(|v| v.contains("r=1")),
        "HEAD carries the route's fields, one unit charged: {limited:?}"
    );
    assert_eq!(send(&c, addr, Method::HEAD).await.0, StatusCode::OK);
    assert_eq!(
        send(&c, addr, Method::GET).await.0,
        StatusCode::TOO_MANY_REQUESTS,
        "two HEADs spent the GET route's 2/min"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}
