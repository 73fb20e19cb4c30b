//! The waiting vectors, `tests/vectors/waiting/*.json`, on the keyed limiter
//! (`KeyedLimiter::acquire_with`) with a clock that only the waiter's sleeps move.
//!
//! Every waiting API replays the same files: this test, the Redis limiter
//! (`crates/redis/tests/waiting.rs`), the module's `MAXDELAY` (`crates/redis-module/tests`),
//! the npm package's `acquire` in memory (`crates/wasm/test/waiting.test.js`) and on Redis
//! (`crates/wasm/test-redis/waiting.test.js`).
//!
//! Format: `policy`; `late`, the ms every timer fires late; `steps` in order on key `k`, each
//! at `at` ms (the clock moves forward to it; it also moves by every sleep, plus `late`):
//! `{"check": cost, "allowed": bool}`, or `{"acquire": {cost, maxWait, jitter}}` (`jitter`:
//! the ms drawn for every sleep) with `admittedAt` (the clock when it resolved) or `gaveUpAt`
//! and `retryAfter` (its timeout's), and `remaining`, a peek right after (what was charged).

use std::cell::Cell;
use std::fs;
use std::future::{ready, Future};
use std::num::NonZeroUsize;
use std::path::Path;
use std::task::{Context, Poll, Waker};

use serde_json::Value;
use tollgate::keyed::{AcquireError, KeyedLimiter, Wait};
use tollgate::{ceil_millis, millis, Nanos};

/// Runs a wait whose sleeps complete at once (they move the clock) to its end.
fn run<T>(f: impl Future<Output = T>) -> T {
    match std::pin::pin!(f).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(r) => r,
        Poll::Pending => unreachable!("a sleep here completes at once"),
    }
}

fn n(v: &Value, field: &str) -> u64 {
    v[field].as_u64().unwrap_or_else(|| panic!("{field}: {v}"))
}

fn replay(path: &Path) {
    let v: Value = serde_json::from_str(&fs::read_to_string(path).unwrap()).unwrap();
    let name = path.file_name().unwrap().to_string_lossy();
    let policy = v["policy"].as_str().unwrap().parse().unwrap();
    let l: KeyedLimiter = KeyedLimiter::new(policy, NonZeroUsize::new(100).unwrap());
    let late = millis(n(&v, "late"));
    let clock = Cell::new(0);
    for (i, step) in v["steps"].as_array().unwrap().iter().enumerate() {
        let at = millis(n(step, "at"));
        clock.set(clock.get().max(at));
        let what = format!("{name} step {i}: {step}");
        if let Some(cost) = step["check"].as_u64() {
            let d = l.check("k", clock.get(), cost).unwrap();
            assert_eq!(Some(d.allowed), step["allowed"].as_bool(), "{what}");
            continue;
        }
        let a = &step["acquire"];
        let wait = Wait::new(n(a, "cost"), millis(n(a, "maxWait"))).jitter(millis(n(a, "jitter")));
        let sleep = |d: Nanos| {
            clock.set(clock.get().saturating_add(d).saturating_add(late));
            ready(())
        };
        let r = run(l.acquire_with("k", wait, || clock.get(), sleep));
        let now = ceil_millis(clock.get());
        match r {
            Ok(_) => assert_eq!(Some(now), step["admittedAt"].as_u64(), "{what}: admitted"),
            Err(AcquireError::Timeout { retry_after, .. }) => {
                assert_eq!(Some(now), step["gaveUpAt"].as_u64(), "{what}: gave up");
                let retry = ceil_millis(retry_after);
                assert_eq!(Some(retry), step["retryAfter"].as_u64(), "{what}");
            }
            Err(e) => panic!("{what}: {e}"),
        }
        let remaining = l.peek("k", clock.get()).unwrap().remaining;
        assert_eq!(remaining, n(step, "remaining"), "{what}: remaining");
    }
}

#[test]
fn the_waiting_vectors_replay_on_the_keyed_limiter() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/waiting");
    let mut files: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(files.len() >= 5, "{files:?}");
    for f in files {
        replay(&f);
    }
}
