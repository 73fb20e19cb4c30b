//! A benchmark (not a test): the memory store's bound against a flood of distinct keys. Starts
//! the built `tollgate-rls` binary on loopback with its default bound (64 MiB, or
//! `TOLLGATE_MEMORY_MAX_BYTES` if set), one rule (`unit: hour, requests_per_unit: 100`), and
//! sends 1,000,000 distinct descriptor values over `POST /json`, 64 descriptors a request,
//! from 8 connections; then a few requests whose value is 1 MB. Prints the process's
//! resident memory (`/proc/<pid>/status`, VmRSS) before, during and after, next to what the
//! store accounts (`/metrics`), and counts every request that failed (no answer, or an
//! answer other than 200 or 429).
//!
//! ```sh
//! cargo build --release -p tollgate-rls --bins --examples
//! target/release/examples/memory
//! ```
//!
//! The binary is `target/<profile>/tollgate-rls` next to this example's directory, or
//! `TOLLGATE_SERVER_BIN`. Bounded: at most 15,625 flood requests and `BENCH_MAX_SECS`
//! (default 600) seconds of flooding.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader as AsyncBufReader};
use tokio::net::TcpStream;

const CONFIG: &str = "domain: flood\ndescriptors:\n  - key: client\n    rate_limit:\n      unit: hour\n      requests_per_unit: 100\n";
const KEYS: u64 = 1_000_000;
const PER_REQUEST: u64 = 64;
const CONNECTIONS: usize = 8;
const SAMPLES: u64 = 10;

/// One keep-alive HTTP/1.1 connection.
struct Conn {
    stream: AsyncBufReader<TcpStream>,
}

impl Conn {
    async fn open(addr: &str) -> std::io::Result<Conn> {
        Ok(Conn {
            stream: AsyncBufReader::new(TcpStream::connect(addr).await?),
        })
    }

    /// Sends one request; the status and body.
    async fn send(
        &mut self,
        method: &str,
        path: &str,
        body: &str,
    ) -> std::io::Result<(u16, String)> {
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        let s = self.stream.get_mut();
        s.write_all(head.as_bytes()).await?;
        s.write_all(body.as_bytes()).await?;
        let mut line = String::new();
        self.stream.read_line(&mut line).await?;
        let status: u16 = line
            .get(9..12)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("status line {line:?}")))?;
        let mut length = 0usize;
        loop {
            line.clear();
            if self.stream.read_line(&mut line).await? == 0 {
                return Err(std::io::Error::other("closed in the headers"));
            }
            if line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0; length];
        self.stream.read_exact(&mut body).await?;
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    }
}

/// The server's resident memory in KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn body(from: u64, count: u64, value: impl Fn(u64) -> String) -> String {
    let descriptors: Vec<String> = (from..from + count)
        .map(|n| {
            format!(
                r#"{{"entries":[{{"key":"client","value":"{}"}}]}}"#,
                value(n)
            )
        })
        .collect();
    format!(
        r#"{{"domain":"flood","descriptors":[{}]}}"#,
        descriptors.join(",")
    )
}

/// The store's series from `/metrics`: keys, accounted bytes, evictions.
async fn store_metrics(addr: &str) -> Option<(u64, u64, u64)> {
    let (_, text) = Conn::open(addr)
        .await
        .ok()?
        .send("GET", "/metrics", "")
        .await
        .ok()?;
    let get = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
    };
    Some((
        get("tollgate_store_keys")?,
        get("tollgate_store_bytes")?,
        get("tollgate_store_evictions_total")?,
    ))
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start() -> (Server, String) {
    let bin = std::env::var("TOLLGATE_SERVER_BIN").unwrap_or_else(|_| {
        let exe = std::env::current_exe().unwrap();
        let dir = exe.parent().unwrap().parent().unwrap();
        dir.join("tollgate-rls").display().to_string()
    });
    let dir = std::env::temp_dir().join(format!("tollgate-memory-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("flood.yaml"), CONFIG).unwrap();
    let mut child = Command::new(&bin)
        .args(["--grpc-host", "127.0.0.1", "--grpc-port", "0"])
        .args(["--http-host", "127.0.0.1", "--http-port", "0"])
        .args(["--reload-interval-ms", "0", "--config-dir"])
        .arg(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{bin}: {e} (cargo build --release -p tollgate-rls)"));
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let http = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("http="))
        .unwrap_or_else(|| panic!("no http= in {line:?}"))
        .to_string();
    (Server(child), http)
}

fn row(label: &str, pid: u32, base: u64, m: Option<(u64, u64, u64)>) {
    let rss = rss_kib(pid);
    let (keys, bytes, evictions) = m.unwrap_or_default();
    let per_key = match keys {
        0 => "-".to_string(),
        k => format!("{}", (rss.saturating_sub(base) * 1024) / k),
    };
    println!(
        "| {label} | {:.1} | {keys} | {:.1} | {evictions} | {per_key} |",
        rss as f64 / 1024.0,
        bytes as f64 / (1024.0 * 1024.0)
    );
}

#[tokio::main]
async fn main() {
    let max_secs: u64 = std::env::var("BENCH_MAX_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(600);
    let (server, addr) = start();
    let pid = server.0.id();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let base = rss_kib(pid);
    println!("| after | RSS MiB | keys held | accounted MiB | evictions | RSS over start / key held (bytes) |");
    println!("|---|---|---|---|---|---|");
    row("start", pid, base, store_metrics(&addr).await);
    let failed = Arc::new(AtomicU64::new(0));
    let answered = Arc::new(AtomicU64::new(0));
    let next = Arc::new(AtomicU64::new(0));
    let batches = KEYS.div_ceil(PER_REQUEST);
    let started = Instant::now();
    let deadline = started + Duration::from_secs(max_secs);
    let mut peak = base;
    for sample in 1..=SAMPLES {
        let until = batches * sample / SAMPLES;
        let workers: Vec<_> = (0..CONNECTIONS)
            .map(|_| {
                let (addr, next, failed, answered) =
                    (addr.clone(), next.clone(), failed.clone(), answered.clone());
                tokio::spawn(async move {
                    let mut conn = None;
                    loop {
                        let b = next.fetch_add(1, Ordering::Relaxed);
                        if b >= until || Instant::now() > deadline {
                            next.fetch_min(until, Ordering::Relaxed);
                            return;
                        }
                        let from = b * PER_REQUEST;
                        let text = body(from, PER_REQUEST.min(KEYS - from), |n| format!("v{n}"));
                        if conn.is_none() {
                            conn = Conn::open(&addr).await.ok();
                        }
                        let ok = match conn.as_mut() {
                            Some(c) => {
                                matches!(c.send("POST", "/json", &text).await, Ok((200 | 429, _)))
                            }
                            None => false,
                        };
                        if ok {
                            answered.fetch_add(1, Ordering::Relaxed);
                        } else {
                            failed.fetch_add(1, Ordering::Relaxed);
                            conn = None;
                        }
                    }
                })
            })
            .collect();
        for w in workers {
            w.await.unwrap();
        }
        peak = peak.max(rss_kib(pid));
        let sent = next.load(Ordering::Relaxed).min(batches) * PER_REQUEST;
        row(
            &format!("{} keys", sent.min(KEYS)),
            pid,
            base,
            store_metrics(&addr).await,
        );
        if Instant::now() > deadline {
            println!("stopped at the {max_secs} s bound");
            break;
        }
    }
    let flood_secs = started.elapsed().as_secs_f64();
    // Requests with one 1 MB value each: what became of them.
    let mut big = Vec::new();
    let huge = "x".repeat(1 << 20);
    for i in 0..4 {
        let text = body(0, 1, |_| format!("{huge}{i}"));
        let outcome = match Conn::open(&addr).await {
            Ok(mut c) => match c.send("POST", "/json", &text).await {
                Ok((status, reply)) => {
                    format!("{status} {}", reply.chars().take(80).collect::<String>())
                }
                Err(e) => format!("no answer: {e}"),
            },
            Err(e) => format!("no connection: {e}"),
        };
        big.push(outcome);
    }
    peak = peak.max(rss_kib(pid));
    row("four 1 MB values", pid, base, store_metrics(&addr).await);
    tokio::time::sleep(Duration::from_secs(1)).await;
    row("1 s later", pid, base, store_metrics(&addr).await);
    println!();
    println!(
        "flood: {} requests answered, {} failed, in {flood_secs:.1} s; peak RSS {:.1} MiB",
        answered.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
        peak as f64 / 1024.0
    );
    for (i, b) in big.iter().enumerate() {
        println!("1 MB value #{i}: {b}");
    }
    let health = match Conn::open(&addr).await {
        Ok(mut c) => c.send("GET", "/healthcheck", "").await.map(|(s, _)| s).ok(),
        Err(_) => None,
    };
    println!("healthcheck at the end: {health:?}");
    drop(server);
}
