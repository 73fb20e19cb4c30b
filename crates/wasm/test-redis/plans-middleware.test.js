// The Express and Hono middleware on a RedisPlans, over real HTTP on 127.0.0.1 and a real
// redis-server (the scripts; and the module, TOLLGATE.PLAN, for overrides): each caller's plan from what the auth middleware in
// front set, the decision awaited, the core's headers and 429 body named after the plan that
// decided, an override set in Redis applying at the caller's next request, and a request
// without a caller counted by IP under the default plan.
import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import express from "express";
import { Hono } from "hono";
import { serve as honoServe } from "@hono/node-server";
import { RedisPlans, TESTING } from "tollgate/redis";
import { rateLimit } from "tollgate/express";
import { rateLimiter } from "tollgate/hono";
import { repo, serverForTests } from "./support.js";

const redis = serverForTests();
const MODULE = join(process.env.CARGO_TARGET_DIR ?? join(repo, "target"), "debug/libtollgate_redis_module.so");
/** A server with tollgate's module (built by the suite), its clock the test's (TESTCLOCK). */
const withModule = serverForTests(["--save", "", "--appendonly", "no", "--loadmodule", MODULE, "TESTCLOCK"]);

/** Who each bearer token is, as an app's auth middleware would have verified it. */
const USERS = { "t-alice": { sub: "alice", plan: "free" }, "t-bob": { sub: "bob", plan: "pro" }, "t-carol": { sub: "carol", plan: "free" } };

/** Plans of small limits on Redis, at a clock held 1,000 s into a day (no window rolls over mid-test). */
function plans(namespace, server = redis) {
  return new RedisPlans(server.ioredis(), {
    plans: { free: "2/hour", pro: "4/hour" },
    default: "free",
    namespace,
    fallback: "closed",
    timeout: 10_000,
    [TESTING]: { clock: () => 1_000_000 },
  });
}

/** `n` GETs of `url` as the caller of `token` (anonymous when undefined), one after another. */
async function calls(url, n, token) {
  const out = [];
  for (let i = 0; i < n; i++) out.push(await fetch(url, { headers: token === undefined ? {} : { authorization: `Bearer ${token}` } }));
  return out;
}

const statuses = (responses) => responses.map((r) => r.status);
const policyOf = (r) => r.headers.get("ratelimit-policy");

function expressApp(limiter) {
  const app = express();
  app.use((req, _res, next) => {
    req.auth = USERS[req.get("authorization")?.slice("Bearer ".length)];
    next();
  });
  app.use(rateLimit({ limiter, key: (req) => req.auth?.sub, plan: (req) => req.auth?.plan }));
  app.get("/api", (_req, res) => res.send("ok"));
  return app;
}

async function listenExpress(app) {
  const server = await new Promise((r) => {
    const s = app.listen(0, "127.0.0.1", () => r(s));
  });
  return { url: `http://127.0.0.1:${server.address().port}/api`, close: () => new Promise((r) => server.close(r)) };
}

function honoApp(limiter) {
  const app = new Hono();
  app.use(async (c, next) => {
    c.set("auth", USERS[c.req.header("authorization")?.slice("Bearer ".length)]);
    await next();
  });
  app.use(rateLimiter({ limiter, key: (c) => c.get("auth")?.sub, plan: (c) => c.get("auth")?.plan }));
  app.get("/api", (c) => c.text("ok"));
  return app;
}

async function listenHono(app) {
  const server = await new Promise((r) => {
    const s = honoServe({ fetch: app.fetch, port: 0, hostname: "127.0.0.1" }, () => r(s));
  });
  return { url: `http://127.0.0.1:${server.address().port}/api`, close: () => new Promise((r) => server.close(r)) };
}

test("Express on a RedisPlans: free gets free's 2 and pro pro's 4, the headers and 429 body named after the plan; no caller counts by IP under free", async () => {
  const limiter = plans("mwp-express");
  const { url, close } = await listenExpress(expressApp(limiter));
  try {
    const free = await calls(url, 3, "t-alice");
    assert.deepEqual(statuses(free), [200, 200, 429]);
    assert.equal(policyOf(free[0]), '"free";q=2;w=3600');
    assert.match(free[0].headers.get("ratelimit"), /^"free";r=1;t=\d+$/);
    assert.match(free[2].headers.get("content-type"), /^application\/problem\+json/);
    assert.deepEqual((await free[2].json())["violated-policies"], ["free"]);
    const pro = await calls(url, 5, "t-bob");
    assert.deepEqual(statuses(pro), [200, 200, 200, 200, 429]);
    assert.equal(policyOf(pro[0]), '"pro";q=4;w=3600');
    assert.match(pro[3].headers.get("ratelimit"), /^"pro";r=0;t=\d+$/);
    assert.deepEqual((await pro[4].json())["violated-policies"], ["pro"]);
    // Anonymous: a counter of its own (alice's is spent), by the client's address, under free.
    const anonymous = await calls(url, 3);
    assert.deepEqual(statuses(anonymous), [200, 200, 429]);
    assert.equal(policyOf(anonymous[0]), '"free";q=2;w=3600');
    assert.equal((await limiter.check("alice")).allowed, false, "alice's spend is hers, on Redis");
  } finally {
    await close();
  }
});

for (const [way, server] of [["scripts", redis], ["module", withModule]]) test(`Express on a RedisPlans (${way}): an override set in Redis applies at the caller's next request (another plan, or its own limits named own), and is gone when cleared`, async () => {
  const limiter = plans("mwp-override", server);
  const { url, close } = await listenExpress(expressApp(limiter));
  try {
    assert.deepEqual(statuses(await calls(url, 2, "t-alice")), [200, 200]);
    await limiter.set("alice", { plan: "pro" });
    const raised = await calls(url, 3, "t-alice");
    // Pro's 4 less the 2 spent under free: 2 more, then 429.
    assert.deepEqual(statuses(raised), [200, 200, 429]);
    assert.equal(policyOf(raised[0]), '"pro";q=4;w=3600');
    await limiter.set("carol", { limits: ["3/hour"] });
    const own = await calls(url, 4, "t-carol");
    assert.deepEqual(statuses(own), [200, 200, 200, 429]);
    assert.equal(policyOf(own[0]), '"own";q=3;w=3600');
    assert.deepEqual((await own[3].json())["violated-policies"], ["own"]);
    await limiter.clear("alice");
    const back = await calls(url, 1, "t-alice");
    assert.equal(back[0].status, 429, "under free again, with pro's spend kept");
    assert.equal(policyOf(back[0]), '"free";q=2;w=3600');
  } finally {
    await close();
  }
});

test("Hono on a RedisPlans: free and pro get their plans' limits and headers, an override applies at the next request, no caller counts by IP under free", async () => {
  const limiter = plans("mwp-hono");
  const { url, close } = await listenHono(honoApp(limiter));
  try {
    const free = await calls(url, 3, "t-alice");
    assert.deepEqual(statuses(free), [200, 200, 429]);
    assert.equal(policyOf(free[0]), '"free";q=2;w=3600');
    assert.deepEqual((await free[2].json())["violated-policies"], ["free"]);
    const pro = await calls(url, 5, "t-bob");
    assert.deepEqual(statuses(pro), [200, 200, 200, 200, 429]);
    assert.equal(policyOf(pro[0]), '"pro";q=4;w=3600');
    await limiter.set("alice", { plan: "pro" });
    const raised = await calls(url, 3, "t-alice");
    assert.deepEqual(statuses(raised), [200, 200, 429]);
    assert.equal(policyOf(raised[0]), '"pro";q=4;w=3600');
    const anonymous = await calls(url, 3);
    assert.deepEqual(statuses(anonymous), [200, 200, 429]);
    assert.equal(policyOf(anonymous[0]), '"free";q=2;w=3600');
  } finally {
    await close();
  }
});

test("Express on a RedisPlans whose Redis is down: the declared fallback (closed) answers a 429 under the plan the request named", async () => {
  // A port nothing listens on: the first check fails over to the fallback.
  const down = new RedisPlans(redis.ioredis({ port: 1, enableOfflineQueue: false, lazyConnect: true }), {
    plans: { free: "2/hour", pro: "4/hour" },
    namespace: "mwp-down",
    fallback: "closed",
    timeout: 2_000,
  });
  const { url, close } = await listenExpress(expressApp(down));
  try {
    const [r] = await calls(url, 1, "t-bob");
    assert.equal(r.status, 429);
    assert.equal(policyOf(r), '"pro";q=4;w=3600');
    assert.deepEqual((await r.json())["violated-policies"], ["pro"]);
    assert.equal(down.stats().fallback, 1);
  } finally {
    await close();
  }
});
