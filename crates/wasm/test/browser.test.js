// The package in a real page in headless Chromium (playwright-core, /usr/bin/chromium):
// `import { Limiter } from "tollgate"` resolved through the package.json `exports`
// "browser" condition (an import map, as a page without a bundler has), and the `./web`
// build with an explicit `await init()`.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { readFile, readdir, mkdtemp, rm } from "node:fs/promises";
import { existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, normalize } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const root = fileURLToPath(new URL("..", import.meta.url));
const pkgJson = JSON.parse(await readFile(join(root, "package.json"), "utf8"));
const browserEntry = pkgJson.exports["."].browser;
const webEntry = pkgJson.exports["./web"].default;
const types = { ".js": "text/javascript", ".wasm": "application/wasm", ".html": "text/html", ".json": "application/json" };

const pages = {
  "/auto.html": `<!doctype html><script type="importmap">{"imports": {"tollgate": "/${browserEntry.slice(2)}"}}</script>
<script type="module">
  import { Limiter, headers } from "tollgate";
  const l = new Limiter("fixed-window 2/min");
  const d = [l.check("ip", { now: 1000 }), l.check("ip", { now: 1000 }), l.check("ip", { now: 1000 })];
  let error;
  try { new Limiter("10/fortnight"); } catch (e) { error = { name: e.name, field: e.field, rule: e.rule }; }
  window.result = { decisions: d, headers: l.headers(d[2], "per-ip"), size: l.size, error };
</script>`,
  // Every conformance vector, replayed in the page by test/replay.js (as vectors.test.js does
  // in Node), through check() and through allow().
  "/vectors.html": `<!doctype html><script type="importmap">{"imports": {"tollgate": "/${browserEntry.slice(2)}"}}</script>
<script type="module">
  import { Limiter } from "tollgate";
  import { replay } from "/test/replay.js";
  const vectors = await (await fetch("/test/vectors.json")).json();
  window.result = { count: vectors.length, failures: vectors.flatMap((v) => [...replay(Limiter, v), ...replay(Limiter, v, true)]) };
</script>`,
  // The reserve-and-settle vectors (tests/vectors/settle/), by test/settle-replay.js, as
  // settle.test.js replays them in Node.
  "/settle.html": `<!doctype html><script type="importmap">{"imports": {"tollgate": "/${browserEntry.slice(2)}"}}</script>
<script type="module">
  import { Limiter } from "tollgate";
  import { replaySettle } from "/test/settle-replay.js";
  const vectors = await (await fetch("/test/settle-vectors.json")).json();
  window.result = { count: vectors.length, failures: vectors.flatMap((v) => replaySettle(Limiter, v)) };
</script>`,
  "/web.html": `<!doctype html><script type="module">
  import init, { Limiter } from "/${webEntry.slice(2)}";
  await init();
  window.result = new Limiter("10/s burst 20").check("k", { now: 0 });
</script>`,
};

/** The step vectors of tests/vectors/ and test/vectors/ (not the invalid-policy cases). */
async function vectors() {
  const dirs = [join(root, "../../tests/vectors"), join(root, "test/vectors")].filter((d) => existsSync(d));
  const all = [];
  for (const dir of dirs) {
    for (const f of (await readdir(dir)).filter((f) => f.endsWith(".json")).sort()) {
      const v = JSON.parse(await readFile(join(dir, f), "utf8"));
      if (v.steps) all.push(v);
    }
  }
  return all;
}

/** The reserve-and-settle vectors of tests/vectors/settle/, each named by its file. */
async function settleVectors() {
  const dir = join(root, "../../tests/vectors/settle");
  const files = (await readdir(dir)).filter((f) => f.endsWith(".json")).sort();
  return Promise.all(files.map(async (f) => ({ name: f, ...JSON.parse(await readFile(join(dir, f), "utf8")) })));
}

let server;
let base;
let browser;
let userDataDir;

before(async () => {
  server = createServer(async (req, res) => {
    const path = new URL(req.url, "http://x").pathname;
    if (pages[path]) {
      res.writeHead(200, { "content-type": "text/html" });
      return res.end(pages[path]);
    }
    if (path === "/test/vectors.json") {
      res.writeHead(200, { "content-type": types[".json"] });
      return res.end(JSON.stringify(await vectors()));
    }
    if (path === "/test/settle-vectors.json") {
      res.writeHead(200, { "content-type": types[".json"] });
      return res.end(JSON.stringify(await settleVectors()));
    }
    if (path === "/test/replay.js" || path === "/test/settle-replay.js") {
      res.writeHead(200, { "content-type": types[".js"] });
      return res.end(await readFile(join(root, path)));
    }
    const file = normalize(join(root, path));
    if (!file.startsWith(join(root, "pkg")) || !existsSync(file)) {
      res.writeHead(404);
      return res.end();
    }
    res.writeHead(200, { "content-type": types[file.slice(file.lastIndexOf("."))] ?? "application/octet-stream" });
    res.end(await readFile(file));
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  base = `http://127.0.0.1:${server.address().port}`;
  userDataDir = await mkdtemp(join(tmpdir(), "tollgate-chromium-"));
  browser = await chromium.launchPersistentContext(userDataDir, {
    executablePath: "/usr/bin/chromium",
    headless: true,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
});

after(async () => {
  await browser?.close();
  await new Promise((r) => server.close(r));
  if (userDataDir) await rm(userDataDir, { recursive: true, force: true });
});

async function resultOf(path) {
  const page = await browser.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(base + path);
  await page.waitForFunction(() => window.result !== undefined || document.readyState === "complete", null, { timeout: 15_000 });
  await page.waitForFunction(() => window.result !== undefined, null, { timeout: 15_000 }).catch(() => {});
  const result = await page.evaluate(() => window.result);
  await page.close();
  assert.deepEqual(errors, []);
  return result;
}

test('import { Limiter } from "tollgate" in a page decides like Node', async () => {
  const r = await resultOf("/auto.html");
  assert.deepEqual(r.decisions.map((d) => d.allowed), [true, true, false]);
  assert.deepEqual(r.decisions[2], { allowed: false, limit: 2, remaining: 0, resetAfter: 59_000, retryAfter: 59_000, delay: 0 });
  assert.equal(r.headers["RateLimit-Policy"], '"per-ip";q=2;w=60');
  assert.equal(r.headers["Retry-After"], "59");
  assert.equal(r.size, 1);
  assert.deepEqual(r.error, { name: "TypeError", field: "window", rule: "unknown-unit" });
});

test("every shared vector gives the recorded decisions in Chromium, through check() and allow()", async () => {
  const r = await resultOf("/vectors.html");
  assert.equal(r.count, (await vectors()).length);
  assert.ok(r.count >= 10, `only ${r.count} vectors`);
  assert.deepEqual(r.failures, []);
});

test("every settle vector gives the expected answers in Chromium (reserve, settle, settle twice)", async () => {
  const r = await resultOf("/settle.html");
  assert.equal(r.count, (await settleVectors()).length);
  assert.ok(r.count >= 9, `only ${r.count} settle vectors`);
  assert.deepEqual(r.failures, []);
});

test("the web build loads with await init()", async () => {
  const r = await resultOf("/web.html");
  assert.deepEqual(r, { allowed: true, limit: 20, remaining: 19, resetAfter: 100, retryAfter: 0, delay: 0 });
});
