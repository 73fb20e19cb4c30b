// Issue 41 at the edge: plans by API key table. A key's plan comes from settings.api_keys;
// an unknown key counts by IP under the default plan; the counter belongs to the caller,
// so a key whose plan changes keeps what it spent (the object carries its state by the
// core's rule), across restarts too (persisted Durable Object storage).
import { test, after } from "node:test";
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
after(() => fs.rmSync(dir, { recursive: true, force: true }));

/** Requests `/api/x` until the first 429 (at most `max`); answers how many passed. */
async function admitted(edge, { key, ip = "203.0.113.90", max = 50 }) {
  const headers = key ? { "x-api-key": key } : {};
  for (let n = 0; n < max; n++) {
    const r = await hit(edge, "/api/x", { ip, headers });
    if (r.status === 429) return n;
    assert.equal(r.status, 200, r.text);
  }
  return max;
}

test("a free key gets the free limit, a pro key its own, an unknown key counts by IP under free", async () => {
  const edge = await start({ config: config({ free_key: null, pro_key: "pro" }), persist: dir });
  try {
    await clearOfMinuteEdge(10_000);
    assert.equal(await admitted(edge, { key: "free_key" }), FREE);
    assert.equal(await admitted(edge, { key: "pro_key" }), PRO);
    const r = await hit(edge, "/api/x", { ip: "203.0.113.91", headers: { "x-api-key": "pro_key" } });
    assert.equal(r.status, 429, "the pro key's own counter, whatever its IP");
    const ip = "203.0.113.92";
    assert.equal(await admitted(edge, { key: "invented", ip, max: 3 }), 3);
    assert.equal(await admitted(edge, { ip }), FREE - 3, "one counter: the IP's, under free");
  } finally {
    await edge.dispose();
  }
});

test("free -> pro -> free in one window never admits more than pro's limit (spend kept over restarts)", async () => {
  await clearOfMinuteEdge(15_000);
  let total = 0;
  for (const plan of [null, "pro", null, "pro"]) {
    const edge = await start({ config: config({ switcher: plan }), persist: dir });
    try {
      total += await admitted(edge, { key: "switcher" });
    } finally {
      await edge.dispose();
    }
  }
  assert.equal(total, PRO);
});
