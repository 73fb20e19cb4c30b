// tollgate/metrics (Node): the counts of tollgate's limiters (`metrics()` of `tollgate` and
// `tollgate/redis`) as Prometheus text, and the core's metric names for exporters, both from
// the core (tollgate::metrics) through the Node build's wasm with the `metrics-text` feature
// (pkg/redis/, shared with tollgate/redis; the main .wasm leaves rendering out to stay small).

import glue from "./redis/tollgate_wasm.cjs";
import { metricModel as modelOf, prometheusText } from "./web/counts.js";

/**
 * The counts of `sources` (limiters of `tollgate` or `tollgate/redis`, their `metrics()`, or
 * counts objects) as one Prometheus text exposition (format 0.0.4), written by the core.
 */
export function prometheus(sources) {
  return prometheusText(glue.renderMetrics, sources);
}

/** The core's metric names and attribute values, for exporters (see metrics.d.ts). */
export function metricModel() {
  return modelOf(glue);
}
