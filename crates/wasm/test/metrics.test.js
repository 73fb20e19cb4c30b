// The counts of the built package's limiters (issue 29): Limiter.metrics() after scripted
// runs, exact; the Express and Hono middleware's routes; Prometheus text by the core
// (tollgate/metrics).
import { test } from "node:test";
import assert from "node:assert/strict";
import express from "express";
import { Hono } from "hono";
import { Limiter } from "tollgate";
import { rateLimit } from "tollgate/express";
import { rateLimiter } from "tollgate/hono";
import { prometheus, metricModel } from "tollgate/metrics";

const TIMERS = Symbol.for("tollgate.testing.timers");

const zeros = () => ({ store: 0, denyCache: 0, fallback: 0 });
const noFailures = () => ({ unreachable: 0, timeout: 0, indeterminate: 0 });
const noWaits = () => ({ count: 0, sum: 0, buckets: new Array(13).fill(0) });

/** A counts object: every count 0 but those `over` sets. */
function counts(policy, route, over) {
  const c = { policy };
  if (route !== undefined) c.route = route;
  Object.assign(c, {
    decisions: { admitted: zeros(), denied: zeros(), shadowDenied: zeros() },
    nearLimit: 0,
    storeFailures: { open: noFailures(), closed: noFailures(), local: noFailures() },
    wait: { admitted: noWaits(), gaveUp: noWaits() },
  });
  over(c);
  return c;
}

test("check, allow and checkDetailed are counted by the core: outcome, source store, near the limit; peek is not", () => {
  const l = new Limiter("fixed-window 10/s", { name: "api" });
  for (let i = 0; i < 12; i++) l.check("a", { now: 1_000 });
  for (let i = 0; i < 3; i++) l.allow("a", { now: 1_000 });
  l.checkDetailed("b", { now: 1_000, cost: 9 });
  l.peek("a", { now: 1_000 });
  assert.throws(() => l.check("a", { now: 1_000, cost: 11 }), (e) => e.rule === "cost-exceeds-capacity");
  assert.deepEqual(
    l.metrics(),
    [
      counts("api", undefined, (c) => {
        c.decisions.admitted.store = 11;
        c.decisions.denied.store = 5;
        // a: remaining 1 and 0 after the 9th and 10th (under 20% of 10); b: 1 left after 9.
        c.nearLimit = 3;
      }),
    ],
  );
});

test("stacks and fair shares count one decision per request; a route has its own series", () => {
  const stack = Limiter.all(["fixed-window 2/s", "fixed-window 100/hour"], { name: "stacked" });
  for (let i = 0; i < 3; i++) stack.check("k", { now: 0 });
  const fair = Limiter.fairShare("fixed-window 10/s", "fixed-window 1/s", { name: "fair" });
  fair.check("k", { now: 0, tenant: "t" });
  fair.check("k", { now: 0, tenant: "t" });
  fair.check("k", { now: 0, tenant: "t", route: "/upload" });
  assert.deepEqual(stack.metrics(), [
    counts("stacked", undefined, (c) => {
      c.decisions.admitted.store = 2;
      c.decisions.denied.store = 1;
      c.nearLimit = 1; // the combined decision: 0 of 2 left
    }),
  ]);
  assert.deepEqual(fair.metrics(), [
    counts("fair", undefined, (c) => {
      c.decisions.admitted.store = 1;
      c.decisions.denied.store = 1;
      c.nearLimit = 1; // the tenant window binds: 0 of 1 left
    }),
    counts("fair", "/upload", (c) => (c.decisions.denied.store = 1)),
  ]);
  assert.throws(() => fair.check("k", { route: 7 }), (e) => e instanceof TypeError && e.field === "route");
  assert.throws(() => new Limiter("1/s", { name: 1 }), (e) => e instanceof TypeError && e.field === "name");
});

/** Starts `acquire` calls on a clock the test moves (the test-only timers option). */
function fakeTime() {
  const time = { now: 0 };
  time[TIMERS] = {
    clock: () => time.now,
    sleep: async (ms) => {
      time.now += ms;
    },
  };
  return time;
}

test("acquire: one decision per call and its wait in the core's histogram (admitted and gave up)", async () => {
  const l = new Limiter("fixed-window 1/s", { name: "slow" });
  const time = fakeTime();
  const opts = { [TIMERS]: time[TIMERS] };
  await l.acquire("k", opts); // at once
  await l.acquire("k", opts); // the next window: 1000 ms
  await assert.rejects(l.acquire("k", { ...opts, maxWait: 10 }), (e) => e.name === "WaitTimeoutError");
  const [c] = l.metrics();
  assert.deepEqual(c.decisions.admitted, { store: 2, denyCache: 0, fallback: 0 });
  assert.deepEqual(c.decisions.denied, { store: 1, denyCache: 0, fallback: 0 });
  assert.equal(c.nearLimit, 2);
  assert.deepEqual(c.wait.admitted, { count: 2, sum: 1, buckets: [1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0] });
  assert.deepEqual(c.wait.gaveUp, { count: 1, sum: 0, buckets: [1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] });
  const text = prometheus(l);
  for (const line of [
    'tollgate_wait_duration_seconds_bucket{tollgate_policy="slow",tollgate_wait_result="admitted",le="0.5"} 1',
    'tollgate_wait_duration_seconds_bucket{tollgate_policy="slow",tollgate_wait_result="admitted",le="1"} 2',
    'tollgate_wait_duration_seconds_sum{tollgate_policy="slow",tollgate_wait_result="admitted"} 1',
    'tollgate_wait_duration_seconds_count{tollgate_policy="slow",tollgate_wait_result="gave_up"} 1',
    'tollgate_decisions_total{tollgate_policy="slow",tollgate_outcome="denied",tollgate_source="store"} 1',
  ]) {
    assert.ok(text.split("\n").includes(line), `missing ${line}\n${text}`);
  }
});

test("concurrency in use: slots taken by admissions (check, allow, a route's, acquire), given back by release", async () => {
  const l = new Limiter("concurrency 4", { name: "uploads" });
  l.check("a");
  l.check("a", { cost: 2 });
  assert.equal(l.check("a", { cost: 2 }).allowed, false, "3 of 4 held: a denial takes nothing");
  l.allow("b");
  assert.equal(l.metrics()[0].concurrencyInUse, 4);
  l.release("a", { cost: 2 });
  l.release("b");
  assert.equal(l.metrics()[0].concurrencyInUse, 1);
  l.check("c", { route: "/upload" }); // one gauge for the limiter, whatever the route
  await l.acquire("d", { cost: 2, [TIMERS]: fakeTime()[TIMERS] });
  const [all, route] = l.metrics();
  assert.equal(all.concurrencyInUse, 4);
  assert.equal(route.concurrencyInUse, undefined);
  assert.ok(prometheus(l).split("\n").includes('tollgate_concurrency_in_use{tollgate_policy="uploads"} 4'), prometheus(l));
  // A limiter without a concurrency limit has no gauge.
  assert.equal(new Limiter("fixed-window 1/s").metrics()[0].concurrencyInUse, undefined);
});

test("Prometheus text: the core's names, one # TYPE per instrument for several limiters, zeros included", () => {
  const a = new Limiter("fixed-window 2/min", { name: "a\"quoted" });
  const b = new Limiter("fixed-window 5/min", { name: "b" });
  for (let i = 0; i < 3; i++) a.check("k", { now: 0 });
  b.check("k", { now: 0, route: "/r" });
  const text = prometheus([a, b]);
  const lines = text.split("\n");
  for (const name of ["tollgate_decisions_total", "tollgate_near_limit_total", "tollgate_store_failures_total", "tollgate_wait_duration_seconds"]) {
    assert.equal(lines.filter((l) => l.startsWith(`# TYPE ${name} `)).length, 1, name);
  }
  assert.ok(lines.includes('tollgate_decisions_total{tollgate_policy="a\\"quoted",tollgate_outcome="admitted",tollgate_source="store"} 2'));
  assert.ok(lines.includes('tollgate_decisions_total{tollgate_policy="a\\"quoted",tollgate_outcome="denied",tollgate_source="store"} 1'));
  assert.ok(lines.includes('tollgate_decisions_total{tollgate_policy="b",tollgate_route="/r",tollgate_outcome="admitted",tollgate_source="store"} 1'));
  assert.ok(lines.includes('tollgate_decisions_total{tollgate_policy="b",tollgate_outcome="admitted",tollgate_source="store"} 0'));
  assert.ok(lines.includes('tollgate_store_failures_total{tollgate_policy="b",tollgate_failure_behaviour="local",tollgate_failure_reason="timeout"} 0'));
  assert.ok(!text.includes("tollgate_concurrency_in_use"), "no concurrency limit, no gauge");
  // The same text from the counts objects (what another process could send).
  assert.equal(prometheus([...a.metrics(), ...b.metrics()]), text);
  assert.throws(() => prometheus([{}]), (e) => e instanceof TypeError && e.field === "sources");
  assert.equal(metricModel().instruments.decisions.name, "tollgate.decisions");
});

async function serve(app) {
  const server = await new Promise((r) => {
    const s = app.listen(0, "127.0.0.1", () => r(s));
  });
  return { base: `http://127.0.0.1:${server.address().port}`, close: () => new Promise((r) => server.close(r)) };
}

test("Express: each route's middleware counts under its route; exempt paths are not counted", async () => {
  const limiter = new Limiter("fixed-window 3/min", { name: "per-ip" });
  const app = express();
  app.use("/api", rateLimit({ limiter, route: "/api", exempt: ["/health"] }));
  app.get("/api", (req, res) => res.send("ok"));
  app.get("/api/health", (req, res) => res.send("ok"));
  app.get("/login", rateLimit({ limiter, route: "/login", key: () => "login" }), (req, res) => res.send("ok"));
  const { base, close } = await serve(app);
  try {
    const statuses = [];
    for (let i = 0; i < 5; i++) statuses.push((await fetch(`${base}/api`)).status);
    for (let i = 0; i < 2; i++) statuses.push((await fetch(`${base}/login`)).status);
    for (let i = 0; i < 2; i++) statuses.push((await fetch(`${base}/api/health`)).status);
    assert.deepEqual(statuses, [200, 200, 200, 429, 429, 200, 200, 200, 200]);
  } finally {
    await close();
  }
  assert.deepEqual(limiter.metrics(), [
    counts("per-ip", undefined, () => {}),
    counts("per-ip", "/api", (c) => {
      c.decisions.admitted.store = 3;
      c.decisions.denied.store = 2;
      c.nearLimit = 1;
    }),
    counts("per-ip", "/login", (c) => (c.decisions.admitted.store = 2)),
  ]);
  assert.throws(() => rateLimit({ limiter, route: "" }), (e) => e.field === "route");
});

test("Hono: the middleware counts under its route", async () => {
  const limiter = new Limiter("fixed-window 2/min", { name: "hono" });
  const app = new Hono();
  app.use("/api/*", rateLimiter({ limiter, route: "/api/*", key: () => "k" }));
  app.get("/api/x", (c) => c.text("ok"));
  const statuses = [];
  for (let i = 0; i < 3; i++) statuses.push((await app.request("/api/x")).status);
  assert.deepEqual(statuses, [200, 200, 429]);
  const [, api] = limiter.metrics();
  assert.equal(api.route, "/api/*");
  assert.deepEqual(api.decisions.admitted, { store: 2, denyCache: 0, fallback: 0 });
  assert.deepEqual(api.decisions.denied, { store: 1, denyCache: 0, fallback: 0 });
  assert.equal(api.nearLimit, 1);
});
