// The Limiter API of the built package (Node build): decisions, keys and memory bounds,
// stacks, fair share, time conversion, errors that name the field and rule, headers.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Limiter, headers, parsePolicy } from "tollgate";

test("a token bucket admits its burst, then denies with a retry time, all in ms", () => {
  const l = new Limiter("10/s burst 20");
  let admitted = 0;
  for (let i = 0; i < 25; i++) admitted += l.check("alice", { now: 1_000 }).allowed ? 1 : 0;
  assert.equal(admitted, 20);
  assert.deepEqual(l.check("alice", { now: 1_000 }), {
    allowed: false,
    limit: 20,
    remaining: 0,
    resetAfter: 2_000,
    retryAfter: 100,
    delay: 0,
  });
  // 100 ms later one token is back.
  assert.equal(l.check("alice", { now: 1_100 }).allowed, true);
  assert.equal(l.check("bob", { now: 1_100 }).remaining, 19);
});

test("allow() is check()'s allowed, charging the same bucket; it throws as check() does", () => {
  const a = new Limiter("10/s burst 3");
  const c = new Limiter("10/s burst 3");
  for (const [now, cost] of [[0, 1], [0, 1], [0, 2], [0, 1], [150, 1], [150, 1], [400, 3], [400, 0]]) {
    assert.equal(a.allow("k", { now, cost }), c.check("k", { now, cost }).allowed, `at ${now} ms, cost ${cost}`);
  }
  assert.equal(a.peek("k", { now: 400 }).remaining, c.peek("k", { now: 400 }).remaining);
  assert.equal(typeof a.allow("fresh"), "boolean");
  assert.throws(() => a.allow("k", { cost: 4 }), (e) => e instanceof RangeError && e.rule === "cost-exceeds-capacity");
  assert.throws(() => a.allow(7), (e) => e instanceof TypeError && e.field === "key");
  assert.throws(() => a.allow("k", { now: -1 }), (e) => e instanceof RangeError && e.field === "now");
  // A fair share's tenant window applies to allow() too.
  const f = Limiter.fairShare("10/s", "2/s");
  const admitted = [1, 2, 3].map(() => f.allow("k", { now: 0, tenant: "acme" }));
  assert.deepEqual(admitted, [true, true, false]);
  assert.equal(f.allow("k", { now: 0, tenant: "other" }), true);
});

test("check() defaults to Date.now() and cost 1; peek charges nothing", () => {
  const l = new Limiter("fixed-window 3/h");
  assert.equal(l.check("k").remaining, 2);
  assert.equal(l.peek("k").remaining, 2);
  assert.equal(l.peek("k").remaining, 2);
  assert.equal(l.check("k", { cost: 2 }).remaining, 0);
  const denied = l.check("k");
  assert.equal(denied.allowed, false);
  assert.ok(denied.retryAfter > 0 && denied.retryAfter <= 3_600_000);
});

test("fresh keys are not stored; reset forgets a key; size counts limited keys", () => {
  const l = new Limiter("2/s");
  assert.equal(l.size, 0);
  l.check("a", { now: 0 });
  l.check("b", { now: 0 });
  assert.equal(l.size, 2);
  assert.equal(l.reset("a"), true);
  assert.equal(l.reset("a"), false);
  assert.equal(l.size, 1);
  // A second later b's bucket is full again: peeking finds it fresh and drops it.
  assert.equal(l.peek("b", { now: 1_000 }).remaining, 2);
  assert.equal(l.size, 0);
  assert.equal(l.check("a", { now: 1_000 }).remaining, 1);
});

test("maxKeys bounds memory: an idle key is evicted first, and starts fresh", () => {
  const l = new Limiter("1/min", { maxKeys: 3 });
  for (const k of ["a", "b", "c"]) assert.equal(l.check(k, { now: 0 }).allowed, true);
  // b and c are checked again (denied, still limited); a stays idle.
  for (const k of ["b", "c"]) assert.equal(l.check(k, { now: 0 }).allowed, false);
  assert.equal(l.check("d", { now: 0 }).allowed, true); // a is evicted to make room
  assert.equal(l.size, 3);
  // The clock hand cleared b's and c's bits on its way to a: check them again, so that d
  // is the only key not checked since the hand passed.
  for (const k of ["b", "c"]) assert.equal(l.check(k, { now: 1 }).allowed, false);
  assert.equal(l.check("a", { now: 1 }).allowed, true, "a was evicted, so it starts fresh");
  // a's return evicted d; b and c are kept.
  assert.equal(l.check("b", { now: 1 }).allowed, false);
  assert.equal(l.check("c", { now: 1 }).allowed, false);
  assert.equal(l.check("d", { now: 1 }).allowed, true, "d was evicted");
  assert.equal(l.size, 3);
});

test("policy objects and every algorithm name", () => {
  const l = new Limiter({ algorithm: "sliding-window", limit: 5, window: "10s" });
  assert.deepEqual(l.policies, ["sliding-window 5/10s"]);
  assert.deepEqual(new Limiter({ limit: 10, window: 1000, burst: 40 }).policies, ["token-bucket 10/s burst 40"]);
  assert.deepEqual(new Limiter({ algorithm: "concurrency", maxInFlight: 2 }).policies, ["concurrency 2"]);
  for (const a of ["token-bucket", "gcra", "sliding-window", "fixed-window", "sliding-log", "leaky-bucket", "leaky-queue"]) {
    const d = new Limiter(`${a} 4/s`).check("k", { now: 0 });
    assert.equal(d.allowed, true, a);
    assert.equal(d.limit, 4, a);
  }
  assert.equal(parsePolicy("gcra 100/min burst 10"), "gcra 100/min burst 10");
});

test("leaky-queue decisions carry the queueing delay", () => {
  const l = new Limiter("leaky-queue 10/s burst 3");
  const delays = [0, 1, 2].map(() => l.check("q", { now: 0 }).delay);
  assert.deepEqual(delays, [100, 200, 300]);
  assert.equal(l.check("q", { now: 0 }).allowed, false);
});

test("concurrency: acquire with check, give back with release", () => {
  const l = new Limiter("concurrency 2");
  assert.equal(l.check("job", { now: 0 }).allowed, true);
  assert.equal(l.check("job", { now: 0 }).allowed, true);
  assert.equal(l.check("job", { now: 0 }).allowed, false);
  l.release("job");
  assert.equal(l.check("job", { now: 0 }).allowed, true);
  assert.throws(() => new Limiter("1/s").release("k"), (e) => e instanceof RangeError && e.rule === "not-concurrency");
});

test("Limiter.all is all-or-nothing: a denied stack charges no policy", () => {
  const l = Limiter.all(["5/s", "fixed-window 3/min"]);
  for (let i = 0; i < 3; i++) assert.equal(l.check("k", { now: 0 }).allowed, true);
  const denied = l.check("k", { now: 0 });
  assert.equal(denied.allowed, false);
  assert.equal(denied.retryAfter, 60_000);
  assert.deepEqual(l.policies, ["token-bucket 5/s", "fixed-window 3/min"]);
  // The bucket was not charged for the denied request: at t=0 it still has 2 tokens.
  assert.equal(new Limiter("5/s").check("x", { now: 0, cost: 3 }).remaining, 2);
  assert.throws(() => Limiter.all([]), (e) => e.rule === "empty-stack" && e.field === "policies");
});

test("fair share: a tenant gets its share; others and tenant-less requests still pass", () => {
  const l = Limiter.fairShare("10/s", "sliding-window 4/s");
  let acme = 0;
  for (let i = 0; i < 10; i++) acme += l.check("dns", { now: 0, tenant: "acme" }).allowed ? 1 : 0;
  assert.equal(acme, 4);
  assert.equal(l.check("dns", { now: 0, tenant: "globex" }).allowed, true);
  assert.equal(l.check("dns", { now: 0 }).allowed, true);
  assert.equal(l.check("dns", { now: 0, tenant: "default" }).allowed, true);
  assert.throws(
    () => Limiter.fairShare("10/s", "20/s"),
    (e) => e instanceof RangeError && e.field === "tenant" && e.rule === "tenant-above-shared",
  );
});

test("fractional and integer times convert the same way (ms -> ns)", () => {
  const a = new Limiter("gcra 1000/s");
  const b = new Limiter("gcra 1000/s");
  a.check("k", { now: 5 });
  b.check("k", { now: 5.0000001 }); // rounds to the same nanosecond count +0
  assert.deepEqual(a.check("k", { now: 5.5 }), b.check("k", { now: 5.5 }));
  // Sub-millisecond precision is kept: 0.5 ms later half a token has dripped back.
  const c = new Limiter("gcra 1/s");
  c.check("k", { now: 1_000.25 });
  assert.equal(c.check("k", { now: 1_999.75 }).retryAfter, 1);
});

test("invalid policies and options throw TypeError/RangeError naming field and rule", () => {
  const cases = [
    [() => new Limiter("10/fortnight"), TypeError, "window", "unknown-unit"],
    [() => new Limiter("0/s"), RangeError, "limit", "zero"],
    [() => new Limiter("sliding-window 10/s burst 5"), TypeError, "burst", "burst-not-applicable"],
    [() => new Limiter({ algorithm: "bucket", limit: 1, window: "s" }), TypeError, "algorithm", "unknown-algorithm"],
    [() => new Limiter({ limit: "ten", window: "s" }), TypeError, "limit", "not-a-number"],
    [() => new Limiter(42), TypeError, "policy", "not-a-policy"],
    [() => new Limiter("1/s", { maxKeys: 0 }), RangeError, "maxKeys", "zero"],
    [() => new Limiter("1/s", { maxKeys: 1.5 }), TypeError, "maxKeys", "not-a-number"],
    [() => new Limiter("1/s").check("k", { cost: -1 }), RangeError, "cost", "negative"],
    [() => new Limiter("1/s").check("k", { cost: 0.5 }), TypeError, "cost", "not-a-number"],
    [() => new Limiter("1/s").check("k", { now: NaN }), TypeError, "now", "not-a-number"],
    [() => new Limiter("1/s").check(7), TypeError, "key", "not-a-string"],
    [() => new Limiter("2/s").check("k", { cost: 3 }), RangeError, "cost", "cost-exceeds-capacity"],
  ];
  for (const [fn, Kind, field, rule] of cases) {
    assert.throws(fn, (e) => {
      assert.ok(e instanceof Kind, `${e} should be a ${Kind.name}`);
      assert.equal(e.field, field, e.message);
      assert.equal(e.rule, rule, e.message);
      assert.ok(e.message.includes(field) && e.message.includes(rule), e.message);
      return true;
    });
  }
});

test("a denial is a decision, never an exception", () => {
  const l = new Limiter("1/min");
  l.check("k", { now: 0 });
  for (let i = 0; i < 100; i++) assert.equal(l.check("k", { now: 0 }).allowed, false);
});

test("headers(): RateLimit-Policy, RateLimit, Retry-After and no-store when denied", () => {
  const l = new Limiter("fixed-window 100/min");
  const ok = l.check("ip", { now: 42_000 });
  assert.deepEqual(l.headers(ok, "per-ip"), {
    "RateLimit-Policy": '"per-ip";q=100;w=60',
    RateLimit: '"per-ip";r=99;t=18',
  });
  assert.deepEqual(headers(ok, "per-ip", { policy: "fixed-window 100/min" }), l.headers(ok, "per-ip"));
  const tight = new Limiter("1/s");
  tight.check("ip", { now: 0 });
  const denied = tight.check("ip", { now: 250 });
  const h = headers(denied, "burst", { policy: tight, legacy: true });
  assert.equal(h["Retry-After"], "1");
  assert.equal(h["Cache-Control"], "no-store");
  assert.equal(h["X-RateLimit-Limit"], "1");
  assert.equal(h["X-RateLimit-Remaining"], "0");
  assert.throws(() => headers(ok, "x"), (e) => e instanceof TypeError && e.field === "policy" && e.rule === "missing");
});

test("checkDetailed(): each limit's decision; in a denied stack a limit with room reports it uncharged", () => {
  const l = Limiter.all(["5/s", "fixed-window 3/min"]);
  for (let i = 0; i < 3; i++) assert.equal(l.checkDetailed("k", { now: 0 }).allowed, true);
  const d = l.checkDetailed("k", { now: 0 });
  assert.equal(d.allowed, false);
  assert.equal(d.each.length, 2);
  // The bucket had room and was not charged: 2 of 5 left (not the 1 it would have after
  // this request), no wait.
  assert.deepEqual(d.each[0], { allowed: true, limit: 5, remaining: 2, resetAfter: 600, retryAfter: 0, delay: 0 });
  assert.deepEqual(d.each[1], { allowed: false, limit: 3, remaining: 0, resetAfter: 60_000, retryAfter: 60_000, delay: 0 });
  const { each, ...combined } = d;
  assert.deepEqual(combined, l.check("k", { now: 0 }));
  const fs = Limiter.fairShare("10/s", "2/s");
  assert.equal(fs.checkDetailed("k", { now: 0 }).each.length, 1, "no tenant: the shared limit only");
  assert.equal(fs.checkDetailed("k", { now: 0, tenant: "acme" }).each.length, 2);
});

test("headers() of a stack name the limit that denied, chosen by the core (not by equal limit numbers)", () => {
  const l = Limiter.all(["10/s", "fixed-window 10/min"]);
  for (let i = 0; i < 10; i++) l.checkDetailed("k", { now: 0 });
  const d = l.checkDetailed("k", { now: 1_000 });
  assert.equal(d.allowed, false);
  assert.deepEqual(l.headers(d, "api"), {
    "RateLimit-Policy": '"api.1";q=10;w=1, "api.2";q=10;w=60',
    RateLimit: '"api.2";r=0;t=59',
    "Retry-After": "59",
    "Cache-Control": "no-store",
  });
  assert.equal(
    l.problem(d, "api"),
    '{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"detail":"Rate limit exceeded; retry in 59 s.","violated-policies":["api.2"]}',
  );
  assert.equal(l.problem(l.checkDetailed("other", { now: 0 }), "api"), undefined);
  // A stack's plain check() does not say which limit bound it: refused, not guessed.
  assert.throws(() => l.headers(l.check("k", { now: 2_000 }), "api"), (e) => e instanceof TypeError && e.field === "decision" && e.rule === "not-detailed");
  const fs = Limiter.fairShare("10/s", "1/s");
  fs.checkDetailed("k", { now: 0, tenant: "acme" });
  const t = fs.checkDetailed("k", { now: 0, tenant: "acme" });
  assert.equal(fs.headers(t, "org").RateLimit, '"org.tenant";r=0;t=1');
});

test("problem(): the 429 body, the same bytes as the edge worker's (crates/worker/src/answer.rs)", () => {
  const l = new Limiter("1/3s");
  l.check("ip", { now: 0 });
  const denied = l.check("ip", { now: 0 });
  assert.equal(
    l.problem(denied, "per-ip"),
    '{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"detail":"Rate limit exceeded; retry in 3 s.","violated-policies":["per-ip"]}',
  );
});

test("many keys and memory growth: decisions stay right after wasm memory grows", () => {
  const l = new Limiter("3/min", { maxKeys: 200_000 });
  for (let i = 0; i < 150_000; i++) l.check(`key-${i}`, { now: 0 });
  assert.equal(l.size, 150_000);
  assert.equal(l.check("key-7", { now: 0 }).remaining, 1);
  assert.equal(l.check("key-149999", { now: 0 }).remaining, 1);
  l.free();
});

test("keys and tenants share the key buffer: long and non-ASCII ones grow it, keeping the key", () => {
  const l = Limiter.fairShare("10/min", "2/min");
  const key = "k".repeat(100); // fits the first 128 bytes; the tenant after it does not
  const tenant = "テナント-".repeat(20);
  assert.deepEqual([0, 1, 2].map(() => l.check(key, { now: 0, tenant }).allowed), [true, true, false]);
  assert.equal(l.check(key, { now: 0, tenant: "other" }).allowed, true);
  assert.equal(l.check("k".repeat(99), { now: 0, tenant }).allowed, true, "another key, the same tenant");
  assert.equal(l.check(key.slice(1), { now: 0, tenant }).allowed, true);
  const c = new Limiter("concurrency 1");
  const long = "ключ".repeat(100); // 800 bytes: past the first 128, within the core's bound
  assert.equal(c.check(long, { now: 0 }).allowed, true);
  assert.equal(c.check(long, { now: 0 }).allowed, false);
  c.release(long);
  assert.equal(c.check(long, { now: 0 }).allowed, true);
  assert.equal(c.check("ascii-after-growth", { now: 0 }).allowed, true);
  // Lone surrogates are keyed as U+FFFD, as with any string passed to wasm.
  const one = new Limiter("1/min");
  assert.equal(one.check("a\ud800", { now: 0 }).allowed, true);
  assert.equal(one.check("a\ufffd", { now: 0 }).allowed, false);
});

test("keys of any length and alphabet: short ASCII, non-ASCII and long keys are distinct", () => {
  const l = new Limiter("2/min");
  const keys = ["203.0.113.7", "ключ-😀", "k".repeat(500), "k".repeat(128), "k".repeat(129), ""];
  for (const k of keys) {
    assert.equal(l.check(k, { now: 0 }).remaining, 1, JSON.stringify(k).slice(0, 20));
    assert.equal(l.peek(k, { now: 0 }).remaining, 1);
  }
  for (const k of keys) assert.equal(l.check(k, { now: 0 }).remaining, 0);
  for (const k of keys) assert.equal(l.check(k, { now: 0 }).allowed, false);
  assert.equal(l.size, keys.length);
  assert.equal(l.reset("ключ-😀"), true);
  assert.equal(l.check("ключ-😀", { now: 0 }).remaining, 1);
});
