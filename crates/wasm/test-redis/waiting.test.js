// RedisLimiter.acquire keeps the core's waiting rule against a real redis-server (scripts,
// and a server with tollgate's module loaded), where it once broke it: a wake after the
// deadline charged the key and then timed out; a caller queued behind another waited out its
// whole deadline and reported retryAfter 0; jitter clamped to the deadline turned a wait
// that fit into a timeout (and a charge).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { join } from "node:path";
import Redis from "ioredis";
import { RedisLimiter, WaitTimeoutError } from "tollgate/redis";
import { Server, repo } from "./support.js";

const MODULE = join(process.env.CARGO_TARGET_DIR ?? join(repo, "target"), "debug/libtollgate_redis_module.so");

const servers = {};
const clients = [];

before(async () => {
  servers.scripts = await Server.start();
  assert.ok(existsSync(MODULE), `${MODULE} is missing: cargo build -p tollgate-redis-module`);
  servers.module = await Server.start(["--save", "", "--appendonly", "no", "--loadmodule", MODULE]);
});

after(async () => {
  for (const c of clients) c.disconnect();
  for (const s of Object.values(servers)) await s.stop();
});

function limiter(mode, limits) {
  const client = new Redis({ port: servers[mode].port, host: "127.0.0.1" });
  client.on("error", () => {});
  clients.push(client);
  return new RedisLimiter(client, limits, { namespace: "waiting", fallback: "closed", timeout: 5000 });
}

const fresh = () => `k${Math.random()}`;

/** Blocks the event loop for `ms` (as a loaded machine delays a timer). */
function block(ms) {
  const end = performance.now() + ms;
  while (performance.now() < end);
}

for (const mode of ["scripts", "module"]) {
  test(`${mode}: the issue's repro, a wait that fits with heavy jitter, is admitted`, async () => {
    const l = limiter(mode, { fairShare: { shared: "fixed-window 2/2s", tenant: "fixed-window 1/2s" } });
    const key = fresh();
    assert.equal((await l.acquire(key, { tenant: "t1", maxWait: 2500 })).allowed, true);
    const t0 = performance.now();
    // The retry time (~2 s) fits the 2.5 s deadline; 60 s of jitter must not push the wake onto it.
    const d = await l.acquire(key, { tenant: "t1", maxWait: 2500, jitter: 60_000 });
    assert.equal(d.allowed, true);
    assert.ok(performance.now() - t0 < 2500);
    // Charged once, in the windows it was admitted in: the tenant's window is spent.
    const peek = await l.peek(key, { tenant: "t1" });
    assert.equal(peek.each[1].remaining, 0, JSON.stringify(peek));
  });

  test(`${mode}: a wake after the deadline charges nothing and reports the key's retry time`, async () => {
    const l = limiter(mode, "gcra 10/s burst 1");
    const key = fresh();
    assert.equal((await l.check(key)).allowed, true);
    // The waiter sleeps ~100 ms to the retry time; 30 ms in, the event loop is blocked
    // 400 ms, so its timer fires ~250 ms after its 150 ms deadline.
    setTimeout(() => block(400), 30);
    const t0 = performance.now();
    await assert.rejects(l.acquire(key, { maxWait: 150 }), (e) => {
      assert.ok(e instanceof WaitTimeoutError, String(e));
      assert.ok(performance.now() - t0 >= 400, "not late");
      assert.ok(e.waited > 150, `waited ${e.waited}`);
      // The key was free again when the waiter woke: its retry time is now.
      assert.equal(e.retryAfter, 0);
      return true;
    });
    assert.equal((await l.peek(key)).remaining, 1, "the late wake was charged");
  });

  test(`${mode}: a queued caller with a short deadline fails at once with the key's retry time`, async () => {
    const l = limiter(mode, "gcra 1/2s burst 1");
    const key = fresh();
    assert.equal((await l.check(key)).allowed, true);
    const head = l.acquire(key, { maxWait: 5000 });
    await new Promise((r) => setTimeout(r, 100)); // the head is asleep to the retry time
    const t0 = performance.now();
    await assert.rejects(l.acquire(key, { maxWait: 800 }), (e) => {
      assert.ok(e instanceof WaitTimeoutError, String(e));
      assert.ok(performance.now() - t0 < 500, `waited out its deadline: ${performance.now() - t0} ms`);
      assert.ok(e.waited < 500, `waited ${e.waited}`);
      assert.ok(e.retryAfter > 1000 && e.retryAfter <= 2000, `retryAfter ${e.retryAfter}, not the key's`);
      return true;
    });
    assert.equal((await head).allowed, true);
    assert.equal((await l.peek(key)).remaining, 0, "only the head was charged");
  });
}
