// `npm pack` gives an installable tarball: install it into an empty project (offline; the
// package has no dependencies) and import every entry point from there.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, writeFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));

test("npm pack -> npm install -> import works; the tarball holds every build and the types", () => {
  const dir = mkdtempSync(join(tmpdir(), "tollgate-pack-"));
  try {
    const [info] = JSON.parse(
      execFileSync("npm", ["pack", "--json", "--pack-destination", dir], { cwd: root, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] }),
    );
    const files = info.files.map((f) => f.path);
    for (const f of [
      "package.json",
      "README.md",
      "pkg/index.d.ts",
      "pkg/web.d.ts",
      "pkg/express.js",
      "pkg/hono.js",
      "pkg/node/index.js",
      "pkg/web/auto.js",
      "pkg/web/tollgate_wasm_bg.wasm",
      "pkg/bundler/index.js",
      "pkg/workers/index.js",
      "pkg/redis.js",
      "pkg/redis.d.ts",
      "pkg/redis/scripts.js",
      "pkg/redis/fleet.js",
      "pkg/redis/merged.js",
      "pkg/redis/tollgate_wasm.cjs",
      "pkg/plans.d.ts",
      "pkg/plans/node.js",
      "pkg/plans/browser.js",
      "pkg/plans/workers.js",
      "pkg/plans/plans.js",
      "pkg/plans/tollgate_wasm.cjs",
      "pkg/plans/tollgate_wasm.js",
      "pkg/web/counts.js",
      "pkg/metrics.js",
      "pkg/metrics.d.ts",
      "pkg/otel.js",
      "pkg/otel.d.ts",
    ]) {
      assert.ok(files.includes(f), `${f} missing from the tarball`);
    }
    assert.ok(!files.some((f) => f.startsWith("node_modules/") || f.startsWith("src/") || f.startsWith("test/")));
    // One .wasm for every build (Node and the bundler build share web's), tollgate/redis'
    // own (with the store feature, Node only) and tollgate/plans' own (the plans feature).
    assert.deepEqual(files.filter((f) => f.endsWith(".wasm")).sort(), [
      "pkg/plans/tollgate_wasm_bg.wasm",
      "pkg/redis/tollgate_wasm_bg.wasm",
      "pkg/web/tollgate_wasm_bg.wasm",
    ]);
    const app = join(dir, "app");
    execFileSync("mkdir", ["-p", app]);
    writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", private: true, type: "module" }));
    execFileSync("npm", ["install", "--offline", "--no-audit", "--no-fund", "--loglevel=error", join(dir, info.filename)], {
      cwd: app,
      stdio: ["ignore", "pipe", "pipe"],
    });
    writeFileSync(
      join(app, "main.js"),
      `import { Limiter, headers, fetchWithBackoff } from "tollgate";
       import { rateLimit } from "tollgate/express";
       import { rateLimiter } from "tollgate/hono";
       import { RedisLimiter } from "tollgate/redis";
       import { prometheus } from "tollgate/metrics";
       import { PlanLimiter } from "tollgate/plans";
       const l = new Limiter("3/min", { name: "p" });
       const d = l.check("x", { now: 0 });
       const scraped = prometheus(l).split(String.fromCharCode(10)).includes('tollgate_decisions_total{tollgate_policy="p",tollgate_outcome="admitted",tollgate_source="store"} 1');
       const plans = new PlanLimiter({ plans: { free: "3/min", pro: "30/min" } }).check("x", "pro", { now: 0 }).limit;
       const r = new RedisLimiter({ sendCommand: async () => [] }, "3/min", { namespace: "n", fallback: "open" });
       console.log(JSON.stringify({ d, express: typeof rateLimit, hono: typeof rateLimiter, fetch: typeof fetchWithBackoff, redis: r.policies, scraped, plans }));`,
    );
    const out = JSON.parse(execFileSync("node", ["main.js"], { cwd: app, encoding: "utf8" }));
    assert.deepEqual(out, {
      d: { allowed: true, limit: 3, remaining: 2, resetAfter: 20_000, retryAfter: 0, delay: 0 },
      express: "function",
      hono: "function",
      fetch: "function",
      redis: ["token-bucket 3/min"],
      scraped: true,
      plans: 30,
    });
    console.log(`# tarball ${info.filename}: ${statSync(join(dir, info.filename)).size} bytes packed, ${info.unpackedSize} unpacked, ${files.length} files`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
