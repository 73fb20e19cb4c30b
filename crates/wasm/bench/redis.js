// Side-by-side benchmark of a fleet rate limit on one local redis-server (not a test: numbers
// only, no assertions):
//   tollgate   tollgate/redis RedisLimiter.check(key) on ioredis (this package)
//   rlf        rate-limiter-flexible RateLimiterRedis.consume(key) on ioredis (same client
//              library, same version); a denial is its rejected promise, caught
//   rust       the Rust crate tollgate-redis (crates/redis/examples/storm.rs `bench`, one
//              thread, release build when present)
// each at 10k keys (drawn at random) and on one hot key, with 64 requests in flight, for a
// bounded time per case: checks/s, p50/p99 latency, and Redis commands per check from
// INFO commandstats (reset before each case; commands run inside scripts are counted too).
// The policy: a fixed window of 1000 per second per key, for all three (rate-limiter-flexible's
// points: 1000, duration: 1 is a fixed window too). At 10k keys nearly every check is admitted;
// on the hot key nearly every check is denied (tollgate answers those from its deny cache
// until the retry time; rate-limiter-flexible increments its counter on each).
//
// Usage (from crates/wasm, after build.sh and
//   cargo build --release -p tollgate-redis --example storm):
//   node bench/redis.js [--ms 3000] [--rounds 1]
// Starts redis-server (Debian's) on a free loopback port with a temporary directory and stops it.
import { spawn, spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { Server, repo } from "../test-redis/support.js";

const IN_FLIGHT = 64;
const LIMIT = 1000;
const POLICY = `fixed-window ${LIMIT}/s`;
const CASES = [
  ["10k keys", 10_000],
  ["hot key", 1],
];

function arg(name, fallback) {
  const i = process.argv.indexOf(name);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
}

/** One measurement in this (child) process: 64 workers until the deadline. */
async function child(impl, port, keys, ms) {
  const { default: Redis } = await import("ioredis");
  const client = new Redis({ port, host: "127.0.0.1" });
  await client.ping();
  let check;
  if (impl === "tollgate") {
    const { RedisLimiter } = await import("tollgate/redis");
    const limiter = new RedisLimiter(client, POLICY, { namespace: "bench", fallback: "closed", timeout: 5000 });
    check = async (key) => (await limiter.check(key)).allowed;
  } else {
    const { RateLimiterRedis } = await import("rate-limiter-flexible");
    const limiter = new RateLimiterRedis({ storeClient: client, points: LIMIT, duration: 1, keyPrefix: "rlf" });
    check = (key) =>
      limiter.consume(key).then(
        () => true,
        (res) => {
          if (res instanceof Error) throw res;
          return false;
        },
      );
  }
  const latencies = [];
  let allowed = 0;
  const started = performance.now();
  const deadline = started + ms;
  await Promise.all(
    Array.from({ length: IN_FLIGHT }, async () => {
      while (performance.now() < deadline) {
        const key = `k${Math.floor(Math.random() * keys)}`;
        const t = performance.now();
        const ok = await check(key);
        if (ok) allowed++;
        latencies.push(performance.now() - t);
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  latencies.sort((a, b) => a - b);
  const pct = (p) => latencies[Math.min(latencies.length - 1, Math.floor(latencies.length * p))];
  console.log(
    JSON.stringify({ checks: latencies.length, seconds, perSec: latencies.length / seconds, p50Ms: pct(0.5), p99Ms: pct(0.99), allowed }),
  );
  client.disconnect();
}

function run(command, args) {
  return new Promise((resolve, reject) => {
    const c = spawn(command, args, { stdio: ["ignore", "pipe", "inherit"] });
    let out = "";
    c.stdout.on("data", (d) => (out += d));
    c.on("exit", (code) => (code === 0 ? resolve(JSON.parse(out.trim().split("\n").pop())) : reject(new Error(`${command} exited ${code}`))));
  });
}

/** Commands per check by name, from INFO commandstats (connection set-up commands left out). */
function commandstats(server) {
  const calls = {};
  for (const line of server.cli("INFO", "commandstats").split("\n")) {
    const m = /^cmdstat_([^:]+):calls=(\d+)/.exec(line.trim());
    if (m && !["info", "config", "ping", "client", "hello", "select", "flushall", "command"].includes(m[1].split("|")[0])) {
      calls[m[1]] = Number(m[2]);
    }
  }
  return calls;
}

async function main() {
  if (process.argv[2] === "--child") {
    const [, , , impl, port, keys, ms] = process.argv;
    return child(impl, Number(port), Number(keys), Number(ms));
  }
  const ms = arg("--ms", 3000);
  const rounds = arg("--rounds", 1);
  const target = process.env.CARGO_TARGET_DIR ?? join(repo, "target");
  const release = join(target, "release/examples/storm");
  const debug = join(target, "debug/examples/storm");
  const rust = existsSync(release) ? release : existsSync(debug) ? debug : undefined;
  const server = await Server.start();
  const here = fileURLToPath(import.meta.url);
  const impls = ["tollgate", "rlf", ...(rust ? ["rust"] : [])];
  if (!rust) console.log("(no storm example built: cargo build --release -p tollgate-redis --example storm)");
  else if (rust === debug) console.log("(the Rust client is a debug build: its figures understate the crate)");
  const rows = [];
  try {
    for (let r = 1; r <= rounds; r++) {
      for (const [name, keys] of CASES) {
        for (const impl of impls) {
          server.cli("FLUSHALL");
          server.cli("CONFIG", "RESETSTAT");
          const result =
            impl === "rust"
              ? await run(rust, ["bench", server.url, "bench", POLICY, String(keys), String(IN_FLIGHT), String(ms)])
              : await run(process.execPath, [here, "--child", impl, String(server.port), String(keys), String(ms)]);
          const calls = commandstats(server);
          const total = Object.values(calls).reduce((a, b) => a + b, 0);
          const perCheck = Object.entries(calls)
            .sort((a, b) => b[1] - a[1])
            .map(([c, n]) => `${c} ${(n / result.checks).toFixed(2)}`)
            .join(", ");
          rows.push({ round: r, case: name, impl, ...result, commands: total / result.checks, perCheck });
        }
      }
    }
  } finally {
    await server.stop();
  }
  console.log(`fixed window ${LIMIT}/s per key, ${IN_FLIGHT} in flight, ${ms} ms per case, ioredis ${await version("ioredis")}, rate-limiter-flexible ${await version("rate-limiter-flexible")}, Node ${process.version}`);
  console.log("| round | case | impl | checks/s | p50 ms | p99 ms | admitted | Redis commands / check (by command) |");
  console.log("|---|---|---|---|---|---|---|---|");
  for (const x of rows) {
    console.log(
      `| ${x.round} | ${x.case} | ${x.impl} | ${Math.round(x.perSec)} | ${x.p50Ms.toFixed(2)} | ${x.p99Ms.toFixed(2)} | ${((100 * x.allowed) / x.checks).toFixed(1)}% | ${x.commands.toFixed(2)} (${x.perCheck}) |`,
    );
  }
}

async function version(name) {
  const r = spawnSync(process.execPath, ["-p", `require("${name}/package.json").version`], { encoding: "utf8", cwd: fileURLToPath(new URL("..", import.meta.url)) });
  return r.stdout.trim();
}

await main();
