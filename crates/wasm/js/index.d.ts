// Types of the npm package `tollgate`: rate limiting with one Rust core compiled to
// WebAssembly. Times are milliseconds everywhere.

/** The algorithms the core implements. */
export type Algorithm =
  | "token-bucket"
  | "gcra"
  | "sliding-window"
  | "fixed-window"
  | "sliding-log"
  | "leaky-bucket"
  | "leaky-queue"
  | "concurrency";

/**
 * A policy as an object. `limit` units per `window`; `window` is the compact window syntax
 * (`"s"`, `"10min"`, `"500ms"`) or a number of milliseconds; `burst` (bucket algorithms only)
 * sets the capacity. For `concurrency`, `limit` (or `maxInFlight`) is the most in flight and
 * there is no window.
 */
export interface PolicyObject {
  /** Defaults to `"token-bucket"`. */
  algorithm?: Algorithm;
  limit?: number;
  /** Alias of `limit` for `concurrency`. */
  maxInFlight?: number;
  window?: string | number;
  burst?: number;
}

/**
 * A policy: the compact grammar `[<algorithm>] <limit>/<window> [burst <n>]` or
 * `concurrency <n>` (e.g. `"100/min"`, `"10/s burst 40"`, `"sliding-window 600/10min"`), or
 * a {@link PolicyObject}.
 */
export type Policy = string | PolicyObject;

/** The answer to one request. Durations are whole milliseconds, rounded up. */
export interface Decision {
  /** Whether the request was admitted (and its cost charged). */
  allowed: boolean;
  /** The most a key can have: bucket capacity, window limit or maximum in flight. */
  limit: number;
  /** How much cost the key could still spend right now, after this decision. */
  remaining: number;
  /** Milliseconds until the key is back to fresh if nothing more arrives. */
  resetAfter: number;
  /** Milliseconds until this same request would be admitted; 0 when allowed. */
  retryAfter: number;
  /** `leaky-queue` only: how long the admitted request waits in the queue (ms); else 0. */
  delay: number;
}

/**
 * A reservation from {@link Limiter.reserve}: plain strings and numbers (JSON keeps them;
 * the 64-bit numbers are decimal strings). What a settle needs: the key, the estimate
 * charged, when, and who issued it.
 */
export interface Reservation {
  /** The key it was charged to. */
  key: string;
  /** Unique among this limiter's reservations. */
  id: string;
  /** The issuing limiter's number, in this process. */
  limiter: string;
  /** The fingerprint of the limiter's policies. */
  policies: string;
  /** The key's hash by the limiter's hasher. */
  keyHash: string;
  /** The estimate charged to every limit. */
  estimate: number;
  /** The reserve's time, in nanoseconds: it names the window a refund goes to. */
  at: string;
}

/** What a settle does with an actual cost above the estimate: charge it all (a debt), or only up to the limit. */
export type Overage = "debt" | "up-to-limit";

/** What a settle did to one limit, in whole units. */
export interface Settled {
  /** Units given back. */
  refunded: number;
  /** Units charged beyond the estimate. */
  charged: number;
  /** Units of the overage not charged (`up-to-limit`). */
  unpaid: number;
}

/**
 * What a settle did: the least any limit gave back or charged, the most left unpaid, and
 * for a stack each limit's, in stack order.
 */
export interface Settlement extends Settled {
  each?: Settled[];
}

/** Options of a {@link Limiter}. */
export interface LimiterOptions {
  /**
   * The most limited keys held in memory (default 100 000); beyond it an idle key (one not
   * checked since the store's clock hand last passed it) is evicted, and starts fresh.
   * Keys found fresh are never stored.
   */
  maxKeys?: number;
  /**
   * The limiter's one name (default `"default"`): its series in {@link Limiter.metrics}
   * (the `tollgate.policy` attribute) and the policy's name in {@link Limiter.headers} and
   * {@link Limiter.problem} (so in the Express and Hono middleware's `RateLimit-Policy`).
   */
  name?: string;
  /**
   * The most reservations the limiter remembers (default 100 000), for each of its two
   * records: those waiting for their settle and those settled (whose answer a second settle
   * repeats, charging nothing). Past it the oldest entry is dropped: a reservation dropped
   * unsettled stays charged at its estimate, and settling a dropped one throws
   * `unknown-reservation`. Nothing is ever settled twice.
   */
  maxReservations?: number;
}

/** Options of {@link Limiter.check}. */
export interface CheckOptions {
  /** Units this request spends (default 1; 0 asks without spending). */
  cost?: number;
  /** The time in ms (default `Date.now()`); one clock per limiter. */
  now?: number;
  /** The tenant, for a {@link Limiter.fairShare} limiter (ignored by others). */
  tenant?: string;
  /**
   * Count this decision under this route in {@link Limiter.metrics} (the middleware's
   * `route`): a route pattern such as `"/users/:id"`, never a path with ids in it (each
   * route is a series kept for the limiter's life).
   */
  route?: string;
}

/** Options of {@link Limiter.acquire} and {@link Limiter.throttle}. */
export interface AcquireOptions {
  /** Units this request spends (default 1). A cost above the capacity rejects at once. */
  cost?: number;
  /**
   * The longest to wait in ms, from the call until the request may proceed (a leaky
   * queue's `delay` included); default `Infinity`. When the retry time is already beyond
   * it, the promise rejects at once rather than at the deadline.
   */
  maxWait?: number;
  /** Aborting rejects the wait with the signal's reason; nothing is charged. */
  signal?: AbortSignal;
  /** The tenant, for a {@link Limiter.fairShare} limiter; each tenant waits in its own line. */
  tenant?: string;
  /**
   * Milliseconds added to each sleep (at most half the slack before the deadline, so a late
   * timer still fits): a random value you draw,
   * e.g. `Math.random() * 20`, to spread waiters of several processes. Default 0.
   */
  jitter?: number;
}

/** Options of {@link Limiter.throttle}: {@link AcquireOptions} and the key. */
export interface ThrottleOptions<A extends unknown[]> extends AcquireOptions {
  /** The key, or a function of the call's arguments giving it (default `"default"`). */
  key?: string | ((...args: A) => string);
}

/**
 * The rejection of {@link Limiter.acquire} when the request cannot proceed within
 * `maxWait`. Nothing was charged.
 */
export class WaitTimeoutError extends Error {
  constructor(waited: number, retryAfter: number);
  readonly name: "WaitTimeoutError";
  /** Milliseconds waited before giving up (0 when the retry time was beyond the deadline at once). */
  waited: number;
  /**
   * Milliseconds from now until the key itself would admit the request, not counting the
   * waiters ahead of it; 0 when no clock can say (a full concurrency limit).
   */
  retryAfter: number;
}

/**
 * Thrown for an invalid policy or option: a `TypeError` (a value of the wrong form) or a
 * `RangeError` (a number out of range, a cost above the capacity). The message names the
 * field and the rule; so do these properties.
 */
export interface TollgateError extends Error {
  /** The field at fault: `"window"`, `"limit"`, `"burst"`, `"algorithm"`, `"maxKeys"`, `"cost"`, ... */
  field: string;
  /** The rule broken, in kebab-case: `"unknown-unit"`, `"zero"`, `"cost-exceeds-capacity"`, ... */
  rule: string;
  /** The offending value. */
  value: unknown;
}

/**
 * A keyed rate limiter. Per-key state lives inside wasm memory, bounded by `maxKeys`.
 *
 * ```js
 * import { Limiter } from "tollgate";
 * const limiter = new Limiter("10/s burst 20");
 * const d = limiter.check(clientIp);
 * if (!d.allowed) return tooManyRequests(d.retryAfter);
 * ```
 */
export class Limiter {
  /** Throws a {@link TollgateError} for an invalid policy or option. */
  constructor(policy: Policy, options?: LimiterOptions);
  /** An all-or-nothing stack: a request must pass every policy, or none is charged. */
  static all(policies: Policy[], options?: LimiterOptions): Limiter;
  /**
   * A per-tenant fair share: `shared` limits each key, `tenant` each (key, tenant) on top;
   * pass the tenant to {@link Limiter.check}. Requests without a tenant or with `"default"`
   * skip the tenant policy. A tenant policy above the shared one is a `RangeError`.
   */
  static fairShare(shared: Policy, tenant: Policy, options?: LimiterOptions): Limiter;
  /**
   * Decides one request for `key`, charging `cost` when allowed. Synchronous; a denial is a
   * decision (`allowed: false`), never an exception. Throws only for invalid arguments or a
   * cost above the capacity (`rule: "cost-exceeds-capacity"`).
   */
  check(key: string, options?: CheckOptions): Decision;
  /**
   * {@link Limiter.check}'s short answer: whether the request was admitted (and `cost`
   * charged). The same decision, without the {@link Decision} object: for callers that send
   * no `RateLimit` headers and need no retry time. Throws as `check` does.
   */
  allow(key: string, options?: CheckOptions): boolean;
  /**
   * {@link Limiter.check}, also answering each limit's own decision (`each`, in stack
   * order). In a denied stack, a limit that had room was not charged and reports what it
   * really has. Stacks and fair shares pass this decision to `headers()` and `problem()`.
   */
  checkDetailed(key: string, options?: CheckOptions): DetailedDecision;
  /**
   * Waits for a turn: resolves to the admitting decision (after a `leaky-queue`'s `delay`),
   * or rejects with a {@link WaitTimeoutError} (at once when the retry time is beyond
   * `maxWait`), with the signal's reason on abort, or with a {@link TollgateError} (a cost
   * above the capacity). Waiters on one key (and tenant) are served in arrival order, one
   * decision at a time. Nothing is charged until admitted.
   */
  acquire(key: string, options?: AcquireOptions): Promise<Decision>;
  /**
   * Wraps an async function: each call first waits for a turn ({@link Limiter.acquire}),
   * then calls `fn` with the same `this` and arguments.
   */
  throttle<A extends unknown[], R>(
    fn: (...args: A) => R | Promise<R>,
    options?: ThrottleOptions<A>,
  ): (...args: A) => Promise<R>;
  /**
   * Reserves `estimate` for `key`: a decision that charges it as {@link Limiter.check}
   * does and, when admitted, carries the `reservation` to settle with the real cost. An
   * estimate that is not a whole number from 0 to 2^53 - 1 throws (`field: "estimate"`);
   * a leaky queue (a shaper) refuses reserves (`not-settleable`).
   */
  reserve(key: string, estimate: number, options?: { now?: number }): Decision & { reservation?: Reservation };
  /**
   * Settles `reservation` (from this limiter's {@link Limiter.reserve}) with the `actual`
   * cost: gives back `estimate - actual`, or charges `actual - estimate` (a debt past the
   * limit by default; `overage: "up-to-limit"` charges only what remains and reports the
   * rest as `unpaid`), by each limit's rule, all or nothing. Settling it again answers the
   * first settle and charges nothing. Throws `RangeError`s naming the field: `actual`
   * (`negative`, `too-large`, above 2^40 `actual-too-large`), `reservation`
   * (`foreign-key`, `foreign-policy`, `foreign-limiter`, `unknown-reservation`), `policy`
   * (`not-settleable`: a concurrency limit, whose slots `release` gives back); a
   * `TypeError` for an actual that is not a whole number or a value that is not a
   * reservation. A refused settle settles nothing; the reservation stays charged.
   */
  settle(reservation: Reservation, actual: number, options?: { now?: number; overage?: Overage }): Settlement;
  /** The key's standing without charging it. */
  peek(key: string, options?: { now?: number }): Decision;
  /** Gives back `cost` (default 1) slots of the concurrency policies for `key`. */
  release(key: string, options?: { cost?: number }): void;
  /** Forgets `key`; whether it was stored. */
  reset(key: string): boolean;
  /** The number of limited keys held. */
  readonly size: number;
  /** The policies in canonical compact form, in stack order. */
  readonly policies: string[];
  /** The limiter's name (the `name` option, default `"default"`): in its metrics and its headers. */
  readonly name: string;
  /**
   * {@link headers} for a decision of this limiter: `RateLimit-Policy` names every policy
   * (a stack's as `<name>.1`, `<name>.2`, ...; a fair share's tenant window
   * `<name>.tenant`), `RateLimit` the one(s) binding the decision. A stack or fair share
   * needs {@link Limiter.checkDetailed}'s decision (a `TypeError`, rule `not-detailed`,
   * otherwise). `name` defaults to the limiter's {@link Limiter.name}.
   */
  headers(decision: Decision | DetailedDecision, name?: string, options?: { legacy?: boolean }): RateLimitHeaders;
  /**
   * The application/problem+json body of a 429 for a denied decision (type
   * quota-exceeded, `detail` with the wait, `violated-policies`); `undefined` when allowed.
   * `name` defaults to the limiter's {@link Limiter.name}.
   */
  problem(decision: Decision | DetailedDecision, name?: string): string | undefined;
  /**
   * What the limiter decided so far, in the core's metric model: the counts of the calls
   * without a route, then one {@link Counts} per route (`route` option). Every `check`,
   * `allow` and `checkDetailed` is one decision at source `store`; every `acquire` that
   * ends is one decision (admitted, or denied when it gave up) and one wait; `peek` is none.
   */
  metrics(): Counts[];
  /** Frees the wasm memory now instead of at garbage collection. */
  free(): void;
}

/** Counts by where the decision was made. */
export interface BySource {
  /** Decided by the core on the stored state (this process's memory; Redis or its module). */
  store: number;
  /** Denied again from a remembered denial, without a round trip (`tollgate/redis`). */
  denyCache: number;
  /** Decided by the declared fallback because the store failed (`tollgate/redis`). */
  fallback: number;
}

/** Failed store calls by reason. */
export interface ByReason {
  /** The store could not be reached (connection refused or lost). */
  unreachable: number;
  /** No answer within the timeout. */
  timeout: number;
  /** A write whose answer was lost: it may have been applied (never sent again). */
  indeterminate: number;
}

/** A histogram of wait times. */
export interface WaitHistogram {
  /** How many waits. */
  count: number;
  /** Their sum, in seconds. */
  sum: number;
  /**
   * Waits per bucket (not cumulative): one per bound of `metricModel().waitBuckets` (tollgate/metrics: 0.005 s to 60 s)
   * (a wait falls in the first bucket whose bound it does not exceed), then one above them.
   */
  buckets: number[];
}

/**
 * One policy's counts (on one route), in the core's metric model (the instruments
 * `tollgate.decisions`, `tollgate.near_limit`, `tollgate.store.failures`,
 * `tollgate.wait.duration`, `tollgate.concurrency.in_use`; Prometheus
 * `tollgate_decisions_total`, ...). Counters only grow.
 */
export interface Counts {
  /** The policy's name (`tollgate.policy`). */
  policy: string;
  /** The route (`tollgate.route`), when the decisions were counted under one. */
  route?: string;
  /** Decisions by outcome, then by source (`tollgate.outcome`, `tollgate.source`). */
  decisions: { admitted: BySource; denied: BySource; shadowDenied: BySource };
  /** Admissions that left less than 20% of the limit remaining. */
  nearLimit: number;
  /** Failed store calls by the declared fallback that then decided, then by reason (`tollgate/redis`). */
  storeFailures: { open: ByReason; closed: ByReason; local: ByReason };
  /** Waits of `acquire`/`throttle` by how they ended (`tollgate.wait.result`). */
  wait: { admitted: WaitHistogram; gaveUp: WaitHistogram };
  /**
   * Slots of a concurrency limit held now: taken by admissions (`check`, `allow`,
   * `checkDetailed`, `acquire`), given back by `release`. On a `Limiter` or `RedisLimiter`
   * with a concurrency limit, in its first series (one gauge for the limiter, whatever the
   * route; a `RedisLimiter` counts this process's slots, given back by a release that
   * succeeded); absent otherwise.
   */
  concurrencyInUse?: number;
}

/** Something whose counts can be exported: a `Limiter`, a `RedisLimiter`, their `metrics()`, or counts. */
export type MetricsSource = { metrics(): Counts[] } | Counts[] | Counts;


/** A decision with each limit's own (stack order; a fair share: shared, then tenant). */
export interface DetailedDecision extends Decision {
  each: Decision[];
}

/**
 * Response headers for a decision. A type alias, not an interface, so that it is assignable
 * wherever headers are taken as a record: `new Response(body, { headers })` (`HeadersInit`),
 * `new Headers(h)`, Node's `res.writeHead(429, h)` (`OutgoingHttpHeaders`), `res.set(h)`.
 */
export type RateLimitHeaders = {
  /**
   * `"<name>";q=<quota>;w=<seconds>` (draft-ietf-httpapi-ratelimit-headers-11): `q` is the
   * limit (a bucket's capacity), `w` the time the policy takes to grant `q`.
   */
  "RateLimit-Policy": string;
  /** `"<name>";r=<remaining>;t=<seconds until reset>` (no `t` for a concurrency limit). */
  RateLimit: string;
  /** Whole seconds, rounded up, at least 1: only when denied. */
  "Retry-After"?: string;
  /** `no-store`: only when denied (a 429 describes one client at one instant). */
  "Cache-Control"?: string;
  "X-RateLimit-Limit"?: string;
  "X-RateLimit-Remaining"?: string;
  "X-RateLimit-Reset"?: string;
};

/**
 * The headers for `decision` made under the policy named `policyName`. `options.policy` (the
 * policy, or the Limiter that decided) gives `RateLimit-Policy` its quota and window;
 * `legacy` adds `X-RateLimit-Limit/Remaining/Reset`.
 */
export function headers(
  decision: Decision,
  policyName: string,
  options: { policy: Policy | Limiter; legacy?: boolean },
): RateLimitHeaders;

/** The result of {@link decide}: the decision and the state to pass back next time. */
export interface StatelessDecision {
  decision: Decision;
  /**
   * The core's state as JSON, externally tagged by algorithm with nanosecond integers, e.g.
   * `{"token-bucket":{"credit":10000000000,"last":5000000}}`; `null` when the key is fresh.
   */
  state: string | null;
}

/**
 * Decides one request without a Limiter: `state` is what the previous call returned (`null`
 * for a fresh key), `now` in ms, `cost` default 1 (0 peeks: charges nothing, brings the state
 * up to `now`). Throws like `Limiter.check`, and a `TypeError` with `rule: "invalid-state"`
 * for a state that is not one. Only in builds with the `state-json` feature (the demo page's);
 * the published package leaves JSON out to stay small, and there it throws an `Error`.
 */
export function decide(policy: Policy, state: string | null | undefined, now: number, cost?: number): StatelessDecision;

/** Validates a policy and returns its canonical compact form; throws like `new Limiter`. */
export function parsePolicy(policy: Policy): string;

/** Options of {@link fetchWithBackoff}. */
export interface BackoffOptions {
  /** Attempts in all, the first included (default 4). */
  maxAttempts?: number;
  /** The first delay ceiling in ms (default 100); it doubles per attempt. */
  baseMs?: number;
  /** The largest delay ceiling in ms (default 10 000). */
  capMs?: number;
}

/**
 * `fetch` that retries 429 and 503 responses with full-jitter exponential backoff
 * (`random(0, min(capMs, baseMs * 2^(attempt-1)))`), honouring `Retry-After` (seconds or
 * HTTP-date) first. Only idempotent requests (GET, HEAD, OPTIONS, TRACE, PUT, DELETE) or
 * those with an `Idempotency-Key` header are retried. Resolves with the last response.
 * A `Request` input is cloned per attempt; a stream body in `init` cannot be retried.
 */
export function fetchWithBackoff(
  input: RequestInfo | URL,
  init?: RequestInit,
  options?: BackoffOptions & { fetch?: typeof fetch },
): Promise<Response>;

/** The schedule behind {@link fetchWithBackoff}, for other transports. */
export class Backoff {
  constructor(options?: BackoffOptions);
  /** The wait in ms after attempt `attempt` (from 1) failed, or -1: give up. */
  delay(attempt: number, retryAfter?: string | null, now?: number): number;
  /** The most full jitter may draw after attempt `attempt`. */
  ceiling(attempt: number): number;
}

/** Whether a response may be retried (429/503, and idempotent or keyed). */
export function isRetryable(method: string, hasIdempotencyKey: boolean, status: number): boolean;

/** `Retry-After` (seconds or HTTP-date) as ms from `now` (default `Date.now()`), or -1. */
export function parseRetryAfter(value: string, now?: number): number;

/** Options of an `AdaptiveLimiter`: the core's gradient controller's parameters (each optional: the core's default). */
export interface AdaptiveOptions {
  /** The floor (default 5). */
  minLimit?: number;
  /** The ceiling (default 1000). */
  maxLimit?: number;
  /** The limit before any sample (default 20). */
  initialLimit?: number;
  /** The shortest sampling window, in ms (default 100). */
  windowMs?: number;
  /** The samples a window needs before it closes, or the limit if lower (default 100). */
  minSamples?: number;
  /** The latency percentile compared with the no-load latency, 1-99 (default 90). */
  percentile?: number;
  /** The latency still counted as unloaded, in percent of the no-load latency (default 115). */
  tolerance?: number;
  /** The mean time between re-measurements of the no-load latency, in ms (default 30000). */
  probeIntervalMs?: number;
  /** The clock, in ms (default `performance.now()`). */
  clock?: () => number;
}

/** An admitted request's token, for `release`. */
export interface AdaptiveToken {
  /** When the request was admitted (ms, on the limiter's clock). */
  readonly start: number;
}

/** How an admitted request ended: `overload` (429/503/5xx) and `timeout` (given up, dropped) are congestion, not latency samples. */
export type AdaptiveOutcome = "success" | "overload" | "timeout";

/**
 * Adaptive concurrency: a limit that follows the latency its requests show (the core's
 * gradient controller). Per process by nature: there is no fleet store for it.
 */
export class AdaptiveLimiter {
  /** Throws a `TypeError` or `RangeError` naming the option (`field`) and its `rule`. */
  constructor(options?: AdaptiveOptions);
  /** A token if the limit has room, else `null` (shed the request). */
  acquire(now?: number): AdaptiveToken | null;
  /** Releases an admitted request once (a second release throws, `field: "token"`). */
  release(token: AdaptiveToken, options?: { outcome?: AdaptiveOutcome; latency?: number; start?: number; now?: number }): void;
  /** The limit now. */
  readonly limit: number;
  /** Requests admitted and not yet released. */
  readonly inFlight: number;
  /** Frees the wasm memory now. */
  free(): void;
}
