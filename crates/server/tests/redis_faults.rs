//! One fault run against both clients of one Redis: tollgate-redis's limiter and the server
//! on its Redis store, each by the module and by the scripts, under load while redis-server
//! is SIGKILLed (then restarted) or SIGSTOPped (then continued). Each answers with its
//! declared behaviour (fail closed: denied); after the first failure the fallback answers
//! without a round trip until the probe (counted); each is back on Redis after Redis is.
//! Latencies and the time to come back (one probe interval, 1 s, at most, plus a round trip)
//! are printed, never asserted.

mod support;

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use support::{code, desc, redis_with_module, req, start_on, Running};
use tollgate::store::Limits;
use tollgate_redis::{Fallback, Options, RedisLimiter, Stats};
use tollgate_rls::redis_store::{Failure, ModuleUse, RedisStore};
use tollgate_rls::service::Settings;

/// Never denied by Redis: a denial is the fallback's.
const CONFIG: &str =
    "domain: faults\ndescriptors:\n  - key: k\n    rate_limit:\n      policy: \"100000000/350d\"\n";
const TIMEOUT: Duration = Duration::from_millis(200);
/// Requests in flight per client.
const LOOPERS: usize = 8;

/// One client under test: asks once (admitted?), and its counts.
#[derive(Clone)]
enum Client {
    Limiter(RedisLimiter<redis::aio::ConnectionManager>),
    Server(Arc<Mutex<Option<Running<RedisStore>>>>),
}

impl Client {
    async fn ask(&self) -> bool {
        match self {
            Client::Limiter(l) => l.check("k", 1).await.expect("decided").decision.allowed,
            Client::Server(s) => {
                let mut c = s.lock().unwrap().as_ref().unwrap().client.clone();
                let r = c
                    .should_rate_limit(req("faults", vec![desc(&[("k", "v")])]))
                    .await
                    .expect("answered")
                    .into_inner();
                code(r.overall_code) == Code::Ok
            }
        }
    }

    fn stats(&self) -> Stats {
        match self {
            Client::Limiter(l) => l.stats(),
            Client::Server(s) => s.lock().unwrap().as_ref().unwrap().service.store().stats(),
        }
    }
}

/// What the loopers saw: (since the fault, latency, admitted); the latencies of the answers
/// asked before the fault, for comparison.
type Seen = Arc<Mutex<(Vec<(Duration, Duration, bool)>, Vec<Duration>)>>;

#[derive(Clone, Copy, Debug)]
enum Fault {
    Kill,
    Stop,
}

async fn clients(url: &str) -> Vec<(String, Client)> {
    let mut out = Vec::new();
    for module in [true, false] {
        // As the README advises: one reconnect attempt, so that a probe after the outage
        // does not wait out a backoff.
        let config = redis::aio::ConnectionManagerConfig::new().set_number_of_retries(1);
        let conn = redis::Client::open(url)
            .unwrap()
            .get_connection_manager_with_config(config)
            .await
            .unwrap();
        let options = Options::new(format!("faults{}", fastrand::u64(..)), Fallback::Closed)
            .timeout(TIMEOUT)
            .use_module(module);
        let limits = Limits::single("100000000/350d".parse().unwrap());
        let limiter = RedisLimiter::new(conn, limits, options).unwrap();
        out.push((
            format!("tollgate-redis module={module}"),
            Client::Limiter(limiter),
        ));
        let choice = if module {
            ModuleUse::On
        } else {
            ModuleUse::Off
        };
        let prefix = format!("f{}:", fastrand::u64(..));
        let store = RedisStore::connect(url, &prefix, TIMEOUT, Failure::Closed)
            .await
            .unwrap()
            .use_module(choice)
            .await
            .unwrap();
        let running = start_on(&[CONFIG], Settings::default(), store).await;
        let server = Client::Server(Arc::new(Mutex::new(Some(running))));
        out.push((format!("tollgate-rls module={module}"), server));
    }
    out
}

async fn fault_run(fault: Fault) {
    let mut redis = redis_with_module();
    let clients = clients(&redis.url()).await;
    let stop = Arc::new(AtomicBool::new(false));
    let fault_at = Arc::new(Mutex::new(None::<Instant>));
    let mut tasks = Vec::new();
    let mut seen = Vec::new();
    for (_, client) in &clients {
        let log: Seen = Arc::default();
        seen.push(log.clone());
        for _ in 0..LOOPERS {
            let (client, stop, log, fault_at) =
                (client.clone(), stop.clone(), log.clone(), fault_at.clone());
            tasks.push(tokio::spawn(async move {
                while !stop.load(Relaxed) {
                    let t = Instant::now();
                    let admitted = client.ask().await;
                    let at = fault_at
                        .lock()
                        .unwrap()
                        .map(|f| t.saturating_duration_since(f));
                    let mut log = log.lock().unwrap();
                    match at {
                        Some(since) => log.0.push((since, t.elapsed(), admitted)),
                        None => log.1.push(t.elapsed()),
                    }
                }
            }));
        }
    }
    // Every client decides on Redis first (a slow machine may have one fall back on a slow
    // round trip meanwhile: the counts below are taken from here).
    let warm = Instant::now();
    while clients.iter().any(|(_, c)| c.stats().redis < 10) {
        assert!(
            warm.elapsed() < Duration::from_secs(30),
            "decided on Redis first"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let before: Vec<Stats> = clients.iter().map(|(_, c)| c.stats()).collect();
    *fault_at.lock().unwrap() = Some(Instant::now());
    match fault {
        Fault::Kill => redis.kill(),
        Fault::Stop => redis.pause(),
    }
    // The outage: long enough for a few probes.
    let outage = Duration::from_millis(2500);
    tokio::time::sleep(outage).await;
    let during: Vec<Stats> = clients.iter().map(|(_, c)| c.stats()).collect();
    let elapsed = fault_at.lock().unwrap().unwrap().elapsed();
    match fault {
        Fault::Kill => redis.restart(),
        Fault::Stop => redis.resume(),
    }
    let back_at = Instant::now();
    // Back on Redis: every client has Redis decide again (a guard against a hang only).
    let guard = Duration::from_secs(30);
    let mut back = vec![None; clients.len()];
    while back.iter().any(Option::is_none) && back_at.elapsed() < guard {
        for (i, (_, c)) in clients.iter().enumerate() {
            if back[i].is_none() && c.stats().redis > during[i].redis {
                back[i] = Some(back_at.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.store(true, Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    for (i, (name, _)) in clients.iter().enumerate() {
        let log = seen[i].lock().unwrap();
        // Asked after the fault, answered before Redis was back: the declared answer.
        let out: Vec<_> = log
            .0
            .iter()
            .filter(|(since, took, _)| *since + *took < elapsed)
            .collect();
        let admitted = out
            .iter()
            .filter(|(since, _, a)| *a && *since > TIMEOUT * 2)
            .count();
        let p99_outage = p99(out.iter().map(|(_, t, _)| *t).collect());
        let p99_before = p99(log.1.clone());
        let (b, d) = (&before[i], &during[i]);
        let trips = d.round_trips - b.round_trips;
        let fallback = d.fallback - b.fallback;
        // Each probe lets at most every request in flight try (the scripts: a read and, on
        // NOSCRIPT, its body): at most this many round trips in the outage.
        let probes = (elapsed.as_millis() / 1000) as u64 + 1;
        let most = probes * 2 * LOOPERS as u64;
        println!(
            "{fault:?} {name}: {} answers in the outage, p99 {:.2} ms (before it: {:.2} ms), {fallback} by the fallback, {trips} round trips (at most {most}), back on Redis {:?} after it returned",
            out.len(),
            p99_outage.as_secs_f64() * 1e3,
            p99_before.as_secs_f64() * 1e3,
            back[i]
        );
        assert_eq!(admitted, 0, "{name}: fail closed denies once Redis is gone");
        assert!(trips <= most, "{name}: {trips} round trips in the outage");
        assert!(
            fallback > 2 * most,
            "{name}: the fallback answered without a round trip ({fallback} answers)"
        );
        assert!(back[i].is_some(), "{name}: back on Redis");
    }
    for (_, c) in clients {
        if let Client::Server(s) = c {
            if let Some(r) = s.lock().unwrap().take() {
                drop(r);
            }
        }
    }
}

/// The 99th percentile of `took`.
fn p99(mut took: Vec<Duration>) -> Duration {
    took.sort_unstable();
    took.get(took.len().saturating_sub(1) * 99 / 100)
        .copied()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_killed_under_load_gives_the_declared_answer_without_waiting_and_comes_back() {
    fault_run(Fault::Kill).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_stopped_under_load_gives_the_declared_answer_without_waiting_and_comes_back() {
    fault_run(Fault::Stop).await;
}
