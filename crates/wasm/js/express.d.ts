import type { Limiter } from "./index.js";

/** Options of the Express middleware. */
export interface RateLimitOptions<Req = any> {
  /** The limiter that decides (`new Limiter("100/min")`, `Limiter.all([...])`). */
  limiter: Limiter;
  /**
   * Not needed: the headers (`RateLimit`/`RateLimit-Policy`, the 429's `violated-policies`)
   * use the limiter's own name (`new Limiter(policy, { name })`), the one its metrics use.
   * Accepted only when equal to it; a different name throws a `TypeError` (field `name`,
   * rule `not-the-limiters`).
   */
  name?: string;
  /** Key by this request header (e.g. `"x-api-key"`) instead of the client IP. */
  header?: string;
  /** Key by a function of the request (takes precedence over `header`). */
  key?: (req: Req) => string | undefined;
  /** The cost of a request (default 1). */
  cost?: number | ((req: Req) => number);
  /** Add `X-RateLimit-Limit/Remaining/Reset` too. */
  legacy?: boolean;
  /** Count the decisions under this route (a fixed pattern, e.g. `"/api"`) in the limiter's `metrics()` (`tollgate.route`). */
  route?: string;
  /** Paths never limited: a string matches itself and below, a RegExp or a predicate. */
  exempt?: Array<string | RegExp | ((path: string) => boolean)>;
}

/** An Express middleware: 429 with `Retry-After` and problem+json when limited. */
export function rateLimit<Req = any>(options: RateLimitOptions<Req>): (req: Req, res: any, next: (err?: unknown) => void) => void;
