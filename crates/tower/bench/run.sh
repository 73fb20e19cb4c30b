#!/usr/bin/env bash
# Side by side: the same axum handler behind tollgate-tower and behind tower_governor 0.8
# (without and with its headers mode), the same quota (GCRA 100/s, burst 100) keyed by the
# client's IP, loaded by wrk on loopback: 1 key (every request from one client: mostly
# 429s, the deny path) and 10k keys (X-Forwarded-For from a trusted loopback proxy: all
# admitted).
#
# Made for a noisy shared machine: the three servers run at once and are loaded in turn,
# in short runs, round after round, the order rotated each round, so that a change in the
# machine's load falls on every server alike. Each line is one run; the summary gives, per
# case, each server's median req/s, p99 and server CPU time per request, and tollgate's
# ratio to each peer within each round (req/s: above 1 is faster; p99: below 1 is
# better) with the median of those ratios. Server CPU per request (every thread's time on
# a CPU, from /proc, user and kernel) counts only the server's own work, so it moves less
# with the machine's load than req/s does.
#
#   crates/tower/bench/run.sh                     (from the repository root)
#   ROUNDS=7 DURATION=3 PIN=1 crates/tower/bench/run.sh
#
# PIN=1 runs the servers on CPU 0 and wrk on CPU 1 (each server then has one tokio
# worker); PIN=0 (the default) lets the kernel place them. Bounded: ROUNDS x 6 runs of
# DURATION seconds. Not a test: figures depend on the machine; compare within one run.
set -euo pipefail
cd "$(dirname "$0")/../../.."
ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-3}
THREADS=${THREADS:-2}
CONNECTIONS=${CONNECTIONS:-32}
PIN=${PIN:-0}
MODES=(${MODES:-tollgate governor governor-headers})
command -v wrk >/dev/null || { echo "wrk not found (apt-get install wrk)"; exit 1; }
# Release build without the workspace's whole-program LTO (a shorter build; both
# contenders are built the same way).
CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
  cargo build -j2 --release -p tollgate-tower --example bench --quiet
BIN="${CARGO_TARGET_DIR:-target}/release/examples/bench"
LUA="crates/tower/bench/xff.lua"
server_cpu=() wrk_cpu=()
if [ "$PIN" = 1 ]; then server_cpu=(taskset -c 0) wrk_cpu=(taskset -c 1); fi

tmp=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
declare -A port pid
for mode in "${MODES[@]}"; do
  "${server_cpu[@]}" "$BIN" "$mode" >"$tmp/$mode.out" &
  pid[$mode]=$!
  pids+=($!)
done
for mode in "${MODES[@]}"; do
  for _ in $(seq 100); do grep -q '^port ' "$tmp/$mode.out" && break; sleep 0.1; done
  port[$mode]=$(awk '/^port /{print $2}' "$tmp/$mode.out")
done

# Every thread's time on a CPU so far (ns), from the scheduler's statistics.
cpu_ns() { cat /proc/"$1"/task/*/schedstat | awk '{s += $1} END {printf "%.0f\n", s}'; }

# The fields of one admitted response at 10k keys, to compare what each server sends.
for mode in "${MODES[@]}"; do
  fields=$(curl -s -D - -o /dev/null -H 'X-Forwarded-For: 198.18.0.1' \
    "http://127.0.0.1:${port[$mode]}/" | tr -d '\r' | grep -c ':' || true)
  echo "# $mode: $fields header fields on an admitted response"
done
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
# Warm-up (not counted): every server and both cases once.
for mode in "${MODES[@]}"; do
  "${wrk_cpu[@]}" wrk -t"$THREADS" -c"$CONNECTIONS" -d1s "http://127.0.0.1:${port[$mode]}/" >/dev/null
  "${wrk_cpu[@]}" wrk -t"$THREADS" -c"$CONNECTIONS" -d1s -s "$LUA" "http://127.0.0.1:${port[$mode]}/" >/dev/null
done

printf '%-5s %-4s %-17s %9s %9s %8s %11s\n' round keys server req/s p99 non-2xx cpu-us/req
for round in $(seq "$ROUNDS"); do
  # Rotate the order: round 1 A B C, round 2 B C A, round 3 C A B, ...
  n=${#MODES[@]}
  order=()
  for k in $(seq 0 $((n - 1))); do order+=("${MODES[$(((round - 1 + k) % n))]}"); done
  for keys in 1 10k; do
    for mode in "${order[@]}"; do
      args=(-t"$THREADS" -c"$CONNECTIONS" -d"${DURATION}s" --latency)
      [ "$keys" = 10k ] && args+=(-s "$LUA")
      before=$(cpu_ns "${pid[$mode]}")
      res=$("${wrk_cpu[@]}" wrk "${args[@]}" "http://127.0.0.1:${port[$mode]}/")
      after=$(cpu_ns "${pid[$mode]}")
      rps=$(awk '/^Requests\/sec/{print $2}' <<<"$res")
      total=$(awk '/requests in/{print $1}' <<<"$res")
      p99=$(awk '$1=="99%"{v=$2; if (v ~ /us$/) {sub(/us/,"",v); v/=1000} else if (v ~ /ms$/) {sub(/ms/,"",v)} else {sub(/s/,"",v); v*=1000}; print v}' <<<"$res")
      non2xx=$(awk '/Non-2xx/{print $NF}' <<<"$res")
      cpu=$(awk -v a="$before" -v b="$after" -v n="$total" 'BEGIN {printf "%.1f", (b - a) / 1000 / n}')
      printf '%-5s %-4s %-17s %9.0f %9.2f %8s %11s\n' "$round" "$keys" "$mode" "$rps" "$p99" "${non2xx:-0}" "$cpu" | tee -a "$tmp/runs"
    done
  done
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

# Medians per server and case, then tollgate's ratios to each peer per round.
awk -v modes="${MODES[*]}" '
  function median(list,   a, n, i, j, t) {
    n = split(list, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  { rps[$2, $3] = rps[$2, $3] " " $4; p99[$2, $3] = p99[$2, $3] " " $5; cpu[$2, $3] = cpu[$2, $3] " " $7
    r[$1, $2, $3] = $4; p[$1, $2, $3] = $5; if ($1 > rounds) rounds = $1 }
  END {
    m = split(modes, ms, " ")
    print ""
    printf "%-4s %-17s %13s %11s %15s\n", "keys", "server", "median req/s", "median p99", "median cpu-us/req"
    for (k = 1; k <= 2; k++) {
      keys = k == 1 ? "1" : "10k"
      for (i = 1; i <= m; i++)
        printf "%-4s %-17s %13.0f %11.2f %15.1f\n", keys, ms[i], median(rps[keys, ms[i]]), median(p99[keys, ms[i]]), median(cpu[keys, ms[i]])
    }
    print ""
    for (k = 1; k <= 2; k++) {
      keys = k == 1 ? "1" : "10k"
      for (i = 2; i <= m; i++) {
        rr = ""; pr = ""
        for (x = 1; x <= rounds; x++) {
          rr = rr sprintf(" %.2f", r[x, keys, ms[1]] / r[x, keys, ms[i]])
          pr = pr sprintf(" %.2f", p[x, keys, ms[1]] / p[x, keys, ms[i]])
        }
        printf "%s keys, %s / %s: req/s ratio per round%s (median %.2f); p99 ratio%s (median %.2f)\n", keys, ms[1], ms[i], rr, median(rr), pr, median(pr)
      }
    }
  }' "$tmp/runs"
