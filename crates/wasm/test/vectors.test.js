// Runs every shared conformance vector (tests/vectors/*.json at the repo root, plus this
// package's own test/vectors/*.json) against the built package: each step must give the
// same decision as the Rust core recorded.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync, existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { join } from "node:path";
import { Limiter } from "tollgate";
import { replay } from "./replay.js";

const here = fileURLToPath(new URL(".", import.meta.url));
const dirs = [join(here, "../../../tests/vectors"), join(here, "vectors")];
const files = dirs
  .filter((d) => existsSync(d))
  .flatMap((d) => readdirSync(d).filter((f) => f.endsWith(".json")).sort().map((f) => join(d, f)));

test("the shared vectors folder is present and not empty", () => {
  const shared = dirs[0];
  assert.ok(existsSync(shared), `${shared} is missing`);
  assert.ok(readdirSync(shared).some((f) => f.endsWith(".json")), "no vectors in tests/vectors/");
});

for (const file of files) {
  const vector = JSON.parse(readFileSync(file, "utf8"));
  if (vector.cases) {
    test(`vector ${vector.name}: every invalid policy is rejected naming its field and rule`, () => {
      assert.ok(vector.cases.length > 0);
      for (const c of vector.cases) {
        const err = assert.throws(() => new Limiter(c.policy), (e) => {
          assert.ok(e instanceof TypeError || e instanceof RangeError, `${c.policy}: ${e}`);
          assert.equal(e.field, c.field, `field of ${JSON.stringify(c.policy)}`);
          assert.equal(e.rule, c.rule, `rule of ${JSON.stringify(c.policy)}`);
          if (c.message) assert.ok(e.message.startsWith(c.message), `${e.message} vs ${c.message}`);
          return true;
        });
        void err;
      }
    });
    continue;
  }
  test(`vector ${vector.name} (${vector.steps.length} steps)`, () => {
    assert.deepEqual(replay(Limiter, vector), []);
  });
  test(`vector ${vector.name} through allow(): each check's admission, nothing else`, () => {
    assert.deepEqual(replay(Limiter, vector, true), []);
  });
}
