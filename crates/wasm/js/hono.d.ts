import type { AdaptiveLimiter, Limiter } from "./index.js";
import type { RedisLimiter, RedisPlans } from "./redis.js";
import type { PlanLimiter } from "./plans.js";

/** Options of the Hono middleware. */
export interface RateLimiterOptions<C = any> {
  /** The limiter that decides (a `Limiter`, or a fleet's `RedisLimiter` of `tollgate/redis`: Node). A `PlanLimiter` of `tollgate/plans`, or a fleet's `RedisPlans`, gives each request its plan's limits (`plan`). */
  limiter: Limiter | RedisLimiter | PlanLimiter | RedisPlans;
  /**
   * Not needed: the headers (`RateLimit`/`RateLimit-Policy`, the 429's `violated-policies`)
   * use the limiter's own name (`new Limiter(policy, { name })`), the one its metrics use.
   * Accepted only when equal to it; a different name throws a `TypeError` (field `name`,
   * rule `not-the-limiters`).
   */
  name?: string;
  /** Key by this request header (e.g. `"x-api-key"`) instead of the client IP. */
  header?: string;
  /** Key by a function of the context (takes precedence over `header`). */
  key?: (c: C) => string | undefined;
  /**
   * With a `PlanLimiter` or `RedisPlans`: the request's plan, typically from what `hono/jwt` verified (`c.get("jwtPayload")`); `undefined`, or a name that
   * is none of the plans, counts under the limiter's default plan. The headers carry the plan's
   * numbers and policy, named by the plan. (A `PlanLimiter` or `RedisPlans` takes no `name`, `route` or
   * response cost.)
   */
  plan?: (c: C) => string | undefined;
  /**
   * The cost of a request (default 1); or a measured cost: `estimate` reserved at the
   * request, `actual` settled when the response ends or the client aborts (a streamed
   * body included; when the body stream ends or is cancelled); `undefined` from `actual` keeps the estimate. Needs a limiter
   * of one policy.
   */
  cost?: number | ((c: C) => number) | { estimate: (c: C) => number; actual: (c: C, res: Response) => number | undefined };
  /** express-rate-limit's: give a request back (settle 0) when its response succeeded. */
  skipSuccessfulRequests?: boolean;
  /** express-rate-limit's: give a request back when its response failed, or was cut off before its end. */
  skipFailedRequests?: boolean;
  /** Whether a response succeeded, for the skip options (default: status below 400). */
  requestWasSuccessful?: (c: C, res: Response) => boolean;
  /** Where a failed settle goes (an `actual` that is not a whole number, ...): the request stays charged at its estimate. Default: `console.error`. */
  onSettleError?: (err: unknown, c: C) => void;
  /** Add `X-RateLimit-Limit/Remaining/Reset` too. */
  legacy?: boolean;
  /** Count the decisions under this route (a fixed pattern, e.g. `"/api"`) in the limiter's `metrics()` (`tollgate.route`). */
  route?: string;
  /** Paths never limited: a string matches itself and below, a RegExp or a predicate. */
  exempt?: Array<string | RegExp | ((path: string) => boolean)>;
}

/** A Hono middleware: 429 with `Retry-After` and problem+json when limited. */
export function rateLimiter<C = any>(options: RateLimiterOptions<C>): (c: C, next: () => Promise<void>) => Promise<Response | void>;

/** Options of the adaptive concurrency middleware. */
export interface AdaptiveLimitOptions {
  /** The limiter (`new AdaptiveLimiter()`): one per route it guards. */
  limiter: AdaptiveLimiter;
  /** `Retry-After` of a shed request, in seconds (default 1). */
  retryAfter?: number;
}

/** Adaptive concurrency: a 503 with `Retry-After` and problem+json when shed; released when the response body ends (or is cancelled: a timeout). */
export function adaptiveLimiter<C = any>(options: AdaptiveLimitOptions): (c: C, next: () => Promise<void>) => Promise<Response | void>;
