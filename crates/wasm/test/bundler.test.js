// The "default"/"./bundler" build uses WebAssembly ESM integration (`import * as wasm from
// "./x.wasm"`), which bundlers implement; Node implements the standard behind
// --experimental-wasm-modules, so the build is run there, for real, in a child process.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));

test("tollgate/bundler loads through ESM integration and decides", () => {
  const script = `
    import { Limiter, headers } from "tollgate/bundler";
    const l = new Limiter("fixed-window 2/min");
    const d = [0, 1, 2].map(() => l.check("k", { now: 0 }));
    console.log(JSON.stringify({ allowed: d.map((x) => x.allowed), last: d[2], h: headers(d[2], "p", { policy: l }) }));`;
  const r = spawnSync(process.execPath, ["--experimental-wasm-modules", "--no-warnings", "--input-type=module", "-e", script], {
    cwd: root,
    encoding: "utf8",
  });
  assert.equal(r.status, 0, r.stderr);
  const out = JSON.parse(r.stdout);
  assert.deepEqual(out.allowed, [true, true, false]);
  assert.deepEqual(out.last, { allowed: false, limit: 2, remaining: 0, resetAfter: 60_000, retryAfter: 60_000, delay: 0 });
  assert.equal(out.h["Retry-After"], "60");
});
