// tollgate/otel: tollgate's counts as OpenTelemetry metrics. The names, units, descriptions,
// attribute keys and values and the wait buckets are the core's (tollgate::metrics, through
// `metricModel()` of tollgate/metrics); the counts are the limiters' own (`metrics()`), read when the SDK
// collects. `@opentelemetry/api` is an optional peer dependency: without a registered SDK
// its global meter is a no-op, and so is this.
import { metrics } from "@opentelemetry/api";
import { metricModel } from "./metrics.js";
import { WAIT_LISTENERS, seriesOf } from "./web/counts.js";

/**
 * Registers observable instruments for the counts of `sources` (limiters of `tollgate` or
 * `tollgate/redis`) on `options.meter` (default: the global meter provider's meter
 * `"tollgate"`): `tollgate.decisions`, `tollgate.near_limit`, `tollgate.store.failures`
 * (observable counters), `tollgate.concurrency.in_use` (an observable up-down counter, when
 * a source reports it), and `tollgate.wait.duration` (a histogram with the core's bucket
 * bounds, recorded as each `acquire` ends, from registration on). Returns `{ unregister() }`.
 */
export function registerMetrics(sources, options) {
  const list = Array.isArray(sources) ? sources : [sources];
  seriesOf(list); // checks the sources now rather than at the first collection
  const meter = options?.meter ?? metrics.getMeter("tollgate");
  const { instruments: i, attributes: a, values: v, waitBuckets } = metricModel();
  const counter = (m) => meter.createObservableCounter(m.name, { unit: m.unit, description: m.description });
  const decisions = counter(i.decisions);
  const nearLimit = counter(i.nearLimit);
  const failures = counter(i.storeFailures);
  const inUse = meter.createObservableUpDownCounter(i.concurrencyInUse.name, {
    unit: i.concurrencyInUse.unit,
    description: i.concurrencyInUse.description,
  });
  const waits = meter.createHistogram(i.waitDuration.name, {
    unit: i.waitDuration.unit,
    description: i.waitDuration.description,
    advice: { explicitBucketBoundaries: waitBuckets },
  });

  /** The series' own attributes: policy, and route when it has one. */
  const base = (c) => (c.route === undefined ? { [a.policy]: c.policy } : { [a.policy]: c.policy, [a.route]: c.route });

  const observe = (result) => {
    for (const c of seriesOf(list)) {
      const at = base(c);
      for (const [outcome, bySource] of Object.entries(c.decisions)) {
        for (const [source, n] of Object.entries(bySource)) {
          result.observe(decisions, n, { ...at, [a.outcome]: v.outcome[outcome], [a.source]: v.source[source] });
        }
      }
      result.observe(nearLimit, c.nearLimit, at);
      for (const [behaviour, byReason] of Object.entries(c.storeFailures)) {
        for (const [reason, n] of Object.entries(byReason)) {
          result.observe(failures, n, { ...at, [a.behaviour]: v.behaviour[behaviour], [a.reason]: v.reason[reason] });
        }
      }
      if (c.concurrencyInUse !== undefined) result.observe(inUse, c.concurrencyInUse, at);
    }
  };
  meter.addBatchObservableCallback(observe, [decisions, nearLimit, failures, inUse]);

  const listeners = [];
  for (const source of list) {
    const set = source?.[WAIT_LISTENERS];
    if (!(set instanceof Set)) continue;
    const policy = source.metrics()[0]?.policy;
    const listener = (result, seconds, route) => {
      const at = base({ policy, route });
      waits.record(seconds, { ...at, [a.waitResult]: v.waitResult[result] });
    };
    set.add(listener);
    listeners.push([set, listener]);
  }

  return {
    /** Stops reporting: the observations and the wait histogram's recordings. */
    unregister() {
      meter.removeBatchObservableCallback(observe, [decisions, nearLimit, failures, inUse]);
      for (const [set, listener] of listeners) set.delete(listener);
    },
  };
}
