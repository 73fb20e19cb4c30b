// RedisLimiter.acquire keeps the core's waiting rule against a real redis-server (scripts,
// and a server with tollgate's module loaded), where it once broke it: a wake after the
// deadline charged the key and then timed out; a caller queued behind another waited out its
// whole deadline and reported retryAfter 0; jitter clamped to the deadline turned a wait
// that fit into a timeout (and a charge).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import Redis from "ioredis";
import { RedisLimiter, WaitTimeoutError, TESTING } from "tollgate/redis";
import { Server, repo } from "./support.js";

const MODULE = join(process.env.CARGO_TARGET_DIR ?? join(repo, "target"), "debug/libtollgate_redis_module.so");

const servers = {};
const clients = [];

before(async () => {
  servers.scripts = await Server.start();
  assert.ok(existsSync(MODULE), `${MODULE} is missing: cargo build -p tollgate-redis-module`);
  // TESTCLOCK: the module accepts NOW <ms>, so the waiting vectors replay at their own times.
  servers.module = await Server.start(["--save", "", "--appendonly", "no", "--loadmodule", MODULE, "TESTCLOCK"]);
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
    // The retry time (~2 s) fits the 2.5 s deadline; 60 s of jitter must not push the wake onto it.
    const d = await l.acquire(key, { tenant: "t1", maxWait: 2500, jitter: 60_000 });
    assert.equal(d.allowed, true);
    // Charged once, in the windows it was admitted in: the tenant's window is spent.
    const peek = await l.peek(key, { tenant: "t1" });
    assert.equal(peek.each[1].remaining, 0, JSON.stringify(peek));
  });

  test(`${mode}: a wake after the deadline charges nothing and reports the key's retry time`, async () => {
    const l = limiter(mode, "gcra 1/s burst 1");
    const key = fresh();
    assert.equal((await l.check(key)).allowed, true);
    // The waiter sleeps ~1 s to the retry time; 300 ms in, the event loop is blocked 2 s,
    // so its timer fires ~800 ms after its 1.5 s deadline (the key free again by then).
    setTimeout(() => block(2000), 300);
    const t0 = performance.now();
    await assert.rejects(l.acquire(key, { maxWait: 1500 }), (e) => {
      assert.ok(e instanceof WaitTimeoutError, String(e));
      assert.ok(performance.now() - t0 >= 2300, "not late");
      assert.ok(e.waited > 1500, `waited ${e.waited}`);
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
    head.catch(() => {}); // awaited below; a failure here must not go unhandled meanwhile
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

// The waiting vectors (tests/vectors/waiting/*.json; the format is in the core's
// tests/waiting.rs), on the scripts and through the module (NOW at the test clock, which
// needs TESTCLOCK): decisions at a test clock that only the waiter's sleeps move (each
// `late` longer), the jitter drawn always the vector's.
const vectors = fileURLToPath(new URL("../../../tests/vectors/waiting/", import.meta.url));
/** acquire's test-only timers (see js/waiting.js): `{ clock, sleep }`. */
const TIMERS = Symbol.for("tollgate.testing.timers");

for (const mode of ["scripts", "module"]) {
  test(`${mode}: the waiting vectors replay`, async () => {
    const files = readdirSync(vectors).filter((f) => f.endsWith(".json")).sort();
    assert.ok(files.length >= 5, files.join());
    for (const file of files) {
      const v = JSON.parse(readFileSync(vectors + file, "utf8"));
      let now = 0;
      const client = new Redis({ port: servers[mode].port, host: "127.0.0.1" });
      client.on("error", () => {});
      clients.push(client);
      const namespace = `vectors:${Math.random()}`;
      const l = new RedisLimiter(client, v.policy, { namespace, fallback: "closed", timeout: 5000, [TESTING]: { clock: () => now } });
      const timers = {
        clock: () => now,
        sleep: async (ms) => {
          now += ms + v.late;
        },
      };
      for (const [i, step] of v.steps.entries()) {
        now = Math.max(now, step.at);
        const what = `${mode} ${file} step ${i}: ${JSON.stringify(step)}`;
        if (step.check !== undefined) {
          assert.equal((await l.check("k", { cost: step.check })).allowed, step.allowed, what);
          continue;
        }
        try {
          await l.acquire("k", { ...step.acquire, [TIMERS]: timers });
          assert.equal(now, step.admittedAt, `${what}: admitted`);
        } catch (e) {
          if (!(e instanceof WaitTimeoutError)) throw e;
          assert.equal(now, step.gaveUpAt, `${what}: gave up (${e.message})`);
          assert.equal(e.retryAfter, step.retryAfter, what);
        }
        assert.equal((await l.peek("k")).remaining, step.remaining, `${what}: remaining`);
      }
    }
  });
}
