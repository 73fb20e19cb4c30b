// RedisLimiter.reserve and settle on a real redis-server (scripts; the module's are in
// module.test.js): the shared settle vectors, and the settle's idempotency where only a
// fleet store can lose it: a retry from another limiter (a restarted process), a Redis that
// is down, a reservation of another kind of limiter.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Limiter } from "tollgate";
import { RedisLimiter, RedisLimiterError } from "tollgate/redis";
import { serverForTests } from "./support.js";
import { replayOnRedis, settleVectors } from "./settle-vectors.js";

const redis = serverForTests();
const ioredis = () => redis.ioredis({ maxRetriesPerRequest: 1 });
const nodeRedis = () => redis.nodeRedis();

for (const [name, connect] of [
  ["ioredis", ioredis],
  ["node-redis", nodeRedis],
]) {
  test(`the settle vectors replay through Redis's scripts with the core's answers (${name}, test clock)`, async () => {
    const client = await connect();
    const vectors = settleVectors();
    assert.ok(vectors.length >= 9, `${vectors.length} vectors`);
    let steps = 0;
    for (const v of vectors) {
      const r = await replayOnRedis(client, v, `settle-${name}`);
      assert.deepEqual(r.failures, [], v.name);
      steps += r.steps;
    }
    assert.ok(steps > 100, `only ${steps} steps`);
  });
}

function limiter(client, policy = "fixed-window 1000/1d", options = {}) {
  return new RedisLimiter(client, policy, { namespace: "settle", fallback: "closed", timeout: 500, denyCache: false, ...options });
}

test("a settle retried by another limiter (a restarted process) answers the first settle and charges once", async () => {
  const first = limiter(ioredis());
  const d = await first.reserve("k", 800);
  assert.equal(d.remaining, 200);
  const kept = JSON.parse(JSON.stringify(d.reservation));
  const done = await first.settle(d.reservation, 300);
  assert.deepEqual(done, { refunded: 500, charged: 0, unpaid: 0 });
  // The scripts were loaded by the vector tests: a stream is 2 + 2 round trips (read and
  // commit, then read and settle), as the Rust crate's (PERF.md).
  assert.equal(first.stats().roundTrips, 4);
  const restarted = limiter(await nodeRedis());
  assert.deepEqual(await restarted.settle(kept, 100), done, "the first settle's outcome, not a second refund");
  assert.equal(restarted.stats().roundTrips, 1, "the record answers at the read");
  assert.equal((await restarted.peek("k")).remaining, 700, "charged 300 once");
  // The record is the Rust crate's: under the key's hash tag, named by the id in hex.
  const record = `tollgate:{settle:k}:s:${BigInt(kept.id).toString(16)}`;
  assert.equal(redis.server.cli("GET", record), "500 0 0");
  const ttl = Number(redis.server.cli("PTTL", record));
  assert.ok(ttl > 86_400_000 && ttl <= 86_401_000, `kept a window and the grace: ${ttl} ms`);
});

test("an overage is charged as a debt by default, or only up to the limit and reported unpaid", async () => {
  const l = limiter(ioredis(), "fixed-window 10/1d", { namespace: "settle-over" });
  const a = await l.reserve("debt", 8);
  assert.deepEqual(await l.settle(a.reservation, 15), { refunded: 0, charged: 7, unpaid: 0 });
  const after = await l.check("debt");
  assert.equal(after.allowed, false);
  const b = await l.reserve("upto", 8);
  assert.deepEqual(await l.settle(b.reservation, 15, { overage: "up-to-limit" }), { refunded: 0, charged: 2, unpaid: 5 });
});

test("a reservation of an in-memory Limiter, of another namespace or for another key is refused by name, before any round trip", async () => {
  const l = limiter(ioredis(), "fixed-window 10/1d", { namespace: "settle-foreign" });
  const memory = new Limiter("fixed-window 10/1d");
  const m = memory.reserve("k", 2).reservation;
  await assert.rejects(l.settle(m, 1), { name: "RangeError", field: "reservation", rule: "foreign-limiter" });
  const other = limiter(ioredis(), "fixed-window 10/1d", { namespace: "settle-foreign-2" });
  const r = (await l.reserve("k", 2)).reservation;
  const sent = l.stats().roundTrips + other.stats().roundTrips;
  await assert.rejects(other.settle(r, 1), { rule: "foreign-limiter" });
  const wider = limiter(ioredis(), "fixed-window 11/1d", { namespace: "settle-foreign" });
  await assert.rejects(wider.settle(r, 1), { rule: "foreign-policy" });
  await assert.rejects(l.settle({ ...r, key: "j" }, 1), { rule: "foreign-key" });
  await assert.rejects(l.settle(r, 2 ** 40 + 1), { field: "actual", rule: "actual-too-large" });
  await assert.rejects(l.settle(r, 1.5), { field: "actual", rule: "not-a-number" });
  await assert.rejects(l.settle({ ...r, id: "x" }, 1), { field: "reservation", rule: "not-a-reservation" });
  assert.equal(l.stats().roundTrips + other.stats().roundTrips + wider.stats().roundTrips, sent, "no settle went to Redis");
  // Refused, the reservation stays charged and settles on its own key.
  assert.deepEqual(await l.settle(r, 0), { refunded: 2, charged: 0, unpaid: 0 });
  memory.free();
});

test("with Redis down a reserve falls back without a reservation, and a settle is settle-unknown, charging once when retried", async () => {
  const c = ioredis();
  const l = limiter(c, "fixed-window 10/1d", { namespace: "settle-down", fallback: "open", probeEvery: 50 });
  const d = await l.reserve("k", 4);
  assert.equal(d.remaining, 6);
  redis.server.cli("CLIENT", "PAUSE", "1000", "ALL");
  const settled = l.settle(d.reservation, 1);
  await assert.rejects(settled, (e) => e instanceof RedisLimiterError && e.code === "settle-unknown" && e.why === "timeout");
  const fallen = await l.reserve("k", 1);
  assert.equal(fallen.source, "fallback");
  assert.equal(fallen.reservation, undefined, "nothing charged on Redis: nothing to settle");
  redis.server.cli("CLIENT", "UNPAUSE");
  await new Promise((r) => setTimeout(r, 60)); // the next probe
  // The lost settle may or may not have run; the retry charges 1 in all, once.
  const again = await l.settle(d.reservation, 1);
  assert.deepEqual(again, { refunded: 3, charged: 0, unpaid: 0 });
  assert.equal((await l.peek("k")).remaining, 9);
});

test("a leaky queue refuses a reserve, a concurrency limit a settle, by name", async () => {
  const c = ioredis();
  await assert.rejects(limiter(c, "leaky-queue 10/s").reserve("k", 1), { field: "policy", rule: "not-settleable" });
  const conc = limiter(c, "concurrency 5", { namespace: "settle-conc" });
  const d = await conc.reserve("k", 2);
  await assert.rejects(conc.settle(d.reservation, 1), { rule: "not-settleable" });
});
