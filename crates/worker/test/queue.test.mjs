// Issue 16, item 2: a leaky queue on a route shapes: each admitted request is held for the
// delay the core gave it before it reaches the origin.
import { test } from "node:test";
import assert from "node:assert/strict";
import { start, hit } from "./harness.mjs";
import { startOrigin } from "./origin.mjs";

test("four concurrent requests on leaky-queue 2/1s burst 4 reach the origin spread over the drain", async () => {
  const origin = await startOrigin();
  const edge = await start({
    config: {
      policies: { q: { limit: "leaky-queue 2/1s burst 4", key: "ip" } },
      routes: [{ path: "/api/q", policies: ["q"] }],
    },
    bindings: { ORIGIN: origin.url },
  });
  try {
    const sent = Date.now();
    const got = await Promise.all(Array.from({ length: 4 }, () => hit(edge, "/api/q/x", { ip: "203.0.113.70" })));
    assert.deepEqual(got.map((r) => r.status), [200, 200, 200, 200]);
    const at = origin.seen.map((s) => s.at).sort((a, b) => a - b);
    assert.equal(at.length, 4);
    // The queue lets one leave every 500 ms, the first after 500 ms: the last leaves 2 s
    // after the first decision. Only lower bounds (a busy machine adds, never removes).
    assert.ok(at[0] - sent >= 400, `first reached the origin ${at[0] - sent} ms after sending`);
    assert.ok(at[3] - at[0] >= 1000, `spread ${at[3] - at[0]} ms`);
    assert.ok(at[3] - sent >= 1900, `last after ${at[3] - sent} ms`);
  } finally {
    await edge.dispose();
    await origin.close();
  }
});

test("a leaky queue that could hold longer than settings.max_delay_ms is refused by the config", async () => {
  const edge = await start({
    config: {
      settings: { max_delay_ms: 1000 },
      policies: { q: { limit: "leaky-queue 2/1s burst 4", key: "ip" } },
      routes: [{ path: "/api/q", policies: ["q"] }],
    },
  });
  try {
    const r = await hit(edge, "/api/q", { ip: "203.0.113.71" });
    assert.equal(r.status, 500);
    const body = JSON.parse(r.text);
    assert.equal(body.field, "policies.q.limit");
    assert.match(body.detail, /2000 ms, above settings.max_delay_ms \(1000\)/);
  } finally {
    await edge.dispose();
  }
});
