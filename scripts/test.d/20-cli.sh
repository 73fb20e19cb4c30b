#!/usr/bin/env bash
# The edge config document (crates/config, tollgate-config: the worker reads it, the CLI
# checks it): format, lints, tests. Then the CLI (crates/cli, binary `tollgate`): format,
# lints, unit tests, integration tests that run the built binary on the traces and logs in
# crates/cli/tests/data and `redis inspect` against a real redis-server with the module, and the burst table of crates/cli/examples/burst80.csv printed for
# the log. Needs only cargo; dependencies are pinned by the workspace Cargo.lock.
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
cargo test -p tollgate-cli --locked
cargo run -q -p tollgate-cli --locked -- compare --limit 10/s --trace crates/cli/examples/burst80.csv
