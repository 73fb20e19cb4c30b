// The .d.ts files: a file using the whole documented API type-checks with tsc (strict),
// resolving "tollgate", "tollgate/web", "tollgate/express" and "tollgate/hono" through the
// package.json `exports` (types conditions).
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));

test("the type declarations check against typical usage (tsc --strict)", () => {
  const r = spawnSync(process.execPath, ["node_modules/typescript/bin/tsc", "-p", "test/types"], { cwd: root, encoding: "utf8" });
  assert.equal(r.status, 0, r.stdout + r.stderr);
});
