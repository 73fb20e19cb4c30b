// Side-by-side benchmark of a fleet rate limit on one local redis-server (not a test: numbers
// only, no assertions):
//   tollgate   tollgate/redis RedisLimiter.check(key) on ioredis (this package)
//   tollgate+module  the same against the redis-server with tollgate's module loaded (below):
//              it finds the module and sends one TOLLGATE.CHECK a check
//   floor      (with --floor) ioredis alone sending tollgate's two scripts a check, with
//              no decision and no wasm: the least the script protocol costs on this client
//   rlf        rate-limiter-flexible RateLimiterRedis.consume(key) on ioredis (same client
//              library, same version); a denial is its rejected promise, caught
//   rust       the Rust crate tollgate-redis (crates/redis/examples/storm.rs `bench`, one
//   rust+module  the same client against a second redis-server with tollgate's module
//              loaded (crates/redis-module, built when present): one round trip a check
//              thread, release build when present)
// each at 10k keys (drawn at random) and on one hot key, with 64 requests in flight, for a
// bounded time per case: checks/s, p50/p99 latency, CPU time per check of the client process
// and of redis-server (less sensitive than checks/s to other load on a shared machine), and
// Redis commands per check from INFO commandstats (reset before each case; commands run
// inside scripts are counted too).
// The policy: a fixed window of 1000 per second per key, for all three (rate-limiter-flexible's
// points: 1000, duration: 1 is a fixed window too). At 10k keys nearly every check is admitted;
// on the hot key nearly every check is denied (tollgate answers those from its deny cache
// until the retry time; rate-limiter-flexible increments its counter on each).
//
// Usage (from crates/wasm, after build.sh and
//   cargo build --release -p tollgate-redis --example storm && cargo build --release -p tollgate-redis-module;
//   with both -p in one command, --example limits the build to examples and skips the module):
//   node bench/redis.js [--ms 3000] [--rounds 1] [--warm 1000] [--floor] [--only tollgate,rlf] [--case 10k|hot]
// Each case runs in its own process: a warm-up of --warm ms (not measured), then --ms measured.
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

/** 64 workers checking random keys among `keys` for `ms`: every latency and the admitted count. */
async function runFor(check, keys, ms) {
  const latencies = [];
  let allowed = 0;
  const deadline = performance.now() + ms;
  await Promise.all(
    Array.from({ length: IN_FLIGHT }, async () => {
      while (performance.now() < deadline) {
        const key = `k${Math.floor(Math.random() * keys)}`;
        const t = performance.now();
        const ok = await check(key);
        latencies.push(performance.now() - t);
        if (ok) allowed++;
      }
    }),
  );
  return { latencies, allowed };
}

/**
 * The floor of the script protocol on ioredis: what tollgate's two round trips cost with no
 * decision, no wasm and no limiter around them. Each check sends the read script for its key
 * and then the commit script with the version read and a fixed 26-byte value, written to the
 * socket as tollgate/redis writes them (corked for one turn of the event loop).
 */
async function floor(client) {
  const { READ_SCRIPT, COMMIT_SCRIPT } = await import("../pkg/redis/scripts.js");
  const read = await client.script("LOAD", READ_SCRIPT);
  const commit = await client.script("LOAD", COMMIT_SCRIPT);
  const value = Buffer.alloc(26, 1);
  let corked = false;
  const send = (command, args) => {
    if (!corked) {
      const socket = client.stream;
      socket.cork();
      corked = true;
      process.nextTick(() => {
        corked = false;
        socket.uncork();
      });
    }
    return client.callBuffer(command, args);
  };
  return async (key) => {
    const slot = `floor:{bench:${key}}:0`;
    const got = await send("EVALSHA", [read, "1", slot]);
    const version = got[2].length === 0 ? "" : got[2].subarray(0, 8);
    await send("EVALSHA", [commit, "1", slot, "cas", version, "p", value, "2000"]);
    return true;
  };
}

/** One measurement in this (child) process. */
async function child(impl, port, keys, ms, warm) {
  const { default: Redis } = await import("ioredis");
  const client = new Redis({ port, host: "127.0.0.1" });
  await client.ping();
  let check;
  if (impl === "floor") check = await floor(client);
  else if (impl.startsWith("tollgate")) {
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
  // Warm up (JIT, wasm tier-up, connections, keys), then wait for the parent to reset Redis's
  // counters, then measure.
  await runFor(check, keys, warm);
  console.log(JSON.stringify({ warm: true }));
  await new Promise((resolve) => process.stdin.once("data", resolve));
  const cpu = process.cpuUsage();
  const started = performance.now();
  const { latencies, allowed } = await runFor(check, keys, ms);
  const seconds = (performance.now() - started) / 1000;
  const used = process.cpuUsage(cpu);
  latencies.sort((a, b) => a - b);
  const pct = (p) => latencies[Math.min(latencies.length - 1, Math.floor(latencies.length * p))];
  console.log(
    JSON.stringify({ checks: latencies.length, seconds, perSec: latencies.length / seconds, p50Ms: pct(0.5), p99Ms: pct(0.99), allowed, cpuMs: (used.user + used.system) / 1000 }),
  );
  client.disconnect();
}

/**
 * Runs a child: waits for its warm-up, calls `between()` (reset Redis's counters), starts the
 * measured phase and resolves with its result.
 */
function run(command, args, between) {
  return new Promise((resolve, reject) => {
    const c = spawn(command, args, { stdio: ["pipe", "pipe", "inherit"] });
    let buffered = "";
    let result;
    c.stdout.on("data", (d) => {
      buffered += d;
      let nl;
      while ((nl = buffered.indexOf("\n")) >= 0) {
        const msg = JSON.parse(buffered.slice(0, nl));
        buffered = buffered.slice(nl + 1);
        if (msg.warm) {
          between();
          c.stdin.end("go\n");
        } else result = msg;
      }
    });
    c.on("exit", (code) => (code === 0 && result ? resolve(result) : reject(new Error(`${command} exited ${code}`))));
  });
}

/** redis-server's CPU time so far, in ms (INFO cpu). */
function redisCpuMs(server) {
  const info = server.cli("INFO", "cpu");
  const field = (name) => Number(new RegExp(`${name}:([0-9.]+)`).exec(info)?.[1] ?? NaN);
  return 1000 * (field("used_cpu_user") + field("used_cpu_sys"));
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
    const [, , , impl, port, keys, ms, warm] = process.argv;
    return child(impl, Number(port), Number(keys), Number(ms), Number(warm));
  }
  const ms = arg("--ms", 3000);
  const rounds = arg("--rounds", 1);
  const warm = arg("--warm", 1000);
  const target = process.env.CARGO_TARGET_DIR ?? join(repo, "target");
  const release = join(target, "release/examples/storm");
  const debug = join(target, "debug/examples/storm");
  const rust = existsSync(release) ? release : existsSync(debug) ? debug : undefined;
  const plain = await Server.start();
  const moduleSo = [join(target, "release/libtollgate_redis_module.so"), join(target, "debug/libtollgate_redis_module.so")].find(existsSync);
  const withModule = moduleSo ? await Server.start(["--save", "", "--appendonly", "no", "--loadmodule", moduleSo]) : undefined;
  if (!moduleSo) console.log("(no module built: cargo build --release -p tollgate-redis-module)");
  // The suites build the module in debug; loaded here, it cost Redis about 5x the CPU a check
  // of the release build (56-60 against 12 µs inside the command, 2026-12-03).
  else if (moduleSo.includes("/debug/")) console.log("(the module is a debug build: its figures understate it; cargo build --release -p tollgate-redis-module)");
  const here = fileURLToPath(import.meta.url);
  const impls = [
    "tollgate",
    ...(process.argv.includes("--floor") ? ["floor"] : []),
    ...(withModule ? ["tollgate+module"] : []),
    "rlf",
    ...(rust ? ["rust"] : []),
    ...(rust && withModule ? ["rust+module"] : []),
  ];
  // --only tollgate,rlf: just those implementations (quick comparisons while tuning).
  const only = process.argv.includes("--only") ? process.argv[process.argv.indexOf("--only") + 1].split(",") : undefined;
  if (only) impls.splice(0, impls.length, ...impls.filter((i) => only.includes(i)));
  if (!rust) console.log("(no storm example built: cargo build --release -p tollgate-redis --example storm)");
  else if (rust === debug) console.log("(the Rust client is a debug build: its figures understate the crate)");
  const rows = [];
  try {
    for (let r = 1; r <= rounds; r++) {
      for (const [name, keys] of CASES.filter(([n]) => !process.argv.includes("--case") || n.startsWith(process.argv[process.argv.indexOf("--case") + 1]))) {
        for (const impl of impls) {
          const server = impl.endsWith("+module") ? withModule : plain;
          server.cli("FLUSHALL");
          let redisCpu;
          const between = () => {
            server.cli("CONFIG", "RESETSTAT");
            redisCpu = redisCpuMs(server);
          };
          const result =
            impl.startsWith("rust")
              ? await run(rust, ["bench", server.url, "bench", POLICY, String(keys), String(IN_FLIGHT), String(ms), "--warm", String(warm)], between)
              : await run(process.execPath, [here, "--child", impl, String(server.port), String(keys), String(ms), String(warm)], between);
          const serverCpuMs = redisCpuMs(server) - redisCpu;
          const calls = commandstats(server);
          const total = Object.values(calls).reduce((a, b) => a + b, 0);
          const perCheck = Object.entries(calls)
            .sort((a, b) => b[1] - a[1])
            .map(([c, n]) => `${c} ${(n / result.checks).toFixed(2)}`)
            .join(", ");
          rows.push({ round: r, case: name, impl, ...result, serverCpuMs, commands: total / result.checks, perCheck });
        }
      }
    }
  } finally {
    await plain.stop();
    if (withModule) await withModule.stop();
  }
  console.log(`fixed window ${LIMIT}/s per key, ${IN_FLIGHT} in flight, ${ms} ms per case after ${warm} ms of warm-up, ioredis ${await version("ioredis")}, rate-limiter-flexible ${await version("rate-limiter-flexible")}, Node ${process.version}`);
  console.log("| round | case | impl | checks/s | p50 ms | p99 ms | admitted | client CPU µs/check | redis-server CPU µs/check | Redis commands / check (by command) |");
  console.log("|---|---|---|---|---|---|---|---|---|---|");
  for (const x of rows) {
    console.log(
      `| ${x.round} | ${x.case} | ${x.impl} | ${Math.round(x.perSec)} | ${x.p50Ms.toFixed(2)} | ${x.p99Ms.toFixed(2)} | ${((100 * x.allowed) / x.checks).toFixed(1)}% | ${((1000 * x.cpuMs) / x.checks).toFixed(1)} | ${((1000 * x.serverCpuMs) / x.checks).toFixed(1)} | ${x.commands.toFixed(2)} (${x.perCheck}) |`,
    );
  }
}

async function version(name) {
  const r = spawnSync(process.execPath, ["-p", `require("${name}/package.json").version`], { encoding: "utf8", cwd: fileURLToPath(new URL("..", import.meta.url)) });
  return r.stdout.trim();
}

await main();
