// tollgate/plans in a real workerd runtime (Miniflare 4): a Hono app bundled as wrangler
// bundles it (the workerd/worker/browser conditions, the .wasm left as a module import),
// hono/jwt verifying tokens with the runtime's WebCrypto, and the PlanLimiter's own .wasm
// instantiated synchronously from the compiled module.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, writeFileSync, copyFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import { Miniflare } from "miniflare";
import { SignJWT } from "jose";

const root = fileURLToPath(new URL("..", import.meta.url));
const SECRET = "a test secret of thirty-two bytes or more";

function token(sub, plan, secret = SECRET) {
  return new SignJWT({ plan }).setProtectedHeader({ alg: "HS256" }).setSubject(sub).setExpirationTime("5m").sign(new TextEncoder().encode(secret));
}

test("a Worker with Hono, hono/jwt and tollgate/plans: each token's plan, forged 401, anonymous by CF-Connecting-IP", { timeout: 60_000 }, async () => {
  const dir = mkdtempSync(join(tmpdir(), "tollgate-plans-workerd-"));
  const entry = join(root, "test", ".plans-worker-entry.js");
  let mf;
  try {
    writeFileSync(
      entry,
      `import { Hono } from "hono";
       import { jwt } from "hono/jwt";
       import { PlanLimiter } from "tollgate/plans";
       import { rateLimiter } from "tollgate/hono";
       const limiter = new PlanLimiter({ plans: { free: "2/hour", pro: "5/hour" } });
       const auth = jwt({ secret: ${JSON.stringify(SECRET)}, alg: "HS256" });
       const app = new Hono();
       app.use((c, next) => (c.req.header("authorization") ? auth(c, next) : next()));
       app.use(rateLimiter({ limiter, key: (c) => c.get("jwtPayload")?.sub, plan: (c) => c.get("jwtPayload")?.plan }));
       app.get("/", (c) => c.text("ok"));
       export default app;`,
    );
    await build({
      entryPoints: [entry],
      bundle: true,
      format: "esm",
      platform: "neutral",
      conditions: ["workerd", "worker", "browser"],
      mainFields: ["module", "main"],
      external: ["*.wasm"],
      outfile: join(dir, "worker.js"),
      logLevel: "silent",
    });
    const bundled = readFileSync(join(dir, "worker.js"), "utf8");
    assert.match(bundled, /initSync\(\{ module: wasmModule\d* \}\)/, "the workers build of tollgate/plans");
    copyFileSync(join(root, "pkg/plans/tollgate_wasm_bg.wasm"), join(dir, "tollgate_wasm_bg.wasm"));
    mf = new Miniflare({
      modules: true,
      modulesRoot: dir,
      scriptPath: join(dir, "worker.js"),
      modulesRules: [
        { type: "ESModule", include: ["**/*.js"] },
        { type: "CompiledWasm", include: ["**/*.wasm"] },
      ],
      compatibilityDate: "2026-04-01",
      cf: false,
    });
    const calls = async (n, headers) => {
      const out = [];
      for (let i = 0; i < n; i++) {
        const r = await mf.dispatchFetch("http://localhost/", { headers: { "cf-connecting-ip": "203.0.113.9", ...headers } });
        await r.arrayBuffer();
        out.push(r);
      }
      return out;
    };
    const bearer = async (sub, plan, secret) => ({ authorization: `Bearer ${await token(sub, plan, secret)}` });
    const pro = await calls(7, await bearer("bob", "pro"));
    assert.deepEqual(pro.map((r) => r.status), [200, 200, 200, 200, 200, 429, 429]);
    assert.equal(pro[0].headers.get("ratelimit-policy"), '"pro";q=5;w=3600');
    const free = await calls(3, await bearer("alice", "free"));
    assert.deepEqual(free.map((r) => r.status), [200, 200, 429]);
    assert.equal(free[2].headers.get("ratelimit-policy"), '"free";q=2;w=3600');
    const forged = await calls(2, await bearer("mallory", "pro", "another secret, which the worker does not know"));
    assert.deepEqual(forged.map((r) => r.status), [401, 401]);
    const anonymous = await calls(3, {});
    assert.deepEqual(anonymous.map((r) => r.status), [200, 200, 429]);
    assert.equal(anonymous[0].headers.get("ratelimit-policy"), '"free";q=2;w=3600');
  } finally {
    await mf?.dispose();
    rmSync(entry, { force: true });
    rmSync(dir, { recursive: true, force: true });
  }
});
