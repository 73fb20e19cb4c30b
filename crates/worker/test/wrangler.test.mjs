// The README's run command: `scripts/run` builds and serves worker + demo origin + www/ on
// one loopback port under `wrangler dev`. Starts it, checks the three, stops it with SIGINT.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { startRun } from "../../../tests/support/run.mjs";

let base, server;

before(async () => {
  const port = process.env.TOLLGATE_SMOKE_PORT ? Number(process.env.TOLLGATE_SMOKE_PORT) : undefined;
  server = await startRun({ port, env: { ADMIN_SECRET: "smoke-admin" } });
  base = server.base;
});

after(async () => {
  await server?.stop();
});

test("wrangler dev serves the page, the limited demo API and the admin API on one port", async () => {
  const page = await fetch(`${base}/`);
  assert.equal(page.status, 200);
  assert.match(await page.text(), /tollgate/);
  const ip = "203.0.113.200";
  const api = await fetch(`${base}/api/hello`, { headers: { "cf-connecting-ip": ip } });
  assert.equal(api.status, 200);
  assert.equal((await api.json()).origin, "tollgate demo origin");
  assert.equal(api.headers.get("ratelimit-policy"), '"per-ip";q=20;w=2');
  assert.equal(api.headers.get("ratelimit"), '"per-ip";r=19;t=1');
  const stats = await fetch(`${base}/admin/v1/stats`, { headers: { authorization: "Bearer smoke-admin" } });
  assert.equal(stats.status, 200);
  assert.equal((await stats.json()).policies["per-ip"].admitted, 1);
});
