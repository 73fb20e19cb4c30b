//! The adaptive layer's queue ([`AdaptiveBuilder::queue`]) in a real axum server on a
//! loopback port, driven by a real HTTP client (and, for the deadline, the same axum app
//! called as a service on a paused clock): queued requests are served in arrival order, a
//! full queue sheds at once, a passed deadline sheds, a waiter whose client goes away
//! frees its place, and each shed is the layer's usual 503. Every route here has a limit
//! of exactly 1 (floor and ceiling), so the controller cannot move it under the test.
//!
//! [`AdaptiveBuilder::queue`]: tollgate_tower::AdaptiveBuilder::queue

mod common;

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr};
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use common::{eventually, serve};
use http::{header, HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use tokio::io::AsyncWriteExt;
use tokio::sync::watch;
use tollgate::adaptive::gradient::GradientParams;
use tollgate_tower::{AdaptiveLayer, MAX_QUEUE_DEADLINE, MAX_WAITING};
use tower::ServiceExt;

type HttpClient = Client<HttpConnector, Empty<Bytes>>;

fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

async fn get_status(c: &HttpClient, url: String) -> (StatusCode, HeaderMap, Bytes) {
    let resp = c.get(url.parse().unwrap()).await.unwrap();
    let (parts, body) = resp.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes();
    (parts.status, parts.headers, bytes)
}

/// A layer whose `/work` route admits one request at a time and queues up to
/// `max_waiting` for `deadline`.
fn layer(max_waiting: usize, deadline: Duration) -> AdaptiveLayer {
    AdaptiveLayer::builder()
        .route(
            "/work",
            &[] as &[&str],
            GradientParams {
                min_limit: 1,
                initial_limit: 1,
                max_limit: 1,
                ..GradientParams::default()
            },
        )
        .retry_after_secs(3)
        .queue(max_waiting, deadline)
        .build()
        .unwrap()
}

/// What the handler shares: the gate every request waits on, and the order in which
/// requests entered the handler.
#[derive(Clone)]
struct Handler {
    gate: watch::Receiver<bool>,
    entered: Arc<Mutex<Vec<u32>>>,
}

/// `/work/{n}`: records `n`, then waits for the gate to open.
fn app(layer: &AdaptiveLayer) -> (Router, watch::Sender<bool>, Arc<Mutex<Vec<u32>>>) {
    let (gate, rx) = watch::channel(false);
    let entered = Arc::new(Mutex::new(Vec::new()));
    let state = Handler {
        gate: rx,
        entered: Arc::clone(&entered),
    };
    let app = Router::new()
        .route(
            "/work/{n}",
            get(
                |State(mut h): State<Handler>, Path(n): Path<u32>| async move {
                    h.entered.lock().unwrap().push(n);
                    h.gate.wait_for(|open| *open).await.unwrap();
                    "done"
                },
            ),
        )
        .with_state(state)
        .layer(layer.clone());
    (app, gate, entered)
}

/// Waits until the route's queue holds `n` requests.
async fn until_waiting(layer: &AdaptiveLayer, n: usize) {
    eventually(&format!("{n} waiting"), async {
        while layer.waiting("/work") != Some(n) {
            tokio::task::yield_now().await;
        }
    })
    .await;
}

/// The shed answer, as the layer's shed path writes it.
fn assert_shed(status: StatusCode, headers: &HeaderMap, body: &[u8]) {
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(headers[header::RETRY_AFTER], "3");
    assert_eq!(headers[header::CONTENT_TYPE], "application/problem+json");
    let doc: serde_json::Value = serde_json::from_slice(body).unwrap();
    assert_eq!(doc["status"], 503);
    assert_eq!(doc["error"], "concurrency-limit");
    assert_eq!(doc["limit"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_requests_are_served_in_arrival_order() {
    let layer = layer(8, Duration::from_secs(60));
    let (app, gate, entered) = app(&layer);
    let addr = serve(app, IpAddr::V4(Ipv4Addr::LOCALHOST)).await;
    let c = client();
    let mut requests = Vec::new();
    for n in 0..5u32 {
        let c = c.clone();
        requests.push(tokio::spawn(async move {
            get_status(&c, format!("http://{addr}/work/{n}")).await
        }));
        // The first is admitted; each next one waits behind those before it.
        if n == 0 {
            eventually("the first in flight", async {
                while entered.lock().unwrap().is_empty() {
                    tokio::task::yield_now().await;
                }
            })
            .await;
        } else {
            until_waiting(&layer, n as usize).await;
        }
    }
    gate.send(true).unwrap();
    for r in requests {
        let (status, _, body) = r.await.unwrap();
        assert_eq!((status, &body[..]), (StatusCode::OK, &b"done"[..]));
    }
    assert_eq!(*entered.lock().unwrap(), [0, 1, 2, 3, 4]);
    assert_eq!(layer.in_flight("/work"), Some(0));
    assert_eq!(layer.waiting("/work"), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_sheds_at_once_with_the_shed_answer() {
    // An hour's deadline: the third request's answer comes from the full queue, not from
    // a deadline.
    let layer = layer(1, Duration::from_secs(3600));
    let (app, gate, entered) = app(&layer);
    let addr = serve(app, IpAddr::V4(Ipv4Addr::LOCALHOST)).await;
    let c = client();
    let first = tokio::spawn({
        let c = c.clone();
        async move { get_status(&c, format!("http://{addr}/work/1")).await }
    });
    let second = tokio::spawn({
        let c = c.clone();
        async move { get_status(&c, format!("http://{addr}/work/2")).await }
    });
    until_waiting(&layer, 1).await;

    let (status, headers, body) = get_status(&c, format!("http://{addr}/work/3")).await;
    assert_shed(status, &headers, &body);
    assert_eq!(layer.waiting("/work"), Some(1));

    gate.send(true).unwrap();
    for r in [first, second] {
        assert_eq!(r.await.unwrap().0, StatusCode::OK);
    }
    assert_eq!(
        entered.lock().unwrap().len(),
        2,
        "the shed request never ran"
    );
    assert_eq!(layer.in_flight("/work"), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_deadline_passes_in_the_queue_is_shed_over_http() {
    let layer = layer(4, Duration::from_millis(50));
    let (app, gate, entered) = app(&layer);
    let addr = serve(app, IpAddr::V4(Ipv4Addr::LOCALHOST)).await;
    let c = client();
    let first = tokio::spawn({
        let c = c.clone();
        async move { get_status(&c, format!("http://{addr}/work/1")).await }
    });
    eventually("the first in flight", async {
        while layer.in_flight("/work") != Some(1) {
            tokio::task::yield_now().await;
        }
    })
    .await;

    // The first holds the only slot until the gate opens: the second's wait ends by its
    // deadline, however long the machine takes.
    let (status, headers, body) = get_status(&c, format!("http://{addr}/work/2")).await;
    assert_shed(status, &headers, &body);
    assert_eq!(layer.waiting("/work"), Some(0));
    assert_eq!(
        layer.in_flight("/work"),
        Some(1),
        "the shed request never held a slot"
    );

    gate.send(true).unwrap();
    assert_eq!(first.await.unwrap().0, StatusCode::OK);
    assert_eq!(*entered.lock().unwrap(), [1]);
    assert_eq!(layer.in_flight("/work"), Some(0));
}

/// Polls `f` once.
async fn poll_once<F: Future>(f: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    let mut f = f;
    std::future::poll_fn(|cx| Poll::Ready(f.as_mut().poll(cx))).await
}

fn work(n: u32) -> Request<Body> {
    Request::get(format!("/work/{n}"))
        .body(Body::empty())
        .unwrap()
}

/// The deadline to the tick, on tokio's paused clock: the same axum app called as a
/// service, every future polled by hand (nothing runs on its own, nothing is timed).
#[tokio::test(start_paused = true)]
async fn a_waiter_is_shed_at_its_deadline_and_admitted_before_it() {
    let deadline = Duration::from_secs(10);
    let tick = Duration::from_millis(1);
    let layer = layer(4, deadline);
    let (app, gate, entered) = app(&layer);

    let mut first = pin!(app.clone().oneshot(work(1)));
    assert!(poll_once(first.as_mut()).await.is_pending());
    assert_eq!(layer.in_flight("/work"), Some(1));

    // The second waits out its whole deadline and is shed at it, not before.
    let mut second = pin!(app.clone().oneshot(work(2)));
    assert!(poll_once(second.as_mut()).await.is_pending());
    assert_eq!(layer.waiting("/work"), Some(1));
    tokio::time::advance(deadline - tick).await;
    assert!(poll_once(second.as_mut()).await.is_pending());
    tokio::time::advance(tick).await;
    let Poll::Ready(resp) = poll_once(second.as_mut()).await else {
        panic!("not shed at its deadline");
    };
    let (parts, body) = resp.unwrap().into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    assert_shed(parts.status, &parts.headers, &body);
    assert_eq!(layer.waiting("/work"), Some(0));

    // The third gets the slot a tick before its deadline.
    let mut third = pin!(app.clone().oneshot(work(3)));
    assert!(poll_once(third.as_mut()).await.is_pending());
    tokio::time::advance(deadline - tick).await;
    gate.send(true).unwrap();
    let Poll::Ready(resp) = poll_once(first.as_mut()).await else {
        panic!("the first did not finish with the gate open");
    };
    // Reading the body to its end gives the slot back.
    resp.unwrap().into_body().collect().await.unwrap();
    assert_eq!(layer.in_flight("/work"), Some(0));
    let Poll::Ready(resp) = poll_once(third.as_mut()).await else {
        panic!("the third was not admitted when the slot came free");
    };
    assert_eq!(resp.unwrap().status(), StatusCode::OK);
    assert_eq!(*entered.lock().unwrap(), [1, 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_client_goes_away_frees_its_place() {
    let layer = layer(1, Duration::from_secs(3600));
    let (app, gate, entered) = app(&layer);
    let addr = serve(app, IpAddr::V4(Ipv4Addr::LOCALHOST)).await;
    let c = client();
    let first = tokio::spawn({
        let c = c.clone();
        async move { get_status(&c, format!("http://{addr}/work/1")).await }
    });
    eventually("the first in flight", async {
        while layer.in_flight("/work") != Some(1) {
            tokio::task::yield_now().await;
        }
    })
    .await;

    // A client sends a request, waits in the queue, and leaves.
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    socket
        .write_all(b"GET /work/2 HTTP/1.1\r\nHost: test\r\n\r\n")
        .await
        .unwrap();
    until_waiting(&layer, 1).await;
    drop(socket);
    // The server notices the closed connection and drops the request's future.
    until_waiting(&layer, 0).await;
    assert_eq!(layer.in_flight("/work"), Some(1), "the leaver held no slot");

    // Its place is free: the queue of one takes another request.
    let third = tokio::spawn({
        let c = c.clone();
        async move { get_status(&c, format!("http://{addr}/work/3")).await }
    });
    until_waiting(&layer, 1).await;
    gate.send(true).unwrap();
    for r in [first, third] {
        assert_eq!(r.await.unwrap().0, StatusCode::OK);
    }
    assert_eq!(*entered.lock().unwrap(), [1, 3]);
    assert_eq!(layer.in_flight("/work"), Some(0));
    assert_eq!(layer.waiting("/work"), Some(0));
}

/// The queue's error for `max_waiting` and `deadline`, or `None` if the builder accepts
/// them.
fn queue_error(max_waiting: usize, deadline: Duration) -> Option<(String, String)> {
    AdaptiveLayer::builder()
        .route("/work", &[] as &[&str], GradientParams::default())
        .queue(max_waiting, deadline)
        .build()
        .err()
        .map(|e| (e.field, e.reason))
}

#[test]
fn queue_bounds_outside_their_range_are_named_errors() {
    let ms = Duration::from_millis(1);
    for (max_waiting, deadline, field) in [
        (0, ms, "queue.max_waiting"),
        (MAX_WAITING + 1, ms, "queue.max_waiting"),
        (1, Duration::ZERO, "queue.deadline"),
        (1, ms - Duration::from_nanos(1), "queue.deadline"),
        (
            1,
            MAX_QUEUE_DEADLINE + Duration::from_nanos(1),
            "queue.deadline",
        ),
    ] {
        let (f, reason) = queue_error(max_waiting, deadline).expect("refused");
        assert_eq!(f, field, "{max_waiting} {deadline:?}: {reason}");
        assert!(reason.contains("must be from"), "{reason}");
    }
    assert_eq!(queue_error(1, ms), None);
    assert_eq!(queue_error(MAX_WAITING, MAX_QUEUE_DEADLINE), None);
}
