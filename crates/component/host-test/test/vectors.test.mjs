// The shared conformance vectors, every file of tests/vectors/, through the component.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';

import { componentJs, vectorDir, vectorFiles, makeLimiter, runStep, attempt, coreFieldName } from '../runner.mjs';

assert.ok(existsSync(componentJs), `${componentJs} is missing: run crates/component/build.sh`);
const { keyed, policies } = await import(componentJs);

const files = vectorFiles();

test('the vector folder has decision files and policy-error cases', () => {
  assert.ok(files.some((f) => f.vector.steps), `no decision vectors in ${vectorDir}`);
  assert.ok(files.some((f) => f.vector.cases), `no policy-error cases in ${vectorDir}`);
});

let stepsChecked = 0;
for (const { file, vector } of files) {
  if (vector.steps) {
    test(`decisions: ${file}`, () => {
      const limiter = makeLimiter(keyed, vector.limiter);
      vector.steps.forEach((step, i) => {
        const got = runStep(limiter, step, !('policy' in vector.limiter));
        assert.deepStrictEqual(got, step.expect, `${file} step ${i}: ${JSON.stringify(step)}`);
        stepsChecked += 1;
      });
    });
  }
  if (vector.cases) {
    test(`policy errors: ${file}`, () => {
      assert.ok(vector.cases.length > 0);
      for (const c of vector.cases) {
        const how = JSON.stringify(c.policy);
        // The same typed error from the plain function and from the resource's constructor.
        for (const [what, f] of [
          ['parse-policy', () => policies.parsePolicy(c.policy)],
          ['keyed-limiter.create', () => keyed.KeyedLimiter.create(c.policy, 10)],
          ['keyed-limiter.create-stack', () => keyed.KeyedLimiter.createStack(['1/s', c.policy], 10)],
        ]) {
          const r = attempt(f);
          assert.ok('err' in r, `${what}(${how}) was accepted`);
          assert.equal(coreFieldName(r.err.field), c.field, `${what}(${how}) field`);
          assert.equal(r.err.rule.tag, c.rule, `${what}(${how}) rule`);
          if (c.message !== undefined) assert.equal(r.err.message, c.message, `${what}(${how}) message`);
          assert.equal(typeof r.err.value, 'string');
          assert.equal(r.err.index, what.endsWith('stack') ? 1 : undefined, `${what}(${how}) index`);
        }
      }
    });
  }
}

test('every decision step of every file was checked', () => {
  // Runs after the file tests (node:test runs top-level tests in order).
  const expected = files.reduce((n, f) => n + (f.vector.steps?.length ?? 0), 0);
  assert.equal(stepsChecked, expected);
  assert.ok(expected > 0);
});
