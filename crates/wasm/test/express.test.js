// The Express middleware in a real Express app on 127.0.0.1.
import { test } from "node:test";
import assert from "node:assert/strict";
import express from "express";
import { Limiter } from "tollgate";
import { rateLimit } from "tollgate/express";

async function serve(app) {
  const server = await new Promise((r) => {
    const s = app.listen(0, "127.0.0.1", () => r(s));
  });
  return { base: `http://127.0.0.1:${server.address().port}`, close: () => new Promise((r) => server.close(r)) };
}

test("keyed by client IP: 429 with headers and problem+json once the quota is spent", async () => {
  const app = express();
  app.use(rateLimit({ limiter: new Limiter("fixed-window 3/min", { name: "per-ip" }), exempt: ["/csp-report"] }));
  app.get("/api", (req, res) => res.send("ok"));
  app.post("/csp-report", (req, res) => res.status(204).end());
  const { base, close } = await serve(app);
  try {
    for (let i = 0; i < 3; i++) {
      const res = await fetch(`${base}/api`);
      assert.equal(res.status, 200);
      assert.equal(await res.text(), "ok");
      assert.equal(res.headers.get("ratelimit-policy"), '"per-ip";q=3;w=60');
      assert.match(res.headers.get("ratelimit"), new RegExp(`^"per-ip";r=${2 - i};t=\\d+$`));
    }
    const denied = await fetch(`${base}/api`);
    assert.equal(denied.status, 429);
    assert.ok(Number(denied.headers.get("retry-after")) >= 1);
    assert.equal(denied.headers.get("cache-control"), "no-store");
    assert.match(denied.headers.get("content-type"), /^application\/problem\+json/);
    // The core's body, byte for byte as the edge worker sends it.
    const wait = denied.headers.get("retry-after");
    assert.equal(
      await denied.text(),
      `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"detail":"Rate limit exceeded; retry in ${wait} s.","violated-policies":["per-ip"]}`,
    );
    // Exempt paths are never limited (and never counted).
    for (let i = 0; i < 5; i++) assert.equal((await fetch(`${base}/csp-report`, { method: "POST" })).status, 204);
  } finally {
    await close();
  }
});

test("keyed by a header: each API key has its own quota; legacy headers on request", async () => {
  const app = express();
  app.use(rateLimit({ limiter: new Limiter("1/min"), header: "X-API-Key", legacy: true }));
  app.get("/", (req, res) => res.send("ok"));
  const { base, close } = await serve(app);
  try {
    const a1 = await fetch(base, { headers: { "x-api-key": "alpha" } });
    assert.equal(a1.status, 200);
    assert.equal(a1.headers.get("x-ratelimit-limit"), "1");
    assert.equal(a1.headers.get("x-ratelimit-remaining"), "0");
    assert.equal((await fetch(base, { headers: { "x-api-key": "alpha" } })).status, 429);
    assert.equal((await fetch(base, { headers: { "x-api-key": "beta" } })).status, 200);
  } finally {
    await close();
  }
});

test("invalid middleware options throw naming the field", () => {
  assert.throws(() => rateLimit({}), (e) => e instanceof TypeError && e.field === "limiter");
  assert.throws(() => rateLimit({ limiter: new Limiter("1/s"), exempt: "/x" }), (e) => e.field === "exempt");
});
