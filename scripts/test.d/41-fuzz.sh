#!/usr/bin/env bash
# The fuzz targets (fuzz/, cargo-fuzz's own workspace): the core's policy parser and
# decisions, and tollgate-rls's request path (fuzz/fuzz_targets/server.rs). Each runs
# under libFuzzer for a bounded time; a crash, panic or failed assertion fails the suite
# (cargo fuzz exits non-zero and leaves the input in fuzz/artifacts/<target>/). No
# sanitizer: the core and the server forbid `unsafe`, so AddressSanitizer has nothing to
# find that a panic does not show, and it made the build most of the suite's time.
# cargo-fuzz comes from the crates registry (scripts/tools.sh); the fuzz crate's own
# Cargo.lock pins its dependencies (seeded from the workspace's).
set -euo pipefail
source scripts/tools.sh
fuzz_tools
# cargo-fuzz passes nightly's -Z flags (-Zsanitizer, the coverage passes); RUSTC_BOOTSTRAP
# lets the stable toolchain, the only one these machines have, accept them.
export RUSTC_BOOTSTRAP=1
# Seconds per target (three targets: a minute in all by default).
seconds=${TOLLGATE_FUZZ_SECONDS:-20}
for target in policy decide server; do
  cargo fuzz run --sanitizer none "$target" -- -max_total_time="$seconds" -rss_limit_mb=2048 -print_final_stats=1
done
