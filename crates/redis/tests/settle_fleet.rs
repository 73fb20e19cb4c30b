//! The fleet test of reserve-then-settle (issue 40's "done when", the Rust side): limiters
//! with their own connections, and one child process killed with SIGKILL, share 10,000
//! tokens a minute on one real redis-server (and on a cluster); 200 concurrent streams
//! reserve estimates of 100-1,000 tokens and settle random actual costs.
//!
//! The limiters decide at a test clock held still, so that the minute's window cannot roll
//! over mid-test and every token charged stays in one count the test reads back from Redis
//! (the accounting is what is tested; the clock is Redis's in production).

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionLike;
use support::{Cluster, Server};
use tollgate::settle::Reservation;
use tollgate::store::{fleet, Limits, Slot};
use tollgate::{Overage, State, NANOS_PER_SEC};
use tollgate_redis::{Fallback, Options, RedisLimiter};

/// The shared budget: 10,000 tokens a minute.
const BUDGET: u64 = 10_000;
/// Where the held clock stands (any instant inside one minute's window).
const AT: u64 = 1_000 * NANOS_PER_SEC + 1;
const STREAMS: usize = 200;

fn limiter<C>(conn: C, namespace: &str) -> RedisLimiter<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    let limits = Limits::single(format!("fixed-window {BUDGET}/min").parse().unwrap());
    let options = Options::new(namespace, Fallback::Closed)
        // Long enough that 200 streams on one key never give up on conflicts.
        .timeout(Duration::from_secs(10))
        .test_clock(Arc::new(AtomicU64::new(AT)));
    RedisLimiter::new(conn, limits, options).unwrap()
}

/// One stream of the trace: what it reserves and what it really costs.
#[derive(Clone, Copy, Debug)]
struct Stream {
    estimate: u64,
    actual: u64,
}

/// 200 streams, estimates 100-1,000; actual costs at most the estimate, except for
/// `over` of them (10%: 1-50% above it).
fn trace(rng: &mut fastrand::Rng, over: bool) -> Vec<Stream> {
    (0..STREAMS)
        .map(|i| {
            let estimate = rng.u64(100..=1_000);
            let actual = if over && i % 10 == 0 {
                estimate + rng.u64(1..=estimate / 2)
            } else {
                rng.u64(0..=estimate)
            };
            Stream { estimate, actual }
        })
        .collect()
}

/// The count charged to `key` in its window, read from Redis.
async fn charged<C: ConnectionLike + Clone + Send + Sync + 'static>(
    l: &RedisLimiter<C>,
    conn: &mut C,
    key: &str,
) -> u64 {
    let name = l.layout().slot_key(key, None, Slot::Layer(0));
    let value: Vec<u8> = redis::cmd("GET")
        .arg(&name)
        .query_async(conn)
        .await
        .unwrap();
    match fleet::decode_value(&value).unwrap() {
        None => 0,
        Some(stored) => match stored.state {
            State::FixedWindow(w) => w.count,
            other => panic!("not a fixed window's state: {other:?}"),
        },
    }
}

fn copy(r: &Reservation) -> Reservation {
    Reservation { ..*r }
}

/// What the streams of one run did: admitted ones' actual costs, and the overages of those
/// above their estimates.
#[derive(Debug, Default)]
struct Run {
    admitted: usize,
    actual: u64,
    overage: u64,
    /// The most the monitor saw charged at once.
    peak: u64,
}

/// Runs `streams` concurrently, spread over `limiters` (each its own connection): a random
/// start within 50 ms, reserve, a short random pause, settle; every fifth settle sent a second time by another limiter
/// (a client retry) must answer the same and charge nothing more. `charge_after` runs the
/// same trace the other way: admitted on a check of 0 (while the budget is not spent),
/// charged the actual at the end.
async fn run<C: ConnectionLike + Clone + Send + Sync + 'static>(
    limiters: &[RedisLimiter<C>],
    mut conn: C,
    key: &str,
    streams: &[Stream],
    charge_after: bool,
    seed: u64,
) -> Run {
    let done = Arc::new(AtomicBool::new(false));
    let monitor = {
        let (l, mut conn, key, done) = (
            limiters[0].clone(),
            conn.clone(),
            key.to_owned(),
            done.clone(),
        );
        tokio::spawn(async move {
            let mut peak = 0;
            while !done.load(Relaxed) {
                peak = peak.max(charged(&l, &mut conn, &key).await);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            peak
        })
    };
    let mut tasks = Vec::new();
    for (i, s) in streams.iter().copied().enumerate() {
        let l = limiters[i % limiters.len()].clone();
        let twin = limiters[(i + 1) % limiters.len()].clone();
        let key = key.to_owned();
        let mut rng = fastrand::Rng::with_seed(seed ^ i as u64);
        // Streams start over 50 ms, so that later ones meet the refunds of earlier ones.
        let start = Duration::from_micros(rng.u64(0..50_000));
        let pause = Duration::from_micros(rng.u64(0..3_000));
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep(start).await;
            let estimate = if charge_after { 0 } else { s.estimate };
            let (o, r) = l.reserve(&key, estimate).await.unwrap();
            let r = r.filter(|_| !charge_after || o.decision.remaining > 0)?;
            tokio::time::sleep(pause).await;
            let kept = copy(&r);
            let settled = l.settle(&key, r, s.actual, Overage::Debt).await.unwrap();
            if i % 5 == 0 {
                let again = twin
                    .settle(&key, kept, s.actual, Overage::Debt)
                    .await
                    .unwrap();
                assert_eq!(again, settled, "a settle sent twice answers the first");
            }
            Some(s)
        }));
    }
    let mut out = Run::default();
    for t in tasks {
        if let Some(s) = t.await.unwrap() {
            out.admitted += 1;
            out.actual += s.actual;
            out.overage += s.actual.saturating_sub(s.estimate);
        }
    }
    done.store(true, Relaxed);
    out.peak = monitor
        .await
        .unwrap()
        .max(charged(&limiters[0], &mut conn, key).await);
    out
}

/// The child process: reserves three streams (300, 400, 500 tokens) on `key`, prints the
/// sum it holds, and waits to be killed without settling. Run by the fleet test only.
#[tokio::test(flavor = "current_thread")]
#[ignore = "the child process of a_killed_process_leaves_its_reservations_charged_and_the_fleet_exact"]
async fn fleet_child() {
    let spec = std::env::var("TOLLGATE_FLEET_CHILD").expect("run by the fleet test");
    let (url, key) = spec.split_once(' ').unwrap();
    let l = limiter(support::connect(url).await, "fleet");
    let mut held = 0;
    for estimate in [300, 400, 500] {
        if l.reserve(key, estimate).await.unwrap().1.is_some() {
            held += estimate;
        }
    }
    println!("reserved {held}");
    tokio::time::sleep(Duration::from_secs(120)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_process_leaves_its_reservations_charged_and_the_fleet_exact() {
    let server = Server::start();
    let seed = fastrand::u64(..);
    println!("seed {seed}");
    let mut rng = fastrand::Rng::with_seed(seed);
    // The child holds reservations before the fleet starts, and is killed while it runs.
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "fleet_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("TOLLGATE_FLEET_CHILD", format!("{} exact", server.url()))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let held: u64 = lines
        .map_while(Result::ok)
        // The harness prints "test fleet_child ... " on the same line.
        .find_map(|l| {
            l.rsplit_once("reserved ")
                .map(|(_, n)| n.trim().parse().unwrap())
        })
        .expect("the child's reservations");
    assert_eq!(held, 1_200, "the child's three reservations admitted");
    let mut limiters = Vec::new();
    for _ in 0..3 {
        limiters.push(limiter(support::connect(&server.url()).await, "fleet"));
    }
    let conn = support::connect(&server.url()).await;
    let streams = trace(&mut rng, false);
    let fleet = {
        let (limiters, conn, streams) = (limiters.clone(), conn.clone(), streams.clone());
        tokio::spawn(async move { run(&limiters, conn, "exact", &streams, false, seed).await })
    };
    tokio::time::sleep(Duration::from_millis(5)).await;
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let exact = fleet.await.unwrap();
    println!("actual <= estimate: {exact:?}, the killed process's {held} held");
    assert!(exact.admitted > 0);
    assert!(
        exact.peak <= BUDGET,
        "the charged sum passed the budget: {exact:?}"
    );
    let mut c = conn.clone();
    let at_rest = charged(&limiters[0], &mut c, "exact").await;
    assert_eq!(
        at_rest,
        exact.actual + held,
        "at rest: the actual costs and the killed estimates"
    );

    // 10% of the streams over their estimate: the overspend is at most their overages.
    let streams = trace(&mut rng, true);
    let over = run(&limiters, conn.clone(), "over", &streams, false, seed).await;
    let at_rest = charged(&limiters[0], &mut c, "over").await;
    assert_eq!(at_rest, over.actual, "every overage charged, nothing lost");
    let overspend = over.peak.saturating_sub(BUDGET);
    assert!(
        overspend <= over.overage,
        "overspend {overspend} above the overages: {over:?}"
    );
    // The same trace charged after (a check of 0, the actual charged at the end).
    let after = run(&limiters, conn.clone(), "after", &streams, true, seed).await;
    println!(
        "10% over: reserve-then-settle overspend {overspend} (overages {}); charge-after overspend {}",
        over.overage,
        after.peak.saturating_sub(BUDGET)
    );
    let stats = limiters
        .iter()
        .map(|l| l.stats())
        .fold((0, 0), |(r, s), x| (r + x.round_trips, s + x.conflicts));
    println!("round trips {}, conflicts {}", stats.0, stats.1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_stays_exact_on_a_cluster() {
    let cluster = Cluster::start();
    let client = redis::cluster::ClusterClient::new(cluster.urls()).unwrap();
    let mut limiters = Vec::new();
    for _ in 0..3 {
        let conn = client.get_async_connection().await.unwrap();
        limiters.push(limiter(conn, "fleet"));
    }
    let conn = client.get_async_connection().await.unwrap();
    let seed = fastrand::u64(..);
    println!("seed {seed}");
    let streams = trace(&mut fastrand::Rng::with_seed(seed), false);
    let exact = run(&limiters, conn.clone(), "exact", &streams, false, seed).await;
    assert!(exact.admitted > 0);
    assert!(
        exact.peak <= BUDGET,
        "the charged sum passed the budget: {exact:?}"
    );
    let at_rest = charged(&limiters[0], &mut conn.clone(), "exact").await;
    assert_eq!(at_rest, exact.actual);
}
