//! The layer on plain hyper (no axum): the server records each connection's peer as a
//! `SocketAddr` request extension, which the layer keys by.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::num::NonZeroUsize;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use tollgate_tower::{Key, RateLimitLayer, Route};
use tower::ServiceBuilder;

async fn hello(_: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(b"hello"))))
}

#[tokio::test]
async fn plain_hyper_keys_by_the_socket_addr_extension() {
    let layer = RateLimitLayer::memory(NonZeroUsize::new(100).unwrap())
        .policy("per-ip", "fixed-window 1/hour", Key::Ip)
        .route(Route::new("/").policy("per-ip"))
        .build()
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, peer) = listener.accept().await.unwrap();
            let svc = ServiceBuilder::new()
                .map_request(move |mut req: Request<Incoming>| {
                    req.extensions_mut().insert::<SocketAddr>(peer);
                    req
                })
                .layer(layer.clone())
                .service_fn(hello);
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), TowerToHyperService::new(svc)),
            );
        }
    });
    let get = |from: &'static str| async move {
        let mut c = HttpConnector::new();
        c.set_local_address(Some(from.parse().unwrap()));
        let client = Client::builder(TokioExecutor::new()).build::<_, Empty<Bytes>>(c);
        let r = client
            .get(format!("http://{addr}/").parse().unwrap())
            .await
            .unwrap();
        let (status, rl) = (r.status(), r.headers().get("ratelimit").cloned());
        let _ = r.into_body().collect().await.unwrap();
        (status, rl)
    };
    let (status, rl) = get("127.0.0.1").await;
    assert_eq!(status, StatusCode::OK);
    let rl = rl.expect("RateLimit on an admitted response");
    assert!(
        rl.to_str().unwrap().starts_with(r#""per-ip";r=0;t="#),
        "{rl:?}"
    );
    assert_eq!(get("127.0.0.1").await.0, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(get("127.0.0.2").await.0, StatusCode::OK, "another peer");
}

/// An error from the inner service (not an error answer: the service fails, and hyper
/// drops the connection) gives the request's concurrency slot back before the error
/// reaches the server, so the client that saw the connection fail finds the slot free.
#[tokio::test]
async fn an_inner_service_error_releases_its_concurrency_slot() {
    let layer = RateLimitLayer::memory(NonZeroUsize::new(100).unwrap())
        .policy("slots", "concurrency 1", Key::Ip)
        .route(Route::new("/").policy("slots"))
        .build()
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, peer) = listener.accept().await.unwrap();
            let svc = ServiceBuilder::new()
                .map_request(move |mut req: Request<Incoming>| {
                    req.extensions_mut().insert::<SocketAddr>(peer);
                    req
                })
                .layer(layer.clone())
                .service_fn(|req: Request<Incoming>| async move {
                    if req.uri().path() == "/fail" {
                        Err(std::io::Error::other("the service failed"))
                    } else {
                        Ok(Response::new(Full::new(Bytes::from_static(b"hello"))))
                    }
                });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), TowerToHyperService::new(svc)),
            );
        }
    });
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let get = |path: &'static str| {
        let client = client.clone();
        async move {
            client
                .get(format!("http://{addr}{path}").parse().unwrap())
                .await
        }
    };
    for _ in 0..3 {
        let failed = get("/fail").await;
        assert!(failed.is_err(), "hyper drops the connection: {failed:?}");
    }
    let ok = get("/").await.unwrap();
    assert_eq!(
        ok.status(),
        StatusCode::OK,
        "every failed request gave its slot back"
    );
    let _ = ok.into_body().collect().await.unwrap();
}
