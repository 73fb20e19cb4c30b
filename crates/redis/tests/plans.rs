//! Plans on Redis by the scripts (a real redis-server without the module, started here on
//! a free loopback port): the plan vectors, spend kept across plan changes, overrides seen
//! by every client at its next check, and a storm of one key from two processes (the same
//! tests run by the module in crates/redis-module/tests/plans.rs); the declared fallback
//! while Redis is down, and a cluster.

mod support;

#[path = "support/plans.rs"]
mod plans;

use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

use support::{Cluster, Server};
use tollgate::plans::{Override, Plans};
use tollgate::NANOS_PER_MS;
use tollgate_redis::{Error, Fallback, Options, RedisPlans, Source, Why};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plan_vectors_replay_on_the_scripts() {
    let server = Server::start();
    plans::replay_vectors(&server.url(), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn free_pro_free_within_a_minute_keeps_the_spend() {
    let server = Server::start();
    plans::free_pro_free_keeps_spend(&server.url(), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shorter_stack_takes_the_nearest_window_and_drops_the_spare_slot() {
    let server = Server::start();
    plans::a_shorter_stack_takes_the_nearest_window_and_drops_the_spare_slot(&server.url(), false)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_override_set_by_one_client_applies_at_another_clients_next_check() {
    let server = Server::start();
    plans::override_applies_at_the_next_check(&server.url(), false, false).await;
}

#[test]
fn checks_of_one_pro_key_from_two_processes_admit_exactly_its_limit() {
    let server = Server::start();
    plans::storm_across_two_processes(&server.url(), false, "plan_storm_child");
}

/// The child process of the storm test. Run by it only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child process of checks_of_one_pro_key_from_two_processes_admit_exactly_its_limit"]
async fn plan_storm_child() {
    plans::storm_child().await;
}

fn free_and_pro() -> Plans {
    Plans::parse(&[
        ("free", &["fixed-window 3/hour"]),
        ("pro", &["fixed-window 30/hour"]),
    ])
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_plans_get_the_declared_fallback_and_come_back() {
    let mut server = Server::with_args(&["--appendonly", "yes", "--appendfsync", "always"]);
    let opts = |f: Fallback| {
        Options::new("outage", f)
            .timeout(Duration::from_millis(200))
            .probe_every(Duration::from_millis(300))
    };
    let plan = |f| {
        let url = server.url();
        async move { RedisPlans::new(support::connect(&url).await, free_and_pro(), opts(f)).unwrap() }
    };
    let local = plan(Fallback::Local {
        max_keys: NonZeroUsize::new(100).unwrap(),
    })
    .await;
    let open = plan(Fallback::Open).await;
    let closed = plan(Fallback::Closed).await;
    assert_eq!(
        local.check("k", "free", 1).await.unwrap().source,
        Source::Redis
    );

    server.kill();
    let started = Instant::now();
    // Local: this process's own plan limiter, with the plan named (3 per process).
    let o = local.check("k", "free", 3).await.unwrap();
    assert!(
        o.decision.allowed && matches!(o.source, Source::Fallback(_)),
        "{o:?}"
    );
    let o = local.check("k", "free", 1).await.unwrap();
    assert!(!o.decision.allowed && o.source == Source::Fallback(Why::Unreachable));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "within the timeout"
    );
    let o = open.check("k", "pro", 1).await.unwrap();
    assert!(o.decision.allowed && matches!(o.source, Source::Fallback(_)));
    assert_eq!(
        o.decision.limit, 30,
        "the plan named decides the fallback's answer"
    );
    let o = closed.check("k", "pro", 1).await.unwrap();
    assert!(!o.decision.allowed && matches!(o.source, Source::Fallback(_)));
    assert_eq!(
        o.decision.retry_after,
        300 * NANOS_PER_MS,
        "retry at the next probe"
    );
    // An override is configuration: no fallback sets one, the caller gets the error.
    assert!(matches!(
        closed.set("k", Override::Plan("pro".into())).await,
        Err(Error::Redis(_))
    ));

    server.restart();
    // After the probe interval, decisions return to Redis, with the count it kept (1).
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let o = local.check("k", "free", 1).await.unwrap();
        if o.source == Source::Redis {
            assert_eq!(o.decision.remaining, 3 - 1 - 1, "{o:?}");
            break;
        }
        assert!(Instant::now() < deadline, "never returned to Redis: {o:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plans_and_overrides_work_on_a_cluster() {
    let cluster = Cluster::start();
    let conn = redis::cluster::ClusterClient::new(cluster.urls())
        .unwrap()
        .get_async_connection()
        .await
        .unwrap();
    let opts = Options::new("cluster", Fallback::Closed);
    let l = RedisPlans::new(conn, free_and_pro(), opts).unwrap();
    // Callers spread over the nodes: each one's slots and override share its hash tag.
    for i in 0..20 {
        let key = format!("caller-{i}");
        assert!(l.check(&key, "free", 3).await.unwrap().decision.allowed);
        assert!(!l.check(&key, "free", 1).await.unwrap().decision.allowed);
        l.set(&key, Override::Plan("pro".into())).await.unwrap();
        let o = l.check(&key, "free", 1).await.unwrap();
        assert!(o.overridden && o.decision.allowed);
        assert_eq!(o.decision.remaining, 30 - 3 - 1, "the 3 spent on free kept");
        assert!(l.clear(&key).await.unwrap());
    }
    assert_eq!(l.stats().fallback, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_with_a_concurrency_limit_is_refused_by_name() {
    let server = Server::start();
    let plans =
        Plans::parse(&[("free", &["10/s"]), ("batch", &["10/s", "concurrency 2"])]).unwrap();
    let options = Options::new("refused", Fallback::Closed);
    let e = RedisPlans::new(support::connect(&server.url()).await, plans, options)
        .err()
        .expect("refused");
    assert_eq!(
        e.to_string(),
        "invalid option plans: plan \"batch\" has a concurrency limit, which RedisPlans cannot release yet"
    );
}
