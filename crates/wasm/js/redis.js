// tollgate/redis: one exact limit for a fleet of Node (and Rust) processes sharing one Redis.
// The core (wasm, FleetLimits) makes every decision and holds the fleet protocol's rules
// (tollgate::store::fleet: the key layout, the stored values, their times to live, which
// failures fall back and the fallback's decisions); this file and redis/ move the bytes, as
// the Rust crate tollgate-redis does: the same keys, the same values and the same two Lua
// scripts (read, then a compare-and-set commit), so Node and Rust processes can share one
// limit. See index.d.ts (redis.d.ts) and crates/redis/src/lib.rs for the design.
//   redis.js           RedisLimiter: the API (arguments, groups, acquire's wait, counts)
//   redis/plans.js     RedisPlans: limits by the caller's plan, overrides in Redis
//   redis/rounds.js    how requests are served: rounds per group, fallback, deny cache
//   redis/settles.js   the settle of a reservation, once in the fleet
//   redis/merged.js    the two scripts, by SHA1, merged on one server
//   redis/module.js    the server's tollgate module, when it has one
//   redis/fleet.js     the core's side: numbers and bytes in and out of wasm memory
//   redis/clients.js   the Redis clients and their replies
//   redis/deadlines.js the timeout of every call
//   redis/group.js     one key's (and tenant's) slots
//   redis/options.js   the options, checked; redis/errors.js its errors

import { WaitTimeoutError, waitInLine, TIMERS } from "./web/waiting.js";
import { checkCount, checkDecision, checkMs, checkName, checkReservation, upToLimit } from "./web/checks.js";
import { eachNumbers } from "./web/decision.js";
import { throttled } from "./web/throttle.js";
import { WAIT_LISTENERS, countsObject, notifyWait, sourceIndex } from "./web/counts.js";
import { prometheus } from "./metrics.js";
import { adapter, oneServer, number } from "./redis/clients.js";
import { Deadlines, Timeout } from "./redis/deadlines.js";
import { RedisLimiterError, fatal, optionError } from "./redis/errors.js";
import { FleetLimits, waitStep, DENY_CACHE, OP_CHECK, OP_PEEK, OP_RELEASE, OP_ACQUIRE, fleetLimits } from "./redis/fleet.js";
import { Group } from "./redis/group.js";
import { Rounds } from "./redis/rounds.js";
import { settleOnRedis } from "./redis/settles.js";
import { TESTING, readOptions } from "./redis/options.js";

export { WaitTimeoutError, RedisLimiterError, TESTING, prometheus };
export { RedisPlans } from "./redis/plans.js";

/** A reservation's id: random, never 0 (as tollgate-redis draws them), unique in the fleet by chance (2^-64 a pair). */
function reservationId() {
  const id = new BigUint64Array(1);
  do crypto.getRandomValues(id);
  while (id[0] === 0n);
  return id[0];
}

/** Keys of at most this many UTF-16 units are within the core's bound on a key's bytes. */
const SURELY_SHORT = FleetLimits.surelyShortKey();

/**
 * A fleet-wide limiter on Redis. See redis.d.ts.
 */
export class RedisLimiter {
  /** The options, checked (redis/options.js): `head` (what every key's base starts with), `fallback`, `timeout`, ... */
  #o;
  /** A command, bounded by the timeout (a late answer is ignored). */
  #call;
  /** How requests are served ({@link Rounds}). */
  #rounds;
  #limits;
  /** The smallest capacity of the limits. */
  #capacity;
  #base;
  #fair;
  /** The reservations' `limiter` and `policies` (decimal strings), as tollgate-redis makes them. */
  #issuer;
  #fingerprint;
  /** `acquire`'s lines of waiters: group id -> waiters, the first deciding. */
  #lines = new Map();
  #stats = { redis: 0, denyCache: 0, fallback: 0, indeterminate: 0, conflicts: 0, roundTrips: 0 };
  /** Called when an `acquire` ends (the OpenTelemetry adapter's histogram). */
  [WAIT_LISTENERS] = new Set();

  constructor(client, spec, options) {
    if (options === null || typeof options !== "object") {
      throw optionError(TypeError, "options", options, "not-an-object", "must be an object like { namespace, fallback }");
    }
    const send = adapter(client);
    const o = (this.#o = readOptions(options));
    const deadlines = new Deadlines(o.timeout);
    const call = (this.#call = (args) => deadlines.watch(send(args)));
    this.#limits = fleetLimits(spec, o.localMaxKeys);
    this.#limits.timesToLive(this.#o.grace, this.#o.lease, this.#o.clock !== undefined);
    this.#base = this.#limits.slots(undefined);
    this.#capacity = this.#limits.capacity();
    this.#fair = this.#limits.policies().length > this.#base.length;
    this.#rounds = new Rounds(this.#limits, o, call, oneServer(client), this.#stats);
    this.#issuer = String(FleetLimits.stableHash(this.#baseKey("")));
    this.#fingerprint = String(this.#limits.fingerprint());
  }

  /** The limits in canonical compact form, in slot order (a fair share's tenant policy last). */
  get policies() {
    return this.#limits.policies();
  }

  /** The limiter's name (the `name` option): in its metrics and in `headers()`/`problem()`. */
  get name() {
    return this.#o.name;
  }

  /**
   * The response headers for a decision of this limiter, as `Limiter.headers` gives them
   * (the core's): `RateLimit-Policy`, `RateLimit`, `Retry-After` and `Cache-Control:
   * no-store` when denied (and `X-RateLimit-*` with `legacy`); a stack's limits named
   * `<name>.1`, ..., a fair share's tenant window `<name>.tenant`.
   */
  headers(decision, name = this.#o.name, options) {
    const flat = this.#limits.headers(checkName(name), this.#each(decision), options?.legacy === true);
    const out = {};
    for (let i = 0; i < flat.length; i += 2) out[flat[i]] = flat[i + 1];
    return out;
  }

  /** The body of a 429 for a denied decision (the core's application/problem+json); `undefined` when allowed. */
  problem(decision, name = this.#o.name) {
    return this.#limits.quotaExceeded(checkName(name), this.#each(decision));
  }

  /** Each limit's decision as the core reads it (a decision's `each`, always there in this limiter's). */
  #each(decision) {
    checkDecision(decision);
    return eachNumbers(decision.each ?? [decision]);
  }

  /**
   * A key's name without its slot, `<prefix>:{<namespace>:<key>}` (the core's KeyLayout::base;
   * the module's `<base>`): the head, the key with `%` and `}` percent-encoded by the core
   * (`keyPart`, which also refuses a key over the core's bound on its bytes; short keys
   * without `%` and `}` are used as they are, without a call), and the tag's end.
   */
  #baseKey(key) {
    const plain = key.length <= SURELY_SHORT && !key.includes("}") && !key.includes("%");
    const part = plain ? key : FleetLimits.keyPart(key);
    return `${this.#o.head}${part}}`;
  }

  /** The requests for one key (and tenant, for a fair share's tenant window) share their slots. */
  #group(key, tenant) {
    if (typeof key !== "string") throw optionError(TypeError, "key", key, "not-a-string", "must be a string");
    if (tenant !== undefined && tenant !== null && typeof tenant !== "string") {
      throw optionError(TypeError, "tenant", tenant, "not-a-string", "must be a string");
    }
    const suffixes = this.#fair && tenant != null ? this.#limits.slots(tenant) : this.#base;
    const withTenant = suffixes.length > this.#base.length;
    return new Group(withTenant ? `t${key.length}:${key}${tenant}` : `k${key}`, key, this.#baseKey(key), withTenant ? tenant : undefined, suffixes);
  }

  #cost(cost) {
    if (cost === undefined) return 1;
    if (typeof cost !== "number" || !Number.isInteger(cost)) {
      throw optionError(TypeError, "cost", cost, "not-a-number", "must be a whole number");
    }
    if (cost < 0) throw optionError(RangeError, "cost", cost, "negative", "must be 0 or more");
    return cost;
  }

  /** Decides one request of `cost` (default 1) for `key` (on behalf of `tenant`, for a fair share). */
  async check(key, options) {
    const cost = this.#cost(options?.cost);
    const group = this.#group(key, options?.tenant);
    // Refused before any round trip, with the core's error (no cost up to the smallest
    // capacity can be refused: then the core is not asked).
    if (cost > this.#capacity) this.#limits.checkCost(cost, group.tenant);
    const remembered = this.#rounds.remembered(group, cost);
    if (remembered !== undefined) {
      this.#limits.record(DENY_CACHE, false, remembered.limit, remembered.remaining, cost);
      return remembered;
    }
    return this.#rounds.submit(group, OP_CHECK, cost);
  }

  /** The key's standing without charging it. */
  async peek(key, options) {
    return this.#rounds.submit(this.#group(key, options?.tenant), OP_PEEK, 0);
  }

  /**
   * Waits for a turn: resolves to the admitting decision (after a leaky queue's `delay`), or
   * rejects with a `WaitTimeoutError` (`waited`, `retryAfter`) when the request cannot
   * proceed within `maxWait` ms (at once when the retry time is already beyond it, or
   * unknown: a full concurrency limit), with the signal's reason when `signal` aborts, or
   * like `check` for invalid arguments. The waiting rule is the core's (`waitStep`:
   * `tollgate::wait::step`; each decision is sent with the time left and kept only as
   * `tollgate::wait::keeps` says), the line and timers `waiting.js`'s, shared with the
   * in-memory `Limiter`. Waiters for one key (and tenant) in this process are
   * served in arrival order, one decision at a time. Nothing is charged until admitted.
   */
  async acquire(key, options) {
    const cost = this.#cost(options?.cost);
    const group = this.#group(key, options?.tenant);
    const maxWait = options?.maxWait === undefined ? Infinity : checkMs("maxWait", options.maxWait, true);
    const jitter = options?.jitter === undefined ? 0 : checkMs("jitter", options.jitter, false);
    this.#limits.checkCost(cost, group.tenant);
    const step = (d, waited, max, drawn) => waitStep(d.allowed, d.retryAfter, d.delay, waited, max, drawn);
    const timers = options?.[TIMERS];
    const clock = timers?.clock ?? (() => performance.now());
    const start = clock();
    // Where the last decision was made: a wait that gives up is counted there.
    let source = "redis";
    let d;
    try {
      d = await waitInLine(this.#lines, group.id, {
        maxWait,
        signal: options?.signal,
        clock,
        // `left` ms before the deadline (LOOK: keep nothing), sent with the request: the round
        // (or the module's MAXDELAY) keeps the charge only as the core's rule says.
        decide: async (left) => {
          const d = this.#rounds.remembered(group, cost) ?? (await this.#rounds.submit(group, OP_ACQUIRE, cost, left));
          source = d.source;
          return d;
        },
        step,
        jitter: () => (jitter === 0 || timers !== undefined ? jitter : Math.random() * jitter),
        wait: timers?.sleep,
      });
    } catch (e) {
      if (e instanceof WaitTimeoutError) this.#waited(source, false, clock() - start, cost);
      throw e;
    }
    this.#waited(d.source, true, clock() - start, cost, d);
    return d;
  }

  /** Counts a finished wait of `cost` (one decision at `source`, the histogram, the slots taken) and tells the listeners. */
  #waited(source, admitted, ms, cost, d) {
    this.#limits.waited(sourceIndex(source), admitted, ms, d?.limit ?? 0, d?.remaining ?? 0, cost);
    notifyWait(this[WAIT_LISTENERS], admitted, ms, undefined);
  }

  /**
   * Wraps the async function `fn`: each call waits for a turn (`acquire` with `options`:
   * `key`, a string or a function of the call's arguments, default `"default"`; `cost`,
   * `maxWait`, `signal`, `tenant`, `jitter`), then calls `fn` with the same `this` and
   * arguments and returns its result. A timeout rejects with `WaitTimeoutError` and does not
   * call `fn`.
   */
  throttle(fn, options) {
    return throttled(this, fn, options);
  }

  /**
   * Reserves `estimate` for `key`: a decision that charges it as `check` does and, when
   * admitted by Redis, carries the `reservation` to settle with the real cost (`settle`),
   * in this process or any other of the same namespace and limits, Node or Rust
   * (tollgate-redis). A denial, or an admission by the fallback (nothing was charged on
   * Redis), carries none. A leaky queue refuses reserves (`not-settleable`).
   */
  async reserve(key, estimate) {
    this.#limits.checkReservable();
    const cost = checkCount("estimate", estimate);
    const group = this.#group(key, undefined);
    this.#limits.checkCost(cost, undefined);
    const remembered = this.#rounds.remembered(group, cost);
    if (remembered !== undefined) {
      this.#limits.record(DENY_CACHE, false, remembered.limit, remembered.remaining, cost);
      return remembered;
    }
    const reserve = { at: undefined };
    const d = await this.#rounds.submit(group, OP_CHECK, cost, Infinity, reserve);
    if (d.allowed && d.source === "redis" && reserve.at !== undefined) {
      d.reservation = {
        key,
        id: String(reservationId()),
        limiter: this.#issuer,
        policies: this.#fingerprint,
        keyHash: String(FleetLimits.stableHash(key)),
        estimate: cost,
        at: String(reserve.at),
      };
    }
    return d;
  }

  /**
   * Settles `reservation` (from `reserve`, by this process or another of the same namespace
   * and limits) with the `actual` cost, at Redis's clock: gives back `estimate - actual` or
   * charges `actual - estimate` by each limit's rule (the core's), all or nothing, recorded
   * in Redis with the change so that it settles once in the fleet: settling it again, from
   * any process, answers the first settle and charges nothing. Refused by name before any
   * round trip: a reservation of another key, limits or namespace (`foreign-key`,
   * `foreign-policy`, `foreign-limiter`), an `actual` that is not a whole number or above
   * the core's bound. Rejects with a `RedisLimiterError` of code `settle-unknown` (`why`)
   * when Redis is unavailable or its answer was lost (never settled by the fallback: settle
   * again with the same reservation), `contended` after `retryFor` of conflicting writes.
   */
  async settle(reservation, actual, options) {
    checkReservation(reservation);
    const units = checkCount("actual", actual);
    const upTo = upToLimit(options?.overage);
    const r = reservation;
    this.#limits.checkSettle(BigInt(this.#issuer), BigInt(r.limiter), BigInt(r.policies), BigInt(r.keyHash), r.key, units);
    const group = this.#group(r.key, undefined);
    const answer = await settleOnRedis(this.#rounds.ways, this.#limits, this.#o, group, r, units, upTo);
    // A refund frees room: a denial remembered for the key may no longer hold.
    if (answer.refunded > 0) this.#rounds.forget(r.key);
    return answer;
  }

  /** Gives back `cost` (default 1) slots of the concurrency limits for `key`. */
  async release(key, options) {
    const cost = this.#cost(options?.cost);
    await this.#rounds.submit(this.#group(key, undefined), OP_RELEASE, cost);
    this.#limits.released(cost);
  }

  /** Forgets `key` in every limit of the stack (tenant windows expire by themselves); whether anything was stored. */
  async reset(key) {
    const group = this.#group(key, undefined);
    this.#rounds.forget(key);
    if (this.#o.fallback === "local") this.#limits.localReset(key);
    this.#stats.roundTrips++;
    try {
      return number(await this.#call(["DEL", ...group.keys])) > 0;
    } catch (e) {
      throw e instanceof Timeout ? new RedisLimiterError("redis", "redis: reset timed out") : fatal(e);
    }
  }

  /** Where decisions were made so far: `{ redis, denyCache, fallback, indeterminate, conflicts, roundTrips }`. */
  stats() {
    return { ...this.#stats };
  }

  /**
   * What the limiter decided so far, in the core's metric model (as `Limiter.metrics()` of
   * `tollgate`): decisions by outcome and source (`store`: Redis or its module decided;
   * `denyCache`; `fallback`), store failures by the declared fallback and reason, waits.
   * One counts object, in an array.
   */
  metrics() {
    const inUse = this.#limits.concurrencyInUse(); // -1: no concurrency limit
    return [countsObject(this.#o.name, undefined, this.#limits.counts(), inUse < 0 ? undefined : inUse)];
  }

  /** `metrics()` as Prometheus text (the core's names and rendering). */
  prometheus() {
    return prometheus([this]);
  }

  /** Frees the wasm memory now (otherwise at garbage collection). */
  free() {
    this.#limits.free();
  }
}
