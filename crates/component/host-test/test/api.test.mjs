// What the WIT adds around the core: typed errors with their payloads, the resource's
// constructors and bookkeeping, and the import-free world.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

import { componentJs, attempt, decisionJson } from '../runner.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const jco = join(here, '..', 'node_modules', '.bin', 'jco');
const component = join(here, '..', '..', 'build', 'tollgate.component.wasm');
const witDir = join(here, '..', '..', '..', '..', 'wit');

assert.ok(existsSync(componentJs), `${componentJs} is missing: run crates/component/build.sh`);
const { keyed, policies } = await import(componentJs);
const { KeyedLimiter } = keyed;

test('parse-policy returns the policy as the core understood it', () => {
  assert.deepStrictEqual(policies.parsePolicy('10/s burst 40'), {
    canonical: 'token-bucket 10/s burst 40',
    algorithm: 'token-bucket',
    limit: 40n,
    rate: { limit: 10n, windowMs: 1000n },
  });
  assert.deepStrictEqual(policies.parsePolicy('sliding-window 600/10min'), {
    canonical: 'sliding-window 600/10min',
    algorithm: 'sliding-window',
    limit: 600n,
    rate: { limit: 600n, windowMs: 600000n },
  });
  const c = policies.parsePolicy('concurrency 8');
  assert.equal(c.algorithm, 'concurrency');
  assert.equal(c.limit, 8n);
  assert.equal(c.rate, undefined);
});

test('a bad policy is a typed policy-error naming field, value and rule', () => {
  const r = attempt(() => KeyedLimiter.create('10/fortnight', 100));
  assert.deepStrictEqual(
    { field: r.err.field, value: r.err.value, rule: r.err.rule, index: r.err.index },
    { field: 'window', value: 'fortnight', rule: { tag: 'unknown-unit' }, index: undefined },
  );
  assert.match(r.err.message, /^invalid policy: window "fortnight": unknown unit/);
  // A rule with a bound carries it.
  const big = attempt(() => policies.parsePolicy('2000000000000/s'));
  assert.equal(big.err.field, 'limit');
  assert.deepStrictEqual(big.err.rule, { tag: 'too-large', val: 1n << 40n });
  const burst = attempt(() => policies.parsePolicy('fixed-window 10/s burst 20'));
  assert.equal(burst.err.field, 'burst');
  assert.deepStrictEqual(burst.err.rule, { tag: 'burst-not-applicable' });
});

test('stack and fair-share constructors say which policy is at fault', () => {
  const stack = attempt(() => KeyedLimiter.createStack(['10/s', '5/min', '3/eon'], 100));
  assert.equal(stack.err.index, 2);
  assert.equal(stack.err.field, 'window');
  const empty = attempt(() => KeyedLimiter.createStack([], 100));
  assert.deepStrictEqual([empty.err.field, empty.err.rule.tag], ['policies', 'empty-stack']);
  const above = attempt(() => KeyedLimiter.createFairShare('10/s', '20/s', 100));
  assert.deepStrictEqual([above.err.field, above.err.rule.tag, above.err.index], ['tenant', 'tenant-above-shared', 1]);
  const shared = attempt(() => KeyedLimiter.createFairShare('ten/s', '2/s', 100));
  assert.deepStrictEqual([shared.err.field, shared.err.rule.tag, shared.err.index], ['limit', 'not-a-number', 0]);
});

test('max-keys of zero is refused', () => {
  const r = attempt(() => KeyedLimiter.create('10/s', 0));
  assert.deepStrictEqual([r.err.field, r.err.value, r.err.rule.tag], ['max-keys', '0', 'zero']);
});

test('cost is a u64: a cost above 2^32 reaches the core (limits go to 2^40)', () => {
  const big = KeyedLimiter.create('1099511627776/d', 10); // 2^40 per day
  const d = big.check('k', 0n, 4294967296n); // 2^32
  assert.ok(d.allowed);
  assert.equal(d.remaining, 1099511627776n - 4294967296n);
});

test('a cost above capacity is a decide-error with its numbers; nothing is charged', () => {
  const l = KeyedLimiter.create('10/s burst 20', 100);
  const r = attempt(() => l.check('a', 0n, 21n));
  assert.deepStrictEqual(r.err, { tag: 'cost-exceeds-capacity', val: { cost: 21n, capacity: 20n } });
  assert.equal(l.peek('a', 0n).remaining, 20n);
  assert.equal(l.size(), 0n);
});

test('release is for concurrency limits; others say not-concurrency', () => {
  const c = KeyedLimiter.create('concurrency 2', 100);
  assert.ok(c.check('job', 0n, 1n).allowed);
  assert.ok(c.check('job', 0n, 1n).allowed);
  assert.equal(c.check('job', 0n, 1n).allowed, false);
  c.release('job', 1n);
  assert.ok(c.check('job', 0n, 1n).allowed);
  const tb = KeyedLimiter.create('gcra 5/s', 100);
  assert.deepStrictEqual(attempt(() => tb.release('job', 1n)).err, { tag: 'not-concurrency', val: 'gcra' });
});

test('a stack decides all or nothing and reports each limit', () => {
  const l = KeyedLimiter.createStack(['5/s', 'fixed-window 3/min'], 100);
  assert.deepStrictEqual(l.policies(), ['token-bucket 5/s', 'fixed-window 3/min']);
  assert.equal(l.capacity(), 3n);
  for (let i = 0; i < 3; i++) assert.ok(l.check('k', 0n, 1n).allowed);
  const d = l.checkDetailed('k', undefined, 0n, 1n);
  assert.equal(d.decision.allowed, false);
  assert.equal(d.decision.retryAfterMs, 60000n);
  assert.deepStrictEqual(d.each.map((e) => e.allowed), [true, false]);
  // The bucket had room and was not charged: it reports what it really has (2 of 5 left,
  // not the 1 it would have had after this request), with no wait.
  assert.equal(d.each[0].remaining, 2n);
  assert.equal(d.each[0].retryAfterMs, 0n);
  assert.equal(l.peek('k', 0n).remaining, 0n);
});

test('fair share: a tenant gets its share, another tenant and `default` still get in', () => {
  const l = KeyedLimiter.createFairShare('10/s', 'sliding-window 4/s', 100);
  let a = 0;
  for (let i = 0; i < 10; i++) a += l.checkTenant('api', 'a', 0n, 1n).allowed ? 1 : 0;
  assert.equal(a, 4);
  assert.ok(l.checkTenant('api', 'b', 0n, 1n).allowed);
  assert.ok(l.checkTenant('api', 'default', 0n, 1n).allowed);
  assert.ok(l.checkTenant('api', undefined, 0n, 1n).allowed);
  assert.equal(l.checkDetailed('api', 'a', 0n, 1n).each.length, 2);
  assert.equal(l.checkDetailed('api', undefined, 0n, 1n).each.length, 1);
});

test('fresh keys are not stored; at most max-keys are, an idle key evicted first', () => {
  const l = KeyedLimiter.create('2/s', 2);
  assert.equal(l.size(), 0n);
  l.check('a', 0n, 1n);
  l.check('b', 0n, 1n);
  assert.equal(l.size(), 2n);
  l.check('a', 0n, 1n); // a is now the most recent (and empty)
  l.check('c', 0n, 1n); // evicts b
  assert.equal(l.size(), 2n);
  assert.equal(l.peek('b', 0n).remaining, 2n, 'an evicted key starts fresh');
  assert.equal(l.peek('a', 0n).remaining, 0n, 'a was kept');
  assert.equal(l.reset('a'), true);
  assert.equal(l.reset('a'), false);
  assert.equal(l.size(), 1n);
  // A second later c's bucket is full again: a peek finds it fresh and drops it.
  assert.equal(l.peek('c', 1000n).remaining, 2n);
  assert.equal(l.size(), 0n);
});

test('durations are whole milliseconds rounded up; time going backwards admits nothing extra', () => {
  const l = KeyedLimiter.create('3/s', 10);
  for (let i = 0; i < 3; i++) l.check('k', 1000n, 1n);
  const denied = decisionJson(l.check('k', 1000n, 1n));
  // One token every 333.33 ms: rounded up so a caller never retries too early.
  assert.deepStrictEqual(denied, { allowed: false, limit: 3, remaining: 0, resetAfter: 1000, retryAfter: 334, delay: 0 });
  assert.equal(l.check('k', 0n, 1n).allowed, false);
  assert.ok(l.check('k', 1334n, 1n).allowed);
});

test('the leaky-bucket queue reports the delay', () => {
  const l = KeyedLimiter.create('leaky-queue 2/s burst 4', 10);
  const d = [0, 1, 2].map(() => l.check('k', 0n, 1n).delayMs);
  assert.deepStrictEqual(d, [500n, 1000n, 1500n]);
});

function jcoRun(...args) {
  return execFileSync(jco, args, { encoding: 'utf8' });
}

test('the built component exports the limiter world and imports nothing', () => {
  const wit = jcoRun('wit', component);
  for (const iface of ['types', 'policies', 'keyed', 'adaptive']) {
    assert.match(wit, new RegExp(`export tollgate:limiter/${iface}@0\\.1\\.0;`));
  }
  assert.doesNotMatch(wit, /\bimport\b/);
  // So the transpiled module needs no WASI shim: its only import reads the core wasm.
  const js = readFileSync(componentJs, 'utf8');
  assert.doesNotMatch(js, /preview2-shim/);
  assert.deepStrictEqual([...js.matchAll(/import\s*\(\s*'([^']+)'\s*\)|from\s+'([^']+)'/g)].map((m) => m[1] ?? m[2]), ['node:fs/promises']);
});

test('wit/ is valid WIT: its world embeds into a component on its own', () => {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-wit-'));
  try {
    jcoRun('embed', '--dummy', '--wit', witDir, '--world-name', 'limiter', '-o', join(dir, 'dummy.wasm'));
    jcoRun('new', join(dir, 'dummy.wasm'), '-o', join(dir, 'dummy.component.wasm'));
    const wit = jcoRun('wit', join(dir, 'dummy.component.wasm'));
    assert.match(wit, /export tollgate:limiter\/keyed@0\.1\.0;/);
    assert.doesNotMatch(wit, /\bimport\b/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("the README's JavaScript example runs and prints these decisions", () => {
  const out = execFileSync(process.execPath, [join(here, '..', 'example.mjs')], { encoding: 'utf8' });
  assert.equal(
    out,
    [
      't=0ms alice: allowed=true remaining=1 retry-after=0ms',
      't=0ms alice: allowed=true remaining=0 retry-after=0ms',
      't=0ms alice: allowed=false remaining=0 retry-after=500ms',
      't=500ms alice: allowed=true remaining=0 retry-after=0ms',
      'bad policy: field=window value=fortnight rule=unknown-unit',
      '',
    ].join('\n'),
  );
});
