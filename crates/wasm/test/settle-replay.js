// Replays one reserve-and-settle vector (tests/vectors/settle/*.json; the format is in the
// core's tests/settle.rs) on a `Limiter` class and returns what disagreed, as messages (an
// empty list: every step gave the expected answer). Plain JavaScript without Node imports,
// so that the same replay runs in Node (settle.test.js) and in a page in Chromium
// (browser.test.js).
//
// A second settle of the same name settles the same reservation object again: the limiter
// answers it from its record of settled reservations, charging nothing (the vector's
// "settle twice" step), as a JSON copy of the reservation would be answered.

function limiterFor(Limiter, spec) {
  const options = { maxKeys: 1000 };
  if (spec.policy !== undefined) return new Limiter(spec.policy, options);
  return Limiter.all(spec.stack, options);
}

/** Whether `got` has every field of `want` with the same value (arrays: element by element, same length). */
export function matches(want, got) {
  if (Array.isArray(want)) {
    return Array.isArray(got) && want.length === got.length && want.every((w, i) => matches(w, got[i]));
  }
  if (want !== null && typeof want === "object") {
    return got !== null && typeof got === "object" && Object.entries(want).every(([k, v]) => matches(v, got[k]));
  }
  return want === got;
}

function run(step, limiter, open) {
  const now = step.t ?? 0;
  const cost = step.cost ?? 1;
  switch (step.op) {
    case "reserve": {
      const { reservation, ...decision } = limiter.reserve(step.key, cost, { now });
      if (reservation !== undefined) open.set(step.as, reservation);
      return { ...decision, reserved: reservation !== undefined };
    }
    case "settle": {
      const r = open.get(step.reservation);
      if (r === undefined) throw new Error(`no reservation ${step.reservation}`);
      // The reservation's own key is the step's (a foreign-key step settles it on another).
      return limiter.settle({ ...r, key: step.key }, step.actual, { now, overage: step.overage });
    }
    case "check":
      return limiter.checkDetailed(step.key, { now, cost });
    case "release":
      return limiter.release(step.key, { cost });
    default:
      throw new Error(`unknown op ${step.op}`);
  }
}

/** The steps of `vector` whose answer differs from the expected one. */
export function replaySettle(Limiter, vector) {
  const failures = [];
  const main = limiterFor(Limiter, vector.limiter);
  const others = new Map(Object.entries(vector.others ?? {}).map(([name, spec]) => [name, limiterFor(Limiter, spec)]));
  const open = new Map();
  vector.steps.forEach((step, i) => {
    const where = `${vector.name} step ${i} ${JSON.stringify(step)}`;
    const limiter = step.on === undefined ? main : others.get(step.on);
    let got;
    try {
      got = run(step, limiter, open);
    } catch (e) {
      if (!(e instanceof RangeError) || e.rule === undefined) {
        failures.push(`${where}: threw ${e}`);
        return;
      }
      got = { error: e.rule };
    }
    if (step.expect !== undefined && !matches(step.expect, got)) {
      failures.push(`${where}: got ${JSON.stringify(got)}, expected ${JSON.stringify(step.expect)}`);
    }
  });
  return failures;
}
