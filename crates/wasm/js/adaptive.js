// AdaptiveLimiter: adaptive concurrency over the core's gradient controller (the wasm
// `AdaptiveCore`). The controller's rule, its state and every move of the limit are the
// core's; this file checks arguments, keeps each admitted request's token, and turns
// outcomes into the core's numbers. A limit is per process by nature (it measures what
// this process's requests see): there is no fleet store for it.
import { optionError } from "./checks.js";

const OUTCOMES = { success: 0, overload: 1, timeout: 2 };
const WHOLE = ["minLimit", "maxLimit", "initialLimit", "minSamples", "percentile", "tolerance"];
const DURATIONS = ["windowMs", "probeIntervalMs"];

/** A finite number of ms, 0 or more (`field` names it in the error). */
function checkMs(field, v) {
  if (typeof v !== "number" || !Number.isFinite(v) || v < 0) {
    throw optionError(TypeError, field, v, "not-a-duration", "must be a finite number of ms, 0 or more");
  }
  return v;
}

/** The `AdaptiveLimiter` class over one wasm-bindgen output (`glue.AdaptiveCore`). */
export function adaptiveClass(glue) {
  /**
   * A concurrency limit that follows the latency its requests show (the core's gradient
   * controller): `acquire()` returns a token, or `null` when the limit is full (shed the
   * request: answer 503); `release(token, { outcome })` when the request has ended.
   */
  class AdaptiveLimiter {
    #core;
    #clock;
    /** The tokens admitted and not yet released: a token is released once, or refused. */
    #held = new WeakSet();

    constructor(options = {}) {
      if (options === null || typeof options !== "object") {
        throw optionError(TypeError, "options", options, "not-an-object", "must be an object");
      }
      for (const f of WHOLE) {
        const v = options[f];
        if (v !== undefined && !(Number.isInteger(v) && v >= 0 && v <= 0xffffffff)) {
          throw optionError(TypeError, f, v, "not-a-whole-number", "must be a whole number, 0 or more");
        }
      }
      for (const f of DURATIONS) if (options[f] !== undefined) checkMs(f, options[f]);
      const clock = options.clock ?? (() => performance.now());
      if (typeof clock !== "function") {
        throw optionError(TypeError, "clock", clock, "not-a-function", "must be a function returning ms");
      }
      this.#clock = clock;
      const o = options;
      this.#core = new glue.AdaptiveCore(
        o.minLimit, o.maxLimit, o.initialLimit, o.windowMs, o.minSamples, o.percentile,
        o.tolerance, o.probeIntervalMs, checkMs("now", clock()), Math.random() * 2 ** 53,
      );
    }

    /**
     * Admits one request if the limit has room: a token to pass to `release`, or `null`
     * (shed it). `now` (ms) defaults to the clock (`performance.now()`).
     */
    acquire(now = this.#clock()) {
      checkMs("now", now);
      if (!this.#core.acquire(now)) return null;
      const token = Object.freeze({ start: now });
      this.#held.add(token);
      return token;
    }

    /**
     * Releases a request admitted by `acquire`: `outcome` is `"success"` (an answer,
     * including application errors), `"overload"` (a 429/503/5xx, a refusal for load) or
     * `"timeout"` (the caller gave up, or the request was dropped): the last two are
     * congestion, never latency samples. The latency runs from the token's start to `now`
     * (default the clock), or is given: `latency` (ms), or `start` (ms, on the same clock).
     * Throws a `TypeError` (`field: "token"`) for a token not held (released already, or
     * not this limiter's): a request is never counted twice.
     */
    release(token, { outcome = "success", latency, start, now } = {}) {
      if (!this.#held.has(token)) {
        throw optionError(TypeError, "token", token, "not-held", "was released already or is not this limiter's");
      }
      const code = OUTCOMES[outcome];
      if (code === undefined || !Object.hasOwn(OUTCOMES, outcome)) {
        throw optionError(TypeError, "outcome", outcome, "unknown-outcome", 'must be "success", "overload" or "timeout"');
      }
      const end = now === undefined ? this.#clock() : checkMs("now", now);
      let started = token.start;
      if (latency !== undefined) started = end - checkMs("latency", latency);
      else if (start !== undefined) started = checkMs("start", start);
      this.#held.delete(token);
      this.#core.release(end, Math.max(0, started), code, Math.random() * 2 ** 53);
    }

    /** The limit now. */
    get limit() {
      return this.#core.limit();
    }

    /** Requests admitted and not yet released. */
    get inFlight() {
      return this.#core.inFlight();
    }

    /** Frees the wasm memory now (else the garbage collector's finaliser does). */
    free() {
      this.#core.free();
    }
  }
  return AdaptiveLimiter;
}

// The Express and Hono middleware's shared parts (express.js and hono.js import them).

/** How a response's status counts: a 5xx or a 429 is overload, anything else a sample. */
export function outcomeOf(status) {
  return status >= 500 || status === 429 ? "overload" : "success";
}

/**
 * The middleware's options: `limiter` (an `AdaptiveLimiter`) and `retryAfter` (seconds,
 * default 1: the limit moves once per window, a fraction of a second).
 */
export function adaptiveOptions(opts) {
  const limiter = opts?.limiter;
  if (typeof limiter?.acquire !== "function" || typeof limiter?.release !== "function") {
    throw optionError(TypeError, "limiter", limiter, "not-an-adaptive-limiter", "must be an AdaptiveLimiter");
  }
  const retryAfter = opts.retryAfter ?? 1;
  if (!(Number.isInteger(retryAfter) && retryAfter >= 0)) {
    throw optionError(TypeError, "retryAfter", retryAfter, "not-a-whole-number", "must be a whole number of seconds");
  }
  return { limiter, retryAfter: String(retryAfter) };
}

/**
 * The application/problem+json body of a shed request's 503: the shape of the tower layer's
 * (tollgate-http's problem documents), with the limit it met.
 */
export function shedProblem(limit) {
  return JSON.stringify({
    type: "about:blank",
    title: "Service Unavailable",
    status: 503,
    detail: `the service is at its concurrency limit (${limit} in flight); retry later`,
    error: "concurrency-limit",
    limit,
  });
}
