// The README's run command: `scripts/run` builds and serves worker + demo origin + www/ on
// one loopback port under `wrangler dev`. Starts it, checks the three, stops it with SIGINT.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
let PORT, base, child, state, log = "";

/** A free loopback port (asked from the OS, then released for wrangler to take). */
async function freePort() {
  const net = await import("node:net");
  return await new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

before(async () => {
  PORT = Number(process.env.TOLLGATE_SMOKE_PORT ?? (await freePort()));
  base = `http://127.0.0.1:${PORT}`;
  state = fs.mkdtempSync(path.join(os.tmpdir(), "tollgate-wrangler-"));
  child = spawn("bash", ["scripts/run", "--persist-to", state], {
    cwd: root,
    env: { ...process.env, PORT: String(PORT), CI: "true", ADMIN_SECRET: "smoke-admin" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  child.stdout.on("data", (d) => (log += d));
  child.stderr.on("data", (d) => (log += d));
  const deadline = Date.now() + 300_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`scripts/run exited ${child.exitCode}:\n${log}`);
    try {
      const r = await fetch(`${base}/health`);
      if (r.ok) break;
    } catch {}
    if (Date.now() > deadline) throw new Error(`not up in time:\n${log}`);
    await new Promise((r) => setTimeout(r, 1000));
  }
});

after(async () => {
  if (child && child.exitCode === null) {
    const exited = new Promise((r) => child.once("exit", r));
    child.kill("SIGINT");
    await Promise.race([exited, new Promise((r) => setTimeout(r, 15_000))]);
    if (child.exitCode === null) child.kill("SIGKILL");
  }
  fs.rmSync(state, { recursive: true, force: true });
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
