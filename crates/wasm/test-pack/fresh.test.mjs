// The npm tarball as a user gets it: scripts/test.d/70-package.sh packs it, installs it
// offline into a fresh project (crates/wasm/test-pack/.fresh/, git-ignored) and runs this
// file there, so "tollgate" resolves to the installed tarball, never to the repository's
// sources. The tools (express, typescript, esbuild, vite, playwright-core, node-redis) are the
// repository's pinned ones, found in the parent directories' node_modules. Every example is
// the README's own, extracted by scripts/readme-snippets.mjs (snippets/ts, snippets/js).
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { createRequire } from "node:module";
import { dirname, extname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const repo = process.env.TOLLGATE_REPO;
const installed = join(here, "node_modules", "tollgate");
const snippets = (kind) => JSON.parse(readFileSync(join(here, "snippets", kind, "index.json"), "utf8"));
const snippet = (kind, file) => readFileSync(join(here, "snippets", kind, file), "utf8");
const bin = (name) => join(repo, "node_modules", ".bin", name);

function freePort() {
  return new Promise((resolve) => {
    const s = createServer().listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

test("the tarball holds the built package, its licenses and README, and nothing of the repository", () => {
  const pkg = JSON.parse(readFileSync(join(installed, "package.json"), "utf8"));
  for (const f of ["LICENSE-MIT", "LICENSE-APACHE", "README.md", "pkg/web/tollgate_wasm_bg.wasm", "pkg/redis.js"]) {
    assert.ok(existsSync(join(installed, f)), `${f} is in the tarball`);
  }
  for (const f of ["js", "test", "bench", "src", "Cargo.toml", "build.sh", "DEVELOPING.md"]) {
    assert.ok(!existsSync(join(installed, f)), `${f} is not in the tarball`);
  }
  assert.match(readFileSync(join(installed, "LICENSE-MIT"), "utf8"), /Copyright \(c\) The tollgate developers/);
  assert.match(readFileSync(join(installed, "LICENSE-APACHE"), "utf8"), /Apache License\s+Version 2\.0/);
  assert.equal(pkg.license, "MIT OR Apache-2.0");
  // Every subpath has its types.
  for (const [sub, target] of Object.entries(pkg.exports)) {
    if (sub === "./package.json") continue;
    assert.ok(typeof target.types === "string" && existsSync(join(installed, target.types)), `${sub} has types`);
  }
  // The npm page: no link out of the package (it would break there), no development section.
  const readme = readFileSync(join(installed, "README.md"), "utf8");
  const relative = [...readme.matchAll(/\]\(([^)]+)\)/g)].map((m) => m[1]).filter((u) => !/^(https?:|#)/.test(u));
  assert.deepEqual(relative, [], "relative links in the npm README");
  assert.doesNotMatch(readme, /^#+ Developing/m);
});

test("ESM: import from every entry point, and a decision", async () => {
  const { Limiter } = await import("tollgate");
  const limiter = new Limiter("2/s");
  assert.deepEqual([1, 2, 3].map(() => limiter.check("k", { now: 0 }).allowed), [true, true, false]);
  for (const sub of ["tollgate/web", "tollgate/express", "tollgate/hono", "tollgate/redis", "tollgate/plans", "tollgate/bundler"]) {
    if (sub === "tollgate/bundler") {
      assert.ok(existsSync(fileURLToPath(import.meta.resolve(sub))), `${sub} resolves`);
      continue;
    }
    const m = await import(sub);
    assert.ok(Object.keys(m).length > 0, `${sub} exports something`);
  }
  const wasm = fileURLToPath(import.meta.resolve("tollgate/tollgate.wasm"));
  assert.equal(extname(wasm), ".wasm");
  assert.ok(WebAssembly.validate(readFileSync(wasm)), "tollgate/tollgate.wasm is the .wasm");
});

test("CommonJS: require() as the README declares (Node's require of ES modules)", () => {
  writeFileSync(
    join(here, "cjs.cjs"),
    `const { Limiter } = require("tollgate");
const { rateLimit } = require("tollgate/express");
const { RedisLimiter } = require("tollgate/redis");
const { PlanLimiter } = require("tollgate/plans");
const l = new Limiter("1/s");
console.log(JSON.stringify([l.check("a", { now: 0 }).allowed, l.check("a", { now: 0 }).allowed, typeof rateLimit, typeof RedisLimiter, typeof PlanLimiter]));
`,
  );
  const r = spawnSync(process.execPath, ["cjs.cjs"], { cwd: here, encoding: "utf8" });
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stdout.trim(), '[true,false,"function","function","function"]');
  const engines = JSON.parse(readFileSync(join(installed, "package.json"), "utf8")).engines.node;
  assert.equal(engines, "^20.19.0 || >=22.12.0", "engines admits only Nodes with require(esm) on by default");
});

test("tsc --strict over every TypeScript/JavaScript example of the READMEs, and the header types", () => {
  const dir = join(here, "snippets", "ts");
  // RateLimitHeaders where users put headers (the README examples do the first).
  writeFileSync(
    join(dir, "headers-assignable.ts"),
    `import type { OutgoingHttpHeaders, ServerResponse } from "node:http";
import { Limiter, type RateLimitHeaders } from "tollgate";
const limiter = new Limiter("1/s");
const h: RateLimitHeaders = limiter.headers(limiter.check("k"), "per-ip");
export const init: HeadersInit = h;
export const node: OutgoingHttpHeaders = h;
export const headers = new Headers(h);
export const response = new Response("slow down", { status: 429, headers: h });
export function deny(res: ServerResponse): void {
  res.writeHead(429, h);
}
`,
  );
  writeFileSync(
    join(dir, "tsconfig.json"),
    JSON.stringify({
      compilerOptions: {
        target: "ES2022",
        module: "NodeNext",
        moduleResolution: "NodeNext",
        strict: true,
        noEmit: true,
        skipLibCheck: true,
        lib: ["ES2022", "DOM"],
        types: ["node"],
      },
      include: ["*.ts"],
    }),
  );
  // A package.json with "type": "module" there, so that the snippets are ES modules.
  writeFileSync(join(dir, "package.json"), '{ "type": "module" }\n');
  const n = readdirSync(dir).filter((f) => f.endsWith(".ts")).length;
  assert.ok(n >= 10, `the READMEs' snippets were extracted (${n} files)`);
  const r = spawnSync(process.execPath, [join(repo, "crates/wasm/node_modules/typescript/bin/tsc"), "-p", dir], { encoding: "utf8" });
  assert.equal(r.status, 0, r.stdout + r.stderr);
});

test("Express: the README's app answers 429 with the documented headers", async () => {
  const file = snippets("js").find((s) => snippet("js", s.file).includes('from "tollgate/express"') && snippet("js", s.file).includes("app.listen"));
  assert.ok(file, "the README has an Express app");
  copyFileSync(join(here, "snippets", "js", file.file), join(here, "express-app.mjs"));
  const port = await freePort();
  const app = spawn(process.execPath, ["express-app.mjs"], { cwd: here, env: { ...process.env, PORT: String(port) }, stdio: "inherit" });
  try {
    const url = `http://127.0.0.1:${port}/`;
    let r;
    for (let i = 0; i < 100; i++) {
      try {
        r = await fetch(url);
        break;
      } catch {
        await new Promise((ok) => setTimeout(ok, 50));
      }
    }
    assert.ok(r, "the app listens");
    assert.equal(r.status, 200);
    assert.equal(r.headers.get("ratelimit-policy"), '"per-ip";q=20;w=2');
    assert.match(r.headers.get("ratelimit"), /^"per-ip";r=19;t=\d+$/);
    let denied;
    for (let i = 0; i < 60 && !denied; i++) {
      const x = await fetch(url);
      if (x.status === 429) denied = x;
    }
    assert.ok(denied, "a 429 within 60 requests of a 20-burst");
    assert.match(denied.headers.get("retry-after"), /^[1-9]\d*$/);
    assert.equal(denied.headers.get("cache-control"), "no-store");
    assert.match(denied.headers.get("content-type"), /^application\/problem\+json/);
    assert.match(denied.headers.get("ratelimit"), /^"per-ip";r=0;t=\d+$/);
    const body = await denied.json();
    assert.equal(body.type, "https://iana.org/assignments/http-problem-types#quota-exceeded");
    assert.deepEqual(body["violated-policies"], ["per-ip"]);
    assert.equal((await fetch(`${url}health`)).headers.get("ratelimit"), null, "/health is exempt");
  } finally {
    app.kill();
  }
});

/**
 * Runs `file` (a snippet copied into this project) with `env` and resolves to { code,
 * stdout, stderr } when it exits, or rejects after `ms` (the process then killed): an
 * example that never ends is a failure, bounded in time.
 */
function runBounded(file, env, ms) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [file], { cwd: here, env: { ...process.env, ...env } });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (b) => (stdout += b));
    child.stderr.on("data", (b) => (stderr += b));
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`${file} did not exit within ${ms} ms (stdout: ${stdout}, stderr: ${stderr})`));
    }, ms);
    child.on("exit", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** A redis-server on a free loopback port in a temporary directory: { url, stop }. */
async function redisServer() {
  const port = await freePort();
  const dir = join(here, `redis-${port}`);
  mkdirSync(dir, { recursive: true });
  const server = spawn("redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir], { stdio: "ignore" });
  const url = `redis://127.0.0.1:${port}`;
  for (let i = 0; i < 100; i++) {
    const ping = spawnSync("redis-cli", ["-p", String(port), "ping"], { encoding: "utf8" });
    if (ping.stdout.trim() === "PONG") break;
    await new Promise((ok) => setTimeout(ok, 50));
  }
  return { url, stop: () => new Promise((ok) => (server.exitCode !== null ? ok() : (server.once("exit", ok), server.kill()))) };
}

/** The first answer of `url` (retried while the app starts, for at most 5 s). */
async function firstAnswer(url, init) {
  for (let i = 0; i < 100; i++) {
    try {
      return await fetch(url, init);
    } catch {
      await new Promise((ok) => setTimeout(ok, 50));
    }
  }
  assert.fail(`nothing answered ${url}`);
}

// Every JavaScript example of the READMEs runs as written (issue 39): an app is started on a
// free port (PORT), sent a request and stopped; the Redis example runs against a
// redis-server of its own and must end by itself; any other runs to its end. The browser
// recipes (`document`) run in Chromium below.
for (const s of snippets("js").filter((s) => s.file.endsWith(".mjs"))) {
  const code = snippet("js", s.file);
  if (code.includes("document.")) continue;
  test(`the README example at ${s.source} runs as written`, async () => {
    const file = `run-${s.file}`;
    copyFileSync(join(here, "snippets", "js", s.file), join(here, file));
    // An app (Express or Hono) must serve as written: one that never listens fails here.
    if (/from "(express|hono)"/.test(code)) {
      const port = await freePort();
      const app = spawn(process.execPath, [file], { cwd: here, env: { ...process.env, PORT: String(port) }, stdio: "inherit" });
      try {
        const path = code.includes('app.get("/api"') ? "/api" : "/";
        const r = await firstAnswer(`http://127.0.0.1:${port}${path}`, { headers: { "x-api-key": "k" } });
        assert.equal(r.status, 200, `${s.source}: GET ${path}`);
        // The limiter's name; with plans, the default plan's (the request has no token).
        const name = code.includes('from "tollgate/plans"') ? "free" : "per-ip";
        assert.match(r.headers.get("ratelimit-policy") ?? "", new RegExp(`^"${name}";q=\\d+;w=\\d+$`), `${s.source}: the limiter's name in RateLimit-Policy`);
        if (code.includes('"/metrics"')) {
          const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
          assert.match(text, /tollgate_decisions_total\{tollgate_policy="per-ip",tollgate_route="\/api",tollgate_outcome="admitted",tollgate_source="store"\} 1/);
          assert.match(text, /process_cpu_user_seconds_total/, "prom-client's own metrics too");
        }
      } finally {
        await new Promise((ok) => (app.exitCode !== null ? ok() : (app.once("exit", ok), app.kill())));
      }
    } else if (code.includes("REDIS_URL")) {
      const redis = await redisServer();
      try {
        const r = await runBounded(file, { REDIS_URL: redis.url }, 15_000);
        assert.equal(r.code, 0, r.stderr);
        assert.match(r.stdout, /redis/, `${s.source} decided on Redis: ${r.stdout}`);
      } finally {
        await redis.stop();
      }
    } else {
      const r = await runBounded(file, {}, 15_000);
      assert.equal(r.code, 0, r.stderr);
    }
  });
}

test("tollgate/redis: an unconnected node-redis client is refused with the documented error", async () => {
  const { createClient } = createRequire(join(repo, "crates/wasm/package.json"))("redis");
  const { RedisLimiter, RedisLimiterError } = await import("tollgate/redis");
  const client = createClient({ url: "redis://127.0.0.1:1/" }); // never connected
  const limiter = new RedisLimiter(client, "10/s burst 20", { namespace: "api", fallback: "local" });
  await assert.rejects(limiter.check("203.0.113.7"), (e) => {
    assert.ok(e instanceof RedisLimiterError);
    assert.equal(e.code, "not-connected");
    assert.match(e.message, /not connected: call `await client\.connect\(\)`/);
    return true;
  });
  assert.match(readFileSync(join(installed, "README.md"), "utf8"), /not-connected/, "the README documents it");
});

test("a browser bundle made by the README's esbuild recipe decides in Chromium", async () => {
  const web = recipe('"tollgate/tollgate.wasm"', "esbuild", "web", "app.js");
  const dist = join(web, "dist");
  assert.ok(readdirSync(dist).some((f) => f.endsWith(".wasm")), "the .wasm was copied into dist/");
  writeFileSync(join(dist, "index.html"), page("app.js"));
  await decidesInChromium(dist);
});

test("a browser build made by the README's Vite recipe decides in Chromium", async () => {
  const dist = join(recipe('"tollgate/tollgate.wasm?url"', "vite", "vite", "main.js", page("/main.js")), "dist");
  assert.ok(readdirSync(join(dist, "assets")).some((f) => f.endsWith(".wasm")), "the .wasm was copied into dist/assets/");
  await decidesInChromium(dist);
});

/**
 * Runs a README's bundler recipe: the JS example holding `marker`, written to `dir/file`
 * (with `index.html` beside it when given), then the next shell example's `npx <tool> ...`
 * line, run there with the repository's pinned `tool`. Returns the project's directory.
 */
function recipe(marker, tool, dir, file, index) {
  const js = snippets("js");
  const i = js.findIndex((s) => snippet("js", s.file).includes(marker));
  assert.ok(i >= 0, `the README has a ${tool} recipe`);
  const command = js.slice(i + 1).find((s) => s.file.endsWith(".sh") && snippet("js", s.file).includes(tool));
  assert.ok(command, `the recipe's ${tool} command`);
  const app = join(here, dir);
  mkdirSync(app, { recursive: true });
  copyFileSync(join(here, "snippets", "js", js[i].file), join(app, file));
  if (index !== undefined) writeFileSync(join(app, "index.html"), index);
  const line = snippet("js", command.file).split("\n").find((l) => l.startsWith(`npx ${tool} `));
  const args = line.slice(`npx ${tool} `.length).split(/\s+/).filter(Boolean);
  const b = spawnSync(bin(tool), args, { cwd: app, encoding: "utf8", env: { ...process.env, NO_COLOR: "1" } });
  assert.equal(b.status, 0, b.stdout + b.stderr);
  return app;
}

/** A page that loads `script` as a module (and no favicon). */
function page(script) {
  return `<!doctype html><meta charset="utf-8"><title>t</title><link rel="icon" href="data:,"><body><script type="module" src="${script}"></script>`;
}

/** Serves `dist` on a loopback port, opens its index.html in headless Chromium and asserts
 * that the page decided ("allowed") without an error. */
async function decidesInChromium(dist) {
  const types = { ".html": "text/html", ".js": "text/javascript", ".wasm": "application/wasm" };
  const server = createServer((req, res) => {
    const file = join(dist, req.url === "/" ? "index.html" : decodeURIComponent(req.url.slice(1)));
    if (!file.startsWith(dist) || !existsSync(file)) return res.writeHead(404).end();
    res.writeHead(200, { "content-type": types[extname(file)] ?? "application/octet-stream" }).end(readFileSync(file));
  });
  await new Promise((ok) => server.listen(0, "127.0.0.1", ok));
  const { chromium } = createRequire(join(repo, "package.json"))("playwright-core");
  const browser = await chromium.launch({
    executablePath: "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  try {
    const tab = await browser.newPage();
    const errors = [];
    tab.on("pageerror", (e) => errors.push(String(e)));
    tab.on("console", (m) => m.type() === "error" && errors.push(m.text()));
    await tab.goto(`http://127.0.0.1:${server.address().port}/`);
    await tab.waitForFunction(() => document.body.textContent !== "", null, { timeout: 15_000 });
    assert.equal(await tab.textContent("body"), "allowed");
    assert.deepEqual(errors, []);
  } finally {
    await browser.close();
    server.close();
  }
}

