//! The module loaded into a real redis-server (started here on a free loopback port with a
//! temporary directory): exactness, the shared vectors, replication of the writes, AOF,
//! sharing a limit with compare-and-set clients, and hostile arguments.

#[path = "../../redis/tests/support/mod.rs"]
mod support;

use std::path::PathBuf;
use std::time::Duration;

use redis::aio::ConnectionManager;
use support::{Server, FIFTY};
use tollgate::fair_share::FairShare;
use tollgate::store::Limits;
use tollgate_redis::{Fallback, Options, RedisLimiter};

/// The module built next to this test (target/<profile>/libtollgate_redis_module.so).
fn module() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let so = dir.join("libtollgate_redis_module.so");
    assert!(
        so.exists(),
        "{} (cargo build -p tollgate-redis-module)",
        so.display()
    );
    so
}

/// A server with the module loaded with `module_args`, and more `server_args`.
fn with_module_args(module_args: &[&str], server_args: &[&str]) -> Server {
    let so = module();
    let mut args = vec!["--save", ""];
    args.extend_from_slice(server_args);
    args.extend_from_slice(&["--loadmodule", so.to_str().unwrap()]);
    args.extend_from_slice(module_args);
    Server::with_args(&args)
}

fn with_module(module_args: &[&str]) -> Server {
    with_module_args(module_args, &[])
}

async fn connect(server: &Server) -> ConnectionManager {
    redis::Client::open(server.url())
        .unwrap()
        .get_connection_manager()
        .await
        .unwrap()
}

/// `TOLLGATE.CHECK <base> <policy...> <options...>` -> (allowed, remaining).
async fn check(
    conn: &mut ConnectionManager,
    base: &str,
    args: &[&str],
) -> redis::RedisResult<(bool, u64)> {
    let mut cmd = redis::cmd("TOLLGATE.CHECK");
    cmd.arg(base).arg(args);
    let reply: Vec<redis::Value> = cmd.query_async(conn).await?;
    let int = |v: &redis::Value| match v {
        redis::Value::Int(i) => *i,
        other => panic!("{other:?}"),
    };
    Ok((int(&reply[0]) == 1, int(&reply[2]) as u64))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_checks_admit_exactly_the_limit_for_every_algorithm() {
    let server = with_module(&[]);
    let conn = connect(&server).await;
    for policy in FIFTY {
        for round in 0..5 {
            let base = format!("tollgate:{{m:{policy}/{round}}}");
            let tasks: Vec<_> = (0..400)
                .map(|_| {
                    let (mut c, base) = (conn.clone(), base.clone());
                    tokio::spawn(async move { check(&mut c, &base, &[policy]).await.unwrap().0 })
                })
                .collect();
            let mut admitted = 0;
            for t in tasks {
                admitted += t.await.unwrap() as u32;
            }
            assert_eq!(admitted, 50, "{policy} round {round}");
        }
    }
}

/// A decision's six integers from the module's reply, as a vector file spells them.
fn six(r: &[redis::Value]) -> serde_json::Value {
    let n = |k: usize| match &r[k] {
        redis::Value::Int(i) => *i as u64,
        other => panic!("{other:?}"),
    };
    serde_json::json!({"allowed": n(0) == 1, "limit": n(1), "remaining": n(2),
        "resetAfter": n(3), "retryAfter": n(4), "delay": n(5)})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_shared_vector_gives_the_cores_decisions() {
    let server = with_module(&["TESTCLOCK"]);
    let mut conn = connect(&server).await;
    let mut replayed = 0;
    for (file, v) in support::vector_files() {
        let Some(spec) = v.get("limiter") else {
            continue;
        };
        // The limiter as command arguments.
        let (limiter, fair): (Vec<String>, Option<String>) = if let Some(p) = spec.get("policy") {
            (vec![p.as_str().unwrap().into()], None)
        } else if let Some(s) = spec.get("stack") {
            let ps: Vec<String> = s
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p.as_str().unwrap().into())
                .collect();
            let mut args = vec!["STACK".to_string(), ps.len().to_string()];
            args.extend(ps);
            (args, None)
        } else {
            let f = &spec["fairShare"];
            (
                vec![f["shared"].as_str().unwrap().into()],
                Some(f["tenant"].as_str().unwrap().into()),
            )
        };
        let ns = file.file_stem().unwrap().to_string_lossy().to_string();
        for (i, step) in v["steps"].as_array().unwrap().iter().enumerate() {
            let op = step["op"].as_str().unwrap_or("check");
            let base = format!("tollgate:{{{ns}:{}}}", step["key"].as_str().unwrap());
            let t = step["t"].as_u64().unwrap_or(0).to_string();
            let cost = step["cost"].as_u64().unwrap_or(1).to_string();
            let mut args = limiter.clone();
            if let (Some(tp), Some(tenant)) = (&fair, step.get("tenant").and_then(|t| t.as_str())) {
                if op == "check" {
                    args.extend(["TENANT".into(), tenant.into(), tp.clone()]);
                }
            }
            let command = match op {
                "check" => "TOLLGATE.CHECK",
                "peek" => "TOLLGATE.PEEK",
                "release" => "TOLLGATE.RELEASE",
                "reset" => {
                    let n = if limiter[0] == "STACK" {
                        limiter[1].clone()
                    } else {
                        "1".into()
                    };
                    let _: i64 = redis::cmd("TOLLGATE.RESET")
                        .arg(&base)
                        .arg("LIMITS")
                        .arg(n)
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    continue;
                }
                other => panic!("{other}"),
            };
            let mut cmd = redis::cmd(command);
            cmd.arg(&base).arg(&args);
            if op != "peek" {
                cmd.arg("COST").arg(&cost);
            }
            cmd.arg("NOW").arg(&t);
            let got: redis::RedisResult<redis::Value> = cmd.query_async(&mut conn).await;
            let got = match got {
                Ok(redis::Value::Array(r)) => {
                    let mut got = six(&r);
                    // A stack or a fair share: each limit's six follow, in order.
                    if spec.get("policy").is_none() {
                        let Some(redis::Value::Array(each)) = r.get(6) else {
                            panic!(
                                "{}: step {i}: no per-limit answers in {r:?}",
                                file.display()
                            );
                        };
                        got["each"] = each
                            .iter()
                            .map(|e| match e {
                                redis::Value::Array(e) => six(e),
                                other => panic!("{other:?}"),
                            })
                            .collect();
                    }
                    Some(got)
                }
                Ok(_) => None, // a release: OK
                Err(e) => {
                    let text = e.to_string();
                    let code = ["cost-exceeds-capacity", "not-concurrency"]
                        .into_iter()
                        .find(|c| text.contains(c) || text.contains(&c.replace('-', " ")))
                        .or_else(|| {
                            text.contains("exceeds the policy's capacity")
                                .then_some("cost-exceeds-capacity")
                        })
                        .unwrap_or_else(|| panic!("{}: step {i}: {text}", file.display()));
                    Some(serde_json::json!({ "error": code }))
                }
            };
            if let Some(want) = step.get("expect") {
                let got = got.unwrap_or_else(|| panic!("{}: step {i}: no answer", file.display()));
                support::assert_expected(
                    &got,
                    want,
                    &format!("{}: step {i} ({step})", file.display()),
                );
            }
            replayed += 1;
        }
    }
    assert!(replayed > 500, "{replayed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_holds_byte_identical_state() {
    let primary = with_module(&[]);
    // The replica has no module: the writes arrive as the SET/DEL commands they are.
    let replica = Server::with_args(&[
        "--save",
        "",
        "--replicaof",
        "127.0.0.1",
        &primary.port.to_string(),
    ]);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !replica
        .cli(&["INFO", "replication"])
        .contains("master_link_status:up")
    {
        assert!(std::time::Instant::now() < deadline, "replica never linked");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut conn = connect(&primary).await;
    for i in 0..60 {
        let base = format!("tollgate:{{rep:k{}}}", i % 7);
        check(
            &mut conn,
            &base,
            &["STACK", "2", "gcra 5/s", "sliding-log 9/min"],
        )
        .await
        .unwrap();
    }
    let _: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(5000)
        .query_async(&mut conn)
        .await
        .unwrap();
    let keys = primary.cli(&["--scan", "--pattern", "tollgate:{rep:*"]);
    let keys: Vec<&str> = keys.lines().collect();
    assert_eq!(keys.len(), 14, "{keys:?}");
    let mut replica_conn = connect(&replica).await;
    for k in keys {
        let a: Vec<u8> = redis::cmd("GET")
            .arg(k)
            .query_async(&mut conn)
            .await
            .unwrap();
        let b: Vec<u8> = redis::cmd("GET")
            .arg(k)
            .query_async(&mut replica_conn)
            .await
            .unwrap();
        assert_eq!(a, b, "{k}");
        let ttl: i64 = redis::cmd("PTTL")
            .arg(k)
            .query_async(&mut replica_conn)
            .await
            .unwrap();
        assert!(ttl > 0, "{k} has a TTL on the replica too");
        // The same expiry: the writes carry it as an absolute time (PXAT).
        let at = |conn: &mut ConnectionManager| {
            let mut conn = conn.clone();
            let k = k.to_string();
            async move {
                let at: i64 = redis::cmd("PEXPIRETIME")
                    .arg(k)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                at
            }
        };
        assert_eq!(at(&mut conn).await, at(&mut replica_conn).await, "{k}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_aof_keeps_every_acknowledged_charge_and_keys_expire() {
    let mut server = with_module_args(
        &["GRACE", "50"],
        &["--appendonly", "yes", "--appendfsync", "always"],
    );
    let mut conn = connect(&server).await;
    let mut acknowledged = 0;
    for _ in 0..23 {
        acknowledged += check(&mut conn, "tollgate:{aof:k}", &["fixed-window 100/hour"])
            .await
            .unwrap()
            .0 as u64;
    }
    server.restart();
    let mut conn = connect(&server).await;
    let (_, remaining) = check(
        &mut conn,
        "tollgate:{aof:k}",
        &["fixed-window 100/hour", "COST", "0"],
    )
    .await
    .unwrap();
    assert_eq!(remaining, 100 - acknowledged);
    // Keys expire when fresh, as the fleet store's do.
    check(&mut conn, "tollgate:{aof:short}", &["gcra 10/100ms"])
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while server.cli(&["EXISTS", "tollgate:{aof:short}:0"]) != "0" {
        assert!(std::time::Instant::now() < deadline, "never expired");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn module_clients_and_compare_and_set_clients_share_one_limit() {
    let server = with_module(&[]);
    let conn = connect(&server).await;
    let fair = || {
        Limits::fair_share(
            FairShare::new(
                "fixed-window 50/min".parse().unwrap(),
                "fixed-window 30/min".parse().unwrap(),
            )
            .unwrap(),
        )
    };
    // A compare-and-set client that does not use the module.
    let cas = RedisLimiter::new(
        connect(&server).await,
        fair(),
        Options::new("mix", Fallback::Closed)
            .timeout(Duration::from_secs(5))
            .use_module(false),
    )
    .unwrap();
    let mut tasks = Vec::new();
    for i in 0..200 {
        let tenant = if i % 2 == 0 { "a" } else { "b" };
        if i % 3 == 0 {
            let cas = cas.clone();
            tasks.push(tokio::spawn(async move {
                cas.check_tenant("k", Some(tenant), 1)
                    .await
                    .unwrap()
                    .decision
                    .allowed
            }));
        } else {
            let mut c = conn.clone();
            tasks.push(tokio::spawn(async move {
                check(
                    &mut c,
                    "tollgate:{mix:k}",
                    &[
                        "fixed-window 50/min",
                        "TENANT",
                        tenant,
                        "fixed-window 30/min",
                    ],
                )
                .await
                .unwrap()
                .0
            }));
        }
    }
    let mut admitted = 0;
    for t in tasks {
        admitted += t.await.unwrap() as u32;
    }
    assert_eq!(admitted, 50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_arguments_get_error_replies_and_the_server_stays_up() {
    let server = with_module(&[]);
    let mut conn = connect(&server).await;
    let huge = "9".repeat(400);
    let many: Vec<String> = (0..10_000).map(|i| format!("a{i}")).collect();
    let cases: Vec<Vec<String>> = vec![
        vec![],
        vec!["".into()],
        vec!["".into(), "10/s".into()],
        vec!["k".into(), huge.clone()],
        vec!["k".into(), "10/s".into(), "COST".into(), huge.clone()],
        vec!["k".into(), "10/s".into(), "COST".into(), "-5".into()],
        vec!["k".into(), "10/s".into(), "COST".into(), "11".into()],
        vec!["k".into(), "STACK".into(), huge.clone()],
        vec!["k".into(), "STACK".into(), "2".into(), "10/s".into()],
        vec!["k".into(), "10/s".into(), "NOW".into(), "5".into()],
        vec!["k".into(), format!("{}/s", "1".repeat(30))],
        [vec!["k".to_string(), "10/s".to_string()], many.clone()].concat(),
        [
            vec!["k".to_string(), "STACK".to_string(), "16".to_string()],
            many,
        ]
        .concat(),
    ];
    for args in cases {
        let r: redis::RedisResult<redis::Value> = redis::cmd("TOLLGATE.CHECK")
            .arg(&args)
            .query_async(&mut conn)
            .await;
        assert!(
            r.is_err(),
            "{:?} -> {r:?}",
            args.iter()
                .map(|a| &a[..a.len().min(20)])
                .collect::<Vec<_>>()
        );
    }
    // Binary and empty keys are keys like any other.
    let binary = b"tollgate:{bin:\x00\xff}".to_vec();
    let r: Vec<redis::Value> = redis::cmd("TOLLGATE.CHECK")
        .arg(&binary)
        .arg("10/s")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(r[0], redis::Value::Int(1));
    // Corrupt stored bytes: an error naming the key, the value left as it was.
    server.cli(&["SET", "tollgate:{bad:k}:0", "12345678zz"]);
    let e = check(&mut conn, "tollgate:{bad:k}", &["10/s"])
        .await
        .unwrap_err();
    assert!(e.to_string().contains("tollgate:{bad:k}:0"), "{e}");
    assert_eq!(server.cli(&["GET", "tollgate:{bad:k}:0"]), "12345678zz");
    // A key of another type: an error naming it, for a check and a reset alike.
    server.cli(&["RPUSH", "tollgate:{list:k}:0", "x"]);
    let e = check(&mut conn, "tollgate:{list:k}", &["10/s"])
        .await
        .unwrap_err();
    assert!(e.to_string().contains("tollgate:{list:k}:0"), "{e}");
    let r: redis::RedisResult<i64> = redis::cmd("TOLLGATE.RESET")
        .arg("tollgate:{list:k}")
        .query_async(&mut conn)
        .await;
    assert!(r.is_err(), "{r:?}");
    assert_eq!(server.cli(&["LLEN", "tollgate:{list:k}:0"]), "1");
    assert_eq!(server.cli(&["PING"]), "PONG");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_fleet_store_detects_the_module_and_decides_in_one_round_trip() {
    let server = with_module(&[]);
    let limits = || {
        Limits::stack(&[
            "gcra 50/min".parse().unwrap(),
            "sliding-log 60/min".parse().unwrap(),
        ])
        .unwrap()
    };
    let l = RedisLimiter::new(
        connect(&server).await,
        limits(),
        Options::new("det", Fallback::Closed),
    )
    .unwrap();
    for _ in 0..3 {
        assert!(l.check("k", 1).await.unwrap().decision.allowed);
    }
    assert_eq!(
        l.stats().round_trips,
        3,
        "one round trip a decision, no read-then-commit"
    );
    // Four clients through the module, 400 at once: exactly the stack's 50 (3 already spent).
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(
            RedisLimiter::new(
                connect(&server).await,
                limits(),
                Options::new("det", Fallback::Closed).timeout(Duration::from_secs(5)),
            )
            .unwrap(),
        );
    }
    let tasks: Vec<_> = (0..400)
        .map(|i| {
            let c = clients[i % 4].clone();
            tokio::spawn(async move { c.check("k", 1).await.unwrap().decision.allowed })
        })
        .collect();
    let mut admitted = 0;
    for t in tasks {
        admitted += t.await.unwrap() as u32;
    }
    assert_eq!(admitted, 47);
}

/// The `tollgate_` fields of `INFO tollgate`, by name (without the prefix).
async fn info(conn: &mut ConnectionManager) -> std::collections::HashMap<String, u64> {
    let text: String = redis::cmd("INFO")
        .arg("tollgate")
        .query_async(conn)
        .await
        .unwrap();
    assert!(text.contains("# tollgate"), "{text}");
    text.lines()
        .filter_map(|l| l.strip_prefix("tollgate_")?.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().parse().unwrap()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_tollgate_counts_commands_by_outcome_errors_by_kind_and_the_policy_cache() {
    let server = with_module(&[]);
    let mut conn = connect(&server).await;
    let zero = info(&mut conn).await;
    assert!(zero.values().all(|&v| v == 0), "{zero:?}");
    assert_eq!(zero.len(), 16, "{zero:?}");

    // 7 checks of 5/h on one key: 5 admitted (the last leaves 0 of 5: near the limit), 2 denied.
    for _ in 0..7 {
        check(&mut conn, "tollgate:{info}", &["fixed-window 5/h"])
            .await
            .unwrap();
    }
    let _: Vec<redis::Value> = redis::cmd("TOLLGATE.PEEK")
        .arg("tollgate:{info}")
        .arg("fixed-window 5/h")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: i64 = redis::cmd("TOLLGATE.RESET")
        .arg("tollgate:{info}")
        .query_async(&mut conn)
        .await
        .unwrap();
    // Errors, one of each kind a client can cause.
    let fail = |c: &mut redis::Cmd| c.clone();
    let mut errors = vec![
        fail(redis::cmd("TOLLGATE.CHECK").arg("k")), // arity
        fail(redis::cmd("TOLLGATE.CHECK").arg("k").arg("no such policy")), // argument
        fail(
            redis::cmd("TOLLGATE.CHECK")
                .arg("tollgate:{list}")
                .arg("10/s"),
        ), // wrongtype
        fail(
            redis::cmd("TOLLGATE.CHECK")
                .arg("tollgate:{junk}")
                .arg("10/s"),
        ), // state
        fail(
            redis::cmd("TOLLGATE.CHECK")
                .arg("k")
                .arg("10/s")
                .arg("COST")
                .arg("11"),
        ), // decision
    ];
    // A single policy's state lives in `<base>:0` (store::keys).
    let _: () = redis::cmd("RPUSH")
        .arg("tollgate:{list}:0")
        .arg("x")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("tollgate:{junk}:0")
        .arg("not a state")
        .query_async(&mut conn)
        .await
        .unwrap();
    for c in &mut errors {
        let r: redis::RedisResult<redis::Value> = c.query_async(&mut conn).await;
        assert!(r.is_err(), "{c:?} answered {r:?}");
    }

    let n = info(&mut conn).await;
    let expect = [
        ("check_admitted", 5),
        ("check_denied", 2),
        ("check_near_limit", 1),
        // A peek decides a cost of 0, which fits even an exhausted window.
        ("peek_admitted", 1),
        ("peek_denied", 0),
        ("release_ok", 0),
        ("reset_ok", 1),
        ("errors_arity", 1),
        ("errors_argument", 1),
        ("errors_wrongtype", 1),
        ("errors_state", 1),
        ("errors_decision", 1),
        ("errors_write", 0),
    ];
    for (field, value) in expect {
        assert_eq!(n[field], value, "{field}: {n:?}");
    }
    // Policies parsed: "fixed-window 5/h" once (then 7 hits: 6 more checks and the peek),
    // "no such policy" (an error, not kept) and "10/s" once (then 2 hits).
    assert_eq!(n["policy_cache_misses"], 3, "{n:?}");
    assert_eq!(n["policy_cache_hits"], 9, "{n:?}");
    assert_eq!(n["policy_cache_size"], 2, "{n:?}");
}

/// `TOLLGATE.REQUEST <base> <n> (<suffix> <policy> <cost> <shadow>)*n [options]` -> each
/// limit's (allowed, remaining), by `tollgate_redis::module_decision`.
async fn request(
    conn: &mut ConnectionManager,
    base: &str,
    limits: &[(&str, &str, u64, bool)],
    options: &[&str],
) -> redis::RedisResult<Vec<(bool, u64)>> {
    let mut cmd = redis::cmd("TOLLGATE.REQUEST");
    cmd.arg(base).arg(limits.len());
    for (suffix, policy, cost, shadow) in limits {
        cmd.arg(suffix).arg(policy).arg(cost).arg(u8::from(*shadow));
    }
    cmd.arg(options);
    let reply: redis::Value = cmd.query_async(conn).await?;
    let d = tollgate_redis::module_decision(&reply).expect("a decision reply");
    Ok(d.each.iter().map(|d| (d.allowed, d.remaining)).collect())
}

/// Limits on separate keys (an Envoy request's descriptors, as tollgate-rls sends them):
/// all or nothing across the keys, a shadow limit that never stops the others, `EACH`
/// charging every limit with room, `BLOCKED` charging none; 400 concurrent requests of two
/// keys against a limit of 50 admit exactly 50; a base without a hash tag is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_request_of_separate_keys_is_decided_together() {
    let server = with_module(&[]);
    let mut conn = connect(&server).await;
    let (two, five) = ("token-bucket 2/350d", "token-bucket 5/350d");
    let base = "t:{api}";
    let both = [("a", two, 1, false), ("b", five, 1, false)];
    for left in [(1, 4), (0, 3)] {
        let r = request(&mut conn, base, &both, &[]).await.unwrap();
        assert_eq!(r, [(true, left.0), (true, left.1)]);
    }
    // `a` is empty: nothing charged on `b` either.
    let r = request(&mut conn, base, &both, &[]).await.unwrap();
    assert_eq!((r[0].0, r[1]), (false, (true, 3)));
    // In shadow, `a`'s denial lets `b` be charged.
    let shadowed = [("a", two, 1, true), ("b", five, 1, false)];
    let r = request(&mut conn, base, &shadowed, &[]).await.unwrap();
    assert_eq!((r[0].0, r[1]), (false, (true, 2)));
    // EACH charges `b` though `a` denies; BLOCKED charges nothing.
    let r = request(&mut conn, base, &both, &["EACH"]).await.unwrap();
    assert_eq!((r[0].0, r[1]), (false, (true, 1)));
    let r = request(&mut conn, base, &[("b", five, 1, false)], &["BLOCKED"])
        .await
        .unwrap();
    assert_eq!(r, [(true, 1)]);
    // The keys are the base and the suffix, in the fleet's bytes.
    assert_eq!(server.cli(&["EXISTS", "t:{api}a", "t:{api}b"]), "2");
    // Exactness under concurrency, two keys a request.
    let tasks: Vec<_> = (0..400)
        .map(|i| {
            let mut c = conn.clone();
            tokio::spawn(async move {
                let user = format!("u{}", i % 7);
                let limits = [
                    (user.as_str(), "50/350d", 1, false),
                    ("all", "50/350d", 1, false),
                ];
                request(&mut c, "t:{x}", &limits, &[]).await.unwrap()
            })
        })
        .collect();
    let mut admitted = 0;
    for t in tasks {
        admitted += t.await.unwrap().iter().all(|(ok, _)| *ok) as u32;
    }
    assert_eq!(admitted, 50);
    let refused = request(&mut conn, "t:api", &both, &[]).await.unwrap_err();
    assert!(refused.to_string().contains("hash tag"), "{refused}");
    let refused = request(&mut conn, base, &both, &["LATER"])
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("unknown option"), "{refused}");
}
