#!/usr/bin/env bash
# The WIT component (issue 5): lint the guest, build the import-free component, validate
# wit/ and replay every shared vector (tests/vectors/*.json) through the component in a real
# host (jco 1.10.2 in Node), plus the WIT-level API tests and the adaptive limiter's (issue 42).
set -euo pipefail
source scripts/tools.sh
rust_targets
npm_ci crates/component/host-test

export CARGO_TARGET_DIR=$PWD/target/component
cargo fmt -p tollgate-component --check
cargo clippy --quiet -p tollgate-component --target wasm32-unknown-unknown -- -D warnings
crates/component/build.sh
(cd crates/component/host-test && node --test test/)

# The Rust wasmtime host (README example + the same vectors through a second runtime + the
# adaptive limiter driven side by side with the native core, step for step). Opt-in:
# building wasmtime costs ~6 CPU-minutes.
if [ "${TOLLGATE_WASMTIME:-0}" = 1 ]; then
  (
    cd crates/component/wasmtime-host
    unset CARGO_TARGET_DIR # its own workspace and target/
    cargo run --quiet --release --locked -- ../build/tollgate.component.wasm ../../../tests/vectors
    out=$(cargo run --quiet --release --locked --example hello)
    echo "$out"
    grep -qx 't=0ms alice: allowed=false remaining=0 retry-after=500ms' <<<"$out"
    grep -q '^bad policy: Field::Window Rule::UnknownUnit' <<<"$out"
  )
fi
