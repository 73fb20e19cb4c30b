//! Keys and tenants against the core's bound on a key's bytes
//! ([`tollgate::store::bounds::MAX_KEY_BYTES`]), on a real redis-server (started here on a
//! free loopback port, stopped afterwards): at the bound they are stored, one byte over they
//! are a named error before any round trip, and nothing is written.

mod support;

use std::time::Duration;

use support::Server;
use tollgate::fair_share::FairShare;
use tollgate::store::bounds::{Bound, MAX_KEY_BYTES};
use tollgate::store::Limits;
use tollgate::Policy;
use tollgate_redis::{Error, Fallback, Options, RedisLimiter};

fn policy(text: &str) -> Policy {
    text.parse().unwrap()
}

/// The argument and size of an [`Error::OverBound`], or a panic naming what came instead.
fn over_bound<T: std::fmt::Debug>(r: Result<T, Error>) -> (&'static str, usize) {
    match r {
        Err(Error::OverBound { field, over }) => {
            assert_eq!(over.bound, Bound::KeyBytes);
            (field, over.size)
        }
        other => panic!("expected OverBound, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_or_tenant_over_the_core_bound_is_refused_by_name_before_redis() {
    let server = Server::start();
    let conn = support::connect(&server.url()).await;
    let fair = FairShare::new(policy("fixed-window 4/min"), policy("fixed-window 2/min")).unwrap();
    let limiter = RedisLimiter::new(
        conn,
        Limits::fair_share(fair),
        Options::new("bounds", Fallback::Closed),
    )
    .unwrap();
    let at = "k".repeat(MAX_KEY_BYTES);
    let over = "k".repeat(MAX_KEY_BYTES + 1);

    // At the bound: decided in Redis, the key's window and its tenant's window stored.
    let ok = limiter.check_tenant(&at, Some(&at), 1).await.unwrap();
    assert!(ok.decision.allowed);
    assert_eq!(server.cli(&["DBSIZE"]), "2");
    let trips = limiter.stats().round_trips;

    // One byte over, in every call that names a key or a tenant.
    let big = MAX_KEY_BYTES + 1;
    assert_eq!(over_bound(limiter.check(&over, 1).await), ("key", big));
    let e = limiter.check_tenant(&at, Some(&over), 1).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("tenant: {big} bytes, at most {MAX_KEY_BYTES}")
    );
    assert_eq!(over_bound(limiter.peek(&over, None).await), ("key", big));
    assert_eq!(
        over_bound(limiter.peek(&at, Some(&over)).await),
        ("tenant", big)
    );
    assert_eq!(over_bound(limiter.release(&over, 1).await), ("key", big));
    assert_eq!(over_bound(limiter.reset(&over).await), ("key", big));
    let wait = Duration::from_millis(50);
    assert_eq!(
        over_bound(limiter.acquire(&over, None, 1, wait).await),
        ("key", big)
    );

    // Nothing was written or even asked.
    assert_eq!(server.cli(&["DBSIZE"]), "2");
    assert_eq!(limiter.stats().round_trips, trips);
    let again = limiter.peek(&at, Some(&at)).await.unwrap();
    assert_eq!(
        again.each.iter().map(|d| d.remaining).collect::<Vec<_>>(),
        [3, 1]
    );
}
