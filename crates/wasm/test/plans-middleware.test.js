// Plans through the Express and Hono middleware, in real servers on 127.0.0.1: the plan and
// the key come from what an auth middleware in front verified, with real signed tokens
// (`jose` signs them; Express: an auth middleware verifying with `jose` and setting
// `req.auth`; Hono: its own `hono/jwt`, `jwtPayload`). A forged token is that middleware's
// 401; a request without a token counts by IP under the default plan.
import { test } from "node:test";
import assert from "node:assert/strict";
import express from "express";
import { Hono } from "hono";
import { jwt } from "hono/jwt";
import { serve as serveHono } from "@hono/node-server";
import { SignJWT, UnsecuredJWT, jwtVerify } from "jose";
import { PlanLimiter } from "tollgate/plans";
import { Limiter } from "tollgate";
import { rateLimit } from "tollgate/express";
import { rateLimiter } from "tollgate/hono";

const SECRET = "a test secret of thirty-two bytes or more";
const key = new TextEncoder().encode(SECRET);
const forgedKey = new TextEncoder().encode("another secret, which the server does not know");

/** A signed HS256 token for `sub` on `plan` (5 minutes). */
function token(sub, plan, secret = key) {
  return new SignJWT({ plan }).setProtectedHeader({ alg: "HS256" }).setSubject(sub).setIssuedAt().setExpirationTime("5m").sign(secret);
}

// Token buckets of an hour: a refill (every 12 min, every 3 min) never comes within a test,
// however slow the machine, and there is no window edge to cross.
const plans = () => new PlanLimiter({ plans: { free: "5/hour", pro: "20/hour" }, default: "free" });

/** `n` GETs of `url` with `token` (none when undefined), one after another: their responses. */
async function calls(url, n, bearer) {
  const out = [];
  for (let i = 0; i < n; i++) {
    const headers = bearer === undefined ? {} : { authorization: `Bearer ${bearer}` };
    const r = await fetch(url, { headers });
    await r.arrayBuffer();
    out.push(r);
  }
  return out;
}

const statuses = (rs) => rs.map((r) => r.status);
const count = (rs, status) => rs.filter((r) => r.status === status).length;

function expressApp(limiter) {
  const app = express();
  // The app's own authentication: a bearer token verified with jose, its claims as req.auth.
  app.use(async (req, res, next) => {
    const header = req.get("authorization");
    if (header === undefined) return next();
    try {
      const { payload } = await jwtVerify(header.replace(/^Bearer /, ""), key, { algorithms: ["HS256"] });
      req.auth = payload;
      next();
    } catch {
      res.status(401).json({ error: "invalid token" });
    }
  });
  app.use(rateLimit({ limiter, key: (req) => req.auth?.sub, plan: (req) => req.auth?.plan }));
  app.get("/api", (req, res) => res.send("ok"));
  return app;
}

async function listenExpress(app) {
  const server = await new Promise((r) => {
    const s = app.listen(0, "127.0.0.1", () => r(s));
  });
  return { url: `http://127.0.0.1:${server.address().port}/api`, close: () => new Promise((r) => server.close(r)) };
}

test("Express + jose: a free token gets free's 5 an hour and a pro token pro's 20, the headers naming the plan", async () => {
  const limiter = plans();
  const { url, close } = await listenExpress(expressApp(limiter));
  try {
    const free = await calls(url, 8, await token("alice", "free"));
    assert.deepEqual(statuses(free), [200, 200, 200, 200, 200, 429, 429, 429]);
    assert.equal(free[0].headers.get("ratelimit-policy"), '"free";q=5;w=3600');
    assert.match(free[0].headers.get("ratelimit"), /^"free";r=4;t=\d+$/);
    assert.match(free[5].headers.get("content-type"), /^application\/problem\+json/);
    const pro = await calls(url, 24, await token("bob", "pro"));
    assert.equal(count(pro, 200), 20);
    assert.deepEqual(statuses(pro.slice(20)), [429, 429, 429, 429]);
    assert.equal(pro[0].headers.get("ratelimit-policy"), '"pro";q=20;w=3600');
    assert.match(pro[19].headers.get("ratelimit"), /^"pro";r=0;t=\d+$/);
    // A plan claim that names no plan counts under the default plan.
    const gold = await calls(url, 1, await token("carol", "gold"));
    assert.equal(gold[0].headers.get("ratelimit-policy"), '"free";q=5;w=3600');
  } finally {
    await close();
  }
});

test("Express + jose: a forged or unsigned token is the auth middleware's 401; no token counts by IP under the default plan", async () => {
  const limiter = plans();
  const { url, close } = await listenExpress(expressApp(limiter));
  try {
    const forged = await calls(url, 3, await token("mallory", "pro", forgedKey));
    assert.deepEqual(statuses(forged), [401, 401, 401]);
    const unsigned = new UnsecuredJWT({ plan: "pro" }).setSubject("mallory").encode();
    assert.deepEqual(statuses(await calls(url, 1, unsigned)), [401]);
    assert.equal(limiter.size, 0, "refused tokens reached no counter");
    // Anonymous: by IP (127.0.0.1), under free: 5, then 429; a signed-in caller from the
    // same address has a counter of its own.
    const anonymous = await calls(url, 6);
    assert.deepEqual(statuses(anonymous), [200, 200, 200, 200, 200, 429]);
    assert.equal(anonymous[0].headers.get("ratelimit-policy"), '"free";q=5;w=3600');
    assert.deepEqual(statuses(await calls(url, 1, await token("alice", "free"))), [200]);
  } finally {
    await close();
  }
});

test("Express: an override set on the limiter applies at the key's next request and is gone when cleared", async () => {
  const limiter = plans();
  const { url, close } = await listenExpress(expressApp(limiter));
  try {
    const alice = await token("alice", "free");
    assert.deepEqual(statuses(await calls(url, 5, alice)), [200, 200, 200, 200, 200]);
    limiter.set("alice", { plan: "pro" });
    const raised = await calls(url, 16, alice);
    // Pro's 20 less the 5 spent under free: 15 more, then 429.
    assert.equal(count(raised, 200), 15);
    assert.equal(raised[0].headers.get("ratelimit-policy"), '"pro";q=20;w=3600');
    limiter.clear("alice");
    const back = await calls(url, 1, alice);
    assert.equal(back[0].status, 429);
    assert.equal(back[0].headers.get("ratelimit-policy"), '"free";q=5;w=3600');
  } finally {
    await close();
  }
});

function honoApp(limiter) {
  const app = new Hono();
  // hono/jwt answers 401 to a request without a token; anonymous requests skip it.
  const auth = jwt({ secret: SECRET, alg: "HS256" });
  app.use("/api/*", (c, next) => (c.req.header("authorization") ? auth(c, next) : next()));
  app.use(
    "/api/*",
    rateLimiter({ limiter, key: (c) => c.get("jwtPayload")?.sub, plan: (c) => c.get("jwtPayload")?.plan }),
  );
  app.get("/api/data", (c) => c.text("ok"));
  return app;
}

async function listenHono(app) {
  const server = await new Promise((r) => {
    const s = serveHono({ fetch: app.fetch, port: 0, hostname: "127.0.0.1" }, () => r(s));
  });
  return { url: `http://127.0.0.1:${server.address().port}/api/data`, close: () => new Promise((r) => server.close(r)) };
}

test("Hono + hono/jwt: a free token gets 5 and a pro token 20; forged is 401; no token counts by IP", async () => {
  const limiter = plans();
  const { url, close } = await listenHono(honoApp(limiter));
  try {
    const free = await calls(url, 7, await token("alice", "free"));
    assert.deepEqual(statuses(free), [200, 200, 200, 200, 200, 429, 429]);
    assert.equal(free[0].headers.get("ratelimit-policy"), '"free";q=5;w=3600');
    assert.match(free[6].headers.get("content-type"), /^application\/problem\+json/);
    const pro = await calls(url, 22, await token("bob", "pro"));
    assert.equal(count(pro, 200), 20);
    assert.equal(pro[0].headers.get("ratelimit-policy"), '"pro";q=20;w=3600');
    assert.match(pro[21].headers.get("ratelimit"), /^"pro";r=0;t=\d+$/);
    assert.deepEqual(statuses(await calls(url, 2, await token("mallory", "pro", forgedKey))), [401, 401]);
    assert.equal(limiter.size, 2, "only alice and bob were counted");
    const anonymous = await calls(url, 6);
    assert.deepEqual(statuses(anonymous), [200, 200, 200, 200, 200, 429]);
    assert.equal(anonymous[5].headers.get("ratelimit-policy"), '"free";q=5;w=3600');
  } finally {
    await close();
  }
});

test("plan options are checked: plan needs a PlanLimiter, which takes no name or route", () => {
  const field = (fn) => {
    try {
      fn();
    } catch (e) {
      return [e.field, e.rule];
    }
    return undefined;
  };
  assert.deepEqual(field(() => rateLimit({ limiter: new Limiter("1/s"), plan: () => "pro" })), ["plan", "not-a-plan-limiter"]);
  assert.deepEqual(field(() => rateLimiter({ limiter: plans(), plan: "pro" })), ["plan", "not-a-function"]);
  assert.deepEqual(field(() => rateLimit({ limiter: plans(), name: "api" })), ["name", "plan-named"]);
  assert.deepEqual(field(() => rateLimiter({ limiter: plans(), route: "/api" })), ["route", "no-metrics"]);
  assert.deepEqual(field(() => rateLimit({ limiter: plans(), skipSuccessfulRequests: true })), ["limiter", "no-reserve"]);
});
