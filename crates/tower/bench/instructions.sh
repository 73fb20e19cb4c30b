#!/usr/bin/env bash
# Instructions per request that each layer adds to the bare handler, counted by valgrind
# (apt-get install valgrind), in process (`examples/bench.rs cost`): the same count on a
# quiet machine or a loaded one, so a change's effect shows without the noise that wrk's
# req/s carries on shared cores. Not time: a cache miss counts as one instruction.
#
#   crates/tower/bench/instructions.sh            (from the repository root)
#
# Then, for tollgate-tower at 10k keys, the layer's parts (callgrind, inclusive of what
# each calls): routing, keying, deciding, the answer (fields and `RateLimitInfo`) and
# adding the fields to the response. Bounded: 10 runs of about 10 s, one of about 40 s.
set -euo pipefail
cd "$(dirname "$0")/../../.."
command -v valgrind >/dev/null || { echo "valgrind not found (apt-get install valgrind)"; exit 1; }
CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
  cargo build -j2 --release -p tollgate-tower --example bench --quiet
BIN="${CARGO_TARGET_DIR:-target}/release/examples/bench"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Instructions of one `bench cost <rounds> <mode> <keys>` run (the bare handler always
# runs too); the requests each service was sent are in its output.
count() {
  valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \
    "$BIN" cost "${3:-1}" "$1" "$2" >"$tmp/out" 2>"$tmp/err"
  awk '/I +refs:/{gsub(",", "", $NF); print $NF}' "$tmp/err"
}

# The requests each service was sent in the last run.
requests() { awk '/requests per service/{print $2}' "$tmp/out"; }

printf '%-5s %-17s %20s\n' keys layer instructions/request
for keys in 1 10k; do
  # The bare handler alone, over 2 and 4 batches: what its requests cost (the difference,
  # free of the start-up), and the base each layer's run is taken from.
  base=$(count bare "$keys")
  n=$(requests)
  more=$(count bare "$keys" 3)
  m=$(requests)
  bare=$(awk -v a="$base" -v b="$more" -v n="$n" -v m="$m" 'BEGIN {print (b - a) / (m - n)}')
  printf '%-5s %-17s %20.0f\n' "$keys" "(bare handler)" "$bare"
  for mode in tollgate governor governor-headers; do
    total=$(count "$mode" "$keys")
    # The layer's run less the bare run is the layer's requests; less the bare handler's
    # own cost, what the layer adds.
    awk -v k="$keys" -v m="$mode" -v t="$total" -v b="$base" -v n="$n" -v h="$bare" \
      'BEGIN {printf "%-5s %-17s %20.0f\n", k, m, (t - b) / n - h}'
  done
done

echo
echo "tollgate-tower at 10k keys, instructions per request by part:"
valgrind --tool=callgrind --callgrind-out-file="$tmp/callgrind" "$BIN" cost 1 tollgate 10k >"$tmp/out" 2>/dev/null
callgrind_annotate --inclusive=yes --threshold=100 "$tmp/callgrind" 2>/dev/null | awk -v n="$(requests)" '
  { gsub(",", "", $1) }
  /tollgate_http::route::normalized /      { part["routing: path normalized"] += $1 }
  /tollgate_http::route::matches /         { part["routing: route found"] += $1 }
  /tollgate_tower::key::key_of /           { part["keying: client IP and key text"] += $1 }
  /tollgate_tower::store::Memory<C>::decide / { part["deciding: keyed check and clock"] += $1 }
  /tollgate_tower::answer::answer /        { part["answer: fields, RateLimitInfo"] += $1 }
  /tollgate_tower::fields::add_fields /    { part["fields added to the response"] += $1 }
  END { for (p in part) printf "  %-34s %6.0f\n", p, part[p] / n }' | sort
