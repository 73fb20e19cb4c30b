// Issue 40 at the edge: a route reserves its cost, and settles it after the response, in
// the key's coordinator object, from the response's status or a cost header the origin sets
// (removed before the client sees it). Real Durable Objects under Miniflare, a real
// loopback origin.
import { test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { start, hit } from "./harness.mjs";
import { eventually } from "./origin.mjs";

/** An origin answering `/login/fail` 401, `/api/broken` 503, `/llm/<n>` 200 with
 * `x-tollgate-cost: n`, and anything else 200. */
async function costOrigin() {
  const server = http.createServer((req, res) => {
    const m = /^\/llm\/(\d+)/.exec(req.url);
    if (m) res.writeHead(200, { "content-type": "text/plain", "x-tollgate-cost": m[1] });
    else if (req.url.startsWith("/api/broken")) res.writeHead(503, { "content-type": "text/plain" });
    else res.writeHead(req.url.startsWith("/login/fail") ? 401 : 200, { "content-type": "text/plain" });
    res.end("origin");
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    close() {
      server.closeAllConnections?.();
      return new Promise((r) => server.close(r));
    },
  };
}

const config = {
  // test_clock: the 200-stream scenario passes `now` to the check API.
  settings: { deny_cache: false, stats_flush_ms: 3600000, test_clock: true },
  policies: {
    login: { limit: "fixed-window 3/h", key: "ip" },
    tokens: { limit: "fixed-window 1000/h", key: "ip" },
    api: { limit: "fixed-window 10/h", key: "ip" },
    // The 200-stream scenario's budget (through the check API).
    team: { limit: "fixed-window 10000/h", key: "ip" },
  },
  routes: [
    { path: "/login/", policies: ["login"], settle: { count_statuses: [401] } },
    { path: "/llm/", policies: ["tokens"], cost: 500, settle: { cost_header: "X-Tollgate-Cost" } },
    { path: "/api/", policies: ["api"], cost: 2, settle: { refund_statuses: [500, 503] } },
  ],
};

async function withEdge(f) {
  const origin = await costOrigin();
  const edge = await start({ config, bindings: { ORIGIN: origin.url } });
  try {
    await f(edge);
  } finally {
    await edge.dispose();
    await origin.close();
  }
}

/** The remaining budget of `policy` for client `ip` (an admin read: charges nothing). */
async function remaining(edge, policy, ip) {
  const r = await edge.admin("/admin/v1/keys/read", { policy, ip });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body.decision.remaining;
}

test("a login route counts only failed logins", async () => {
  await withEdge(async (edge) => {
    const ip = "198.51.100.7";
    // Six successful logins on a limit of 3: each is given back once answered.
    for (let i = 0; i < 6; i++) {
      assert.equal((await hit(edge, "/login/ok", { ip })).status, 200);
      assert.ok(await eventually(async () => (await remaining(edge, "login", ip)) === 3), `success ${i} given back`);
    }
    // Three failures spend the limit; the fourth attempt, failed or not, is refused.
    for (let i = 0; i < 3; i++) {
      assert.equal((await hit(edge, "/login/fail", { ip })).status, 401);
      assert.ok(await eventually(async () => (await remaining(edge, "login", ip)) === 2 - i), `failure ${i} counted`);
    }
    assert.equal((await hit(edge, "/login/fail", { ip })).status, 429);
    assert.equal((await hit(edge, "/login/ok", { ip })).status, 429);
  });
});

test("a cost header settles the real cost and the client never sees it", async () => {
  await withEdge(async (edge) => {
    const ip = "198.51.100.8";
    const r = await hit(edge, "/llm/120", { ip });
    assert.equal(r.status, 200);
    assert.equal(r.text, "origin");
    assert.equal(r.headers.get("x-tollgate-cost"), null, "the cost header is removed");
    // Reserved 500, cost 120: 380 come back.
    assert.ok(await eventually(async () => (await remaining(edge, "tokens", ip)) === 1000 - 120));
    // Reserved 500, cost 700: the overage is charged too.
    assert.equal((await hit(edge, "/llm/700", { ip })).status, 200);
    assert.ok(await eventually(async () => (await remaining(edge, "tokens", ip)) === 1000 - 120 - 700));
    // 180 left: an estimate of 500 no longer fits.
    assert.equal((await hit(edge, "/llm/1", { ip })).status, 429);
  });
});

test("a refunded status gives the request back; another status stays charged", async () => {
  await withEdge(async (edge) => {
    const ip = "198.51.100.9";
    assert.equal((await hit(edge, "/api/broken", { ip })).status, 503);
    assert.ok(await eventually(async () => (await remaining(edge, "api", ip)) === 10), "the 503 is given back");
    // A 200 is settled at its estimate: 2 stay charged.
    assert.equal((await hit(edge, "/api/fine", { ip })).status, 200);
    assert.ok(await eventually(async () => (await remaining(edge, "api", ip)) === 8));
  });
});

test("a check answered after the worker's timeout is settled to nothing", async (t) => {
  // As timeout.test.mjs, on a settling route: calls the isolate gave up on (503
  // coordinator-timeout) may have been decided and charged in the object; their
  // reservations are given back, so at rest exactly the admitted calls are charged.
  const origin = await costOrigin();
  const edge = await start({
    config: {
      settings: { timeout_ms: 30, deny_cache: false, stats_flush_ms: 3600000 },
      policies: { big: { limit: "fixed-window 100000/h", key: "ip" } },
      routes: [{ path: "/login/", policies: ["big"], settle: { refund_statuses: [500] } }],
    },
    bindings: { ORIGIN: origin.url },
  });
  try {
    let late = 0;
    for (let i = 0; i < 30 && late < 20; i++) {
      const ip = `203.0.113.${120 + i}`;
      const got = await Promise.all(Array.from({ length: 300 }, () => hit(edge, "/login/ok", { ip })));
      const ok = got.filter((r) => r.status === 200).length;
      const timedOut = got.filter((r) => r.status === 503).length;
      assert.equal(ok + timedOut, 300, "nothing denied");
      late += timedOut;
      const settled = await eventually(async () => (await remaining(edge, "big", ip)) === 100000 - ok, 30_000);
      const charged = 100000 - (await remaining(edge, "big", ip));
      t.diagnostic(`burst ${i}: ${ok} admitted, ${timedOut} timed out, ${charged} charged at rest`);
      assert.ok(settled, `exactly the ${ok} admitted calls are charged at rest (${charged})`);
    }
    assert.ok(late >= 20, `the bursts must time out (${late} did) for this test to say anything`);
  } finally {
    await edge.dispose();
    await origin.close();
  }
});

/** 200 streams (a fixed LCG): estimates 100-1,000 tokens, each using 30% to 100% of it. */
function streams() {
  let seed = 7n;
  const next = (n) => {
    seed = (seed * 6364136223846793005n + 1442695040888963407n) & 0xffffffffffffffffn;
    return Number((seed >> 33n) % BigInt(n));
  };
  return Array.from({ length: 200 }, () => {
    const estimate = 100 + next(901);
    return { estimate, actual: Math.round((estimate * (30 + next(71))) / 100) };
  });
}

test("200 concurrent streams reserve and settle on one budget of 10,000 exactly", async () => {
  await withEdge(async (edge) => {
    const at = { key: "team-1", policy: "team", now: 1_000 };
    const list = streams();
    // Every stream reserves at once: the object admits estimates while they fit.
    const reserved = await Promise.all(list.map((s) => edge.api("/v1/reserve", { ...at, cost: s.estimate })));
    for (const r of reserved) assert.equal(r.status, 200, JSON.stringify(r.body));
    const admitted = list.map((s, i) => ({ ...s, id: reserved[i].body.reservation })).filter((s) => s.id);
    assert.ok(admitted.length > 0 && admitted.length < list.length, `${admitted.length} admitted`);
    // The budget is never passed: what was admitted fits in it.
    assert.ok(admitted.reduce((n, s) => n + s.estimate, 0) <= 10_000);
    // Every one settles at once, every fifth twice (a client retry): charged once.
    const settles = admitted.flatMap((s, i) => {
      const body = { ...at, reservation: s.id, actual: s.actual };
      return i % 5 === 0 ? [body, body] : [body];
    });
    const settled = await Promise.all(settles.map((b) => edge.api("/v1/settle", b)));
    for (const r of settled) assert.equal(r.status, 200, JSON.stringify(r.body));
    // At rest the count is the admitted streams' actual costs, exactly.
    const used = admitted.reduce((n, s) => n + s.actual, 0);
    const peek = await edge.api("/v1/peek", at);
    assert.equal(peek.status, 200, JSON.stringify(peek.body));
    assert.equal(peek.body.remaining, 10_000 - used);
  });
});
