#!/usr/bin/env bash
# The shared HTTP rules (crates/http: route matching, path normalisation, client keys) and
# the tower layer (crates/tower): format, clippy (tollgate-http also for wasm32, as the
# worker builds it), unit tests, and the layer in real axum servers on loopback ports
# driven by a real HTTP client, with the Redis store against real redis-server processes
# started on free ports by the tests.
set -euo pipefail
source scripts/tools.sh
apt_packages redis-server
cargo fmt -p tollgate-http -p tollgate-tower --check
cargo clippy -p tollgate-http --all-targets --locked -- -D warnings
cargo clippy -p tollgate-http --target wasm32-unknown-unknown --locked -- -D warnings
cargo clippy -p tollgate-tower --all-targets --features redis,metrics,jwt --locked -- -D warnings
# Without `metrics` (the tests build with it: see the dev-dependencies).
cargo clippy -p tollgate-tower --features redis --locked -- -D warnings
cargo clippy -p tollgate-tower --no-default-features --locked -- -D warnings
cargo test -p tollgate-http --locked
cargo test -p tollgate-tower --features redis,metrics --locked
RUSTDOCFLAGS="-D warnings" cargo doc --quiet --no-deps -p tollgate-tower -p tollgate-http --all-features --locked
