// The Express and Hono middleware on a RedisLimiter, over real HTTP on 127.0.0.1 and a real
// redis-server: the decision awaited, the core's headers and 429 body, and a request charged
// by its response (reserve at the request, settle on Redis at the end): Express with a
// measured cost, Hono counting only failed logins.
import { test } from "node:test";
import assert from "node:assert/strict";
import express from "express";
import { Hono } from "hono";
import { serve as honoServe } from "@hono/node-server";
import { RedisLimiter, TESTING } from "tollgate/redis";
import { rateLimit } from "tollgate/express";
import { rateLimiter } from "tollgate/hono";
import { serverForTests } from "./support.js";
import { watchSettles } from "../test/watch-settles.js";

const redis = serverForTests();

/** A RedisLimiter whose settles the test can wait for (the middleware settles after the response is sent). */
function watched(policy, namespace) {
  const c = redis.ioredis();
  // A clock held 1,000 s into a day, so that no window rolls over mid-test.
  const l = new RedisLimiter(c, policy, { namespace, fallback: "closed", name: "per-ip", [TESTING]: { clock: () => 1_000_000 } });
  return watchSettles(l);
}

function listening(s) {
  return { base: `http://127.0.0.1:${s.address().port}`, close: () => new Promise((r) => s.close(r)) };
}

test("Express on a RedisLimiter: headers from Redis's decision, the measured cost settled on Redis at the response's end, then a 429 with the core's body", async () => {
  const limiter = watched("fixed-window 1000/1d", "mw-express");
  const app = express();
  app.use(rateLimit({ limiter, key: () => "me", cost: { estimate: (req) => Number(req.get("x-estimate") ?? 600), actual: (_req, res) => res.locals.used } }));
  app.get("/llm", (_req, res) => {
    res.locals.used = 150;
    res.send("tokens");
  });
  const http = listening(await new Promise((r) => {
    const s = app.listen(0, "127.0.0.1", () => r(s));
  }));
  try {
    const first = await fetch(`${http.base}/llm`);
    assert.equal(first.status, 200);
    assert.equal(await first.text(), "tokens");
    assert.equal(first.headers.get("ratelimit"), '"per-ip";r=400;t=85400', "600 reserved at the request; the day's window ends in 85,400 s");
    const [done] = await limiter.settled(1);
    assert.deepEqual(done, { refunded: 450, charged: 0, unpaid: 0 });
    assert.equal((await limiter.peek("me")).remaining, 850, "150 charged on Redis");
    await fetch(`${http.base}/llm`);
    await limiter.settled(2);
    assert.equal((await limiter.peek("me")).remaining, 700, "150 charged twice");
    const denied = await fetch(`${http.base}/llm`, { headers: { "x-estimate": "800" } });
    assert.equal(denied.status, 429);
    assert.equal(denied.headers.get("content-type"), "application/problem+json; charset=utf-8");
    const body = await denied.json();
    assert.equal(body.status, 429);
    assert.deepEqual(body["violated-policies"], ["per-ip"]);
  } finally {
    await http.close();
  }
});

test("Hono on a RedisLimiter with skipSuccessfulRequests: a successful login is given back on Redis, a failed one stays charged", async () => {
  const limiter = watched("fixed-window 3/1d", "mw-hono");
  const app = new Hono();
  app.use(rateLimiter({ limiter, key: () => "alice", skipSuccessfulRequests: true }));
  app.post("/login", (c) => c.body(null, c.req.header("x-password") === "right" ? 200 : 401));
  const http = listening(await new Promise((r) => {
    const s = honoServe({ fetch: app.fetch, port: 0, hostname: "127.0.0.1" }, () => r(s));
  }));
  try {
    const statuses = [];
    for (const password of ["right", "wrong", "right", "wrong", "wrong"]) {
      const r = await fetch(`${http.base}/login`, { method: "POST", headers: { "x-password": password } });
      statuses.push(r.status);
      if (r.status !== 429) await limiter.settled(statuses.filter((s) => s !== 429).length);
    }
    assert.deepEqual(statuses, [200, 401, 200, 401, 401], "two failures charged of three");
    assert.equal((await limiter.peek("alice")).remaining, 0);
    const r = await fetch(`${http.base}/login`, { method: "POST", headers: { "x-password": "right" } });
    assert.equal(r.status, 429, "three failures: even the right password waits");
  } finally {
    await http.close();
  }
});
