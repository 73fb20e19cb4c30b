// The reserve-and-settle vectors (tests/vectors/settle/*.json; the format is in the core's
// tests/settle.rs) through the component's keyed-limiter.reserve and settle, in jco: the
// same answers as the Rust runner's. A second settle of a name settles the same reservation
// again, which the component answers from its record of settled reservations.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';

import { componentJs, vectorDir, vectorFiles, makeLimiter, attempt, decisionJson } from '../runner.mjs';

assert.ok(existsSync(componentJs), `${componentJs} is missing: run crates/component/build.sh`);
const { keyed } = await import(componentJs);

const files = vectorFiles(join(vectorDir, 'settle'));

/** A WIT reservation-error as the vectors' code (the core's `ReservationError::code`). */
function code(e) {
  switch (e.tag) {
    case 'decide':
      return e.val.tag;
    case 'foreign':
      return `foreign-${e.val}`;
    default:
      return e.tag;
  }
}

const settledJson = (s) => ({ refunded: Number(s.refunded), charged: Number(s.charged), unpaid: Number(s.unpaid) });

/** Whether `got` has every field of `want` with the same value (arrays: element by element, same length). */
function matches(want, got) {
  if (Array.isArray(want)) return Array.isArray(got) && want.length === got.length && want.every((w, i) => matches(w, got[i]));
  if (want !== null && typeof want === 'object') {
    return got !== null && typeof got === 'object' && Object.entries(want).every(([k, v]) => matches(v, got[k]));
  }
  return want === got;
}

function run(limiter, step, open) {
  const now = BigInt(step.t ?? 0);
  const cost = BigInt(step.cost ?? 1);
  switch (step.op) {
    case 'reserve': {
      const r = attempt(() => limiter.reserve(step.key, now, cost));
      if ('err' in r) return { error: code(r.err) };
      if (r.ok.reservation !== undefined) open.set(step.as, r.ok.reservation);
      return { ...decisionJson(r.ok.decision), reserved: r.ok.reservation !== undefined };
    }
    case 'settle': {
      const reservation = { ...open.get(step.reservation), key: step.key };
      const r = attempt(() => limiter.settle(reservation, BigInt(step.actual), now, step.overage ?? 'debt'));
      if ('err' in r) return { error: code(r.err) };
      const got = settledJson(r.ok);
      if (r.ok.each.length > 0) got.each = r.ok.each.map(settledJson);
      return got;
    }
    case 'check': {
      const d = limiter.checkDetailed(step.key, undefined, now, cost);
      return { ...decisionJson(d.decision), each: d.each.map(decisionJson) };
    }
    case 'release':
      limiter.release(step.key, cost);
      return undefined;
    default:
      throw new Error(`unknown op ${step.op}`);
  }
}

test('the settle vectors are there, one per algorithm and the stack', () => assert.ok(files.length >= 9));

for (const { file, vector } of files) {
  test(`settle vectors: ${file}`, () => {
    const main = makeLimiter(keyed, vector.limiter);
    const others = new Map(Object.entries(vector.others ?? {}).map(([n, spec]) => [n, makeLimiter(keyed, spec)]));
    const open = new Map();
    vector.steps.forEach((step, i) => {
      const got = run(step.on === undefined ? main : others.get(step.on), step, open);
      if (step.expect !== undefined) {
        assert.ok(matches(step.expect, got), `${file} step ${i}: ${JSON.stringify(step)}\n got ${JSON.stringify(got)}`);
      }
    });
  });
}

test('a reservation of this limiter it no longer knows is unknown-reservation; nothing is settled', () => {
  const l = keyed.KeyedLimiter.create('fixed-window 10/min', 100);
  const { reservation } = l.reserve('k', 0n, 4n);
  const r = attempt(() => l.settle({ ...reservation, id: reservation.id + 7n }, 0n, 0n, 'debt'));
  assert.deepEqual(r.err, { tag: 'unknown-reservation' });
  assert.equal(l.peek('k', 0n).remaining, 6n);
});
