// Shared by the Express and Hono middleware: exemptions, the 429 body.

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
  return {
    limiter: o.limiter,
    name: o.name ?? "default",
    header: o.header?.toLowerCase(),
    key: o.key,
    cost: o.cost,
    legacy: o.legacy === true,
    exempt,
  };
}

/** The application/problem+json body of a 429 (draft-ietf-httpapi-ratelimit-headers). */
export function problem(name, decision) {
  return {
    type: "https://iana.org/assignments/http-problem-types#quota-exceeded",
    title: "Request cannot be satisfied as assigned quota has been exceeded",
    status: 429,
    "violated-policies": [name],
    "retry-after-ms": decision.retryAfter,
  };
}
