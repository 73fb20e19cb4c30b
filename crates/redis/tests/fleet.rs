//! The fleet store against a real redis-server (started here on a free loopback port with a
//! temporary directory, stopped afterwards): exactness under concurrency, the shared
//! vectors, stacks and fair share on a cluster, expiry, persistence, script cache loss,
//! outages and bad input.

mod support;

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::ConnectionManager;
use support::{Cluster, Server, FIFTY};
use tollgate::fair_share::FairShare;
use tollgate::store::Limits;
use tollgate::{Policy, NANOS_PER_MS};
use tollgate_redis::{Error, Fallback, Options, Outcome, RedisLimiter, Source, Why};

async fn connect(server: &Server) -> ConnectionManager {
    support::connect(&server.url()).await
}

fn policy(text: &str) -> Policy {
    text.parse().unwrap()
}

/// 400 checks at once on one key, spread over `clients` limiters that share nothing but
/// Redis (each with its own connection, merging and deny cache, as separate processes
/// would), `rounds` times on fresh keys. Returns the admitted count of each round.
async fn storm(
    server: &Server,
    limit: &str,
    clients: usize,
    rounds: usize,
    blind: bool,
) -> Vec<usize> {
    // Time held still in the middle of a window: a storm that crossed a boundary, or lasted
    // long enough for a refill, would rightly admit more than 50 (seen once on a loaded
    // machine), and exactness under contention is what is tested here.
    let clock = Arc::new(AtomicU64::new(30_000 * NANOS_PER_MS));
    let mut limiters = Vec::new();
    for _ in 0..clients {
        let mut options = Options::new("storm", Fallback::Closed)
            .timeout(Duration::from_secs(5))
            .test_clock(Arc::clone(&clock));
        if blind {
            options = options.blind_commit();
        }
        let l = RedisLimiter::new(
            connect(server).await,
            Limits::single(policy(limit)),
            options,
        )
        .unwrap();
        limiters.push(l);
    }
    let mut admitted = Vec::new();
    for round in 0..rounds {
        let key = format!("{limit}/{round}/{}", fastrand::u64(..));
        let mut tasks = Vec::new();
        for i in 0..400 {
            let l = limiters[i % clients].clone();
            let key = key.clone();
            tasks.push(tokio::spawn(async move { l.check(&key, 1).await }));
        }
        let mut n = 0;
        for t in tasks {
            let outcome = t.await.unwrap().expect("decided");
            assert!(
                matches!(outcome.source, Source::Redis | Source::DenyCache),
                "{limit}: {outcome:?}"
            );
            n += outcome.decision.allowed as usize;
        }
        admitted.push(n);
    }
    admitted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_clients_400_concurrent_checks_admit_exactly_50_for_every_algorithm() {
    let server = Server::start();
    for limit in FIFTY {
        let admitted = storm(&server, limit, 4, 5, false).await;
        assert_eq!(admitted, [50; 5], "{limit}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn control_without_the_version_check_over_admits() {
    // The same storm with the compare-and-set disabled: clients overwrite each other's
    // charges, so the exactness test above would fail without the version check.
    let server = Server::start();
    let admitted = storm(&server, "fixed-window 50/min", 4, 5, true).await;
    assert!(
        admitted.iter().any(|&n| n > 50),
        "blind commits should over-admit: {admitted:?}"
    );
}

/// Replays every shared vector through Redis with a test clock: the same decisions as the
/// core's in-memory limiter (the vectors' expectations).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_shared_vector_gives_the_cores_decisions() {
    let server = Server::start();
    let mut replayed = 0;
    for (file, v) in support::vector_files() {
        let Some(spec) = v.get("limiter") else {
            continue; // policy-errors.json: parsing only
        };
        let limits = if let Some(p) = spec.get("policy") {
            Limits::single(policy(p.as_str().unwrap()))
        } else if let Some(s) = spec.get("stack") {
            let ps: Vec<Policy> = s
                .as_array()
                .unwrap()
                .iter()
                .map(|p| policy(p.as_str().unwrap()))
                .collect();
            Limits::stack(&ps).unwrap()
        } else {
            let f = &spec["fairShare"];
            Limits::fair_share(
                FairShare::new(
                    policy(f["shared"].as_str().unwrap()),
                    policy(f["tenant"].as_str().unwrap()),
                )
                .unwrap(),
            )
        };
        let clock = Arc::new(AtomicU64::new(0));
        let namespace = format!("vectors-{}", file.file_stem().unwrap().to_string_lossy());
        let options = Options::new(namespace, Fallback::Closed)
            .timeout(Duration::from_secs(5))
            .test_clock(Arc::clone(&clock));
        let limiter = RedisLimiter::new(connect(&server).await, limits, options).unwrap();
        for (i, step) in v["steps"].as_array().unwrap().iter().enumerate() {
            let op = step["op"].as_str().unwrap_or("check");
            let key = step["key"].as_str().unwrap();
            clock.store(
                step["t"].as_u64().unwrap_or(0) * NANOS_PER_MS,
                Ordering::SeqCst,
            );
            let cost = step["cost"].as_u64().unwrap_or(1);
            let tenant = step.get("tenant").and_then(|t| t.as_str());
            let stacked = spec.get("policy").is_none();
            let ms = |d: tollgate::Decision| {
                serde_json::to_value(tollgate::MillisDecision::from(d)).unwrap()
            };
            let answer = match op {
                "check" => Some(limiter.check_tenant(key, tenant, cost).await.map(|o| {
                    let mut v = ms(o.decision);
                    if stacked {
                        v["each"] = o.each.into_iter().map(ms).collect();
                    }
                    v
                })),
                "peek" => Some(limiter.peek(key, None).await.map(|o| ms(o.decision))),
                "release" => limiter.release(key, cost).await.err().map(Err),
                "reset" => {
                    limiter.reset(key).await.unwrap();
                    None
                }
                other => panic!("unknown op {other}"),
            };
            let got = answer.map(|a| match a {
                Ok(v) => v,
                Err(Error::Decide(e)) => serde_json::json!({ "error": e.code() }),
                Err(e) => panic!("{}: step {i}: {e}", file.display()),
            });
            let want = step.get("expect").cloned();
            if let Some(want) = want {
                let got = got.expect("an answer");
                support::assert_expected(
                    &got,
                    &want,
                    &format!("{}: step {i} ({step})", file.display()),
                );
            }
            replayed += 1;
        }
    }
    assert!(replayed > 500, "only {replayed} steps replayed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stacks_and_fair_share_are_all_or_nothing_on_a_cluster() {
    let cluster = Cluster::start();
    let conn = redis::cluster::ClusterClient::new(cluster.urls())
        .unwrap()
        .get_async_connection()
        .await
        .unwrap();
    // A stack: 3 per second and 4 per minute. The fourth request within the second is
    // denied by the per-second limit, which must not charge the per-minute window.
    let stack = Limits::stack(&[policy("fixed-window 3/s"), policy("fixed-window 4/min")]).unwrap();
    let limiter =
        RedisLimiter::new(conn.clone(), stack, Options::new("stack", Fallback::Closed)).unwrap();
    let key = format!("k{}", fastrand::u64(..));
    let mut allowed = 0;
    for _ in 0..6 {
        let o = limiter.check(&key, 1).await.unwrap();
        assert!(
            matches!(o.source, Source::Redis | Source::DenyCache),
            "{o:?}"
        );
        allowed += o.decision.allowed as u32;
    }
    let peek = limiter.peek(&key, None).await.unwrap();
    assert!(allowed == 3 || allowed == 4, "{allowed}");
    assert_eq!(
        peek.each[1].remaining,
        4 - allowed as u64,
        "denied requests charged nothing"
    );

    // A fair share: 4 shared, 2 per tenant. Tenant a gets 2, b gets 2, then the shared bucket is
    // empty for everyone; nothing denied was charged to the tenant windows.
    let fair = Limits::fair_share(
        FairShare::new(policy("fixed-window 4/min"), policy("fixed-window 2/min")).unwrap(),
    );
    let limiter = RedisLimiter::new(conn, fair, Options::new("fair", Fallback::Closed)).unwrap();
    let key = format!("shared{}", fastrand::u64(..));
    let mut by_tenant = std::collections::BTreeMap::new();
    for tenant in ["a", "a", "a", "b", "b", "b", "c"] {
        let o = limiter.check_tenant(&key, Some(tenant), 1).await.unwrap();
        *by_tenant.entry(tenant).or_insert(0) += o.decision.allowed as u32;
    }
    assert_eq!(by_tenant["a"], 2);
    assert_eq!(by_tenant["b"], 2);
    assert_eq!(by_tenant["c"], 0, "the shared bucket is spent");
    let c = limiter.peek(&key, Some("c")).await.unwrap();
    assert_eq!(
        c.each[1].remaining, 2,
        "c's denied request charged its window nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_keys_expire_and_the_database_empties() {
    let server = Server::start();
    let limits = Limits::stack(&[policy("gcra 5/200ms"), policy("sliding-log 3/300ms")]).unwrap();
    let options = Options::new("ttl", Fallback::Closed).grace(Duration::from_millis(50));
    let limiter = RedisLimiter::new(connect(&server).await, limits, options).unwrap();
    for i in 0..20 {
        limiter.check(&format!("k{}", i % 5), 1).await.unwrap();
    }
    assert_ne!(server.cli(&["DBSIZE"]), "0");
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.cli(&["DBSIZE"]) != "0" {
        assert!(
            Instant::now() < deadline,
            "keys left: {}",
            server.cli(&["KEYS", "*"])
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // An expired key is exactly a fresh one.
    let o = limiter.check("k0", 1).await.unwrap();
    assert_eq!(o.decision.remaining, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_aof_keeps_every_acknowledged_charge() {
    let mut server = Server::with_args(&[
        "--save",
        "",
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
    ]);
    let options = || Options::new("aof", Fallback::Closed).timeout(Duration::from_secs(5));
    let limits = || Limits::single(policy("fixed-window 100/hour"));
    let limiter = RedisLimiter::new(connect(&server).await, limits(), options()).unwrap();
    let mut acknowledged = 0;
    for _ in 0..37 {
        acknowledged += limiter.check("k", 1).await.unwrap().decision.allowed as u64;
    }
    server.kill();
    server.restart();
    let limiter = RedisLimiter::new(connect(&server).await, limits(), options()).unwrap();
    let o = limiter.peek("k", None).await.unwrap();
    assert_eq!(o.source, Source::Redis);
    assert_eq!(o.decision.remaining, 100 - acknowledged);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn script_flush_mid_run_reaches_no_caller_and_charges_nothing_twice() {
    let server = Server::start();
    let limiter = RedisLimiter::new(
        connect(&server).await,
        Limits::single(policy("fixed-window 150/hour")),
        Options::new("flush", Fallback::Closed).timeout(Duration::from_secs(5)),
    )
    .unwrap();
    let port = server.port;
    let flusher = tokio::task::spawn_blocking(move || {
        for _ in 0..30 {
            support::cli(port, &["SCRIPT", "FLUSH"]);
            std::thread::sleep(Duration::from_millis(3));
        }
    });
    let mut tasks = Vec::new();
    for i in 0..200 {
        let l = limiter.clone();
        tasks.push(tokio::spawn(async move {
            if i % 10 == 0 {
                tokio::time::sleep(Duration::from_millis(i as u64 / 2)).await;
            }
            l.check("k", 1).await
        }));
    }
    let mut admitted = 0;
    for t in tasks {
        let o = t.await.unwrap().expect("no error reaches the caller");
        assert!(
            matches!(o.source, Source::Redis | Source::DenyCache),
            "{o:?}"
        );
        admitted += o.decision.allowed as u64;
    }
    flusher.await.unwrap();
    assert_eq!(admitted, 150);
    let o = limiter.peek("k", None).await.unwrap();
    assert_eq!(
        o.decision.remaining, 0,
        "exactly the admitted charges are stored"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stopped_the_declared_fallback_decides_then_redis_again() {
    let mut server = Server::with_args(&[
        "--save",
        "",
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
    ]);
    let limits = || Limits::single(policy("fixed-window 3/hour"));
    let opts = |f: Fallback| {
        Options::new("outage", f)
            .timeout(Duration::from_millis(200))
            .probe_every(Duration::from_millis(300))
    };
    let local = RedisLimiter::new(
        connect(&server).await,
        limits(),
        opts(Fallback::Local {
            max_keys: NonZeroUsize::new(100).unwrap(),
        }),
    )
    .unwrap();
    let open = RedisLimiter::new(connect(&server).await, limits(), opts(Fallback::Open)).unwrap();
    let closed =
        RedisLimiter::new(connect(&server).await, limits(), opts(Fallback::Closed)).unwrap();
    assert_eq!(local.check("k", 1).await.unwrap().source, Source::Redis);

    server.kill();
    let started = Instant::now();
    let o = local.check("k", 1).await.unwrap();
    assert!(matches!(o.source, Source::Fallback(_)), "{o:?}");
    assert!(o.decision.allowed);
    // Local fallback: its own count (3 per process), denying the fourth.
    let o = local.check("k", 3).await.unwrap();
    assert!(!o.decision.allowed && matches!(o.source, Source::Fallback(Why::Unreachable)));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "within the timeout, not hanging"
    );
    let o = open.check("k", 1).await.unwrap();
    assert!(o.decision.allowed && matches!(o.source, Source::Fallback(_)));
    let o = closed.check("k", 1).await.unwrap();
    assert!(!o.decision.allowed && matches!(o.source, Source::Fallback(_)));
    assert_eq!(
        o.decision.retry_after,
        300 * NANOS_PER_MS,
        "retry at the next probe"
    );
    assert!(local.stats().fallback >= 2);

    server.restart();
    // After the probe interval, decisions return to Redis (with the count it kept: 1).
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let o = local.check("k", 1).await.unwrap();
        if o.source == Source::Redis {
            assert_eq!(o.decision.remaining, 3 - 1 - 1, "{o:?}");
            break;
        }
        assert!(Instant::now() < deadline, "never returned to Redis: {o:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_typed_error_and_charges_nothing() {
    let server = Server::start();
    let limiter = RedisLimiter::new(
        connect(&server).await,
        Limits::single(policy("10/s")),
        Options::new("bad", Fallback::Closed),
    )
    .unwrap();
    // A cost above the capacity: refused before any round trip.
    let e = limiter.check("k", 11).await.unwrap_err();
    assert!(
        matches!(
            e,
            Error::Decide(tollgate::DecideError::CostExceedsCapacity {
                cost: 11,
                capacity: 10
            })
        ),
        "{e}"
    );
    assert_eq!(server.cli(&["DBSIZE"]), "0");
    assert_eq!(limiter.stats().round_trips, 0);
    // A bad policy never reaches a limiter.
    assert!("10/fortnight".parse::<Policy>().is_err());
    // A bad option names itself.
    let e = RedisLimiter::new(
        connect(&server).await,
        Limits::single(policy("10/s")),
        Options::new("a{b", Fallback::Closed),
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("namespace"), "{e}");
    // Corrupt stored bytes: a typed error naming the key; the value is left as it was.
    let key = limiter
        .layout()
        .slot_key("c", None, tollgate::store::Slot::Layer(0));
    server.cli(&["SET", &key, "12345678garbage"]);
    let e = limiter.check("c", 1).await.unwrap_err();
    assert!(
        matches!(&e, Error::Corrupt { key: k, .. } if *k == key),
        "{e}"
    );
    assert!(e.to_string().contains(&key), "{e}");
    assert_eq!(server.cli(&["GET", &key]), "12345678garbage");
    server.cli(&["SET", &key, "abc"]);
    assert!(matches!(
        limiter.check("c", 1).await.unwrap_err(),
        Error::CorruptVersion { .. }
    ));
    // A release without a concurrency limit.
    assert!(matches!(
        limiter.release("k", 1).await.unwrap_err(),
        Error::Decide(tollgate::DecideError::NotConcurrency { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denial_is_remembered_until_its_retry_time() {
    let server = Server::start();
    let limiter = RedisLimiter::new(
        connect(&server).await,
        Limits::single(policy("gcra 2/400ms")),
        Options::new("deny", Fallback::Closed),
    )
    .unwrap();
    assert!(limiter.check("k", 1).await.unwrap().decision.allowed);
    assert!(limiter.check("k", 1).await.unwrap().decision.allowed);
    let denied = limiter.check("k", 1).await.unwrap();
    assert!(!denied.decision.allowed && denied.source == Source::Redis);
    let trips = limiter.stats().round_trips;
    let cached = limiter.check("k", 1).await.unwrap();
    assert_eq!(cached.source, Source::DenyCache);
    assert!(cached.decision.retry_after <= denied.decision.retry_after);
    assert_eq!(limiter.stats().round_trips, trips, "no round trip");
    // A smaller cost is not covered by the denial of a larger one.
    tokio::time::sleep(Duration::from_nanos(denied.decision.retry_after)).await;
    assert!(limiter.check("k", 1).await.unwrap().decision.allowed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_slots_release_and_expire_with_their_lease() {
    let server = Server::start();
    let limiter = RedisLimiter::new(
        connect(&server).await,
        Limits::single(policy("concurrency 2")),
        Options::new("conc", Fallback::Closed).lease(Duration::from_millis(300)),
    )
    .unwrap();
    assert!(limiter.check("k", 1).await.unwrap().decision.allowed);
    assert!(limiter.check("k", 1).await.unwrap().decision.allowed);
    assert!(!limiter.check("k", 1).await.unwrap().decision.allowed);
    limiter.release("k", 1).await.unwrap();
    assert!(limiter.check("k", 1).await.unwrap().decision.allowed);
    // A client that crashed holding both slots: the lease frees them.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !limiter.check("k", 1).await.unwrap().decision.allowed {
        assert!(Instant::now() < deadline, "the lease never expired");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The fleet setting the crate was built for: WHOIS lookups, 2 per 2000 ms shared per
/// registry and 1 per 2000 ms per tenant, per-TLD overrides each in their own namespace,
/// shared by two processes' limiters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whois_budgets_with_fair_share_and_per_tld_overrides() {
    use tollgate_redis::namespaces::parse_overrides;
    let server = Server::start();
    let fair = |shared: &str, tenant: &str| {
        Limits::fair_share(FairShare::new(policy(shared), policy(tenant)).unwrap())
    };
    let overrides = parse_overrides(r#"{"com": "gcra 1/2000ms"}"#).unwrap();
    let com = overrides["com"];
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let default = RedisLimiter::new(
            connect(&server).await,
            fair("gcra 2/2000ms", "gcra 1/2000ms"),
            Options::new("whois", Fallback::Closed),
        )
        .unwrap();
        let com = RedisLimiter::new(
            connect(&server).await,
            Limits::fair_share(FairShare::new(com, com).unwrap()),
            Options::new("whois:com", Fallback::Closed),
        )
        .unwrap();
        replicas.push((default, com));
    }
    let allowed = |o: Outcome| o.decision.allowed;
    // Replica 0: tenant acme's lookup; replica 1: acme again (its tenant window is spent,
    // fleet-wide), then globex (shared bucket still has one).
    assert!(allowed(
        replicas[0]
            .0
            .check_tenant("registry", Some("acme"), 1)
            .await
            .unwrap()
    ));
    assert!(!allowed(
        replicas[1]
            .0
            .check_tenant("registry", Some("acme"), 1)
            .await
            .unwrap()
    ));
    assert!(allowed(
        replicas[1]
            .0
            .check_tenant("registry", Some("globex"), 1)
            .await
            .unwrap()
    ));
    // The shared bucket is spent for a third tenant, on either replica.
    let o = replicas[0]
        .0
        .check_tenant("registry", Some("initech"), 1)
        .await
        .unwrap();
    assert!(!o.decision.allowed);
    // The next token is due 1000 ms after the first lookup (2 per 2000 ms).
    let retry = o.decision.retry_after;
    assert!(retry > 0 && retry <= 1_000 * NANOS_PER_MS, "{o:?}");
    // .com has its own bucket: one lookup per 2000 ms, whoever asks.
    assert!(allowed(
        replicas[1]
            .1
            .check_tenant("registry", Some("acme"), 1)
            .await
            .unwrap()
    ));
    assert!(!allowed(
        replicas[0]
            .1
            .check_tenant("registry", Some("globex"), 1)
            .await
            .unwrap()
    ));
    // Operators can inspect the buckets by name.
    let keys = server.cli(&["KEYS", "tollgate:{whois*"]);
    assert!(keys.contains("tollgate:{whois:registry}:0"), "{keys}");
    assert!(keys.contains("tollgate:{whois:registry}:t:acme"), "{keys}");
    assert!(keys.contains("tollgate:{whois:com:registry}:0"), "{keys}");
    // A tenant window above the shared bucket is refused.
    assert!(FairShare::new(policy("gcra 2/2000ms"), policy("gcra 3/2000ms")).is_err());
}

/// The child half of `a_client_clock_skewed_by_10_minutes_changes_no_decision`: run in its
/// own process under `faketime`, it checks a key and prints its wall clock and decisions.
#[tokio::test(flavor = "current_thread")]
#[ignore = "run by a_client_clock_skewed_by_10_minutes_changes_no_decision under faketime"]
async fn skewed_client() {
    let Ok(port) = std::env::var("TOLLGATE_SKEW_PORT") else {
        return;
    };
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let limiter = RedisLimiter::new(
        client.get_connection_manager().await.unwrap(),
        Limits::single(policy("sliding-log 5/min")),
        Options::new("skew", Fallback::Closed).timeout(Duration::from_secs(5)),
    )
    .unwrap();
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    println!("wall {wall}");
    for _ in 0..3 {
        let o = limiter.check("k", 1).await.unwrap();
        println!(
            "allowed {} remaining {}",
            o.decision.allowed, o.decision.remaining
        );
    }
}

/// Decisions use Redis's clock: a process whose clock is 10 minutes ahead sees the charges
/// of a process with the right clock (a sliding log of 1 minute would look empty to it if
/// its own clock decided) and is limited with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_clock_skewed_by_10_minutes_changes_no_decision() {
    let server = Server::start();
    let limiter = RedisLimiter::new(
        connect(&server).await,
        Limits::single(policy("sliding-log 5/min")),
        Options::new("skew", Fallback::Closed),
    )
    .unwrap();
    for _ in 0..3 {
        assert!(limiter.check("k", 1).await.unwrap().decision.allowed);
    }
    let out = std::process::Command::new("faketime")
        .args(["-f", "+10m"])
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "skewed_client",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("TOLLGATE_SKEW_PORT", server.port.to_string())
        .output()
        .expect("faketime (apt-get install faketime)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ours = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let theirs: u64 = stdout
        .lines()
        .find_map(|l| l.split("wall ").nth(1))
        .unwrap_or_else(|| panic!("the child's clock: {stdout}"))
        .parse()
        .unwrap();
    assert!(
        theirs >= ours + 590,
        "the child's clock is skewed: {theirs} vs {ours}"
    );
    let decisions: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("allowed"))
        .collect();
    assert_eq!(
        decisions,
        [
            "allowed true remaining 1",
            "allowed true remaining 0",
            "allowed false remaining 0"
        ],
        "the skewed client counts the 3 charges made before it"
    );
    assert!(!limiter.check("k", 1).await.unwrap().decision.allowed);
}

/// A script running past Redis's busy threshold makes the server answer every other command
/// with `BUSY`: it cannot serve now (and ran nothing), so the declared fallback decides, as
/// for `LOADING`, instead of the caller getting an error for as long as the script runs.
/// (Before the core's one table of error replies, only the npm client treated `BUSY` so.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_server_gets_the_declared_fallback() {
    let server = Server::with_args(&["--save", "", "--appendonly", "no", "--lua-time-limit", "20"]);
    let options = Options::new("busy", Fallback::Open).use_module(false);
    let limits = Limits::single(policy("10/s"));
    let limiter = RedisLimiter::new(connect(&server).await, limits, options).unwrap();
    assert_eq!(limiter.check("k", 1).await.unwrap().source, Source::Redis);

    let url = server.url();
    let script = tokio::spawn(async move {
        let mut conn = redis::Client::open(url)
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        redis::cmd("EVAL")
            .arg("while true do end")
            .arg(0)
            .query_async::<redis::Value>(&mut conn)
            .await
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while !server.cli(&["PING"]).starts_with("BUSY") {
        assert!(
            Instant::now() < deadline,
            "the script never made Redis busy"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let o = limiter.check("k", 1).await.unwrap();
    assert_eq!(o.source, Source::Fallback(Why::Unreachable), "{o:?}");
    assert!(o.decision.allowed);
    assert_eq!(limiter.stats().fallback, 1);
    server.cli(&["SCRIPT", "KILL"]);
    assert!(script.await.unwrap().is_err(), "the script was killed");
    assert_eq!(server.cli(&["PING"]), "PONG");
}
