//! Concurrency limits in the layer, in a real axum server on a loopback port driven by a
//! real HTTP client: an admitted request holds its slot until its response body has ended
//! or was dropped, and gives it back exactly once on every path. No test waits on a clock:
//! the handlers report on channels and wait behind a gate the test opens, and where the
//! server gives a slot back on its own time (a torn-down connection), the test waits for
//! the store's report of the release.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use common::{drain, eventually, watched, Watched};
use http::{HeaderMap, StatusCode};
use http_body::Frame;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, watch};
use tollgate_tower::{Builder, Key, RateLimitLayer, Route};

/// What the handlers share with the test.
#[derive(Clone)]
struct Hooks {
    /// Each `/slow/{round}` request reports here when its handler starts.
    entered: mpsc::UnboundedSender<u32>,
    /// `/slow/{round}` answers once the gate is at `round` or beyond.
    gate: watch::Receiver<u32>,
    /// Each `/stream` request hands the test the sender of its body.
    streams: mpsc::UnboundedSender<mpsc::Sender<Bytes>>,
}

async fn slow(Path(round): Path<u32>, State(hooks): State<Hooks>) -> &'static str {
    hooks.entered.send(round).unwrap();
    let mut gate = hooks.gate.clone();
    gate.wait_for(|open| *open >= round).await.unwrap();
    "done"
}

/// A body whose chunks the test sends; it ends when the test drops the sender.
struct Chunks(mpsc::Receiver<Bytes>);

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|c| c.map(|b| Ok(Frame::data(b))))
    }
}

/// The handler returns at once; the body streams for as long as the test sends.
async fn stream(State(hooks): State<Hooks>) -> Response {
    let (tx, rx) = mpsc::channel(1);
    hooks.streams.send(tx).unwrap();
    Response::new(Body::new(Chunks(rx)))
}

async fn fail() -> Result<&'static str, StatusCode> {
    Err(StatusCode::INTERNAL_SERVER_ERROR)
}

async fn panics() -> &'static str {
    panic!("the handler panics (on purpose, for the test)")
}

struct Server {
    addr: SocketAddr,
    entered: mpsc::UnboundedReceiver<u32>,
    gate: watch::Sender<u32>,
    streams: mpsc::UnboundedReceiver<mpsc::Sender<Bytes>>,
}

/// Serves the handlers behind `layer` on an ephemeral loopback port.
async fn serve(layer: RateLimitLayer<Watched>) -> Server {
    let (entered_tx, entered) = mpsc::unbounded_channel();
    let (gate, gate_rx) = watch::channel(0);
    let (streams_tx, streams) = mpsc::unbounded_channel();
    let hooks = Hooks {
        entered: entered_tx,
        gate: gate_rx,
        streams: streams_tx,
    };
    let app = Router::new()
        .route("/slow/{round}", get(slow))
        .route("/stream", get(stream))
        .route("/fail", get(fail))
        .route("/panic", get(panics))
        .route("/", get(|| async { "ok" }))
        .with_state(hooks)
        .layer(layer);
    let addr = common::serve(app, [127, 0, 0, 1].into()).await;
    Server {
        addr,
        entered,
        gate,
        streams,
    }
}

fn build(builder: Builder<Watched>) -> RateLimitLayer<Watched> {
    builder
        .route(Route::new("/").policy("slots"))
        .build()
        .unwrap()
}

type HttpClient = Client<HttpConnector, Empty<Bytes>>;

fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .unwrap_or_else(|| panic!("no {name}"))
            .to_str()
            .unwrap()
    }
}

/// A GET read to the end of its body.
async fn get_path(c: &HttpClient, addr: SocketAddr, path: &str) -> Answer {
    let resp = c
        .get(format!("http://{addr}{path}").parse().unwrap())
        .await
        .unwrap();
    let (status, headers) = (resp.status(), resp.headers().clone());
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    Answer {
        status,
        headers,
        body: String::from_utf8(body.to_vec()).unwrap(),
    }
}

/// A raw HTTP/1.1 connection that sends a GET and reads until `until` has arrived; the
/// test drops it to go away mid-response.
async fn raw_get(addr: SocketAddr, path: &str, until: &str) -> tokio::net::TcpStream {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 1024];
    while !String::from_utf8_lossy(&seen).contains(until) {
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0, "the server closed before {until:?}");
        seen.extend_from_slice(&buf[..n]);
    }
    s
}

/// The slots of a round come back: `N` slow requests at once against a limit of `K`, twice.
/// While they run exactly `K` are in their handler and the rest are answered 429; once
/// they are let through and read to the end, all `K` slots are free for the next round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_k_of_n_slow_requests_run_and_their_slots_come_back() {
    const N: usize = 12;
    const K: usize = 3;
    let (builder, mut releases) = watched();
    let mut server = serve(build(builder.policy("slots", "concurrency 3", Key::Ip))).await;
    let c = client();
    for round in 1..=2u32 {
        let (done_tx, mut done) = mpsc::unbounded_channel();
        for _ in 0..N {
            let (c, done_tx, addr) = (c.clone(), done_tx.clone(), server.addr);
            tokio::spawn(async move {
                let _ = done_tx.send(get_path(&c, addr, &format!("/slow/{round}")).await);
            });
        }
        // Every request is either in its handler (admitted; it cannot answer before the
        // gate opens) or answered (denied): wait until all N are one or the other.
        let (mut entered, mut answered) = (0, Vec::new());
        while entered + answered.len() < N {
            tokio::select! {
                r = server.entered.recv() => {
                    assert_eq!(r, Some(round));
                    entered += 1;
                }
                a = done.recv() => answered.push(a.unwrap()),
            }
        }
        assert_eq!(entered, K, "round {round}: admitted while they run");
        assert_eq!(answered.len(), N - K);
        for a in &answered {
            assert_eq!(a.status, StatusCode::TOO_MANY_REQUESTS, "{}", a.body);
            assert_eq!(a.header("ratelimit-policy"), r#""slots";q=3"#);
            assert_eq!(a.header("ratelimit"), r#""slots";r=0"#);
            assert_eq!(a.header("retry-after"), "1");
            let body: serde_json::Value = serde_json::from_str(&a.body).unwrap();
            assert_eq!(body["violated-policies"], serde_json::json!(["slots"]));
        }
        assert_eq!(drain(&mut releases), 0, "nothing released while they run");
        server.gate.send(round).unwrap();
        for _ in 0..K {
            let a = done.recv().await.unwrap();
            assert_eq!((a.status, a.body.as_str()), (StatusCode::OK, "done"));
        }
        // Each admitted request gave its slot back once, before its client had read the
        // end of the response.
        assert_eq!(drain(&mut releases), K, "round {round}: one release each");
    }
}

/// A streaming body holds its slot after the handler has returned, until the body ends
/// (read to the end) or is dropped (the client went away mid-body).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_body_holds_its_slot_until_it_ends_or_the_client_leaves() {
    let (builder, mut releases) = watched();
    let mut server = serve(build(builder.policy("slots", "concurrency 1", Key::Ip))).await;
    let (c, addr) = (client(), server.addr);

    // Read to the end.
    let resp = c
        .get(format!("http://{addr}/stream").parse().unwrap())
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["ratelimit"], r#""slots";r=0"#);
    let tx = server.streams.recv().await.unwrap();
    let mut body = resp.into_body();
    tx.send(Bytes::from_static(b"first")).await.unwrap();
    let frame = body.frame().await.unwrap().unwrap();
    assert_eq!(frame.into_data().unwrap(), "first");
    let a = get_path(&c, addr, "/").await;
    assert_eq!(
        a.status,
        StatusCode::TOO_MANY_REQUESTS,
        "the handler has returned, the body still streams: the slot is held"
    );
    tx.send(Bytes::from_static(b"last")).await.unwrap();
    drop(tx);
    assert_eq!(body.collect().await.unwrap().to_bytes(), "last");
    assert_eq!(drain(&mut releases), 1);
    let a = get_path(&c, addr, "/").await;
    assert_eq!(a.status, StatusCode::OK, "the body ended: the slot is free");
    assert_eq!(drain(&mut releases), 1);

    // The client leaves mid-body.
    let socket = raw_get(addr, "/stream", "HTTP/1.1 200").await;
    let tx = server.streams.recv().await.unwrap();
    tx.send(Bytes::from_static(b"mid-body")).await.unwrap();
    // The client has the head and a chunk; the slot is held.
    assert_eq!(
        get_path(&c, addr, "/").await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    drop(socket);
    // The server notices the closed connection and drops the body: the receiver is gone
    // (after the slot, which the body drops first).
    eventually("the body dropped", tx.closed()).await;
    assert_eq!(drain(&mut releases), 1);
    assert_eq!(get_path(&c, addr, "/").await.status, StatusCode::OK);
    assert_eq!(drain(&mut releases), 1);
}

/// An error answer, a panicking handler and a request whose client left before the answer
/// each give their slot back, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_panics_and_cancelled_requests_release() {
    let (builder, mut releases) = watched();
    let mut server = serve(build(builder.policy("slots", "concurrency 1", Key::Ip))).await;
    let (c, addr) = (client(), server.addr);

    // A handler that answers with an error: the slot is free when its body has ended.
    for _ in 0..3 {
        let a = get_path(&c, addr, "/fail").await;
        assert_eq!(a.status, StatusCode::INTERNAL_SERVER_ERROR);
    }
    assert_eq!(drain(&mut releases), 3);

    // A panicking handler: the server drops the connection's task, and the slot with it.
    let r = c.get(format!("http://{addr}/panic").parse().unwrap()).await;
    assert!(r.is_err(), "the connection was torn down: {r:?}");
    assert_eq!(
        eventually("a release", releases.recv()).await.unwrap(),
        "ip4:127.0.0.1"
    );
    assert_eq!(get_path(&c, addr, "/").await.status, StatusCode::OK);
    assert_eq!(drain(&mut releases), 1);

    // The client leaves while the handler runs: the server cancels the request's future.
    let socket = {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /slow/9 HTTP/1.1\r\nHost: test\r\n\r\n")
            .await
            .unwrap();
        s
    };
    assert_eq!(server.entered.recv().await, Some(9));
    assert_eq!(
        get_path(&c, addr, "/").await.status,
        StatusCode::TOO_MANY_REQUESTS,
        "held while the handler runs"
    );
    drop(socket);
    assert_eq!(
        eventually("a release", releases.recv()).await.unwrap(),
        "ip4:127.0.0.1"
    );
    assert_eq!(get_path(&c, addr, "/").await.status, StatusCode::OK);
    assert_eq!(drain(&mut releases), 1);
}

/// A stack of a rate and a concurrency limit is all or nothing: a request the concurrency
/// limit denies is not charged to the window, and only the concurrency limit is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_and_concurrency_stack_is_all_or_nothing() {
    let (builder, mut releases) = watched();
    let layer = build(builder.stack("slots", &["fixed-window 3/hour", "concurrency 1"], Key::Ip));
    let mut server = serve(layer).await;
    let (c, addr) = (client(), server.addr);
    let held = {
        let c = c.clone();
        tokio::spawn(async move { get_path(&c, addr, "/slow/1").await })
    };
    assert_eq!(server.entered.recv().await, Some(1));
    let a = get_path(&c, addr, "/").await;
    assert_eq!(a.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(a.header("ratelimit"), r#""slots.2";r=0"#);
    let body: serde_json::Value = serde_json::from_str(&a.body).unwrap();
    assert_eq!(body["violated-policies"], serde_json::json!(["slots.2"]));
    server.gate.send(1).unwrap();
    assert_eq!(held.await.unwrap().status, StatusCode::OK);
    // The window counted the held request only: two more fit, the denied one was free.
    for _ in 0..2 {
        assert_eq!(get_path(&c, addr, "/").await.status, StatusCode::OK);
    }
    let a = get_path(&c, addr, "/").await;
    assert_eq!(a.status, StatusCode::TOO_MANY_REQUESTS);
    let body: serde_json::Value = serde_json::from_str(&a.body).unwrap();
    assert_eq!(body["violated-policies"], serde_json::json!(["slots.1"]));
    assert_eq!(drain(&mut releases), 3, "the three admitted requests");
}

/// A fair share's shared limit may be a concurrency limit (its tenant window may not: the
/// configuration test in axum.rs): its slots are given back; the tenant window is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_share_on_a_concurrency_limit_releases_the_shared_slots() {
    let (builder, mut releases) = watched();
    let layer = build(builder.fair_share("slots", "concurrency 1", "fixed-window 1/hour", Key::Ip));
    let mut server = serve(layer).await;
    let (c, addr) = (client(), server.addr);
    let held = {
        let c = c.clone();
        tokio::spawn(async move { get_path(&c, addr, "/slow/1").await })
    };
    assert_eq!(server.entered.recv().await, Some(1));
    assert_eq!(
        get_path(&c, addr, "/").await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    server.gate.send(1).unwrap();
    assert_eq!(held.await.unwrap().status, StatusCode::OK);
    assert_eq!(get_path(&c, addr, "/").await.status, StatusCode::OK);
    assert_eq!(drain(&mut releases), 2);
}
