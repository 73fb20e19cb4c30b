//! The built binary: `--check-config`, a configuration reload that swaps limits while it
//! serves (and a bad file that keeps the running one; and under load, without a failed
//! call), gRPC health, graceful shutdown.

mod support;

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use support::binary::{http_get, temp_dir, Server};
use support::{code, desc, req};
use tollgate_rls::config::Config;
use tollgate_rls::service::{Service, Settings};
use tollgate_rls::store::Memory;
use tollgate_rls::{watch_config, Reload};

const GOOD: &str = "domain: app\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: day\n      requests_per_unit: 2\n";
const SWAPPED: &str = "domain: app\ndescriptors:\n  - key: b\n    rate_limit:\n      unit: day\n      requests_per_unit: 100\n";
const BAD: &str = "domain: app\ndescriptors:\n  - key: b\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 100\n";

/// Replaces a file at once (write then rename), as a deployment swaps a config.
fn put(dir: &std::path::Path, name: &str, text: &str) {
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, dir.join(name)).unwrap();
}

#[test]
fn check_config_reports_ok_or_the_file_and_path() {
    let dir = temp_dir("check");
    put(&dir, "limits.yaml", GOOD);
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate-rls"))
        .args(["--check-config", "--config-dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 domain(s)"));
    put(&dir, "limits.yaml", BAD);
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate-rls"))
        .args(["--check-config"])
        .env("RUNTIME_ROOT", &dir)
        .env("RUNTIME_APPDIRECTORY", "")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "limits.yaml: descriptors[0].rate_limit.unit: invalid rate limit unit 'fortnight'"
        ),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A change made after the running configuration was read but before the watcher's first
/// look (the server binds its ports and connects to its store in between) is reloaded: the
/// watch starts from the files as they were loaded. (It started from the files as they were
/// at its first look, and a CI run of the test below once swapped the file in that gap: the
/// server never reloaded it.)
#[tokio::test]
async fn a_change_while_the_server_starts_is_reloaded() {
    let dir = temp_dir("reload-start");
    put(&dir, "limits.yaml", GOOD);
    let reload = Reload::before_load(dir.clone(), Duration::from_millis(10));
    let config = Config::load_dir(&dir).unwrap();
    let service = Arc::new(Service::new(config, Memory::new(), Settings::default()));
    let b = req("app", vec![desc(&[("b", "probe")])]);
    let b_limited = || async {
        service.should_rate_limit(&b).await.unwrap().statuses[0]
            .current_limit
            .is_some()
    };
    assert!(!b_limited().await, "GOOD does not limit b");
    put(&dir, "limits.yaml", SWAPPED);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let watcher = tokio::spawn(watch_config(service.clone(), reload, stopped));
    // Bounded only so that a reload that never comes fails the test instead of hanging it.
    tokio::time::timeout(Duration::from_secs(30), async {
        while !b_limited().await {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the file swapped before the watcher started was never loaded");
    stop.send(true).unwrap();
    watcher.await.unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

// Multi-threaded: the dropped clients' connections close on other threads while this one
// waits for the process to exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_swaps_limits_and_a_bad_file_keeps_the_running_config() {
    let dir = temp_dir("reload");
    put(&dir, "limits.yaml", GOOD);
    let dir_arg = dir.display().to_string();
    let server = Server::start(&["--config-dir", &dir_arg, "--reload-interval-ms", "20"]);
    let mut client = server.client().await;
    let a = req("app", vec![desc(&[("a", "1")])]);
    let b = req("app", vec![desc(&[("b", "1")])]);
    let mut codes = Vec::new();
    for _ in 0..3 {
        codes.push(code(
            client
                .should_rate_limit(a.clone())
                .await
                .unwrap()
                .into_inner()
                .overall_code,
        ));
    }
    assert_eq!(codes, [Code::Ok, Code::Ok, Code::OverLimit]);

    put(&dir, "limits.yaml", SWAPPED);
    // Calls keep succeeding while the file changes; wait (bounded) for "b" to be limited.
    let mut swapped = false;
    for _ in 0..500 {
        let r = client
            .should_rate_limit(b.clone())
            .await
            .expect("no failed call");
        if r.into_inner().statuses[0].current_limit.is_some() {
            swapped = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(swapped, "the new configuration was loaded");
    let r = client
        .should_rate_limit(a.clone())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.statuses[0].current_limit, None, "the old rule is gone");

    put(&dir, "limits.yaml", BAD);
    let mut reported = false;
    for _ in 0..500 {
        let metrics = http_get(&server.http, "/metrics").await;
        if metrics.contains("tollgate_server_config_loads_total{result=\"error\"} 1") {
            reported = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(reported, "the bad file was reported");
    let r = client
        .should_rate_limit(b.clone())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        r.statuses[0]
            .current_limit
            .as_ref()
            .unwrap()
            .requests_per_unit,
        100,
        "still running"
    );

    // Health: serving until SIGTERM, then a clean exit.
    let channel = tonic::transport::Channel::from_shared(server.grpc.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    let status = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .status;
    assert_eq!(
        status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
    assert!(http_get(&server.http, "/healthcheck")
        .await
        .starts_with("HTTP/1.1 200"));
    drop((client, health));
    let exit = server.terminate();
    assert!(exit.success(), "graceful shutdown: {exit:?}");
    let _ = std::fs::remove_dir_all(dir);
}

/// Runs `openssl` in `dir` (a test's own certificates, made when it runs).
/// Callers that never stop while the file is swapped four times: every call answered (OK or
/// OVER_LIMIT, never an error), and each swap seen taking effect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_under_load_swaps_limits_without_a_failed_call() {
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
    use std::sync::Arc;
    let dir = temp_dir("reload-load");
    put(&dir, "limits.yaml", GOOD);
    let dir_arg = dir.display().to_string();
    let server = Server::start(&["--config-dir", &dir_arg, "--reload-interval-ms", "10"]);
    let stop = Arc::new(AtomicBool::new(false));
    let mut callers = Vec::new();
    for i in 0..8 {
        let mut client = server.client().await;
        let stop = stop.clone();
        callers.push(tokio::spawn(async move {
            let (mut calls, mut failed) = (0u64, Vec::new());
            let value = i.to_string();
            while !stop.load(Relaxed) {
                let key = if calls % 2 == 0 { "a" } else { "b" };
                match client
                    .should_rate_limit(req("app", vec![desc(&[(key, &value)])]))
                    .await
                {
                    Ok(r) => {
                        let c = code(r.get_ref().overall_code);
                        assert!(matches!(c, Code::Ok | Code::OverLimit), "{c:?}");
                    }
                    Err(status) => failed.push(status.to_string()),
                }
                calls += 1;
            }
            (calls, failed)
        }));
    }
    // `b` is limited only by SWAPPED: the probe tells which file the server answers by.
    let mut probe = server.client().await;
    let b = req("app", vec![desc(&[("b", "probe")])]);
    for (text, b_limited) in [
        (SWAPPED, true),
        (GOOD, false),
        (SWAPPED, true),
        (GOOD, false),
    ] {
        put(&dir, "limits.yaml", text);
        // Bounded only so that a reload that never comes fails the test instead of hanging it.
        tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                let r = probe.should_rate_limit(b.clone()).await.unwrap();
                if r.get_ref().statuses[0].current_limit.is_some() == b_limited {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the swapped file was never loaded");
    }
    stop.store(true, Relaxed);
    let mut calls = 0;
    for caller in callers {
        let (n, failed) = caller.await.unwrap();
        assert!(
            failed.is_empty(),
            "failed calls during the reloads: {failed:?}"
        );
        calls += n;
    }
    assert!(calls >= 8, "the callers called ({calls})");
    assert!(server.terminate().success());
    let _ = std::fs::remove_dir_all(dir);
}

fn openssl(dir: &std::path::Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl on PATH");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn grpc_over_tls_with_client_certificates() {
    use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};
    let dir = temp_dir("tls");
    put(&dir, "limits.yaml", GOOD);
    // A CA, the server's certificate for 127.0.0.1 and a client's, both signed by it.
    openssl(
        &dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "1",
            "-subj",
            "/CN=test ca",
        ],
    );
    // (With extensions, so that the certificates are X.509 v3, which rustls requires.)
    std::fs::write(dir.join("server.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
    for (name, ext) in [("server", "server.ext"), ("client", "client.ext")] {
        let (key, csr, pem) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.pem"),
        );
        openssl(
            &dir,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                &key,
                "-out",
                &csr,
                "-subj",
                &format!("/CN={name}"),
            ],
        );
        let sign = [
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &pem,
            "-days",
            "1",
            "-extfile",
            ext,
        ];
        openssl(&dir, &sign);
    }
    let path = |f: &str| dir.join(f).display().to_string();
    let (cert, key, ca) = (path("server.pem"), path("server.key"), path("ca.pem"));
    let d = dir.display().to_string();
    let server = Server::start(&[
        "--config-dir",
        &d,
        "--reload-interval-ms",
        "0",
        "--grpc-tls",
        "--grpc-tls-cert",
        &cert,
        "--grpc-tls-key",
        &key,
        "--grpc-tls-client-ca",
        &ca,
    ]);
    let read = |f: &str| std::fs::read(dir.join(f)).unwrap();
    let url = server.grpc.replace("http://", "https://");
    let connect = |tls: ClientTlsConfig| {
        let url = url.clone();
        async move {
            Channel::from_shared(url)
                .unwrap()
                .tls_config(tls)
                .unwrap()
                .connect()
                .await
        }
    };
    let trusted = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read("ca.pem")));
    let call = req("app", vec![desc(&[("a", "x")])]);
    // With the client's certificate: decided.
    let channel = connect(
        trusted
            .clone()
            .identity(Identity::from_pem(read("client.pem"), read("client.key"))),
    )
    .await
    .expect("a TLS connection");
    let mut client = support::RateLimitServiceClient::new(channel);
    let r = client
        .should_rate_limit(call.clone())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(code(r.overall_code), Code::Ok);
    // Without one: no answer.
    let refused = match connect(trusted).await {
        Err(_) => true,
        Ok(ch) => support::RateLimitServiceClient::new(ch)
            .should_rate_limit(call.clone())
            .await
            .is_err(),
    };
    assert!(refused, "a client without a certificate was served");
    // In plain text: no answer either.
    let plain = match Channel::from_shared(server.grpc.clone())
        .unwrap()
        .connect()
        .await
    {
        Err(_) => true,
        Ok(ch) => support::RateLimitServiceClient::new(ch)
            .should_rate_limit(call)
            .await
            .is_err(),
    };
    assert!(plain, "plain text was served");
    // A missing key file is an error naming the flag.
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate-rls"))
        .args([
            "--config-dir",
            &d,
            "--grpc-tls",
            "--grpc-tls-cert",
            &cert,
            "--grpc-tls-key",
        ])
        .arg(dir.join("nope.key"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--grpc-tls-key: cannot read"));
    let _ = std::fs::remove_dir_all(dir);
}
