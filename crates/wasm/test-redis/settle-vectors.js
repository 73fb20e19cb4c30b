// Replays the shared settle vectors (tests/vectors/settle/*.json; the format is in the
// core's tests/settle.rs) through RedisLimiter at a test clock, as the Rust crate's runner
// does (crates/redis/tests/settle.rs): every settle goes to Redis, a second one of a name
// too, so that Redis's settle record answers it. Used on the scripts (settle.test.js) and
// on the module (module.test.js).
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { RedisLimiter, TESTING } from "tollgate/redis";
import { matches } from "../test/settle-replay.js";
import { repo } from "./support.js";

const DIR = join(repo, "tests/vectors/settle");

/** The vectors, by file name. */
export function settleVectors() {
  return readdirSync(DIR)
    .filter((f) => f.endsWith(".json"))
    .sort()
    .map((f) => JSON.parse(readFileSync(join(DIR, f), "utf8")));
}

async function run(step, limiter, open) {
  switch (step.op) {
    case "reserve": {
      const { reservation, ...decision } = await limiter.reserve(step.key, step.cost ?? 1);
      if (reservation !== undefined) open.set(step.as, reservation);
      return { ...decision, reserved: reservation !== undefined };
    }
    case "settle": {
      const r = open.get(step.reservation);
      if (r === undefined) throw new Error(`no reservation ${step.reservation}`);
      // A JSON copy, as a client that kept it holds it; the key is the step's (a
      // foreign-key step settles it on another).
      const copy = { ...JSON.parse(JSON.stringify(r)), key: step.key };
      return limiter.settle(copy, step.actual, { overage: step.overage });
    }
    case "check":
      return limiter.check(step.key, { cost: step.cost ?? 1 });
    case "release":
      return limiter.release(step.key, { cost: step.cost ?? 1 });
    default:
      throw new Error(`unknown op ${step.op}`);
  }
}

/**
 * Replays `vector` on `client` (namespaces under `prefix`); returns what disagreed, as
 * messages, and how many steps ran.
 */
export async function replayOnRedis(client, vector, prefix) {
  let now = 0;
  const make = (namespace, spec) =>
    new RedisLimiter(client, spec.policy ?? spec.stack, { namespace, fallback: "closed", timeout: 5000, [TESTING]: { clock: () => now } });
  const main = make(`${prefix}:${vector.name}`, vector.limiter);
  // Another limiter is another namespace (the same policy: foreign-limiter) or other
  // policies (foreign-policy).
  const others = new Map(Object.entries(vector.others ?? {}).map(([k, spec]) => [k, make(`${prefix}:${vector.name}:${k}`, spec)]));
  const open = new Map();
  const failures = [];
  let steps = 0;
  for (const [i, step] of vector.steps.entries()) {
    now = step.t ?? 0;
    const where = `${vector.name} step ${i} ${JSON.stringify(step)}`;
    const limiter = step.on === undefined ? main : others.get(step.on);
    let got;
    try {
      got = await run(step, limiter, open);
    } catch (e) {
      if (!(e instanceof RangeError) || e.rule === undefined) {
        failures.push(`${where}: threw ${e}`);
        continue;
      }
      got = { error: e.rule };
    }
    steps++;
    if (step.expect !== undefined && !matches(step.expect, got)) {
      failures.push(`${where}: got ${JSON.stringify(got)}, expected ${JSON.stringify(step.expect)}`);
    }
  }
  for (const l of [main, ...others.values()]) l.free();
  return { failures, steps };
}
