//! `tollgate rls check`, the built binary against a real tollgate-rls started here on a
//! loopback port (in this process, on a clock set to the start of a day, so no window ends
//! during the test): admitted, then over the limit, each field printed; the server's
//! refusal, an unreachable server and bad descriptor syntax each a named error.

use std::sync::Arc;

use assert_cmd::Command;
use tollgate_rls::config::Config;
use tollgate_rls::service::{Service, Settings};
use tollgate_rls::store::{ManualClock, Memory};

const CONFIG: &str = "domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 2
";

const DESCRIPTOR: &str = "message_type=marketing,to_number=2061111111";

/// A running server: its gRPC address; dropping it stops the runtime and the server.
struct Server {
    addr: String,
    _runtime: tokio::runtime::Runtime,
}

fn server() -> Server {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let config = Config::from_texts([("limits.yaml", CONFIG)]).unwrap();
    let store = Memory::with_clock(ManualClock::new(19_675 * 86_400 * 1_000_000_000));
    let service = Arc::new(Service::new(config, store, Settings::default()));
    let (grpc, http) = runtime.block_on(async {
        let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        (grpc, http)
    });
    let addr = format!("http://{}", grpc.local_addr().unwrap());
    let grace = std::time::Duration::from_secs(1);
    let forever = std::future::pending::<()>();
    runtime.spawn(tollgate_rls::run(service, grpc, http, None, forever, grace));
    Server {
        addr,
        _runtime: runtime,
    }
}

/// `tollgate rls check` with `args`: exit status, stdout, stderr.
fn check(args: &[&str]) -> (i32, String, String) {
    let out = Command::cargo_bin("tollgate")
        .unwrap()
        .args(["rls", "check"])
        .args(args)
        .output()
        .unwrap();
    let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
    (
        out.status.code().unwrap(),
        text(out.stdout),
        text(out.stderr),
    )
}

#[test]
fn admitted_then_over_limit_with_limit_remaining_reset_and_headers_printed() {
    let s = server();
    let args = [
        "--server",
        &s.addr,
        "--domain",
        "messaging",
        "--descriptor",
        DESCRIPTOR,
    ];
    let mut outs = Vec::new();
    for _ in 0..3 {
        let (status, out, err) = check(&args);
        assert_eq!(status, 0, "{err}");
        println!("{out}");
        outs.push(out);
    }
    let line = format!("  {DESCRIPTOR}: OK, limit 2/day, remaining 1, resets in 86400s");
    assert!(outs[0].starts_with("OK\n"), "{}", outs[0]);
    assert!(outs[0].contains(&line), "{}", outs[0]);
    assert!(
        outs[0].contains("response headers:\n  RateLimit-Policy: "),
        "{}",
        outs[0]
    );
    assert!(
        outs[0].contains("  RateLimit: \"messaging.message_type_marketing.to_number\";r=1;t=86400"),
        "{}",
        outs[0]
    );
    assert!(outs[1].contains("remaining 0"), "{}", outs[1]);
    let over = format!("  {DESCRIPTOR}: OVER_LIMIT, limit 2/day, remaining 0, resets in 86400s");
    assert!(outs[2].starts_with("OVER_LIMIT\n"), "{}", outs[2]);
    assert!(outs[2].contains(&over), "{}", outs[2]);
}

#[test]
fn json_names_each_field_and_hits_counts_several() {
    let s = server();
    let (status, out, err) = check(&[
        "--server",
        &s.addr,
        "--domain",
        "messaging",
        "-D",
        DESCRIPTOR,
        "-D",
        "nothing=matches",
        "--hits",
        "2",
        "--json",
    ]);
    assert_eq!(status, 0, "{err}");
    println!("{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["overall_code"], "OK");
    let first = &v["statuses"][0];
    assert_eq!(first["descriptor"], DESCRIPTOR);
    assert_eq!(first["code"], "OK");
    assert_eq!(first["limit"]["requests_per_unit"], 2);
    assert_eq!(first["limit"]["unit"], "DAY");
    assert_eq!(first["remaining"], 0, "two hits of two");
    assert_eq!(first["reset_seconds"], 86400.0);
    assert_eq!(v["statuses"][1]["descriptor"], "nothing=matches");
    assert_eq!(v["statuses"][1]["limit"], serde_json::Value::Null);
    assert!(
        !v["response_headers"].as_array().unwrap().is_empty(),
        "{out}"
    );
}

#[test]
fn a_request_the_server_refuses_shows_its_code_and_message() {
    let s = server();
    // One entry over the core's bound per descriptor: the server's rule, not the CLI's.
    let entries: Vec<String> = (0..=tollgate::store::bounds::MAX_ENTRIES)
        .map(|i| format!("k{i}=v"))
        .collect();
    let (status, out, err) = check(&[
        "--server",
        &s.addr,
        "--domain",
        "messaging",
        "-D",
        &entries.join(","),
    ]);
    println!("{err}");
    assert_eq!(status, 2);
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains("refused the request: INVALID_ARGUMENT: "),
        "{err}"
    );
    assert!(err.contains("at most"), "the server's reason: {err}");
}

#[test]
fn an_unreachable_server_is_named() {
    // A port that was free a moment ago: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("http://127.0.0.1:{port}");
    let (status, _, err) = check(&["--server", &addr, "--domain", "d", "-D", "k=v"]);
    assert_eq!(status, 2);
    assert!(
        err.starts_with(&format!(
            "tollgate: cannot reach the rate limit service at {addr}: "
        )),
        "{err}"
    );
    let (status, _, err) = check(&["--server", "not a uri", "--domain", "d", "-D", "k=v"]);
    assert_eq!(status, 2);
    assert!(err.contains("--server \"not a uri\""), "{err}");
}

#[test]
fn bad_descriptor_syntax_is_named_before_any_call() {
    // No server: the descriptor is refused first.
    let (status, out, err) = check(&[
        "--server",
        "http://127.0.0.1:9",
        "--domain",
        "d",
        "-D",
        "k=v,oops",
    ]);
    assert_eq!(status, 2);
    assert!(out.is_empty());
    assert_eq!(
        err.trim(),
        "tollgate: --descriptor \"k=v,oops\": an entry without '=' (expected key=value[,key=value]...)"
    );
}
