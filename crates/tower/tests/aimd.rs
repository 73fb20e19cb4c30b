//! The client side: `AimdLimitLayer` around a real HTTP client (hyper-util) calling a real
//! axum server on a loopback port that answers 429 past 8 requests in flight. 32 callers
//! start at once at a limit of 32; the limit follows the server's answers down to about
//! its capacity, after which most calls sent are answered.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tollgate::adaptive::aimd::AimdParams;
use tollgate_tower::{AimdLimitLayer, LimitFull};
use tower::{Layer, Service, ServiceExt};

/// The server's capacity: more in flight than this are answered 429 at once.
const CAPACITY: u64 = 8;

async fn work(State(in_flight): State<Arc<AtomicU64>>) -> StatusCode {
    let n = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    let status = if n > CAPACITY {
        StatusCode::TOO_MANY_REQUESTS
    } else {
        tokio::time::sleep(Duration::from_millis(10)).await;
        StatusCode::OK
    };
    in_flight.fetch_sub(1, Ordering::SeqCst);
    status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_limit_follows_the_upstreams_429s_to_its_capacity() {
    let app = Router::new()
        .route("/", get(work))
        .with_state(Arc::new(AtomicU64::new(0)));
    let addr = common::serve(app, [127, 0, 0, 1].into()).await;
    let layer = AimdLimitLayer::new(AimdParams {
        initial_limit: 32,
        ..AimdParams::default()
    })
    .unwrap();
    let client = layer.layer(Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>());
    let (sent, ok, too_many, full) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let (mut client, sent, ok, too_many, full) = (
            client.clone(),
            Arc::clone(&sent),
            Arc::clone(&ok),
            Arc::clone(&too_many),
            Arc::clone(&full),
        );
        tasks.push(tokio::spawn(async move {
            loop {
                let n = sent.fetch_add(1, Ordering::Relaxed);
                if n >= 3_000 {
                    break;
                }
                // The answers of the second half, once the limit has come down from 32.
                let counted = n >= 1_500;
                let req = Request::get(format!("http://{addr}/"))
                    .body(Empty::new())
                    .unwrap();
                match client.ready().await.unwrap().call(req).await {
                    Ok(resp) => {
                        let status = resp.status();
                        resp.into_body().collect().await.unwrap();
                        let tally = match status {
                            StatusCode::OK => &ok,
                            StatusCode::TOO_MANY_REQUESTS => &too_many,
                            other => panic!("unexpected {other}"),
                        };
                        if counted {
                            tally.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Err(e) => {
                        assert!(e.downcast_ref::<LimitFull>().is_some(), "{e}");
                        full.fetch_add(1, Ordering::Relaxed);
                        // Refused before sending: wait a little, as a caller backing off.
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let (ok, too_many, full) = (
        ok.load(Ordering::Relaxed),
        too_many.load(Ordering::Relaxed),
        full.load(Ordering::Relaxed),
    );
    let limit = layer.limit();
    eprintln!("limit {limit}; ok {ok}, 429 {too_many}, refused before sending {full}");
    // From 32, cut by the 429s to about the server's 8 (loose: timers are coarse here).
    assert!(
        (CAPACITY / 2..=CAPACITY * 2).contains(&limit),
        "limit {limit}"
    );
    // In the second half most calls sent were answered: the 429s are the probes past the
    // capacity (one more every limit's worth of successes).
    assert!(too_many * 4 < ok, "ok {ok}, 429 {too_many}");
    assert!(full > 0, "the limit refused none");
    assert_eq!(layer.in_flight(), 0);
}

#[test]
fn bad_parameters_are_the_cores_named_errors() {
    let e = AimdLimitLayer::new(AimdParams {
        backoff: 100,
        ..AimdParams::default()
    })
    .err()
    .unwrap();
    assert_eq!(e.param, tollgate::adaptive::Param::Backoff);
}
