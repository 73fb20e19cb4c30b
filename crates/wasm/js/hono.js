// Hono middleware: `app.use(rateLimiter({ limiter: new Limiter("100/min") }))`.
import { decide, headersOf, isExempt, options as normalise, planOf, problem, refusedKey, settleRequest } from "./middleware.js";
import { adaptiveOptions, outcomeOf, shedProblem } from "./web/adaptive.js";

/** The client IP: the Node adapter's socket, else Cloudflare's `CF-Connecting-IP`. */
function clientIp(c) {
  return c.env?.incoming?.socket?.remoteAddress ?? c.req.header("cf-connecting-ip") ?? "unknown";
}

/**
 * Settles the request's reservation once, when its response's body has ended or was
 * cancelled (`atBodyEnd`).
 */
function settleAtEnd(o, reservation, c) {
  const res = c.res;
  atBodyEnd(c, (cut) => settleRequest(o, reservation, c, res, cut));
}

/**
 * Calls `end(cut)` once, when the response's body has been read to its end (at once for a
 * response without a body; `cut` false), or when the body fails or is cancelled (the client
 * went away; `cut` true). The body is passed through a stream that sees both; the status and
 * headers are the app's.
 */
function atBodyEnd(c, end) {
  const res = c.res;
  let done = false;
  const settle = (cut) => {
    if (done) return;
    done = true;
    end(cut);
  };
  if (res.body === null) return settle(false);
  const reader = res.body.getReader();
  const body = new ReadableStream({
    async pull(controller) {
      let chunk;
      try {
        chunk = await reader.read();
      } catch (err) {
        settle(true);
        throw err;
      }
      if (chunk.done) {
        controller.close();
        settle(false);
      } else {
        controller.enqueue(chunk.value);
      }
    },
    async cancel(reason) {
      try {
        await reader.cancel(reason);
      } finally {
        settle(true);
      }
    },
  });
  c.res = new Response(body, res);
}

/**
 * Limits requests per client IP (the Node adapter's socket address, or `CF-Connecting-IP`
 * on Cloudflare; never `X-Forwarded-For`), per header value (`header: "x-api-key"`, falling
 * back to the IP) or per `key(c)` (`undefined`: the IP). With a `PlanLimiter`
 * (tollgate/plans), `plan(c)` names the request's plan (`undefined` or a name that is no
 * plan: the default plan), typically from what `hono/jwt` verified (`c.get("jwtPayload")`),
 * and the headers carry that plan's numbers and policy. Allowed requests get `RateLimit-Policy`/`RateLimit`
 * headers; denied ones a 429 with `Retry-After`, `Cache-Control: no-store` and an
 * application/problem+json body. `exempt` paths are never counted. A key longer than the
 * core's bound on a key's bytes is answered 400 with an application/problem+json body.
 */
export function rateLimiter(opts) {
  const o = normalise(opts);
  return async function tollgateRateLimiter(c, next) {
    if (isExempt(o.exempt, c.req.path)) return next();
    let key = o.key ? o.key(c) : undefined;
    if (key === undefined && o.header) key = c.req.header(o.header);
    if (key === undefined) key = clientIp(c);
    const cost = typeof o.cost === "function" ? o.cost(c) : o.cost;
    let decision;
    try {
      decision = decide(o.limiter, String(key), cost, o.route, o.settle, o.plans, planOf(o, [c]));
      // A RedisLimiter's decision comes later.
      if (typeof decision.then === "function") decision = await decision;
    } catch (err) {
      const refused = refusedKey(err);
      if (refused === undefined) throw err;
      return new Response(refused, { status: 400, headers: { "Content-Type": "application/problem+json" } });
    }
    const h = headersOf(o, decision);
    if (!decision.allowed) {
      return new Response(problem(o, decision), {
        status: 429,
        headers: { ...h, "Cache-Control": "no-store", "Content-Type": "application/problem+json" },
      });
    }
    await next();
    for (const [k, v] of Object.entries(h)) c.res.headers.set(k, v);
    if (decision.reservation !== undefined) settleAtEnd(o, decision.reservation, c);
  };
}

/**
 * Adaptive concurrency (`AdaptiveLimiter`): a request the limit has no room for is shed with
 * a 503, `Retry-After` and an application/problem+json body; an admitted one is released
 * when its response's body has ended (a 5xx or 429 as overload, else its latency is a
 * sample), or as a timeout when the handler throws or the body is cancelled (the client
 * went away). One limit for the routes it is mounted on: mount one per route.
 */
export function adaptiveLimiter(opts) {
  const o = adaptiveOptions(opts);
  return async function tollgateAdaptive(c, next) {
    const token = o.limiter.acquire();
    if (token === null) {
      return new Response(shedProblem(o.limiter.limit), {
        status: 503,
        headers: {
          "Content-Type": "application/problem+json",
          "Retry-After": o.retryAfter,
          "Cache-Control": "no-store",
        },
      });
    }
    try {
      await next();
    } catch (err) {
      o.limiter.release(token, { outcome: "timeout" });
      throw err;
    }
    const outcome = outcomeOf(c.res.status);
    atBodyEnd(c, (cut) => o.limiter.release(token, { outcome: cut ? "timeout" : outcome }));
  };
}
