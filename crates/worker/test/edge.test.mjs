// End-to-end tests of the edge limiter under the local Workers runtime (Miniflare/workerd):
// the built worker, its Durable Object on SQLite, the demo origin.
import { test, beforeEach, before, after } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { start, hit, clearOfMinuteEdge } from "./harness.mjs";

// Per-minute windows: no test starts within 3 s of the minute's end.
beforeEach(() => clearOfMinuteEdge());

const sha256 = (k) => createHash("sha256").update(k).digest("hex");

const CONFIG = {
  // Isolate counters reach the stats object when stats are read (no background report
  // during these tests, so before/after comparisons are exact).
  // The API keys the per-key tests use are listed (by SHA-256), as a route counted only by
  // API key requires.
  settings: { shards: 4, stats_flush_ms: 3600000, api_keys: ["live_key_123", "other"].map(sha256) },
  policies: {
    "per-ip": { limit: "fixed-window 3/min", key: "ip" },
    "per-key": { limit: "fixed-window 2/min", key: "api-key" },
    "v6": { limit: "fixed-window 2/min", key: "ip" },
    "s-ip": { limit: "fixed-window 5/min", key: "ip" },
    "s-global": { limit: "fixed-window 3/min", key: "global" },
    "fs": { limit: "fixed-window 10/min", key: "global", tenant: "fixed-window 4/min" },
    "burst": { limit: "fixed-window 50/h", key: "ip", shards: 8 },
    "shadowed": { limit: "fixed-window 1/min", key: "ip" },
    "bucket": { limit: "token-bucket 10/min burst 4", key: "ip" },
    "catch-all": { limit: "1000/s", key: "ip" },
  },
  routes: [
    { name: "csp", path: "/csp-report", exempt: true },
    { name: "health", path: "/health", methods: ["GET"], exempt: true },
    { name: "ip", path: "/api/ip", policies: ["per-ip"] },
    { name: "key", path: "/api/key", policies: ["per-key"] },
    { name: "v6", path: "/api/v6", policies: ["v6"] },
    { name: "stack", path: "/api/stack", policies: ["s-ip", "s-global"] },
    { name: "fair", path: "/api/fair", policies: ["fs"] },
    { name: "burst", path: "/api/burst", policies: ["burst"] },
    { name: "shadow", path: "/api/shadow", policies: ["shadowed"], mode: "shadow" },
    { name: "cost", path: "/api/cost", policies: ["bucket"], cost: 3 },
    { name: "all", path: "/", policies: ["catch-all"] },
  ],
};

let edge;
before(async () => { edge = await start({ config: CONFIG }); });
after(async () => { await edge?.dispose(); });

/** Parses a Structured Field list of `"name";k=v;...` items into {name: {k: v}}. */
function sfList(value) {
  assert.ok(value, "header present");
  const out = {};
  for (const item of value.split(/,\s*/)) {
    const m = /^"([^"]*)"((?:;[a-z]+=\d+)*)$/.exec(item.trim());
    assert.ok(m, `sf item ${JSON.stringify(item)}`);
    const params = {};
    for (const p of m[2].split(";").slice(1)) {
      const [k, v] = p.split("=");
      params[k] = Number(v);
    }
    out[m[1]] = params;
  }
  return out;
}

async function statuses(p, n, opts) {
  const out = [];
  for (let i = 0; i < n; i++) out.push((await hit(edge, p, opts)).status);
  return out;
}

test("per-IP limit: headers parsed back, 429 problem document, other IPs unaffected", async () => {
  const ip = "203.0.113.10";
  for (let i = 0; i < 3; i++) {
    const r = await hit(edge, "/api/ip", { ip });
    assert.equal(r.status, 200);
    assert.equal(JSON.parse(r.text).origin, "tollgate demo origin");
    assert.deepEqual(sfList(r.headers.get("ratelimit-policy")), { "per-ip": { q: 3, w: 60 } });
    const rl = sfList(r.headers.get("ratelimit"))["per-ip"];
    assert.equal(rl.r, 2 - i);
    assert.ok(rl.t >= 1 && rl.t <= 60, `t=${rl.t}`);
  }
  const denied = await hit(edge, "/api/ip", { ip });
  assert.equal(denied.status, 429);
  assert.equal(denied.headers.get("content-type"), "application/problem+json");
  assert.equal(denied.headers.get("cache-control"), "no-store");
  const retry = Number(denied.headers.get("retry-after"));
  assert.ok(Number.isInteger(retry) && retry >= 1 && retry <= 60, `Retry-After ${retry}`);
  assert.equal(sfList(denied.headers.get("ratelimit"))["per-ip"].r, 0);
  const body = JSON.parse(denied.text);
  assert.equal(body.type, "https://iana.org/assignments/http-problem-types#quota-exceeded");
  assert.equal(body.status, 429);
  assert.deepEqual(body["violated-policies"], ["per-ip"]);
  assert.equal((await hit(edge, "/api/ip", { ip: "203.0.113.11" })).status, 200);
});

test("deny cache: a denied key is rejected in the isolate, and counted", async () => {
  const ip = "203.0.113.20";
  assert.deepEqual(await statuses("/api/ip", 3, { ip }), [200, 200, 200]);
  const first = await hit(edge, "/api/ip", { ip });
  assert.equal(first.status, 429);
  assert.equal(first.headers.get("tollgate-deny-cache"), null);
  const before = (await edge.stats())["per-ip"];
  const second = await hit(edge, "/api/ip", { ip });
  assert.equal(second.status, 429);
  assert.equal(second.headers.get("tollgate-deny-cache"), "hit");
  assert.ok(Number(second.headers.get("retry-after")) >= 1);
  assert.deepEqual(JSON.parse(second.text)["violated-policies"], ["per-ip"]);
  const after = (await edge.stats())["per-ip"];
  assert.equal(after.denyCache, before.denyCache + 1);
  assert.equal(after.denied, before.denied, "no coordinator round trip");
});

test("per-API-key limit: one key shares a bucket across IPs; the key is hashed", async () => {
  const k = { "x-api-key": "live_key_123" };
  assert.equal((await hit(edge, "/api/key", { ip: "198.51.100.1", headers: k })).status, 200);
  assert.equal((await hit(edge, "/api/key", { ip: "198.51.100.2", headers: k })).status, 200);
  assert.equal((await hit(edge, "/api/key", { ip: "198.51.100.3", headers: k })).status, 429);
  const bearer = { authorization: "Bearer live_key_123" };
  assert.equal((await hit(edge, "/api/key", { ip: "198.51.100.4", headers: bearer })).status, 429);
  assert.equal((await hit(edge, "/api/key", { ip: "198.51.100.3", headers: { "x-api-key": "other" } })).status, 200);
  const read = await edge.admin("/admin/v1/keys/read", { policy: "per-key", apiKey: "live_key_123" });
  assert.equal(read.status, 200);
  assert.match(read.body.key, /^key:[0-9a-f]{64}$/);
  assert.ok(!JSON.stringify(read.body).includes("live_key_123"), "raw key never leaves");
  assert.equal(read.body.decision.remaining, 0);
});

test("IPv6 addresses in one /64 share a bucket; IPv4-mapped IPv6 is IPv4", async () => {
  assert.equal((await hit(edge, "/api/v6", { ip: "2001:db8:aa:1::1" })).status, 200);
  assert.equal((await hit(edge, "/api/v6", { ip: "2001:db8:aa:1:ffff:ffff:ffff:fffe" })).status, 200);
  assert.equal((await hit(edge, "/api/v6", { ip: "2001:db8:aa:1::99" })).status, 429);
  assert.equal((await hit(edge, "/api/v6", { ip: "2001:db8:aa:2::1" })).status, 200, "next /64");
  assert.equal((await hit(edge, "/api/v6", { ip: "192.0.2.77" })).status, 200);
  assert.equal((await hit(edge, "/api/v6", { ip: "::ffff:192.0.2.77" })).status, 200);
  assert.equal((await hit(edge, "/api/v6", { ip: "192.0.2.77" })).status, 429);
});

test("a spoofed X-Forwarded-For is ignored", async () => {
  const ip = "203.0.113.30";
  const codes = [];
  for (let i = 0; i < 5; i++) {
    codes.push((await hit(edge, "/api/ip", { ip, headers: { "x-forwarded-for": `10.9.8.${i}` } })).status);
  }
  assert.deepEqual(codes, [200, 200, 200, 429, 429]);
});

test("a stack denies without partially charging", async () => {
  // s-global (3/min) runs out first; IP B's own 5/min window must not be charged.
  assert.deepEqual(await statuses("/api/stack", 3, { ip: "192.0.2.1" }), [200, 200, 200]);
  const denied = await hit(edge, "/api/stack", { ip: "192.0.2.2" });
  assert.equal(denied.status, 429);
  assert.deepEqual(JSON.parse(denied.text)["violated-policies"], ["s-global"]);
  // RateLimit-Policy describes both limits; RateLimit the one that denied (the core's
  // choice, draft-ietf-httpapi-ratelimit-headers-11).
  assert.deepEqual(Object.keys(sfList(denied.headers.get("ratelimit-policy"))).sort(), ["s-global", "s-ip"]);
  const rl = sfList(denied.headers.get("ratelimit"));
  assert.deepEqual(Object.keys(rl), ["s-global"]);
  assert.equal(rl["s-global"].r, 0);
  const read = await edge.admin("/admin/v1/keys/read", { policy: "s-ip", ip: "192.0.2.2" });
  assert.equal(read.body.decision.remaining, 5);
  const readA = await edge.admin("/admin/v1/keys/read", { policy: "s-ip", ip: "192.0.2.1" });
  assert.equal(readA.body.decision.remaining, 2);
});

test("fair share between two tenants over a shared bucket", async () => {
  const as = (tenant, n) => statuses("/api/fair", n, { ip: "192.0.2.50", headers: { "x-tenant": tenant } });
  assert.deepEqual(await as("acme", 6), [200, 200, 200, 200, 429, 429]);
  assert.deepEqual(await as("globex", 6), [200, 200, 200, 200, 429, 429]);
  const r = await hit(edge, "/api/fair", { headers: { "x-tenant": "globex" } });
  assert.deepEqual(JSON.parse(r.text)["violated-policies"], ["fs.tenant"]);
  // 8 of the shared 10 are spent: a third tenant gets the last 2, then the shared bucket denies.
  assert.deepEqual(await as("initech", 3), [200, 200, 429]);
  const r2 = await hit(edge, "/api/fair", { headers: { "x-tenant": "default" } });
  assert.equal(r2.status, 429);
  assert.deepEqual(JSON.parse(r2.text)["violated-policies"], ["fs"]);
});

test("exempt routes never touch a bucket", async () => {
  const before = await edge.stats();
  for (let i = 0; i < 20; i++) {
    const r = await hit(edge, "/csp-report", { ip: "192.0.2.60", method: "POST", body: "{}" });
    assert.equal(r.status, 204);
    assert.equal(r.headers.get("ratelimit"), null);
  }
  assert.equal((await hit(edge, "/health", { ip: "192.0.2.60" })).text, "ok");
  assert.deepEqual(await edge.stats(), before);
  // The catch-all route does limit other paths.
  assert.ok((await hit(edge, "/other", { ip: "192.0.2.60" })).headers.get("ratelimit"));
});

test("cost per route is charged", async () => {
  const ip = "192.0.2.70";
  const r = await hit(edge, "/api/cost", { ip });
  assert.equal(r.status, 200);
  assert.equal(sfList(r.headers.get("ratelimit")).bucket.r, 1);
  assert.equal((await hit(edge, "/api/cost", { ip })).status, 429);
});

test("shadow mode decides and reports, never denies", async () => {
  const ip = "192.0.2.80";
  const a = await hit(edge, "/api/shadow", { ip });
  const b = await hit(edge, "/api/shadow", { ip });
  assert.equal(a.status, 200);
  assert.equal(a.headers.get("tollgate-shadow"), "allowed");
  assert.equal(b.status, 200);
  assert.equal(b.headers.get("tollgate-shadow"), 'denied; policies="shadowed"');
  assert.equal((await edge.stats()).shadowed.shadowDenied, 1);
});

test("exactness under concurrency: 400 concurrent against 50, five rounds", async () => {
  for (let round = 0; round < 5; round++) {
    const ip = `198.18.${round}.1`;
    const all = await Promise.all(Array.from({ length: 400 }, () => hit(edge, "/api/burst", { ip })));
    const ok = all.filter((r) => r.status === 200).length;
    const denied = all.filter((r) => r.status === 429).length;
    assert.equal(ok, 50, `round ${round}: admitted`);
    assert.equal(denied, 350, `round ${round}: denied`);
    const read = await edge.admin("/admin/v1/keys/read", { policy: "burst", ip });
    assert.equal(read.body.decision.remaining, 0);
  }
});

test("admin: read and reset a key, stats per policy", async () => {
  const ip = "192.0.2.90";
  assert.deepEqual(await statuses("/api/ip", 4, { ip }), [200, 200, 200, 429]);
  const reset = await edge.admin("/admin/v1/keys/reset", { policy: "per-ip", ip });
  assert.equal(reset.status, 200);
  assert.equal(reset.body.found, 1);
  assert.equal((await hit(edge, "/api/ip", { ip })).status, 200, "reset also clears the deny cache");
  const s = await edge.stats();
  for (const k of ["admitted", "denied", "degraded", "denyCache"]) assert.equal(typeof s["per-ip"][k], "number");
  assert.ok(s["per-ip"].admitted >= 10);
  const noAuth = await edge.fetch("/admin/v1/stats");
  assert.equal(noAuth.status, 401);
  const wrong = await edge.api("/admin/v1/keys/reset", { policy: "per-ip", ip }, "check-secret-for-tests");
  assert.equal(wrong.status, 401);
});

test("bad requests get the documented errors, never a crash", async () => {
  const long = "k".repeat(300);
  let r = await hit(edge, "/api/key", { ip: "192.0.2.100", headers: { "x-api-key": long } });
  assert.equal(r.status, 400);
  assert.equal(JSON.parse(r.text).header, "x-api-key");
  r = await hit(edge, "/api/fair", { ip: "192.0.2.100", headers: { "x-tenant": "caf\u00e9" } });
  assert.equal(r.status, 400, "non-UTF-8 (Latin-1 byte) header");
  assert.equal(JSON.parse(r.text).header, "x-tenant");
  r = await hit(edge, "/api/ip", { ip: "not-an-ip" });
  assert.equal(r.status, 400);
  assert.equal(JSON.parse(r.text).header, "cf-connecting-ip");

  const cases = [
    [{ key: "a", policy: "per-ip", cost: 1e30 }, 400, "bad-request"],
    ['{"key": "a", "policy": "per-ip", "cost": 18446744073709551616}', 400, "bad-request"],
    [{ key: "a", policy: "per-ip", cost: -1 }, 400, "bad-request"],
    [{ key: "a", policy: "per-ip", cost: 9007199254740991 }, 422, "cost-exceeds-capacity"],
    ['{"key": "a", "policy": ', 400, "bad-request"],
    ["\u0000\u00ff", 400, "bad-request"],
    [{ key: "a", policy: "per-ip", extra: 1 }, 400, "bad-request"],
    [{ key: "", policy: "per-ip" }, 400, "invalid-key"],
    [{ key: "a", policy: "nope" }, 404, "unknown-policy"],
    [{ key: "a", policy: "per-ip", now: 5 }, 400, "test-clock-disabled"],
    [JSON.stringify({ key: "x".repeat(20000), policy: "per-ip" }), 400, "bad-request"],
  ];
  for (const [body, status, code] of cases) {
    const res = await edge.api("/v1/check", body);
    assert.equal(res.status, status, JSON.stringify(body).slice(0, 80));
    assert.equal(res.body.error, code);
  }
  assert.equal((await edge.api("/v1/check", { key: "a", policy: "per-ip" }, "wrong")).status, 401);
  assert.equal((await edge.fetch("/v1/check")).status, 405);
  const ok = await edge.api("/v1/check", { key: "service-user-1", policy: "per-ip", cost: 2 });
  assert.equal(ok.status, 200);
  assert.equal(ok.body.allowed, true);
  assert.equal(ok.body.remaining, 1);
  assert.equal(sfList(ok.headers.get("ratelimit"))["per-ip"].r, 1);
});

test("check API: a key or tenant over the core's bound is a 400 naming the field and the bound", async () => {
  // The bound is the core's (tollgate::store::bounds): read from the answer, not restated.
  const far = await edge.api("/v1/check", { key: "k".repeat(4000), policy: "per-ip" });
  assert.equal(far.status, 400);
  assert.equal(far.headers.get("content-type"), "application/problem+json");
  assert.equal(far.body.error, "over-bound");
  assert.equal(far.body.field, "key");
  assert.equal(far.body.size, 4000);
  assert.equal(far.body.unit, "bytes");
  const max = far.body.max;
  assert.ok(Number.isInteger(max) && max < 4000, `max ${max}`);
  assert.equal(far.body.detail, `key: 4000 bytes, at most ${max}`);
  // At the bound: decided (and longer than the header bound of 256 the API used before).
  const at = await edge.api("/v1/check", { key: "k".repeat(max), policy: "per-ip" });
  assert.equal(at.status, 200, JSON.stringify(at.body));
  assert.equal(at.body.allowed, true);
  const over = await edge.api("/v1/check", { key: "k".repeat(max + 1), policy: "per-ip" });
  assert.equal(over.status, 400);
  assert.equal(over.body.size, max + 1);
  // Refused before the coordinator: the key at the bound was charged once, no more.
  const peek = await edge.api("/v1/peek", { key: "k".repeat(max), policy: "per-ip" });
  assert.equal(peek.body.remaining, at.body.remaining);
  // Bytes, not characters (two bytes each).
  const wide = await edge.api("/v1/check", { key: "\u00e9".repeat(max / 2 + 1), policy: "per-ip" });
  assert.equal(wide.body.size, max + 2);
  for (const path of ["/v1/check", "/v1/peek", "/v1/release"]) {
    const t = await edge.api(path, { key: "a", policy: "per-ip", tenant: "t".repeat(max + 1) });
    assert.equal(t.status, 400, path);
    assert.deepEqual([t.body.error, t.body.field, t.body.max], ["over-bound", "tenant", max], path);
  }
  const admin = await edge.admin("/admin/v1/keys/read", { policy: "per-ip", key: "k".repeat(max + 1) });
  assert.equal(admin.status, 400);
  assert.deepEqual([admin.body.error, admin.body.field], ["over-bound", "key"]);
});

test("check API: a denial is served from the deny cache with the same decision", async () => {
  const key = "service-deny-cache";
  const first = await edge.api("/v1/check", { key, policy: "per-ip", cost: 3 });
  assert.equal(first.body.allowed, true);
  assert.equal(first.body.remaining, 0);
  const before = (await edge.stats())["per-ip"];
  const denied = await edge.api("/v1/check", { key, policy: "per-ip" });
  assert.equal(denied.status, 200);
  assert.equal(denied.body.allowed, false);
  const cached = await edge.api("/v1/check", { key, policy: "per-ip" });
  assert.equal(cached.body.allowed, false);
  assert.equal(cached.body.limit, 3);
  assert.equal(cached.body.remaining, 0);
  assert.ok(cached.body.retryAfter > 0 && cached.body.retryAfter <= denied.body.retryAfter);
  assert.deepEqual(cached.body.policies.map((p) => p.name), ["per-ip"]);
  const after = (await edge.stats())["per-ip"];
  assert.equal(after.denied, before.denied + 1);
  assert.equal(after.denyCache, before.denyCache + 1);
  // Peek is never answered from the cache and charges nothing.
  const peek = await edge.api("/v1/peek", { key, policy: "per-ip" });
  assert.equal(peek.body.remaining, 0);
});
