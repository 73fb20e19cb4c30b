#!/usr/bin/env bash
# The edge config document (crates/config, tollgate-config: the worker reads it, the CLI
# checks it): format, lints, tests. Then the CLI (crates/cli, binary `tollgate`): format,
# lints, unit tests, integration tests that run the built binary on the traces and logs in
# crates/cli/tests/data and `redis inspect` against a real redis-server on keys written by the
# module, the Rust crate's scripts and the npm entry (Node, ioredis), and the burst table of
# crates/cli/examples/burst80.csv printed for the log. Needs cargo, and the npm package's build
# (crates/wasm/build.sh, its pinned wasm tools) for the npm-written keys; dependencies are
# pinned by the workspace Cargo.lock and crates/wasm/package-lock.json.
set -euo pipefail
source scripts/tools.sh
cargo fmt -p tollgate-config --check
cargo clippy -p tollgate-config --all-targets --locked -- -D warnings
cargo test -p tollgate-config --locked
cargo fmt -p tollgate-cli --check
cargo clippy -p tollgate-cli --all-targets --locked -- -D warnings
# `tollgate redis inspect` is tested on keys the Redis module wrote in a real redis-server.
apt_packages redis-server libclang-dev
cargo build -p tollgate-redis-module --locked
# `redis inspect` on keys the npm entry wrote (tests/inspect.rs runs `tollgate/redis` in Node):
# the package's build and its ioredis.
wasm_tools
npm_ci .
npm_ci crates/wasm
crates/wasm/build.sh
# The README test (tests/readme.rs) runs the README's `rls check` against tollgate-rls's
# binary: built here, so the test's own `cargo build` of it only finds it up to date.
cargo build -p tollgate-rls --bin tollgate-rls --locked
cargo test -p tollgate-cli --locked
cargo run -q -p tollgate-cli --locked -- compare --limit 10/s --trace crates/cli/examples/burst80.csv
