// Types of `tollgate/metrics` (Node): tollgate's counts as Prometheus text, and the core's names.
import type { BySource, ByReason, Counts, MetricsSource } from "./index.js";

export type { Counts, MetricsSource };

/**
 * The counts of `sources` as one Prometheus text exposition (format 0.0.4), written by the
 * core: `# HELP`/`# TYPE` once per instrument, every combination of attributes (zeros
 * included). Serve it at `/metrics` with `Content-Type: text/plain; version=0.0.4`.
 */
export function prometheus(sources: MetricsSource | MetricsSource[]): string;

/** The core's metric names, for exporters (the OpenTelemetry adapter `tollgate/otel` uses it). */
export interface MetricModel {
  /** Each instrument's OpenTelemetry name, unit (UCUM) and description. */
  instruments: Record<"decisions" | "nearLimit" | "storeFailures" | "waitDuration" | "concurrencyInUse", { name: string; unit: string; description: string }>;
  /** The attribute keys (`tollgate.policy`, ...). */
  attributes: Record<"policy" | "route" | "outcome" | "source" | "behaviour" | "reason" | "waitResult", string>;
  /** For each key of `Counts`' objects, the core's attribute value (`shadowDenied` -> `"shadow_denied"`). */
  values: {
    outcome: Record<"admitted" | "denied" | "shadowDenied", string>;
    source: Record<keyof BySource, string>;
    behaviour: Record<"open" | "closed" | "local", string>;
    reason: Record<keyof ByReason, string>;
    waitResult: Record<"admitted" | "gaveUp", string>;
  };
  /** The wait histogram's bucket bounds, in seconds. */
  waitBuckets: number[];
}

/** The core's metric names and attribute values. */
export function metricModel(): MetricModel;
