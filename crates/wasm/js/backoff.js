// The client side of rate limits, over one wasm-bindgen output (`glue`): `fetchWithBackoff`
// and the schedule it uses (`Backoff`, `isRetryable`, `parseRetryAfter`). The schedule, the
// retry rule and the `Retry-After` parser are the core's (`tollgate::backoff`); this file
// only sends, waits and cancels bodies.

import { sleep } from "./waiting.js";

/** The backoff half of the API over `glue` (see api.js' `bind`). */
export function bindBackoff(glue) {
  /**
   * `fetch` that retries 429 and 503 responses of idempotent requests (GET, HEAD, OPTIONS,
   * TRACE, PUT, DELETE, or any request with an `Idempotency-Key` header) with full-jitter
   * exponential backoff, honouring `Retry-After`, for at most `maxAttempts` attempts in all.
   * Resolves with the last response (a 429/503 when it gave up).
   */
  async function fetchWithBackoff(input, init, options) {
    const maxAttempts = options?.maxAttempts ?? 4;
    const baseMs = options?.baseMs ?? 100;
    const capMs = options?.capMs ?? 10_000;
    const fetchImpl = options?.fetch ?? globalThis.fetch;
    const plan = new glue.Backoff(baseMs, capMs, maxAttempts);
    try {
      const isRequest = typeof Request === "function" && input instanceof Request;
      const method = String(init?.method ?? (isRequest ? input.method : "GET")).toUpperCase();
      const hasKey = new Headers(init?.headers ?? (isRequest ? input.headers : undefined)).has("idempotency-key");
      for (let attempt = 1; ; attempt++) {
        const response = await fetchImpl(isRequest ? input.clone() : input, init);
        if (!glue.isRetryable(method, hasKey, response.status)) return response;
        const retryAfter = response.headers.get("retry-after");
        const wait = plan.delay(attempt, retryAfter === null ? -1 : parseRetryAfter(retryAfter, Date.now()));
        if (wait < 0) return response;
        await response.body?.cancel();
        await sleep(wait, init?.signal ?? (isRequest ? input.signal : undefined));
      }
    } finally {
      plan.free();
    }
  }

  /**
   * The backoff schedule `fetchWithBackoff` uses, for callers with their own transport:
   * `delay(attempt, retryAfterHeader?, nowMs?)` gives the wait in ms or -1 to give up.
   */
  class Backoff {
    #plan;
    constructor({ baseMs = 100, capMs = 10_000, maxAttempts = 4 } = {}) {
      this.#plan = new glue.Backoff(baseMs, capMs, maxAttempts);
    }
    delay(attempt, retryAfter, now = Date.now()) {
      return this.#plan.delay(attempt, retryAfter == null ? -1 : parseRetryAfter(retryAfter, now));
    }
    ceiling(attempt) {
      return this.#plan.ceiling(attempt);
    }
  }

  /** Whether a response may be retried (429/503, idempotent method or idempotency key). */
  function isRetryable(method, hasIdempotencyKey, status) {
    return glue.isRetryable(String(method), Boolean(hasIdempotencyKey), status);
  }

  /** `Retry-After` (seconds or HTTP-date) as ms from `now`, or -1 when invalid (the core's parser). */
  function parseRetryAfter(value, now = Date.now()) {
    return glue.parseRetryAfter(String(value), +now);
  }

  return { fetchWithBackoff, Backoff, isRetryable, parseRetryAfter };
}
