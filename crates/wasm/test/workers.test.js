// The "workerd" build in a real workerd runtime (Miniflare 4, from the root node_modules):
// a Worker bundled the way wrangler does it (esbuild with the workerd/worker/browser
// conditions, the .wasm left as a module import) imports { Limiter } from "tollgate".
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, writeFileSync, mkdirSync, copyFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import { Miniflare } from "miniflare";

const root = fileURLToPath(new URL("..", import.meta.url));

test("a Worker limits with the package (workerd condition, wasm as a compiled module)", { timeout: 60_000 }, async () => {
  const dir = mkdtempSync(join(tmpdir(), "tollgate-workerd-"));
  let mf;
  try {
    writeFileSync(
      join(root, "test", ".worker-entry.js"),
      `import { Limiter } from "tollgate";
       const limiter = new Limiter("fixed-window 2/min");
       export default {
         async fetch(request) {
           const d = limiter.check(request.headers.get("cf-connecting-ip") ?? "none");
           return new Response(JSON.stringify(d), { status: d.allowed ? 200 : 429, headers: limiter.headers(d, "per-ip") });
         },
       };`,
    );
    await build({
      entryPoints: [join(root, "test", ".worker-entry.js")],
      bundle: true,
      format: "esm",
      platform: "neutral",
      conditions: ["workerd", "worker", "browser"],
      mainFields: ["module", "main"],
      external: ["*.wasm"],
      outfile: join(dir, "w", "worker.js"),
      logLevel: "silent",
    });
    // The bundle took the workers build: the glue instantiated synchronously from the module.
    const bundled = readFileSync(join(dir, "w", "worker.js"), "utf8");
    assert.match(bundled, /initSync\(\{ module: wasmModule\d* \}\)/);
    assert.ok(!bundled.includes("__wbg_set_wasm"), "the bundler build was picked instead");
    mkdirSync(join(dir, "web"));
    copyFileSync(join(root, "pkg/web/tollgate_wasm_bg.wasm"), join(dir, "web/tollgate_wasm_bg.wasm"));
    mf = new Miniflare({
      modules: true,
      modulesRoot: dir,
      scriptPath: join(dir, "w", "worker.js"),
      modulesRules: [
        { type: "ESModule", include: ["**/*.js"] },
        { type: "CompiledWasm", include: ["**/*.wasm"] },
      ],
      compatibilityDate: "2026-04-01",
      cf: false,
    });
    const call = () => mf.dispatchFetch("http://localhost/", { headers: { "cf-connecting-ip": "203.0.113.9" } });
    const statuses = [];
    let last;
    for (let i = 0; i < 3; i++) {
      last = await call();
      statuses.push(last.status);
      if (i < 2) await last.arrayBuffer();
    }
    assert.deepEqual(statuses, [200, 200, 429]);
    const body = await last.json();
    assert.equal(body.allowed, false);
    assert.equal(body.limit, 2);
    assert.ok(Number(last.headers.get("retry-after")) >= 1);
    assert.equal(last.headers.get("ratelimit-policy"), '"per-ip";q=2;w=60');
  } finally {
    await mf?.dispose();
    rmSync(join(root, "test", ".worker-entry.js"), { force: true });
    rmSync(dir, { recursive: true, force: true });
  }
});
