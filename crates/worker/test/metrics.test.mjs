// The per-policy stats in the core's metric model: GET /admin/v1/metrics serves them as
// Prometheus text (rendered by the core), bearer-protected, agreeing with the JSON stats;
// with the optional Analytics Engine binding the worker behaves the same. The gauge of
// concurrency slots in use, which the coordinator objects report, agrees in both forms and
// follows holds, releases and expired leases.
import { test } from "node:test";
import assert from "node:assert/strict";
import { start, hit, ADMIN_SECRET } from "./harness.mjs";
import { withOrigin, eventually } from "./origin.mjs";

const CONFIG = {
  settings: { stats_flush_ms: 3600000 },
  policies: { metered: { limit: "fixed-window 5/h", key: "ip" } },
  routes: [{ name: "metered-route", path: "/api/metered", policies: ["metered"] }],
};
const ADMIN = { authorization: `Bearer ${ADMIN_SECRET}` };

/**
 * Parses Prometheus text exposition format 0.0.4 strictly: every sample belongs to a
 * family declared by `# TYPE` before it, labels are `name="value"` with the format's
 * escapes, values are numbers. Returns the samples and the families' types.
 */
function parsePrometheus(text) {
  const types = new Map();
  const samples = [];
  const lines = text.split("\n");
  assert.equal(lines.pop(), "", "the text ends with a newline");
  for (const line of lines) {
    let m;
    if ((m = /^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .+$/.exec(line))) continue;
    if ((m = /^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)$/.exec(line))) {
      assert.ok(!types.has(m[1]), `family ${m[1]} declared twice`);
      types.set(m[1], m[2]);
      continue;
    }
    m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    assert.ok(m, `not a sample line: ${JSON.stringify(line)}`);
    const [, name, body = "", value] = m;
    const family = [...types.keys()].find((f) => name === f || /^_(bucket|sum|count)$/.test(name.slice(f.length)) && name.startsWith(f));
    assert.ok(family, `${name}: no # TYPE before it`);
    const labels = {};
    const re = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"(,|$)/y;
    let at = 0;
    while (at < body.length) {
      re.lastIndex = at;
      const l = re.exec(body);
      assert.ok(l, `bad labels in ${JSON.stringify(line)}`);
      labels[l[1]] = l[2].replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
      at = re.lastIndex;
    }
    const v = Number(value === "+Inf" ? Infinity : value);
    assert.ok(!Number.isNaN(v), `bad value in ${JSON.stringify(line)}`);
    samples.push({ name, labels, value: v });
  }
  return { types, samples };
}

/** The one sample named `name` whose labels are exactly `labels`. */
function sample({ samples }, name, labels) {
  const key = JSON.stringify(Object.entries(labels).sort());
  const found = samples.filter((s) => s.name === name && JSON.stringify(Object.entries(s.labels).sort()) === key);
  assert.equal(found.length, 1, `${name} ${key}: ${found.length} samples`);
  return found[0].value;
}

async function scrape(edge, headers = ADMIN) {
  const r = await edge.fetch("/admin/v1/metrics", { headers });
  return { status: r.status, type: r.headers.get("content-type"), text: await r.text() };
}

for (const analytics of [false, "simulator"]) {
  test(`N requests against a known policy, counted exactly in /admin/v1/metrics (analytics binding: ${analytics})`, async () => {
    const edge = await start({ config: CONFIG, analytics });
    try {
      const ip = "198.51.100.7";
      const statuses = [];
      for (let i = 0; i < 8; i++) statuses.push((await hit(edge, "/api/metered", { ip })).status);
      assert.deepEqual(statuses, [200, 200, 200, 200, 200, 429, 429, 429]);
      // The check API: no route; two admitted, counted under the policy alone.
      for (let i = 0; i < 2; i++) {
        const r = await edge.api("/v1/check", { key: "user-1", policy: "metered" });
        assert.equal(r.status, 200);
        assert.equal(r.body.allowed, true);
      }

      const noAuth = await scrape(edge, {});
      assert.equal(noAuth.status, 401);
      assert.doesNotMatch(noAuth.text, /tollgate_decisions_total/);
      assert.equal((await scrape(edge, { authorization: "Bearer check-secret-for-tests" })).status, 401);

      const r = await scrape(edge);
      assert.equal(r.status, 200);
      assert.match(r.type, /^text\/plain; version=0\.0\.4/);
      const m = parsePrometheus(r.text);
      assert.equal(m.types.get("tollgate_decisions_total"), "counter");
      assert.equal(m.types.get("tollgate_wait_duration_seconds"), "histogram");
      const route = { tollgate_policy: "metered", tollgate_route: "metered-route" };
      const d = (labels, outcome, source) =>
        sample(m, "tollgate_decisions_total", { ...labels, tollgate_outcome: outcome, tollgate_source: source });
      assert.equal(d(route, "admitted", "store"), 5);
      // The first denial is the object's; the next two come from the isolate's deny cache.
      assert.equal(d(route, "denied", "store"), 1);
      assert.equal(d(route, "denied", "deny_cache"), 2);
      assert.equal(d(route, "admitted", "fallback"), 0);
      // 5 admissions leave 4, 3, 2, 1, 0 of 5: only the last is under 20%.
      assert.equal(sample(m, "tollgate_near_limit_total", route), 1);
      const api = { tollgate_policy: "metered" };
      assert.equal(d(api, "admitted", "store"), 2);
      assert.equal(d(api, "denied", "store"), 0);
      const failures = m.samples.filter((s) => s.name === "tollgate_store_failures_total");
      assert.equal(failures.length, 2 * 9, "every behaviour and reason, for both series");
      assert.ok(failures.every((s) => s.value === 0));

      // The JSON stats are the same tallies: per policy, every route added up.
      const json = await edge.stats();
      assert.deepEqual(json.metered, { admitted: 7, denied: 1, degraded: 0, denyCache: 2, shadowDenied: 0 });

      // A second scrape counts nothing twice (this isolate reported and kept nothing back).
      const again = parsePrometheus((await scrape(edge)).text);
      assert.equal(
        sample(again, "tollgate_decisions_total", { ...route, tollgate_outcome: "admitted", tollgate_source: "store" }),
        5,
      );
    } finally {
      await edge.dispose();
    }
  });
}

test("with an Analytics Engine binding, one data point per decision: policy, route, outcome, source; decisions, near-limit", async () => {
  const edge = await start({ config: CONFIG, analytics: "recorder" });
  try {
    const ip = "198.51.100.9";
    const statuses = [];
    for (let i = 0; i < 7; i++) statuses.push((await hit(edge, "/api/metered", { ip })).status);
    assert.deepEqual(statuses, [200, 200, 200, 200, 200, 429, 429]);
    const r = await edge.api("/v1/check", { key: "user-2", policy: "metered" });
    assert.equal(r.status, 200);
    // Console lines reach the test asynchronously: wait until all 8 are in (or fail below).
    for (let i = 0; i < 250 && edge.dataPoints.length < 8; i++) await new Promise((r) => setTimeout(r, 20));
    const point = (blobs, doubles) => ({ indexes: ["metered"], blobs, doubles });
    const admitted = (near) => point(["metered", "metered-route", "admitted", "store"], [1, near]);
    assert.deepEqual(edge.dataPoints, [
      admitted(0),
      admitted(0),
      admitted(0),
      admitted(0),
      admitted(1),
      point(["metered", "metered-route", "denied", "store"], [1, 0]),
      point(["metered", "metered-route", "denied", "deny_cache"], [1, 0]),
      point(["metered", "", "admitted", "store"], [1, 0]),
    ]);
    // The metrics count the same decisions.
    const m = parsePrometheus((await scrape(edge)).text);
    const route = { tollgate_policy: "metered", tollgate_route: "metered-route" };
    assert.equal(sample(m, "tollgate_decisions_total", { ...route, tollgate_outcome: "admitted", tollgate_source: "store" }), 5);
  } finally {
    await edge.dispose();
  }
});

test("a failing coordinator: the fallback's decisions count as degraded; the metrics scrape fails (503) rather than under-count", async () => {
  const config = {
    policies: { metered: { limit: "fixed-window 5/h", key: "ip" } },
    routes: [
      { name: "open", path: "/api/open", policies: ["metered"], on_error: "open" },
      { name: "closed", path: "/api/closed", policies: ["metered"], on_error: "closed" },
    ],
  };
  const edge = await start({ config, withObject: false });
  try {
    assert.equal((await hit(edge, "/api/open", { ip: "198.51.100.8" })).status, 200);
    assert.equal((await hit(edge, "/api/closed", { ip: "198.51.100.8" })).status, 503);
    const r = await scrape(edge);
    assert.equal(r.status, 503);
    assert.equal(JSON.parse(r.text).error, "stats-unavailable");
    // The stats object is unreachable too: the JSON stats answer this isolate's counts.
    const s = await (await edge.fetch("/admin/v1/stats", { headers: ADMIN })).json();
    assert.equal(s.scope, "isolate");
    assert.deepEqual(s.policies.metered, { admitted: 0, denied: 0, degraded: 2, denyCache: 0, shadowDenied: 0 });
  } finally {
    await edge.dispose();
  }
});

// The gauge: slots a route's concurrency limit holds, reported by the objects (batched, about
// a second after a change), read in both forms. Asynchronous: polled with a bounded wait.
const HELD = (settings = {}) => ({
  settings: { stats_flush_ms: 3600000, ...settings },
  policies: { conc: { limit: "concurrency 3", key: "ip" } },
  routes: [{ name: "held", path: "/hold", policies: ["conc"] }],
});
const HELD_SERIES = { tollgate_policy: "conc", tollgate_route: "held" };

/** The gauge as the JSON stats and the Prometheus text give it (`undefined`: absent). */
async function inUse(edge) {
  const json = (await edge.stats()).conc?.concurrencyInUse;
  const r = await scrape(edge);
  assert.equal(r.status, 200);
  const m = parsePrometheus(r.text);
  const found = m.samples.filter((s) => s.name === "tollgate_concurrency_in_use");
  if (found.length) assert.equal(m.types.get("tollgate_concurrency_in_use"), "gauge");
  found.forEach((s) => assert.deepEqual(s.labels, HELD_SERIES, "one series: the route's"));
  return { json, prometheus: found[0]?.value };
}

/** Polls until both forms read `n` (bounded); fails naming what they read last. */
async function gaugeReaches(edge, n) {
  let last;
  const ok = await eventually(async () => {
    last = await inUse(edge);
    return last.json === n && last.prometheus === n;
  }, 15_000);
  assert.ok(ok, `tollgate_concurrency_in_use should reach ${n} in JSON and Prometheus alike; read ${JSON.stringify(last)}`);
}

const withHeld = (settings, f) => withOrigin({ config: HELD(settings) }, f);

test("concurrency in use: N held requests read N in JSON and Prometheus alike, and 0 once released", async () => {
  await withHeld({}, async (edge, origin) => {
    // Unauthenticated reads are refused, the gauge with the rest.
    for (const headers of [{}, { authorization: "Bearer check-secret-for-tests" }]) {
      const r = await scrape(edge, headers);
      assert.equal(r.status, 401);
      assert.doesNotMatch(r.text, /tollgate_concurrency_in_use/);
      assert.equal((await edge.fetch("/admin/v1/stats", { headers })).status, 401);
    }
    // Two clients (two slots, maybe two objects): 2 + 1 held.
    const held = [
      hit(edge, "/hold/a", { ip: "198.51.100.20" }),
      hit(edge, "/hold/b", { ip: "198.51.100.20" }),
      hit(edge, "/hold/c", { ip: "198.51.100.21" }),
    ];
    await origin.arrived(3);
    await gaugeReaches(edge, 3);
    origin.release();
    assert.deepEqual((await Promise.all(held)).map((r) => r.status), [200, 200, 200]);
    await gaugeReaches(edge, 0);
  });
});

test("concurrency in use: leases that expire while their requests still run are freed by the sweep, back to 0", async () => {
  // The shortest lease (1 s): the objects' alarm frees the leases no call names again, and
  // reports the gauge at 0 (present, not absent) while the origin still holds both requests.
  await withHeld({ lease_ms: 1000 }, async (edge, origin) => {
    const held = [hit(edge, "/hold/a", { ip: "198.51.100.22" }), hit(edge, "/hold/b", { ip: "198.51.100.23" })];
    await origin.arrived(2);
    await gaugeReaches(edge, 0);
    assert.equal(origin.seen.length, 2, "nothing else reached the origin");
    origin.release();
    assert.deepEqual((await Promise.all(held)).map((r) => r.status), [200, 200]);
    // Their late releases free nothing more: still 0, never below.
    await new Promise((r) => setTimeout(r, 1500));
    assert.deepEqual(await inUse(edge), { json: 0, prometheus: 0 });
  });
});
