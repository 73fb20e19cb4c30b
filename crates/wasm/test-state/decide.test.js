// The stateless `decide(policy, state, now, cost)` of the `state-json` build: the state round-trips
// as the core's JSON, a cost of 0 peeks (and brings the state up to date), errors name the
// field and rule, and it decides exactly what a Limiter decides.
import { test } from "node:test";
import assert from "node:assert/strict";
// Runs against the `state-json` build (crates/wasm/pkg-state, made by scripts/test.d/30-npm.sh);
// the default package leaves `decide` out.
const { decide, Limiter } = await import(new URL("../pkg-state/node/index.js", import.meta.url));

test("a token bucket's state is the core's JSON: credit in token-nanoseconds, refilled by a peek", () => {
  let state = null;
  let admitted = 0;
  let last;
  for (let i = 0; i < 25; i++) {
    const r = decide("token-bucket 10/s burst 20", state, 1_000);
    state = r.state;
    admitted += r.decision.allowed ? 1 : 0;
    last = r.decision;
  }
  assert.equal(admitted, 20);
  assert.deepEqual(last, { allowed: false, limit: 20, remaining: 0, resetAfter: 2_000, retryAfter: 100, delay: 0 });
  assert.deepEqual(JSON.parse(state), { "token-bucket": { credit: 0, last: 1_000_000_000 } });
  // 250 ms later, a peek (cost 0) charges nothing and returns the refilled bucket: 2.5 tokens.
  const peek = decide("token-bucket 10/s burst 20", state, 1_250, 0);
  assert.equal(peek.decision.allowed, true);
  assert.equal(peek.decision.remaining, 2);
  assert.deepEqual(JSON.parse(peek.state), { "token-bucket": { credit: 2_500_000_000, last: 1_250_000_000 } });
  // After 2 s the bucket is full again: fresh, so no state.
  assert.equal(decide("token-bucket 10/s burst 20", state, 3_000, 0).state, null);
});

test("each algorithm's state carries what the page draws", () => {
  const run = (policy, times) => {
    let state = null;
    for (const t of times) state = decide(policy, state, t).state;
    return JSON.parse(state);
  };
  assert.deepEqual(run("sliding-window 10/s", [100, 200, 1_100]), {
    "sliding-window": { window: 1, prev: 2, cur: 1 },
  });
  assert.deepEqual(run("fixed-window 10/s", [100, 200, 1_100]), { "fixed-window": { window: 1, count: 1 } });
  assert.deepEqual(run("sliding-log 3/s", [100, 100, 600]), {
    "sliding-log": { entries: [{ at: 100_000_000, cost: 2 }, { at: 600_000_000, cost: 1 }] },
  });
  // GCRA and the queue keep time scaled by the limit (ns x 2 here).
  assert.deepEqual(run("gcra 2/s", [0]), { gcra: { tat: 1_000_000_000 } });
  assert.deepEqual(run("leaky-queue 2/s burst 6", [0, 0]), { "leaky-queue": { last_departure: 2_000_000_000 } });
  assert.deepEqual(run("leaky-bucket 2/s", [0]), { "leaky-bucket": { level: 1_000_000_000, last: 0 } });
});

test("it decides what a Limiter decides, on the same requests", () => {
  for (const policy of ["gcra 5/s burst 3", "sliding-window 4/s", "leaky-queue 10/s burst 4", "sliding-log 3/500ms"]) {
    const limiter = new Limiter(policy);
    let state = null;
    for (let i = 0; i < 40; i++) {
      const now = i * 37;
      const cost = 1 + (i % 2);
      const r = decide(policy, state, now, cost);
      state = r.state;
      assert.deepEqual(r.decision, limiter.check("k", { now, cost }), `${policy} at ${now}`);
    }
  }
});

test("invalid input throws errors that name the field and the rule", () => {
  assert.throws(() => decide("10/fortnight", null, 0), { name: "TypeError", field: "window", rule: "unknown-unit" });
  assert.throws(() => decide("2/s", null, 0, 3), { name: "RangeError", field: "cost", rule: "cost-exceeds-capacity" });
  assert.throws(() => decide("2/s", "{\"nope\":1}", 0), { name: "TypeError", field: "state", rule: "invalid-state" });
  assert.throws(() => decide("2/s", 42, 0), { name: "TypeError", field: "state", rule: "not-a-string" });
  assert.throws(() => decide("2/s", null, -1), { name: "RangeError", field: "now", rule: "negative" });
  const gcra = decide("gcra 2/s", null, 0).state;
  assert.throws(() => decide("fixed-window 2/s", gcra, 0), { name: "RangeError", field: "state" });
});
