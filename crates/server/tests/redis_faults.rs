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
use support::redis_server::Server;
use support::{code, desc, redis_with_module, req, start_on, Running};
use tollgate::store::Limits;
use tollgate_redis::{Connection, Fallback, Options, RedisLimiter, Stats, Transition};
use tollgate_rls::redis_store::{Failure, ModuleUse, RedisStore};
use tollgate_rls::service::Settings;

/// Never denied by Redis: a denial is the fallback's.
const CONFIG: &str =
    "domain: faults\ndescriptors:\n  - key: k\n    rate_limit:\n      policy: \"100000000/350d\"\n";
const TIMEOUT: Duration = Duration::from_millis(200);
/// Requests in flight per client.
const LOOPERS: usize = 8;
/// The pause between one looper's requests.
const PACE: Duration = Duration::from_millis(2);

/// One client under test: asks once (admitted?), and its counts.
#[derive(Clone)]
enum Client {
    Limiter(RedisLimiter<Connection>),
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

/// What the loopers saw: each answer's start, how long it took, and whether it admitted.
type Seen = Arc<Mutex<Vec<(Instant, Duration, bool)>>>;

/// When the link to Redis was reported down (true) or up (false), in order.
type Marks = Arc<Mutex<Vec<(Instant, bool)>>>;

/// Records the transitions the link reports (its observer).
fn observe(marks: &Marks) -> impl Fn(Transition) + Send + Sync + 'static {
    let marks = marks.clone();
    move |t| {
        let down = matches!(t, Transition::Down(_));
        marks.lock().unwrap().push((Instant::now(), down));
    }
}

#[derive(Clone, Copy, Debug)]
enum Fault {
    Kill,
    Stop,
}

async fn clients(url: &str) -> Vec<(String, Client, Marks)> {
    let mut out = Vec::new();
    for module in [true, false] {
        // The connection set-up the server's store uses too.
        let conn = Connection::single(url, TIMEOUT).await.unwrap();
        let marks = Marks::default();
        let options = Options::new(format!("faults{}", fastrand::u64(..)), Fallback::Closed)
            .timeout(TIMEOUT)
            .use_module(module)
            .on_transition(observe(&marks));
        let limits = Limits::single("100000000/350d".parse().unwrap());
        let limiter = RedisLimiter::new(conn, limits, options).unwrap();
        out.push((
            format!("tollgate-redis module={module}"),
            Client::Limiter(limiter),
            marks,
        ));
        let choice = if module {
            ModuleUse::On
        } else {
            ModuleUse::Off
        };
        let prefix = format!("f{}:", fastrand::u64(..));
        let marks = Marks::default();
        let store = RedisStore::connect(url, &prefix, TIMEOUT, Failure::Closed)
            .await
            .unwrap()
            .use_module(choice)
            .await
            .unwrap()
            .on_transition(observe(&marks));
        let running = start_on(&[CONFIG], Settings::default(), store).await;
        let server = Client::Server(Arc::new(Mutex::new(Some(running))));
        out.push((format!("tollgate-rls module={module}"), server, marks));
    }
    out
}

/// The latencies of `answers`: how many, their 99th percentile and the longest, in ms.
fn latencies<'a>(answers: impl Iterator<Item = &'a (Instant, Duration, bool)>) -> String {
    let mut took: Vec<Duration> = answers.map(|(_, t, _)| *t).collect();
    took.sort_unstable();
    let ms = |d: Option<&Duration>| d.copied().unwrap_or_default().as_secs_f64() * 1e3;
    format!(
        "{} answers, p99 {:.2} ms, max {:.2} ms",
        took.len(),
        ms(took.get(took.len().saturating_sub(1) * 99 / 100)),
        ms(took.last())
    )
}

/// Does `what` to the server on a thread of its own: starting redis-server again blocks
/// until it answers, and a blocked worker of the runtime would stall the loopers' answers.
async fn act(mut redis: Server, what: impl FnOnce(&mut Server) + Send + 'static) -> Server {
    tokio::task::spawn_blocking(move || {
        what(&mut redis);
        redis
    })
    .await
    .unwrap()
}

async fn fault_run(fault: Fault) {
    let redis = redis_with_module();
    let clients = clients(&redis.url()).await;
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    let mut seen = Vec::new();
    for (_, client, _) in &clients {
        let log: Seen = Arc::default();
        seen.push(log.clone());
        for _ in 0..LOOPERS {
            let (client, stop, log) = (client.clone(), stop.clone(), log.clone());
            tasks.push(tokio::spawn(async move {
                while !stop.load(Relaxed) {
                    let t = Instant::now();
                    let admitted = client.ask().await;
                    log.lock().unwrap().push((t, t.elapsed(), admitted));
                    // A steady load, not a closed loop that keeps every core busy: the
                    // latencies are then the clients', not the machine's queue.
                    tokio::time::sleep(PACE).await;
                }
            }));
        }
    }
    // Every client decides on Redis first (a slow machine may have one fall back on a slow
    // round trip meanwhile: the counts below are taken from here).
    let warm = Instant::now();
    while clients.iter().any(|(_, c, _)| c.stats().redis < 10) {
        assert!(
            warm.elapsed() < Duration::from_secs(30),
            "decided on Redis first"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // A second of steady load on Redis: the latencies to compare with.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before: Vec<Stats> = clients.iter().map(|(_, c, _)| c.stats()).collect();
    let fault_at = Instant::now();
    let redis = act(redis, move |r| match fault {
        Fault::Kill => r.kill(),
        Fault::Stop => r.pause(),
    })
    .await;
    // The outage: long enough for a few probes.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let during: Vec<Stats> = clients.iter().map(|(_, c, _)| c.stats()).collect();
    // Kept until the end: dropping it stops redis-server.
    let _redis = act(redis, move |r| match fault {
        Fault::Kill => r.restart(),
        Fault::Stop => r.resume(),
    })
    .await;
    let back_at = Instant::now();
    let returned: Vec<Stats> = clients.iter().map(|(_, c, _)| c.stats()).collect();
    // Back on Redis: every client has Redis decide again (a guard against a hang only).
    let guard = Duration::from_secs(30);
    let mut back = vec![None; clients.len()];
    while back.iter().any(Option::is_none) && back_at.elapsed() < guard {
        for (i, (_, c, _)) in clients.iter().enumerate() {
            if back[i].is_none() && c.stats().redis > returned[i].redis {
                back[i] = Some((back_at.elapsed(), c.stats()));
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.store(true, Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    for (i, (name, _, marks)) in clients.iter().enumerate() {
        let log = seen[i].lock().unwrap();
        let marks = marks.lock().unwrap();
        // The first failure after the fault marked Redis down; the first success after it
        // lifted the mark.
        let down_at = marks
            .iter()
            .find(|(t, down)| *down && *t >= fault_at)
            .map(|(t, _)| *t)
            .unwrap_or_else(|| panic!("{name}: marked down after the fault"));
        let up_at = marks
            .iter()
            .find(|(t, down)| !*down && *t > down_at)
            .map(|(t, _)| *t);
        let ended = |(t, took, _): &&(Instant, Duration, bool)| *t + *took;
        let earlier = log.iter().filter(|a| ended(a) < fault_at);
        // In flight at the fault, or sent before anyone saw it: each waits for its failure
        // (SIGKILL: a dropped connection; SIGSTOP: its own timeout).
        let in_flight = log.iter().filter(|a| a.0 < down_at && ended(a) >= fault_at);
        // Started once Redis was marked down, answered before it returned.
        let after: Vec<_> = log
            .iter()
            .filter(|a| a.0 >= down_at && ended(a) < back_at)
            .collect();
        let admitted = after.iter().filter(|(_, _, a)| *a).count();
        let (b, d) = (&before[i], &during[i]);
        let trips = d.round_trips - b.round_trips;
        let fallback = d.fallback - b.fallback;
        let elapsed = back_at - fault_at;
        // Each probe lets at most every request in flight try (the scripts: a read and, on
        // NOSCRIPT, its body): at most this many round trips in the outage.
        let probes = (elapsed.as_millis() / 1000) as u64 + 1;
        let most = probes * 2 * LOOPERS as u64;
        println!(
            "{fault:?} {name}: marked down {:.1} ms after the fault; \
             before the fault {}; in flight at the fault {}; \
             started after the mark-down {}; \
             {fallback} by the fallback, {trips} round trips (at most {most}); \
             {} probes in the outage, {} after it; \
             back on Redis {:?} after it returned (mark lifted {:?} after)",
            (down_at - fault_at).as_secs_f64() * 1e3,
            latencies(earlier),
            latencies(in_flight),
            latencies(after.iter().copied()),
            returned[i].probes - b.probes,
            back[i]
                .as_ref()
                .map_or(0, |(_, s)| s.probes - returned[i].probes),
            back[i].as_ref().map(|b| b.0),
            up_at.map(|u| u.saturating_duration_since(back_at)),
        );
        assert_eq!(
            admitted, 0,
            "{name}: fail closed denies once Redis is marked down"
        );
        assert!(trips <= most, "{name}: {trips} round trips in the outage");
        assert!(
            fallback > 2 * most,
            "{name}: the fallback answered without a round trip ({fallback} answers)"
        );
        let Some((_, at_back)) = &back[i] else {
            panic!("{name}: back on Redis");
        };
        // The first probe started after Redis returned found it back (one in flight at its
        // return may have failed before, and is counted earlier).
        let probes_after = at_back.probes - returned[i].probes;
        assert!(
            probes_after <= 1,
            "{name}: {probes_after} probes after Redis returned"
        );
    }
    for (_, c, _) in clients {
        if let Client::Server(s) = c {
            if let Some(r) = s.lock().unwrap().take() {
                drop(r);
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_killed_under_load_gives_the_declared_answer_without_waiting_and_comes_back() {
    fault_run(Fault::Kill).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_stopped_under_load_gives_the_declared_answer_without_waiting_and_comes_back() {
    fault_run(Fault::Stop).await;
}
