#!/usr/bin/env bash
# Counts Node's instructions for bench/redis-counts.js under valgrind (cachegrind, no cache
# simulation) at N and at 2N checks after the same warm-up, and prints both totals and the
# difference over N: the instructions of one `RedisLimiter.check` (PERF.md, "The npm Redis
# client per check: Node under valgrind").
#
#   crates/wasm/bench/redis-counts.sh PATH N [--warm W] [--pkg DIR]
#   -> PATH N total_at_N total_at_2N per_check
#
# Every run's exit status is checked, and its stderr kept in a file (printed on failure): a run
# that failed still prints an instruction count (valgrind counts whatever Node did before it
# stopped), so a count read without the status can be a failure's. That is what the second
# round of 2026-12-05 was: every run counted ~143M, Node's start up to "Cannot find module"
# of its own script (the wrapper ran `node bench/redis-counts.js` from another directory and
# sent Node's stderr to /dev/null); a run that does start counts over 1,000M. Here the harness
# is named by its absolute path and `--pkg` made absolute, so the working directory does not
# matter.
#
# The two runs go in parallel (one core each). `env -i`: the same (empty) environment in
# every run, so nothing from the caller's shell reaches Node; NODE is the node binary
# (default: the one on PATH, resolved here since env -i drops PATH).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[ $# -ge 2 ] || { sed -n '2,9p' "$0" >&2; exit 2; }
path=$1 n=$2
shift 2
extra=()
while [ $# -gt 0 ]; do
  case $1 in
    --warm) extra+=(--warm "$2"); shift 2 ;;
    --pkg) extra+=(--pkg "$(realpath "$2")"); shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
node=${NODE:-$(command -v node)}
valgrind=$(command -v valgrind)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

one() { # one COUNT: the run's total instructions in $out/COUNT.refs, its stderr in $out/COUNT.err
  local status=0
  env -i "$valgrind" --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \
    --log-file="$out/$1.vg" "$node" --predictable --single-threaded \
    "$here/redis-counts.js" "$path" "$1" "${extra[@]}" > "$out/$1.out" 2> "$out/$1.err" || status=$?
  if [ $status -ne 0 ]; then
    echo "run of $path N=$1 failed (exit $status):" >&2
    cat "$out/$1.err" "$out/$1.out" >&2
    return 1
  fi
  awk '/I +refs:/ { gsub(",", "", $NF); print $NF }' "$out/$1.vg" > "$out/$1.refs"
  [ -s "$out/$1.refs" ] || { echo "no instruction count in valgrind's log for N=$1" >&2; cat "$out/$1.vg" >&2; return 1; }
}

one "$n" & a=$!
one "$((2 * n))" & b=$!
ok=0
wait $a || ok=1
wait $b || ok=1
[ $ok -eq 0 ] || exit 1
at_n=$(cat "$out/$n.refs")
at_2n=$(cat "$out/$((2 * n)).refs")
echo "$path $n $at_n $at_2n $(( (at_2n - at_n) / n ))"
