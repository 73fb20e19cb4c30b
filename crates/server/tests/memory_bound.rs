//! The memory store's bound in bytes, on a real server on loopback with a hand-set clock: a
//! flood of distinct keys stays under the bound and is counted on `/metrics`; the victims
//! are expired keys first, then the least spent, never a key that denies while a fresher
//! one can go; and the keys kept stay exact (400 concurrent calls on a limit of 50 admit
//! 50 while the flood runs).

mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use support::{code, desc, start_on, RateLimitServiceClient, Running, DAY_START};
use tollgate_rls::service::Settings;
use tollgate_rls::store::{ManualClock, Memory};

const MIB: usize = 1 << 20;

/// `per_hour`: 50 a hour by `client`; `per_second`: 100 a second by `burst`; `once`: 1 a
/// hour by `single`.
const CONFIG: &str = "domain: flood
descriptors:
  - key: client
    rate_limit:
      unit: hour
      requests_per_unit: 50
  - key: burst
    rate_limit:
      unit: second
      requests_per_unit: 100
  - key: single
    rate_limit:
      unit: hour
      requests_per_unit: 1
";

/// A server whose memory store holds at most `max_bytes`.
async fn bounded(max_bytes: usize) -> Running {
    let clock = ManualClock::new(DAY_START);
    let store = Memory::with_bound(clock.clone(), max_bytes);
    let mut running = start_on(&[CONFIG], Settings::default(), store).await;
    running.clock = clock;
    running
}

/// One request of 64 descriptors `key` = `<prefix><n>` for `n` in `from..from + 64`.
fn batch(key: &str, prefix: &str, from: u64) -> RateLimitRequest {
    RateLimitRequest {
        domain: "flood".into(),
        descriptors: (from..from + 64)
            .map(|n| desc(&[(key, &format!("{prefix}{n}"))]))
            .collect(),
        hits_addend: 1,
    }
}

/// Sends `keys` distinct values of `key` (a multiple of 64) in batches of 64; every call
/// must answer.
async fn flood(
    client: &mut RateLimitServiceClient<tonic::transport::Channel>,
    key: &str,
    prefix: &str,
    keys: u64,
) {
    for from in (0..keys).step_by(64) {
        client
            .should_rate_limit(batch(key, prefix, from))
            .await
            .expect("the server answers during the flood");
    }
}

/// One call for `key` = `value`: its overall code.
async fn one(running: &mut Running, key: &str, value: &str) -> Code {
    let request = RateLimitRequest {
        domain: "flood".into(),
        descriptors: vec![desc(&[(key, value)])],
        hits_addend: 1,
    };
    code(running.call(request).await.overall_code)
}

/// A series' value in the `/metrics` text.
async fn metric(running: &Running, name: &str) -> u64 {
    let (status, body) = running.http("GET", "/metrics", "").await;
    assert_eq!(status, 200);
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {body}"))
}

#[tokio::test]
async fn a_flood_of_distinct_keys_stays_under_the_bound_and_is_counted() {
    let mut running = bounded(MIB).await;
    let mut client = running.client.clone();
    for round in 0..5 {
        flood(&mut client, "client", &format!("r{round}-"), 6_400).await;
        let stats = running.service.store().stats();
        println!("after {} keys: {stats:?}", (round + 1) * 6_400);
        assert!(stats.bytes <= MIB, "{stats:?}");
    }
    let stats = running.service.store().stats();
    // The clock stood still: every key is held or was evicted, none expired.
    assert_eq!(stats.keys as u64 + stats.evictions, 32_000);
    assert!(stats.evictions > 20_000, "{stats:?}");
    assert_eq!(
        metric(&running, "tollgate_store_evictions_total").await,
        stats.evictions
    );
    assert_eq!(
        metric(&running, "tollgate_store_keys").await,
        stats.keys as u64
    );
    assert_eq!(
        metric(&running, "tollgate_store_bytes").await,
        stats.bytes as u64
    );
    assert_eq!(
        metric(&running, "tollgate_store_max_bytes").await,
        MIB as u64
    );
    // A key written last is kept and counted: its second hit leaves 48.
    let request = RateLimitRequest {
        domain: "flood".into(),
        descriptors: vec![desc(&[("client", "r4-6399")])],
        hits_addend: 1,
    };
    let answer = running.call(request).await;
    assert_eq!(answer.statuses[0].limit_remaining, 48);
    running.stop().await;
}

#[tokio::test]
async fn a_denying_key_outlives_a_flood_of_fresher_keys() {
    let mut running = bounded(MIB).await;
    for _ in 0..50 {
        assert_eq!(one(&mut running, "client", "hot").await, Code::Ok);
    }
    assert_eq!(one(&mut running, "client", "hot").await, Code::OverLimit);
    let mut client = running.client.clone();
    flood(&mut client, "client", "f", 32_000).await;
    assert!(running.service.store().stats().evictions > 20_000);
    // Written before all 32,000 keys, and still remembered: still denied.
    assert_eq!(one(&mut running, "client", "hot").await, Code::OverLimit);
    running.stop().await;
}

#[tokio::test]
async fn expired_keys_are_dropped_before_any_live_key_is_evicted() {
    let running = bounded(MIB).await;
    let mut client = running.client.clone();
    // 1,280 keys that deny for the hour, written first (the oldest)...
    flood(&mut client, "single", "kept", 1_280).await;
    // ...then 2,240 keys of a one-second window: the store is full (some of them evicted).
    flood(&mut client, "burst", "b", 2_240).await;
    let before = running.service.store().stats();
    println!("before the second passes: {before:?}");
    running.clock.advance(2_000_000_000);
    // The one-second keys have expired: 1,280 new hour keys take their room.
    flood(&mut client, "single", "new", 1_280).await;
    let after = running.service.store().stats();
    println!("after: {after:?}");
    assert!(after.bytes > MIB / 2, "the bound was reached: {after:?}");
    assert_eq!(after.evictions, before.evictions, "no live key was evicted");
    // Every hour key is still remembered: its second call is denied.
    let mut denied = 0;
    for from in (0..1_280).step_by(64) {
        for prefix in ["kept", "new"] {
            let answer = client
                .should_rate_limit(batch("single", prefix, from))
                .await
                .unwrap()
                .into_inner();
            denied += answer
                .statuses
                .iter()
                .filter(|s| code(s.code) == Code::OverLimit)
                .count();
        }
    }
    assert_eq!(denied, 2_560);
    running.stop().await;
}

#[tokio::test]
async fn a_kept_key_stays_exact_under_a_flood_of_distinct_keys() {
    let running = bounded(MIB).await;
    let mut client = running.client.clone();
    // The store is full before the key is first hit.
    flood(&mut client, "client", "pre", 6_400).await;
    assert!(running.service.store().stats().evictions > 0);
    let stop = Arc::new(AtomicBool::new(false));
    let flooded = Arc::new(AtomicU64::new(0));
    // Four flooders, each on its own values, until the calls below are answered.
    let flooders: Vec<_> = (0..4)
        .map(|f| {
            let (stop, flooded, mut client) = (stop.clone(), flooded.clone(), client.clone());
            tokio::spawn(async move {
                let mut from = 0;
                // Bounded: at most 100,000 keys each even if the calls below were slow.
                while !stop.load(Ordering::Relaxed) && from < 100_000 {
                    client
                        .should_rate_limit(batch("client", &format!("during{f}-"), from))
                        .await
                        .expect("the server answers during the flood");
                    from += 64;
                    flooded.fetch_add(64, Ordering::Relaxed);
                }
            })
        })
        .collect();
    while flooded.load(Ordering::Relaxed) < 1_280 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let evicting = running.service.store().stats().evictions;
    let calls: Vec<_> = (0..400)
        .map(|_| {
            let mut client = client.clone();
            tokio::spawn(async move {
                let request = RateLimitRequest {
                    domain: "flood".into(),
                    descriptors: vec![desc(&[("client", "hot")])],
                    hits_addend: 1,
                };
                code(
                    client
                        .should_rate_limit(request)
                        .await
                        .unwrap()
                        .into_inner()
                        .overall_code,
                )
            })
        })
        .collect();
    let mut admitted = 0;
    for call in calls {
        if call.await.unwrap() == Code::Ok {
            admitted += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for f in flooders {
        f.await.unwrap();
    }
    let stats = running.service.store().stats();
    println!(
        "{admitted} admitted; {} keys flooded meanwhile; {stats:?}",
        flooded.load(Ordering::Relaxed)
    );
    assert_eq!(admitted, 50);
    assert!(
        stats.evictions > evicting,
        "the flood evicted while the key was hit"
    );
    assert!(stats.bytes <= MIB);
    running.stop().await;
}

#[test]
fn a_bound_that_is_not_a_size_is_refused_by_flag_and_reason() {
    let run = |args: &[&str], env: Option<&str>| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate-rls"));
        cmd.args(args).arg("--check-config");
        cmd.env_remove("TOLLGATE_MEMORY_MAX_BYTES");
        if let Some(v) = env {
            cmd.env("TOLLGATE_MEMORY_MAX_BYTES", v);
        }
        let out = cmd.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (status, err) = run(&["--memory-max-bytes", "64MB"], None);
    assert_eq!(status, Some(2), "{err}");
    assert!(err.contains("--memory-max-bytes"), "{err}");
    assert!(err.contains("'64MB' is not a size"), "{err}");
    let (status, err) = run(&[], Some("0"));
    assert_eq!(status, Some(2), "{err}");
    assert!(err.contains("0 bytes"), "{err}");
}
