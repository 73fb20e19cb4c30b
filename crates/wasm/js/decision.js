// A decision object from the core's numbers, shared by `tollgate` (Limiter.checkDetailed) and
// `tollgate/redis` (every RedisLimiter answer): the core writes each decision as
// DECISION_LEN numbers (crates/wasm/src/http.rs, `numbers`), the combined one first, then
// each limit's in stack order (a fair share: shared, then the tenant window).

/** Numbers per decision: allowed (1 or 0), limit, remaining, resetAfter, retryAfter, delay (ms). */
export const DECISION_LEN = 6;

/** One decision from the DECISION_LEN numbers of `n` at `i`. */
export function decisionAt(n, i) {
  return {
    allowed: n[i] === 1,
    limit: n[i + 1],
    remaining: n[i + 2],
    resetAfter: n[i + 3],
    retryAfter: n[i + 4],
    delay: n[i + 5],
  };
}

/** The combined decision at `at` of `n`, with `each`: the `count` limits' decisions after it. */
export function detailedAt(n, at, count) {
  const decision = decisionAt(n, at);
  decision.each = [];
  for (let k = 1; k <= count; k++) decision.each.push(decisionAt(n, at + DECISION_LEN * k));
  return decision;
}

/** Decisions (`each`, as a limiter answers them) as the core reads them: DECISION_LEN numbers each. */
export function eachNumbers(each) {
  const n = new Float64Array(each.length * DECISION_LEN);
  each.forEach((d, i) => {
    n.set([d.allowed ? 1 : 0, d.limit, d.remaining, d.resetAfter, d.retryAfter, d.delay ?? 0], i * DECISION_LEN);
  });
  return n;
}
