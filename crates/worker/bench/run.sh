#!/usr/bin/env bash
# Load test of the edge limiter under `wrangler dev` (loopback only, bounded in time): one
# server, one run, side by side:
#   none      an exempt route (the runtime's ceiling: worker + demo origin, no limiter)
#   hot       one hot key (one Durable Object, every request decided there)
#   keys      10k distinct keys over 8 sharded objects
#   per-key   the same 10k keys with one object per key (the naive design, for comparison)
#   denied    an already-denied key (answered from the isolate's deny cache)
# Each case runs once per round (ROUNDS=3 by default, interleaved) and is summarised by its
# best round; ratios compare best rounds (the machine is shared, single runs are noisy).
# Prints req/s and p50/p99 per case and writes bench/results/latest.json.
#   crates/worker/bench/run.sh            3 rounds x 5 s per case, 16 connections
#   ROUNDS=1 DURATION=8 CONNECTIONS=32 .../run.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$root"
source scripts/tools.sh
apt_packages wrk
here=crates/worker/bench
DURATION=${DURATION:-5}
ROUNDS=${ROUNDS:-3}
CONNECTIONS=${CONNECTIONS:-16}
PORT=${BENCH_PORT:-8788}
base="http://127.0.0.1:$PORT"
state=$(mktemp -d /tmp/tollgate-bench-XXXXXX)
mkdir -p "$here/results"
# bench/config.json: the worker's config ("tollgate") and the policies decided with one
# object per key ("object_per_key", the naive design measured against; a load-test var, not
# a config field).
read_bench() { node -e 'const c = require(process.argv[1]); console.log(process.argv[2] === "config" ? JSON.stringify(c.tollgate) : c.object_per_key.join(","))' "$root/$here/config.json" "$1"; }
config=$(read_bench config)
per_key=$(read_bench object_per_key)

PORT=$PORT scripts/run --persist-to "$state" --var "TOLLGATE_CONFIG:$config" --var "BENCH_OBJECT_PER_KEY:$per_key" > "$state/wrangler.log" 2>&1 &
server=$!
cleanup() {
  kill -INT "$server" 2>/dev/null || true
  for _ in $(seq 1 20); do kill -0 "$server" 2>/dev/null || break; sleep 0.5; done
  kill -TERM "$server" 2>/dev/null || true
  rm -rf "$state"
}
trap cleanup EXIT
for i in $(seq 1 240); do
  curl -s -o /dev/null "$base/bench/none" && break
  kill -0 "$server" 2>/dev/null || { cat "$state/wrangler.log"; echo "wrangler dev exited" >&2; exit 1; }
  sleep 1
done
curl -s -o /dev/null "$base/bench/none" || { echo "server not up" >&2; exit 1; }

# Warm up each path once; spend the denied key's only request.
for p in none hot keys per-key; do curl -s -o /dev/null -H "cf-connecting-ip: 192.0.2.1" "$base/bench/$p"; done
curl -s -o /dev/null -H "cf-connecting-ip: 192.0.2.66" "$base/bench/denied"
code=$(curl -s -o /dev/null -w '%{http_code}' -H "cf-connecting-ip: 192.0.2.66" "$base/bench/denied")
[ "$code" = 429 ] || { echo "denied key answered $code" >&2; exit 1; }

run() { # name path script [ip]
  local name=$1 path=$2 script=$3 ip=${4:-192.0.2.1}
  BENCH_IP=$ip BENCH_OFFSET=$((round * 3331)) wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" --timeout 10s --latency -s "$here/$script" "$base$path" > "$state/$name.txt" 2>&1 || true
  local rps p50 p99 non2xx errors
  rps=$(awk '/^Requests\/sec/ {print $2}' "$state/$name.txt")
  p50=$(awk '$1=="50%" {print $2}' "$state/$name.txt")
  p99=$(awk '$1=="99%" {print $2}' "$state/$name.txt")
  non2xx=$(awk '/Non-2xx or 3xx responses/ {print $5}' "$state/$name.txt")
  errors=$(awk '/Socket errors/ {print $0}' "$state/$name.txt")
  printf 'round %s  %-8s %10s req/s   p50 %-9s p99 %-9s non-2xx %s %s\n' "$round" "$name" "${rps:-?}" "${p50:-?}" "${p99:-?}" "${non2xx:-0}" "$errors"
  echo "{\"round\":$round,\"case\":\"$name\",\"rps\":${rps:-0},\"p50\":\"${p50:-}\",\"p99\":\"${p99:-}\",\"non2xx\":${non2xx:-0}}" >> "$state/results.jsonl"
}
echo "wrk: 1 thread, $CONNECTIONS connections, ${DURATION}s per case, $ROUNDS interleaved rounds, loopback, sharing $(nproc) cores with workerd"
for round in $(seq 1 "$ROUNDS"); do
  run none /bench/none one.lua
  run hot /bench/hot one.lua
  run keys /bench/keys keys.lua
  run denied /bench/denied one.lua 192.0.2.66
  run per-key /bench/per-key keys.lua
done
kill -0 "$server" 2>/dev/null || echo "note: wrangler dev exited during the run (see its log)"
node -e '
const fs = require("fs");
const rows = fs.readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse);
// Other work on the machine makes single runs noisy: each case runs once per round,
// interleaved; a case is summarised by its best round (its capacity when the machine was
// least busy) and its median.
const cases = [...new Set(rows.map((r) => r.case))];
const summary = {};
for (const c of cases) {
  const runs = rows.filter((r) => r.case === c).sort((a, b) => b.rps - a.rps);
  summary[c] = { best: runs[0], median_rps: runs[Math.floor(runs.length / 2)].rps };
}
console.log("\ncase      best req/s (p50 / p99 of that run)   median req/s");
for (const c of cases) {
  const s = summary[c];
  console.log(`${c.padEnd(9)} ${String(s.best.rps).padStart(10)} (${s.best.p50} / ${s.best.p99})`.padEnd(46) + String(s.median_rps).padStart(10));
}
const ratio = (a, b) => (summary[a] && summary[b] ? summary[a].best.rps / summary[b].best.rps : null);
const goals = {
  "hot / none (goal >= 0.5)": ratio("hot", "none"),
  "keys / per-key (goal >= 5)": ratio("keys", "per-key"),
  "denied / none (goal >= 0.9)": ratio("denied", "none"),
};
for (const [k, v] of Object.entries(goals)) console.log(`${k.padEnd(30)} ${v === null ? "?" : v.toFixed(2)}`);
fs.writeFileSync(process.argv[2], JSON.stringify({ when: new Date().toISOString(), rows, summary, goals }, null, 2) + "\n");
' "$state/results.jsonl" "$here/results/latest.json"
