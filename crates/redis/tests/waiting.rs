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
    let conn = support::connect(&server.url()).await;
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
    let second = l.acquire("k", Some("t1"), 1, deadline).await;
    let second = second.unwrap_or_else(|e| panic!("a wait that fits timed out: {e:?}"));
    assert!(second.decision.allowed, "{second:?}");
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
    let l = limiter(&server, single("gcra 1/s burst 1"), |o| o).await;
    assert!(l.check("k", 1).await.unwrap().decision.allowed);
    // The waiter sleeps ~1 s to the retry time; 300 ms in, the thread is blocked 2 s, so
    // its timer fires ~800 ms after its 1.5 s deadline (the key free again by then).
    let blocker = tokio::spawn(async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        std::thread::sleep(Duration::from_millis(2000));
    });
    let started = Instant::now();
    let e = l
        .acquire("k", None, 1, Duration::from_millis(1500))
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
    assert!(started.elapsed() >= Duration::from_millis(2300), "not late");
    assert!(waited > Duration::from_millis(1500), "{waited:?}");
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

/// The waiting vectors (`tests/vectors/waiting/*.json`, see the core's `tests/waiting.rs` for
/// the format) on Redis's scripts: decisions at a test clock that only the waiter's sleeps
/// move (each `late` longer), the jitter drawn always the vector's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_waiting_vectors_replay_on_redis() {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    use std::sync::Arc;
    use tollgate::{ceil_millis, millis};

    let server = Server::start();
    let conn = support::connect(&server.url()).await;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors/waiting");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(files.len() >= 5, "{files:?}");
    let n = |v: &serde_json::Value, f: &str| v[f].as_u64().unwrap_or_else(|| panic!("{f}: {v}"));
    for path in files {
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let limits = single(v["policy"].as_str().unwrap());
        let clock = Arc::new(AtomicU64::new(0));
        let late = Duration::from_millis(n(&v, "late"));
        let limiter = |jitter: u64| {
            let options = Options::new(format!("vectors:{name}"), Fallback::Closed)
                .timeout(Duration::from_secs(5))
                .test_clock(Arc::clone(&clock))
                .test_timers(late)
                .jitter(Duration::from_millis(jitter));
            RedisLimiter::new(conn.clone(), limits.clone(), options).unwrap()
        };
        for (i, step) in v["steps"].as_array().unwrap().iter().enumerate() {
            clock.fetch_max(millis(n(step, "at")), Relaxed);
            let what = format!("{name} step {i}: {step}");
            if let Some(cost) = step["check"].as_u64() {
                let o = limiter(0).check("k", cost).await.unwrap();
                assert_eq!(
                    Some(o.decision.allowed),
                    step["allowed"].as_bool(),
                    "{what}"
                );
                continue;
            }
            let a = &step["acquire"];
            let l = limiter(n(a, "jitter"));
            let max_wait = Duration::from_millis(n(a, "maxWait"));
            let r = l.acquire("k", None, n(a, "cost"), max_wait).await;
            let now = ceil_millis(clock.load(Relaxed));
            match r {
                Ok(_) => assert_eq!(Some(now), step["admittedAt"].as_u64(), "{what}: admitted"),
                Err(Error::Timeout { retry_after, .. }) => {
                    assert_eq!(Some(now), step["gaveUpAt"].as_u64(), "{what}: gave up");
                    let retry = ceil_millis(retry_after.as_nanos() as u64);
                    assert_eq!(Some(retry), step["retryAfter"].as_u64(), "{what}");
                }
                Err(e) => panic!("{what}: {e}"),
            }
            let remaining = l.peek("k", None).await.unwrap().decision.remaining;
            assert_eq!(remaining, n(step, "remaining"), "{what}: remaining");
        }
    }
}
