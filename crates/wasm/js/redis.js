// tollgate/redis: one exact limit for a fleet of Node (and Rust) processes sharing one Redis.
// The core (wasm, FleetLimits) makes every decision and holds the fleet protocol's rules
// (tollgate::store::fleet: the key layout, the stored values, their times to live, which
// failures fall back and the fallback's decisions); this file moves the bytes, as the Rust
// crate tollgate-redis does: the same keys, the same values and the same two Lua scripts
// (read, then a compare-and-set commit), so Node and Rust processes can share one limit.
// See index.d.ts (redis.d.ts) and crates/redis/src/lib.rs for the design.

import { WaitTimeoutError, checkMs, throttled } from "./web/api.js";
import { waitInLine, LOOK, TIMERS } from "./web/waiting.js";
import { WAIT_LISTENERS, behaviourIndex, countsObject, notifyWait, reasonIndex, sourceIndex } from "./web/counts.js";
import { prometheus } from "./metrics.js";
import { adapter, oneServer, number, text } from "./redis/clients.js";
import { Deadlines, Timeout } from "./redis/deadlines.js";
import { RedisLimiterError, Unavailable, fatal, optionError } from "./redis/errors.js";
import {
  FleetLimits,
  waitStep,
  FAILED,
  RELEASED,
  OP_CHECK,
  OP_PEEK,
  OP_RELEASE,
  OP_ACQUIRE,
  classify,
  commitArgs,
  decide,
  decisionAt,
  deniedAnswer,
  fallbackDecision,
  fleetLimits,
  moduleAnswer,
  readReply,
  releaseError,
} from "./redis/fleet.js";
import { Group } from "./redis/group.js";
import { Scripts } from "./redis/merged.js";
import { TESTING, readOptions } from "./redis/options.js";

export { WaitTimeoutError, RedisLimiterError, TESTING, prometheus };

/** The core's `Source` index of the deny cache and the fallback. */
const DENY_CACHE = 1;
const FALLBACK = 2;

/** The module's command for each request kind. */
const MODULE_COMMAND = ["TOLLGATE.CHECK", "TOLLGATE.PEEK", "TOLLGATE.RELEASE", "TOLLGATE.CHECK"];


function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * A fleet-wide limiter on Redis. See redis.d.ts.
 */
export class RedisLimiter {
  /** The options, checked (redis/options.js): `head` (what every key's base starts with), `fallback`, `timeout`, ... */
  #o;
  #send;
  /** The protocol's two scripts ({@link Scripts}). */
  #scripts;
  #limits;
  /** The smallest capacity of the limits. */
  #capacity;
  #base;
  #fair;
  #deadlines;
  /** Whether the server has tollgate's module: undefined until asked (once). */
  #module;
  /** The module commands' limiter arguments without a tenant (made once). */
  #moduleArgs;
  #epoch = performance.now();
  #groups = new Map();
  /** `acquire`'s lines of waiters: group id -> waiters, the first deciding. */
  #lines = new Map();
  /** How many denials the deny cache held when last told (never fewer than it holds: 0 skips asking it). */
  #denials = 0;
  #downUntil = 0;
  #stats = { redis: 0, denyCache: 0, fallback: 0, indeterminate: 0, conflicts: 0, roundTrips: 0 };
  /** Called when an `acquire` ends (the OpenTelemetry adapter's histogram). */
  [WAIT_LISTENERS] = new Set();

  constructor(client, spec, options) {
    if (options === null || typeof options !== "object") {
      throw optionError(TypeError, "options", options, "not-an-object", "must be an object like { namespace, fallback }");
    }
    this.#send = adapter(client);
    this.#scripts = new Scripts((args) => this.#call(args), oneServer(client), this.#stats);
    const o = (this.#o = readOptions(options));
    this.#deadlines = new Deadlines(o.timeout);
    this.#limits = fleetLimits(spec, o.localMaxKeys);
    this.#limits.timesToLive(this.#o.grace, this.#o.lease, this.#o.clock !== undefined);
    this.#base = this.#limits.slots(undefined);
    this.#capacity = this.#limits.capacity();
    const policies = this.#limits.policies();
    this.#fair = policies.length > this.#base.length;
    this.#moduleArgs = this.#fair ? [policies[0]] : policies.length === 1 ? policies : ["STACK", String(policies.length), ...policies];
  }

  /** The limits in canonical compact form, in slot order (a fair share's tenant policy last). */
  get policies() {
    return this.#limits.policies();
  }

  /**
   * A key's name without its slot, `<prefix>:{<namespace>:<key>}` (the core's KeyLayout::base;
   * the module's `<base>`): the head, the key with `%` and `}` percent-encoded by the core
   * (`keyPart`; keys without them are used as they are, without a call), and the tag's end.
   */
  #baseKey(key) {
    const part = key.includes("}") || key.includes("%") ? FleetLimits.keyPart(key) : key;
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
    const remembered = this.#remembered(group, cost);
    if (remembered !== undefined) {
      this.#limits.record(DENY_CACHE, false, remembered.limit, remembered.remaining);
      return remembered;
    }
    return this.#submit(group, OP_CHECK, cost);
  }

  /** The key's standing without charging it. */
  async peek(key, options) {
    return this.#submit(this.#group(key, options?.tenant), OP_PEEK, 0);
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
          const d = this.#remembered(group, cost) ?? (await this.#submit(group, OP_ACQUIRE, cost, left));
          source = d.source;
          return d;
        },
        step,
        jitter: () => (jitter === 0 || timers !== undefined ? jitter : Math.random() * jitter),
        wait: timers?.sleep,
      });
    } catch (e) {
      if (e instanceof WaitTimeoutError) this.#waited(source, false, clock() - start);
      throw e;
    }
    this.#waited(d.source, true, clock() - start, d);
    return d;
  }

  /** Counts a finished wait (one decision at `source`, and the histogram) and tells the listeners. */
  #waited(source, admitted, ms, d) {
    this.#limits.waited(sourceIndex(source), admitted, ms, d?.limit ?? 0, d?.remaining ?? 0);
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

  /** Gives back `cost` (default 1) slots of the concurrency limits for `key`. */
  async release(key, options) {
    await this.#submit(this.#group(key, undefined), OP_RELEASE, this.#cost(options?.cost));
  }

  /** Forgets `key` in every limit of the stack (tenant windows expire by themselves); whether anything was stored. */
  async reset(key) {
    const group = this.#group(key, undefined);
    this.#denials = this.#limits.forget(key);
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
    return [countsObject(this.#o.name, undefined, this.#limits.counts())];
  }

  /** `metrics()` as Prometheus text (the core's names and rendering). */
  prometheus() {
    return prometheus([this]);
  }

  /** Counts a failed store call (`why`: unreachable, timeout, indeterminate), after which the declared fallback decides. */
  #failed(why) {
    this.#limits.recordFailure(behaviourIndex(this.#o.fallback), reasonIndex(why));
  }

  /** Frees the wasm memory now (otherwise at garbage collection). */
  free() {
    this.#limits.free();
  }

  /** One command, bounded by the timeout (a late answer is ignored). */
  #call(args) {
    return this.#deadlines.watch(this.#send(args));
  }

  /**
   * A denial remembered for `group` that still holds for `cost` (not under a test clock):
   * the deny cache is the core's (FleetLimits.denied: tollgate::store::DenyCache, the Rust
   * crate's and the edge worker's), its waits counted down.
   */
  #remembered(group, cost) {
    if (this.#denials === 0 || !this.#o.denyCache || this.#o.clock !== undefined) return undefined;
    const out = deniedAnswer(this.#limits, group, cost, performance.now());
    if (out === undefined) return undefined;
    this.#stats.denyCache++;
    return decisionAt(out, 0, (out.length - 7) / 6, "deny-cache");
  }

  /**
   * Remembers the answer `numbers` (a decision's six numbers and each limit's) decided for
   * `group` and `cost` on a read sent at `sent`: the core keeps a denial with a retry time,
   * until a lower bound of it (the whole ms were rounded up).
   */
  #remember(group, cost, sent, numbers) {
    if (this.#o.denyCache && this.#o.clock === undefined) this.#denials = this.#limits.remember(group.key, group.tenant, cost, sent, numbers);
  }

  /** Queues a request for its group; the first of an idle group runs the group's rounds. */
  #submit(group, kind, cost, maxDelay = Infinity) {
    return new Promise((resolve, reject) => {
      const pending = { kind, cost, maxDelay, resolve, reject };
      const queue = this.#groups.get(group.id);
      if (queue !== undefined) {
        queue.push(pending);
        return;
      }
      this.#groups.set(group.id, []);
      this.#run(group, [pending]);
    });
  }

  /** Serves a group until its queue is empty, one round (every request queued so far) at a time. */
  async #run(group, round) {
    for (;;) {
      try {
        await this.#round(group, round);
      } catch (e) {
        for (const p of round) p.reject(e);
      }
      const queue = this.#groups.get(group.id);
      if (queue.length === 0) {
        this.#groups.delete(group.id);
        return;
      }
      round = queue.splice(0);
    }
  }

  /** One round: read the slots, decide every queued request in order, commit (retrying on conflicts), answer. */
  async #round(group, round) {
    const n = group.keys.length;
    if (this.#downUntil !== 0) {
      if (performance.now() < this.#downUntil) return this.#fallBack(group, round, "unreachable");
      this.#downUntil = 0; // time to probe: this round tries Redis again
    }
    if (this.#o.useModule && (this.#module ?? (await this.#hasModule()))) return this.#moduleRound(group, round);
    const started = performance.now();
    let reply;
    try {
      reply = await this.#scripts.read(group.keys);
    } catch (e) {
      const c = classify(e, false);
      if (!(c instanceof Unavailable)) throw c;
      this.#failed(c.why);
      this.#downUntil = performance.now() + this.#o.probeEvery;
      return this.#fallBack(group, round, c.why);
    }
    let read = readReply(group, reply, 0, this.#o.clock);
    let sent = started;
    let retries = 0;
    const stride = 1 + 6 * (1 + n);
    for (;;) {
      let out;
      try {
        out = decide(this.#limits, group, read, round);
      } catch (e) {
        if (e?.rule === "corrupt-state") {
          throw new RedisLimiterError("corrupt-state", `key ${group.keys[e.value]}: ${e.message}`, { key: group.keys[e.value] });
        }
        throw e;
      }
      // The errors of failed requests are taken now: the next round's decide replaces them.
      let errors;
      for (let i = 0; i < round.length; i++) {
        if (out[i * stride] === FAILED) (errors ??= [])[i] = this.#limits.error(i);
      }
      const args = commitArgs(this.#limits, read.versions, out, round.length * stride, this.#o.blind);
      if (args !== undefined) {
        let answer;
        try {
          answer = await this.#scripts.commit(group.keys, args);
        } catch (e) {
          const c = classify(e, true);
          if (!(c instanceof Unavailable)) throw c;
          // The commit may have been applied: never sent again; the fallback decides.
          this.#stats.indeterminate++;
          this.#failed(c.why);
          this.#downUntil = performance.now() + this.#o.probeEvery;
          return this.#fallBack(group, round, c.why);
        }
        const status = Array.isArray(answer) ? text(answer[0]) : undefined;
        if (status === "conflict") {
          this.#stats.conflicts++;
          const waited = performance.now() - started;
          if (waited >= this.#o.retryFor) {
            throw new RedisLimiterError("contended", `gave up after ${Math.round(waited)} ms of conflicting writes by other clients`, { waited });
          }
          retries++;
          // Jitter: clients that collided do not collide again in step.
          await sleep(Math.random() * Math.min(retries, 10));
          read = readReply(group, answer, 1, this.#o.clock);
          sent = performance.now();
          continue;
        }
        if (status !== "ok") throw new RedisLimiterError("redis", "redis: unexpected script reply");
      }
      for (let i = 0; i < round.length; i++) {
        const p = round[i];
        const at = i * stride;
        const status = out[at];
        if (status === FAILED) p.reject(errors[i]);
        else if (status === RELEASED) p.resolve(undefined);
        else {
          const d = decisionAt(out, at, n, "redis");
          if (p.kind === OP_CHECK || p.kind === OP_ACQUIRE) {
            this.#stats.redis++;
            if (!d.allowed) this.#remember(group, p.cost, sent, out.slice(at + 1, at + stride));
          }
          if (p.kind === OP_CHECK) this.#limits.record(0, d.allowed, d.limit, d.remaining);
          p.resolve(d);
        }
      }
      return;
    }
  }

  /** Whether to decide with the server's module (asked once, with `COMMAND INFO tollgate.check`). */
  async #hasModule() {
    if (!this.#o.useModule) return false;
    if (this.#module !== undefined) return this.#module;
    let reply;
    try {
      reply = await this.#call(["COMMAND", "INFO", "tollgate.check"]);
    } catch {
      return false; // not known yet: the read that follows reports the failure
    }
    this.#module = Array.isArray(reply) && Array.isArray(reply[0]);
    return this.#module;
  }

  /** The limiter's arguments of a module command: the policy, a stack, or a fair share's shared policy and tenant window. */
  #moduleLimits(tenant) {
    if (tenant === undefined) return this.#moduleArgs;
    const policies = this.#limits.policies();
    return [policies[0], "TENANT", tenant, policies[1]];
  }

  /**
   * One round in the module: every queued request one command, all sent at once (one round
   * trip, pipelined by the client), each decided atomically inside Redis.
   */
  async #moduleRound(group, round) {
    const limits = this.#moduleLimits(group.tenant);
    const now = this.#o.clock?.();
    const sent = performance.now();
    this.#stats.roundTrips++;
    if (round.length === 1) return this.#moduleCommand(group, round[0], limits, now, sent);
    await Promise.all(round.map((p) => this.#moduleCommand(group, p, limits, now, sent)));
  }

  /** One request's module command, answered (or decided by the fallback when its answer was lost). */
  async #moduleCommand(group, p, limits, now, sent) {
    const args = [MODULE_COMMAND[p.kind], group.base, ...limits];
    if (p.kind !== OP_PEEK && p.cost !== 1) args.push("COST", String(p.cost));
    if (p.kind === OP_ACQUIRE && p.maxDelay === LOOK) {
      // A waiter's look: what the request would get, nothing kept (PEEK with its COST).
      args[0] = "TOLLGATE.PEEK";
      if (p.cost === 1) args.push("COST", "1");
    } else if (p.kind === OP_ACQUIRE && p.maxDelay !== Infinity) args.push("MAXDELAY", String(p.maxDelay));
    if (now !== undefined) args.push("NOW", String(now)); // a server loaded with TESTCLOCK
    let value;
    try {
      value = await this.#call(args);
    } catch (error) {
      const c = classify(error, true);
      if (c instanceof Unavailable) {
        // The command may have run: never sent again; the fallback decides it.
        this.#stats.indeterminate++;
        this.#failed(c.why);
        this.#downUntil = performance.now() + this.#o.probeEvery;
        return this.#fallBack(group, [p], c.why);
      }
      const message = String(error.message);
      // The server lost the module (restarted without it): ask again next round.
      if (/unknown command/i.test(message)) this.#module = undefined;
      // A release without a concurrency limit: the core's own error, as on the script path.
      if (p.kind === OP_RELEASE && /^(ERR )?not-concurrency/.test(message)) return p.reject(releaseError(this.#limits, group, p.cost));
      return p.reject(fatal(error));
    }
    if (p.kind === OP_RELEASE) return p.resolve(undefined);
    const out = moduleAnswer(this.#limits, value);
    if (out === undefined) return p.reject(new RedisLimiterError("redis", "redis: unexpected module reply"));
    const d = decisionAt(out, 0, (out.length - 7) / 6, "redis");
    if (p.kind !== OP_PEEK) {
      this.#stats.redis++;
      if (!d.allowed) this.#remember(group, p.cost, sent, out.slice(1));
    }
    if (p.kind === OP_CHECK) this.#limits.record(0, d.allowed, d.limit, d.remaining);
    p.resolve(d);
  }

  /** Decides a round with the declared fallback. */
  #fallBack(group, round, why) {
    for (const p of round) {
      try {
        if (p.kind === OP_RELEASE) {
          if (this.#o.fallback === "local" && this.#limits.localRelease(group.key, p.cost) === FAILED) {
            p.reject(this.#limits.error(0));
          } else p.resolve(undefined);
          continue;
        }
        if (p.kind === OP_CHECK || p.kind === OP_ACQUIRE) this.#stats.fallback++;
        const d = fallbackDecision(this.#limits, this.#o.fallback, this.#o.probeEvery, performance.now() - this.#epoch, group, p.cost, why, p.maxDelay);
        if (p.kind === OP_CHECK) this.#limits.record(FALLBACK, d.allowed, d.limit, d.remaining);
        p.resolve(d);
      } catch (e) {
        p.reject(e);
      }
    }
  }

}
