// tollgate/otel with the real OpenTelemetry SDK (@opentelemetry/sdk-metrics) and its
// in-memory exporter: after a scripted run against known policies, the collected data points
// equal the decisions made, under the core's names and attributes.
import { test } from "node:test";
import assert from "node:assert/strict";
import { metrics } from "@opentelemetry/api";
import {
  AggregationTemporality,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from "@opentelemetry/sdk-metrics";
import { Limiter } from "tollgate";
import { registerMetrics } from "tollgate/otel";

const TIMERS = Symbol.for("tollgate.testing.timers");

/** A meter provider whose reader exports to memory only when flushed. */
function sdk() {
  const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
  const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 3_600_000 });
  const provider = new MeterProvider({ readers: [reader] });
  return {
    meter: provider.getMeter("tollgate-test"),
    /** Collects now: name -> data points. */
    async collect() {
      await reader.forceFlush();
      const all = exporter.getMetrics();
      const last = all[all.length - 1];
      const out = new Map();
      for (const scope of last.scopeMetrics) for (const m of scope.metrics) out.set(m.descriptor.name, m);
      return out;
    },
    shutdown: () => provider.shutdown(),
  };
}

/** The value of the data point with exactly these attributes. */
function value(metric, attributes) {
  const points = metric.dataPoints.filter((p) => JSON.stringify(sorted(p.attributes)) === JSON.stringify(sorted(attributes)));
  assert.equal(points.length, 1, `one point for ${JSON.stringify(attributes)} in ${metric.descriptor.name}`);
  return points[0].value;
}
const sorted = (o) => Object.fromEntries(Object.entries(o).sort(([a], [b]) => (a < b ? -1 : 1)));

test("data points equal the decisions of a scripted run: decisions, near limit, failures, waits", async () => {
  const { meter, collect, shutdown } = sdk();
  const api = new Limiter("fixed-window 5/s", { name: "api" });
  const slow = new Limiter("fixed-window 1/s", { name: "slow" });
  const registration = registerMetrics([api, slow], { meter });
  try {
    for (let i = 0; i < 7; i++) api.check("k", { now: 1_000 });
    for (let i = 0; i < 2; i++) api.check("k", { now: 1_000, route: "/upload" });
    // Two waits on a clock the test moves: at once, then 1000 ms for the next window.
    let now = 0;
    const opts = { [TIMERS]: { clock: () => now, sleep: async (ms) => void (now += ms) } };
    await slow.acquire("w", opts);
    await slow.acquire("w", opts);

    const m = await collect();
    const d = m.get("tollgate.decisions");
    assert.equal(d.descriptor.unit, "{decision}");
    const at = (policy, outcome, source, route) => ({
      "tollgate.policy": policy,
      ...(route === undefined ? {} : { "tollgate.route": route }),
      "tollgate.outcome": outcome,
      "tollgate.source": source,
    });
    assert.equal(value(d, at("api", "admitted", "store")), 5);
    assert.equal(value(d, at("api", "denied", "store")), 2);
    assert.equal(value(d, at("api", "denied", "store", "/upload")), 2);
    assert.equal(value(d, at("api", "shadow_denied", "fallback")), 0);
    assert.equal(value(d, at("slow", "admitted", "store")), 2);
    // 3 policies' series (api, api on /upload, slow) x 3 outcomes x 3 sources.
    assert.equal(d.dataPoints.length, 27);
    const near = m.get("tollgate.near_limit");
    assert.equal(value(near, { "tollgate.policy": "api" }), 1, "only the 5th admission left under 20%");
    assert.equal(value(near, { "tollgate.policy": "slow" }), 2);
    const failures = m.get("tollgate.store.failures");
    assert.equal(
      value(failures, { "tollgate.policy": "api", "tollgate.failure.behaviour": "open", "tollgate.failure.reason": "unreachable" }),
      0,
    );
    const waits = m.get("tollgate.wait.duration");
    assert.equal(waits.descriptor.unit, "s");
    const [h] = waits.dataPoints;
    assert.equal(waits.dataPoints.length, 1);
    assert.deepEqual(h.attributes, { "tollgate.policy": "slow", "tollgate.wait.result": "admitted" });
    assert.deepEqual(h.value.buckets.boundaries, [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60]);
    assert.deepEqual(h.value.buckets.counts, [1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0]);
    assert.equal(h.value.count, 2);
    assert.equal(h.value.sum, 1);

    // Counters are cumulative: more decisions, higher values at the next collection.
    api.check("k", { now: 1_000 });
    assert.equal(value((await collect()).get("tollgate.decisions"), at("api", "denied", "store")), 3);
  } finally {
    registration.unregister();
    await shutdown();
  }
});

test("without an SDK the global meter is a no-op: registering works and reports nothing", async () => {
  const l = new Limiter("1/s");
  const registration = registerMetrics(l);
  l.check("k");
  await l.acquire("j");
  registration.unregister();
  assert.equal(metrics.getMeterProvider().constructor.name, "NoopMeterProvider");
  assert.throws(() => registerMetrics([{}]), (e) => e instanceof TypeError && e.field === "sources");
});
