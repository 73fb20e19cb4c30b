// How much one call may ask of a Limiter (issues 43 and 44): a stack of 100,000 limits is
// decided, all or nothing, without breaking any other limiter; a key (or tenant) longer
// than the core's bound on a key part's bytes (tollgate::store::bounds) is refused with a
// named RangeError, charging and storing nothing, and the middleware answers it with a 400.
import { test } from "node:test";
import assert from "node:assert/strict";
import express from "express";
import { Hono } from "hono";
import { Limiter } from "tollgate";
import { rateLimit } from "tollgate/express";
import { rateLimiter } from "tollgate/hono";

const DEEP = 100_000;

/** Whether `e` is the core's refusal of a key part (`field`) of `bytes` bytes. */
function tooLong(field, bytes) {
  return (e) => e instanceof RangeError && e.field === field && e.rule === "too-long" && e.value === bytes;
}

// The bound is the core's: read from its refusal of a megabyte key, not restated here.
const MAX = Number(/at most (\d+)/.exec(refusal(() => new Limiter("1/s").check("k".repeat(1 << 20))).message)[1]);

function refusal(f) {
  try {
    f();
  } catch (e) {
    return e;
  }
  throw new Error("not refused");
}

test(`a stack of ${DEEP} limits decides, all or nothing, and every other limiter keeps working`, () => {
  const other = new Limiter("2/min");
  assert.equal(other.check("k", { now: 0 }).remaining, 1);
  // The last limit is the tightest: the first two requests pass every limit, the third is
  // denied by the last one and charges none of the 99,999 others.
  const policies = Array.from({ length: DEEP }, (_, i) => `fixed-window ${DEEP - i + 1}/min`);
  const stack = Limiter.all(policies);
  let started = performance.now();
  const first = stack.checkDetailed("k", { now: 0 });
  console.log(`# ${DEEP} limits: a detailed check in ${(performance.now() - started).toFixed(0)} ms`);
  assert.equal(first.allowed, true);
  assert.equal(first.each.length, DEEP);
  assert.equal(stack.check("k", { now: 0 }).allowed, true);
  const denied = stack.checkDetailed("k", { now: 0 });
  assert.equal(denied.allowed, false);
  assert.equal(denied.each[DEEP - 1].allowed, false);
  // A limit with room reports it uncharged by the denied request: 2 of its limit used.
  assert.equal(denied.each[0].remaining, DEEP + 1 - 2);
  assert.equal(denied.each[DEEP - 2].remaining, 3 - 2);
  // 100,000 sliding logs (each with its own log of times) decide the same way.
  const logs = Limiter.all(Array.from({ length: DEEP }, (_, i) => `sliding-log ${DEEP - i + 1}/min`));
  started = performance.now();
  assert.deepEqual([0, 1, 2].map(() => logs.allow("k", { now: 0 })), [true, true, false]);
  console.log(`# ${DEEP} sliding logs: three checks in ${(performance.now() - started).toFixed(0)} ms`);
  // The limiter made before, and one made after, decide as before.
  assert.equal(other.check("k", { now: 0 }).remaining, 0);
  assert.equal(other.check("k", { now: 0 }).allowed, false);
  assert.equal(new Limiter("1/min").check("k", { now: 0 }).allowed, true);
  stack.free();
  logs.free();
});

test("a key at the core's bound is decided; one byte more is refused by name, storing nothing", () => {
  assert.ok(MAX > 0);
  const l = new Limiter("1/min");
  assert.equal(l.check("k".repeat(MAX), { now: 0 }).allowed, true);
  assert.equal(l.check("k".repeat(MAX), { now: 0 }).allowed, false);
  const e = refusal(() => l.check("k".repeat(MAX + 1), { now: 0 }));
  assert.ok(tooLong("key", MAX + 1)(e), e);
  assert.equal(e.message, `key: ${MAX + 1} bytes, at most ${MAX} [too-long]`);
  // Bytes, not characters: two-byte letters past the bound by one byte.
  const wide = "é".repeat(MAX / 2) + "k";
  assert.throws(() => l.check(wide, { now: 0 }), tooLong("key", MAX + 1));
  // Every call that takes a key refuses it the same way.
  const huge = "ключ".repeat(1 << 18); // 2 MiB of UTF-8
  const bytes = 8 << 18;
  for (const call of [
    () => l.check(huge),
    () => l.allow(huge),
    () => l.peek(huge),
    () => l.checkDetailed(huge),
    () => l.check(huge, { route: "/x" }),
  ]) {
    assert.throws(call, tooLong("key", bytes));
  }
  assert.equal(l.reset(huge), false, "no key over the bound is ever stored");
  assert.equal(l.size, 1);
  const c = new Limiter("concurrency 1");
  assert.throws(() => c.release("k".repeat(MAX + 1)), tooLong("key", MAX + 1));
});

test("a tenant over the bound is refused by name; acquire rejects a long key", async () => {
  const f = Limiter.fairShare("10/min", "2/min");
  const tenant = "t".repeat(MAX);
  assert.equal(f.check("k".repeat(MAX), { now: 0, tenant }).allowed, true);
  assert.throws(() => f.check("k", { now: 0, tenant: tenant + "t" }), tooLong("tenant", MAX + 1));
  assert.throws(() => f.allow("k", { now: 0, tenant: tenant + "é" }), tooLong("tenant", MAX + 2));
  await assert.rejects(f.acquire("k".repeat(MAX + 1), { maxWait: 0 }), tooLong("key", MAX + 1));
  assert.equal(f.size, 1);
});

test("a megabyte key does not become a megabyte of wasm memory", async () => {
  const glue = await import("../pkg/node/glue.js");
  const l = new Limiter("1/min");
  l.check("é".repeat(256), { now: 0 }); // the key buffer at its largest
  const before = glue.wasmMemory().buffer.byteLength;
  for (let i = 0; i < 20; i++) assert.throws(() => l.check("é".repeat(1 << 20) + "k"), tooLong("key", (2 << 20) + 1));
  assert.equal(glue.wasmMemory().buffer.byteLength, before);
});

test("Express and Hono answer a key over the bound with a 400 problem document, uncounted", async () => {
  const limiter = new Limiter("fixed-window 1/min");
  const app = express();
  app.use(rateLimit({ limiter, key: (req) => req.get("x-user") }));
  app.get("/", (req, res) => res.send("ok"));
  const server = await new Promise((r) => {
    const s = app.listen(0, "127.0.0.1", () => r(s));
  });
  const hono = new Hono();
  hono.use(rateLimiter({ limiter, header: "x-user" }));
  hono.get("/", (c) => c.text("ok"));
  try {
    const url = `http://127.0.0.1:${server.address().port}/`;
    const long = "u".repeat(MAX + 1);
    for (const res of [await fetch(url, { headers: { "x-user": long } }), await hono.request("/", { headers: { "x-user": long } })]) {
      assert.equal(res.status, 400);
      assert.match(res.headers.get("content-type"), /^application\/problem\+json/);
      assert.deepEqual(await res.json(), {
        type: "about:blank",
        title: "Bad Request",
        status: 400,
        detail: `key: ${MAX + 1} bytes, at most ${MAX} [too-long]`,
      });
    }
    assert.equal(limiter.size, 0);
    assert.equal((await fetch(url, { headers: { "x-user": "u".repeat(MAX) } })).status, 200);
    assert.equal((await hono.request("/", { headers: { "x-user": "u".repeat(MAX) } })).status, 429);
  } finally {
    await new Promise((r) => server.close(r));
  }
});
