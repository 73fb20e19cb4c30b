// Replays every shared conformance vector (tests/vectors/*.json) through the edge's check
// API, under the local Workers runtime, and requires the same decisions as the Rust core.
// Time comes from the vectors (`now`, accepted because this config turns the test clock on).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { start } from "./harness.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const DIR = process.env.TOLLGATE_VECTORS ?? path.resolve(here, "../../../tests/vectors");
const files = fs.readdirSync(DIR).filter((f) => f.endsWith(".json")).sort();
const load = (f) => JSON.parse(fs.readFileSync(path.join(DIR, f), "utf8"));
const limiters = files.map((f) => [f, load(f)]).filter(([, v]) => Array.isArray(v.steps));
const errorFiles = files.map((f) => [f, load(f)]).filter(([, v]) => Array.isArray(v.cases));
// The settle vectors (tests/vectors/settle/): reserve and settle through /v1/reserve and
// /v1/settle, named `settle/<file>`.
const SETTLE = path.join(DIR, "settle");
const settleFiles = fs.existsSync(SETTLE)
  ? fs.readdirSync(SETTLE).filter((f) => f.endsWith(".json")).sort()
      .map((f) => [`settle/${f}`, JSON.parse(fs.readFileSync(path.join(SETTLE, f), "utf8"))])
  : [];
// The plan vectors (tests/vectors/plans/): a policy of plans each, the plan named in each
// check (`plan` of /v1/check), overrides through the admin API; named `plans/<file>`.
const PLANS = path.join(DIR, "plans");
const planFiles = fs.existsSync(PLANS)
  ? fs.readdirSync(PLANS).filter((f) => f.endsWith(".json")).sort()
      .map((f) => [`plans/${f}`, JSON.parse(fs.readFileSync(path.join(PLANS, f), "utf8"))])
  : [];
const FIELDS = ["allowed", "limit", "remaining", "resetAfter", "retryAfter", "delay"];

function policyOf(limiter) {
  if (limiter.policy) return { limit: limiter.policy, key: "global" };
  if (limiter.stack) return { limit: limiter.stack, key: "global" };
  if (limiter.fairShare) return { limit: limiter.fairShare.shared, tenant: limiter.fairShare.tenant, key: "global" };
  throw new Error(`unknown limiter ${JSON.stringify(limiter)}`);
}
const nameOf = (file) => "v-" + file.replace(/\.json$/, "").replace(/[^A-Za-z0-9_.-]/g, "_");

let edge;
before(async () => {
  assert.ok(limiters.length > 0, `no vectors in ${DIR}`);
  const all = [...limiters, ...settleFiles];
  const policies = Object.fromEntries(all.map(([f, v]) => [nameOf(f), policyOf(v.limiter)]));
  for (const [f, v] of planFiles) {
    const plans = v.plans.map((p) => ({ name: p.name, limit: p.policies }));
    policies[nameOf(f)] = { key: "api-key", default: plans[0].name, plans };
  }
  edge = await start({ config: { settings: { test_clock: true }, policies, routes: [] } });
});
after(async () => { await edge?.dispose(); });

for (const [file, vector] of [...limiters, ...settleFiles, ...planFiles]) {
  test(`vector ${file}: ${vector.description ?? vector.name}`, async () => {
    const policy = nameOf(file);
    // A reservation's name in the vector (`as`) -> the id the edge answered.
    const reservations = new Map();
    for (const [i, step] of vector.steps.entries()) {
      // `on: same | other`: another limiter of the same or other policies. The edge has one
      // limiter per policy name, whose slots are the policy's own: no such step applies.
      if (step.on !== undefined) continue;
      const where = `${file} step ${i} (${step.op} t=${step.t} key=${step.key})`;
      let res;
      switch (step.op) {
        case "check":
          res = await edge.api("/v1/check", {
            key: step.key, policy, cost: step.cost ?? 1, now: step.t,
            ...(step.tenant !== undefined ? { tenant: step.tenant } : {}),
            ...(step.plan !== undefined ? { plan: step.plan } : {}),
          });
          break;
        // Overrides (plan vectors): the admin API, whose refusals are a 400 naming the
        // field (the core's codes, `unknown-plan`, `invalid-policy`, are the in-process
        // limiter's).
        case "set":
        case "get":
        case "clear": {
          const op = { set: "set", get: "read", clear: "clear" }[step.op];
          res = await edge.admin(`/admin/v1/overrides/${op}`, { policy, key: step.key, ...(step.override ?? {}) });
          if (step.expect?.error) {
            assert.equal(res.status, 400, `${where}: ${JSON.stringify(res.body)}`);
            continue;
          }
          assert.equal(res.status, 200, `${where}: ${JSON.stringify(res.body)}`);
          if (step.op === "get") assert.deepEqual(res.body.override, step.expect, where);
          if (step.op === "clear") assert.equal(res.body.override !== null, step.expect, where);
          continue;
        }
        case "reserve":
          res = await edge.api("/v1/reserve", { key: step.key, policy, cost: step.cost ?? 1, now: step.t });
          if (res.body.reservation) reservations.set(step.as, res.body.reservation);
          if (step.expect && "reserved" in step.expect) {
            assert.equal(typeof res.body.reservation === "string", step.expect.reserved, `${where}: reserved`);
          }
          break;
        case "settle": {
          const body = {
            key: step.key, policy, now: step.t, actual: step.actual,
            reservation: reservations.get(step.reservation),
            ...(step.overage ? { overage: step.overage } : {}),
          };
          res = await edge.api("/v1/settle", body);
          if (step.expect?.error) break;
          assert.equal(res.status, 200, `${where}: ${JSON.stringify(res.body)}`);
          const outcome = ["refunded", "charged", "unpaid"].filter((k) => k in step.expect);
          assert.deepEqual(
            Object.fromEntries(outcome.map((k) => [k, res.body[k]])),
            Object.fromEntries(outcome.map((k) => [k, step.expect[k]])),
            where,
          );
          continue;
        }
        case "peek":
          res = await edge.api("/v1/peek", { key: step.key, policy, now: step.t });
          break;
        case "release":
          res = await edge.api("/v1/release", { key: step.key, policy, cost: step.cost ?? 1, now: step.t });
          assert.equal(res.status, 200, `${where}: ${JSON.stringify(res.body)}`);
          continue;
        case "reset":
          res = await edge.admin("/admin/v1/keys/reset", { policy, key: step.key });
          assert.equal(res.status, 200, `${where}: ${JSON.stringify(res.body)}`);
          continue;
        default:
          assert.fail(`${where}: unknown op`);
      }
      if (step.expect?.error) {
        // A check naming a plan the policy lacks is a bad request at the edge (400
        // `invalid-plan`, field `plan`), where the core's limiter answers `unknown-plan`.
        const [status, error] = step.expect.error === "unknown-plan" ? [400, "invalid-plan"] : [422, step.expect.error];
        assert.equal(res.status, status, `${where}: ${JSON.stringify(res.body)}`);
        assert.equal(res.body.error, error, where);
        continue;
      }
      assert.equal(res.status, 200, `${where}: ${JSON.stringify(res.body)}`);
      const pick = (from, like) => Object.fromEntries(FIELDS.filter((k) => k in like).map((k) => [k, from[k]]));
      assert.deepEqual(pick(res.body, step.expect), pick(step.expect, step.expect), where);
      // A stack's or fair share's vectors carry each limit's decision (`each`); the edge
      // answers them in `policies`, one per limit in the same order.
      if (step.expect.each) {
        assert.ok(Array.isArray(res.body.policies), `${where}: no policies in ${JSON.stringify(res.body)}`);
        assert.deepEqual(
          res.body.policies.map((p, j) => pick(p, step.expect.each[j] ?? {})),
          step.expect.each.map((e) => pick(e, e)),
          `${where}: each`,
        );
      }
    }
  });
}

// Policy errors: a config holding the policy must answer every request with 500, naming the
// field (`policies.p.limit`) and carrying the core's message (which names the policy field
// and the rule).
for (const [file, vector] of errorFiles) {
  test(`vector ${file}: every invalid policy is a named config error`, async () => {
    for (const c of vector.cases) {
      const bad = await start({ config: { policies: { p: { limit: c.policy } } } });
      try {
        const r = await bad.fetch("/api/anything");
        assert.equal(r.status, 500, c.policy);
        const body = await r.json();
        assert.equal(body.field, "policies.p.limit", c.policy);
        if (c.message) assert.ok(body.detail.includes(c.message), `${body.detail} should include ${c.message}`);
        assert.ok(body.detail.includes(`${c.field} `) || body.detail.includes(`${c.field} "`), body.detail);
      } finally {
        await bad.dispose();
      }
    }
  });
}
