#!/usr/bin/env bash
# Builds the npm package `tollgate` into crates/wasm/pkg/:
#   cargo (wasm32-unknown-unknown, release) -> wasm-bindgen CLI (pinned, = the crate's
#   wasm-bindgen version) for nodejs, web and bundler -> wasm-opt -Oz (npm binaryen, from the
#   root node_modules; Debian's wasm-opt 108 miscompiles wasm-bindgen output) -> the JS API
#   (js/api.js, one copy in web/) bound by each build's index.js to its own output.
# Layout:
#   pkg/node/     nodejs target (CommonJS glue as .cjs) + ESM API      exports "node"
#   pkg/web/      web target; index.js needs `await init()`            exports "./web"
#                 auto.js initialises itself (top-level await)         exports "browser"
#   pkg/bundler/  bundler target (ESM-integration wasm import)         exports "default"
#                 (tested with node --experimental-wasm-modules); its glue and the
#                 .wasm it imports live in web/ (bundler_glue.js): one .wasm for all
#   pkg/workers/  web glue + the .wasm imported as a module, initSync  exports "workerd"
# Usage: crates/wasm/build.sh   (from anywhere; needs scripts/tools.sh's wasm_tools first)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
export PATH="${TOLLGATE_TOOLS:-$HOME/.cache/tollgate-tools}/bin:$PATH"

want=$(grep -E '^wasm-bindgen = ' "$here/Cargo.toml" | sed -E 's/.*"=?([0-9.]+)".*/\1/')
have=$(wasm-bindgen --version | awk '{print $2}')
if [ "$want" != "$have" ]; then
  echo "wasm-bindgen CLI $have does not match the crate's $want (run: source scripts/tools.sh && wasm_tools)" >&2
  exit 1
fi
wasm_opt="$root/node_modules/.bin/wasm-opt"
[ -x "$wasm_opt" ] || { echo "missing $wasm_opt (npm ci at the repo root: binaryen 132.0.0)" >&2; exit 1; }

# TOLLGATE_WASM_FEATURES: cargo features (the demo page builds with `state-json`);
# TOLLGATE_WASM_PKG: where to write the package (default crates/wasm/pkg).
features=${TOLLGATE_WASM_FEATURES:-}
cargo build --quiet --profile wasm --target wasm32-unknown-unknown -p tollgate-wasm ${features:+--features "$features"}
# Where cargo put it: CARGO_TARGET_DIR when set (the worker suite sets its own), else target/.
raw="$(realpath -m "${CARGO_TARGET_DIR:-$root/target}")/wasm32-unknown-unknown/wasm/tollgate_wasm.wasm"

pkg=$(realpath -m "${TOLLGATE_WASM_PKG:-$here/pkg}")
rm -rf "$pkg"
mkdir -p "$pkg"
# The `producers` and `target_features` custom sections are for tools, not runtimes: dropped
# (a fraction of a KB of the gzipped .wasm). -Oz rather than -O3, with --low-memory-unused:
# smaller gzipped and fewer wasm operators per `check`, and no slower in Node (PERF.md,
# "Measured reasons in the code"). --low-memory-unused lets binaryen fold constant offsets into loads
# and stores, which assumes no data at addresses 0-1023: rust-lld lays the 1 MB stack out
# first (it grows down from 1 MB to 0, the data after it), so those addresses are the stack's
# last KB, reached only by an overflow.
# Further arguments go to wasm-opt: web's .wasm gets --symbolmap, its functions' names by
# index (the .wasm is byte for byte the same with it), next to pkg/ (not shipped) for
# `scripts/counts.sh --npm --profile` (PERF.md).
opt() {
  "$wasm_opt" -Oz --low-memory-unused --enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext \
    --enable-mutable-globals --enable-reference-types --enable-multivalue \
    --strip-producers --strip-target-features "$1" -o "$1" "${@:2}"
}
for target in nodejs web bundler; do
  dir=$target
  [ "$target" = nodejs ] && dir=node
  wasm-bindgen --target "$target" --out-dir "$pkg/$dir" "$raw"
  rm -f "$pkg/$dir/.gitignore" "$pkg/$dir/package.json"
done
# The instance guard (js/instance.js): every glue calls the wasm exports through it, so
# that after a trap every call throws TollgateInstanceLost rather than running on the memory
# the trapping call left (README, "When wasm traps"). Each glue's one line that takes the
# instance's exports is rewritten, and the guard's function appended.
guard() {
  local glue=$1 from=$2 to=$3
  grep -qF "$from" "$glue" || { echo "$glue: '$from' not found (the instance guard)" >&2; exit 1; }
  sed -i "s#$from#$to#" "$glue"
  cat "$here/js/instance.js" >> "$glue"
}
guard "$pkg/node/tollgate_wasm.js" "let wasm = wasmInstance.exports;" "let wasm = __tollgate_guard(wasmInstance.exports);"
guard "$pkg/web/tollgate_wasm.js" "    wasm = instance.exports;" "    wasm = __tollgate_guard(instance.exports);"
guard "$pkg/bundler/tollgate_wasm_bg.js" "    wasm = val;" "    wasm = __tollgate_guard(val);"
# One copy of the JS API (web/ stays self-contained: www/build.sh copies it whole); each
# build binds it to its own wasm-bindgen output. api.js binds its parts (see its head):
# limiter.js (with reservations.js, its record of reservations for settle), checks.js,
# backoff.js; and the parts redis.js shares: decision.js (a decision
# from the core's numbers), throttle.js, waiting.js (the wait of `acquire`: lines of waiters,
# timers) and counts.js (the counts as plain objects around the core's metric model, also
# metrics.js').
for part in api limiter reservations checks backoff decision throttle waiting counts adaptive; do
  cp "$here/js/$part.js" "$pkg/web/$part.js"
done
api=$(node --input-type=module -e '
  const { pathToFileURL } = await import("node:url");
  const { bind } = await import(pathToFileURL(process.argv[1]));
  console.log(Object.keys(bind({})).join(", "));
' "$here/js/api.js")
raw_web="$pkg/web.raw.wasm"
cp "$pkg/web/tollgate_wasm_bg.wasm" "$raw_web"
# node reads the .wasm bytes itself and instantiates them with its own imports, so it shares
# web's copy. The bundler build keeps its own: with ESM integration the .wasm imports
# "./tollgate_wasm_bg.js" relative to its own location.
if cmp -s "$pkg/node/tollgate_wasm_bg.wasm" "$pkg/web/tollgate_wasm_bg.wasm"; then
  rm "$pkg/node/tollgate_wasm_bg.wasm" "$pkg/node/tollgate_wasm_bg.wasm.d.ts"
  sed -i 's#`${__dirname}/tollgate_wasm_bg.wasm`#`${__dirname}/../web/tollgate_wasm_bg.wasm`#' "$pkg/node/tollgate_wasm.js"
  grep -q '/../web/tollgate_wasm_bg.wasm' "$pkg/node/tollgate_wasm.js" || { echo "node glue: wasm path not found" >&2; exit 1; }
else
  echo "note: the node wasm differs from web's; shipping both" >&2
  opt "$pkg/node/tollgate_wasm_bg.wasm"
fi
opt "$pkg/web/tollgate_wasm_bg.wasm" "--symbolmap=$pkg-web.symbols"
# The bundler build's .wasm is the same file as web's (same imports, "./tollgate_wasm_bg.js"),
# so it is shipped once: the bundler glue moves next to web's copy (where the .wasm's import
# of ./tollgate_wasm_bg.js resolves to it under ESM integration; the web target has no file
# of that name) as web/bundler_glue.js, and bundler/glue.js re-exports it.
if cmp -s "$pkg/bundler/tollgate_wasm_bg.wasm" "$raw_web"; then
  mv "$pkg/bundler/tollgate_wasm_bg.js" "$pkg/web/tollgate_wasm_bg.js"
  sed '/@ts-self-types/d' "$pkg/bundler/tollgate_wasm.js" > "$pkg/web/bundler_glue.js"
  rm "$pkg/bundler/tollgate_wasm.js"
  rm "$pkg/bundler/tollgate_wasm_bg.wasm" "$pkg/bundler/tollgate_wasm_bg.wasm.d.ts"
  bundler_glue="../web/bundler_glue.js"
else
  echo "note: the bundler wasm differs from web's; shipping both" >&2
  opt "$pkg/bundler/tollgate_wasm_bg.wasm"
  bundler_glue="./tollgate_wasm.js"
fi

# node: the nodejs target is CommonJS; the package is "type": "module", so name it .cjs and
# re-export it through an ESM glue module.
mv "$pkg/node/tollgate_wasm.js" "$pkg/node/tollgate_wasm.cjs"
exports=$(node -e '
  const m = require(process.argv[1]);
  console.log(Object.keys(m).filter((k) => k !== "__esModule").join(", "));
' "$pkg/node/tollgate_wasm.cjs")
cat > "$pkg/node/glue.js" <<EOF
import glue from "./tollgate_wasm.cjs";
export const { $exports } = glue;
EOF
printf 'export * from "%s";\n' "$bundler_glue" > "$pkg/bundler/glue.js"
rm "$raw_web"
for dir in node bundler; do
  cat > "$pkg/$dir/index.js" <<EOF
// tollgate for $dir: the API over the wasm core (ready on import).
import * as glue from "./glue.js";
import { bind } from "../web/api.js";
export const { $api } = bind(glue);
EOF
done
cat > "$pkg/web/index.js" <<EOF
// tollgate for web pages: call \`await init()\` (or \`initSync({ module })\`) once before using
// the API. \`init()\` fetches tollgate_wasm_bg.wasm next to this file unless given
// \`{ module_or_path }\`.
import * as glue from "./tollgate_wasm.js";
import { bind } from "./api.js";
export { default, initSync } from "./tollgate_wasm.js";
export const { $api } = bind(glue);
EOF
cat > "$pkg/web/auto.js" <<EOF
// tollgate for browsers, initialised on import (top-level await fetches the .wasm next to
// this file): \`import { Limiter } from "tollgate"\` then works without an init call.
import init from "./tollgate_wasm.js";
await init();
export { $api } from "./index.js";
EOF
mkdir -p "$pkg/workers"
cat > "$pkg/workers/index.js" <<EOF
// tollgate for Workers/edge runtimes (workerd, wrangler): the .wasm is imported as a
// compiled module by the bundler and instantiated synchronously on import.
import wasmModule from "../web/tollgate_wasm_bg.wasm";
import { initSync } from "../web/tollgate_wasm.js";
initSync({ module: wasmModule });
export { $api } from "../web/index.js";
EOF

# The licenses, at the package root (npm pack leaves symlinks out, so copies; git-ignored).
cp "$root/LICENSE-MIT" "$root/LICENSE-APACHE" "$here/"
cp "$here/js/index.d.ts" "$here/js/web.d.ts" "$here/js/wasm.d.ts" "$here/js/express.js" "$here/js/express.d.ts" \
  "$here/js/hono.js" "$here/js/hono.d.ts" "$here/js/middleware.js" "$pkg/"

# tollgate/redis (Node only): the same crate with the `store` feature (FleetLimits), in its
# own .wasm so that the main one (browsers, Workers) does not carry it; the protocol's three
# Lua scripts of crates/redis/lua/ (shared with the Rust crate tollgate-redis) are embedded
# as strings. Only for the main package (not for TOLLGATE_WASM_FEATURES builds).
if [ -z "$features" ]; then
  cargo build --quiet --profile wasm --target wasm32-unknown-unknown -p tollgate-wasm --features store,metrics-text
  wasm-bindgen --target nodejs --out-dir "$pkg/redis" "$raw"
  guard "$pkg/redis/tollgate_wasm.js" "let wasm = wasmInstance.exports;" "let wasm = __tollgate_guard(wasmInstance.exports);"
  rm -f "$pkg/redis/.gitignore" "$pkg/redis/package.json" "$pkg/redis/"*.d.ts
  mv "$pkg/redis/tollgate_wasm.js" "$pkg/redis/tollgate_wasm.cjs"
  opt "$pkg/redis/tollgate_wasm_bg.wasm"
  node --input-type=module -e '
    const { readFileSync, writeFileSync } = await import("node:fs");
    const [lua, out] = process.argv.slice(1);
    const read = readFileSync(`${lua}/read.lua`, "utf8");
    const commit = readFileSync(`${lua}/commit.lua`, "utf8");
    const settle = readFileSync(`${lua}/settle.lua`, "utf8");
    writeFileSync(out, `// Generated by build.sh from crates/redis/lua/ (the protocol shared with tollgate-redis).
export const READ_SCRIPT = ${JSON.stringify(read)};
export const COMMIT_SCRIPT = ${JSON.stringify(commit)};
export const SETTLE_SCRIPT = ${JSON.stringify(settle)};
`);
  ' "$root/crates/redis/lua" "$pkg/redis/scripts.js"
  cp "$here/js/redis.js" "$here/js/redis.d.ts" "$pkg/"
  # tollgate/metrics (Prometheus text, the names; on this .wasm, which has `metrics-text`)
  # and tollgate/otel (OpenTelemetry instruments under those names): Node only.
  cp "$here/js/metrics.js" "$here/js/metrics.d.ts" "$here/js/otel.js" "$here/js/otel.d.ts" "$pkg/"
  # redis.js' parts (clients, deadlines, merged calls, the core's side, ...), next to the glue.
  cp "$here/js/redis/"*.js "$pkg/redis/"
  echo "built pkg/redis/: wasm $(wc -c < "$pkg/redis/tollgate_wasm_bg.wasm") bytes raw, $(gzip -9 -c "$pkg/redis/tollgate_wasm_bg.wasm" | wc -c) gzipped"
fi

# tollgate/plans (Node, browsers, Workers): the same crate with the `plans` feature
# (PlanCore: the core's PlanLimiter), in its own .wasm so that the main one stays within its
# size budget. One .wasm for the web glue (browsers: top-level await; Workers: the .wasm
# imported as a module) and the nodejs glue (.cjs), both guarded as the main ones; the class
# (js/plans.js) shares web/checks.js and web/decision.js. Only for the main package.
if [ -z "$features" ]; then
  cargo build --quiet --profile wasm --target wasm32-unknown-unknown -p tollgate-wasm --features plans
  plans="$pkg/plans"
  wasm-bindgen --target web --out-dir "$plans" "$raw"
  wasm-bindgen --target nodejs --out-dir "$pkg/plans-node" "$raw"
  cmp -s "$plans/tollgate_wasm_bg.wasm" "$pkg/plans-node/tollgate_wasm_bg.wasm" ||
    { echo "the plans .wasm differs between the web and nodejs targets" >&2; exit 1; }
  mv "$pkg/plans-node/tollgate_wasm.js" "$plans/tollgate_wasm.cjs"
  rm -rf "$pkg/plans-node" "$plans/.gitignore" "$plans/package.json" "$plans/"*.d.ts
  guard "$plans/tollgate_wasm.js" "    wasm = instance.exports;" "    wasm = __tollgate_guard(instance.exports);"
  guard "$plans/tollgate_wasm.cjs" "let wasm = wasmInstance.exports;" "let wasm = __tollgate_guard(wasmInstance.exports);"
  opt "$plans/tollgate_wasm_bg.wasm"
  cp "$here/js/plans.js" "$plans/plans.js"
  cat > "$plans/node.js" <<EOF2
// tollgate/plans for Node: the nodejs glue (CommonJS, ready on import).
import glue from "./tollgate_wasm.cjs";
import { planClass } from "./plans.js";
export const PlanLimiter = planClass(glue);
EOF2
  cat > "$plans/browser.js" <<EOF2
// tollgate/plans for browsers and bundlers, initialised on import (top-level await fetches
// the .wasm next to this file).
import init, * as glue from "./tollgate_wasm.js";
import { planClass } from "./plans.js";
await init();
export const PlanLimiter = planClass(glue);
EOF2
  cat > "$plans/workers.js" <<EOF2
// tollgate/plans for Workers/edge runtimes (workerd, wrangler): the .wasm imported as a
// compiled module by the bundler and instantiated synchronously on import.
import wasmModule from "./tollgate_wasm_bg.wasm";
import * as glue from "./tollgate_wasm.js";
import { planClass } from "./plans.js";
glue.initSync({ module: wasmModule });
export const PlanLimiter = planClass(glue);
EOF2
  cp "$here/js/plans.d.ts" "$pkg/"
  echo "built pkg/plans/: wasm $(wc -c < "$plans/tollgate_wasm_bg.wasm") bytes raw, $(gzip -9 -c "$plans/tollgate_wasm_bg.wasm" | wc -c) gzipped"
fi

wasm="$pkg/web/tollgate_wasm_bg.wasm"
echo "built pkg/: wasm $(wc -c < "$wasm") bytes raw, $(gzip -9 -c "$wasm" | wc -c) gzipped"
