#!/usr/bin/env bash
# The npm entry `tollgate/redis` (crates/wasm/js/redis.js over the wasm crate's `store`
# feature) against real redis-server processes (Debian's package), which the tests start on
# free loopback ports with temporary directories and stop afterwards: the shared vectors
# through Redis with ioredis and node-redis, exactness under concurrency, and 2 Node + 2 Rust
# client processes (crates/redis/examples/storm.rs) sharing one limit, and reserve-then-settle
# across 2 Node and 2 Rust processes (crates/redis/examples/settler.rs), plans (RedisPlans) shared
# by a Node and a Rust client (crates/redis/examples/planner.rs); the same entry on a
# server with tollgate's module loaded (crates/redis-module; bindgen needs libclang), acquire,
# and a local 3-node Redis Cluster (ioredis Cluster, node-redis cluster client).
set -euo pipefail
source scripts/tools.sh
wasm_tools
apt_packages redis-server libclang-dev
npm_ci .
npm_ci crates/wasm

echo "--- lint"
cargo fmt -p tollgate-wasm -p tollgate-redis --check
cargo clippy -q -p tollgate-wasm --all-targets --features store,metrics-text --target wasm32-unknown-unknown -- -D warnings
cargo clippy -q -p tollgate-redis --examples -- -D warnings

echo "--- build (pkg/ with pkg/redis/, the Rust clients of the cross-runtime tests, the module)"
crates/wasm/build.sh
cargo build -q -p tollgate-redis --example storm --example settler --example planner
cargo build -q -p tollgate-redis-module --locked

echo "--- node --test test-redis/"
(cd crates/wasm && node --test --test-reporter=spec test-redis/)
