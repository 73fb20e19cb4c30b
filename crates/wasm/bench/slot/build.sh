#!/usr/bin/env bash
# Builds the slot prototype (Cargo.toml says what it is) into target/slot/, then wasm-opt -O3
# as the package's build does: bench/slot.wasm for `node bench/check.js --slot`.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../../.." && pwd)
export CARGO_TARGET_DIR="$root/target/slot"
cargo build --quiet --release --target wasm32-unknown-unknown --manifest-path "$here/Cargo.toml"
"$root/node_modules/.bin/wasm-opt" -O3 --enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext \
  --enable-mutable-globals --enable-reference-types --enable-multivalue \
  "$CARGO_TARGET_DIR/wasm32-unknown-unknown/release/tollgate_slot_bench.wasm" -o "$CARGO_TARGET_DIR/slot.wasm"
echo "built $CARGO_TARGET_DIR/slot.wasm: $(wc -c < "$CARGO_TARGET_DIR/slot.wasm") bytes"
