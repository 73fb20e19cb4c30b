// Express middleware: `app.use(rateLimit({ limiter: new Limiter("100/min") }))`.
import { decide, headersOf, isExempt, options as normalise, planOf, problem, refusedKey, settleRequest } from "./middleware.js";
import { adaptiveOptions, outcomeOf, shedProblem } from "./web/adaptive.js";

/**
 * Settles the request's reservation once, when its response ends (`finish`) or, cut off
 * before, when the connection closes (`close`). The settle after a `close` waits a turn of
 * the event loop, so that the route's own `close` handlers (registered after this one), which
 * record what a stream sent before the abort, run first.
 */
function settleAtEnd(o, reservation, req, res) {
  let done = false;
  const settle = (cut) => {
    if (done) return;
    done = true;
    settleRequest(o, reservation, req, res, cut);
  };
  res.on("finish", () => settle(false));
  res.on("close", () => {
    if (!res.writableFinished) setImmediate(() => settle(true));
  });
}

/**
 * Limits requests per client IP (`req.ip`, which honours Express's `trust proxy` setting),
 * per header value (`header: "x-api-key"`; requests without it fall back to the IP) or per
 * `key(req, res)` (`undefined`: the IP). With a `PlanLimiter` (tollgate/plans), `plan(req,
 * res)` names the request's plan (`undefined` or a name that is no plan: the default plan),
 * typically from what an auth middleware in front verified (`req.auth`, `res.locals`), and
 * the headers carry that plan's numbers and policy. Allowed requests get `RateLimit-Policy`/`RateLimit` headers; denied ones a 429
 * with `Retry-After`, `Cache-Control: no-store` and an application/problem+json body.
 * `exempt` paths are never counted. With `route`, the limiter counts the decisions under that
 * route in its `metrics()` (the `tollgate.route` attribute). A key longer than the core's
 * bound on a key's bytes is answered 400 with an application/problem+json body, uncounted.
 */
export function rateLimit(opts) {
  const o = normalise(opts);
  // With skipSuccessfulRequests / skipFailedRequests / `cost: { estimate, actual }`, the
  // request reserves its estimate and is settled when its response ends (settleAtEnd).
  return function tollgateRateLimit(req, res, next) {
    if (isExempt(o.exempt, req.path)) return next();
    let key = o.key ? o.key(req, res) : undefined;
    if (key === undefined && o.header) key = req.get(o.header);
    if (key === undefined) key = req.ip ?? req.socket?.remoteAddress ?? "unknown";
    const refuse = (err) => {
      const refused = refusedKey(err);
      if (refused === undefined) return next(err);
      return res.status(400).type("application/problem+json").send(refused);
    };
    let decision;
    try {
      const cost = typeof o.cost === "function" ? o.cost(req) : o.cost;
      decision = decide(o.limiter, String(key), cost, o.route, o.settle, o.plans, planOf(o, [req, res]));
    } catch (err) {
      return refuse(err);
    }
    // A RedisLimiter's decision comes later; an in-memory one is answered in this turn.
    if (typeof decision.then === "function") {
      decision.then((d) => answer(o, d, req, res, next)).catch(refuse);
      return;
    }
    answer(o, decision, req, res, next);
  };
}

/** Answers a request on its decision: headers, then the app (settled at the end), or a 429. */
function answer(o, decision, req, res, next) {
  res.set(headersOf(o, decision));
  if (decision.allowed) {
    if (decision.reservation !== undefined) settleAtEnd(o, decision.reservation, req, res);
    return next();
  }
  res.status(429).set("Cache-Control", "no-store").type("application/problem+json");
  res.send(problem(o, decision));
}

/**
 * Adaptive concurrency (`AdaptiveLimiter`): a request the limit has no room for is shed with
 * a 503, `Retry-After` and an application/problem+json body; an admitted one is released
 * when its response has been sent (`finish`: a 5xx or 429 as overload, else its latency is
 * a sample), or as a timeout when the connection closes first (the client went away). One
 * limit for the routes it is mounted on: mount one per route (`app.use("/search", ...)`).
 */
export function adaptiveLimit(opts) {
  const o = adaptiveOptions(opts);
  return function tollgateAdaptive(req, res, next) {
    const token = o.limiter.acquire();
    if (token === null) {
      res.status(503).set("Retry-After", o.retryAfter).set("Cache-Control", "no-store");
      return res.type("application/problem+json").send(shedProblem(o.limiter.limit));
    }
    let done = false;
    const release = (outcome) => {
      if (done) return;
      done = true;
      o.limiter.release(token, { outcome });
    };
    res.once("finish", () => release(outcomeOf(res.statusCode)));
    res.once("close", () => release("timeout"));
    next();
  };
}
