// `Limiter`, the in-process keyed limiter of `tollgate`, over one wasm-bindgen output: its
// per-key state lives in wasm memory (the core's `Core`, crates/wasm/src/limiter.rs). Every
// decision, policy check and header value comes from the core; this file passes keys and
// numbers through wasm memory and builds the result objects. `check` is the hot path: one
// call into wasm, the key written by a plain loop, the decision read from a reused view.

import { WaitTimeoutError, TIMERS, waitInLine } from "./waiting.js";
import { WAIT_LISTENERS, countsObject, notifyWait } from "./counts.js";
import {
  checkCost,
  checkCount,
  checkDecision,
  checkKey,
  checkMs,
  checkName,
  checkNow,
  checkReservation,
  checkRoute,
  maxKeysOf,
  maxReservationsOf,
  nameOf,
  optionError,
  upToLimit,
} from "./checks.js";
import { Reservations } from "./reservations.js";
import { DECISION_LEN, detailedAt, eachNumbers } from "./decision.js";
import { throttled } from "./throttle.js";

const ALLOWED = 1;
const FAILED = 2;

/** The key buffer's first size in bytes (the core's KEY_MAX); longer keys grow it. */
const KEY_MAX = 128;

const utf8 = new TextEncoder();

/** Whether a call's options name a tenant (anything but undefined or null; `checkDetailed` checks it). */
function hasTenant(opts) {
  return opts !== undefined && opts.tenant !== undefined && opts.tenant !== null;
}

/** The `Limiter` class over `glue` (see api.js' `bind`). */
export function limiterClass(glue) {
  /** Views of wasm memory, renewed when memory grows (the old buffer detaches: length 0). */
  let f64 = new Float64Array(0);
  let u8 = new Uint8Array(0);
  let u64 = new BigUint64Array(0);
  function view() {
    if (f64.length === 0) f64 = new Float64Array(glue.wasmMemory().buffer);
    return f64;
  }
  function bytes() {
    if (u8.length === 0) u8 = new Uint8Array(glue.wasmMemory().buffer);
    return u8;
  }
  function words() {
    if (u64.length === 0) u64 = new BigUint64Array(glue.wasmMemory().buffer);
    return u64;
  }

  /** A reservation's u64 numbers, in the core's reservation buffer order (RESERVATION_LEN). */
  const RESERVATION = ["id", "limiter", "policies", "keyHash", "estimate", "at"];

  /**
   * Writes `text` into wasm memory at `at` if it is ASCII and fits in `room` bytes, and
   * returns its length; returns -1 (nothing usable written) otherwise. A plain loop: for the
   * short keys limiters see (IP addresses, API key hashes) it is several times faster than
   * TextEncoder.encodeInto.
   */
  function putAscii(text, at, room) {
    const n = text.length;
    if (n > room) return -1;
    let m = u8;
    if (m.length === 0) m = bytes();
    for (let i = 0; i < n; i++) {
      const c = text.charCodeAt(i);
      if (c > 0x7f) return -1;
      m[at + i] = c;
    }
    return n;
  }

  /**
   * A keyed rate limiter whose per-key state lives inside wasm memory. See index.d.ts.
   */
  class Limiter {
    #core;
    #out;
    /** The key buffer's address and size in wasm memory. */
    #key;
    #room = KEY_MAX;
    /** `acquire`'s lines of waiters: id of key and tenant -> waiters, the first deciding. */
    #lines = new Map();
    /** The policy's name in the counts (the `name` option). */
    #name;
    /** Route -> the core's series of counts for it (series 0: calls without a route). */
    #routes = new Map();
    /** The reservations waiting for their settle, and the settles' answers (reservations.js). */
    #reservations;
    /** Called when an `acquire` ends (the OpenTelemetry adapter's histogram). */
    [WAIT_LISTENERS] = new Set();

    /**
     * @param {string | object} policy `"10/s burst 20"` or `{ algorithm, limit, window, burst }`
     * @param {{ maxKeys?: number, name?: string }} [options]
     */
    constructor(policy, options) {
      // Limiter.all / Limiter.fairShare hand over a ready core.
      const core = policy instanceof CoreHandle ? policy.core : glue.Core.single(policy, maxKeysOf(options));
      this.#name = nameOf(policy instanceof CoreHandle ? policy.options : options);
      this.#core = core;
      this.#out = core.outPtr() >>> 3;
      this.#key = core.keyPtr();
      this.#reservations = new Reservations(maxReservationsOf(policy instanceof CoreHandle ? policy.options : options));
    }

    /**
     * Writes `text` into the key buffer at byte offset `at` (bytes before it are kept) and
     * returns its length in bytes: ASCII by the loop, anything else as UTF-8 (lone
     * surrogates become U+FFFD, as with any string passed to wasm), growing the buffer first
     * when it could be too small. The core grows it only as far as keys within its bound
     * need (`keyBuffer` answers the room it gave): a longer key is written in part, and its
     * whole length tells the core to refuse it (the bound is the core's, checked there).
     */
    #put(text, at) {
      const n = putAscii(text, this.#key + at, this.#room - at);
      if (n >= 0) return n;
      const need = at + 3 * text.length; // UTF-8 needs at most 3 bytes per UTF-16 unit
      if (need > this.#room) {
        this.#room = this.#core.keyBuffer(need);
        this.#key = this.#core.keyPtr();
      }
      const m = bytes();
      const { read, written } = utf8.encodeInto(text, m.subarray(this.#key + at, this.#key + this.#room));
      return read === text.length ? written : utf8.encode(text).length;
    }

    /** An all-or-nothing stack: each request must pass every policy, or none is charged. */
    static all(policies, options) {
      if (!Array.isArray(policies)) {
        throw optionError(TypeError, "policies", policies, "not-an-array", "must be an array of policies");
      }
      return new Limiter(new CoreHandle(glue.Core.stack(policies, maxKeysOf(options)), options));
    }

    /**
     * A per-tenant fair share: `shared` per key, and `tenant` per key and tenant on top
     * (requests without a tenant, or with tenant `"default"`, skip the tenant policy).
     */
    static fairShare(shared, tenant, options) {
      return new Limiter(new CoreHandle(glue.Core.fairShare(shared, tenant, maxKeysOf(options)), options));
    }

    #decision(status) {
      if (status === FAILED) throw this.#core.takeError();
      let f = f64;
      if (f.length === 0) f = view();
      const i = this.#out;
      return {
        allowed: status === ALLOWED,
        limit: f[i],
        remaining: f[i + 1],
        resetAfter: f[i + 2],
        retryAfter: f[i + 3],
        delay: f[i + 4],
      };
    }

    /**
     * Decides one request for `key`, charging `cost` (default 1) when allowed. Synchronous;
     * a denial is a decision with `allowed: false`, never an exception.
     */
    check(key, opts) {
      if (hasTenant(opts) || opts?.route !== undefined) {
        // A tenant's check is a fair share's: the detailed call, without `each`.
        const { each, ...decision } = this.checkDetailed(key, opts);
        return decision;
      }
      if (typeof key !== "string") checkKey(key);
      const now = opts?.now === undefined ? Date.now() : checkNow(opts.now);
      const cost = opts?.cost === undefined ? 1 : checkCost(opts.cost);
      return this.#decision(this.#core.checkBuf(this.#put(key, 0), now, cost));
    }

    /**
     * `check`'s short answer: whether the request was admitted (and `cost` charged), as a
     * boolean; no decision object. The same decision as `check` (the core's `admit`), for
     * callers that send no `RateLimit` headers and need no retry time. Invalid arguments and
     * a cost above the capacity throw as in `check`.
     */
    allow(key, opts) {
      if (hasTenant(opts) || opts?.route !== undefined) return this.checkDetailed(key, opts).allowed;
      if (typeof key !== "string") checkKey(key);
      const now = opts?.now === undefined ? Date.now() : checkNow(opts.now);
      const cost = opts?.cost === undefined ? 1 : checkCost(opts.cost);
      const status = this.#core.allowBuf(this.#put(key, 0), now, cost);
      if (status === FAILED) throw this.#core.takeError();
      return status === ALLOWED;
    }

    /**
     * `check`, also answering each limit's own decision (`each`, in stack order; a fair
     * share: shared, then the tenant window when the request has one). For a stack, a limit
     * that had room in a denied request was not charged and reports what it really has.
     * `headers()` and `problem()` need it for stacks and fair shares.
     */
    checkDetailed(key, opts) {
      checkKey(key);
      const now = opts?.now === undefined ? Date.now() : checkNow(opts.now);
      const cost = opts?.cost === undefined ? 1 : checkCost(opts.cost);
      const tenant = opts?.tenant;
      if (tenant !== undefined && tenant !== null && typeof tenant !== "string") {
        throw optionError(TypeError, "tenant", tenant, "not-a-string", "must be a string");
      }
      const hasTenant = typeof tenant === "string";
      const series = opts?.route === undefined ? 0 : this.#series(checkRoute(opts.route));
      const k = this.#put(key, 0);
      const t = hasTenant ? this.#put(tenant, k) : 0;
      const n = this.#core.checkDetailed(k, t, hasTenant, now, cost, series);
      return detailedAt(n, 0, n.length / DECISION_LEN - 1);
    }

    /**
     * Waits for a turn: resolves to the admitting decision (after a leaky queue's `delay`),
     * or rejects with a `WaitTimeoutError` when the request cannot proceed within
     * `maxWait` ms (at once when the retry time is already beyond it), with the signal's
     * reason when `signal` aborts, or like `check` for invalid arguments. Waiters on one key
     * (and tenant) are served in arrival order, one decision at a time: only the first
     * decides, and wakes the next once it is admitted, gives up or is aborted. Nothing is
     * charged until admitted (an abort during a queue's delay leaves the queue slot taken).
     * The waiting rule is the core's (`decideWaiting` keeps a charge as it says, `waitStep`
     * answers what to do next); the line and the timers are `waiting.js`'s, shared with
     * `tollgate/redis`.
     */
    async acquire(key, opts) {
      checkKey(key);
      const cost = opts?.cost === undefined ? 1 : checkCost(opts.cost);
      const maxWait = opts?.maxWait === undefined ? Infinity : checkMs("maxWait", opts.maxWait, true);
      const jitter = opts?.jitter === undefined ? 0 : checkMs("jitter", opts.jitter, false);
      const tenant = opts?.tenant ?? "";
      if (typeof tenant !== "string") {
        throw optionError(TypeError, "tenant", tenant, "not-a-string", "must be a string");
      }
      // One line per key and tenant ("-key" without a tenant, "<length>:tenant:key" with one).
      const id = tenant === "" ? "-" + key : `${tenant.length}:${tenant}:${key}`;
      const timers = opts?.[TIMERS];
      const clock = timers?.clock ?? Date.now;
      const start = clock();
      let d;
      try {
        d = await this.#wait(id, key, tenant, cost, maxWait, jitter, opts, timers, clock);
      } catch (e) {
        if (e instanceof WaitTimeoutError) this.#waited(false, clock() - start, cost);
        throw e;
      }
      this.#waited(true, clock() - start, cost, d);
      return d;
    }

    /** Counts a finished wait of `cost` (one decision, the histogram, the slots taken) and tells the listeners. */
    #waited(admitted, ms, cost, d) {
      this.#core.waited(0, admitted, ms, d?.limit ?? 0, d?.remaining ?? 0, cost);
      notifyWait(this[WAIT_LISTENERS], admitted, ms, undefined);
    }

    /** `acquire`'s wait in line `id` (waiting.js around the core's rule). */
    #wait(id, key, tenant, cost, maxWait, jitter, opts, timers, clock) {
      return waitInLine(this.#lines, id, {
        maxWait,
        signal: opts?.signal,
        clock,
        // Decided at `clock()`, the charge kept only as the core's rule says with `left` ms
        // before the deadline (LOOK: nothing kept).
        decide: (left) => {
          const k = this.#put(key, 0);
          return this.#decision(this.#core.decideWaiting(k, this.#put(tenant, k), clock(), cost, left));
        },
        step: (d, waited, max, drawn) => glue.waitStep(d.allowed, d.retryAfter, d.delay, waited, max, drawn),
        jitter: () => jitter,
        wait: timers?.sleep,
      });
    }

    /**
     * Wraps the async function `fn`: each call waits for a turn (`acquire` with `options`:
     * `key`, a string or a function of the call's arguments, default `"default"`; `cost`,
     * `maxWait`, `signal`, `tenant`, `jitter`), then calls `fn` with the same `this` and
     * arguments and returns its result. A timeout rejects with `WaitTimeoutError` and does
     * not call `fn`.
     */
    throttle(fn, options) {
      return throttled(this, fn, options);
    }

    /**
     * Reserves `estimate` for `key`: a decision that charges it as `check` does and, when
     * admitted, carries the `reservation` to settle with the real cost (`settle`). A plain
     * object of strings and numbers, which JSON keeps. The core's `KeyedLimiter::reserve`.
     */
    reserve(key, estimate, opts) {
      checkKey(key);
      const cost = checkCount("estimate", estimate);
      const now = opts?.now === undefined ? Date.now() : checkNow(opts.now);
      const status = this.#core.reserveBuf(this.#put(key, 0), now, cost);
      const decision = this.#decision(status);
      if (status === ALLOWED) {
        const w = words();
        const at = this.#core.reservationPtr() >>> 3;
        const r = { key };
        RESERVATION.forEach((f, i) => {
          r[f] = f === "estimate" ? Number(w[at + i]) : String(w[at + i]);
        });
        this.#reservations.issued(r);
        decision.reservation = { ...r };
      }
      return decision;
    }

    /**
     * Settles `reservation` (from this limiter's `reserve`) with the `actual` cost: gives
     * back `estimate - actual` or charges `actual - estimate` by each limit's rule (the
     * core's `KeyedLimiter::settle`), all or nothing. Settling a reservation again answers
     * its first settle and charges nothing (see reservations.js for the record's bound).
     */
    settle(reservation, actual, opts) {
      checkReservation(reservation);
      const units = checkCount("actual", actual);
      const now = opts?.now === undefined ? Date.now() : checkNow(opts.now);
      const overage = upToLimit(opts?.overage);
      const found = this.#reservations.find(reservation);
      if (found.settled !== undefined) return copy(found.settled);
      // The numbers as issued when known (a copy edited in between does not move a refund);
      // the key is the caller's, which the core checks against the reservation's.
      const r = found.open ?? reservation;
      const k = this.#put(reservation.key, 0);
      const w = words();
      const at = this.#core.reservationPtr() >>> 3;
      RESERVATION.forEach((f, i) => {
        w[at + i] = BigInt(r[f]);
      });
      const n = this.#core.settleBuf(k, now, units, overage);
      const answer = { refunded: n[0], charged: n[1], unpaid: n[2] };
      if (n.length > 3) {
        answer.each = [];
        for (let i = 3; i < n.length; i += 3) answer.each.push({ refunded: n[i], charged: n[i + 1], unpaid: n[i + 2] });
      }
      this.#reservations.settled(r, answer);
      return copy(answer);
    }

    /** The key's standing without charging it (a check of cost 0). */
    peek(key, opts) {
      checkKey(key);
      const now = opts?.now === undefined ? Date.now() : checkNow(opts.now);
      return this.#decision(this.#core.peekBuf(this.#put(key, 0), now));
    }

    /** Gives back `cost` (default 1) slots of the limiter's concurrency policies for `key`. */
    release(key, opts) {
      checkKey(key);
      const cost = opts?.cost === undefined ? 1 : checkCost(opts.cost);
      if (this.#core.release(this.#put(key, 0), cost) === FAILED) throw this.#core.takeError();
    }

    /** Forgets `key`; returns whether it was stored. */
    reset(key) {
      checkKey(key);
      return this.#core.reset(this.#put(key, 0));
    }

    /** The number of limited keys held (fresh keys are not stored). */
    get size() {
      return this.#core.size();
    }

    /** The policies in canonical form, in stack order (a fair share's tenant policy last). */
    get policies() {
      return this.#core.policies();
    }

    /**
     * The limiter's name (the `name` option, default `"default"`): the one name of its
     * policy, in its metrics' series and in `headers()`/`problem()` (and so in the
     * middleware's `RateLimit-Policy`), so the two never disagree.
     */
    get name() {
      return this.#name;
    }

    /**
     * The response headers for a decision of this limiter: `RateLimit-Policy` (every
     * policy), `RateLimit` (the one(s) binding the decision, as the core chooses them),
     * `Retry-After` and `Cache-Control: no-store` when denied (and `X-RateLimit-*` with
     * `legacy`). A stack's limits are named `<name>.1`, `<name>.2`, ..., a fair share's
     * tenant window `<name>.tenant`. For a stack or a fair share, pass `checkDetailed()`'s
     * decision (it carries each limit's).
     */
    headers(decision, name = this.#name, options) {
      const flat = this.#core.headers(checkName(name), this.#each(decision), options?.legacy === true);
      const out = {};
      for (let i = 0; i < flat.length; i += 2) out[flat[i]] = flat[i + 1];
      return out;
    }

    /**
     * The body of a 429 for a denied decision of this limiter, an application/problem+json
     * document (type quota-exceeded, `detail` with the wait, `violated-policies`: the names
     * of the limits that denied, as in `headers()`); `undefined` when allowed.
     */
    problem(decision, name = this.#name) {
      return this.#core.quotaExceeded(checkName(name), this.#each(decision));
    }

    /** Each limit's decision as the core reads it: `DECISION_LEN` numbers per limit. */
    #each(decision) {
      checkDecision(decision);
      let each = decision.each;
      if (each === undefined) {
        if (this.policies.length !== 1) {
          throw optionError(TypeError, "decision", "check()", "not-detailed", "a stack or fair share names its limits from checkDetailed()'s decision (it has each)");
        }
        each = [decision];
      }
      return eachNumbers(each);
    }

    /** The core's series of counts for `route` (made on its first use). */
    #series(route) {
      let series = this.#routes.get(route);
      if (series === undefined) this.#routes.set(route, (series = this.#core.addSeries()));
      return series;
    }

    /**
     * What the limiter decided so far, in the core's metric model: one counts object for
     * the calls without a route, then one per route (see index.d.ts, `Counts`). As
     * Prometheus text or OpenTelemetry metrics: `tollgate/metrics`, `tollgate/otel`.
     */
    metrics() {
      const inUse = this.#core.concurrencyInUse(); // -1: no concurrency limit
      const out = [countsObject(this.#name, undefined, this.#core.counts(0), inUse < 0 ? undefined : inUse)];
      for (const [route, series] of this.#routes) out.push(countsObject(this.#name, route, this.#core.counts(series)));
      return out;
    }

    /** Frees the limiter's wasm memory now (otherwise it is freed when garbage collected). */
    free() {
      this.#core.free();
    }
  }

  /** A settle's answer, copied so that a caller's edits do not change the record. */
  function copy(answer) {
    return answer.each === undefined ? { ...answer } : { ...answer, each: answer.each.map((e) => ({ ...e })) };
  }

  /** Hands a prepared core (and the limiter's options) to the Limiter constructor. */
  class CoreHandle {
    constructor(core, options) {
      this.core = core;
      this.options = options;
    }
  }

  return Limiter;
}
