// PlanLimiter (the entry `tollgate/plans`): limits that depend on who calls, over the core's
// plan limiter (the wasm `PlanCore` of its own .wasm, crates/wasm/src/plans.rs). Plans by
// name, each a policy or an all-or-nothing stack; a key's own plan or limits set at run time
// (an override); what a key has spent kept when its plan changes (the core's carry). Every
// decision, carry, override and header rule is the core's; this file checks arguments and
// builds the result objects.
import { checkCost, checkDecision, checkKey, checkNow, maxKeysOf, optionError } from "../web/checks.js";
import { DECISION_LEN, decisionAt, detailedAt, eachNumbers } from "../web/decision.js";

/** The most overrides a PlanLimiter keeps unless told (an override is never evicted). */
export const DEFAULT_MAX_OVERRIDES = 10_000;

/** What the core answers in front of a decision made by the key's own limits (not a plan). */
const OWN_LIMITS = -1;

/**
 * A decision made by the key's own limits keeps them here (not enumerable: not in the
 * decision's shape), as they were at the decision, for its headers. A plan's decision
 * needs nothing hidden: its `plan` names its limits. (A WeakMap from every decision to what
 * made it cost more than the check itself: PERF, perf-npmplans.md.)
 */
const OWN = Symbol("tollgate.ownLimits");

/**
 * The `plans` option as the core takes it: the names, how many policies each has, the
 * policies. A plan is a policy string or a non-empty array of them (a stack).
 */
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
        const field = Array.isArray(p) ? `plans.${name}[${i}]` : `plans.${name}`;
        throw optionError(TypeError, field, q, "not-a-string", 'must be a policy string like "100/min"');
      }
    });
    names.push(name);
    counts.push(list.length);
    policies.push(...list);
  }
  return [names, Uint32Array.from(counts), policies];
}

/** The `maxOverrides` option: a whole number, 0 or more. */
function maxOverridesOf(options) {
  const m = options?.maxOverrides;
  if (m === undefined) return DEFAULT_MAX_OVERRIDES;
  if (typeof m !== "number" || !Number.isInteger(m)) {
    throw optionError(TypeError, "maxOverrides", m, "not-a-number", "must be a whole number");
  }
  if (m < 0 || m > 0xffffffff) throw optionError(RangeError, "maxOverrides", m, "out-of-range", "must be from 0 to 4294967295");
  return m;
}

/** The `PlanLimiter` class over one wasm-bindgen output of the plans .wasm (`glue.PlanCore`). */
export function planClass(glue) {
  /** A policy of plans. See plans.d.ts. */
  class PlanLimiter {
    #core;
    /** The plans' names, in order (the core's). */
    #names;
    #default;
    /** How many limits each plan has, in the plans' order. */
    #counts;

    /**
     * @param {{ plans: Record<string, string | string[]>, default?: string, maxKeys?: number, maxOverrides?: number }} options
     */
    constructor(options) {
      if (options === null || typeof options !== "object") {
        throw optionError(TypeError, "options", options, "not-an-object", 'must be an object like { plans: { free: "100/min" } }');
      }
      const [names, counts, policies] = flatten(options.plans);
      this.#core = new glue.PlanCore(names, counts, policies, maxKeysOf(options), maxOverridesOf(options));
      this.#names = this.#core.names();
      this.#counts = this.#names.map((_, i) => this.#core.policies(i).length);
      const fallback = options.default ?? this.#names[0];
      if (typeof fallback !== "string" || !this.#names.includes(fallback)) {
        throw optionError(TypeError, "default", fallback, "unknown-plan", `must name one of the plans (${this.#names.join(", ")})`);
      }
      this.#default = fallback;
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

    /** The plan's name a call asks for: `plan`, or the default plan for `undefined`/`null`. */
    #asked(plan) {
      if (plan === undefined || plan === null) return this.#default;
      if (typeof plan !== "string") throw optionError(TypeError, "plan", plan, "not-a-string", "must be a plan's name");
      return plan;
    }

    /** The decision of `opts.cost` (default 1) for `key` under `plan` at `opts.now`, with `each` when `detailed`. */
    #check(key, plan, opts, detailed) {
      checkKey(key);
      const asked = this.#asked(plan);
      const now = opts?.now === undefined ? Date.now() : checkNow(opts.now);
      const cost = opts?.cost === undefined ? 1 : checkCost(opts.cost);
      const out = this.#core.check(key, asked, now, cost);
      const by = out[0];
      const n = out.subarray(1);
      const decision = detailed ? detailedAt(n, 0, n.length / DECISION_LEN - 1) : decisionAt(n, 0);
      decision.plan = by === OWN_LIMITS ? null : this.#names[by];
      if (by === OWN_LIMITS) Object.defineProperty(decision, OWN, { value: this.#core.getOverride(key).slice(1) });
      return decision;
    }

    /**
     * Decides a request for `key` under `plan` (`undefined`: the default plan), or under the
     * key's override if it has one, charging `opts.cost` (default 1) when allowed, at
     * `opts.now` (ms, default `Date.now()`). A denial is a decision, never an exception.
     */
    check(key, plan, opts) {
      return this.#check(key, plan, opts, false);
    }

    /** {@link check} with `each`: every limit's decision of the plan (or override), in stack order. */
    checkDetailed(key, plan, opts) {
      return this.#check(key, plan, opts, true);
    }

    /**
     * Gives `key` another plan (`{ plan: "pro" }`) or limits of its own (`{ limits:
     * ["5/s"] }`, or one policy string) from its next check on, whatever plan its calls
     * name, until `clear`. Throws for a plan that does not exist, invalid limits, or a
     * full table of overrides (`maxOverrides`; clear one first).
     */
    set(key, what) {
      checkKey(key);
      if (what === null || typeof what !== "object" || (what.plan === undefined) === (what.limits === undefined)) {
        throw optionError(TypeError, "override", what, "not-an-override", 'must be { plan: "pro" } or { limits: ["5/s"] }');
      }
      if (what.plan !== undefined) {
        if (typeof what.plan !== "string") throw optionError(TypeError, "override.plan", what.plan, "not-a-string", "must be a plan's name");
        this.#core.setOverride(key, what.plan, undefined);
        return;
      }
      const limits = Array.isArray(what.limits) ? what.limits : [what.limits];
      limits.forEach((l, i) => {
        if (typeof l !== "string") throw optionError(TypeError, `override.limits[${i}]`, l, "not-a-string", 'must be a policy string like "5/s"');
      });
      this.#core.setOverride(key, undefined, limits);
    }

    /** The override of `key`: `{ plan }` or `{ limits }` (canonical policies), or `undefined`. */
    get(key) {
      checkKey(key);
      const o = this.#core.getOverride(key);
      if (o === undefined) return undefined;
      return o[0] === "plan" ? { plan: o[1] } : { limits: o.slice(1) };
    }

    /** Clears the override of `key` (its next check is under the plan it names again); whether it had one. */
    clear(key) {
      checkKey(key);
      return this.#core.clearOverride(key);
    }

    /**
     * What made `decision` (a decision of this limiter): the plan's index (or OWN_LIMITS),
     * the key's own limits, and each limit's decision as the core reads them. A plan or
     * own limits of several policies need `checkDetailed`'s decision (it has `each`), as a
     * `Limiter`'s stack does.
     */
    #madeBy(decision) {
      checkDecision(decision);
      const own = decision[OWN];
      const by = own !== undefined ? OWN_LIMITS : this.#names.indexOf(decision.plan);
      if (own === undefined && by < 0) {
        throw optionError(TypeError, "decision", decision.plan, "not-a-plan-decision", "must be a decision of this PlanLimiter's check() or checkDetailed()");
      }
      let each = decision.each;
      if (each === undefined) {
        if ((own === undefined ? this.#counts[by] : own.length) !== 1) {
          throw optionError(TypeError, "decision", "check()", "not-detailed", "a plan of several limits names them from checkDetailed()'s decision (it has each)");
        }
        each = [decision];
      }
      return [by, own, eachNumbers(each)];
    }

    /**
     * The response headers for a decision of this limiter: `RateLimit-Policy` and
     * `RateLimit` of the limits that made it, named by their plan (`"pro"`, or `"pro.1"`,
     * `"pro.2"` for a stack; `"own"` for a key's own limits), `Retry-After` and
     * `Cache-Control: no-store` when denied (and `X-RateLimit-*` with `legacy`). The core's.
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

    /** The number of limited keys held (fresh keys are not stored). */
    get size() {
      return this.#core.size();
    }

    /** Frees the wasm memory now (otherwise when the object is collected). */
    free() {
      this.#core.free();
    }
  }
  return PlanLimiter;
}
