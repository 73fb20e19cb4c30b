// Live mode against the real edge worker: starts `scripts/run` (wrangler dev, local workerd)
// on a loopback port with fresh storage, opens the page it serves (www/ as static assets),
// sends 25 requests from the page to /api/demo (per-ip token bucket, burst 20) and checks
// that the page shows the worker's 429 with its RateLimit, RateLimit-Policy and Retry-After
// headers. Stops wrangler with SIGINT (bounded).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { launch, open, artifacts } from "./browser.mjs";
import { startRun } from "../../tests/support/run.mjs";

let base, server, chrome;

before(async () => {
  const port = process.env.TOLLGATE_DEMO_PORT ? Number(process.env.TOLLGATE_DEMO_PORT) : undefined;
  server = await startRun({ port });
  base = server.base;
  chrome = await launch();
});

after(async () => {
  await chrome?.close();
  await server?.stop();
});

test("live mode shows the edge worker's decisions, and a 429 with its rate-limit headers", async () => {
  // The browser logs every 429 response as a failed resource load; that is the point here.
  const page = await open(chrome.context, `${base}/`, { ignore: (t) => /status of 429/.test(t) });
  assert.match(await page.textContent("#boot"), /Core loaded/);
  // The edge decides in real time: the live card's clock controls are shown disabled.
  const realtime = await page.$$eval("#live .realtime button", (bs) => bs.map((b) => b.disabled));
  assert.deepEqual(realtime, [true, true]);
  const send = async (method, path, count) => {
    await page.selectOption("#live-method", method);
    await page.fill("#live-path", path);
    await page.fill("#live-count", String(count));
    await page.click("#live-send");
    await page.waitForFunction((n) => document.getElementById("live-status").textContent.startsWith(`${n} sent`), count, { timeout: 60_000 });
    return page.$$eval("#live-table tbody tr", (rs) => rs.map((r) => [...r.children].map((c) => c.textContent)));
  };
  // The per-IP token bucket (burst 20): three requests, each allowed with its headers.
  const api = await send("GET", "/api/demo", 3);
  assert.deepEqual(api.map((r) => r[1]), ["200", "200", "200"]);
  for (const [, , rl, policy, retryAfter] of api) {
    assert.equal(policy, '"per-ip";q=20;w=2');
    assert.match(rl, /^"per-ip";r=1[0-9];t=[12]$/);
    assert.equal(retryAfter, "–");
  }
  // The login stack (fixed-window 5/min + sliding-window 20/h): a burst of 12 cannot all
  // pass, however slowly the local runtime answers (at most 5 + 5 across one boundary).
  const login = await send("POST", "/api/login", 12);
  assert.equal(login.length, 12);
  const limited = login.filter((r) => r[1] === "429");
  assert.ok(limited.length >= 2, `429s among ${login.map((r) => r[1]).join(",")}`);
  for (const [, , rl, policy, retryAfter] of limited) {
    // RateLimit-Policy describes both limits; RateLimit the one that denied (the core's
    // choice of the binding limit: the per-minute window).
    assert.equal(policy, '"per-ip-login.1";q=5;w=60, "per-ip-login.2";q=20;w=3600');
    assert.match(rl, /^"per-ip-login.1";r=0;t=\d+$/);
    assert.match(retryAfter, /^[1-9]\d*$/);
  }
  assert.match(await page.textContent("#live-status"), /limited \(429\)/);
  await (await page.$("#live")).screenshot({ path: join(await artifacts(), "live-mode.png") });
  assert.deepEqual(page.problems, []);
});
