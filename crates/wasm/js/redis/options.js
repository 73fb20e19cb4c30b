// tollgate/redis: the limiter's options, checked (see ../redis.js and redis.d.ts).

import { optionError } from "./errors.js";
import { FleetLimits } from "./fleet.js";

/**
 * Test-only options (the Rust crate's `testing` feature): `options[TESTING] = { clock, blindCommit }`.
 * `clock()` returns the time in whole ms to decide at instead of Redis `TIME` (and turns the deny
 * cache off; with the module, it is sent as `NOW <ms>`, which needs the module loaded with
 * `TESTCLOCK`); `blindCommit` commits without comparing versions (a control run that must over-admit).
 */
export const TESTING = Symbol.for("tollgate.redis.testing");


function positive(options, field, fallback) {
  const v = options[field];
  if (v === undefined) return fallback;
  if (typeof v !== "number" || !Number.isFinite(v)) {
    throw optionError(TypeError, field, v, "not-a-number", "must be a number of milliseconds");
  }
  if (v <= 0) throw optionError(RangeError, field, v, "zero", "must be more than zero");
  return v;
}

function layoutPart(field, value) {
  if (typeof value !== "string") throw optionError(TypeError, field, value, "not-a-string", "must be a string");
  return value; // the brace rule is the core's (FleetLimits.keyHead)
}

/**
 * The options of a `RedisLimiter`, checked, with their defaults; `head` is what every key's
 * base starts with (the core's key layout), `localMaxKeys` the `local` fallback's size
 * (undefined without it).
 */
export function readOptions(options) {
  const namespace = layoutPart("namespace", options.namespace);
  const head = FleetLimits.keyHead(layoutPart("prefix", options.prefix ?? "tollgate"), namespace);
  const fallback = options.fallback;
  if (fallback !== "local" && fallback !== "open" && fallback !== "closed") {
    throw optionError(
      fallback === undefined ? TypeError : RangeError,
      "fallback",
      fallback,
      fallback === undefined ? "missing" : "unknown",
      "must be declared: 'local' (this process's memory), 'open' (admit) or 'closed' (deny)",
    );
  }
  const timeout = positive(options, "timeout", 250);
  const retryFor = positive(options, "retryFor", timeout);
  const probeEvery = positive(options, "probeEvery", 1000);
  const grace = options.grace === 0 ? 0 : positive(options, "grace", 1000);
  const lease = positive(options, "lease", 60_000);
  const denyCache = options.denyCache ?? true;
  if (typeof denyCache !== "boolean") {
    throw optionError(TypeError, "denyCache", options.denyCache, "not-a-boolean", "must be true or false");
  }
  const useModule = options.useModule ?? true;
  if (typeof useModule !== "boolean") {
    throw optionError(TypeError, "useModule", options.useModule, "not-a-boolean", "must be true or false");
  }
  const testing = options[TESTING];
  const clock = testing?.clock;
  const blind = testing?.blindCommit === true;
  if (clock !== undefined && typeof clock !== "function") {
    throw optionError(TypeError, "clock", clock, "not-a-function", "must return the time in ms");
  }
  if (fallback === "local" && options.maxKeys !== undefined && typeof options.maxKeys !== "number") {
    throw optionError(TypeError, "maxKeys", options.maxKeys, "not-a-number", "must be a whole number");
  }
  const localMaxKeys = fallback === "local" ? options.maxKeys ?? 100_000 : undefined;
  const name = options.name ?? "default";
  if (typeof name !== "string") throw optionError(TypeError, "name", name, "not-a-string", "must be a string");
  return { name, head, fallback, timeout, retryFor, probeEvery, grace, lease, denyCache, useModule, clock, blind, localMaxKeys };
}
