//! What the tests share: real redis-server processes ([`redis_server`], the launcher
//! tollgate-rls's tests include too) and the shared vectors.

#![allow(dead_code)]

pub mod redis_server;

// Not every test binary uses each of them.
#[allow(unused_imports)]
pub use redis_server::{cli, Cluster, Server};

use std::path::{Path, PathBuf};

/// A connection manager to the Redis at `url` (a test's own server).
pub async fn connect(url: &str) -> redis::aio::ConnectionManager {
    redis::Client::open(url)
        .unwrap()
        .get_connection_manager()
        .await
        .unwrap()
}

/// Whether `dir` exists (for tests that check clean-up).
pub fn exists(dir: &Path) -> bool {
    dir.exists()
}

/// Every shared vector file (`tests/vectors/*.json`), in name order, with its contents.
pub fn vector_files() -> Vec<(PathBuf, serde_json::Value)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|f| {
            let v = serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
            (f, v)
        })
        .collect()
}

/// Asserts that an answer carries every field a vector step expects (newer vectors may carry
/// more), `each` included for a stack or a fair share.
pub fn assert_expected(got: &serde_json::Value, want: &serde_json::Value, place: &str) {
    for (field, value) in want.as_object().unwrap() {
        assert_eq!(got.get(field), Some(value), "{place}: {got}");
    }
}

/// One policy of every algorithm, each admitting 50 requests at one instant.
pub const FIFTY: [&str; 8] = [
    "token-bucket 50/min",
    "gcra 50/min",
    "sliding-window 50/min",
    "fixed-window 50/min",
    "sliding-log 50/min",
    "leaky-bucket 50/min",
    "leaky-queue 50/min",
    "concurrency 50",
];
