// `name` has one meaning (issue 39): a Limiter's name is its policy's name in its metrics
// series and in its headers, so behind the Express and Hono middleware the `RateLimit-Policy`
// header and the metrics say the same name, and a middleware cannot silently name it another.
import { test } from "node:test";
import assert from "node:assert/strict";
import express from "express";
import { Hono } from "hono";
import { Limiter } from "tollgate";
import { rateLimit } from "tollgate/express";
import { rateLimiter } from "tollgate/hono";
import { prometheus } from "tollgate/metrics";

/** The name the metrics (the core's Prometheus text too) report for the limiter's series. */
function metricNames(limiter) {
  const fromCounts = new Set(limiter.metrics().map((c) => c.policy));
  const fromText = new Set([...prometheus([limiter]).matchAll(/tollgate_policy="([^"]*)"/g)].map((m) => m[1]));
  return { fromCounts: [...fromCounts], fromText: [...fromText] };
}

test("Express: a named Limiter's name is in RateLimit-Policy, RateLimit and its metrics", async () => {
  const limiter = new Limiter("fixed-window 5/min", { name: "per-ip" });
  const app = express();
  app.use(rateLimit({ limiter }));
  app.get("/", (req, res) => res.send("ok"));
  const server = await new Promise((r) => {
    const s = app.listen(0, "127.0.0.1", () => r(s));
  });
  try {
    const res = await fetch(`http://127.0.0.1:${server.address().port}/`);
    assert.equal(res.status, 200);
    assert.equal(res.headers.get("ratelimit-policy"), '"per-ip";q=5;w=60');
    assert.match(res.headers.get("ratelimit"), /^"per-ip";r=4;t=\d+$/);
  } finally {
    await new Promise((r) => server.close(r));
  }
  assert.deepEqual(metricNames(limiter), { fromCounts: ["per-ip"], fromText: ["per-ip"] });
  assert.equal(limiter.metrics()[0].decisions.admitted.store, 1);
});

test("Hono: a named stack's name is in RateLimit-Policy, the 429's violated-policies and its metrics", async () => {
  const limiter = Limiter.all(["fixed-window 1/min", "fixed-window 100/h"], { name: "per-key" });
  const app = new Hono();
  app.use(rateLimiter({ limiter, key: () => "k" }));
  app.get("/", (c) => c.text("ok"));
  const ok = await app.request("/");
  assert.equal(ok.status, 200);
  assert.equal(ok.headers.get("ratelimit-policy"), '"per-key.1";q=1;w=60, "per-key.2";q=100;w=3600');
  const denied = await app.request("/");
  assert.equal(denied.status, 429);
  assert.deepEqual((await denied.json())["violated-policies"], ["per-key.1"]);
  assert.deepEqual(metricNames(limiter), { fromCounts: ["per-key"], fromText: ["per-key"] });
});

test("an unnamed Limiter is \"default\" in both; headers() and problem() default to the limiter's name", () => {
  const plain = new Limiter("fixed-window 1/min");
  assert.equal(plain.name, "default");
  const named = new Limiter("fixed-window 1/min", { name: "login" });
  assert.equal(named.name, "login");
  const d = named.check("k", { now: 0 });
  assert.equal(named.headers(d)["RateLimit-Policy"], '"login";q=1;w=60');
  assert.equal(named.headers(d, "other")["RateLimit-Policy"], '"other";q=1;w=60', "an explicit name still wins in headers()");
  assert.deepEqual(JSON.parse(named.problem(named.check("k", { now: 0 })))["violated-policies"], ["login"]);
});

test("a middleware name other than the limiter's is refused by name; the same name is accepted", () => {
  for (const make of [rateLimit, rateLimiter]) {
    assert.throws(
      () => make({ limiter: new Limiter("1/s"), name: "per-ip" }),
      (e) =>
        e instanceof TypeError &&
        e.field === "name" &&
        e.rule === "not-the-limiters" &&
        /"per-ip" is not the limiter's name "default"; name the limiter instead \(new Limiter\(policy, \{ name: "per-ip" \}\)\)/.test(e.message),
    );
    assert.equal(typeof make({ limiter: new Limiter("1/s", { name: "per-ip" }), name: "per-ip" }), "function");
  }
});
