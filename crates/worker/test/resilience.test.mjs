// Durability across a runtime restart, degraded modes with a coordinator that fails, and
// configs that must never be replaced by a silent default.
import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { start, hit } from "./harness.mjs";

const CONFIG = {
  policies: {
    "per-ip": { limit: "fixed-window 5/h", key: "ip" },
    "bucket": { limit: "token-bucket 1/h burst 4", key: "ip" },
    "group": { limit: "fixed-window 30/h", key: "ip" },
  },
  routes: [
    { name: "open", path: "/api/open", policies: ["per-ip"], on_error: "open" },
    { name: "closed", path: "/api/closed", policies: ["per-ip"], on_error: "closed", retry_after_s: 7 },
    { name: "bucket", path: "/api/bucket", policies: ["bucket"] },
    { name: "group", path: "/api/group", policies: ["group"] },
  ],
};

test("counts survive a restart of the runtime (persisted Durable Object storage)", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tollgate-persist-"));
  try {
    let edge = await start({ config: CONFIG, persist: dir });
    const ip = "203.0.113.5";
    const first = [];
    for (let i = 0; i < 3; i++) first.push((await hit(edge, "/api/closed", { ip })).status);
    for (let i = 0; i < 3; i++) first.push((await hit(edge, "/api/bucket", { ip })).status);
    assert.deepEqual(first, [200, 200, 200, 200, 200, 200]);
    await edge.dispose();

    edge = await start({ config: CONFIG, persist: dir });
    try {
      const second = [];
      for (let i = 0; i < 3; i++) second.push((await hit(edge, "/api/closed", { ip })).status);
      for (let i = 0; i < 2; i++) second.push((await hit(edge, "/api/bucket", { ip })).status);
      // 5/h window: 3 before + 2 after the restart; the bucket (burst 4) had 1 token left.
      assert.deepEqual(second, [200, 200, 429, 200, 429]);
      const read = await edge.admin("/admin/v1/keys/read", { policy: "per-ip", ip });
      assert.equal(read.body.decision.remaining, 0);
      assert.deepEqual(Object.keys(read.body.limits[0].state), ["fixed-window"]);
    } finally {
      await edge.dispose();
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test("concurrent checks share group commits and every admission survives a restart", async () => {
  // Concurrent calls to one object are written together (one commit for many); each answer
  // leaves only after its write, so a restart right after the burst loses no charge.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tollgate-persist-"));
  try {
    let edge = await start({ config: CONFIG, persist: dir });
    const ip = "203.0.113.9";
    const burst = await Promise.all(Array.from({ length: 20 }, () => hit(edge, "/api/group", { ip })));
    assert.deepEqual(burst.map((r) => r.status), Array(20).fill(200));
    await edge.dispose();

    edge = await start({ config: CONFIG, persist: dir });
    try {
      const after = await Promise.all(Array.from({ length: 30 }, () => hit(edge, "/api/group", { ip })));
      assert.equal(after.filter((r) => r.status === 200).length, 10, "30/h: 20 before the restart, 10 after");
      assert.equal(after.filter((r) => r.status === 429).length, 20);
      const read = await edge.admin("/admin/v1/keys/read", { policy: "group", ip });
      assert.equal(read.body.decision.remaining, 0);
    } finally {
      await edge.dispose();
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test("a failing coordinator: fail-open forwards and says so, fail-closed answers 503", async () => {
  // No Durable Object binding: every coordinator call fails.
  const edge = await start({ config: CONFIG, withObject: false });
  try {
    const open = await hit(edge, "/api/open", { ip: "203.0.113.6" });
    assert.equal(open.status, 200);
    assert.equal(JSON.parse(open.text).origin, "tollgate demo origin");
    assert.equal(open.headers.get("tollgate-degraded"), "fail-open; reason=coordinator-unavailable");
    const closed = await hit(edge, "/api/closed", { ip: "203.0.113.6" });
    assert.equal(closed.status, 503);
    assert.equal(closed.headers.get("retry-after"), "7");
    assert.equal(closed.headers.get("content-type"), "application/problem+json");
    assert.equal(JSON.parse(closed.text).error, "coordinator-unavailable");
    const stats = await edge.stats();
    assert.equal(stats["per-ip"].degraded, 2);
    assert.equal(stats["per-ip"].admitted, 0);
    const api = await edge.api("/v1/check", { key: "k", policy: "per-ip" });
    assert.equal(api.status, 503);
    assert.equal(api.body.error, "coordinator-unavailable");
  } finally {
    await edge.dispose();
  }
});

test("a malformed config answers every request 500, naming the field", async () => {
  const cases = [
    [{ policies: { a: { limit: "10/s" } }, routes: [{ path: "/api/", policies: ["b"] }] }, "routes[0].policies[0]"],
    [{ settings: { ipv6_prefix: 129 } }, "settings.ipv6_prefix"],
    [{ policies: { a: { limit: "10/s", tenant: "100/s" } } }, "policies.a.tenant"],
    [{ policies: { a: { limit: "10/s", key: "cookie" } } }, "policies.a.key"],
    [{ routes: [{ path: "/", policies: [], cost: "two" }] }, "routes[0].cost"],
    ["[settings]\ntimeout_ms = \"soon\"\n", "settings.timeout_ms"],
    ["[settings\n", "(toml)"],
    ["{ not json", "(json)"],
  ];
  for (const [config, field] of cases) {
    const edge = await start({ config });
    try {
      for (const p of ["/api/x", "/v1/check", "/admin/v1/stats", "/"]) {
        const r = await edge.fetch(p, { method: p === "/v1/check" ? "POST" : "GET" });
        assert.equal(r.status, 500, `${p} with ${JSON.stringify(config)}`);
        const body = await r.json();
        assert.equal(body.field, field);
        assert.match(body.detail, /^invalid config: /);
      }
    } finally {
      await edge.dispose();
    }
  }
});

test("the bundled config is valid and limits the demo API", async () => {
  const edge = await start({});
  try {
    const r = await hit(edge, "/api/hello", { ip: "203.0.113.7" });
    assert.equal(r.status, 200);
    assert.match(r.headers.get("ratelimit-policy"), /^"per-ip";q=20;w=2$/);
    assert.equal((await hit(edge, "/csp-report", { ip: "203.0.113.7", method: "POST" })).status, 204);
  } finally {
    await edge.dispose();
  }
});

test("an alarm sweeps stored states once they are back to fresh", async () => {
  const edge = await start({
    config: {
      settings: { shards: 1 },
      policies: { short: { limit: "fixed-window 5/s", key: "ip" } },
      routes: [{ path: "/api/short", policies: ["short"] }],
    },
  });
  try {
    assert.equal((await hit(edge, "/api/short", { ip: "198.51.100.71" })).status, 200);
    assert.equal((await hit(edge, "/api/short", { ip: "198.51.100.72" })).status, 200);
    // Read through a third, never-seen key of the same object: the peek stores nothing.
    const rows = async () =>
      (await edge.admin("/admin/v1/keys/read", { policy: "short", ip: "198.51.100.73" })).body.storedRows;
    assert.equal(await rows(), 2);
    // The sweep runs at most every 10 s per object; wait for it (bounded), not for a time.
    const deadline = Date.now() + 45_000;
    let left = 2;
    while (left > 0 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 1000));
      left = await rows();
    }
    assert.equal(left, 0, "the alarm deleted both fresh states");
  } finally {
    await edge.dispose();
  }
});

test("stats are global: isolates report to the stats object, which keeps them across a restart", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tollgate-stats-"));
  const config = { ...CONFIG, settings: { stats_flush_ms: 100 } };
  const ADMIN = { authorization: "Bearer admin-secret-for-tests" };
  try {
    let edge = await start({ config, persist: dir });
    assert.equal((await hit(edge, "/api/closed", { ip: "203.0.113.90" })).status, 200);
    assert.equal((await hit(edge, "/api/closed", { ip: "203.0.113.90" })).status, 200);
    await new Promise((r) => setTimeout(r, 150));
    // This request's handler reports all three in the background (ctx.waitUntil).
    assert.equal((await hit(edge, "/api/closed", { ip: "203.0.113.90" })).status, 200);
    await new Promise((r) => setTimeout(r, 1000));
    await edge.dispose();

    edge = await start({ config, persist: dir });
    try {
      const r = await (await edge.fetch("/admin/v1/stats", { headers: ADMIN })).json();
      assert.equal(r.scope, "global");
      assert.equal(r.policies["per-ip"].admitted, 3, "reported by the first runtime");
      assert.equal((await hit(edge, "/api/closed", { ip: "203.0.113.91" })).status, 200);
      const r2 = await (await edge.fetch("/admin/v1/stats", { headers: ADMIN })).json();
      assert.equal(r2.policies["per-ip"].admitted, 4);
    } finally {
      await edge.dispose();
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
