// tollgate/redis: the server's tollgate module (TOLLGATE.CHECK / TOLLGATE.PEEK /
// TOLLGATE.RELEASE / TOLLGATE.SETTLE), when it has one: each request one command, decided
// atomically inside Redis by the same core (see ../redis.js; rounds.js and settles.js send
// them).

import { LOOK } from "../web/waiting.js";
import { RedisLimiterError, Unavailable, fatal } from "./errors.js";
import { ModuleReplies, OP_ACQUIRE, OP_PEEK, OP_RELEASE, classify, releaseError } from "./fleet.js";
import { settleError } from "./settles.js";

/** Where a `WITHTIME` reply carries the instant decided at: after the six fields and each limit's. */
const DECIDED_AT = 7;

/**
 * The instant of a `WITHTIME` reply (ns) as a BigInt. An integer reply above 2^53 reaches
 * JavaScript rounded by ioredis (and node-redis, unless mapped to strings), by at most 128
 * ns; the module decides at Redis's clock in whole microseconds (crates/redis-module,
 * `server_now`; a test clock in whole ms), so the nearest whole microsecond is the exact
 * instant.
 */
function instantOf(v) {
  if (typeof v === "number" && Number.isFinite(v)) return BigInt(Math.round(v / 1000)) * 1000n;
  return BigInt(String(v));
}

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
    if (p.reserve !== undefined) args.push("WITHTIME"); // the instant, which the reservation carries
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
    if (p.reserve !== undefined) p.reserve.at = instantOf(value[DECIDED_AT]);
    return out;
  }

  /**
   * `TOLLGATE.SETTLE` for `group` with `args` (the core's five: id, at, estimate, actual,
   * overage; FleetLimits.settleArgs) and the limiter's limits (`now`: a test clock's ms):
   * resolves to its reply's settle record. Rejects with an `Unavailable` when it may have run
   * but its answer was lost, else with the error for the caller (the core's own for a settle
   * it refuses).
   */
  async settle(group, args, now) {
    const command = ["TOLLGATE.SETTLE", group.base, ...args, ...this.limitArgs(undefined)];
    if (now !== undefined) command.push("NOW", String(now));
    let value;
    try {
      value = await this.#call(command);
    } catch (error) {
      const c = classify(error, true);
      if (c instanceof Unavailable) throw c;
      const message = String(error.message);
      if (/unknown command/i.test(message)) this.#known = undefined;
      // A settle the core refuses (a concurrency limit): its own error, as on the script path.
      const [, at, estimate, actual, overage] = args;
      const refused = /^(ERR )?[a-z-]+: /.test(message) ? settleError(this.#limits, group, Number(estimate), BigInt(at), Number(actual), overage === "UPTOLIMIT") : undefined;
      throw refused ?? fatal(error);
    }
    if (!Array.isArray(value)) throw new RedisLimiterError("redis", "redis: unexpected module reply");
    return value[0];
  }
}
