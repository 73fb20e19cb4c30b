// A Node client process for the cross-runtime test, the twin of crates/redis/examples/storm.rs:
//   node storm.js serve <redis url> <namespace> [--client ioredis|node-redis]
// prints {"ready":true} once connected, then for every line `<policy>\t<key>\t<checks>` on
// stdin fires <checks> concurrent checks of cost 1 on <key> (a new limiter per line, one
// connection) and prints {"admitted":n,...} as one JSON line.
import { createInterface } from "node:readline";
import { RedisLimiter } from "tollgate/redis";
import { connectTo } from "./support.js";

const [mode, url, namespace, ...flags] = process.argv.slice(2);
if (mode !== "serve") {
  console.error("usage: node storm.js serve <redis url> <namespace> [--client ioredis|node-redis]");
  process.exit(2);
}
const { client, close } = await connectTo(url, flags.includes("--client") ? flags[flags.indexOf("--client") + 1] : "ioredis");

async function storm(policy, key, checks) {
  const limiter = new RedisLimiter(client, policy, { namespace, fallback: "closed", timeout: 5000 });
  const results = await Promise.allSettled(Array.from({ length: checks }, () => limiter.check(key)));
  let admitted = 0;
  let notRedis = 0;
  let errors = 0;
  for (const r of results) {
    if (r.status === "rejected") {
      console.error(`storm: ${r.reason}`);
      errors++;
      continue;
    }
    admitted += r.value.allowed ? 1 : 0;
    notRedis += r.value.source === "redis" || r.value.source === "deny-cache" ? 0 : 1;
  }
  const s = limiter.stats();
  limiter.free();
  return { admitted, notRedis, errors, roundTrips: s.roundTrips, conflicts: s.conflicts };
}

console.log(JSON.stringify({ ready: true }));
for await (const line of createInterface({ input: process.stdin })) {
  const [policy, key, checks] = line.split("\t");
  console.log(JSON.stringify(await storm(policy, key, Number(checks))));
}
await close();
