//! The built `tollgate-rls` binary as a child process on free loopback ports (port 0,
//! read back from its first stdout line), with a config directory of its own. (Real
//! redis-server processes come from [`super::redis_server`].)

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;

/// A fresh temporary directory.
pub fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "tollgate-rls-{tag}-{}-{}",
        std::process::id(),
        fastrand::u64(..)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A running `tollgate-rls`.
pub struct Server {
    child: Child,
    pub grpc: String,
    pub http: String,
}

impl Server {
    /// Starts the binary with `args` (and `--grpc-port 0 --http-port 0` on loopback).
    pub fn start(args: &[&str]) -> Server {
        Server::start_with(args, Stdio::inherit())
    }

    /// As [`Server::start`], its log (standard error) written to `stderr`.
    pub fn start_with(args: &[&str], stderr: impl Into<Stdio>) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate-rls"))
            .args(["--grpc-host", "127.0.0.1", "--grpc-port", "0"])
            .args(["--http-host", "127.0.0.1", "--http-port", "0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(stderr)
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

/// The whole HTTP/1.1 answer (status line, headers and body) to `GET path` at `addr`, on a
/// connection of its own that the server closes.
pub async fn http_get(addr: &str, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

/// The body of an HTTP/1.1 answer read by [`http_get`].
pub fn body(answer: &str) -> &str {
    answer.split_once("\r\n\r\n").expect("an HTTP answer").1
}
