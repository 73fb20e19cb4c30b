// The Hono middleware in a real Hono app: through app.request(), and over HTTP with the
// Node adapter (keyed by the socket's address).
import { test } from "node:test";
import assert from "node:assert/strict";
import { Hono } from "hono";
import { serve } from "@hono/node-server";
import { Limiter } from "tollgate";
import { rateLimiter } from "tollgate/hono";

test("keyed by a header; 429 with headers and problem+json; exempt paths pass", async () => {
  const app = new Hono();
  app.use(rateLimiter({ limiter: new Limiter("2/min", { name: "per-key" }), header: "x-api-key", exempt: ["/health"] }));
  app.get("/api", (c) => c.text("ok"));
  app.get("/health", (c) => c.text("up"));
  const call = (key) => app.request("/api", { headers: { "x-api-key": key } });
  const first = await call("alpha");
  assert.equal(first.status, 200);
  assert.equal(await first.text(), "ok");
  assert.equal(first.headers.get("ratelimit-policy"), '"per-key";q=2;w=60');
  assert.equal((await call("alpha")).status, 200);
  const denied = await call("alpha");
  assert.equal(denied.status, 429);
  assert.ok(Number(denied.headers.get("retry-after")) >= 1);
  assert.equal(denied.headers.get("cache-control"), "no-store");
  assert.equal(denied.headers.get("content-type"), "application/problem+json");
  assert.deepEqual((await denied.json())["violated-policies"], ["per-key"]);
  assert.equal((await call("beta")).status, 200);
  for (let i = 0; i < 5; i++) assert.equal((await app.request("/health")).status, 200);
});

test("keyed by client IP under the Node adapter, never by X-Forwarded-For", async () => {
  const app = new Hono();
  app.use(rateLimiter({ limiter: new Limiter("fixed-window 2/min") }));
  app.get("/", (c) => c.text("ok"));
  const server = await new Promise((r) => {
    const s = serve({ fetch: app.fetch, port: 0, hostname: "127.0.0.1" }, () => r(s));
  });
  try {
    const base = `http://127.0.0.1:${server.address().port}/`;
    // Spoofed X-Forwarded-For values do not buy separate quotas.
    const statuses = [];
    for (const xff of ["1.1.1.1", "2.2.2.2", "3.3.3.3"]) {
      statuses.push((await fetch(base, { headers: { "x-forwarded-for": xff } })).status);
    }
    assert.deepEqual(statuses, [200, 200, 429]);
  } finally {
    await new Promise((r) => server.close(r));
  }
});
