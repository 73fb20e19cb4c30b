//! `RedisLimiter::acquire` against a real redis-server: waits to the retry time and no
//! less, gives up at once when the deadline cannot be met, serves waiters in arrival order,
//! holds the leaky queue's delay, and charges nothing for a waiter that gives up or is
//! dropped.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::Server;
use tollgate::store::Limits;
use tollgate_redis::{Error, Fallback, Options, RedisLimiter, Source};

async fn limiter(server: &Server, policy: &str) -> RedisLimiter<redis::aio::ConnectionManager> {
    let conn = support::connect(&server.url()).await;
    RedisLimiter::new(
        conn,
        Limits::single(policy.parse().unwrap()),
        Options::new("acquire", Fallback::Closed).timeout(Duration::from_secs(5)),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_wakes_at_the_retry_time_never_before() {
    let server = Server::start();
    let l = limiter(&server, "gcra 10/s burst 1").await;
    assert!(l.check("k", 1).await.unwrap().decision.allowed);
    let denied = l.check("k", 1).await.unwrap();
    assert!(!denied.decision.allowed);
    let started = Instant::now();
    let o = l
        .acquire("k", None, 1, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(o.decision.allowed && o.source == Source::Redis, "{o:?}");
    // It slept to the retry time it was told (less the time since that denial), not less.
    assert!(
        started.elapsed() + Duration::from_millis(5)
            >= Duration::from_nanos(denied.decision.retry_after) / 2,
        "woke too early: {:?}",
        started.elapsed()
    );
    assert_eq!(l.peek("k", None).await.unwrap().decision.remaining, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_shorter_than_the_retry_gives_up_at_once_uncharged() {
    let server = Server::start();
    // GCRA, not a fixed window: a window aligned to the clock ends within a minute in the
    // last minute of every hour, which made this test's wait shorter than 60 s then.
    let l = limiter(&server, "gcra 1/hour").await;
    assert!(l.check("k", 1).await.unwrap().decision.allowed);
    let e = l
        .acquire("k", None, 1, Duration::from_millis(200))
        .await
        .unwrap_err();
    let Error::Timeout {
        waited,
        retry_after,
    } = e
    else {
        panic!("{e}")
    };
    assert!(retry_after > Duration::from_secs(60), "{retry_after:?}");
    assert!(
        waited < retry_after,
        "gave up without sleeping to the deadline"
    );
    // A cost above the capacity is an error at once, never a wait.
    assert!(matches!(
        l.acquire("k", None, 2, Duration::from_secs(60)).await,
        Err(Error::Decide(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_served_in_arrival_order() {
    let server = Server::start();
    let l = limiter(&server, "gcra 50/s burst 1").await;
    let served = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..20 {
        let (l, served) = (l.clone(), Arc::clone(&served));
        tasks.push(tokio::spawn(async move {
            let o = l
                .acquire("k", None, 1, Duration::from_secs(30))
                .await
                .unwrap();
            assert!(o.decision.allowed);
            served.lock().unwrap().push((i, Instant::now()));
        }));
        // Each waiter joins the line before the next is spawned (10 ms: on a loaded CI
        // machine a task spawned 2 ms earlier was once not yet polled, and joined second).
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for t in tasks {
        t.await.unwrap();
    }
    let served = served.lock().unwrap();
    let order: Vec<i32> = served.iter().map(|(i, _)| *i).collect();
    assert_eq!(order, (0..20).collect::<Vec<_>>());
    // Twenty admissions at 50/s with a burst of 1 are 19 intervals of 20 ms apart at Redis's
    // clock; none came early (less one round trip of slack between the local instants).
    let spread = served[19].1 - served[0].1;
    assert!(spread >= Duration::from_millis(330), "{spread:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leaky_queue_resolves_after_its_delay_and_a_delay_past_the_deadline_is_not_kept() {
    let server = Server::start();
    let l = limiter(&server, "leaky-queue 10/s burst 4").await;
    let started = Instant::now();
    let o = l
        .acquire("k", None, 1, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(o.decision.delay, 100_000_000);
    assert!(
        started.elapsed() >= Duration::from_millis(100),
        "resolved before leaving the queue"
    );
    // Three more fit in the queue, but a waiter with 50 ms cannot wait out 100+ ms.
    let e = l
        .acquire("other", None, 1, Duration::from_millis(50))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Timeout { .. }), "{e}");
    let peek = l.peek("other", None).await.unwrap();
    assert_eq!(
        peek.decision.remaining, 4,
        "the given-up admission was not kept"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_waiter_charges_nothing() {
    let server = Server::start();
    let l = limiter(&server, "fixed-window 2/hour").await;
    assert!(l.check("k", 2).await.unwrap().decision.allowed);
    let r = tokio::time::timeout(
        Duration::from_millis(100),
        l.acquire("k", None, 1, Duration::from_secs(7200)),
    )
    .await;
    assert!(r.is_err(), "still waiting when dropped");
    assert_eq!(l.peek("k", None).await.unwrap().decision.remaining, 0);
    assert!(l.reset("k").await.unwrap());
    // With the key reset, a new waiter is served at once (the line was left).
    let o = l
        .acquire("k", None, 1, Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(o.decision.remaining, 1);
}
