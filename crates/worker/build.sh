#!/usr/bin/env bash
# Builds the edge worker (crates/worker/build/worker/shim.mjs) with the pinned local tools:
# worker-build would otherwise download wasm-bindgen and wasm-opt, which this machine (and CI)
# cannot. Called by wrangler's [build] command and by scripts/run and the test suite.
#   crates/worker/build.sh           release build, wasm-opt'ed (npm binaryen 132)
#   TOLLGATE_WORKER_NO_OPT=1 ...      skip wasm-opt (faster, bigger)
# First it checks the config the worker will serve (TOLLGATE_CONFIG when set in the
# environment, else the bundled config/tollgate.toml) with `tollgate check-config`, the
# worker's own validation, and stops naming the field when it is invalid.
# A build whose inputs (sources, config, lock file, options) are unchanged since the last
# successful one is skipped: wrangler's [build] step after scripts/run's own build, or a
# watcher restart that changed nothing, costs a hash instead of a rebuild.
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
cd "$root"
# The config check (the CLI and the worker share tollgate-config: one implementation).
check=(cargo run -q --locked -p tollgate-cli -- check-config)
if [ -n "${TOLLGATE_CONFIG:-}" ]; then
  printf '%s' "$TOLLGATE_CONFIG" | "${check[@]}" - >/dev/null || { echo "build.sh: TOLLGATE_CONFIG is invalid (above); not building" >&2; exit 1; }
else
  "${check[@]}" crates/worker/config/tollgate.toml >/dev/null || { echo "build.sh: crates/worker/config/tollgate.toml is invalid (above); not building" >&2; exit 1; }
fi
# Everything the build reads, hashed; the stamp is written after a successful build.
stamp=crates/worker/build/.inputs
dirs=(src crates/http/src crates/http/Cargo.toml crates/config/src crates/config/Cargo.toml crates/worker/src crates/worker/config crates/worker/js crates/worker/Cargo.toml Cargo.toml Cargo.lock)
inputs=$( { echo "opt=${TOLLGATE_WORKER_NO_OPT:-}"; git ls-files -s -- "${dirs[@]}";
  git ls-files -mo --exclude-standard -- "${dirs[@]}" | sort | xargs -r sha256sum 2>/dev/null || true; } | sha256sum | cut -d' ' -f1) || inputs=""
if [ -n "$inputs" ] && [ -f crates/worker/build/worker/shim.mjs ] && [ "$(cat "$stamp" 2>/dev/null)" = "$inputs" ]; then
  echo "build.sh: worker build is up to date" >&2
  exit 0
fi
cd crates/worker
opt=()
[ "${TOLLGATE_WORKER_NO_OPT:-}" = 1 ] && opt=(--no-opt)
"$TOLLGATE_TOOLS/bin/worker-build" --release "${opt[@]}"
echo "$inputs" > "$root/$stamp"
