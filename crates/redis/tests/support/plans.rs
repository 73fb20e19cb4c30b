//! The plan tests both ways of deciding share ([`tollgate_redis::RedisPlans`]): the scripts
//! (crates/redis/tests/plans.rs, a server without the module) and the module
//! (crates/redis-module/tests/plans.rs, a server with it loaded with `TESTCLOCK`). Each test
//! takes the server's URL and whether the module decides.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tollgate::plans::{Override, PlanError, Plans};
use tollgate::{millis, MillisDecision};
use tollgate_redis::{Error, Fallback, Options, RedisPlans, Source};

type Plan = RedisPlans<redis::aio::ConnectionManager>;

async fn connect(url: &str) -> redis::aio::ConnectionManager {
    redis::Client::open(url)
        .unwrap()
        .get_connection_manager()
        .await
        .unwrap()
}

/// A plan limiter on its own connection, in `namespace`, at the test clock `clock` (ns),
/// by the module when `module` (else by the scripts).
pub async fn limiter(
    url: &str,
    namespace: &str,
    plans: Plans,
    clock: &Arc<AtomicU64>,
    module: bool,
) -> Plan {
    let options = Options::new(namespace, Fallback::Closed)
        .test_clock(Arc::clone(clock))
        .use_module(module)
        // Exactness under a storm is the compare-and-set's, not a timeout's: room to retry.
        .timeout(Duration::from_secs(10))
        .retry_for(Duration::from_secs(60));
    RedisPlans::new(connect(url).await, plans, options).unwrap()
}

/// The error code a vector expects: the core's, whichever way it came back (the module
/// replies a decision error as `ERR <code>: <sentence>`).
fn code(e: &Error) -> String {
    match e {
        Error::Plan(e) => e.code().into(),
        Error::Decide(e) => e.code().into(),
        Error::Redis(e) => e
            .detail()
            .and_then(|d| d.split(':').next())
            .unwrap_or("")
            .into(),
        other => panic!("not a vector's error: {other}"),
    }
}

/// Replays `tests/vectors/plans/*.json` (the format is in tests/plans.rs at the root).
pub async fn replay_vectors(url: &str, module: bool) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors/plans");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "only {} plan vector files", files.len());
    let clock = Arc::new(AtomicU64::new(0));
    for file in files {
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        let plans: Plans = serde_json::from_value(v["plans"].clone()).unwrap();
        let ns = format!("vectors-{}", file.file_stem().unwrap().to_string_lossy());
        let l = limiter(url, &ns, plans, &clock, module).await;
        for (i, step) in v["steps"].as_array().unwrap().iter().enumerate() {
            let key = step["key"].as_str().unwrap();
            let error = |e: &Error| json!({ "error": code(e) });
            let got = match step["op"].as_str().unwrap() {
                "check" => {
                    clock.store(millis(step["t"].as_u64().unwrap()), Relaxed);
                    let cost = step["cost"].as_u64().unwrap_or(1);
                    match l.check(key, step["plan"].as_str().unwrap(), cost).await {
                        Ok(o) => {
                            assert_eq!(o.source, Source::Redis);
                            let ms = |d| serde_json::to_value(MillisDecision::from(d)).unwrap();
                            let mut v = ms(o.decision);
                            if o.each.len() > 1 {
                                v["each"] = o.each.into_iter().map(ms).collect();
                            }
                            v
                        }
                        Err(e) => error(&e),
                    }
                }
                "set" => {
                    let what: Override = serde_json::from_value(step["override"].clone()).unwrap();
                    match l.set(key, what).await {
                        Ok(()) => Value::Null,
                        Err(e) => error(&e),
                    }
                }
                "get" => serde_json::to_value(l.get(key).await.unwrap()).unwrap(),
                "clear" => Value::Bool(l.clear(key).await.unwrap()),
                other => panic!("unknown op {other}"),
            };
            assert_eq!(
                &got,
                &step["expect"],
                "{} step {} (module: {module}): {step}",
                file.display(),
                i + 1
            );
        }
    }
}

fn free_and_pro() -> Plans {
    Plans::parse(&[("free", &["100/min"]), ("pro", &["1000/min"])]).unwrap()
}

/// Checks of cost 1 until the first denial; how many were admitted.
async fn admitted_until_denied(l: &Plan, key: &str, plan: &str) -> u64 {
    let mut n = 0;
    while l.check(key, plan, 1).await.unwrap().decision.allowed {
        n += 1;
        assert!(n <= 2_000, "never denied");
    }
    n
}

/// free (100/min) -> pro (1,000/min) -> free -> pro within a minute: the spend is kept at
/// every switch, so the key gets what the plans allow given what it spent, never a fresh
/// bucket. Token buckets: free refills one per 600 ms, pro one per 60 ms.
pub async fn free_pro_free_keeps_spend(url: &str, module: bool) {
    let clock = Arc::new(AtomicU64::new(0));
    let l = limiter(url, "switch", free_and_pro(), &clock, module).await;
    let at = |ms: u64| clock.store(millis(ms), Relaxed);
    let mut seen = Vec::new();
    for (t, plan) in [
        (0, "free"),
        (0, "pro"),
        (0, "free"),
        (30_000, "free"),
        (30_000, "pro"),
        (60_000, "pro"),
    ] {
        at(t);
        seen.push(admitted_until_denied(&l, "k", plan).await);
    }
    // Free's 100, then pro's 1,000 less the 100 spent; back on free with 1,000 spent: 900
    // owed, repaid at 100/min, so nothing for 9 minutes (not at 30 s); pro at 30 s: free
    // repaid 50 of the 1,000 (the carry was written at the denial), so 50; at 60 s pro
    // refilled 500.
    assert_eq!(seen, [100, 900, 0, 0, 50, 500], "module: {module}");
    // A key that reset at each switch would have had 100 + 1,000 + 100 + ... at once.
    assert!(
        seen.iter().sum::<u64>() <= 1_000 + 1_000,
        "pro's own bound over a minute"
    );
}

/// An override set by one client applies at another client's next check of that key, and
/// is gone when cleared; `other_module`: whether the client setting it decides by the
/// module (a mixed fleet).
pub async fn override_applies_at_the_next_check(url: &str, module: bool, other_module: bool) {
    let clock = Arc::new(AtomicU64::new(0));
    let a = limiter(url, "overrides", free_and_pro(), &clock, module).await;
    let b = limiter(url, "overrides", free_and_pro(), &clock, other_module).await;
    let first = a.check("alice", "free", 10).await.unwrap();
    assert_eq!((first.decision.limit, first.decision.remaining), (100, 90));
    assert!(!first.overridden);
    b.set("alice", Override::Plan("pro".into())).await.unwrap();
    let raised = a.check("alice", "free", 1).await.unwrap();
    assert!(raised.overridden);
    // Pro, with the 10 spent on free kept.
    assert_eq!(
        (raised.decision.limit, raised.decision.remaining),
        (1000, 989)
    );
    // Limits of alice's own, read by the other client as they were set.
    let own = Override::Limits(vec!["5/s".parse().unwrap()]);
    b.set("alice", own.clone()).await.unwrap();
    assert_eq!(a.get("alice").await.unwrap(), Some(own));
    let lowered = a.check("alice", "free", 1).await.unwrap();
    assert_eq!(lowered.decision.limit, 5);
    assert!(!lowered.decision.allowed, "11 spent, above the own 5/s");
    assert!(b.clear("alice").await.unwrap());
    assert!(!b.clear("alice").await.unwrap());
    assert_eq!(a.get("alice").await.unwrap(), None);
    let back = a.check("alice", "free", 1).await.unwrap();
    assert!(!back.overridden);
    assert_eq!(back.decision.limit, 100);
    // 11 spent carried through 5/s and back: 88 left of free's 100 after this one.
    assert_eq!(back.decision.remaining, 88);
    // A bob never touched is on his plan.
    assert_eq!(
        a.check("bob", "pro", 1).await.unwrap().decision.remaining,
        999
    );
    // An override longer than the longest plan's stack is refused before Redis.
    let three = Override::Limits(vec![
        "5/s".parse().unwrap(),
        "50/min".parse().unwrap(),
        "500/h".parse().unwrap(),
    ]);
    match b.set("alice", three).await {
        Err(Error::Plan(e)) => assert_eq!(*e, PlanError::TooManyLayers { max: 1 }),
        other => panic!("{other:?}"),
    }
}

/// The environment variable that makes the storm's child test run (`<url> <module 0|1>`).
pub const CHILD: &str = "TOLLGATE_PLAN_STORM_CHILD";

/// The child process of [`storm_across_two_processes`]: 700 concurrent checks of one pro
/// key (at a frozen test clock), started when the parent writes a line; prints how many
/// were admitted.
pub async fn storm_child() {
    let spec = std::env::var(CHILD).expect("run by the storm test");
    let (url, module) = spec.split_once(' ').unwrap();
    let clock = Arc::new(AtomicU64::new(0));
    let l = limiter(url, "storm", free_and_pro(), &clock, module == "1").await;
    println!("ready");
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let tasks: Vec<_> = (0..700)
        .map(|_| {
            let l = l.clone();
            tokio::spawn(async move { l.check("customer-7", "pro", 1).await })
        })
        .collect();
    let mut admitted = 0;
    for t in tasks {
        let o = t.await.unwrap().unwrap();
        assert_eq!(o.source, Source::Redis);
        admitted += o.decision.allowed as u64;
    }
    let stats = l.stats();
    // The way asked for decided: one command each in the module; by the scripts a read
    // each, and a commit for each admission (a denial writes nothing).
    match module == "1" {
        true => assert_eq!(stats.round_trips, 700),
        false => assert!(stats.round_trips >= 700 + admitted, "{stats:?}"),
    }
    let conflicts = stats.conflicts;
    println!("admitted {admitted} after {conflicts} conflicts");
}

/// 1,400 concurrent checks of one pro key (1,000/min) from two OS processes (700 each,
/// released together) admit exactly 1,000. `test` is the child test's name in the calling
/// test binary (which is run again, as the child).
pub fn storm_across_two_processes(url: &str, module: bool, test: &str) {
    let spawn = || {
        Command::new(std::env::current_exe().unwrap())
            .args([
                "--ignored",
                "--exact",
                test,
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, format!("{url} {}", module as u8))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut children = [spawn(), spawn()];
    let mut outputs: Vec<_> = children
        .iter_mut()
        .map(|c| BufReader::new(c.stdout.take().unwrap()).lines())
        .collect();
    // The harness prints "test <name> ... " on the same line as the child's first.
    let find = |lines: &mut std::io::Lines<BufReader<std::process::ChildStdout>>, word: &str| {
        lines
            .map_while(Result::ok)
            .find_map(|l| l.split_once(word).map(|(_, rest)| rest.trim().to_string()))
            .unwrap_or_else(|| panic!("the child never said {word:?}"))
    };
    for lines in &mut outputs {
        find(lines, "ready");
    }
    for c in &mut children {
        writeln!(c.stdin.as_mut().unwrap()).unwrap();
    }
    let said: Vec<String> = outputs
        .iter_mut()
        .map(|lines| find(lines, "admitted "))
        .collect();
    let each: Vec<u64> = said
        .iter()
        .map(|s| s.split(' ').next().unwrap().parse().unwrap())
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    println!("admitted by each process: {said:?} (module: {module})");
    assert_eq!(each.iter().sum::<u64>(), 1_000, "{each:?}");
}

/// Plans of different stack lengths: free [2/s, 100/min], pro [1,000/min]. A caller has two
/// slots; on pro, the per-minute spend of free's second slot carries to pro's only limit,
/// and the spare slot is deleted, so a key's spend is never split or left behind.
pub async fn a_shorter_stack_takes_the_nearest_window_and_drops_the_spare_slot(
    url: &str,
    module: bool,
) {
    let plans = Plans::parse(&[("free", &["2/s", "100/min"]), ("pro", &["1000/min"])]).unwrap();
    let clock = Arc::new(AtomicU64::new(0));
    let l = limiter(url, "stacks", plans, &clock, module).await;
    let conn = connect(url).await;
    let spare = l
        .layout()
        .slot_key("k", None, tollgate::store::Slot::Layer(1));
    for _ in 0..2 {
        assert!(l.check("k", "free", 1).await.unwrap().decision.allowed);
    }
    let exists = || {
        let mut cmd = redis::cmd("EXISTS");
        cmd.arg(&spare);
        let mut conn = conn.clone();
        async move { cmd.query_async::<u64>(&mut conn).await.unwrap() }
    };
    assert_eq!(exists().await, 1, "free's per-minute slot");
    // 2 spent on free's per-minute limit (the nearest window to pro's): 998 left, less 1.
    let o = l.check("k", "pro", 1).await.unwrap();
    assert_eq!((o.decision.limit, o.decision.remaining), (1000, 997));
    assert_eq!(exists().await, 0, "the spare slot deleted once carried");
    // Back on free at once: 3 spent, above 2/s: denied by the per-second limit.
    let o = l.check("k", "free", 1).await.unwrap();
    assert!(!o.decision.allowed);
    assert_eq!(o.each.len(), 2);
    assert!(!o.each[0].allowed && o.each[0].limit == 2, "{o:?}");
}
