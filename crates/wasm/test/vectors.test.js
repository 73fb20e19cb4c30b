// Runs every shared conformance vector (tests/vectors/*.json at the repo root, plus this
// package's own test/vectors/*.json) against the built package: each step must give the
// same decision as the Rust core recorded.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync, existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { join } from "node:path";
import { Limiter } from "tollgate";

const here = fileURLToPath(new URL(".", import.meta.url));
const dirs = [join(here, "../../../tests/vectors"), join(here, "vectors")];
const files = dirs
  .filter((d) => existsSync(d))
  .flatMap((d) => readdirSync(d).filter((f) => f.endsWith(".json")).sort().map((f) => join(d, f)));

function limiterFor(spec) {
  const options = { maxKeys: 1_000_000 };
  if (spec.policy !== undefined) return new Limiter(spec.policy, options);
  if (spec.stack !== undefined) return Limiter.all(spec.stack, options);
  if (spec.fairShare !== undefined) return Limiter.fairShare(spec.fairShare.shared, spec.fairShare.tenant, options);
  throw new Error(`unknown limiter ${JSON.stringify(spec)}`);
}

function run(step, limiter) {
  const now = step.t;
  switch (step.op) {
    case "check":
      // A stack's or fair share's steps expect each limit's decision too.
      if (step.expect?.each) return limiter.checkDetailed(step.key, { now, cost: step.cost ?? 1, tenant: step.tenant });
      return limiter.check(step.key, { now, cost: step.cost ?? 1, tenant: step.tenant });
    case "peek":
      return limiter.peek(step.key, { now });
    case "release":
      return limiter.release(step.key, { cost: step.cost ?? 1 });
    case "reset":
      return limiter.reset(step.key);
    default:
      throw new Error(`unknown op ${step.op}`);
  }
}

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
  test(`vector ${vector.name} through allow(): each check's admission, nothing else`, () => {
    // The same steps, checks through the boolean fast path (which must charge exactly as
    // check does, or later steps would disagree).
    const limiter = limiterFor(vector.limiter);
    vector.steps.forEach((step, i) => {
      const where = `${vector.name} step ${i} ${JSON.stringify(step)}`;
      const allow = () => limiter.allow(step.key, { now: step.t, cost: step.cost ?? 1, tenant: step.tenant });
      if (step.op !== "check") return run(step, limiter);
      if (step.expect?.error !== undefined) {
        assert.throws(allow, (e) => e instanceof RangeError && e.rule === step.expect.error, where);
        return;
      }
      const got = allow();
      if (step.expect?.allowed !== undefined) assert.equal(got, step.expect.allowed, where);
    });
  });
  test(`vector ${vector.name} (${vector.steps.length} steps)`, () => {
    const limiter = limiterFor(vector.limiter);
    vector.steps.forEach((step, i) => {
      const where = `${vector.name} step ${i} ${JSON.stringify(step)}`;
      const expect = step.expect;
      if (expect?.error !== undefined) {
        assert.throws(() => run(step, limiter), (e) => {
          assert.ok(e instanceof RangeError, `${where}: ${e}`);
          assert.equal(e.rule, expect.error, where);
          return true;
        });
        return;
      }
      const got = run(step, limiter);
      if (expect === undefined) return;
      for (const [k, v] of Object.entries(expect)) {
        if (k === "each") assert.deepEqual(got.each, v, `${where}: each`);
        else assert.equal(got[k], v, `${where}: ${k}`);
      }
    });
  });
}
