#!/usr/bin/env bash
# Side by side: the same axum handler behind tollgate-tower and behind tower_governor 0.8
# (without and with its headers mode), the same quota (GCRA 100/s, burst 100) keyed by IP,
# loaded by wrk on loopback: 1 key (every request from one client: mostly 429s, the deny
# path) and 10k keys (X-Forwarded-For from a trusted loopback proxy: mostly admitted).
# Prints req/s and p99 per run. Bounded: DURATION seconds per run (default 8), 6 runs.
#   crates/tower/bench/run.sh            (from the repository root)
#   MODES="governor-headers governor tollgate" crates/tower/bench/run.sh   (another order, to
#   see whether the machine's load drifting during a round favours the first or the last)
# Not a test: figures depend on the machine and its load; compare within one run only.
set -euo pipefail
cd "$(dirname "$0")/../../.."
DURATION=${DURATION:-8}
THREADS=${THREADS:-2}
CONNECTIONS=${CONNECTIONS:-32}
command -v wrk >/dev/null || { echo "wrk not found (apt-get install wrk)"; exit 1; }
# Release build without the workspace's whole-program LTO (a shorter build; both
# contenders are built the same way).
CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
  cargo build --release -p tollgate-tower --example bench --quiet
BIN="${CARGO_TARGET_DIR:-target}/release/examples/bench"
LUA="crates/tower/bench/xff.lua"

printf '%-18s %-8s %12s %10s %10s\n' server keys req/s p99 non-2xx
for mode in ${MODES:-tollgate governor governor-headers}; do
  out=$(mktemp)
  "$BIN" "$mode" >"$out" &
  pid=$!
  for _ in $(seq 100); do grep -q '^port ' "$out" && break; sleep 0.1; done
  port=$(awk '/^port /{print $2}' "$out")
  for keys in 1 10k; do
    args=(-t"$THREADS" -c"$CONNECTIONS" -d"${DURATION}s" --latency)
    [ "$keys" = 10k ] && args+=(-s "$LUA")
    res=$(wrk "${args[@]}" "http://127.0.0.1:$port/")
    rps=$(awk '/^Requests\/sec/{print $2}' <<<"$res")
    p99=$(awk '$1=="99%"{print $2}' <<<"$res")
    non2xx=$(awk '/Non-2xx/{print $NF}' <<<"$res")
    printf '%-18s %-8s %12s %10s %10s\n' "$mode" "$keys" "$rps" "$p99" "${non2xx:-0}"
  done
  kill "$pid"; wait "$pid" 2>/dev/null || true
  rm -f "$out"
done
