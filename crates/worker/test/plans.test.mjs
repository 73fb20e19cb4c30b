// Issue 41 at the edge: plans by API key table, and admin overrides. A key's plan comes
// from settings.api_keys; an unknown key counts by IP under the default plan; an override
// (kept by the key's object) applies at its next decision; the counter belongs to the
// caller, so a key whose plan changes keeps what it spent (the object carries its state by
// the core's rule); overrides and spend survive a restart (persisted storage). One
// Miniflare for the file, and a second for the restart.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { start, hit, clearOfMinuteEdge } from "./harness.mjs";

const sha256 = (k) => createHash("sha256").update(k).digest("hex");
const FREE = 5;
const PRO = 20;

/** The config with `table` as settings.api_keys ({ key: plan or null }). */
const config = (table) => ({
  settings: {
    api_keys: Object.entries(table).map(([k, plan]) => (plan ? { sha256: sha256(k), plan } : sha256(k))),
  },
  policies: {
    api: {
      key: "api-key",
      default: "free",
      plans: [
        { name: "free", limit: `fixed-window ${FREE}/min` },
        // Another algorithm than free's, so a switch runs the core's carry (a state kept as
        // it was would not fit the policy).
        { name: "pro", limit: `gcra ${PRO}/h burst ${PRO}` },
      ],
    },
  },
  routes: [{ path: "/api/", policies: ["api"] }],
});

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tollgate-plans-"));
const CONFIG = config({ free_key: null, pro_key: "pro", switcher: null, own: null, restarted: null });
let edge;
before(async () => {
  edge = await start({ config: CONFIG, persist: dir });
});
after(async () => {
  await edge.dispose();
  fs.rmSync(dir, { recursive: true, force: true });
});

/** Requests `/api/x` until the first 429 (at most `max`); answers how many passed. */
async function admitted({ key, ip = "203.0.113.90", max = 50 }) {
  const headers = key ? { "x-api-key": key } : {};
  for (let n = 0; n < max; n++) {
    const r = await hit(edge, "/api/x", { ip, headers });
    if (r.status === 429) return n;
    assert.equal(r.status, 200, r.text);
  }
  return max;
}

/** POST /admin/v1/overrides/<op> for API key `key` with `extra`. */
const override = (op, key, extra = {}) => edge.admin(`/admin/v1/overrides/${op}`, { policy: "api", apiKey: key, ...extra });

test("a free key gets the free limit, a pro key its own, an unknown key counts by IP under free", async () => {
  await clearOfMinuteEdge(10_000);
  assert.equal(await admitted({ key: "free_key" }), FREE);
  assert.equal(await admitted({ key: "pro_key" }), PRO);
  const r = await hit(edge, "/api/x", { ip: "203.0.113.91", headers: { "x-api-key": "pro_key" } });
  assert.equal(r.status, 429, "the pro key's own counter, whatever its IP");
  // The admin's read of a key peeks under its plan, and changes nothing stored.
  for (let i = 0; i < 2; i++) {
    const read = await edge.admin("/admin/v1/keys/read", { policy: "api", apiKey: "pro_key" });
    assert.equal(read.status, 200, JSON.stringify(read.body));
    assert.deepEqual([read.body.decision.limit, read.body.decision.remaining], [PRO, 0]);
  }
  const ip = "203.0.113.92";
  assert.equal(await admitted({ key: "invented", ip, max: 3 }), 3);
  assert.equal(await admitted({ ip }), FREE - 3, "one counter: the IP's, under free");
});

test("free -> pro -> free -> pro by override within a window admits pro's limit, not more", async () => {
  await clearOfMinuteEdge(10_000);
  let total = await admitted({ key: "switcher" });
  assert.equal(total, FREE);
  for (const set of [{ plan: "pro" }, null, { plan: "pro" }]) {
    const r = set ? await override("set", "switcher", set) : await override("clear", "switcher");
    assert.equal(r.status, 200, JSON.stringify(r.body));
    total += await admitted({ key: "switcher" });
  }
  assert.equal(total, PRO);
});

test("an override of the key's own limits applies at its next decision and is gone when cleared", async () => {
  await clearOfMinuteEdge(10_000);
  assert.equal(await admitted({ key: "own" }), FREE);
  const set = await override("set", "own", { limits: [`fixed-window ${FREE + 3}/min`] });
  assert.equal(set.status, 200, JSON.stringify(set.body));
  assert.deepEqual(set.body.override, { limits: [`fixed-window ${FREE + 3}/min`] });
  const r = await hit(edge, "/api/x", { ip: "203.0.113.93", headers: { "x-api-key": "own" } });
  assert.equal(r.status, 200);
  assert.match(r.headers.get("ratelimit-policy"), new RegExp(`q=${FREE + 3}`), "named by the limits decided");
  assert.equal(await admitted({ key: "own" }), 2, "its own limit, with what it spent");
  assert.deepEqual((await override("read", "own")).body.override, { limits: [`fixed-window ${FREE + 3}/min`] });
  assert.deepEqual((await override("clear", "own")).body.override, { limits: [`fixed-window ${FREE + 3}/min`] });
  assert.equal((await override("read", "own")).body.override, null);
  assert.equal(await admitted({ key: "own" }), 0, "back on free");
});

test("a bad override is a 400 naming the field", async () => {
  const cases = [
    [{ plan: "gold" }, "plan"],
    [{ limits: ["10/fortnight"] }, "limits[0]"],
    [{ limits: ["1/s", "2/s"] }, "limits"],
    [{ plan: "pro", limits: ["1/s"] }, "plan"],
  ];
  for (const [extra, field] of cases) {
    const r = await override("set", "own", extra);
    assert.equal(r.status, 400, JSON.stringify(r.body));
    assert.equal(r.body.field, field, JSON.stringify(r.body));
  }
  const unauthorised = await edge.api("/admin/v1/overrides/set", { policy: "api", apiKey: "own", plan: "pro" });
  assert.equal(unauthorised.status, 401);
});

test("a restart keeps the overrides and the spend", async () => {
  await clearOfMinuteEdge(15_000);
  assert.equal((await override("set", "restarted", { plan: "pro" })).status, 200);
  assert.equal(await admitted({ key: "restarted", max: 4 }), 4);
  await edge.dispose();
  edge = await start({ config: CONFIG, persist: dir });
  assert.deepEqual((await override("read", "restarted")).body.override, { plan: "pro" });
  assert.equal(await admitted({ key: "restarted" }), PRO - 4, "pro, less the 4 spent before");
});
