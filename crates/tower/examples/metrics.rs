//! An axum server behind tollgate-tower with its metrics at `/metrics`: the layer records
//! the core's metric model on the `metrics` crate facade (feature `metrics`), and
//! `metrics-exporter-prometheus`, installed as the recorder, writes them as Prometheus text.
//!
//! ```sh
//! cargo run -p tollgate-tower --features metrics --example metrics   # 127.0.0.1:3000
//! for i in $(seq 8); do curl -s -o /dev/null -w '%{http_code} ' http://127.0.0.1:3000/; done
//! curl -s http://127.0.0.1:3000/metrics | grep '^tollgate_'
//! ```
//!
//! `ADDR` sets the address to listen on (`127.0.0.1:0` for any free port). What each metric
//! means, alerts and a dashboard: `docs/production.md`.

use std::net::SocketAddr;
use std::num::NonZeroUsize;

use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};
use tollgate::metrics::WAIT_DURATION;
use tollgate_tower::{ConfigError, Key, RateLimitLayer, Route};

/// Installs the Prometheus exporter as the process's recorder (once per process), with the
/// model's buckets for the wait histogram, and describes the model's instruments.
pub fn install_recorder() -> Result<PrometheusHandle, BuildError> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(WAIT_DURATION.prometheus.into()),
            &tollgate_tower::metrics::wait_buckets(),
        )?
        .install_recorder()?;
    tollgate_tower::metrics::describe();
    Ok(handle)
}

/// The app: `/` limited by the policy `policy` (`fixed-window 5/min` per client address),
/// `/metrics` exempt and serving the exporter's text.
pub fn app(handle: PrometheusHandle, policy: &str) -> Result<Router, ConfigError> {
    let limit = RateLimitLayer::memory(NonZeroUsize::new(100_000).unwrap())
        .policy(policy, "fixed-window 5/min", Key::Ip)
        .route(Route::new("/metrics").exempt())
        .route(Route::new("/").policy(policy))
        .build()?;
    Ok(Router::new()
        .route("/", get(|| async { "hello\n" }))
        .route(
            "/metrics",
            get(move || async move {
                // The exporter's housekeeping (histogram windows), then the scrape.
                handle.run_upkeep();
                handle.render()
            }),
        )
        .layer(limit))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Before serving: the layer registers a route's series with the recorder installed at
    // its first request.
    let handle = install_recorder()?;
    let app = app(handle, "per-ip")?;
    let addr = std::env::var("ADDR").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
