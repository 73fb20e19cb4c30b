#!/usr/bin/env bash
# Builds the edge worker (crates/worker/build/worker/shim.mjs) with the pinned local tools:
# worker-build would otherwise download wasm-bindgen and wasm-opt, which this machine (and CI)
# cannot. Called by wrangler's [build] command and by scripts/run and the test suite.
#   crates/worker/build.sh           release build, wasm-opt'ed (npm binaryen 132)
#   TOLLGATE_WORKER_NO_OPT=1 ...      skip wasm-opt (faster, bigger)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/scripts/tools.sh"
export WASM_BINDGEN_BIN="$TOLLGATE_TOOLS/bin/wasm-bindgen"
export WASM_OPT_BIN="$root/node_modules/.bin/wasm-opt"
export ESBUILD_BIN="$root/node_modules/.bin/esbuild"
export CARGO_TARGET_DIR="${TOLLGATE_WORKER_TARGET:-$root/crates/worker/target}"
for tool in "$WASM_BINDGEN_BIN" "$TOLLGATE_TOOLS/bin/worker-build" "$WASM_OPT_BIN" "$ESBUILD_BIN"; do
  [ -x "$tool" ] || { echo "build.sh: missing $tool (run scripts/test worker, or npm ci and source scripts/tools.sh; worker_tools)" >&2; exit 1; }
done
cd "$root/crates/worker"
opt=()
[ "${TOLLGATE_WORKER_NO_OPT:-}" = 1 ] && opt=(--no-opt)
exec "$TOLLGATE_TOOLS/bin/worker-build" --release "${opt[@]}"
