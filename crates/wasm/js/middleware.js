// Shared by the Express and Hono middleware: exemptions, the decision, the 429 body, and
// the settle of a request charged by its response (reserve at the request, settle at the
// end: the limiter's `reserve` and `settle`, the core's rule).

/** Whether `path` is exempt: a string matches itself and everything below it, a RegExp tests. */
export function isExempt(exempt, path) {
  for (const rule of exempt) {
    if (typeof rule === "string") {
      if (path === rule || path.startsWith(rule.endsWith("/") ? rule : rule + "/")) return true;
    } else if (rule instanceof RegExp) {
      if (rule.test(path)) return true;
    } else if (typeof rule === "function") {
      if (rule(path)) return true;
    }
  }
  return false;
}

/** Validates the common options; returns them normalised. */
export function options(o) {
  if (o === null || typeof o !== "object" || typeof o.limiter?.check !== "function") {
    const e = new TypeError("invalid option: limiter: pass { limiter: new Limiter(policy) } [missing]");
    e.field = "limiter";
    e.rule = "missing";
    throw e;
  }
  const exempt = o.exempt ?? [];
  if (!Array.isArray(exempt)) {
    const e = new TypeError("invalid option: exempt: must be an array of paths, RegExps or functions [not-an-array]");
    e.field = "exempt";
    e.rule = "not-an-array";
    throw e;
  }
  if (o.route !== undefined && (typeof o.route !== "string" || o.route === "")) {
    const e = new TypeError("invalid option: route: must be a non-empty string [not-a-string]");
    e.field = "route";
    e.rule = "not-a-string";
    throw e;
  }
  const settle = settleOptions(o);
  const plans = planOptions(o);
  return {
    limiter: o.limiter,
    route: o.route,
    name: plans === undefined ? nameOf(o) : undefined,
    header: o.header?.toLowerCase(),
    key: o.key,
    plans,
    plan: o.plan,
    cost: settle?.estimate ?? o.cost,
    legacy: o.legacy === true,
    exempt,
    settle,
  };
}

/**
 * With a `PlanLimiter` (tollgate/plans) or a `RedisPlans` (tollgate/redis), recognised by
 * their `plans` and `defaultPlan`: its
 * plans' names, for `plan(req)`'s answer; `undefined` for any other limiter, which a `plan`
 * option cannot go with. A PlanLimiter's headers name the plan that decided, so a `name` is
 * refused; it keeps no metrics, so a `route` is too.
 */
function planOptions(o) {
  const planned = Array.isArray(o.limiter.plans) && typeof o.limiter.defaultPlan === "string";
  if (o.plan !== undefined && typeof o.plan !== "function") {
    throw invalid("plan", "not-a-function", "must be a function of the request answering a plan's name (or undefined)");
  }
  if (!planned) {
    if (o.plan !== undefined) throw invalid("plan", "not-a-plan-limiter", "plan(req) needs a PlanLimiter (tollgate/plans) or a RedisPlans (tollgate/redis) as the limiter");
    return undefined;
  }
  if (o.name !== undefined) throw invalid("name", "plan-named", "a PlanLimiter's headers name the plan that decided: leave name out");
  if (o.route !== undefined) throw invalid("route", "no-metrics", "a PlanLimiter keeps no metrics per route: leave route out");
  return new Set(o.limiter.plans);
}

/**
 * The plan a request counts under: `plan(req, ...)`'s answer when it names one of the plans;
 * anything else (`undefined`, no `plan` option, a name that is no plan, not a string) is the
 * limiter's default plan (`undefined`), as the tower layer counts a plan it does not know.
 */
export function planOf(o, args) {
  if (o.plan === undefined) return undefined;
  const plan = o.plan(...args);
  return typeof plan === "string" && o.plans.has(plan) ? plan : undefined;
}

/** A middleware option error naming `field` and the rule broken. */
function invalid(field, rule, explanation) {
  const e = new TypeError(`invalid option: ${field}: ${explanation} [${rule}]`);
  e.field = field;
  e.rule = rule;
  return e;
}

/** express-rate-limit's default: a response below 400 succeeded (Express' `statusCode`, a Response's `status`). */
function belowFourHundred(_req, res) {
  return (res.statusCode ?? res.status) < 400;
}

/**
 * The options of a request charged by its response, normalised; `undefined` when none is
 * given (the request is charged its cost at once, as before):
 * `skipSuccessfulRequests` / `skipFailedRequests` (express-rate-limit's: give the request
 * back when its response succeeded / failed, by `requestWasSuccessful(req, res)`, default
 * status < 400; a response cut off before its end failed), and `cost: { estimate(req),
 * actual(req, res) }` (a measured cost: the estimate reserved, the actual settled when the
 * response ends or the client aborts; `undefined` from `actual` leaves the estimate).
 * Reserve and settle need a limiter of one policy (a stack's or fair share's headers need
 * each limit's decision, which a reserve does not answer).
 */
function settleOptions(o) {
  const measured = o.cost !== null && typeof o.cost === "object";
  const { skipSuccessfulRequests: skipOk = false, skipFailedRequests: skipFailed = false } = o;
  const wasSuccessful = o.requestWasSuccessful ?? belowFourHundred;
  for (const [field, v] of [["skipSuccessfulRequests", skipOk], ["skipFailedRequests", skipFailed]]) {
    if (typeof v !== "boolean") throw invalid(field, "not-a-boolean", "must be true or false");
  }
  if (typeof wasSuccessful !== "function") throw invalid("requestWasSuccessful", "not-a-function", "must be a function (req, res) => boolean");
  if (measured) {
    for (const f of ["estimate", "actual"]) {
      if (typeof o.cost[f] !== "function") throw invalid(`cost.${f}`, "not-a-function", "must be a function");
    }
  }
  if (!measured && !skipOk && !skipFailed) return undefined;
  if (typeof o.limiter.reserve !== "function" || typeof o.limiter.settle !== "function") {
    throw invalid("limiter", "no-reserve", "a response's cost needs a limiter with reserve and settle");
  }
  if (Array.isArray(o.limiter.policies) && o.limiter.policies.length !== 1) {
    throw invalid("limiter", "not-one-policy", "a response's cost needs a limiter of one policy (not a stack or fair share)");
  }
  const onError = o.onSettleError ?? ((err) => console.error("tollgate: a settle failed; the request stays charged at its estimate:", err));
  if (typeof onError !== "function") throw invalid("onSettleError", "not-a-function", "must be a function (err, req)");
  return {
    estimate: measured ? o.cost.estimate : o.cost,
    actual: measured ? o.cost.actual : undefined,
    skipOk,
    skipFailed,
    wasSuccessful,
    onError,
  };
}

/**
 * Settles the request `req` whose response `res` ended (`cut` when it was cut off before
 * its end: a client abort, a cancelled stream) on `reservation`: nothing charged when the
 * skip options give it back, else the measured actual cost, else the estimate kept. A
 * settle that fails (an actual that is not a whole number, ...) leaves the estimate charged
 * and goes to `onSettleError`.
 */
export function settleRequest(o, reservation, req, res, cut) {
  const s = o.settle;
  try {
    const succeeded = !cut && s.wasSuccessful(req, res);
    let actual;
    if ((succeeded && s.skipOk) || (!succeeded && s.skipFailed)) actual = 0;
    else if (s.actual !== undefined) actual = s.actual(req, res);
    const settled = o.limiter.settle(reservation, actual ?? reservation.estimate);
    // A RedisLimiter settles asynchronously: its failure goes the same way.
    if (typeof settled?.then === "function") settled.then(undefined, (err) => s.onError(err, req));
  } catch (err) {
    s.onError(err, req);
  }
}

/**
 * The name of the middleware's policy in `RateLimit-Policy`, `RateLimit` and the 429 body:
 * the limiter's own (`new Limiter(policy, { name })`, default `"default"`), which also names
 * its metrics series, so headers and metrics always agree. A middleware `name` is accepted
 * only when it is that same name: a different one would split the two silently, so it is
 * refused with a `TypeError` (field `name`, rule `not-the-limiters`) that says where the
 * name goes. A limiter-like object without a `name` takes the middleware's (or "default").
 */
function nameOf(o) {
  const own = o.limiter.name;
  if (typeof own !== "string") return o.name ?? "default";
  if (o.name !== undefined && o.name !== own) {
    const e = new TypeError(
      `invalid option: name: ${JSON.stringify(o.name)} is not the limiter's name ${JSON.stringify(own)}; ` +
        `name the limiter instead (new Limiter(policy, { name: ${JSON.stringify(o.name)} })): its name is the one in the headers and the metrics [not-the-limiters]`,
    );
    e.field = "name";
    e.rule = "not-the-limiters";
    e.value = o.name;
    throw e;
  }
  return own;
}

/**
 * Decides a request with the limiter's `checkDetailed` (each limit's decision, which a
 * stack's headers and 429 body need), or `check` for a limiter-like object without it;
 * counted under `route` in the limiter's metrics when the middleware was given one. A
 * `RedisLimiter`'s decision (each limit's too) is a promise.
 */
export function decide(limiter, key, cost, route, settle, plans, plan) {
  // A PlanLimiter: the request's plan, each limit's decision for the headers of a stack (a
  // RedisPlans' `check` answers each limit's, as a promise).
  if (plans !== undefined) {
    const opts = cost === undefined ? undefined : { cost };
    return typeof limiter.checkDetailed === "function" ? limiter.checkDetailed(key, plan, opts) : limiter.check(key, plan, opts);
  }
  // Charged by its response: the estimate reserved (the decision carries the reservation).
  if (settle !== undefined) return limiter.reserve(key, cost ?? 1);
  const opts = cost === undefined && route === undefined ? undefined : { cost, route };
  return typeof limiter.checkDetailed === "function" ? limiter.checkDetailed(key, opts) : limiter.check(key, opts);
}

/**
 * The answer to a request whose key (the key function's result, the header's value) the
 * limiter refused as longer than the core's bound on a key's bytes (its `RangeError` with
 * `rule: "too-long"`): the application/problem+json body of a 400 whose `detail` is the
 * core's message (`key: 2000 bytes, at most 1024 [too-long]`). `undefined` for any other
 * error, which goes to the app as before.
 */
export function refusedKey(err) {
  if (!(err instanceof RangeError) || err.rule !== "too-long") return undefined;
  return JSON.stringify({ type: "about:blank", title: "Bad Request", status: 400, detail: err.message });
}

/**
 * The application/problem+json body of a 429 (type quota-exceeded, `detail` with the wait,
 * `violated-policies`), built by the core: the same bytes as the edge worker's.
 */
export function problem(o, decision) {
  return o.plans === undefined ? o.limiter.problem(decision, o.name) : o.limiter.problem(decision);
}

/**
 * The `RateLimit` headers of a decision, the core's: under the limiter's name, or, for a
 * PlanLimiter, named by the plan that decided (`"pro"`; `"own"` for a key's own limits).
 */
export function headersOf(o, decision) {
  const options = { legacy: o.legacy };
  return o.plans === undefined ? o.limiter.headers(decision, o.name, options) : o.limiter.headers(decision, options);
}
