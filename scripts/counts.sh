#!/usr/bin/env bash
# Instructions per operation on the hot paths, counted by valgrind (deterministic: the same
# count on a quiet machine or a loaded one), checked against the committed baseline
# `benches/counts.tsv`. See PERF.md.
#
#   scripts/counts.sh            count every path; fail if one grew more than its margin over
#                                its baseline (prints old, new and the ratio for each)
#   scripts/counts.sh --update   count every path and write the counts as the new baseline,
#                                keeping each path's margin (commit it with a message that
#                                says why the counts moved)
#   scripts/counts.sh PATH...    count only these paths (no check, no write; the hooks' ratios
#                                of the paths counted are printed)
#   scripts/counts.sh --npm [--update | PATH...]
#                                the same for the npm package's `check` and `allow`, against
#                                benches/counts-npm.tsv (after crates/wasm/build.sh)
#   scripts/counts.sh --npm --profile [PATH]
#                                where one call of PATH (npm-check-1 by default) goes, by
#                                function: wasmi's fuel and the operators actually run
#                                (crates/counts/wasm/src/profile.rs; PERF.md)
#
# Each path runs twice, at R and 2R operations after the same set-up; the difference over R
# is one operation's count (the set-up, the start and the exit cancel). The margin (the
# baseline's third column) is 3%.
#
# The paths of a binary whose set-up is not a fixed number of instructions (a Prometheus
# recorder calibrates its clock for a time) are counted inside the binary's function
# `counted` only (callgrind's --toggle-collect), and so are the tower layer's paths, so that
# their ratios compare counts of one tool (callgrind and cachegrind differ by a few
# instructions a request on string copies).
#
# The metric hooks' ratios (issue 29: under 3% of the hot path) are held as well: each row of
# benches/counts-ratios.tsv names a path with a hook, its path without, and the most their
# ratio may be; the check fails over it, whatever the baselines.
#
# The npm paths (`npm-*`) count the package's .wasm (crates/wasm/pkg/web/tollgate_wasm_bg.wasm)
# under the wasmi interpreter's fuel metering (crates/counts/wasm): wasm operators (of the frames entered)
# per call of the export `check` or `allow` calls, exact on any machine, no valgrind. The
# `npm-*-uncounted-*` paths are the same calls on the package built without its metric tally
# (crates/wasm/pkg-uncounted: the feature `uncounted`; the npm suite builds it), the npm
# hook's pairs in benches/counts-ratios.tsv.
set -euo pipefail
cd "$(dirname "$0")/.."
suite=core
[ "${1:-}" = --npm ] && { suite=npm; shift; }
baseline=benches/counts.tsv
[ $suite = npm ] && baseline=benches/counts-npm.tsv
mode=check
case "${1:-}" in
  --update) mode=update; shift ;;
  --profile) mode=profile; shift ;;
  -*) sed -n '2,40p' "$0"; exit 2 ;;
esac
[ $mode = profile ] && [ $suite != npm ] && { echo "--profile is for the npm paths (--npm --profile)"; exit 2; }
[ $# -gt 0 ] && [ $mode != profile ] && mode=only

if [ $suite = npm ]; then
  WASM=crates/wasm/pkg/web/tollgate_wasm_bg.wasm
  WASM_UNCOUNTED=crates/wasm/pkg-uncounted/web/tollgate_wasm_bg.wasm
  [ -f "$WASM" ] || { echo "missing $WASM (run crates/wasm/build.sh first)"; exit 1; }
  [ -f "$WASM_UNCOUNTED" ] || {
    echo "missing $WASM_UNCOUNTED (TOLLGATE_WASM_FEATURES=uncounted TOLLGATE_WASM_PKG=crates/wasm/pkg-uncounted crates/wasm/build.sh)"
    exit 1
  }
  cargo build -j2 --quiet --release -p tollgate-counts-wasm
  WASM_HOST="${CARGO_TARGET_DIR:-target}/release/tollgate-counts-wasm"
  if [ $mode = profile ]; then
    exec "$WASM_HOST" "$WASM" "${1:-npm-check-1}" 20000 --profile crates/wasm/pkg-web.symbols
  fi
else
  command -v valgrind >/dev/null || { echo "valgrind not found (apt-get install valgrind)"; exit 1; }
  cargo build -j2 --quiet --release -p tollgate-counts
  # The metered paths' binary: the core with its `metrics` feature (crates/counts/src/metered.rs),
  # built on its own so that the binaries above keep the core without it.
  cargo build -j2 --quiet --release -p tollgate-counts --features metered --bin tollgate-counts-metered
  # One request through tollgate-tower, without and with its `metrics` (crates/counts/src/tower.rs).
  cargo build -j2 --quiet --release -p tollgate-counts --features tower --bin tollgate-counts-tower
  cargo build -j2 --quiet --release -p tollgate-counts --features tower-metered --bin tollgate-counts-tower-metered
  # The edge worker's Rust work on a limited request (crates/counts/src/edge.rs).
  cargo build -j2 --quiet --release -p tollgate-counts --features edge --bin tollgate-counts-edge
  BIN="${CARGO_TARGET_DIR:-target}/release/tollgate-counts"
  VALGRIND=$(command -v valgrind)
fi

# The instructions of one run of `tollgate-counts PATH ROUNDS`, in an empty environment (the
# store's hash seed comes from stack addresses, which the environment's size moves). The
# fleet's paths have a binary of their own (crates/counts/src/fleet.rs says why), and so have
# the reserve-and-settle ones (src/settle.rs),
# the metered ones (crates/counts/src/metered.rs), the tower layer's (src/tower.rs) and the
# edge worker's (src/edge.rs, counted inside `counted` too: its set-up fills a cache).
total() {
  local bin=$BIN
  case $1 in
    fleet-* | module-*) bin=$BIN-fleet ;;
    settle-*) bin=$BIN-settle ;;
    tower-metrics-* | tower-prometheus-*) bin=$BIN-tower-metered ;;
    tower-*) bin=$BIN-tower ;;
    edge-*) bin=$BIN-edge ;;
    *metered*) bin=$BIN-metered ;;
  esac
  case $1 in
    tower-* | edge-* | *prometheus*)
      # Inside `counted` only (see above).
      env -i "$VALGRIND" --tool=callgrind --callgrind-out-file=/dev/null --collect-atstart=no \
        --toggle-collect='*::counted' "$bin" "$1" "$2" 2>&1 >/dev/null |
        awk '/Collected :/ {print $NF}' ;;
    *)
      env -i "$VALGRIND" --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \
        "$bin" "$1" "$2" 2>&1 >/dev/null | awk '/I +refs:/ {gsub(",", "", $NF); print $NF}' ;;
  esac
}

# One operation's count: (2R run - R run) / R, to one decimal. The npm host counts both in
# one process (fuel is exact: nothing of the process is in it) and prints the difference.
per_op() {
  local r=$2 a b
  case $1 in
    npm-*-uncounted-*) "$WASM_HOST" "$WASM_UNCOUNTED" "${1/-uncounted/}" "$r"; return ;;
    npm-*) "$WASM_HOST" "$WASM" "$1" "$r"; return ;;
  esac
  a=$(total "$1" "$r")
  b=$(total "$1" $((2 * r)))
  awk -v a="$a" -v b="$b" -v r="$r" 'BEGIN { printf "%.1f\n", (b - a) / r }'
}

# The paths and their rounds.
paths() {
  if [ $# -gt 0 ]; then printf '%s 20000\n' "$@"; return; fi
  if [ $suite = npm ]; then
    cat <<'LIST'
npm-check-1 20000
npm-allow-1 20000
npm-check-10k 20000
npm-allow-10k 20000
npm-check-uncounted-1 20000
npm-allow-uncounted-1 20000
LIST
    return
  fi
  cat <<'LIST'
direct-admit 20000
direct-decision 20000
stack-decision 20000
keyed-admit-1 20000
keyed-check-1 20000
keyed-admit-10k 20000
keyed-check-10k 20000
keyed-admit-1m 100000
keyed-check-1m 100000
keyed-stack-1 20000
fleet-round-1 20000
module-check-1 20000
keyed-check-unmetered-1 20000
keyed-check-metered-1 20000
keyed-check-metered-prometheus-1 20000
settle-check-1 20000
settle-reserve-1 20000
settle-check-open-1 20000
settle-reserve-open-1 20000
settle-reserve-settle-1 20000
tower-1 5000
tower-10k 5000
tower-apikey-10k 5000
tower-plans-10k 5000
tower-jwt-10k 5000
edge-apikey-10k 5000
edge-jwt-10k 5000
tower-metrics-1 5000
tower-metrics-10k 5000
tower-prometheus-1 5000
tower-prometheus-10k 5000
LIST
}

new=$(mktemp)
trap 'rm -f "$new" "$new.tsv"' EXIT
paths "$@" | while read -r path rounds; do
  printf '%s\t%s\n' "$path" "$(per_op "$path" "$rounds")"
done >"$new"

status=0
case $mode in
  only) column -t "$new" ;;
  update)
    # Each path keeps its margin (1.03 for a new one).
    # The npm counts are wasm operators (wasmi's fuel), not machine instructions.
    what="instructions per operation"
    [ $suite = npm ] && what="wasm operators per call (wasmi fuel)"
    awk -F'\t' -v what="$what" -v flag="$([ $suite = npm ] && echo '--npm ')" '
      NR == FNR { if ($1 !~ /^#/) m[$1] = $3; next }
      FNR == 1 { print "# path\t" what "\tmargin (scripts/counts.sh " flag "--update; PERF.md)" }
      { printf "%s\t%s\t%s\n", $1, $2, ($1 in m) ? m[$1] : "1.03" }' "$baseline" "$new" >"$new.tsv"
    mv "$new.tsv" "$baseline"
    column -t -s "$(printf '\t')" "$baseline"
    echo "wrote $baseline: commit it with a message that says why the counts moved" ;;
  check)
    # Old, new and the ratio for every path; fail if a ratio is over its margin, or a path
    # has no baseline (a new path is added with --update).
    awk -F'\t' '
      BEGIN { printf "%-34s %10s %10s %8s\n", "path", "old", "new", "new/old" }
      NR == FNR { if ($1 !~ /^#/) { old[$1] = $2; margin[$1] = $3 } next }
      {
        if (!($1 in old)) { printf "%-34s %10s %10.1f   no baseline\n", $1, "-", $2; bad = 1; next }
        ratio = $2 / old[$1]
        over = ratio > margin[$1]
        if (over) bad = 1
        printf "%-34s %10.1f %10.1f %8.3f%s\n", $1, old[$1], $2, ratio, over ? "   OVER (margin " margin[$1] ")" : ""
      }
      END {
        if (bad) {
          print "\ninstruction counts over their baseline by more than the margin (or unlisted)."
          print "If the change is deliberate: scripts/counts.sh [--npm] --update, and commit the baseline saying why."
          exit 1
        }
      }' "$baseline" "$new" || status=1 ;;
esac

# The metric hooks' ratios, for the pairs of benches/counts-ratios.tsv counted in this run
# (core or npm): fail if one is over the most it may be.
awk -F'\t' '
  NR == FNR { count[$1] = $2; next }
  /^#/ || !(($1 in count) && ($2 in count)) { next }
  {
    if (!shown++) printf "\n%-34s %-24s %8s %6s\n", "with the hook", "without", "ratio", "most"
    ratio = count[$1] / count[$2]
    over = ratio > $3
    if (over) bad = 1
    printf "%-34s %-24s %8.3f %6s%s\n", $1, $2, ratio, $3, over ? "   OVER" : ""
  }
  END {
    if (bad) {
      print "\na metric hook costs more than its budget (benches/counts-ratios.tsv; PERF.md)."
      exit 1
    }
  }' "$new" benches/counts-ratios.tsv || status=1
exit $status
