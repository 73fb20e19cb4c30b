//! Real redis-server processes for the tests: each on a free loopback port with its own
//! temporary directory, stopped (and the directory removed) when dropped; and a local Redis
//! Cluster of three primaries. No mock Redis.
//!
//! One launcher for every crate that tests against Redis: tollgate-redis' tests use it as
//! `support::redis_server`, tollgate-rls's include this file by its path.

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `redis-server`.
pub struct Server {
    pub port: u16,
    pub dir: PathBuf,
    child: Option<Child>,
    args: Vec<String>,
    owns_dir: bool,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "tollgate-redis-{tag}-{}-{}",
        std::process::id(),
        fastrand::u64(..)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

impl Server {
    /// A server with no persistence.
    pub fn start() -> Server {
        Server::with_args(&["--save", "", "--appendonly", "no"])
    }

    /// A server with extra configuration arguments.
    pub fn with_args(args: &[&str]) -> Server {
        let mut s = Server {
            port: free_port(),
            dir: temp_dir("server"),
            child: None,
            args: args.iter().map(|a| a.to_string()).collect(),
            owns_dir: true,
        };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(&self.dir)
            .args(["--daemonize", "no", "--protected-mode", "yes"])
            .arg("--logfile")
            .arg(self.dir.join("redis.log"))
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.dir.join("stderr.log")).unwrap())
            .spawn()
            .expect("redis-server on PATH (apt-get install redis-server)");
        self.child = Some(child);
        if !wait_ready(self.port) {
            let log = std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
                + &std::fs::read_to_string(self.dir.join("stderr.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(8).collect();
            panic!("redis-server on port {} did not start: {tail:?}", self.port);
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Stops the server at once (SIGKILL: nothing flushed that was not already).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port and directory.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Runs `redis-cli` against this server and returns its output.
    pub fn cli(&self, args: &[&str]) -> String {
        cli(self.port, args)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        if self.owns_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

pub fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn wait_ready(port: u16) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if cli(port, &["PING"]) == "PONG" {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// A local Redis Cluster of three primaries.
pub struct Cluster {
    pub nodes: Vec<Server>,
}

impl Cluster {
    pub fn start() -> Cluster {
        Cluster::with_args(&[])
    }

    /// A cluster whose nodes get `extra` configuration arguments too (e.g. a module).
    pub fn with_args(extra: &[&str]) -> Cluster {
        let nodes: Vec<Server> = (0..3)
            .map(|_| {
                let mut args = vec![
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ];
                args.extend_from_slice(extra);
                Server::with_args(&args)
            })
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli --cluster create");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ok = nodes
                .iter()
                .all(|n| n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok"));
            if ok {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the cluster did not become ready"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Cluster { nodes }
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Server::url).collect()
    }
}
