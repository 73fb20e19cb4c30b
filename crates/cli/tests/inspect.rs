//! `tollgate redis inspect` against a real redis-server (a free loopback port, a temporary
//! directory) whose keys were written by checks through tollgate's Redis module, the Rust
//! crate's Lua scripts and the npm entry (`tollgate/redis` run by Node): the printed numbers
//! are the core's, and nothing is written.

#[path = "../../redis/tests/support/mod.rs"]
mod support;

use std::path::PathBuf;

use assert_cmd::Command;

/// The module built in this target directory (scripts/test.d/20-cli.sh builds it first).
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

fn redis(url: &str, args: &[&str]) -> redis::Value {
    let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(&mut con).unwrap()
}

/// `tollgate redis inspect ARGS`: its output, after checking that it succeeded.
fn inspect(args: &[&str]) -> String {
    let out = Command::cargo_bin("tollgate")
        .unwrap()
        .args(["redis", "inspect"])
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// The two keys three checks of the fair share `token-bucket 10/h burst 20` shared,
/// `sliding-window 4/h` per tenant, for tenant acme on key `k` leave under `namespace`, as
/// the CLI prints them: the scripts client and the npm entry write the same layout.
fn assert_fair_share_after_three_checks(url: &str, namespace: &str) {
    let text = inspect(&[
        url,
        namespace,
        "-p",
        "token-bucket 10/h burst 20",
        "--tenant-policy",
        "sliding-window 4/h",
    ]);
    assert!(
        text.contains(&format!(
            "tollgate:{{{namespace}:k}}:0\n  slot: limit 0 of the stack"
        )),
        "{text}"
    );
    assert!(text.contains("remaining: 17 of 20"), "{text}");
    assert!(
        text.contains(&format!(
            "tollgate:{{{namespace}:k}}:t:acme\n  slot: tenant window of \"acme\""
        )),
        "{text}"
    );
    assert!(text.contains("remaining: 1 of 4"), "{text}");
    assert!(
        text.ends_with(&format!("2 keys matching *{{{namespace}[:}}]*\n")),
        "{text}"
    );
}

#[test]
fn inspect_prints_remaining_reset_tenant_windows_concurrency_and_ttl() {
    let so = module();
    let server = support::Server::with_args(&["--save", "", "--loadmodule", so.to_str().unwrap()]);
    let url = server.url();
    // A stack on one key: 3 checks of 10/h and 100/h.
    for _ in 0..3 {
        redis(
            &url,
            &[
                "TOLLGATE.CHECK",
                "tollgate:{api:1.2.3.4}",
                "STACK",
                "2",
                "fixed-window 10/h",
                "fixed-window 100/h",
            ],
        );
    }
    // A fair share: the group's bucket and tenant acme's window.
    for _ in 0..2 {
        redis(
            &url,
            &[
                "TOLLGATE.CHECK",
                "tollgate:{api:group}",
                "fixed-window 50/h",
                "TENANT",
                "acme",
                "fixed-window 5/h",
            ],
        );
    }
    // Two of a concurrency limit's slots held.
    for _ in 0..2 {
        redis(
            &url,
            &["TOLLGATE.CHECK", "tollgate:{api:conc}", "concurrency 4"],
        );
    }
    let dbsize = redis(&url, &["DBSIZE"]);

    let text = inspect(&[
        &url,
        "tollgate:{api:1.2.3.4}*",
        "-p",
        "fixed-window 10/h",
        "-p",
        "fixed-window 100/h",
    ]);
    assert!(
        text.contains("tollgate:{api:1.2.3.4}:0\n  slot: limit 0 of the stack"),
        "{text}"
    );
    assert!(text.contains("remaining: 7 of 10"), "{text}");
    assert!(text.contains("remaining: 97 of 100"), "{text}");
    assert!(text.contains("resets in: "), "{text}");
    assert!(text.contains("ttl: "), "{text}");
    assert!(
        text.ends_with("2 keys matching tollgate:{api:1.2.3.4}*\n"),
        "{text}"
    );

    // The namespace: every key under it, with the tenant window and the concurrency slots.
    let text = inspect(&[&url, "api", "--tenant-policy", "fixed-window 5/h"]);
    assert!(
        text.contains("tollgate:{api:group}:t:acme\n  slot: tenant window of \"acme\""),
        "{text}"
    );
    assert!(text.contains("remaining: 3 of 5"), "{text}");
    assert!(text.contains("concurrency: 2 in use"), "{text}");
    assert!(
        text.contains("(give its policy for remaining and reset)"),
        "{text}"
    );
    assert!(text.ends_with("5 keys matching *{api[:}]*\n"), "{text}");

    // Read-only: nothing was added, and the states are as the checks left them.
    assert_eq!(redis(&url, &["DBSIZE"]), dbsize);
    let r = redis(
        &url,
        &[
            "TOLLGATE.PEEK",
            "tollgate:{api:1.2.3.4}",
            "STACK",
            "2",
            "fixed-window 10/h",
            "fixed-window 100/h",
        ],
    );
    let redis::Value::Array(fields) = r else {
        panic!("{r:?}")
    };
    assert_eq!(fields[2], redis::Value::Int(7));

    // A server that is not there: a clear error, not a panic.
    let out = Command::cargo_bin("tollgate")
        .unwrap()
        .args(["redis", "inspect", "redis://127.0.0.1:1/", "api"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("redis redis://127.0.0.1:1/"));
}

/// The scripts' layout (tollgate-redis without the module, compare-and-set through Lua):
/// the same key names and stored values, read the same.
#[tokio::test(flavor = "current_thread")]
async fn keys_written_by_the_scripts_client_read_the_same() {
    use tollgate::fair_share::FairShare;
    use tollgate::store::Limits;
    use tollgate_redis::{Fallback, Options, RedisLimiter};

    let server = support::Server::with_args(&["--save", ""]);
    let url = server.url();
    let conn = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection_manager()
        .await
        .unwrap();
    let share = FairShare::new(
        "token-bucket 10/h burst 20".parse().unwrap(),
        "sliding-window 4/h".parse().unwrap(),
    )
    .unwrap();
    let options = Options::new("scripts", Fallback::Closed).use_module(false);
    let limiter = RedisLimiter::new(conn, Limits::fair_share(share), options).unwrap();
    for _ in 0..3 {
        let outcome = limiter.check_tenant("k", Some("acme"), 1).await.unwrap();
        assert!(outcome.decision.allowed);
    }

    assert_fair_share_after_three_checks(&url, "scripts");
}

/// The npm package's crate (crates/wasm), with its build (`pkg/`, from crates/wasm/build.sh)
/// and its `node_modules` (ioredis): scripts/test.d/20-cli.sh prepares both first.
fn npm_package() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../wasm");
    for need in ["pkg/redis.js", "node_modules/ioredis"] {
        assert!(
            dir.join(need).exists(),
            "{} (crates/wasm/build.sh; npm ci in crates/wasm)",
            dir.join(need).display()
        );
    }
    dir
}

/// The npm entry's layout (`tollgate/redis` in Node, on ioredis, scripts without the module):
/// the keys its checks wrote are the ones the CLI lists, read as the core reads them.
#[test]
fn keys_written_by_the_npm_entry_read_the_same() {
    let package = npm_package();
    let server = support::Server::with_args(&["--save", ""]);
    let url = server.url();
    // Three checks of a fair share for tenant acme, run by Node from the package's own
    // directory (so `tollgate/redis` resolves to this build, as the package's tests import it).
    let script = r#"
        import Redis from "ioredis";
        import { RedisLimiter } from "tollgate/redis";
        const client = new Redis(process.argv[1]);
        const limiter = new RedisLimiter(
          client,
          { fairShare: { shared: "token-bucket 10/h burst 20", tenant: "sliding-window 4/h" } },
          { namespace: "npm", fallback: "closed", useModule: false },
        );
        for (let i = 0; i < 3; i++) {
          const d = await limiter.check("k", { tenant: "acme" });
          if (!d.allowed || d.source !== "redis") throw new Error(JSON.stringify(d));
        }
        client.disconnect();
    "#;
    let node = std::process::Command::new("node")
        .current_dir(&package)
        .args(["--input-type=module", "-e", script, &url])
        .output()
        .expect("node on PATH");
    assert!(
        node.status.success(),
        "node: {}",
        String::from_utf8_lossy(&node.stderr)
    );

    assert_fair_share_after_three_checks(&url, "npm");
}

/// tollgate-rls's layout, `<prefix>{<domain>}<domain>_<key>_<value>_` (its Redis store,
/// crates/server/src/redis_store.rs), written by what the server sends when Redis has the
/// module: `TOLLGATE.REQUEST <prefix>{<domain>} <n> (<counter key> <policy> <cost> <shadow>)*n`,
/// decided and stored inside Redis by the core (the server's scripts path stores the same
/// bytes under the same names). The server itself is not started here: building it (tonic,
/// envoy-types) is the server suite's cost, and its command is this one.
#[test]
fn keys_in_the_servers_layout_read_with_their_policies() {
    let so = module();
    let server = support::Server::with_args(&["--save", "", "--loadmodule", so.to_str().unwrap()]);
    let url = server.url();
    // Three requests with two descriptors: one per address, one per API key.
    for _ in 0..3 {
        redis(
            &url,
            &[
                "TOLLGATE.REQUEST",
                "tollgate:{api}",
                "2",
                "api_remote_address_1.2.3.4_",
                "fixed-window 10/h",
                "1",
                "0",
                "api_api_key_k1_",
                "token-bucket 100/min burst 50",
                "1",
                "0",
            ],
        );
    }
    let dbsize = redis(&url, &["DBSIZE"]);

    // The domain as a namespace finds both; `-p` is the fixed window's.
    let text = inspect(&[&url, "api", "-p", "fixed-window 10/h"]);
    assert!(
        text.contains(
            "tollgate:{api}api_remote_address_1.2.3.4_\n  slot: tollgate-rls counter \
             api_remote_address_1.2.3.4_ of domain api"
        ),
        "{text}"
    );
    assert!(
        text.contains("state: fixed-window: window number "),
        "{text}"
    );
    assert!(text.contains(", 3 admitted in it"), "{text}");
    assert!(
        text.contains("window: 3600.000 s fixed, aligned to the clock"),
        "{text}"
    );
    assert!(text.contains("remaining: 7 of 10"), "{text}");
    assert!(text.contains("resets in: "), "{text}");
    assert!(text.ends_with("2 keys matching *{api[:}]*\n"), "{text}");

    // A glob for the token bucket's counter, with its policy.
    let text = inspect(&[
        &url,
        "tollgate:{api}api_api_key_*",
        "-p",
        "token-bucket 100/min burst 50",
    ]);
    assert!(
        text.contains("slot: tollgate-rls counter api_api_key_k1_ of domain api"),
        "{text}"
    );
    assert!(
        text.contains("state: token-bucket: last refilled "),
        "{text}"
    );
    assert!(
        text.contains("window: refills 100 per 60.000 s (one every 0.600 s), holds 50"),
        "{text}"
    );
    assert!(text.contains("remaining: 47 of 50"), "{text}");
    assert!(
        text.ends_with("1 keys matching tollgate:{api}api_api_key_*\n"),
        "{text}"
    );
    // Never the states' Rust debug form.
    assert!(!text.contains("State {"), "{text}");

    assert_eq!(redis(&url, &["DBSIZE"]), dbsize, "read-only");
}
