// Types of `tollgate/otel`: tollgate's counts as OpenTelemetry metrics.
import type { Meter } from "@opentelemetry/api";
import type { MetricsSource } from "./index.js";

/** Options of {@link registerMetrics}. */
export interface RegisterMetricsOptions {
  /** The meter to register on (default: the global meter provider's meter `"tollgate"`; a no-op without an SDK). */
  meter?: Meter;
}

/** What {@link registerMetrics} returns. */
export interface MetricsRegistration {
  /** Stops reporting: the observations and the wait histogram's recordings. */
  unregister(): void;
}

/**
 * Registers OpenTelemetry instruments, under the core's names and attributes, for the counts
 * of `sources` (limiters of `tollgate` or `tollgate/redis`, or their `metrics()`):
 * `tollgate.decisions` (`tollgate.policy`, `tollgate.route`, `tollgate.outcome`,
 * `tollgate.source`), `tollgate.near_limit`, `tollgate.store.failures`
 * (`tollgate.failure.behaviour`, `tollgate.failure.reason`) as observable counters read at
 * each collection; `tollgate.wait.duration` (s, `tollgate.wait.result`) as a histogram with
 * the core's bucket bounds, recorded as each `acquire` ends from registration on.
 */
export function registerMetrics(sources: MetricsSource | MetricsSource[], options?: RegisterMetricsOptions): MetricsRegistration;
