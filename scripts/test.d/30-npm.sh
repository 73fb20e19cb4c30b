#!/usr/bin/env bash
# The npm package `tollgate` (crates/wasm): lints, the build (cargo -> wasm-bindgen ->
# wasm-opt), wasm-bindgen-test in Node and headless Chromium, the JS tests against the built
# package (API, every shared vector in tests/vectors/, fetchWithBackoff, Express and Hono
# middleware, a real page in Chromium, a Worker in Miniflare, the bundler build under
# ESM integration, tsc on the types, npm pack + install), the wasm operators of `check` and
# `allow` held to their baseline (scripts/counts.sh --npm), sizes, and a short benchmark.
set -euo pipefail
source scripts/tools.sh
wasm_tools
apt_packages chromium chromium-driver
npm_ci .
npm_ci crates/wasm
export CI=${CI:-true}

echo "--- lint"
cargo fmt -p tollgate-wasm --check
cargo clippy -q -p tollgate-wasm --all-targets --target wasm32-unknown-unknown -- -D warnings
cargo clippy -q -p tollgate-wasm --all-targets -- -D warnings
cargo clippy -q -p tollgate-wasm --all-targets --features state-json,adapt-sim --target wasm32-unknown-unknown -- -D warnings
cargo clippy -q -p tollgate-wasm --all-targets --features store,metrics-text --target wasm32-unknown-unknown -- -D warnings
cargo clippy -q -p tollgate-wasm --all-targets --features plans --target wasm32-unknown-unknown -- -D warnings
cargo clippy -q -p tollgate-wasm --features uncounted --target wasm32-unknown-unknown -- -D warnings
# The Redis and plans entries' docs (their features; 70-package checks the default build's
# workspace docs).
RUSTDOCFLAGS="-D warnings" cargo doc --quiet -p tollgate-wasm --no-deps --features store,metrics-text
RUSTDOCFLAGS="-D warnings" cargo doc --quiet -p tollgate-wasm --no-deps --features plans

echo "--- build"
crates/wasm/build.sh

echo "--- counts: check and allow, the built .wasm under wasmi's fuel (benches/counts-npm.tsv, 3% margin)"
# and the same calls without the metric tally (the feature `uncounted`, never shipped): the
# tally's cost held as a ratio (benches/counts-ratios.tsv).
TOLLGATE_WASM_FEATURES=uncounted TOLLGATE_WASM_PKG=crates/wasm/pkg-uncounted crates/wasm/build.sh
cargo fmt -p tollgate-counts-wasm --check
cargo clippy -q -p tollgate-counts-wasm -- -D warnings
scripts/counts.sh --npm

echo "--- wasm-bindgen-test: Node, then headless Chromium"
export CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner
cargo test -p tollgate-wasm --target wasm32-unknown-unknown --test web
WASM_BINDGEN_USE_BROWSER=1 cargo test -p tollgate-wasm --target wasm32-unknown-unknown --test web

echo "--- node --test (built package)"
(cd crates/wasm && node --test --test-reporter=spec test/)

echo "--- the state-json build (decide with the state as JSON, for the demo page)"
TOLLGATE_WASM_FEATURES=state-json TOLLGATE_WASM_PKG=crates/wasm/pkg-state crates/wasm/build.sh
cargo test -p tollgate-wasm --target wasm32-unknown-unknown --features state-json --test web
(cd crates/wasm && node --test --test-reporter=spec test-state/)
node -e 'import("./crates/wasm/pkg/node/index.js").then((m) => { try { m.decide("1/s", null, 0); process.exit(1) } catch (e) { console.log("default build: decide() says: " + e.message) } })'

echo "--- sizes"
wasm=crates/wasm/pkg/web/tollgate_wasm_bg.wasm
gz=$(gzip -9 -c "$wasm" | wc -c)
echo "wasm: $(wc -c < "$wasm") bytes raw, $gz bytes gzipped"
# The size goal is 40 KB gzipped (PERF.md says where the bytes are). The test
# is a budget with headroom above it, so that a change made for clarity does not fail the
# suite over a few hundred bytes: it fails at 60,000 bytes (raised from 46,000 when every
# request's work was bounded, issues 43-44, ~700 bytes; then from 47,000 for reserve and
# settle, issue 40, ~9 KB: each is the core's keyed store inlined once more; then to 60,000
# for AdaptiveLimiter, issue 42, ~2.5 KB: the core's gradient controller and its window;
# PERF.md, "The npm .wasm size budget"), and the size is
# printed above (and by the benchmark) for every change to be weighed. The same toolchain
# builds the same bytes (wasm-bindgen and binaryen are pinned, Rust is the machine's stable).
goal=40000
budget=60000
if [ "$gz" -gt "$goal" ]; then
  echo "note: the .wasm is $gz bytes gzipped, above the $goal-byte goal (budget $budget)"
fi
if [ "$gz" -ge "$budget" ]; then
  echo "the .wasm is $gz bytes gzipped, over the $budget-byte budget (PERF.md says where the bytes are)" >&2
  exit 1
fi
# tollgate/plans' own .wasm (pkg/plans/, the `plans` feature): the main .wasm's code and
# the core's PlanLimiter with its carry (~16 KB gzipped more), loaded only by apps that import
# tollgate/plans. Its budget, like the main one's, has headroom for changes made for clarity.
plans_wasm=crates/wasm/pkg/plans/tollgate_wasm_bg.wasm
plans_gz=$(gzip -9 -c "$plans_wasm" | wc -c)
plans_budget=80000
echo "plans wasm: $(wc -c < "$plans_wasm") bytes raw, $plans_gz bytes gzipped (budget $plans_budget)"
if [ "$plans_gz" -ge "$plans_budget" ]; then
  echo "the tollgate/plans .wasm is $plans_gz bytes gzipped, over its $plans_budget-byte budget" >&2
  exit 1
fi
(cd crates/wasm && npm pack --dry-run --json 2>/dev/null) | node -e '
  const [p] = JSON.parse(require("fs").readFileSync(0, "utf8"));
  console.log(`package: ${p.files.length} files, ${p.unpackedSize} bytes unpacked, ${p.size} bytes as .tgz (gzipped)`);'

echo "--- benchmark (short; numbers only, no assertions)"
(cd crates/wasm && node bench/check.js --ms 600 --only 10000 --rounds 1)
