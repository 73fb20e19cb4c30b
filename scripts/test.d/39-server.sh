#!/usr/bin/env bash
# tollgate-server (crates/server): Envoy's rate limit service on tollgate. Format, clippy,
# and its tests: envoyproxy/ratelimit's README examples and tollgate's semantics asked by a
# real tonic client of the Envoy protos against the server on free loopback ports, the
# config validation errors, and the built binary itself (--check-config, reload, shutdown).
set -euo pipefail
source scripts/tools.sh
cargo fmt -p tollgate-server --check
cargo clippy -p tollgate-server --all-targets --locked -- -D warnings
cargo test -p tollgate-server --locked
