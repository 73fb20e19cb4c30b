#!/usr/bin/env bash
# tollgate-rls (crates/server): Envoy's rate limit service on tollgate. Format, clippy,
# and its tests: envoyproxy/ratelimit's README examples and tollgate's semantics asked by a
# real tonic client of the Envoy protos against the server on free loopback ports, the
# config validation errors, the built binary itself (--check-config, reload, shutdown),
# and the Redis fleet store: two binaries sharing one real redis-server started by the tests
# on a free port, and redis-server killed under them; each on the scripts and on tollgate's
# Redis module (built here, loaded into redis-server; bindgen needs libclang).
set -euo pipefail
source scripts/tools.sh
# prometheus: its promtool lints the /metrics exposition in tests/scrape.rs.
apt_packages redis-server libclang-dev prometheus
# Every crate of the workspace's graph, downloaded here rather than by a test: the README
# test reads envoy-types' descriptors through `cargo metadata --offline`, which needs
# manifests no build of the server downloads.
cargo fetch --locked
cargo fmt -p tollgate-rls --check
cargo clippy -p tollgate-rls --all-targets --locked -- -D warnings
# The tests load target/debug/libtollgate_redis_module.so: build it first.
cargo build -p tollgate-redis-module --locked
cargo test -p tollgate-rls --locked
RUSTDOCFLAGS="-D warnings" cargo doc --quiet --no-deps -p tollgate-rls --locked
