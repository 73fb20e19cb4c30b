// `throttle(fn, options)`, shared by `tollgate` (Limiter) and `tollgate/redis` (RedisLimiter):
// a function that waits for a turn (the limiter's `acquire`) before each call of `fn`.

import { optionError } from "./checks.js";

/**
 * `limiter.throttle(fn, options)` for any limiter with an `acquire(key, options)`: each call
 * of the returned function waits for a turn, then calls `fn` with the same `this` and
 * arguments. `options.key` is a string or a function of the call's arguments (default
 * `"default"`).
 */
export function throttled(limiter, fn, options) {
  if (typeof fn !== "function") {
    throw optionError(TypeError, "fn", fn, "not-a-function", "must be a function");
  }
  const keyOf = options?.key ?? "default";
  if (typeof keyOf !== "string" && typeof keyOf !== "function") {
    throw optionError(TypeError, "key", keyOf, "not-a-string", "must be a string or a function of the arguments");
  }
  return async function throttledCall(...args) {
    const key = typeof keyOf === "function" ? keyOf(...args) : keyOf;
    await limiter.acquire(key, options);
    return fn.apply(this, args);
  };
}
