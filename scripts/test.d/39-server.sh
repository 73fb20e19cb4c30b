#!/usr/bin/env bash
# tollgate-server (crates/server): Envoy's rate limit service on tollgate. Format, clippy,
# and its tests: envoyproxy/ratelimit's README examples and tollgate's semantics asked by a
# real tonic client of the Envoy protos against the server on free loopback ports, the
# config validation errors, the built binary itself (--check-config, reload, shutdown),
# and the Redis fleet store: two binaries sharing one real redis-server started by the tests
# on a free port, and redis-server killed under them.
set -euo pipefail
source scripts/tools.sh
apt_packages redis-server
cargo fmt -p tollgate-server --check
cargo clippy -p tollgate-server --all-targets --locked -- -D warnings
cargo test -p tollgate-server --locked
RUSTDOCFLAGS="-D warnings" cargo doc --quiet --no-deps -p tollgate-server --locked
