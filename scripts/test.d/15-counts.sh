#!/usr/bin/env bash
# Instruction-count budgets on the core's hot paths (valgrind; PERF.md): fails when a path's
# count per operation grew more than its margin (3%) over benches/counts.tsv, printing old,
# new and the ratio. A deliberate change: scripts/counts.sh --update, committed saying why.
# The tower layer's request without and with `metrics` (crates/counts/src/tower.rs), the edge
# worker's Rust work on a request (src/edge.rs), and the
# metric hooks' ratios (benches/counts-ratios.tsv) too. About a minute and a half (the
# release builds, then 40 runs under valgrind).
set -euo pipefail
source scripts/tools.sh
apt_packages valgrind
cargo fmt -p tollgate-counts --check
cargo clippy -q -p tollgate-counts -- -D warnings
cargo clippy -q -p tollgate-counts --features metered -- -D warnings
cargo clippy -q -p tollgate-counts --features tower -- -D warnings
cargo clippy -q -p tollgate-counts --features metered,tower-metered -- -D warnings
cargo clippy -q -p tollgate-counts --features edge -- -D warnings
scripts/counts.sh
