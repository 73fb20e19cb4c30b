//! The layer in front of a real tonic gRPC server (the prebuilt health service of
//! `tonic-health`) on a loopback port, called by a real tonic client over HTTP/2. A
//! refused call reaches the client as a gRPC status (`RESOURCE_EXHAUSTED` for a quota),
//! with the rate-limit fields as metadata; a server stream holds its concurrency slot for
//! as long as it is open.

mod common;

use std::net::SocketAddr;

use common::{drain, eventually, watched};
use tollgate_tower::{Key, MissingKey, RateLimitLayer, Route, Store};
use tonic::transport::server::{TcpConnectInfo, TcpIncoming};
use tonic::transport::{Channel, Server};
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use tower::ServiceBuilder;

/// tonic records the peer as `TcpConnectInfo`; the layer keys by a `SocketAddr` extension.
fn with_peer(mut req: http::Request<tonic::body::Body>) -> http::Request<tonic::body::Body> {
    let peer = req
        .extensions()
        .get::<TcpConnectInfo>()
        .and_then(TcpConnectInfo::remote_addr);
    if let Some(peer) = peer {
        req.extensions_mut().insert(peer);
    }
    req
}

/// Serves the health service behind `layer` on an ephemeral loopback port.
async fn serve<S: Store>(layer: RateLimitLayer<S>) -> SocketAddr {
    let (_, health) = tonic_health::server::health_reporter();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stack = ServiceBuilder::new().map_request(with_peer).layer(layer);
    tokio::spawn(
        Server::builder()
            .layer(stack)
            .add_service(health)
            .serve_with_incoming(TcpIncoming::from(listener)),
    );
    addr
}

async fn client(addr: SocketAddr) -> HealthClient<Channel> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    HealthClient::new(channel)
}

fn overall() -> HealthCheckRequest {
    HealthCheckRequest {
        service: String::new(),
    }
}

fn text<'a>(metadata: &'a tonic::metadata::MetadataMap, name: &str) -> &'a str {
    metadata
        .get(name)
        .unwrap_or_else(|| panic!("no {name} in {metadata:?}"))
        .to_str()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_over_the_limit_get_resource_exhausted_with_the_fields() {
    let layer = RateLimitLayer::memory(std::num::NonZeroUsize::new(100).unwrap())
        .policy("per-ip", "fixed-window 2/hour", Key::Ip)
        .policy("per-key", "fixed-window 2/hour", Key::ApiKey)
        .route(Route::new("/grpc.health.v1.Health/Watch").policy("per-key"))
        .route(Route::new("/").policy("per-ip"))
        .missing_key(MissingKey::Reject)
        .build()
        .unwrap();
    let mut c = client(serve(layer).await).await;
    for remaining in [1, 0] {
        let ok = c.check(overall()).await.unwrap();
        assert_eq!(ok.get_ref().status(), ServingStatus::Serving);
        assert!(
            text(ok.metadata(), "ratelimit").starts_with(&format!(r#""per-ip";r={remaining};t="#)),
            "{:?}",
            ok.metadata()
        );
    }
    let denied = c.check(overall()).await.unwrap_err();
    assert_eq!(denied.code(), Code::ResourceExhausted, "{denied:?}");
    let retry: u64 = text(denied.metadata(), "retry-after").parse().unwrap();
    assert!((1..=3600).contains(&retry), "retry-after {retry}");
    assert_eq!(
        denied.message(),
        format!("Rate limit exceeded; retry in {retry} s. Violated policies: per-ip")
    );
    assert_eq!(
        text(denied.metadata(), "ratelimit-policy"),
        r#""per-ip";q=2;w=3600"#
    );
    assert!(text(denied.metadata(), "ratelimit").starts_with(r#""per-ip";r=0;t="#));
    assert_eq!(
        text(denied.metadata(), "grpc-retry-pushback-ms"),
        (retry * 1000).to_string(),
        "the server pushback a gRPC retry policy waits for"
    );
    // A refusal before the decision (no API key, and keyless calls are rejected) is
    // INVALID_ARGUMENT, with the problem's detail as the message.
    let refused = c.watch(overall()).await.unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
    assert!(refused.message().contains("no key"), "{refused:?}");
    // With a key, the stream opens.
    let mut req = tonic::Request::new(overall());
    req.metadata_mut()
        .insert("x-api-key", "secret".parse().unwrap());
    let mut stream = c.watch(req).await.unwrap().into_inner();
    let first = stream.message().await.unwrap().unwrap();
    assert_eq!(first.status(), ServingStatus::Serving);
}

/// A server-streaming call holds its concurrency slot while the stream is open; the
/// client cancelling it gives the slot back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_stream_holds_its_concurrency_slot_until_cancelled() {
    let (builder, mut releases) = watched();
    let layer = builder
        .policy("slots", "concurrency 1", Key::Ip)
        .route(Route::new("/").policy("slots"))
        .build()
        .unwrap();
    let mut c = client(serve(layer).await).await;
    let watch = c.watch(overall()).await.unwrap();
    assert_eq!(text(watch.metadata(), "ratelimit"), r#""slots";r=0"#);
    let mut stream = watch.into_inner();
    let first = stream.message().await.unwrap().unwrap();
    assert_eq!(first.status(), ServingStatus::Serving);
    let denied = c.check(overall()).await.unwrap_err();
    assert_eq!(denied.code(), Code::ResourceExhausted, "{denied:?}");
    assert_eq!(text(denied.metadata(), "ratelimit"), r#""slots";r=0"#);
    assert_eq!(drain(&mut releases), 0, "the stream is open");
    drop(stream);
    assert_eq!(
        eventually("the stream's release", releases.recv())
            .await
            .unwrap(),
        "ip4:127.0.0.1"
    );
    let ok = c.check(overall()).await.unwrap();
    assert_eq!(ok.get_ref().status(), ServingStatus::Serving);
    // A unary call's slot is free by the time its client has the trailers.
    assert_eq!(drain(&mut releases), 1);
    assert_eq!(
        c.check(overall()).await.unwrap().get_ref().status(),
        ServingStatus::Serving
    );
}
