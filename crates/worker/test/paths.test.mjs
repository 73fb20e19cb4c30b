// Issue 16, items 4 and 5: a path is routed the way origins read it (merged slashes,
// decoded unreserved escapes, resolved dot segments, any case), the origin receives the
// path that was matched, and prefixes match whole segments.
import { test, beforeEach, before, after } from "node:test";
import assert from "node:assert/strict";
import { start, hit, clearOfMinuteEdge } from "./harness.mjs";
import { startOrigin } from "./origin.mjs";

// Per-minute windows: no test starts within 3 s of the minute's end.
beforeEach(() => clearOfMinuteEdge());

const CONFIG = {
  settings: { stats_flush_ms: 3600000 },
  policies: {
    "per-ip": { limit: "fixed-window 2/min", key: "ip" },
    "rest": { limit: "fixed-window 1000/min", key: "ip" },
  },
  routes: [
    { name: "health", path: "/health", exempt: true },
    { name: "api", path: "/api/", policies: ["per-ip"] },
    { name: "read", methods: ["GET"], path: "/read/", policies: ["per-ip"] },
    { name: "all", path: "/", policies: ["rest"] },
  ],
};

let edge, origin;
before(async () => {
  origin = await startOrigin();
  edge = await start({ config: CONFIG, bindings: { ORIGIN: origin.url } });
});
after(async () => {
  await edge?.dispose();
  await origin?.close();
});

test("every spelling of /api/x is limited as /api/x and forwarded as /api/x", async () => {
  const spellings = ["//api/x", "/%61pi/x", "/API/x", "/a/../api/x", "/./api//x", "/%2e/api/x"];
  for (const [i, p] of spellings.entries()) {
    const ip = `198.51.100.${10 + i}`;
    const first = await hit(edge, p, { ip });
    assert.equal(first.status, 200, p);
    assert.equal(first.headers.get("ratelimit-policy"), '"per-ip";q=2;w=60', `${p} is on the api route`);
    // The origin (a real HTTP server) saw the matched path, not the spelling (case kept).
    assert.equal(JSON.parse(first.text).path, p === "/API/x" ? "/API/x" : "/api/x", p);
    // Same bucket whatever the spelling: the plain path is denied after one more.
    assert.equal((await hit(edge, "/api/x", { ip })).status, 200, p);
    assert.equal((await hit(edge, p, { ip })).status, 429, p);
  }
});

test("an escaped separator or a broken escape is refused, not routed", async () => {
  for (const p of ["/api%2Fx", "/api%2fx", "/api%5cx", "/api%00", "/api/%zz"]) {
    const r = await hit(edge, p, { ip: "198.51.100.40" });
    assert.equal(r.status, 400, p);
    const body = JSON.parse(r.text);
    assert.equal(body.error, "invalid-path", p);
  }
});

test("prefixes match whole segments: /health is exempt, /healthz and /health-admin are not", async () => {
  const ip = "198.51.100.50";
  const health = await hit(edge, "/health", { ip });
  assert.equal(health.status, 200);
  assert.equal(health.headers.get("ratelimit-policy"), null, "exempt");
  assert.equal((await hit(edge, "/health/deep", { ip })).headers.get("ratelimit-policy"), null);
  for (const p of ["/healthz", "/health-admin/users"]) {
    const r = await hit(edge, p, { ip });
    assert.equal(r.headers.get("ratelimit-policy"), '"rest";q=1000;w=60', `${p} falls to the catch-all`);
  }
  // `/api/` is the segment: `/apix` is not on it.
  assert.equal((await hit(edge, "/apix", { ip })).headers.get("ratelimit-policy"), '"rest";q=1000;w=60');
});

// Issue 26, defect 4: HTTP defines HEAD as GET without a body (RFC 9110, section 9.3.2) and
// origins serve it with their GET handler, so a GET route limits HEAD too, from the same
// budget. Before the fix, HEAD matched no GET-only route: it fell to the catch-all's budget.
test("HEAD on a GET route is limited by that route, from the same budget", async () => {
  const reached = () => origin.seen.filter((s) => s.path.startsWith("/read/")).length;
  const ip = "198.51.100.60";
  const before = reached();
  assert.equal((await hit(edge, "/read/x", { ip })).status, 200);
  assert.equal((await hit(edge, "/read/x", { ip })).status, 200);
  for (let i = 0; i < 3; i++) {
    const head = await hit(edge, "/read/x", { ip, method: "HEAD" });
    assert.equal(head.status, 429, `HEAD ${i + 1} after two GETs`);
    assert.equal(head.headers.get("ratelimit-policy"), '"per-ip";q=2;w=60');
  }
  assert.equal(reached() - before, 2, "no denied HEAD reached the origin");

  const other = "198.51.100.61";
  const head = await hit(edge, "/read/x", { ip: other, method: "HEAD" });
  assert.equal(head.status, 200);
  assert.equal(head.headers.get("ratelimit-policy"), '"per-ip";q=2;w=60', "HEAD is on the GET route");
  assert.equal((await hit(edge, "/read/x", { ip: other, method: "HEAD" })).status, 200);
  assert.equal((await hit(edge, "/read/x", { ip: other })).status, 429, "two HEADs spent the GET budget");
  // A route's other methods stay off it: POST falls to the catch-all.
  const post = await hit(edge, "/read/x", { ip: other, method: "POST", body: "x" });
  assert.equal(post.headers.get("ratelimit-policy"), '"rest";q=1000;w=60');
});
