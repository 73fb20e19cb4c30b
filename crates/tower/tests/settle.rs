//! Routes that reserve, then settle after the response ([`Route::count_when`],
//! [`Route::measured`]), in a real axum server on a loopback port driven by a real HTTP
//! client. The clock is set by hand (still), so every number is the settle's doing.

mod common;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::Extension;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use tokio::sync::{mpsc, oneshot};
use tollgate_tower::{
    ActualCost, Builder, Key, ManualClock, Memory, RateLimitInfo, RateLimitLayer, Route, Store,
};

type HttpClient = Client<HttpConnector, Full<Bytes>>;

fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build(HttpConnector::new())
}

fn manual() -> Builder<Memory<ManualClock>> {
    let clock = ManualClock::new(1_000_000_000_000);
    Builder::new(move |_, limits| {
        Memory::with_clock(limits, NonZeroUsize::new(100).unwrap(), clock.clone())
    })
}

/// What the layer decided for this request: the remaining count after its own charge.
fn remaining(info: &Option<Extension<RateLimitInfo>>) -> u64 {
    info.as_ref().unwrap().decision.unwrap().remaining
}

async fn serve<S: Store>(app: Router, layer: RateLimitLayer<S>) -> SocketAddr {
    common::serve(app.layer(layer), "127.0.0.1".parse().unwrap()).await
}

async fn send(
    c: &HttpClient,
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, HeaderMap, String) {
    let mut req = Request::post(format!("http://{addr}{path}"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = c.request(req.body(Full::default()).unwrap()).await.unwrap();
    let (status, headers) = (resp.status(), resp.headers().clone());
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, headers, String::from_utf8(body.to_vec()).unwrap())
}

/// A login: right password 200, wrong 401; the body is the remaining count.
async fn login(info: Option<Extension<RateLimitInfo>>, headers: HeaderMap) -> Response {
    let status = match headers.get("x-password").map(|v| v.as_bytes()) {
        Some(b"right") => StatusCode::OK,
        _ => StatusCode::UNAUTHORIZED,
    };
    (status, remaining(&info).to_string()).into_response()
}

#[tokio::test]
async fn a_login_route_counts_only_failed_logins() {
    let layer = manual()
        .policy("login", "fixed-window 3/min", Key::Ip)
        .route(
            Route::new("/login")
                .policy("login")
                .count_when(|r| r.status.is_client_error()),
        )
        .build()
        .unwrap();
    let addr = serve(Router::new().route("/login", any(login)), layer).await;
    let c = client();
    let right = [("x-password", "right")];
    // Successes are reserved (remaining 2 while each runs) and given back.
    for _ in 0..5 {
        let (status, _, body) = send(&c, addr, "/login", &right).await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "2"));
    }
    // Failures stay charged: 3 of them spend the window.
    for left in ["2", "1", "0"] {
        let (status, _, body) = send(&c, addr, "/login", &[]).await;
        assert_eq!((status, body.as_str()), (StatusCode::UNAUTHORIZED, left));
    }
    // Locked out, the right password included.
    let (status, _, _) = send(&c, addr, "/login", &right).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn a_route_refunding_server_errors_charges_only_the_others() {
    let layer = manual()
        .policy("api", "gcra 10/min", Key::Ip)
        .route(
            Route::new("/")
                .policy("api")
                .count_when(|r| !r.status.is_server_error()),
        )
        .build()
        .unwrap();
    let app = Router::new()
        .route(
            "/fail",
            any(|i: Option<Extension<RateLimitInfo>>| async move {
                (StatusCode::BAD_GATEWAY, remaining(&i).to_string())
            }),
        )
        .route(
            "/ok",
            any(|i: Option<Extension<RateLimitInfo>>| async move { remaining(&i).to_string() }),
        );
    let addr = serve(app, layer).await;
    let c = client();
    for _ in 0..3 {
        let (status, _, body) = send(&c, addr, "/fail", &[]).await;
        assert_eq!((status, body.as_str()), (StatusCode::BAD_GATEWAY, "9"));
    }
    assert_eq!(send(&c, addr, "/ok", &[]).await.2, "9");
    assert_eq!(send(&c, addr, "/ok", &[]).await.2, "8");
}

/// The LLM-like handler's body: one chunk per cost the test sends (added to the reported
/// cost, if it reports), the end when the test closes the channel. It tells the test when
/// it is dropped, which is after the layer has settled (the layer's body drops its settle
/// before the inner body).
struct Streamed {
    costs: mpsc::UnboundedReceiver<u64>,
    report: Option<ActualCost>,
    dropped: Option<oneshot::Sender<()>>,
}

impl Drop for Streamed {
    fn drop(&mut self) {
        if let Some(tx) = self.dropped.take() {
            let _ = tx.send(());
        }
    }
}

impl http_body::Body for Streamed {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        match std::task::ready!(self.costs.poll_recv(cx)) {
            Some(cost) => {
                if let Some(r) = &self.report {
                    r.add(cost);
                }
                Poll::Ready(Some(Ok(http_body::Frame::data(Bytes::from(format!(
                    "{cost};"
                ))))))
            }
            None => Poll::Ready(None),
        }
    }
}

/// The bodies the next requests to `/llm` stream, in order.
#[derive(Clone, Default)]
struct Streams(Arc<Mutex<VecDeque<Streamed>>>);

async fn llm(Extension(streams): Extension<Streams>) -> Response {
    let body = streams.0.lock().unwrap().pop_front().unwrap();
    let report = body.report.clone();
    let mut resp = Body::new(body).into_response();
    if let Some(r) = report {
        resp.extensions_mut().insert(r);
    }
    resp
}

/// What a request of estimate 0 (reporting nothing) sees remaining: the budget now.
async fn budget(c: &HttpClient, addr: SocketAddr) -> u64 {
    send(c, addr, "/peek", &[]).await.2.parse().unwrap()
}

/// A server whose `/llm` reserves `x-estimate` of 1000 tokens a minute and settles what
/// its body reports, `/header` what its `x-actual-cost` header says, and `/peek` (estimate
/// 0) reads the budget.
async fn llm_server() -> (SocketAddr, Streams) {
    let estimate = |p: &http::request::Parts| {
        p.headers
            .get("x-estimate")
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .unwrap_or(0)
    };
    let layer = manual()
        .policy("tokens", "fixed-window 1000/min", Key::Ip)
        .route(Route::new("/llm").policy("tokens").measured(estimate))
        .route(
            Route::new("/header")
                .policy("tokens")
                .measured(estimate)
                .actual_header("x-actual-cost"),
        )
        .route(Route::new("/peek").policy("tokens").measured(|_| 0))
        .build()
        .unwrap();
    let streams = Streams::default();
    let app = Router::new()
        .route("/llm", any(llm))
        .route(
            "/header",
            any(|| async { ([("x-actual-cost", "40")], "done") }),
        )
        .route(
            "/peek",
            any(|i: Option<Extension<RateLimitInfo>>| async move { remaining(&i).to_string() }),
        )
        .layer(Extension(streams.clone()));
    (serve(app, layer).await, streams)
}

/// A body for the next `/llm` request: the sender of its costs, and its drop.
fn next_stream(
    streams: &Streams,
    reports: bool,
) -> (mpsc::UnboundedSender<u64>, oneshot::Receiver<()>) {
    let (costs_tx, costs) = mpsc::unbounded_channel();
    let (dropped_tx, dropped) = oneshot::channel();
    streams.0.lock().unwrap().push_back(Streamed {
        costs,
        report: reports.then(ActualCost::default),
        dropped: Some(dropped_tx),
    });
    (costs_tx, dropped)
}

async fn open_llm(
    c: &HttpClient,
    addr: SocketAddr,
    estimate: u64,
) -> hyper::Response<hyper::body::Incoming> {
    let req = Request::post(format!("http://{addr}/llm"))
        .header("x-estimate", estimate.to_string())
        .body(Full::default())
        .unwrap();
    let resp = c.request(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    resp
}

#[tokio::test]
async fn a_streamed_cost_is_settled_when_the_body_ends() {
    let (addr, streams) = llm_server().await;
    let c = client();
    let (costs, _dropped) = next_stream(&streams, true);
    let mut resp = open_llm(&c, addr, 500).await;
    // The estimate is held while the body streams.
    assert_eq!(budget(&c, addr).await, 500);
    costs.send(100).unwrap();
    costs.send(200).unwrap();
    let mut got = String::new();
    while got.len() < "100;200;".len() {
        let frame = resp.body_mut().frame().await.unwrap().unwrap();
        got.push_str(std::str::from_utf8(frame.data_ref().unwrap()).unwrap());
    }
    assert_eq!(got, "100;200;");
    assert_eq!(budget(&c, addr).await, 500);
    drop(costs);
    assert!(resp
        .into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes()
        .is_empty());
    // Settled at 300 before the client saw the end: 200 given back.
    assert_eq!(budget(&c, addr).await, 700);
}

#[tokio::test]
async fn a_streamed_cost_over_its_estimate_is_charged_in_full() {
    let (addr, streams) = llm_server().await;
    let c = client();
    let (costs, _dropped) = next_stream(&streams, true);
    let resp = open_llm(&c, addr, 100).await;
    costs.send(350).unwrap();
    drop(costs);
    resp.into_body().collect().await.unwrap();
    assert_eq!(budget(&c, addr).await, 650);
}

#[tokio::test]
async fn a_dropped_body_settles_what_was_reported() {
    let (addr, streams) = llm_server().await;
    let c = client();
    let (costs, dropped) = next_stream(&streams, true);
    let mut resp = open_llm(&c, addr, 500).await;
    costs.send(50).unwrap();
    resp.body_mut().frame().await.unwrap().unwrap();
    // The client goes away mid-stream; the server drops the body.
    drop(resp);
    common::eventually("the body's drop", dropped)
        .await
        .unwrap();
    assert_eq!(budget(&c, addr).await, 950);
    drop(costs);
}

#[tokio::test]
async fn a_dropped_body_that_reported_nothing_stays_charged_at_its_estimate() {
    let (addr, streams) = llm_server().await;
    let c = client();
    let (costs, dropped) = next_stream(&streams, false);
    let mut resp = open_llm(&c, addr, 500).await;
    costs.send(50).unwrap();
    resp.body_mut().frame().await.unwrap().unwrap();
    drop(resp);
    common::eventually("the body's drop", dropped)
        .await
        .unwrap();
    assert_eq!(budget(&c, addr).await, 500);
    drop(costs);
}

#[tokio::test]
async fn a_cost_header_is_settled_and_removed_from_the_response() {
    let (addr, _) = llm_server().await;
    let c = client();
    let (status, headers, body) = send(&c, addr, "/header", &[("x-estimate", "100")]).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "done"));
    assert!(headers.get("x-actual-cost").is_none());
    assert_eq!(budget(&c, addr).await, 960);
}

#[test]
fn a_store_that_cannot_settle_is_refused_at_build_time() {
    let (builder, _releases) = common::watched();
    let err = builder
        .policy("api", "10/s", Key::Ip)
        .route(Route::new("/").policy("api").count_when(|_| true))
        .build()
        .err()
        .unwrap();
    assert_eq!(err.field, "routes[0].settle");
}

#[test]
fn a_stack_or_a_concurrency_limit_on_a_settling_route_is_refused_at_build_time() {
    for (name, stack) in [
        ("stack", &["10/s", "fixed-window 100/min"][..]),
        ("slots", &["concurrency 4"][..]),
    ] {
        let err = manual()
            .stack(name, stack, Key::Ip)
            .route(Route::new("/").policy(name).measured(|_| 1))
            .build()
            .err()
            .unwrap();
        assert_eq!(err.field, "routes[0].settle", "{name}");
    }
}

#[test]
fn an_actual_header_before_measured_is_refused_at_build_time() {
    let err = manual()
        .policy("api", "10/s", Key::Ip)
        .route(Route::new("/").policy("api").actual_header("x-cost"))
        .build()
        .err()
        .unwrap();
    assert_eq!(err.field, "routes[0].actual_header");
}
