// The README's run command: `scripts/run` builds and serves worker + demo origin + www/ on
// one loopback port under `wrangler dev`. Starts it, checks the three, stops it with SIGINT.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { startRun } from "../../../tests/support/run.mjs";

let base, server;
const builds = (log) => log.split("Compiling to Wasm").length - 1;

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

test("scripts/run builds the worker once: wrangler's own build step finds it up to date", async () => {
  // Give wrangler's watcher time to react to the build's outputs, as it did before.
  await new Promise((r) => setTimeout(r, 5000));
  const log = server.log();
  assert.ok(builds(log) <= 1, `at most one real build, saw ${builds(log)}:\n${log}`);
  // wrangler 4.86's watcher reports its own watch_dir as changed once at start and reruns
  // the [build] step: that run, like wrangler's first, must find the build up to date.
  const steps = log.split("[custom build] Running:").slice(1);
  assert.ok(steps.length >= 1, log);
  for (const s of steps) assert.match(s, /^[^\n]*\n\[custom build\] build.sh: worker build is up to date/, log);
  assert.equal((await fetch(`${base}/health`)).status, 200);
});

test("scripts/run refuses an invalid TOLLGATE_CONFIG before building or serving, naming the field", async () => {
  const bad = JSON.stringify({ policies: { a: { limit: "10/s" } }, routes: [{ path: "/api/", policies: ["b"] }] });
  await assert.rejects(startRun({ env: { TOLLGATE_CONFIG: bad } }), (e) => {
    assert.match(e.message, /scripts\/run exited 1/);
    assert.match(e.message, /invalid config: routes\[0\]\.policies\[0\]: no policy named "b" in \[policies\]/);
    assert.doesNotMatch(e.message, /Compiling to Wasm/);
    return true;
  });
});
