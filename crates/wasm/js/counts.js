// The counts of tollgate's limiters as plain objects, and back, around the core's metric model
// (tollgate::metrics, through wasm: crates/wasm/src/metrics.rs). The core counts every decision
// where it is made (outcome, source, near the limit, failures, waits) and names everything;
// this file only lays its numbers out as objects (`limiter.metrics()`), hands them back to the
// core's Prometheus `render`, and gives the OpenTelemetry adapter the core's names. Shared by
// `tollgate` (api.js), `tollgate/redis` (redis.js) and `tollgate/metrics` (metrics.js).

/** The objects' keys, in the order of the core's numbers (`Outcome::ALL`, `Source::ALL`, ...). */
const OUTCOMES = ["admitted", "denied", "shadowDenied"];
const SOURCES = ["store", "denyCache", "fallback"];
const BEHAVIOURS = ["open", "closed", "local"];
const REASONS = ["unreachable", "timeout", "indeterminate"];
const WAITS = ["admitted", "gaveUp"];
const ATTRIBUTES = ["policy", "route", "outcome", "source", "behaviour", "reason", "waitResult"];
const INSTRUMENTS = ["decisions", "nearLimit", "storeFailures", "waitDuration", "concurrencyInUse"];

/** Wait histogram buckets: the core's 12 bounds, then one above them. */
const BUCKETS = 13;
/** Numbers per tally (the core's COUNTS_LEN). */
const COUNTS_LEN = 9 + 1 + 9 + 2 * (BUCKETS + 1);

/**
 * A source's wait listeners: `source[WAIT_LISTENERS]` is a Set of functions called with
 * `(result, seconds, route)` (`result`: "admitted" or "gaveUp") when an `acquire` ends, for
 * the OpenTelemetry adapter's histogram (OpenTelemetry has no observable histogram).
 */
export const WAIT_LISTENERS = Symbol.for("tollgate.metrics.waitListeners");

/** Tells `source`'s wait listeners that an `acquire` ended. */
export function notifyWait(listeners, admitted, ms, route) {
  if (listeners.size === 0) return;
  for (const f of listeners) f(admitted ? "admitted" : "gaveUp", Math.max(0, ms) / 1000, route);
}

/** Index of a decision's `source` ("redis" or "store", "deny-cache", "fallback") in the core's `Source::ALL`. */
export function sourceIndex(source) {
  return source === "deny-cache" ? 1 : source === "fallback" ? 2 : 0;
}

/** Index of a declared fallback in the core's `Behaviour::ALL`, and of a failure's reason in `REASONS`. */
export const behaviourIndex = (fallback) => BEHAVIOURS.indexOf(fallback);
export const reasonIndex = (why) => REASONS.indexOf(why);

/** `{ a, b, c }` from three numbers at `at`. */
function three(keys, n, at) {
  return { [keys[0]]: n[at], [keys[1]]: n[at + 1], [keys[2]]: n[at + 2] };
}

/** One series' counts (`policy`, `route` or undefined, the core's numbers, concurrency in use or undefined) as the object `metrics()` returns. */
export function countsObject(policy, route, n, concurrencyInUse) {
  const out = { policy };
  if (route !== undefined) out.route = route;
  out.decisions = {};
  OUTCOMES.forEach((o, i) => (out.decisions[o] = three(SOURCES, n, 3 * i)));
  out.nearLimit = n[9];
  out.storeFailures = {};
  BEHAVIOURS.forEach((b, i) => (out.storeFailures[b] = three(REASONS, n, 10 + 3 * i)));
  out.wait = {};
  WAITS.forEach((w, i) => {
    const at = 19 + i * (BUCKETS + 1);
    const buckets = Array.from(n.slice(at, at + BUCKETS));
    out.wait[w] = { count: buckets.reduce((a, b) => a + b, 0), sum: n[at + BUCKETS] / 1e9, buckets };
  });
  if (concurrencyInUse !== undefined) out.concurrencyInUse = concurrencyInUse;
  return out;
}

/** The core's numbers of a counts object (the inverse of `countsObject`). */
function numbersOf(c) {
  const n = new Float64Array(COUNTS_LEN);
  OUTCOMES.forEach((o, i) => SOURCES.forEach((s, j) => (n[3 * i + j] = c.decisions[o][s])));
  n[9] = c.nearLimit;
  BEHAVIOURS.forEach((b, i) => REASONS.forEach((r, j) => (n[10 + 3 * i + j] = c.storeFailures[b][r])));
  WAITS.forEach((w, i) => {
    const at = 19 + i * (BUCKETS + 1);
    n.set(c.wait[w].buckets, at);
    n[at + BUCKETS] = Math.round(c.wait[w].sum * 1e9);
  });
  return n;
}

/** The counts objects of `sources`: limiters (anything with `metrics()`), their `metrics()` arrays or counts objects. */
export function seriesOf(sources) {
  const list = Array.isArray(sources) ? sources : [sources];
  const out = [];
  for (const s of list) {
    if (s !== null && typeof s === "object" && typeof s.metrics === "function") out.push(...s.metrics());
    else if (Array.isArray(s)) out.push(...s);
    else if (s !== null && typeof s === "object" && typeof s.policy === "string" && s.decisions !== undefined) out.push(s);
    else {
      const e = new TypeError("invalid option: sources: pass limiters (with metrics()) or their metrics() [not-a-source]");
      e.field = "sources";
      e.rule = "not-a-source";
      throw e;
    }
  }
  return out;
}

/** Prometheus text of `sources` (see `seriesOf`) by the core's `render` (`renderMetrics` of either wasm instance). */
export function prometheusText(renderMetrics, sources) {
  const series = seriesOf(sources);
  const counts = new Float64Array(series.length * COUNTS_LEN);
  const inUse = new Float64Array(series.length);
  series.forEach((c, i) => {
    counts.set(numbersOf(c), i * COUNTS_LEN);
    inUse[i] = c.concurrencyInUse ?? NaN;
  });
  return renderMetrics(
    series.map((c) => c.policy),
    series.map((c) => c.route ?? ""),
    counts,
    inUse,
  );
}

/**
 * The core's names (`metricModel` and `waitBuckets` of the wasm): `instruments` (decisions,
 * nearLimit, storeFailures, waitDuration, concurrencyInUse: `{ name, unit, description }`),
 * `attributes` (policy, route, outcome, source, behaviour, reason, waitResult: the keys),
 * `values` (for each object key of `metrics()`, the core's attribute value: `values.outcome
 * .shadowDenied` is "shadow_denied") and `waitBuckets` (the bucket bounds in seconds).
 */
export function metricModel(glue) {
  const names = glue.metricModel();
  let at = 0;
  const instruments = {};
  for (const i of INSTRUMENTS) {
    instruments[i] = { name: names[at], unit: names[at + 1], description: names[at + 2] };
    at += 3;
  }
  const attributes = {};
  for (const a of ATTRIBUTES) attributes[a] = names[at++];
  const values = {};
  for (const [kind, keys] of [["outcome", OUTCOMES], ["source", SOURCES], ["behaviour", BEHAVIOURS], ["reason", REASONS], ["waitResult", WAITS]]) {
    values[kind] = {};
    for (const k of keys) values[kind][k] = names[at++];
  }
  return { instruments, attributes, values, waitBuckets: Array.from(glue.waitBuckets()) };
}
