// tollgate/redis: its errors (see ../redis.js).

/** A TypeError or RangeError for an invalid option or argument, naming the field and the rule. */
export function optionError(Kind, field, value, rule, explanation) {
  const e = new Kind(`invalid option: ${field}: ${explanation} [${rule}]`);
  e.field = field;
  e.rule = rule;
  e.value = value;
  return e;
}

/** An error of the Redis store: `code` is `corrupt-state`, `contended` or `redis`. */
export class RedisLimiterError extends Error {
  constructor(code, message, extra) {
    super(message);
    this.name = "RedisLimiterError";
    this.code = code;
    Object.assign(this, extra);
  }
}

/** Redis's own error, for the caller. */
export function fatal(e) {
  return new RedisLimiterError("redis", `redis: ${e?.message ?? e}`, { cause: e });
}

/** Redis cannot serve now: the fallback decides (`why`: unreachable, timeout or indeterminate). */
export class Unavailable extends Error {
  constructor(why, cause) {
    super(why);
    this.why = why;
    this.cause = cause;
  }
}

/** The core's `corrupt-state` error for a slot of `group` as the store's, naming the key; any other error as it is. */
export function keyed(group, e) {
  if (e?.rule !== "corrupt-state") return e;
  const key = group.keys[e.value];
  return new RedisLimiterError("corrupt-state", `key ${key}: ${e.message}`, { key });
}
