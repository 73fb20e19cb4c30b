// Waiting for a turn (Limiter.acquire / throttle) in the built package. Most tests run on
// node:test's mock timers (setTimeout and Date), moved one millisecond at a time, so every
// time asserted is exact; the last one runs on real timers.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Limiter, WaitTimeoutError } from "tollgate";

/** Lets every pending promise continuation run (setImmediate is not mocked). */
const flush = () => new Promise((resolve) => setImmediate(resolve));

/** Moves the mock clock `ms` milliseconds, one at a time, running what each step wakes. */
async function advance(t, ms) {
  await flush();
  for (let i = 0; i < ms; i++) {
    t.mock.timers.tick(1);
    await flush();
  }
}

/** Starts `n` waiters on `key` in arrival order; each records when it resolved. */
function waiters(limiter, n, opts, key = "k") {
  const got = new Array(n).fill(undefined);
  const all = Array.from({ length: n }, (_, i) =>
    limiter.acquire(key, opts).then(
      () => (got[i] = Date.now()),
      (e) => (got[i] = e),
    ),
  );
  return { got, all: Promise.all(all) };
}

const mockClock = (t) => t.mock.timers.enable({ apis: ["setTimeout", "Date"], now: 0 });

test("five waiters wake at each algorithm's exact times", async (t) => {
  mockClock(t);
  const cases = [
    ["token-bucket 10/s burst 2", [0, 0, 100, 200, 300]],
    ["gcra 10/s burst 2", [0, 0, 100, 200, 300]],
    ["leaky-bucket 10/s burst 2", [0, 0, 100, 200, 300]],
    ["fixed-window 2/s", [0, 0, 1000, 1000, 2000]],
    ["sliding-log 2/s", [0, 0, 1000, 1000, 2000]],
    // One nanosecond into the next window, rounded up to the millisecond (never early).
    ["sliding-window 2/s", [0, 0, 1001, 1501, 2001]],
    // A shaper: each leaves 100 ms after the one before.
    ["leaky-queue 10/s burst 2", [100, 200, 300, 400, 500]],
  ];
  for (const [policy, expected] of cases) {
    await advance(t, (1_000 - (Date.now() % 1_000)) % 1_000); // windows start on the second
    const start = Date.now();
    const { got, all } = waiters(new Limiter(policy), 5, { maxWait: 10_000 });
    await advance(t, 2_100);
    await all;
    assert.deepEqual(got.map((at) => at - start), expected, policy);
  }
});

test("100 waiters on a 10/s key are admitted at 10/s, in arrival order, none early", async (t) => {
  mockClock(t);
  // Counts the timers acquire sets (over the mock setTimeout).
  const mocked = globalThis.setTimeout;
  let timers = 0;
  globalThis.setTimeout = (...args) => (timers++, mocked(...args));
  t.after(() => (globalThis.setTimeout = mocked));
  const limiter = new Limiter("gcra 10/s burst 1");
  const { got, all } = waiters(limiter, 100, {});
  await advance(t, 9_950);
  await all;
  assert.deepEqual(got, Array.from({ length: 100 }, (_, i) => i * 100));
  // One sleep per waiter after the first, to its retry time once it leads the line, and no
  // more: waiters are woken one decision at a time, and none to a denial.
  assert.equal(timers, 99);
});

test("a deadline shorter than the retry time rejects at once with WaitTimeoutError; nothing charged", async (t) => {
  mockClock(t);
  const limiter = new Limiter("10/s burst 1");
  limiter.check("k");
  const e = await limiter.acquire("k", { maxWait: 99 }).catch((e) => e);
  assert.ok(e instanceof WaitTimeoutError && e instanceof Error);
  assert.equal(e.name, "WaitTimeoutError");
  assert.equal(e.waited, 0);
  assert.equal(e.retryAfter, 100);
  assert.match(e.message, /timed out after 0 ms \(retry after 100 ms\)/);
  assert.equal(Date.now(), 0);
  assert.equal(limiter.check("k", { now: 100 }).allowed, true, "nothing was charged");
});

test("waiters behind others time out at their deadline, or at once when the key alone is too late", async (t) => {
  mockClock(t);
  const limiter = new Limiter("gcra 10/s burst 1");
  const { got, all } = waiters(limiter, 15, { maxWait: 1_000 });
  const late = limiter.acquire("k", { maxWait: 50 }).catch((e) => e);
  await flush();
  // The key alone needs 100 ms: the last arrival gives up now, not at 50 ms.
  const e = await late;
  assert.ok(e instanceof WaitTimeoutError);
  assert.deepEqual([e.waited, e.retryAfter], [0, 100]);
  await advance(t, 1_100);
  await all;
  assert.deepEqual(got.slice(0, 11), Array.from({ length: 11 }, (_, i) => i * 100));
  for (const r of got.slice(11)) {
    assert.ok(r instanceof WaitTimeoutError, String(r));
    assert.equal(r.waited, 1_000);
  }
  // Charged for the 11 admitted only: the next token is at 1100.
  assert.equal(limiter.check("k", { now: 1_000 }).retryAfter, 100);
});

test("an abort mid-wait rejects with the signal's reason, charges nothing, and lets the next go", async (t) => {
  mockClock(t);
  const limiter = new Limiter("gcra 10/s burst 1");
  const first = limiter.acquire("k");
  const ac = new AbortController();
  const head = limiter.acquire("k", { signal: ac.signal }).catch((e) => e); // sleeps to 100
  const inLine = new AbortController();
  const third = limiter.acquire("k", { signal: inLine.signal }).catch((e) => e); // in line
  const fourth = limiter.acquire("k").then(() => Date.now());
  await first;
  await advance(t, 50);
  ac.abort(new Error("user left"));
  inLine.abort();
  assert.equal((await head).message, "user left");
  assert.equal((await third).name, "AbortError");
  await advance(t, 100);
  assert.equal(await fourth, 100, "the fourth takes the turn at 100 ms");
  // Two charges in all (0 and 100 ms): the next token is at 200 ms.
  assert.equal(limiter.check("k", { now: 100 }).retryAfter, 100);
  // An already aborted signal rejects without waiting or charging.
  const reason = await limiter.acquire("other", { signal: AbortSignal.abort("no") }).catch((e) => e);
  assert.equal(reason, "no");
  assert.equal(limiter.size, 1);
});

test("the leaky queue resolves after its delay, which counts against the deadline", async (t) => {
  mockClock(t);
  const limiter = new Limiter("leaky-queue 10/s burst 5");
  const { got, all } = waiters(limiter, 4, { maxWait: 250 });
  await advance(t, 300);
  await all;
  assert.deepEqual(got.slice(0, 2), [100, 200]);
  for (const e of got.slice(2)) {
    assert.ok(e instanceof WaitTimeoutError);
    assert.deepEqual([e.waited, e.retryAfter], [0, 300]);
  }
  // Two were queued at 0 (the give-ups were not charged): three of five slots were free.
  assert.equal(limiter.peek("k", { now: 0 }).remaining, 3);
});

test("throttle wraps an async function: a turn per call, the same this and arguments", async (t) => {
  mockClock(t);
  const limiter = new Limiter("gcra 10/s burst 1");
  const calls = [];
  const lookup = limiter.throttle(
    async function (domain, n) {
      calls.push([this.name, domain, n, Date.now()]);
      return domain.length + n;
    },
    { key: (domain) => domain.split(".").pop(), maxWait: 1_000 },
  );
  const ctx = { name: "ctx", lookup };
  const results = Promise.all([ctx.lookup("a.com", 1), ctx.lookup("bb.com", 2), ctx.lookup("c.org", 3)]);
  await advance(t, 150);
  assert.deepEqual(await results, [6, 8, 8]);
  assert.deepEqual(calls, [
    ["ctx", "a.com", 1, 0],
    ["ctx", "c.org", 3, 0],
    ["ctx", "bb.com", 2, 100],
  ]);
  assert.throws(() => limiter.throttle(42), (e) => e instanceof TypeError && e.field === "fn");
});

test("bad options and impossible costs reject naming the field and rule", async (t) => {
  // A mocked clock: `waited` is measured, and a loaded machine can cross a millisecond.
  mockClock(t);
  const limiter = new Limiter("10/s");
  const reject = (opts) => limiter.acquire("k", opts).catch((e) => e);
  let e = await reject({ cost: 11 });
  assert.ok(e instanceof RangeError && e.rule === "cost-exceeds-capacity", String(e));
  e = await reject({ maxWait: -1 });
  assert.ok(e instanceof RangeError && e.field === "maxWait" && e.rule === "negative");
  e = await reject({ maxWait: "1s" });
  assert.ok(e instanceof TypeError && e.field === "maxWait");
  e = await reject({ jitter: Infinity });
  assert.ok(e instanceof TypeError && e.field === "jitter");
  e = await limiter.acquire(7).catch((e) => e);
  assert.ok(e instanceof TypeError && e.field === "key");
  // A full concurrency limit cannot say when a slot frees: a timeout at once.
  const c = new Limiter("concurrency 1");
  await c.acquire("job");
  e = await c.acquire("job", { maxWait: 1_000 }).catch((e) => e);
  assert.ok(e instanceof WaitTimeoutError);
  assert.deepEqual([e.waited, e.retryAfter], [0, 0]);
});

test("tenants of a fair share wait in their own lines", async (t) => {
  mockClock(t);
  const limiter = Limiter.fairShare("10/s", "gcra 1/s burst 1");
  const order = [];
  const p = ["acme", "acme", "globex"].map((tenant) =>
    limiter.acquire("dns", { tenant, maxWait: 5_000 }).then(() => order.push([tenant, Date.now()])),
  );
  await advance(t, 1_000);
  await Promise.all(p);
  assert.deepEqual(order, [
    ["acme", 0],
    ["globex", 0],
    ["acme", 1_000],
  ]);
});

test("real timers: waiters on a 20/s key admitted in order, none early", async () => {
  const limiter = new Limiter("gcra 20/s burst 1"); // one every 50 ms
  const n = 6;
  const start = Date.now();
  const { got, all } = waiters(limiter, n, { maxWait: 30_000 });
  await all;
  const offsets = got.map((at) => at - start);
  for (let i = 1; i < n; i++) {
    // Each was decided at a reading of the limiter's own clock (Date.now) no earlier than
    // i x 50 ms after the first admission, itself no earlier than `start`: "none early" is
    // exact. How late a timer fires depends on the machine, and is only reported.
    assert.ok(offsets[i] >= i * 50, `waiter ${i} at ${offsets[i]} ms, before ${i * 50} ms`);
    assert.ok(offsets[i] >= offsets[i - 1], "arrival order");
  }
  console.log(`real timers, ideal 0, 50, 100, ...: ${offsets.join(", ")} ms`);
});
