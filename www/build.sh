#!/usr/bin/env bash
# Prepares the demo page's generated files (git-ignored):
#   www/pkg/   the npm package's web build with the `state-json` feature (the page draws the
#              core's state) and the `adapt-sim` feature (the adaptive concurrency
#              experiment's `Simulation`, the CLI's simulator) (crates/wasm/pkg-page/web:
#              a directory of its own, as the npm suite builds pkg-state/ with `state-json`
#              alone), rebuilt by crates/wasm/build.sh when missing or older than its sources
#   www/data/  the burst experiment's trace (tests/data/burst80.csv)
# Run before serving www/ (scripts/run and wrangler dev serve it as static assets).
# Needs the pinned tools when it has to build: source scripts/tools.sh; wasm_tools; npm_ci .
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
web=crates/wasm/pkg-page/web
stale=no
if [ ! -f "$web/tollgate_wasm_bg.wasm" ] || [ ! -f "$web/index.js" ]; then
  stale=yes
elif [ -n "$(find src crates/wasm/src crates/wasm/js crates/wasm/Cargo.toml crates/wasm/build.sh Cargo.toml \
    crates/adapt-sim/src crates/adapt-sim/Cargo.toml www/build.sh \
    -type f -newer "$web/tollgate_wasm_bg.wasm" -print -quit)" ]; then
  stale=yes
fi
if [ $stale = yes ]; then
  echo "www/build.sh: building the npm package with state-json and adapt-sim (crates/wasm/build.sh)" >&2
  TOLLGATE_WASM_FEATURES=state-json,adapt-sim TOLLGATE_WASM_PKG=crates/wasm/pkg-page bash crates/wasm/build.sh
fi
rm -rf www/pkg www/data
mkdir -p www/pkg www/data
cp "$web"/*.js "$web"/*.wasm www/pkg/
cp tests/data/burst80.csv www/data/
echo "www/build.sh: www/pkg ($(wc -c < www/pkg/tollgate_wasm_bg.wasm) bytes of wasm) and www/data ready" >&2
