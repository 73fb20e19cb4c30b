// Issue 16, item 1: a concurrency limit on a route holds a slot while the origin works and
// frees it when the origin answers, fails, or the client goes away (a release the object
// applies once), and a release that is lost anyway is freed by the lease.
import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { start, hit } from "./harness.mjs";
import { startOrigin, withOrigin, eventually } from "./origin.mjs";

const config = (settings = {}) => ({
  settings: { stats_flush_ms: 3600000, ...settings },
  policies: { conc: { limit: "concurrency 2", key: "ip" } },
  routes: [{ name: "conc", path: "/", policies: ["conc"] }],
});

/** In flight on `ip`'s slot, as the object holds it. */
async function inFlight(edge, ip) {
  const r = await edge.admin("/admin/v1/keys/read", { policy: "conc", ip });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body.decision.limit - r.body.decision.remaining;
}

test("sequential requests never lock a client out (the issue's reproduction)", async () => {
  await withOrigin({ config: config() }, async (edge) => {
    const ip = "203.0.113.60";
    const got = [];
    for (let i = 0; i < 8; i++) got.push((await hit(edge, "/api/conc/x", { ip })).status);
    assert.deepEqual(got, Array(8).fill(200));
    assert.ok(await eventually(async () => (await inFlight(edge, ip)) === 0), "nothing held once all answered");
  });
});

test("a slow origin holds the slots; they free when it answers", async () => {
  await withOrigin({ config: config() }, async (edge, origin) => {
    const ip = "203.0.113.61";
    const a = hit(edge, "/hold/a", { ip });
    const b = hit(edge, "/hold/b", { ip });
    await origin.arrived(2);
    assert.equal(await inFlight(edge, ip), 2);
    const third = await hit(edge, "/api/x", { ip });
    assert.equal(third.status, 429, "two in flight: the third waits");
    origin.release();
    assert.deepEqual([(await a).status, (await b).status], [200, 200]);
    assert.ok(await eventually(async () => (await inFlight(edge, ip)) === 0));
    assert.equal((await hit(edge, "/api/x", { ip })).status, 200);
  });
});

test("a failing origin releases its slot", async () => {
  await withOrigin({ config: config() }, async (edge) => {
    const ip = "203.0.113.62";
    for (let i = 0; i < 4; i++) {
      const r = await hit(edge, "/fail/x", { ip });
      assert.notEqual(r.status, 200);
      assert.notEqual(r.status, 429, `attempt ${i}: the failed calls released their slots`);
    }
    assert.ok(await eventually(async () => (await inFlight(edge, ip)) === 0));
  });
});

test("a client that goes away releases its slot once the origin answers", async () => {
  await withOrigin({ config: config() }, async (edge, origin) => {
    const ip = "203.0.113.63";
    const gone = [new AbortController(), new AbortController()];
    const calls = gone.map((c, i) =>
      edge.fetch(`/hold/${i}`, { headers: { "cf-connecting-ip": ip }, signal: c.signal }).catch((e) => e));
    await origin.arrived(2);
    for (const c of gone) c.abort();
    await Promise.all(calls);
    origin.release();
    // The lease is 60 s: freeing the slots well before says the release itself ran.
    assert.ok(await eventually(async () => (await inFlight(edge, ip)) === 0, 15_000), "both released");
    assert.equal((await hit(edge, "/api/x", { ip })).status, 200);
  });
});

test("a lost release (the runtime died mid-request) is freed when the lease expires", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tollgate-lease-"));
  const origin = await startOrigin();
  const ip = "203.0.113.64";
  try {
    const opts = { config: config({ lease_ms: 2000 }), persist: dir, bindings: { ORIGIN: origin.url } };
    let edge = await start(opts);
    const held = [hit(edge, "/hold/a", { ip }).catch((e) => e), hit(edge, "/hold/b", { ip }).catch((e) => e)];
    await origin.arrived(2);
    await edge.dispose(); // no release can be sent now
    await Promise.all(held);
    edge = await start(opts);
    try {
      // The stored leases survived the restart, then expire.
      assert.ok(await eventually(async () => (await hit(edge, "/api/x", { ip })).status === 200, 15_000),
        "admitted again once the leases expired");
      assert.ok(await eventually(async () => (await inFlight(edge, ip)) === 0));
    } finally {
      await edge.dispose();
    }
  } finally {
    origin.release();
    await origin.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
