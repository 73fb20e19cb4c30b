// RedisLimiter.acquire and throttle against a real redis-server (scripts, no module): the
// core's waiting rule (tollgate::wait::step through the wasm's waitStep; the wait is
// js/waiting.js), the line of waiters per key, the leaky queue's delay against the
// deadline, and aborts.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import Redis from "ioredis";
import { RedisLimiter, WaitTimeoutError } from "tollgate/redis";
import { WaitTimeoutError as MainWaitTimeoutError } from "tollgate";
import { Server } from "./support.js";

let server;
let client;

before(async () => {
  server = await Server.start();
  client = new Redis({ port: server.port, host: "127.0.0.1" });
  client.on("error", () => {});
});

after(async () => {
  client.disconnect();
  await server.stop();
});

const limiter = (policy) => new RedisLimiter(client, policy, { namespace: "acquire", fallback: "closed" });
const fresh = () => `k${Math.random()}`;

test("waits to the retry time, never before: one denied decision, then the admission", async () => {
  const l = limiter("gcra 10/s burst 1");
  const key = fresh();
  const t0 = performance.now(); // before the check: its admission starts the 100 ms
  assert.equal((await l.check(key)).allowed, true);
  const d = await l.acquire(key, { maxWait: 2000 });
  const waited = performance.now() - t0;
  assert.equal(d.allowed, true);
  assert.equal(d.source, "redis");
  assert.ok(waited >= 99, `admitted ${waited} ms after the first, before the retry time (100 ms)`);
  // check, the denial that set the sleep, the admission: no early decisions in between.
  assert.equal(l.stats().redis, 3, JSON.stringify(l.stats()));
});

test("gives up at once when the retry time is beyond the deadline, uncharged, with the package's WaitTimeoutError", async () => {
  const l = limiter("token-bucket 2/10s"); // spent: the next token in 5 s (a fixed window's end could be near)
  const key = fresh();
  await l.check(key);
  await l.check(key);
  const before = await l.peek(key);
  const t0 = performance.now();
  await assert.rejects(l.acquire(key, { maxWait: 1000 }), (e) => {
    assert.ok(e instanceof WaitTimeoutError && e instanceof MainWaitTimeoutError, String(e));
    assert.ok(e.retryAfter > 1000, `retryAfter ${e.retryAfter}`);
    assert.ok(e.waited < 1000, `waited ${e.waited}: it slept to the deadline`);
    return true;
  });
  assert.ok(performance.now() - t0 < 1000);
  const after = await l.peek(key);
  assert.equal(after.remaining, before.remaining);
  // A full concurrency limit has no retry time: give up at once, retryAfter 0.
  const c = limiter("concurrency 1");
  const ck = fresh();
  await c.check(ck);
  await assert.rejects(c.acquire(ck, { maxWait: 5000 }), (e) => e instanceof WaitTimeoutError && e.retryAfter === 0);
});

test("waiters for one key are served in arrival order", async () => {
  const l = limiter("gcra 20/s burst 1"); // one every 50 ms
  const key = fresh();
  const order = [];
  const all = ["a", "b", "c", "d", "e"].map((name) => l.acquire(key, { maxWait: 5000 }).then(() => order.push(name)));
  await Promise.all(all);
  assert.deepEqual(order, ["a", "b", "c", "d", "e"]);
});

test("a leaky queue's delay counts against the deadline; an admission that does not fit is not kept", async () => {
  const l = limiter("leaky-queue 10/s burst 5"); // one leaves every 100 ms
  const key = fresh();
  const first = await l.check(key);
  const before = await l.peek(key);
  await assert.rejects(l.acquire(key, { maxWait: first.delay + 50 }), (e) => {
    assert.ok(e instanceof WaitTimeoutError, String(e));
    assert.ok(e.retryAfter > first.delay + 50, `retryAfter ${e.retryAfter}`);
    return true;
  });
  const after = await l.peek(key);
  assert.equal(after.remaining, before.remaining, "the place in the queue was given back");
  const t0 = performance.now();
  const d = await l.acquire(key, { maxWait: 2000 });
  assert.ok(d.allowed && d.delay > first.delay, JSON.stringify(d));
  assert.ok(performance.now() - t0 >= d.delay - 2, "resolved after its delay");
});

test("an abort mid-wait rejects with the signal's reason and charges nothing; the next waiter goes on", async () => {
  const l = limiter("gcra 1/300ms burst 1");
  const key = fresh();
  await l.check(key);
  const ac = new AbortController();
  const waiting = l.acquire(key, { maxWait: 5000, signal: ac.signal });
  const behind = l.acquire(key, { maxWait: 5000 });
  setTimeout(() => ac.abort(new Error("stop")), 30);
  await assert.rejects(waiting, /stop/);
  const d = await behind;
  assert.equal(d.allowed, true, "the waiter behind was admitted: the aborted one took nothing");
  assert.equal((await l.peek(key)).remaining, 0);
  await assert.rejects(l.acquire(key, { signal: AbortSignal.abort(new Error("already")) }), /already/);
});

test("throttle waits for a turn before each call; bad options name the field", async () => {
  const l = limiter("gcra 20/s burst 1");
  const key = fresh();
  const calls = [];
  const f = l.throttle(async (x) => calls.push(x) && x * 2, { key: (x) => `${key}`, maxWait: 5000 });
  assert.deepEqual(await Promise.all([f(1), f(2), f(3)]), [2, 4, 6]);
  assert.deepEqual(calls, [1, 2, 3]);
  await assert.rejects(l.acquire(key, { maxWait: -1 }), (e) => e instanceof RangeError && e.field === "maxWait");
  await assert.rejects(l.acquire(key, { jitter: "x" }), (e) => e instanceof TypeError && e.field === "jitter");
  assert.throws(() => l.throttle(1), (e) => e.field === "fn");
});
