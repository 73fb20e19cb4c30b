#!/usr/bin/env bash
# The core crate: format, lints, unit/property/vector tests, doc examples, and builds for
# every target the bindings use (no_std without alloc, wasm32-unknown-unknown, wasip2).
set -euo pipefail
source scripts/tools.sh
rust_targets
# Every feature but `compact-store` (a store layout for the npm .wasm, tested on its own below);
# `tokio` brings the ready-made `acquire` and its tests.
full=std,serde,headers,http-date,tokio,fleet
cargo fmt --all --check
# No two files of a crate import each other, directly or around a circle (issue 38).
python3 scripts/import-cycles.py
cargo clippy -p tollgate --all-targets --features "$full" -- -D warnings
cargo clippy -p tollgate --all-targets --all-features -- -D warnings
cargo clippy -p tollgate --no-default-features -- -D warnings
cargo build -p tollgate --no-default-features --target wasm32-unknown-unknown
cargo build -p tollgate --no-default-features --features alloc,serde --target wasm32-unknown-unknown
cargo build -p tollgate --no-default-features --features fleet --target wasm32-unknown-unknown
cargo build -p tollgate --all-features --target wasm32-wasip2
cargo test -p tollgate --features "$full"
# The npm package's store layout (two-word states in three-word cells): the store's own tests.
cargo test -p tollgate --all-features --lib --test keyed --test properties
# The API docs build without a broken or ambiguous link (private items too: the store's
# internals are documented for the next maintainer).
RUSTDOCFLAGS="-D warnings" cargo doc --quiet --no-deps -p tollgate --all-features --document-private-items
