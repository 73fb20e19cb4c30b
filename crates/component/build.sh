#!/usr/bin/env bash
# Builds the tollgate component (import-free) into crates/component/build/:
#   tollgate.core.wasm        the guest, a core module built for wasm32-unknown-unknown
#   tollgate.component.wasm   that module optimised (wasm-opt -O3) and wrapped as a component
#   js/                       the component transpiled to an ES module by jco (for Node)
# Needs: rustup target wasm32-unknown-unknown, and `npm ci` in crates/component/host-test
# (pinned jco 1.10.2 and binaryen 132, whose wasm-opt is used).
# Run from anywhere; CARGO_TARGET_DIR defaults to target/component (own folder, so the
# component's build never waits on or overwrites another crate's).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin="$here/host-test/node_modules/.bin"
out="$here/build"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target/component}

[ -x "$bin/jco" ] && [ -x "$bin/wasm-opt" ] || {
  echo "build.sh: run 'npm ci' in $here/host-test first" >&2
  exit 1
}

cd "$root"
CARGO_PROFILE_RELEASE_OPT_LEVEL=${OPT_LEVEL:-s} \
  cargo build --quiet -p tollgate-component --release --target wasm32-unknown-unknown
mkdir -p "$out"
core="$CARGO_TARGET_DIR/wasm32-unknown-unknown/release/tollgate_component.wasm"
# wasm-opt keeps the `component-type` custom section wit-bindgen embedded; jco new reads it.
"$bin/wasm-opt" -O${OPT_LEVEL:-s} --strip-debug --strip-producers \
  --enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext \
  --enable-mutable-globals --enable-multivalue --enable-reference-types \
  "$core" -o "$out/tollgate.core.wasm"
"$bin/jco" new "$out/tollgate.core.wasm" -o "$out/tollgate.component.wasm"
rm -rf "$out/js"
"$bin/jco" transpile "$out/tollgate.component.wasm" --name tollgate -o "$out/js" --quiet
echo '{"type": "module"}' >"$out/js/package.json"
echo "component: $out/tollgate.component.wasm ($(wc -c <"$out/tollgate.component.wasm") bytes, $(gzip -9 -c "$out/tollgate.component.wasm" | wc -c) gzipped)"
