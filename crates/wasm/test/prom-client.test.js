// The prom-client example (examples/prom-client.js): a real Express app, scraped over HTTP,
// its exposition read by a small strict parser; tollgate's counters equal the requests made.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createApp } from "../examples/prom-client.js";

/**
 * Parses Prometheus text format 0.0.4 strictly: every sample belongs to a family declared
 * once by `# TYPE` before it, labels are `name="escaped value"`, values are numbers.
 * Returns `sample line key (name{labels} as written) -> value`, and the families' types.
 */
function parse(text) {
  const types = new Map();
  const samples = new Map();
  const suffixes = { counter: ["_total", ""], histogram: ["_bucket", "_sum", "_count"], gauge: [""], summary: ["", "_sum", "_count"] };
  for (const line of text.split("\n")) {
    if (line === "") continue;
    let m = /^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)$/.exec(line);
    if (m) {
      assert.ok(!types.has(m[1]), `# TYPE ${m[1]} twice`);
      types.set(m[1], m[2]);
      continue;
    }
    if (/^# HELP [a-zA-Z_:][a-zA-Z0-9_:]* /.test(line)) continue;
    m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"(?:,(?!\}))?)*\})? (-?[0-9.e+-]+|\+Inf|NaN)$/.exec(line);
    assert.ok(m, `not a sample line: ${line}`);
    const family = [...types.keys()].find((f) => (suffixes[types.get(f)] ?? [""]).some((s) => m[1] === f + s));
    assert.ok(family !== undefined, `sample before its # TYPE: ${line}`);
    const key = m[1] + (m[2] ?? "");
    assert.ok(!samples.has(key), `sample twice: ${key}`);
    samples.set(key, Number(m[3]));
  }
  return { types, samples };
}

test("GET /metrics: prom-client's registry and tollgate's counts in one strict exposition", async () => {
  const { app } = createApp();
  const server = await new Promise((r) => {
    const s = app.listen(0, "127.0.0.1", () => r(s));
  });
  const base = `http://127.0.0.1:${server.address().port}`;
  try {
    const statuses = [];
    for (let i = 0; i < 5; i++) statuses.push((await fetch(`${base}/api`)).status);
    for (let i = 0; i < 3; i++) statuses.push((await fetch(`${base}/login`, { method: "POST" })).status);
    assert.deepEqual(statuses, [200, 200, 200, 429, 429, 200, 429, 429]);

    const res = await fetch(`${base}/metrics`);
    assert.equal(res.status, 200);
    assert.match(res.headers.get("content-type"), /^text\/plain; version=0\.0\.4/);
    const { types, samples } = parse(await res.text());
    assert.equal(types.get("tollgate_decisions_total"), "counter");
    assert.equal(types.get("tollgate_wait_duration_seconds"), "histogram");
    assert.equal(types.get("process_cpu_user_seconds_total"), "counter", "prom-client's own metrics are there");
    const d = (policy, route, outcome, source = "store") =>
      samples.get(`tollgate_decisions_total{tollgate_policy="${policy}",tollgate_route="${route}",tollgate_outcome="${outcome}",tollgate_source="${source}"}`);
    assert.equal(d("per-ip", "/api", "admitted"), 3);
    assert.equal(d("per-ip", "/api", "denied"), 2);
    assert.equal(d("per-ip", "/api", "denied", "fallback"), 0);
    assert.equal(d("login", "/login", "admitted"), 1);
    assert.equal(d("login", "/login", "denied"), 2);
    assert.equal(samples.get('tollgate_decisions_total{tollgate_policy="login",tollgate_outcome="admitted",tollgate_source="store"}'), 0);
    assert.equal(samples.get('tollgate_near_limit_total{tollgate_policy="per-ip",tollgate_route="/api"}'), 1);
    assert.equal(samples.get('tollgate_near_limit_total{tollgate_policy="login",tollgate_route="/login"}'), 1);
  } finally {
    await new Promise((r) => server.close(r));
  }
});
