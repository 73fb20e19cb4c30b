// The waiting vectors (tests/vectors/waiting/*.json; the format is in the core's
// tests/waiting.rs) on the in-memory Limiter.acquire: the core's waiting rule through wasm,
// the shared JS wait (js/waiting.js), at a test clock that only the waiter's sleeps move
// (each `late` longer), with the vector's jitter.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { Limiter, WaitTimeoutError } from "tollgate";

const dir = fileURLToPath(new URL("../../../tests/vectors/waiting/", import.meta.url));
/** acquire's test-only timers (see js/waiting.js): `{ clock, sleep }`. */
const TIMERS = Symbol.for("tollgate.testing.timers");

const files = readdirSync(dir).filter((f) => f.endsWith(".json")).sort();

test("the waiting vectors are there", () => assert.ok(files.length >= 5, files.join()));

for (const file of files) {
  test(`waiting vectors: ${file}`, async () => {
    const v = JSON.parse(readFileSync(dir + file, "utf8"));
    const l = new Limiter(v.policy);
    let now = 0;
    const timers = {
      clock: () => now,
      sleep: async (ms) => {
        now += ms + v.late;
      },
    };
    for (const [i, step] of v.steps.entries()) {
      now = Math.max(now, step.at);
      const what = `${file} step ${i}: ${JSON.stringify(step)}`;
      if (step.check !== undefined) {
        assert.equal(l.check("k", { now, cost: step.check }).allowed, step.allowed, what);
        continue;
      }
      try {
        await l.acquire("k", { ...step.acquire, [TIMERS]: timers });
        assert.equal(now, step.admittedAt, `${what}: admitted`);
      } catch (e) {
        if (!(e instanceof WaitTimeoutError)) throw e;
        assert.equal(now, step.gaveUpAt, `${what}: gave up (${e.message})`);
        assert.equal(e.retryAfter, step.retryAfter, what);
      }
      assert.equal(l.peek("k", { now }).remaining, step.remaining, `${what}: remaining`);
    }
  });
}
