//! `RedisLimiter::acquire` keeps the core's waiting rule against a real redis-server, where it
//! once broke it: a wake after the deadline charged the key and then timed out; a caller
//! queued behind another waited out its whole deadline and reported a retry time of 0; and
//! jitter clamped to the deadline turned a wait that fit into a timeout.

mod support;

use std::time::{Duration, Instant};

use support::Server;
use tollgate::fair_share::FairShare;
use tollgate::store::Limits;
use tollgate_redis::{Error, Fallback, Options, RedisLimiter};

async fn limiter(
    server: &Server,
    limits: Limits,
    options: impl FnOnce(Options) -> Options,
) -> RedisLimiter<redis::aio::ConnectionManager> {
    let conn = redis::Client::open(server.url())
        .unwrap()
        .get_connection_manager()
        .await
        .unwrap();
    let base = Options::new("waiting", Fallback::Closed).timeout(Duration::from_secs(5));
    RedisLimiter::new(conn, limits, options(base)).unwrap()
}

fn single(policy: &str) -> Limits {
    Limits::single(policy.parse().unwrap())
}

/// The repro: a fair share, one acquire, then a second whose retry time (~2 s) fits
/// its 2.5 s deadline, with 60 s of jitter. It was clamped to the deadline, the timer fired
/// late, and the caller got a timeout with retryAfter 0 after being charged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_that_fits_with_heavy_jitter_is_admitted() {
    let server = Server::start();
    let fair = FairShare::new(
        "fixed-window 2/2s".parse().unwrap(),
        "fixed-window 1/2s".parse().unwrap(),
    )
    .unwrap();
    let l = limiter(&server, Limits::fair_share(fair), |o| {
        o.jitter(Duration::from_secs(60))
    })
    .await;
    let deadline = Duration::from_millis(2500);
    let first = l.acquire("k", Some("t1"), 1, deadline).await.unwrap();
    assert!(first.decision.allowed);
    let started = Instant::now();
    let second = l.acquire("k", Some("t1"), 1, deadline).await;
    let second = second.unwrap_or_else(|e| panic!("a wait that fits timed out: {e:?}"));
    assert!(second.decision.allowed, "{second:?}");
    assert!(started.elapsed() < deadline, "{:?}", started.elapsed());
    // Charged once, in the windows it was admitted in: the tenant's window is spent.
    let peek = l.peek("k", Some("t1")).await.unwrap();
    assert_eq!(peek.each[1].remaining, 0, "{peek:?}");
}

/// A wake after the deadline (here: the runtime's only thread blocked past it, as a loaded
/// machine does to a timer) must not charge the key and then time out: it looks at the key
/// without charging and reports its retry time.
#[tokio::test(flavor = "current_thread")]
async fn a_wake_after_the_deadline_charges_nothing() {
    let server = Server::start();
    let l = limiter(&server, single("gcra 10/s burst 1"), |o| o).await;
    assert!(l.check("k", 1).await.unwrap().decision.allowed);
    // The waiter sleeps ~100 ms to the retry time; 30 ms in, the thread is blocked 400 ms,
    // so its timer fires ~250 ms after its 150 ms deadline.
    let blocker = tokio::spawn(async {
        tokio::time::sleep(Duration::from_millis(30)).await;
        std::thread::sleep(Duration::from_millis(400));
    });
    let started = Instant::now();
    let e = l
        .acquire("k", None, 1, Duration::from_millis(150))
        .await
        .unwrap_err();
    blocker.await.unwrap();
    let Error::Timeout {
        waited,
        retry_after,
    } = e
    else {
        panic!("{e}")
    };
    assert!(started.elapsed() >= Duration::from_millis(400), "not late");
    assert!(waited > Duration::from_millis(150), "{waited:?}");
    // The key was free again when the waiter woke: its retry time is now, and nothing was
    // charged (the bucket is full).
    assert_eq!(retry_after, Duration::ZERO);
    assert_eq!(l.peek("k", None).await.unwrap().decision.remaining, 1);
}

/// A caller queued behind another, whose deadline the key's retry time is already beyond,
/// gives up at once with that retry time (it waited out its deadline and reported 0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_caller_with_a_short_deadline_fails_at_once_with_the_retry_time() {
    let server = Server::start();
    let l = limiter(&server, single("gcra 1/2s burst 1"), |o| o).await;
    assert!(l.check("k", 1).await.unwrap().decision.allowed);
    let head = {
        let l = l.clone();
        tokio::spawn(async move { l.acquire("k", None, 1, Duration::from_secs(5)).await })
    };
    // The head is in line (and asleep to the retry time) before the second caller comes.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let e = l
        .acquire("k", None, 1, Duration::from_millis(800))
        .await
        .unwrap_err();
    let Error::Timeout {
        waited,
        retry_after,
    } = e
    else {
        panic!("{e}")
    };
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "waited out its deadline: {:?}",
        started.elapsed()
    );
    assert!(waited < Duration::from_millis(500), "{waited:?}");
    // The key's retry time (~1.9 s), not 0.
    assert!(
        retry_after > Duration::from_millis(1000) && retry_after <= Duration::from_secs(2),
        "{retry_after:?}"
    );
    let admitted = head.await.unwrap().unwrap();
    assert!(admitted.decision.allowed);
    // Only the head was charged.
    let peek = l.peek("k", None).await.unwrap();
    assert_eq!(peek.decision.remaining, 0, "{peek:?}");
}
