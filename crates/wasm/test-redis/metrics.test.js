// tollgate/redis' counts (issue 29) against real redis-server processes: decisions by where
// they were made (Redis, the deny cache, the declared fallback), failed calls by the declared
// behaviour and reason once Redis is stopped, waits; as objects and as the core's Prometheus
// text, so that an operator can tell from the metrics alone that a fleet runs on its fallback.
import { test } from "node:test";
import assert from "node:assert/strict";
import Redis from "ioredis";
import { createClient as createClient6 } from "redis6";
import { RedisLimiter, TESTING } from "tollgate/redis";
import { prometheus } from "tollgate/metrics";
import { Server, closeAll } from "./support.js";

const TIMERS = Symbol.for("tollgate.testing.timers");

/** An ioredis client, connected (without an offline queue it refuses commands until then). */
async function ioredis(s, clients, options = {}) {
  const c = new Redis({ port: s.port, host: "127.0.0.1", ...options });
  c.on("error", () => {}); // connection errors reach the limiter through its calls
  clients.push(c);
  if (c.status !== "ready") await new Promise((resolve) => c.once("ready", resolve));
  return c;
}

async function nodeRedis6(s, clients, options = {}) {
  const c = createClient6({ url: s.url, ...options });
  c.on("error", () => {});
  await c.connect();
  clients.push(c);
  return c;
}

const bySource = (store, denyCache, fallback) => ({ store, denyCache, fallback });

test("decisions by source: Redis, then the deny cache; acquire's waits", async () => {
  const s = await Server.start();
  const clients = [];
  try {
    const l = new RedisLimiter(await ioredis(s, clients), "fixed-window 3/hour", { namespace: "m", fallback: "closed", name: "fleet" });
    const sources = [];
    for (let i = 0; i < 5; i++) sources.push((await l.check("k")).source);
    assert.deepEqual(sources, ["redis", "redis", "redis", "redis", "deny-cache"]);
    l.peek("k");
    // Two waits on a clock the test moves: admitted at once, then given up (an hour away).
    let now = 0;
    const opts = { [TIMERS]: { clock: () => now, sleep: async (ms) => void (now += ms) } };
    await l.acquire("w", { ...opts, cost: 3 });
    await assert.rejects(l.acquire("w", { ...opts, maxWait: 10 }), (e) => e.name === "WaitTimeoutError");
    const [c] = l.metrics();
    assert.equal(c.policy, "fleet");
    assert.deepEqual(c.decisions.admitted, bySource(4, 0, 0));
    assert.deepEqual(c.decisions.denied, bySource(2, 1, 0));
    assert.equal(c.nearLimit, 2, "the 3rd of 3 on k, the only one on w");
    assert.equal(c.wait.admitted.count, 1);
    assert.equal(c.wait.gaveUp.count, 1);
    assert.equal(c.wait.gaveUp.sum, 0);
    for (const b of ["open", "closed", "local"]) {
      assert.deepEqual(c.storeFailures[b], { unreachable: 0, timeout: 0, indeterminate: 0 });
    }
  } finally {
    await closeAll(clients);
    await s.stop();
  }
});

test("Redis stopped: every fallback decision counted as such, one failed call per declared behaviour", async () => {
  const s = await Server.start();
  const clients = [];
  try {
    // No probe during the test (a second failed call would depend on the machine's speed),
    // and clients that refuse a command at once while disconnected (with their offline
    // queues, the call would wait for the timeout instead: reason "timeout").
    const opts = (fallback, name) => ({ namespace: "outage", fallback, name, timeout: 60_000, probeEvery: 600_000 });
    const fast = { enableOfflineQueue: false };
    const local = new RedisLimiter(await ioredis(s, clients, fast), "fixed-window 3/hour", opts("local", "local"));
    const open = new RedisLimiter(await nodeRedis6(s, clients, { disableOfflineQueue: true }), "fixed-window 3/hour", opts("open", "open"));
    const closed = new RedisLimiter(await ioredis(s, clients, fast), "fixed-window 3/hour", opts("closed", "closed"));
    for (const l of [local, open, closed]) assert.equal((await l.check("warm")).source, "redis");

    await s.kill();
    const got = [];
    for (let i = 0; i < 4; i++) got.push((await local.check("k")).allowed);
    for (let i = 0; i < 2; i++) got.push((await open.check("k")).allowed);
    for (let i = 0; i < 2; i++) got.push((await closed.check("k")).allowed);
    assert.deepEqual(got, [true, true, true, false, true, true, false, false]);

    const [l] = local.metrics();
    const [o] = open.metrics();
    const [c] = closed.metrics();
    assert.deepEqual(l.decisions.admitted, bySource(1, 0, 3));
    assert.deepEqual(l.decisions.denied, bySource(0, 0, 1));
    assert.deepEqual(o.decisions.admitted, bySource(1, 0, 2));
    assert.deepEqual(c.decisions.admitted, bySource(1, 0, 0));
    assert.deepEqual(c.decisions.denied, bySource(0, 0, 2));
    const none = { unreachable: 0, timeout: 0, indeterminate: 0 };
    const one = { unreachable: 1, timeout: 0, indeterminate: 0 };
    assert.deepEqual(l.storeFailures, { open: none, closed: none, local: one });
    assert.deepEqual(o.storeFailures, { open: one, closed: none, local: none });
    assert.deepEqual(c.storeFailures, { open: none, closed: one, local: none });

    // The operator's view: the core's text says the fleet decides on its fallback.
    const lines = prometheus([local, open, closed]).split("\n");
    for (const line of [
      'tollgate_decisions_total{tollgate_policy="local",tollgate_outcome="admitted",tollgate_source="fallback"} 3',
      'tollgate_decisions_total{tollgate_policy="open",tollgate_outcome="admitted",tollgate_source="fallback"} 2',
      'tollgate_decisions_total{tollgate_policy="closed",tollgate_outcome="denied",tollgate_source="fallback"} 2',
      'tollgate_store_failures_total{tollgate_policy="local",tollgate_failure_behaviour="local",tollgate_failure_reason="unreachable"} 1',
      'tollgate_store_failures_total{tollgate_policy="open",tollgate_failure_behaviour="open",tollgate_failure_reason="unreachable"} 1',
      'tollgate_store_failures_total{tollgate_policy="closed",tollgate_failure_behaviour="closed",tollgate_failure_reason="unreachable"} 1',
    ]) {
      assert.ok(lines.includes(line), `missing ${line}`);
    }
    assert.equal(closed.prometheus(), prometheus(closed));
  } finally {
    await closeAll(clients);
    await s.stop();
  }
});

test("concurrency in use: slots this process took by admissions (check, acquire), given back by release", async () => {
  const s = await Server.start();
  const clients = [];
  try {
    const l = new RedisLimiter(await ioredis(s, clients), "concurrency 4", { namespace: "slots", fallback: "closed", name: "uploads" });
    assert.equal((await l.check("a")).allowed, true);
    assert.equal((await l.check("a", { cost: 2 })).allowed, true);
    assert.equal((await l.check("a", { cost: 2 })).allowed, false, "3 of 4 held: a denial takes nothing");
    await l.acquire("b", { maxWait: 1000 });
    assert.equal(l.metrics()[0].concurrencyInUse, 4);
    await l.release("a", { cost: 2 });
    await l.release("b");
    assert.equal(l.metrics()[0].concurrencyInUse, 1);
    assert.ok(prometheus(l).split("\n").includes('tollgate_concurrency_in_use{tollgate_policy="uploads"} 1'), prometheus(l));
    // Without a concurrency limit there is no gauge.
    const plain = new RedisLimiter(await ioredis(s, clients), "fixed-window 5/hour", { namespace: "plain", fallback: "closed" });
    await plain.check("a");
    assert.equal(plain.metrics()[0].concurrencyInUse, undefined);
  } finally {
    await closeAll(clients);
    await s.stop();
  }
});
