// The README's JavaScript example: the tollgate component in Node through jco.
// Build first: crates/component/build.sh (it writes build/js/ with `jco transpile`).
import { keyed, policies } from '../build/js/tollgate.js';

const { KeyedLimiter } = keyed;

// 2 requests per second per key (a token bucket); keep at most 10 000 limited keys.
const limiter = KeyedLimiter.create('2/s', 10_000);
for (const t of [0, 0, 0, 500]) {
  // Time is an argument (ms since any epoch you keep; Date.now() in a server). u64 -> BigInt.
  const d = limiter.check('alice', BigInt(t), 1n);
  console.log(`t=${t}ms alice: allowed=${d.allowed} remaining=${d.remaining} retry-after=${d.retryAfterMs}ms`);
}

// A bad policy throws; `error.payload` is the typed WIT `policy-error`.
try {
  policies.parsePolicy('10/fortnight');
} catch (e) {
  const { field, value, rule } = e.payload;
  console.log(`bad policy: field=${field} value=${value} rule=${rule.tag}`);
}
