// Issue 16, item 6: invented API keys cannot mint fresh buckets. Either the valid keys are
// listed (by SHA-256) and an unknown key counts by IP, or a route counted only by API key
// is refused by the config unless it also stacks an IP policy.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { start, hit, clearOfMinuteEdge } from "./harness.mjs";

const sha256 = (k) => createHash("sha256").update(k).digest("hex");
const POLICIES = { "per-key": { limit: "fixed-window 2/min", key: "api-key" } };

test("a route counted only by unlisted API keys is refused, naming the route", async () => {
  const edge = await start({ config: { policies: POLICIES, routes: [{ path: "/api/", policies: ["per-key"] }] } });
  try {
    const r = await hit(edge, "/api/x", { ip: "203.0.113.80", headers: { "x-api-key": "k1" } });
    assert.equal(r.status, 500);
    const body = JSON.parse(r.text);
    assert.equal(body.field, "routes[0].policies");
    assert.match(body.detail, /invented keys/);
  } finally {
    await edge.dispose();
  }
});

test("with settings.api_keys, invented keys count by IP; a listed key keeps its own bucket", async () => {
  const edge = await start({
    config: {
      settings: { api_keys: [sha256("live_key_1")] },
      policies: POLICIES,
      routes: [{ path: "/api/", policies: ["per-key"] }],
    },
  });
  try {
    await clearOfMinuteEdge(); // the counting below happens in one per-minute window
    const ip = "203.0.113.81";
    const got = [];
    for (let i = 0; i < 4; i++) {
      got.push((await hit(edge, "/api/x", { ip, headers: { "x-api-key": `invented-${i}-${Math.random()}` } })).status);
    }
    assert.deepEqual(got, [200, 200, 429, 429], "one bucket: the IP's");
    const k = { "x-api-key": "live_key_1" };
    assert.equal((await hit(edge, "/api/x", { ip, headers: k })).status, 200);
    assert.equal((await hit(edge, "/api/x", { ip: "203.0.113.82", headers: k })).status, 200);
    assert.equal((await hit(edge, "/api/x", { ip: "203.0.113.83", headers: k })).status, 429);
  } finally {
    await edge.dispose();
  }
});
