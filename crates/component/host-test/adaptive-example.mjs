// The README's adaptive example: an adaptive concurrency limit through jco.
// Build first: crates/component/build.sh (it writes build/js/ with `jco transpile`).
import { adaptive } from '../build/js/tollgate.js';

const { AdaptiveLimiter } = adaptive;
const ms = 1_000_000n; // time is in ns here: process.hrtime.bigint() in a server

// One limit per route, per instance. Parameters left out take the core's defaults; `seed`
// (any random value) jitters the re-measurements of the no-load latency.
const limiter = AdaptiveLimiter.create({ minLimit: 1, initialLimit: 2, seed: 42n }, 0n);
const a = limiter.acquire(0n);
const b = limiter.acquire(0n);
const c = limiter.acquire(0n); // undefined: the limit is full; shed it (503 + Retry-After)
const admitted = [a, b, c].filter((p) => p !== undefined).length;
console.log(`admitted ${admitted} of 3: limit ${limiter.limit()}, in flight ${limiter.inFlight()}`);

limiter.release(a, 12n * ms, 'success'); // answered after 12 ms: a latency sample
limiter.release(b, 30n * ms, 'timeout'); // the caller gave up: congestion, not a sample
try {
  limiter.release(a, 31n * ms, 'success');
} catch (e) {
  console.log(`released twice: ${e.payload}; in flight ${limiter.inFlight()}`);
}

// A parameter out of its bounds throws; `error.payload` is the typed WIT `param-error`.
try {
  AdaptiveLimiter.create({ percentile: 100 }, 0n);
} catch (e) {
  const { param, value, rule } = e.payload;
  console.log(`bad parameter: ${param} ${value}: ${rule.tag} ${rule.val}`);
}
