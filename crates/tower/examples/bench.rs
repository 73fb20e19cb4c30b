//! The benchmark server (`bench/run.sh` drives it with wrk): one axum handler behind
//! tollgate-tower or tower_governor with the same quota (GCRA, 100 per second, bursts of
//! 100), keyed by the client's IP: for both, the `X-Forwarded-For` written by the trusted
//! loopback proxy (wrk), else the peer.
//!
//! `bench <tollgate|governor|governor-headers>`: prints `port <n>` once it listens on a
//! free loopback port, then serves until killed.

use std::net::SocketAddr;
use std::num::NonZeroUsize;

use axum::routing::get;
use axum::Router;
use tollgate_tower::{Key, RateLimitLayer, Route};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::key_extractor::SmartIpKeyExtractor;
use tower_governor::GovernorLayer;

#[tokio::main]
async fn main() {
    let mode = std::env::args().nth(1).unwrap_or_default();
    let app = Router::new().route("/", get(|| async { "hello" }));
    let app = match mode.as_str() {
        "tollgate" => app.layer(
            RateLimitLayer::memory(NonZeroUsize::new(100_000).unwrap())
                .policy("per-ip", "gcra 100/s burst 100", Key::Ip)
                .route(Route::new("/").policy("per-ip"))
                .trusted_proxies(["127.0.0.1"])
                .build()
                .unwrap(),
        ),
        "governor" => {
            // One cell every 10 ms (what `per_millisecond(10)` means), bursts of 100.
            let config = GovernorConfigBuilder::default()
                .per_millisecond(10)
                .burst_size(100)
                .key_extractor(SmartIpKeyExtractor)
                .finish()
                .unwrap();
            app.layer(GovernorLayer::new(config))
        }
        "governor-headers" => {
            let config = GovernorConfigBuilder::default()
                .per_millisecond(10)
                .burst_size(100)
                .key_extractor(SmartIpKeyExtractor)
                .use_headers()
                .finish()
                .unwrap();
            app.layer(GovernorLayer::new(config))
        }
        other => panic!("mode {other:?}: tollgate, governor or governor-headers"),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    println!("port {}", listener.local_addr().unwrap().port());
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await
    .unwrap();
}
