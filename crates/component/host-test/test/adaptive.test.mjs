// The adaptive interface (issue 42): the core's gradient controller behind the WIT
// `adaptive-limiter`, driven in virtual time (nanoseconds, an argument). The behaviour the npm
// AdaptiveLimiter's tests assert (crates/wasm/test/adaptive.test.js), and the core's own
// tests' scenarios (src/adaptive/gradient.rs) with the numbers they assert: the component
// must move its limit as the core does.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

import { componentJs, attempt } from '../runner.mjs';

assert.ok(existsSync(componentJs), `${componentJs} is missing: run crates/component/build.sh`);
const { adaptive } = await import(componentJs);
const { AdaptiveLimiter } = adaptive;

const here = dirname(fileURLToPath(import.meta.url));
const MS = 1_000_000n;

/**
 * Runs `rounds` of: admit until the limit is full, then release every admitted request
 * `latency(admitted)` ns later with `outcome` (the core's tests' `rounds`). Returns the limit
 * after each round; `clock.now` moves on by each round's latency.
 */
function rounds(l, clock, n, latency, outcome = 'success') {
  const limits = [];
  for (let i = 0; i < n; i++) {
    const permits = [];
    for (let p = l.acquire(clock.now); p !== undefined; p = l.acquire(clock.now)) permits.push(p);
    const lat = latency(BigInt(permits.length));
    for (const p of permits) l.release(p, clock.now + lat, outcome);
    clock.now += lat;
    limits.push(Number(l.limit()));
  }
  return limits;
}

/** A server of `workers` workers at 10 ms a request: beyond them, requests queue. */
const knee = (workers) => (n) => (10n * MS * (n > workers ? n : workers)) / workers;

test('acquire admits up to the limit, then none; a release frees a slot once', () => {
  const l = AdaptiveLimiter.create({ minLimit: 1, initialLimit: 2 }, 0n);
  const a = l.acquire(0n);
  const b = l.acquire(0n);
  assert.ok(a && b);
  assert.equal(l.acquire(0n), undefined, 'a full limit is a denial (a value), not an error');
  assert.deepStrictEqual([l.inFlight(), l.limit(), l.admitting()], [2n, 2n, 2n]);
  l.release(a, 5n * MS, 'success');
  assert.equal(l.inFlight(), 1n);
  assert.deepStrictEqual(attempt(() => l.release(a, 6n * MS, 'success')).err, 'not-held');
  assert.equal(l.inFlight(), 1n, 'a second release counts nothing');
  assert.deepStrictEqual(attempt(() => l.release({ ...b, id: 99n }, 6n * MS, 'success')).err, 'not-held');
  l.release(b, 7n * MS, 'timeout');
  assert.equal(l.inFlight(), 0n);
});

test("another limiter's permit is refused (each limit is per instance)", () => {
  const one = AdaptiveLimiter.create({}, 0n);
  const two = AdaptiveLimiter.create({}, 0n);
  const p = one.acquire(0n);
  assert.notEqual(p.limiter, two.acquire(0n).limiter);
  assert.deepStrictEqual(attempt(() => two.release(p, 1n, 'success')).err, 'foreign-permit');
  assert.deepStrictEqual([one.inFlight(), two.inFlight()], [1n, 1n]);
  one.release(p, 1n, 'success');
  assert.equal(one.inFlight(), 0n);
});

test('a parameter out of its bounds is a param-error naming it, from the core', () => {
  // The core's ParamError doc example, field for field.
  assert.deepStrictEqual(attempt(() => AdaptiveLimiter.create({ percentile: 100 }, 0n)).err, {
    param: 'percentile',
    value: 100n,
    rule: { tag: 'too-large', val: 99n },
    message: 'invalid adaptive limit: percentile 100: must be at most 99',
  });
  // The bounds Gradient::new documents: initial between the limits, window from 1 ms,
  // limits up to 1,000,000, tolerance above 100%.
  const err = (params) => {
    const e = attempt(() => AdaptiveLimiter.create(params, 0n)).err;
    return [e.param, e.value, e.rule];
  };
  assert.deepStrictEqual(err({ minLimit: 10, initialLimit: 5 }), ['initial-limit', 5n, { tag: 'too-small', val: 10n }]);
  assert.deepStrictEqual(err({ windowNs: MS / 2n }), ['window', MS / 2n, { tag: 'too-small', val: MS }]);
  assert.deepStrictEqual(err({ maxLimit: 2_000_000 }), ['max-limit', 2_000_000n, { tag: 'too-large', val: 1_000_000n }]);
  assert.deepStrictEqual(err({ tolerance: 100 }), ['tolerance', 100n, { tag: 'too-small', val: 101n }]);
  assert.deepStrictEqual(err({ minLimit: 0 }), ['min-limit', 0n, { tag: 'too-small', val: 1n }]);
});

test('every answer a timeout drives the limit to its floor, never up', () => {
  // The core's every_answer_a_timeout_drives_the_limit_to_its_floor: 12 windows of timeouts
  // from 100 halve it down to the floor of 5.
  const l = AdaptiveLimiter.create({ initialLimit: 100 }, 0n);
  const limits = rounds(l, { now: 0n }, 12, () => 1000n * MS, 'timeout');
  assert.equal(limits.at(-1), 5);
  for (let i = 1; i < limits.length; i++) assert.ok(limits[i] <= limits[i - 1], `${limits}`);
});

test('overload answers are congestion too: the limit falls to its floor', () => {
  // The npm test's scenario with fast refusals: a controller that read them as latency
  // samples would grow instead.
  const l = AdaptiveLimiter.create({ minLimit: 3, initialLimit: 50, windowNs: 10n * MS }, 0n);
  const limits = rounds(l, { now: 0n }, 50, () => MS, 'overload');
  assert.equal(limits.at(-1), 3);
});

test('latency above the tolerance with the limit used lowers it, at most halving per window', () => {
  // The core's latency_above_the_tolerance_with_the_limit_used_lowers_it.
  const l = AdaptiveLimiter.create({ initialLimit: 100 }, 0n);
  const clock = { now: 0n };
  rounds(l, clock, 30, () => 10n * MS);
  const grown = Number(l.limit());
  assert.ok(grown > 100, `used and fast: grown (${grown})`);
  const limits = [grown, ...rounds(l, clock, 10, () => 25n * MS)];
  assert.ok(limits.at(-1) < grown, `${limits}`);
  for (let i = 1; i < limits.length; i++) assert.ok(limits[i] >= Math.floor(limits[i - 1] / 2), `${limits}`);
});

test('the limit finds the knee, falls when capacity halves, and rises back', () => {
  // The core's gradient doc example: 100 workers, 10 ms a request, from a limit of 20; 400
  // rounds leave the limit within the tolerance above the knee (100..=125).
  const l = AdaptiveLimiter.create({ initialLimit: 20 }, 0n);
  const clock = { now: 0n };
  rounds(l, clock, 400, knee(100n));
  assert.ok(l.limit() >= 100n && l.limit() <= 125n, `${l.limit()}`);
  assert.ok(l.noLoadNs() >= 10n * MS && l.noLoadNs() < 11n * MS, `no-load ${l.noLoadNs()}`);
  // Half the workers: the latency grows, the limit falls to the new knee's range (the same
  // rule scaled: 50..=62), and never to its floor.
  const halved = rounds(l, clock, 400, knee(50n));
  const low = halved.slice(-100);
  assert.ok(Math.min(...halved) > 5, `${halved}`);
  assert.ok(Math.max(...low) <= 62 && Math.min(...low) >= 50 * 0.75, `${low}`);
  // Capacity back: the limit rises back to the knee's range.
  rounds(l, clock, 400, knee(100n));
  assert.ok(l.limit() >= 100n && l.limit() <= 125n, `${l.limit()}`);
});

test('an unused limit neither grows nor shrinks', () => {
  // The core's an_unused_limit_neither_grows_nor_shrinks: 60 of 100 slots, noisy latencies.
  const l = AdaptiveLimiter.create({ initialLimit: 100 }, 0n);
  let now = 0n;
  for (let round = 0n; round < 1000n; round++) {
    const permits = Array.from({ length: 60 }, () => l.acquire(now));
    const lat = (8n + ((round * 5n) % 7n)) * MS;
    for (const p of permits) l.release(p, now + lat, 'success');
    now += lat;
  }
  assert.equal(l.limit(), 100n);
});

test("the README's adaptive example runs and prints what the rule says", () => {
  const out = execFileSync(process.execPath, [join(here, '..', 'adaptive-example.mjs')], { encoding: 'utf8' });
  assert.equal(
    out,
    [
      'admitted 2 of 3: limit 2, in flight 2',
      'released twice: not-held; in flight 0',
      'bad parameter: percentile 100: too-large 99',
      '',
    ].join('\n'),
  );
});
