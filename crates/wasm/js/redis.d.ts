// Types of `tollgate/redis`: one exact limit for a fleet of processes sharing one Redis.
import type { Counts, Decision, Overage, Policy, RateLimitHeaders, Reservation, Settlement } from "./index.js";
import { WaitTimeoutError } from "./index.js";
import type { PlanLimits, PlanOverride } from "./plans.js";

/** The rejection of `acquire` when the request cannot proceed within `maxWait` (the package's class). */
export { WaitTimeoutError };

/** What a {@link RedisLimiter} decides over: a policy, a stack (an array, or `{ stack }`) or a fair share. */
export type LimiterSpec =
  | Policy
  | Policy[]
  | { policy: Policy }
  | { stack: Policy[] }
  | { fairShare: { shared: Policy; tenant: Policy } };

/**
 * The caller's Redis client: an ioredis client or `Cluster` (`callBuffer` is used; a client's
 * commands of one event-loop turn are written to its socket together, as node-redis does), a
 * node-redis 5 or 6 client or cluster client (`sendCommand`, with strings answered as
 * Buffers; a cluster is told each command's first key), or any object whose
 * `sendCommand(args)` sends one command and resolves with its reply (bulk strings as
 * Buffers or strings; errors from Redis itself rejected with `name: "ReplyError"` or
 * `reply: true`).
 *
 * With a plain ioredis or node-redis client (one server, not a cluster), the reads of
 * different keys sent in one event-loop turn go to Redis as one script call, and so do the
 * commits (each request's commit still all or nothing; two that share a key never share a
 * call): fewer commands for the same decisions. Cluster clients and `{ sendCommand }` send
 * one call per request.
 */
export type RedisClient =
  | { callBuffer(command: string, args: ReadonlyArray<string | Uint8Array>): Promise<unknown> }
  | { sendCommand(args: ReadonlyArray<string | Uint8Array>, options?: object): Promise<unknown> }
  | {
      sendCommand(firstKey: string | Uint8Array | undefined, isReadonly: boolean | undefined, args: ReadonlyArray<string | Uint8Array>, options?: object): Promise<unknown>;
      masters: unknown;
    };

/** Where a decision was made. */
export type Source = "redis" | "deny-cache" | "fallback";

/** The answer to one request: {@link Decision}, each limit's decision, and where it was made. */
export interface FleetDecision extends Decision {
  /** Each limit's decision, in slot order (the stack's limits, then a fair share's tenant window). */
  each: Decision[];
  /**
   * `"redis"`: decided by the core on the states read from Redis, at Redis's clock (and
   * committed there when admitted); `"deny-cache"`: a denial this process remembers, which
   * still holds (no round trip); `"fallback"`: by the declared fallback.
   */
  source: Source;
  /**
   * Fallback decisions only: `"unreachable"` (Redis refused or failed recently; the fallback
   * decides until the next probe), `"timeout"` (a read did not answer in time) or
   * `"indeterminate"` (a commit was sent and its answer lost: it may or may not have been
   * applied, and it is never sent again).
   */
  why?: "unreachable" | "timeout" | "indeterminate";
}

/** Options of a {@link RedisLimiter}. Times are milliseconds. */
export interface RedisLimiterOptions {
  /** The limiter's namespace (e.g. `"whois"`, `"whois:com"`): part of every key; no braces. */
  namespace: string;
  /** The first part of every key (default `"tollgate"`); no braces. */
  prefix?: string;
  /** The policy's name in {@link RedisLimiter.metrics} (`tollgate.policy`; default `"default"`). */
  name?: string;
  /**
   * What decides when Redis cannot be reached in time. No default: `"local"` (this process's
   * memory, with the same limits: each process then enforces its own budget), `"open"`
   * (admit every request) or `"closed"` (deny, with `retryAfter` at the next probe).
   */
  fallback: "local" | "open" | "closed";
  /** The `"local"` fallback's most keys (default 100 000). */
  maxKeys?: number;
  /** The longest one round trip may take before the fallback decides (default 250). */
  timeout?: number;
  /** How long conflicting writes by other clients are retried (default: the timeout). */
  retryFor?: number;
  /** After Redis failed, how long the fallback decides before Redis is tried again (default 1000). */
  probeEvery?: number;
  /** Added to every key's time to live (the time its state needs to be fresh again; default 1000). */
  grace?: number;
  /** How long a concurrency count lives after its last acquire or release (default 60 000). */
  lease?: number;
  /** Whether denials are remembered until their retry time (default true). */
  denyCache?: boolean;
  /**
   * Whether to decide in tollgate's Redis module when the server has it (asked once with
   * `COMMAND INFO tollgate.check`; default true): one pipelined round trip of
   * `TOLLGATE.CHECK`/`PEEK`/`RELEASE` commands per round instead of a read and a commit,
   * on the same keys and bytes. Without the module, the scripts decide.
   */
  useModule?: boolean;
}

/** Options of {@link RedisLimiter.acquire}. Times are milliseconds. */
export interface RedisAcquireOptions {
  /** Units to charge (default 1). */
  cost?: number;
  /** The longest to wait in all (default `Infinity`). */
  maxWait?: number;
  /** Aborts the wait: rejects with the signal's reason, nothing charged (unless already admitted). */
  signal?: AbortSignal;
  /** The tenant, for a fair share. */
  tenant?: string;
  /** Up to this much random extra sleep after a denial (at most half the slack before `maxWait`; default 0). */
  jitter?: number;
}


/** Counts since the limiter was built. */
export interface RedisLimiterStats {
  /** Requests decided on Redis's states. */
  redis: number;
  /** Requests denied from the deny cache. */
  denyCache: number;
  /** Requests decided by the fallback. */
  fallback: number;
  /** Commits (or module commands) whose answer was lost (never sent again). */
  indeterminate: number;
  /** Commits refused because another client wrote first (each retried). */
  conflicts: number;
  /** Round trips to Redis that requests took (a script call shared by several requests counts for each). */
  roundTrips: number;
}

/**
 * Errors of the store: `code` `"corrupt-state"` (a stored value that is not a state; `key`
 * names it; nothing was charged), `"contended"` (other clients kept writing the key first
 * for longer than `retryFor`; nothing was charged), `"redis"` (Redis answered an error
 * that is not about its availability) or `"not-connected"` (the client given is not open: a
 * node-redis client before `await client.connect()`, or a client that was closed; tollgate
 * never connects it, and never falls back for it), or `"settle-unknown"` (a settle's
 * outcome is not known: Redis was unavailable, `why`, or its answer was lost; settle again
 * with the same reservation, which charges once).
 */
export class RedisLimiterError extends Error {
  code: "corrupt-state" | "contended" | "redis" | "not-connected" | "settle-unknown";
  key?: string;
  /** `settle-unknown`: why Redis could not answer. */
  why?: "unreachable" | "timeout" | "indeterminate";
}

/**
 * A fleet-wide limiter on Redis: the same key layout, values and scripts as the Rust crate
 * `tollgate-redis`, so Node and Rust processes share one limit.
 *
 * Keys: `<prefix>:{<namespace>:<key>}:<i>` (the stack's limit i) and
 * `<prefix>:{<namespace>:<key>}:t:<tenant>` (a fair share's tenant window).
 */
export class RedisLimiter {
  /** Throws a `TypeError`/`RangeError` naming the option for invalid options or policies. */
  constructor(client: RedisClient, spec: LimiterSpec, options: RedisLimiterOptions);
  /**
   * Decides one request of `cost` (default 1) for `key`, on behalf of `tenant` for a fair
   * share. A denial is a decision; rejects with a `RangeError` for a cost above the capacity
   * (before any round trip) or a {@link RedisLimiterError}.
   */
  check(key: string, options?: { cost?: number; tenant?: string }): Promise<FleetDecision>;
  /**
   * Waits for a turn: resolves to the admitting decision (after a leaky queue's `delay`), or
   * rejects with a {@link WaitTimeoutError} when the request cannot proceed within `maxWait`
   * (at once when the retry time is already beyond it), or with the signal's reason. The
   * waiting rule is the core's; waiters for one key (and tenant) in this process are served
   * in arrival order.
   */
  acquire(key: string, options?: RedisAcquireOptions): Promise<FleetDecision>;
  /**
   * Wraps `fn`: each call first waits for a turn (`acquire` with `options`; `key` is a string
   * or a function of the call's arguments, default `"default"`).
   */
  throttle<A extends unknown[], R>(
    fn: (...args: A) => Promise<R> | R,
    options?: RedisAcquireOptions & { key?: string | ((...args: A) => string) },
  ): (...args: A) => Promise<R>;
  /** The key's standing without charging it. */
  peek(key: string, options?: { tenant?: string }): Promise<FleetDecision>;
  /**
   * Reserves `estimate` for `key`: a decision that charges it as {@link RedisLimiter.check}
   * does and, when admitted by Redis (or its module), carries the `reservation` to settle
   * with the real cost, in this process or any other of the same namespace and limits,
   * Node or Rust (`tollgate-redis`). A denial, or an admission by the fallback, carries
   * none. A leaky queue refuses reserves (`RangeError`, `rule: "not-settleable"`).
   */
  reserve(key: string, estimate: number): Promise<FleetDecision & { reservation?: Reservation }>;
  /**
   * Settles `reservation` with the `actual` cost at Redis's clock: gives back `estimate -
   * actual` or charges `actual - estimate` (a debt by default; `overage: "up-to-limit"`
   * charges only what is left and reports the rest `unpaid`), all or nothing, recorded in
   * Redis so that it settles once in the fleet: settling it again, from any process,
   * answers the first settle and charges nothing. `RangeError`s before any round trip:
   * `foreign-key`, `foreign-policy`, `foreign-limiter` (`field: "reservation"`),
   * `actual-too-large`, `not-settleable` (a concurrency limit); a
   * {@link RedisLimiterError} `settle-unknown` when Redis could not answer (never settled
   * by the fallback) or `contended`.
   */
  settle(reservation: Reservation, actual: number, options?: { overage?: Overage }): Promise<Settlement>;
  /** Gives back `cost` (default 1) slots of the concurrency limits for `key`. */
  release(key: string, options?: { cost?: number }): Promise<void>;
  /** Forgets `key` in every limit of the stack; whether anything was stored. */
  reset(key: string): Promise<boolean>;
  /** Where decisions were made so far. */
  stats(): RedisLimiterStats;
  /**
   * What the limiter decided so far, in the core's metric model (as `Limiter.metrics()`):
   * each `check` one decision by where it was made (`store`: Redis or its module;
   * `denyCache`; `fallback`), each failed call to Redis one store failure under the declared
   * fallback and its reason, each `acquire` that ends one decision and one wait. One
   * {@link Counts}, in an array.
   */
  metrics(): Counts[];
  /** {@link RedisLimiter.metrics} as Prometheus text (`prometheus` of `tollgate/metrics`). */
  prometheus(): string;
  /** The policies in canonical compact form, in slot order. */
  readonly policies: string[];
  /** The limiter's name (the `name` option, default `"default"`): in its metrics, headers and 429 bodies. */
  readonly name: string;
  /**
   * The response headers for a decision of this limiter, as `Limiter.headers` gives them
   * (the core's; what the Express and Hono middleware send for it).
   */
  headers(decision: Decision, name?: string, options?: { legacy?: boolean }): Record<string, string>;
  /** The application/problem+json body of a 429 for a denied decision; `undefined` when allowed. */
  problem(decision: Decision, name?: string): string | undefined;
  /** Frees the wasm memory now instead of at garbage collection. */
  free(): void;
}

/** Options of a {@link RedisPlans}: its plans, and a {@link RedisLimiter}'s connection options (no deny cache). */
export interface RedisPlansOptions extends Omit<RedisLimiterOptions, "denyCache"> {
  /** The plans by name, in order: `{ free: "100/min", pro: ["1000/min", "50/s"] }` (no concurrency limit). */
  plans: Record<string, PlanLimits>;
  /** The plan of a check that names none (`undefined`); default: the first plan. */
  default?: string;
}

/** A decision of a {@link RedisPlans}: a {@link FleetDecision}, and what it was made by. */
export interface RedisPlanDecision extends FleetDecision {
  /**
   * The plan whose limits decided (the call's, or the caller's override's); `null` for the
   * caller's own limits; `undefined` when the module decided under an override whose plan
   * could not be read back.
   */
  plan: string | null | undefined;
  /** Whether the caller's override decided (a fallback's decision: never). */
  overridden: boolean;
}

/** Where a {@link RedisPlans} decided so far. */
export interface RedisPlansStats {
  redis: number;
  fallback: number;
  indeterminate: number;
  conflicts: number;
  roundTrips: number;
}

/**
 * A fleet-wide limiter whose limits depend on the caller: named plans, a caller's spend
 * kept when its plan changes, and per-caller overrides stored in Redis (at
 * `<prefix>:{<namespace>:<key>}:o`), which every process (Node or Rust, tollgate-redis'
 * `RedisPlans`) sees at its next check of that caller. With tollgate's module, one
 * `TOLLGATE.PLAN` a check; else the read and commit scripts.
 */
export class RedisPlans {
  constructor(client: RedisClient, options: RedisPlansOptions);
  /** The plans' names, in order. */
  readonly plans: string[];
  /** The plan of a check that names none. */
  readonly defaultPlan: string;
  /** The policies of the plan `name`, canonical, in stack order. */
  policiesOf(name: string): string[];
  /** Decides a request for the caller `key` under `plan` (default: the default plan), or under its override. */
  check(key: string, plan?: string | null, options?: { cost?: number }): Promise<RedisPlanDecision>;
  /** Gives `key` another plan or limits of its own, in Redis, from every process's next check of it. */
  set(key: string, override: PlanOverride): Promise<void>;
  /** The override of `key`, or `undefined`. */
  get(key: string): Promise<PlanOverride | undefined>;
  /** Clears the override of `key`; whether it had one. */
  clear(key: string): Promise<boolean>;
  /**
   * The response headers for a decision of this limiter, the core's, as a `PlanLimiter`'s:
   * `RateLimit-Policy` and `RateLimit` named by the plan that decided (`"pro"`, `"pro.1"`,
   * ... for a stack; `"own"` for the caller's own limits), `Retry-After` and
   * `Cache-Control: no-store` when denied. Throws a `TypeError` (`rule:
   * "not-a-plan-decision"`) for a decision whose `plan` is `undefined`.
   */
  headers(decision: RedisPlanDecision, options?: { legacy?: boolean }): RateLimitHeaders;
  /** The application/problem+json body of a 429 for a denied decision; `undefined` when allowed. */
  problem(decision: RedisPlanDecision): string | undefined;
  stats(): RedisPlansStats;
  /** Frees the wasm memory now instead of at garbage collection. */
  free(): void;
}

/** `tollgate/metrics`' `prometheus`, re-exported. */
export { prometheus } from "./metrics.js";

/** Test-only options key (see the package README). */
export const TESTING: unique symbol;
