// Replays one conformance vector (tests/vectors/*.json) against a `Limiter` class and returns
// what disagreed, as messages (an empty list: every step gave the recorded decision). Plain
// JavaScript without Node imports, so that the same replay runs in Node (vectors.test.js) and
// in a page in Chromium (browser.test.js).

export function limiterFor(Limiter, spec) {
  const options = { maxKeys: 1_000_000 };
  if (spec.policy !== undefined) return new Limiter(spec.policy, options);
  if (spec.stack !== undefined) return Limiter.all(spec.stack, options);
  if (spec.fairShare !== undefined) return Limiter.fairShare(spec.fairShare.shared, spec.fairShare.tenant, options);
  throw new Error(`unknown limiter ${JSON.stringify(spec)}`);
}

function run(step, limiter, viaAllow) {
  const now = step.t;
  const opts = { now, cost: step.cost ?? 1, tenant: step.tenant };
  switch (step.op) {
    case "check":
      // `allow` answers only the admission; it must charge exactly as check does, or later
      // steps would disagree.
      if (viaAllow) return { allowed: limiter.allow(step.key, opts) };
      // A stack's or fair share's steps expect each limit's decision too.
      if (step.expect?.each) return limiter.checkDetailed(step.key, opts);
      return limiter.check(step.key, opts);
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

/** Whether two decisions (or `each` lists of them) have the same fields and values. */
function same(a, b) {
  if (Array.isArray(a) || Array.isArray(b)) {
    return Array.isArray(a) && Array.isArray(b) && a.length === b.length && a.every((x, i) => same(x, b[i]));
  }
  if (a === null || b === null || typeof a !== "object" || typeof b !== "object") return a === b;
  const keys = Object.keys(a);
  return keys.length === Object.keys(b).length && keys.every((k) => same(a[k], b[k]));
}

/**
 * The steps of `vector` whose answer differs from the recorded one. With `viaAllow`, checks
 * go through `allow` and only `allowed` is compared for them.
 */
export function replay(Limiter, vector, viaAllow = false) {
  const failures = [];
  const limiter = limiterFor(Limiter, vector.limiter);
  vector.steps.forEach((step, i) => {
    const where = `${vector.name} step ${i} ${JSON.stringify(step)}`;
    const expect = step.expect;
    const checkOnly = viaAllow && step.op === "check";
    if (expect?.error !== undefined) {
      try {
        run(step, limiter, viaAllow);
        failures.push(`${where}: no error, expected ${expect.error}`);
      } catch (e) {
        if (!(e instanceof RangeError) || e.rule !== expect.error) failures.push(`${where}: threw ${e}`);
      }
      return;
    }
    let got;
    try {
      got = run(step, limiter, viaAllow);
    } catch (e) {
      failures.push(`${where}: threw ${e}`);
      return;
    }
    if (expect === undefined) return;
    for (const [k, v] of Object.entries(expect)) {
      if (checkOnly && k !== "allowed") continue;
      if (!same(got?.[k], v)) failures.push(`${where}: ${k} is ${JSON.stringify(got?.[k])}, expected ${JSON.stringify(v)}`);
    }
  });
  return failures;
}
