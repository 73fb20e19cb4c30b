// tollgate/redis: RedisPlans, limits that depend on who calls, on the Redis fleet (see
// ../redis.js). The rule is the core's (wasm FleetPlans, crates/wasm/src/fleet/plans.rs:
// tollgate::store::fleet::plan), the keys, values and scripts the Rust client's
// (crates/redis/src/plans.rs), so Node and Rust processes share one caller's count:
//   the module   one TOLLGATE.PLAN per check, decided atomically inside Redis;
//   the scripts  read.lua reads the caller's slots and override, the core decides here,
//                commit.lua writes only if no slot, and not the override, changed since.
// No deny cache: a remembered denial would outlive an override that raised the limit. No
// merged rounds: a check is one round trip (module) or two (scripts).

import glue from "./tollgate_wasm.cjs";
import { adapter, number, text, toBuffer } from "./clients.js";
import { Deadlines, Timeout } from "./deadlines.js";
import { RedisLimiterError, Unavailable, fatal, keyed, optionError } from "./errors.js";
import { FleetLimits, answerDecision, classify } from "./fleet.js";
import { Scripts } from "./merged.js";
import { readOptions } from "./options.js";
import { checkDecision } from "../web/checks.js";
import { eachNumbers } from "../web/decision.js";

const { FleetPlans } = glue;

/** FleetPlans.fallback's modes (crates/wasm/src/fleet/plans.rs). */
const FALLBACK_MODE = { open: 0, closed: 1, local: 2 };

/**
 * A decision made by the caller's own limits (an override of limits) keeps them here (not
 * enumerable: not in the decision's shape), as they were read at the decision, for its
 * headers; a plan's decision needs nothing hidden: its `plan` names its limits.
 */
const OWN = Symbol("tollgate.ownLimits");

/** What FleetPlans.headers takes for a decision made by the caller's own limits (not a plan). */
const OWN_LIMITS = -1;

/** Where a TOLLGATE.PLAN reply says whether the caller's override decided: after the six fields and each limit's. */
const OVERRIDDEN = 7;

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** The `plans` option as the core takes it: the names, how many policies each has, the policies. */
function flatten(plans) {
  if (plans === null || typeof plans !== "object" || Array.isArray(plans)) {
    throw optionError(TypeError, "plans", plans, "not-an-object",
      'must be an object of plan names to a policy or a list of policies, like { free: "100/min", pro: ["1000/min", "50/s"] }');
  }
  const names = [];
  const counts = [];
  const policies = [];
  for (const [name, p] of Object.entries(plans)) {
    const list = Array.isArray(p) ? p : [p];
    list.forEach((q, i) => {
      if (typeof q !== "string") {
        throw optionError(TypeError, Array.isArray(p) ? `plans.${name}[${i}]` : `plans.${name}`, q, "not-a-string", 'must be a policy string like "100/min"');
      }
    });
    names.push(name);
    counts.push(list.length);
    policies.push(...list);
  }
  return [names, Uint32Array.from(counts), policies];
}

/** A Uint8Array from wasm as a Buffer (the clients send Buffers as bytes). */
const bytes = (u8) => Buffer.from(u8.buffer, u8.byteOffset, u8.byteLength);

/** A fleet-wide limiter whose limits depend on the caller: named plans, and per-caller overrides stored in Redis. See redis.d.ts. */
export class RedisPlans {
  #o;
  #call;
  #core;
  #names;
  #default;
  /** A caller's keys' suffixes: its slots, then its override's (the core's). */
  #suffixes;
  #scripts;
  /** Whether the server has `TOLLGATE.PLAN`: undefined until asked (again after it lost it). */
  #module;
  #downUntil = 0;
  #epoch = performance.now();
  /** Key -> the end of this process's checks of it: one after the other, so that they do not conflict with each other. */
  #turns = new Map();
  #stats = { redis: 0, fallback: 0, indeterminate: 0, conflicts: 0, roundTrips: 0 };

  constructor(client, options) {
    if (options === null || typeof options !== "object") {
      throw optionError(TypeError, "options", options, "not-an-object", 'must be an object like { plans: { free: "100/min" }, namespace, fallback }');
    }
    const send = adapter(client);
    const o = (this.#o = readOptions(options));
    const deadlines = new Deadlines(o.timeout);
    this.#call = (args) => deadlines.watch(send(args));
    const [names, counts, policies] = flatten(options.plans);
    this.#core = new FleetPlans(names, counts, policies, o.localMaxKeys);
    this.#core.timesToLive(o.grace, o.lease, o.clock !== undefined);
    this.#names = this.#core.names();
    const fallback = options.default ?? this.#names[0];
    if (typeof fallback !== "string" || !this.#names.includes(fallback)) {
      throw optionError(TypeError, "default", fallback, "unknown-plan", `must name one of the plans (${this.#names.join(", ")})`);
    }
    this.#default = fallback;
    this.#suffixes = this.#core.suffixes();
    this.#scripts = new Scripts(this.#call, false, this.#stats);
    if (!o.useModule) this.#module = false;
  }

  /** The plans' names, in the order given. */
  get plans() {
    return [...this.#names];
  }

  /** The plan of a check that names none (the `default` option, else the first plan). */
  get defaultPlan() {
    return this.#default;
  }

  /** The policies of the plan called `name`, in canonical form (stack order). */
  policiesOf(name) {
    const i = this.#names.indexOf(name);
    if (i < 0) throw optionError(TypeError, "plan", name, "unknown-plan", `must name one of the plans (${this.#names.join(", ")})`);
    return this.#core.policies(i);
  }

  /** `<prefix>:{<namespace>:<key>}` (the core's key part: `%` and `}` encoded, the bound on a key's bytes checked). */
  #base(key) {
    if (typeof key !== "string") throw optionError(TypeError, "key", key, "not-a-string", "must be a string");
    return `${this.#o.head}${FleetLimits.keyPart(key)}}`;
  }

  /**
   * Decides a request of `opts.cost` (default 1) for the caller `key`, whose call names the
   * plan `plan` (`undefined`: the default plan): under the caller's override when it has one
   * (set by any process), else under the plan; its states carried to those limits first
   * when another plan wrote them (spend is kept). A decision with `plan` (the plan that
   * decided; `null` for the caller's own limits), `overridden`, `each` and `source`.
   */
  async check(key, plan, opts) {
    const base = this.#base(key);
    const asked = plan === undefined || plan === null ? this.#default : plan;
    if (typeof asked !== "string") throw optionError(TypeError, "plan", plan, "not-a-string", "must be a plan's name");
    const cost = opts?.cost === undefined ? 1 : opts.cost;
    if (typeof cost !== "number" || !Number.isInteger(cost)) throw optionError(TypeError, "cost", cost, "not-a-number", "must be a whole number");
    if (cost < 0) throw optionError(RangeError, "cost", cost, "negative", "must be 0 or more");
    // The plan checked (and its arguments made) before any round trip: an unknown plan throws.
    const args = this.#core.moduleArgs(asked, cost);
    if (this.#downUntil !== 0) {
      if (performance.now() < this.#downUntil) return this.#fallBack(key, asked, cost, "unreachable");
      this.#downUntil = 0; // time to probe: this check tries Redis again
    }
    try {
      if (this.#module === undefined) this.#module = await this.#ask();
      const d = this.#module ? await this.#inModule(base, asked, args, cost) : await this.#inTurn(key, () => this.#byScripts(base, asked, cost));
      this.#stats.redis++;
      return d;
    } catch (e) {
      if (!(e instanceof Unavailable)) throw e;
      this.#downUntil = performance.now() + this.#o.probeEvery;
      return this.#fallBack(key, asked, cost, e.why);
    }
  }

  /** Whether the server has tollgate's module: `COMMAND INFO tollgate.plan`; undefined (ask again) when it did not answer. */
  async #ask() {
    try {
      const reply = await this.#call(["COMMAND", "INFO", "tollgate.plan"]);
      return Array.isArray(reply) && Array.isArray(reply[0]);
    } catch {
      return undefined; // the read that follows reports the failure
    }
  }

  /** Runs `fn` after this process's earlier checks of `key` (without it, concurrent checks of one caller read one version and all but one conflict). */
  async #inTurn(key, fn) {
    const before = this.#turns.get(key);
    let done;
    const mine = new Promise((resolve) => (done = resolve));
    this.#turns.set(key, mine);
    try {
      if (before !== undefined) await before;
      return await fn();
    } finally {
      done();
      if (this.#turns.get(key) === mine) this.#turns.delete(key);
    }
  }

  /** One `TOLLGATE.PLAN`; an overridden caller's plan read back from its override (one more round trip). */
  async #inModule(base, asked, args, cost) {
    const command = ["TOLLGATE.PLAN", base, ...args];
    const now = this.#o.clock?.();
    if (now !== undefined) command.push("NOW", String(now)); // a server loaded with TESTCLOCK
    this.#stats.roundTrips++;
    let reply;
    try {
      reply = await this.#call(command);
    } catch (e) {
      const c = classify(e, true);
      if (c instanceof Unavailable) {
        this.#stats.indeterminate++;
        throw c;
      }
      const message = String(e?.message);
      // The server lost the module (restarted without it): ask again at the next check.
      if (/unknown command/i.test(message)) this.#module = undefined;
      // A cost above the limits the module decided under (the override's, which only it
      // read): the core's own error and sentence, as the scripts path throws it.
      const refused = /^(?:ERR )?(cost-exceeds-capacity): (.*)$/.exec(message);
      if (refused !== null) {
        const error = new RangeError(`${refused[2]} [${refused[1]}]`);
        throw Object.assign(error, { field: "cost", rule: refused[1], value: cost });
      }
      throw c;
    }
    if (!Array.isArray(reply) || !Array.isArray(reply[6])) throw new RedisLimiterError("redis", "redis: unexpected module reply");
    const fields = [];
    for (const f of [reply.slice(0, 6), ...reply[6]]) {
      if (!Array.isArray(f) || f.length < 6) throw new RedisLimiterError("redis", "redis: unexpected module reply");
      for (let j = 0; j < 6; j++) fields.push(number(f[j]));
    }
    const out = this.#core.moduleAnswer(Float64Array.from(fields));
    if (out.length === 0) throw new RedisLimiterError("redis", "redis: unexpected module reply");
    const d = answerDecision(out, "redis");
    d.overridden = number(reply[OVERRIDDEN]) === 1;
    d.plan = asked;
    if (d.overridden) {
      // The reply says only that the override decided: its plan is read back (undefined if
      // that read fails: the decision stands, charged).
      const o = await this.#override(base + this.#suffixes[this.#suffixes.length - 1]).catch(() => undefined);
      d.plan = o === undefined ? undefined : o[0] === "plan" ? o[1] : null;
      if (d.plan === null) Object.defineProperty(d, OWN, { value: o.slice(1) });
    }
    return d;
  }

  /** Read the caller's slots and override, decide in the core, commit if none changed since; on a conflict decide again on what it answered, for up to `retryFor`. */
  async #byScripts(base, plan, cost) {
    const keys = this.#suffixes.map((s) => base + s);
    const started = performance.now();
    let reply;
    try {
      reply = await this.#scripts.read(keys);
    } catch (e) {
      throw classify(e, false);
    }
    let at = 0;
    let retries = 0;
    for (;;) {
      if (!Array.isArray(reply) || reply.length !== at + keys.length + 2) throw new RedisLimiterError("redis", "redis: unexpected script reply");
      let secs = number(reply[at]);
      let micros = number(reply[at + 1]);
      const clock = this.#o.clock?.();
      if (clock !== undefined) {
        secs = Math.floor(clock / 1000);
        micros = (clock % 1000) * 1000;
      }
      const values = keys.map((_, i) => toBuffer(reply[at + 2 + i]));
      let decided;
      try {
        decided = this.#core.decide(plan, values, secs, micros, cost);
      } catch (e) {
        throw keyed({ keys }, e);
      }
      const [numbers, by, commit] = decided;
      const d = answerDecision(numbers, "redis");
      d.plan = by;
      d.overridden = values[values.length - 1].length > 0;
      if (by === null) Object.defineProperty(d, OWN, { value: this.#core.decodeOverride(values[values.length - 1]).slice(1) });
      if (commit === undefined) return d;
      let answer;
      try {
        answer = await this.#scripts.commit(keys, commit.map(bytes));
      } catch (e) {
        const c = classify(e, true);
        // The commit may have been applied: never sent again; the fallback decides.
        if (c instanceof Unavailable) this.#stats.indeterminate++;
        throw c;
      }
      const status = Array.isArray(answer) ? text(answer[0]) : undefined;
      if (status === "ok") return d;
      if (status !== "conflict") throw new RedisLimiterError("redis", "redis: unexpected script reply");
      this.#stats.conflicts++;
      const waited = performance.now() - started;
      if (waited >= this.#o.retryFor) {
        throw new RedisLimiterError("contended", `gave up after ${Math.round(waited)} ms of conflicting writes by other clients`, { waited });
      }
      retries++;
      await sleep(Math.random() * Math.min(retries, 10));
      reply = answer;
      at = 1;
    }
  }

  /** The declared fallback's decision (`local`: this process's own plan limiter, which knows no override). */
  #fallBack(key, plan, cost, why) {
    this.#stats.fallback++;
    const out = this.#core.fallback(FALLBACK_MODE[this.#o.fallback], key, plan, performance.now() - this.#epoch, cost, Math.ceil(this.#o.probeEvery));
    const d = answerDecision(out, "fallback", why);
    d.plan = plan;
    d.overridden = false;
    return d;
  }

  /** An override command (`SET`, `GET`, `DEL`) within the timeout; a failure is the caller's error (no fallback sets an override). */
  async #admin(args) {
    this.#stats.roundTrips++;
    try {
      return await this.#call(args);
    } catch (e) {
      throw e instanceof Timeout ? new RedisLimiterError("redis", `redis: ${args[0]} of an override timed out`) : e instanceof RedisLimiterError ? e : fatal(e);
    }
  }

  /** The override stored at `name`, decoded by the core: `["plan", name]`, `["limits", ...]`, or undefined. */
  async #override(name) {
    const value = await this.#admin(["GET", name]);
    try {
      return this.#core.decodeOverride(toBuffer(value)) ?? undefined;
    } catch (e) {
      throw keyed({ keys: [name] }, e);
    }
  }

  #overrideKey(key) {
    return this.#base(key) + this.#suffixes[this.#suffixes.length - 1];
  }

  /**
   * Gives the caller `key` another plan (`{ plan: "pro" }`) or limits of its own (`{ limits:
   * ["5/s"] }`, or one policy string), stored in Redis resolved (a plan's policies as they
   * are now), without expiry: every process's next check of `key` decides under it.
   */
  async set(key, what) {
    const name = this.#overrideKey(key);
    if (what === null || typeof what !== "object" || (what.plan === undefined) === (what.limits === undefined)) {
      throw optionError(TypeError, "override", what, "not-an-override", 'must be { plan: "pro" } or { limits: ["5/s"] }');
    }
    let value;
    if (what.plan !== undefined) {
      if (typeof what.plan !== "string") throw optionError(TypeError, "override.plan", what.plan, "not-a-string", "must be a plan's name");
      value = this.#core.encodeOverride(what.plan, undefined);
    } else {
      const limits = Array.isArray(what.limits) ? what.limits : [what.limits];
      limits.forEach((l, i) => {
        if (typeof l !== "string") throw optionError(TypeError, `override.limits[${i}]`, l, "not-a-string", 'must be a policy string like "5/s"');
      });
      value = this.#core.encodeOverride(undefined, limits);
    }
    await this.#admin(["SET", name, bytes(value)]);
  }

  /** The caller `key`'s override: `{ plan }` or `{ limits }` (canonical policies), or `undefined`. */
  async get(key) {
    const o = await this.#override(this.#overrideKey(key));
    if (o === undefined) return undefined;
    return o[0] === "plan" ? { plan: o[1] } : { limits: o.slice(1) };
  }

  /** Clears the caller `key`'s override (its next check, in any process, is under the plan it names, its spend carried); whether it had one. */
  async clear(key) {
    return number(await this.#admin(["DEL", this.#overrideKey(key)])) > 0;
  }

  /**
   * What made `decision` (a decision of this limiter's `check`): the plan's index (or
   * OWN_LIMITS), the caller's own limits, and each limit's decision as the core reads them.
   * A decision whose override could not be read back (`plan` undefined) names no limits.
   */
  #madeBy(decision) {
    checkDecision(decision);
    const own = decision[OWN];
    const by = own !== undefined ? OWN_LIMITS : this.#names.indexOf(decision.plan);
    if (own === undefined && by < 0) {
      throw optionError(TypeError, "decision", decision.plan, "not-a-plan-decision", "must be a decision of this RedisPlans' check()");
    }
    return [by, own, eachNumbers(decision.each ?? [decision])];
  }

  /**
   * The response headers for a decision of this limiter, as a `PlanLimiter`'s (the core's
   * one rule): `RateLimit-Policy` and `RateLimit` of the limits that made it, named by their
   * plan (`"pro"`, or `"pro.1"`, `"pro.2"` for a stack; `"own"` for a caller's own limits),
   * `Retry-After` and `Cache-Control: no-store` when denied (and `X-RateLimit-*` with
   * `legacy`). A fallback's decision is described by the plan the call named.
   */
  headers(decision, options) {
    const [by, own, each] = this.#madeBy(decision);
    const flat = this.#core.headers(by, own, each, options?.legacy === true);
    const out = {};
    for (let i = 0; i < flat.length; i += 2) out[flat[i]] = flat[i + 1];
    return out;
  }

  /** The application/problem+json body of a 429 for a denied decision (`undefined` when allowed). */
  problem(decision) {
    const [by, own, each] = this.#madeBy(decision);
    return this.#core.quotaExceeded(by, own, each);
  }

  /** Where decisions were made so far: `{ redis, fallback, indeterminate, conflicts, roundTrips }`. */
  stats() {
    return { ...this.#stats };
  }

  /** Frees the wasm memory now (otherwise at garbage collection). */
  free() {
    this.#core.free();
  }
}
