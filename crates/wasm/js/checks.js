// The checks of the arguments and options of `tollgate`'s API (the Limiter, `headers`,
// `decide`, `throttle`, `acquire`): each names the field and the rule it breaks. The policy's
// own rules (limits, windows, maxKeys' range) are the core's.

/** The `maxKeys` of a limiter that names none. */
export const DEFAULT_MAX_KEYS = 100_000;

/** Builds an option error that names the field and the rule broken. */
export function optionError(Kind, field, value, rule, explanation) {
  const e = new Kind(`invalid option: ${field} ${JSON.stringify(String(value))}: ${explanation} [${rule}]`);
  e.field = field;
  e.rule = rule;
  e.value = value;
  return e;
}

/** Throws unless `key` is a string. */
export function checkKey(key) {
  if (typeof key !== "string") {
    throw optionError(TypeError, "key", key, "not-a-string", "must be a string");
  }
}

/** The `now` option: a finite number of ms, 0 or more. */
export function checkNow(now) {
  if (typeof now !== "number" || !Number.isFinite(now)) {
    throw optionError(TypeError, "now", now, "not-a-number", "must be a finite number of milliseconds");
  }
  if (now < 0) throw optionError(RangeError, "now", now, "negative", "must be 0 or more");
  return now;
}

/** A policy's name for the headers: a string. */
export function checkName(name) {
  if (typeof name !== "string") {
    throw optionError(TypeError, "policyName", name, "not-a-string", "must be a string");
  }
  return name;
}

/** The `cost` option: a whole number from 0 to 2^53 - 1. */
export function checkCost(cost) {
  if (typeof cost !== "number" || !Number.isInteger(cost)) {
    throw optionError(TypeError, "cost", cost, "not-a-number", "must be a whole number");
  }
  if (cost < 0) throw optionError(RangeError, "cost", cost, "negative", "must be 0 or more");
  if (cost > Number.MAX_SAFE_INTEGER) {
    throw optionError(RangeError, "cost", cost, "too-large", "must be at most 9007199254740991");
  }
  return cost;
}

/**
 * A count given as `field` (a reservation's `estimate`, a settle's `actual`): a whole number
 * from 0 to 2^53 - 1 (NaN, fractions and Infinity are not whole numbers). The core's own
 * bound on an actual cost (2^40) is the core's to check.
 */
export function checkCount(field, value) {
  if (typeof value !== "number" || !Number.isInteger(value)) {
    throw optionError(TypeError, field, value, "not-a-number", "must be a whole number");
  }
  if (value < 0) throw optionError(RangeError, field, value, "negative", "must be 0 or more");
  if (value > Number.MAX_SAFE_INTEGER) {
    throw optionError(RangeError, field, value, "too-large", "must be at most 9007199254740991");
  }
  return value;
}

/** A settle's `overage` option: `"debt"` (the default) or `"up-to-limit"`; whether the latter. */
export function upToLimit(overage) {
  if (overage === undefined || overage === "debt") return false;
  if (overage === "up-to-limit") return true;
  throw optionError(TypeError, "overage", overage, "unknown-overage", 'must be "debt" or "up-to-limit"');
}

/** Throws unless `r` looks like a Reservation from `reserve()`. */
export function checkReservation(r) {
  const ok =
    r !== null &&
    typeof r === "object" &&
    typeof r.key === "string" &&
    Number.isInteger(r.estimate) &&
    ["id", "limiter", "policies", "keyHash", "at"].every((f) => typeof r[f] === "string" && /^[0-9]{1,20}$/.test(r[f]));
  if (!ok) {
    throw optionError(TypeError, "reservation", r, "not-a-reservation", "must be a reservation from reserve()");
  }
}

/** The `name` option: the policy's name in the limiter's counts (default "default"). */
export function nameOf(options) {
  const name = options?.name ?? "default";
  if (typeof name !== "string") throw optionError(TypeError, "name", name, "not-a-string", "must be a string");
  return name;
}

/** The `route` option of a check: a string, or undefined for none. */
export function checkRoute(route) {
  if (typeof route !== "string" || route === "") {
    throw optionError(TypeError, "route", route, "not-a-string", "must be a non-empty string");
  }
  return route;
}

/** The `maxReservations` of a limiter that names none. */
export const DEFAULT_MAX_RESERVATIONS = 100_000;

/** The `maxReservations` option (default {@link DEFAULT_MAX_RESERVATIONS}): a whole number of 1 or more. */
export function maxReservationsOf(options) {
  const m = options?.maxReservations;
  if (m === undefined) return DEFAULT_MAX_RESERVATIONS;
  if (typeof m !== "number" || !Number.isInteger(m)) {
    throw optionError(TypeError, "maxReservations", m, "not-a-number", "must be a whole number");
  }
  if (m < 1) throw optionError(RangeError, "maxReservations", m, "zero", "must be 1 or more");
  return m;
}

/** The `maxKeys` option (default {@link DEFAULT_MAX_KEYS}); its range is the core's to check. */
export function maxKeysOf(options) {
  if (options === undefined || options === null) return DEFAULT_MAX_KEYS;
  if (typeof options !== "object") {
    throw optionError(TypeError, "options", options, "not-an-object", "must be an object like { maxKeys, name }");
  }
  const m = options.maxKeys;
  if (m === undefined) return DEFAULT_MAX_KEYS;
  if (typeof m !== "number") {
    throw optionError(TypeError, "maxKeys", m, "not-a-number", "must be a whole number");
  }
  return m; // range checked by the core
}

/** A duration option in ms: a number of 0 or more (`Infinity` allowed where `infinite`). */
export function checkMs(field, value, infinite) {
  if (typeof value !== "number" || Number.isNaN(value) || (!infinite && !Number.isFinite(value))) {
    throw optionError(TypeError, field, value, "not-a-number", "must be a number of milliseconds");
  }
  if (value < 0) throw optionError(RangeError, field, value, "negative", "must be 0 or more");
  return value;
}

/** Throws unless `decision` looks like a Decision (an object with a boolean `allowed`). */
export function checkDecision(decision) {
  if (decision === null || typeof decision !== "object" || typeof decision.allowed !== "boolean") {
    throw optionError(TypeError, "decision", decision, "not-a-decision", "must be a Decision from check()");
  }
}
