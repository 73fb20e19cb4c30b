// tollgate/redis: the server's tollgate module (TOLLGATE.CHECK / TOLLGATE.PEEK /
// TOLLGATE.RELEASE), when it has one: each request one command, decided atomically inside
// Redis by the same core (see ../redis.js; rounds.js sends them).

import { LOOK } from "../web/waiting.js";
import { RedisLimiterError, Unavailable, fatal } from "./errors.js";
import { ModuleReplies, OP_ACQUIRE, OP_PEEK, OP_RELEASE, classify, releaseError } from "./fleet.js";

/** The module's command for each request kind. */
const MODULE_COMMAND = ["TOLLGATE.CHECK", "TOLLGATE.PEEK", "TOLLGATE.RELEASE", "TOLLGATE.CHECK"];

/** The module's commands for one limiter's limits (FleetLimits). */
export class Module {
  #call;
  #limits;
  /** The replies' reader (the core's rule, in wasm). */
  #replies;
  /** The commands' limiter arguments without a tenant (made once). */
  #args;
  /** Whether the server has the module: undefined until asked (again after it lost it). */
  #known;

  /** `call(args)` sends a command, bounded by the timeout. */
  constructor(limits, call) {
    this.#call = call;
    this.#limits = limits;
    this.#replies = new ModuleReplies(limits);
    const policies = limits.policies();
    const fair = policies.length > limits.slots(undefined).length;
    this.#args = fair ? [policies[0]] : policies.length === 1 ? policies : ["STACK", String(policies.length), ...policies];
  }

  /** Whether the server has the module, if known (else {@link Module#ask}). */
  get known() {
    return this.#known;
  }

  /** Whether the server has the module: asked with `COMMAND INFO tollgate.check` (once, while it answers). */
  async ask() {
    if (this.#known !== undefined) return this.#known;
    let reply;
    try {
      reply = await this.#call(["COMMAND", "INFO", "tollgate.check"]);
    } catch {
      return false; // not known yet: the read that follows reports the failure
    }
    this.#known = Array.isArray(reply) && Array.isArray(reply[0]);
    return this.#known;
  }

  /** The limiter's arguments of a command: the policy, a stack, or a fair share's shared policy and tenant window. */
  limitArgs(tenant) {
    if (tenant === undefined) return this.#args;
    const policies = this.#limits.policies();
    return [policies[0], "TENANT", tenant, policies[1]];
  }

  /**
   * Sends request `p`'s command for `group` (`limits`: {@link Module#limitArgs}; `now`: a test
   * clock's ms, for a server loaded with TESTCLOCK) and resolves to its answer's numbers
   * (FleetLimits' output for one request; undefined for a release). Rejects with an
   * `Unavailable` when the command may have run but its answer was lost (the fallback
   * decides), else with the error for the caller.
   */
  async send(group, p, limits, now) {
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
      if (c instanceof Unavailable) throw c;
      const message = String(error.message);
      // The server lost the module (restarted without it): ask again next round.
      if (/unknown command/i.test(message)) this.#known = undefined;
      // A release without a concurrency limit: the core's own error, as on the script path.
      if (p.kind === OP_RELEASE && /^(ERR )?not-concurrency/.test(message)) throw releaseError(this.#limits, group, p.cost);
      throw fatal(error);
    }
    if (p.kind === OP_RELEASE) return undefined;
    const out = this.#replies.answer(value);
    if (out === undefined) throw new RedisLimiterError("redis", "redis: unexpected module reply");
    return out;
  }
}
