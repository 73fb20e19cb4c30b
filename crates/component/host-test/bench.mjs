// Checks per second through the component in Node (jco 1.10.2), for the README's figures.
// Not a test: it asserts only that the decisions are the expected ones, never a speed.
//   node bench.mjs [seconds-per-case]
import assert from 'node:assert/strict';
import { componentJs } from './runner.mjs';

const { keyed, adaptive } = await import(componentJs);
const { KeyedLimiter } = keyed;
const seconds = Number(process.argv[2] ?? 1);

function measure(name, limiter, keys, cost = 1n) {
  let n = 0;
  let allowed = 0;
  let now = 0n;
  const end = performance.now() + seconds * 1000;
  const t0 = performance.now();
  const cpu0 = process.cpuUsage();
  while (performance.now() < end) {
    // 1000 checks between clock reads; time advances 1 ms per batch.
    for (let i = 0; i < 1000; i++) {
      if (limiter.check(keys[(n + i) % keys.length], now, cost).allowed) allowed++;
    }
    n += 1000;
    now += 1n;
  }
  const wall = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  const cpuSecs = (cpu.user + cpu.system) / 1e6;
  // Per CPU-second as well: on a shared machine the wall-clock rate depends on the load.
  console.log(
    `${name.padEnd(48)} ${(n / wall / 1e6).toFixed(2)} M checks/s wall, ` +
      `${(n / cpuSecs / 1e6).toFixed(2)} M per CPU-s  (${n} checks, ${allowed} allowed)`,
  );
  return { n, allowed };
}

const oneKey = ['alice'];
const manyKeys = Array.from({ length: 10_000 }, (_, i) => `user-${i}`);

// A generous bucket: every check is allowed and charged.
let r = measure('token-bucket, 1 key', KeyedLimiter.create('token-bucket 100000000/s', 100_000), oneKey);
assert.equal(r.allowed, r.n);
r = measure('token-bucket, 10k keys', KeyedLimiter.create('token-bucket 100000000/s', 100_000), manyKeys);
assert.equal(r.allowed, r.n);
// A tight limit: nearly every check is a denial (the common case under attack).
r = measure('gcra 10/s, 1 key (denials)', KeyedLimiter.create('gcra 10/s', 100_000), oneKey);
assert.ok(r.allowed < r.n / 100);
measure('sliding-window 1000/s, 10k keys', KeyedLimiter.create('sliding-window 1000/s', 100_000), manyKeys);
measure('stack [10000/s, fixed-window 1000000/min], 10k', KeyedLimiter.createStack(['10000/s', 'fixed-window 1000000/min'], 100_000), manyKeys);

// The host's own cost per call, for scale: a method with no string and one u64 back.
{
  const l = KeyedLimiter.create('10/s', 10);
  let n = 0;
  const t0 = performance.now();
  const end = t0 + seconds * 1000;
  while (performance.now() < end) {
    for (let i = 0; i < 1000; i++) l.size();
    n += 1000;
  }
  console.log(`${'baseline: size() (no key, no decision)'.padEnd(48)} ${(n / ((performance.now() - t0) / 1000) / 1e6).toFixed(2)} M calls/s wall`);
}

// The adaptive limiter: one acquire and its release per request (a permit record each way),
// 1 ms of virtual latency, one request in flight at a time.
{
  const l = adaptive.AdaptiveLimiter.create({}, 0n);
  let n = 0;
  let now = 0n;
  const t0 = performance.now();
  const cpu0 = process.cpuUsage();
  const end = t0 + seconds * 1000;
  while (performance.now() < end) {
    for (let i = 0; i < 1000; i++) {
      const p = l.acquire(now);
      now += 1_000_000n;
      l.release(p, now, 'success');
    }
    n += 1000;
  }
  assert.equal(l.inFlight(), 0n);
  const wall = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  console.log(
    `${'adaptive: acquire + release'.padEnd(48)} ${(n / wall / 1e6).toFixed(2)} M pairs/s wall, ` +
      `${(n / ((cpu.user + cpu.system) / 1e6) / 1e6).toFixed(2)} M per CPU-s`,
  );
}
