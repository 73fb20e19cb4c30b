// Compiled with `tsc --noEmit` against the package's .d.ts (test/types.test.js): the
// documented API must type-check as users write it.
import { Limiter, headers, fetchWithBackoff, Backoff, parsePolicy, WaitTimeoutError, type Decision, type TollgateError } from "tollgate";
import init, { Limiter as WebLimiter } from "tollgate/web";
import { rateLimit } from "tollgate/express";
import { rateLimiter } from "tollgate/hono";

const limiter = new Limiter("10/s burst 20", { maxKeys: 10_000 });
const d: Decision = limiter.check("ip", { cost: 2, now: Date.now(), tenant: "acme" });
const allowed: boolean = d.allowed;
const wait: number = d.retryAfter + d.resetAfter + d.delay + d.limit + d.remaining;
limiter.peek("ip");
const admitted: boolean = limiter.allow("ip", { cost: 2 });
void admitted;
limiter.release("ip", { cost: 1 });
const forgot: boolean = limiter.reset("ip");
const n: number = limiter.size;
const ps: string[] = limiter.policies;
const h = limiter.headers(d, "per-ip", { legacy: true });
const ra: string | undefined = h["Retry-After"];
headers(d, "per-ip", { policy: { algorithm: "gcra", limit: 10, window: "1s", burst: 5 } });
Limiter.all(["10/s", { algorithm: "fixed-window", limit: 100, window: 60_000 }]);
Limiter.fairShare("10/s", "sliding-window 4/s");
const turn: Promise<Decision> = limiter.acquire("whois", { cost: 1, maxWait: 5_000, signal: AbortSignal.timeout(10_000), tenant: "acme", jitter: 3 });
turn.catch((e) => {
  if (e instanceof WaitTimeoutError) {
    const ms: number = e.waited + e.retryAfter;
    void ms;
  }
});
const lookup = limiter.throttle(async (domain: string, port: number) => `${domain}:${port}`, { key: (domain) => domain, maxWait: 1_000 });
const out: Promise<string> = lookup("example.com", 43);
void out;
parsePolicy("100/min");
new Backoff({ baseMs: 100, capMs: 1000, maxAttempts: 3 }).delay(1, "5");
const res: Promise<Response> = fetchWithBackoff("https://example.invalid/", { method: "GET" }, { maxAttempts: 3 });
try {
  new Limiter("10/fortnight");
} catch (e) {
  const err = e as TollgateError;
  const f: string = err.field + err.rule;
  void f;
}
await init();
new WebLimiter("1/s");
rateLimit({ limiter, header: "x-api-key", exempt: ["/health", /^\/static\//] });
rateLimiter({ limiter, name: "per-ip", key: () => "k" });
void allowed, wait, forgot, n, ps, ra, res;

// tollgate/redis (the client is the caller's: any object with sendCommand, ioredis, node-redis).
import { RedisLimiter, RedisLimiterError, WaitTimeoutError as FleetWaitTimeout, type FleetDecision, type RedisLimiterStats } from "tollgate/redis";
const client = { sendCommand: async (args: (string | Uint8Array)[]): Promise<unknown> => args.length };
const fleet = new RedisLimiter(client, { fairShare: { shared: "2/2s", tenant: "1/2s" } }, { namespace: "whois", fallback: "local", timeout: 50 });
new RedisLimiter(client, ["10/s", "fixed-window 100/min"], { namespace: "dns", fallback: "closed", prefix: "tg", useModule: false });
async function fleetUse(): Promise<void> {
  const fd: FleetDecision = await fleet.check("1.2.3.4", { cost: 1, tenant: "acme" });
  const where: "redis" | "deny-cache" | "fallback" = fd.source;
  const first: boolean = fd.each[0].allowed && fd.allowed;
  await fleet.peek("1.2.3.4", { tenant: "acme" });
  await fleet.release("1.2.3.4");
  const was: boolean = await fleet.reset("1.2.3.4");
  const waited: FleetDecision = await fleet.acquire("1.2.3.4", { cost: 1, maxWait: 500, tenant: "acme", jitter: 5, signal: AbortSignal.timeout(1000) });
  const lookup = fleet.throttle(async (domain: string) => domain.length, { key: (d) => d, maxWait: 500 });
  const len: number = await lookup("example.com");
  try {
    await fleet.acquire("x", { maxWait: 0 });
  } catch (e) {
    if (e instanceof FleetWaitTimeout) void (e.waited + e.retryAfter);
  }
  void [waited.delay, len];
  const s: RedisLimiterStats = fleet.stats();
  void [where, first, was, s.redis + s.denyCache + s.fallback + s.indeterminate + s.conflicts + s.roundTrips];
  try {
    await fleet.check("x");
  } catch (e) {
    if (e instanceof RedisLimiterError && e.code === "corrupt-state") void e.key;
  }
  const reserved = await fleet.reserve("llm", 800);
  if (reserved.reservation !== undefined) {
    const kept: string = JSON.stringify(reserved.reservation);
    try {
      const settled = await fleet.settle(JSON.parse(kept), 312, { overage: "up-to-limit" });
      void [settled.refunded, settled.charged, settled.unpaid];
    } catch (e) {
      if (e instanceof RedisLimiterError && e.code === "settle-unknown") void e.why;
    }
  }
  const h: Record<string, string> = fleet.headers(reserved, fleet.name, { legacy: true });
  void [h, fleet.problem(reserved)];
}
void fleetUse;
rateLimit({ limiter: fleet, cost: { estimate: () => 1000, actual: () => 120 } });

// Counts (tollgate/metrics, tollgate/otel).
import type { Counts } from "tollgate";
import { prometheus, metricModel, type MetricModel } from "tollgate/metrics";
import { registerMetrics } from "tollgate/otel";
import { metrics as otelMetrics } from "@opentelemetry/api";
{
  const named = new Limiter("10/s", { name: "api" });
  named.check("k", { route: "/api" });
  const [c]: Counts[] = named.metrics();
  const n: number = c.decisions.admitted.store + c.decisions.denied.denyCache + c.decisions.shadowDenied.fallback + c.nearLimit;
  const f: number = c.storeFailures.local.unreachable + c.storeFailures.open.timeout + c.storeFailures.closed.indeterminate;
  const w: number[] = c.wait.gaveUp.buckets;
  const text: string = prometheus([named, fleet, ...fleet.metrics()]) + fleet.prometheus();
  const model: MetricModel = metricModel();
  const registration = registerMetrics([named, fleet], { meter: otelMetrics.getMeter("app") });
  registration.unregister();
  void [n, f, w, text, model.instruments.decisions.name, c.route, c.concurrencyInUse];
}

// Reserve and settle; the middleware charged by the response.
import type { Reservation, Settlement } from "tollgate";
const tokens = new Limiter("gcra 10000/min", { maxReservations: 1000 });
const reserved = tokens.reserve("alice", 800);
if (reserved.allowed && reserved.reservation) {
  const kept: Reservation = JSON.parse(JSON.stringify(reserved.reservation));
  const s: Settlement = tokens.settle(kept, 300, { overage: "up-to-limit" });
  const refunded: number = s.refunded + s.charged + s.unpaid + (s.each?.length ?? 0);
  void refunded;
}
rateLimit({ limiter: tokens, skipSuccessfulRequests: true, requestWasSuccessful: (_req, res) => res.statusCode < 400 });
rateLimit<{ get(h: string): string | undefined }>({
  limiter: tokens,
  cost: { estimate: () => 1000, actual: (_req, res) => res.locals.usage },
  onSettleError: (err) => console.error(err),
});
rateLimiter({ limiter: tokens, skipFailedRequests: true, cost: { estimate: () => 10, actual: (_c, res: Response) => (res.ok ? 5 : undefined) } });

// Adaptive concurrency.
import { AdaptiveLimiter, type AdaptiveToken } from "tollgate";
import { adaptiveLimit } from "tollgate/express";
import { adaptiveLimiter } from "tollgate/hono";
{
  const adaptive = new AdaptiveLimiter({ minLimit: 2, windowMs: 50, clock: () => performance.now() });
  const token: AdaptiveToken | null = adaptive.acquire();
  if (token) adaptive.release(token, { outcome: "overload", latency: 12 });
  const n: number = adaptive.limit + adaptive.inFlight;
  void n;
  const mw = adaptiveLimit({ limiter: adaptive, retryAfter: 1 });
  const hmw = adaptiveLimiter({ limiter: adaptive });
  void mw;
  void hmw;
}

// tollgate/plans: limits by the caller's plan, overrides, and the middleware's plan(req).
import { PlanLimiter, type PlanDecision } from "tollgate/plans";
const plans = new PlanLimiter({ plans: { free: "100/min", pro: ["1000/min", "50/s"] }, default: "free", maxKeys: 10_000, maxOverrides: 100 });
const pd: PlanDecision = plans.check("user-1", "pro", { cost: 1, now: Date.now() });
const byPlan: string | null = pd.plan;
const detailedEach: number = plans.checkDetailed("user-1", undefined).each.length;
plans.set("user-1", { plan: "pro" });
plans.set("user-2", { limits: ["5/s"] });
const o = plans.get("user-1");
const cleared: boolean = plans.clear("user-1");
const planHeaders = plans.headers(pd, { legacy: true });
const body: string | undefined = plans.problem(pd);
const names: string[] = plans.plans;
rateLimit({ limiter: plans, key: (req) => req.auth?.sub, plan: (req, res) => res.locals.auth?.plan ?? req.auth?.plan });
rateLimiter({ limiter: plans, key: (c) => c.get("jwtPayload")?.sub, plan: (c) => c.get("jwtPayload")?.plan });
void byPlan, detailedEach, o, cleared, planHeaders, body, names, plans.defaultPlan, plans.policiesOf("pro");
