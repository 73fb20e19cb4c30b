// A Node client process for the cross-runtime reserve-and-settle tests
// (settle-fleet.test.js), the twin of crates/redis/examples/settler.rs:
//   node settler.js <redis url> <namespace> <policy> <clock ms> [--client ioredis|node-redis]
// decides at a test clock held at <clock ms>, prints {"ready":true} once connected, then
// answers each line of stdin with one JSON line:
//   streams\t<key>\t<count>    <count> concurrent streams, each starting within 200 ms,
//       reserving 100-1,000 and settling a random actual cost up to its estimate 0-20 ms
//       later (every fifth settle sent twice): {"admitted","actual","errors"}
//   reserve\t<key>\t<estimate> {"allowed","remaining","reservation"}
//   settle\t<reservation JSON>\t<actual>  the settlement, or {"error"}
//   hold\t<key>\t<estimate>\t<count>   <count> reserves kept open, never settled: {"reserved"}
import { createInterface } from "node:readline";
import { RedisLimiter, TESTING } from "tollgate/redis";
import { connectTo } from "./support.js";

const [url, namespace, policy, clock, ...flags] = process.argv.slice(2);
if (clock === undefined) {
  console.error("usage: node settler.js <redis url> <namespace> <policy> <clock ms> [--client ioredis|node-redis]");
  process.exit(2);
}
const { client, close } = await connectTo(url, flags.includes("--client") ? flags[flags.indexOf("--client") + 1] : "ioredis");
const now = Number(clock);
// Long enough that the streams on one key never give up on conflicts.
const limiter = new RedisLimiter(client, policy, { namespace, fallback: "closed", timeout: 10_000, retryFor: 10_000, [TESTING]: { clock: () => now } });

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const between = (lo, hi) => lo + Math.floor(Math.random() * (hi - lo + 1));

/** One stream: start, reserve, hold, settle (twice when `twice`); its actual cost when admitted. */
async function stream(key, twice) {
  await sleep(between(0, 199));
  const estimate = between(100, 1_000);
  const { reservation } = await limiter.reserve(key, estimate);
  if (reservation === undefined) return undefined;
  const actual = between(0, estimate);
  await sleep(between(0, 20));
  await limiter.settle(reservation, actual);
  if (twice) await limiter.settle(reservation, actual);
  return actual;
}

async function streams(key, count) {
  const results = await Promise.allSettled(Array.from({ length: count }, (_, i) => stream(key, i % 5 === 0)));
  let admitted = 0;
  let actual = 0;
  let errors = 0;
  for (const r of results) {
    if (r.status === "rejected") {
      console.error(`settler: ${r.reason}`);
      errors++;
    } else if (r.value !== undefined) {
      admitted++;
      actual += r.value;
    }
  }
  return { admitted, actual, errors };
}

async function answer(line) {
  const [op, a, b, c] = line.split("\t");
  try {
    if (op === "streams") return await streams(a, Number(b));
    if (op === "reserve") {
      const d = await limiter.reserve(a, Number(b));
      return { allowed: d.allowed, remaining: d.remaining, reservation: d.reservation ?? null };
    }
    if (op === "settle") return await limiter.settle(JSON.parse(a), Number(b));
    if (op === "hold") {
      // Reservations kept open, never settled (the test then kills this process).
      let reserved = 0;
      for (let i = 0; i < Number(c); i++) if ((await limiter.reserve(a, Number(b))).reservation !== undefined) reserved += Number(b);
      return { reserved };
    }
    return { error: `unknown line ${JSON.stringify(line)}` };
  } catch (e) {
    return { error: String(e) };
  }
}

console.log(JSON.stringify({ ready: true }));
for await (const line of createInterface({ input: process.stdin })) console.log(JSON.stringify(await answer(line)));
limiter.free();
await close();
