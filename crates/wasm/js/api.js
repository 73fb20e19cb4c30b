// tollgate's JavaScript API over the wasm core. One copy ships (web/api.js); every build
// (node/, web/, bundler/, workers/) calls `bind` with its own wasm-bindgen output.
// Every algorithm decision, policy check and header value comes from the Rust core; the
// API's parts adapt arguments and build the result objects:
//   limiter.js   Limiter (the keyed limiter in wasm memory: check, acquire, headers, ...)
//   decision.js  a decision object from the core's numbers (shared with tollgate/redis)
//   checks.js    the arguments' and options' checks
//   throttle.js  throttle(fn) over any limiter's acquire (shared with tollgate/redis)
//   waiting.js   acquire's line of waiters and timers (shared with tollgate/redis)
//   counts.js    the counts of metrics() (shared with tollgate/redis and tollgate/metrics)
//   backoff.js   fetchWithBackoff and its schedule
//   adaptive.js  AdaptiveLimiter (adaptive concurrency: the core's gradient controller)
// and this file binds them to one build's output, with the free functions below.

import { WaitTimeoutError } from "./waiting.js";
import { checkCost, checkDecision, checkNow, optionError } from "./checks.js";
import { limiterClass } from "./limiter.js";
import { bindBackoff } from "./backoff.js";
import { adaptiveClass } from "./adaptive.js";

/**
 * The API over one wasm-bindgen output (`glue`: its exports, `Core`, `Backoff`,
 * `wasmMemory`, ...): `Limiter`, `headers`, `decide`, `parsePolicy`, `fetchWithBackoff`,
 * `Backoff`, `isRetryable`, `parseRetryAfter`. Nothing here touches the wasm until called,
 * so a build may bind before its module is initialised (web: `await init()` first).
 */
export function bind(glue) {
  const Limiter = limiterClass(glue);
  const { fetchWithBackoff, Backoff, isRetryable, parseRetryAfter } = bindBackoff(glue);

  /**
   * The response headers for `decision` under the policy named `policyName`, as an object.
   * `options.policy` (a policy string or object, or a Limiter) is the policy the decision was
   * made under; it gives `RateLimit-Policy` its quota and window.
   */
  function headers(decision, policyName, options) {
    checkDecision(decision);
    if (typeof policyName !== "string") {
      throw optionError(TypeError, "policyName", policyName, "not-a-string", "must be a string");
    }
    let policy = options?.policy;
    if (policy instanceof Limiter) return policy.headers(decision, policyName, { legacy: options?.legacy });
    if (policy === undefined) {
      throw optionError(TypeError, "policy", policy, "missing", "pass { policy } (a policy string, object or Limiter)");
    }
    // The policy's own limiter answers (its headers are the core's for one limit).
    const one = new Limiter(policy, { maxKeys: 1 });
    try {
      return one.headers(decision, policyName, { legacy: options?.legacy === true });
    } finally {
      one.free();
    }
  }

  /**
   * The stateless, low-level decision: `decide(policy, state, now, cost = 1)` returns
   * `{ decision, state }`, where `state` is the core's state as JSON (externally tagged by
   * algorithm, nanosecond integers; `null` when the key is fresh) to pass back on the next
   * call. A cost of 0 is a peek: nothing charged, the state brought up to `now`. For callers
   * that keep state themselves or want to look at it (the demo page draws it); `Limiter`
   * keeps it in wasm memory and is faster. Only in builds with the `state-json` feature (the
   * demo page's); the published package leaves JSON out to stay small, and this throws.
   */
  function decide(policy, state, now, cost = 1) {
    if (typeof glue.decideState !== "function") {
      throw new Error("decide() needs a build of tollgate with the `state-json` feature (TOLLGATE_WASM_FEATURES=state-json crates/wasm/build.sh)");
    }
    if (state !== null && state !== undefined && typeof state !== "string") {
      throw optionError(TypeError, "state", state, "not-a-string", "must be the JSON string a previous decide() returned, or null");
    }
    return glue.decideState(policy, state ?? undefined, checkNow(now), checkCost(cost));
  }

  /** Validates a policy and returns its canonical compact form; throws like `new Limiter`. */
  function parsePolicy(policy) {
    return glue.parsePolicy(policy);
  }

  const AdaptiveLimiter = adaptiveClass(glue);
  return {
    Limiter,
    AdaptiveLimiter,
    headers,
    decide,
    parsePolicy,
    fetchWithBackoff,
    Backoff,
    isRetryable,
    parseRetryAfter,
    WaitTimeoutError,
  };
}
