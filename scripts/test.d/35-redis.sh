#!/usr/bin/env bash
# The Redis fleet store (crates/redis): format, clippy, unit tests, and the integration
# tests against real redis-server processes (Debian's package) that the tests start on free
# loopback ports with temporary directories and stop afterwards, a 3-node cluster included.
set -euo pipefail
source scripts/tools.sh
apt_packages redis-server faketime
cargo fmt -p tollgate-redis --check
cargo clippy -p tollgate-redis --all-targets --locked -- -D warnings
# Without the `metrics` feature (the tests build with it: see the dev-dependencies).
cargo clippy -p tollgate-redis --locked -- -D warnings
cargo test -p tollgate-redis --locked
