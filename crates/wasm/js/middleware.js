// Shared by the Express and Hono middleware: exemptions, the decision, the 429 body.

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
  return {
    limiter: o.limiter,
    route: o.route,
    name: nameOf(o),
    header: o.header?.toLowerCase(),
    key: o.key,
    cost: o.cost,
    legacy: o.legacy === true,
    exempt,
  };
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
 * counted under `route` in the limiter's metrics when the middleware was given one.
 */
export function decide(limiter, key, cost, route) {
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
export function problem(limiter, decision, name) {
  return limiter.problem(decision, name);
}
