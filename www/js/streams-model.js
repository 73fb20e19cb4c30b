// The streams experiment's scenario and its two runs: parallel LLM calls of one team share a
// token budget, and each call's real cost is known only when its stream ends. Every
// decision is the core's (`Limiter.reserve` and `settle` of the page's wasm build); this
// file only makes the calls (seeded) and plays them in time order.
//
// * reserve-then-settle: a call is decided for its estimate (its max_tokens) and settled to
//   what it used when its stream ends;
// * charge-after (a gateway that charges at stream end): a call is checked for 0 tokens and
//   charged what it used when it ends, however far past the budget.

/** The budget: tokens a minute, one fixed window (every call starts and ends within it). */
export const BUDGET = 10_000;
export const POLICY = `fixed-window ${BUDGET}/min`;

/**
 * `streams` calls over the first 40 s, each estimated at `estimate` tokens, using 30% to
 * 100% of it, streaming for 2 to 20 s: the same calls for the same arguments.
 */
export function calls(streams, estimate, seed = 1) {
  let s = BigInt(seed);
  const next = (n) => {
    s = (s * 6364136223846793005n + 1442695040888963407n) & 0xffffffffffffffffn;
    return Number((s >> 33n) % BigInt(n));
  };
  const out = [];
  for (let i = 0; i < streams; i++) {
    const start = next(40_000);
    const used = Math.round(estimate * (30 + next(71)) / 100);
    out.push({ start, estimate, used, end: start + 2_000 + next(18_001) });
  }
  return out.sort((a, b) => a.start - b.start);
}

/**
 * Plays `list` through a fresh `new Limiter(POLICY)` the way `way` charges. Returns the
 * admitted and denied counts, what the admitted calls used in all, and the tokens charged
 * over time (`[ms, charged]` after every change).
 */
export function run(Limiter, way, list) {
  const limiter = new Limiter(POLICY);
  const events = [];
  list.forEach((c, i) => {
    events.push({ at: c.start, i, kind: "start" });
    events.push({ at: c.end, i, kind: "end" });
  });
  // In time order; at one instant, a stream that ends settles before one that starts.
  events.sort((a, b) => a.at - b.at || (a.kind === "end" ? -1 : 1));
  const open = new Map();
  let admitted = 0, denied = 0, spent = 0, charged = 0;
  const curve = [[0, 0]];
  for (const e of events) {
    const c = list[e.i];
    if (e.kind === "start") {
      const upfront = way === "reserve-then-settle" ? c.estimate : 0;
      const d = limiter.reserve("team", upfront, { now: e.at });
      if (!d.allowed) {
        denied++;
        continue;
      }
      admitted++;
      open.set(e.i, d.reservation);
      charged += upfront;
    } else {
      const r = open.get(e.i);
      if (r === undefined) continue;
      open.delete(e.i);
      const done = limiter.settle(r, c.used, { now: e.at });
      charged += done.charged - done.refunded;
      spent += c.used;
    }
    curve.push([e.at, charged]);
  }
  return { way, admitted, denied, spent, curve, peak: Math.max(...curve.map((p) => p[1])) };
}
