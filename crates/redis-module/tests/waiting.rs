//! The waiting vectors (`tests/vectors/waiting/*.json`; the format is in the core's
//! `tests/waiting.rs`) against the module's `MAXDELAY` and `PEEK ... COST`: the core's wait
//! (`tollgate::wait::wait_in_line`) deciding with module commands at the module's test clock
//! (`TESTCLOCK`, `NOW <ms>`), which only the waiter's sleeps move (each `late` longer); and
//! `RedisLimiter::acquire` deciding in the module keeps the rule where it once broke it.

#[path = "../../redis/tests/support/mod.rs"]
mod support;

use std::future::ready;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use redis::aio::ConnectionManager;
use serde_json::Value;
use support::Server;
use tollgate::wait::{wait_in_line, Ask, Lines, Turn};
use tollgate::{ceil_millis, millis, Decision, NANOS_PER_MS};

/// The module built next to this test (target/<profile>/libtollgate_redis_module.so).
fn module() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let so = exe.parent().unwrap().parent().unwrap();
    let so = so.join("libtollgate_redis_module.so");
    assert!(
        so.exists(),
        "{} (cargo build -p tollgate-redis-module)",
        so.display()
    );
    so
}

/// A module command's decision (`allowed`, `limit`, `remaining`, then three times in ms).
fn decision(reply: &[redis::Value]) -> Decision {
    let int = |i: usize| match &reply[i] {
        redis::Value::Int(n) => *n as u64,
        other => panic!("{other:?}"),
    };
    Decision {
        allowed: int(0) == 1,
        limit: int(1),
        remaining: int(2),
        reset_after: millis(int(3)),
        retry_after: millis(int(4)),
        delay: millis(int(5)),
    }
}

/// `command base policy [COST cost] [MAXDELAY ms] NOW now`.
async fn call(
    conn: &mut ConnectionManager,
    command: &str,
    policy: &str,
    cost: Option<u64>,
    max_delay: Option<u64>,
    now: u64,
) -> redis::RedisResult<Decision> {
    let mut cmd = redis::cmd(command);
    cmd.arg("tollgate:{waiting:k}").arg(policy);
    if let Some(c) = cost {
        cmd.arg("COST").arg(c);
    }
    if let Some(ms) = max_delay {
        cmd.arg("MAXDELAY").arg(ms);
    }
    cmd.arg("NOW").arg(now / NANOS_PER_MS);
    let reply: Vec<redis::Value> = cmd.query_async(conn).await?;
    Ok(decision(&reply))
}

fn n(v: &Value, field: &str) -> u64 {
    v[field].as_u64().unwrap_or_else(|| panic!("{field}: {v}"))
}

async fn replay(server: &Server, path: &Path) {
    let mut conn = redis::Client::open(server.url())
        .unwrap()
        .get_connection_manager()
        .await
        .unwrap();
    redis::cmd("FLUSHALL")
        .query_async::<()>(&mut conn)
        .await
        .unwrap();
    let v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let name = path.file_name().unwrap().to_string_lossy();
    let policy = v["policy"].as_str().unwrap();
    let late = millis(n(&v, "late"));
    let clock = AtomicU64::new(0);
    let lines = Lines::default();
    for (i, step) in v["steps"].as_array().unwrap().iter().enumerate() {
        clock.fetch_max(millis(n(step, "at")), Relaxed);
        let what = format!("{name} step {i}: {step}");
        if let Some(cost) = step["check"].as_u64() {
            let now = clock.load(Relaxed);
            let d = call(&mut conn, "TOLLGATE.CHECK", policy, Some(cost), None, now);
            let d = d.await.unwrap();
            assert_eq!(Some(d.allowed), step["allowed"].as_bool(), "{what}");
            continue;
        }
        let a = &step["acquire"];
        let cost = n(a, "cost");
        let decide = |ask: Ask| {
            let mut conn = conn.clone();
            let now = clock.load(Relaxed);
            async move {
                let d = match ask {
                    // Whole ms, rounded down: the module keeps a delay up to it.
                    Ask::Charge { left } => {
                        let max = Some(left / NANOS_PER_MS);
                        call(&mut conn, "TOLLGATE.CHECK", policy, Some(cost), max, now).await?
                    }
                    Ask::Look => {
                        call(&mut conn, "TOLLGATE.PEEK", policy, Some(cost), None, now).await?
                    }
                };
                Ok::<_, redis::RedisError>((d, ()))
            }
        };
        let turn = wait_in_line(
            &lines,
            "k",
            millis(n(a, "maxWait")),
            || clock.load(Relaxed),
            |d: u64| {
                clock.fetch_add(d.saturating_add(late), Relaxed);
                ready(())
            },
            || millis(n(a, "jitter")),
            decide,
        )
        .await
        .unwrap();
        let now = ceil_millis(clock.load(Relaxed));
        match turn {
            Turn::Admitted(()) => assert_eq!(Some(now), step["admittedAt"].as_u64(), "{what}"),
            Turn::TimedOut { retry_after, .. } => {
                assert_eq!(Some(now), step["gaveUpAt"].as_u64(), "{what}: gave up");
                let retry = ceil_millis(retry_after);
                assert_eq!(Some(retry), step["retryAfter"].as_u64(), "{what}");
            }
        }
        let peek = call(
            &mut conn,
            "TOLLGATE.PEEK",
            policy,
            None,
            None,
            clock.load(Relaxed),
        );
        let remaining = peek.await.unwrap().remaining;
        assert_eq!(remaining, n(step, "remaining"), "{what}: remaining");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_waiting_vectors_replay_on_the_module() {
    let so = module();
    let server = Server::with_args(&[
        "--save",
        "",
        "--loadmodule",
        so.to_str().unwrap(),
        "TESTCLOCK",
    ]);
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors/waiting");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(files.len() >= 5, "{files:?}");
    for f in files {
        replay(&server, &f).await;
    }
}

/// `RedisLimiter::acquire` on a server with the module (the limiter decides there: `MAXDELAY`
/// with the time left, `PEEK ... COST` for a look): a wake after the deadline charges
/// nothing, and a caller queued behind another fails at once with the key's retry time.
#[tokio::test(flavor = "current_thread")]
async fn on_the_module_a_wake_after_the_deadline_charges_nothing() {
    use std::time::{Duration, Instant};
    use tollgate::store::Limits;
    use tollgate_redis::{Error, Fallback, Options, RedisLimiter};

    let so = module();
    let server = Server::with_args(&["--save", "", "--loadmodule", so.to_str().unwrap()]);
    let conn = redis::Client::open(server.url())
        .unwrap()
        .get_connection_manager()
        .await
        .unwrap();
    let options = Options::new("waiting", Fallback::Closed).timeout(Duration::from_secs(5));
    let limits = Limits::single("gcra 1/s burst 1".parse().unwrap());
    let l = RedisLimiter::new(conn, limits, options).unwrap();
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
    assert!(started.elapsed() >= Duration::from_millis(2300), "not late");
    assert!(
        matches!(e, Error::Timeout { retry_after, .. } if retry_after.is_zero()),
        "{e:?}"
    );
    assert_eq!(l.peek("k", None).await.unwrap().decision.remaining, 1);
    // Queued behind a head asleep to the retry time (2 s away), with 800 ms: at once.
    let limits = Limits::single("gcra 1/2s burst 1".parse().unwrap());
    let conn = redis::Client::open(server.url())
        .unwrap()
        .get_connection_manager()
        .await
        .unwrap();
    let options = Options::new("waiting2", Fallback::Closed).timeout(Duration::from_secs(5));
    let l = RedisLimiter::new(conn, limits, options).unwrap();
    assert!(l.check("k", 1).await.unwrap().decision.allowed);
    let head = {
        let l = l.clone();
        tokio::spawn(async move { l.acquire("k", None, 1, Duration::from_secs(5)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let e = l
        .acquire("k", None, 1, Duration::from_millis(800))
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "waited out its deadline"
    );
    let Error::Timeout { retry_after, .. } = e else {
        panic!("{e}")
    };
    assert!(retry_after > Duration::from_millis(1000), "{retry_after:?}");
    assert!(head.await.unwrap().unwrap().decision.allowed);
    assert_eq!(l.peek("k", None).await.unwrap().decision.remaining, 0);
}
