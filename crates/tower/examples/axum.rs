//! An axum server behind tollgate-tower, on the in-memory store.
//!
//! ```sh
//! cargo run -p tollgate-tower --example axum            # listens on 127.0.0.1:3000
//! curl -i http://127.0.0.1:3000/                          # RateLimit fields
//! for i in $(seq 25); do curl -s -o /dev/null -w '%{http_code} ' http://127.0.0.1:3000/; done
//! curl -i -X POST http://127.0.0.1:3000/login             # its own, stricter stack
//! ```
//!
//! `ADDR` sets the address to listen on (`127.0.0.1:0` for any free port).

use std::net::SocketAddr;
use std::num::NonZeroUsize;

use axum::extract::Extension;
use axum::routing::{get, post};
use axum::Router;
use tollgate_tower::{Key, RateLimitInfo, RateLimitLayer, Route};

async fn hello(Extension(info): Extension<RateLimitInfo>) -> String {
    let left = info.decision.map(|d| d.remaining);
    format!("hello; {} has {left:?} left\n", info.policy)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let limit = RateLimitLayer::memory(NonZeroUsize::new(100_000).unwrap())
        // Per client address: 10 per second, bursts of 20.
        .policy("per-ip", "10/s burst 20", Key::Ip)
        // Logins: 5 a minute and 20 an hour, all or nothing.
        .stack(
            "login",
            &["fixed-window 5/min", "sliding-window 20/hour"],
            Key::Ip,
        )
        // Health checks are never limited; logins cost their own stack; everything else
        // shares per-ip.
        .route(Route::new("/health").exempt())
        .route(Route::new("/login").methods(["POST"]).policy("login"))
        .route(Route::new("/").policy("per-ip"))
        // Behind a reverse proxy on this machine, its X-Forwarded-For names the client.
        .trusted_proxies(["127.0.0.1", "::1"])
        .build()?;

    let app = Router::new()
        .route("/", get(hello))
        .route("/login", post(hello))
        .route("/health", get(|| async { "ok\n" }))
        .layer(limit);

    let addr = std::env::var("ADDR").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{}", listener.local_addr()?);
    // The peer address is what the layer keys by: serve with connect info.
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
