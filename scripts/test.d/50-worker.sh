#!/usr/bin/env bash
# The edge worker (crates/worker): format, clippy (host and wasm32), host unit tests, a
# release build with the pinned tools, then end-to-end tests under the real local runtime:
# Miniflare (workerd) for the limiter, the vectors and restarts, paths, concurrency leases,
# leaky queues, timeouts, API keys, plans, verified JWTs (a JWKS on a loopback port) and
# two isolates sharing one object namespace (against a real loopback origin where the origin
# matters), and `wrangler dev` via scripts/run for the served page, the single build and
# the config check.
set -euo pipefail
source scripts/tools.sh
worker_tools
npm_ci .
export CARGO_TARGET_DIR="$PWD/crates/worker/target"
cargo fmt -p tollgate-worker --check
cargo clippy -p tollgate-worker --all-targets -- -D warnings
cargo clippy -p tollgate-worker --target wasm32-unknown-unknown -- -D warnings
cargo test -p tollgate-worker
bash crates/worker/build.sh
node --test --test-concurrency=1 \
  crates/worker/test/edge.test.mjs \
  crates/worker/test/vectors.test.mjs \
  crates/worker/test/resilience.test.mjs \
  crates/worker/test/paths.test.mjs \
  crates/worker/test/concurrency.test.mjs \
  crates/worker/test/queue.test.mjs \
  crates/worker/test/timeout.test.mjs \
  crates/worker/test/settle.test.mjs \
  crates/worker/test/apikeys.test.mjs \
  crates/worker/test/plans.test.mjs \
  crates/worker/test/jwt.test.mjs \
  crates/worker/test/isolates.test.mjs \
  crates/worker/test/metrics.test.mjs \
  crates/worker/test/wrangler.test.mjs
