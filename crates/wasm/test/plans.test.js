// tollgate/plans: the shared plan vectors (tests/vectors/plans/, the contract the Rust core
// replays too) through the built entry, and the PlanLimiter's own behaviour: limits by plan,
// overrides, spend kept across plan changes, headers named by the plan, errors naming the
// plan and field.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { join } from "node:path";
import { PlanLimiter } from "tollgate/plans";

const dir = fileURLToPath(new URL("../../../tests/vectors/plans", import.meta.url));
const files = readdirSync(dir).filter((f) => f.endsWith(".json")).sort();

/** A vector's `plans` (the core's serde form) as the PlanLimiter's option. */
function plansOption(plans) {
  return Object.fromEntries(plans.map((p) => [p.name, p.policies]));
}

/** A decision as the vectors write it: the six numbers, and `each` for a stack. */
function asVector(d) {
  const pick = ({ allowed, limit, remaining, resetAfter, retryAfter, delay }) => ({ allowed, limit, remaining, resetAfter, retryAfter, delay });
  const out = pick(d);
  if (d.each.length > 1) out.each = d.each.map(pick);
  return out;
}

/** What one step answers, in the vectors' form (an error as `{ error: rule }`). */
function run(limiter, step) {
  try {
    switch (step.op) {
      case "check":
        return asVector(limiter.checkDetailed(step.key, step.plan, { now: step.t, cost: step.cost ?? 1 }));
      case "set":
        limiter.set(step.key, step.override);
        return null;
      case "get":
        return limiter.get(step.key) ?? null;
      case "clear":
        return limiter.clear(step.key);
      default:
        throw new Error(`unknown op ${step.op}`);
    }
  } catch (e) {
    if (e.rule === undefined) throw e;
    return { error: e.rule };
  }
}

test("the plan vectors are present", () => {
  assert.ok(files.length >= 5, `only ${files.length} plan vector files in ${dir}`);
});

for (const file of files) {
  const vector = JSON.parse(readFileSync(join(dir, file), "utf8"));
  test(`plan vector ${vector.name} (${vector.steps.length} steps)`, () => {
    const limiter = new PlanLimiter({ plans: plansOption(vector.plans), maxKeys: 10_000, maxOverrides: 100 });
    vector.steps.forEach((step, i) => {
      assert.deepEqual(run(limiter, step), step.expect, `${file} step ${i + 1}: ${JSON.stringify(step)}`);
    });
  });
}

const freeAndPro = () => new PlanLimiter({ plans: { free: "fixed-window 5/min", pro: "fixed-window 20/min" } });

/** How many of `n` checks of `key` under `plan` at `now` are admitted. */
function admitted(limiter, key, plan, n, now) {
  let ok = 0;
  for (let i = 0; i < n; i++) if (limiter.check(key, plan, { now }).allowed) ok++;
  return ok;
}

test("a free key gets free's 5 a minute and a pro key pro's 20, each with its plan's limit", () => {
  const l = freeAndPro();
  assert.equal(admitted(l, "alice", "free", 30, 0), 5);
  assert.equal(admitted(l, "bob", "pro", 30, 0), 20);
  const d = l.check("carol", "pro", { now: 0 });
  assert.equal(d.limit, 20);
  assert.equal(d.plan, "pro");
  // A check that names no plan is under the default plan (the first, unless `default` says).
  assert.equal(l.check("dave", undefined, { now: 0 }).plan, "free");
  const byDefault = new PlanLimiter({ plans: { free: "5/min", pro: "20/min" }, default: "pro" });
  assert.equal(byDefault.check("dave", null, { now: 0 }).limit, 20);
  assert.equal(byDefault.defaultPlan, "pro");
});

test("an override applies at the key's next check and is gone when cleared", () => {
  const l = freeAndPro();
  assert.equal(l.check("alice", "free", { now: 0 }).limit, 5);
  l.set("alice", { plan: "pro" });
  assert.deepEqual(l.get("alice"), { plan: "pro" });
  const raised = l.check("alice", "free", { now: 1 });
  assert.equal(raised.limit, 20);
  assert.equal(raised.plan, "pro");
  assert.equal(raised.remaining, 18, "the one spent under free stays spent");
  l.set("alice", { limits: ["fixed-window 3/min"] });
  assert.deepEqual(l.get("alice"), { limits: ["fixed-window 3/min"] });
  const own = l.check("alice", "free", { now: 2 });
  assert.deepEqual([own.limit, own.remaining, own.plan], [3, 0, null]);
  assert.equal(l.clear("alice"), true);
  assert.equal(l.clear("alice"), false);
  assert.equal(l.get("alice"), undefined);
  const back = l.check("alice", "free", { now: 3 });
  assert.deepEqual([back.limit, back.remaining, back.plan], [5, 1, "free"]);
});

test("free -> pro -> free within a window never admits more than the plans allow", () => {
  const l = freeAndPro();
  // Within one window: 5 under free, then pro's 20 counts the 5 already spent (15 more),
  // then free again admits nothing: 20 in all, pro's limit, never 5 + 20 + 5.
  const free1 = admitted(l, "k", "free", 10, 0);
  const pro = admitted(l, "k", "pro", 30, 1_000);
  const free2 = admitted(l, "k", "free", 10, 2_000);
  assert.deepEqual([free1, pro, free2], [5, 15, 0]);
  // The same switches one request at a time: never a fresh count.
  const m = freeAndPro();
  let total = 0;
  for (let i = 0; i < 60; i++) if (m.check("k", ["free", "pro", "free"][i % 3], { now: i }).allowed) total++;
  assert.ok(total <= 20, `${total} admitted within one window of pro's 20`);
});

test("headers and the 429 body name the plan that decided, as the core writes them", () => {
  const l = new PlanLimiter({ plans: { free: "fixed-window 1/min", pro: ["fixed-window 5/min", "fixed-window 2/s"] } });
  const free = l.check("a", "free", { now: 0 });
  assert.deepEqual(l.headers(free), { "RateLimit-Policy": '"free";q=1;w=60', RateLimit: '"free";r=0;t=60' });
  const denied = l.check("a", "free", { now: 0 });
  const h = l.headers(denied);
  assert.equal(h["Retry-After"], "60");
  assert.equal(JSON.parse(l.problem(denied))["violated-policies"][0], "free");
  assert.equal(l.problem(free), undefined);
  // A stack's limits are <plan>.1, <plan>.2, from checkDetailed()'s decision (as a
  // Limiter's stack: check()'s has no `each` to name them by).
  const pro = l.checkDetailed("b", "pro", { now: 0 });
  assert.equal(l.headers(pro)["RateLimit-Policy"], '"pro.1";q=5;w=60, "pro.2";q=2;w=1');
  assert.throws(() => l.headers(l.check("b", "pro", { now: 0 })), (e) => e.rule === "not-detailed");
  // A copy of a decision names its plan as the original does.
  assert.deepEqual(l.headers({ ...free }), l.headers(free));
  // A key's own limits are "own", as they were at the decision.
  l.set("c", { limits: "fixed-window 7/min" });
  const own = l.check("c", "free", { now: 0 });
  l.clear("c");
  assert.equal(l.headers(own)["RateLimit-Policy"], '"own";q=7;w=60');
});

test("invalid plans and calls throw naming the plan and the field", () => {
  const err = (fn) => {
    try {
      fn();
    } catch (e) {
      return [e.constructor.name, e.field, e.rule];
    }
    assert.fail("did not throw");
  };
  assert.deepEqual(err(() => new PlanLimiter({ plans: { free: "1/s", pro: ["1/s", "10/fortnight"] } })), ["TypeError", "plans.pro[1]", "invalid-policy"]);
  assert.match(
    (() => {
      try {
        new PlanLimiter({ plans: { pro: ["1/s", "10/fortnight"] } });
      } catch (e) {
        return e.message;
      }
    })(),
    /^invalid plans: plan "pro" policies\[1\]: invalid policy: window/,
  );
  assert.deepEqual(err(() => new PlanLimiter({ plans: {} })), ["TypeError", "plans", "no-plans"]);
  assert.deepEqual(err(() => new PlanLimiter({ plans: { free: 5 } })), ["TypeError", "plans.free", "not-a-string"]);
  assert.deepEqual(err(() => new PlanLimiter({ plans: { free: "1/s" }, default: "pro" })), ["TypeError", "default", "unknown-plan"]);
  assert.deepEqual(err(() => new PlanLimiter({ plans: { free: "1/s" }, maxKeys: 0 })), ["RangeError", "maxKeys", "zero"]);
  const l = new PlanLimiter({ plans: { free: "fixed-window 2/min" }, maxOverrides: 1 });
  assert.deepEqual(err(() => l.check("a", "gold")), ["TypeError", "plan", "unknown-plan"]);
  assert.deepEqual(err(() => l.check("a", "free", { cost: 3 })), ["RangeError", "cost", "cost-exceeds-capacity"]);
  assert.deepEqual(err(() => l.set("a", { plan: "gold" })), ["TypeError", "override.plan", "unknown-plan"]);
  assert.deepEqual(err(() => l.set("a", { limits: ["1/s", "2/fortnight"] })), ["TypeError", "override.limits[1]", "invalid-policy"]);
  assert.deepEqual(err(() => l.set("a", {})), ["TypeError", "override", "not-an-override"]);
  l.set("a", { plan: "free" });
  assert.deepEqual(err(() => l.set("b", { plan: "free" })), ["RangeError", "override", "too-many-overrides"]);
  assert.deepEqual(err(() => l.check("x".repeat(2000), "free")), ["RangeError", "key", "too-long"]);
});
