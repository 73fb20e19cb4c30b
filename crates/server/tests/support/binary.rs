//! The built `tollgate-server` binary as a child process on free loopback ports (port 0,
//! read back from its first stdout line), a config directory of its own, and real
//! redis-server processes on free ports with temporary directories.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;

/// A fresh temporary directory.
pub fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "tollgate-server-{tag}-{}-{}",
        std::process::id(),
        fastrand::u64(..)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A running `tollgate-server`.
pub struct Server {
    child: Child,
    pub grpc: String,
    pub http: String,
}

impl Server {
    /// Starts the binary with `args` (and `--grpc-port 0 --http-port 0` on loopback).
    pub fn start(args: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate-server"))
            .args(["--grpc-host", "127.0.0.1", "--grpc-port", "0"])
            .args(["--http-host", "127.0.0.1", "--http-port", "0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the binary starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = |name: &str| {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(name))
                .unwrap_or_else(|| panic!("no {name} in {line:?}"))
                .to_string()
        };
        Server {
            grpc: format!("http://{}", addr("grpc=")),
            http: addr("http="),
            child,
        }
    }

    /// A gRPC client of this server.
    pub async fn client(&self) -> RateLimitServiceClient<tonic::transport::Channel> {
        RateLimitServiceClient::connect(self.grpc.clone())
            .await
            .unwrap()
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        self.child.wait().unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A running redis-server (no persistence), stopped when dropped.
pub struct Redis {
    pub port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl Redis {
    pub fn start() -> Redis {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = temp_dir("redis");
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server is installed");
        // Owned at once, so that it is killed (on drop) whatever happens next.
        let redis = Redis {
            port,
            dir,
            child: Some(child),
        };
        // Ready when it answers PING (bounded: 10 s).
        for _ in 0..200 {
            if let Ok(mut c) = redis::Client::open(redis.url()).and_then(|c| c.get_connection()) {
                if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                    return redis;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("redis-server did not start on port {port}");
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Kills the server (SIGKILL) and waits for it to be gone.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
